"""A llama block in fewer launches (day 10): RMSNorm folded into the GEMV that reads it, gate and up with SwiGLU, the
residual add in the GEMV's epilogue. Q4_1 weights in their GGUF bytes, float32 activations, a step's T tokens in
one launch as ``kernels.token_gemv`` takes them (a warp per row of W, ``TOKENS_PER_PASS`` tokens a pass, a running
sum per token in registers).

For a model this small a decode step's time is its launches, not its bytes (day 10's lesson): the unfused block of
``inference.engine`` launches RMSNorm, three GEMVs, RoPE twice, the cache write, attention (two kernels), a GEMV and
an add, RMSNorm, two GEMVs, SwiGLU, a GEMV and an add: 17. With these rungs it launches 7 kernels:

- ``q4_1_norm_qkv_tokens``: q, k, v = W_qkv rmsnorm(x) for the concatenated rows of Wq, Wk and Wv (the engine
  concatenates them once, at load): each warp computes its tokens' inverse root mean square itself (K values from
  L1 and L2, every warp the same), multiplies W by x * norm_weight and scales each token's sum once by it, then
  writes the row into q, k or v by its index.
- ``q4_1_residual_gemm_tokens``: y = x W^T + residual, the add in the epilogue (``out`` may be ``residual``: each
  element is read and written by the one lane that owns it), for Wo and Wdown.
- ``q4_1_norm_swiglu_tokens``: a = silu(Wgate rmsnorm(x)) * (Wup rmsnorm(x)): warp n computes row n of both
  matrices, which share the normalized x and so its per-block sum (the minimum's term), then one silu and one
  product; the (T, ffn) gate and up never reach memory.
- ``rope_qk_cache_write``: RoPE on q and k and the cache write in one launch: block t turns token t's query heads in
  place, and its key heads on their way to the slot of its position, where its values go too. The same arithmetic as
  ``kernels.llama_layers.rope_pairs_from_table`` and the same slot as ``kernels.kv_cache.kv_cache_write``: the same
  bits as those three launches.

At one token a step each of those launches is latency, not bytes. Four more rungs shorten it, and a fifth does not:

- ``q4_1_norm_qkv_quarters``: the norm and Q, K, V launch with ``kernels.token_gemv``'s quarters (four lanes a
  block, a word of codes each, a lane's loads issued before their arithmetic), a pass of one token when the step
  has one, and each token's sum of squares made from the x the GEMV loads (no loop of loads of its own). The first
  rungs keep 18 of a warp's 32 lanes busy on SmolLM2's rows of 576 and walk a block byte by byte: at one token a
  step their time is latency, not bytes (Nsight on an H100: 11 to 16 us a launch for a few hundred KB).
- ``q4_1_residual_quarters``: the residual GEMV the same way.
- ``q4_1_norm_swiglu_quarters``: the norm, gate, up and SwiGLU launch the same way, both matrices' words of a
  lane's two units loaded before their arithmetic.
- ``q4_1_norm_qkv_rope_cache``: ``q4_1_norm_qkv_quarters`` with RoPE and the cache write in its epilogue: two
  adjacent warps compute a pair of rows (2i, 2i + 1), which RoPE turns together. A block then launches 6 kernels
  (split-K attention is two); ``inference.engine``'s fused engine runs this rung, ``q4_1_residual_quarters`` (twice),
  ``q4_1_norm_swiglu_quarters`` and day 7's ``gqa_decode_split_k``.
- ``gqa_decode_one_pass`` (``kernels.gqa_attention.decode``): day 7's split-K decode attention and its merge in one
  launch: each block writes its partition's partials, fences them, takes a ticket, and the last block of each KV
  head merges them. One launch fewer is not a shorter step. Predicted: a block of 5 kernels, the merge's launch
  (a few microseconds) saved 30 times a step. Measured on an H100 (2026-12-06; the same bits as split-K and its
  merge):
  - alone, SmolLM2's heads at 300 positions, partitions of 32: 14.9 us against 12.7;
  - in the fused engine's graph: a step of 1.16 to 1.19 ms against 1.10 to 1.11, 153 kernels against 183.

  The fence and the ticket's atomic lengthen every block, and the last block's merge starts only after its own
  partition, while in a graph the merge kernel starts about when the last partition ends. The engine keeps the
  two launches.

Numerics: the norm's scale multiplies a token's finished sum instead of every value, so the results differ from the
unfused engine's in float32's last bits (the NumPy model's order is a third one). ``tests/test_kernels_pattern.py``
holds each rung to its float64 reference, ``tests/test_fused_layers.py`` ``rope_qk_cache_write`` and
``q4_1_norm_qkv_rope_cache`` to the launches they replace, bit for bit, and ``tests/test_inference_engine.py`` the fused engine's greedy tokens to the NumPy
model's.

The quarters rungs turn each 4-bit code into a float through 2^23's bits (``kernels.token_gemv.nibble``: a masked
or and a subtraction, exact) where numba would convert through int64: the same numbers, and a graph step about 16 us
shorter on an H100 (``kernels.token_gemv`` gives the measurements).

Each is a ``<rung>_kernel`` plus its launcher, ``kernel=`` the kernel to launch (as every rung of the course); a
quarters rung's ``<rung>_kernel`` is a function of the tokens a pass that returns the kernel
(``kernels.token_gemv.tokens_per_pass``).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, int32

from kernels.gqa_attention.decode import gqa_decode_one_pass
from kernels.intrinsics import unpack_halves
from kernels.kv_cache import check_cache_slots, check_cache_write
from kernels.launching import (WARP, cdiv, note_output, output_array, require_array, require_float32, require_int32,
                               require_same_kind)
from kernels.quantized_gemv import BLOCK_BYTES, GEMV_WARPS, QK, half_from_bytes, warp_sum
from kernels.registry import Rung, ladder
from kernels.token_gemv import TOKENS_PER_PASS, nibble, q4_1_quarters_pass, q4_1_tokens_pass, tokens_per_pass

__all__ = ["RUNGS", "q4_1_norm_qkv_tokens_kernel", "q4_1_norm_qkv_tokens", "q4_1_residual_gemm_tokens_kernel",
           "q4_1_residual_gemm_tokens", "q4_1_norm_swiglu_tokens_kernel", "q4_1_norm_swiglu_tokens",
           "q4_1_norm_qkv_quarters_kernel", "q4_1_norm_qkv_quarters", "q4_1_residual_quarters_kernel",
           "q4_1_residual_quarters", "q4_1_norm_swiglu_quarters_kernel", "q4_1_norm_swiglu_quarters",
           "q4_1_norm_qkv_rope_cache_kernel", "q4_1_norm_qkv_rope_cache", "ROPE_THREADS", "rope_qk_cache_write_kernel",
           "rope_qk_cache_write", "gqa_decode_one_pass"]

ROPE_THREADS = 128           # threads of a block of rope_qk_cache_write (a token)


@cuda.jit(device=True, inline=True)
def _inverse_rms(x, t, eps):
    """1 / sqrt(mean(x[t]^2) + eps), in every lane of the warp (the lanes sum the columns l, l + 32, ...)."""
    lane = cuda.threadIdx.x % WARP
    squares = float32(0.0)
    for j in range(lane, x.shape[1], WARP):
        squares += x[t, j] * x[t, j]
    squares = warp_sum(squares)
    return float32(1.0) / math.sqrt(squares / float32(x.shape[1]) + eps)


# ----------------------------------------------------------------------------------------------
# RMSNorm and the Q, K and V projections in one launch
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q4_1_norm_qkv_tokens_kernel(w, x, norm_weight, eps, q, k, v):
    """Warp ``row`` of the concatenated W_qkv computes row ``row`` of rmsnorm(x) W_qkv^T for every token and writes
    it to q, k or v (rows 0 ... Nq - 1, then Nk, then Nv)."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w.shape[0]:                 # the same for the whole warp: its shuffles see all 32 lanes
        tokens = x.shape[0]
        inverse = cuda.local.array(TOKENS_PER_PASS, float32)
        acc = cuda.local.array(TOKENS_PER_PASS, float32)
        dot = cuda.local.array(TOKENS_PER_PASS, float32)
        x_sum = cuda.local.array(TOKENS_PER_PASS, float32)
        for t0 in range(0, tokens, TOKENS_PER_PASS):
            for c in range(TOKENS_PER_PASS):
                inverse[c] = float32(0.0)
                if t0 + c < tokens:      # the same for the whole warp: every lane takes part in the shuffles
                    inverse[c] = _inverse_rms(x, t0 + c, eps)
                acc[c] = float32(0.0)
            for b in range(lane, w.shape[1], WARP):
                d = half_from_bytes(w[row, b, 0], w[row, b, 1])
                m = half_from_bytes(w[row, b, 2], w[row, b, 3])
                first = b * QK
                for c in range(TOKENS_PER_PASS):
                    dot[c] = float32(0.0)
                    x_sum[c] = float32(0.0)
                for j in range(QK // 2):
                    byte = int32(w[row, b, 4 + j])
                    q_low = float32(byte & 0x0F)
                    q_high = float32(byte >> 4)
                    g_low = norm_weight[first + j]
                    g_high = norm_weight[first + QK // 2 + j]
                    for c in range(TOKENS_PER_PASS):
                        if t0 + c < tokens:
                            low = x[t0 + c, first + j] * g_low
                            high = x[t0 + c, first + QK // 2 + j] * g_high
                            dot[c] += q_low * low + q_high * high
                            x_sum[c] += low + high
                for c in range(TOKENS_PER_PASS):
                    acc[c] += d * dot[c] + m * x_sum[c]
            for c in range(TOKENS_PER_PASS):
                total = warp_sum(acc[c]) * inverse[c]
                t = t0 + c
                if lane == 0 and t < tokens:
                    if row < q.shape[1]:
                        q[t, row] = total
                    elif row < q.shape[1] + k.shape[1]:
                        k[t, row - q.shape[1]] = total
                    else:
                        v[t, row - q.shape[1] - k.shape[1]] = total


def _q4_1_rows(name, w):
    return require_array(name, w, (None, None, BLOCK_BYTES["q4_1"]), np.uint8, dims=("rows", "blocks",
                                                                                     "q4_1_block_bytes"))


def _as_words(w, words):
    return w if words is None else w.view(words)


def _kernel_for(kernel, words, tokens):
    """The kernel to launch: ``kernel`` itself, or for a quarters rung (``words`` given) ``kernel(per_pass)``."""
    return kernel if words is None else kernel(tokens_per_pass(tokens))


def _eps(eps):
    if not (isinstance(eps, (int, float, np.floating)) and eps > 0):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    return np.float32(eps)


def q4_1_norm_qkv_tokens(w, x, norm_weight, *, eps, rows, out=None, kernel=q4_1_norm_qkv_tokens_kernel, words=None):
    """(q, k, v) = the rows (Nq, Nk, Nv) = ``rows`` of rmsnorm(x) * norm_weight times the concatenated Q4_1 rows of
    Wq, Wk and Wv, w (Nq + Nk + Nv, blocks, 20); x (T, K) float32, norm_weight (K,); each output (T, N_i) float32
    (``out``: a tuple of the three arrays to write). ``words``: the kernel reads w's bytes as words of this dtype
    (the quarters rung's np.uint32), or as bytes (None)."""
    n, blocks, _ = _q4_1_rows("w", w)
    t, _ = require_float32("x", x, (None, blocks * QK), dims=("T", "K"))
    require_float32("norm_weight", norm_weight, (blocks * QK,), dims=("K",))
    require_same_kind(w=w, x=x, norm_weight=norm_weight)
    if not (isinstance(rows, tuple) and len(rows) == 3 and all(isinstance(r, int) and r > 0 for r in rows)
            and sum(rows) == n):
        raise ValueError(f"rows must be (Nq, Nk, Nv), three positive ints adding up to w's {n} rows, got {rows!r}")
    outs = out if out is not None else (None, None, None)
    if not (isinstance(outs, tuple) and len(outs) == 3):
        raise ValueError(f"out must be a tuple (q, k, v) of three arrays, got {type(out).__name__}")
    q, k, v = (output_array(name, o, (t, r), like=x) for name, o, r in zip(("out[0]", "out[1]", "out[2]"), outs, rows))
    if t and n:
        kernel = _kernel_for(kernel, words, t)
        kernel[cdiv(n, GEMV_WARPS), GEMV_WARPS * WARP](_as_words(w, words), x, norm_weight, _eps(eps), q, k, v)
    return q, k, v


# ----------------------------------------------------------------------------------------------
# A GEMV with the residual add in its epilogue
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q4_1_residual_gemm_tokens_kernel(w, x, residual, y):
    """Warp ``row`` computes y[t, row] = residual[t, row] + sum_k W[row, k] x[t, k] for every token t: the sums of
    ``kernels.token_gemv``'s Q4_1 rung (``q4_1_tokens_pass``), the add in the epilogue."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w.shape[0]:
        tokens = x.shape[0]
        acc = cuda.local.array(TOKENS_PER_PASS, float32)
        for t0 in range(0, tokens, TOKENS_PER_PASS):
            q4_1_tokens_pass(w, x, row, t0, acc)
            for c in range(TOKENS_PER_PASS):
                total = warp_sum(acc[c])
                if lane == 0 and t0 + c < tokens:
                    y[t0 + c, row] = residual[t0 + c, row] + total


def q4_1_residual_gemm_tokens(w, x, residual, *, out=None, kernel=q4_1_residual_gemm_tokens_kernel, words=None):
    """y (T, N) = x W^T + residual for Q4_1 weights w (N, blocks, 20), x (T, K) and residual (T, N) float32;
    ``out`` may be ``residual`` (the residual stream, added in place). ``words`` as for ``q4_1_norm_qkv_tokens``."""
    n, blocks, _ = _q4_1_rows("w", w)
    t, _ = require_float32("x", x, (None, blocks * QK), dims=("T", "K"))
    require_float32("residual", residual, (t, n), dims=("T", "rows"))
    require_same_kind(w=w, x=x, residual=residual)
    out = output_array("out", out, (t, n), like=x)
    if t and n:
        kernel = _kernel_for(kernel, words, t)
        kernel[cdiv(n, GEMV_WARPS), GEMV_WARPS * WARP](_as_words(w, words), x, residual, out)
    return out


# ----------------------------------------------------------------------------------------------
# RMSNorm, the gate and up projections and SwiGLU in one launch
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q4_1_norm_swiglu_tokens_kernel(w_gate, w_up, x, norm_weight, eps, y):
    """Warp ``row`` computes y[t, row] = silu(g) u, g and u row ``row`` of Wgate and Wup times rmsnorm(x[t]) *
    norm_weight, for every token t; both matrices' blocks share the normalized x and its block sums."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w_gate.shape[0]:
        tokens = x.shape[0]
        inverse = cuda.local.array(TOKENS_PER_PASS, float32)
        acc_g = cuda.local.array(TOKENS_PER_PASS, float32)
        acc_u = cuda.local.array(TOKENS_PER_PASS, float32)
        dot_g = cuda.local.array(TOKENS_PER_PASS, float32)
        dot_u = cuda.local.array(TOKENS_PER_PASS, float32)
        x_sum = cuda.local.array(TOKENS_PER_PASS, float32)
        for t0 in range(0, tokens, TOKENS_PER_PASS):
            for c in range(TOKENS_PER_PASS):
                inverse[c] = float32(0.0)
                if t0 + c < tokens:      # the same for the whole warp: every lane takes part in the shuffles
                    inverse[c] = _inverse_rms(x, t0 + c, eps)
                acc_g[c] = float32(0.0)
                acc_u[c] = float32(0.0)
            for b in range(lane, w_gate.shape[1], WARP):
                d_g = half_from_bytes(w_gate[row, b, 0], w_gate[row, b, 1])
                m_g = half_from_bytes(w_gate[row, b, 2], w_gate[row, b, 3])
                d_u = half_from_bytes(w_up[row, b, 0], w_up[row, b, 1])
                m_u = half_from_bytes(w_up[row, b, 2], w_up[row, b, 3])
                first = b * QK
                for c in range(TOKENS_PER_PASS):
                    dot_g[c] = float32(0.0)
                    dot_u[c] = float32(0.0)
                    x_sum[c] = float32(0.0)
                for j in range(QK // 2):
                    byte_g = int32(w_gate[row, b, 4 + j])
                    byte_u = int32(w_up[row, b, 4 + j])
                    g_low = norm_weight[first + j]
                    g_high = norm_weight[first + QK // 2 + j]
                    for c in range(TOKENS_PER_PASS):
                        if t0 + c < tokens:
                            low = x[t0 + c, first + j] * g_low
                            high = x[t0 + c, first + QK // 2 + j] * g_high
                            dot_g[c] += float32(byte_g & 0x0F) * low + float32(byte_g >> 4) * high
                            dot_u[c] += float32(byte_u & 0x0F) * low + float32(byte_u >> 4) * high
                            x_sum[c] += low + high
                for c in range(TOKENS_PER_PASS):
                    acc_g[c] += d_g * dot_g[c] + m_g * x_sum[c]
                    acc_u[c] += d_u * dot_u[c] + m_u * x_sum[c]
            for c in range(TOKENS_PER_PASS):
                g = warp_sum(acc_g[c]) * inverse[c]
                u = warp_sum(acc_u[c]) * inverse[c]
                if lane == 0 and t0 + c < tokens:
                    y[t0 + c, row] = g / (float32(1.0) + math.exp(-g)) * u


def q4_1_norm_swiglu_tokens(w_gate, w_up, x, norm_weight, *, eps, out=None, kernel=q4_1_norm_swiglu_tokens_kernel,
                            words=None):
    """a (T, F) = silu(h Wgate^T) * (h Wup^T), h = rmsnorm(x) * norm_weight, for Q4_1 weights w_gate and w_up
    (F, blocks, 20) each, x (T, K) float32, norm_weight (K,). ``words`` as for ``q4_1_norm_qkv_tokens``."""
    f, blocks, _ = _q4_1_rows("w_gate", w_gate)
    require_array("w_up", w_up, (f, blocks, BLOCK_BYTES["q4_1"]), np.uint8, dims=("rows", "blocks",
                                                                                 "q4_1_block_bytes"))
    t, _ = require_float32("x", x, (None, blocks * QK), dims=("T", "K"))
    require_float32("norm_weight", norm_weight, (blocks * QK,), dims=("K",))
    require_same_kind(w_gate=w_gate, w_up=w_up, x=x, norm_weight=norm_weight)
    out = output_array("out", out, (t, f), like=x)
    if t and f:
        kernel = _kernel_for(kernel, words, t)
        kernel[cdiv(f, GEMV_WARPS), GEMV_WARPS * WARP](_as_words(w_gate, words), _as_words(w_up, words), x,
                                                       norm_weight, _eps(eps), out)
    return out


# ----------------------------------------------------------------------------------------------
# The same three launches, four lanes a block (kernels.token_gemv's quarters)
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _inverse_rms_of(squares, k, eps):
    """1 / sqrt(mean + eps) from a lane's share of a token's sum of squares over K = ``k`` values (the warp's sum)."""
    return float32(1.0) / math.sqrt(warp_sum(squares) / float32(k) + eps)


@functools.cache
def q4_1_norm_qkv_quarters_kernel(per_pass: int):
    """The kernel for ``per_pass`` tokens a pass: ``q4_1_norm_qkv_tokens_kernel`` on W_qkv's words (N, blocks, 5), four
    lanes a block; each token's sum of squares comes with the x its lanes load for the GEMV."""
    quarters_pass = q4_1_quarters_pass(True, per_pass)

    @cuda.jit
    def q4_1_norm_qkv_quarters(words, x, norm_weight, eps, q, k, v):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
        if row < words.shape[0]:
            tokens = x.shape[0]
            acc = cuda.local.array(per_pass, float32)
            squares = cuda.local.array(per_pass, float32)
            for t0 in range(0, tokens, per_pass):
                quarters_pass(words, x, norm_weight, row, t0, acc, squares)
                for c in range(per_pass):
                    total = warp_sum(acc[c]) * _inverse_rms_of(squares[c], x.shape[1], eps)
                    t = t0 + c
                    if lane == 0 and t < tokens:
                        if row < q.shape[1]:
                            q[t, row] = total
                        elif row < q.shape[1] + k.shape[1]:
                            k[t, row - q.shape[1]] = total
                        else:
                            v[t, row - q.shape[1] - k.shape[1]] = total

    return q4_1_norm_qkv_quarters


def q4_1_norm_qkv_quarters(w, x, norm_weight, *, eps, rows, out=None, kernel=q4_1_norm_qkv_quarters_kernel):
    """``q4_1_norm_qkv_tokens`` (same arguments, same results within float32's rounding), four lanes a block;
    ``kernel(tokens_per_pass(T))`` is launched."""
    return q4_1_norm_qkv_tokens(w, x, norm_weight, eps=eps, rows=rows, out=out, kernel=kernel, words=np.uint32)


@functools.cache
def q4_1_residual_quarters_kernel(per_pass: int):
    """The kernel for ``per_pass`` tokens a pass: ``q4_1_residual_gemm_tokens_kernel`` on W's words (N, blocks, 5),
    four lanes a block."""
    quarters_pass = q4_1_quarters_pass(False, per_pass)

    @cuda.jit
    def q4_1_residual_quarters(words, x, residual, y):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
        if row < words.shape[0]:
            tokens = x.shape[0]
            acc = cuda.local.array(per_pass, float32)
            unused = cuda.local.array(per_pass, float32)
            for t0 in range(0, tokens, per_pass):
                quarters_pass(words, x, x, row, t0, acc, unused)
                for c in range(per_pass):
                    total = warp_sum(acc[c])
                    if lane == 0 and t0 + c < tokens:
                        y[t0 + c, row] = residual[t0 + c, row] + total

    return q4_1_residual_quarters


def q4_1_residual_quarters(w, x, residual, *, out=None, kernel=q4_1_residual_quarters_kernel):
    """``q4_1_residual_gemm_tokens`` (same arguments; ``out`` may be ``residual``), four lanes a block;
    ``kernel(tokens_per_pass(T))`` is launched."""
    return q4_1_residual_gemm_tokens(w, x, residual, out=out, kernel=kernel, words=np.uint32)


@functools.cache
def q4_1_norm_swiglu_quarters_kernel(per_pass: int):
    """The kernel for ``per_pass`` tokens a pass: ``q4_1_norm_swiglu_tokens_kernel`` on the words (F, blocks, 5) of
    Wgate and Wup, four lanes a block: a lane takes its units two at a time, loads both matrices' two words of each
    (in scalars: 16 words in an array would live in local memory), then multiplies both by the normalized x it reads
    once, and adds up the squares of that x for the norm."""

    @cuda.jit(device=True, inline=True)
    def unit(x, norm_weight, t0, u, gate_scales, gate_codes, up_scales, up_codes, acc_g, acc_u, squares):
        tokens = x.shape[0]
        d_g, m_g = unpack_halves(gate_scales)
        d_u, m_u = unpack_halves(up_scales)
        first = (u >> 2) * QK + 4 * (u & 3)
        dot_g = cuda.local.array(per_pass, float32)
        dot_u = cuda.local.array(per_pass, float32)
        x_sum = cuda.local.array(per_pass, float32)
        for c in range(per_pass):
            dot_g[c] = float32(0.0)
            dot_u[c] = float32(0.0)
            x_sum[c] = float32(0.0)
        for i in range(4):
            g_low, g_high = norm_weight[first + i], norm_weight[first + QK // 2 + i]
            gate_low, gate_high = nibble(gate_codes, 8 * i), nibble(gate_codes, 8 * i + 4)
            up_low, up_high = nibble(up_codes, 8 * i), nibble(up_codes, 8 * i + 4)
            for c in range(per_pass):
                if per_pass == 1 or t0 + c < tokens:
                    low = x[t0 + c, first + i]
                    high = x[t0 + c, first + QK // 2 + i]
                    squares[c] += low * low + high * high
                    low *= g_low
                    high *= g_high
                    dot_g[c] += gate_low * low + gate_high * high
                    dot_u[c] += up_low * low + up_high * high
                    x_sum[c] += low + high
        for c in range(per_pass):
            acc_g[c] += d_g * dot_g[c] + m_g * x_sum[c]
            acc_u[c] += d_u * dot_u[c] + m_u * x_sum[c]

    @cuda.jit
    def q4_1_norm_swiglu_quarters(gate_words, up_words, x, norm_weight, eps, y):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
        if row < gate_words.shape[0]:
            tokens = x.shape[0]
            units = gate_words.shape[1] * 4
            acc_g = cuda.local.array(per_pass, float32)
            acc_u = cuda.local.array(per_pass, float32)
            squares = cuda.local.array(per_pass, float32)
            for t0 in range(0, tokens, per_pass):
                for c in range(per_pass):
                    acc_g[c] = float32(0.0)
                    acc_u[c] = float32(0.0)
                    squares[c] = float32(0.0)
                for u0 in range(lane, units, 2 * WARP):
                    u1 = min(u0 + WARP, units - 1)
                    b0, w0 = u0 >> 2, 1 + (u0 & 3)
                    b1, w1 = u1 >> 2, 1 + (u1 & 3)
                    gs0, gc0, us0, uc0 = (gate_words[row, b0, 0], gate_words[row, b0, w0], up_words[row, b0, 0],
                                          up_words[row, b0, w0])
                    gs1, gc1, us1, uc1 = (gate_words[row, b1, 0], gate_words[row, b1, w1], up_words[row, b1, 0],
                                          up_words[row, b1, w1])
                    unit(x, norm_weight, t0, u0, gs0, gc0, us0, uc0, acc_g, acc_u, squares)
                    if u0 + WARP < units:
                        unit(x, norm_weight, t0, u1, gs1, gc1, us1, uc1, acc_g, acc_u, squares)
                for c in range(per_pass):
                    inverse = _inverse_rms_of(squares[c], x.shape[1], eps)
                    g = warp_sum(acc_g[c]) * inverse
                    u = warp_sum(acc_u[c]) * inverse
                    if lane == 0 and t0 + c < tokens:
                        y[t0 + c, row] = g / (float32(1.0) + math.exp(-g)) * u

    return q4_1_norm_swiglu_quarters


def q4_1_norm_swiglu_quarters(w_gate, w_up, x, norm_weight, *, eps, out=None,
                              kernel=q4_1_norm_swiglu_quarters_kernel):
    """``q4_1_norm_swiglu_tokens`` (same arguments, same results within float32's rounding), four lanes a block;
    ``kernel(tokens_per_pass(T))`` is launched."""
    return q4_1_norm_swiglu_tokens(w_gate, w_up, x, norm_weight, eps=eps, out=out, kernel=kernel, words=np.uint32)


@functools.cache
def q4_1_norm_qkv_rope_cache_kernel(per_pass: int):
    """The kernel for ``per_pass`` tokens a pass: ``q4_1_norm_qkv_quarters``'s rows, then RoPE and the cache write in
    its epilogue. Warps 2 j and 2 j + 1 of a block compute rows 2 i and 2 i + 1 of W_qkv, a pair of RoPE (head_dim and
    so every head's first row is even), and leave their sums in shared memory; then lane c of warp 2 j turns token
    t0 + c's pair by table[positions[t], i] (query and key rows) and writes it to q, or to the slot of its position in
    k_cache or v_cache."""
    quarters_pass = q4_1_quarters_pass(True, per_pass)

    @cuda.jit
    def q4_1_norm_qkv_rope_cache(words, x, norm_weight, eps, q, token_seqs, positions, table, block_tables, k_cache,
                                 v_cache):
        lane = cuda.threadIdx.x % WARP
        warp = cuda.threadIdx.x // WARP
        row = cuda.blockIdx.x * GEMV_WARPS + warp
        rows, tokens = words.shape[0], x.shape[0]
        d, block_size = k_cache.shape[3], k_cache.shape[2]
        nq, nk = q.shape[1], k_cache.shape[1] * k_cache.shape[3]
        sums = cuda.shared.array((GEMV_WARPS, per_pass), float32)
        acc = cuda.local.array(per_pass, float32)
        squares = cuda.local.array(per_pass, float32)
        for t0 in range(0, tokens, per_pass):
            if row < rows:                   # the same for the whole warp: every lane takes part in the shuffles
                quarters_pass(words, x, norm_weight, row, t0, acc, squares)
                for c in range(per_pass):
                    total = warp_sum(acc[c]) * _inverse_rms_of(squares[c], x.shape[1], eps)
                    if lane == 0:
                        sums[warp, c] = total
            cuda.syncthreads()
            t = t0 + lane
            if warp % 2 == 0 and row < rows and lane < per_pass and t < tokens:
                even, odd = sums[warp, lane], sums[warp + 1, lane]
                p = positions[t]
                if row < nq + nk:            # a query or key pair: turned (nq is a multiple of d)
                    i = (row % d) // 2
                    cos, sin = table[p, i, 0], table[p, i, 1]
                    even, odd = even * cos - odd * sin, even * sin + odd * cos
                if row < nq:
                    q[t, row] = even
                    q[t, row + 1] = odd
                else:
                    block = block_tables[token_seqs[t], p // block_size]
                    slot = p % block_size
                    r = row - nq if row < nq + nk else row - nq - nk
                    if row < nq + nk:
                        k_cache[block, r // d, slot, r % d] = even
                        k_cache[block, r // d, slot, r % d + 1] = odd
                    else:
                        v_cache[block, r // d, slot, r % d] = even
                        v_cache[block, r // d, slot, r % d + 1] = odd
            cuda.syncthreads()               # the sums are read before the next pass writes them

    return q4_1_norm_qkv_rope_cache


def q4_1_norm_qkv_rope_cache(w, x, norm_weight, token_seqs, positions, table, block_tables, k_cache, v_cache, *,
                             eps, out=None, kernel=q4_1_norm_qkv_rope_cache_kernel):
    """q (T, Nq) = rmsnorm(x) * norm_weight times the rows of Wq, turned by RoPE on adjacent pairs at ``positions``
    (``table``: ``rope_table(context, d, base)``); the key rows turned and the value rows as they are written to each
    token's slot of ``k_cache`` and ``v_cache`` (num_blocks, kv_heads, block_size, d), as ``kv_cache_write`` writes
    them (``token_seqs``, ``positions`` (T,) int32, ``block_tables``). w (Nq + 2 kv_heads d, blocks, 20) holds Wq, Wk
    and Wv's Q4_1 rows, concatenated; x (T, K) float32, norm_weight (K,). Returns q; ``kernel(tokens_per_pass(T))``
    is launched. The same numbers as ``q4_1_norm_qkv_quarters`` then ``rope_qk_cache_write``."""
    n, blocks, _ = _q4_1_rows("w", w)
    t, _ = require_float32("x", x, (None, blocks * QK), dims=("T", "K"))
    require_float32("norm_weight", norm_weight, (blocks * QK,), dims=("K",))
    _, kv_heads, _, d = require_float32("k_cache", k_cache, (None, None, None, None),
                                        dims=("num_blocks", "kv_heads", "block_size", "head_dim"))
    nq = n - 2 * kv_heads * d
    if d % 2 or nq <= 0 or nq % d:
        raise ValueError(f"w's {n} rows must be Wq's (a multiple of k_cache's head_dim {d}, which must be even) "
                         f"then Wk's and Wv's ({kv_heads} kv_heads x {d} each)")
    context, _, _ = require_float32("table", table, (None, d // 2, 2), dims=("context", "head_dim / 2", "cos, sin"))
    require_int32("positions", positions, (t,), dims=("T",))
    require_same_kind(w=w, x=x, norm_weight=norm_weight, token_seqs=token_seqs, positions=positions, table=table,
                      block_tables=block_tables, k_cache=k_cache, v_cache=v_cache)
    if isinstance(positions, np.ndarray) and t and (positions.min() < 0 or positions.max() >= context):
        raise ValueError(f"positions must be rows of table, 0 ... {context - 1}, got {positions.min()} ... "
                         f"{positions.max()}")
    check_cache_slots(t, kv_heads, d, token_seqs, positions, block_tables, k_cache, v_cache)
    q = output_array("out", out, (t, nq), like=x)
    if t and n:
        kernel(tokens_per_pass(t))[cdiv(n, GEMV_WARPS), GEMV_WARPS * WARP](
            w.view(np.uint32), x, norm_weight, _eps(eps), q, token_seqs, positions, table, block_tables, k_cache,
            v_cache)
    return q


# ----------------------------------------------------------------------------------------------
# RoPE on q and k, and the cache write, in one launch
# ----------------------------------------------------------------------------------------------

@cuda.jit
def rope_qk_cache_write_kernel(q, k, v, token_seqs, positions, table, block_tables, k_cache, v_cache):
    """Block t: every pair (2i, 2i + 1) of token t's query heads turned in place by table[positions[t], i]; its key
    heads turned and written, with its values, to the slot of its position (block_tables[token_seqs[t], p //
    block_size], offset p % block_size). k and v are read, not written."""
    t = cuda.blockIdx.x
    half = q.shape[2] // 2
    p = positions[t]
    block_size = k_cache.shape[2]
    block = block_tables[token_seqs[t], p // block_size]
    slot = p % block_size
    for n in range(cuda.threadIdx.x, q.shape[1] * half, cuda.blockDim.x):
        head = n // half
        i = n - head * half
        cos, sin = table[p, i, 0], table[p, i, 1]
        even, odd = q[t, head, 2 * i], q[t, head, 2 * i + 1]
        q[t, head, 2 * i] = even * cos - odd * sin
        q[t, head, 2 * i + 1] = even * sin + odd * cos
    for n in range(cuda.threadIdx.x, k.shape[1] * half, cuda.blockDim.x):
        head = n // half
        i = n - head * half
        cos, sin = table[p, i, 0], table[p, i, 1]
        even, odd = k[t, head, 2 * i], k[t, head, 2 * i + 1]
        k_cache[block, head, slot, 2 * i] = even * cos - odd * sin
        k_cache[block, head, slot, 2 * i + 1] = even * sin + odd * cos
        v_cache[block, head, slot, 2 * i] = v[t, head, 2 * i]
        v_cache[block, head, slot, 2 * i + 1] = v[t, head, 2 * i + 1]


def rope_qk_cache_write(q, k, v, token_seqs, positions, table, block_tables, k_cache, v_cache, *,
                        kernel=rope_qk_cache_write_kernel):
    """q (T, heads, d) turned in place by RoPE on adjacent pairs at ``positions`` (``table``: ``rope_table(context,
    d, base)``); k (T, kv_heads, d) turned and written with v (T, kv_heads, d) to each token's slot of ``k_cache`` and
    ``v_cache`` (num_blocks, kv_heads, block_size, d), as ``kv_cache_write`` writes them (``token_seqs``, ``positions``
    (T,) int32, ``block_tables`` (num_seqs, max_blocks) int32); returns q. NumPy inputs are checked to the last index
    (positions rows of the table, slots in the cache, no two tokens on one slot) by the checks of the launches it
    replaces."""
    t, heads, d = require_float32("q", q, (None, None, None), dims=("T", "heads", "head_dim"))
    if d % 2:
        raise ValueError(f"q must have an even head_dim (its last dimension), got shape {tuple(q.shape)}")
    _, kv_heads, _ = require_float32("k", k, (t, None, d), dims=("T", "kv_heads", "head_dim"))
    require_float32("v", v, (t, kv_heads, d), dims=("T", "kv_heads", "head_dim"))
    context, _, _ = require_float32("table", table, (None, d // 2, 2), dims=("context", "head_dim / 2", "cos, sin"))
    require_int32("positions", positions, (t,), dims=("T",))
    require_same_kind(q=q, k=k, v=v, token_seqs=token_seqs, positions=positions, table=table, block_tables=block_tables,
                      k_cache=k_cache, v_cache=v_cache)
    if isinstance(positions, np.ndarray) and t and (positions.min() < 0 or positions.max() >= context):
        raise ValueError(f"positions must be rows of table, 0 ... {context - 1}, got {positions.min()} ... "
                         f"{positions.max()}")
    check_cache_write(k, v, token_seqs, positions, block_tables, k_cache, v_cache)
    note_output(q)
    if t and d:
        kernel[t, ROPE_THREADS](q, k, v, token_seqs, positions, table, block_tables, k_cache, v_cache)
    return q


RUNGS = ladder(
    Rung("q4_1_norm_qkv_tokens", q4_1_norm_qkv_tokens,
         "RMSNorm folded into the Q, K and V projections: one launch, each token's scale applied to its sums"),
    Rung("q4_1_residual_gemm_tokens", q4_1_residual_gemm_tokens,
         "the residual add in the GEMV's epilogue: y = x W^T + residual"),
    Rung("q4_1_norm_swiglu_tokens", q4_1_norm_swiglu_tokens,
         "RMSNorm, gate, up and SwiGLU in one launch: both matrices' rows per warp, silu(g) u written"),
    Rung("rope_qk_cache_write", rope_qk_cache_write,
         "RoPE on q and k and the cache write in one launch: a block per token, k turned on its way to its slot"),
    Rung("q4_1_norm_qkv_quarters", q4_1_norm_qkv_quarters,
         "the norm and Q, K, V launch with four lanes a block and its loads issued ahead"),
    Rung("q4_1_residual_quarters", q4_1_residual_quarters,
         "the residual GEMV with four lanes a block and its loads issued ahead"),
    Rung("q4_1_norm_swiglu_quarters", q4_1_norm_swiglu_quarters,
         "the norm, gate, up and SwiGLU launch with four lanes a block, both matrices' words loaded ahead"),
    Rung("q4_1_norm_qkv_rope_cache", q4_1_norm_qkv_rope_cache,
         "the norm, Q, K, V, RoPE and the cache write in one launch: adjacent warps' rows turned as a pair"),
    Rung("gqa_decode_one_pass", gqa_decode_one_pass,
         "split-K decode attention without its merge launch: the last block of each KV head merges the partitions"),
)
