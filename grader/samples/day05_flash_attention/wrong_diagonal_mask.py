"""Off by one on the diagonal: a causal row sees keys j < i instead of j <= i (row 0 sees nothing and
gives 0). Full attention and the traffic are right: 6/10, losing the causal cell and the kv_lens
cell, whose second case is causal."""

EXPECT = {
    "status": "graded",
    "points": {
        "flash_matches_reference_full": 2,
        "flash_matches_reference_causal": 0,
        "flash_handles_kv_lens": 0,
        "flash_is_numerically_stable": 1,
        "flash_traffic_fits_tiling": 2,
        "flash_skips_masked_tiles": 1,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "flash_kernel": [("n_valid = min(n_tile, row - kv_start + 1)", "n_valid = min(n_tile, row - kv_start)")],
}
