"""Without the causal mask the kernel takes the number of keys to be the number of queries (it was
written for self-attention, N = M) and reads keys past M when M < N: an IndexError in the first
exercise's visible check. The causal cases, and the unmasked ones with N = M and every key present, are
right and keep their points: that cell's failure must not cost the exercises after it (the hidden
harness is loaded by each cell itself). 5/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "flash_matches_reference_full": 0,
        "flash_matches_reference_causal": 2,
        "flash_handles_kv_lens": 0,
        "flash_is_numerically_stable": 1,
        "flash_traffic_fits_tiling": 2,
        "flash_skips_masked_tiles": 0,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "flash_kernel": [("""
        if causal:
            kv_end = min(kv_end, tile_start + TILE_Q, n_queries)
        """, """
        if causal:
            kv_end = min(kv_end, tile_start + TILE_Q, n_queries)
        else:
            kv_end = n_queries
        """)],
}
