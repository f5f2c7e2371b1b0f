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

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "softmax_online_kernel": [("""
        if row_sum > 0:
            out[row, j] = math.exp(x[row, j] - row_max) / row_sum
        else:
            out[row, j] = 0.0
        """, "out[row, j] = math.exp(x[row, j] - row_max) / row_sum")],
    "attention_v2_fused_rows_kernel": [("n_keys = min(i + 1, n_keys)", "n_keys = min(i, n_keys)")],
}
