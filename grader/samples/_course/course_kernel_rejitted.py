"""Exercise 3b re-jits the course's warp-shuffle kernel under a new module and name: only ``@cuda.jit``
functions written in the cell run when graded, so 3b scores 0 and the row says why (course_kernel)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {
    "status": "course_kernel",
    "points": {"row_stats_warp_matches_reference_awkward_shapes": 0,
               "row_stats_warp_traffic_and_shared_budget": 0},
    "total": 8,
    "details": ["uses the course's own kernels"],
}
CELLS = {
    "row_stats_warp_kernel": '''\
import types

import kernels

_theirs = kernels.reduction.row_stats_v3_warp_shuffle_kernel.py_func
_mine = types.FunctionType(_theirs.__code__, globals(), "row_stats_v3_warp_shuffle_kernel")
_mine.__module__ = "__main__"
row_stats_v3_warp_shuffle_kernel = cuda.jit(_mine)
''',
}
