"""Day 4 lesson: runs against synthetic recordings, shows no solution, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``): as committed, with the recordings
``course/data`` ships, then the cells that read a recording again against synthetic ones. Those
leave ``day04_dram_bytes`` out on purpose, so the note for a missing recording runs too; every
other recorded table and plot cell runs on made-up numbers shaped like an H100's, with the
columns course/record/day04.py writes.
"""

import inspect
import pathlib

import nbformat

from course.models import gemm as model
from course.records import load_recording, new_recording
from grader import markers
from kernels import gemm, transpose
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSON = ROOT / "lessons" / "day04_lesson_tiled_gemm.ipynb"
SOLUTION = ROOT / "solutions" / "day04_tiled_gemm" / "day04_tiled_gemm.ipynb"
EXERCISE_KERNELS = ("gemm_v3_shared_tiles_kernel", "gemm_v4_register_blocked_kernel")
# Kernels the lesson prints: their lines may coincide with lines of a solution.
SHOWN_KERNELS = (gemm.gemm_v1_naive_kernel, gemm.gemm_v2_coalesced_kernel, transpose.transpose_v2_shared_kernel,
                 transpose.transpose_v3_shared_padded_kernel, transpose.transpose_missing_barrier_kernel)


def test_lesson_never_shows_the_exercise_kernels():
    text = "\n".join(c.source for c in nbformat.read(LESSON, as_version=4).cells)
    for name in EXERCISE_KERNELS:
        assert name not in text, f"the lesson mentions {name}, which the exercise asks for"


def test_the_recorded_dram_bytes_support_the_prose():
    """Section 10 says the Nsight squares of the rungs it plots (v1 to v4) sit far below each rung's model,
    close to the compulsory line; the later rungs stay close to it too."""
    dram = load_recording("day04_dram_bytes")
    plotted = ("gemm_v1_naive", "gemm_v2_coalesced", "gemm_v3_shared_tiles", "gemm_v4_register_blocked")
    for row in dram.rows:
        if row["label"] in gemm.RUNGS:
            n = row["N"]
            if row["label"] in plotted:
                assert row["dram_bytes"] < 0.1 * model.traffic(row["label"], n, n, n).bytes(4), row
            assert 0.5 < row["dram_bytes"] / model.compulsory_bytes(n, n, n) < 1.5, row


def test_lesson_runs_with_recordings_and_shows_no_solution(tmp_path):
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    run = run_lesson(LESSON, fake_dir=tmp_path)
    shown = run.fake_text
    assert "No recording 'day04_dram_bytes' is installed yet" in shown
    assert "Fake GPU" in shown and "of torch" in shown and "wrong in 8 of 20 trials" in shown
    earlier = {line.split("#")[0].strip() for kernel in SHOWN_KERNELS
               for line in inspect.getsource(kernel.py_func).splitlines()}
    solution = nbformat.read(SOLUTION, as_version=4)
    leaked = [line for line in markers.secret_lines(solution, "solution")
              if line in run.shipped_text + shown and line not in earlier]
    assert not leaked, f"the lesson's outputs show solution lines: {leaked[:3]}"


# ------------------------------------------------------------------------------------------ synthetic recordings

CEILINGS = {"copy_gbps": 3000.0, "fp32_tflops": 50.0}
TORCH = "torch.matmul (fp32, TF32 off)"


def _new(name):
    return new_recording(name, ceilings=CEILINGS, device="Fake GPU", driver="fake 1.0")


def fake_recordings() -> list:
    """day04_gemm_timing, day04_transpose_timing and day04_missing_barrier (not day04_dram_bytes)."""
    timing = _new("day04_gemm_timing")
    rates = {"gemm_v1_naive": 0.4, "gemm_v2_coalesced": 2.5, "gemm_v3_shared_tiles": 6.0,
             "gemm_v4_register_blocked": 16.0, TORCH: 45.0}
    for n in (256, 1024, 4096):
        flops = model.flops_gemm(n, n, n)
        for rung, tflops in rates.items():
            moved = model.compulsory_bytes(n, n, n) if rung == TORCH else model.traffic(rung, n, n, n).bytes(4)
            ms = flops / tflops / 1e9
            timing.add(rung=rung, N=n, M=n, K=n, median_ms=ms, p10_ms=0.98 * ms, p90_ms=1.03 * ms, repeat=10,
                       gbps=moved / ms / 1e6, tflops=tflops, gflops=tflops * 1e3, intensity=flops / moved)
    transposes = _new("day04_transpose_timing")
    for n in (1024, 4096):
        for rung, gbps in (("transpose_v1_naive", 900.0), ("transpose_v2_shared", 1500.0),
                           ("transpose_v3_shared_padded", 2600.0), ("torch out.copy_(x.t())", 2500.0)):
            ms = 2 * n * n * 4 / gbps / 1e6
            transposes.add(rung=rung, N=n, median_ms=ms, p10_ms=ms, p90_ms=ms, repeat=10, gbps=gbps, tflops=None)
    barrier = _new("day04_missing_barrier")
    barrier.notes = "synthetic."
    for trial in range(20):
        barrier.add(kernel="transpose_missing_barrier", trial=trial, wrong=4096 * (trial % 3 == 1) + 17 * (trial == 0),
                    elements=4096 * 4096, seed=1)
        barrier.add(kernel="transpose_v3_shared_padded", trial=trial, wrong=0, elements=4096 * 4096, seed=1)
    return [timing, transposes, barrier]
