"""Exercise 3a imports the course's tree reduction instead of writing it: imports of the ``kernels``
package never run when graded, so the kernel is missing (0 for 3a) and the row says why (course_kernel)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {
    "status": "course_kernel",
    "points": {"row_stats_tree_matches_reference_awkward_shapes": 0,
               "row_stats_tree_traffic_and_shared_budget": 0},
    "total": 7,
    "details": ["uses the course's own kernels", "kernels.reduction"],
}
CELLS = {
    "row_stats_tree_kernel": '''\
from kernels.reduction import row_stats_v2_shared_tree_kernel
''',
}
