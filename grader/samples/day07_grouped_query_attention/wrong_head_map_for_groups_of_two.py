"""Both kernels map a block's rows to query heads as if every group held 2 heads: the query head of a
prefill row is kv_head * 2 + its head in the group, and the decode block's first head kv_head * 2 + ....
Right whenever the group is 2, and for a single KV head; with groups of 1 or 3 some heads are written
twice and others never. The loads and stores keep their counts: 4/10, the traffic cells only."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_every_group": 0,
        "prefill_traffic": 2,
        "decode_matches_reference": 0,
        "decode_every_group": 0,
        "decode_traffic": 2,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"

EDITS = {
    "prefill_kernel": [("h = kv_head * group + head_in_group", "h = kv_head * 2 + head_in_group")],
    "decode_kernel": [("first = kv_head * group + (cuda.blockIdx.x - kv_head * subgroups) * heads_per_block",
                       "first = kv_head * 2 + (cuda.blockIdx.x - kv_head * subgroups) * heads_per_block")],
}
