"""The written-differently kernels with one classic mistake each. The quantizer rounds with Python's round(),
which sends halves to the even integer (2.5 to 2) where C's roundf, the reference's, sends them away from zero:
its codes at ties are wrong, its edge blocks (no tie among them) and its scales right. The GEMV takes the high
nibble of byte j as weight j and the low one as weight j + 16: every y is wrong, its traffic is right. The GEMM
is the written-differently one. 6/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "quantize_rounds_like_the_reference": 0,
        "quantize_edge_blocks": 1,
        "quantize_scales_per_block": 1,
        "gemv_matches_reference": 0,
        "gemv_position_coded": 0,
        "gemv_traffic": 1,
        "w8a8_exact_sums": 1,
        "w8a8_scaled_epilogue": 1,
        "w8a8_edges": 1,
    },
}

BASE = "correct_alternative"

EDITS = {
    "quantize_kernel": [("codes[r, c] = roundf(value * inv)", "codes[r, c] = round(value * inv)")],
    "gemv_kernel": [("total += (scale * float32(packed % 16) + low) * x[base + i]",
                     "total += (scale * float32(packed // 16) + low) * x[base + i]"),
                    ("total += (scale * float32(packed // 16) + low) * x[base + 16 + i]",
                     "total += (scale * float32(packed % 16) + low) * x[base + 16 + i]")],
}
