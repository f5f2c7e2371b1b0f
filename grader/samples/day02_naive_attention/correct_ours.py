"""Our own solution, the kernels of kernels/attention.py and kernels/softmax.py, deserves 10/10."""

from grader.sample_cases import kernel_cell
from kernels.attention import pv_kernel, scores_kernel
from kernels.softmax import softmax_rows_kernel


EXPECT = {
    "status": "graded",
    "points": {
        "scores_matches_reference": 2,
        "scores_reads_and_writes": 1,
        "softmax_rows_matches_reference": 2,
        "softmax_rows_large_logits": 1,
        "softmax_rows_reads_and_writes": 1,
        "pv_matches_reference": 2,
        "pv_reads_and_writes": 1,
    },
}

CELLS = {
    "scores_kernel": kernel_cell(scores_kernel),
    "softmax_rows_kernel": kernel_cell(softmax_rows_kernel),
    "pv_kernel": kernel_cell(pv_kernel),
}
