"""The written-differently kernels, but the quantize kernel multiplies each value by 1 / scale, computed once,
instead of dividing by the scale. 1 / scale is rounded to float32, so where x / scale is a tie between two
e4m3 codes, x * (1 / scale) lands beside it and rounds the other way: the codes are wrong for scales such as
61 (the hidden test's ties), though right for powers of two and for values away from a tie. Its scales are
right: 8/10."""

import pathlib
import runpy

from grader.sample_cases import edit_cell

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 2,
        "prefill_long_rows": 1,
        "prefill_large_logits": 1,
        "decode_matches_reference": 1,
        "decode_long_context": 1,
        "decode_traffic": 1,
        "quantize_rounds_to_nearest_even": 0,
        "quantize_computes_scales": 1,
    },
}

_ALTERNATIVE = runpy.run_path(str(pathlib.Path(__file__).with_name("correct_alternative.py")))["CELLS"]
CELLS = {**_ALTERNATIVE, "quantize_kernel": edit_cell(_ALTERNATIVE["quantize_kernel"], [(
    """
    for i in range(t, x.shape[1], FP8_THREADS):
        codes[g, i] = _e4m3_code(x[g, i] / s)
    """, """
    inverse = float32(1.0) / s
    for i in range(t, x.shape[1], FP8_THREADS):
        codes[g, i] = _e4m3_code(x[g, i] * inverse)
    """)], where="wrong_reciprocal_scale.py, cell quantize_kernel")}
