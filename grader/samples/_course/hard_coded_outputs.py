"""Exercise 1 writes a constant instead of a*x + b: fresh random inputs catch it, 0 for exercise 1, 8/10."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 8,
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
