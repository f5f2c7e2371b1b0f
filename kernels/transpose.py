"""Matrix transpose ``out = x.T`` through a shared-memory tile: the day-4 demonstration of barriers and banks.

Shapes: x (M, N) float32, out (N, M) float32, C-contiguous. Reads and writes of global memory
can both be coalesced only if the data changes threads on the way: a block reads a TILE×TILE tile
of x row by row, and writes it to out row by row as well, reading the tile column by column
from shared memory.

- ``transpose_v1_naive``: one thread per element; the reads of a warp are coalesced, its writes
  land M floats apart (32 sectors per warp store).
- ``transpose_v2_shared``: a TILE×TILE shared tile; both global directions coalesced, but the
  column read of the tile puts all 32 threads of a warp in one shared-memory bank (32-way conflict).
- ``transpose_v3_shared_padded``: the tile padded to TILE×(TILE+1), which spreads a column over
  all 32 banks: conflict-free.

And one deliberately wrong kernel for the lesson on barriers (never use it):

- ``transpose_missing_barrier``: v3 without ``cuda.syncthreads()`` between writing the tile and
  reading it; a thread may read a slot that another warp has not written yet.

A block is (TILE, ROWS_PER_PASS) threads; each thread moves TILE // ROWS_PER_PASS elements. Every
launcher launches the kernel given as ``kernel=`` (its own by default) on the same grid.
"""

from __future__ import annotations

from numba import cuda, float32

from kernels.launching import cdiv, output_array, require_float32
from kernels.registry import Rung, ladder

__all__ = ["TILE", "PADDED_WIDTH", "ROWS_PER_PASS", "transpose_v1_naive_kernel", "transpose_v1_naive",
           "transpose_v2_shared_kernel", "transpose_v2_shared", "transpose_v3_shared_padded_kernel",
           "transpose_v3_shared_padded", "transpose_missing_barrier_kernel", "transpose_missing_barrier",
           "RUNGS"]

TILE = 32           # one warp spans a row of the tile: 32 threads, 32 banks
PADDED_WIDTH = TILE + 1   # a module constant: numba needs shared-array shapes as literal ints
ROWS_PER_PASS = 8   # rows of the tile a block moves per pass; 256 threads per block


def _launch(kernel, x, out):
    """Every transpose rung: validate x (M, N), allocate out (N, M), one block per TILE×TILE tile of x."""
    m, n = require_float32("x", x, (None, None))
    out = output_array("out", out, (n, m), like=x)
    if m and n:
        kernel[(cdiv(n, TILE), cdiv(m, TILE)), (TILE, ROWS_PER_PASS)](x, out)
    return out


@cuda.jit
def transpose_v1_naive_kernel(x, out):
    """Thread (col, row) of the grid copies x[row, col] to out[col, row], TILE // ROWS_PER_PASS rows apart."""
    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    m, n = x.shape
    for pass_row in range(cuda.threadIdx.y, TILE, ROWS_PER_PASS):
        row = cuda.blockIdx.y * TILE + pass_row
        if row < m and col < n:
            out[col, row] = x[row, col]


def transpose_v1_naive(x, *, out=None, kernel=transpose_v1_naive_kernel):
    """out = x.T, element by element: x (M, N) -> out (N, M)."""
    return _launch(kernel, x, out)


@cuda.jit
def transpose_v2_shared_kernel(x, out):
    """Read a tile of x row-wise into shared memory, write it to out row-wise from the tile's columns."""
    tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    m, n = x.shape
    col = cuda.blockIdx.x * TILE + tx
    for r in range(cuda.threadIdx.y, TILE, ROWS_PER_PASS):
        row = cuda.blockIdx.y * TILE + r
        if row < m and col < n:
            tile[r, tx] = x[row, col]
    cuda.syncthreads()  # the tile holds rows written by other warps
    out_col = cuda.blockIdx.y * TILE + tx
    for r in range(cuda.threadIdx.y, TILE, ROWS_PER_PASS):
        out_row = cuda.blockIdx.x * TILE + r
        if out_row < n and out_col < m:
            out[out_row, out_col] = tile[tx, r]  # a column of the tile: word tx*TILE + r


def transpose_v2_shared(x, *, out=None, kernel=transpose_v2_shared_kernel):
    """out = x.T through a TILE×TILE shared tile: x (M, N) -> out (N, M)."""
    return _launch(kernel, x, out)


@cuda.jit
def transpose_v3_shared_padded_kernel(x, out):
    """As v2, with one unused column of padding: word tx*(TILE+1) + r lands in bank (tx + r) % 32."""
    tile = cuda.shared.array((TILE, PADDED_WIDTH), float32)
    tx = cuda.threadIdx.x
    m, n = x.shape
    col = cuda.blockIdx.x * TILE + tx
    for r in range(cuda.threadIdx.y, TILE, ROWS_PER_PASS):
        row = cuda.blockIdx.y * TILE + r
        if row < m and col < n:
            tile[r, tx] = x[row, col]
    cuda.syncthreads()
    out_col = cuda.blockIdx.y * TILE + tx
    for r in range(cuda.threadIdx.y, TILE, ROWS_PER_PASS):
        out_row = cuda.blockIdx.x * TILE + r
        if out_row < n and out_col < m:
            out[out_row, out_col] = tile[tx, r]


def transpose_v3_shared_padded(x, *, out=None, kernel=transpose_v3_shared_padded_kernel):
    """out = x.T through a padded TILE×(TILE+1) shared tile: x (M, N) -> out (N, M)."""
    return _launch(kernel, x, out)


@cuda.jit
def transpose_missing_barrier_kernel(x, out):
    """WRONG on purpose: v3 without the barrier between filling the tile and reading its columns."""
    tile = cuda.shared.array((TILE, PADDED_WIDTH), float32)
    tx = cuda.threadIdx.x
    m, n = x.shape
    col = cuda.blockIdx.x * TILE + tx
    for r in range(cuda.threadIdx.y, TILE, ROWS_PER_PASS):
        row = cuda.blockIdx.y * TILE + r
        if row < m and col < n:
            tile[r, tx] = x[row, col]
    out_col = cuda.blockIdx.y * TILE + tx
    for r in range(cuda.threadIdx.y, TILE, ROWS_PER_PASS):
        out_row = cuda.blockIdx.x * TILE + r
        if out_row < n and out_col < m:
            out[out_row, out_col] = tile[tx, r]


def transpose_missing_barrier(x, *, out=None, kernel=transpose_missing_barrier_kernel):
    """WRONG on purpose (a race): out = x.T without a barrier; x (M, N) -> out (N, M)."""
    return _launch(kernel, x, out)


# The correct rungs in order; the wrong kernel is no rung.
RUNGS = ladder(
    Rung("transpose_v1_naive", transpose_v1_naive, "one thread per element: coalesced reads, scattered writes"),
    Rung("transpose_v2_shared", transpose_v2_shared,
         "a shared tile makes both directions coalesced, with a 32-way bank conflict on the column read"),
    Rung("transpose_v3_shared_padded", transpose_v3_shared_padded,
         "one column of padding spreads the tile's columns over all 32 banks"),
)
