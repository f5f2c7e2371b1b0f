"""A missing rescale and a correct but two-pass fused kernel: 5/10.

- softmax_online_kernel never rescales a thread's running sum when its maximum grows (the merge
  across threads is right): terms measured against different maxima are mixed, rows sum to more
  than 1. Its traffic is right (keeps the traffic point only).
- attention_v2_fused_rows_kernel gives right answers but is not online: a first pass over the keys
  finds the maximum, a second one sums and accumulates, so K is read twice per query row. Only
  the traffic check catches it (loses that point).
"""

EXPECT = {
    "status": "graded",
    "points": {
        "online_softmax_matches_two_pass": 0,
        "online_softmax_masked_rows": 0,
        "online_softmax_large_logits": 0,
        "online_softmax_two_reads_per_element": 1,
        "fused_rows_matches_reference": 2,
        "fused_rows_causal": 1,
        "fused_rows_edge_cases": 1,
        "fused_rows_no_nxn_traffic": 0,
    },
}

CELLS = {
    "softmax_online_kernel": '''\
@cuda.jit
def softmax_online_kernel(x, out):
    """Online softmax whose per-thread running sum is not rescaled when the maximum grows."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    run_max = cuda.shared.array(SOFTMAX_THREADS, float32)
    run_sum = cuda.shared.array(SOFTMAX_THREADS, float32)
    m = float32(-math.inf)
    l = float32(0.0)
    for j in range(tid, x.shape[1], SOFTMAX_THREADS):
        x_j = x[row, j]
        m = max(m, x_j)
        if m != -math.inf:
            l += math.exp(x_j - m)
    run_max[tid] = m
    run_sum[tid] = l
    cuda.syncthreads()
    stride = SOFTMAX_THREADS // 2
    while stride > 0:
        if tid < stride:
            m_a = run_max[tid]
            m_b = run_max[tid + stride]
            m_new = max(m_a, m_b)
            if m_new != -math.inf:
                run_sum[tid] = run_sum[tid] * math.exp(m_a - m_new) + run_sum[tid + stride] * math.exp(m_b - m_new)
            run_max[tid] = m_new
        cuda.syncthreads()
        stride //= 2
    for j in range(tid, x.shape[1], SOFTMAX_THREADS):
        if run_sum[0] > 0:
            out[row, j] = math.exp(x[row, j] - run_max[0]) / run_sum[0]
        else:
            out[row, j] = 0.0
''',
    "attention_v2_fused_rows_kernel": '''\
@cuda.jit
def attention_v2_fused_rows_kernel(q, k, v, o, scale, causal):
    """Two passes over the keys per query row: the maximum first, then the sum and the output."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    if i >= q.shape[2]:
        return
    head_dim = q.shape[3]
    q_row = cuda.local.array(MAX_HEAD_DIM, float32)
    acc = cuda.local.array(MAX_HEAD_DIM, float32)
    for c in range(head_dim):
        q_row[c] = q[b, h, i, c] * scale
        acc[c] = 0.0
    n_keys = min(i + 1, k.shape[2]) if causal else k.shape[2]
    m = float32(-math.inf)
    for j in range(n_keys):
        score = float32(0.0)
        for c in range(head_dim):
            score += q_row[c] * k[b, h, j, c]
        m = max(m, score)
    l = float32(0.0)
    for j in range(n_keys):
        score = float32(0.0)
        for c in range(head_dim):
            score += q_row[c] * k[b, h, j, c]
        p = math.exp(score - m)
        l += p
        for c in range(head_dim):
            acc[c] += p * v[b, h, j, c]
    for c in range(head_dim):
        o[b, h, i, c] = acc[c] / l if l > 0 else 0.0
''',
}
