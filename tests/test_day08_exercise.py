"""Day 8 exercise: every grade cell's hidden tests fail a wrong kernel, and the visible checks name the
day's mistakes.

As for day 7 (``test_day07_exercise.py``): the answer cells of the solution notebook run with one mistake of
the day's table written in, then only the hidden tests of one grade cell, which must fail. Then the feedback
a student gets for each classic mistake of mixed precision (the table's ``feedback``): a sum kept in fp16,
q·k rounded to fp16 before the scale, and fp8 codes that truncate, round ties away from zero, turn 448 and
beyond into NaN, or come from the largest x instead of the largest |x|. The visible checks draw their
inputs at random; here they draw them from a fixed seed, so that a mistake whose size varies with the
inputs is named every time.
"""

from __future__ import annotations

import numpy as np
import pytest

from mistakes import of_day
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day08_mixed_precision", (
    "setup_device", "prefill_constants", "prefill_kernel", "prefill_launcher", "decode_constants", "decode_kernel",
    "decode_launcher", "quantize_constants", "quantize_kernel", "quantize_launcher"))

TABLE = of_day("day08_mixed_precision")      # the day's mistakes: tests/mistakes/day08.py
# grade cell -> (answer cell, edits, the mistake, whether the visible check misses it): the table's mistakes
# whose hidden_fails names a grade cell
WRONG = {m.hidden_fails: (m.cell, list(m.edits), m.why, m.visible_misses) for m in TABLE if m.hidden_fails}


def test_every_grade_cell_has_a_wrong_kernel():
    assert set(WRONG) == NOTEBOOK.graded


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("grade_id", list(WRONG))
def test_hidden_tests_fail_a_wrong_kernel(grade_id):
    cell, edits, _, visible_misses_it = WRONG[grade_id]
    NOTEBOOK.hidden_tests_fail(grade_id, cell, edits, visible_misses_it)


KERNEL_OF = {"prefill_kernel": "gqa_prefill_mixed_tiles_kernel", "decode_kernel": "gqa_decode_mixed_group_kernel",
             "quantize_kernel": "fp8_quantize_kernel"}

# check name, answer cell, edits, words the feedback must contain: the table's mistakes with feedback
FEEDBACK = [pytest.param(check, m.cell, list(m.edits), list(words), id=f"{m.label}-{check}")
            for m in TABLE for check, words in m.feedback]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("check, cell, edits, words", FEEDBACK)
def test_visible_checks_name_the_mistake(check, cell, edits, words, monkeypatch):
    from course import checking, exercise_checks
    from course.exercise_checks import day08

    namespace = NOTEBOOK.with_edits(cell, edits)
    monkeypatch.setattr(day08, "random_inputs", lambda: checking.random_inputs(8))
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
