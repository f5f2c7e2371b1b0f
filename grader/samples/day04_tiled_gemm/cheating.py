"""Cheating submissions deserve 0/10.

Exercise 1 replaces the kernel by an object that multiplies on the host with NumPy; exercise 2 is a
kernel that hands whole tiles to np.dot (works only in the simulator, reads nothing element by
element). Neither launches a kernel that does the work: 0/10.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "shared_tiles_matches_reference": 0,
        "shared_tiles_edge_shapes": 0,
        "shared_tiles_reads_fall_by_tile": 0,
        "register_blocked_matches_reference": 0,
        "register_blocked_edge_shapes": 0,
        "register_blocked_reads_fall_by_block_tile": 0,
    },
}

CELLS = {
    "gemm_v3_shared_tiles_kernel": '''\
class _HostProduct:
    """Looks like a kernel to the launcher, but multiplies on the host with NumPy."""

    def __getitem__(self, launch_config):
        def run(a, b, c):
            c[:, :] = np.asarray(a) @ np.asarray(b)
        return run


gemm_v3_shared_tiles_kernel = _HostProduct()
''',
    "gemm_v4_register_blocked_kernel": '''\
@cuda.jit
def gemm_v4_register_blocked_kernel(a, b, c):
    """Thread (tx, ty) owns rows ty + i*THREADS_Y and columns tx + j*THREADS_X of the block's C tile."""
    # One thread per block hands the whole tile to NumPy: runs only in the simulator, where the
    # slices are read inside np.dot and never element by element.
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        r0 = cuda.blockIdx.y * BLOCK_M
        c0 = cuda.blockIdx.x * BLOCK_N
        rows = min(BLOCK_M, a.shape[0] - r0)
        cols = min(BLOCK_N, b.shape[1] - c0)
        block = np.dot(a[r0:r0 + rows, :], b[:, c0:c0 + cols])
        for i in range(rows):
            for j in range(cols):
                c[r0 + i, c0 + j] = block[i, j]
''',
}
