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
``kernels.launching``), validate their inputs and return the output.
"""

from __future__ import annotations

import numbers

import numpy as np
from numba import cuda

from kernels.launching import output_array, require_float32

THREADS_PER_BLOCK = 128
# The 3D-grid kernel: threadIdx.x walks the head dimension, threadIdx.y picks a row of the tile.
COLS_PER_BLOCK = 32
ROWS_PER_BLOCK = 4


# ----------------------------------------------------------------------------------------------
# Launch helpers shared by the day-1 launchers (kernels.reduction uses them too)
# ----------------------------------------------------------------------------------------------

def require_scalar(name: str, value) -> np.float32:
    """Check that ``value`` is a real number and return it as float32 (kernels then stay in fp32)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return np.float32(value)


def require_positive_int(name: str, value, *, zero_ok: bool = False) -> int:
    """Check that ``value`` is an int >= 1 (>= 0 with ``zero_ok``) and return it."""
    low = 0 if zero_ok else 1
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def blocks_for(n: int, threads_per_block: int) -> int:
    """Blocks needed so that ``blocks * threads_per_block >= n`` (the last block may hang over)."""
    return (n + threads_per_block - 1) // threads_per_block


def require_threads(threads_per_block) -> int:
    """Check that ``threads_per_block`` is an int in 1..1024 and return it."""
    threads = require_positive_int("threads_per_block", threads_per_block)
    if threads > 1024:
        raise ValueError(f"threads_per_block must be at most 1024, got {threads}")
    return threads


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


def copy_v1_guarded(x, *, out=None, threads_per_block=THREADS_PER_BLOCK):
    """``y = x`` for a float32 vector x (n,), one thread per element. Returns y (n,)."""
    (n,) = require_float32("x", x, (None,))
    threads = require_threads(threads_per_block)
    y = output_array("out", out, (n,), x)
    if n:
        copy_v1_guarded_kernel[blocks_for(n, threads), threads](x, y)
    return y


@cuda.jit
def copy_v2_grid_stride_kernel(x, y):
    """y[i] = x[i]: each thread copies elements start, start + gridsize, start + 2 * gridsize, ..."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)   # every thread of the grid, so neighbours stay neighbours
    for i in range(start, x.size, stride):
        y[i] = x[i]


def copy_v2_grid_stride(x, *, out=None, blocks=None, threads_per_block=THREADS_PER_BLOCK):
    """``y = x`` for a float32 vector x (n,) with a fixed grid of ``blocks`` blocks. Returns y (n,).

    ``blocks`` defaults to 4 per streaming multiprocessor; each thread copies about
    ``n / (blocks * threads_per_block)`` elements.
    """
    (n,) = require_float32("x", x, (None,))
    threads = require_threads(threads_per_block)
    blocks = default_stride_blocks() if blocks is None else require_positive_int("blocks", blocks)
    y = output_array("out", out, (n,), x)
    if n:
        copy_v2_grid_stride_kernel[blocks, threads](x, y)
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


def axpb_v1_guarded(x, a, b, *, out=None, threads_per_block=THREADS_PER_BLOCK):
    """``y = a * x + b`` for a float32 vector x (n,) and real scalars a, b. Returns y (n,) float32.

    One thread per element: ``ceil(n / threads_per_block)`` blocks, the last one partly idle.
    """
    (n,) = require_float32("x", x, (None,))
    a, b = require_scalar("a", a), require_scalar("b", b)
    threads = require_threads(threads_per_block)
    y = output_array("out", out, (n,), x)
    if n:
        axpb_v1_guarded_kernel[blocks_for(n, threads), threads](x, a, b, y)
    return y


# ----------------------------------------------------------------------------------------------
# normalize_rows: a 3D grid over (row tiles, heads, batch)
# ----------------------------------------------------------------------------------------------

def normalize_rows_grid(shape):
    """``(grid, block)`` for x of ``shape`` (batch, heads, rows, head_dim).

    grid = (ceil(rows / ROWS_PER_BLOCK), heads, batch), block = (COLS_PER_BLOCK, ROWS_PER_BLOCK).
    """
    batch, heads, rows, _ = shape
    return (blocks_for(rows, ROWS_PER_BLOCK), heads, batch), (COLS_PER_BLOCK, ROWS_PER_BLOCK)


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


def normalize_rows_v1_3d_grid(x, row_sums, out=None):
    """``out[b, h, n, :] = x[b, h, n, :] / row_sums[b, h, n]``: one 3D grid of (row tiles, heads, batch).

    x: (batch, heads, rows, head_dim) float32; row_sums: (batch, heads, rows) float32.
    Returns out, shaped like x.
    """
    out = normalize_rows_inputs(x, row_sums, out)
    if x.size:
        grid, block = normalize_rows_grid(x.shape)
        normalize_rows_v1_3d_grid_kernel[grid, block](x, row_sums, out)
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


def strided_read(x, stride, n, *, out=None, threads_per_block=THREADS_PER_BLOCK):
    """``y[i] = x[i * stride]`` for i < n: n useful reads ``stride`` floats apart. Returns y (n,).

    x: float32 vector with at least ``(n - 1) * stride + 1`` elements.
    """
    (size,) = require_float32("x", x, (None,))
    stride = require_positive_int("stride", stride)
    n = require_positive_int("n", n, zero_ok=True)
    if n and (n - 1) * stride >= size:
        raise ValueError(f"x must hold at least (n - 1) * stride + 1 = {(n - 1) * stride + 1} "
                         f"elements for n={n}, stride={stride}; got {size}")
    threads = require_threads(threads_per_block)
    y = output_array("out", out, (n,), x)
    if n:
        strided_read_kernel[blocks_for(n, threads), threads](x, stride, y)
    return y


__all__ = [
    "THREADS_PER_BLOCK", "COLS_PER_BLOCK", "ROWS_PER_BLOCK",
    "copy_v1_guarded", "copy_v1_guarded_kernel", "copy_v2_grid_stride", "copy_v2_grid_stride_kernel",
    "axpb_v1_guarded", "axpb_v1_guarded_kernel",
    "normalize_rows_v1_3d_grid", "normalize_rows_v1_3d_grid_kernel", "normalize_rows_grid",
    "normalize_rows_inputs", "strided_read", "strided_read_kernel",
    "require_scalar", "require_positive_int", "require_threads", "blocks_for", "default_stride_blocks",
]
