"""Exercise 1's cell ends in an endless Python loop after a right kernel. Top-level code of an answer
cell is not run when graded, so the loop never runs and the kernel gets its points: 10/10, the row says
what was left out. (A kernel that never ends is `kernel_hangs.py`: it times out.)"""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
TIMEOUT = 20
EXPECT = {
    "status": "graded",
    "total": 10,
    "details": ["not run when graded"],
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
