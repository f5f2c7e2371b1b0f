"""Quantized GEMV for the few tokens of one step (day 10): y (T, N) = x (T, K) W^T, W in its GGUF bytes.

A model's step carries T tokens: a prompt's at prefill, one per running request at decode. Day 9's warp-per-row
rungs (``kernels.quantized_gemv``) multiply one token, so an engine launched them T times per matrix and read W T
times. These rungs take the step's T tokens in one launch and load each byte of W once for up to
``TOKENS_PER_PASS`` tokens. Shapes as there: w (N, blocks, block_bytes) uint8, x (T, K) float32 with K = 32 blocks,
y (T, N) float32 (as ``torch.nn.functional.linear``: y[t] = W x[t]); T = 0 gives an empty y. The float64
reference is ``x @ reference.dequantize_<fmt>(w.reshape(N, -1)).T``. The rungs, in ladder order, one line each:

- ``q8_0_gemm_tokens_warp_per_row``: Q8_0, a warp per row, each code byte loaded once for 8 tokens.
- ``q4_1_gemm_tokens_warp_per_row``: Q4_1, a warp per row, each byte's two nibbles unpacked once for 8 tokens.

Each token's sum is made as day 9's warp-per-row rung makes it (a lane per block, the block's products summed in
the same order, scaled once by d, m times the block's sum of x, the lanes added by the same butterfly), so on the
simulator token t's y equals that rung's y for x[t] bit for bit, and an engine that switches between them computes
the same numbers. Warp ``row`` of the grid takes the tokens in passes of ``TOKENS_PER_PASS``: per pass a lane
keeps a running sum per token (an array of ``TOKENS_PER_PASS`` floats, every loop over it of that fixed trip count,
so that it stays in registers), loads a block's scale, minimum and bytes once, and multiplies them by each token's
activations of that block (from L1 and L2 after the first warp). A step of T <= 8 tokens reads W once where T
launches of the one-token rung read it T times and cost T launches.

Each rung is a ``<rung>_kernel`` plus the launcher ``<rung>(w, x, *, out=None, kernel=<rung>_kernel)``, which
validates the arguments, launches one warp per row in blocks of ``GEMV_WARPS`` warps and returns y.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32

from kernels.launching import WARP, cdiv, output_array, require_array, require_float32, require_same_kind
from kernels.quantized_gemv import BLOCK_BYTES, GEMV_WARPS, QK, half_from_bytes, warp_sum
from kernels.registry import Rung, ladder

__all__ = ["TOKENS_PER_PASS", "RUNGS", "q8_0_gemm_tokens_warp_per_row_kernel", "q8_0_gemm_tokens_warp_per_row",
           "q4_1_tokens_pass", "q4_1_gemm_tokens_warp_per_row_kernel", "q4_1_gemm_tokens_warp_per_row"]

TOKENS_PER_PASS = 8         # tokens a lane keeps a running sum for while it reads a block of W


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


def _launch(kernel, w, x, out, fmt):
    t, n, _ = _tokens_shape(w, x, out, fmt)
    out = output_array("out", out, (t, n), like=x)
    if t and n:
        kernel[cdiv(n, GEMV_WARPS), GEMV_WARPS * WARP](w, x, out)
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


RUNGS = ladder(
    Rung("q8_0_gemm_tokens_warp_per_row", q8_0_gemm_tokens_warp_per_row,
         "Q8_0 for a step's tokens: each code byte loaded once for 8 tokens, a running sum per token"),
    Rung("q4_1_gemm_tokens_warp_per_row", q4_1_gemm_tokens_warp_per_row,
         "Q4_1 for a step's tokens: each byte's nibbles unpacked once for 8 tokens"),
)
