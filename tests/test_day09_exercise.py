"""Day 9 exercise: every grade cell's hidden tests fail a wrong kernel, and the visible checks name the day's
mistakes.

As for day 8 (``test_day08_exercise.py``): the answer cells of the solution notebook run with one mistake of the
day's table written in, then only the hidden tests of one grade cell, which must fail (every such mistake, several
for a cell where the table has several: C's roundf as (int)(v + 0.5), two blocks a lane, float32 sums among them).
Then the feedback a student gets for each classic mistake (the table's ``feedback``): Q8_0 codes rounded to even,
truncated or divided by d, a block of zeros without its guard, a scale per row, from the signed maximum or over 128;
a Q4_1 block's nibbles swapped or taken as neighbours, d and m swapped, the minimum forgotten or added once a block
or once a weight, the scale of the row's first block, Q4_0's offset, a byte read per nibble, x read twice, the warps
past the last row or block; a W8A8 GEMM's sums in int16 or int8, its scales swapped, left out or applied per dp4a,
its last step of K missing, channels past N written, the number of tokens taken from the words of a row. The visible
checks draw their inputs at random; here from a fixed seed. Then the diagnoses' models against the reference, and
the case that makes scales applied inside the sum measurably wrong (sums whose products cancel).
"""

from __future__ import annotations

import numpy as np
import pytest

from mistakes import of_day
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day09_quantized_gemv", (
    "setup_device", "quantize_constants", "quantize_kernel", "quantize_launcher", "gemv_constants", "gemv_kernel",
    "gemv_launcher", "gemm_constants", "gemm_setup", "gemm_kernel", "gemm_launcher"))

TABLE = of_day("day09_quantized_gemv")      # the day's mistakes: tests/mistakes/day09.py
# the table's mistakes whose hidden_fails names a grade cell, several per grade cell where the table has
# several: (grade cell, answer cell, edits, whether the visible check misses it), labelled
HIDDEN = [pytest.param(m.hidden_fails, m.cell, list(m.edits), m.visible_misses, id=m.label)
          for m in TABLE if m.hidden_fails]


def test_every_grade_cell_has_a_wrong_kernel():
    assert {param.values[0] for param in HIDDEN} == NOTEBOOK.graded


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("grade_id, cell, edits, visible_misses_it", HIDDEN)
def test_hidden_tests_fail_a_wrong_kernel(grade_id, cell, edits, visible_misses_it):
    NOTEBOOK.hidden_tests_fail(grade_id, cell, edits, visible_misses_it)


KERNEL_OF = {"quantize_kernel": "q8_0_quantize_kernel", "gemv_kernel": "q4_1_gemv_warp_per_row_kernel",
             "gemm_kernel": "w8a8_gemm_v1_dp4a_kernel"}

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


# ----------------------------------------------------------------------------- the W8A8 GEMM's models

def _w8a8_args(kind, M, N, K, seed=9):
    from course.exercise_checks import w8a8_gemm_case

    case = w8a8_gemm_case(np.random.default_rng(seed), M, N, K, kind=kind)
    return case["a_q"], case["sa"], case["w_q"], case["sw"]


def _scaled_per_product(a_q, sa, w_q, sw):
    """y as a kernel that scales every product and sums in float32, k in order, computes it."""
    products = a_q.astype(np.int64)[:, None, :] * w_q.astype(np.int64)[None, :, :]
    terms = products.astype(np.float32) * sa[:, None, None] * sw[None, :, None]
    total = np.zeros(terms.shape[:2], np.float32)
    for k in range(terms.shape[2]):
        total = (total + terms[:, :, k]).astype(np.float32)
    return total


def test_the_w8a8_model_is_the_reference_and_a_right_y_is_named_nothing():
    from course.diagnoses.quantized import w8a8_findings, w8a8_model
    from kernels import reference

    for kind, shape in (("extreme", (5, 7, 96)), ("small", (20, 3, 32)), ("scaled", (6, 6, 64)),
                        ("cancelling", (5, 7, 128))):
        args = _w8a8_args(kind, *shape)
        want = reference.w8a8_matmul(*args)
        assert np.array_equal(w8a8_model(*args), want), kind
        ours = (np.float32(args[0].astype(np.int64) @ args[2].astype(np.int64).T) * args[1][:, None]
                * args[3][None, :]).astype(np.float32)          # float32(sum) * sa * sw, as the course's kernel
        assert w8a8_findings(ours, *args) == [], kind


@pytest.mark.parametrize("kind, options, key", [
    ("extreme", dict(accumulator="int16"), "w8a8_accumulator_int16"),
    ("extreme", dict(accumulator="int8"), "w8a8_accumulator_int8"),
    ("scaled", dict(scales="swapped"), "w8a8_scales_swapped"),
    ("scaled", dict(scales="token"), "w8a8_scale_missing"),
    ("scaled", dict(scales="none"), "w8a8_scale_missing"),
    ("extreme", dict(words=np.arange(24) < 16), "w8a8_k_words"),
    ("extreme", dict(words=np.arange(24) % 8 < 7), "w8a8_k_words"),
])
def test_the_w8a8_findings_name_the_rule_an_output_follows(kind, options, key):
    from course.diagnoses.quantized import w8a8_findings, w8a8_model

    args = _w8a8_args(kind, 6, 6, 96 if kind == "extreme" else 64)
    got = w8a8_model(*args, **options).astype(np.float32)
    assert [k for k, _ in w8a8_findings(got, *args)] == [key]


def test_scales_inside_the_sum_differ_measurably_where_products_cancel():
    """The scale applied per product is a mistake a test can see: with every scale 1 its float32 sums of integers
    are exact (the exact-sums and edge cells cannot tell), but on sums whose products cancel its rounding is many
    times a right y's, and the finding names it."""
    from course.diagnoses.quantized import W8A8_RTOL, w8a8_findings
    from kernels import reference

    exact = _w8a8_args("extreme", 5, 7, 256)
    assert np.array_equal(_scaled_per_product(*exact), reference.w8a8_matmul(*exact))
    args = _w8a8_args("cancelling", 5, 7, 64)
    want = reference.w8a8_matmul(*args)
    got = _scaled_per_product(*args)
    assert (np.abs(got - want) / np.abs(want)).max() > 10 * W8A8_RTOL
    assert [k for k, _ in w8a8_findings(got, *args)] == ["w8a8_scale_inside_sum"]


def test_w8a8_unwritten_outputs_are_read_by_where_they_lie():
    from course.diagnoses.quantized import w8a8_findings
    from kernels import reference

    args = _w8a8_args("small", 70, 20, 64)
    want = reference.w8a8_matmul(*args).astype(np.float32)
    past_words = np.zeros(want.shape, bool)
    past_words[16:] = True                                  # tokens from K / 4 = 16 on
    m, n = np.meshgrid(np.arange(70), np.arange(20), indexing="ij")
    outer = (m % 64 >= 16) | (n % 64 >= 16)                 # one output per thread of a 16 x 16 block
    for unwritten, words in ((past_words, "a_q.shape[0]"), (outer, "first 16 rows and 16 columns")):
        [(key, message)] = w8a8_findings(np.where(unwritten, np.nan, want), *args, unwritten=unwritten)
        assert key == "w8a8_unwritten" and words in message


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("label", ["w8a8_int16_accumulator", "w8a8_scales_swapped", "w8a8_scale_per_dp4a",
                                   "w8a8_last_k_step_missing", "w8a8_channels_past_the_end_written",
                                   "w8a8_tokens_from_words"])
def test_a_w8a8_mistake_gets_its_likely_cause_in_the_feedback(label, monkeypatch):
    """What a graded cell's feedback shows is picked from the message by a fixed phrase: each GEMM mistake's
    visible message picks its own cause."""
    from nbformat.v4 import new_output

    from course import checking, exercise_checks
    from course.exercise_checks import day09
    from grader.feedback import likely_cause
    from mistakes import BY_LABEL

    mistake = BY_LABEL[label]
    check, _ = mistake.feedback[0]
    namespace = NOTEBOOK.with_edits(mistake.cell, list(mistake.edits))
    monkeypatch.setattr(day09, "random_inputs", lambda: checking.random_inputs(9))
    with pytest.raises(AssertionError) as failure:
        getattr(exercise_checks, check)(namespace[KERNEL_OF[mistake.cell]])
    cause = likely_cause(new_output("error", ename=type(failure.value).__name__, evalue=str(failure.value),
                                    traceback=[]))
    expected = {"w8a8_int16_accumulator": "w8a8_accumulator_int16", "w8a8_scales_swapped": "w8a8_scales_swapped",
                "w8a8_scale_per_dp4a": "w8a8_scale_inside_sum", "w8a8_last_k_step_missing": "w8a8_k_words",
                "w8a8_channels_past_the_end_written": "w8a8_store_guard", "w8a8_tokens_from_words": "w8a8_unwritten"}
    assert cause is not None and cause.key == expected[label]
