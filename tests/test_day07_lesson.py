"""Day 7 lesson: it never shows the kernels the exercise asks for, its numbers are computed, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``) in a fresh kernel on the simulator: as
committed, with the recordings ``course/data`` ships, then the cells that read a recording again
against synthetic recordings of every file they read (``day07_fake_recordings``, which include the
Nsight recording that may not exist yet and take the other branch of each computed sentence); both
must print their computed statements. The few claims the lesson's prose makes about GPU numbers
without computing them are checked against both sets of recordings.
"""

import inspect
import math
import pathlib
import re
import shutil

import nbformat
import pytest

from course.models import gqa as model
from course.occupancy import H100, resident_blocks
from course.record import day07 as recorder
from course.records import load_recording, recorded_names
from day07_fake_recordings import fake_recordings
from grader import markers
from kernels import gqa_attention
from kernels.gqa_attention import decode as gqa_decode
from kernels.gqa_attention import prefill as gqa_prefill
from kernels.paging import (BLOCKS_PER_SM, DECODE_BLOCKS_PER_SM, DECODE_PARTITION_MAX, PARTITION_SIZE,
                            choose_partition_size, decode_partition_size)
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day07_grouped_query_attention"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
LESSON = ROOT / "lessons" / "day07_lesson_grouped_query_attention.ipynb"
# What the exercise asks students to write: the prefill kernel (built per head_dim by a factory) and
# the decode partition kernel.
EXERCISE_KERNELS = (gqa_prefill._build_prefill_kernel, gqa_attention.gqa_decode_partition_kernel)
EXERCISE_NAMES = ("gqa_prefill_flash_kernel", "gqa_decode_partition_kernel")
# Host code whose lines the lesson may share with the kernels (it calls them).
SHOWN = (gqa_attention.prefill_tiling,)


def _code_lines(function) -> set[str]:
    source = inspect.getsource(getattr(function, "py_func", function))
    return {line.split("  #")[0].strip() for line in source.splitlines()}


def exercise_only_lines() -> list[str]:
    """Lines of the exercise's kernels (and of the solution notebook, once it exists) that the lesson
    must not contain. Short generic lines (``if c < d:``) are left out."""
    lines = set().union(*(_code_lines(f) for f in EXERCISE_KERNELS))
    if SOLUTION.exists():
        lines |= set(markers.secret_lines(nbformat.read(SOLUTION, as_version=4), "solution"))
    shown = set().union(*(_code_lines(f) for f in SHOWN))
    return sorted(line for line in lines - shown if len(line) > 12 and not line.startswith("def "))


def _lesson():
    return nbformat.read(LESSON, as_version=4)


def test_lesson_never_shows_the_exercise_kernels():
    lesson = _lesson()
    code = "\n".join(c.source for c in lesson.cells if c.cell_type == "code")
    for name in EXERCISE_NAMES:
        assert name not in code, f"the lesson's code uses {name}, which the exercise asks for"
    text = "\n".join(c.source for c in lesson.cells)
    assert len(exercise_only_lines()) > 40, "the exercise's kernels should have lines of their own"
    leaked = [line for line in exercise_only_lines() if line in text]
    assert not leaked, f"the lesson shows lines of the exercise's kernels: {leaked[:3]}"


def test_measured_numbers_are_computed_not_typed():
    """Times, rates and fractions of the recordings appear only in outputs computed from them."""
    measured = re.compile(r"\d\s*(ms|µs|GB/s|TB/s|TFLOP/s)\b|\d\s*%(?!\s*\d)|\d(\.\d+)?\s*times (faster|as fast)")
    for cell in _lesson().cells:
        if cell.cell_type == "markdown":
            assert not measured.search(cell.source), f"cell {cell.id} types a measured number: {measured.search(cell.source)[0]!r}"


def test_the_exercise_is_announced_not_assumed():
    """The lesson names the exercise's folder; until it exists, it must not tell students to open it."""
    text = "\n".join(c.source for c in _lesson().cells if c.cell_type == "markdown")
    assert f"exercises/{DAY}/" in text
    if not (ROOT / "exercises" / DAY).exists():
        assert "Open `exercises/" not in text


# ----------------------------------------------------------------------------- the prose against the data

def claims(recordings: dict) -> None:
    """What the lesson's text says about the recordings without computing it (absent ones are skipped).

    - prefill: torch's time jumps from group 1 to the larger group (its math backend), for the same FLOPs,
      and gqa_prefill_flash is faster at the larger group than at group 1;
    - decode: torch's math backend stays far from the copy bandwidth;
    - resources: a prefill block of 512 rows would not launch, and the 256-row block holds as many rows per
      SM as day 5's v5 (no occupancy lost);
    - Nsight: gqa_decode_split_k's DRAM bytes lie near the compulsory bytes (within 10%), and the prefill's
      between the compulsory bytes and the requested ones; each decode kernel's rows are a measurement of
      their own (not one launch recorded under two labels).
    """
    prefill = recordings.get("day07_prefill_timing")
    if prefill is not None:
        for d in prefill.distinct("d"):
            ms = {key: r["median_ms"] for key, r in prefill.by("rung", "group", d=d).items()}
            g = max(prefill.distinct("group", d=d))
            assert ms["torch_sdpa_gqa", g] > 2 * ms["torch_sdpa_gqa", 1], (d, ms)
            assert ms["gqa_prefill_flash", g] < ms["gqa_prefill_flash", 1], (d, ms)
    decode = recordings.get("day07_decode_timing")
    if decode is not None:
        assert max(r["fraction_of_copy"] for r in decode.where(rung="torch_sdpa_gqa")) < 0.5
    resources, day5 = recordings.get("day07_kernel_resources"), recordings.get("day05_kernel_resources")
    if resources is not None:
        pre = resources.one(rung="gqa_prefill_flash")
        assert resident_blocks(512, pre["shared_bytes"], pre["registers"], H100)[0] == 0, pre
        if day5 is not None:
            v5 = day5.one(rung="attention_v5_flash_registers")
            ours = resident_blocks(256, pre["shared_bytes"], pre["registers"], H100)[0] * 256
            theirs = resident_blocks(64, v5["shared_bytes"], v5["registers"], H100)[0] * 64
            assert ours >= theirs, (ours, theirs)
    nsight = recordings.get("day07_dram_bytes")
    if nsight is not None:
        for r in nsight.where(label="gqa_decode_split_k"):
            least = model.compulsory_bytes_decode([r["context"]] * r["num_seqs"], r["heads"], r["kv_heads"], r["d"])
            assert r["dram_bytes"] < 1.1 * least, r
        for r in nsight.where(label=lambda label: label.startswith("gqa_prefill")):
            kv = r["heads"] // r["group"]
            wanted = 4 * sum(map(sum, model.requested_prefill(1, r["heads"], kv, r["N"], r["d"], causal=True).values()))
            assert model.compulsory_bytes_prefill(1, r["heads"], kv, r["N"], r["d"]) <= r["dram_bytes"] <= wanted, r
        v2 = {r["N"]: r for r in nsight.where(label="paged_attention_v2_split_k")}
        for r in nsight.where(label="gqa_decode_split_k"):
            if r["N"] in v2:
                same = ("dram_read_bytes", "dram_write_bytes")
                assert [v2[r["N"]][k] for k in same] != [r[k] for k in same], (r, v2[r["N"]])


def decode_bytes_coincide(nsight) -> bool:
    """Whether day 6's v2 and gqa_decode_split_k moved the same DRAM bytes (within 5%) at every context both were
    measured at: the lesson then says so, and draws v2's squares hollow around the others."""
    v2 = {r["N"]: r["dram_bytes"] for r in nsight.where(label="paged_attention_v2_split_k")}
    pairs = [(v2[r["N"]], r["dram_bytes"]) for r in nsight.where(label="gqa_decode_split_k") if r["N"] in v2]
    return bool(pairs) and all(abs(a / b - 1) < 0.05 for a, b in pairs)


def test_the_64_row_fold_never_loads_less_than_day_5():
    """The prefill section: folding the group into day 5's 64 rows gives a block floor(64 / g) positions, so a KV
    head's K and V are loaded at least g * N / 64 times, day 5's count; on the table's prompt exactly as often when
    g divides 64 and more often when it does not (a group of 3: 21 positions, 63 rows)."""
    for g in range(1, 65):
        subgroups, _, positions = model.prefill_tiling(g, rows_max=gqa_attention.TILE_POS)
        assert positions == 64 // g, (g, positions)
        for n in (37, 1000, 4096, 5000):
            assert subgroups * math.ceil(n / positions) >= g * n / 64, (g, n)
        fold, day5 = subgroups * math.ceil(4096 / positions), g * math.ceil(4096 / 64)
        assert (fold == day5) == (64 % g == 0) and fold >= day5, (g, fold, day5)
    assert model.prefill_tiling(3, rows_max=gqa_attention.TILE_POS)[2] == 21


def test_the_decode_launcher_sizes_partitions_as_the_lesson_says():
    """gqa_decode_split_k's launcher picks its partitions with decode_partition_size, which starts from longer
    partitions than day 6's rule and asks for fewer blocks per SM; at the group sweep's shape the partitions grow
    finer as the group grows (fewer blocks per partition)."""
    launcher = inspect.getsource(gqa_decode._launch_decode)
    assert "decode_partition_size(" in launcher and "choose_partition_size" not in launcher
    assert DECODE_PARTITION_MAX > PARTITION_SIZE and DECODE_BLOCKS_PER_SM < BLOCKS_PER_SM
    heads = recorder.SHAPE["heads"]
    sizes = [decode_partition_size(recorder.GROUP_SEQS, (heads // g) * gqa_attention.subgroups_for(g),
                                   recorder.GROUP_CONTEXT, H100.sms) for g in (1, 2, 4, 8, 16, 32)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1], sizes


def _shipped() -> dict:
    return {name: load_recording(name) for name in recorded_names() if name.startswith(("day07_", "day05_kernel"))}


def test_the_recordings_support_the_prose():
    shipped = _shipped()
    if not any(name.startswith("day07_") for name in shipped):
        pytest.skip("the day-7 GPU recordings are not installed yet")
    claims(shipped)


def test_the_fake_recordings_cover_every_recording_and_tell_the_lesson_s_story():
    fakes = {rec.name: rec for rec in fake_recordings()}
    read = set(re.findall(r'live_else_recorded\("(day07_\w+)"', "\n".join(c.source for c in _lesson().cells)))
    assert read and read <= set(fakes), f"recordings the lesson reads without a fake: {sorted(read - set(fakes))}"
    for name in set(fakes) & set(recorded_names()):          # the fakes have the real recordings' columns
        real = load_recording(name)
        assert {k for r in real.rows for k in r} <= {k for r in fakes[name].rows for k in r}, name
    claims({**fakes, "day05_kernel_resources": load_recording("day05_kernel_resources")})


# Lines every run prints, whatever the recordings say.
ALWAYS = ("K and V: day 6's v2 loads", "v2 reads each key and value 4 times",
          "prefill_kv_saving(8) = 4", "K and V element loads: gqa_prefill_flash",
          "From MHA to $g$ = 4, a layer loses")
WITH_TIMING = ("from each group to the next, gqa_decode_split_k's time is multiplied by",
               "paged_attention_v2_split_k asks for the same", "gqa_decode_split_k is more than 5% faster at",
               "best gqa_decode_split_k:", "torch takes", "times torch's speed at g = ", "the time of day 5's v5",
               "With the launch cost hidden, gqa_decode_split_k is at least")
# Rungs the recorder times now and the shipped recordings predate: the lesson says so, and shows them once recorded.
NOT_YET = ("gqa_decode_group, the rung before gqa_decode_split_k, is not in this recording",
           "gqa_prefill_tiles, the rung before gqa_prefill_flash, is not in this recording")


def _leaks(shown: str) -> list[str]:
    return [line for line in exercise_only_lines() if line in shown]


def test_lesson_runs_with_the_shipped_and_fake_recordings(tmp_path):
    for path in (ROOT / "course" / "data").glob("*.json"):     # what other days recorded (day 5's and 6's resources)
        shutil.copy(path, tmp_path)
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    run = run_lesson(LESSON, fake_dir=tmp_path)

    shipped = run.shipped_text
    for line in ALWAYS:
        assert line in shipped, f"the lesson no longer prints {line!r}"
    # the partition table gives what the timed kernel's launcher picks (decode_partition_size), v2 day 6's rule
    heads, kv_heads = recorder.SHAPE["heads"], recorder.SHAPE["kv_heads"]
    table = re.findall(r"^\| (\d+) \| ([\d,]+) \| (\d+) \| [\d,]+ \| [\d.]+ \| ([\d,]+) \| [\d,]+ \| [\d.]+ \|$",
                       shipped, re.M)
    assert len(table) == 4, table
    for seqs, context, v2_size, gqa_size in table:
        s, c = int(seqs), int(context.replace(",", ""))
        assert int(v2_size) == choose_partition_size(s, heads, c, H100.sms), (seqs, context)
        per_partition = kv_heads * gqa_attention.subgroups_for(heads // kv_heads)
        assert int(gqa_size.replace(",", "")) == decode_partition_size(s, per_partition, c, H100.sms), (seqs, context)
    # TOKENS_IN_FLIGHT is printed with what it is indexed by
    tokens = gqa_attention.TOKENS_IN_FLIGHT
    assert (f"TOKENS_IN_FLIGHT = {tokens}, tokens a warp loads at a time by the heads of its block: 1 head: {tokens[0]}, "
            f"2 heads: {tokens[1]}") in shipped
    markdown = "\n".join(c.source for c in run.shipped.cells if c.cell_type == "markdown")
    names = set(recorded_names())
    if "day07_dram_bytes" in names:
        assert "once the recording exists" not in markdown and "when recorded" not in markdown
        nsight = load_recording("day07_dram_bytes")
        assert ("the two kernels' squares coincide" in shipped) == decode_bytes_coincide(nsight)
    if "day07_group_timing" in names:
        sweep = load_recording("day07_group_timing")
        time = "kernel_ms" if all("kernel_ms" in r for r in sweep.rows) else "median_ms"
        above = any(model.compulsory_bytes_decode([r["context"]] * r["num_seqs"], r["heads"], r["kv_heads"], r["d"])
                    / (sweep.ceilings["copy_gbps"] * 1e6) > r[time] for r in sweep.where(rung="gqa_decode_split_k"))
        assert ("reads its compulsory bytes faster than the copy bandwidth" in shipped) == above
    if {"day07_group_timing", "day07_decode_timing", "day07_prefill_timing"} <= names:
        for line in WITH_TIMING:
            assert line in shipped, f"the lesson no longer prints {line!r}"
    assert ("DRAM / compulsory" in shipped) == ("day07_dram_bytes" in names)
    recorded = {r["rung"] for name in ("day07_decode_timing", "day07_prefill_timing") if name in names
                for r in load_recording(name).rows}
    for line in NOT_YET:             # said where the rung is missing, and only there
        assert (line in shipped) == (line.split(",")[0] not in recorded), line

    shown = run.fake_text
    assert "recorded on Fake GPU" in shown and "No recording" not in shown
    for line in WITH_TIMING:
        assert line in shown, f"with the fake recordings, the lesson no longer prints {line!r}"
    # the branches the fakes take: gqa_decode follows 1/g until the sub-groups of GROUP_MAX, v2 gets no help
    assert "from g = 8 on, each step saves less than 10% of the time" in shown
    assert "nothing shows the L2 cache saving it" in shown
    assert "| gqa_decode_split_k | 8 x 1,024 |" in shown            # the launch cost table
    assert "best gqa_decode_group:" in shown                         # the fakes have every rung
    assert not any(line in shown for line in NOT_YET)
    assert "DRAM / compulsory" in shown and "requested (model)" in shown  # both Nsight tables
    fake_nsight = next(rec for rec in fake_recordings() if rec.name == "day07_dram_bytes")
    assert not decode_bytes_coincide(fake_nsight) and "times gqa_decode_split_k's DRAM bytes" in shown
    assert "the two kernels' squares coincide" not in shown
    # the second GPU: both verdicts, and the line that says the recording is missing where it is
    assert "GB/s on the Fake GPU 2: 1.40 times as much" in shown
    assert "gqa_decode_split_k: 1.35 times as fast on the Fake GPU 2, follows the copy bandwidth" in shown
    assert "paged_attention_v2_split_k: 1.20 times as fast on the Fake GPU 2, falls short of the copy" in shown
    missing = "No recording 'day07_decode_timing_other_gpu' is installed yet"
    assert (missing in shipped) == ("day07_decode_timing_other_gpu" not in recorded_names()), missing
    leaked = _leaks(shipped + shown)
    assert not leaked, f"the lesson's outputs show lines of the exercise's kernels: {leaked[:3]}"
