"""Every day of the course on a GPU, from one table (run with `make test-gpu`).

``DAYS`` holds one :class:`GpuDay` per day, days 2 to 9. For each row the tests marked ``gpu`` check:

1. full size: the day's recorder checks pass on the GPU, the list ``recorder().checks(quick=False)`` of
   ``course/record/dayNN.py`` that ``python -m course.record dayNN`` runs before it times anything (every
   rung at full size against the float64 reference; day 6's include the cache write, day 8's the fp8
   codes bit for bit); a day that records on a second GPU (``other_gpu``: days 6 to 9) also runs
   ``record_other_gpu`` with its timing left out, that is the checks it runs first;
2. the same results on the simulator and the GPU: every rung the day teaches runs one small seeded case
   (the inputs that tests/test_kernels_pattern.py builds for that rung, plus the day's ``extra_cases``)
   in the test's process on the GPU and in a child process on the simulator
   (``python tests/test_gpu_days.py dayNN OUT.npz`` with ``COURSE_DEVICE=simulator``, as
   tests/test_warp_gpu.py does). Integer outputs, and every output of a rung that only moves data, agree
   bit for bit; float outputs to ``course.checking.check``'s float32 tolerance with the simulator's as the
   reference: the two differ only by rounding (FMA contraction, the order of a reduction, libdevice's
   ``expf`` against NumPy's), orders of magnitude below what a wrong index or a missed tile costs;
3. the recorder's ``sanitize()`` (the small launches compute-sanitizer watches) runs, and so does each
   of its Nsight Compute cases at its smallest N (days 2 to 5 also run one of them in their own files).

Each test carries its row's ``dayNN`` marker, so ``make test-gpu DAY=06`` runs day 6's. On the simulator
they are skipped (tests/conftest.py). The tests that run everywhere check the table: every module of
``kernels/`` with a ``RUNGS`` registry is a ladder of some row (day 1's excepted, ``NOT_IN_TABLE``), every
rung belongs to exactly one day, every case builds, and the simulator half of (2) runs in its child
process on a cheap rung and is compared as the GPU test compares it.

A new day joins with one row, as day 9 did: ``GpuDay("dayNN", ladders=("kernels.<its module>",))``, with
``exact`` for a ladder that only moves data, ``other_gpu=True`` if its recorder has ``record_other_gpu``,
and ``extra_cases`` for paths its float32 cases miss. A new rung of an existing ladder needs no change here.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SEED = 20240611          # every case's inputs: the same in the GPU's process and the simulator's
SIMULATOR_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Case:
    """One small launch: ``build()`` makes its seeded inputs and returns ``(launch, args, kwargs)``.

    ``exact``: the case only moves data (every output compared bit for bit); integer outputs always are.
    """

    name: str
    build: Callable[[], tuple]
    exact: bool = False

    def run(self) -> tuple[np.ndarray, ...]:
        launch, args, kwargs = self.build()
        return host_outputs(launch(*args, **kwargs))


@dataclass(frozen=True)
class GpuDay:
    """One day of the course on a GPU.

    day: ``dayNN``; its recorder is ``course.record.dayNN`` and its tests carry the marker ``dayNN``.
    ladders: the kernel modules whose ``RUNGS`` the day teaches. The day takes every rung of them that no
        earlier row took (``kernels.flash_attention`` lists days 2 and 3's rungs before day 5's).
    only: when not empty, the day takes only these rungs of its ladders (days 2 and 3 share two ladders).
    exact: the ladders, of ``ladders``, whose rungs only move data (a transpose, a cache write).
    other_gpu: the recorder has ``record_other_gpu`` (a recording made on a second GPU).
    extra_cases: more :class:`Case` s, for paths the ladder's float32 cases do not take.
    """

    day: str
    ladders: tuple[str, ...]
    only: tuple[str, ...] = ()
    exact: tuple[str, ...] = ()
    other_gpu: bool = False
    extra_cases: Callable[[], list] | None = None


# ---------------------------------------------------------------------------------------------
# Day 8's fp8 paths: its ladder's cases (test_kernels_pattern) all run on float32 caches
# ---------------------------------------------------------------------------------------------

# The decode rungs that read an fp8 cache, each with one fp8 case of test_day08_kernels.py's tables.
FP8_DECODE_CASES = {"gqa_decode_mixed_precision": ("DECODE_CASES", "fp8-g3-empty-context"),
                    "gqa_decode_page_runs": ("RUN_CASES", "fp8-g4-runs-of-8"),
                    "gqa_decode_half_warps": ("HALF_CASES", "fp8-g4-halves-of-4"),
                    "gqa_decode_tensor_cores": ("TENSOR_CASES", "fp8-g4-head-dim-24"),
                    "gqa_decode_wide_heads": ("HALF_CASES", "fp8-g4-halves-of-4"),   # its runs: the half warps'
                    "gqa_decode_fp8_ring": ("TENSOR_CASES", "fp8-g4-head-dim-128"),  # head_dim a multiple of 16
                    "gqa_decode_fp8_lean_ring": ("TENSOR_CASES", "fp8-g4-head-dim-128"),
                    "gqa_decode_fp8_deep": ("TENSOR_CASES", "fp8-g4-head-dim-128")}   # head_dim a multiple of 64


def day08_fp8_cases() -> list[Case]:
    """fp8_quantize at every kind of e4m3 corner (ties, subnormals, saturation, NaN, -0.0) and with a scale
    per page, and each decode rung that reads fp8 codes on one fp8 case of test_day08_kernels.py (on a GPU of
    compute capability 8.9 or more, gqa_decode_half_warps decodes them with PTX's ``cvt.rn.f16x2.e4m3x2``,
    which the simulator stands in for)."""
    import test_day08_kernels as day08
    from kernels import low_precision_attention as lp

    def corners():
        x = day08.e4m3_corners()
        return lp.fp8_quantize, (x,), dict(scales=np.ones(1, np.float32), group_ndim=1,
                                           out=np.zeros(x.shape, np.uint8))

    def pages():
        rng = np.random.default_rng(SEED)
        cache = (rng.standard_normal((5, 2, 3, 8)) * rng.uniform(0.01, 50, (5, 2, 1, 1))).astype(np.float32)
        cache[3, 1] = 0.0                                # a page of zeros: scale 1
        return lp.fp8_quantize, (cache,), {}

    def decode(name, table, case_id):
        def build():
            (fmt, block_size, lens, kv_heads, group, d, partition_size), = [
                p.values for p in getattr(day08, table) if p.id == case_id]
            case = day08.decode_case(fmt, lens, block_size, kv_heads=kv_heads, group=group, d=d, seed=SEED)
            return (lp.RUNGS[name], (case.q, case.k_cache, case.v_cache, case.tables, case.lens),
                    dict(case.extra, out=np.full_like(case.q, np.nan), partition_size=partition_size))
        return Case(f"{name}_fp8", build)

    return [Case("fp8_quantize_corners", corners, exact=True), Case("fp8_quantize_pages", pages),
            *(decode(name, *where) for name, where in FP8_DECODE_CASES.items())]


# ---------------------------------------------------------------------------------------------
# Day 9's awkward bytes: its ladder's cases (test_kernels_pattern) are quantized Gaussian rows
# ---------------------------------------------------------------------------------------------

def day09_gguf_cases() -> list[Case]:
    """Each rung of day 9's ladder (``kernels.quantized_gemv_prequantized.RUNGS``) on test_day09_quantized_gemv.py's
    awkward weights (a block of zeros, a block of two values, a constant block, and a last row of raw random bytes
    under random fp16 scales: every code, Q8_0's -128 and subnormal scales appear) at 5 rows of 33 blocks (lane 0
    takes two; int4_g128, whose K is a multiple of 128: 36), x's first block zeros (q8_1: d = 0); and the day's quantizer ``q8_0_quantize`` at its rounding corners
    (halves away from zero at d = 1, a block of zeros, a block of subnormals whose 1 / d overflows), its codes
    bit for bit."""
    import test_day09_quantized_gemv as day09
    from course.models.quantized import RUNG_FORMATS
    from kernels import quantized_gemv as qg
    from kernels import quantized_gemv_prequantized as qpq

    def gemv(name):
        def build():
            rng = np.random.default_rng(SEED)
            k = 33 * 32 if RUNG_FORMATS[name] != "int4_g128" else 36 * 32      # int4_g128: K a multiple of 128
            w = day09.gguf_weights(rng, RUNG_FORMATS[name], 5, k)
            return qpq.RUNGS[name], (w, day09.activations(rng, k)), dict(out=np.full(5, np.nan, np.float32))
        return Case(f"{name}_gguf_corners", build)

    def quantize_corners():
        x = np.random.default_rng(SEED).standard_normal((3, 4 * 32)).astype(np.float32)
        x[0, :32] = 0.0
        x[0, 32:64] = np.concatenate([[127.0], np.arange(-15, 16) + 0.5])     # d = 1: each value a half
        x[1, :32] *= np.float32(1e-39)                                          # subnormals: 1 / d overflows
        x[2, 96:] *= np.float32(3e4)
        return qg.q8_0_quantize, (x,), {}

    return [*(gemv(name) for name in qpq.RUNGS), Case("q8_0_quantize_corners", quantize_corners)]


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

DAYS = (
    GpuDay("day02", ladders=("kernels.attention", "kernels.softmax"), only=("attention_v1_naive", "softmax_rows")),
    GpuDay("day03", ladders=("kernels.attention", "kernels.softmax")),
    GpuDay("day04", ladders=("kernels.gemm", "kernels.transpose"), exact=("kernels.transpose",)),
    GpuDay("day05", ladders=("kernels.flash_attention",)),
    GpuDay("day06", ladders=("kernels.paged_attention", "kernels.kv_cache"), exact=("kernels.kv_cache",),
           other_gpu=True),
    GpuDay("day07", ladders=("kernels.gqa_attention",), other_gpu=True),
    GpuDay("day08", ladders=("kernels.low_precision_attention",), other_gpu=True, extra_cases=day08_fp8_cases),
    GpuDay("day09", ladders=("kernels.quantized_gemv", "kernels.quantized_gemv_repacked", "kernels.quantized_gemv_wide",
                              "kernels.quantized_gemv_persistent", "kernels.quantized_gemv_prequantized",
                              "kernels.quantized_gemm"),
           other_gpu=True, extra_cases=day09_gguf_cases),
)
# Ladders of kernels/ that no row holds, and why.
NOT_IN_TABLE = {"kernels.elementwise": "day 1: the table starts at day 2; day 1 joins with a row",
                "kernels.reduction": "day 1: the table starts at day 2; day 1 joins with a row",
                "kernels.llama_layers": "day 10: its recorder measures the whole model's step, not a ladder "
                                        "(course/record/day10.py); tests/test_inference_engine.py runs the layers and "
                                        "the recorder on a GPU",
                "kernels.token_gemv": "day 10: the engine's GEMVs for a step's tokens, run on a GPU with the engine "
                                      "(tests/test_inference_engine.py) and timed in day 10's recorder",
                "kernels.fused_llama": "day 10: the fused engine's kernels, run on a GPU with it "
                                       "(tests/test_inference_engine.py) and timed in day 10's recorder",
                "kernels.tensor_core_gemm": "tensor-core GEMM: its row comes with its recorder, when a GPU times it"}

ROWS = [pytest.param(row, id=row.day, marks=getattr(pytest.mark, row.day)) for row in DAYS]


def row_of(day: str) -> GpuDay:
    (row,) = [row for row in DAYS if row.day == day]
    return row


def rungs_of(row: GpuDay) -> list:
    """The rungs ``row`` teaches, in ladder order: those of its ladders that no earlier row took."""
    taken = set()
    for each in DAYS:
        mine = []
        for module in each.ladders:
            for rung in importlib.import_module(module).RUNGS.values():
                if rung.launcher not in taken and (not each.only or rung.name in each.only):
                    taken.add(rung.launcher)
                    mine.append(rung)
        if each is row:
            return mine
    raise ValueError(f"{row} is not a row of DAYS")


def ladder_case(rung, exact: bool) -> Case:
    """The rung on the inputs test_kernels_pattern.py gives its operation, seeded with ``SEED``."""
    from test_kernels_pattern import operation_of

    operation = operation_of(rung)      # LookupError, naming what to add, for an operation it does not know

    def build():
        args, kwargs = operation.inputs(np.random.default_rng(SEED), rung)
        return rung, args, kwargs

    return Case(rung.name, build, exact)


def cases_of(row: GpuDay) -> list[Case]:
    exact = {rung.launcher for module in row.exact for rung in importlib.import_module(module).RUNGS.values()}
    cases = [ladder_case(rung, rung.launcher in exact) for rung in rungs_of(row)]
    return cases + (row.extra_cases() if row.extra_cases else [])


# ---------------------------------------------------------------------------------------------
# Running the cases, and comparing the GPU's outputs with the simulator's
# ---------------------------------------------------------------------------------------------

def host_outputs(result) -> tuple[np.ndarray, ...]:
    """A launcher's result (an array, a device array or a tuple of them) as a tuple of host arrays."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    return tuple(np.array(a.copy_to_host() if hasattr(a, "copy_to_host") else a) for a in items)


def run_cases(row: GpuDay, names=()) -> dict[str, tuple[np.ndarray, ...]]:
    """``{case: outputs}`` of the row's cases (only those in ``names``, when given) on this process's device."""
    return {case.name: case.run() for case in cases_of(row) if not names or case.name in names}


def simulate_in_child(row: GpuDay, path: Path, names=()) -> subprocess.Popen:
    """Start this file as a script on the simulator; it saves the row's outputs to ``path`` (npz)."""
    env = {**os.environ, "COURSE_DEVICE": "simulator", "NUMBA_ENABLE_CUDASIM": "1",
           # the project's own code, whatever copy the environment's editable install points at
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, str(Path(__file__)), row.day, str(path), *names], cwd=ROOT, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def simulated_outputs(child: subprocess.Popen, path: Path) -> dict[str, tuple[np.ndarray, ...]]:
    try:
        stdout, stderr = child.communicate(timeout=SIMULATOR_TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, f"the simulator half failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    with np.load(path) as saved:
        found = {}
        for key in sorted(saved.files, key=lambda k: (k.rsplit(".", 1)[0], int(k.rsplit(".", 1)[1]))):
            found.setdefault(key.rsplit(".", 1)[0], []).append(saved[key])
    return {name: tuple(outputs) for name, outputs in found.items()}


def save_outputs(outputs: dict, path) -> None:
    np.savez(path, **{f"{name}.{i}": a for name, arrays in outputs.items() for i, a in enumerate(arrays)})


def disagreement(case: Case, got: tuple, want: tuple) -> str | None:
    """What differs between the GPU's outputs ``got`` and the simulator's ``want``, or None."""
    from course.checking import CheckFailure, check
    from test_warp_gpu import bits

    if len(got) != len(want):
        return f"{case.name}: {len(got)} outputs on the GPU, {len(want)} on the simulator"
    for i, (g, w) in enumerate(zip(got, want)):
        where = f"{case.name} output {i}"
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{where}: {g.dtype} {g.shape} on the GPU, {w.dtype} {w.shape} on the simulator"
        if case.exact or not np.issubdtype(w.dtype, np.floating):
            differ = np.any(bits(g) != bits(w), axis=-1)
            if differ.any():
                first = np.unravel_index(np.argmax(differ), differ.shape)
                return (f"{where}: {int(differ.sum())} of {w.size} elements differ bit for bit, the first at "
                        f"{tuple(map(int, first))}: {g[first]!r} on the GPU, {w[first]!r} on the simulator")
        else:
            try:
                check(g, w.astype(np.float64), name=f"{where} on the GPU against the simulator", seed=SEED,
                      dtype=g.dtype)
            except CheckFailure as failure:
                return str(failure)
    return None


# ---------------------------------------------------------------------------------------------
# On a GPU: (1) full size, (2) the same results as the simulator, (3) sanitize and Nsight
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("row", ROWS)
def test_recorder_full_size_checks_pass_on_gpu(row):
    """Every check the recorder runs before timing: each rung at full size against the float64 reference."""
    from course.record import day_module, harness

    rows = harness.run_checks(day_module(row.day).recorder().checks(False))
    assert rows and all(np.isfinite(r["rel_err"]) for r in rows)


class _Unsaved:
    """Stands for a timed recording: ``save(path)`` writes nothing and returns the path."""

    def __init__(self, name):
        self.name = name

    def save(self, path):
        return Path(path)


@pytest.mark.gpu
@pytest.mark.parametrize("row", [p for p in ROWS if p.values[0].other_gpu])
def test_other_gpu_recording_checks_pass_on_gpu(row, tmp_path, monkeypatch):
    """``record_other_gpu`` as ``python -m course.record dayNN --other-gpu`` runs it, its timing left out:
    the full-size checks it runs first (and raises on) pass."""
    import course.timing
    from course.record import day_module, harness

    monkeypatch.setattr(harness, "record_sweep", lambda sweep, **_: _Unsaved(sweep.name))
    monkeypatch.setattr(course.timing, "measure_ceilings", lambda *a, **k: {})
    paths = day_module(row.day).record_other_gpu(tmp_path, quick=True)
    assert paths and all(p.name.endswith("_other_gpu.json") for p in paths)


@pytest.mark.gpu
@pytest.mark.parametrize("row", ROWS)
def test_gpu_and_simulator_agree_on_every_rung(row, tmp_path):
    """Each case on the GPU here and on the simulator in a child process (started first, to run alongside)."""
    path = tmp_path / "simulator.npz"
    child = simulate_in_child(row, path)
    try:
        on_gpu = run_cases(row)
    except BaseException:
        child.kill()
        child.communicate()
        raise
    simulated = simulated_outputs(child, path)
    assert set(simulated) == set(on_gpu)
    problems = [p for case in cases_of(row) if (p := disagreement(case, on_gpu[case.name], simulated[case.name]))]
    assert not problems, f"{row.day}: the GPU and the simulator differ:\n" + "\n\n".join(problems)


@pytest.mark.gpu
@pytest.mark.parametrize("row", ROWS)
def test_sanitize_and_the_smallest_nsight_cases_run_on_gpu(row):
    """The recorder's small launches for compute-sanitizer, then each Nsight Compute case (by the name
    ``--ncu-case`` takes) at its smallest N through ``run_ncu_case``, each from a fresh list of cases, so
    the inputs of one are freed before the next is made."""
    from numba import cuda

    from course.record import day_module, harness

    recorder = day_module(row.day).recorder()
    recorder.sanitize()
    cuda.synchronize()
    smallest = {}
    for case in recorder.ncu_cases():
        name, n = harness.NcuCase(*case).name, int(case[1])
        smallest[name] = min(n, smallest.get(name, n))
    assert smallest, f"{row.day} lists no Nsight case"
    for name, n in smallest.items():
        harness.run_ncu_case(recorder.ncu_cases(), name, n)


# ---------------------------------------------------------------------------------------------
# Everywhere: the table covers every ladder, its cases build, the simulator half runs
# ---------------------------------------------------------------------------------------------

def ladders_in_kernels() -> list[str]:
    """Every module of the kernels package that defines ``RUNGS``."""
    import kernels

    names = [f"kernels.{info.name}" for info in pkgutil.iter_modules(kernels.__path__)]
    return sorted(name for name in names if hasattr(importlib.import_module(name), "RUNGS"))


def test_every_ladder_of_kernels_belongs_to_a_day_of_the_table():
    from course.record import DAYS as RECORDED

    ladders = ladders_in_kernels()
    assert set(NOT_IN_TABLE) <= set(ladders), "NOT_IN_TABLE names a module that has no RUNGS"
    in_rows = {module for row in DAYS for module in row.ladders}
    missing = [m for m in ladders if m not in in_rows and m not in NOT_IN_TABLE]
    assert not missing, f"ladders in no row of DAYS (add them to their day's row): {missing}"
    assert in_rows <= set(ladders), f"rows name modules without RUNGS: {sorted(in_rows - set(ladders))}"
    assert not in_rows & set(NOT_IN_TABLE)
    taken = [rung.launcher for row in DAYS for rung in rungs_of(row)]
    assert len(taken) == len(set(taken))
    every = {rung.launcher for m in in_rows for rung in importlib.import_module(m).RUNGS.values()}
    untaken = sorted(f.__name__ for f in every - set(taken))
    assert not untaken, f"rungs no row takes (a row's only= leaves them out): {untaken}"
    days = [row.day for row in DAYS]
    assert days == sorted(set(days)) and set(days) <= set(RECORDED), days
    for row in DAYS:
        assert rungs_of(row), f"{row.day} takes no rung"
        assert set(row.exact) <= set(row.ladders) and set(row.only) <= {r.name for r in rungs_of(row)}
        module = importlib.import_module(f"course.record.{row.day}")
        assert row.other_gpu == hasattr(module, "record_other_gpu"), (
            f"{row.day}: other_gpu should be {not row.other_gpu}")
        assert callable(module.recorder().sanitize) and callable(module.recorder().checks)


def test_days_two_and_three_split_their_shared_ladders_as_the_lessons_do():
    """softmax_rows and attention_v1_naive are day 2's, their successors day 3's; day 5 takes the rest."""
    from kernels import attention, flash_attention

    assert [r.name for r in rungs_of(row_of("day02"))] == ["attention_v1_naive", "softmax_rows"]
    assert [r.name for r in rungs_of(row_of("day03"))] == ["attention_v2_fused_rows", "softmax_online"]
    assert [r.name for r in rungs_of(row_of("day05"))] == [n for n in flash_attention.RUNGS if n not in attention.RUNGS]


@pytest.mark.parametrize("row", ROWS)
def test_every_case_of_the_day_builds_the_same_inputs_twice(row):
    """Builds each case's inputs (nothing is launched): one case per rung, names unique, seeded."""
    cases = cases_of(row)
    names = [case.name for case in cases]
    assert len(names) == len(set(names)) and names[:len(rungs_of(row))] == [r.name for r in rungs_of(row)]
    for case in cases:
        (launch, args, kwargs), (_, again, again_kw) = case.build(), case.build()
        assert callable(launch)
        for a, b in zip([*args, *kwargs.values()], [*again, *again_kw.values()]):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b, err_msg=f"{case.name}: inputs are not seeded")


def test_day08_has_an_fp8_case_for_every_rung_that_reads_fp8_codes():
    from kernels import low_precision_attention as lp

    reads_fp8 = [name for name, rung in lp.RUNGS.items() if "k_scales" in inspect.signature(rung.launcher).parameters]
    assert reads_fp8 and sorted(reads_fp8) == sorted(FP8_DECODE_CASES)


def test_the_simulator_half_runs_in_a_child_and_compares_as_on_a_gpu(tmp_path):
    """The simulator half of the GPU test for one cheap rung: the child's outputs are finite, of the shape
    the case gives, the same bits as this process's run of the case (the simulator here too), and the
    comparison reports a changed element."""
    row, name = row_of("day04"), "transpose_v1_naive"
    path = tmp_path / "simulator.npz"
    simulated = simulated_outputs(simulate_in_child(row, path, [name]), path)
    assert list(simulated) == [name]
    (out,) = simulated[name]
    (case,) = [c for c in cases_of(row) if c.name == name]
    _, (x,), _ = case.build()
    assert out.shape == x.T.shape and out.dtype == np.float32 and np.isfinite(out).all()
    here = case.run()
    assert disagreement(case, here, simulated[name]) is None
    np.testing.assert_array_equal(out, x.T)
    changed = out.copy()
    changed[3, 4] = np.nextafter(changed[3, 4], np.inf)
    assert "1 of" in disagreement(case, (changed,), simulated[name])
    # a float case is held to check's tolerance: a rounding passes, a wrong element does not
    rounded = Case("float", case.build)
    assert disagreement(rounded, (changed,), simulated[name]) is None
    changed[3, 4] += 1.0
    assert "float output 0" in disagreement(rounded, (changed,), simulated[name])


if __name__ == "__main__":
    # The simulator half: python tests/test_gpu_days.py dayNN OUT.npz [case ...]
    import course

    course.use_device("simulator", quiet=True)
    day, out_path, *only = sys.argv[1:]
    save_outputs(run_cases(row_of(day), only), out_path)
