"""Exercise 1's kernel has no bounds guard, so the last block writes past the end of y: the simulator
raises IndexError for every size that is not a multiple of the block, exercise 1 scores 0 (0/10, the
other exercises left blank)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
OTHERS = "blank"     # the other exercises unanswered: only this one is graded at length
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 0,
}
CELLS = {
    "axpb_kernel": '''\
@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    i = cuda.grid(1)
    y[i] = a * x[i] + b
''',
}
