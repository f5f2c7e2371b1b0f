"""Two masking bugs, each losing the points of the checks that exercise it: 7/10.

- softmax_online_kernel divides by the running sum without checking it: a fully masked row (all
  -inf, sum 0) becomes 0/0 (NaN). Every other row is
  right (loses the masked-rows point only).
- attention_v2_fused_rows_kernel stops the causal loop before the diagonal (keys j < i instead of
  j <= i): query 0 sees no key and every causal row misses its own key. Non-causal attention and
  the traffic are right (loses the causal and the edge-case points, which include causal rows).
"""

EXPECT = {
    "status": "graded",
    "points": {
        "online_softmax_matches_two_pass": 2,
        "online_softmax_masked_rows": 0,
        "online_softmax_large_logits": 1,
        "online_softmax_two_reads_per_element": 1,
        "fused_rows_matches_reference": 2,
        "fused_rows_causal": 0,
        "fused_rows_edge_cases": 0,
        "fused_rows_no_nxn_traffic": 1,
    },
}

CELLS = {
    "softmax_online_kernel": '''\
@cuda.jit
def softmax_online_kernel(x, out):
    """Online softmax; forgets that a fully masked row has a running sum of 0."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    run_max = cuda.shared.array(SOFTMAX_THREADS, float32)
    run_sum = cuda.shared.array(SOFTMAX_THREADS, float32)
    m = float32(-math.inf)
    l = float32(0.0)
    for j in range(tid, x.shape[1], SOFTMAX_THREADS):
        x_j = x[row, j]
        m_new = max(m, x_j)
        if m_new != -math.inf:
            l = l * math.exp(m - m_new) + math.exp(x_j - m_new)
        m = m_new
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
        out[row, j] = math.exp(x[row, j] - run_max[0]) / run_sum[0]
''',
    "attention_v2_fused_rows_kernel": '''\
@cuda.jit
def attention_v2_fused_rows_kernel(q, k, v, o, scale, causal):
    """One thread per query row; the causal bound leaves out the diagonal key."""
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
    n_keys = k.shape[2]
    if causal:
        n_keys = min(i, n_keys)
    m = float32(-math.inf)
    l = float32(0.0)
    for j in range(n_keys):
        score = float32(0.0)
        for c in range(head_dim):
            score += q_row[c] * k[b, h, j, c]
        m_new = max(m, score)
        rescale = math.exp(m - m_new)
        p = math.exp(score - m_new)
        l = l * rescale + p
        for c in range(head_dim):
            acc[c] = acc[c] * rescale + p * v[b, h, j, c]
        m = m_new
    for c in range(head_dim):
        o[b, h, i, c] = acc[c] / l if l > 0 else 0.0
''',
}
