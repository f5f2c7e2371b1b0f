"""Our solutions, the kernels of kernels/gemm.py, deserve 10/10.

Every grade cell passes.
"""

from grader.sample_cases import kernel_cell
from kernels.gemm import gemm_v3_shared_tiles_kernel, gemm_v4_register_blocked_kernel


EXPECT = {
    "status": "graded",
    "points": {
        "shared_tiles_matches_reference": 2,
        "shared_tiles_edge_shapes": 1,
        "shared_tiles_reads_fall_by_tile": 2,
        "register_blocked_matches_reference": 2,
        "register_blocked_edge_shapes": 1,
        "register_blocked_reads_fall_by_block_tile": 2,
    },
}

CELLS = {
    "gemm_v3_shared_tiles_kernel": kernel_cell(gemm_v3_shared_tiles_kernel),
    "gemm_v4_register_blocked_kernel": kernel_cell(gemm_v4_register_blocked_kernel),
}
