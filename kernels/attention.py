"""Attention ``O = softmax(scale * Q Kᵀ) V`` in numba.cuda: the first rungs of the ladder.

Shapes: q (batch, heads, N, head_dim), k and v (batch, heads, M, head_dim), o (batch, heads, N,
head_dim), all float32; ``scale`` defaults to ``1/sqrt(head_dim)``. The float64 reference is
``kernels.reference.attention``.

- ``attention_v1_naive`` (day 2): three kernels, each a pass over global memory: ``scores_kernel``
  writes S = scale·QKᵀ (N×M per head), ``kernels.softmax.softmax_rows_kernel`` turns S into P,
  ``pv_kernel`` computes O = PV. S and P live in global memory: O(N·M) bytes written and read.
- ``attention_v2_fused_rows`` (day 3): one kernel, one thread per query row; an online softmax
  (running max, running sum, rescaled accumulator) over the keys, so no N×M matrix exists.
  Reads K and V once per query row; ``causal=True`` stops at key i for query i.

The rungs after these, ``attention_v3_tiled`` to ``attention_v6_register_tiles`` (day 5: query tiles
per block, K and V tiles staged in shared memory, causal masking and ``kv_lens``, head_dim fixed at
compile time, register tiles), live in ``kernels/flash_attention.py``, whose ``RUNGS`` holds the whole
ladder, v1 to v6.

Each launcher validates, sizes the grid and launches the kernel given as ``kernel=`` (the naive
pipeline: ``scores_kernel=``, ``softmax_kernel=``, ``pv_kernel=``), the course's own by default.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from kernels.launching import cdiv, default_scale, output_array, require_bool, require_float32
from kernels.registry import Rung, ladder
from kernels.softmax import SOFTMAX_THREADS, softmax_rows_kernel

__all__ = ["scores_kernel", "attention_scores", "pv_kernel", "attention_pv", "attention_v1_naive",
           "HEAD_DIM_MAX", "attention_v2_fused_rows_kernel", "attention_v2_fused_rows", "check_qkv",
           "RUNGS"]

# Threads per block of the elementwise kernels (scores, PV) and of the fused-rows kernel.
THREADS = 64
# The fused kernel keeps a query row and its output accumulator in per-thread arrays, whose
# length numba needs at compile time; launchers reject a larger head_dim.
HEAD_DIM_MAX = 128
# The name day 3's exercise used before it said HEAD_DIM_MAX: kept so that work written against an
# earlier release still imports (not in __all__; nothing of the course uses it).
MAX_HEAD_DIM = HEAD_DIM_MAX
# The dimensions of q and of k, v, named in the launchers' error messages.
Q_DIMS = ("batch", "heads", "n_queries", "head_dim")
KV_DIMS = ("batch", "heads", "n_keys", "head_dim")


def check_qkv(q, k, v):
    """Validate q (B, H, N, d), k and v (B, H, M, d) float32, C-contiguous; return (B, H, N, M, d)."""
    batch, heads, n_queries, head_dim = require_float32("q", q, (None, None, None, None), dims=Q_DIMS)
    n_keys = require_float32("k", k, (batch, heads, None, head_dim), dims=KV_DIMS)[2]
    require_float32("v", v, (batch, heads, n_keys, head_dim), dims=KV_DIMS)
    if head_dim == 0:
        raise ValueError("q must have head_dim >= 1, got shape " + str(tuple(q.shape)))
    return batch, heads, n_queries, n_keys, head_dim


@cuda.jit
def scores_kernel(q, k, s, scale):
    """s[b, h, i, j] = scale * dot(q[b, h, i, :], k[b, h, j, :]); one thread per score.

    Grid (ceil(N*M / threads), heads, batch): x walks the N×M scores of one head row by row.
    """
    flat = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    n_keys = k.shape[2]
    if flat >= q.shape[2] * n_keys:
        return
    i = flat // n_keys
    j = flat % n_keys
    acc = float32(0.0)
    for c in range(q.shape[3]):
        acc += q[b, h, i, c] * k[b, h, j, c]
    s[b, h, i, j] = acc * scale


def attention_scores(q, k, *, scale=None, out=None, kernel=scores_kernel):
    """S = scale * Q Kᵀ with ``scores_kernel``: q (B, H, N, d), k (B, H, M, d) -> S (B, H, N, M)."""
    batch, heads, n_queries, head_dim = require_float32("q", q, (None, None, None, None))
    n_keys = require_float32("k", k, (batch, heads, None, head_dim))[2]
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, n_keys), like=q)
    if out.size:
        kernel[(cdiv(n_queries * n_keys, THREADS), heads, batch), THREADS](q, k, out, scale)
    return out


@cuda.jit
def pv_kernel(p, v, o):
    """o[b, h, i, c] = sum over j of p[b, h, i, j] * v[b, h, j, c]; one thread per output element.

    Grid (ceil(N*d / threads), heads, batch): x walks the N×d outputs of one head row by row.
    """
    flat = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    head_dim = v.shape[3]
    if flat >= p.shape[2] * head_dim:
        return
    i = flat // head_dim
    c = flat % head_dim
    acc = float32(0.0)
    for j in range(v.shape[2]):
        acc += p[b, h, i, j] * v[b, h, j, c]
    o[b, h, i, c] = acc


def attention_pv(p, v, *, out=None, kernel=pv_kernel):
    """O = P V with ``pv_kernel``: p (B, H, N, M), v (B, H, M, d) -> O (B, H, N, d)."""
    batch, heads, n_queries, n_keys = require_float32("p", p, (None, None, None, None))
    head_dim = require_float32("v", v, (batch, heads, n_keys, None))[3]
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=p)
    if out.size:
        kernel[(cdiv(n_queries * head_dim, THREADS), heads, batch), THREADS](p, v, out)
    return out


def attention_v1_naive(q, k, v, *, scale=None, out=None, scores_kernel=scores_kernel,
                       softmax_kernel=softmax_rows_kernel, pv_kernel=pv_kernel):
    """Naive attention: scores, row softmax, PV as three launches; S and P are N×M arrays in global memory.

    q (B, H, N, d), k and v (B, H, M, d) float32, NumPy or device arrays, M >= 1; returns O (B, H, N, d).
    The three kernels are launched with the grids of ``attention_scores``, ``softmax_rows`` and
    ``attention_pv``.
    """
    batch, heads, n_queries, n_keys, head_dim = check_qkv(q, k, v)
    if n_keys == 0:
        raise ValueError("k must hold at least one key (M >= 1) for the naive pipeline: "
                         "the softmax of an empty row is undefined")
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q)
    s = attention_scores(q, k, scale=scale, kernel=scores_kernel)
    p = output_array("p", None, s.shape, like=s)
    rows = batch * heads * n_queries
    if rows:
        # The softmax kernel sees S as a matrix of B*H*N rows of M scores (a view, no copy).
        softmax_kernel[rows, SOFTMAX_THREADS](s.reshape(rows, n_keys), p.reshape(rows, n_keys))
    return attention_pv(p, v, out=out, kernel=pv_kernel)


@cuda.jit
def attention_v2_fused_rows_kernel(q, k, v, o, scale, causal):
    """One thread per query row (b, h, i): o[b, h, i] = softmax(scale * q_i Kᵀ) V in one pass over the keys.

    Grid (ceil(N / threads), heads, batch). With ``causal`` query i reads keys 0..i only. A row with
    no key (M == 0) gets zeros.
    """
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    if i >= q.shape[2]:
        return
    head_dim = q.shape[3]
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    for c in range(head_dim):
        q_row[c] = q[b, h, i, c] * scale  # read the query row once, scaled once
        acc[c] = 0.0

    n_keys = k.shape[2]
    if causal:
        n_keys = min(i + 1, n_keys)  # keys after i are masked: skip them instead of reading them
    m = float32(-math.inf)  # running max of the scores seen
    l = float32(0.0)  # running sum of exp(score - m)
    for j in range(n_keys):
        score = float32(0.0)
        for c in range(head_dim):
            score += q_row[c] * k[b, h, j, c]
        m_new = max(m, score)
        rescale = math.exp(m - m_new)  # exp(-inf) = 0 at the first key: nothing to rescale yet
        p = math.exp(score - m_new)
        l = l * rescale + p
        for c in range(head_dim):
            acc[c] = acc[c] * rescale + p * v[b, h, j, c]
        m = m_new

    for c in range(head_dim):
        if l > 0:
            o[b, h, i, c] = acc[c] / l
        else:
            o[b, h, i, c] = 0.0


def attention_v2_fused_rows(q, k, v, *, causal=False, scale=None, out=None, kernel=attention_v2_fused_rows_kernel):
    """Fused attention, one thread per query row, no N×M matrix: returns O (B, H, N, d).

    q (B, H, N, d), k and v (B, H, M, d) float32, NumPy or device arrays, d <= HEAD_DIM_MAX.
    ``causal``: query i attends to keys j <= i.
    """
    batch, heads, n_queries, n_keys, head_dim = check_qkv(q, k, v)
    if head_dim > HEAD_DIM_MAX:
        raise ValueError(f"q must have head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX), got {head_dim}")
    causal = require_bool("causal", causal)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q)
    if out.size:
        kernel[(cdiv(n_queries, THREADS), heads, batch), THREADS](q, k, v, out, scale, causal)
    return out


RUNGS = ladder(
    Rung("attention_v1_naive", attention_v1_naive,
         "three kernels (scores, row softmax, PV), S and P in global memory"),
    Rung("attention_v2_fused_rows", attention_v2_fused_rows,
         "one thread per query row with an online softmax: no N×M matrix"),
)
