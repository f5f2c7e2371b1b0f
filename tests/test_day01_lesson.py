"""Day 1 lesson: it shows no exercise solution, runs on synthetic recordings, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``): as committed, with the recordings
``course/data`` ships, then the cells that read a recording run again against synthetic recordings,
one of them left out, so that every table and plot cell runs, and so does the note for a recording
that is missing. The relationships its prose states are
checked against the recordings ``course/data`` ships.
"""

import inspect
import pathlib

import nbformat

from course.models import reduction as model
from course.records import load_recording, new_recording
from grader import markers
from kernels import elementwise, reduction
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day01_gpu_model"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
LESSON = ROOT / "lessons" / "day01_lesson_gpu_model.ipynb"
LESSON_RUNGS = (elementwise.copy_v1_guarded_kernel, elementwise.copy_v2_grid_stride_kernel,
                elementwise.strided_read_kernel, reduction.row_stats_v1_thread_per_row_kernel)
EXERCISE_KERNELS = ("axpb_v1_guarded_kernel", "normalize_rows_v1_3d_grid_kernel",
                    "row_stats_v2_shared_tree_kernel", "row_stats_v3_warp_shuffle_kernel")


def test_lesson_never_shows_the_exercise_kernels():
    lesson = nbformat.read(LESSON, as_version=4)
    text = "\n".join(c.source for c in lesson.cells)
    for name in EXERCISE_KERNELS:
        assert name not in text, f"the lesson mentions {name}, which the exercise asks for"


def test_the_recorded_hierarchy_supports_the_prose():
    """The lesson builds on "bring a tile from DRAM once, reuse it from shared memory": shared memory must
    read faster than DRAM, and the faster levels must be the smaller ones."""
    hierarchy = load_recording("day01_memory_hierarchy")
    bandwidth = {r["level"]: r["gbps"] for r in hierarchy.rows if r["kind"] == "bandwidth"}
    shared = next(g for level, g in bandwidth.items() if level.startswith("shared"))
    dram = next(g for level, g in bandwidth.items() if level.startswith("DRAM") and "copy" not in level)
    assert shared > 2 * dram, f"shared memory {shared:,.0f} GB/s against DRAM {dram:,.0f} GB/s"
    properties = {r["name"]: r["value"] for r in hierarchy.rows if r["kind"] == "property"}
    # "a few hundred KiB per SM, tens of MiB of L2, tens of GiB of DRAM"
    assert 100 * 2**10 <= properties["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"] < 1000 * 2**10
    assert 10 * 2**20 <= properties["L2_CACHE_SIZE"] < 1000 * 2**20
    assert 10 * 2**30 <= properties["TOTAL_MEMORY_BYTES"] < 1000 * 2**30


def test_lesson_runs_with_recordings_and_shows_no_solution(tmp_path):
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    run = run_lesson(LESSON, fake_dir=tmp_path)
    shown = run.fake_text
    assert "No recording 'day01_normalize_rows_timing' is installed yet" in shown
    assert "Fake GPU" in shown and "ridge" in shown and "times the DRAM read bandwidth" in shown
    assert "93% of the 2,900 GB/s of torch's copy" in shown and "0.70x (faster)" in shown
    # The lesson shows the earlier rungs, which share idioms (a guard, a running max) with the
    # exercises; any other line of a solution must not appear.
    earlier_rungs = {line.split("#")[0].strip() for rung in LESSON_RUNGS
                     for line in inspect.getsource(rung).splitlines()}
    solution = nbformat.read(SOLUTION, as_version=4)
    leaked = [line for line in markers.secret_lines(solution, "solution")
              if line in run.shipped_text + shown and line not in earlier_rungs]
    assert not leaked, f"the lesson's outputs show solution lines: {leaked[:3]}"


# ------------------------------------------------------------------------------------------ synthetic recordings
# Made-up numbers shaped like an H100's, with the columns course/record/day01.py writes.

CEILINGS = {"copy_gbps": 3000.0, "fp32_tflops": 50.0}


def _timing(rec, rung, n_bytes, flops, gbps, **extra):
    ms = n_bytes / gbps / 1e6
    rec.add(rung=rung, median_ms=ms, p10_ms=0.97 * ms, p90_ms=1.05 * ms, gbps=gbps,
            tflops=flops / ms / 1e9, bytes=n_bytes, flops=flops, **extra)


def _new(name):
    return new_recording(name, ceilings=CEILINGS, device="Fake GPU", driver="fake 1.0")


def fake_recordings() -> list:
    """One Recording per day-1 name, except ``day01_normalize_rows_timing`` (left out on purpose,
    so the lesson's path for a missing recording runs too)."""
    hierarchy = _new("day01_memory_hierarchy")
    for name, value in (("MULTIPROCESSOR_COUNT", 132), ("L2_CACHE_SIZE", 50 << 20),
                        ("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", 228 << 10),
                        ("MAX_REGISTERS_PER_MULTIPROCESSOR", 65536), ("TOTAL_MEMORY_BYTES", 80 << 30)):
        hierarchy.add(kind="property", name=name, value=value)
    for level, gbps in (("DRAM (copy: read + write)", 2700.0), ("DRAM (torch copy_: read + write)", 2900.0),
                        ("DRAM (read)", 3100.0),
                        ("L2 (read, 8 MiB resident)", 7000.0), ("shared memory (read)", 28000.0)):
        hierarchy.add(kind="bandwidth", level=level, bytes=1 << 30, median_ms=(1 << 30) / gbps / 1e6, gbps=gbps)
    for level, ns in (("shared memory", 17.0), ("L1 (16 KiB chain)", 20.0), ("L2 (4 MiB chain)", 150.0),
                      ("DRAM (512 MiB chain)", 550.0)):
        hierarchy.add(kind="latency", level=level, latency_ns=ns, cycles=ns * 1.98, footprint_bytes=4096, steps=1000)
    hierarchy.notes = "synthetic"

    coalescing = _new("day01_coalescing")
    n = 1 << 24
    for stride in range(1, 33):
        ms = model.dram_bytes_strided_read(n, stride) / 3000e6
        coalescing.add(rung="strided_read", stride=stride, N=n, median_ms=ms, p10_ms=ms, p90_ms=ms,
                       useful_gbps=model.useful_bytes_strided_read(n) / ms / 1e6,
                       model_dram_gbps=model.dram_bytes_strided_read(n, stride) / ms / 1e6)

    pitfalls = _new("day01_timing_pitfalls")
    # (method, timer, repeats, l2, launch overhead, time as a multiple of the honest one)
    methods = (("host clock, first call (compiles the kernel)", "host clock", 1, None, "included", 3000.0),
               ("host clock, no synchronize (times the launch only)", "host clock", 20, None, "only", 0.4),
               ("host clock with synchronize, median of 20", "host clock", 20, "warm", "included", 2.5),
               ("CUDA events, a single run", "CUDA events", 1, "warm", "included", 2.2),
               ("CUDA events, warm-up, median of 50, L2 warm", "CUDA events", 50, "warm", "included", 1.9),
               ("as above, launch overhead hidden behind a busy kernel", "CUDA events", 50, "warm", "hidden", 0.7),
               ("as above, L2 flushed before every run", "CUDA events", 50, "flushed", "hidden", 1.0))
    for mbytes, honest in ((16.0, 0.012), (512.0, 0.18)):
        for method, timer, repeats, l2, overhead, factor in methods:
            ms = honest * factor
            pitfalls.add(method=method, mbytes=mbytes, timer=timer, repeats=repeats, l2=l2, launch_overhead=overhead,
                         ms=ms, gbps=mbytes * 1.048576 / ms)

    elementwise_rec = _new("day01_elementwise_timing")
    for k in (16, 20, 24, 28):
        n = 1 << k
        moved = model.bytes_axpb_v1_guarded(n)
        for op, rung, flops, gbps in (("copy", "copy_v1_guarded", 0, 2600.0), ("copy", "copy_v2_grid_stride", 0, 2500.0),
                                      ("copy", "torch copy_", 0, 2800.0), ("axpb", "axpb_v1_guarded", 2 * n, 2600.0),
                                      ("axpb", "torch a*x+b (two kernels)", 2 * n, 1400.0)):
            _timing(elementwise_rec, rung, moved, flops, gbps * k / 28, N=n, op=op)

    reduction_rec = _new("day01_reduction_timing")
    rows = 4096
    for cols in (32, 512, 8192):
        moved, flops = model.bytes_row_stats_v2_shared_tree(rows, cols), model.flops_row_stats(rows, cols)
        for rung, gbps in (("row_stats_v1_thread_per_row", 150.0), ("row_stats_v2_shared_tree", 2200.0),
                           ("row_stats_v3_warp_shuffle", 2500.0), ("torch amax + sum (two passes)", 1300.0)):
            _timing(reduction_rec, rung, moved, flops, gbps, N=cols, rows=rows, cols=cols)
    return [hierarchy, coalescing, pitfalls, elementwise_rec, reduction_rec]

