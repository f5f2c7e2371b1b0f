"""Day 6 exercise: every grade cell's hidden tests fail a wrong kernel.

``test_exercises.py`` runs the day's notebooks through nbgrader's Validate (visible checks only) and
the grader's sample catalog grades whole submissions; neither shows that the hidden part of each
grade cell, on its own, catches a mistake. Here the answer cells of the solution notebook are run
with one classic mistake of the day's table written in, and then only the hidden tests of one grade cell
(the mistake's ``hidden_fails``): they must fail. Where the visible check cannot see the mistake (a size it
does not try, ``visible_misses``), that is asserted too.
"""

from __future__ import annotations

import pytest

from mistakes import of_day
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day06_paged_attention", (
    "setup_device", "cache_write_kernel", "cache_write_launcher", "paged_v1_constants", "paged_v1_kernel",
    "paged_v1_launcher", "merge_kernel", "merge_launcher", "allocator_class"))


# the mistakes of the day's table (tests/mistakes/day06.py) whose hidden_fails names a grade cell, several per
# grade cell where the table has several
HIDDEN = [pytest.param(m.hidden_fails, m.cell, list(m.edits), m.visible_misses, id=m.label)
          for m in of_day("day06_paged_attention") if m.hidden_fails]


def test_every_grade_cell_has_a_wrong_kernel():
    assert {param.values[0] for param in HIDDEN} == NOTEBOOK.graded


@pytest.mark.filterwarnings("ignore::RuntimeWarning")       # the 0/0 of two of the mistakes
@pytest.mark.parametrize("grade_id, cell, edits, visible_misses_it", HIDDEN)
def test_hidden_tests_fail_a_wrong_kernel(grade_id, cell, edits, visible_misses_it):
    NOTEBOOK.hidden_tests_fail(grade_id, cell, edits, visible_misses_it)
