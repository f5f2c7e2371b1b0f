"""Our solution pasted: exactly the kernels of kernels/quantized_gemv.py that the exercise asks for
(q8_0_quantize_kernel with warp_max and round_half_away, q4_1_gemv_warp_per_row_kernel with half_from_bytes and
warp_sum) and of kernels/quantized_gemm.py (w8a8_gemm_v1_dp4a_kernel with _load_step; its dp4a is the notebook's
given device function). A graded submission may not use the course's own code: 0/10, course_kernel."""

from grader.sample_cases import kernel_cell
from kernels.quantized_gemm import _load_step, w8a8_gemm_v1_dp4a_kernel
from kernels.quantized_gemv import (half_from_bytes, q4_1_gemv_warp_per_row_kernel, q8_0_quantize_kernel,
                                    round_half_away, warp_max, warp_sum)

EXPECT = {
    "status": "course_kernel",
    "points": {
        "quantize_rounds_like_the_reference": 0,
        "quantize_edge_blocks": 0,
        "quantize_scales_per_block": 0,
        "gemv_matches_reference": 0,
        "gemv_position_coded": 0,
        "gemv_traffic": 0,
        "w8a8_exact_sums": 0,
        "w8a8_scaled_epilogue": 0,
        "w8a8_edges": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "quantize_kernel": "\n\n".join(kernel_cell(f) for f in (warp_max, round_half_away, q8_0_quantize_kernel)),
    "gemv_kernel": "\n\n".join(kernel_cell(f) for f in (half_from_bytes, warp_sum, q4_1_gemv_warp_per_row_kernel)),
    "gemm_kernel": "\n\n".join(kernel_cell(f) for f in (_load_step, w8a8_gemm_v1_dp4a_kernel)),
}
