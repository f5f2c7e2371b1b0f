"""Correct kernels written differently from ours: 10/10.

Exercise 1 uses a grid-stride loop; exercise 2 returns early for rows past the end and multiplies by
a reciprocal; 3a keeps both statistics in one 2D shared array and combines with interleaved
addressing; 3b reduces each warp with XOR butterflies and lets thread 0 combine the warps.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "axpb_matches_reference_awkward_sizes": 1,
        "axpb_reads_and_writes_each_element_once": 1,
        "normalize_rows_matches_reference_awkward_shapes": 2,
        "normalize_rows_reads_each_element_once": 1,
        "row_stats_tree_matches_reference_awkward_shapes": 2,
        "row_stats_tree_traffic_and_shared_budget": 1,
        "row_stats_warp_matches_reference_awkward_shapes": 1,
        "row_stats_warp_traffic_and_shared_budget": 1,
    },
}

CELLS = {
    "axpb_kernel": '''\
@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    """y[i] = a * x[i] + b, written as a grid-stride loop (the loop condition is the guard)."""
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        y[i] = x[i] * a + b
''',
    "normalize_rows_kernel": '''\
@cuda.jit
def normalize_rows_v1_3d_grid_kernel(x, row_sums, out):
    """Threads past the last row leave at once; the others multiply by the reciprocal of the row sum."""
    batch, head = cuda.blockIdx.z, cuda.blockIdx.y
    row = cuda.blockIdx.x * ROWS_PER_BLOCK + cuda.threadIdx.y
    if row >= x.shape[2]:
        return
    inverse = float32(1.0) / row_sums[batch, head, row]
    col = cuda.threadIdx.x
    while col < x.shape[3]:
        out[batch, head, row, col] = x[batch, head, row, col] * inverse
        col += COLS_PER_BLOCK
''',
    "row_stats_tree_kernel": '''\
@cuda.jit
def row_stats_v2_shared_tree_kernel(x, row_max, row_sum):
    """One 2D shared array (statistic, thread); interleaved tree: stride 1, 2, 4, ..."""
    partials = cuda.shared.array((2, TREE_THREADS), float32)
    row, tid = cuda.blockIdx.x, cuda.threadIdx.x
    best = float32(-math.inf)
    acc = float32(0.0)
    col = tid
    while col < x.shape[1]:
        v = x[row, col]
        if v > best:
            best = v
        acc += v
        col += TREE_THREADS
    partials[0, tid] = best
    partials[1, tid] = acc
    cuda.syncthreads()
    stride = 1
    while stride < TREE_THREADS:
        if tid % (2 * stride) == 0:
            if partials[0, tid + stride] > partials[0, tid]:
                partials[0, tid] = partials[0, tid + stride]
            partials[1, tid] += partials[1, tid + stride]
        cuda.syncthreads()
        stride *= 2
    if tid == 0:
        row_max[row] = partials[0, 0]
        row_sum[row] = partials[1, 0]
''',
    "row_stats_warp_kernel": '''\
@cuda.jit
def row_stats_v3_warp_shuffle_kernel(x, row_max, row_sum):
    """XOR butterflies give every lane its warp's result; thread 0 combines the warps serially."""
    per_warp = cuda.shared.array((2, WARPS_PER_BLOCK), float32)
    row, tid = cuda.blockIdx.x, cuda.threadIdx.x
    m = float32(-math.inf)
    s = float32(0.0)
    for col in range(tid, x.shape[1], SHUFFLE_THREADS):
        v = x[row, col]
        m = max(m, v)
        s += v
    for mask in (16, 8, 4, 2, 1):
        m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, mask))
        s += cuda.shfl_xor_sync(FULL_MASK, s, mask)
    if tid % WARP_SIZE == 0:
        per_warp[0, tid // WARP_SIZE] = m
        per_warp[1, tid // WARP_SIZE] = s
    cuda.syncthreads()
    if tid == 0:
        m = per_warp[0, 0]
        s = per_warp[1, 0]
        for w in range(1, WARPS_PER_BLOCK):
            m = max(m, per_warp[0, w])
            s += per_warp[1, w]
        row_max[row] = m
        row_sum[row] = s
''',
}
