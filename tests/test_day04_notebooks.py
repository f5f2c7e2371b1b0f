"""Day 4 exercise notebooks: one source of truth with kernels/, every grade cell passes, the release matches."""

import inspect
import pathlib

import nbformat
from nbclient import NotebookClient

from grader import markers
from grader.release import assert_release_matches
from kernels import gemm

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day04_tiled_gemm"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
# Solution and launcher cells of the notebook, and the kernels/gemm.py functions they must equal.
SHARED_CODE = {
    "gemm_v3_shared_tiles_kernel": gemm.gemm_v3_shared_tiles_kernel.py_func,
    "gemm_v3_shared_tiles_launcher": gemm.gemm_v3_shared_tiles,
    "gemm_v4_register_blocked_kernel": gemm.gemm_v4_register_blocked_kernel.py_func,
    "gemm_v4_register_blocked_launcher": gemm.gemm_v4_register_blocked,
}
CONSTANT_CELLS = ("shared_tiles_constants", "register_blocked_constants")


def _cells_by_id(nb):
    return {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): c for c in nb.cells}


def test_solution_and_launcher_cells_are_the_code_in_kernels():
    """One source of truth: the notebook's kernels and launchers are those of kernels/gemm.py (markers aside)."""
    cells = _cells_by_id(nbformat.read(SOLUTION, as_version=4))
    for grade_id, function in SHARED_CODE.items():
        text = "\n".join(line for line in cells[grade_id].source.splitlines()
                         if line.strip() not in (markers.BEGIN_SOLUTION, markers.END_SOLUTION))
        assert text == inspect.getsource(function).rstrip("\n"), f"cell {grade_id} differs from kernels/gemm.py"


def test_given_tile_constants_are_those_of_kernels():
    cells = _cells_by_id(nbformat.read(SOLUTION, as_version=4))
    namespace = {}
    for grade_id in CONSTANT_CELLS:
        exec(cells[grade_id].source, namespace)
    for name in ("TILE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "THREAD_M", "THREAD_N", "THREADS_X", "THREADS_Y"):
        assert namespace[name] == getattr(gemm, name), name


def test_grade_cells_open_with_a_docstring_and_total_ten_points():
    nb = nbformat.read(SOLUTION, as_version=4)
    grades = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert sum(c.metadata["nbgrader"]["points"] for c in grades) == 10
    for cell in grades:
        first = cell.source.splitlines()[0]
        assert first.startswith('"""') and first.endswith('"""') and len(first) > 6, cell.metadata["nbgrader"]["grade_id"]
        assert markers.BEGIN_HIDDEN in cell.source


def test_solution_notebook_passes_every_grade_cell():
    nb = nbformat.read(SOLUTION, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(SOLUTION.parent)}}).execute()
    errors = [(c.get("id"), o.ename, o.evalue[:300]) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors


def test_exercise_is_the_release_of_the_solution():
    assert_release_matches(DAY)
