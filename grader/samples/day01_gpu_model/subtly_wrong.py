"""Plausible kernels with one bug each: 1/10.

Exercise 1 guards with ``i < x.size - 1`` and never writes the last element (0/2). Exercise 2 has
no loop over the columns, so head_dim above 32 leaves columns unwritten (0/3). In 3a the running
max starts at 0 instead of -inf: right for rows with a positive entry, wrong for all-negative rows,
so only the traffic check, on random normal rows, passes (1/3). In 3b warp 0 forgets the other
warp's partial, wrong as soon as a row has more than 32 columns (0/2).
"""

EXPECT = {
    "status": "graded",
    "points": {
        "axpb_matches_reference_awkward_sizes": 0,
        "axpb_reads_and_writes_each_element_once": 0,
        "normalize_rows_matches_reference_awkward_shapes": 0,
        "normalize_rows_reads_each_element_once": 0,
        "row_stats_tree_matches_reference_awkward_shapes": 0,
        "row_stats_tree_traffic_and_shared_budget": 1,
        "row_stats_warp_matches_reference_awkward_shapes": 0,
        "row_stats_warp_traffic_and_shared_budget": 0,
    },
}

CELLS = {
    "axpb_kernel": '''\
@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    """y[i] = a * x[i] + b for x, y (n,) float32 and float32 scalars a, b; one thread per element."""
    i = cuda.grid(1)
    if i < x.size - 1:
        y[i] = a * x[i] + b
''',
    "normalize_rows_kernel": '''\
@cuda.jit
def normalize_rows_v1_3d_grid_kernel(x, row_sums, out):
    """out[b, h, n, :] = x[b, h, n, :] / row_sums[b, h, n] for x, out (batch, heads, rows, head_dim)."""
    row = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
    head = cuda.blockIdx.y
    batch = cuda.blockIdx.z
    col = cuda.threadIdx.x
    if row < x.shape[2] and col < x.shape[3]:
        out[batch, head, row, col] = x[batch, head, row, col] / row_sums[batch, head, row]
''',
    "row_stats_tree_kernel": '''\
@cuda.jit
def row_stats_v2_shared_tree_kernel(x, row_max, row_sum):
    """Block ``row`` reduces x[row, :]: a block-stride loop, then a halving tree in shared memory."""
    partial_max = cuda.shared.array(TREE_THREADS, float32)
    partial_sum = cuda.shared.array(TREE_THREADS, float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    largest = float32(0.0)
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
        cuda.syncthreads()
        half //= 2
    if tid == 0:
        row_max[row] = partial_max[0]
        row_sum[row] = partial_sum[0]
''',
    "row_stats_warp_kernel": '''\
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
    while offset > 0:
        largest = max(largest, cuda.shfl_down_sync(FULL_MASK, largest, offset))
        total += cuda.shfl_down_sync(FULL_MASK, total, offset)
        offset //= 2
    if lane == 0:
        warp_max[warp] = largest
        warp_sum[warp] = total
    cuda.syncthreads()
    if tid == 0:
        row_max[row] = warp_max[0]
        row_sum[row] = warp_sum[0]
''',
}
