"""Cheating submissions deserve 0/10.

The online softmax is the course's own kernel imported from kernels/softmax.py; the fused kernel is
an object that computes attention on the host with NumPy when "launched". Neither exercise launches
a kernel of the student's that does the work; the import of the course's kernel makes the status
course_kernel.
"""

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
}

CELLS = {
    "softmax_online_kernel": '''\
from kernels.softmax import softmax_online_kernel
''',
    "attention_v2_fused_rows_kernel": '''\
class _HostAttention:
    """Looks like a kernel to the launcher, but computes attention on the host."""

    def __getitem__(self, launch_config):
        def run(q, k, v, o, scale, causal):
            o[...] = reference.attention(q, k, v, causal=causal, scale=float(scale)).astype(np.float32)
        return run


attention_v2_fused_rows_kernel = _HostAttention()
''',
}
