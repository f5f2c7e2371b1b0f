"""Day 10 exercise: every grade cell's hidden tests fail a wrong kernel, and the visible checks name the day's
mistakes.

As for day 9 (``test_day09_exercise.py``): the answer cells of the solution notebook run with one mistake of the
day's table written in, then only the hidden tests of one grade cell, which must fail (every such mistake, several
for a cell where the table has several). Then the feedback a student gets for each classic mistake (the table's
``feedback``): a norm of the mean instead of the mean square, without eps, without its weight, of one warp's columns,
with a scale per row or truncated codes, or every thread summing the whole row (x read 129 times); RoPE on
rotate-half pairs, at the token's index, turned backwards, with cosine and sine swapped, a pair's first value written
before its second is read (wrong in place), or no grid-stride loop; sigmoid for silu, gate and up swapped, or no
grid-stride loop. The visible
checks draw their inputs at random; here from a fixed seed. Then the judge of the fused norm: it accepts either code
of a tie, and each mistake's model is named by it and fails the reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from mistakes import of_day
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day10_a_model_talks", (
    "setup_device", "norm_constants", "norm_kernel", "norm_launcher", "rope_kernel", "rope_launcher",
    "swiglu_kernel", "swiglu_launcher", "decode_step"))

TABLE = of_day("day10_a_model_talks")      # the day's mistakes: tests/mistakes/day10.py
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


KERNEL_OF = {"norm_kernel": "rmsnorm_q8_1_block_per_row_kernel", "rope_kernel": "rope_pairs_from_table_kernel",
             "swiglu_kernel": "swiglu_elementwise_kernel", "decode_step": "decode_step"}

FEEDBACK = [pytest.param(check, m.cell, list(m.edits), list(words), id=f"{m.label}-{check}")
            for m in TABLE for check, words in m.feedback]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("check, cell, edits, words", FEEDBACK)
def test_visible_checks_name_the_mistake(check, cell, edits, words, monkeypatch):
    from course import checking, exercise_checks
    from course.exercise_checks import day10

    namespace = NOTEBOOK.with_edits(cell, edits)
    monkeypatch.setattr(day10, "random_inputs", lambda: checking.random_inputs(10))
    with pytest.raises(AssertionError) as failure:
        getattr(exercise_checks, check)(namespace[KERNEL_OF[cell]])
    message = str(failure.value)
    assert all(word in message for word in words), message


# ----------------------------------------------------------------------------- the judge of the fused norm

def _q8_1_of(y):
    """The q8_1 blocks of the float64 rows y as float32 outputs, quantized by the reference."""
    from kernels import reference

    q, d, s = reference.quantize_q8_1(y.astype(np.float32))
    return q, d, s.astype(np.float32)


def test_the_norm_judge_accepts_either_code_of_a_tie_and_nothing_further():
    """A code one step off is right only where y / d sits on a tie (within the judge's 1e-3); anywhere else it fails,
    and so does a scale or a sum off by 1e-4."""
    from course.exercise_checks import check_rmsnorm_q8_1, rmsnorm_q8_1_case
    from kernels import reference

    x, weight = rmsnorm_q8_1_case(np.random.default_rng(10), 2, 64)
    y = reference.rmsnorm(x, weight, 1e-5)
    q, d, s = _q8_1_of(y)
    check_rmsnorm_q8_1((q, d, s), x, weight)
    ratio = y.reshape(2, 2, 32) / (np.abs(y.reshape(2, 2, 32)).max(axis=2, keepdims=True) / 127)
    far = np.abs(np.abs(ratio - np.trunc(ratio)) - 0.5) > 0.1
    r, b, j = np.argwhere(far)[0]
    off = q.copy()
    off[r, 32 * b + j] += 1 if off[r, 32 * b + j] < 127 else -1
    with pytest.raises(AssertionError, match=r"x_q\["):
        check_rmsnorm_q8_1((off, d, s), x, weight)
    for bad in (d * np.float32(1.0001), ):
        with pytest.raises(AssertionError, match="x_scale"):
            check_rmsnorm_q8_1((q, bad, s), x, weight)
    bad_s = s.copy()
    bad_s[0, 0] += np.float32(1e-3) * max(1.0, abs(float(s[0, 0])))
    with pytest.raises(AssertionError, match="x_sum"):
        check_rmsnorm_q8_1((q, d, bad_s), x, weight)
    # a tie: y / d = k + 0.5 exactly, where either neighbour is right
    tie_x = np.zeros((1, 32), np.float32)
    tie_x[0, 0], tie_x[0, 1] = 127.0, 2.5
    ones = np.ones(32, np.float32)
    yt = reference.rmsnorm(tie_x, ones, 1e-5)
    qt, dt, st = _q8_1_of(yt)
    for code in (2, 3):
        qt2 = qt.copy()
        qt2[0, 1] = code
        check_rmsnorm_q8_1((qt2, dt, st), tie_x, ones)


@pytest.mark.parametrize("model", ["mean", "no_eps", "no_weight", "no_sqrt", "one_warp"])
def test_each_norm_mistake_is_named_by_its_model(model):
    """The outputs of each classic mistake's norm fail the judge, which names that mistake."""
    from course.exercise_checks import check_rmsnorm_q8_1, rmsnorm_q8_1_case
    from course.exercise_checks.day10 import _NORM_WORDS, _norm_models

    x, weight = rmsnorm_q8_1_case(np.random.default_rng(10), 3, 160)
    x[0] = np.abs(x[0])              # a positive mean: the mean's model is finite on that row
    x = x[:1] if model == "mean" else x
    y = _norm_models(x, weight, 1e-5)[model]
    with pytest.raises(AssertionError) as failure:
        check_rmsnorm_q8_1(_q8_1_of(y), x, weight)
    assert _NORM_WORDS[model] in str(failure.value)


def test_the_swiglu_and_rope_judges_name_nothing_on_the_reference():
    """The models of the mistakes do not match the right output: the reference passes without a finding."""
    from course.exercise_checks import check_rope, check_swiglu, rope_case, swiglu_case
    from course.exercise_checks.day10 import _rope_findings, _swiglu_findings
    from kernels import reference

    rng = np.random.default_rng(10)
    gate, up = swiglu_case(rng, 2, 50)
    out = reference.swiglu(gate, up).astype(np.float32)
    check_swiglu(out, gate, up)
    assert _swiglu_findings(out, gate, up) == []
    case = rope_case(rng, 3, 2, 8)
    out = reference.rope_pairs(case["x"], case["positions"], case["base"]).astype(np.float32)
    check_rope(out, case)
    assert _rope_findings(out, case) == []
