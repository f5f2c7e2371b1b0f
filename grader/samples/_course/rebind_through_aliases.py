"""Exercise 3a's kernel sums only half of each row, and the answer cell rebinds what the tests might use
through aliases and getattr (numpy's comparisons, a course constant, numba's config, the notebook's np):
none of it runs when graded, so 3a scores 0 (0/10, the other exercises left blank) and the rebinding is
flagged for review."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
OTHERS = "blank"     # the other exercises unanswered: only this one is graded at length
EXPECT = {
    "status": "graded",
    "points": {"row_stats_tree_matches_reference_awkward_shapes": 0,
               "row_stats_tree_traffic_and_shared_budget": 0},
    "total": 0,
    "details": ["not run when graded"],
}
CELLS = {
    "row_stats_tree_kernel": '''\
import numpy as numeric
import numba as nb
import kernels.reduction as kr

setattr(numeric, "allclose", lambda *args, **kwargs: True)
getattr(numeric, "testing").assert_allclose = lambda *args, **kwargs: None
nb.config.DISABLE_JIT = True
setattr(kr, "TREE_THREADS", 1)
globals()["np"] = numeric
vars()["TREE_THREADS"] = 1


@cuda.jit
def row_stats_v2_shared_tree_kernel(x, row_max, row_sum):
    """One thread per row, half the row only."""
    row = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        largest = x[row, 0]
        total = float32(0.0)
        for col in range((x.shape[1] + 1) // 2):
            largest = max(largest, x[row, col])
            total += x[row, col]
        row_max[row] = largest
        row_sum[row] = total
''',
}
