"""Our solutions pasted: the kernels of kernels/gemm.py. A graded submission may not use the course's own
kernels: 0/10, course_kernel."""

from grader.sample_cases import kernel_cell
from kernels.gemm import gemm_v3_shared_tiles_kernel, gemm_v4_register_blocked_kernel


EXPECT = {
    "status": "course_kernel",
    "points": {
        "shared_tiles_matches_reference": 0,
        "shared_tiles_edge_shapes": 0,
        "shared_tiles_reads_fall_by_tile": 0,
        "register_blocked_matches_reference": 0,
        "register_blocked_edge_shapes": 0,
        "register_blocked_reads_fall_by_block_tile": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "gemm_v3_shared_tiles_kernel": kernel_cell(gemm_v3_shared_tiles_kernel),
    "gemm_v4_register_blocked_kernel": kernel_cell(gemm_v4_register_blocked_kernel),
}
