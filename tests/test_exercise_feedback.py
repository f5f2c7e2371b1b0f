"""The exercise notebooks give the classic-mistake diagnoses the context they need.

``check`` names a classic mistake only when it is told what produced the output: the kernel (for
its source), the attention inputs and mask, the reduction, the GEMM operands. For one classic
mistake per day, the code a student runs (the visible part of a grade cell, or a visible test
cell, as the solution notebook has it) runs here with that day's setup, constants and launcher
cells and the course's kernels, one of them replaced by a mistake built as ``tests/mistakes.py``
builds them, and the test asserts that the message the student reads names the mistake.
"""

from __future__ import annotations

import pathlib
import warnings

import nbformat
import pytest

from days import BY_NAME
from grader import markers
from kernels import softmax
from mistakes import MISTAKES, mistaken
from test_exercises import _kernels_object

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Mistakes of the exercises that only the kernel's source names (label -> kernel, old, new).
SOURCE_MISTAKES = {
    "softmax_sum_tree_without_barrier": (softmax.softmax_rows_kernel,
                                         "            partial[tid] += partial[tid + stride]\n        cuda.syncthreads()\n",
                                         "            partial[tid] += partial[tid + stride]\n"),
}


def _cells(assignment: str) -> tuple[list, dict]:
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return code, {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): c for c in code}


def _student_message(assignment: str, cell_id: str, mistake: str) -> str:
    """What a student reads when ``cell_id`` (its visible part) runs with ``mistake`` in the kernel it
    changes: the failure's text and any warning. Fails the test when the cell passes silently."""
    day = BY_NAME[assignment]
    code, by_id = _cells(assignment)
    spec = MISTAKES[mistake] if mistake in MISTAKES else SOURCE_MISTAKES[mistake]
    course_kernel = spec[0]
    namespace = {}
    exec(code[0].source, namespace)                                  # the setup cell
    for cell_id_of_constants in day.constants:
        exec(by_id[cell_id_of_constants].source, namespace)
    for dotted in day.solution_code.values():                        # the course's kernels ...
        kernel = _kernels_object(dotted)
        namespace[kernel.py_func.__name__] = kernel
    namespace[course_kernel.py_func.__name__] = mistaken(*spec, label=mistake)   # ... one wrong
    for launcher in day.launchers:
        exec(by_id[launcher.cell].source, namespace)
    visible = by_id[cell_id].source.split(markers.BEGIN_HIDDEN)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(visible, namespace)
        except AssertionError as failure:
            return "\n".join([str(failure)] + [str(w.message) for w in caught])
    shown = [str(w.message) for w in caught]
    assert shown, f"{cell_id} passes {mistake} without a word"
    return "\n".join(shown)


# (assignment, cell, mistake, words the message must use); the words are those of the diagnosis,
# which only the context passed by the cell makes possible.
CASES = [
    pytest.param("day01_gpu_model", "row_stats_tree_matches_reference_awkward_shapes", "tree_max_starts_at_zero",
                 ["starts at 0 instead of -inf"], marks=pytest.mark.day01, id="day01-max-starts-at-zero"),
    pytest.param("day02_naive_attention", "softmax_rows_matches_reference", "softmax_sum_tree_without_barrier",
                 ["softmax_rows_kernel: the loop at line", "no barrier between one pass and the next"],
                 marks=pytest.mark.day02, id="day02-tree-without-barrier"),
    pytest.param("day03_online_softmax", "fused_rows_causal", "fused_causal_j_below_i",
                 ["row 0 sees only key 0", "j < i instead of j <= i"], marks=pytest.mark.day03,
                 id="day03-causal-j-below-i"),
    pytest.param("day04_tiled_gemm", "shared_tiles_visible_test", "gemm_last_k_step_lost",
                 ["last, partial step along K is lost"], marks=pytest.mark.day04, id="day04-last-k-step-lost"),
    pytest.param("day05_flash_attention", "flash_matches_reference_causal", "flash_causal_j_below_i",
                 ["row 0 sees only key 0", "j < i instead of j <= i"], marks=pytest.mark.day05,
                 id="day05-causal-j-below-i"),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the NaN or overflow some mistakes make
@pytest.mark.parametrize("assignment, cell_id, mistake, words", CASES)
def test_the_student_reads_the_name_of_the_mistake(assignment, cell_id, mistake, words):
    message = _student_message(assignment, cell_id, mistake)
    missing = [w for w in words if w not in message]
    assert not missing, f"{cell_id} with {mistake}: the message lacks {missing}:\n{message}"
