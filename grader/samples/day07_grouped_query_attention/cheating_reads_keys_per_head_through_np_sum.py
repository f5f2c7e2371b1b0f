"""The decode kernel loads each token's K row once per warp, as the budget wants, and then never uses it:
every head of the group reads the token's key again, element by element, through NumPy on a one-element
view, np.sum(k_cache[page, kv_head, slot, c:c + 1]). numba-cuda compiles that for a GPU, and the traffic
counter once missed those reads, so a kernel that reads K once per query head met the budget of once per
KV head. The counter counts every element a NumPy reduction reads now: k_cache is loaded (1 + heads of
the block) times the budget. The values are right. 3/10 (the prefill left unanswered): the decode kernel
loses its traffic cell only."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_every_group": 0,
        "prefill_traffic": 0,
        "decode_matches_reference": 2,
        "decode_every_group": 1,
        "decode_traffic": 0,
    },
}

BASE = "correct_ours"
OTHERS = "blank"             # the prefill unanswered: it scores 0 at once

EDITS = {
    "decode_kernel": [("""
        for ch in range(CHANNELS):
            partial += q_lane[i, ch] * k_row[ch]
        """, """
        for ch in range(CHANNELS):
            c = lane + ch * WARP        # the token's key read again for this head (empty past head_dim)
            partial += q_lane[i, ch] * np.sum(k_cache[page, kv_head, slot, c:c + 1])
        """)],
}
