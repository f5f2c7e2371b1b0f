"""A tiny nbgrader course for testing the grading pipeline in seconds.

``make_toy_course(root)`` writes ``root/nbgrader_config.py`` (a copy of the project's) and
``root/solutions/day00_toy/day00_toy.ipynb``: one numba kernel exercise (``add_one``) with a visible
test and a hidden test, and one plain-Python exercise (``square``) whose test cell mixes visible
and hidden asserts. Everything the real days have, in miniature: a first cell selecting the
device, locked cells with grade_ids, points, ``grader.hidden.pristine`` in a hidden test.
"""

from __future__ import annotations

import pathlib
import shutil

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grader.nbgrader_api import CONFIG_NAME, PROJECT_ROOT

TOY = "day00_toy"

ADD_ONE_SOLUTION = '''@cuda.jit
def add_one_kernel(x, out):
    i = cuda.grid(1)
    ### BEGIN SOLUTION
    if i < x.size:
        out[i] = x[i] + 1.0
    ### END SOLUTION


def add_one(x):
    out = np.full_like(x, np.nan)
    add_one_kernel[(x.size + 31) // 32, 32](x, out)
    return out'''

ADD_ONE_HIDDEN = '''"""add_one matches the reference on awkward sizes."""
### BEGIN HIDDEN TESTS
from grader.hidden import pristine
toy_guard = pristine("grader.hidden")
for secret_size_for_toy in (1, 33, 70):
    xs = np.random.default_rng(secret_size_for_toy).random(secret_size_for_toy, dtype=np.float32)
    assert np.allclose(add_one(xs), xs + 1), "add_one is wrong for some hidden sizes"
### END HIDDEN TESTS'''

SQUARE_SOLUTION = '''def square(x):
    ### BEGIN SOLUTION
    return x * x
    ### END SOLUTION'''

SQUARE_TESTS = '''"""square squares."""
assert square(3) == 9
### BEGIN HIDDEN TESTS
assert square(-4) == 16, "square is wrong for a hidden negative input"
### END HIDDEN TESTS'''

# grade_id -> (cell type, source, nbgrader flags)
CELLS = [
    ("setup", "code", "import course\ncourse.use_device()\nimport numpy as np\nfrom numba import cuda", {}),
    ("intro", "markdown", "# Toy\nWrite `add_one` (one thread per element) and `square`.", {}),
    ("add_one_solution", "code", ADD_ONE_SOLUTION, {"solution": True, "locked": False}),
    ("add_one_visible", "code", '"""add_one adds one to a small vector."""\nx = np.arange(5, dtype=np.float32)\n'
                                "assert np.allclose(add_one(x), x + 1)", {"grade": True, "points": 1}),
    ("hidden_intro", "markdown", "More tests run when your notebook is graded.", {}),
    ("add_one_hidden", "code", ADD_ONE_HIDDEN, {"grade": True, "points": 2}),
    ("square_solution", "code", SQUARE_SOLUTION, {"solution": True, "locked": False}),
    ("square_tests", "code", SQUARE_TESTS, {"grade": True, "points": 1}),
    ("add_one_example", "code", 'ys = add_one(np.arange(3, dtype=np.float32))\nprint("the example ran:", ys)', {}),
]


def toy_notebook() -> nbformat.NotebookNode:
    """The toy solution notebook (nbgrader source)."""
    cells = []
    for grade_id, kind, source, flags in CELLS:
        meta = {"schema_version": 3, "grade": False, "solution": False, "locked": True, "grade_id": grade_id,
                "task": False, **flags}
        cell = (new_code_cell if kind == "code" else new_markdown_cell)(source, metadata={"nbgrader": meta})
        cell["id"] = grade_id.replace("_", "-")
        cells.append(cell)
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    # Its answers are host Python, so the grader runs them as submitted: the toy tests the layers
    # below the clean room (sandbox, guard, restarts, feedback), where arbitrary code must run.
    nb.metadata["course"] = {"graded_code": "python"}
    return nb


def make_toy_course(root) -> pathlib.Path:
    """Write the toy course into ``root`` (a folder) and return it."""
    root = pathlib.Path(root)
    folder = root / "solutions" / TOY
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PROJECT_ROOT / CONFIG_NAME, root / CONFIG_NAME)
    nbformat.write(toy_notebook(), str(folder / f"{TOY}.ipynb"))
    return root
