"""Inputs and references at full size, shared by every day's recorder (GPU only).

Inputs are random float32 with a seed (``course.checking.random_inputs``), copied to the GPU once so
that timings measure kernels, not transfers. The attention reference is computed one batch element
at a time: a float64 N×N matrix per head at N = 4096 is 128 MiB, all heads at once tens of GiB.
"""

from __future__ import annotations

import numpy as np


def to_device(*arrays):
    """Copy host arrays to the GPU, in order, as a tuple of device arrays."""
    from numba import cuda

    return tuple(cuda.to_device(a) for a in arrays)


def attention_inputs(*, B: int, H: int, n: int, d: int, m: int | None = None, seed: int | None = None):
    """Random q (B, H, n, d), k and v (B, H, m, d) float32 on the host, and the seed used."""
    from course.checking import random_inputs

    rng, seed = random_inputs(seed)
    m = n if m is None else m
    q = rng.standard_normal((B, H, n, d), dtype=np.float32)
    k = rng.standard_normal((B, H, m, d), dtype=np.float32)
    v = rng.standard_normal((B, H, m, d), dtype=np.float32)
    return q, k, v, seed


def attention_reference(q, k, v, *, causal: bool = False, kv_lens=None) -> np.ndarray:
    """``kernels.reference.attention`` in float64, one batch element at a time."""
    from kernels import reference

    return np.concatenate([reference.attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], causal=causal,
                                               kv_lens=None if kv_lens is None else kv_lens[b:b + 1])
                           for b in range(q.shape[0])])


def gemm_inputs(m: int, n: int, k: int, seed: int | None = None):
    """Random a (m, k) and b (k, n) float32 on the host, and the seed used."""
    from course.checking import random_inputs

    rng, seed = random_inputs(seed)
    return rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32), seed
