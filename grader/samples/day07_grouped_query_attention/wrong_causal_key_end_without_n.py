"""Right values, too many keys: under the causal mask the prefill's key end is min(kv_lens[b],
tile_start + positions), without N. In the last, partial tile of positions that loads keys past the
last query (no query sees them, so every value is right) whenever M > N. Only the prefill's traffic cell is
lost: 8/10. (Only a case with a partial last tile of positions and more keys than queries tells it
apart; the hidden traffic cell and the visible traffic check each have one.)"""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 2,
        "prefill_every_group": 1,
        "prefill_traffic": 0,
        "decode_matches_reference": 2,
        "decode_every_group": 1,
        "decode_traffic": 2,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "prefill_kernel": [("kv_end = min(kv_end, tile_start + positions, n_queries)",
                        "kv_end = min(kv_end, tile_start + positions)")],
}
