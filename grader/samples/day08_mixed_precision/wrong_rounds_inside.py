"""Each kernel rounds where it should not, one classic mistake an exercise. The prefill keeps its scores
in fp16 shared memory, unscaled, and scales them when it reads them: q·k is rounded to fp16 before the
scale shrinks it, which costs little on small logits (its long rows pass), a weight's worth on sharp
ones (near 16 after the scale) and everything past 65504. The decode keeps its accumulators in fp16:
every token's p * v is rounded to 11 bits as it is added, several times storage's error over 64 tokens;
its traffic is right. The quantize kernel truncates the e4m3 mantissa instead of rounding it to nearest
even; its scales are right. 3/10."""

import pathlib
import runpy

from grader.sample_cases import edit_cell

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_long_rows": 1,
        "prefill_large_logits": 0,
        "decode_matches_reference": 0,
        "decode_long_context": 0,
        "decode_traffic": 1,
        "quantize_rounds_to_nearest_even": 0,
        "quantize_computes_scales": 1,
    },
}

BASE = "correct_ours"

EDITS = {
    "prefill_kernel": [("@cuda.jit", "from numba.types import float16\n\n\n@cuda.jit"),
                       ("scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)",
                        "scores = cuda.shared.array((TILE_KV, ROWS_MAX), float16)"),
                       ("q_row[c] = float32(q[b, h, position, c]) * scale if active else float32(0.0)",
                        "q_row[c] = float32(q[b, h, position, c]) if active else float32(0.0)"),
                       ("tile_max = max(tile_max, score)", "tile_max = max(tile_max, score * scale)"),
                       ("p = math.exp(scores[j, t] - new_max)", "p = math.exp(scores[j, t] * scale - new_max)")],
    "decode_kernel": [("@cuda.jit", "from numba.types import float16\n\n\n@cuda.jit"),
                      ("acc = cuda.local.array((GROUP_MAX, CHANNELS), float32)",
                       "acc = cuda.local.array((GROUP_MAX, CHANNELS), float16)")],
}

# The quantize kernel is the written-differently one (the course's, pasted, would score 0 whatever its
# rounding), its rounding cut to the integer below.
_ALTERNATIVE = runpy.run_path(str(pathlib.Path(__file__).with_name("correct_alternative.py")))["CELLS"]
CELLS = {
    "quantize_kernel": edit_cell(_ALTERNATIVE["quantize_kernel"], [("""
        n = int32(math.floor(r + float32(0.5)))
        if float32(n) - r == float32(0.5) and n % 2 == 1:
            n -= 1
        """, "n = int32(math.floor(r))")], where="wrong_rounds_inside.py, cell quantize_kernel"),
}
