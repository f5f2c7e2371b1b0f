"""The written-differently kernels and step, but the step turns q and k to position 0 at every call: at a first token
every angle is 0 anyway, so the first-token cell passes; from the second position on the keys and queries carry no
position, and the logits part from the model's: 7/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "norm_matches_reference": 1,
        "norm_edge_rows": 1,
        "norm_scales_and_sums": 1,
        "rope_matches_reference": 1,
        "rope_pairs_and_positions": 1,
        "swiglu_matches_reference": 1,
        "decode_step_first_token": 1,
        "decode_step_sequence": 0,
        "decode_step_groups": 0,
        "decode_step_long": 0,
    },
}

BASE = "correct_alternative"

EDITS = {
    "decode_step": [("k = ops.rope(x=ops.gemv(matrix=w.attn_k, x=h), position=position)",
                     "k = ops.rope(x=ops.gemv(matrix=w.attn_k, x=h), position=0)"),
                    ("q = ops.rope(x=ops.gemv(matrix=w.attn_q, x=h), position=position)",
                     "q = ops.rope(x=ops.gemv(matrix=w.attn_q, x=h), position=0)")],
}
