"""Exercise 1's kernel never finishes (thread 0 waits for a flag nobody sets): every cell that launches it
times out and the kernel is restarted each time; exercise 1 scores 0, the rest is graded (8/10, timed out)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
TIMEOUT = 12
EXPECT = {
    "status": "timed_out",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 8,
    "details": ["timed out in axpb_matches_reference_awkward_sizes", "timed out in axpb_reads_and_writes_each_element_once"],
}
CELLS = {
    "axpb_kernel": '''\
@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = a * x[i] + b
    if i == 0:
        while y[0] == y[0]:     # spins for ever: y[0] is a number
            pass
''',
}
