"""Day 8 lesson: it never shows the kernels the exercise asks for, its numbers are computed, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``), in a fresh kernel on the simulator: as
committed, with the recordings ``course/data`` ships, every figure checked; then the cells that read
recordings, and those that use what they computed, run again in the same kernel against synthetic
recordings of every file they read (``day08_fake_recordings``), which take the other branch of each
computed sentence; their figures are checked the same way. The claims the prose makes about GPU
numbers without computing them are checked against both sets of recordings.
"""

import inspect
import pathlib
import re

import nbformat
import pytest

from course.records import fraction_of_copy_on_gpu, load_recording, recorded_names
from day08_fake_recordings import fake_recordings
from grader import markers
from kernels import low_precision_attention as lp
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day08_mixed_precision"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
LESSON = ROOT / "lessons" / f"{DAY}.ipynb"
# What the exercise asks students to write: a mixed-precision prefill kernel, an fp16-cache decode kernel and
# the fp8 quantizer (with the device functions that encode a code). The lesson may call the launchers of the
# fast rungs, never show a kernel's source. The plain rungs the exercise binds are named where they exist.
EXERCISE_NAMES = ("gqa_prefill_mixed_tiles_kernel", "gqa_decode_mixed_group_kernel", "fp8_quantize_kernel",
                  "gqa_prefill_mixed_precision_kernel", "gqa_decode_mixed_precision_kernel")
EXERCISE_KERNELS = tuple(getattr(lp, name) for name in EXERCISE_NAMES[:3] + (
    "_build_prefill_kernel", "_build_decode_kernel", "_e4m3_code", "_round_half_even", "_e4m3_integer",
    "_load_codes", "_load_elements") if hasattr(lp, name))
def _code_lines(function) -> set[str]:
    source = inspect.getsource(getattr(function, "py_func", function))
    return {line.split("  #")[0].strip() for line in source.splitlines()}


def exercise_only_lines() -> list[str]:
    """Lines of the exercise's kernels (and of the solution notebook, once it exists) that the lesson
    must not contain. Short generic lines are left out."""
    lines = set().union(*(_code_lines(f) for f in EXERCISE_KERNELS))
    if SOLUTION.exists():
        lines |= set(markers.secret_lines(nbformat.read(SOLUTION, as_version=4), "solution"))
    return sorted(line for line in lines if len(line) > 12 and not line.startswith(("def ", '"""', "#")))


def _lesson():
    return nbformat.read(LESSON, as_version=4)


def test_lesson_never_shows_the_exercise_kernels():
    lesson = _lesson()
    code = "\n".join(c.source for c in lesson.cells if c.cell_type == "code")
    for name in EXERCISE_NAMES:
        assert name not in code, f"the lesson's code uses {name}, which the exercise asks for"
    text = "\n".join(c.source for c in lesson.cells)
    assert len(exercise_only_lines()) > 60, "the exercise's kernels should have lines of their own"
    leaked = [line for line in exercise_only_lines() if line in text]
    assert not leaked, f"the lesson shows lines of the exercise's kernels: {leaked[:3]}"


def test_measured_numbers_are_computed_not_typed():
    """Times, rates and fractions of the recordings appear only in outputs computed from them."""
    measured = re.compile(r"\d\s*(ms|µs|GB/s|TB/s|TFLOP/s)\b|\d\s*%(?!\s*\d)|\d(\.\d+)?\s*times (faster|as fast)")
    for cell in _lesson().cells:
        if cell.cell_type == "markdown":
            found = measured.search(cell.source)
            assert not found, f"cell {cell.id} types a measured number: {found[0]!r}"


def test_the_exercise_is_announced_not_assumed():
    """The lesson names the exercise's folder; until it exists, it must not tell students to open it."""
    text = "\n".join(c.source for c in _lesson().cells if c.cell_type == "markdown")
    assert f"exercises/{DAY}/" in text
    if not (ROOT / "exercises" / DAY).exists():
        assert "Open `exercises/" not in text


# ----------------------------------------------------------------------------- the prose against the data

FIRST, RUNS, HALF, TENSOR = ("gqa_decode_mixed_precision", "gqa_decode_page_runs", "gqa_decode_half_warps",
                             "gqa_decode_tensor_cores")
F32, F16, FP8 = "float32", "float16", "fp8_e4m3"


def claims(recordings: dict) -> None:
    """What the lesson's text says about the recordings without computing it (absent ones are skipped).

    - decode (each rung over each cache format, ``fmt``): with gqa_decode_mixed_precision the narrow caches fall
      well short of their bytes (fp16 under 1.6 times the fp32 step's speed, fp8 under 3.2), the float32 step reads
      near the copy bandwidth and the narrow ones at less of it, torch's fp16 kernel reads at about the copy
      bandwidth, faster than ours; gqa_decode_page_runs reads its fp16 cache at 0.85 of the copy bandwidth or more
      somewhere (over 1.7 times its own float32 step's speed: "about twice"), its fp8 cache at less than its fp16
      one, and is faster than the first rung in every format on long steps; gqa_decode_half_warps reads its fp8
      cache at 0.7 of the copy bandwidth or more somewhere, more than 3.3 times the first rung's float32 step and
      more than 2.8 times the page-runs float32 step there, and its fp8 step is faster than page runs' on long
      steps; gqa_decode_tensor_cores, on every step of 524,288 tokens or more (the steps its table shows) and on the
      GPU's time alone (kernel_ms), reads its fp16 cache at 0.95 of the copy bandwidth or more ("about the copy
      bandwidth") and its fp8 cache at 0.85 to 0.95 ("about nine tenths"), more than 4 times the first rung's
      float32 step and more than 3.5 times the page-runs float32 step; on one of them at least a queued call's
      median is over 1.1 times kernel_ms (Python's launch shows); its fp8 step is faster than the half-warp one on
      every step of 131,072 tokens or more, but reads its fp8 cache at less of the copy bandwidth than the page-runs
      float32 step reads its own, short of 4 times that step everywhere;
    - the other GPU (``day08_decode_timing_other_gpu``, at three steps of ``day08_decode_timing``): more copy
      bandwidth (over 1.2 times); torch's fp16 kernel and the tensor-core fp16 step read at about the copy bandwidth
      on both (over 0.85) and gain about the bandwidth's ratio (within 10%); the page-runs float32 step gains a
      little less (0.85 to 1 times that ratio) at less of the larger copy bandwidth; the half-warp fp8 step gains
      nothing (under 1.05); the first rung's float32 step and the tensor-core fp8 step gain well short of it (under
      0.9 times it); on its steps of 524,288 tokens or more the tensor-core fp8 step is more than 3 and less than
      3.5 times the page-runs float32 step ("about three and a quarter") and more than 4 times the first rung's
      float32 step;
    - Nsight: DRAM moves the modelled bytes (within 15%), fp32 > fp16 > fp8, nothing read twice;
    - prefill: fp16 storage does not speed our kernel up, which stays well under the float32 roof that
      torch's float32 kernel gets much closer to; the tensor-core roof is an order of magnitude above the
      float32 one, and torch's fp16 kernel gets most of the way there.
    """
    from course.models import low_precision as model

    decode = recordings.get("day08_decode_timing")
    if decode is not None:
        def best(rung, fmt):
            return max(r["fraction_of_copy"] for r in decode.where(rung=rung, fmt=fmt))

        for fmt, limit in ((F16, 1.6), (FP8, 3.2)):
            assert max(r["speedup_over_fp32"] for r in decode.where(rung=FIRST, fmt=fmt)) < limit, fmt
        assert best(FIRST, F32) > 0.7 and best(FIRST, F16) < best(FIRST, F32)
        assert best(FIRST, FP8) < best(FIRST, F32) and best("torch_sdpa_fp16", F16) > 0.85
        assert all(r["kernel_speedup_over_torch"] < 1 for r in decode.where(rung=FIRST, fmt=F16))
        assert best(RUNS, F16) >= 0.85 and best(RUNS, FP8) < best(RUNS, F16)
        assert max(r["speedup_over_runs_fp32"] for r in decode.where(rung=RUNS, fmt=F16)) > 1.7
        ms = {key: r["kernel_ms"] for key, r in decode.by("rung", "fmt", "num_seqs", "context").items()}
        for r in decode.rows:
            key, point = (r["rung"], r["fmt"]), (r["num_seqs"], r["context"])
            if point[0] * point[1] < 131072:
                continue
            if r["rung"] == RUNS:
                assert r["kernel_ms"] < ms[(FIRST, r["fmt"], *point)], (key, point)
            if key == (HALF, FP8):
                assert r["kernel_ms"] < ms[(RUNS, FP8, *point)], (key, point)
            if key == (TENSOR, FP8):
                assert r["kernel_ms"] < ms[(HALF, FP8, *point)], (key, point)
        best_fp8 = max(decode.where(rung=HALF, fmt=FP8), key=lambda r: r["fraction_of_copy"])
        assert best_fp8["fraction_of_copy"] >= 0.7 and best_fp8["speedup_over_fp32"] > 3.3, best_fp8
        assert best_fp8["speedup_over_runs_fp32"] > 2.8, best_fp8
        # The tensor-core table shows the steps of 524,288 tokens or more: every one bears the text out, with the
        # fraction of the copy bandwidth on the GPU's time alone, as the table computes it.
        longest = [r for r in decode.where(rung=TENSOR) if r["num_seqs"] * r["context"] >= 524288]
        assert {r["fmt"] for r in longest} >= {F16, FP8}, "no step of 524,288 tokens recorded"
        for r in longest:
            if r["fmt"] == F16:
                assert fraction_of_copy_on_gpu(r) >= 0.95, r
            if r["fmt"] == FP8:
                assert 0.85 <= fraction_of_copy_on_gpu(r) < 0.95 and r["speedup_over_fp32"] > 4, r
                assert r["speedup_over_runs_fp32"] > 3.5, r
        assert any(r["median_ms"] > 1.1 * r["kernel_ms"] for r in longest), \
            "the text says a queued median times the host on some of these steps"
        fp8_fraction = {point: fraction_of_copy_on_gpu(r)
                        for point, r in decode.by("num_seqs", "context", rung=TENSOR, fmt=FP8).items()}
        # "more slowly than the page-runs float32 step ... short of four times that step"
        assert all(r["speedup_over_runs_fp32"] < 4 for r in decode.where(rung=TENSOR, fmt=FP8))
        for point, r in decode.by("num_seqs", "context", rung=RUNS, fmt=F32).items():
            if point[0] * point[1] >= 524288:
                assert fp8_fraction[point] < fraction_of_copy_on_gpu(r), r
    other = recordings.get("day08_decode_timing_other_gpu")
    if decode is not None and other is not None:
        first = decode.by("rung", "fmt", "num_seqs", "context")
        steps = set(other.group_by("num_seqs", "context"))
        assert len(steps) == 3 and all((RUNS, F32, *p) in first for p in steps), sorted(steps)
        copy_gain = other.ceilings["copy_gbps"] / decode.ceilings["copy_gbps"]
        assert copy_gain > 1.2, copy_gain
        for r in other.rows:
            key = (r["rung"], r["fmt"])
            a = first[(*key, r["num_seqs"], r["context"])]
            gain, here, there = a["kernel_ms"] / r["kernel_ms"], fraction_of_copy_on_gpu(a), fraction_of_copy_on_gpu(r)
            if key in (("torch_sdpa_fp16", F16), (TENSOR, F16)):
                assert here > 0.85 and there > 0.85 and 0.9 * copy_gain < gain < 1.1 * copy_gain, (r, gain, copy_gain)
            if key == (RUNS, F32):
                assert 0.85 * copy_gain < gain < copy_gain and there < here, (r, gain, copy_gain)
            if key == (HALF, FP8):
                assert gain < 1.05, (r, gain)
            if key in ((FIRST, F32), (TENSOR, FP8)):
                assert gain < 0.9 * copy_gain, (r, gain, copy_gain)
            if key == (TENSOR, FP8) and r["num_seqs"] * r["context"] >= 524288:
                assert 3 < r["speedup_over_runs_fp32"] < 3.5 and r["speedup_over_fp32"] > 4, r
        assert sum(s * c >= 524288 for s, c in steps) >= 2, sorted(steps)
    nsight = recordings.get("day08_dram_bytes")
    if nsight is not None:
        dram = {}
        for r in nsight.rows:
            lens = [r["context"]] * r["num_seqs"]
            least = model.compulsory_bytes_decode(lens, r["heads"], r["kv_heads"], r["d"], r["fmt"])
            assert 0.95 < r["dram_bytes"] / least < 1.15, r
            dram[r["label"], r["fmt"]] = r["dram_bytes"]
        for rung in (FIRST, RUNS, HALF):
            assert dram[rung, F32] > dram[rung, F16] > dram[rung, FP8], dram
        assert dram[TENSOR, F16] > dram[TENSOR, FP8], dram
    prefill, roofs = recordings.get("day08_prefill_timing"), recordings.get("day08_matmul_roofs")
    if prefill is not None:
        ours = prefill.by("fmt", rung="gqa_prefill_mixed_precision")
        ms = {fmt: r["median_ms"] for fmt, r in ours.items()}
        assert ms["float16"] > 0.9 * ms["float32"] and ms["bfloat16"] > 0.9 * ms["float32"], ms
        rate = {rung: r["tflops"] for rung, r in prefill.by("rung", rung=lambda rung: rung.startswith("torch")).items()}
        assert rate["torch_sdpa_fp32_repeated_kv"] > 2 * ours["float32"]["tflops"], rate
        if roofs is not None:
            tc = {r["fmt"]: r["tflops"] for r in roofs.rows}
            ours_best = max(r["tflops"] for r in prefill.where(rung=lambda rung: not rung.startswith("torch")))
            assert ours_best < 0.5 * tc["float32"], (ours_best, tc)
            assert tc["float16"] > 8 * tc["float32"] and rate["torch_sdpa_fp16"] > 0.5 * tc["float16"], (rate, tc)


def _shipped() -> dict:
    return {name: load_recording(name) for name in recorded_names() if name.startswith("day08_")}


def test_the_recordings_support_the_prose():
    shipped = _shipped()
    if not shipped:
        pytest.skip("the day-8 GPU recordings are not installed yet")
    claims(shipped)


def test_the_fake_recordings_cover_every_recording_and_tell_the_lesson_s_story():
    fakes = {rec.name: rec for rec in fake_recordings()}
    read = set(re.findall(r'live_else_recorded\("(day08_\w+)"', "\n".join(c.source for c in _lesson().cells)))
    assert read and read <= set(fakes), f"recordings the lesson reads without a fake: {sorted(read - set(fakes))}"
    for name in set(fakes) & set(recorded_names()):          # the fakes have the real recordings' columns
        real = load_recording(name)
        assert {k for r in real.rows for k in r} <= {k for r in fakes[name].rows for k in r}, name
    claims(fakes)


# ----------------------------------------------------------------------------- running the lesson

# Lines every run prints, whatever the recordings say.
ALWAYS = ("derived from the bits, checked against ml_dtypes.finfo", "5,000 ones added one by one in fp16 give 2,048",
          "fp16 sums: the largest error is", "cache, against the float32 cache: OK", "bf16: OK (bf16")
WITH_RECORDINGS = ("Half the bytes made the step", "reads its compulsory bytes at up to", "times the fp16 step's time",
                   "gqa_decode_mixed_precision on the fp16 cache runs at", "our fp16 prefill takes",
                   "the tensor cores' fp16 roof is", "FlashAttention-3, fp16 forward, as reported", "DRAM / compulsory",
                   "copy bandwidth: ", "gqa_decode_tensor_cores on the fp8 e4m3 cache over gqa_decode_page_runs on the "
                   "fp32 cache, steps of 524,288 tokens or more")
# Rungs the recorder times now and the shipped recordings predate: the lesson says so, and shows them once recorded.
NOT_YET = ("gqa_decode_mixed_group, the ladder's rung before these, is not in this recording",
           "gqa_prefill_mixed_tiles, the ladder's rung before gqa_prefill_mixed_precision, is not in this recording")


def _leaks(shown: str) -> list[str]:
    return [line for line in exercise_only_lines() if line in shown]


def _rule_rows(shown: str) -> dict:
    """The verdicts of the rule's table: {(computation, keys): 'passes' or 'FAILS'}."""
    found = re.findall(r"\| ((?:fp16|bf16) storage[^|]*) \| ([\d,]+) \| [^|]+ \| (passes|FAILS) \|", shown)
    return {(what.strip(), int(keys.replace(",", ""))): verdict for what, keys, verdict in found}


def test_lesson_runs_with_the_shipped_and_fake_recordings(tmp_path):
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    run = run_lesson(LESSON, fake_dir=tmp_path)

    shipped = run.shipped_text
    for line in ALWAYS:
        assert line in shipped, f"the lesson no longer prints {line!r}"
    if {"day08_decode_timing", "day08_prefill_timing", "day08_matmul_roofs", "day08_dram_bytes",
            "day08_full_size_checks", "day08_decode_timing_other_gpu"} <= set(recorded_names()):
        for line in WITH_RECORDINGS:
            assert line in shipped, f"the lesson no longer prints {line!r}"
    recorded = {r["rung"] for name in ("day08_decode_timing", "day08_prefill_timing") if name in recorded_names()
                for r in load_recording(name).rows}
    for line in NOT_YET:             # said where the rung is missing, and only there
        assert (line in shipped) == (line.split(",")[0] not in recorded), line
    verdicts = _rule_rows(shipped)
    longest = max(keys for _, keys in verdicts)
    assert verdicts[("fp16 storage, fp32 sums", longest)] == verdicts[("bf16 storage, fp32 sums", longest)] == "passes"
    assert verdicts[("fp16 storage, fp16 sums", longest)] == "FAILS"
    assert verdicts[("bf16 storage where fp16 was asked", longest)] == "FAILS"

    shown = run.fake_text
    assert "recorded on Fake GPU" in shown and "No recording" not in shown
    for line in WITH_RECORDINGS:
        assert line in shown, f"with the fake recordings, the lesson no longer prints {line!r}"
    # the branches the fakes take: fp8 still follows its bytes against fp16, torch stays under the copy bandwidth
    assert "the time still follows the bytes" in shown and "above 1.0 is possible" not in shown
    assert "fp8 roof" not in shown                          # no fp8 matrix product in the fakes
    assert not any(line in shown for line in NOT_YET)       # the fakes have every rung
    leaked = _leaks(shipped + shown)
    assert not leaked, f"the lesson's outputs show lines of the exercise's kernels: {leaked[:3]}"
