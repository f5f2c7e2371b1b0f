"""The quantizer's kernel is the student's own (the written-differently one), but the encoder it calls,
``_e4m3_code``, and its rounding, ``_round_half_even``, are the course's, pasted verbatim under other
names: 147 and 67 nodes, each under the 150 a whole kernel needs to be called a copy, together the
substance of the exercise (the rounding rule and the code layout). Both are left out, the kernel cannot
compile, and the row says what was the course's: the two quantizer cells are lost, course_kernel; the other
exercises are left unanswered (they score 0 at once, keeping the case cheap to grade): 0/10."""

from grader.sample_cases import SAMPLES_DIR, kernel_cell, load_case
from kernels.low_precision_attention.fp8 import _e4m3_code, _round_half_even

EXPECT = {
    "status": "course_kernel",
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
    "details": ["kernels/low_precision_attention/fp8.py: _e4m3_code",
                "kernels/low_precision_attention/fp8.py: _round_half_even"],
}

BASE = "correct_alternative"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once
EDITS = {}
_OWN = load_case(SAMPLES_DIR / "day08_mixed_precision" / f"{BASE}.py").cells["quantize_kernel"]
_KERNEL = _OWN[_OWN.index("@cuda.jit\ndef fp8_quantize_kernel"):]
_PASTED = "\n\n".join(kernel_cell(f).replace("_round_half_even(", "nearest_even(").replace("def _e4m3_code(", "def encode(")
                      for f in (_round_half_even, _e4m3_code))
CELLS = {"quantize_kernel": _PASTED + "\n\n" + _KERNEL.replace("_e4m3_code(", "encode(")}
