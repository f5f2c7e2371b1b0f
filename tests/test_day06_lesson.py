"""Day 6 lesson: it never shows the kernels the exercise asks for, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``): as committed, with the recordings
``course/data`` ships, then the cells that read a recording again against synthetic ones, so that the
timing and Nsight cells run with other data too. The claims its prose makes about
the H100 numbers are checked against the recordings ``course/data`` ships, once they exist.
"""

import inspect
import pathlib
import re
import shutil

import nbformat
import pytest

from course.models import paged_attention as model
from course.records import load_recording, recorded_names
from day06_fake_recordings import fake_recordings
from grader import markers
from kernels import kv_cache, paged_attention
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day06_paged_attention"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
LESSON = ROOT / "lessons" / "day06_lesson_paged_attention.ipynb"
# What the exercise asks students to write, and the device functions the course's v1 kernel is made of.
EXERCISE_KERNELS = (paged_attention.paged_attention_v1_block_per_head_kernel, kv_cache.kv_cache_write_kernel,
                    paged_attention.paged_attention_v2_merge_kernel)
THEIR_PARTS = (paged_attention._warp_attend, paged_attention._merge_warps)
# Host code the lesson may show (its launcher): lines it shares with a kernel are no secret.
SHOWN = (paged_attention.paged_attention_v1_block_per_head,)
V1, V2, V3 = paged_attention.RUNGS       # the rungs as recordings name them
CLEAR = 1.05                                # the lesson's margin: a time ratio within 5% of 1 is a tie


def _code_lines(function) -> set[str]:
    source = inspect.getsource(getattr(function, "py_func", function))
    return {line.split("  #")[0].strip() for line in source.splitlines()}


def exercise_only_lines() -> list[str]:
    """Lines of the exercise's kernels (and of the solution notebook, once it exists) that the lesson
    must not contain. Short generic lines (``if c < d:``) are left out."""
    lines = set().union(*(_code_lines(f) for f in EXERCISE_KERNELS + THEIR_PARTS))
    if SOLUTION.exists():
        lines |= set(markers.secret_lines(nbformat.read(SOLUTION, as_version=4), "solution"))
    shown = set().union(*(_code_lines(f) for f in SHOWN))
    return sorted(line for line in lines - shown if len(line) > 12 and not line.startswith("def "))


def _lesson():
    return nbformat.read(LESSON, as_version=4)


def test_lesson_never_shows_the_exercise_kernels():
    lesson = _lesson()
    code = "\n".join(c.source for c in lesson.cells if c.cell_type == "code")
    for kernel in EXERCISE_KERNELS:
        assert kernel.__name__ not in code, f"the lesson's code uses {kernel.__name__}, which the exercise asks for"
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


# ----------------------------------------------------------------------------- the prose against the data

def claims(timing, dram) -> None:
    """What the lesson's text says about the recordings (either may be None: its claims are skipped).

    - v1's fraction of copy bandwidth climbs with the number of sequences at a fixed context;
    - with the fewest sequences, at their longest context, v2 is faster than v1, and once v2 is more than 5%
      faster it stays so at every longer context;
    - with the most sequences v2 is never more than 5% faster (the ratio stays in the band or below it);
    - v3 (where recorded) is faster than torch at every point, back to back; at the fewest sequences
      and the shortest context it is faster than v2 back to back; its GPU time is close to v2's;
    - v1's DRAM bytes come close to the compulsory bytes; v2's are within 5% of v1's (the caches serve the
      requests its partials add).
    """
    if timing is not None:
        rows = timing.by("rung", "num_seqs", "context")
        batch_sizes = timing.distinct("num_seqs")
        common = max(c for c in timing.distinct("context") if all((V1, s, c) in rows for s in batch_sizes))
        v1 = [rows[(V1, s, common)]["fraction_of_copy"] for s in batch_sizes]
        assert all(b >= 0.95 * a for a, b in zip(v1, v1[1:])) and v1[-1] > v1[0], v1

        def ratio(s, c):
            return rows[(V1, s, c)]["median_ms"] / rows[(V2, s, c)]["median_ms"]

        few = batch_sizes[0]
        longest = max(timing.distinct("context", rung=V2, num_seqs=few))
        assert ratio(few, longest) > 1, (few, longest, ratio(few, longest))
        many = batch_sizes[-1]
        shortest = min(timing.distinct("context", rung=V2, num_seqs=many))
        assert ratio(many, shortest) < 1.1, (many, shortest, ratio(many, shortest))
        few_contexts = timing.distinct("context", rung=V2, num_seqs=few)
        wins = [c for c in few_contexts if ratio(few, c) > CLEAR]
        assert wins and all(ratio(few, c) > CLEAR for c in few_contexts if c >= wins[0]), \
            [(c, ratio(few, c)) for c in few_contexts]
        assert all(ratio(many, c) <= CLEAR for c in timing.distinct("context", rung=V2, num_seqs=many))
        v3 = timing.where(rung=V3)
        if v3:
            slowest = min(v3, key=lambda r: r["speedup_over_torch"])
            assert slowest["speedup_over_torch"] > 1, slowest
            first = min(timing.distinct("context", rung=V3, num_seqs=few))
            assert rows[(V3, few, first)]["median_ms"] < rows[(V2, few, first)]["median_ms"]
            gpu = [r["kernel_ms"] / rows[(V2, r["num_seqs"], r["context"])]["kernel_ms"] for r in v3]
            assert 0.9 < min(gpu) and max(gpu) < 1.15, (min(gpu), max(gpu))
    if dram is not None:
        v1_rows = dram.where(label=V1)
        big = max(v1_rows, key=lambda r: (r["context"], r["num_seqs"]))
        compulsory = model.compulsory_bytes_decode([big["context"]] * big["num_seqs"], 32, 32, 128)
        assert 0.9 < big["dram_bytes"] / compulsory < 1.3, big
        v1_bytes = {r["context"]: r["dram_bytes"] for r in v1_rows}
        both = [(r["dram_bytes"], v1_bytes[r["context"]]) for r in dram.where(label=V2) if r["context"] in v1_bytes]
        assert both and all(abs(v2 / v1 - 1) < 0.05 for v2, v1 in both), both


def test_the_recordings_support_the_prose():
    names = set(recorded_names())
    timing = load_recording("day06_paged_timing") if "day06_paged_timing" in names else None
    dram = load_recording("day06_dram_bytes") if "day06_dram_bytes" in names else None
    if timing is None and dram is None:
        pytest.skip("the day-6 GPU recordings are not installed yet")
    claims(timing, dram)


def test_the_fake_recordings_tell_the_lesson_s_story():
    timing, dram, _ = fake_recordings()
    claims(timing, dram)


def _ratios(timing) -> dict:
    """v1 time / v2 time (median_ms) by batch size, as (context, ratio) pairs in context order."""
    rows = timing.by("rung", "num_seqs", "context")
    return {n: [(c, rows[(V1, n, c)]["median_ms"] / rows[(V2, n, c)]["median_ms"])
                for c in timing.distinct("context", num_seqs=n) if (V1, n, c) in rows and (V2, n, c) in rows]
            for n in timing.distinct("num_seqs")}


def crossover_lines_hold(shown: str, timing) -> None:
    """Each batch size's line under the crossover plot says who wins where, by the lesson's 5% margin: v2 only
    where v1 takes more than 5% longer, a tie within 5%, v1 only where v2 takes more than 5% longer."""
    for n, curve in _ratios(timing).items():
        line = next(line for line in shown.splitlines() if line.startswith(f"- {n} sequences: "))
        for words, holds in (("v2 is more than 5% faster", lambda r: r > CLEAR), ("a tie", lambda r: 1 / CLEAR <= r <= CLEAR),
                             ("v1 is more than 5% faster", lambda r: r < 1 / CLEAR)):
            assert (words in line) == any(holds(r) for _, r in curve), (line, curve)
        if all(1 / CLEAR <= r <= CLEAR for _, r in curve):
            assert "a tie at every context" in line, line


def test_lesson_runs_with_recordings_and_shows_no_solution(tmp_path):
    for path in (ROOT / "course" / "data").glob("*.json"):     # what other days recorded (the roofline's ceilings)
        shutil.copy(path, tmp_path)
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    run = run_lesson(LESSON, fake_dir=tmp_path)
    shipped = run.shipped_text

    # the paging simulation: contiguous buffers waste most of their memory at every step, pages about half a
    # page per sequence, less with smaller pages
    low, high = map(int, re.search(r"contiguous buffers: from (\d+)% to (\d+)% of their reservation unused", shipped).groups())
    assert 50 < low <= high, (low, high)
    unused = {int(bs): float(x) for bs, x in re.findall(r"pages of (\d+): on average ([\d.]+) of a page unused", shipped)}
    assert len(unused) == 3 and all(0.4 < x < 0.6 for x in unused.values()), unused
    wasted = {int(bs): float(x) for bs, x in re.findall(r"pages of (\d+):\s+([\d.]+)% of the reserved memory unused", shipped)}
    assert list(wasted.values()) == sorted(wasted.values()) and len(wasted) == 3, wasted
    assert f"HEAD_DIM_MAX = {paged_attention.HEAD_DIM_MAX}" in shipped    # the term the kernel section defines
    assert f"CLEAR = {CLEAR}" in "\n".join(c.source for c in run.shipped.cells)    # the margin its prose names

    names = set(recorded_names())
    if "day06_paged_timing" in names:
        timing = load_recording("day06_paged_timing")
        crossover_lines_hold(shipped, timing)
        faster_than_copy = max(r["fraction_of_copy"] for r in timing.rows) > 1
        assert ("above 1.0 is possible: the copy that measures the bandwidth reads and writes" in shipped) == faster_than_copy
    if "day06_dram_bytes" in names:
        assert "their squares coincide, v2's drawn hollow around v1's" in shipped      # the claims above hold for it
        markdown = "\n".join(c.source for c in run.shipped.cells if c.cell_type == "markdown")
        assert "once the recording exists" not in markdown and "when recorded" not in markdown

    shown = run.fake_text
    assert "recorded on Fake GPU" in shown and "No recording" not in shown
    assert "8 sequences: v2 is more than 5% faster" in shown and f"best {V1}:" in shown
    crossover_lines_hold(shown, fake_recordings()[0])
    assert "DRAM / compulsory" in shown
    assert f"| {V2} | 8 x 1,024 |" in shown and "v1, v2 and v3 are at least" in shown      # the launch cost
    assert "v3 is faster than torch at every one of the" in shown                                 # one launch
    # the second GPU: both verdicts, and the line that says the recording is missing where it is
    assert "GB/s on the Fake GPU 2: 1.40 times as much" in shown
    assert f"{V2}: 1.36 times as fast on the Fake GPU 2, follows the copy bandwidth" in shown
    assert f"{V1}: 1.15 times as fast on the Fake GPU 2, falls short of the copy bandwidth" in shown
    missing = "No recording 'day06_paged_timing_other_gpu' is installed yet"
    assert (missing in shipped) == ("day06_paged_timing_other_gpu" not in names), missing
    leaked = [line for line in exercise_only_lines() if line in run.shipped_text + shown]
    assert not leaked, f"the lesson's outputs show lines of the exercise's kernels: {leaked[:3]}"
