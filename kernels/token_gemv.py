"""Quantized GEMV for the few tokens of one step (day 10): y (T, N) = x (T, K) W^T, W in its GGUF bytes.

A model's step carries T tokens: a prompt's at prefill, one per running request at decode. Day 9's warp-per-row
rungs (``kernels.quantized_gemv``) multiply one token, so an engine launched them T times per matrix and read W T
times. These rungs take the step's T tokens in one launch and load each byte of W once for up to
``TOKENS_PER_PASS`` tokens. Shapes as there: w (N, blocks, block_bytes) uint8, x (T, K) float32 with K = 32 blocks,
y (T, N) float32 (as ``torch.nn.functional.linear``: y[t] = W x[t]); T = 0 gives an empty y. The float64
reference is ``x @ reference.dequantize_<fmt>(w.reshape(N, -1)).T``. The rungs, in ladder order, one line each:

- ``q8_0_gemm_tokens_warp_per_row``: Q8_0, a warp per row, each code byte loaded once for 8 tokens.
- ``q4_1_gemm_tokens_warp_per_row``: Q4_1, a warp per row, each byte's two nibbles unpacked once for 8 tokens.
- ``q8_0_gemm_tokens_quarters``: Q8_0, a warp per row, four lanes a block: every lane busy and its loads issued
  before their arithmetic.
- ``q4_1_gemm_tokens_quarters``: Q4_1 the same way, a block's quarter (one word of codes) a lane.
- ``q8_0_gemm_tokens_wide``: Q8_0 repacked once at load time (day 9's ``q8_0_repack``: a block's 32 codes on a
  16-byte boundary, the scales apart), read with 16-byte loads, four lanes a row and eight rows a warp, nine
  chunks of 16 codes in flight per lane; the codes stay in registers while every token of the step is multiplied.

Each token's sum is made as day 9's warp-per-row rung makes it (a lane per block, the block's products summed in
the same order, scaled once by d, m times the block's sum of x, the lanes added by the same butterfly), so on the
simulator token t's y equals that rung's y for x[t] bit for bit, and an engine that switches between them computes
the same numbers. Warp ``row`` of the grid takes the tokens in passes of ``TOKENS_PER_PASS``: per pass a lane
keeps a running sum per token (an array of ``TOKENS_PER_PASS`` floats, every loop over it of that fixed trip count,
so that it stays in registers), loads a block's scale, minimum and bytes once, and multiplies them by each token's
activations of that block (from L1 and L2 after the first warp). A step of T <= 8 tokens reads W once where T
launches of the one-token rung read it T times and cost T launches.

The warp-per-row rungs give each lane whole blocks, so a row of K = 576 (SmolLM2's width: 18 blocks) keeps 18 lanes
of 32 busy, each walking its block byte by byte, and a decode step of one token is latency, not bytes: day 10's
recording timed the one-token head GEMV at 130 us on an H100 for 30 MB (0.23 TB/s). The ``_quarters`` rungs split
each block into four units (Q4_1: the block's word of scale and minimum and one of its four words of codes, 8
weights; Q8_0: the scale and 8 codes as four 16-bit words): a row of 18 blocks is 72 units, so every lane takes 2
or 3, and several of a lane's units (Q4_1: ``UNITS_AHEAD``; Q8_0: two) have their loads issued before any of their
arithmetic. They sum in another order than the warp-per-row rungs (a unit's 8 products, then the lane's units, then
the butterfly), so they agree with them within float32's rounding, not bit for bit. The same recording (``day10_decode_timing``, fused
engine) has the Q8_0 quarters rung's head at 47 us: 0.64 TB/s, faster, and still far from the copy bandwidth.

The ``_wide`` rung is for that head (49,152 rows of 576: 30 MB, about a tenth of a step's time at 47 us). A quarters
warp owns one row of 612 bytes, loads it as 16-bit words, about 600 bytes in flight, and then pays its butterfly and
its store: 49,152 such warps. Q8_0's 34-byte blocks leave the codes 2-byte aligned in the GGUF bytes, so the rung
reads ``q8_0_repack``'s copy, made once when the engine loads the model: a lane's 16-byte load takes half a block's
codes, a lane has nine of them (144 bytes) out before its first product, a warp 4.6 KB for 8 rows, and a row's four
lanes need two shuffles. What it predicts: the head streams its 30 MB near the copy bandwidth, about 10 us on an
H100 plus a few of launch and tail, so a decode step some 30 us shorter. Measured (an H100, Nsight's kernel time,
caches flushed, 2026-12-06): 20.7 us against the quarters rung's 46.9 at one token (1.45 TB/s, half the copy
bandwidth: the prediction held in direction, not in size), 83 us against 259 at eight; the fused graph step on
SmolLM2's shapes (random weights) replayed in 0.954 and 0.960 ms against 0.975 and 0.976, same tokens: 16 to 21 us
shorter. Its 80 registers a thread (89 after the change below) leave 24 warps an SM (20), so its 6,144 warps
run in two waves (and a few warps more).

Then the PTX showed where the rest went: numba turns an integer into float32 through int64 (``cvt.s64.s8`` and
``cvt.rn.f32.s64`` for every code: 288 conversions in this kernel's PTX beside its 153 fma), and the GPU issues
those conversions at a fraction of its float rate. The codes now become floats through 2^23's bits (``nibble`` and
``_wide_chunk``: a prmt or a masked or, then one subtraction, exact), which removes every conversion from this rung
and from the Q4_1 quarters rungs of ``kernels.fused_llama``. Measured the same way: the head 18.4 to 18.7 us at one
token (2 us less), 80 to 81 at eight; the graph step, against the tree before the change in the same run: 0.928 to
0.933 ms against 0.933 to 0.952 with this head, and 0.959 and 0.960 against 0.975 and 0.976 with the quarters head
(whose codes are still converted): about 16 us a step from the layers' 120 GEMV launches.

Each rung is a ``<rung>_kernel`` plus the launcher ``<rung>(w, x, *, out=None, kernel=<rung>_kernel)``, which
validates the arguments, launches one warp per row (the wide rung: per eight rows) in blocks of ``GEMV_WARPS`` warps
and returns y. A quarters rung's ``<rung>_kernel`` is a function of the tokens a pass that returns the kernel
(``tokens_per_pass``: 1 for a step of one token, whose kernel has no loop over empty token slots, else
``TOKENS_PER_PASS``); the wide rung's is the kernel itself, which loops over the tokens with the codes in registers.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int32, uint32

from kernels.intrinsics import bits_float, byte_perm, load_u32x4, unpack_halves
from kernels.launching import (FULL_MASK, WARP, cdiv, output_array, require_array, require_float32,
                               require_same_kind)
from kernels.quantized_gemv import BLOCK_BYTES, GEMV_WARPS, QK, half_from_bytes, warp_sum
from kernels.quantized_gemv_wide import Q8_0Repacked, half_scale_weights, q8_0_repack
from kernels.registry import Rung, ladder

__all__ = ["TOKENS_PER_PASS", "UNITS_AHEAD", "RUNGS", "q8_0_gemm_tokens_warp_per_row_kernel",
           "q8_0_gemm_tokens_warp_per_row", "q4_1_tokens_pass", "nibble", "q4_1_gemm_tokens_warp_per_row_kernel",
           "q4_1_gemm_tokens_warp_per_row", "tokens_per_pass", "q4_1_quarters_pass",
           "q8_0_gemm_tokens_quarters_kernel", "q8_0_gemm_tokens_quarters", "q4_1_gemm_tokens_quarters_kernel",
           "q4_1_gemm_tokens_quarters", "TOKENS_WIDE_ROWS_PER_WARP", "TOKENS_WIDE_CHUNKS_AHEAD",
           "q8_0_gemm_tokens_wide_kernel", "q8_0_gemm_tokens_wide"]

TOKENS_PER_PASS = 8         # tokens a lane keeps a running sum for while it reads a block of W
UNITS_AHEAD = 4             # units (quarters of a block) whose words a lane loads before their arithmetic
TOKENS_WIDE_ROWS_PER_WARP = 8      # the wide rung's rows a warp: four lanes a row
TOKENS_WIDE_CHUNKS_AHEAD = 9       # the wide rung's 16-byte chunks of codes a lane loads before their arithmetic
_LANES_PER_ROW = WARP // TOKENS_WIDE_ROWS_PER_WARP


def _tokens_shape(w, x, out, fmt: str) -> tuple[int, int, int]:
    """Validate w (N, blocks, BLOCK_BYTES[fmt]) uint8, x (T, 32 blocks) float32 and out (T, N) if given; return
    (T, N, blocks)."""
    n, blocks, _ = require_array("w", w, (None, None, BLOCK_BYTES[fmt]), np.uint8,
                                 dims=("rows", "blocks", f"{fmt}_block_bytes"))
    t, _ = require_float32("x", x, (None, blocks * QK), dims=("T", "K"))
    require_same_kind(w=w, x=x)
    if out is not None:
        require_float32("out", out, (t, n), dims=("T", "rows"))
    return t, n, blocks


def _launch(kernel, w, x, out, fmt, words=None):
    """Validate, then launch a warp per row on w, or on w's bytes seen as ``words`` (np.uint16 or np.uint32): the
    quarters rungs', whose ``kernel`` is a function of the tokens a pass (``tokens_per_pass``)."""
    t, n, _ = _tokens_shape(w, x, out, fmt)
    out = output_array("out", out, (t, n), like=x)
    if words is not None:
        kernel = kernel(tokens_per_pass(t))
    if t and n:
        kernel[cdiv(n, GEMV_WARPS), GEMV_WARPS * WARP](w if words is None else w.view(words), x, out)
    return out


@cuda.jit
def q8_0_gemm_tokens_warp_per_row_kernel(w, x, y):
    """Warp ``row`` computes y[:, row], TOKENS_PER_PASS tokens a pass; lane l takes the blocks l, l + 32, ...;
    each code byte is loaded once per pass and multiplied by every token's activation."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
    if row < w.shape[0]:                 # the same for the whole warp: its shuffles see all 32 lanes
        tokens = x.shape[0]
        acc = cuda.local.array(TOKENS_PER_PASS, float32)
        dot = cuda.local.array(TOKENS_PER_PASS, float32)
        for t0 in range(0, tokens, TOKENS_PER_PASS):
            for c in range(TOKENS_PER_PASS):
                acc[c] = float32(0.0)
            for b in range(lane, w.shape[1], WARP):
                d = half_from_bytes(w[row, b, 0], w[row, b, 1])
                first = b * QK
                for c in range(TOKENS_PER_PASS):
                    dot[c] = float32(0.0)
                for j in range(QK):
                    code = int32(w[row, b, 2 + j])
                    weight = float32((code ^ 0x80) - 0x80)          # the byte as a signed int8
                    for c in range(TOKENS_PER_PASS):
                        if t0 + c < tokens:
                            dot[c] += weight * x[t0 + c, first + j]
                for c in range(TOKENS_PER_PASS):
                    acc[c] += d * dot[c]
            for c in range(TOKENS_PER_PASS):
                total = warp_sum(acc[c])
                if lane == 0 and t0 + c < tokens:
                    y[t0 + c, row] = total


@cuda.jit(device=True, inline=True)
def q4_1_tokens_pass(w, x, row, t0, acc):
    """acc[c] = this lane's share of row ``row`` of W times x[t0 + c], c < TOKENS_PER_PASS (tokens past x's left at
    0): the lane's blocks l, l + 32, ..., byte j of a block loaded once, its low nibble weighing x[t, 32 b + j] and
    its high nibble x[t, 32 b + 16 + j] for every token t; weight j is d q_j + m, the minimum paid once per block and
    token. The warp's sum of acc[c] is y[t0 + c, row] (``kernels.fused_llama``'s residual GEMV takes it too)."""
    lane = cuda.threadIdx.x % WARP
    tokens = x.shape[0]
    dot = cuda.local.array(TOKENS_PER_PASS, float32)
    x_sum = cuda.local.array(TOKENS_PER_PASS, float32)
    for c in range(TOKENS_PER_PASS):
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
            for c in range(TOKENS_PER_PASS):
                if t0 + c < tokens:
                    low = x[t0 + c, first + j]
                    high = x[t0 + c, first + QK // 2 + j]
                    dot[c] += q_low * low + q_high * high
                    x_sum[c] += low + high
        for c in range(TOKENS_PER_PASS):
            acc[c] += d * dot[c] + m * x_sum[c]


@cuda.jit
def q4_1_gemm_tokens_warp_per_row_kernel(w, x, y):
    """Warp ``row`` computes y[:, row], TOKENS_PER_PASS tokens a pass (``q4_1_tokens_pass``), then the warp's sum of
    each token's lanes."""
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
                    y[t0 + c, row] = total


def q8_0_gemm_tokens_warp_per_row(w, x, *, out=None, kernel=q8_0_gemm_tokens_warp_per_row_kernel):
    """y (T, N) = x W^T for Q8_0 weights w (N, blocks, 34) and x (T, K): a warp per row, 8 tokens a pass."""
    return _launch(kernel, w, x, out, "q8_0")


def q4_1_gemm_tokens_warp_per_row(w, x, *, out=None, kernel=q4_1_gemm_tokens_warp_per_row_kernel):
    """y (T, N) = x W^T for Q4_1 weights w (N, blocks, 20) and x (T, K): a warp per row, 8 tokens a pass."""
    return _launch(kernel, w, x, out, "q4_1")


# ----------------------------------------------------------------------------------------------
# Four lanes a block: the _quarters rungs
# ----------------------------------------------------------------------------------------------

# A code to float32 without a conversion instruction: numba converts an integer to float32 through int64
# (cvt.rn.f32.s64), which the GPU issues at a fraction of the rate of its float arithmetic. A code c of 0 to 255 in
# the low byte of 2^23's bits reads as the float 2^23 + c, exactly, and one subtraction leaves c: a nibble takes a
# shift and a masked or (one lop3), a signed byte its sign bit flipped (c + 128) and a prmt into that byte.
_TWO_TO_23 = uint32(0x4B000000)
_TWO_TO_23_FLOAT = float32(2.0 ** 23)
_SIGN_BITS = uint32(0x80808080)
_SELECT_BYTE = uint32(0x7440)       # prmt: result byte 0 = byte j of the word, bytes 1 and 2 = 0, byte 3 = 0x4B
_CODE_OFFSET = float32(2.0 ** 23 + 128)


@cuda.jit(device=True, inline=True)
def nibble(word, shift):
    """The 4-bit code at bit ``shift`` of the uint32 ``word`` (0 to 15), as float32, by 2^23's bits (above)."""
    return bits_float(uint32(((word >> uint32(shift)) & uint32(0x0F)) | _TWO_TO_23)) - _TWO_TO_23_FLOAT


def tokens_per_pass(tokens: int) -> int:
    """The quarters rungs' tokens a pass for a step of ``tokens``: 1 for one (a decode step of one request: no loop
    over token slots it leaves empty), else ``TOKENS_PER_PASS``."""
    return 1 if tokens == 1 else TOKENS_PER_PASS


@functools.cache
def q4_1_quarters_pass(normed: bool, per_pass: int):
    """The device function ``pass(words, x, norm_weight, row, t0, acc, squares)``: acc[c] = this lane's share of row
    ``row`` of W times x[t0 + c] (c < ``per_pass``; with ``normed``, x[t, k] times norm_weight[k], and squares[c] =
    the lane's share of sum_k x[t0 + c, k]^2, for RMSNorm; without, neither is read or written). W's Q4_1 blocks are
    uint32 words (N, blocks, 5): word 0 holds d and m, words 1 ... 4 the codes. Unit u = 4 b + s is block b's code
    word 1 + s: its byte j = 4 s + i holds the low nibble of weight j and the high nibble of weight 16 + j. A lane
    takes units lane, lane + 32, ...: ``UNITS_AHEAD`` of them have their two words loaded before their arithmetic.
    The units of a warp's lanes cover K once, so the squares need no load of their own."""

    @cuda.jit(device=True, inline=True)
    def quarters_pass(words, x, norm_weight, row, t0, acc, squares):
        lane = cuda.threadIdx.x % WARP
        tokens = x.shape[0]
        units = words.shape[1] * 4
        scales = cuda.local.array(UNITS_AHEAD, uint32)
        codes = cuda.local.array(UNITS_AHEAD, uint32)
        dot = cuda.local.array(per_pass, float32)
        x_sum = cuda.local.array(per_pass, float32)
        for c in range(per_pass):
            acc[c] = float32(0.0)
            squares[c] = float32(0.0)
        for u0 in range(lane, units, WARP * UNITS_AHEAD):
            for r in range(UNITS_AHEAD):             # the loads first: a lane's units in flight at once
                u = min(u0 + r * WARP, units - 1)
                scales[r] = words[row, u >> 2, 0]
                codes[r] = words[row, u >> 2, 1 + (u & 3)]
            for r in range(UNITS_AHEAD):
                u = u0 + r * WARP
                if u < units:
                    d, m = unpack_halves(scales[r])
                    first = (u >> 2) * QK + 4 * (u & 3)
                    for c in range(per_pass):
                        dot[c] = float32(0.0)
                        x_sum[c] = float32(0.0)
                    for i in range(4):
                        q_low = nibble(codes[r], 8 * i)
                        q_high = nibble(codes[r], 8 * i + 4)
                        g_low, g_high = float32(1.0), float32(1.0)
                        if normed:
                            g_low, g_high = norm_weight[first + i], norm_weight[first + QK // 2 + i]
                        for c in range(per_pass):
                            if per_pass == 1 or t0 + c < tokens:
                                low = x[t0 + c, first + i]
                                high = x[t0 + c, first + QK // 2 + i]
                                if normed:
                                    squares[c] += low * low + high * high
                                    low *= g_low
                                    high *= g_high
                                dot[c] += q_low * low + q_high * high
                                x_sum[c] += low + high
                    for c in range(per_pass):
                        acc[c] += d * dot[c] + m * x_sum[c]

    return quarters_pass


@functools.cache
def q4_1_gemm_tokens_quarters_kernel(per_pass: int):
    """The kernel for ``per_pass`` tokens a pass: warp ``row`` computes y[:, row] (``q4_1_quarters_pass``)."""
    quarters_pass = q4_1_quarters_pass(False, per_pass)

    @cuda.jit
    def q4_1_gemm_tokens_quarters(words, x, y):
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
                        y[t0 + c, row] = total

    return q4_1_gemm_tokens_quarters


@functools.cache
def q8_0_gemm_tokens_quarters_kernel(per_pass: int):
    """The kernel for ``per_pass`` tokens a pass: warp ``row`` computes y[:, row] from W's Q8_0 blocks as 16-bit
    words (N, blocks, 17): word 0 the scale d, word 1 + i codes 2 i (low byte) and 2 i + 1. Unit u = 4 b + s is block
    b's scale and codes 8 s ... 8 s + 7 (words 1 + 4 s ... 4 + 4 s); lane l takes units l, l + 32, ..., two at a
    time, both loaded before their arithmetic (in scalars: an array of them indexed in a loop too long to unroll
    would live in local memory)."""

    @cuda.jit(device=True, inline=True)
    def unit(x, t0, u, scale, c0, c1, c2, c3, acc):
        tokens = x.shape[0]
        d, _ = unpack_halves(scale)
        first = (u >> 2) * QK + 8 * (u & 3)
        dot = cuda.local.array(per_pass, float32)
        for c in range(per_pass):
            dot[c] = float32(0.0)
        for i in range(4):
            word = c0 if i == 0 else (c1 if i == 1 else (c2 if i == 2 else c3))
            even = float32(int32((word & 0xFF) ^ 0x80) - 0x80)          # the low byte as an int8
            odd = float32(int32((word >> 8) ^ 0x80) - 0x80)
            for c in range(per_pass):
                if per_pass == 1 or t0 + c < tokens:
                    dot[c] += even * x[t0 + c, first + 2 * i] + odd * x[t0 + c, first + 2 * i + 1]
        for c in range(per_pass):
            acc[c] += d * dot[c]

    @cuda.jit
    def q8_0_gemm_tokens_quarters(halves, x, y):
        lane = cuda.threadIdx.x % WARP
        row = cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP
        if row < halves.shape[0]:
            tokens = x.shape[0]
            units = halves.shape[1] * 4
            acc = cuda.local.array(per_pass, float32)
            for t0 in range(0, tokens, per_pass):
                for c in range(per_pass):
                    acc[c] = float32(0.0)
                for u0 in range(lane, units, 2 * WARP):
                    u1 = min(u0 + WARP, units - 1)
                    b0, w0 = u0 >> 2, 1 + 4 * (u0 & 3)
                    b1, w1 = u1 >> 2, 1 + 4 * (u1 & 3)
                    s0, a0, a1, a2, a3 = (uint32(halves[row, b0, 0]), uint32(halves[row, b0, w0]),
                                          uint32(halves[row, b0, w0 + 1]), uint32(halves[row, b0, w0 + 2]),
                                          uint32(halves[row, b0, w0 + 3]))
                    s1, e0, e1, e2, e3 = (uint32(halves[row, b1, 0]), uint32(halves[row, b1, w1]),
                                          uint32(halves[row, b1, w1 + 1]), uint32(halves[row, b1, w1 + 2]),
                                          uint32(halves[row, b1, w1 + 3]))
                    unit(x, t0, u0, s0, a0, a1, a2, a3, acc)
                    if u0 + WARP < units:
                        unit(x, t0, u1, s1, e0, e1, e2, e3, acc)
                for c in range(per_pass):
                    total = warp_sum(acc[c])
                    if lane == 0 and t0 + c < tokens:
                        y[t0 + c, row] = total

    return q8_0_gemm_tokens_quarters


def q8_0_gemm_tokens_quarters(w, x, *, out=None, kernel=q8_0_gemm_tokens_quarters_kernel):
    """y (T, N) = x W^T for Q8_0 weights w (N, blocks, 34) and x (T, K): a warp per row, four lanes a block;
    ``kernel(tokens_per_pass(T))`` is launched."""
    return _launch(kernel, w, x, out, "q8_0", words=np.uint16)


def q4_1_gemm_tokens_quarters(w, x, *, out=None, kernel=q4_1_gemm_tokens_quarters_kernel):
    """y (T, N) = x W^T for Q4_1 weights w (N, blocks, 20) and x (T, K): a warp per row, four lanes a block;
    ``kernel(tokens_per_pass(T))`` is launched."""
    return _launch(kernel, w, x, out, "q4_1", words=np.uint32)


# ----------------------------------------------------------------------------------------------
# 16-byte loads over repacked codes: the _wide rung (the output head)
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _row_sum(value):
    """The sum of ``value`` over the ``_LANES_PER_ROW`` lanes of a row (lanes 4 i ... 4 i + 3), in each of them."""
    value += cuda.shfl_xor_sync(FULL_MASK, value, 1)
    return value + cuda.shfl_xor_sync(FULL_MASK, value, 2)


@cuda.jit(device=True, inline=True)
def _wide_chunk(x_words, t, c, scale, w0, w1, w2, w3):
    """d times the dot of chunk ``c``'s 16 int8 codes (the words w0 ... w3, first code in w0's low byte) with x[t,
    16 c ... 16 c + 15], read as four 16-byte loads of its bits; the products summed in order."""
    d, _ = unpack_halves(uint32(scale))
    dot = float32(0.0)
    for i in range(4):
        word = uint32((w0 if i == 0 else (w1 if i == 1 else (w2 if i == 2 else w3))) ^ _SIGN_BITS)
        a0, a1, a2, a3 = load_u32x4(x_words, t, 16 * c + 4 * i)
        for j in range(4):
            activation = bits_float(a0 if j == 0 else (a1 if j == 1 else (a2 if j == 2 else a3)))
            # code + 128 as the low byte of 2^23's bits: the float 2^23 + code + 128, exactly (no int-to-float)
            code = bits_float(byte_perm(word, _TWO_TO_23, uint32(_SELECT_BYTE + j))) - _CODE_OFFSET
            dot += code * activation
    return d * dot


@cuda.jit
def q8_0_gemm_tokens_wide_kernel(codes, scales, x_words, y):
    """Over ``q8_0_repack``'s layout: codes (N, blocks x 8) uint32 (a block's 32 int8 codes on a 16-byte boundary),
    scales (N, blocks) uint16 (d's bits), x as uint32 words (T, K) (its float32 bits), y (T, N). Warp w computes rows
    8 w ... 8 w + 7, four lanes a row: lane l takes row 8 w + l // 4 and the row's 16-byte chunks (16 codes, half a
    block) l % 4, l % 4 + 4, ...; it loads ``TOKENS_WIDE_CHUNKS_AHEAD`` chunks and their scales, a chunk in one
    ``ld.global.nc.v4.u32``, before their arithmetic, then for each token in turn multiplies them (the 16
    activations of a chunk in four such loads, from L1: the warp's 8 rows share them): a chunk's 16 products summed
    in order and scaled by its block's d, the lane's chunks added, two shuffles adding the row's four lanes. The
    codes stay in registers for all the tokens, so W is read once whatever T. A row of more than 4 x
    ``TOKENS_WIDE_CHUNKS_AHEAD`` chunks (K > 576) takes several rounds, each adding its sums to y's."""
    lane = cuda.threadIdx.x % WARP
    first = (cuda.blockIdx.x * GEMV_WARPS + cuda.threadIdx.x // WARP) * TOKENS_WIDE_ROWS_PER_WARP
    n = codes.shape[0]
    if first < n:                         # the same for the whole warp: its shuffles see all 32 lanes
        row = first + lane // _LANES_PER_ROW
        part = lane % _LANES_PER_ROW
        r = min(row, n - 1)               # a row past N loads row N - 1's bytes and stores nothing
        chunks = codes.shape[1] // 4
        words = cuda.local.array((TOKENS_WIDE_CHUNKS_AHEAD, 4), uint32)
        held = cuda.local.array(TOKENS_WIDE_CHUNKS_AHEAD, uint32)
        for c0 in range(0, max(chunks, 1), _LANES_PER_ROW * TOKENS_WIDE_CHUNKS_AHEAD):
            for a in range(TOKENS_WIDE_CHUNKS_AHEAD):           # the loads first: a lane's chunks in flight at once
                c = min(c0 + part + _LANES_PER_ROW * a, chunks - 1)
                if c >= 0:
                    words[a, 0], words[a, 1], words[a, 2], words[a, 3] = load_u32x4(codes, r, 4 * c)
                    held[a] = uint32(scales[r, c >> 1])
            for t in range(x_words.shape[0]):
                total = float32(0.0)
                for a in range(TOKENS_WIDE_CHUNKS_AHEAD):
                    c = c0 + part + _LANES_PER_ROW * a
                    if c < chunks:
                        total += _wide_chunk(x_words, t, c, held[a], words[a, 0], words[a, 1], words[a, 2],
                                             words[a, 3])
                total = _row_sum(total)
                if part == 0 and row < n:
                    y[t, row] = total if c0 == 0 else y[t, row] + total


def q8_0_gemm_tokens_wide(w, x, *, out=None, kernel=q8_0_gemm_tokens_wide_kernel):
    """y (T, N) = x W^T for Q8_0 weights and x (T, K): w is the GGUF bytes (N, blocks, 34), repacked on the host at
    each call (a check's one call), or ``q8_0_repack(w)``'s ``Q8_0Repacked``, which a model keeps: then the call is
    one launch, ceil(N / 32) blocks of ``GEMV_WARPS`` warps."""
    w, n, blocks = half_scale_weights(w, x, "q8_0", Q8_0Repacked, q8_0_repack)
    t, _ = require_float32("x", x, (None, blocks * QK), dims=("T", "K"))
    if out is not None:
        require_float32("out", out, (t, n), dims=("T", "rows"))
    out = output_array("out", out, (t, n), like=x)
    if t and n:
        x_words = x.view(np.uint32)           # the float32 bits, which load_u32x4 reads (x is C-contiguous)
        kernel[cdiv(n, GEMV_WARPS * TOKENS_WIDE_ROWS_PER_WARP), GEMV_WARPS * WARP](
            w.codes.reshape(n, blocks * 8), w.scales, x_words, out)
    return out


RUNGS = ladder(
    Rung("q8_0_gemm_tokens_warp_per_row", q8_0_gemm_tokens_warp_per_row,
         "Q8_0 for a step's tokens: each code byte loaded once for 8 tokens, a running sum per token"),
    Rung("q4_1_gemm_tokens_warp_per_row", q4_1_gemm_tokens_warp_per_row,
         "Q4_1 for a step's tokens: each byte's nibbles unpacked once for 8 tokens"),
    Rung("q8_0_gemm_tokens_quarters", q8_0_gemm_tokens_quarters,
         "Q8_0, four lanes a block: every lane of the warp busy, a lane's loads issued before their arithmetic"),
    Rung("q4_1_gemm_tokens_quarters", q4_1_gemm_tokens_quarters,
         "Q4_1, four lanes a block (a word of codes each), the loads first"),
    Rung("q8_0_gemm_tokens_wide", q8_0_gemm_tokens_wide,
         "Q8_0 repacked at load time: 16-byte loads, four lanes a row, 8 rows a warp, 9 chunks a lane in flight"),
)
