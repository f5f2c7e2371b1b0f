"""Our own solution, the kernels of kernels/softmax.py and kernels/attention.py, deserves 10/10."""

from grader.sample_cases import kernel_cell
from kernels.attention import attention_v2_fused_rows_kernel
from kernels.softmax import softmax_online_kernel


EXPECT = {
    "status": "graded",
    "points": {
        "online_softmax_matches_two_pass": 2,
        "online_softmax_masked_rows": 1,
        "online_softmax_large_logits": 1,
        "online_softmax_two_reads_per_element": 1,
        "fused_rows_matches_reference": 2,
        "fused_rows_causal": 1,
        "fused_rows_edge_cases": 1,
        "fused_rows_no_nxn_traffic": 1,
    },
}

CELLS = {
    "softmax_online_kernel": kernel_cell(softmax_online_kernel),
    "attention_v2_fused_rows_kernel": kernel_cell(attention_v2_fused_rows_kernel),
}
