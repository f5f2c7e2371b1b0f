"""Bugs at the tile edges deserve 0/10.

In exercise 1 threads outside C return before loading their tile slots, in exercise 2 the number of
steps along K rounds down and the partial last step is lost. Both give wrong values where a tile
hangs over the edge and load less than the budget: 0/10.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "shared_tiles_matches_reference": 0,
        "shared_tiles_edge_shapes": 0,
        "shared_tiles_reads_fall_by_tile": 0,
        "register_blocked_matches_reference": 0,
        "register_blocked_edge_shapes": 0,
        "register_blocked_reads_fall_by_block_tile": 0,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "gemm_v3_shared_tiles_kernel": [
        ("acc = float32(0.0)", """
        acc = float32(0.0)
        if row >= m or col >= n:
            return  # threads outside C leave early: their tile slots are never filled
        """),
        ("if row < m and k0 + tx < k:", "if k0 + tx < k:"),
        ("if k0 + ty < k and col < n:", "if k0 + ty < k:"),
        ("""
        if row < m and col < n:
            c[row, col] = acc
        """, "c[row, col] = acc"),
    ],
    "gemm_v4_register_blocked_kernel": [
        ("for k0 in range(0, k, BLOCK_K):", """
        for step in range(k // BLOCK_K):  # rounds down: the last, partial step along K is lost
            k0 = step * BLOCK_K
        """),
        ("if row0 + r < m and k0 + kk < k:", "if row0 + r < m:"),
        ("if k0 + kk < k and col0 + cc < n:", "if col0 + cc < n:"),
    ],
}
