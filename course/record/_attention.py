"""Helpers shared by the attention recorders of days 2 and 3 (GPU only).

Inputs are random float32 with a seed, the reference is computed one batch element at a time (a
float64 N×N matrix per head at N = 4096 is 128 MiB; all heads at once would be tens of GiB), and
every timed callable is benchmarked with ``course.timing.benchmark`` with a repeat count fitted
to its duration, so the largest sizes stay within a few seconds each.
"""

from __future__ import annotations

import time

import numpy as np


def host_inputs(*, B: int, H: int, n: int, d: int, m: int | None = None, seed: int | None = None):
    """Random q (B, H, n, d), k and v (B, H, m, d) float32 and the seed used."""
    from course.checking import random_inputs

    rng, seed = random_inputs(seed)
    m = n if m is None else m
    q = rng.standard_normal((B, H, n, d), dtype=np.float32)
    k = rng.standard_normal((B, H, m, d), dtype=np.float32)
    v = rng.standard_normal((B, H, m, d), dtype=np.float32)
    return q, k, v, seed


def device_inputs(*arrays):
    """Copy host arrays to the GPU once, so timings measure kernels, not transfers."""
    from numba import cuda

    return tuple(cuda.to_device(a) for a in arrays)


def check_attention(out, q, k, v, *, seed, name, causal=False):
    """Check out (B, H, N, d) against ``kernels.reference.attention``, computed one batch element at a time."""
    from course.checking import check
    from kernels import reference

    ref = np.concatenate([reference.attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], causal=causal)
                          for b in range(q.shape[0])])
    return check(out, ref, name=name, dims=("batch", "head", "row", "col"), seed=seed)


def lazy_case(make, *args):
    """A callable that builds its launch with ``make(*args)`` on the first call and reuses it after.

    Nsight cases are listed in every profiling process but only one runs, so inputs are made lazily.
    """
    launch = []

    def run():
        if not launch:
            launch.append(make(*args))
        launch[0]()

    return run


def _duration_s(fn) -> float:
    """Wall time of one synchronised call, after a first call that compiles and warms up."""
    from numba import cuda

    fn()
    cuda.synchronize()
    start = time.perf_counter()
    fn()
    cuda.synchronize()
    return time.perf_counter() - start


def time_rows(runs: dict, sizes: dict, *, quick: bool = False, flush_l2: bool = False, budget_s: float = 3.0):
    """Benchmark each ``label: (fn, bytes_moved, flops)`` and return one Recording row per label.

    ``bytes_moved`` and ``flops`` are the model's figures for that call (None where meaningless);
    rows carry median, p10 and p90 in ms, GB/s and TFLOP/s derived from the median. ``flush_l2``
    for memory-bound calls whose inputs would otherwise stay in L2 between repeats.
    """
    from course.timing import benchmark

    rows = []
    for label, (fn, bytes_moved, flops) in runs.items():
        once = _duration_s(fn)
        repeat = int(min(50, max(5, (budget_s / 3 if quick else budget_s) / max(once, 1e-6))))
        t = benchmark(fn, warmup=max(2, repeat // 5), repeat=repeat, flush_l2=flush_l2)
        seconds = t.median_ms / 1e3
        rows.append({"rung": label, **sizes, "median_ms": t.median_ms, "p10_ms": t.p10_ms,
                     "p90_ms": t.p90_ms, "repeat": repeat,
                     "gbps": bytes_moved / seconds / 1e9 if bytes_moved else None,
                     "tflops": flops / seconds / 1e12 if flops else None})
        print(f"   {label:<24} N={sizes.get('N')!s:<6} {t.median_ms:9.3f} ms", flush=True)
    return rows


def torch_sdpa(q, k, v, *, causal: bool):
    """A callable running torch's scaled_dot_product_attention in fp32 on copies of q, k, v on the GPU."""
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError("recording needs PyTorch with CUDA for the baseline: pip install torch") from exc
    if not torch.cuda.is_available():
        raise RuntimeError("recording needs PyTorch built with CUDA for the baseline; this torch has none")
    torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 baseline, like our kernels
    tq, tk, tv = (torch.from_numpy(a).cuda() for a in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(tq, tk, tv, is_causal=causal)


def torch_softmax(x):
    """A callable running torch.softmax over the last axis of a copy of x (rows, cols) on the GPU."""
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError("recording needs PyTorch with CUDA for the baseline: pip install torch") from exc
    tx = torch.from_numpy(x).cuda()
    return lambda: torch.softmax(tx, dim=-1)
