"""Day 1 solution and exercise: the solution passes every grade cell, its code is the code in
kernels/, and the committed exercise is exactly its nbgrader release."""

import inspect
import pathlib

import nbformat
from nbclient import NotebookClient

from grader import markers
from grader.release import assert_release_matches
from kernels import elementwise, reduction

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day01_gpu_model"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
# Solution cells and given launcher cells of the notebook, and the kernels/ code they must equal.
SHARED_CODE = {
    "axpb_kernel": [elementwise.axpb_v1_guarded_kernel],
    "axpb_launcher": [elementwise.axpb_v1_guarded],
    "normalize_rows_kernel": [elementwise.normalize_rows_v1_3d_grid_kernel],
    "normalize_rows_launcher": [elementwise.normalize_rows_grid, elementwise.normalize_rows_v1_3d_grid],
    "row_stats_tree_kernel": [reduction.row_stats_v2_shared_tree_kernel],
    "row_stats_tree_launcher": [reduction.row_stats_v2_shared_tree],
    "row_stats_warp_kernel": [reduction.row_stats_v3_warp_shuffle_kernel],
    "row_stats_warp_launcher": [reduction.row_stats_v3_warp_shuffle],
}


def _cells_by_id(nb):
    return {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): c for c in nb.cells}


def _execute(nb, folder):
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return nb


def _errors(nb):
    return [(c.get("id"), o.ename, o.evalue) for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]


# ------------------------------------------------------------------------------------------ solution

def test_solution_and_launcher_cells_are_the_code_in_kernels():
    """One source of truth: the notebook's kernels and launchers are those of kernels/ (markers aside)."""
    cells = _cells_by_id(nbformat.read(SOLUTION, as_version=4))
    for grade_id, functions in SHARED_CODE.items():
        text = "\n".join(line for line in cells[grade_id].source.splitlines()
                         if line.strip() not in (markers.BEGIN_SOLUTION, markers.END_SOLUTION))
        expected = "\n\n\n".join(inspect.getsource(f).rstrip("\n") for f in functions)
        assert text == expected, f"cell {grade_id} differs from {[f.__name__ for f in functions]} in kernels/"


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
    assert not _errors(nb)


def test_exercise_is_the_release_of_the_solution():
    assert_release_matches(DAY)
