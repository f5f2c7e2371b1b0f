"""Day 8 exercise: every grade cell's hidden tests fail a wrong kernel, and the visible checks name the
day's mistakes.

As for day 7 (``test_day07_exercise.py``): the answer cells of the solution notebook run with one mistake
written in, then only the hidden tests of one grade cell, which must fail. Then the feedback a student
gets for each classic mistake of mixed precision: a sum kept in fp16, q·k rounded to fp16 before the
scale, and fp8 codes that truncate, round ties away from zero, turn 448 and beyond into NaN, or come
from the largest x instead of the largest |x|. The visible checks draw their inputs at random; here they
draw them from a fixed seed, so that a mistake whose size varies with the inputs is named every time.
"""

from __future__ import annotations

import numpy as np
import pytest

from days import BY_NAME
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day08_mixed_precision", (
    "setup_device", "prefill_constants", "prefill_kernel", "prefill_launcher", "decode_constants", "decode_kernel",
    "decode_launcher", "quantize_constants", "quantize_kernel", "quantize_launcher"))

FLOAT16 = ("@cuda.jit\ndef gqa_", "from numba.types import float16\n\n\n@cuda.jit\ndef gqa_")
PREFILL_ACC_FP16 = [FLOAT16, ("acc = cuda.local.array(HEAD_DIM_MAX, float32)",
                              "acc = cuda.local.array(HEAD_DIM_MAX, float16)")]
PREFILL_SUM_FP16 = [FLOAT16, ("row_sum = float32(0.0)", "row_sum = float16(0.0)"),
                    ("row_sum *= correction", "row_sum = float16(row_sum * correction)"),
                    ("row_sum += p", "row_sum = float16(row_sum + p)")]
# The wrong answer of tests/days.py: q·k kept in fp16 shared memory and scaled when read (prefill), the
# token's K and V loaded again for every head (decode), truncated codes (quantize).
_WRONG = BY_NAME["day08_mixed_precision"].wrong
SCALE_AFTER = [(m.old, m.new) for m in _WRONG if m.cell == "prefill_kernel"]
KV_PER_HEAD = [(m.old, m.new) for m in _WRONG if m.cell == "decode_kernel"]
TRUNCATED = [(m.old, m.new) for m in _WRONG if m.cell == "quantize_kernel"]
DECODE_ACC_FP16 = [FLOAT16, ("acc = cuda.local.array((GROUP_MAX, CHANNELS), float32)",
                             "acc = cuda.local.array((GROUP_MAX, CHANNELS), float16)")]
DECODE_SUM_FP16 = [FLOAT16, ("running_sum = cuda.local.array(GROUP_MAX, float32)",
                             "running_sum = cuda.local.array(GROUP_MAX, float16)")]
TIES_AWAY = [("if rest > 0.5 or (rest == 0.5 and q & 1):", "if rest >= 0.5:")]
NAN_PAST_448 = [("        code = int32(0x7E)\n", "        code = int32(0x7F)\n")]
SIGNED_MAX = [("amax = max(amax, abs(x[g, i]))", "amax = max(amax, x[g, i])")]

# grade cell -> (answer cell, edits, the mistake)
WRONG = {
    "prefill_matches_reference": ("prefill_kernel", PREFILL_ACC_FP16, "the accumulator kept in fp16"),
    "prefill_long_rows": ("prefill_kernel", PREFILL_SUM_FP16, "the running sum kept in fp16"),
    "prefill_large_logits": ("prefill_kernel", SCALE_AFTER, "q·k rounded to fp16, scaled afterwards"),
    "decode_matches_reference": ("decode_kernel", DECODE_ACC_FP16, "the accumulators kept in fp16"),
    "decode_long_context": ("decode_kernel", DECODE_SUM_FP16, "the running sums kept in fp16"),
    "decode_traffic": ("decode_kernel", KV_PER_HEAD, "K and V loaded again for every head"),
    "quantize_rounds_to_nearest_even": ("quantize_kernel", TIES_AWAY, "ties rounded away from zero"),
    "quantize_computes_scales": ("quantize_kernel", SIGNED_MAX, "the scale from the largest x, not |x|"),
}


def test_every_grade_cell_has_a_wrong_kernel():
    assert set(WRONG) == NOTEBOOK.graded


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("grade_id", list(WRONG))
def test_hidden_tests_fail_a_wrong_kernel(grade_id):
    cell, edits, _ = WRONG[grade_id]
    NOTEBOOK.hidden_tests_fail(grade_id, cell, edits, visible_misses_it=False)


KERNEL_OF = {"prefill_kernel": "gqa_prefill_mixed_tiles_kernel", "decode_kernel": "gqa_decode_mixed_group_kernel",
             "quantize_kernel": "fp8_quantize_kernel"}

# check name, answer cell, edits, words the feedback must contain
FEEDBACK = [
    pytest.param("mixed_prefill_long_rows", "prefill_kernel", PREFILL_ACC_FP16,
                 ["the error grows with the number of keys a row sums", "Keep the accumulator"], id="prefill-acc-fp16"),
    pytest.param("mixed_prefill_large_logits", "prefill_kernel", SCALE_AFTER,
                 ["q·k before the scale is large", "scaled afterwards"], id="prefill-scale-after-product"),
    pytest.param("mixed_prefill_matches_reference", "prefill_kernel", SCALE_AFTER,
                 ["a value between the loads and the store is rounded to fp16"], id="prefill-fp16-scores"),
    pytest.param("mixed_decode_long_context", "decode_kernel", DECODE_ACC_FP16,
                 ["a value between the loads and the store is rounded to fp16", "An accumulator"],
                 id="decode-acc-fp16"),
    pytest.param("fp8_quantize_matches_reference", "quantize_kernel", TRUNCATED,
                 ["your codes round toward zero"], id="fp8-truncated"),
    pytest.param("fp8_quantize_matches_reference", "quantize_kernel", TIES_AWAY,
                 ["ties go to the even code"], id="fp8-ties-away"),
    pytest.param("fp8_quantize_matches_reference", "quantize_kernel", NAN_PAST_448,
                 ["became NaN (0x7f)", "saturates"], id="fp8-nan-past-448"),
    pytest.param("fp8_quantize_computes_scales", "quantize_kernel", SIGNED_MAX,
                 ["the largest x, not the largest |x|"], id="fp8-signed-max"),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("check, cell, edits, words", FEEDBACK)
def test_visible_checks_name_the_mistake(check, cell, edits, words, monkeypatch):
    from course import checking, exercise_checks

    namespace = NOTEBOOK.with_edits(cell, edits)
    monkeypatch.setattr(exercise_checks, "random_inputs", lambda: checking.random_inputs(8))
    with pytest.raises(AssertionError) as failure:
        getattr(exercise_checks, check)(namespace[KERNEL_OF[cell]])
    message = str(failure.value)
    assert all(word in message for word in words), message


def test_fp8_models_encode_as_the_reference_does():
    """The diagnoses' e4m3 encoder rounds like ``reference.quantize_fp8`` at every corner value."""
    from course.diagnoses.precision import e4m3_encode
    from course.exercise_checks import fp8_corner_values
    from kernels import reference

    y = fp8_corner_values().reshape(1, -1)
    codes, _ = reference.quantize_fp8(y, np.ones(1, np.float32), group_ndim=1)
    assert np.array_equal(e4m3_encode(y), codes)


@pytest.mark.parametrize("options, key", [
    (dict(rounding="truncate"), "fp8_truncated"), (dict(rounding="away"), "fp8_ties_away"),
    (dict(saturate=False), "fp8_nan_not_saturated"), (dict(subnormals=False), "fp8_subnormals_flushed"),
])
def test_fp8_findings_name_the_encoding_a_kernel_followed(options, key):
    from course.diagnoses.precision import e4m3_encode, fp8_findings
    from course.exercise_checks import fp8_corner_values

    y = fp8_corner_values().reshape(1, -1)
    scales = np.ones(1)
    assert fp8_findings(e4m3_encode(y), y, y, scales) == []
    assert [found for found, _ in fp8_findings(e4m3_encode(y, **options), y, y, scales)] == [key]


def test_fp8_findings_name_a_multiplication_by_the_reciprocal_of_the_scale():
    """With the scales of FP8_RECIPROCAL_SCALES, x * (1 / scale) rounds about half of e4m3's ties the other
    way; the codes it gives are named, and those of the division are not."""
    from course.diagnoses.precision import e4m3_encode, fp8_findings
    from course.exercise_checks import FP8_RECIPROCAL_SCALES, fp8_corner_values

    ties = fp8_corner_values()
    ties = ties[np.isfinite(ties) & (np.abs(ties) <= 448)]
    for scale in FP8_RECIPROCAL_SCALES:
        scales = np.array([scale], np.float32)
        x = (ties * scales[0]).astype(np.float32).reshape(1, -1)
        y = (x / scales[0]).astype(np.float32)
        assert np.array_equal(y, ties.reshape(1, -1))                  # the division gives each value back
        reciprocal = e4m3_encode((x * (np.float32(1.0) / scales[0])).astype(np.float32))
        assert (reciprocal != e4m3_encode(y)).sum() >= 20, scale       # many ties come out the other way
        assert fp8_findings(e4m3_encode(y), y, x, scales) == []
        assert [key for key, _ in fp8_findings(reciprocal, y, x, scales)] == ["fp8_scale_reciprocal"]


def test_fp8_scale_findings_name_one_scale_for_all_and_a_wrong_divisor():
    from course.diagnoses.precision import fp8_scale_findings

    x = (np.random.default_rng(0).standard_normal((4, 32)) * [[1], [10], [100], [1000]]).astype(np.float32)
    amax = np.abs(x).max(axis=1)
    assert fp8_scale_findings((amax / np.float32(448)).astype(np.float32), x) == []
    whole = np.full(4, np.abs(x).max() / np.float32(448), np.float32)
    assert fp8_scale_findings(whole, x)[0][0] == "fp8_scale_global"
    assert fp8_scale_findings((amax / np.float32(240)).astype(np.float32), x)[0][0] == "fp8_scale_other"
