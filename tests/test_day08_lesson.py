"""Day 8 lesson: it never shows the kernels the exercise asks for, its numbers are computed, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``), in a fresh kernel on the simulator: as
committed, with the recordings ``course/data`` ships, every figure checked; then the cells that read
recordings, and those that use what they computed, run again in the same kernel against synthetic
recordings of every file they read (``day08_fake_recordings``), which take the other branch of each
computed sentence; their figures are checked the same way. The claims the prose makes about GPU
numbers without computing them are checked against both sets of recordings; those it makes about the
numbers section 2 computes from random inputs, against what the run printed (``error_claims``); a speed-up
printed in two places, against the recording, so that the two cannot disagree (``speed_ups_agree``). The
figures readers found unreadable are drawn again and held to legible text, no text over text or over a
curve, and a few series per axes (``readability_problems``). The tensor-core cells of section 4 (the GEMM ladder's
recording, the tensor-core prefill's rows) are also run alone against fakes on either side of their goals and without
their recordings: each verdict follows the numbers, and a missing recording is said (``tc_gemm_claims``,
``tensor_prefill_claims``).
"""

import inspect
import math
import pathlib
import re

import nbformat
import pytest

from course.records import fraction_of_copy_on_gpu, load_recording, recorded_names
from day08_fake_recordings import (fake_prefill_timing, fake_recordings, fake_tc_gemm_shared_memory,
                                   fake_tc_gemm_timing, fake_tensor_prefill_shapes)
from grader import markers
from kernels import low_precision_attention as lp
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day08_mixed_precision"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
LESSON = ROOT / "lessons" / "day08_lesson_mixed_precision.ipynb"
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


# Names a reader cannot know, each defined in the paragraph that first uses it: (name, words of its definition).
DEFINED_WHERE_FIRST_USED = (
    ("row_words", "is how many words one token's row of head_dim elements fills"),
    ("launch_bounds", "is numba's spelling of CUDA's `__launch_bounds__`"),
    ("ptxas", "NVIDIA's assembler, which turns the PTX that numba writes into the GPU's machine code"))


def test_terms_are_defined_where_first_used():
    paragraphs = [" ".join(paragraph.split()) for cell in _lesson().cells
                  for paragraph in re.split(r"\n\s*\n", cell.source)]
    for term, definition in DEFINED_WHERE_FIRST_USED:
        first = next(p for p in paragraphs if term in p)
        assert definition in first, f"{term!r} is first used without its definition:\n{first}"


def test_the_prose_states_the_code_s_constants():
    """Numbers the prose repeats from the code: the trials behind section 2's medians, the launch bounds of the
    half-warp fp8 kernel (threads a block, blocks an SM) with the registers they leave a thread, the share of the
    copy's gain that counts as following it, the fp8 ring's slots and the register rung's blocks an SM."""
    from kernels.low_precision_attention import half_warps

    cells = {cell.id: cell.source for cell in _lesson().cells}
    (trials,) = re.findall(r"^TRIALS = (\d+)$", cells["error-dot"], re.M)
    assert f"the median of {trials} random trials" in cells["error-dot-md"]
    threads, blocks = half_warps.THREADS, half_warps.HALF_MIN_BLOCKS["fp8_e4m3"]
    assert f"`@cuda.jit(launch_bounds=({threads}, {blocks}))`" in cells["half-md"]
    assert f"65,536 / ({blocks} · {threads}) = {65536 // (blocks * threads)} a thread" in cells["half-md"]
    from course.present import FOLLOWS_COPY
    from kernels.low_precision_attention import RING_SLOTS, tensor_cores

    assert f"if it gained at least {FOLLOWS_COPY} of what the copy gained" in cells["other-gpu-reading"]
    assert f"into a ring of {RING_SLOTS} slots" in cells["fp8-ring-md"]
    registers_rung_blocks = tensor_cores.TENSOR_MIN_BLOCKS["fp8_e4m3"]
    ring_md = " ".join(cells["fp8-ring-md"].split())
    assert f"needs 168 a thread for {registers_rung_blocks} blocks an SM" in ring_md


# Modules a name in the lesson's or the exercise's text may start from, as the notebooks import them.
ADVICE_ROOTS = {"np": "numpy", "numpy": "numpy", "numba": "numba", "cuda": "numba.cuda", "ml_dtypes": "ml_dtypes",
                "math": "math", "kernels": "kernels", "course": "course", "reference": "kernels.reference"}

# Where numba-cuda defines its kernel API for the GPU (``numba.cuda`` is the simulator's in the tests).
CUDA_MODULES = ("numba.cuda.decorators", "numba.cuda.intrinsics", "numba.cuda.stubs")


def advice_problems(text: str) -> list[str]:
    """Every import in backticks (`from numba.types import float16`) run, and every dotted name in backticks that
    starts from a module (`numba.cuda.extending.intrinsic`, `cuda.declare_device(..., link=...)`) looked up, with
    the keywords of a call checked against its signature: what fails, as sentences."""
    import importlib

    problems = []
    for snippet in re.findall(r"`([^`\n]+)`", text):
        if snippet.startswith(("from ", "import ")):
            try:
                exec(snippet, {})
            except ImportError as exc:
                problems.append(f"{snippet!r}: {exc}")
            continue
        found = re.fullmatch(r"@?([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)(\(.*\))?", snippet)
        if not found or found[1] not in ADVICE_ROOTS:
            continue
        parts = found[2].split(".")[1:]
        value = importlib.import_module(ADVICE_ROOTS[found[1]])
        if found[1] == "cuda":         # the GPU's API where it has the name, not the simulator's stand-in
            value = next((module for module in map(importlib.import_module, CUDA_MODULES) if hasattr(module, parts[0])),
                         value)
        for part in parts:
            try:
                value = getattr(value, part)
            except AttributeError:
                try:
                    value = importlib.import_module(f"{value.__name__}.{part}")
                except (ImportError, AttributeError):
                    problems.append(f"{snippet!r}: no {part!r}")
                    break
        else:
            keywords = re.findall(r"(\w+)=", found[3] or "")
            accepted = inspect.signature(value).parameters if keywords else {}
            problems += [f"{snippet!r}: no keyword {k!r}" for k in keywords if k not in accepted]
    return problems


def test_the_names_the_lesson_gives_exist():
    assert not advice_problems("\n".join(c.source for c in _lesson().cells if c.cell_type == "markdown"))


# The figures the lesson's readers found unreadable, drawn again here (cells and the cells they need), and held to
# more than the figure check of every lesson: legible text, no text over other text, a few series per axes.
FIGURE_CELLS = ("setup", "motivation", "formats-bits", "formats-table", "error-dot", "attention-error", "decode-timing")
CHECKED_FIGURES = ("error-dot", "attention-error", "decode-timing")
SMALLEST_TEXT_PT = 8.0
MOST_SERIES = 6


def _drawn_points(line):
    """A line's points in display coordinates, with 16 more along each segment it draws."""
    import numpy as np

    xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
    shown = line.get_transform().transform(xy) if len(xy) else xy
    if line.get_linestyle() not in ("None", "none", "", " ") and len(shown) > 1:
        steps = np.linspace(0.0, 1.0, 17)[:, None, None]
        shown = (shown[:-1] + steps * (shown[1:] - shown[:-1])).reshape(-1, 2)
    return shown[np.isfinite(shown).all(axis=1)]


def readability_problems(figure) -> list[str]:
    """Text under SMALLEST_TEXT_PT points, two texts drawn over each other, a note written over a curve, an axes of
    more than MOST_SERIES labelled series."""
    from matplotlib.transforms import Bbox

    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = [figure._supxlabel, figure._supylabel, figure._suptitle, *figure.texts]
    for legend in figure.legends:
        texts += [legend.get_title(), *legend.get_texts()]
    problems = []
    for ax in figure.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):         # the tick labels drawn: those of ticks inside the view
            low, high = sorted(axis.get_view_interval())
            texts += [tick.label1 for tick in axis.get_major_ticks()
                      if low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low)]
        if ax.get_legend() is not None:
            texts += [ax.get_legend().get_title(), *ax.get_legend().get_texts()]
        series = [line for line in ax.lines if not line.get_label().startswith("_")]
        if len(series) > MOST_SERIES:
            problems.append(f"{ax.get_title() or ax.get_ylabel()!r}: {len(series)} series")
        for note in ax.texts:
            box = note.get_window_extent(renderer)
            problems += [f"{note.get_text()!r} is written over {line.get_label()!r}" for line in series
                         if any(box.contains(x, y) for x, y in _drawn_points(line))]
    shown = list({id(t): t for t in texts if t is not None and t.get_visible() and t.get_text().strip()}.values())
    problems += [f"{t.get_text()!r}: {t.get_fontsize():.1f} pt" for t in shown if t.get_fontsize() < SMALLEST_TEXT_PT]
    boxes = [(t.get_text(), t.get_window_extent(renderer).padded(-1)) for t in shown]
    problems += [f"{a!r} and {b!r} are drawn over each other" for i, (a, box) in enumerate(boxes)
                 for b, other in boxes[i + 1:] if Bbox.intersection(box, other) is not None]
    return problems


def test_the_figures_readers_found_unreadable_can_be_read(monkeypatch):
    import matplotlib.pyplot as plt

    from test_lesson_figures import figure_problems

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    sources = {cell.id: cell.source for cell in _lesson().cells}
    namespace, problems = {}, []
    try:
        for cell in FIGURE_CELLS:
            exec(compile(sources[cell], f"<lesson cell {cell}>", "exec"), namespace)
            if cell in CHECKED_FIGURES:
                figures = [plt.figure(number) for number in plt.get_fignums()]
                assert figures or cell == "decode-timing" and namespace["decode"] is None, f"cell {cell} draws nothing"
                problems += [f"{cell}: {p}" for f in figures for p in figure_problems(f) + readability_problems(f)]
            plt.close("all")
    finally:
        plt.close("all")
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- the prose against the data

FIRST, RUNS, HALF, TENSOR = ("gqa_decode_mixed_precision", "gqa_decode_page_runs", "gqa_decode_half_warps",
                             "gqa_decode_tensor_cores")
TENSOR_PREFILL = "gqa_prefill_tensor_cores"
F32, F16, FP8 = "float32", "float16", "fp8_e4m3"


def claims(recordings: dict) -> None:
    """What the lesson's text says about the recordings without computing it (absent ones are skipped).

    - decode (each rung over each cache format, ``fmt``): with gqa_decode_mixed_precision the narrow caches fall
      well short of their bytes (fp16 under 1.6 times the fp32 step's speed, fp8 under 3.2), the float32 step reads
      near the copy bandwidth and the narrow ones at less of it, torch's fp16 kernel reads at about the copy
      bandwidth, faster than ours; gqa_decode_page_runs reads its fp16 cache at 0.85 of the copy bandwidth or more
      somewhere and at best at 0.85 of the fraction its float32 step reaches or more ("nearly the fraction"), and on
      every step of 131,072 tokens or more (the steps its table shows) runs its fp16 step at 0.75 of the bytes' ratio
      or more over its float32 one ("most of what half the bytes could save"), 1.3 times the first rung's fp16 step
      or more ("well ahead"), and its float32 step 1 to 1.3 times the first rung's ("a little"); it reads its fp8
      cache at less than its fp16 one, and is faster than the first rung in every format on long steps;
      gqa_decode_half_warps reads its fp8
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
    - Nsight: DRAM moves the modelled bytes (within 15%), fp32 > fp16 > fp8, nothing read twice; the tensor-core
      fp8 step's schedulers issue in under half of their cycles ("well under half"), and its warps' two largest
      stall reasons are long_scoreboard and wait ("waiting on loads and on the latency of the instructions");
    - Nsight on the GEMM ladder ("Read down the table"): v1's and v2's largest stall reason is long_scoreboard,
      v3's short_scoreboard, and from v5 on wait; "the wide warps leave it few others": v6, v8, v9 hold fewer warps
      a scheduler than v5; the fastest rung keeps the tensor pipes busy in about half of their cycles or less (the
      distance to cuBLAS the prose explains);
    - prefill: fp16 storage does not speed our kernel up, which stays well under the float32 roof that
      torch's float32 kernel gets much closer to; the tensor-core roof is an order of magnitude above the
      float32 one, and torch's fp16 kernel gets most of the way there.
    """
    from course.models import low_precision as model

    stalls = recordings.get("day08_stall_reasons")
    if stalls is not None:
        fp8 = [r for r in stalls.where(label=TENSOR, fmt=FP8) if r["kernel"].endswith("tensor_cores_kernel")]
        assert fp8
        for r in fp8:
            reasons = {k: v for k, v in r.items() if k.startswith("stall_") and k != "stall_selected"}
            assert r["issue_per_cycle"] < 0.4, r["issue_per_cycle"]
            assert set(sorted(reasons, key=reasons.get)[-2:]) == {"stall_long_scoreboard", "stall_wait"}, reasons
    shared = recordings.get("day08_shared_memory")
    if shared is not None:
        def largest(rung):
            r = shared.one(label=rung)
            reasons = {k[len("stall_"):]: v for k, v in r.items() if k.startswith("stall_") and k != "stall_selected"}
            return max(reasons, key=reasons.get)

        assert largest("tc_gemm_v1_mma_shared") == largest("tc_gemm_v2_ldmatrix") == "long_scoreboard"
        assert largest("tc_gemm_v3_cp_async") == "short_scoreboard"
        wide = [rung for rung in ("tc_gemm_v6_wide_warps", "tc_gemm_v8_deep_steps", "tc_gemm_v9_paired_stores")
                if shared.where(label=rung)]
        assert all(largest(rung) == "wait" for rung in ("tc_gemm_v5_large_tiles", *wide))
        v5 = shared.one(label="tc_gemm_v5_large_tiles")["warps_per_scheduler"]
        assert all(shared.one(label=rung)["warps_per_scheduler"] < v5 for rung in wide)
        assert max(r["tensor_pipe_percent"] for r in shared.rows) < 55
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
        assert best(RUNS, F16) >= 0.85 * best(RUNS, F32), (best(RUNS, F16), best(RUNS, F32))
        halved = 0.75 * float(model.decode_cache_saving(F16, 128, 16))
        long_runs = [r for r in decode.where(rung=RUNS) if r["num_seqs"] * r["context"] >= 131072]
        first_ms = decode.by("fmt", "num_seqs", "context", rung=FIRST)
        for r in long_runs:
            over_first = first_ms[(r["fmt"], r["num_seqs"], r["context"])]["kernel_ms"] / r["kernel_ms"]
            if r["fmt"] == F16:
                assert r["speedup_over_runs_fp32"] >= halved and over_first >= 1.3, r
            if r["fmt"] == F32:
                assert 1 < over_first < 1.3, r
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
            # "our prefill lies well below the float32 roof": the rungs on CUDA cores (the tensor-core rung has its own
            # cell, tensor_prefill_claims)
            ours_best = max(r["tflops"] for r in prefill.where(
                rung=lambda rung: not rung.startswith("torch") and rung != TENSOR_PREFILL))
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
ALWAYS = ("derived from the bits, checked against ml_dtypes.finfo",
          "gqa_decode_fp8_ring and gqa_decode_tensor_cores give the same bits: True",
          "bytes in flight an SM at 3 blocks of 4 warps: 48 KB from the registers' one tile a warp, 96 KB from the "
          "ring's 2", "5,000 ones added one by one in fp16 give 2,048",
          "fp16 sums: the largest error is", "cache, against the float32 cache: OK", "bf16: OK (bf16",
          "gqa_prefill_tensor_cores, fp16: OK (fp16", "gqa_prefill_tensor_cores, bf16: OK (bf16",
          "of the peak would run at")
# The tensor-core cells' sentences when their recording or rows are missing.
TC_GEMM_MISSING = "the recording day08_tc_gemm_timing is missing"
TENSOR_PREFILL_MISSING = "gqa_prefill_tensor_cores is missing from this recording of day08_prefill_timing"
PREFILL_MISSING = "the recording day08_prefill_timing is missing"
SHAPES_MISSING = ("the tensor-core prefill at head_dim 64 and without the causal mask appears here once that recording "
                  "exists")
WITH_RECORDINGS = ("time and error are those of gqa_decode_page_runs, the second of the four decode kernels",
                   "on the bf16 cache, gqa_decode_wide_heads runs at",
                   "With gqa_decode_page_runs, half the bytes made the step", "reads its compulsory bytes at up to",
                   "times the fp16 step's time", "gqa_decode_mixed_precision on the fp16 cache runs at",
                   "our fp16 prefill takes", "the tensor cores' fp16 roof is",
                   "FlashAttention-3, fp16 forward, as reported", "DRAM / compulsory", "copy bandwidth: ",
                   "of the 2.00 times its bytes alone would give",
                   "gqa_decode_tensor_cores on the fp8 e4m3 cache against two float32 steps: how many times as fast, "
                   "on each step of 524,288 tokens or more that both GPUs ran")
# The second GPU's GEMM and prefill cell: with the fakes (where the goals are met there, the bf16 prefill's not on the
# first GPU), and its sentence when those recordings are missing.
ON_GPU_2 = ("on the Fake GPU 2, at N = 4,096, the fastest rung is tc_gemm_v9_paired_stores at",
            "of cuBLAS (the lower of its two fractions): the goal of 0.4 is met",
            "gqa_prefill_tensor_cores on bfloat16 tensors runs at 140 TFLOP/s, 0.28 of torch's fp16 SDPA there (0.22 on "
            "the Fake GPU): the goal of 0.25 is met")
GPU_2_MISSING = "No recording 'day08_tc_gemm_timing_other_gpu' is installed yet"     # live_else_recorded's words
# Rungs the recorder times now and the shipped recordings predate: the lesson says so, and shows them once recorded.
NOT_YET = ("gqa_decode_mixed_group, the ladder's rung before these, is not in this recording",
           "gqa_decode_wide_heads, the rung for head sizes past 128 and bf16 caches, is not in this recording",
           "gqa_decode_fp8_lean_ring, the lean ring, is not in the recording of the",
           "gqa_prefill_mixed_tiles, the ladder's rung before gqa_prefill_mixed_precision, is not in this recording",
           "gqa_decode_fp8_ring, the ring of copies, is not in these recordings")


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

    if "day08_stall_reasons" in recorded_names():
        r = next(r for r in load_recording("day08_stall_reasons").where(label=TENSOR, fmt=FP8)
                 if r["kernel"].endswith("tensor_cores_kernel"))
        assert (f"gqa_decode_tensor_cores, fp8 cache: its schedulers issue in {r['issue_per_cycle']:.0%} of their "
                "cycles; its warps wait most on") in shipped
    else:
        assert "the recording day08_stall_reasons is missing" in shipped
    gemm_claims_on_the_simulator(shipped)
    if "day08_tc_gemm_timing" in recorded_names():
        tc_gemm_claims(shipped, load_recording("day08_tc_gemm_timing"))
    else:
        assert TC_GEMM_MISSING in shipped
    if "day08_shared_memory" in recorded_names():
        tc_shared_claims(shipped, load_recording("day08_shared_memory"))
    else:
        assert TC_SHARED_MISSING in shipped
    if "day08_prefill_timing" in recorded_names() and load_recording("day08_prefill_timing").where(rung=TENSOR_PREFILL):
        tensor_prefill_claims(shipped, load_recording("day08_prefill_timing"))
    else:
        assert TENSOR_PREFILL_MISSING in shipped or PREFILL_MISSING in shipped
    if "day08_tensor_prefill_shapes" in recorded_names():
        prefill_shapes_claims(shipped, load_recording("day08_tensor_prefill_shapes"))
    else:
        assert SHAPES_MISSING in shipped
    # The cells that read the tensor-core recordings run again with the fakes; the simulator's cells do not.
    assert 'tc_gemm = live_else_recorded("day08_tc_gemm_timing")' in run.rerun, run.rerun
    assert 'TENSOR_PREFILL = "gqa_prefill_tensor_cores"' in run.rerun, run.rerun
    assert not {"from kernels import tensor_core_gemm",
                "from kernels.low_precision_attention import gqa_prefill_tensor_cores"} & set(run.rerun), run.rerun

    shown = run.fake_text
    assert "recorded on Fake GPU" in shown and "No recording" not in shown
    tc_gemm_claims(shown, fake_tc_gemm_timing())
    tc_shared_claims(shown, fake_tc_gemm_shared_memory())
    tensor_prefill_claims(shown, fake_prefill_timing())
    prefill_shapes_claims(shown, fake_tensor_prefill_shapes())
    for verdict in ("is met", "is not met"):          # the fakes take both sides of each goal
        assert f"of cuBLAS {verdict}" in shown and f"the goal of 0.25 {verdict}" in shown, verdict
    assert TC_GEMM_MISSING not in shown and TENSOR_PREFILL_MISSING not in shown and SHAPES_MISSING not in shown
    for line in WITH_RECORDINGS + ON_GPU_2:
        assert line in shown, f"with the fake recordings, the lesson no longer prints {line!r}"
    if not {"day08_tc_gemm_timing_other_gpu", "day08_prefill_timing_other_gpu"} & set(recorded_names()):
        assert GPU_2_MISSING in shipped
    # the branches the fakes take: fp8 still follows its bytes against fp16, torch stays under the copy bandwidth
    assert "the time still follows the bytes" in shown and "above 1.0 is possible" not in shown
    assert "fp8 roof" not in shown                          # no fp8 matrix product in the fakes
    assert not any(line in shown for line in NOT_YET)       # the fakes have every rung
    # the fp8 ring's goal: met on the first fake GPU, not on the second (faster memory, the ring short of it)
    assert "every such step) on the Fake GPU: met" in shown and "on the Fake GPU 2: not met" in shown
    leaked = _leaks(shipped + shown)
    assert not leaked, f"the lesson's outputs show lines of the exercise's kernels: {leaked[:3]}"

    error_claims(shipped, verdicts)
    for text, recordings in ((shipped, _shipped()), (shown, {rec.name: rec for rec in fake_recordings()})):
        if "day08_decode_timing" in recordings:
            opening_claims(text, recordings["day08_decode_timing"])
            wide_heads_claims(text, recordings["day08_decode_timing"])
            if "day08_decode_timing_other_gpu" in recordings:
                speed_ups_agree(text, recordings["day08_decode_timing"], recordings["day08_decode_timing_other_gpu"])


# ----------------------------------------------------------------------------- what the runs print, against the prose

def wide_heads_claims(shown: str, decode) -> None:
    """The wide-heads cell's speeds are the recording's, over all its steps: on the bf16 cache against the half-warp
    rung on fp16, and on each other cache against the half-warp rung on the same; its table has the long steps."""
    wide, half = "gqa_decode_wide_heads", "gqa_decode_half_warps"
    if not decode.where(rung=wide):
        return
    at = decode.by("rung", "fmt", "num_seqs", "context")
    points = sorted(decode.group_by("num_seqs", "context"))
    for fmt, over in (("bfloat16", "fp16"), ("float32", "fp32"), ("float16", "fp16"), ("fp8_e4m3", "fp8 e4m3")):
        against = "float16" if fmt == "bfloat16" else fmt
        ratios = [at[(half, against, *p)]["kernel_ms"] / at[(wide, fmt, *p)]["kernel_ms"] for p in points]
        cache = "bf16" if fmt == "bfloat16" else over
        said = re.search(rf"on the {cache} cache, {wide} runs at ([\d.]+)(?: to ([\d.]+))? times the speed of {half}",
                         shown)
        low, high = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
        assert said and said.groups() == ((low, None) if low == high else (low, high)), (fmt, said and said[0])
    rows = _table(shown, "step | gqa_decode_wide_heads, bf16, of copy")
    assert [row[0] for row in rows] == [f"{s} x {c:,}" for s, c in points if s * c >= 524288], rows


def _table(shown: str, header: str) -> list[list[str]]:
    """The rows of the first Markdown table in ``shown`` whose header row starts with ``| header``, as cells."""
    lines = shown.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"| {header}")), None)
    assert start is not None, f"no table whose header starts with {header!r}"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def _number(pattern: str, shown: str) -> tuple[float, ...]:
    found = re.search(pattern, shown)
    assert found, f"the lesson no longer prints {pattern!r}"
    return tuple(float(group.replace(",", "")) for group in found.groups())


def error_claims(shown: str, verdicts: dict) -> None:
    """Section 2's prose against the numbers its cells printed, from random inputs (every bound below held on 150
    draws and more with room to spare).

    - the sums of n terms (the table under the figure): with float32 sums, a dot product's error is "near" its
      storage format's u (0.2 to 2.5 u) at every length; a sum of weights' is far below it (under 0.2 u) and "falls
      as n grows" (the last under a third of the first); the float32 sum's own error (fp32 storage) is "far below"
      fp16's storage error in the dot products (under 0.1 of it) and has "caught up with it" in the longest sum of
      weights (0.3 to 3 times it), from under 0.05 of it in the shortest. A narrow sum's error "grows with n" (10
      times or more from the shortest to the longest), "fast for positive" terms (more than for signed ones), and
      the longest narrow sums of weights are "off by most of their value" (0.5 or more). bf16 storage costs "about
      2^3 = 8 times" fp16's error in the dot products (geometric mean 5 to 12, each length 3 to 25: "scatters") and
      in the shortest sum of weights (3 to 20); in the longest it "falls" (under 0.8 of the shortest's).
    - attention: with float32 sums the largest error is one times the same-precision error in fp16 and bf16 "but for
      a rare element" ("equal, or nearly": 1.00 at all lengths but two at most, 0.5 to 2 where not); fp16 sums are
      "orders of magnitude" over it at the longest N (100 times or more), "drift away as N grows" (10 times the
      shortest N's or more) and stay "a small multiple" of it at the shortest (under 20); bf16's honest error is
      "several times" fp16's, "about 2^3" (geometric mean 5 to 12), and an fp8 page's (section 1) is larger again;
      the sentence under the rule's table says what its verdict says.
    """
    curves = {(row[0], row[1]): [float(v) for v in row[2:]] for row in _table(shown, "terms | curve")}
    both_panels = ("dot product", "sum of weights")
    u_of = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
    assert len(curves) == 12 and all(len(v) == 6 for v in curves.values()), curves
    for fmt in u_of:
        dot, weights = (curves[(terms, f"{fmt} storage, fp32 sum: error / u of {fmt}")] for terms in both_panels)
        assert all(0.2 <= v <= 2.5 for v in dot), (fmt, dot)
        assert max(weights) < 0.2 and weights[-1] < weights[0] / 3, (fmt, weights)
        narrow = {terms: curves[(terms, f"{fmt} storage, {fmt} sum: error")] for terms in both_panels}
        growth = {terms: v[-1] / v[0] for terms, v in narrow.items()}
        assert min(growth.values()) >= 10 and growth["sum of weights"] > growth["dot product"], (fmt, narrow)
        assert narrow["sum of weights"][-1] >= 0.5, (fmt, narrow)
    own = {terms: curves[(terms, "fp32 storage / fp16 storage, fp32 sums")] for terms in both_panels}
    assert max(own["dot product"]) < 0.1, own
    assert own["sum of weights"][0] < 0.05 and 0.3 < own["sum of weights"][-1] < 3, own
    bf16_cost = {terms: curves[(terms, "bf16 storage / fp16 storage, fp32 sums")] for terms in both_panels}
    (geometric,) = _number(r"dot products: ([\d.]+) times fp16's error \(geometric mean", shown)
    assert 5 <= geometric <= 12 and all(3 <= v <= 25 for v in bf16_cost["dot product"]), (geometric, bf16_cost)
    weights = bf16_cost["sum of weights"]
    assert 3 <= weights[0] <= 20 and weights[-1] < 0.8 * weights[0], weights

    short, long_ = _number(r"fp16 sums: the largest error is ([\d.,]+) times the same-precision error at N = \d+, "
                           r"([\d.,]+) times at N", shown)
    assert long_ >= 100 and long_ >= 10 * short and short < 20, (short, long_)
    for fmt in u_of:
        found = re.search(rf"{fmt} storage, float32 sums: the largest error is 1.00 times the same-precision error at "
                          rf"(\d+) of (\d+) lengths(; .*)?", shown)
        assert found, fmt
        apart = [float(v) for v in re.findall(r"([\d.]+) at N = ", found[3] or "")]
        assert int(found[1]) >= int(found[2]) - 2 and all(0.5 <= v <= 2 for v in apart), found[0]
    (cost,) = _number(r"bf16's is ([\d.]+) times fp16's \(geometric mean over N\)", shown)
    (bf16_high,) = _number(r"bf16 [\d.e+-]+ to ([\d.e+-]+): bf16's is", shown)
    assert 5 <= cost <= 12, cost
    fp8_pages = [float(row[-1]) for row in _table(shown, "values of size")]
    assert min(fp8_pages) > bf16_high, (fp8_pages, bf16_high)
    said = re.search(r"fp16 sums at N = (\d+): .* this draw (fails|passes) the check", shown)
    assert said, "the line under the rule's table is missing"
    verdict = verdicts[("fp16 storage, fp16 sums", int(said[1]))]
    assert (said[2] == "fails") == (verdict == "FAILS"), (said[0], verdict)


def opening_claims(shown: str, decode) -> None:
    """The opening table's times are gqa_decode_page_runs's, and its sentence says so, with the recording's ratios."""
    half, quarter = _number(r"With gqa_decode_page_runs, half the bytes made the step ([\d.]+) times as fast, "
                            r"a quarter ([\d.]+) times", shown)
    ms = {fmt: r["kernel_ms"] for fmt, r in decode.by("fmt", rung=RUNS, num_seqs=16, context=8192).items()}
    assert (f"{half:.2f}", f"{quarter:.2f}") == (f"{ms[F32] / ms[F16]:.2f}", f"{ms[F32] / ms[FP8]:.2f}")
    times = [row[3] for row in _table(shown, "cache | cache per token")]
    assert times == [f"{ms[fmt] * 1e3:,.0f} µs" for fmt in (F32, F16, FP8)], times


def speed_ups_agree(shown: str, decode, other) -> None:
    """A speed-up printed twice is computed one way: the tensor-core table's ranges (every step of 524,288 tokens or
    more) and the per-step table of the two GPUs (the steps both ran) equal the recordings' ratios of GPU time, and
    the second's values for the first GPU lie inside the first's ranges."""
    def ratio(rec, step, over, point):
        at = rec.by("rung", "fmt", "num_seqs", "context")
        return at[(*over, *point)]["kernel_ms"] / at[(*step, *point)]["kernel_ms"]

    longest = sorted(p for p in decode.group_by("num_seqs", "context") if p[0] * p[1] >= 524288)
    table = _table(shown, "gqa_decode_tensor_cores | of the copy bandwidth")
    fp8 = next(row for row in table if row[0] == "fp8 e4m3 cache")
    ranges = {}
    for column, over in ((2, (FIRST, F32)), (3, (RUNS, F32))):
        values = [ratio(decode, (TENSOR, FP8), over, p) for p in longest]
        assert fp8[column] == f"{min(values):.2f} to {max(values):.2f}", (fp8, over)
        ranges[over] = [float(v) for v in fp8[column].split(" to ")]
    both = {p for p in other.group_by("num_seqs", "context") if p[0] * p[1] >= 524288}
    rows = _table(shown, "step (sequences x tokens)")
    assert sorted(row[0] for row in rows) == sorted(f"{s} x {c:,}" for s, c in both), rows
    for row in rows:
        s, c = (int(v.replace(",", "")) for v in row[0].split(" x "))
        cells = iter(row[1:])
        for over in ((RUNS, F32), (FIRST, F32)):
            for rec in (decode, other):
                assert next(cells) == f"{ratio(rec, (TENSOR, FP8), over, (s, c)):.2f}", (row, over, rec.name)
            low, high = ranges[over]
            assert low <= float(row[1 if over[0] == RUNS else 3]) <= high, (row, over, ranges)


# ----------------------------------------------------------------------------- the tensor-core cells of section 4

TC_GEMM_GOAL, TENSOR_PREFILL_GOAL = 0.4, 0.25           # the goals the cells judge, as the lesson states them
TC_GEMM_SIZES = (4096, 8192)                            # where the GEMM goal is judged
FORMAT_WORDS = {"float16": "fp16", "bfloat16": "bf16"}
# The columns course/record/day08.py writes: harness.time_cases's, the sweep's own (fmt; group) and its finish's.
TIMING_COLUMNS = {"rung", "median_ms", "p10_ms", "p90_ms", "repeat", "gbps", "tflops", "fmt"}
TC_GEMM_COLUMNS = TIMING_COLUMNS | {"M", "N", "K", "fraction_of_cublas", "kernel_ms", "kernel_fraction_of_cublas"}
PREFILL_COLUMNS = TIMING_COLUMNS | {"B", "heads", "kv_heads", "N", "d", "causal", "group", "fraction_of_sdpa_fp16"}


def gemm_claims_on_the_simulator(shown: str) -> None:
    """The prose says every rung passes against the float64 reference and every later rung computes v1's bits: the
    lines the simulator printed say so, one per rung of the ladder."""
    from kernels import tensor_core_gemm

    names = list(tensor_core_gemm.RUNGS)
    for name in names:
        line = re.search(rf"^{name}: (\w+) .*$", shown, re.M)
        assert line and line[1] == "OK", (name, line and line[0])
        if name != names[0]:
            assert line[0].endswith(f"; the same bits as {names[0]}"), line[0]


def tc_gemm_claims(shown: str, rec) -> None:
    """The GEMM ladder's table is the recording's rows at N = 4,096 and 8,192 (else its two largest N), with both
    fractions of cuBLAS (the calls' medians and the GPU's time alone); each verdict names the rung of the ladder with
    the highest lower fraction there and says "met" exactly when that lower fraction reaches the goal, and where the
    two fractions differ by more than a tenth a line says so with cuBLAS's and the rung's times; the steps up the
    ladder, v5 against v4 and cuBLAS against the float32 roof are the recording's ratios."""
    from kernels.tensor_core_gemm import RUNGS

    sizes = sorted(rec.distinct("N"))
    judged = [n for n in TC_GEMM_SIZES if n in sizes] or sizes[-2:]
    assert _table(shown, "rung | N = M = K") == [
        [r["rung"], f"{n:,}", f"{r['tflops']:,.0f}", f"{r['fraction_of_cublas']:.2f}",
         f"{r['kernel_fraction_of_cublas']:.2f}"] for n in judged for r in rec.where(N=n)]
    for n in judged:
        said = re.search(rf"at N = {n:,} the fastest rung is (\w+), at ([\d,]+) TFLOP/s, ([\d.]+) of cuBLAS's ([\d,]+) "
                         rf"\(([\d.]+) by the GPU's time alone\): the goal of {TC_GEMM_GOAL} of cuBLAS is (met|not met)\.",
                         shown)
        assert said, f"no verdict at N = {n:,}"
        lower = {r["rung"]: min(r["fraction_of_cublas"], r["kernel_fraction_of_cublas"])
                 for r in rec.where(N=n) if r["rung"] in RUNGS}
        best = rec.one(rung=max(lower, key=lower.get), N=n)
        cublas = rec.one(rung="torch_matmul_fp16", N=n)
        assert math.isclose(best["fraction_of_cublas"], cublas["median_ms"] / best["median_ms"], rel_tol=1e-9), best
        assert said.groups()[:5] == (best["rung"], f"{best['tflops']:,.0f}", f"{best['fraction_of_cublas']:.2f}",
                                     f"{cublas['tflops']:,.0f}", f"{best['kernel_fraction_of_cublas']:.2f}"), said[0]
        assert (said[6] == "met") == (lower[best["rung"]] >= TC_GEMM_GOAL), said[0]
        differ = abs(best["kernel_fraction_of_cublas"] / best["fraction_of_cublas"] - 1) > 0.1
        said = re.search(rf"at N = {n:,} the two fractions of cuBLAS differ by more than a tenth, and the verdict takes "
                         rf"the lower: cuBLAS's calls took ([\d.]+) ms at the 10th percentile and ([\d.]+) ms at the "
                         rf"median, its kernel alone ([\d.]+) ms; (\w+)'s calls ([\d.]+) and ([\d.]+) ms, its kernel "
                         rf"alone ([\d.]+) ms\.", shown)
        assert bool(said) == differ, (n, said and said[0])
        if said:
            times = ("p10_ms", "median_ms", "kernel_ms")
            assert said.groups() == (*(f"{cublas[k]:.2f}" for k in times), best["rung"],
                                     *(f"{best[k]:.2f}" for k in times)), said[0]
    largest = sizes[-1]
    rate = {r["rung"]: r["tflops"] for r in rec.where(N=largest)}
    names = [name for name in RUNGS if name in rate]
    gains = {after: rate[after] / rate[before] for before, after in zip(names, names[1:])}
    said = re.search(rf"at N = {largest:,}, each rung's rate over the one before: (.*); the largest step is (\w+)'s\.",
                     shown)
    assert said and said[1] == ", ".join(f"{name} {gain:.2f}" for name, gain in gains.items()), said and said[0]
    assert said[2] == max(gains, key=gains.get), said[0]
    v4, v5 = "tc_gemm_v4_swizzled", "tc_gemm_v5_large_tiles"
    ahead = [n for n in sizes if rec.one(rung=v5, N=n)["tflops"] > rec.one(rung=v4, N=n)["tflops"]]
    said = re.search(rf"{v5} is faster than {v4} at N = (.*), slower at N = (.*)\.", shown)
    assert said and said[1] == (", ".join(f"{n:,}" for n in ahead) or "none"), said and said[0]
    assert said[2] == (", ".join(f"{n:,}" for n in sizes if n not in ahead) or "none"), said[0]
    v6 = "tc_gemm_v6_wide_warps"
    said = re.search(rf"{v6} over {v5}: (.*) \(predicted above 1", shown)
    assert (said[1] if said else None) == (", ".join(
        f"{rec.one(rung=v6, N=n)['tflops'] / rec.one(rung=v5, N=n)['tflops']:.2f} at N = {n:,}" for n in judged)
        if rec.where(rung=v6) else None), said and said[0]
    v8 = "tc_gemm_v8_deep_steps"
    said = re.search(rf"{v8} over {v6}: (.*) \(predicted a little above 1\)", shown)
    assert (said[1] if said else None) == (", ".join(
        f"{rec.one(rung=v8, N=n)['tflops'] / rec.one(rung=v6, N=n)['tflops']:.2f} at N = {n:,}" for n in judged)
        if rec.where(rung=v8) and rec.where(rung=v6) else None), said and said[0]
    v9 = "tc_gemm_v9_paired_stores"
    said = re.search(rf"{v9} over {v8}: (.*) \(predicted about 1.06 at N = 4,096 and 1.02 at 8,192\)", shown)
    assert (said[1] if said else None) == (", ".join(
        f"{rec.one(rung=v9, N=n)['tflops'] / rec.one(rung=v8, N=n)['tflops']:.2f} at N = {n:,}" for n in judged)
        if rec.where(rung=v9) and rec.where(rung=v8) else None), said and said[0]
    tuned = [r for r in rec.where(rung="tc_gemm_v7_tuned") if r.get("tile")]
    said = re.search(r"tc_gemm_v7_tuned chose the tile \(block:warp tile\) ([^\n]*)\.", shown)
    assert (said[1] if said else "") == ", ".join(f"{r['tile']} at N = {r['N']:,}" for r in tuned), said and said[0]
    missing = [name for name in RUNGS if name not in rate]
    said = re.search(r"not in this recording: (.*), newer than it", shown)
    assert (said[1] if said else "") == ", ".join(missing), said and said[0]
    roof = rec.ceilings.get("fp32_tflops")
    if roof:
        said = re.search(rf"cuBLAS's fp16 product at N = {judged[0]:,} runs ([\d.]+) times the float32 roof", shown)
        assert said and said[1] == f"{rec.one(rung='torch_matmul_fp16', N=judged[0])['tflops'] / roof:.1f}"


TC_SHARED_MISSING = "the recording day08_shared_memory is missing"


def tc_shared_claims(shown: str, rec) -> None:
    """The Nsight table of the GEMM ladder is the recording's rows beside the model's predicted wavefronts and
    conflicts; v4's share of v3's wavefronts, the range of measured over predicted and the busiest rung's tensor pipe
    and stall reasons are the recording's."""
    from course.models.tensor_core_gemm import shared_load_wavefronts

    rows = _table(shown, "rung | wavefronts, predicted (M)")
    expected, measured = [], {}
    for r in rec.rows:
        predicted, fewest = shared_load_wavefronts(r["label"], r["N"], r["N"], r["N"])
        reasons = {k[len("stall_"):]: v for k, v in r.items() if k.startswith("stall_") and k != "stall_selected"}
        ranked = sorted(reasons, key=reasons.get, reverse=True)
        measured[r["label"]] = r, predicted, ranked, reasons
        expected.append([r["label"], f"{predicted / 1e6:.1f}", f"{r['shared_load_wavefronts'] / 1e6:.1f}",
                         f"{(predicted - fewest) / 1e6:.1f}", f"{r['shared_load_conflicts'] / 1e6:.1f}",
                         f"{r['tensor_pipe_percent']:.0f}", f"{r['cycles_per_issue']:.1f}",
                         f"{ranked[0]} ({reasons[ranked[0]]:.1f})", f"{ranked[1]} ({reasons[ranked[1]]:.1f})"])
    assert rows == expected, rows
    v3, v4 = measured["tc_gemm_v3_cp_async"][0], measured["tc_gemm_v4_swizzled"][0]
    said = re.search(r"v4's swizzle: ([\d.]+) of v3's shared-load wavefronts \(predicted ([\d.]+)\); bank conflicts "
                     r"added (\d+)% of v3's wavefronts and ([\d.]+)% of v4's\.", shown)
    assert said and said.groups() == (
        f"{v4['shared_load_wavefronts'] / v3['shared_load_wavefronts']:.2f}",
        f"{measured['tc_gemm_v4_swizzled'][1] / measured['tc_gemm_v3_cp_async'][1]:.2f}",
        f"{100 * v3['shared_load_conflicts'] / v3['shared_load_wavefronts']:.0f}",
        f"{100 * v4['shared_load_conflicts'] / v4['shared_load_wavefronts']:.1f}"), said and said[0]
    ratio = {label: r["shared_load_wavefronts"] / predicted for label, (r, predicted, *_) in measured.items()}
    low, high = min(ratio, key=ratio.get), max(ratio, key=ratio.get)
    assert (f"measured over predicted wavefronts: from {ratio[low]:.3f} ({low}) to {ratio[high]:.3f} ({high})."
            in shown), shown
    busiest = max(measured, key=lambda label: measured[label][0]["tensor_pipe_percent"])
    r, _, ranked, reasons = measured[busiest]
    assert (f"the tensor pipes are busiest under {busiest}, in {r['tensor_pipe_percent']:.0f}% of their cycles; its "
            f"warps wait most on {ranked[0]} ({reasons[ranked[0]]:.1f} cycles an issue), then on {ranked[1]}"
            in shown), shown


def tensor_prefill_claims(shown: str, prefill) -> None:
    """The tensor-core prefill's table and sentences are its rows of the recording: rate, fraction of torch's fp16 SDPA
    (its median over the row's), the verdict against the goal ("met" exactly when the fraction reaches it), the gain over
    gqa_prefill_mixed_precision on the same tensors, and which side of the float32 roof of the session it lies."""
    tensor = prefill.by("fmt", rung=TENSOR_PREFILL)
    cuda_cores = prefill.by("fmt", rung="gqa_prefill_mixed_precision")
    sdpa = prefill.one(rung="torch_sdpa_fp16")
    roof = prefill.ceilings.get("fp32_tflops")
    rows = _table(shown, "storage | ms | TFLOP/s")
    assert [row[0] for row in rows] == [FORMAT_WORDS[fmt] for fmt in tensor], rows
    for row, (fmt, r) in zip(rows, tensor.items()):
        gain = cuda_cores[fmt]["median_ms"] / r["median_ms"]
        assert math.isclose(r["fraction_of_sdpa_fp16"], sdpa["median_ms"] / r["median_ms"], rel_tol=1e-9), r
        assert row[1:] == [f"{r['median_ms']:.2f}", f"{r['tflops']:,.0f}", f"{r['fraction_of_sdpa_fp16']:.2f}",
                           f"{gain:.1f}"], row
        said = re.search(rf"{TENSOR_PREFILL} on {FORMAT_WORDS[fmt]} tensors runs at ([\d,]+) TFLOP/s, ([\d.]+) of torch's "
                         rf"fp16 SDPA: the goal of {TENSOR_PREFILL_GOAL} is (met|not met); it runs ([\d.]+) times as fast "
                         rf"as gqa_prefill_mixed_precision on the same tensors(?:, (above|below) the float32 roof of the "
                         rf"CUDA cores measured in the same session \(([\d,]+) TFLOP/s\))?\.", shown)
        assert said, f"no sentence for {fmt}"
        assert (said[1], said[2], said[4]) == (f"{r['tflops']:,.0f}", f"{r['fraction_of_sdpa_fp16']:.2f}", f"{gain:.1f}")
        assert (said[3] == "met") == (r["fraction_of_sdpa_fp16"] >= TENSOR_PREFILL_GOAL), said[0]
        if roof:
            assert (said[5], said[6]) == ("above" if r["tflops"] > roof else "below", f"{roof:,.0f}"), said[0]
        else:
            assert said[5] is None, said[0]


def prefill_shapes_claims(shown: str, rec) -> None:
    """The shapes table is the tensor-core rung's rows of ``day08_tensor_prefill_shapes`` in order, each fraction
    torch SDPA's median in the row's dtype over the row's, and the closest and farthest shapes are those of the
    largest and smallest fraction."""
    rows = _table(shown, "head_dim | mask | storage")
    ours = rec.where(rung=TENSOR_PREFILL)
    assert len(rows) == len(ours) == 2 * len({(r["d"], r["causal"]) for r in ours}), rows
    for row, r in zip(rows, ours):
        torch = rec.one(rung="torch_sdpa_fp16" if r["fmt"] == "float16" else "torch_sdpa_bf16", d=r["d"],
                        causal=r["causal"])
        assert math.isclose(r["fraction_of_sdpa"], torch["median_ms"] / r["median_ms"], rel_tol=1e-9), r
        assert row == [str(r["d"]), "causal" if r["causal"] else "none", FORMAT_WORDS[r["fmt"]],
                       f"{r['median_ms']:.2f}", f"{r['tflops']:,.0f}", f"{r['fraction_of_sdpa']:.2f}"], row
    said = re.search(r"closest to torch: head_dim (\d+), (causal|no mask), (\w+), at ([\d.]+); farthest: head_dim "
                     r"(\d+), (causal|no mask), (\w+), at ([\d.]+)", shown)
    assert said, "no sentence on the closest and farthest shapes"
    fraction = lambda r: r["fraction_of_sdpa"]  # noqa: E731
    for at, r in ((1, max(ours, key=fraction)), (5, min(ours, key=fraction))):
        assert said.group(at, at + 1, at + 2, at + 3) == (str(r["d"]), "causal" if r["causal"] else "no mask",
                                                          FORMAT_WORDS[r["fmt"]], f"{r['fraction_of_sdpa']:.2f}")


def test_the_tensor_core_fakes_have_the_recorder_s_columns():
    """``fake_tc_gemm_timing`` has every column the recorder writes, a row per rung of the ladder and torch's matmul at
    each of the recorder's sizes; the tensor-core prefill's fake rows have the columns of the prefill recording's other
    rows, in the formats the recorder times it in."""
    from course.record import day08 as recorder
    from kernels import tensor_core_gemm

    gemm = fake_tc_gemm_timing()
    assert all(set(r) == TC_GEMM_COLUMNS | ({"tile"} if r["rung"] == recorder.TUNED_TC_GEMM else set())
               for r in gemm.rows)
    assert set(gemm.ceilings) == {"copy_gbps", "fp32_tflops"}
    assert sorted(gemm.distinct("N")) == list(recorder.TC_GEMM_N)
    for n in gemm.distinct("N"):
        assert [r["rung"] for r in gemm.where(N=n)] == [*tensor_core_gemm.RUNGS, "torch_matmul_fp16"]
        assert all((r["M"], r["K"], r["fmt"]) == (n, n, "float16") for r in gemm.where(N=n))
    prefill = fake_prefill_timing()
    assert all(set(r) == PREFILL_COLUMNS for r in prefill.rows)
    assert recorder.TENSOR_PREFILL == (TENSOR_PREFILL,)
    assert {r["fmt"] for r in prefill.where(rung=TENSOR_PREFILL)} == set(FORMAT_WORDS) == set(recorder.PREFILL_DTYPES)
    if "day08_prefill_timing" in recorded_names():
        assert {k for r in load_recording("day08_prefill_timing").rows for k in r} <= PREFILL_COLUMNS
    shapes = fake_tensor_prefill_shapes()
    assert {(r["d"], r["causal"]) for r in shapes.rows} == set(recorder.TENSOR_PREFILL_SHAPES)
    assert all(set(r) == PREFILL_COLUMNS - {"fraction_of_sdpa_fp16"} | {"fraction_of_sdpa"} for r in shapes.rows)


def test_the_tensor_core_cells_follow_their_recordings(tmp_path, monkeypatch, capsys):
    """The two cells that read the tensor-core recordings, run alone against fakes on either side of each goal and of
    the float32 roof, then without their recordings: every verdict is the numbers' (a cell that printed a fixed
    sentence fails one side), a missing recording or row is said in one line and nothing is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import course.records
    from test_lesson_figures import figure_problems

    sources = {cell.id: cell.source for cell in _lesson().cells}
    namespace, displayed = {}, []
    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    exec(compile(sources["setup"], "<lesson cell setup>", "exec"), namespace)
    namespace["display"] = lambda *objects: displayed.extend(getattr(o, "data", str(o)) for o in objects)
    course.records.known_names()             # cached from course/data, before DATA_DIR points at the fakes
    monkeypatch.setattr(course.records, "DATA_DIR", tmp_path)

    def run(cell):
        """What the cell printed and displayed, and its figures' count and problems."""
        displayed.clear()
        capsys.readouterr()
        plt.close("all")
        exec(compile(sources[cell], f"<lesson cell {cell}>", "exec"), namespace)
        figures = [plt.figure(number) for number in plt.get_fignums()]
        problems = [problem for figure in figures for problem in figure_problems(figure)]
        plt.close("all")
        return capsys.readouterr().out + "\n".join(displayed), len(figures), problems

    try:
        seen = set()
        # the fastest rung under the goal at both sizes, at one, at neither; a recording older than the last rung
        # and cuBLAS's calls slowed at the largest N (the fractions disagree there): its median made 1.5 times its
        # kernel's time would lift every rung's fraction by the calls over the goal, the lower one keeps "not met"
        for scale, without, drift in ((0.5, (), 1.0), (1.0, (), 1.0), (2.0, (), 1.0),
                                      (1.0, ("tc_gemm_v9_paired_stores",), 1.0),
                                      (1.0, ("tc_gemm_v8_deep_steps", "tc_gemm_v9_paired_stores"), 1.0),
                                      (1.0, ("tc_gemm_v6_wide_warps", "tc_gemm_v7_tuned", "tc_gemm_v8_deep_steps",
                                             "tc_gemm_v9_paired_stores"), 1.0),
                                      (0.5, (), 2.0)):
            rec = fake_tc_gemm_timing(scale, without, drift)
            rec.save(tmp_path / "day08_tc_gemm_timing.json")
            shown, figures, problems = run("tc-gemm-recorded")
            assert figures == 1 and not problems, problems
            tc_gemm_claims(shown, rec)
            verdicts = tuple(re.findall(r"of cuBLAS is (met|not met)\.", shown))
            seen.add(verdicts)
            if drift != 1.0:
                largest = rec.where(N=max(rec.distinct("N")))
                assert max(r["fraction_of_cublas"] for r in largest if r["rung"] != "torch_matmul_fp16") >= TC_GEMM_GOAL
                assert verdicts == ("not met", "not met") and "differ by more than a tenth" in shown, shown
        assert seen == {("not met", "not met"), ("not met", "met"), ("met", "met")}, seen
        (tmp_path / "day08_tc_gemm_timing.json").unlink()
        shown, figures, _ = run("tc-gemm-recorded")
        assert TC_GEMM_MISSING in shown and figures == 0 and "fastest rung" not in shown, shown

        seen = set()
        for rates in ({"float16": 30.0, "bfloat16": 20.0}, None, {"float16": 200.0, "bfloat16": 130.0}):
            namespace["prefill"] = rec = fake_prefill_timing(rates)     # as the lesson's motivation cell binds it
            shown, figures, _ = run("tensor-prefill-recorded")
            assert figures == 0
            tensor_prefill_claims(shown, rec)
            seen.add(tuple(re.findall(r"the goal of 0.25 is (met|not met);.*?(above|below) the float32 roof", shown)))
        assert seen == {(("not met", "below"), ("not met", "below")), (("met", "above"), ("not met", "above")),
                        (("met", "above"), ("met", "above"))}, seen
        for prefill, missing in ((fake_prefill_timing({}), TENSOR_PREFILL_MISSING), (None, PREFILL_MISSING)):
            namespace["prefill"] = prefill
            shown, figures, _ = run("tensor-prefill-recorded")
            assert missing in shown and figures == 0 and "TFLOP/s" not in shown, shown
    finally:
        plt.close("all")

