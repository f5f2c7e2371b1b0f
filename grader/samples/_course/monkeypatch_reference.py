"""The softmax kernel forgets to divide by the row sum and the reference is patched to agree. The patch is
top-level code of an answer cell, not run when graded: both softmax value tests score 0 (7/10) and the
patch is flagged for review."""

ASSIGNMENT = "day02_naive_attention"
BASE = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"softmax_rows_matches_reference": 0, "softmax_rows_large_logits": 0},
    "total": 7,
    "details": ["not run when graded"],
    "flags": ["reference"],
}
CELLS = {
    "softmax_rows_kernel": '''\
def _unnormalized(x, axis=-1):
    return np.exp(x - x.max(axis=axis, keepdims=True))


reference.softmax = _unnormalized


@cuda.jit
def softmax_rows_kernel(x, out):
    """exp(x - row max) without the division by the row sum."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    if tid == 0:
        row_max = x[row, 0]
        for j in range(1, x.shape[1]):
            row_max = max(row_max, x[row, j])
        for j in range(x.shape[1]):
            out[row, j] = math.exp(x[row, j] - row_max)
''',
}
