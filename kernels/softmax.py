"""Row softmax kernels: ``out[r, :] = softmax(x[r, :])`` for a float32 matrix ``x`` (rows, cols).

Both rungs give one block of ``SOFTMAX_THREADS`` threads to each row; thread ``t`` handles the
columns ``t, t + SOFTMAX_THREADS, ...`` and the block combines the threads' partial results with
a shared-memory tree reduction.

- ``softmax_rows`` (day 2): three passes over the row: the maximum, the sum of ``exp(x - max)``,
  then the normalised output; two tree reductions. Reads each element 3 times, writes it once.
- ``softmax_online`` (day 3): one pass keeps a running maximum and a running sum together, the
  block merges the threads' (max, sum) pairs, a second pass writes the output. Reads each element
  twice. Entries equal to ``-inf`` (masked) get probability 0; a row with no finite entry gives 0.

Each launcher validates, launches the kernel given as ``kernel=`` (its own by default) with one
block per row, and returns the output; ``RUNGS`` registers both in this order.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from kernels.launching import output_array, require_float32
from kernels.registry import Rung, ladder

__all__ = ["SOFTMAX_THREADS", "softmax_rows_kernel", "softmax_rows", "softmax_online_kernel",
           "softmax_online", "RUNGS"]

# Threads per row: one warp. A power of two, because the tree reductions halve it each step.
SOFTMAX_THREADS = 32


@cuda.jit
def softmax_rows_kernel(x, out):
    """Block r computes row r of out = softmax(x) for x, out (rows, cols); SOFTMAX_THREADS threads."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    cols = x.shape[1]
    partial = cuda.shared.array(SOFTMAX_THREADS, float32)

    # Pass 1: the row maximum. Subtracting it keeps every exp() argument <= 0, so nothing overflows.
    thread_max = float32(-math.inf)
    for j in range(tid, cols, SOFTMAX_THREADS):
        thread_max = max(thread_max, x[row, j])
    partial[tid] = thread_max
    cuda.syncthreads()
    stride = SOFTMAX_THREADS // 2
    while stride > 0:
        if tid < stride:
            partial[tid] = max(partial[tid], partial[tid + stride])
        cuda.syncthreads()
        stride //= 2
    row_max = partial[0]
    cuda.syncthreads()  # every thread has read partial[0] before pass 2 overwrites it

    # Pass 2: the sum of exp(x - max).
    thread_sum = float32(0.0)
    for j in range(tid, cols, SOFTMAX_THREADS):
        thread_sum += math.exp(x[row, j] - row_max)
    partial[tid] = thread_sum
    cuda.syncthreads()
    stride = SOFTMAX_THREADS // 2
    while stride > 0:
        if tid < stride:
            partial[tid] += partial[tid + stride]
        cuda.syncthreads()
        stride //= 2
    row_sum = partial[0]

    # Pass 3: normalise.
    for j in range(tid, cols, SOFTMAX_THREADS):
        out[row, j] = math.exp(x[row, j] - row_max) / row_sum


def softmax_rows(x, *, out=None, kernel=softmax_rows_kernel):
    """Softmax of each row of x (rows, cols) float32 with ``softmax_rows_kernel``; returns out (rows, cols).

    x and out are NumPy arrays or device arrays; out is allocated when not given.
    """
    rows, cols = require_float32("x", x, (None, None))
    out = output_array("out", out, (rows, cols), like=x)
    if rows and cols:
        kernel[rows, SOFTMAX_THREADS](x, out)
    return out


@cuda.jit
def softmax_online_kernel(x, out):
    """Block r computes row r of out = softmax(x) in two reads of x; rows without a finite entry give 0."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    cols = x.shape[1]
    run_max = cuda.shared.array(SOFTMAX_THREADS, float32)
    run_sum = cuda.shared.array(SOFTMAX_THREADS, float32)

    # Pass 1: running max m and running sum l = sum of exp(x - m) over the columns seen so far.
    m = float32(-math.inf)
    l = float32(0.0)
    for j in range(tid, cols, SOFTMAX_THREADS):
        x_j = x[row, j]
        m_new = max(m, x_j)
        if m_new != -math.inf:  # while everything seen is -inf, exp(-inf - -inf) would be NaN
            l = l * math.exp(m - m_new) + math.exp(x_j - m_new)
        m = m_new
    run_max[tid] = m
    run_sum[tid] = l
    cuda.syncthreads()

    # Merge the threads' (m, l) pairs: rescale both sums to the larger maximum, then add.
    stride = SOFTMAX_THREADS // 2
    while stride > 0:
        if tid < stride:
            m_a = run_max[tid]
            m_b = run_max[tid + stride]
            m_new = max(m_a, m_b)
            if m_new != -math.inf:
                run_sum[tid] = (run_sum[tid] * math.exp(m_a - m_new)
                                + run_sum[tid + stride] * math.exp(m_b - m_new))
            run_max[tid] = m_new
        cuda.syncthreads()
        stride //= 2
    row_max = run_max[0]
    row_sum = run_sum[0]

    # Pass 2: normalise; a row with no finite entry has row_sum == 0 and gets zeros.
    for j in range(tid, cols, SOFTMAX_THREADS):
        if row_sum > 0:
            out[row, j] = math.exp(x[row, j] - row_max) / row_sum
        else:
            out[row, j] = 0.0


def softmax_online(x, *, out=None, kernel=softmax_online_kernel):
    """Softmax of each row of x (rows, cols) float32 with ``softmax_online_kernel``; returns out (rows, cols).

    x and out are NumPy arrays or device arrays; out is allocated when not given.
    """
    rows, cols = require_float32("x", x, (None, None))
    out = output_array("out", out, (rows, cols), like=x)
    if rows and cols:
        kernel[rows, SOFTMAX_THREADS](x, out)
    return out


RUNGS = ladder(
    Rung("softmax_rows", softmax_rows, "three passes: the row maximum, the sum of exponentials, the output"),
    Rung("softmax_online", softmax_online,
         "one pass keeps a running maximum and sum, the block merges the threads' pairs: two reads per element"),
)
