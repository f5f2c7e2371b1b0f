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

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "softmax_online_kernel": [("""
        m_new = max(m, x_j)
        if m_new != -math.inf:
            l = l * math.exp(m - m_new) + math.exp(x_j - m_new)
        m = m_new
        """, """
        m = max(m, x_j)
        if m != -math.inf:
            l += math.exp(x_j - m)
        """)],
    # the online loop split in two: the maximum first, then the sum and the output; K is read twice
    "attention_v2_fused_rows_kernel": [("""
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
        """, """
        for j in range(n_keys):
            score = float32(0.0)
            for c in range(head_dim):
                score += q_row[c] * k[b, h, j, c]
            m = max(m, score)
        for j in range(n_keys):
            score = float32(0.0)
            for c in range(head_dim):
                score += q_row[c] * k[b, h, j, c]
            p = math.exp(score - m)
            l += p
            for c in range(head_dim):
                acc[c] += p * v[b, h, j, c]
        """)],
}
