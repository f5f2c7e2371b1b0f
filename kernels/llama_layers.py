"""The layers of a llama block besides attention and the matrix products (day 10): each a one-kernel ladder.

Shapes: T tokens of a step (a prompt's positions at prefill, one per sequence at decode); x (T, K) float32.

- ``embedding_q8_0_rows``: the rows ``ids`` of a Q8_0 embedding table, dequantized: out[t] = d q of row ids[t].
- ``rmsnorm_block_per_row``: out = x / sqrt(mean(x^2) + eps) * weight, a block per row, a shuffle sum of squares.
- ``rmsnorm_q8_1_block_per_row``: the same norm, its output quantized to q8_1 blocks in the same kernel (codes, a
  scale and a sum per 32 values): the input of day 9's integer GEMV, never written in float32.
- ``rope_pairs_from_table``: (x[2i], x[2i + 1]) of every head turned by the angle of its position, from a table.
- ``swiglu_elementwise``: out = silu(gate) * up, elementwise.
- ``add_elementwise``: out = x + y, elementwise (the residual stream).

A decode step of SmolLM2 runs these around day 9's GEMVs and day 7's attention, so they are written for few
tokens: every kernel reads each input once and writes each output once (their traffic is their compulsory
bytes), and none holds more than a row in registers.

- embedding: block t copies row ids[t]; thread j (a grid-stride loop over K) reads block j // 32's fp16 scale
  (``half_from_bytes``, day 9) and code j % 32, and writes d q in float32 (exact: an fp16 times an int8).
- rmsnorm: block t, ``NORM_THREADS`` threads; each sums the squares of its columns j, j + 128, ..., the warps add
  their lanes with shuffles and the block its warps through shared memory, then every thread scales its columns.
  Float32 throughout, as the NumPy model's forward pass.
- rmsnorm_q8_1: the same sum of squares; then warp w quantizes blocks w, w + 4, ... of the row, lane j holding
  value j of its block (``reference.quantize_q8_1``'s rule: d = amax / 127, code = round(y / d) halves away from
  zero, s the block's sum of y). It reads x once and writes 1 + 8 / 32 bytes a value instead of 4.
- rope: one thread per pair (t, head, i); cos and sin come from ``rope_table`` (``kernels.reference.rope_table``:
  the angles computed once, in float64, on the host), so the kernel does 4 multiplies and 2 adds per pair and the
  rotation equals the float32 NumPy model's bit for bit. GGUF's pairs are adjacent: llama.cpp's converter
  permutes the rows of Wq and Wk so that Hugging Face's rotate-half pairs (i, i + d / 2) become (2i, 2i + 1).
- swiglu and add: one thread per element, a grid-stride loop.

Each is a ``<name>_kernel`` plus the launcher ``<name>(..., *, out=None, kernel=<name>_kernel)``, which
validates the arguments (errors name them), sizes the grid and returns out; NumPy or numba device arrays.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32

from kernels.launching import (FULL_MASK, WARP, cdiv, output_array, require_array, require_float32, require_int32,
                               require_same_kind)
from kernels.quantized_gemv import BLOCK_BYTES, NO_INVERSE, QK, half_from_bytes, round_half_away, warp_max, warp_sum
from kernels.reference.llama import rope_table
from kernels.registry import Rung, ladder

__all__ = ["NORM_THREADS", "NORM_WARPS", "ELEMENT_THREADS", "RUNGS", "rope_table", "embedding_q8_0_rows_kernel",
           "embedding_q8_0_rows",
           "rmsnorm_block_per_row_kernel", "rmsnorm_block_per_row", "rmsnorm_q8_1_block_per_row_kernel",
           "rmsnorm_q8_1_block_per_row", "rope_pairs_from_table_kernel",
           "rope_pairs_from_table", "swiglu_elementwise_kernel", "swiglu_elementwise", "add_elementwise_kernel",
           "add_elementwise"]

NORM_THREADS = 128          # threads per row of rmsnorm
NORM_WARPS = int(NORM_THREADS // WARP)
ELEMENT_THREADS = 256       # threads per block of the elementwise kernels
_ELEMENT_BLOCKS_MAX = 1024  # a grid-stride loop past this many blocks


def _elementwise_grid(n: int) -> int:
    return max(1, min(cdiv(n, ELEMENT_THREADS), _ELEMENT_BLOCKS_MAX))


# ----------------------------------------------------------------------------------------------
# The embedding rows of a Q8_0 table
# ----------------------------------------------------------------------------------------------

@cuda.jit
def embedding_q8_0_rows_kernel(table, ids, out):
    """Block t writes out[t, :] = the dequantized row ids[t] of table (rows, blocks, 34)."""
    t = cuda.blockIdx.x
    row = ids[t]
    for j in range(cuda.threadIdx.x, out.shape[1], cuda.blockDim.x):
        b = j // QK
        code = int32(table[row, b, 2 + j % QK])
        if code > 127:
            code -= 256                                  # the byte is an int8
        out[t, j] = half_from_bytes(table[row, b, 0], table[row, b, 1]) * float32(code)


def embedding_q8_0_rows(table, ids, *, out=None, kernel=embedding_q8_0_rows_kernel):
    """out (T, K) float32: row ids[t] of the Q8_0 table (rows, K / 32, 34) uint8, dequantized. ``ids`` (T,) int32,
    each in 0 ... rows - 1 (checked for NumPy ids)."""
    rows, blocks, _ = require_array("table", table, (None, None, BLOCK_BYTES["q8_0"]), np.uint8,
                                    dims=("rows", "blocks", "q8_0_block_bytes"))
    (t,) = require_int32("ids", ids, (None,), dims=("T",))
    require_same_kind(table=table, ids=ids)
    if isinstance(ids, np.ndarray) and t and (ids.min() < 0 or ids.max() >= rows):
        bad = ids[(ids < 0) | (ids >= rows)][0]
        raise ValueError(f"ids must be rows of table, 0 ... {rows - 1}, got {bad}")
    out = output_array("out", out, (t, blocks * QK), like=table)
    if t and blocks:
        kernel[t, NORM_THREADS](table, ids, out)
    return out


# ----------------------------------------------------------------------------------------------
# RMSNorm: a block per row
# ----------------------------------------------------------------------------------------------

@cuda.jit
def rmsnorm_block_per_row_kernel(x, weight, eps, out):
    """Block t: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, NORM_THREADS threads."""
    t = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    partial = cuda.shared.array(NORM_WARPS, float32)
    k = x.shape[1]
    total = float32(0.0)
    for j in range(tid, k, NORM_THREADS):
        total += x[t, j] * x[t, j]
    offset = WARP // 2
    while offset > 0:
        total += cuda.shfl_xor_sync(FULL_MASK, total, offset)
        offset //= 2
    if tid % WARP == 0:
        partial[tid // WARP] = total
    cuda.syncthreads()
    total = float32(0.0)
    for w in range(NORM_WARPS):
        total += partial[w]
    inverse = float32(1.0) / math.sqrt(total / float32(k) + eps)
    for j in range(tid, k, NORM_THREADS):
        out[t, j] = x[t, j] * inverse * weight[j]


def rmsnorm_block_per_row(x, weight, *, eps, out=None, kernel=rmsnorm_block_per_row_kernel):
    """out (T, K) float32 = x / sqrt(mean(x^2) + eps) * weight per row of x (T, K); weight (K,); eps > 0."""
    t, k = require_float32("x", x, (None, None), dims=("T", "K"))
    require_float32("weight", weight, (k,), dims=("K",))
    require_same_kind(x=x, weight=weight)
    if not (isinstance(eps, (int, float, np.floating)) and eps > 0):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    out = output_array("out", out, (t, k), like=x)
    if t and k:
        kernel[t, NORM_THREADS](x, weight, np.float32(eps), out)
    return out


@cuda.jit
def rmsnorm_q8_1_block_per_row_kernel(x, weight, eps, x_q, x_scale, x_sum):
    """Block t: y = x[t] / sqrt(mean(x[t]^2) + eps) * weight quantized to q8_1, NORM_THREADS threads. Warp w
    takes the blocks w, w + NORM_WARPS, ... of the row: x_scale[t, b] = amax / 127, x_q[t, 32 b + j] =
    round(y_j / d) (0 in a block whose 1 / d overflows), x_sum[t, b] = the block's sum of y."""
    t = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    lane = tid % WARP
    partial = cuda.shared.array(NORM_WARPS, float32)
    k = x.shape[1]
    total = float32(0.0)
    for j in range(tid, k, NORM_THREADS):
        total += x[t, j] * x[t, j]
    total = warp_sum(total)
    if lane == 0:
        partial[tid // WARP] = total
    cuda.syncthreads()
    total = float32(0.0)
    for w in range(NORM_WARPS):
        total += partial[w]
    inverse = float32(1.0) / math.sqrt(total / float32(k) + eps)
    for b in range(tid // WARP, k // QK, NORM_WARPS):          # the same for the whole warp
        j = b * QK + lane
        y = x[t, j] * inverse * weight[j]
        d = warp_max(abs(y)) / float32(127.0)
        s = warp_sum(y)
        scale = float32(1.0) / d if d > float32(NO_INVERSE) else float32(0.0)
        x_q[t, j] = round_half_away(y * scale)
        if lane == 0:
            x_scale[t, b] = d
            x_sum[t, b] = s


def rmsnorm_q8_1_block_per_row(x, weight, *, eps, out=None, out_scales=None, out_sums=None,
                               kernel=rmsnorm_q8_1_block_per_row_kernel):
    """RMSNorm of each row of x (T, K), K a multiple of 32, quantized to q8_1: returns (x_q (T, K) int8, x_scale
    (T, K / 32) float32, x_sum (T, K / 32) float32), what ``reference.quantize_q8_1`` gives for
    ``reference.rmsnorm(x, weight, eps)`` up to float32 rounding. weight (K,) float32; eps > 0."""
    t, k = require_float32("x", x, (None, None), dims=("T", "K"))
    if k % QK:
        raise ValueError(f"x must have a multiple of {QK} columns (q8_1 blocks of {QK}), got shape {tuple(x.shape)}")
    require_float32("weight", weight, (k,), dims=("K",))
    require_same_kind(x=x, weight=weight)
    if not (isinstance(eps, (int, float, np.floating)) and eps > 0):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    x_q = output_array("out", out, (t, k), like=x, dtype=np.int8)
    x_scale = output_array("out_scales", out_scales, (t, k // QK), like=x)
    x_sum = output_array("out_sums", out_sums, (t, k // QK), like=x)
    if t and k:
        kernel[t, NORM_THREADS](x, weight, np.float32(eps), x_q, x_scale, x_sum)
    return x_q, x_scale, x_sum


# ----------------------------------------------------------------------------------------------
# RoPE on adjacent pairs, from a table of cosines and sines
# ----------------------------------------------------------------------------------------------

@cuda.jit
def rope_pairs_from_table_kernel(x, positions, table, out):
    """Thread (t, head, i) of a grid-stride loop turns (x[t, head, 2i], x[t, head, 2i + 1]) by table[p, i]."""
    half = x.shape[2] // 2
    pairs = x.shape[0] * x.shape[1] * half
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    for n in range(start, pairs, cuda.gridDim.x * cuda.blockDim.x):
        i = n % half
        head = (n // half) % x.shape[1]
        t = n // (half * x.shape[1])
        cos, sin = table[positions[t], i, 0], table[positions[t], i, 1]
        even, odd = x[t, head, 2 * i], x[t, head, 2 * i + 1]
        out[t, head, 2 * i] = even * cos - odd * sin
        out[t, head, 2 * i + 1] = even * sin + odd * cos


def rope_pairs_from_table(x, positions, table, *, out=None, kernel=rope_pairs_from_table_kernel):
    """out (T, heads, d) float32: every pair (2i, 2i + 1) of x (T, heads, d) turned by table[positions[t], i]
    (``rope_table(context, d, base)``: (context, d / 2, 2) float32 cosines and sines). ``out`` may be x."""
    t, heads, d = require_float32("x", x, (None, None, None), dims=("T", "heads", "head_dim"))
    if d % 2:
        raise ValueError(f"x must have an even head_dim (its last dimension), got shape {tuple(x.shape)}")
    context, _, _ = require_float32("table", table, (None, d // 2, 2), dims=("context", "head_dim / 2", "cos, sin"))
    require_int32("positions", positions, (t,), dims=("T",))
    require_same_kind(x=x, positions=positions, table=table)
    if isinstance(positions, np.ndarray) and t and (positions.min() < 0 or positions.max() >= context):
        raise ValueError(f"positions must be rows of table, 0 ... {context - 1}, got {positions.min()} ... "
                         f"{positions.max()}")
    out = output_array("out", out, (t, heads, d), like=x)
    if t and heads and d:
        kernel[_elementwise_grid(t * heads * d // 2), ELEMENT_THREADS](x, positions, table, out)
    return out


# ----------------------------------------------------------------------------------------------
# Elementwise: SwiGLU and the residual add
# ----------------------------------------------------------------------------------------------

@cuda.jit
def swiglu_elementwise_kernel(gate, up, out):
    """out = gate / (1 + exp(-gate)) * up, element by element (the arrays seen flat, a grid-stride loop)."""
    g, u, o = gate.reshape(gate.size), up.reshape(up.size), out.reshape(out.size)
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    for n in range(start, o.size, cuda.gridDim.x * cuda.blockDim.x):
        z = g[n]
        o[n] = z / (float32(1.0) + math.exp(-z)) * u[n]


@cuda.jit
def add_elementwise_kernel(x, y, out):
    """out = x + y, element by element (the arrays seen flat, a grid-stride loop)."""
    a, b, o = x.reshape(x.size), y.reshape(y.size), out.reshape(out.size)
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    for n in range(start, o.size, cuda.gridDim.x * cuda.blockDim.x):
        o[n] = a[n] + b[n]


def _elementwise(names, first, second, out, kernel):
    shape = require_float32(names[0], first, (None, None), dims=("T", "F"))
    require_float32(names[1], second, shape, dims=("T", "F"))
    require_same_kind(**{names[0]: first, names[1]: second})
    out = output_array("out", out, shape, like=first)
    if first.size:
        kernel[_elementwise_grid(first.size), ELEMENT_THREADS](first, second, out)
    return out


def swiglu_elementwise(gate, up, *, out=None, kernel=swiglu_elementwise_kernel):
    """out (T, F) float32 = silu(gate) * up for gate and up (T, F); ``out`` may be gate or up."""
    return _elementwise(("gate", "up"), gate, up, out, kernel)


def add_elementwise(x, y, *, out=None, kernel=add_elementwise_kernel):
    """out (T, K) float32 = x + y for x and y (T, K); ``out`` may be x (the residual stream, added in place)."""
    return _elementwise(("x", "y"), x, y, out, kernel)


RUNGS = ladder(
    Rung("embedding_q8_0_rows", embedding_q8_0_rows, "the rows of a Q8_0 table, dequantized: a block per token"),
    Rung("rmsnorm_block_per_row", rmsnorm_block_per_row,
         "a block per row: a warp-shuffle sum of squares, then every column scaled"),
    Rung("rmsnorm_q8_1_block_per_row", rmsnorm_q8_1_block_per_row,
         "the same norm quantized to q8_1 blocks in the same kernel: a warp per block, max and sum by shuffles"),
    Rung("rope_pairs_from_table", rope_pairs_from_table,
         "adjacent pairs turned by the angle of their position, from a table"),
    Rung("swiglu_elementwise", swiglu_elementwise, "silu(gate) * up, a thread per element"),
    Rung("add_elementwise", add_elementwise, "x + y, a thread per element (the residual stream)"),
)
