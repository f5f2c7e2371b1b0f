"""Our solution pasted: exactly the kernels of kernels/low_precision_attention/ that the exercise asks for
(gqa_prefill_mixed_tiles_kernel, gqa_decode_mixed_group_kernel, and fp8_quantize_kernel with its device
functions). A graded submission may not use the course's own code: 0/10, course_kernel."""

from grader.sample_cases import kernel_cell
from kernels.low_precision_attention import (fp8_quantize_kernel, gqa_decode_mixed_group_kernel,
                                             gqa_prefill_mixed_tiles_kernel)
from kernels.low_precision_attention.fp8 import _e4m3_code, _round_half_even

EXPECT = {
    "status": "course_kernel",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_long_rows": 0,
        "prefill_large_logits": 0,
        "decode_matches_reference": 0,
        "decode_long_context": 0,
        "decode_traffic": 0,
        "quantize_rounds_to_nearest_even": 0,
        "quantize_computes_scales": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "prefill_kernel": kernel_cell(gqa_prefill_mixed_tiles_kernel),
    "decode_kernel": kernel_cell(gqa_decode_mixed_group_kernel),
    "quantize_kernel": "\n\n".join(kernel_cell(f) for f in (_round_half_even, _e4m3_code, fp8_quantize_kernel)),
}
