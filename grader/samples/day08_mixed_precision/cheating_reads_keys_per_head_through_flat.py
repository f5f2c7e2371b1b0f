"""The decode kernel widens each token's fp16 K row to float32 once per warp, as the budget wants, but scores
every head of the group from the cache itself: per head it takes the token's row as a view and reads it
through its flat iterator, row.flat[c]. numba-cuda compiles that for a GPU, and the traffic counter once
missed reads through .flat, so a kernel that reads K once per query head met the budget of once per block.
The counter counts every element read through .flat now: k_cache is loaded (1 + heads of the block) times
the budget. The values are right. 2/10 (the other exercises left unanswered): the decode kernel loses its
traffic cell only."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_long_rows": 0,
        "prefill_large_logits": 0,
        "decode_matches_reference": 1,
        "decode_long_context": 1,
        "decode_traffic": 0,
        "quantize_rounds_to_nearest_even": 0,
        "quantize_computes_scales": 0,
    },
}

BASE = "correct_alternative"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

EDITS = {
    "decode_kernel": [("""
        for j in range(CHANNELS):
            x += qv[i, j] * kr[j]
        """, """
        row = k_cache[blk, kv, t % bs]          # the token's fp16 key row, read again for this head
        for j in range(CHANNELS):
            if j * WARP + lane < d:
                x += qv[i, j] * float32(row.flat[j * WARP + lane])
        """)],
}
