"""Correct kernels written differently deserve 10/10.

The scores and PV kernels use cuda.grid(1) and fold the scale or the loop order differently; the
softmax combines the block's maxima and sums with warp shuffles (a butterfly) instead of a tree in
shared memory, and multiplies by the reciprocal of the sum. All stay within the read budgets.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "scores_matches_reference": 2,
        "scores_reads_and_writes": 1,
        "softmax_rows_matches_reference": 2,
        "softmax_rows_large_logits": 1,
        "softmax_rows_reads_and_writes": 1,
        "pv_matches_reference": 2,
        "pv_reads_and_writes": 1,
    },
}

CELLS = {
    "scores_kernel": '''\
@cuda.jit
def scores_kernel(q, k, s, scale):
    """s[b, h, i, j] = scale * dot(q[b, h, i, :], k[b, h, j, :]); one thread per score."""
    flat = cuda.grid(1)
    n_queries, n_keys = s.shape[2], s.shape[3]
    if flat < n_queries * n_keys:
        row = flat // n_keys
        col = flat - row * n_keys
        b, h = cuda.blockIdx.z, cuda.blockIdx.y
        total = float32(0.0)
        c = 0
        while c < q.shape[3]:
            total += (q[b, h, row, c] * scale) * k[b, h, col, c]
            c += 1
        s[b, h, row, col] = total
''',
    "softmax_rows_kernel": '''\
@cuda.jit
def softmax_rows_kernel(x, out):
    """One warp per row: shuffles combine the lanes' maxima and sums, no shared memory."""
    row = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    cols = x.shape[1]
    biggest = float32(-math.inf)
    for j in range(lane, cols, SOFTMAX_THREADS):
        biggest = max(biggest, x[row, j])
    offset = SOFTMAX_THREADS // 2
    while offset > 0:
        biggest = max(biggest, cuda.shfl_xor_sync(0xFFFFFFFF, biggest, offset))
        offset //= 2
    total = float32(0.0)
    for j in range(lane, cols, SOFTMAX_THREADS):
        total += math.exp(x[row, j] - biggest)
    offset = SOFTMAX_THREADS // 2
    while offset > 0:
        total += cuda.shfl_xor_sync(0xFFFFFFFF, total, offset)
        offset //= 2
    inverse = float32(1.0) / total
    for j in range(lane, cols, SOFTMAX_THREADS):
        out[row, j] = math.exp(x[row, j] - biggest) * inverse
''',
    "pv_kernel": '''\
@cuda.jit
def pv_kernel(p, v, o):
    """o[b, h, i, c] = sum over j of p[b, h, i, j] * v[b, h, j, c], keys summed from the last."""
    flat = cuda.grid(1)
    b, h = cuda.blockIdx.z, cuda.blockIdx.y
    n_queries, n_keys, head_dim = p.shape[2], p.shape[3], v.shape[3]
    if flat < n_queries * head_dim:
        i, c = flat // head_dim, flat % head_dim
        total = float32(0.0)
        for j in range(n_keys - 1, -1, -1):
            total += p[b, h, i, j] * v[b, h, j, c]
        o[b, h, i, c] = total
''',
}
