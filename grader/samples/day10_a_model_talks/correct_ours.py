"""Our solution pasted: exactly the kernels of kernels/llama_layers.py that the exercise asks for
(rmsnorm_q8_1_block_per_row_kernel with day 9's warp_sum, warp_max and round_half_away from
kernels/quantized_gemv.py, rope_pairs_from_table_kernel, swiglu_elementwise_kernel). A graded submission may not
use the course's own code: the norm and RoPE score 0, course_kernel; the SwiGLU kernel is too short to be told apart
from an honest answer (a grid-stride loop and one line of arithmetic) and keeps its point, and so does the decode
step (kernels/decode_step.py: a dozen calls in the one order a llama block has, which an honest answer repeats):
5/10."""

import inspect

from grader.sample_cases import kernel_cell
from kernels.decode_step import decode_step
from kernels.llama_layers import (rmsnorm_q8_1_block_per_row_kernel, rope_pairs_from_table_kernel,
                                  swiglu_elementwise_kernel)
from kernels.quantized_gemv import round_half_away, warp_max, warp_sum

EXPECT = {
    "status": "course_kernel",
    "points": {
        "norm_matches_reference": 0,
        "norm_edge_rows": 0,
        "norm_scales_and_sums": 0,
        "rope_matches_reference": 0,
        "rope_pairs_and_positions": 0,
        "swiglu_matches_reference": 1,
        "decode_step_first_token": 1,
        "decode_step_sequence": 1,
        "decode_step_groups": 1,
        "decode_step_long": 1,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "norm_kernel": "\n\n".join(kernel_cell(f) for f in (warp_sum, warp_max, round_half_away,
                                                        rmsnorm_q8_1_block_per_row_kernel)),
    "rope_kernel": kernel_cell(rope_pairs_from_table_kernel),
    "swiglu_kernel": kernel_cell(swiglu_elementwise_kernel),
    "decode_step": inspect.getsource(decode_step),
}
