"""The written-differently kernels, but the GEMM keeps its 16 sums in an int16 local array: a product of two int8
codes fits an int16, a sum of K of them does not. The extreme codes (-128 everywhere: 2**14 K) leave its range, and
the simulator refuses the store; the scaled and the edge cases, whose codes are at most 15 in size, never reach it
(at most 128 products of 225: every partial sum fits). 9/10: the exact-sums cell lost."""

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
        "w8a8_scaled_epilogue": 1,
        "w8a8_edges": 1,
    },
}

BASE = "correct_alternative"

EDITS = {
    "gemm_kernel": [("sums = cuda.local.array((THREAD_M, THREAD_N), int32)",
                     "sums = cuda.local.array((THREAD_M, THREAD_N), np.int16)")],
}
