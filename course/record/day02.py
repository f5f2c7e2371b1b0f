"""GPU recordings of day 2: the naive attention pipeline (``kernels.attention.attention_v1_naive``).

``record(out_dir)`` checks the pipeline and each of its kernels at full size against the float64
reference, then times, for every N in ``SIZES``, the whole pipeline, each of its three kernels
alone and torch's ``scaled_dot_product_attention`` (fp32), and writes ``day02_naive_timing.json``
(rows: rung = ``v1_naive``, ``scores_kernel``, ``softmax_rows_kernel``, ``pv_kernel`` or
``torch_sdpa``; N, B, H, d, median_ms, p10_ms, p90_ms, repeat, gbps, tflops).
``ncu_cases()`` gives the launches whose DRAM bytes Nsight Compute records as ``day02_dram_bytes``
(label ``v1_naive``, shape ``NCU_SHAPE``); ``sanitize()`` launches each kernel once, small.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import attention as model
from course.record._attention import (check_attention, device_inputs, host_inputs, lazy_case,
                                      time_rows, torch_sdpa)

# Shape of the checks, timings and Nsight cases (batch, heads, head_dim); N = M varies.
SHAPE = {"B": 4, "H": 16, "d": 64}
SIZES = (256, 512, 1024, 2048, 4096)
QUICK_SIZES = (256, 1024)
CHECK_N = 4096
NCU_SHAPE = SHAPE
NCU_SIZES = SIZES


def _pipeline(q, k, v):
    """attention_v1_naive on device arrays as four timeable launches: the whole and its three kernels.

    Returns ``({label: callable}, (s, p, o))``; the buffers hold the last results.
    """
    from numba import cuda

    from kernels.attention import attention_pv, attention_scores, attention_v1_naive
    from kernels.softmax import softmax_rows

    batch, heads, n, _ = q.shape
    s = cuda.device_array((batch, heads, n, n), np.float32)
    p = cuda.device_array((batch, heads, n, n), np.float32)
    o = cuda.device_array(q.shape, np.float32)
    s_rows, p_rows = s.reshape(batch * heads * n, n), p.reshape(batch * heads * n, n)
    return {
        "v1_naive": lambda: attention_v1_naive(q, k, v, out=o),
        "scores_kernel": lambda: attention_scores(q, k, out=s),
        "softmax_rows_kernel": lambda: softmax_rows(s_rows, out=p_rows),
        "pv_kernel": lambda: attention_pv(p, v, out=o),
    }, (s, p, o)


def check_full_size(n: int = CHECK_N) -> None:
    """Check attention_v1_naive at (B, H, n, d), then each kernel on its own exact input for two heads."""
    from course.checking import check
    from kernels import reference

    qh, kh, vh, seed = host_inputs(n=n, **SHAPE)
    q, k, v = device_inputs(qh, kh, vh)
    runs, (s, p, o) = _pipeline(q, k, v)
    runs["v1_naive"]()
    check_attention(o.copy_to_host(), qh, kh, vh, seed=seed, name="O of attention_v1_naive")
    for label in ("scores_kernel", "softmax_rows_kernel", "pv_kernel"):
        runs[label]()
    scale = 1.0 / np.sqrt(SHAPE["d"])
    for b, h in ((0, 0), (SHAPE["B"] - 1, SHAPE["H"] - 1)):
        where = f"batch {b} head {h}"
        s_bh, p_bh, o_bh = (a[b, h].copy_to_host() for a in (s, p, o))
        q64, k64, v64 = (a[b, h].astype(np.float64) for a in (qh, kh, vh))
        check(s_bh, scale * q64 @ k64.T, name=f"S of scores_kernel, {where}", dims=("row", "col"), seed=seed)
        check(p_bh, reference.softmax(s_bh.astype(np.float64), axis=-1), name=f"P of softmax_rows_kernel, {where}",
              dims=("row", "col"), seed=seed, rows_sum_to_one=True)
        check(o_bh, p_bh.astype(np.float64) @ v64, name=f"O of pv_kernel, {where}", dims=("row", "col"), seed=seed)


def naive_timing(quick: bool = False):
    """Time attention_v1_naive, each of its kernels and torch SDPA for every N; return the Recording."""
    from course.records import new_recording
    from course.timing import measure_ceilings

    rec = new_recording("day02_naive_timing", ceilings=measure_ceilings())
    rec.notes = ("attention_v1_naive (scores, softmax_rows, pv launches) and each kernel alone, fp32, "
                 f"B={SHAPE['B']} H={SHAPE['H']} d={SHAPE['d']}, M = N; torch_sdpa is "
                 "torch.nn.functional.scaled_dot_product_attention in fp32 (TF32 off). gbps: compulsory "
                 "bytes of the call (course.models.attention) per second; tflops: 2 FLOPs per multiply-add.")
    B, H, d = SHAPE["B"], SHAPE["H"], SHAPE["d"]
    for n in (QUICK_SIZES if quick else SIZES):
        qh, kh, vh, _ = host_inputs(n=n, **SHAPE)
        q, k, v = device_inputs(qh, kh, vh)
        launches, _ = _pipeline(q, k, v)
        heads, qkv_bytes, nn_bytes = B * H, B * H * n * d * 4, B * H * n * n * 4
        runs = {
            "v1_naive": (launches["v1_naive"], model.compulsory_bytes_naive(B, H, n, d),
                         model.flops_attention(B, H, n, d)),
            "scores_kernel": (launches["scores_kernel"], 2 * qkv_bytes + nn_bytes, 2 * heads * n * n * d),
            "softmax_rows_kernel": (launches["softmax_rows_kernel"], 2 * nn_bytes, None),
            "pv_kernel": (launches["pv_kernel"], nn_bytes + 2 * qkv_bytes, 2 * heads * n * n * d),
            "torch_sdpa": (torch_sdpa(qh, kh, vh, causal=False), model.compulsory_bytes_fused(B, H, n, d),
                           model.flops_attention(B, H, n, d)),
        }
        for row in time_rows(runs, dict(N=n, **SHAPE), quick=quick):
            rec.add(**row)
        del q, k, v, launches, runs
    return rec


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time the naive pipeline, its kernels and torch SDPA; save the recording."""
    check_full_size(1024 if quick else CHECK_N)
    return [naive_timing(quick).save(pathlib.Path(out_dir) / "day02_naive_timing.json")]


def _naive_launch(n: int):
    qh, kh, vh, _ = host_inputs(n=n, **NCU_SHAPE)
    launches, _ = _pipeline(*device_inputs(qh, kh, vh))
    return launches["v1_naive"]


def ncu_cases() -> list:
    """(label, N, run): one attention_v1_naive at (NCU_SHAPE, N); inputs are made on the first call."""
    return [("v1_naive", n, lazy_case(_naive_launch, n)) for n in NCU_SIZES]


def sanitize() -> None:
    """Launch scores, softmax_rows, pv and the whole pipeline once at an awkward small size."""
    from numba import cuda

    qh, kh, vh, _ = host_inputs(B=2, H=3, n=67, d=24)
    launches, _ = _pipeline(*device_inputs(qh, kh, vh))
    for run in launches.values():
        run()
    cuda.synchronize()
