"""Our solution pasted: the kernels of kernels/attention.py and kernels/softmax.py. A graded submission may
not use the course's own kernels: 0/10, course_kernel."""

from grader.sample_cases import kernel_cell
from kernels.attention import pv_kernel, scores_kernel
from kernels.softmax import softmax_rows_kernel


EXPECT = {
    "status": "course_kernel",
    "points": {
        "scores_matches_reference": 0,
        "scores_reads_and_writes": 0,
        "softmax_rows_matches_reference": 0,
        "softmax_rows_large_logits": 0,
        "softmax_rows_reads_and_writes": 0,
        "pv_matches_reference": 0,
        "pv_reads_and_writes": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "scores_kernel": kernel_cell(scores_kernel),
    "softmax_rows_kernel": kernel_cell(softmax_rows_kernel),
    "pv_kernel": kernel_cell(pv_kernel),
}
