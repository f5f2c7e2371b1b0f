"""Correct kernels written differently deserve 10/10.

The online softmax merges the lanes' (max, sum) states with warp shuffles instead of a tree in
shared memory. The fused kernel reads the query from global memory at every key instead of caching
it, applies the scale after the dot product, rescales the accumulator only when the maximum grows,
and stops at the diagonal with a break.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "online_softmax_matches_two_pass": 2,
        "online_softmax_masked_rows": 1,
        "online_softmax_large_logits": 1,
        "online_softmax_two_reads_per_element": 1,
        "fused_rows_matches_reference": 2,
        "fused_rows_causal": 1,
        "fused_rows_edge_cases": 1,
        "fused_rows_no_nxn_traffic": 1,
    },
}

CELLS = {
    "softmax_online_kernel": '''\
@cuda.jit
def softmax_online_kernel(x, out):
    """One warp per row; the lanes' running states are merged with a shuffle butterfly."""
    row = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    m = float32(-math.inf)
    l = float32(0.0)
    for j in range(lane, x.shape[1], SOFTMAX_THREADS):
        value = x[row, j]
        if value > m:
            l = l * math.exp(m - value) + float32(1.0)
            m = value
        elif value != -math.inf:
            l += math.exp(value - m)
    offset = SOFTMAX_THREADS // 2
    while offset > 0:
        m_other = cuda.shfl_xor_sync(0xFFFFFFFF, m, offset)
        l_other = cuda.shfl_xor_sync(0xFFFFFFFF, l, offset)
        m_both = max(m, m_other)
        if m_both == -math.inf:
            l = float32(0.0)
        else:
            l = l * math.exp(m - m_both) + l_other * math.exp(m_other - m_both)
        m = m_both
        offset //= 2
    for j in range(lane, x.shape[1], SOFTMAX_THREADS):
        out[row, j] = math.exp(x[row, j] - m) * (float32(1.0) / l) if l > 0 else float32(0.0)
''',
    "attention_v2_fused_rows_kernel": '''\
@cuda.jit
def attention_v2_fused_rows_kernel(q, k, v, o, scale, causal):
    """One thread per query row; rescales the accumulator only when the running max grows."""
    i = cuda.grid(1)
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    if i < q.shape[2]:
        d = q.shape[3]
        acc = cuda.local.array(HEAD_DIM_MAX, float32)
        for c in range(d):
            acc[c] = float32(0.0)
        m = float32(-math.inf)
        l = float32(0.0)
        for j in range(k.shape[2]):
            if causal and j > i:
                break
            dot = float32(0.0)
            for c in range(d):
                dot += q[b, h, i, c] * k[b, h, j, c]
            score = dot * scale
            if score > m:
                shrink = math.exp(m - score)
                for c in range(d):
                    acc[c] *= shrink
                l = l * shrink
                m = score
            weight = math.exp(score - m)
            l += weight
            for c in range(d):
                acc[c] += weight * v[b, h, j, c]
        for c in range(d):
            o[b, h, i, c] = acc[c] / l if l > 0 else float32(0.0)
''',
}
