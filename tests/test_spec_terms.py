"""Every term of every bound in the graded specs decides at least one hidden case and one visible check
(the tables of ``tests/spec_terms/``).

For each row, the solution's answer cells run with the term dropped (or the mask edge moved, the guard of
the partial tile removed); then the hidden tests of the row's grade cell must fail, and so must the
visible check of its visible grade cell. And the rows of each day's ``min(...)`` terms are exactly the
terms its answer cells have, so a new bound without a deciding case shows as a missing row.
"""

from __future__ import annotations

import warnings

import nbformat
import pytest

from solution_cells import SolutionCells
from spec_terms import ALL, TABLES, answer_source, drop_term, min_terms

# A hidden test decides a term when it fails. Besides a failed assertion, the simulator raises where a GPU would
# compute garbage: an index past an array (IndexError), exp past 709 (OverflowError: a GPU's inf, then NaN, fails
# the same assertion). A large-logits case raises on some draws and asserts on the others.
FAILS = (AssertionError, IndexError, OverflowError)


def _notebook(assignment: str) -> SolutionCells:
    return SolutionCells.for_grading(assignment)


@pytest.mark.parametrize("assignment", sorted(TABLES))
def test_every_min_term_of_the_answers_has_its_row(assignment):
    notebook = _notebook(assignment)
    in_code = {(cell, bound, term) for cell in notebook.answers
               for bound, term in min_terms(answer_source(notebook.cells[cell]))}
    in_table = {(t.cell, t.bound, t.term) for t in TABLES[assignment] if not t.edits}
    missing, stale = in_code - in_table, in_table - in_code
    assert not missing, f"terms of a min with no row in tests/spec_terms/{assignment[:5]}.py: {sorted(missing)}"
    assert not stale, f"rows of tests/spec_terms/{assignment[:5]}.py whose min is not in the answers: {sorted(stale)}"


@pytest.mark.parametrize("assignment", sorted(TABLES))
def test_the_answers_as_written_pass_every_cell_the_table_names(assignment):
    """The control: a row counts as decided only because its mutant fails, so the answers without any
    change must pass each hidden test and visible check the rows name."""
    notebook = _notebook(assignment)
    named = sorted({(t.hidden, 1) for t in TABLES[assignment] if not t.exempt}
                   | {(t.visible, 0) for t in TABLES[assignment] if not t.exempt})
    namespace = notebook.with_edits(notebook.answers[0], ())
    for grade_id, part in named:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            notebook.run(f"{grade_id} {'hidden' if part else 'visible'}", notebook.parts(grade_id)[part], namespace)


def test_a_term_is_dropped_from_its_min():
    bound = "min(kv_end, tile_start + TILE_Q, n_queries)"
    assert drop_term(bound, "n_queries") == "min(kv_end, tile_start + TILE_Q)"
    assert drop_term("min(a, b)", "a") == "(b)"
    assert min_terms("x = min(a, b + 1)\ny = max(c, d)") == {("min(a, b + 1)", "a"), ("min(a, b + 1)", "b + 1")}
    with pytest.raises(ValueError, match="not an argument"):
        drop_term(bound, "N")


@pytest.mark.parametrize("assignment, term", [pytest.param(a, t, id=f"{a[:5]}-{t.cell}-{t.term}-{t.bound}")
                                              for a, t in ALL if not t.exempt])
def test_the_term_decides_a_hidden_case_and_a_visible_check(assignment, term):
    notebook = _notebook(assignment)
    edits = term.mutant_edits(answer_source(notebook.cells[term.cell]))
    for grade_id, part in ((term.hidden, 1), (term.visible, 0)):
        namespace = notebook.with_edits(term.cell, edits)
        source = notebook.parts(grade_id)[part]
        which = "hidden tests" if part else "visible check"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                notebook.run(f"{grade_id} {which}", source, namespace)
            except FAILS:
                continue
        pytest.fail(f"the {which} of {grade_id} pass the answer with {term.label} "
                    f"{'changed by ' + repr(term.edits) if term.edits else 'dropped'}: add a case where it decides "
                    f"({term.why})")
