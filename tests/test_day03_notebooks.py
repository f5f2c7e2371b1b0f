"""Day 3 solution and exercise: one source of truth with kernels/, every grade cell passes, the release matches.

The sample submissions in grader/samples/day03_online_softmax are run by the grader's own tests;
here only their form is checked against the notebook.
"""

import importlib.util
import inspect
import pathlib

import nbformat
from nbclient import NotebookClient

from grader import markers
from grader.release import assert_release_matches
from kernels import attention, softmax

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day03_online_softmax"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
SAMPLES = ROOT / "grader" / "samples" / DAY
# Solution cells and given cells of the notebook, and the kernels/ code they must equal.
SHARED_CODE = {
    "softmax_online_kernel": softmax.softmax_online_kernel,
    "online_launcher": softmax.softmax_online,
    "attention_v2_fused_rows_kernel": attention.attention_v2_fused_rows_kernel,
    "fused_launcher": attention.attention_v2_fused_rows,
}


def _cells_by_id(nb):
    return {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): c for c in nb.cells}


def _source(function):
    return inspect.getsource(getattr(function, "py_func", None) or getattr(function, "fn", function)).rstrip("\n")


def test_solution_and_given_cells_are_the_code_in_kernels():
    """One source of truth: the notebook's kernels and launchers are those of kernels/ (markers aside)."""
    cells = _cells_by_id(nbformat.read(SOLUTION, as_version=4))
    for grade_id, function in SHARED_CODE.items():
        text = "\n".join(line for line in cells[grade_id].source.splitlines()
                         if line.strip() not in (markers.BEGIN_SOLUTION, markers.END_SOLUTION))
        assert text == _source(function), f"cell {grade_id} differs from {function.__name__} in kernels/"


def test_grade_cells_open_with_a_docstring_and_total_ten_points():
    nb = nbformat.read(SOLUTION, as_version=4)
    grades = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert sum(c.metadata["nbgrader"]["points"] for c in grades) == 10
    for cell in grades:
        first = cell.source.splitlines()[0]
        assert first.startswith('"""') and first.endswith('"""') and len(first) > 6, cell.metadata["nbgrader"]["grade_id"]
        assert markers.BEGIN_HIDDEN in cell.source and "pristine(" in cell.source


def test_solution_notebook_passes_every_grade_cell():
    nb = nbformat.read(SOLUTION, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(SOLUTION.parent)}}).execute()
    errors = [(c.get("id"), o.ename, o.evalue) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors


def test_exercise_is_the_release_of_the_solution():
    assert_release_matches(DAY)


def test_samples_name_every_grade_cell_and_only_solution_cells():
    cells = _cells_by_id(nbformat.read(SOLUTION, as_version=4))
    points = {gid: c.metadata["nbgrader"]["points"] for gid, c in cells.items()
              if c.metadata.get("nbgrader", {}).get("grade")}
    solutions = {gid for gid, c in cells.items() if c.metadata.get("nbgrader", {}).get("solution")}
    names = sorted(p.stem for p in SAMPLES.glob("*.py"))
    assert {"correct_ours", "correct_alternative", "cheating"} <= set(names) and any(n.startswith("wrong") for n in names)
    for path in SAMPLES.glob("*.py"):
        spec = importlib.util.spec_from_file_location(f"sample_{path.stem}", path)
        sample = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sample)
        assert sample.__doc__ and sample.EXPECT["status"] in ("graded", "tampered"), path.name
        assert set(sample.EXPECT["points"]) == set(points), path.name
        assert all(0 <= got <= points[gid] for gid, got in sample.EXPECT["points"].items()), path.name
        assert set(sample.CELLS) <= solutions, path.name
