"""The day-2 lesson runs top to bottom, with and without recordings, and never shows an exercise's code.

It runs twice: as committed (with whatever recordings course/data holds; a missing one gives a
note, not an error) and against synthetic recordings in a temporary folder, so that every table
and plot cell that reads a recording runs.
"""

import pathlib

import nbformat
from nbclient import NotebookClient

from attention_fake_recordings import fake_recordings
from grader import markers

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSON = ROOT / "lessons" / "day02_naive_attention.ipynb"
SOLUTION = ROOT / "solutions" / "day02_naive_attention" / "day02_naive_attention.ipynb"


def _execute(nb):
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(LESSON.parent)}}).execute()
    errors = [(c.get("id"), o.ename, o.evalue) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors
    return nb


def _text(nb, outputs: bool) -> str:
    if not outputs:
        return "\n".join(c.source for c in nb.cells)
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts += [v for v in output.get("data", {}).values() if isinstance(v, str)]
    return "\n".join(parts)


def test_lesson_never_shows_the_exercise_kernels():
    lesson = nbformat.read(LESSON, as_version=4)
    solution = nbformat.read(SOLUTION, as_version=4)
    shown = {line.strip() for line in _text(lesson, outputs=False).splitlines()}
    leaked = [line for line in markers.secret_lines(solution, "solution") if line in shown]
    assert not leaked, f"the lesson shows solution lines: {leaked[:3]}"


def test_lesson_runs_as_committed():
    """With the recordings course/data holds: each plot shows them or a note that they are missing."""
    from course.records import recorded_names

    shown = _text(_execute(nbformat.read(LESSON, as_version=4)), outputs=True)
    for name, note in (("day02_naive_timing", "No timing recording for day 2 is installed yet"),
                       ("day02_dram_bytes", "No Nsight Compute recording for day 2 is installed yet")):
        assert (note in shown) == (name not in recorded_names()), name


def test_lesson_runs_with_recordings(tmp_path):
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    nb = nbformat.read(LESSON, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(
        f"import course.records, pathlib\ncourse.records.DATA_DIR = pathlib.Path({str(tmp_path)!r})"))
    shown = _text(_execute(nb), outputs=True)
    assert "Nsight measured" in shown and "compulsory traffic" in shown
    assert "recorded on Fake GPU" in shown and "torch SDPA" in shown
    solution = nbformat.read(SOLUTION, as_version=4)
    leaked = [line for line in markers.secret_lines(solution, "solution") if line in shown]
    assert not leaked, f"the lesson's outputs show solution lines: {leaked[:3]}"
