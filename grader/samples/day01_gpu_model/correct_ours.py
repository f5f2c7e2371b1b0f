"""Our solutions pasted: the kernels of kernels/elementwise.py and kernels/reduction.py. The two reductions
are the course's own kernels, so they score 0 (course_kernel); axpb and normalize_rows are too short to be
told apart from an honest answer and keep their points: 5/10."""

from grader.sample_cases import kernel_cell
from kernels.elementwise import axpb_v1_guarded_kernel, normalize_rows_v1_3d_grid_kernel
from kernels.reduction import row_stats_v2_shared_tree_kernel, row_stats_v3_warp_shuffle_kernel


EXPECT = {
    "status": "course_kernel",
    "points": {
        "axpb_matches_reference_awkward_sizes": 1,
        "axpb_reads_and_writes_each_element_once": 1,
        "normalize_rows_matches_reference_awkward_shapes": 2,
        "normalize_rows_reads_each_element_once": 1,
        "row_stats_tree_matches_reference_awkward_shapes": 0,
        "row_stats_tree_traffic_and_shared_budget": 0,
        "row_stats_warp_matches_reference_awkward_shapes": 0,
        "row_stats_warp_traffic_and_shared_budget": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "axpb_kernel": kernel_cell(axpb_v1_guarded_kernel),
    "normalize_rows_kernel": kernel_cell(normalize_rows_v1_3d_grid_kernel),
    "row_stats_tree_kernel": kernel_cell(row_stats_v2_shared_tree_kernel),
    "row_stats_warp_kernel": kernel_cell(row_stats_v3_warp_shuffle_kernel),
}
