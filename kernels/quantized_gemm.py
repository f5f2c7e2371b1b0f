"""W8A8 GEMM ``y = (A_q W_q^T) sa sw`` on int8 codes (day 9's prefill): integer products, an exact int32 sum, one scale.

Shapes: a_q (M, K) int8, the activations of M tokens quantized per token with scales sa (M,) float32; w_q (N, K)
int8, the weight of a linear layer stored as one row per output channel (as torch stores it) with scales sw (N,)
float32; y (M, N) float32, y[m, n] = sa[m] sw[n] sum_k a_q[m, k] w_q[n, k]. K must be a multiple of 32 (one k
step of the tensor-core rung; the hidden sizes of language models are) and at most 131071, so no sum of products
(each at most 128 * 128 = 2**14) leaves int32; any M and N (rows and columns outside y are zero-filled tiles,
stored nowhere). The float64 reference is ``reference.w8a8_matmul``; the byte and integer-op models of each rung
are in ``course.models.quantized_gemm``.

The rungs, in ladder order, one line each (how each works follows):

- ``w8a8_gemm_v1_dp4a``: 64 x 64 tiles of y from shared tiles of int8 words, 4 x 4 outputs a thread, dp4a.
- ``w8a8_gemm_v2_tensor_cores``: the same tiles on int8 tensor cores, a warp's 32 x 32 as 8 m16n8k32 mmas.
- ``w8a8_gemm_v3_large_tiles``: v2's mmas on day 8's fastest tensor-core loop: 128 x 128 tiles, cp.async, ldmatrix.

Both rungs read the same bytes: a block of threads takes a 64 x 64 tile of y and steps through K 32 codes at a
time, copying 64 rows of A and 64 rows of W, 8 words of 4 codes each, into shared memory (``tiles[0]`` and
``tiles[1]``; a row of W is a column of B = W^T, so W's rows are exactly the column-major B an mma takes). Each
code of A is then read from global memory once per block column of y, each code of W once per block row. The sum
stays an int32 until the epilogue, which converts it to float32 and multiplies it by sa[m] and then sw[n], each
read once per thread that holds the row or the column.

- v1, CUDA cores: 16 x 16 threads, thread (tx, ty) owns rows ty + 16 i and columns tx + 16 j (i, j < 4); per word
  of the step it reads 4 words of A and 4 of W from shared memory and issues 16 ``kernels.intrinsics.dp4a``, 4
  multiply-adds of int8 pairs into an int32 each. Shared rows are 9 words long: the 16 rows a half-warp reads
  then fall in 16 different banks.
- v2, tensor cores: 4 warps in 2 x 2, each on a 32 x 32 patch: per step 2 x 4 ``mma.sync.aligned.m16n8k32``
  (``kernels.intrinsics.mma_m16n8k32_s8``: A 16 x 32 int8, B 32 x 8 int8, int32 accumulators), each a warp's
  16 x 8 x 32 product in one instruction. Lane 4 g + t reads its fragments from shared words: a = A rows g and
  g + 8 of the mma's 16, words t and t + 4 of the step; b = W row g of the mma's 8, words t and t + 4. Shared
  rows are 12 words long: the 8 rows x 4 words of a fragment load land in 32 different banks.

- v3, the tensor-core GEMM ladder's loop (``kernels.tensor_core_gemm``, v5): an int8 mma's fragments hold the
  same bytes of the same rows as an fp16 mma's (``m16n8k32``'s a0 is bytes 4t ... 4t + 3 of row g of a 32-byte
  slice of K, ``m16n8k16``'s is numbers 2t, 2t + 1 of row g of a 16-number, 32-byte slice: word t either way, and
  so for a1 ... a3, b0, b1 and the accumulators), so v5's loop runs unchanged on the codes read as 16-bit words, two
  codes a word: ``tensor_core_gemm.swizzled_mainloop`` with ``mma_m16n8k32_s8`` in place of ``mma_m16n8k16``. A
  block of 8 warps takes a 128 x 128 tile of y and steps through K 64 codes at a time; 16-byte ``cp.async`` copies
  fill a ring of 3 steps (48 KB) whose rows are XOR-swizzled, each warp loads its fragments with ``ldmatrix.x4``
  without bank conflicts and issues 16 mmas (a 64 x 32 patch) per 32 codes of K. Each code of A is read from
  global memory once per 128-wide block column, each of W once per block row: half v1's and v2's traffic. The
  epilogue is v2's, per lane: rows g, g + 8 of each of 4 mma rows, columns 2t, 2t + 1 of each of 4 mma columns;
  sa[m] read by the 16 lanes (4 warps x 4) that hold row m, sw[n] by the 16 (2 warps x 8) that hold column n.
  ``launch_bounds`` asks ptxas for 2 blocks an SM (``LARGE_MIN_BLOCKS``): 128 registers a thread, no spills.
  Prediction, made before it ran on a GPU: v2 stages its tiles with 4-byte loads through registers between two
  barriers a step, as the fp16 ladder's v1 and v2 did, and stayed where they stayed (57 TOP/s at 4096^3 on the
  H200, 0.07 of torch._int_mm; fp16 v1: 17 TFLOP/s on the H100). Day 8's v5 loop ran at 232 TFLOP/s at 4096^3 on
  the H100, 14 times v1. v3 moves the same bytes per mma instruction as v5, and each of its mmas does twice the
  operations of v5's (Hopper's dense int8 tensor-core peak is twice its fp16 one, 1,979 against 989 TOP/s on an
  H100 SXM; the prediction assumes mma.sync keeps that ratio), so if v3 is limited where v5 is (instructions,
  latency and shared memory per staged byte, not the tensor cores' rate) it should run at about twice v5's rate:
  400-460 TOP/s at 4096^3, 0.48-0.55 of the 837 TOP/s that torch._int_mm ran at in day 9's H200 recording. If it
  runs near v5's 232 instead, the tensor cores' issue rate, not the loop, limits both. Measured since on an H100
  (``course/data/day09_gemm_timing.json``, L2 flushed, the GPU's time alone): 459 TOP/s at 4096^3 and 529 at
  8192^3, 0.54 and 0.57 of torch._int_mm in the same run (844 and 932 TOP/s), 1.9 and 2.2 times the fp16 v5's
  rate in day 8's H100 recording: inside the predicted band at 4,096, just above it at 8,192, so v3 is limited
  where v5 is, not by the int8 tensor cores' rate. On an H200 (``day09_gemm_timing_other_gpu``, 2026-12-07): 461
  TOP/s at 4096^3, 0.55 of torch._int_mm's 841 in the same run.

A tool beside the ladder (a kernel with a launcher of the same pattern, not a rung: its output is codes, checked
bit for bit):

- ``quantize_per_token``: float32 rows (tokens) to int8 codes and a scale each, a warp per row, bit for bit
  ``reference.quantize_int8(x, axis=0)``: sa = amax / 127 (at least the smallest normal float32), codes
  rint(x / sa), halves to even, in [-127, 127].

Each rung is a ``<rung>_kernel`` plus the launcher ``<rung>(a_q, sa, w_q, sw, *, out=None, kernel=<rung>_kernel)``,
which validates the arguments, launches a grid of ceil(N / 64) x ceil(M / 64) blocks (v3: ceil(N / 128) x
ceil(M / 128) blocks of 256 threads, M at most 65535 x 128) and returns y. Launchers accept NumPy arrays or numba
device arrays (``kernels.launching``); v1 and v2 read A and W as uint32 words, v3 as uint16 words of two codes
(a view, no copy). M = 0 or N = 0 launches nothing; K = 0 gives zeros.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64, int32, int8, uint32

from kernels import tensor_core_gemm as _tc
from kernels.intrinsics import dp4a, mma_m16n8k32_s8
from kernels.launching import (FULL_MASK, WARP, cdiv, output_array, require_array, require_float32,
                               require_same_kind)
from kernels.registry import Rung, ladder

__all__ = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "K_WORDS", "MAX_K", "THREAD_M", "THREAD_N", "THREADS_X", "THREADS_Y",
           "DP4A_ROW", "WARPS_M", "WARPS_N", "WARP_TILE_M", "WARP_TILE_N", "MMA_M", "MMA_N", "MMA_K", "MMA_ROW",
           "TC_THREADS", "QUANT_WARPS", "SMALLEST_SCALE", "RUNGS", "gemm_shape",
           "w8a8_gemm_v1_dp4a_kernel", "w8a8_gemm_v1_dp4a",
           "w8a8_gemm_v2_tensor_cores_kernel", "w8a8_gemm_v2_tensor_cores", "LARGE_BLOCK_M", "LARGE_BLOCK_N",
           "LARGE_THREADS", "LARGE_MAX_M", "LARGE_MIN_BLOCKS", "w8a8_gemm_v3_large_tiles_kernel",
           "w8a8_gemm_v3_large_tiles",
           "quantize_per_token_kernel", "quantize_per_token"]

# Both rungs: a 64 x 64 tile of y per block, K in steps of 32 codes (8 uint32 words of 4 codes).
BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
K_WORDS = BLOCK_K // 4
MAX_K = (2 ** 31 - 1) // 2 ** 14          # 131071: K products of 2**14 still fit an int32
# v1: 16 x 16 threads, 4 x 4 outputs each; shared rows of K_WORDS + 1 words (see the docstring).
THREAD_M = 4
THREAD_N = 4
THREADS_X = BLOCK_N // THREAD_N
THREADS_Y = BLOCK_M // THREAD_M
DP4A_ROW = K_WORDS + 1
# v2: 2 x 2 warps, each a 32 x 32 patch of 2 x 4 mma tiles of 16 x 8 (k 32); shared rows of K_WORDS + 4 words.
WARPS_M = 2
WARPS_N = 2
WARP_TILE_M = BLOCK_M // WARPS_M
WARP_TILE_N = BLOCK_N // WARPS_N
MMA_M, MMA_N, MMA_K = 16, 8, 32
MMAS_M = WARP_TILE_M // MMA_M
MMAS_N = WARP_TILE_N // MMA_N
MMA_ROW = K_WORDS + 4
TC_THREADS = WARPS_M * WARPS_N * WARP
# v3: day 8's v5 tiles, 128 x 128 of y a block of 2 x 4 warps of 4 x 4 mma tiles (64 x 32), K 64 codes a step.
LARGE_BLOCK_M = _tc.LARGE_BLOCK_M
LARGE_BLOCK_N = _tc.LARGE_BLOCK_N
LARGE_WARPS_N = _tc.LARGE_WARPS_N
LARGE_MMAS_M = _tc.LARGE_WARP_TILE_M // MMA_M
LARGE_MMAS_N = _tc.LARGE_WARP_TILE_N // MMA_N
LARGE_THREADS = _tc.LARGE_THREADS
LARGE_MAX_M = _tc.LARGE_MAX_M
# Blocks of v3 an SM must hold at once (launch_bounds): 2, as day 8's v5 holds, so ptxas keeps v3 at 128 registers
# a thread (65,536 / (2 x 256)), not the 140 it takes unbounded (CUDA 13.0, sm_90), which lets one block in.
LARGE_MIN_BLOCKS = 2
# The quantizer: a warp per row, QUANT_WARPS rows per block of threads.
QUANT_WARPS = 4
SMALLEST_SCALE = float(np.finfo(np.float32).tiny)   # the reference's floor for a scale


def gemm_shape(a_q, sa, w_q, sw, out=None) -> tuple[int, int, int]:
    """Validate a_q (M, K) int8, sa (M,) float32, w_q (N, K) int8, sw (N,) float32 (and out (M, N) float32 if given),
    K a multiple of 32 and at most MAX_K; return (M, N, K)."""
    m, k = require_array("a_q", a_q, (None, None), np.int8, dims=("M", "K"))
    require_float32("sa", sa, (m,), dims=("M",))
    n = require_array("w_q", w_q, (None, k), np.int8, dims=("N", "K"))[0]
    require_float32("sw", sw, (n,), dims=("N",))
    require_same_kind(a_q=a_q, sa=sa, w_q=w_q, sw=sw)
    if k % BLOCK_K:
        raise ValueError(f"a_q must have K (its last dimension) a multiple of {BLOCK_K}, got shape {tuple(a_q.shape)}")
    if k > MAX_K:
        raise ValueError(f"a_q must have K at most {MAX_K} (an int32 sum of K int8 products), got K = {k}")
    if out is not None:
        require_float32("out", out, (m, n), dims=("M", "N"))
    return m, n, k


def _launch(kernel, block, a_q, sa, w_q, sw, out):
    m, n, _ = gemm_shape(a_q, sa, w_q, sw, out)
    out = output_array("out", out, (m, n), like=a_q)
    if m and n:
        kernel[(cdiv(n, BLOCK_N), cdiv(m, BLOCK_M)), block](a_q.view(np.uint32), sa, w_q.view(np.uint32), sw, out)
    return out


@cuda.jit(device=True, inline=True)
def _load_step(tiles, a_q, w_q, row0, col0, k0, thread, threads):
    """The block's threads copy the step's 64 rows x 8 words of A and of W into ``tiles[0]`` and ``tiles[1]``,
    consecutive threads on consecutive words of a row (a warp reads 4 rows of 32 bytes); rows outside A or W get
    zeros without a load."""
    m = a_q.shape[0]
    n = w_q.shape[0]
    for slot in range(thread, BLOCK_M * K_WORDS, threads):
        r = slot // K_WORDS
        kw = slot - r * K_WORDS
        if row0 + r < m:
            tiles[0, r, kw] = a_q[row0 + r, k0 + kw]
        else:
            tiles[0, r, kw] = uint32(0)
        if col0 + r < n:
            tiles[1, r, kw] = w_q[col0 + r, k0 + kw]
        else:
            tiles[1, r, kw] = uint32(0)


# ----------------------------------------------------------------------------------------------
# v1: CUDA cores, 4 int8 multiply-adds per dp4a
# ----------------------------------------------------------------------------------------------

@cuda.jit
def w8a8_gemm_v1_dp4a_kernel(a_q, sa, w_q, sw, y):
    """Block (bx, by) computes y[64 by:, 64 bx:]; thread (tx, ty) its rows ty + 16 i and columns tx + 16 j. a_q and
    w_q are the codes as uint32 words (M, K / 4) and (N, K / 4)."""
    tiles = cuda.shared.array((2, BLOCK_M, DP4A_ROW), uint32)
    acc = cuda.local.array((THREAD_M, THREAD_N), int32)
    a_frag = cuda.local.array(THREAD_M, uint32)
    w_frag = cuda.local.array(THREAD_N, uint32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row0 = cuda.blockIdx.y * BLOCK_M
    col0 = cuda.blockIdx.x * BLOCK_N
    m = a_q.shape[0]
    n = w_q.shape[0]
    for i in range(THREAD_M):
        for j in range(THREAD_N):
            acc[i, j] = 0
    for k0 in range(0, a_q.shape[1], K_WORDS):
        _load_step(tiles, a_q, w_q, row0, col0, k0, ty * THREADS_X + tx, THREADS_X * THREADS_Y)
        cuda.syncthreads()
        for kw in range(K_WORDS):
            for i in range(THREAD_M):
                a_frag[i] = tiles[0, ty + i * THREADS_Y, kw]
            for j in range(THREAD_N):
                w_frag[j] = tiles[1, tx + j * THREADS_X, kw]
            for i in range(THREAD_M):
                for j in range(THREAD_N):
                    acc[i, j] = dp4a(a_frag[i], w_frag[j], acc[i, j])
        cuda.syncthreads()
    # The epilogue: the exact int32 sum to float32, times the token's scale, times the channel's.
    row_scale = cuda.local.array(THREAD_M, float32)
    col_scale = cuda.local.array(THREAD_N, float32)
    for i in range(THREAD_M):
        if row0 + ty + i * THREADS_Y < m:
            row_scale[i] = sa[row0 + ty + i * THREADS_Y]
    for j in range(THREAD_N):
        if col0 + tx + j * THREADS_X < n:
            col_scale[j] = sw[col0 + tx + j * THREADS_X]
    for i in range(THREAD_M):
        row = row0 + ty + i * THREADS_Y
        for j in range(THREAD_N):
            col = col0 + tx + j * THREADS_X
            if row < m and col < n:
                y[row, col] = float32(acc[i, j]) * row_scale[i] * col_scale[j]


def w8a8_gemm_v1_dp4a(a_q, sa, w_q, sw, *, out=None, kernel=w8a8_gemm_v1_dp4a_kernel):
    """y = (A_q W_q^T) sa sw with dp4a on CUDA cores; grid (ceil(N/64), ceil(M/64)) of (16, 16) threads."""
    return _launch(kernel, (THREADS_X, THREADS_Y), a_q, sa, w_q, sw, out)


# ----------------------------------------------------------------------------------------------
# v2: the same tiles on int8 tensor cores, mma.sync.aligned.m16n8k32
# ----------------------------------------------------------------------------------------------

@cuda.jit
def w8a8_gemm_v2_tensor_cores_kernel(a_q, sa, w_q, sw, y):
    """Block (bx, by) computes y[64 by:, 64 bx:]; warp (wm, wn) = divmod(warp, 2) its rows 32 wm + 16 mi + ... and
    columns 32 wn + 8 ni + ... (mi < 2, ni < 4), lane 4 g + t the accumulators of rows g, g + 8 and columns 2t,
    2t + 1 of each mma tile. a_q and w_q are the codes as uint32 words (M, K / 4) and (N, K / 4)."""
    tiles = cuda.shared.array((2, BLOCK_M, MMA_ROW), uint32)
    acc = cuda.local.array((MMAS_M, MMAS_N, 4), int32)
    thread = cuda.threadIdx.x
    warp = thread // WARP
    lane = thread % WARP
    g = lane // 4
    t = lane % 4
    warp_row = (warp // WARPS_N) * WARP_TILE_M
    warp_col = (warp % WARPS_N) * WARP_TILE_N
    row0 = cuda.blockIdx.y * BLOCK_M
    col0 = cuda.blockIdx.x * BLOCK_N
    m = a_q.shape[0]
    n = w_q.shape[0]
    for mi in range(MMAS_M):
        for ni in range(MMAS_N):
            for c in range(4):
                acc[mi, ni, c] = 0
    for k0 in range(0, a_q.shape[1], K_WORDS):
        _load_step(tiles, a_q, w_q, row0, col0, k0, thread, TC_THREADS)
        cuda.syncthreads()
        for mi in range(MMAS_M):
            r = warp_row + mi * MMA_M + g
            a0 = tiles[0, r, t]
            a1 = tiles[0, r + 8, t]
            a2 = tiles[0, r, t + 4]
            a3 = tiles[0, r + 8, t + 4]
            for ni in range(MMAS_N):
                c = warp_col + ni * MMA_N + g
                acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3] = mma_m16n8k32_s8(
                    a0, a1, a2, a3, tiles[1, c, t], tiles[1, c, t + 4],
                    acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3])
        cuda.syncthreads()
    # The epilogue: lane 4 g + t holds rows g, g + 8 of each mma row and columns 2t, 2t + 1 of each mma column.
    row_scale = cuda.local.array((MMAS_M, 2), float32)
    col_scale = cuda.local.array((MMAS_N, 2), float32)
    for mi in range(MMAS_M):
        for h in range(2):
            if row0 + warp_row + mi * MMA_M + g + 8 * h < m:
                row_scale[mi, h] = sa[row0 + warp_row + mi * MMA_M + g + 8 * h]
    for ni in range(MMAS_N):
        for e in range(2):
            if col0 + warp_col + ni * MMA_N + 2 * t + e < n:
                col_scale[ni, e] = sw[col0 + warp_col + ni * MMA_N + 2 * t + e]
    for mi in range(MMAS_M):
        for h in range(2):
            row = row0 + warp_row + mi * MMA_M + g + 8 * h
            for ni in range(MMAS_N):
                for e in range(2):
                    col = col0 + warp_col + ni * MMA_N + 2 * t + e
                    if row < m and col < n:
                        y[row, col] = float32(acc[mi, ni, 2 * h + e]) * row_scale[mi, h] * col_scale[ni, e]


def w8a8_gemm_v2_tensor_cores(a_q, sa, w_q, sw, *, out=None, kernel=w8a8_gemm_v2_tensor_cores_kernel):
    """y = (A_q W_q^T) sa sw on int8 tensor cores; grid (ceil(N/64), ceil(M/64)) of 128 threads (4 warps)."""
    return _launch(kernel, TC_THREADS, a_q, sa, w_q, sw, out)


# ----------------------------------------------------------------------------------------------
# v3: v2's mmas on the tensor-core GEMM ladder's loop (day 8's v5): 128 x 128 tiles, cp.async, swizzle, ldmatrix
# ----------------------------------------------------------------------------------------------

_large_mainloop = _tc.swizzled_mainloop(mma_m16n8k32_s8, LARGE_BLOCK_M, LARGE_WARPS_N, LARGE_MMAS_M, LARGE_MMAS_N)


@cuda.jit(launch_bounds=(LARGE_THREADS, LARGE_MIN_BLOCKS))
def w8a8_gemm_v3_large_tiles_kernel(a_q, sa, w_q, sw, y):
    """Block (bx, by) computes y[128 by:, 128 bx:]; warp (wm, wn) = divmod(warp, 4) its rows 64 wm + 16 mi + ...
    and columns 32 wn + 8 ni + ... (mi, ni < 4), lane 4 g + t the accumulators of rows g, g + 8 and columns 2t,
    2t + 1 of each mma tile. a_q and w_q are the codes as uint16 words (M, K / 2) and (N, K / 2), K a multiple of
    32: ``tensor_core_gemm.swizzled_mainloop`` sums the int32 products, then v2's epilogue scales them."""
    acc = cuda.local.array((LARGE_MMAS_M, LARGE_MMAS_N, 4), int32)
    for mi in range(LARGE_MMAS_M):
        for ni in range(LARGE_MMAS_N):
            for c in range(4):
                acc[mi, ni, c] = 0
    _large_mainloop(a_q, w_q, acc)
    thread = cuda.threadIdx.x
    warp = thread // WARP
    lane = thread % WARP
    g = lane // 4
    t = lane % 4
    row0 = cuda.blockIdx.y * LARGE_BLOCK_M + (warp // LARGE_WARPS_N) * LARGE_MMAS_M * MMA_M
    col0 = cuda.blockIdx.x * LARGE_BLOCK_N + (warp % LARGE_WARPS_N) * LARGE_MMAS_N * MMA_N
    m = a_q.shape[0]
    n = w_q.shape[0]
    row_scale = cuda.local.array((LARGE_MMAS_M, 2), float32)
    col_scale = cuda.local.array((LARGE_MMAS_N, 2), float32)
    for mi in range(LARGE_MMAS_M):
        for h in range(2):
            if row0 + mi * MMA_M + g + 8 * h < m:
                row_scale[mi, h] = sa[row0 + mi * MMA_M + g + 8 * h]
    for ni in range(LARGE_MMAS_N):
        for e in range(2):
            if col0 + ni * MMA_N + 2 * t + e < n:
                col_scale[ni, e] = sw[col0 + ni * MMA_N + 2 * t + e]
    for mi in range(LARGE_MMAS_M):
        for h in range(2):
            row = row0 + mi * MMA_M + g + 8 * h
            for ni in range(LARGE_MMAS_N):
                for e in range(2):
                    col = col0 + ni * MMA_N + 2 * t + e
                    if row < m and col < n:
                        y[row, col] = float32(acc[mi, ni, 2 * h + e]) * row_scale[mi, h] * col_scale[ni, e]


def w8a8_gemm_v3_large_tiles(a_q, sa, w_q, sw, *, out=None, kernel=w8a8_gemm_v3_large_tiles_kernel):
    """y = (A_q W_q^T) sa sw on int8 tensor cores with the tensor-core GEMM ladder's loop: 128 x 128 tiles, 16-byte
    cp.async copies into a swizzled ring of 3 steps, ldmatrix; grid (ceil(N/128), ceil(M/128)) of 256 threads."""
    m, n, _ = gemm_shape(a_q, sa, w_q, sw, out)
    if m > LARGE_MAX_M:
        raise ValueError(f"a_q must have M at most {LARGE_MAX_M} (65535 block rows of {LARGE_BLOCK_M}: the grid's y "
                         f"dimension), got M = {m}")
    out = output_array("out", out, (m, n), like=a_q)
    if m and n:
        kernel[(cdiv(n, LARGE_BLOCK_N), cdiv(m, LARGE_BLOCK_M)), LARGE_THREADS](
            a_q.view(np.uint16), sa, w_q.view(np.uint16), sw, out)
    return out


# ----------------------------------------------------------------------------------------------
# Per-token int8 codes from float32 rows: the tool that makes a_q and sa
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _warp_max(value):
    """The largest ``value`` of the warp's 32 lanes, in every lane (butterfly of shfl_xor_sync)."""
    offset = WARP // 2
    while offset > 0:
        value = max(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
        offset //= 2
    return value


@cuda.jit
def quantize_per_token_kernel(x, a_q, sa):
    """Warp w of the grid quantizes row w of x, lane l its columns l, l + 32, ...: sa[w] = max(amax / 127,
    SMALLEST_SCALE) in float32 (amax / 127 rounded once, as the reference's float64 quotient rounded to float32
    is), a_q[w, j] = x[w, j] / sa[w] rounded to the nearest integer, halves to even, clamped to [-127, 127].
    The float32 quotient can round onto a half that the exact one misses; a quotient that lands on a half is
    settled by the sign of x - (f + 1/2) sa in float64 (exact: f + 1/2 has 9 significant bits, sa 24)."""
    lane = cuda.threadIdx.x % WARP
    row = cuda.blockIdx.x * QUANT_WARPS + cuda.threadIdx.x // WARP
    if row < x.shape[0]:               # the same for the whole warp: its shuffles see all 32 lanes
        k = x.shape[1]
        amax = float32(0.0)
        for j in range(lane, k, WARP):
            amax = max(amax, abs(x[row, j]))
        scale = max(_warp_max(amax) / float32(127.0), float32(SMALLEST_SCALE))
        for j in range(lane, k, WARP):
            v = x[row, j]
            q = v / scale
            f = float32(math.floor(q))
            fraction = q - f
            up = fraction > float32(0.5)
            if fraction == float32(0.5):
                excess = float64(v) - (float64(f) + 0.5) * float64(scale)
                up = excess > 0 or (excess == 0 and int32(f) % 2 != 0)
            code = f + float32(1.0) if up else f
            a_q[row, j] = int8(min(max(code, float32(-127.0)), float32(127.0)))
        if lane == 0:
            sa[row] = scale


def quantize_per_token(x, *, out=None, out_scales=None, kernel=quantize_per_token_kernel):
    """Quantize the rows of ``x`` (M, K) float32, one token each, to int8: returns (a_q, sa), a_q (M, K) int8
    (``out``) and sa (M,) float32 (``out_scales``), bit for bit ``reference.quantize_int8(x, axis=0)`` (its scale
    reshaped to (M,)). A warp per row, ``QUANT_WARPS`` warps per block of threads; grid ceil(M / QUANT_WARPS)."""
    m, k = require_float32("x", x, (None, None), dims=("M", "K"))
    codes = output_array("out", out, (m, k), like=x, dtype=np.int8)
    scales = output_array("out_scales", out_scales, (m,), like=x)
    if m:
        kernel[cdiv(m, QUANT_WARPS), QUANT_WARPS * WARP](x, codes, scales)
    return codes, scales


RUNGS = ladder(
    Rung("w8a8_gemm_v1_dp4a", w8a8_gemm_v1_dp4a,
         "64 x 64 tiles of y from shared int8 words, 4 x 4 outputs a thread, 4 multiply-adds per dp4a, int32 sums"),
    Rung("w8a8_gemm_v2_tensor_cores", w8a8_gemm_v2_tensor_cores,
         "the same tiles on int8 tensor cores: a warp's 32 x 32 as 8 mma.sync m16n8k32 per step of 32 codes"),
    Rung("w8a8_gemm_v3_large_tiles", w8a8_gemm_v3_large_tiles,
         "v2's mmas on day 8's v5 loop: 128 x 128 tiles, cp.async into a swizzled ring of 3, ldmatrix, 16 mmas a warp"),
)
