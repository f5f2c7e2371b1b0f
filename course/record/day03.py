"""GPU recordings of day 3: online softmax and fused attention, one query row per thread.

``record(out_dir)`` checks ``softmax_online`` and ``attention_v2_fused_rows`` (causal and not) at
full size against the float64 reference, then writes two recordings:

- ``day03_softmax_timing.json``: ``softmax_rows`` (three reads per element), ``softmax_online``
  (two reads) and ``torch.softmax`` on (``SOFTMAX_ROWS``, N) matrices; rows: rung, N (row length),
  rows, median_ms, p10_ms, p90_ms, gbps (one read and one write of the matrix per second).
- ``day03_fused_timing.json``: ``v2_fused_rows`` and ``v1_naive`` against torch SDPA fp32, causal
  and not; rows: rung, N, B, H, d, causal, median_ms, p10_ms, p90_ms, gbps, tflops.

``ncu_cases()`` gives the launches whose DRAM bytes Nsight Compute records as ``day03_dram_bytes``
(labels ``v2_fused_rows`` and ``v2_fused_rows_causal``, shape ``NCU_SHAPE``); ``sanitize()``
launches each kernel once at a small awkward size.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import attention as model
from course.record._attention import (check_attention, device_inputs, host_inputs, lazy_case,
                                      time_rows, torch_sdpa, torch_softmax)

SHAPE = {"B": 4, "H": 16, "d": 64}
SIZES = (256, 512, 1024, 2048, 4096)
QUICK_SIZES = (256, 1024)
CHECK_N = 4096
NCU_SHAPE = SHAPE
NCU_SIZES = SIZES
# Softmax timing: this many rows of length N (a B·H·N score matrix at B·H = 4, N = 4096 has 16384).
SOFTMAX_ROWS = 16384
SOFTMAX_SIZES = (256, 512, 1024, 2048, 4096, 8192)


def check_full_size(n: int = CHECK_N) -> None:
    """Check softmax_online on large logits and attention_v2_fused_rows (causal and not) at (B, H, n, d)."""
    from course.checking import check, random_inputs
    from kernels import reference
    from kernels.attention import attention_v2_fused_rows
    from kernels.softmax import softmax_online

    rng, seed = random_inputs()
    x = (rng.standard_normal((SOFTMAX_ROWS, n), dtype=np.float32) * 1e4).astype(np.float32)
    (xd,) = device_inputs(x)
    check(softmax_online(xd).copy_to_host(), reference.softmax(x.astype(np.float64), axis=-1),
          name="softmax_online, logits of size 1e4", dims=("row", "col"), seed=seed, rows_sum_to_one=True)
    qh, kh, vh, seed = host_inputs(n=n, **SHAPE)
    q, k, v = device_inputs(qh, kh, vh)
    for causal in (False, True):
        out = attention_v2_fused_rows(q, k, v, causal=causal).copy_to_host()
        check_attention(out, qh, kh, vh, seed=seed, causal=causal,
                        name=f"O of attention_v2_fused_rows, causal={causal}")


def softmax_timing(quick: bool = False):
    """Time softmax_rows, softmax_online and torch.softmax for every row length N; return the Recording."""
    from course.records import new_recording
    from course.timing import measure_ceilings
    from kernels.softmax import softmax_online, softmax_rows

    rec = new_recording("day03_softmax_timing", ceilings=measure_ceilings())
    rec.notes = (f"row softmax of a ({SOFTMAX_ROWS}, N) float32 matrix: softmax_rows reads each element 3 "
                 "times, softmax_online twice; torch_softmax is torch.softmax. gbps: one read and one "
                 "write of the matrix per second (the compulsory traffic), L2 flushed between repeats.")
    for n in (QUICK_SIZES if quick else SOFTMAX_SIZES):
        x = np.random.default_rng(n).standard_normal((SOFTMAX_ROWS, n), dtype=np.float32)
        (xd,) = device_inputs(x)
        out = device_inputs(np.empty_like(x))[0]
        compulsory = 2 * x.nbytes
        runs = {"softmax_rows": (lambda: softmax_rows(xd, out=out), compulsory, None),
                "softmax_online": (lambda: softmax_online(xd, out=out), compulsory, None),
                "torch_softmax": (torch_softmax(x), compulsory, None)}
        for row in time_rows(runs, {"N": n, "rows": SOFTMAX_ROWS}, quick=quick, flush_l2=True):
            rec.add(**row)
    return rec


def fused_timing(quick: bool = False):
    """Time attention_v2_fused_rows (causal and not), attention_v1_naive and torch SDPA; return the Recording."""
    from course.records import new_recording
    from course.timing import measure_ceilings
    from kernels.attention import attention_v1_naive, attention_v2_fused_rows

    rec = new_recording("day03_fused_timing", ceilings=measure_ceilings())
    rec.notes = ("attention_v2_fused_rows (one thread per query row, online softmax) and attention_v1_naive "
                 f"against torch.nn.functional.scaled_dot_product_attention, fp32, B={SHAPE['B']} "
                 f"H={SHAPE['H']} d={SHAPE['d']}, M = N. gbps: compulsory bytes per second; tflops: "
                 "2 FLOPs per multiply-add over the (query, key) pairs computed (about half when causal).")
    B, H, d = SHAPE["B"], SHAPE["H"], SHAPE["d"]
    for n in (QUICK_SIZES if quick else SIZES):
        qh, kh, vh, _ = host_inputs(n=n, **SHAPE)
        q, k, v = device_inputs(qh, kh, vh)
        o = device_inputs(np.empty_like(qh))[0]
        fused_bytes = model.compulsory_bytes_fused(B, H, n, d)
        for causal in (False, True):
            suffix = "_causal" if causal else ""
            flops = model.flops_attention(B, H, n, d, causal=causal)
            runs = {f"v2_fused_rows{suffix}": (lambda c=causal: attention_v2_fused_rows(q, k, v, causal=c, out=o),
                                               fused_bytes, flops),
                    f"torch_sdpa{suffix}": (torch_sdpa(qh, kh, vh, causal=causal), fused_bytes, flops)}
            if not causal:
                runs["v1_naive"] = (lambda: attention_v1_naive(q, k, v, out=o),
                                    model.compulsory_bytes_naive(B, H, n, d), flops)
            for row in time_rows(runs, dict(N=n, **SHAPE, causal=causal), quick=quick):
                rec.add(**row)
        del q, k, v, o
    return rec


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time the softmax kernels and the fused rung against torch; save both."""
    out_dir = pathlib.Path(out_dir)
    check_full_size(1024 if quick else CHECK_N)
    return [softmax_timing(quick).save(out_dir / "day03_softmax_timing.json"),
            fused_timing(quick).save(out_dir / "day03_fused_timing.json")]


def _fused_launch(n: int, causal: bool):
    from kernels.attention import attention_v2_fused_rows

    qh, kh, vh, _ = host_inputs(n=n, **NCU_SHAPE)
    q, k, v = device_inputs(qh, kh, vh)
    o = device_inputs(np.empty_like(qh))[0]
    return lambda: attention_v2_fused_rows(q, k, v, causal=causal, out=o)


def ncu_cases() -> list:
    """(label, N, run): one attention_v2_fused_rows at (NCU_SHAPE, N), causal and not; lazy inputs."""
    return [(f"v2_fused_rows{'_causal' if causal else ''}", n, lazy_case(_fused_launch, n, causal))
            for causal in (False, True) for n in NCU_SIZES]


def sanitize() -> None:
    """Launch softmax_online and attention_v2_fused_rows (causal and not) once at a small awkward size."""
    from numba import cuda

    from kernels.attention import attention_v2_fused_rows
    from kernels.softmax import softmax_online

    x = np.random.default_rng(0).standard_normal((37, 75), dtype=np.float32)
    softmax_online(device_inputs(x)[0])
    q, k, v = device_inputs(*host_inputs(B=2, H=3, n=67, d=24)[:3])
    for causal in (False, True):
        attention_v2_fused_rows(q, k, v, causal=causal)
    cuda.synchronize()
