"""GEMM ``C = A @ B`` in numba.cuda (day 4): a ladder of four rungs.

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

Each rung is a ``<rung>_kernel`` plus the launcher ``<rung>(a, b, *, out=None, kernel=<rung>_kernel)``,
which validates the inputs, sizes the grid, launches ``kernel`` and returns C; ``RUNGS`` registers
the four in order. Launchers accept NumPy arrays or numba device arrays
(``kernels.launching``); every kernel handles any M, N, K, including ones the tile does not divide.
"""

from __future__ import annotations

from numba import cuda, float32

from kernels.launching import cdiv, output_array, require_float32
from kernels.registry import Rung, ladder

__all__ = [
    "NAIVE_BLOCK", "TILE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "THREAD_M", "THREAD_N", "THREADS_X",
    "THREADS_Y", "RUNGS", "gemm_shape", "cdiv", "launch_gemm",
    "gemm_v1_naive_kernel", "gemm_v1_naive", "gemm_v2_coalesced_kernel", "gemm_v2_coalesced",
    "gemm_v3_shared_tiles_kernel", "gemm_v3_shared_tiles",
    "gemm_v4_register_blocked_kernel", "gemm_v4_register_blocked",
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


RUNGS = ladder(
    Rung("gemm_v1_naive", gemm_v1_naive, "one thread per element of C, threadIdx.x down a column: uncoalesced"),
    Rung("gemm_v2_coalesced", gemm_v2_coalesced, "threadIdx.x along a row of C: coalesced reads of B"),
    Rung("gemm_v3_shared_tiles", gemm_v3_shared_tiles,
         "TILE×TILE tiles of A and B in shared memory: global reads fall by TILE"),
    Rung("gemm_v4_register_blocked", gemm_v4_register_blocked,
         "a THREAD_M×THREAD_N sub-tile of C per thread, in registers: fewer shared reads per multiply-add"),
)
