"""Right answers, but causal blocks load every key tile up to kv_lens and mask the ones above the
diagonal instead of skipping them: twice the K and V traffic of a long causal sequence. 9/10, only
the tile-skipping check fails."""

EXPECT = {
    "status": "graded",
    "points": {
        "flash_matches_reference_full": 2,
        "flash_matches_reference_causal": 2,
        "flash_handles_kv_lens": 2,
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
        """, "")],
}
