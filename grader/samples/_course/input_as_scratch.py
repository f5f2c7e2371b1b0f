"""An honest softmax that keeps exp(x - max) in x itself before dividing into out: right answers, but it
writes its input. Each softmax test fails for that reason, named ("wrote to its input x"), not for a
wrong value: 0 for the softmax exercise, 6/10."""

ASSIGNMENT = "day02_naive_attention"
BASE = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"softmax_rows_matches_reference": 0, "softmax_rows_large_logits": 0,
               "softmax_rows_reads_and_writes": 0},
    "total": 6,
}
CELLS = {
    "softmax_rows_kernel": '''\
@cuda.jit
def softmax_rows_kernel(x, out):
    """Thread 0 of each row block: max, exp in place, sum, divide."""
    row = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        largest = x[row, 0]
        for j in range(1, x.shape[1]):
            largest = max(largest, x[row, j])
        total = float32(0.0)
        for j in range(x.shape[1]):
            x[row, j] = math.exp(x[row, j] - largest)
            total += x[row, j]
        for j in range(x.shape[1]):
            out[row, j] = x[row, j] / total
''',
}
