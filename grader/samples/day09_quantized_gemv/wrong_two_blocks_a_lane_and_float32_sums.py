"""The written-differently GEMV and GEMM, each with a mistake only long rows show, the quantizer left unanswered.
The GEMV's lanes take at most two blocks of a row each: right up to 64 blocks (K = 2048), and every case of the
visible check has 33 or fewer; past that the row's last blocks are never added. The GEMM keeps its sums in float32:
exact while they stay below 2**24, which the visible check's K = 96 never leaves; a sum of 2,304 odd-sized
products (127 x 127 and 127 x 125) does. 4/10: the GEMV's and the exact-sums cells lost, the quantizer's never
answered."""

EXPECT = {
    "status": "graded",
    "points": {
        "quantize_rounds_like_the_reference": 0,
        "quantize_edge_blocks": 0,
        "quantize_scales_per_block": 0,
        "gemv_matches_reference": 0,
        "gemv_position_coded": 1,
        "gemv_traffic": 1,
        "w8a8_exact_sums": 0,
        "w8a8_scaled_epilogue": 1,
        "w8a8_edges": 1,
    },
}

BASE = "correct_alternative"
OTHERS = "blank"

EDITS = {
    "gemv_kernel": [("for blk in range(lane, w.shape[1], 32):", "for blk in range(lane, min(w.shape[1], lane + 64), 32):")],
    "gemm_kernel": [("sums = cuda.local.array((THREAD_M, THREAD_N), int32)",
                     "sums = cuda.local.array((THREAD_M, THREAD_N), float32)"),
                    ("sums[i, j] += code_a * code_w", "sums[i, j] += float32(code_a * code_w)")],
}
