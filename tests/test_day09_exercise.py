"""Day 9 exercise: every grade cell's hidden tests fail a wrong kernel, and the visible checks name the day's
mistakes.

As for day 8 (``test_day08_exercise.py``): the answer cells of the solution notebook run with one mistake of the
day's table written in, then only the hidden tests of one grade cell, which must fail. Then the feedback a student
gets for each classic mistake (the table's ``feedback``): Q8_0 codes rounded to even, truncated or divided by d, a
block of zeros without its guard, a scale per row, from the signed maximum or over 128; a Q4_1 block's nibbles
swapped or taken as neighbours, d and m swapped, the minimum forgotten or added once a block or once a weight, the
scale of the row's first block, Q4_0's offset, a byte read per nibble, x read twice, the warps past the last row or
block. The visible checks draw their inputs at random; here from a fixed seed. Then the diagnoses' models
against the reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from mistakes import of_day
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day09_quantized_gemv", (
    "setup_device", "quantize_constants", "quantize_kernel", "quantize_launcher", "gemv_constants", "gemv_kernel",
    "gemv_launcher"))

TABLE = of_day("day09_quantized_gemv")      # the day's mistakes: tests/mistakes/day09.py
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


KERNEL_OF = {"quantize_kernel": "q8_0_quantize_kernel", "gemv_kernel": "q4_1_gemv_warp_per_row_kernel"}

# check name, answer cell, edits, words the feedback must contain: the table's mistakes with feedback
FEEDBACK = [pytest.param(check, m.cell, list(m.edits), list(words), id=f"{m.label}-{check}")
            for m in TABLE for check, words in m.feedback]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("check, cell, edits, words", FEEDBACK)
def test_visible_checks_name_the_mistake(check, cell, edits, words, monkeypatch):
    from course import checking, exercise_checks
    from course.exercise_checks import day09

    namespace = NOTEBOOK.with_edits(cell, edits)
    monkeypatch.setattr(day09, "random_inputs", lambda: checking.random_inputs(9))
    with pytest.raises(AssertionError) as failure:
        getattr(exercise_checks, check)(namespace[KERNEL_OF[cell]])
    message = str(failure.value)
    assert all(word in message for word in words), message


# ----------------------------------------------------------------------------- the diagnoses' models

def test_the_q8_0_model_quantizes_as_the_reference_does():
    """``q8_0_model``'s default rule is the reference's, codes and float32 scales, on every kind of case."""
    from course.diagnoses.quantized import q8_0_model
    from course.exercise_checks import q8_0_quantize_case
    from kernels import reference

    rng = np.random.default_rng(9)
    for kind in ("normal", "ties", "edges"):
        x = q8_0_quantize_case(rng, 3, 6, kind=kind)
        codes, d = q8_0_model(x)
        want_codes, want_d, _ = reference.quantize_q8_1(x)
        assert np.array_equal(codes, want_codes) and np.array_equal(d, want_d), kind


def test_the_ties_part_the_rounding_rules_and_the_division():
    """In a ties case every block's codes differ between halves away from zero and halves to even, and x / d gives
    other codes than x * (1 / d) in the blocks whose d has an inexact inverse: so the visible check sees each."""
    from course.diagnoses.quantized import q8_0_code_findings, q8_0_model
    from course.exercise_checks import Q8_0_TIE_AMAXES, q8_0_quantize_case

    x = q8_0_quantize_case(np.random.default_rng(9), 1, len(Q8_0_TIE_AMAXES), kind="ties")
    want, _ = q8_0_model(x)
    blocks = lambda codes: (codes != want).reshape(-1, 32).any(axis=1)  # noqa: E731
    assert blocks(q8_0_model(x, rounding="even")[0]).all()
    assert blocks(q8_0_model(x, divide=True)[0])[1:].sum() >= 4        # amax 127 gives d = 1: no difference there
    assert q8_0_code_findings(want, x) == []
    for options, key in ((dict(rounding="even"), "q8_0_ties_to_even"), (dict(rounding="truncate"), "q8_0_truncated"),
                         (dict(divide=True), "q8_0_divided")):
        assert [k for k, _ in q8_0_code_findings(q8_0_model(x, **options)[0], x)] == [key]


@pytest.mark.parametrize("options, key", [
    (dict(nibbles="swapped"), "q4_1_nibbles_swapped"), (dict(nibbles="interleaved"), "q4_1_nibbles_interleaved"),
    (dict(swap_dm=True), "q4_1_d_m_swapped"), (dict(minimum="none"), "q4_1_minimum_forgotten"),
    (dict(minimum="once"), "q4_1_minimum_once"), (dict(minimum="weight"), "q4_1_minimum_without_x"),
    (dict(per_row=True), "q4_1_scale_per_row"),
    (dict(offset=8), "q4_1_offset_8"),
])
def test_the_q4_1_findings_name_the_reading_an_output_follows(options, key):
    """On position-coded weights each misreading's model is named, and the right y (the reference's) is not."""
    from course.diagnoses.quantized import q4_1_findings, q4_1_model
    from course.exercise_checks import q4_1_gemv_case
    from kernels import reference

    case = q4_1_gemv_case(np.random.default_rng(9), 6, 96, kind="position")
    w, x = case["w"], case["x"]
    want = reference.dequantize_q4_1(w.reshape(6, -1)) @ x.astype(np.float64)
    assert np.allclose(q4_1_model(w, x), want, rtol=1e-6, atol=1e-6)
    assert q4_1_findings(want, w, x) == []
    assert [k for k, _ in q4_1_findings(q4_1_model(w, x, **options), w, x)] == [key]
