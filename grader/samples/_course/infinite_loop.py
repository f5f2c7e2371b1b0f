"""Exercise 1's cell ends in an endless Python loop: the cell is interrupted at the timeout, the kernel is
restarted without it, exercise 1 scores 0 and the rest is graded (8/10, timed out)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_ours"
TIMEOUT = 20
EXPECT = {
    "status": "timed_out",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 8,
    "details": ["timed out in axpb_kernel"],
}
CELLS = {
    "axpb_kernel": '''\
@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = a * x[i] + b


while True:      # left over from debugging
    pass
''',
}
