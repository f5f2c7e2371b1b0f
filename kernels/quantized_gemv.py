"""Quantized GEMV ``y = W x`` over GGUF blocks (day 9): the weights stay in their llama.cpp bytes.

Shapes: w (N, blocks, block_bytes) uint8, the raw GGUF bytes of W's N rows, block by block (row n is
``reference.quantize_<fmt>(W[n])`` reshaped to (blocks, block_bytes)); x (K,) float32 with K = 32 blocks;
y (N,) float32. The float64 reference is ``reference.dequantize_<fmt>(w.reshape(N, -1)) @ x``. The byte
models of each rung are in ``course.models.quantized``. A block holds 32 weights of a row:

- Q8_0, 34 bytes: an fp16 scale d, then 32 int8 codes q; weight j is d q_j.
- Q4_0, 18 bytes: an fp16 scale d, then 16 bytes; byte j holds code j in its low nibble and code j + 16 in
  its high nibble (0 ... 15); weight j is d (q_j - 8).
- Q4_1, 20 bytes: an fp16 scale d and an fp16 minimum m, then 16 bytes of codes as Q4_0; weight j is d q_j + m.

The rungs, in ladder order, one line each (how each works follows):

- ``q8_0_gemv_warp_per_row``: a warp per row, a lane per block, each byte read once, a shuffle sum.
- ``q4_0_gemv_warp_per_row``: Q4_0, two weights per byte: one load, both nibbles unpacked in registers.
- ``q4_1_gemv_warp_per_row``: Q4_1, the block minimum paid once per block through the block's sum of x.
- ``q4_1_gemv_q8_1_dp4a``: x quantized to int8 blocks (q8_1) first, then 4 int8 products per ``dp4a``.

Warp per row: warp ``row`` of the grid computes y[row], lane l the row's blocks l, l + 32, ...; the fp16
scale's two bytes become a float32 through ``half_from_bytes`` (arithmetic on the bits: sign, exponent and
fraction; the Q4_1 rung is the day's second exercise, and a kernel a student writes may not reach
``kernels.intrinsics``; on a GPU its dozen integer instructions per block hide behind the block's loads),
the block's 32 codes are multiplied by its 32 activations, the block's sum is scaled once by d, and the warp
adds its lanes' sums with shuffles. In Q4_0 and Q4_1 byte j of codes is loaded once, its low nibble
multiplies x[32 b + j], its high nibble x[32 b + 16 + j], and Q4_1 uses
sum_j (d q_j + m) x_j = d sum_j q_j x_j + m sum_j x_j.

dp4a: a first kernel quantizes x per block of 32 to int8 codes with a float32 scale and the block's float32
sum (``reference.quantize_q8_1``: llama.cpp's q8_1 idea), a warp per block, 4 codes packed per 32-bit word.
The GEMV reads the Q4_1 bytes as 32-bit words (d and m in one, 4 words of nibbles), masks each word into 4
low codes and 4 high codes, one byte each, and multiplies them by the activation codes with
``kernels.intrinsics.dp4a`` (4 int8 multiply-adds into an int32 per instruction): a block is 8 dp4a, then
d d_x sum_i + m s_x in float32. The activations' rounding (half a step of amax / 127 per value) is the price:
the result is W times the quantized x, the minimum's term exact.

A tool beside the ladder (a kernel with a launcher of the same pattern, not a rung: its output is codes,
checked bit for bit, where the registry's check compares floats), the day's first exercise:

- ``q8_0_quantize``: float32 rows to Q8_0 blocks, a warp per block of 32: each block's int8 codes and its
  float32 scale d, bit for bit ``reference.quantize_q8_0``'s (``q8_0_bytes`` packs them into the GGUF bytes,
  d rounded to fp16).

Each rung is a ``<rung>_kernel`` plus the launcher ``<rung>(w, x, *, out=None, kernel=<rung>_kernel)``,
which validates the arguments, launches one warp per row in blocks of ``GEMV_WARPS`` warps and returns y
(``q4_1_gemv_q8_1_dp4a`` also takes ``quantize_kernel``, the kernel that quantizes x). Launchers accept
NumPy arrays or numba device arrays (``kernels.launching``). Every kernel handles any N, and any K that is a
multiple of 32 (K = 0 gives zeros).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32, uint32

from kernels.intrinsics import dp4a, unpack_halves
from kernels.launching import FULL_MASK, WARP, cdiv, output_array, require_array, require_float32, require_same_kind
from kernels.registry import Rung, ladder

__all__ = ["QK", "BLOCK_BYTES", "GEMV_WARPS", "FP16_STEP", "NO_INVERSE", "RUNGS", "gemv_shape", "warp_sum",
           "half_from_bytes",
           "q8_0_gemv_warp_per_row_kernel", "q8_0_gemv_warp_per_row",
           "q4_0_gemv_warp_per_row_kernel", "q4_0_gemv_warp_per_row",
           "q4_1_gemv_warp_per_row_kernel", "q4_1_gemv_warp_per_row", "warp_max", "round_half_away",
           "q8_1_block", "q8_1_quantize_kernel", "q4_1_gemv_q8_1_dp4a_kernel", "q4_1_gemv_q8_1_dp4a",
           "q8_0_quantize_kernel", "q8_0_quantize", "q8_0_bytes"]

QK = 32                                                  # weights per GGUF block
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}       # bytes per block, by format
GEMV_WARPS = 4                                           # warps (output rows) per thread block
FP16_STEP = 2.0 ** -24       # fp16's smallest subnormal: a unit of the significand at exponent fields 0 and 1
NO_INVERSE = 2.0 ** -128     # the largest float32 whose inverse overflows float32


def gemv_shape(w, x, out, fmt: str) -> tuple[int, int]:
    """Validate w (N, blocks, BLOCK_BYTES[fmt]) uint8, x (32 blocks,) float32 and out (N,) if given;
    return (N, blocks)."""
    n, blocks, _ = require_array("w", w, (None, None, BLOCK_BYTES[fmt]), np.uint8,
                                 dims=("rows", "blocks", f"{fmt}_block_bytes"))
    require_float32("x", x, (blocks * QK,), dims=("K",))
    require_same_kind(w=w, x=x)
    if out is not None:
        require_float32("out", out, (n,), dims=("rows",))
    return n, blocks


def _launch(kernel, w, x, out, fmt):
    n, _ = gemv_shape(w, x, out, fmt)
    out = output_array("out", out, (n,), like=x)
    if n:
        kernel[cdiv(n, GEMV_WARPS), GEMV_WARPS * WARP](w, x, out)
    return out


@cuda.jit(device=True, inline=True)
def warp_sum(value):
    """The sum of ``value`` over the warp's 32 lanes, in every lane (butterfly of shfl_xor_sync)."""
    offset = WARP // 2
    while offset > 0:
        value += cuda.shfl_xor_sync(FULL_MASK, value, offset)
        offset //= 2
    return value


@cuda.jit(device=True, inline=True)
def half_from_bytes(low, high):
    """The fp16 number whose little-endian bytes are ``low`` and ``high`` (uint8), as float32, from its bits:
    a sign, a 5-bit exponent field e and a 10-bit fraction f stand for (1024 + f) 2**(e - 25) when e >= 1 and
    f 2**-24 when e = 0 (subnormal). Exact: an 11-bit integer times powers of two. (e = 31, inf and NaN, is
    never the scale of a GGUF block.)"""
    bits = int32(low) | (int32(high) << 8)
    exponent = (bits >> 10) & 0x1F
    significand = bits & 0x3FF
    if exponent > 0:
        significand += 0x400                                 # a normal number's leading 1
    value = float32(significand) * float32(1 << (max(exponent, 1) - 1)) * float32(FP16_STEP)
    return -value if bits & 0x8000 else value


# ----------------------------------------------------------------------------------------------
# Q8_0: a warp per row, a lane per block
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q8_0_gemv_warp_per_row_kernel(w, x, y):
    """Warp ``row`` of the grid computes y[row]; lane l sums the blocks l, l + 32, ... of the row."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w.shape[0]:                 # the same for the whole warp: its shuffles see all 32 lanes
        acc = float32(0.0)
        for b in range(lane, w.shape[1], WARP):
            d = half_from_bytes(w[row, b, 0], w[row, b, 1])
            first = b * QK
            dot = float32(0.0)
            for j in range(QK):
                code = int32(w[row, b, 2 + j])
                dot += float32((code ^ 0x80) - 0x80) * x[first + j]      # the byte as a signed int8
            acc += d * dot
        acc = warp_sum(acc)
        if lane == 0:
            y[row] = acc


def q8_0_gemv_warp_per_row(w, x, *, out=None, kernel=q8_0_gemv_warp_per_row_kernel):
    """y = W x for Q8_0 weights w (N, blocks, 34): a warp per row; grid ceil(N / GEMV_WARPS) of 128 threads."""
    return _launch(kernel, w, x, out, "q8_0")


# ----------------------------------------------------------------------------------------------
# Q4_0 and Q4_1: two weights a byte
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q4_0_gemv_warp_per_row_kernel(w, x, y):
    """Warp ``row`` of the grid computes y[row]; lane l sums the blocks l, l + 32, ... of the row. Byte j of a
    block's codes is loaded once: its low nibble weighs x[32 b + j], its high nibble x[32 b + 16 + j]; weight
    j is d (q_j - 8)."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w.shape[0]:
        acc = float32(0.0)
        for b in range(lane, w.shape[1], WARP):
            first = b * QK
            dot = float32(0.0)
            for j in range(QK // 2):
                byte = int32(w[row, b, 2 + j])
                dot += (float32((byte & 0x0F) - 8) * x[first + j]
                        + float32((byte >> 4) - 8) * x[first + QK // 2 + j])
            acc += half_from_bytes(w[row, b, 0], w[row, b, 1]) * dot
        acc = warp_sum(acc)
        if lane == 0:
            y[row] = acc


@cuda.jit
def q4_1_gemv_warp_per_row_kernel(w, x, y):
    """Warp ``row`` of the grid computes y[row]; lane l sums the blocks l, l + 32, ... of the row. A block is d
    and m (fp16, bytes 0-1 and 2-3), then 16 bytes of codes: byte j, loaded once, holds code j in its low
    nibble and code j + 16 in its high nibble. Weight j is d q_j + m, so the block adds
    d sum_j q_j x_j + m sum_j x_j: the minimum costs one product per block."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w.shape[0]:                 # the same for the whole warp: its shuffles see all 32 lanes
        acc = float32(0.0)
        for b in range(lane, w.shape[1], WARP):
            d = half_from_bytes(w[row, b, 0], w[row, b, 1])
            m = half_from_bytes(w[row, b, 2], w[row, b, 3])
            first = b * QK
            dot = float32(0.0)
            x_sum = float32(0.0)
            for j in range(QK // 2):
                byte = int32(w[row, b, 4 + j])
                low = x[first + j]
                high = x[first + QK // 2 + j]
                dot += float32(byte & 0x0F) * low + float32(byte >> 4) * high
                x_sum += low + high
            acc += d * dot + m * x_sum
        acc = warp_sum(acc)
        if lane == 0:
            y[row] = acc


def q4_0_gemv_warp_per_row(w, x, *, out=None, kernel=q4_0_gemv_warp_per_row_kernel):
    """y = W x for Q4_0 weights w (N, blocks, 18): a warp per row, nibbles unpacked in registers."""
    return _launch(kernel, w, x, out, "q4_0")


def q4_1_gemv_warp_per_row(w, x, *, out=None, kernel=q4_1_gemv_warp_per_row_kernel):
    """y = W x for Q4_1 weights w (N, blocks, 20): as Q4_0, the minimum once per block through sum(x)."""
    return _launch(kernel, w, x, out, "q4_1")


# ----------------------------------------------------------------------------------------------
# Q4_1 times q8_1 activations: dp4a on packed bytes
# ----------------------------------------------------------------------------------------------

_WORDS = QK // 4                 # 32-bit words of a block's 32 activation codes
_LOW_NIBBLES = 0x0F0F0F0F        # the low nibble of each byte of a word


@cuda.jit(device=True, inline=True)
def warp_max(value):
    """The largest ``value`` over the warp's 32 lanes, in every lane."""
    offset = WARP // 2
    while offset > 0:
        value = max(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
        offset //= 2
    return value


@cuda.jit(device=True, inline=True)
def round_half_away(v):
    """C's roundf of a float32 within int32's range, as an int32: the nearest integer, halves away from zero.
    The conversion truncates toward zero, and ``v - trunc(v)`` is exact in float32."""
    t = int32(v)
    if abs(v - float32(t)) >= float32(0.5):
        t += int32(1) if v > float32(0.0) else int32(-1)
    return t


@cuda.jit(device=True, inline=True)
def q8_1_block(v, lane):
    """A warp's block of 32 values of x as q8_1, lane j holding value j in ``v``: ``(d, total, word)``, the scale
    amax / 127, the block's sum of x (``warp_sum``'s butterfly) and, in lane 4 i, the word of codes 4 i to 4 i + 3
    (the first in the low byte), codes round(x * (1 / d)) as ``reference.quantize_q8_1`` rounds them. Every lane
    of the warp must call it (its shuffles)."""
    d = warp_max(abs(v)) / float32(127.0)
    total = warp_sum(v)
    # 1 / d overflows for d <= 2**-128 (and d = 0: a block of zeros): codes 0 there, as the reference.
    inverse = float32(1.0) / d if d > float32(NO_INVERSE) else float32(0.0)
    code = round_half_away(v * inverse)
    # Lane 4 i gathers the codes of lanes 4 i + 1 ... 4 i + 3 (every lane takes part in each shuffle).
    word = uint32(code & 0xFF)
    for k in range(1, 4):
        word = uint32(word | (uint32(cuda.shfl_down_sync(FULL_MASK, code, k) & 0xFF) << uint32(8 * k)))
    return d, total, word


@cuda.jit
def q8_1_quantize_kernel(x, x_q, x_scale, x_sum):
    """Warp b of the grid quantizes x[32 b : 32 b + 32], lane j value 32 b + j, as ``reference.quantize_q8_1``:
    x_scale[b] = amax / 127, the codes round(x * (1 / d)) packed 4 to a word (x_q[8 b + i] holds codes 4 i to
    4 i + 3, the first in the low byte), x_sum[b] the block's sum of x."""
    lane = cuda.threadIdx.x % WARP
    b = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if b < x_scale.shape[0]:             # the same for the whole warp
        d, total, word = q8_1_block(x[b * QK + lane], lane)
        if lane % 4 == 0:
            x_q[b * _WORDS + lane // 4] = word
        if lane == 0:
            x_scale[b] = d
            x_sum[b] = total


@cuda.jit
def q4_1_gemv_q8_1_dp4a_kernel(w, x_q, x_scale, x_sum, y):
    """Warp ``row`` computes y[row]; lane l takes the blocks l, l + 32, ... of the row. ``w`` is the Q4_1
    bytes seen as 32-bit words (N, blocks, 5): word 0 holds d (low half) and m, word 1 + i the bytes 4 i to
    4 i + 3 of codes, whose low nibbles are codes 4 i ... 4 i + 3 and high nibbles codes 16 + 4 i ... ."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w.shape[0]:
        acc = float32(0.0)
        for b in range(lane, w.shape[1], WARP):
            d, m = unpack_halves(w[row, b, 0])
            first = b * _WORDS
            dot = int32(0)
            for i in range(4):
                codes = w[row, b, 1 + i]
                dot = dp4a(uint32(codes & _LOW_NIBBLES), x_q[first + i], dot)
                dot = dp4a(uint32((codes >> uint32(4)) & _LOW_NIBBLES), x_q[first + 4 + i], dot)
            acc += d * x_scale[b] * float32(dot) + m * x_sum[b]
        acc = warp_sum(acc)
        if lane == 0:
            y[row] = acc


def q4_1_gemv_q8_1_dp4a(w, x, *, out=None, quantize_kernel=q8_1_quantize_kernel,
                        kernel=q4_1_gemv_q8_1_dp4a_kernel):
    """y = W x for Q4_1 weights w (N, blocks, 20) with x quantized to q8_1 first: ``quantize_kernel`` (a warp
    per block of x) writes the codes, scales and sums into scratch arrays, then ``kernel`` (a warp per row)
    multiplies with dp4a. Both in blocks of ``GEMV_WARPS`` warps."""
    n, blocks = gemv_shape(w, x, out, "q4_1")
    out = output_array("out", out, (n,), like=x)
    x_q = output_array("x_q", None, (blocks * _WORDS,), like=x, dtype=np.uint32)
    x_scale = output_array("x_scale", None, (blocks,), like=x)
    x_sum = output_array("x_sum", None, (blocks,), like=x)
    if blocks:
        quantize_kernel[cdiv(blocks, GEMV_WARPS), GEMV_WARPS * WARP](x, x_q, x_scale, x_sum)
    if n:
        kernel[cdiv(n, GEMV_WARPS), GEMV_WARPS * WARP](w.view(np.uint32), x_q, x_scale, x_sum, out)
    return out


# ----------------------------------------------------------------------------------------------
# Q8_0 blocks from float32 rows: the day's quantizer (a tool, not a rung)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q8_0_quantize_kernel(x, codes, scales):
    """Warp w of the grid quantizes block b = w % blocks of row w // blocks (blocks = K / 32), lane j the value
    x[row, 32 b + j], as ``reference.quantize_q8_0`` does in float32: d = amax / 127 (amax the block's largest
    |x|, a butterfly of maxima), codes[row, 32 b + j] = round(x * (1 / d)) with halves away from zero (0 where
    1 / d overflows: a block of zeros), scales[row, b] = d."""
    lane = cuda.threadIdx.x % WARP
    warp = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    blocks = scales.shape[1]
    if warp < scales.shape[0] * blocks:     # the same for the whole warp: its shuffles see all 32 lanes
        row = warp // blocks
        b = warp - row * blocks
        v = x[row, b * QK + lane]
        d = warp_max(abs(v)) / float32(127.0)
        inverse = float32(1.0) / d if d > float32(NO_INVERSE) else float32(0.0)
        codes[row, b * QK + lane] = round_half_away(v * inverse)
        if lane == 0:
            scales[row, b] = d


def q8_0_quantize(x, *, out=None, out_scales=None, kernel=q8_0_quantize_kernel):
    """Quantize the rows of ``x`` (rows, K) float32, K a multiple of 32, to Q8_0 blocks of 32: returns (codes,
    scales), codes (rows, K) int8 (``out``) and scales (rows, K // 32) float32 (``out_scales``), each block's
    d = amax / 127 before its rounding to fp16; bit for bit the codes of ``reference.quantize_q8_0(x)`` and the
    d it stores (``q8_0_bytes(codes, scales)`` gives its bytes). A warp per block, ``GEMV_WARPS`` warps per
    thread block; grid ceil(rows K / 32 / GEMV_WARPS)."""
    rows, k = require_float32("x", x, (None, None), dims=("rows", "K"))
    if k % QK:
        raise ValueError(f"x must have K (its last dimension) a multiple of {QK}, got shape {tuple(x.shape)}")
    codes = output_array("out", out, (rows, k), like=x, dtype=np.int8)
    scales = output_array("out_scales", out_scales, (rows, k // QK), like=x)
    if rows and k:
        kernel[cdiv(rows * (k // QK), GEMV_WARPS), GEMV_WARPS * WARP](x, codes, scales)
    return codes, scales


def q8_0_bytes(codes, scales) -> np.ndarray:
    """The GGUF Q8_0 bytes (rows, K // 32, 34) uint8 of int8 ``codes`` (rows, K) and float32 ``scales`` (rows,
    K // 32): each block's d rounded to fp16, little-endian, then its 32 codes. Host code (device arrays are
    copied to the host); a d past fp16's 65504 becomes inf, where ``reference.quantize_q8_0`` refuses x."""
    codes, scales = (a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a) for a in (codes, scales))
    rows, blocks = scales.shape
    with np.errstate(over="ignore"):
        d = np.ascontiguousarray(scales, np.float32).astype("<f2").view(np.uint8).reshape(rows, blocks, 2)
    return np.concatenate([d, np.ascontiguousarray(codes, np.int8).view(np.uint8).reshape(rows, blocks, QK)], axis=2)


RUNGS = ladder(
    Rung("q8_0_gemv_warp_per_row", q8_0_gemv_warp_per_row,
         "a warp per row of Q8_0 bytes, a lane per block, the fp16 scale once per block, a shuffle sum"),
    Rung("q4_0_gemv_warp_per_row", q4_0_gemv_warp_per_row,
         "Q4_0: each byte loaded once, its two nibbles unpacked in registers (codes j and j + 16)"),
    Rung("q4_1_gemv_warp_per_row", q4_1_gemv_warp_per_row,
         "Q4_1: the block minimum paid once per block, m times the block's sum of x"),
    Rung("q4_1_gemv_q8_1_dp4a", q4_1_gemv_q8_1_dp4a,
         "x quantized to int8 per block (q8_1) first, then 4 int8 multiply-adds per dp4a on words of codes"),
)
