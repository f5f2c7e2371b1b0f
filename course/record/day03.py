"""GPU recordings of day 3: online softmax and fused attention, one query row per thread.

A declaration for ``course.record.harness``: ``softmax_online`` and ``attention_v2_fused_rows``
(causal and not) are checked at full size against the float64 reference, then timed into

- ``day03_softmax_timing.json``: ``softmax_rows`` (three reads per element), ``softmax_online``
  (two reads) and ``torch.softmax`` on (``SOFTMAX_ROWS``, N) matrices; rows: rung, N (row length),
  rows, median_ms, p10_ms, p90_ms, gbps (one read and one write of the matrix per second).
- ``day03_fused_timing.json``: ``attention_v2_fused_rows`` and ``attention_v1_naive`` against torch SDPA
  fp32 (``torch_sdpa``), causal and not (``attention_v1_naive`` not); rows: rung, N, B, H, d, causal,
  median_ms, p10_ms, p90_ms, gbps, tflops.

Every row names its rung by its key in the registry (``kernels.softmax.RUNGS``, ``kernels.attention.RUNGS``)
or torch's call (``torch_softmax``, ``torch_sdpa``), and says in ``causal`` whether the mask was on.
``ncu_cases()`` gives the launches whose DRAM bytes Nsight Compute records as ``day03_dram_bytes``
(label ``attention_v2_fused_rows``, causal and not, shape ``NCU_SHAPE``; rows: label, causal, N and the
bytes); ``sanitize()`` launches each kernel once at a small awkward size.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import attention as model
from course.record import baselines, harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from course.record.inputs import attention_inputs, attention_reference, to_device
from kernels import attention, softmax

SHAPE = {"B": 4, "H": 16, "d": 64}
SIZES = (256, 512, 1024, 2048, 4096)
QUICK_SIZES = (256, 1024)
CHECK_N = 4096
QUICK_CHECK_N = 1024
NCU_SHAPE = SHAPE
NCU_SIZES = SIZES
# Softmax timing: this many rows of length N (a B·H·N score matrix at B·H = 4, N = 4096 has 16384).
SOFTMAX_ROWS = 16384
SOFTMAX_SIZES = (256, 512, 1024, 2048, 4096, 8192)
LARGE_LOGITS = 1e4
# The rungs timed, by their keys in the registries: the softmax ladder, and the fused rung against the naive one.
SOFTMAX_RUNGS = tuple(softmax.RUNGS)                     # softmax_rows, softmax_online
NAIVE = attention.RUNGS["attention_v1_naive"].name
FUSED = attention.RUNGS["attention_v2_fused_rows"].name


def checks(n: int = CHECK_N) -> list[Check]:
    """softmax_online on logits of size 1e4, and attention_v2_fused_rows (causal and not) at (B, H, n, d)."""
    from course.checking import random_inputs
    from kernels import reference

    softmax_online, attention_v2_fused_rows = softmax.RUNGS["softmax_online"], attention.RUNGS[FUSED]
    rng, seed = random_inputs()
    x = (rng.standard_normal((SOFTMAX_ROWS, n), dtype=np.float32) * LARGE_LOGITS).astype(np.float32)
    xd, probabilities = to_device(x, np.empty_like(x))
    found = [Check(f"softmax_online, logits of size {LARGE_LOGITS:g}", lambda: softmax_online(xd, out=probabilities),
                   probabilities.copy_to_host, lambda: reference.softmax(x.astype(np.float64), axis=-1),
                   seed=seed, poisoned=(probabilities,), columns=dict(rung=softmax_online.name, N=n, rows=SOFTMAX_ROWS),
                   options=dict(dims=("row", "col"), rows_sum_to_one=True))]
    qh, kh, vh, seed = attention_inputs(n=n, **SHAPE)
    q, k, v = to_device(qh, kh, vh)
    o = to_device(np.empty_like(qh))[0]
    for causal in (False, True):
        found.append(Check(f"O of {FUSED}, causal={causal}",
                           lambda c=causal: attention_v2_fused_rows(q, k, v, causal=c, out=o), o.copy_to_host,
                           lambda c=causal: attention_reference(qh, kh, vh, causal=c), seed=seed, poisoned=(o,),
                           columns=dict(rung=FUSED, N=n, **SHAPE, causal=causal),
                           options=dict(dims=("batch", "head", "row", "col"))))
    return found


def check_full_size(n: int = CHECK_N) -> list[dict]:
    """Run :func:`checks` at ``n``; one row of errors per check."""
    return harness.run_checks(checks(n))


def _softmax_cases(n: int) -> list[Timed]:
    x = np.random.default_rng(n).standard_normal((SOFTMAX_ROWS, n), dtype=np.float32)
    xd, out = to_device(x, np.empty_like(x))
    compulsory = 2 * x.nbytes
    return [Timed(name, lambda rung=softmax.RUNGS[name]: rung(xd, out=out), compulsory) for name in SOFTMAX_RUNGS] + [
        Timed("torch_softmax", baselines.torch_softmax(x), compulsory)]


def softmax_sweep() -> Sweep:
    return Sweep(
        name="day03_softmax_timing",
        notes=(f"row softmax of a ({SOFTMAX_ROWS}, N) float32 matrix: {SOFTMAX_RUNGS[0]} reads each element 3 "
               f"times, {SOFTMAX_RUNGS[1]} twice; torch_softmax is torch.softmax. gbps: one read and one "
               "write of the matrix per second (the compulsory traffic), L2 flushed between repeats."),
        points=SOFTMAX_SIZES, quick_points=QUICK_SIZES, shape=lambda n: {"N": n, "rows": SOFTMAX_ROWS},
        cases=_softmax_cases, flush_l2=True)


def _fused_cases(point) -> list[Timed]:
    naive, fused = attention.RUNGS[NAIVE], attention.RUNGS[FUSED]
    n, causal = point
    B, H, d = SHAPE["B"], SHAPE["H"], SHAPE["d"]
    qh, kh, vh, _ = attention_inputs(n=n, **SHAPE)
    q, k, v, o = to_device(qh, kh, vh, np.empty_like(qh))
    fused_bytes = model.compulsory_bytes_fused(B, H, n, d)
    flops = model.flops_attention(B, H, n, d, causal=causal)
    cases = [Timed(FUSED, lambda: fused(q, k, v, causal=causal, out=o), fused_bytes, flops),
             Timed("torch_sdpa", baselines.torch_sdpa(qh, kh, vh, causal=causal), fused_bytes, flops)]
    if not causal:                  # the naive pipeline takes no mask
        cases.append(Timed(NAIVE, lambda: naive(q, k, v, out=o), model.compulsory_bytes_naive(B, H, n, d), flops))
    return cases


def fused_sweep() -> Sweep:
    return Sweep(
        name="day03_fused_timing",
        notes=(f"{FUSED} (one thread per query row, online softmax; causal and not, said in causal) and {NAIVE} "
               f"(not causal) against torch.nn.functional.scaled_dot_product_attention, fp32, B={SHAPE['B']} "
               f"H={SHAPE['H']} d={SHAPE['d']}, M = N. gbps: compulsory bytes per second; tflops: "
               "2 FLOPs per multiply-add over the (query, key) pairs computed (about half when causal)."),
        points=tuple((n, causal) for n in SIZES for causal in (False, True)),
        quick_points=tuple((n, causal) for n in QUICK_SIZES for causal in (False, True)),
        shape=lambda point: dict(N=point[0], **SHAPE, causal=point[1]), cases=_fused_cases)


def softmax_timing(quick: bool = False):
    """Time softmax_rows, softmax_online and torch.softmax for every row length N; return the Recording."""
    from course.timing import measure_ceilings

    return harness.record_sweep(softmax_sweep(), quick=quick, ceilings=measure_ceilings())


def fused_timing(quick: bool = False):
    """Time attention_v2_fused_rows (causal and not), attention_v1_naive and torch SDPA; return the Recording."""
    from course.timing import measure_ceilings

    return harness.record_sweep(fused_sweep(), quick=quick, ceilings=measure_ceilings())


def _fused_launch(n: int, causal: bool):
    fused = attention.RUNGS[FUSED]
    qh, kh, vh, _ = attention_inputs(n=n, **NCU_SHAPE)
    q, k, v, o = to_device(qh, kh, vh, np.empty_like(qh))
    return lambda: fused(q, k, v, causal=causal, out=o)


def ncu_cases() -> list[NcuCase]:
    """One attention_v2_fused_rows at (NCU_SHAPE, N), causal and not; inputs are made on the first call."""
    return [NcuCase(FUSED, n, harness.lazy(_fused_launch, n, causal), {"causal": causal})
            for causal in (False, True) for n in NCU_SIZES]


def sanitize() -> None:
    """Launch softmax_online and attention_v2_fused_rows (causal and not) once at a small awkward size."""
    from numba import cuda

    softmax_online, attention_v2_fused_rows = softmax.RUNGS["softmax_online"], attention.RUNGS[FUSED]
    softmax_online(to_device(np.random.default_rng(0).standard_normal((37, 75), dtype=np.float32))[0])
    q, k, v = to_device(*attention_inputs(B=2, H=3, n=67, d=24)[:3])
    for causal in (False, True):
        attention_v2_fused_rows(q, k, v, causal=causal)
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(day="day03", checks=lambda quick: checks(QUICK_CHECK_N if quick else CHECK_N),
                            sweeps=lambda: [softmax_sweep(), fused_sweep()], ncu_cases=ncu_cases,
                            sanitize=sanitize, ncu_shape=lambda n: dict(NCU_SHAPE))


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time the softmax kernels and the fused rung against torch; save both."""
    return harness.record(recorder(), out_dir, quick=quick)
