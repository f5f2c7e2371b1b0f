"""Our solution pasted: the kernels of kernels/softmax.py and kernels/attention.py. A graded submission may
not use the course's own kernels: 0/10, course_kernel."""

from grader.sample_cases import kernel_cell
from kernels.attention import attention_v2_fused_rows_kernel
from kernels.softmax import softmax_online_kernel


EXPECT = {
    "status": "course_kernel",
    "points": {
        "online_softmax_matches_two_pass": 0,
        "online_softmax_masked_rows": 0,
        "online_softmax_large_logits": 0,
        "online_softmax_two_reads_per_element": 0,
        "fused_rows_matches_reference": 0,
        "fused_rows_causal": 0,
        "fused_rows_edge_cases": 0,
        "fused_rows_no_nxn_traffic": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "softmax_online_kernel": kernel_cell(softmax_online_kernel),
    "attention_v2_fused_rows_kernel": kernel_cell(attention_v2_fused_rows_kernel),
}
