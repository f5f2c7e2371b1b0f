"""The written-differently kernels, but the GEMV loops over a block's 32 weights and loads the byte of codes
again for each of its two nibbles: the values are right, W's codes are read twice (36 loads a block of 20
bytes). 9/10: the traffic cell lost."""

EXPECT = {
    "status": "graded",
    "points": {
        "quantize_rounds_like_the_reference": 1,
        "quantize_edge_blocks": 1,
        "quantize_scales_per_block": 1,
        "gemv_matches_reference": 2,
        "gemv_position_coded": 1,
        "gemv_traffic": 0,
        "w8a8_exact_sums": 1,
        "w8a8_scaled_epilogue": 1,
        "w8a8_edges": 1,
    },
}

BASE = "correct_alternative"

EDITS = {
    "gemv_kernel": [("""
        for i in range(16):
            packed = int32(w[warp, blk, 4 + i])
            total += (scale * float32(packed % 16) + low) * x[base + i]
            total += (scale * float32(packed // 16) + low) * x[base + 16 + i]
        """, """
        for i in range(32):
            packed = int32(w[warp, blk, 4 + i % 16])
            nibble = packed % 16 if i < 16 else packed // 16
            total += (scale * float32(nibble) + low) * x[base + i]
        """)],
}
