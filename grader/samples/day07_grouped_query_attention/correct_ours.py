"""Our solution pasted: exactly the kernels of kernels/gqa_attention/ that the exercise asks for
(gqa_prefill_tiles_kernel and gqa_decode_group_kernel). A graded submission may not use the course's
own code: 0/10, course_kernel."""

from grader.sample_cases import kernel_cell
from kernels.gqa_attention import gqa_decode_group_kernel, gqa_prefill_tiles_kernel

EXPECT = {
    "status": "course_kernel",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_every_group": 0,
        "prefill_traffic": 0,
        "decode_matches_reference": 0,
        "decode_every_group": 0,
        "decode_traffic": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "prefill_kernel": kernel_cell(gqa_prefill_tiles_kernel),
    "decode_kernel": kernel_cell(gqa_decode_group_kernel),
}
