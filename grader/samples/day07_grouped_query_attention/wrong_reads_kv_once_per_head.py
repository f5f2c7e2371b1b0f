"""Right values, the traffic of one block per query head: the decode warp loads a token's K and V rows
again for every head of the group, and each prefill row reads its keys and values from global memory
instead of the block's shared tile. 6/10: both traffic cells lost."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 2,
        "prefill_every_group": 1,
        "prefill_traffic": 0,
        "decode_matches_reference": 2,
        "decode_every_group": 1,
        "decode_traffic": 0,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"

EDITS = {
    "prefill_kernel": [("score += q_row[c] * k_tile[j, c]", "score += q_row[c] * k[b, kv_head, kv_start + j, c]"),
                       ("acc[c] += p * v_tile[j, c]", "acc[c] += p * v[b, kv_head, kv_start + j, c]")],
    "decode_kernel": [("""
        for ch in range(CHANNELS):
            c = lane + ch * WARP
            if c < d:
                k_row[ch] = k_cache[page, kv_head, slot, c]
                v_row[ch] = v_cache[page, kv_head, slot, c]
        # The token's K and V, loaded once, serve every head of the block.
        for i in range(GROUP_MAX):
            if i < n_heads:
        """, """
        for i in range(GROUP_MAX):
            if i < n_heads:
                for ch in range(CHANNELS):
                    c = lane + ch * WARP
                    if c < d:
                        k_row[ch] = k_cache[page, kv_head, slot, c]
                        v_row[ch] = v_cache[page, kv_head, slot, c]
        """)],
}
