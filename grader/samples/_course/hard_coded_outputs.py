"""Exercise 1 writes a constant instead of a*x + b: fresh random inputs catch it, 0 for exercise 1, 0/10,
the other exercises left blank."""

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
    """Writes the value that happened to pass once."""
    i = cuda.grid(1)
    if i < y.size:
        y[i] = 1.5
''',
}
