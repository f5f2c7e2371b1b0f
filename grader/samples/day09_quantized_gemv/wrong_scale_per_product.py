"""The written-differently kernels, but the GEMM multiplies every product by sa[m] sw[n] and sums the scaled
products in float32, instead of an exact int32 sum scaled once. With every scale 1 the terms are integers and the
float32 sums exact while they stay below 2**24 (the edge cell passes), but not the exact-sums cell's sum of 2,304
odd-sized products past it; with a scale per token and per channel each partial sum is rounded, and where the
products cancel (the second half of a row undoing the first) y is off by far more than one scaling's rounding. 8/10:
the exact-sums and the epilogue cells lost."""

EXPECT = {
    "status": "graded",
    "points": {
        "quantize_rounds_like_the_reference": 1,
        "quantize_edge_blocks": 1,
        "quantize_scales_per_block": 1,
        "gemv_matches_reference": 2,
        "gemv_position_coded": 1,
        "gemv_traffic": 1,
        "w8a8_exact_sums": 0,
        "w8a8_scaled_epilogue": 0,
        "w8a8_edges": 1,
    },
}

BASE = "correct_alternative"

EDITS = {
    "gemm_kernel": [("sums = cuda.local.array((THREAD_M, THREAD_N), int32)",
                     "sums = cuda.local.array((THREAD_M, THREAD_N), float32)"),
                    ("sums[i, j] += code_a * code_w",
                     "sums[i, j] += float32(code_a * code_w) * sa[first_m + i] * sw[first_n + j]"),
                    ("y[first_m + i, first_n + j] = float32(sums[i, j]) * (sa[first_m + i] * sw[first_n + j])",
                     "y[first_m + i, first_n + j] = sums[i, j]")],
}
