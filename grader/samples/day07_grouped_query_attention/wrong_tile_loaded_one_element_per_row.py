"""The prefill block loads its key tile with one element per row, as if the rows always covered the
TILE_KV * head_dim elements of a tile. They do for the large blocks of a group of 2 to 4 at a small
head_dim; with a group of 1 (64 rows) and head_dim 8, or head_dim 40, part of the tile is never
loaded. The decode exercise is left unanswered: 2/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_every_group": 0,
        "prefill_traffic": 2,
        "decode_matches_reference": 0,
        "decode_every_group": 0,
        "decode_traffic": 0,
    },
}

BASE = "correct_ours"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

EDITS = {
    "prefill_kernel": [("""
        for idx in range(t, n_tile * d, rows):
            j = idx // d
            c = idx - j * d
            k_tile[j, c] = k[b, kv_head, kv_start + j, c]
            v_tile[j, c] = v[b, kv_head, kv_start + j, c]
        """, """
        if t < n_tile * d:          # one element per row: the rows cover the tile
            j = t // d
            c = t - j * d
            k_tile[j, c] = k[b, kv_head, kv_start + j, c]
            v_tile[j, c] = v[b, kv_head, kv_start + j, c]
        """)],
}
