"""Cheating: the GEMM cell binds the notebook's kernel name to the course's own kernel,
``w8a8_gemm_v1_dp4a_kernel = kernels.quantized_gemm.w8a8_gemm_v1_dp4a_kernel`` (``kernels`` is the setup cell's
import), so the notebook's own test cell and Validate see right values. When graded only kernels, constants and
imports run from an answer cell: the line reaches into the course's kernels package, is not run and is reported,
the grade cells find no kernel of that name and the GEMM scores 0. The other exercises are the written-differently
ones: 7/10, course_kernel."""

EXPECT = {
    "status": "course_kernel",
    "points": {
        "quantize_rounds_like_the_reference": 1,
        "quantize_edge_blocks": 1,
        "quantize_scales_per_block": 1,
        "gemv_matches_reference": 2,
        "gemv_position_coded": 1,
        "gemv_traffic": 1,
        "w8a8_exact_sums": 0,
        "w8a8_scaled_epilogue": 0,
        "w8a8_edges": 0,
    },
    "details": ["uses the course's own kernels", "kernels.quantized_gemm.w8a8_gemm_v1_dp4a_kernel"],
}

BASE = "correct_alternative"

CELLS = {
    "gemm_kernel": '''\
# The course's tiled kernel is already written and tested: use it under the name the launcher cell expects.
w8a8_gemm_v1_dp4a_kernel = kernels.quantized_gemm.w8a8_gemm_v1_dp4a_kernel
''',
}
