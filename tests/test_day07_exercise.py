"""Day 7 exercise: every grade cell's hidden tests fail a wrong kernel, and the visible checks name the
day's mistakes.

As for day 6 (``test_day06_exercise.py``): the answer cells of the solution notebook run with one mistake of
the day's table written in, then only the hidden tests of one grade cell, which must fail; where the visible
check cannot see the mistake, that is asserted too. Then the feedback a student gets for each classic mistake
of GQA (the table's ``feedback``).
"""

from __future__ import annotations

import pytest

from mistakes import of_day
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day07_grouped_query_attention", (
    "setup_device", "prefill_constants", "prefill_kernel", "prefill_launcher", "decode_constants", "decode_kernel",
    "decode_launcher"))

TABLE = of_day("day07_grouped_query_attention")      # the day's mistakes: tests/mistakes/day07.py
# the table's mistakes whose hidden_fails names a grade cell, several per grade cell where the table has
# several
HIDDEN = [pytest.param(m.hidden_fails, m.cell, list(m.edits), m.visible_misses, id=m.label)
          for m in TABLE if m.hidden_fails]


def test_every_grade_cell_has_a_wrong_kernel():
    assert {param.values[0] for param in HIDDEN} == NOTEBOOK.graded


@pytest.mark.parametrize("grade_id, cell, edits, visible_misses_it", HIDDEN)
def test_hidden_tests_fail_a_wrong_kernel(grade_id, cell, edits, visible_misses_it):
    NOTEBOOK.hidden_tests_fail(grade_id, cell, edits, visible_misses_it)


# check name, answer cell, edits, words the feedback must contain: the table's mistakes with feedback
FEEDBACK = [pytest.param(check, m.cell, list(m.edits), list(words), id=f"{m.label}-{check}")
            for m in TABLE for check, words in m.feedback]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("check, cell, edits, words", FEEDBACK)
def test_visible_checks_name_the_mistake(check, cell, edits, words):
    namespace = NOTEBOOK.with_edits(cell, edits)
    kernel = namespace["gqa_prefill_tiles_kernel" if cell == "prefill_kernel" else "gqa_decode_group_kernel"]
    from course import exercise_checks

    with pytest.raises(AssertionError) as failure:
        getattr(exercise_checks, check)(kernel)
    message = str(failure.value)
    assert all(word in message for word in words), message
