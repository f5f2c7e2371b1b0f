"""GEMM ``C = A @ B`` in numba.cuda (day 4): a ladder of nine rungs.

Shapes: a (M, K), b (K, N), c (M, N), all float32 and row-major (C-contiguous); the float64
reference is ``kernels.reference.gemm``. The byte and FLOP models of each rung are in
``course.models.gemm``.

- ``gemm_v1_naive``: one thread per element of C, ``threadIdx.x`` walking down a column of C, so the
  32 threads of a warp read 32 different rows of A at each step (32 sectors per load: uncoalesced).
- ``gemm_v2_coalesced``: the same work with ``threadIdx.x`` walking along a row of C: a warp reads one
  element of A (a broadcast) and 32 neighbouring elements of B (coalesced). Same element count.
- ``gemm_v3_shared_tiles``: a block of TILE×TILE threads stages TILE×TILE tiles of A and B in shared
  memory, with a barrier after loading and another before overwriting; each element of A is then
  read from global memory once per block column instead of once per thread: global reads fall by TILE.
- ``gemm_v4_register_blocked``: a block computes a BLOCK_M×BLOCK_N tile of C, each thread a
  THREAD_M×THREAD_N sub-tile held in registers; global reads fall by BLOCK_N (A) and BLOCK_M (B), and
  shared reads per multiply-add fall from 2 to (THREAD_M + THREAD_N) / (THREAD_M·THREAD_N).
- ``gemm_v5_wide_shared_loads``: 128×128 tiles of C, 8×8 of it per thread; A is stored transposed in
  shared memory and each thread owns two runs of 4 rows and two of 4 columns, so its 16 operands of
  a k are four 16-byte shared loads (ptxas merges 4 neighbouring loads it can prove aligned): one
  shared load instruction per 16 multiply-adds instead of one per 2. Bigger tiles alone, with v4's
  layout, are slower than v4 on an H100: 16 scalar loads and their address arithmetic per k.
- ``gemm_v6_unrolled``: v5 with the k loop of a step written out (eight calls of a device function:
  NVVM does not unroll a loop around 64 multiply-adds, and numba has no ``#pragma unroll``) and
  unsigned indices computed once (a signed index costs a fix-up for negative values): shared
  addresses become constants, and most instructions left are multiply-adds.
- ``gemm_v7_double_buffered``: the next step's slices of A and B are loaded into registers before
  this step's multiply-adds and stored into the other of two shared stages after them: one barrier
  per step instead of two, and the loads' latency hides behind arithmetic. Its kernel is built per
  block tile (``gemm_v7_double_buffered_kernel(block_m, block_n)``), 128×128 here.
- ``gemm_v8_autotuned``: v7's kernel with the block tile picked per GPU and shape from
  ``TILE_SHAPES``: the first launch on device arrays times each (``autotune``) and keeps the fastest;
  untimed (NumPy inputs, the simulator) it takes ``untuned_tile_shape``. Smaller tiles win where
  128×128 tiles make too few blocks to fill the GPU.
- ``gemm_v9_warp_tiled``: v8 with the threads of each warp on one compact WARP_TILE_M×WARP_TILE_N
  patch of the block tile (64×32), 8 lanes down it and 4 across, instead of two rows of 16 threads
  across the whole tile: the 32 lanes of a 16-byte shared load then ask for 8 different runs of A
  and 4 of B (one 128-byte wavefront each) instead of 2 and 16 (B: two wavefronts). The same loads,
  multiply-adds and tile choice as v8 (its own ``autotune`` entries). On an H100 it runs at 0.99 of v8
  from 2048³ to 8192³ and 0.88 at 1024³ (recording ``course/data/day04_gemm_timing.json``): shared
  memory was not what limited v8, so fewer wavefronts buy nothing here (day 4's lesson, section 13).

Each rung is a ``<rung>_kernel`` plus the launcher ``<rung>(a, b, *, out=None, kernel=<rung>_kernel)``,
which validates the inputs, sizes the grid, launches ``kernel`` and returns C (v7 to v9: ``kernel``
is a function of the block tile that returns the kernel); ``RUNGS`` registers the nine in order.
Launchers accept NumPy arrays or numba device arrays (``kernels.launching``); every kernel handles any
M, N, K, including ones the tile does not divide.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda, float32

from kernels.launching import WARP, cdiv, is_device_array, largest_filling, output_array, require_float32
from kernels.registry import Rung, ladder
from kernels.tuning import Tuner

__all__ = [
    "NAIVE_BLOCK", "TILE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "THREAD_M", "THREAD_N", "THREADS_X",
    "THREADS_Y", "WIDE_BLOCK_M", "WIDE_BLOCK_N", "WIDE_THREAD_M", "WIDE_THREAD_N", "WIDE_THREADS_X",
    "WIDE_THREADS_Y", "VECTOR", "TILE_PAD", "WIDE_ROW", "WIDE_A_ROW_STEP", "WIDE_A_LOADS", "WIDE_B_COL_STEP",
    "WIDE_B_LOADS", "WIDE_ACC", "TILE_SHAPES", "BLOCKS_TO_FILL", "RUNGS", "gemm_shape", "cdiv", "launch_gemm",
    "gemm_v1_naive_kernel", "gemm_v1_naive", "gemm_v2_coalesced_kernel", "gemm_v2_coalesced",
    "gemm_v3_shared_tiles_kernel", "gemm_v3_shared_tiles",
    "gemm_v4_register_blocked_kernel", "gemm_v4_register_blocked",
    "gemm_v5_wide_shared_loads_kernel", "gemm_v5_wide_shared_loads", "wide_grid",
    "gemm_v6_unrolled_kernel", "gemm_v6_unrolled",
    "gemm_v7_double_buffered_kernel", "gemm_v7_double_buffered",
    "gemm_v8_autotuned", "untuned_tile_shape", "tile_shape", "autotune", "tuned",
    "WARP", "WARP_TILE_M", "WARP_TILE_N", "gemm_v9_warp_tiled_kernel", "gemm_v9_warp_tiled",
]

# v1 and v2: 256 threads per block, 32 along x (one warp) and 8 along y.
NAIVE_BLOCK = (32, 8)
# v3: square tiles of C, A and B; one thread per element of the C tile.
TILE = 16
# v4: a block computes BLOCK_M×BLOCK_N of C, stepping through K by BLOCK_K; each of its
# THREADS_X×THREADS_Y threads computes THREAD_M×THREAD_N elements of C.
BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 8
THREAD_M = 4
THREAD_N = 4
THREADS_X = BLOCK_N // THREAD_N
THREADS_Y = BLOCK_M // THREAD_M


def gemm_shape(a, b, out=None) -> tuple[int, int, int]:
    """Validate a (M, K) and b (K, N) float32 C-contiguous (and out (M, N) if given); return (M, N, K)."""
    m, k = require_float32("a", a, (None, None))
    n = require_float32("b", b, (k, None))[1]
    if out is not None:
        require_float32("out", out, (m, n))
    return m, n, k


def launch_gemm(kernel, a, b, *, out=None, grid, block):
    """Validate the inputs, allocate C like ``a`` unless ``out`` is given, launch ``kernel[grid, block](a, b, c)``.

    An empty C (M or N is 0) launches nothing; K = 0 launches and the kernel writes zeros.
    Returns C, a NumPy array or a device array like the inputs.
    """
    m, n, _ = gemm_shape(a, b, out)
    out = output_array("out", out, (m, n), like=a)
    if m and n:
        kernel[grid, block](a, b, out)
    return out


# ----------------------------------------------------------------------------------------------
# v1: one thread per element of C, neighbouring threads on neighbouring rows
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v1_naive_kernel(a, b, c):
    """c[row, col] = sum_k a[row, k] * b[k, col]; x of the grid walks the rows of C."""
    row, col = cuda.grid(2)
    m, k = a.shape
    n = b.shape[1]
    if row < m and col < n:
        acc = float32(0.0)
        for i in range(k):
            acc += a[row, i] * b[i, col]
        c[row, col] = acc


def gemm_v1_naive(a, b, *, out=None, kernel=gemm_v1_naive_kernel):
    """C = A @ B with one thread per element of C; grid (ceil(M/32), ceil(N/8)) of (32, 8) threads."""
    m, n, _ = gemm_shape(a, b, out)
    grid = (cdiv(m, NAIVE_BLOCK[0]), cdiv(n, NAIVE_BLOCK[1]))
    return launch_gemm(kernel, a, b, out=out, grid=grid, block=NAIVE_BLOCK)


# ----------------------------------------------------------------------------------------------
# v2: the same work, neighbouring threads on neighbouring columns
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v2_coalesced_kernel(a, b, c):
    """c[row, col] = sum_k a[row, k] * b[k, col]; x of the grid walks the columns of C."""
    col, row = cuda.grid(2)
    m, k = a.shape
    n = b.shape[1]
    if row < m and col < n:
        acc = float32(0.0)
        for i in range(k):
            acc += a[row, i] * b[i, col]
        c[row, col] = acc


def gemm_v2_coalesced(a, b, *, out=None, kernel=gemm_v2_coalesced_kernel):
    """C = A @ B with one thread per element of C; grid (ceil(N/32), ceil(M/8)) of (32, 8) threads."""
    m, n, _ = gemm_shape(a, b, out)
    grid = (cdiv(n, NAIVE_BLOCK[0]), cdiv(m, NAIVE_BLOCK[1]))
    return launch_gemm(kernel, a, b, out=out, grid=grid, block=NAIVE_BLOCK)


# ----------------------------------------------------------------------------------------------
# v3: TILE×TILE tiles of A and B staged in shared memory
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v3_shared_tiles_kernel(a, b, c):
    """One block per TILE×TILE tile of C; thread (tx, ty) computes c[row, col] from shared tiles."""
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, k = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, k, TILE):
        # Every thread fills one slot of each tile, also threads outside C: their slots are
        # needed by others. Outside the matrices the slot gets a zero, so the loop below
        # needs no bounds test and reads nothing from global memory for it.
        if row < m and k0 + tx < k:
            a_tile[ty, tx] = a[row, k0 + tx]
        else:
            a_tile[ty, tx] = 0.0
        if k0 + ty < k and col < n:
            b_tile[ty, tx] = b[k0 + ty, col]
        else:
            b_tile[ty, tx] = 0.0
        cuda.syncthreads()  # the tiles are complete before anyone reads them
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        cuda.syncthreads()  # everyone has finished reading before the next step overwrites
    if row < m and col < n:
        c[row, col] = acc


def gemm_v3_shared_tiles(a, b, *, out=None, kernel=gemm_v3_shared_tiles_kernel):
    """C = A @ B with shared tiles; grid (ceil(N/TILE), ceil(M/TILE)) of (TILE, TILE) threads."""
    m, n, _ = gemm_shape(a, b, out)
    grid = (cdiv(n, TILE), cdiv(m, TILE))
    return launch_gemm(kernel, a, b, out=out, grid=grid, block=(TILE, TILE))


# ----------------------------------------------------------------------------------------------
# v4: a BLOCK_M×BLOCK_N tile of C per block, THREAD_M×THREAD_N of it per thread, in registers
# ----------------------------------------------------------------------------------------------

@cuda.jit
def gemm_v4_register_blocked_kernel(a, b, c):
    """Thread (tx, ty) owns rows ty + i*THREADS_Y and columns tx + j*THREADS_X of the block's C tile."""
    a_tile = cuda.shared.array((BLOCK_M, BLOCK_K), float32)
    b_tile = cuda.shared.array((BLOCK_K, BLOCK_N), float32)
    acc = cuda.local.array((THREAD_M, THREAD_N), float32)
    a_frag = cuda.local.array(THREAD_M, float32)
    b_frag = cuda.local.array(THREAD_N, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    thread = ty * THREADS_X + tx
    row0 = cuda.blockIdx.y * BLOCK_M
    col0 = cuda.blockIdx.x * BLOCK_N
    m, k = a.shape
    n = b.shape[1]
    for i in range(THREAD_M):
        for j in range(THREAD_N):
            acc[i, j] = 0.0
    for k0 in range(0, k, BLOCK_K):
        # The block's threads fill the tiles together, consecutive threads on consecutive
        # elements of a row (coalesced); slots outside the matrices get zeros without a load.
        for slot in range(thread, BLOCK_M * BLOCK_K, THREADS_X * THREADS_Y):
            r = slot // BLOCK_K
            kk = slot % BLOCK_K
            if row0 + r < m and k0 + kk < k:
                a_tile[r, kk] = a[row0 + r, k0 + kk]
            else:
                a_tile[r, kk] = 0.0
        for slot in range(thread, BLOCK_K * BLOCK_N, THREADS_X * THREADS_Y):
            kk = slot // BLOCK_N
            cc = slot % BLOCK_N
            if k0 + kk < k and col0 + cc < n:
                b_tile[kk, cc] = b[k0 + kk, col0 + cc]
            else:
                b_tile[kk, cc] = 0.0
        cuda.syncthreads()
        for kk in range(BLOCK_K):
            # THREAD_M + THREAD_N shared reads feed THREAD_M * THREAD_N multiply-adds.
            for i in range(THREAD_M):
                a_frag[i] = a_tile[ty + i * THREADS_Y, kk]
            for j in range(THREAD_N):
                b_frag[j] = b_tile[kk, tx + j * THREADS_X]
            for i in range(THREAD_M):
                for j in range(THREAD_N):
                    acc[i, j] += a_frag[i] * b_frag[j]
        cuda.syncthreads()
    for i in range(THREAD_M):
        row = row0 + ty + i * THREADS_Y
        for j in range(THREAD_N):
            col = col0 + tx + j * THREADS_X
            if row < m and col < n:
                c[row, col] = acc[i, j]


def gemm_v4_register_blocked(a, b, *, out=None, kernel=gemm_v4_register_blocked_kernel):
    """C = A @ B, register-blocked; grid (ceil(N/BLOCK_N), ceil(M/BLOCK_M)) of (THREADS_X, THREADS_Y)."""
    m, n, _ = gemm_shape(a, b, out)
    grid = (cdiv(n, BLOCK_N), cdiv(m, BLOCK_M))
    return launch_gemm(kernel, a, b, out=out, grid=grid, block=(THREADS_X, THREADS_Y))


# ----------------------------------------------------------------------------------------------
# v5 to v9 share a layout: 128×128 tiles of C (v8, v9: other shapes too), 8×8 of it per thread, and
# shared tiles stored k-major: tiles[0, kk, r] = A[row0 + r, k0 + kk] (A transposed on its way in)
# and tiles[1, kk, c] = B[k0 + kk, col0 + c]. Thread (tx, ty) owns rows ty·4 + i and
# block_m/2 + ty·4 + i, columns tx·4 + j and block_n/2 + tx·4 + j (i, j < 4): for each kk its 8
# values of A and its 8 of B are four runs of VECTOR neighbouring words, four 16-byte loads. (v9
# places the threads of a warp on one patch instead, with runs 32 rows and 16 columns apart.)
# ----------------------------------------------------------------------------------------------

WIDE_BLOCK_M = 128
WIDE_BLOCK_N = 128
WIDE_THREAD_M = 8
WIDE_THREAD_N = 8
WIDE_THREADS_X = WIDE_BLOCK_N // WIDE_THREAD_N
WIDE_THREADS_Y = WIDE_BLOCK_M // WIDE_THREAD_M
VECTOR = 4            # float32 words in one 16-byte shared load
TILE_PAD = 4          # words added to each shared row: see _wide_loader
WIDE_ROW = WIDE_BLOCK_M + TILE_PAD


def _wide_loader(block_m, block_n):
    """How the block's threads share out one step's loads: (a_row_step, a_loads, b_col_step, b_loads).

    Thread t loads A[row0 + t // BLOCK_K + u·a_row_step, k0 + t % BLOCK_K] for u < a_loads and
    B[k0 + t // b_col_step, col0 + t % b_col_step + u·b_col_step] for u < b_loads: per load a warp
    reads 4 rows × 8 neighbours of A and rows of b_col_step (at least 8) neighbours of B, whole
    32-byte sectors. Stored transposed, A's 32 values of a warp land on words kk·row + r: with rows
    of a multiple of 32 plus TILE_PAD = 4 words, that is 4·kk + r modulo 32, every bank once; without
    the pad, 8 values in each of 4 banks. The pad keeps rows a multiple of 16 bytes, as the 16-byte
    loads need.
    """
    threads = (block_m // WIDE_THREAD_M) * (block_n // WIDE_THREAD_N)
    step = threads // BLOCK_K
    return step, block_m // step, step, block_n // step


# The load plan of a 128×128 tile, as constants a kernel can size its arrays with.
WIDE_A_ROW_STEP, WIDE_A_LOADS, WIDE_B_COL_STEP, WIDE_B_LOADS = _wide_loader(WIDE_BLOCK_M, WIDE_BLOCK_N)


@cuda.jit
def gemm_v5_wide_shared_loads_kernel(a, b, c):
    """One block per 128×128 tile of C; each thread accumulates 8×8 of it from 16-byte shared loads."""
    # One array holds both tiles: the compiler then knows where each lies and may merge a
    # thread's 4 neighbouring loads into one 16-byte load (two arrays: it could not prove B's alignment).
    tiles = cuda.shared.array((2, BLOCK_K, WIDE_ROW), float32)
    acc = cuda.local.array((WIDE_THREAD_M, WIDE_THREAD_N), float32)
    a_frag = cuda.local.array(WIDE_THREAD_M, float32)
    b_frag = cuda.local.array(WIDE_THREAD_N, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    thread = ty * WIDE_THREADS_X + tx
    row0 = cuda.blockIdx.y * WIDE_BLOCK_M
    col0 = cuda.blockIdx.x * WIDE_BLOCK_N
    m, k = a.shape
    n = b.shape[1]
    a_k = thread % BLOCK_K
    a_r = thread // BLOCK_K
    b_k = thread // WIDE_B_COL_STEP
    b_c = thread % WIDE_B_COL_STEP
    for i in range(WIDE_THREAD_M):
        for j in range(WIDE_THREAD_N):
            acc[i, j] = 0.0
    for k0 in range(0, k, BLOCK_K):
        for u in range(WIDE_A_LOADS):
            r = a_r + u * WIDE_A_ROW_STEP
            if row0 + r < m and k0 + a_k < k:
                tiles[0, a_k, r] = a[row0 + r, k0 + a_k]
            else:
                tiles[0, a_k, r] = 0.0
        for u in range(WIDE_B_LOADS):
            cc = b_c + u * WIDE_B_COL_STEP
            if k0 + b_k < k and col0 + cc < n:
                tiles[1, b_k, cc] = b[k0 + b_k, col0 + cc]
            else:
                tiles[1, b_k, cc] = 0.0
        cuda.syncthreads()
        for kk in range(BLOCK_K):
            for v in range(VECTOR):
                a_frag[v] = tiles[0, kk, ty * VECTOR + v]
                a_frag[VECTOR + v] = tiles[0, kk, WIDE_BLOCK_M // 2 + ty * VECTOR + v]
                b_frag[v] = tiles[1, kk, tx * VECTOR + v]
                b_frag[VECTOR + v] = tiles[1, kk, WIDE_BLOCK_N // 2 + tx * VECTOR + v]
            for i in range(WIDE_THREAD_M):
                for j in range(WIDE_THREAD_N):
                    acc[i, j] += a_frag[i] * b_frag[j]
        cuda.syncthreads()
    for i in range(WIDE_THREAD_M):
        row = row0 + (i // VECTOR) * (WIDE_BLOCK_M // 2) + ty * VECTOR + i % VECTOR
        for j in range(WIDE_THREAD_N):
            col = col0 + (j // VECTOR) * (WIDE_BLOCK_N // 2) + tx * VECTOR + j % VECTOR
            if row < m and col < n:
                c[row, col] = acc[i, j]


def wide_grid(m, n, block_m, block_n):
    """``(grid, block)`` of the rungs with 8×8 per thread (v5 to v9) for an m×n C in block tiles of
    ``block_m``×``block_n``: a grid of (ceil(n / block_n), ceil(m / block_m)) blocks of
    (block_n // WIDE_THREAD_N, block_m // WIDE_THREAD_M) threads. Recorders and tests launch one kernel
    of a factory (v7, v9) at a chosen tile shape with it."""
    return (cdiv(n, block_n), cdiv(m, block_m)), (block_n // WIDE_THREAD_N, block_m // WIDE_THREAD_M)


def gemm_v5_wide_shared_loads(a, b, *, out=None, kernel=gemm_v5_wide_shared_loads_kernel):
    """C = A @ B, 8×8 per thread from 16-byte shared loads; grid (ceil(N/128), ceil(M/128)) of (16, 16)."""
    m, n, _ = gemm_shape(a, b, out)
    grid, block = wide_grid(m, n, WIDE_BLOCK_M, WIDE_BLOCK_N)
    return launch_gemm(kernel, a, b, out=out, grid=grid, block=block)


# ----------------------------------------------------------------------------------------------
# v6: v5 with the k loop written out and unsigned indices: fewer instructions that are not FMAs
# ----------------------------------------------------------------------------------------------

WIDE_ACC = WIDE_THREAD_M * WIDE_THREAD_N   # v6 to v8 keep the 8×8 accumulators flat: acc[i·8 + j]


@cuda.jit(device=True, inline=True)
def _k_slice(tiles, stage, kk, a_read, b_read, half_m, half_n, a_frag, b_frag, acc):
    """One outer product: the thread's 8 values of A and 8 of B at ``kk`` (uint64), 64 multiply-adds.

    One flat loop over the 64 accumulators instead of two nested ones: the same machine code,
    and half the work for numba, which copies this function's code once per call.
    """
    for v in range(VECTOR):
        a_frag[v] = tiles[stage, 0, kk, a_read + np.uint64(v)]
        a_frag[VECTOR + v] = tiles[stage, 0, kk, a_read + np.uint64(half_m + v)]
        b_frag[v] = tiles[stage, 1, kk, b_read + np.uint64(v)]
        b_frag[VECTOR + v] = tiles[stage, 1, kk, b_read + np.uint64(half_n + v)]
    for ij in range(WIDE_ACC):
        acc[ij] += a_frag[ij // WIDE_THREAD_N] * b_frag[ij % WIDE_THREAD_N]


@cuda.jit(device=True, inline=True)
def _block_k_slices(tiles, stage, a_read, b_read, half_m, half_n, a_frag, b_frag, acc):
    """The BLOCK_K = 8 outer products of one step, written out.

    NVVM unrolls a loop only when the copies stay small, and numba has no ``#pragma unroll``: a
    ``for kk in range(BLOCK_K)`` around 64 multiply-adds stays a loop, which recomputes its shared
    addresses and keeps its loop counter every time round. Written out, every load is a constant
    offset from one register.
    """
    _k_slice(tiles, stage, np.uint64(0), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
    _k_slice(tiles, stage, np.uint64(1), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
    _k_slice(tiles, stage, np.uint64(2), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
    _k_slice(tiles, stage, np.uint64(3), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
    _k_slice(tiles, stage, np.uint64(4), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
    _k_slice(tiles, stage, np.uint64(5), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
    _k_slice(tiles, stage, np.uint64(6), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
    _k_slice(tiles, stage, np.uint64(7), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)


@cuda.jit
def gemm_v6_unrolled_kernel(a, b, c):
    """v5 with unsigned indices computed once (no negative-index fix-ups) and the k loop written out."""
    tiles = cuda.shared.array((1, 2, BLOCK_K, WIDE_ROW), float32)
    acc = cuda.local.array(WIDE_ACC, float32)
    a_frag = cuda.local.array(WIDE_THREAD_M, float32)
    b_frag = cuda.local.array(WIDE_THREAD_N, float32)
    a_rows = cuda.local.array(WIDE_A_LOADS, np.uint64)
    b_cols = cuda.local.array(WIDE_B_LOADS, np.uint64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    thread = ty * WIDE_THREADS_X + tx
    row0 = cuda.blockIdx.y * WIDE_BLOCK_M
    col0 = cuda.blockIdx.x * WIDE_BLOCK_N
    m, k = a.shape
    n = b.shape[1]
    # Unsigned indices: numba adds a fix-up for negative indices to every signed one.
    um, un, uk = np.uint64(m), np.uint64(n), np.uint64(k)
    a_k = thread % BLOCK_K
    a_r = thread // BLOCK_K
    b_k = thread // WIDE_B_COL_STEP
    b_c = thread % WIDE_B_COL_STEP
    for u in range(WIDE_A_LOADS):
        a_rows[u] = np.uint64(row0 + a_r + u * WIDE_A_ROW_STEP)
    for u in range(WIDE_B_LOADS):
        b_cols[u] = np.uint64(col0 + b_c + u * WIDE_B_COL_STEP)
    a_read = np.uint64(ty * VECTOR)
    b_read = np.uint64(tx * VECTOR)
    for ij in range(WIDE_ACC):
        acc[ij] = 0.0
    for k0 in range(0, k, BLOCK_K):
        ka = np.uint64(k0 + a_k)
        for u in range(WIDE_A_LOADS):
            inside = a_rows[u] < um and ka < uk
            tiles[0, 0, a_k, a_r + u * WIDE_A_ROW_STEP] = a[a_rows[u], ka] if inside else float32(0.0)
        kb = np.uint64(k0 + b_k)
        for u in range(WIDE_B_LOADS):
            inside = kb < uk and b_cols[u] < un
            tiles[0, 1, b_k, b_c + u * WIDE_B_COL_STEP] = b[kb, b_cols[u]] if inside else float32(0.0)
        cuda.syncthreads()
        _block_k_slices(tiles, np.uint64(0), a_read, b_read, WIDE_BLOCK_M // 2, WIDE_BLOCK_N // 2,
                        a_frag, b_frag, acc)
        cuda.syncthreads()
    for i in range(WIDE_THREAD_M):
        row = row0 + (i // VECTOR) * (WIDE_BLOCK_M // 2) + ty * VECTOR + i % VECTOR
        for j in range(WIDE_THREAD_N):
            col = col0 + (j // VECTOR) * (WIDE_BLOCK_N // 2) + tx * VECTOR + j % VECTOR
            if row < m and col < n:
                c[row, col] = acc[i * WIDE_THREAD_N + j]


def gemm_v6_unrolled(a, b, *, out=None, kernel=gemm_v6_unrolled_kernel):
    """C = A @ B as v5, the k loop written out; grid (ceil(N/128), ceil(M/128)) of (16, 16)."""
    m, n, _ = gemm_shape(a, b, out)
    grid, block = wide_grid(m, n, WIDE_BLOCK_M, WIDE_BLOCK_N)
    return launch_gemm(kernel, a, b, out=out, grid=grid, block=block)


# ----------------------------------------------------------------------------------------------
# v7: double buffering. Each step issues the loads of the next step into registers, multiplies
# from one of two shared stages, then stores what arrived into the other: the loads' latency hides
# behind the multiply-adds, and one barrier per step does instead of two.
# ----------------------------------------------------------------------------------------------

TILE_SHAPES = ((128, 128), (128, 64), (64, 128), (64, 64))   # (block_m, block_n) v7 can be built for
_V7_KERNELS: dict = {}


def gemm_v7_double_buffered_kernel(block_m: int = WIDE_BLOCK_M, block_n: int = WIDE_BLOCK_N):
    """The v7 kernel for a block tile of C, one of ``TILE_SHAPES``, compiled on first use and kept.

    The tile's sizes are constants inside the kernel, as in v5 and v6: they size the per-thread
    arrays and bound the loops the compiler unrolls.
    """
    if (block_m, block_n) not in TILE_SHAPES:
        raise ValueError(f"(block_m, block_n) must be one of {TILE_SHAPES}, got {(block_m, block_n)!r}")
    if (block_m, block_n) not in _V7_KERNELS:
        _V7_KERNELS[block_m, block_n] = _build_v7_kernel(block_m, block_n)
    return _V7_KERNELS[block_m, block_n]


def _build_v7_kernel(BM: int, BN: int, warp_tiled: bool = False):
    """Compile-time constants BM, BN (the block tile) size the shared stages and the load plan;
    ``warp_tiled`` (v9) places each warp's threads on one WARP_TILE_M×WARP_TILE_N patch of the tile.

    Where the next step's loads end up is ptxas's choice, not the source's: for 128×128 it keeps
    them ahead of the multiply-adds; for 64×128 and 128×64 it moves them below, where their latency
    shows; other arrangements of the same steps had them moved at 128×128 too, and ran much slower. On
    an H100 at 4096³ this kernel runs at 0.74 of torch (recording ``course/data/day04_gemm_timing.json``).
    The SASS shows where the loads are (nvdisasm: the LDG instructions against the FFMAs).
    """
    threads_x = BN // WIDE_THREAD_N
    row = max(BM, BN) + TILE_PAD
    a_row_step, a_loads, b_col_step, b_loads = _wide_loader(BM, BN)
    # A thread's 8 rows of C are two runs of VECTOR, half_m apart, and its 8 columns two runs half_n apart.
    half_m = WARP_TILE_M // 2 if warp_tiled else BM // 2
    half_n = WARP_TILE_N // 2 if warp_tiled else BN // 2
    warps_n = BN // WARP_TILE_N
    lanes_n = half_n // VECTOR

    @cuda.jit
    def kernel(a, b, c):
        tiles = cuda.shared.array((2, 2, BLOCK_K, row), float32)      # (stage, A or B, kk, r or c)
        acc = cuda.local.array(WIDE_ACC, float32)
        a_frag = cuda.local.array(WIDE_THREAD_M, float32)
        b_frag = cuda.local.array(WIDE_THREAD_N, float32)
        a_next = cuda.local.array(a_loads, float32)
        b_next = cuda.local.array(b_loads, float32)
        a_rows = cuda.local.array(a_loads, np.uint64)
        b_cols = cuda.local.array(b_loads, np.uint64)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        thread = ty * threads_x + tx
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        m, k = a.shape
        n = b.shape[1]
        um = np.uint64(m)
        un = np.uint64(n)
        uk = np.uint64(k)
        for ij in range(WIDE_ACC):
            acc[ij] = 0.0
        a_k = thread % BLOCK_K
        a_r = thread // BLOCK_K
        b_k = thread // b_col_step
        b_c = thread % b_col_step
        for u in range(a_loads):
            a_rows[u] = np.uint64(row0 + a_r + u * a_row_step)
        for u in range(b_loads):
            b_cols[u] = np.uint64(col0 + b_c + u * b_col_step)
        if warp_tiled:   # v9: warp w owns a WARP_TILE_M×WARP_TILE_N patch, its lanes 8 down and 4 across
            warp = thread // WARP
            lane = thread % WARP
            first_row = (warp // warps_n) * WARP_TILE_M + (lane // lanes_n) * VECTOR
            first_col = (warp % warps_n) * WARP_TILE_N + (lane % lanes_n) * VECTOR
        else:            # v7: a warp is two rows of threads across the whole tile
            first_row = ty * VECTOR
            first_col = tx * VECTOR
        a_read = np.uint64(first_row)
        b_read = np.uint64(first_col)
        steps = (k + BLOCK_K - 1) // BLOCK_K
        # The first step's slices, into stage 0 (zeros when K is 0).
        ka = np.uint64(a_k)
        for u in range(a_loads):
            a_next[u] = a[a_rows[u], ka] if ka < uk and a_rows[u] < um else float32(0.0)
        kb = np.uint64(b_k)
        for u in range(b_loads):
            b_next[u] = b[kb, b_cols[u]] if kb < uk and b_cols[u] < un else float32(0.0)
        for u in range(a_loads):
            tiles[0, 0, a_k, a_r + u * a_row_step] = a_next[u]
        for u in range(b_loads):
            tiles[0, 1, b_k, b_c + u * b_col_step] = b_next[u]
        cuda.syncthreads()
        for step in range(steps):
            stage = step % 2
            k_next = (step + 1) * BLOCK_K
            more = step + 1 < steps
            if more:   # the next step's loads go out first; they arrive during the multiply-adds
                ka = np.uint64(k_next + a_k)
                for u in range(a_loads):
                    a_next[u] = a[a_rows[u], ka] if ka < uk and a_rows[u] < um else float32(0.0)
                kb = np.uint64(k_next + b_k)
                for u in range(b_loads):
                    b_next[u] = b[kb, b_cols[u]] if kb < uk and b_cols[u] < un else float32(0.0)
            _block_k_slices(tiles, np.uint64(stage), a_read, b_read, half_m, half_n, a_frag, b_frag, acc)
            if more:   # into the other stage: its last readers, a step ago, have all passed the barrier since
                for u in range(a_loads):
                    tiles[1 - stage, 0, a_k, a_r + u * a_row_step] = a_next[u]
                for u in range(b_loads):
                    tiles[1 - stage, 1, b_k, b_c + u * b_col_step] = b_next[u]
            cuda.syncthreads()
        for i in range(WIDE_THREAD_M):
            r = row0 + (i // VECTOR) * half_m + first_row + i % VECTOR
            for j in range(WIDE_THREAD_N):
                cc = col0 + (j // VECTOR) * half_n + first_col + j % VECTOR
                if r < m and cc < n:
                    c[r, cc] = acc[i * WIDE_THREAD_N + j]

    return kernel


def gemm_v7_double_buffered(a, b, *, out=None, kernel=gemm_v7_double_buffered_kernel):
    """C = A @ B, double-buffered, 128×128 tiles; ``kernel(block_m, block_n)`` returns the kernel."""
    m, n, _ = gemm_shape(a, b, out)
    grid, block = wide_grid(m, n, WIDE_BLOCK_M, WIDE_BLOCK_N)
    return launch_gemm(kernel(WIDE_BLOCK_M, WIDE_BLOCK_N), a, b, out=out, grid=grid, block=block)


# ----------------------------------------------------------------------------------------------
# v8: v7's kernel with the block tile chosen per GPU and shape, by timing every tile shape once
# ----------------------------------------------------------------------------------------------

# The untuned choice: the largest tile that still makes this many blocks (about one per SM of a
# large GPU: a 128×128 tile at N = 1024 makes 64 blocks and leaves half an H100 idle).
BLOCKS_TO_FILL = 128
# The choices of autotune in this process (kernels.tuning): per GPU name, kernel factory's name and (M, N, K).
_TUNER = Tuner()


def untuned_tile_shape(m: int, n: int) -> tuple[int, int]:
    """The first of ``TILE_SHAPES`` (largest first) whose grid has at least BLOCKS_TO_FILL blocks, else the smallest."""
    return largest_filling(TILE_SHAPES, m, n, BLOCKS_TO_FILL)


def tile_shape(m: int, n: int, k: int, kernel=gemm_v7_double_buffered_kernel) -> tuple[int, int]:
    """The tile v8 (v9: ``kernel=gemm_v9_warp_tiled_kernel``) launches for (M, N, K): the one ``autotune``
    chose for that kernel on this GPU, else ``untuned_tile_shape``."""
    return _TUNER.choice(kernel.__name__, (m, n, k)) or untuned_tile_shape(m, n)


def autotune(a, b, *, out=None, repeat: int = 5, kernel=gemm_v7_double_buffered_kernel) -> dict:
    """Time ``kernel``'s build (v7's; v9's for v9) at every tile of ``TILE_SHAPES`` on device arrays a, b
    (GPU only); remember the fastest.

    Each shape is launched once to compile and warm up, then ``repeat`` times back to back between
    two CUDA events: the mean time per launch counts (``kernels.tuning.time_each``). The choice is kept for this
    process, per GPU name, kernel and (M, N, K), and used by ``gemm_v8_autotuned`` (``gemm_v9_warp_tiled``).
    Returns ``{"gpu", "kernel", "M", "N", "K", "choice", "ms": {shape: ms per launch}}``.
    """
    if config.ENABLE_CUDASIM:
        raise RuntimeError("autotune times kernels and needs a GPU; the simulator has no clock to time them by")
    m, n, k = gemm_shape(a, b, out)
    if not (is_device_array(a) and is_device_array(b)):
        raise TypeError("autotune needs device arrays (cuda.to_device) for a and b: copies would be timed too")
    out = output_array("out", out, (m, n), like=a)
    found = _TUNER.tune(kernel.__name__, (m, n, k), _tile_launches(kernel, a, b, out), repeat)
    return {"gpu": found["gpu"], "kernel": found["kernel"], "M": m, "N": n, "K": k, "choice": found["choice"],
            "ms": found["ms"]}


def tuned() -> list[dict]:
    """Every choice ``autotune`` made in this process: one dict per (GPU, kernel, M, N, K), as it returned."""
    return [{"gpu": e["gpu"], "kernel": e["kernel"], "M": e["problem"][0], "N": e["problem"][1],
             "K": e["problem"][2], "choice": e["choice"], "ms": e["ms"]} for e in _TUNER.entries()]


def _tile_launches(kernel, a, b, out) -> dict:
    """``{shape: launch()}``: ``kernel``'s build at every tile of ``TILE_SHAPES``, C = a @ b into out."""
    m, n = out.shape

    def launch(shape):
        grid, block = wide_grid(m, n, *shape)
        return lambda: kernel(*shape)[grid, block](a, b, out)

    return {shape: launch(shape) for shape in TILE_SHAPES}


def _launch_tuned(kernel, a, b, out):
    """Launch ``kernel``'s build at the tile tuned for this GPU and shape, tuning first on device arrays."""
    m, n, k = gemm_shape(a, b, out)
    out = output_array("out", out, (m, n), like=a)
    shape = untuned_tile_shape(m, n)
    if m and n:
        shape = _TUNER.pick(kernel.__name__, (m, n, k), (a, b), lambda: _tile_launches(kernel, a, b, out), shape)
    grid, block = wide_grid(m, n, *shape)
    return launch_gemm(kernel(*shape), a, b, out=out, grid=grid, block=block)


def gemm_v8_autotuned(a, b, *, out=None, kernel=gemm_v7_double_buffered_kernel):
    """C = A @ B with v7's kernel at the tile ``tile_shape`` gives; device arrays on a GPU of an untuned
    shape are tuned first (``autotune``), NumPy arrays and the simulator take ``untuned_tile_shape``."""
    return _launch_tuned(kernel, a, b, out)


# ----------------------------------------------------------------------------------------------
# v9: warp tiling. v8's kernel with each warp's 32 threads on one compact patch of the block tile
# ----------------------------------------------------------------------------------------------

WARP_TILE_M = 64     # rows of C a warp computes: 8 lanes down, two runs of VECTOR rows each
WARP_TILE_N = 32     # columns of C a warp computes: 4 lanes across, two runs of VECTOR columns each
_V9_KERNELS: dict = {}


def gemm_v9_warp_tiled_kernel(block_m: int = WIDE_BLOCK_M, block_n: int = WIDE_BLOCK_N):
    """The v9 kernel for a block tile of C, one of ``TILE_SHAPES``: v7's with warp tiling, compiled on first use.

    v7 numbers threads in rows of BN / 8 across the tile, so a warp is two such rows: at 128×128 one
    16-byte shared load of B asks for 16 different runs (256 bytes, two wavefronts) and one of A for 2.
    Here warp w computes the WARP_TILE_M×WARP_TILE_N patch (w // (BN / 32), w % (BN / 32)), lane l
    rows 4·(l // 4) and 32 below, columns 4·(l % 4) and 16 to the right: 8 runs of A and 4 of B,
    128 and 64 bytes, one wavefront each. Loads of global memory, and everything else, as v7.
    """
    if (block_m, block_n) not in TILE_SHAPES:
        raise ValueError(f"(block_m, block_n) must be one of {TILE_SHAPES}, got {(block_m, block_n)!r}")
    if (block_m, block_n) not in _V9_KERNELS:
        _V9_KERNELS[block_m, block_n] = _build_v7_kernel(block_m, block_n, warp_tiled=True)
    return _V9_KERNELS[block_m, block_n]


def gemm_v9_warp_tiled(a, b, *, out=None, kernel=gemm_v9_warp_tiled_kernel):
    """C = A @ B with the warp-tiled kernel at the tile tuned for it (as v8 does for v7's kernel)."""
    return _launch_tuned(kernel, a, b, out)


RUNGS = ladder(
    Rung("gemm_v1_naive", gemm_v1_naive, "one thread per element of C, threadIdx.x down a column: uncoalesced"),
    Rung("gemm_v2_coalesced", gemm_v2_coalesced, "threadIdx.x along a row of C: coalesced reads of B"),
    Rung("gemm_v3_shared_tiles", gemm_v3_shared_tiles,
         "TILE×TILE tiles of A and B in shared memory: global reads fall by TILE"),
    Rung("gemm_v4_register_blocked", gemm_v4_register_blocked,
         "a THREAD_M×THREAD_N sub-tile of C per thread, in registers: fewer shared reads per multiply-add"),
    Rung("gemm_v5_wide_shared_loads", gemm_v5_wide_shared_loads,
         "128×128 tiles, 8×8 per thread, A stored transposed: each thread's operands are 16-byte shared loads"),
    Rung("gemm_v6_unrolled", gemm_v6_unrolled,
         "the k loop written out and unsigned indices: far fewer instructions that are not multiply-adds"),
    Rung("gemm_v7_double_buffered", gemm_v7_double_buffered,
         "the next step's tiles load into registers during the multiply-adds, two shared stages, one barrier"),
    Rung("gemm_v8_autotuned", gemm_v8_autotuned,
         "v7's kernel with the block tile chosen per GPU and shape by timing each of TILE_SHAPES once"),
    Rung("gemm_v9_warp_tiled", gemm_v9_warp_tiled,
         "warp tiling: each warp's 32 threads on one 64×32 patch of C, so a shared load asks for fewer runs"),
)
