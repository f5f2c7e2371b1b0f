"""Exercise 1 (v3) launches a kernel whose first thread hands the whole product to NumPy, which the
simulator runs as plain Python: it does not compile for a GPU, so it never runs when graded and every
v3 test scores 0 with the compiler's reason."""

ASSIGNMENT = "day04_tiled_gemm"
BASE = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"shared_tiles_matches_reference": 0, "shared_tiles_edge_shapes": 0,
               "shared_tiles_reads_fall_by_tile": 0},
    "total": 5,
}
CELLS = {
    "gemm_v3_shared_tiles_kernel": '''\
@cuda.jit
def gemm_v3_shared_tiles_kernel(a, b, c):
    """Thread (0, 0) of block (0, 0) computes C on the host."""
    if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        c[:, :] = np.dot(a, b)
''',
}
