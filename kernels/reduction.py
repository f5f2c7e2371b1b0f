"""Row reductions of day 1: the max and the sum of every row of a matrix, in one pass.

``row_stats(x)`` returns ``(row_max, row_sum)`` for ``x`` of shape (rows, cols), float32; every
rung reads each element of ``x`` exactly once and writes each output once. The pair is what a
softmax needs (day 2) and what flash attention keeps running (days 3 and 5).

Rungs:

- ``row_stats_v1_thread_per_row``: one thread per row walks its columns alone; neighbouring threads
  read addresses ``cols`` floats apart (uncoalesced) and a row's work is serial.
- ``row_stats_v2_shared_tree``: one block of ``TREE_THREADS`` threads per row; a block-stride loop
  over the columns (coalesced), then a tree in shared memory halves the partials each step.
- ``row_stats_v3_warp_shuffle``: the same loop, then each warp reduces in registers with
  ``shfl_down_sync``; shared memory holds only one partial per warp.

Launchers take NumPy or numba device arrays, launch the kernel given as ``kernel=`` (the rung's
own by default) and return ``(row_max, row_sum)``, each (rows,) float32. ``RUNGS`` registers them.
A matrix with no columns has no max and is rejected; a matrix with no rows gives empty outputs.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from kernels.launching import FULL_MASK, cdiv, output_array, require_float32
from kernels.launching import WARP as WARP_SIZE      # day 1's name for it, which its exercise uses
from kernels.registry import Rung, ladder

TREE_THREADS = 64                        # a power of two, so the tree halves evenly
WARPS_PER_BLOCK = 2                      # a power of two, for the same reason
SHUFFLE_THREADS = WARPS_PER_BLOCK * WARP_SIZE
ROW_THREADS = 128                        # v1: threads per block, one per row


def row_stats_outputs(x, out=None):
    """Validate ``x`` (rows, cols) float32 with cols >= 1; return ``(row_max, row_sum)`` to fill.

    ``out``, when given, is a pair of float32 arrays of shape (rows,); otherwise both are allocated
    on the same side (host or device) as ``x``.
    """
    rows, cols = require_float32("x", x, (None, None))
    if cols == 0:
        raise ValueError(f"x must have at least one column (a row max needs an element), got shape {(rows, cols)}")
    if out is None:
        out = (None, None)
    elif not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"out must be a tuple (row_max, row_sum), got {type(out).__name__}")
    return (output_array("row_max", out[0], (rows,), x),
            output_array("row_sum", out[1], (rows,), x))


# ----------------------------------------------------------------------------------------------
# v1: one thread per row
# ----------------------------------------------------------------------------------------------

@cuda.jit
def row_stats_v1_thread_per_row_kernel(x, row_max, row_sum):
    """Thread ``row`` computes the max and the sum of x[row, :] by itself."""
    row = cuda.grid(1)
    if row < x.shape[0]:
        largest = float32(-math.inf)
        total = float32(0.0)
        for col in range(x.shape[1]):
            value = x[row, col]
            largest = max(largest, value)
            total += value
        row_max[row] = largest
        row_sum[row] = total


def row_stats_v1_thread_per_row(x, out=None, *, kernel=row_stats_v1_thread_per_row_kernel):
    """Row max and row sum of ``x`` (rows, cols), one thread per row. Returns ``(row_max, row_sum)``."""
    row_max, row_sum = row_stats_outputs(x, out)
    rows = x.shape[0]
    if rows:
        kernel[cdiv(rows, ROW_THREADS), ROW_THREADS](x, row_max, row_sum)
    return row_max, row_sum


# ----------------------------------------------------------------------------------------------
# v2: one block per row, a tree in shared memory
# ----------------------------------------------------------------------------------------------

@cuda.jit
def row_stats_v2_shared_tree_kernel(x, row_max, row_sum):
    """Block ``row`` reduces x[row, :]: a block-stride loop, then a halving tree in shared memory."""
    partial_max = cuda.shared.array(TREE_THREADS, float32)
    partial_sum = cuda.shared.array(TREE_THREADS, float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    largest = float32(-math.inf)
    total = float32(0.0)
    for col in range(tid, x.shape[1], TREE_THREADS):
        value = x[row, col]
        largest = max(largest, value)
        total += value
    partial_max[tid] = largest
    partial_sum[tid] = total
    cuda.syncthreads()
    half = TREE_THREADS // 2
    while half > 0:
        if tid < half:
            partial_max[tid] = max(partial_max[tid], partial_max[tid + half])
            partial_sum[tid] += partial_sum[tid + half]
        cuda.syncthreads()      # every write of this level lands before the next level reads
        half //= 2
    if tid == 0:
        row_max[row] = partial_max[0]
        row_sum[row] = partial_sum[0]


def row_stats_v2_shared_tree(x, out=None, *, kernel=row_stats_v2_shared_tree_kernel):
    """Row max and row sum of ``x`` (rows, cols): one block of TREE_THREADS threads per row.

    Returns ``(row_max, row_sum)``, each (rows,) float32.
    """
    row_max, row_sum = row_stats_outputs(x, out)
    if x.shape[0]:
        kernel[x.shape[0], TREE_THREADS](x, row_max, row_sum)
    return row_max, row_sum


# ----------------------------------------------------------------------------------------------
# v3: one block per row, warp shuffles, one shared slot per warp
# ----------------------------------------------------------------------------------------------

@cuda.jit
def row_stats_v3_warp_shuffle_kernel(x, row_max, row_sum):
    """Block ``row`` reduces x[row, :]: a block-stride loop, shuffles in each warp, then warp 0."""
    warp_max = cuda.shared.array(WARPS_PER_BLOCK, float32)
    warp_sum = cuda.shared.array(WARPS_PER_BLOCK, float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    lane = tid % WARP_SIZE
    warp = tid // WARP_SIZE
    largest = float32(-math.inf)
    total = float32(0.0)
    for col in range(tid, x.shape[1], SHUFFLE_THREADS):
        value = x[row, col]
        largest = max(largest, value)
        total += value
    offset = WARP_SIZE // 2
    while offset > 0:           # after this loop lane 0 holds its warp's result
        largest = max(largest, cuda.shfl_down_sync(FULL_MASK, largest, offset))
        total += cuda.shfl_down_sync(FULL_MASK, total, offset)
        offset //= 2
    if lane == 0:
        warp_max[warp] = largest
        warp_sum[warp] = total
    cuda.syncthreads()
    if warp == 0:               # the whole warp 0 takes part, so the full mask is right
        largest = warp_max[lane] if lane < WARPS_PER_BLOCK else float32(-math.inf)
        total = warp_sum[lane] if lane < WARPS_PER_BLOCK else float32(0.0)
        offset = WARPS_PER_BLOCK // 2
        while offset > 0:
            largest = max(largest, cuda.shfl_down_sync(FULL_MASK, largest, offset))
            total += cuda.shfl_down_sync(FULL_MASK, total, offset)
            offset //= 2
        if lane == 0:
            row_max[row] = largest
            row_sum[row] = total


def row_stats_v3_warp_shuffle(x, out=None, *, kernel=row_stats_v3_warp_shuffle_kernel):
    """Row max and row sum of ``x`` (rows, cols): one block of SHUFFLE_THREADS threads per row.

    Returns ``(row_max, row_sum)``, each (rows,) float32.
    """
    row_max, row_sum = row_stats_outputs(x, out)
    if x.shape[0]:
        kernel[x.shape[0], SHUFFLE_THREADS](x, row_max, row_sum)
    return row_max, row_sum


# Named by the rung alone ("v1_thread_per_row"): the labels of the day-1 recordings and plots.
RUNGS = ladder(
    Rung("v1_thread_per_row", row_stats_v1_thread_per_row,
         "one thread per row walks its columns alone (uncoalesced, serial per row)"),
    Rung("v2_shared_tree", row_stats_v2_shared_tree,
         "one block per row: a coalesced block-stride loop, then a halving tree in shared memory"),
    Rung("v3_warp_shuffle", row_stats_v3_warp_shuffle,
         "the tree inside each warp runs in registers with shfl_down_sync; one shared slot per warp"),
)

__all__ = [
    "WARP_SIZE", "FULL_MASK", "TREE_THREADS", "WARPS_PER_BLOCK", "SHUFFLE_THREADS", "ROW_THREADS",
    "RUNGS", "row_stats_outputs",
    "row_stats_v1_thread_per_row", "row_stats_v1_thread_per_row_kernel",
    "row_stats_v2_shared_tree", "row_stats_v2_shared_tree_kernel",
    "row_stats_v3_warp_shuffle", "row_stats_v3_warp_shuffle_kernel",
]
