"""Cheating: the GEMV cell leaves its kernel empty and replaces the course's launcher with host NumPy (the
dequantized W times x, from kernels.reference), so the notebook's own test cell and Validate see right values.
When graded only kernels run from an answer cell: the lines that rebind the launcher are skipped, the hidden
tests launch the empty kernel, and y stays the poison. The quantizer and the GEMM are the written-differently
ones. 6/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "quantize_rounds_like_the_reference": 1,
        "quantize_edge_blocks": 1,
        "quantize_scales_per_block": 1,
        "gemv_matches_reference": 0,
        "gemv_position_coded": 0,
        "gemv_traffic": 0,
        "w8a8_exact_sums": 1,
        "w8a8_scaled_epilogue": 1,
        "w8a8_edges": 1,
    },
}

BASE = "correct_alternative"

CELLS = {
    "gemv_kernel": '''\
def _numpy_gemv(w, x, *, out=None, kernel=None):
    y = (reference.dequantize_q4_1(w.reshape(w.shape[0], -1)) @ x.astype(np.float64)).astype(np.float32)
    if out is None:
        return y
    out[:] = y
    return out


kernels.quantized_gemv.q4_1_gemv_warp_per_row = _numpy_gemv


@cuda.jit
def q4_1_gemv_warp_per_row_kernel(w, x, y):
    """Nothing: the launcher above does the work on the host."""
    pass
''',
}
