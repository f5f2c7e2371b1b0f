"""Submissions that get the numbers without doing the asked work: 2/10, each losing what it skips.

Exercise 1 replaces the kernel by an object that computes on the host with NumPy: no kernel is
launched (0/2). Exercise 2 launches a kernel whose threads hand whole rows to NumPy (runs only in the
simulator, reads nothing element by element: 0/3). In 3a thread 0 walks the whole row alone: right
answers and one read per element, but no tree in shared memory (2/3). 3b is the course's shared-memory
tree pasted under the shuffle kernel's name: the course's own kernel, not graded (0/2, course_kernel).
"""

EXPECT = {
    "status": "course_kernel",
    "points": {
        "axpb_matches_reference_awkward_sizes": 0,
        "axpb_reads_and_writes_each_element_once": 0,
        "normalize_rows_matches_reference_awkward_shapes": 0,
        "normalize_rows_reads_each_element_once": 0,
        "row_stats_tree_matches_reference_awkward_shapes": 2,
        "row_stats_tree_traffic_and_shared_budget": 0,
        "row_stats_warp_matches_reference_awkward_shapes": 0,
        "row_stats_warp_traffic_and_shared_budget": 0,
    },
}

CELLS = {
    "axpb_kernel": '''\
class _HostAxpb:
    """Looks like a kernel to the launcher, but computes on the host."""

    def __getitem__(self, launch_config):
        def run(x, a, b, y):
            y[:] = a * np.asarray(x) + b
        return run


axpb_v1_guarded_kernel = _HostAxpb()
''',
    "normalize_rows_kernel": '''\
@cuda.jit
def normalize_rows_v1_3d_grid_kernel(x, row_sums, out):
    """One thread per row hands the whole row to NumPy (simulator only)."""
    row = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
    batch, head = cuda.blockIdx.z, cuda.blockIdx.y
    if cuda.threadIdx.x == 0 and row < x.shape[2]:
        out[batch, head, row, :] = np.asarray(x[batch, head, row, :]) / row_sums[batch, head, row]
''',
    "row_stats_tree_kernel": '''\
@cuda.jit
def row_stats_v2_shared_tree_kernel(x, row_max, row_sum):
    """Thread 0 of the block walks the whole row by itself."""
    row = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        largest = float32(-math.inf)
        total = float32(0.0)
        for col in range(x.shape[1]):
            value = x[row, col]
            largest = max(largest, value)
            total += value
        row_max[row] = largest
        row_sum[row] = total
''',
    "row_stats_warp_kernel": '''\
@cuda.jit
def row_stats_v3_warp_shuffle_kernel(x, row_max, row_sum):
    """The shared-memory tree of 3a, with SHUFFLE_THREADS threads and no shuffle at all."""
    partial_max = cuda.shared.array(SHUFFLE_THREADS, float32)
    partial_sum = cuda.shared.array(SHUFFLE_THREADS, float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    largest = float32(-math.inf)
    total = float32(0.0)
    for col in range(tid, x.shape[1], SHUFFLE_THREADS):
        value = x[row, col]
        largest = max(largest, value)
        total += value
    partial_max[tid] = largest
    partial_sum[tid] = total
    cuda.syncthreads()
    half = SHUFFLE_THREADS // 2
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
}
