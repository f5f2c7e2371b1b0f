"""Day 5 lesson: it runs, and it never shows the kernel the exercise asks for.

The lesson runs twice: as committed (with whatever recordings course/data holds) and against
synthetic recordings in a temporary folder, so that the timing and Nsight cells run with data too.
"""

import inspect
import pathlib

import nbformat
from nbclient import NotebookClient

from day05_fake_recordings import fake_recordings
from grader import markers
from kernels import flash_attention

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day05_flash_attention"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
LESSON = ROOT / "lessons" / f"{DAY}.ipynb"
EXERCISE_KERNEL = "attention_v4_flash"


def _execute(nb, folder):
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return nb


def _output_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            for value in output.get("data", {}).values():
                parts.append(value if isinstance(value, str) else "")
    return "\n".join(parts)



def exercise_only_lines() -> list[str]:
    """Solution lines of the v4 kernel that rung v3 (which the lesson shows) does not have.

    Short generic lines (``if causal:``, which the lesson's NumPy code has too) are left out.
    """
    solution = nbformat.read(SOLUTION, as_version=4)
    v3_source = inspect.getsource(flash_attention.attention_v3_tiled_kernel.py_func)
    v3 = {line.split("  #")[0].strip() for line in v3_source.splitlines()}  # code, trailing comments aside
    return [line for line in markers.secret_lines(solution, "solution") if line not in v3 and len(line) > 12]


def test_lesson_never_shows_the_exercise_kernel():
    lesson = nbformat.read(LESSON, as_version=4)
    code = "\n".join(c.source for c in lesson.cells if c.cell_type == "code")
    assert EXERCISE_KERNEL not in code, "the lesson's code uses the rung the exercise asks for"
    text = "\n".join(c.source for c in lesson.cells)
    assert exercise_only_lines(), "the v4 kernel should differ from v3"
    leaked = [line for line in exercise_only_lines() if line in text]
    assert not leaked, f"the lesson shows lines of the exercise's kernel: {leaked[:3]}"


def test_lesson_runs_as_committed():
    _execute(nbformat.read(LESSON, as_version=4), LESSON.parent)


def test_lesson_runs_with_recordings_and_shows_no_solution(tmp_path):
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    nb = nbformat.read(LESSON, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(
        f"import course.records, pathlib\ncourse.records.DATA_DIR = pathlib.Path({str(tmp_path)!r})"))
    shown = _output_text(_execute(nb, LESSON.parent))
    assert "recorded on Fake GPU" in shown and "of torch SDPA fp32" in shown
    assert "No Nsight Compute recording" not in shown and "No kernel-resource recording" not in shown
    leaked = [line for line in exercise_only_lines() if line in shown]
    assert not leaked, f"the lesson's outputs show lines of the exercise's kernel: {leaked[:3]}"

