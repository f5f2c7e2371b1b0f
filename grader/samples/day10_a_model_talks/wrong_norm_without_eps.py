"""The written-differently kernels, but the norm leaves eps out of the root: a row of zeros divides 0 by 0, and a
row whose mean square is near eps gets another scale. The edge rows show it; so do the random rows at scale 0.1 and
the rows of spread-out blocks, whose mean squares are small enough for eps to move a scale by more than 1e-5:
3/6, every norm cell lost."""

EXPECT = {
    "status": "graded",
    "points": {
        "norm_matches_reference": 0,
        "norm_edge_rows": 0,
        "norm_scales_and_sums": 0,
        "rope_matches_reference": 1,
        "rope_pairs_and_positions": 1,
        "swiglu_matches_reference": 1,
        "decode_step_first_token": 1,
        "decode_step_sequence": 1,
        "decode_step_groups": 1,
        "decode_step_long": 1,
    },
}

BASE = "correct_alternative"

EDITS = {
    "norm_kernel": [("rms = math.sqrt(squares[0] / float32(k) + eps)", "rms = math.sqrt(squares[0] / float32(k))")],
}
