"""An honest mistake: the softmax kernel keeps the row in a Python list. The simulator runs it and the
answers are right, but no GPU could: it fails to compile, so both softmax value tests and its traffic
test score 0 (7/10), each with the compiler's reason."""

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
    """Thread 0 of each row block copies the row into a list, then normalises it."""
    row = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        values = []
        for j in range(x.shape[1]):
            values.append(x[row, j])
        largest = max(values)
        total = 0.0
        for j in range(x.shape[1]):
            total += math.exp(values[j] - largest)
        for j in range(x.shape[1]):
            out[row, j] = math.exp(values[j] - largest) / total
''',
}
