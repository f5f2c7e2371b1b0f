"""The written-differently kernels, but SwiGLU multiplies up by sigmoid(gate) instead of silu(gate) =
gate * sigmoid(gate): 5/6, the SwiGLU cell lost."""

EXPECT = {
    "status": "graded",
    "points": {
        "norm_matches_reference": 1,
        "norm_edge_rows": 1,
        "norm_scales_and_sums": 1,
        "rope_matches_reference": 1,
        "rope_pairs_and_positions": 1,
        "swiglu_matches_reference": 0,
        "decode_step_first_token": 1,
        "decode_step_sequence": 1,
        "decode_step_groups": 1,
        "decode_step_long": 1,
    },
}

BASE = "correct_alternative"

EDITS = {
    "swiglu_kernel": [("out[r, c] = g * sigmoid * up[r, c]", "out[r, c] = sigmoid * up[r, c]")],
}
