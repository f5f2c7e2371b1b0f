"""Three subtle bugs, each losing the points of the checks it breaks: 5/10.

- scores_kernel forgets the scale: S is off by the constant factor 1/scale; its traffic is right
  (loses 2, keeps 1).
- softmax_rows_kernel does not subtract the row maximum: right on moderate logits, overflows on
  logits of size 1e4 (loses the large-logits point only).
- pv_kernel sums over N keys instead of M (the loop bound uses the wrong dimension): wrong whenever
  M != N, while its reads still fit the budget (loses 2, keeps 1).
"""

EXPECT = {
    "status": "graded",
    "points": {
        "scores_matches_reference": 0,
        "scores_reads_and_writes": 1,
        "softmax_rows_matches_reference": 2,
        "softmax_rows_large_logits": 0,
        "softmax_rows_reads_and_writes": 1,
        "pv_matches_reference": 0,
        "pv_reads_and_writes": 1,
    },
}

CELLS = {
    "scores_kernel": '''\
@cuda.jit
def scores_kernel(q, k, s, scale):
    """s[b, h, i, j] = dot(q[b, h, i, :], k[b, h, j, :]) (the scale is missing)."""
    flat = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    n_keys = k.shape[2]
    if flat >= q.shape[2] * n_keys:
        return
    i = flat // n_keys
    j = flat % n_keys
    acc = float32(0.0)
    for c in range(q.shape[3]):
        acc += q[b, h, i, c] * k[b, h, j, c]
    s[b, h, i, j] = acc
''',
    "softmax_rows_kernel": '''\
@cuda.jit
def softmax_rows_kernel(x, out):
    """exp(x) / sum(exp(x)) per row, without subtracting the maximum."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    partial = cuda.shared.array(SOFTMAX_THREADS, float32)
    thread_sum = float32(0.0)
    for j in range(tid, x.shape[1], SOFTMAX_THREADS):
        thread_sum += math.exp(x[row, j])
    partial[tid] = thread_sum
    cuda.syncthreads()
    stride = SOFTMAX_THREADS // 2
    while stride > 0:
        if tid < stride:
            partial[tid] += partial[tid + stride]
        cuda.syncthreads()
        stride //= 2
    row_sum = partial[0]
    for j in range(tid, x.shape[1], SOFTMAX_THREADS):
        out[row, j] = math.exp(x[row, j]) / row_sum
''',
    "pv_kernel": '''\
@cuda.jit
def pv_kernel(p, v, o):
    """o[b, h, i, c] = sum over j < N of p[b, h, i, j] * v[b, h, j, c] (should be j < M)."""
    flat = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    head_dim = v.shape[3]
    if flat >= p.shape[2] * head_dim:
        return
    i = flat // head_dim
    c = flat % head_dim
    acc = float32(0.0)
    for j in range(p.shape[2]):
        acc += p[b, h, i, j] * v[b, h, j, c]
    o[b, h, i, c] = acc
''',
}
