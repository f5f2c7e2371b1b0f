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

import pathlib
import re

import numpy as np
import pytest

from mistakes import of_day
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day08_mixed_precision", (
    "setup_device", "prefill_constants", "prefill_kernel", "prefill_launcher", "decode_constants", "decode_kernel",
    "decode_launcher", "quantize_constants", "quantize_kernel", "quantize_launcher"))

TABLE = of_day("day08_mixed_precision")      # the day's mistakes: tests/mistakes/day08.py
# the table's mistakes whose hidden_fails names a grade cell, several per grade cell where the table has
# several
HIDDEN = [pytest.param(m.hidden_fails, m.cell, list(m.edits), m.visible_misses, id=m.label)
          for m in TABLE if m.hidden_fails]


def test_every_grade_cell_has_a_wrong_kernel():
    assert {param.values[0] for param in HIDDEN} == NOTEBOOK.graded


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("grade_id, cell, edits, visible_misses_it", HIDDEN)
def test_hidden_tests_fail_a_wrong_kernel(grade_id, cell, edits, visible_misses_it):
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


# ----------------------------------------------------------------------------- what the notebook tells the student

EXERCISE = pathlib.Path(__file__).resolve().parents[1] / "exercises" / "day08_mixed_precision" / \
    "day08_mixed_precision.ipynb"


def _exercise_text() -> str:
    import nbformat

    cells = nbformat.read(EXERCISE, as_version=4).cells
    return "\n".join(cell.source for cell in cells if cell.cell_type == "markdown")


def test_the_names_and_imports_the_exercise_gives_work():
    """Every import in the exercise's text runs and every name it gives exists (``advice_problems``); the hint on
    fp16 arrays says how to import numba's fp16 type, with an import that gives it (``from numba import float16``
    does not: numba's top level has no float16)."""
    import numba

    from test_day08_lesson import advice_problems

    text = _exercise_text()
    assert not advice_problems(text)
    hint = next(p for p in re.split(r"\n\s*\n|\n- ", text) if "float16" in p and "array" in p)
    imports = re.findall(r"`((?:from|import) [^`]*float16[^`]*)`", hint)
    assert imports, f"the hint speaks of numba's float16 without saying how to import it:\n{hint}"
    for line in imports:
        names = {}
        exec(line, names)
        assert names["float16"] is numba.types.float16, line


def test_the_round_trip_error_says_what_it_is_measured_by():
    """``fp8_round_trip_error``: the largest error with its page's scale (amax / 448) and the gap of e4m3's numbers
    there, scaled, and the error as a share of that gap; then the largest share over the cache, at most 0.5 for the
    reference's codes and over it for a code one step off."""
    from course.exercise_checks.day08 import fp8_round_trip_error
    from kernels import reference

    rng = np.random.default_rng(8)
    x = (rng.standard_normal((2, 2, 4, 8)) * np.array([0.01, 1.0, 30.0, 500.0]).reshape(2, 2, 1, 1)).astype(np.float32)
    codes, scales = reference.quantize_fp8(x)
    first, own = fp8_round_trip_error(x, codes, scales).splitlines()
    found = re.fullmatch(r"largest error of value\(code\) \* scale: (\S+), at block (\d), kv_head (\d), slot \d, "
                         r"channel \d \(x = \S+\), on a page whose scale is (\S+) \(its largest \|x\|, (\S+), "
                         r"over 448\): there e4m3's numbers are (\S+) apart, (\S+) once scaled, and the error is (\S+) "
                         r"of that gap", first)
    assert found, first
    error, block, head, scale, amax, gap, scaled, share = found.groups()
    err = np.abs(reference.dequantize_fp8(codes, scales) - x)
    assert float(error) == pytest.approx(err.max(), rel=2e-3)
    page = (int(block), int(head))
    assert float(scale) == pytest.approx(scales[page], rel=1e-3) == pytest.approx(np.abs(x[page]).max() / 448, rel=1e-3)
    assert float(scaled) == pytest.approx(float(gap) * scales[page], rel=2e-2)
    assert float(share) == pytest.approx(float(error) / float(scaled), abs=0.02) and float(share) <= 0.5
    assert float(re.search(r"gaps of its own place: (\S+),", own)[1]) <= 0.5
    wrong = codes.copy()
    wrong[0, 0, 0, 0] = wrong[0, 0, 0, 0] + 1 if wrong[0, 0, 0, 0] & 0x7F < 0x7E else wrong[0, 0, 0, 0] - 1
    own = fp8_round_trip_error(x, wrong, scales).splitlines()[1]
    assert float(re.search(r"gaps of its own place: (\S+), at block 0, kv_head 0, slot 0, channel 0", own)[1]) > 0.5
