"""Cheating: a decode kernel whose single thread hands the whole step to the NumPy reference. Right answers
on the simulator, but the kernel does not compile for a GPU, so it never runs when graded: 6/10, the decode
kernel's four cells lost, the other exercises answered correctly."""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 2,
        "cache_write_traffic": 1,
        "paged_v1_matches_reference": 0,
        "paged_v1_mixed_lengths": 0,
        "paged_v1_large_logits": 0,
        "paged_v1_traffic": 0,
        "merge_matches_reference": 1,
        "merge_handles_empty_partitions": 1,
        "merge_traffic": 1,
    },
}

BASE = "correct_alternative"

CELLS = {
    "paged_v1_kernel": '''\
@cuda.jit
def paged_attention_v1_block_per_head_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, out):
    """One thread hands the whole decode step to the NumPy reference (runs only on the simulator)."""
    if cuda.threadIdx.x == 0 and cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0:
        from kernels import reference
        out[:, :, :] = reference.paged_attention(np.asarray(q[:, :, :]), np.asarray(k_cache[:, :, :, :]),
                                                 np.asarray(v_cache[:, :, :, :]), np.asarray(block_tables[:, :]),
                                                 np.asarray(context_lens[:]), scale=float(scale))
''',
}
