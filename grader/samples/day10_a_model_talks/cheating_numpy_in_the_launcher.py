"""Cheating: the norm cell leaves its kernel empty and replaces the course's launcher with host NumPy (the norm and
q8_1 blocks of kernels.reference), so the notebook's own test cell and Validate see right values. When graded only
kernels run from an answer cell: the lines that rebind the launcher are skipped, the hidden tests launch the empty
kernel, and the outputs stay the poison. RoPE and SwiGLU are the written-differently ones: 3/6."""

EXPECT = {
    "status": "graded",
    "points": {
        "norm_matches_reference": 0,
        "norm_edge_rows": 0,
        "norm_scales_and_sums": 0,
        "rope_matches_reference": 1,
        "rope_pairs_and_positions": 1,
        "swiglu_matches_reference": 1,
        "decode_step_first_token": 1,
        "decode_step_sequence": 1,
        "decode_step_groups": 1,
        "decode_step_long": 1,
    },
}

BASE = "correct_alternative"

CELLS = {
    "norm_kernel": '''\
def _numpy_norm(x, weight, *, eps, out=None, out_scales=None, out_sums=None, kernel=None):
    q, d, s = reference.quantize_q8_1(reference.rmsnorm(x, weight, eps).astype(np.float32))
    for target, value in ((out, q), (out_scales, d), (out_sums, s.astype(np.float32))):
        if target is not None:
            target[:] = value
    return q, d, s.astype(np.float32)


kernels.llama_layers.rmsnorm_q8_1_block_per_row = _numpy_norm


@cuda.jit
def rmsnorm_q8_1_block_per_row_kernel(x, weight, eps, x_q, x_scale, x_sum):
    """Nothing: the launcher above does the work on the host."""
    pass
''',
}
