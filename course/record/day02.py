"""GPU recordings of day 2: the naive attention pipeline (``kernels.attention.attention_v1_naive``).

A declaration for ``course.record.harness``: the pipeline and each of its three kernels are checked
at full size against the float64 reference, then, for every N in ``SIZES``, the whole pipeline,
each of its kernels alone and torch's ``scaled_dot_product_attention`` (fp32) are timed into
``day02_naive_timing.json``. A row of the whole pipeline names its rung by its key in
``kernels.attention.RUNGS`` (``rung``: ``attention_v1_naive``), torch's ``rung`` is ``torch_sdpa``; a row of
one kernel timed alone is no rung's and names the kernel instead (``kernel``: ``scores_kernel``,
``softmax_rows_kernel`` or ``pv_kernel``, the rung's ``KERNELS``); every row: N, B, H, d, median_ms, p10_ms,
p90_ms, repeat, gbps, tflops. ``ncu_cases()`` gives the launches whose DRAM bytes Nsight Compute records as
``day02_dram_bytes`` (label ``attention_v1_naive``, ``causal`` False as in day 5's rows of the rung, shape
``NCU_SHAPE``); ``sanitize()`` launches each kernel once, small.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import attention as model
from course.record import baselines, harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from course.record.inputs import attention_inputs, attention_reference, to_device
from kernels import attention

# Shape of the checks, timings and Nsight cases (batch, heads, head_dim); N = M varies.
SHAPE = {"B": 4, "H": 16, "d": 64}
SIZES = (256, 512, 1024, 2048, 4096)
QUICK_SIZES = (256, 1024)
CHECK_N = 4096
QUICK_CHECK_N = 1024
NCU_SHAPE = SHAPE
NCU_SIZES = SIZES
PIPELINE = attention.RUNGS["attention_v1_naive"].name       # the rung, timed whole and kernel by kernel
# Its kernels by name ({launcher keyword: kernel name}); the row of one kernel timed alone names it in ``kernel``.
KERNELS = {keyword: kernel.__name__ for keyword, kernel in attention.RUNGS[PIPELINE].kernels.items()}


def _pipeline(q, k, v):
    """attention_v1_naive on device arrays as four launches: the whole and each of its three kernels.

    Returns ``({name: callable}, (s, p, o))``, named ``PIPELINE`` and the kernels' names (``KERNELS``); the
    buffers hold the last results.
    """
    from numba import cuda

    from kernels.attention import attention_pv, attention_scores
    from kernels.softmax import softmax_rows

    rung = attention.RUNGS[PIPELINE]
    kernels = rung.kernels
    batch, heads, n, _ = q.shape
    s = cuda.device_array((batch, heads, n, n), np.float32)
    p = cuda.device_array((batch, heads, n, n), np.float32)
    o = cuda.device_array(q.shape, np.float32)
    s_rows, p_rows = s.reshape(batch * heads * n, n), p.reshape(batch * heads * n, n)
    return {
        PIPELINE: lambda: rung(q, k, v, out=o),
        KERNELS["scores_kernel"]: lambda: attention_scores(q, k, out=s, kernel=kernels["scores_kernel"]),
        KERNELS["softmax_kernel"]: lambda: softmax_rows(s_rows, out=p_rows, kernel=kernels["softmax_kernel"]),
        KERNELS["pv_kernel"]: lambda: attention_pv(p, v, out=o, kernel=kernels["pv_kernel"]),
    }, (s, p, o)


def checks(n: int = CHECK_N) -> list[Check]:
    """attention_v1_naive at (B, H, n, d); then each kernel on its own exact input, for two heads."""
    from kernels import reference

    qh, kh, vh, seed = attention_inputs(n=n, **SHAPE)
    runs, (s, p, o) = _pipeline(*to_device(qh, kh, vh))
    shape = dict(N=n, **SHAPE)
    found = [Check(f"O of {PIPELINE}", runs[PIPELINE], o.copy_to_host, lambda: attention_reference(qh, kh, vh),
                   seed=seed, poisoned=(o,), columns=dict(rung=PIPELINE, **shape),
                   options=dict(dims=("batch", "head", "row", "col")))]
    scale = 1.0 / np.sqrt(SHAPE["d"])
    pair = dict(dims=("row", "col"))
    scores, softmax, pv = (KERNELS[keyword] for keyword in ("scores_kernel", "softmax_kernel", "pv_kernel"))
    for b, h in ((0, 0), (SHAPE["B"] - 1, SHAPE["H"] - 1)):
        where = f"batch {b} head {h}"
        q64, k64, v64 = (a[b, h].astype(np.float64) for a in (qh, kh, vh))
        s_bh, p_bh, o_bh = (lambda a=a, b=b, h=h: a[b, h].copy_to_host() for a in (s, p, o))
        found += [
            Check(f"S of {scores}, {where}", runs[scores], s_bh,
                  lambda q64=q64, k64=k64: scale * q64 @ k64.T,
                  seed=seed, poisoned=(s,), columns=dict(kernel=scores, **shape), options=pair),
            Check(f"P of {softmax}, {where}", runs[softmax], p_bh,
                  lambda s_bh=s_bh: reference.softmax(s_bh().astype(np.float64), axis=-1),
                  seed=seed, poisoned=(p,), columns=dict(kernel=softmax, **shape),
                  options=dict(pair, rows_sum_to_one=True)),
            Check(f"O of {pv}, {where}", runs[pv], o_bh,
                  lambda p_bh=p_bh, v64=v64: p_bh().astype(np.float64) @ v64,
                  seed=seed, poisoned=(o,), columns=dict(kernel=pv, **shape), options=pair),
        ]
    return found


def check_full_size(n: int = CHECK_N) -> list[dict]:
    """Run :func:`checks` at ``n``; one row of errors per check."""
    return harness.run_checks(checks(n))


def _timed(n: int) -> list[Timed]:
    B, H, d = SHAPE["B"], SHAPE["H"], SHAPE["d"]
    qh, kh, vh, _ = attention_inputs(n=n, **SHAPE)
    launches, _ = _pipeline(*to_device(qh, kh, vh))
    heads, qkv_bytes, nn_bytes = B * H, B * H * n * d * 4, B * H * n * n * 4
    scores, softmax, pv = (KERNELS[keyword] for keyword in ("scores_kernel", "softmax_kernel", "pv_kernel"))
    return [
        Timed(PIPELINE, launches[PIPELINE], model.compulsory_bytes_naive(B, H, n, d), model.flops_attention(B, H, n, d)),
        # each kernel alone: no rung's row, named in its kernel column
        Timed(None, launches[scores], 2 * qkv_bytes + nn_bytes, 2 * heads * n * n * d, {"kernel": scores}),
        Timed(None, launches[softmax], 2 * nn_bytes, None, {"kernel": softmax}),
        Timed(None, launches[pv], nn_bytes + 2 * qkv_bytes, 2 * heads * n * n * d, {"kernel": pv}),
        Timed("torch_sdpa", baselines.torch_sdpa(qh, kh, vh, causal=False), model.compulsory_bytes_fused(B, H, n, d),
              model.flops_attention(B, H, n, d)),
    ]


def naive_sweep() -> Sweep:
    return Sweep(
        name="day02_naive_timing",
        notes=(f"{PIPELINE} (scores, softmax_rows, pv launches) and each of its kernels alone (rows naming it in "
               f"kernel: {', '.join(KERNELS.values())}; no rung), fp32, "
               f"B={SHAPE['B']} H={SHAPE['H']} d={SHAPE['d']}, M = N; torch_sdpa is "
               "torch.nn.functional.scaled_dot_product_attention in fp32 (TF32 off). gbps: compulsory "
               "bytes of the call (course.models.attention) per second; tflops: 2 FLOPs per multiply-add."),
        points=SIZES, quick_points=QUICK_SIZES, shape=lambda n: dict(N=n, **SHAPE), cases=_timed)


def naive_timing(quick: bool = False):
    """Time attention_v1_naive, each of its kernels and torch SDPA for every N; return the Recording."""
    from course.timing import measure_ceilings

    return harness.record_sweep(naive_sweep(), quick=quick, ceilings=measure_ceilings())


def _naive_launch(n: int):
    launches, _ = _pipeline(*to_device(*attention_inputs(n=n, **NCU_SHAPE)[:3]))
    return launches[PIPELINE]


def ncu_cases() -> list[NcuCase]:
    """One attention_v1_naive at (NCU_SHAPE, N) for each N; inputs are made on the first call."""
    return [NcuCase(PIPELINE, n, harness.lazy(_naive_launch, n), {"causal": False}) for n in NCU_SIZES]


def sanitize() -> None:
    """Launch scores, softmax_rows, pv and the whole pipeline once at an awkward small size."""
    from numba import cuda

    launches, _ = _pipeline(*to_device(*attention_inputs(B=2, H=3, n=67, d=24)[:3]))
    for run in launches.values():
        run()
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(day="day02", checks=lambda quick: checks(QUICK_CHECK_N if quick else CHECK_N),
                            sweeps=lambda: [naive_sweep()], ncu_cases=ncu_cases, sanitize=sanitize,
                            ncu_shape=lambda n: dict(NCU_SHAPE))


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time the naive pipeline, its kernels and torch SDPA; save the recording."""
    return harness.record(recorder(), out_dir, quick=quick)
