"""Elementwise kernels of day 1: one thread per element, bounds guards, grid-stride loops, 3D grids.

Rungs of the copy ``y = x`` (float32 vectors), the yardstick of memory bandwidth:

- ``copy_v1_guarded``: one thread per element; a bounds guard lets the last block hang over the end.
- ``copy_v2_grid_stride``: a fixed grid whose threads stride over the array, so one launch size fits any n.

Rungs of ``y = a * x + b`` (float32 vector, scalar ``a`` and ``b``):

- ``axpb_v1_guarded``: one thread per element with a bounds guard (2 FLOPs per 8 bytes moved).

A 3D grid over attention-shaped tensors ``(batch, heads, rows, head_dim)``:

- ``normalize_rows_v1_3d_grid``: ``out[b, h, n, :] = x[b, h, n, :] / row_sums[b, h, n]`` with grid
  ``(row tiles, heads, batch)`` and blocks of ``(COLS_PER_BLOCK, ROWS_PER_BLOCK)`` threads.

A probe for the coalescing experiment:

- ``strided_read``: ``y[i] = x[i * stride]``; neighbouring threads read ``stride`` floats apart.

Launchers accept NumPy arrays or numba device arrays (outputs are allocated alike, see
``kernels.launching``), validate their inputs, size the grid, launch the kernel given as
``kernel=`` (the rung's own by default) and return the output. ``RUNGS`` registers the four rungs
above in this order; the probe is not a rung.
"""

from __future__ import annotations

from numba import cuda

from kernels.launching import (cdiv, output_array, require_float32, require_int, require_non_negative_int,
                               require_positive_int, require_scalar)
from kernels.registry import Rung, ladder

THREADS_PER_BLOCK = 128
# The 3D-grid kernel: threadIdx.x walks the head dimension, threadIdx.y picks a row of the tile.
COLS_PER_BLOCK = 32
ROWS_PER_BLOCK = 4


# ----------------------------------------------------------------------------------------------
# Launch helpers shared by the day-1 launchers
# ----------------------------------------------------------------------------------------------

# The name day 1 teaches the ceiling division by: blocks needed so that blocks * threads >= n.
blocks_for = cdiv


def require_threads(threads_per_block) -> int:
    """Check that ``threads_per_block`` is an int in 1..1024 and return it."""
    return require_int("threads_per_block", threads_per_block, minimum=1, maximum=1024)


def default_stride_blocks() -> int:
    """Grid size for grid-stride loops: 4 blocks per SM on a GPU, 2 blocks on the simulator."""
    device = cuda.get_current_device()
    sms = getattr(device, "MULTIPROCESSOR_COUNT", None)
    return 4 * int(sms) if sms else 2


# ----------------------------------------------------------------------------------------------
# copy: y = x
# ----------------------------------------------------------------------------------------------

@cuda.jit
def copy_v1_guarded_kernel(x, y):
    """y[i] = x[i]: one thread per element of x (n,)."""
    i = cuda.grid(1)        # blockIdx.x * blockDim.x + threadIdx.x
    if i < x.size:          # the last block hangs over the end of the array
        y[i] = x[i]


def copy_v1_guarded(x, *, out=None, threads_per_block=THREADS_PER_BLOCK, kernel=copy_v1_guarded_kernel):
    """``y = x`` for a float32 vector x (n,), one thread per element. Returns y (n,)."""
    (n,) = require_float32("x", x, (None,))
    threads = require_threads(threads_per_block)
    y = output_array("out", out, (n,), x)
    if n:
        kernel[cdiv(n, threads), threads](x, y)
    return y


@cuda.jit
def copy_v2_grid_stride_kernel(x, y):
    """y[i] = x[i]: each thread copies elements start, start + gridsize, start + 2 * gridsize, ..."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)   # every thread of the grid, so neighbours stay neighbours
    for i in range(start, x.size, stride):
        y[i] = x[i]


def copy_v2_grid_stride(x, *, out=None, blocks=None, threads_per_block=THREADS_PER_BLOCK,
                        kernel=copy_v2_grid_stride_kernel):
    """``y = x`` for a float32 vector x (n,) with a fixed grid of ``blocks`` blocks. Returns y (n,).

    ``blocks`` defaults to 4 per streaming multiprocessor; each thread copies about
    ``n / (blocks * threads_per_block)`` elements.
    """
    (n,) = require_float32("x", x, (None,))
    threads = require_threads(threads_per_block)
    blocks = default_stride_blocks() if blocks is None else require_positive_int("blocks", blocks)
    y = output_array("out", out, (n,), x)
    if n:
        kernel[blocks, threads](x, y)
    return y


# ----------------------------------------------------------------------------------------------
# axpb: y = a * x + b
# ----------------------------------------------------------------------------------------------

@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    """y[i] = a * x[i] + b for x, y (n,) float32 and float32 scalars a, b; one thread per element."""
    i = cuda.grid(1)
    if i < x.size:
        y[i] = a * x[i] + b


def axpb_v1_guarded(x, a, b, *, out=None, threads_per_block=THREADS_PER_BLOCK, kernel=axpb_v1_guarded_kernel):
    """``y = a * x + b`` for a float32 vector x (n,) and real scalars a, b. Returns y (n,) float32.

    One thread per element: ``ceil(n / threads_per_block)`` blocks, the last one partly idle.
    """
    (n,) = require_float32("x", x, (None,))
    a, b = require_scalar("a", a), require_scalar("b", b)
    threads = require_threads(threads_per_block)
    y = output_array("out", out, (n,), x)
    if n:
        kernel[cdiv(n, threads), threads](x, a, b, y)
    return y


# ----------------------------------------------------------------------------------------------
# normalize_rows: a 3D grid over (row tiles, heads, batch)
# ----------------------------------------------------------------------------------------------

def normalize_rows_grid(shape):
    """``(grid, block)`` for x of ``shape`` (batch, heads, rows, head_dim).

    grid = (ceil(rows / ROWS_PER_BLOCK), heads, batch), block = (COLS_PER_BLOCK, ROWS_PER_BLOCK).
    """
    batch, heads, rows, _ = shape
    return (cdiv(rows, ROWS_PER_BLOCK), heads, batch), (COLS_PER_BLOCK, ROWS_PER_BLOCK)


def normalize_rows_inputs(x, row_sums, out=None):
    """Validate x (batch, heads, rows, head_dim) and row_sums (batch, heads, rows); return out.

    ``out`` is checked when given (same shape as x) and allocated otherwise.
    """
    shape = require_float32("x", x, (None, None, None, None))
    require_float32("row_sums", row_sums, shape[:3])
    return output_array("out", out, shape, x)


@cuda.jit
def normalize_rows_v1_3d_grid_kernel(x, row_sums, out):
    """out[b, h, n, :] = x[b, h, n, :] / row_sums[b, h, n] for x, out (batch, heads, rows, head_dim).

    blockIdx = (row tile, head, batch); threadIdx.y = row within the tile, threadIdx.x = first column.
    """
    row = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
    head = cuda.blockIdx.y
    batch = cuda.blockIdx.z
    if row < x.shape[2]:
        denominator = row_sums[batch, head, row]
        for col in range(cuda.threadIdx.x, x.shape[3], cuda.blockDim.x):
            out[batch, head, row, col] = x[batch, head, row, col] / denominator


def normalize_rows_v1_3d_grid(x, row_sums, out=None, *, kernel=normalize_rows_v1_3d_grid_kernel):
    """``out[b, h, n, :] = x[b, h, n, :] / row_sums[b, h, n]``: one 3D grid of (row tiles, heads, batch).

    x: (batch, heads, rows, head_dim) float32; row_sums: (batch, heads, rows) float32.
    Returns out, shaped like x.
    """
    out = normalize_rows_inputs(x, row_sums, out)
    if x.size:
        grid, block = normalize_rows_grid(x.shape)
        kernel[grid, block](x, row_sums, out)
    return out


# ----------------------------------------------------------------------------------------------
# The coalescing probe
# ----------------------------------------------------------------------------------------------

@cuda.jit
def strided_read_kernel(x, stride, y):
    """y[i] = x[i * stride] for i < y.size."""
    i = cuda.grid(1)
    if i < y.size:
        y[i] = x[i * stride]   # a warp's 32 reads span 32 * stride floats


def strided_read(x, stride, n, *, out=None, threads_per_block=THREADS_PER_BLOCK, kernel=strided_read_kernel):
    """``y[i] = x[i * stride]`` for i < n: n useful reads ``stride`` floats apart. Returns y (n,).

    x: float32 vector with at least ``(n - 1) * stride + 1`` elements.
    """
    (size,) = require_float32("x", x, (None,))
    stride = require_positive_int("stride", stride)
    n = require_non_negative_int("n", n)
    if n and (n - 1) * stride >= size:
        raise ValueError(f"x must hold at least (n - 1) * stride + 1 = {(n - 1) * stride + 1} "
                         f"elements for n={n}, stride={stride}; got {size}")
    threads = require_threads(threads_per_block)
    y = output_array("out", out, (n,), x)
    if n:
        kernel[cdiv(n, threads), threads](x, stride, y)
    return y


RUNGS = ladder(
    Rung("copy_v1_guarded", copy_v1_guarded,
         "one thread per element; a bounds guard lets the last block hang over the end"),
    Rung("copy_v2_grid_stride", copy_v2_grid_stride,
         "a fixed grid whose threads stride over the array, so one launch size fits any n"),
    Rung("axpb_v1_guarded", axpb_v1_guarded, "one thread per element with a bounds guard"),
    Rung("normalize_rows_v1_3d_grid", normalize_rows_v1_3d_grid,
         "a 3D grid of (row tiles, heads, batch) over attention-shaped tensors"),
)

__all__ = [
    "THREADS_PER_BLOCK", "COLS_PER_BLOCK", "ROWS_PER_BLOCK", "RUNGS",
    "copy_v1_guarded", "copy_v1_guarded_kernel", "copy_v2_grid_stride", "copy_v2_grid_stride_kernel",
    "axpb_v1_guarded", "axpb_v1_guarded_kernel",
    "normalize_rows_v1_3d_grid", "normalize_rows_v1_3d_grid_kernel", "normalize_rows_grid",
    "normalize_rows_inputs", "strided_read", "strided_read_kernel",
    "require_scalar", "require_positive_int", "require_threads", "blocks_for", "cdiv", "default_stride_blocks",
]
