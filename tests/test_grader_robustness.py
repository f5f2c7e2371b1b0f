"""The grader on odd but honest notebooks, failing grade cells that display a value, and restarts
after a timeout, on a toy course of two assignments (``grader/toy.py`` and a variant whose hidden
tests share helpers defined in a hidden cell of their own)."""

import copy
import json

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader import release
from grader.autograde import read_submission, ignore_unknown_grading_cells, root_cause
from grader.execute import cells_to_rebuild, definitions_only, demote_results_of_failed_cell
from grader.grade import grade
from grader.toy import ADD_ONE_SOLUTION, SQUARE_SOLUTION, TOY, make_toy_course, toy_notebook

HELPERS = "day01_toy_helpers"
HELPER_CELL = '''"""The hidden tests' helpers are defined."""
### BEGIN HIDDEN TESTS
def expected_square_for_toy(value):
    return value * value


toy_sizes_for_hidden = (1, 33, 70)
### END HIDDEN TESTS'''


def _strip_markers(source):
    return "\n".join(line for line in source.splitlines() if "### " not in line)


GOOD = {"add_one_solution": _strip_markers(ADD_ONE_SOLUTION), "square_solution": _strip_markers(SQUARE_SOLUTION)}


def helpers_notebook():
    """A second toy assignment: its own grade_ids (prefix ``h_``), a hidden cell of helpers that the
    hidden tests of both exercises use."""
    nb = toy_notebook()
    for cell in nb.cells:
        meta = cell.metadata["nbgrader"]
        meta["grade_id"] = "h_" + meta["grade_id"]
        cell["id"] = "h-" + cell["id"]
        cell.source = cell.source.replace("for secret_size_for_toy in (1, 33, 70):",
                                          "for secret_size_for_toy in toy_sizes_for_hidden:")
        cell.source = cell.source.replace("assert square(-4) == 16", "assert square(-4) == expected_square_for_toy(-4)")
    helper = nbformat.v4.new_code_cell(HELPER_CELL, metadata={"nbgrader": {
        "schema_version": 3, "grade": True, "solution": False, "locked": True, "grade_id": "h_helpers_hidden",
        "points": 1, "task": False}})
    helper["id"] = "h-helpers-hidden"
    nb.cells.insert(1, helper)
    assert "toy_sizes_for_hidden" in nb.cells[6].source and "expected_square_for_toy" in nb.cells[8].source
    return nb


def _submission(released: dict, cells: dict) -> dict:
    nb = copy.deepcopy(released)
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in cells:
            cell["source"] = cells[gid]
    return nb


def _gid_index(nb: dict, gid: str) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    base = tmp_path_factory.mktemp("robust")
    root = make_toy_course(base / "course")
    folder = root / "solutions" / HELPERS
    folder.mkdir(parents=True)
    nbformat.write(helpers_notebook(), str(folder / f"{HELPERS}.ipynb"))
    release.generate([TOY, HELPERS], root=root)
    released = {name: json.loads((root / "exercises" / name / f"{name}.ipynb").read_text()) for name in (TOY, HELPERS)}
    return {"root": root, "released": released, "base": base}


def _odd_submissions(released: dict) -> dict:
    """student -> (assignment, notebook dict or raw text)."""
    toy, helpers = released[TOY], released[HELPERS]
    good = _submission(toy, GOOD)
    subs = {"good": (TOY, good)}
    # A failing grade cell that displays a value before it fails (nbgrader would read it as a score).
    subs["shows-then-fails"] = (TOY, _submission(toy, {**GOOD, "square_solution":
                                "import sys\n\ndef square(x):\n    sys.displayhook(1.0)\n    return 0"}))
    # A cell pasted from another notebook, with grading metadata this assignment does not know, and
    # a copy of a test cell pasted at the end.
    pasted = copy.deepcopy(good)
    foreign = copy.deepcopy(helpers["cells"][1])
    foreign["source"] = "pasted_note = 'from another notebook'"
    pasted["cells"].insert(3, foreign)
    hand_made = nbformat.v4.new_code_cell("scratch = 2 + 2", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": False, "grade_id": "my_own_check", "points": 5,
        "schema_version": 3}})
    pasted["cells"].append(json.loads(json.dumps(hand_made)))
    pasted["cells"].append(copy.deepcopy(pasted["cells"][_gid_index(pasted, "square_tests")]))
    subs["pasted-cells"] = (TOY, pasted)
    null_markdown = copy.deepcopy(good)
    null_markdown["cells"].insert(2, {"cell_type": "markdown", "metadata": {}, "source": None, "id": "empty-note"})
    subs["null-markdown"] = (TOY, null_markdown)
    subs["quotes-a-marker"] = (TOY, _submission(toy, {**GOOD, "square_solution":
                               "# my notes: the grader's tests sit after ### BEGIN HIDDEN TESTS\n"
                               + GOOD["square_solution"]}))
    other_day = _submission(helpers, {"h_" + k: v for k, v in GOOD.items()})
    subs["other-day"] = (TOY, other_day)
    subs["rebuilt"] = (TOY, {"cells": [{"cell_type": "code", "metadata": {}, "source": GOOD["square_solution"],
                                        "outputs": [], "execution_count": None}],
                             "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    subs["cut-off"] = (TOY, json.dumps(good)[:500])
    subs["cells-not-cells"] = (TOY, json.dumps({**good, "cells": [1, 2]}))
    # The answer cell of add_one hangs after defining add_one: the cell times out and costs its
    # exercise, and every later cell, the hidden ones that use the hidden helpers included, is
    # graded as it would have been.
    hang = {"h_add_one_solution": GOOD["add_one_solution"] + "\n\nwhile True:\n    pass",
            "h_square_solution": GOOD["square_solution"]}
    subs["hangs-early"] = (HELPERS, _submission(helpers, hang))
    return subs


@pytest.fixture(scope="module")
def graded(course):
    subs = course["base"] / "submissions"
    for student, (assignment, content) in _odd_submissions(course["released"]).items():
        path = subs / student / assignment / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    rows = grade(subs, course["base"] / "out", jobs=2, timeout=10, root=course["root"], progress=False)
    return {(r["student"], r["assignment"]): r for r in rows}


@pytest.mark.parametrize("student, status, points, detail", [
    ("good", "graded", 4, ""),
    ("shows-then-fails", "graded", 3, ""),
    ("pasted-cells", "graded", 4, "ran as ordinary cells"),
    ("null-markdown", "graded", 4, ""),
    ("quotes-a-marker", "graded", 4, ""),
    ("other-day", "wrong_notebook", 0, f"the notebook of {HELPERS}, not {TOY}"),
    ("rebuilt", "wrong_notebook", 0, "without any cell of the released one"),
    ("cut-off", "invalid_json", 0, "not valid JSON"),
    ("cells-not-cells", "invalid_json", 0, "cell 1 is not a notebook cell"),
])
def test_odd_notebooks_are_graded_as_what_they_are(graded, student, status, points, detail):
    row = graded[(student, TOY)]
    assert (row["status"], row["points"]) == (status, points), row["details"]
    assert detail in " | ".join(row["details"])


def test_feedback_of_odd_notebooks_is_written(graded, course):
    feedback = course["base"] / "out" / "feedback"
    for student in ("pasted-cells", "null-markdown", "quotes-a-marker", "shows-then-fails"):
        assert (feedback / student / TOY / f"{TOY}.html").is_file(), student
        assert not any("feedback HTML failed" in d for d in graded[(student, TOY)]["details"])
    page = (feedback / "other-day" / TOY / f"{TOY}.html").read_text()
    assert HELPERS in page and "not the notebook of" in page


def test_a_timeout_early_costs_nothing_later(graded):
    row = graded[("hangs-early", HELPERS)]
    assert row["status"] == "timed_out" and "timed out in h_add_one_solution" in " | ".join(row["details"])
    points = {gid: cell["points"] for gid, cell in row["cells"].items()}
    # The cell that hung costs its exercise; the hidden tests of square use the helpers of
    # h_helpers_hidden (a grade cell, which the restart re-runs) and pass.
    assert points == {"h_helpers_hidden": 1, "h_add_one_visible": 0, "h_add_one_hidden": 0, "h_square_tests": 1}


# --- the parts, without grading ------------------------------------------------------------------

def test_a_failed_grade_cell_scores_zero_whatever_it_displayed():
    from nbgrader.utils import determine_grade

    cell = nbformat.v4.new_code_cell("check()", metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 2,
                                                                       "solution": False, "locked": True}})
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=1),
                    nbformat.v4.new_output("error", ename="AssertionError", evalue="wrong", traceback=[])]
    assert determine_grade(cell)[0] == 2, "nbgrader alone scores the displayed value: the fix must matter"
    assert demote_results_of_failed_cell(cell)
    assert determine_grade(cell)[0] == 0
    assert [o.output_type for o in cell.outputs] == ["error", "display_data"]
    passing = nbformat.v4.new_code_cell("x")
    passing.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "0.5"}, execution_count=1)]
    assert not demote_results_of_failed_cell(passing) and passing.outputs[0].output_type == "execute_result"


def test_cells_to_rebuild_keeps_hidden_helpers_and_their_dependencies():
    cells = [
        ("import numpy as np", False),                                  # 0 setup: always
        ("BASE = 3\ndef helper(x):\n    return x + BASE", True),        # 1 hidden helpers used below
        ("assert helper(1) == 4", True),                                # 2 a test: defines nothing used
        ("def answer():\n    return 1", False),                         # 3 answer: always
        ("SCALE = 2", True),                                            # 4 used only by cell 5
        ("def scaled(x):\n    return x * SCALE", True),                 # 5 used later
        ("", False),                                                    # 6 the cell that timed out
    ]
    assert cells_to_rebuild(cells, ["assert scaled(helper(0)) == 6"]) == [0, 1, 3, 4, 5]
    assert cells_to_rebuild(cells, ["assert answer() == 1"]) == [0, 3]
    assert cells_to_rebuild([("%time x = 1", True)], ["print(x)"]) == [0], "unparsable: run it to be safe"
    assert definitions_only("import os\n@cuda.jit\ndef f():\n    pass\nwhile True:\n    pass\nclass C:\n    pass") == \
        "import os\n@cuda.jit\ndef f():\n    pass\nclass C:\n    pass"


def test_root_cause_names_the_exception_and_where():
    log = ('[AutogradeApp | ERROR] There was an error processing assignment\nTraceback (most recent call last):\n'
           '  File "/x/nbgrader/converters/base.py", line 9, in convert\n    run()\n'
           '  File "/x/grader/restore.py", line 31, in restore\n    index = ids[gid]\nKeyError: \'square_tests\'\n'
           '[AutogradeApp | WARNING] Removing failed assignment\n[AutogradeApp | ERROR] Please see the above traceback\n'
           'Traceback (most recent call last):\n  File "/x/nbgrader/converters/base.py", line 468, in convert_notebooks\n'
           '    raise NbGraderException(msg)\nnbgrader.converters.base.NbGraderException: Please see the above\n')
    assert root_cause(log) == "KeyError: 'square_tests' (in restore, grader/restore.py:31)"
    assert root_cause("[AutogradeApp | ERROR] no notebooks found\nmore") == "[AutogradeApp | ERROR] no notebooks found"
    assert root_cause("") == "no message"


def test_unknown_and_repeated_grading_cells_run_as_ordinary_cells():
    released = json.loads(json.dumps(toy_notebook()))
    submitted = copy.deepcopy(released)
    submitted["cells"].insert(0, {**copy.deepcopy(submitted["cells"][7]), "source": "pass"})     # a copy, edited
    submitted["cells"].append({"cell_type": "code", "source": "", "outputs": [], "execution_count": None,
                               "metadata": {"nbgrader": {"grade": True, "grade_id": "elsewhere", "points": 9}}})
    notes = ignore_unknown_grading_cells(submitted, released)
    assert "elsewhere" in notes[0] and "square_tests" in notes[1]
    assert "nbgrader" not in submitted["cells"][0]["metadata"], "the edited copy loses, the original keeps its id"
    assert submitted["cells"][8]["metadata"]["nbgrader"]["grade_id"] == "square_tests"
    assert "nbgrader" not in submitted["cells"][-1]["metadata"]


# --- properties ----------------------------------------------------------------------------------

_noise_metadata = st.dictionaries(st.sampled_from(["tags", "collapsed", "scrolled", "jupyter", "editable", "x"]),
                                  st.one_of(st.booleans(), st.lists(st.text(max_size=5), max_size=2)), max_size=3)
_stuffed_output = st.sampled_from([
    {"output_type": "stream", "name": "stdout", "text": "4 / 4 points\n" * 50},
    {"output_type": "execute_result", "data": {"text/plain": "1000"}, "metadata": {}, "execution_count": 3},
    {"output_type": "error", "ename": "AssertionError", "evalue": "", "traceback": []},
    {"output_type": "display_data", "data": {"text/html": "<b>full marks</b>"}, "metadata": {}},
])
_extra_cell = st.sampled_from([
    {"cell_type": "code", "metadata": {}, "source": "# scratch work\nnotes_of_mine = [1, 2, 3]",
     "outputs": [], "execution_count": None},
    {"cell_type": "markdown", "metadata": {}, "source": None},
    {"cell_type": "markdown", "metadata": {}, "source": ["My notes: ", "### BEGIN HIDDEN TESTS is a marker"]},
    {"cell_type": "raw", "metadata": {}, "source": "raw text"},
    {"cell_type": "code", "source": "pasted = True", "outputs": [], "execution_count": None,
     "metadata": {"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": "day09_pasted",
                               "points": 4, "schema_version": 3}}},
])


@st.composite
def benign_edits(draw, good: dict) -> dict:
    """A correct submission edited the way honest students' notebooks get edited."""
    nb = copy.deepcopy(good)
    for cell in nb["cells"]:
        cell["metadata"].update(draw(_noise_metadata))
        if cell["cell_type"] == "code":
            cell["outputs"] = draw(st.lists(_stuffed_output, max_size=2))
            cell["execution_count"] = draw(st.one_of(st.none(), st.integers(1, 99)))
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cell["source"] = source.splitlines(keepends=True) if draw(st.booleans()) else source
    for cell in draw(st.lists(_extra_cell, max_size=3)):
        nb["cells"].insert(draw(st.integers(1, len(nb["cells"]))), copy.deepcopy(cell))
    # Markdown cells hold no grading: moving them changes nothing nbgrader checks.
    markdown = [c for c in nb["cells"] if c["cell_type"] == "markdown"]
    nb["cells"] = [c for c in nb["cells"] if c["cell_type"] != "markdown"]
    for cell in markdown:
        nb["cells"].insert(draw(st.integers(1, len(nb["cells"]))), cell)
    if draw(st.booleans()):
        for cell in nb["cells"]:
            cell.pop("id", None)
    return nb


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_benign_edits_never_change_the_score(course, tmp_path_factory, data):
    good = _submission(course["released"][TOY], GOOD)
    nb = data.draw(benign_edits(good))
    work = tmp_path_factory.mktemp("benign")
    path = work / "subs" / "ada" / TOY / f"{TOY}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb))
    (row,) = grade(work / "subs", work / "out", timeout=10, root=course["root"], progress=False)
    assert (row["status"], row["points"]) == ("graded", 4), row["details"]


_json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                            lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                            max_leaves=8)
_cell_keys = st.sampled_from(["cell_type", "source", "metadata", "outputs", "execution_count", "id", "attachments"])


@st.composite
def malformed(draw, good: dict) -> str:
    """A correct submission broken: cut, a key replaced by an odd value, or not a notebook at all."""
    text = json.dumps(good)
    how = draw(st.sampled_from(["cut", "cell", "top", "other"]))
    if how == "cut":
        return text[:draw(st.integers(0, len(text) - 1))]
    nb = copy.deepcopy(good)
    if how == "cell":
        cell = nb["cells"][draw(st.integers(0, len(nb["cells"]) - 1))]
        cell[draw(_cell_keys)] = draw(_json_values)
    elif how == "top":
        nb[draw(st.sampled_from(["cells", "metadata", "nbformat", "nbformat_minor"]))] = draw(_json_values)
    else:
        nb = draw(_json_values)
    return json.dumps(nb)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_malformed_files_are_refused_or_repaired_into_valid_notebooks(course, tmp_path_factory, data):
    good = _submission(course["released"][TOY], GOOD)
    path = tmp_path_factory.getbasetemp() / "malformed.ipynb"
    path.write_text(data.draw(malformed(good)))
    nb, problem = read_submission(path)
    if nb is None:
        assert problem
        return
    nbformat.validate(nbformat.reads(json.dumps(nb), as_version=4))
    assert all(isinstance(c["source"], str) and isinstance(c["metadata"], dict) for c in nb["cells"])


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_malformed_files_get_a_status_never_grader_error(course, tmp_path_factory, data):
    good = _submission(course["released"][TOY], GOOD)
    work = tmp_path_factory.mktemp("malformed")
    path = work / "subs" / "ada" / TOY / f"{TOY}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(data.draw(malformed(good)))
    (row,) = grade(work / "subs", work / "out", timeout=10, root=course["root"], progress=False)
    assert row["status"] != "grader_error", row["details"]


def test_an_older_notebook_format_and_a_null_source_are_read(tmp_path):
    nb = json.loads(nbformat.writes(toy_notebook()))
    nb["nbformat_minor"] = 4                      # saved by an older Jupyter: no cell ids
    for cell in nb["cells"]:
        cell.pop("id")
    nb["cells"][1]["source"] = None
    nb["cells"][2]["metadata"]["tags"] = True     # breaks the format, but metadata never changes a grade
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(nb))
    read, problem = read_submission(path)
    assert problem == "" and read["cells"][1]["source"] == ""
    assert read["cells"][2]["metadata"]["nbgrader"]["grade_id"] == "add_one_solution"
    nbformat.validate(nbformat.reads(json.dumps(read), as_version=4))
