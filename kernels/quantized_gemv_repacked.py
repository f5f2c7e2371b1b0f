"""Quantized GEMV over repacked Q4_1 weights: the ladder of ``kernels.quantized_gemv``, continued (day 9).

Shapes as there: W (N, K) in Q4_1 blocks of 32 weights, x (K,) float32, y (N,) float32, K = 32 blocks; the rung
``q4_1_gemv_q8_1_small_batch`` also takes a decode batch, x (T, K) and y (T, N) with T <= ``MAX_TOKENS``
(as ``torch.nn.functional.linear`` does: y[t] = W x[t]; x (K,) gives y (N,); T = 0 an empty y). Both new
rungs quantize x to q8_1 with ``quantized_gemv.q8_1_quantize_kernel`` (per token, per block of 32) and multiply
with dp4a, so their reference is ``q4_1_gemv_q8_1_dp4a``'s, token by token. The byte models are in
``course.models.quantized``. The rungs, in ladder order, one line each (the first four live in
``kernels.quantized_gemv``):

- ``q8_0_gemv_warp_per_row``: a warp per row, a lane per block, each byte read once, a shuffle sum.
- ``q4_0_gemv_warp_per_row``: Q4_0, two weights per byte: one load, both nibbles unpacked in registers.
- ``q4_1_gemv_warp_per_row``: Q4_1, the block minimum paid once per block through the block's sum of x.
- ``q4_1_gemv_q8_1_dp4a``: x quantized to int8 blocks (q8_1) first, then 4 int8 products per ``dp4a``.
- ``q4_1_gemv_q8_1_repacked``: enough bytes in flight: the weights repacked once at load time into 16-byte
  aligned codes and a word of scales, read with 8-byte loads, ``BLOCKS_PER_LANE`` blocks of
  ``ROWS_PER_WARP`` rows loaded by each lane before the first is used.
- ``q4_1_gemv_q8_1_small_batch``: small batches: each block of W loaded once for the T <= 16 tokens of a decode
  batch, ``BATCH_ROWS_PER_WARP`` rows a warp sharing each token's activation codes.

The repacked layout. A Q4_1 block is 20 bytes, so in the GGUF bytes its 16 bytes of codes start at 4 mod 20:
only 4-byte loads reach them, and a lane of ``q4_1_gemv_q8_1_dp4a`` has one block (5 words, 20 bytes) in
flight at a time. ``q4_1_repack(w)`` splits the bytes, as inference engines do when they load a model (Marlin's
layout is another such choice), into ``Q4_1Repacked(codes, scales)``: codes (N, blocks, 4) uint32, a block's 16
bytes of codes in their GGUF order (16 bytes per block, so every block starts at a multiple of 16), and scales
(N, blocks) uint32, d in the low half and m in the high half (the GGUF block's first word). The kernels read
the codes as uint64 (N, blocks, 2) and the activation codes as uint64 too (4 words of 8 codes per block).

``q4_1_gemv_q8_1_repacked`` (Little's law: bytes in flight = bandwidth x latency). Warp w computes the rows
``ROWS_PER_WARP`` w ... + ``ROWS_PER_WARP`` - 1; it steps through the row in chunks of ``BLOCKS_PER_LANE`` x 32
blocks, lane l taking blocks l, l + 32, l + 64, l + 96 of a chunk. A lane first loads all its blocks of the
chunk for every row of the warp (2 uint64 of codes and a word of scales each) and the activations of those
blocks (4 uint64 of codes, a scale and a sum each, shared by the rows), then multiplies: 8 blocks, 160 bytes of
W, in flight per lane where the dp4a rung has 20 (5 KiB per warp where it has 640 bytes). The blocks past the
last whole chunk go one per lane at a time, as in the dp4a rung. What it predicts (a prediction, to be checked
against a recording; nothing here was measured on a GPU): an H200 streams 4.8 TB/s at a loaded DRAM latency of
about 600 to 800 ns, so its 132 SMs must keep 2.9 to 3.8 MB in flight, 22 to 29 KB per SM. The dp4a rung needs
35 to 47 warps per SM for that, each with its 640 bytes out; at N = 8192 it has 62 warps per SM in all (8 blocks
each, one after another), and only if its registers let them all be resident (64 warps per SM allow 32
registers a thread), so it should run below the copy bandwidth, and further below on smaller matrices. This
rung's 5 KiB per warp need 6 warps per SM: its GEMV kernel should stream W (41.9 MB at 8192 x 8192) at 85 to
90 % of the copy bandwidth, about 11 us on an H200; the whole call, with the q8_1 kernel's few microseconds
before it, lower at 8192 x 8192 (about 75 %) and closer at 28672 x 8192, and its gain over the dp4a rung
should grow as N shrinks. Its own limit is L1: a lane's 8-byte loads sit 16 bytes apart (codes) and 32 bytes
apart (activation codes), so each load instruction touches 2 (4) times the sectors it uses; two rows per warp
halve the activations' share. Measured (an H200, 2026-12-05, L2 flushed by a memset, the GPU's
time of both launches): 54 us at 28672 x 8192, 0.65 of the copy bandwidth and 1.43 times the dp4a rung's speed,
but 27 us at 8192 x 8192, 0.37 of it and barely ahead of the dp4a rung: the prediction held in direction, not in
size, and failed on the small matrix.

``q4_1_gemv_q8_1_small_batch``. Warp w computes ``BATCH_ROWS_PER_WARP`` rows for every token; lane l takes
blocks l, l + 32, ... . For each block it loads the rows' codes and scales once and unpacks the nibbles into 8
words per row, then for each token t < T loads that token's activation codes, scale and sum and adds
d d_x[t] dot + m s_x[t] to the row's accumulator of token t (``MAX_TOKENS`` x ``BATCH_ROWS_PER_WARP``
accumulators per lane, in registers: the token loop has a fixed trip count and unrolls). W crosses DRAM once
whatever T; the activations (40 bytes per block and token: 32 codes, a scale, a sum) are read once per warp,
from L1 and L2. What it predicts (again a prediction, not a measurement), at 8192 x 8192 on an H200: the DRAM
floor is W's, about 10 us whatever T. The work per block, row and token is 8 dp4a and 4 float instructions,
plus 6 activation loads per block and token shared by 4 rows: 13.5 instructions per 32 weights and token, 14
M warp instructions at T = 16, about 14 us on 528 schedulers at 1.98 GHz (more if dp4a issues at half rate).
The larger cost is L1: an activation load puts 8 bytes per lane 32 bytes apart, 1 KiB of lines for 256 useful
bytes, about 34 line-sized transfers per warp, 32 blocks and token; at one 128-byte transfer per clock per SM
that is about 2 us per token. So the rung should stay at its memory floor to T of about 4, then grow by about 2
us per token, to about 34 us at T = 16: about what torch's fp16 matmul takes there, streaming 2 bytes per weight
(134 MB) and memory bound to T of about 200 on tensor cores. The fp16 GEMM should win from about T = 16 on;
laying the activation codes out for coalesced loads would push that crossover further. Measured
(``course/data/day09_batched_timing.json``, H200): 47 us at T = 1, 51 at 2, 61 at 4, 81 at 8 and 124 at 16,
about 5 us a token from the first on; torch's fp16 matmul took about 48 us at every T, so it wins from T = 2
on. The prediction missed twice: T = 1 already costs far more than W's floor (the repacked rung's 27 us), and
each token costs more than twice the 2 us counted for it.
``course.models.quantized`` counts the bytes and the dp4a (``dp4a_count``) so a lesson can draw both.

Each rung is a ``<rung>_kernel`` plus the launcher ``<rung>(w, x, *, out=None, quantize_kernel=...,
kernel=<rung>_kernel)``. ``w`` is either the GGUF bytes (N, blocks, 20) uint8, which the launcher repacks on the
host at each call (what the registry's checks pass: one call, one answer, its cost nothing a GPU timing should
see), or ``q4_1_repack(w)``'s result, which a model keeps and the recordings time: then the call launches the
two kernels and nothing else. Launchers accept NumPy arrays or numba device arrays (``kernels.launching``);
every kernel handles any N, and any K that is a multiple of 32 (K = 0 gives zeros).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, uint32, uint64

from kernels import quantized_gemv
from kernels.intrinsics import dp4a, unpack_halves
from kernels.launching import (WARP, cdiv, is_device_array, output_array, require_array, require_float32,
                               require_same_kind)
from kernels.quantized_gemv import BLOCK_BYTES, GEMV_WARPS, QK, q8_1_quantize_kernel, warp_sum
from kernels.registry import Rung, ladder

__all__ = ["ROWS_PER_WARP", "BLOCKS_PER_LANE", "BATCH_ROWS_PER_WARP", "MAX_TOKENS", "CODE_WORDS", "RUNGS",
           "Q4_1Repacked", "q4_1_repack", "repacked_weights", "q4_1_block_dot",
           "q4_1_gemv_q8_1_repacked_kernel", "q4_1_gemv_q8_1_repacked",
           "q4_1_gemv_q8_1_small_batch_kernel", "q4_1_gemv_q8_1_small_batch"]

ROWS_PER_WARP = 2            # rows of W per warp in q4_1_gemv_q8_1_repacked
BLOCKS_PER_LANE = 4          # blocks of each row a lane loads before it uses the first
BATCH_ROWS_PER_WARP = 4      # rows of W per warp in q4_1_gemv_q8_1_small_batch
MAX_TOKENS = 16              # the largest decode batch of q4_1_gemv_q8_1_small_batch (its accumulators per row)
CODE_WORDS = 4               # uint32 words of a block's 16 bytes of codes (2 uint64)
_CHUNK = BLOCKS_PER_LANE * WARP             # blocks of a row a warp takes per step
_ACTIVATION_WORDS = QK // 8                 # uint64 words of a block's 32 activation codes
_LOW_NIBBLES = 0x0F0F0F0F0F0F0F0F           # the low nibble of each byte of a uint64
_LOW_WORD = 0xFFFFFFFF


class Q4_1Repacked(NamedTuple):
    """Q4_1 weights laid out for ``q4_1_gemv_q8_1_repacked`` and ``q4_1_gemv_q8_1_small_batch``: ``codes`` (N,
    blocks, 4) uint32, each block's 16 bytes of codes as in GGUF (byte j: code j low, code j + 16 high), and
    ``scales`` (N, blocks) uint32, d (fp16) in the low half and m (fp16) in the high half."""

    codes: object
    scales: object


def q4_1_repack(w) -> Q4_1Repacked:
    """The Q4_1 GGUF bytes w (N, blocks, 20) uint8 repacked as ``Q4_1Repacked(codes, scales)``, the same 20
    bytes per block split into 16 of codes and 4 of scales. A load-time step done on the host: a device array
    is copied to the host and the two arrays back to the device (NumPy in, NumPy out)."""
    n, blocks, _ = require_array("w", w, (None, None, BLOCK_BYTES["q4_1"]), np.uint8,
                                 dims=("rows", "blocks", "q4_1_block_bytes"))
    host = w.copy_to_host() if is_device_array(w) else w
    words = host.view(np.uint32).reshape(n, blocks, 1 + CODE_WORDS)      # 5 little-endian words per block
    codes, scales = np.ascontiguousarray(words[..., 1:]), np.ascontiguousarray(words[..., 0])
    if is_device_array(w):
        return Q4_1Repacked(cuda.to_device(codes), cuda.to_device(scales))
    return Q4_1Repacked(codes, scales)


def repacked_weights(w, x) -> tuple[Q4_1Repacked, int, int]:
    """``(repacked w, N, blocks)`` of w, the GGUF bytes or ``q4_1_repack``'s result, after checking it and that
    it is of x's kind (NumPy or device): what every launcher over repacked Q4_1 weights starts with (this
    module's and ``kernels.quantized_gemv_wide``'s)."""
    if isinstance(w, Q4_1Repacked):
        n, blocks, _ = require_array("w.codes", w.codes, (None, None, CODE_WORDS), np.uint32,
                                     dims=("rows", "blocks", "code_words"))
        require_array("w.scales", w.scales, (n, blocks), np.uint32, dims=("rows", "blocks"))
        require_same_kind(**{"w.codes": w.codes, "w.scales": w.scales, "x": x})
        return w, n, blocks
    if isinstance(w, tuple):
        raise TypeError(f"w must be Q4_1 GGUF bytes (rows, blocks, 20) or q4_1_repack's Q4_1Repacked, "
                        f"got a {type(w).__name__} of {len(w)}")
    n, blocks, _ = require_array("w", w, (None, None, BLOCK_BYTES["q4_1"]), np.uint8,
                                 dims=("rows", "blocks", "q4_1_block_bytes"))
    require_same_kind(w=w, x=x)
    return q4_1_repack(w), n, blocks


@cuda.jit(device=True, inline=True)
def q4_1_block_dot(c0, c1, a0, a1, a2, a3):
    """The int32 dot product of a Q4_1 block's 32 codes with 32 int8 activation codes. ``c0`` and ``c1``: the
    block's 16 bytes of codes as two uint64 (bytes 0-7 and 8-15: low nibbles codes 0-7 and 8-15, high nibbles
    16-23 and 24-31); ``a0`` ... ``a3``: the activation codes 0-7, 8-15, 16-23, 24-31, 8 to a uint64. Eight
    dp4a on the 32-bit halves of the masked words."""
    low0 = c0 & uint64(_LOW_NIBBLES)
    low1 = c1 & uint64(_LOW_NIBBLES)
    high0 = (c0 >> uint64(4)) & uint64(_LOW_NIBBLES)
    high1 = (c1 >> uint64(4)) & uint64(_LOW_NIBBLES)
    dot = int32(0)
    dot = dp4a(uint32(low0 & uint64(_LOW_WORD)), uint32(a0 & uint64(_LOW_WORD)), dot)
    dot = dp4a(uint32(low0 >> uint64(32)), uint32(a0 >> uint64(32)), dot)
    dot = dp4a(uint32(low1 & uint64(_LOW_WORD)), uint32(a1 & uint64(_LOW_WORD)), dot)
    dot = dp4a(uint32(low1 >> uint64(32)), uint32(a1 >> uint64(32)), dot)
    dot = dp4a(uint32(high0 & uint64(_LOW_WORD)), uint32(a2 & uint64(_LOW_WORD)), dot)
    dot = dp4a(uint32(high0 >> uint64(32)), uint32(a2 >> uint64(32)), dot)
    dot = dp4a(uint32(high1 & uint64(_LOW_WORD)), uint32(a3 & uint64(_LOW_WORD)), dot)
    dot = dp4a(uint32(high1 >> uint64(32)), uint32(a3 >> uint64(32)), dot)
    return dot


# ----------------------------------------------------------------------------------------------
# Enough bytes in flight: several blocks of several rows loaded per lane before the first is used
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q4_1_gemv_q8_1_repacked_kernel(codes, scales, x_q, x_scale, x_sum, y):
    """Warp w computes y[2 w] and y[2 w + 1] (``ROWS_PER_WARP`` rows). ``codes`` (N, blocks, 2) uint64 and
    ``scales`` (N, blocks) uint32: ``Q4_1Repacked``; ``x_q`` (blocks * 4,) uint64: the q8_1 codes, 8 a word.
    Per chunk of 128 blocks, lane l loads blocks l, l + 32, l + 64, l + 96 of both rows and their activations,
    then multiplies; the blocks after the last whole chunk follow, one per lane at a time."""
    lane = cuda.threadIdx.x % WARP
    first = (cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP) * ROWS_PER_WARP
    n = scales.shape[0]
    blocks = scales.shape[1]
    if first < n:                        # the same for the whole warp: its shuffles see all 32 lanes
        acc = cuda.local.array(ROWS_PER_WARP, float32)
        w_codes = cuda.local.array((ROWS_PER_WARP, BLOCKS_PER_LANE, 2), uint64)
        w_scales = cuda.local.array((ROWS_PER_WARP, BLOCKS_PER_LANE), uint32)
        a_codes = cuda.local.array((BLOCKS_PER_LANE, _ACTIVATION_WORDS), uint64)
        a_scale = cuda.local.array(BLOCKS_PER_LANE, float32)
        a_sum = cuda.local.array(BLOCKS_PER_LANE, float32)
        for r in range(ROWS_PER_WARP):
            acc[r] = float32(0.0)
        whole = blocks - blocks % _CHUNK
        for start in range(0, whole, _CHUNK):
            for u in range(BLOCKS_PER_LANE):             # every load of the chunk first ...
                b = start + u * WARP + lane
                for r in range(ROWS_PER_WARP):
                    if first + r < n:                    # the same for the whole warp
                        w_codes[r, u, 0] = codes[first + r, b, 0]
                        w_codes[r, u, 1] = codes[first + r, b, 1]
                        w_scales[r, u] = scales[first + r, b]
                    else:
                        w_codes[r, u, 0] = uint64(0)
                        w_codes[r, u, 1] = uint64(0)
                        w_scales[r, u] = uint32(0)
                for i in range(_ACTIVATION_WORDS):
                    a_codes[u, i] = x_q[b * _ACTIVATION_WORDS + i]
                a_scale[u] = x_scale[b]
                a_sum[u] = x_sum[b]
            for u in range(BLOCKS_PER_LANE):             # ... then the arithmetic
                for r in range(ROWS_PER_WARP):
                    dot = q4_1_block_dot(w_codes[r, u, 0], w_codes[r, u, 1], a_codes[u, 0], a_codes[u, 1],
                                         a_codes[u, 2], a_codes[u, 3])
                    d, m = unpack_halves(w_scales[r, u])
                    acc[r] += d * a_scale[u] * float32(dot) + m * a_sum[u]
        for b in range(whole + lane, blocks, WARP):
            first_codes = x_q[b * _ACTIVATION_WORDS]
            second_codes = x_q[b * _ACTIVATION_WORDS + 1]
            third_codes = x_q[b * _ACTIVATION_WORDS + 2]
            fourth_codes = x_q[b * _ACTIVATION_WORDS + 3]
            block_scale = x_scale[b]
            block_sum = x_sum[b]
            for r in range(ROWS_PER_WARP):
                if first + r < n:
                    dot = q4_1_block_dot(codes[first + r, b, 0], codes[first + r, b, 1], first_codes, second_codes,
                                         third_codes, fourth_codes)
                    d, m = unpack_halves(scales[first + r, b])
                    acc[r] += d * block_scale * float32(dot) + m * block_sum
        for r in range(ROWS_PER_WARP):
            total = warp_sum(acc[r])
            if lane == 0 and first + r < n:
                y[first + r] = total


def _quantize_activations(quantize_kernel, x, tokens, blocks):
    """x (tokens * K floats, any shape of them) quantized to q8_1 per block of 32 by ``quantize_kernel``: the
    scratch arrays (x_q (tokens, blocks * 8) uint32, x_scale and x_sum (tokens, blocks) float32)."""
    x_q = output_array("x_q", None, (tokens, blocks * QK // 4), like=x, dtype=np.uint32)
    x_scale = output_array("x_scale", None, (tokens, blocks), like=x)
    x_sum = output_array("x_sum", None, (tokens, blocks), like=x)
    count = tokens * blocks
    if count:
        quantize_kernel[cdiv(count, GEMV_WARPS), GEMV_WARPS * WARP](
            x.reshape(count * QK), x_q.reshape(count * QK // 4), x_scale.reshape(count), x_sum.reshape(count))
    return x_q, x_scale, x_sum


def q4_1_gemv_q8_1_repacked(w, x, *, out=None, quantize_kernel=q8_1_quantize_kernel,
                            kernel=q4_1_gemv_q8_1_repacked_kernel):
    """y = W x for Q4_1 weights ``w`` (the GGUF bytes (N, blocks, 20), repacked here, or ``q4_1_repack(w)``) and
    x (32 blocks,) float32, quantized to q8_1 first by ``quantize_kernel`` (a warp per block); ``kernel`` takes
    ``ROWS_PER_WARP`` rows a warp, grid ceil(N / (2 GEMV_WARPS)) blocks of 128 threads."""
    w, n, blocks = repacked_weights(w, x)
    require_float32("x", x, (blocks * QK,), dims=("K",))
    if out is not None:
        require_float32("out", out, (n,), dims=("rows",))
    out = output_array("out", out, (n,), like=x)
    x_q, x_scale, x_sum = _quantize_activations(quantize_kernel, x, 1, blocks)
    if n:
        kernel[cdiv(n, ROWS_PER_WARP * GEMV_WARPS), GEMV_WARPS * WARP](
            w.codes.view(np.uint64), w.scales, x_q.reshape(blocks * QK // 4).view(np.uint64),
            x_scale.reshape(blocks), x_sum.reshape(blocks), out)
    return out


# ----------------------------------------------------------------------------------------------
# Small batches: each block of W loaded once for every token
# ----------------------------------------------------------------------------------------------

@cuda.jit
def q4_1_gemv_q8_1_small_batch_kernel(codes, scales, x_q, x_scale, x_sum, y):
    """Warp w computes y[t, 4 w ... 4 w + 3] for every token t < T = y.shape[0] <= ``MAX_TOKENS``. ``codes``
    (N, blocks, 2) uint64 and ``scales`` (N, blocks) uint32: ``Q4_1Repacked``; ``x_q`` (T, blocks * 4) uint64,
    ``x_scale`` and ``x_sum`` (T, blocks): q8_1 per token. Lane l takes blocks l, l + 32, ...: it loads a block
    of each row once, unpacks its nibbles into 8 words, then goes through the tokens."""
    lane = cuda.threadIdx.x % WARP
    first = (cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP) * BATCH_ROWS_PER_WARP
    n = scales.shape[0]
    blocks = scales.shape[1]
    tokens = y.shape[0]
    if first < n:                        # the same for the whole warp
        acc = cuda.local.array((BATCH_ROWS_PER_WARP, MAX_TOKENS), float32)
        nibbles = cuda.local.array((BATCH_ROWS_PER_WARP, 8), uint32)
        d = cuda.local.array(BATCH_ROWS_PER_WARP, float32)
        m = cuda.local.array(BATCH_ROWS_PER_WARP, float32)
        for r in range(BATCH_ROWS_PER_WARP):
            for t in range(MAX_TOKENS):
                acc[r, t] = float32(0.0)
        for b in range(lane, blocks, WARP):
            for r in range(BATCH_ROWS_PER_WARP):
                low0 = low1 = high0 = high1 = uint64(0)
                halves = uint32(0)
                if first + r < n:                        # the same for the whole warp
                    c0 = codes[first + r, b, 0]
                    c1 = codes[first + r, b, 1]
                    halves = scales[first + r, b]
                    low0 = c0 & uint64(_LOW_NIBBLES)
                    low1 = c1 & uint64(_LOW_NIBBLES)
                    high0 = (c0 >> uint64(4)) & uint64(_LOW_NIBBLES)
                    high1 = (c1 >> uint64(4)) & uint64(_LOW_NIBBLES)
                nibbles[r, 0] = uint32(low0 & uint64(_LOW_WORD))       # codes 0-3, as dp4a reads them
                nibbles[r, 1] = uint32(low0 >> uint64(32))             # codes 4-7
                nibbles[r, 2] = uint32(low1 & uint64(_LOW_WORD))       # 8-11
                nibbles[r, 3] = uint32(low1 >> uint64(32))             # 12-15
                nibbles[r, 4] = uint32(high0 & uint64(_LOW_WORD))      # 16-19
                nibbles[r, 5] = uint32(high0 >> uint64(32))            # 20-23
                nibbles[r, 6] = uint32(high1 & uint64(_LOW_WORD))      # 24-27
                nibbles[r, 7] = uint32(high1 >> uint64(32))            # 28-31
                d[r], m[r] = unpack_halves(halves)
            for t in range(MAX_TOKENS):
                if t < tokens:                           # the same for the whole warp
                    a0 = x_q[t, b * _ACTIVATION_WORDS]
                    a1 = x_q[t, b * _ACTIVATION_WORDS + 1]
                    a2 = x_q[t, b * _ACTIVATION_WORDS + 2]
                    a3 = x_q[t, b * _ACTIVATION_WORDS + 3]
                    scale = x_scale[t, b]
                    total = x_sum[t, b]
                    for r in range(BATCH_ROWS_PER_WARP):
                        dot = int32(0)
                        dot = dp4a(nibbles[r, 0], uint32(a0 & uint64(_LOW_WORD)), dot)
                        dot = dp4a(nibbles[r, 1], uint32(a0 >> uint64(32)), dot)
                        dot = dp4a(nibbles[r, 2], uint32(a1 & uint64(_LOW_WORD)), dot)
                        dot = dp4a(nibbles[r, 3], uint32(a1 >> uint64(32)), dot)
                        dot = dp4a(nibbles[r, 4], uint32(a2 & uint64(_LOW_WORD)), dot)
                        dot = dp4a(nibbles[r, 5], uint32(a2 >> uint64(32)), dot)
                        dot = dp4a(nibbles[r, 6], uint32(a3 & uint64(_LOW_WORD)), dot)
                        dot = dp4a(nibbles[r, 7], uint32(a3 >> uint64(32)), dot)
                        acc[r, t] += d[r] * scale * float32(dot) + m[r] * total
        for r in range(BATCH_ROWS_PER_WARP):
            for t in range(MAX_TOKENS):
                if t < tokens:
                    value = warp_sum(acc[r, t])
                    if lane == 0 and first + r < n:
                        y[t, first + r] = value


def q4_1_gemv_q8_1_small_batch(w, x, *, out=None, quantize_kernel=q8_1_quantize_kernel,
                               kernel=q4_1_gemv_q8_1_small_batch_kernel):
    """y[t] = W x[t] for Q4_1 weights ``w`` (the GGUF bytes (N, blocks, 20), repacked here, or ``q4_1_repack(w)``)
    and x (T, K) float32, 0 <= T <= ``MAX_TOKENS``, giving y (T, N); or x (K,), giving y (N,) (T = 1).
    ``quantize_kernel`` quantizes every token's x to q8_1, ``kernel`` takes ``BATCH_ROWS_PER_WARP`` rows a warp
    for all tokens: grid ceil(N / (4 GEMV_WARPS)) blocks of 128 threads."""
    w, n, blocks = repacked_weights(w, x)
    k = blocks * QK
    if getattr(x, "ndim", None) == 2:
        tokens, _ = require_float32("x", x, (None, k), dims=("T", "K"))
        if tokens > MAX_TOKENS:
            raise ValueError(f"x must have at most {MAX_TOKENS} tokens (rows) for this batched GEMV, got shape "
                             f"{tuple(x.shape)}: a larger batch is a GEMM's")
        shape = (tokens, n)
        if out is not None:
            require_float32("out", out, shape, dims=("T", "rows"))
    else:
        require_float32("x", x, (k,), dims=("K",))
        tokens, shape = 1, (n,)
        if out is not None:
            require_float32("out", out, shape, dims=("rows",))
    out = output_array("out", out, shape, like=x)
    x_q, x_scale, x_sum = _quantize_activations(quantize_kernel, x, tokens, blocks)
    if n and tokens:
        kernel[cdiv(n, BATCH_ROWS_PER_WARP * GEMV_WARPS), GEMV_WARPS * WARP](
            w.codes.view(np.uint64), w.scales, x_q.view(np.uint64), x_scale, x_sum, out.reshape(tokens, n))
    return out


RUNGS = ladder(
    *quantized_gemv.RUNGS.values(),
    Rung("q4_1_gemv_q8_1_repacked", q4_1_gemv_q8_1_repacked,
         "weights repacked at load time for 8-byte loads; 8 blocks (2 rows x 4) in flight per lane before use"),
    Rung("q4_1_gemv_q8_1_small_batch", q4_1_gemv_q8_1_small_batch,
         "a decode batch of up to 16 tokens: each weight block loaded once and used for every token"),
)
