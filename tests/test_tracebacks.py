"""An error raised through the course's code, in a notebook, reads cause first (``course/tracebacks.py``).

A notebook runs in a fresh kernel as a student's would (``course.use_device()`` first); a check that fails
inside ``course.checking`` must show the check's message first, then the student's cell and line, and no
absolute path of the clone, with the full traceback folded below; an error of the student's own code keeps
IPython's traceback; and nbgrader's Validate, which runs the notebook the same way, quotes the short form.
"""

from __future__ import annotations

import pathlib
import re

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]

SETUP = "import course\ncourse.use_device('simulator', quiet=True)\nimport numpy as np\nfrom course.checking import check"
FAILING_CHECK = "def mine(n):\n    return np.zeros(n, np.float32)\n\ncheck(mine(6), np.linspace(1, 2, 6), name='out')"
OWN_ERROR = "undefined_name + 1"


def _run(*cells: str):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    return nb


def _error(cell):
    return next(o for o in cell.outputs if o.output_type == "error")


def test_a_failed_check_reads_cause_first_with_the_student_s_lines_and_no_clone_path():
    nb = _run(SETUP, FAILING_CHECK, OWN_ERROR)
    error = _error(nb.cells[1])
    text = "\n".join(error.traceback)
    assert error.ename == "CheckFailure"
    first = text.splitlines()[0]
    assert "CheckFailure" in first and "out" in first, text                   # the cause, first
    assert "in your cells:" in text and "line 4: check(mine(6)" in text, text
    assert str(ROOT) not in text and "course/checking.py" not in text, text   # no course frame, no clone path
    assert "left out" in text and "%tb" in text
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert max(len(line) for line in plain.splitlines()) <= 120, plain     # Validate's dialog does not wrap
    folded = [o for o in nb.cells[1].outputs if o.output_type == "display_data"]
    assert folded and "<details><summary>full traceback</summary>" in folded[0].data["text/html"]
    full = folded[0].data["text/html"]
    assert "course/checking.py" in full and str(ROOT) not in full             # every frame, relative paths
    own = "\n".join(_error(nb.cells[2]).traceback)
    assert "NameError" in own and "left out" not in own                        # IPython's own traceback


def test_validate_quotes_the_short_form(tmp_path):
    from nbgrader.validator import Validator

    cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(
        "\"\"\"grade cell\"\"\"\n" + FAILING_CHECK,
        metadata={"nbgrader": {"grade": True, "grade_id": "graded", "points": 1, "locked": True,
                               "solution": False, "schema_version": 3}})]
    path = tmp_path / "day00_toy.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    validator = Validator()
    validator.execute_timeout = 120
    result = validator.validate(str(path))
    text = "\n".join(str(failure) for failure in result.get("failed", []))
    assert "CheckFailure" in text and str(ROOT) not in text, text
