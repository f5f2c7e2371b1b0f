"""Cheating twice. The prefill cell replaces the precision check with one that passes everything, then
defines a kernel that keeps its accumulator in fp16; the quantize kernel hands each group to NumPy and
ml_dtypes from one thread, which round exactly as the reference does. When graded only a kernel runs from
an answer cell: the patch never runs and the hidden tests load the checks afresh, so the fp16 accumulator
fails the precision rule; and every launch first compiles for a GPU, which the quantize kernel does not
(no imports, no NumPy in a kernel). The decode exercise is left unanswered: 0/10, with the patch reported
as not run."""

EXPECT = {
    "status": "graded",
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
    "details": ["not run when graded"],
}

BASE = "correct_alternative"
OTHERS = "blank"

EDITS = {
    "prefill_kernel": [("@cuda.jit", """
        from numba.types import float16

        exercise_checks.check_mixed_prefill = lambda *args, **kwargs: None


        @cuda.jit"""),
                       ("out = cuda.local.array(HEAD_DIM_MAX, float32)",
                        "out = cuda.local.array(HEAD_DIM_MAX, float16)")],
}

CELLS = {
    "quantize_kernel": '''\
@cuda.jit
def fp8_quantize_kernel(x, scales, codes, compute_scales):
    """Thread 0 of each block rounds its group with ml_dtypes."""
    g = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        import ml_dtypes
        values = np.array([x[g, i] for i in range(x.shape[1])], np.float32)
        if compute_scales:
            amax = np.abs(values).max()
            scales[g] = amax / np.float32(448.0) if amax > 0 else np.float32(1.0)
        y = np.clip(values / scales[g], -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        for i in range(x.shape[1]):
            codes[g, i] = y[i]
''',
}
