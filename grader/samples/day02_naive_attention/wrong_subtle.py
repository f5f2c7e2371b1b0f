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

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "scores_kernel": [("s[b, h, i, j] = acc * scale", "s[b, h, i, j] = acc")],
    "softmax_rows_kernel": [("thread_sum += math.exp(x[row, j] - row_max)", "thread_sum += math.exp(x[row, j])"),
                            ("out[row, j] = math.exp(x[row, j] - row_max) / row_sum",
                             "out[row, j] = math.exp(x[row, j]) / row_sum")],
    "pv_kernel": [("for j in range(v.shape[2]):", "for j in range(p.shape[2]):")],
}
