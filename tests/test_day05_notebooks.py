"""Day 5 solution and exercise notebooks: one source of truth, every grade cell passes, the release matches.

The lesson's tests are in test_day05_lesson.py; the sample submissions in
grader/samples/day05_flash_attention/ are graded by the grader's own tests.
"""

import inspect
import pathlib

import nbformat
from nbclient import NotebookClient

from grader import markers
from grader.release import assert_release_matches
from kernels import flash_attention

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day05_flash_attention"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"


def _cells_by_id(nb):
    return {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): c for c in nb.cells}


def _execute(nb, folder):
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return nb


# ------------------------------------------------------------------------------------------ solution

def test_solution_cell_is_the_v4_kernel_of_kernels():
    """One source of truth: the notebook's solution is attention_v4_flash_kernel (markers aside)."""
    cell = _cells_by_id(nbformat.read(SOLUTION, as_version=4))["flash_kernel"]
    text = "\n".join(line for line in cell.source.splitlines()
                     if line.strip() not in (markers.BEGIN_SOLUTION, markers.END_SOLUTION))
    assert text == inspect.getsource(flash_attention.attention_v4_flash_kernel.py_func).rstrip("\n")
    assert cell.metadata["nbgrader"]["solution"] and not cell.metadata["nbgrader"]["grade"]


def test_grade_cells_open_with_a_docstring_and_total_ten_points():
    nb = nbformat.read(SOLUTION, as_version=4)
    grades = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert sum(c.metadata["nbgrader"]["points"] for c in grades) == 10
    for cell in grades:
        first = cell.source.splitlines()[0]
        assert first.startswith('"""') and first.endswith('"""') and len(first) > 6, cell.metadata["nbgrader"]["grade_id"]
        assert markers.BEGIN_HIDDEN in cell.source


def test_solution_notebook_passes_every_grade_cell():
    nb = _execute(nbformat.read(SOLUTION, as_version=4), SOLUTION.parent)
    errors = [(c.get("id"), o.ename) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors


def test_exercise_is_the_release_of_the_solution():
    assert_release_matches(DAY)
