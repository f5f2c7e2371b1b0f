"""Every classic mistake of every day is caught by a visible check, and its message names it.

The day tables of ``tests/mistakes/`` list the mistakes students make; a mistake's ``feedback`` holds
``(visible check, words)`` pairs. Here, for each pair, the solution notebook's cells run with the mistake
written into its answer cell (``SolutionCells``), then the visible part of the grade cell that calls that
check (what Validate and ``course check`` run): it must fail, with a message that has every one of the
words. A mistake with no such pair fails ``test_every_classic_mistake_has_visible_feedback``: a student
who makes it would read a raw error, or nothing, before the grade.
"""

from __future__ import annotations

import re
import warnings

import pytest

from mistakes import ALL, assignment_of
from solution_cells import SolutionCells
from spec_terms import answer_source

# Mistakes whose answers are judged elsewhere than by a visible check of a kernel: the host-Python
# allocator's records (course/exercise_checks/day06_allocator.py, its own messages, tests/test_host_answers.py).
JUDGED_ELSEWHERE = {"allocator_class"}


def _needs_feedback(mistake) -> bool:
    return mistake.sample_base is None and mistake.cell not in JUDGED_ELSEWHERE


def test_every_classic_mistake_has_visible_feedback():
    missing = [m.label for m in ALL if _needs_feedback(m) and not m.feedback]
    assert not missing, (f"{len(missing)} classic mistakes have no visible check that names them (give each a "
                         f"feedback=((check, words),) in tests/mistakes/dayNN.py): {missing}")


def _visible_cell(notebook: SolutionCells, check: str, mistake) -> str:
    """The grade cell whose visible line calls ``check``; where several do (one check serves two kernels,
    as row_stats_match_reference the tree and the shuffles), the one whose line names the mistake's kernel."""
    calls = [gid for gid in sorted(notebook.graded)
             if re.search(rf"\bexercise_checks\.{check}\(", notebook.parts(gid)[0])]
    assert calls, f"no grade cell's visible line calls exercise_checks.{check}"
    if mistake.kernel is not None:
        name = mistake.kernel.rsplit(".", 1)[1].removesuffix("_kernel")
        calls = [gid for gid in calls if re.search(rf"\b{name}\b", notebook.parts(gid)[0])] or calls
    return calls[0]


CASES = [pytest.param(m, check, tuple(words), id=f"{m.label}-{check}")
         for m in ALL if _needs_feedback(m) for check, words in m.feedback]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("mistake, check, words", CASES)
def test_the_visible_check_names_the_mistake(mistake, check, words):
    notebook = SolutionCells.for_grading(assignment_of(mistake.label))
    grade_id = _visible_cell(notebook, check, mistake)
    namespace = notebook.with_edits(mistake.cell, mistake.edits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            notebook.run(f"{grade_id} visible", notebook.parts(grade_id)[0], namespace)
        except Exception as failure:   # noqa: BLE001 - any failure; its message is what is tested
            message = f"{type(failure).__name__}: {failure}"
        else:
            pytest.fail(f"the visible check {check} passes the answer with {mistake.label!r} ({mistake.why})")
    missing = [word for word in words if word not in message]
    assert not missing, f"{check} fails {mistake.label!r} without naming it (missing {missing}):\n{message}"


def test_the_all_negative_row_stays_far_below_zero_whatever_the_seed():
    """row_stats_match_reference's all-negative row keeps every entry at -1,000 or below, so a max that starts at 0
    is off by more than the check's tolerance for any seed (an entry of -0.16, seed 150, once let it pass)."""
    import numpy as np

    from course.exercise_checks import day01

    for seed in (150, *range(2000)):
        x = day01._row_stats_case(np.random.default_rng(seed))
        assert x[2].max() <= -1000.0 and (x[:2] > 0).any(), seed
