"""Feedback students may see: nothing that ran after the first hidden test, no file the submission wrote.

nbgrader's own feedback shows the hidden tests as the grade cells' source, inside tracebacks, and
in anything a submission prints once hidden tests ran in its kernel (they are in memory and in
IPython's input history from the moment the first hidden cell starts). Scrubbing such output for
hidden lines cannot work: a submission can print them in pieces, reversed, encoded. So the
feedback does not scrub what ran after that moment; it drops it. ``sanitize_notebook`` (and the
preprocessor ``SanitizeFeedback`` that applies it inside ``nbgrader generate_feedback``):

- finds the *first hidden cell*: the first code cell whose grade_id held hidden tests in the
  solution notebook. Cells run in notebook order, so every output above it was produced before
  any hidden test existed in the kernel;
- above it keeps the student's streams (print output) and errors (the visible tests' messages),
  capped in size; a rich display (``display_data``, ``execute_result``) is replaced by a note,
  because the kernel can rewrite an earlier display later through its display id;
- from it on, drops every output and execution count: a grade cell shows only whether it passed
  and its points, a fixed sentence when the grader itself stopped the cell (timeout, crashed
  kernel, not run), for a failed cell the likely cause the course's diagnosis named, as a fixed
  sentence of ``LIKELY_CAUSES`` (``likely_cause``; never a word of the failure's message), and
  ``HIDDEN_OUTPUT_NOTE``; any other code cell shows nothing;
- removes, as a second line of defence, each line of the kept outputs that contains a hidden line.

nbgrader's ``ClearHiddenTests`` removes the hidden tests from the cells' source; both run for the
HTML feedback and for the notebook handed back.
"""

from __future__ import annotations

import re

from nbgrader import utils as nbgrader_utils
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from traitlets import List, Unicode

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
REMOVED = "[a line of a hidden test was removed]"
HIDDEN_OUTPUT_NOTE = "Output of hidden tests, and of every cell from the first hidden test on, is not shown."
DISPLAY_NOTE = "[a rich display (plot, table, widget) is not shown in feedback]\n"
TRUNCATED_NOTE = "\n[output truncated: it was longer than the feedback shows]\n"
OMITTED_NOTE = "[output omitted: the feedback of this notebook reached its size limit]\n"
MAX_MESSAGE_CHARS = 2000
# Per output and per notebook: a submission printing megabytes must not make a page of megabytes.
MAX_OUTPUT_CHARS = 10_000
MAX_TOTAL_CHARS = 200_000
# What the grader writes in place of a cell it stopped (grader.execute); the student's kernel
# could raise errors of these names too, so the feedback shows the grader's fixed sentence, never
# the error's own message.
GRADER_STOPPED = {
    "CellTimeoutError": "the grader stopped this cell: it ran past the time limit",
    "KernelCrashed": "the grader stopped this cell: the kernel died while running it",
    "NotRun": "the grader did not run this cell: an earlier cell timed out or crashed the kernel",
}


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def scrub(text, secrets: list[str]):
    """Remove every line of ``text`` (str or list of str) that contains one of ``secrets``."""
    if isinstance(text, list):
        return [scrub(t, secrets) for t in text]
    if not isinstance(text, str) or not secrets:
        return text
    kept = []
    for line in text.splitlines(keepends=True):
        plain = strip_ansi(line)
        if any(secret in plain for secret in secrets):
            kept.append(REMOVED + ("\n" if line.endswith("\n") else ""))
        else:
            kept.append(line)
    return "".join(kept)


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(str(part) for part in value)
    return value if isinstance(value, str) else str(value)


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [...]"


def first_hidden_cell(nb, hidden_cells) -> int:
    """Index of the first code cell whose grade_id held hidden tests (len(nb.cells) when none)."""
    hidden_cells = set(hidden_cells)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade_id") in hidden_cells:
            return index
    return len(nb.cells)


def _stream(text: str):
    from nbformat.v4 import new_output

    return new_output("stream", name="stdout", text=text)


# The likely causes (grader/likely_causes.py): one fixed sentence per cause, chosen by a phrase of the
# course's own message, never a word of it.
from grader.likely_causes import LIKELY_CAUSES, LIKELY_CAUSES_BY_ERROR, Cause  # noqa: E402

# Lines of a message read for signatures, and characters of each line.
MAX_CAUSE_LINES = 200
MAX_CAUSE_LINE_CHARS = 2000
NO_CAUSE = ("no likely cause could be named from this failure. {look} (or `course check`) to see what it says; the "
            "hidden tests run more cases, those the cell's first line describes.")
_VISIBLE_CHECK = re.compile(r"\bexercise_checks\.([A-Za-z_]\w*)\s*\(")


def likely_cause(error) -> Cause | None:
    """The cause the course's message in ``error`` (an nbformat error output) names, or None.

    Only the entry of ``LIKELY_CAUSES`` is returned, never text of the message: its lines are searched in
    order, and in the first line that holds a signature the first entry that matches wins."""
    message = strip_ansi(_text(error.get("evalue", "")))
    for line in message.splitlines()[:MAX_CAUSE_LINES]:
        line = line[:MAX_CAUSE_LINE_CHARS]
        for cause in LIKELY_CAUSES:
            if any(signature in line for signature in cause.signatures):
                return cause
    return LIKELY_CAUSES_BY_ERROR.get(_text(error.get("ename", "")))


def _visible_check(cell) -> str | None:
    """The visible check a grade cell opens with (``exercise_checks.<name>(...)``), from its visible lines."""
    from grader.markers import split_blocks

    visible = "\n".join(split_blocks(_text(cell.get("source", "")))["visible"])
    match = _VISIBLE_CHECK.search(visible)
    return match.group(1) if match else None


def cause_line(cell, errors) -> str:
    """What the feedback says of a failed grade cell: its likely cause, or where to look."""
    cause = likely_cause(errors[0]) if errors else None
    if cause is not None:
        return f"likely cause: {cause.text}"
    check = _visible_check(cell)
    look = (f"This cell opens with the visible check exercise_checks.{check}: run the cell" if check
            else "Run the cell's visible part")
    return NO_CAUSE.format(look=look)


def _grade_line(cell, scores: dict) -> str:
    """'passed' or 'failed' with points; the grader's sentence if it stopped the cell, else, when it
    failed, its likely cause (``cause_line``)."""
    meta = cell.metadata.get("nbgrader", {})
    grade_id = meta.get("grade_id")
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if grade_id in scores:
        score, max_score = scores[grade_id]
    elif meta.get("score") is not None:                # nbgrader's GetGrades, in generate_feedback
        score, max_score = meta["score"], meta.get("points", 0)
    else:
        max_score = meta.get("points", 0)
        score = 0 if errors else max_score
    verdict = "passed" if not errors and float(score) >= float(max_score) else "failed"
    lines = [f"{verdict}: {float(score):g} of {float(max_score):g} points"]
    stopped = [f"{o['ename']}: {GRADER_STOPPED[o['ename']]}" for o in errors if o.get("ename") in GRADER_STOPPED]
    lines += stopped[:1]
    if verdict == "failed" and not stopped:
        lines.append(cause_line(cell, errors))
    lines.append(HIDDEN_OUTPUT_NOTE)
    return "\n".join(lines) + "\n"


class _Budget:
    """Characters the feedback may still show (``MAX_TOTAL_CHARS`` in all)."""

    def __init__(self):
        self.left = MAX_TOTAL_CHARS

    def take(self, text: str) -> str | None:
        """``text`` cut to ``MAX_OUTPUT_CHARS`` and to what is left, or None when nothing is."""
        if self.left <= 0:
            return None
        limit = min(MAX_OUTPUT_CHARS, self.left)
        if len(text) > limit:
            text = text[:limit] + TRUNCATED_NOTE
        self.left -= len(text)
        return text


def _kept_output(output, hidden_lines: list[str], budget: _Budget):
    """An output from above the first hidden cell as the feedback shows it (capped, scrubbed)."""
    kind = output.get("output_type")
    if kind == "stream":
        text = budget.take(scrub(strip_ansi(_text(output.get("text", ""))), hidden_lines))
        if text is None:
            return _stream(OMITTED_NOTE)
        output["text"] = text
        return output
    if kind == "error":
        evalue = _shorten(scrub(strip_ansi(_text(output.get("evalue", ""))), hidden_lines))
        traceback = scrub(strip_ansi("\n".join(_text(line) for line in output.get("traceback", []))), hidden_lines)
        traceback = budget.take(traceback)
        if traceback is None:
            traceback = f"{output.get('ename', 'Error')}: {evalue}"
        output["ename"] = _shorten(_text(output.get("ename", "Error")))
        output["evalue"] = evalue
        output["traceback"] = traceback.split("\n")
        return output
    budget.take(DISPLAY_NOTE)
    return _stream(DISPLAY_NOTE)


def sanitize_notebook(nb, hidden_lines: list[str], hidden_cells: list[str], scores: dict | None = None):
    """Make an autograded notebook fit to hand back, in place (and return it).

    hidden_lines: secret hidden-test lines (``grader.markers.secret_lines(solution, "hidden")``).
    hidden_cells: grade_ids of the cells that held hidden tests in the solution notebook.
    scores: grade_id -> (points, max points) from the gradebook; without it the points come from
    nbgrader's ``GetGrades`` metadata, else from whether the cell raised.
    """
    scores = dict(scores or {})
    cutoff = first_hidden_cell(nb, hidden_cells)
    budget = _Budget()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        # Timings are the kernel's too (a submission could time its cells to spell something).
        cell.metadata.pop("execution", None)
        if index < cutoff:
            cell.outputs = [_kept_output(output, hidden_lines, budget) for output in cell.get("outputs", [])]
            continue
        cell.execution_count = None
        if nbgrader_utils.is_grade(cell):
            cell.outputs = [_stream(_grade_line(cell, scores))]
        else:
            cell.outputs = []
    return nb


class ClearHiddenTestsOfGradeCells(ClearHiddenTests):
    """nbgrader's ``ClearHiddenTests`` for grade cells only.

    Hidden tests live in grade cells, whose source the grader restores from the gradebook. Any
    other cell is the student's own text, which may quote a marker (``# ### BEGIN HIDDEN TESTS``
    in a comment) without its pair: nbgrader's version then raises and no feedback is written.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if not nbgrader_utils.is_grade(cell):
            return cell, resources
        return super().preprocess_cell(cell, resources, cell_index)


class SanitizeFeedback(NbGraderPreprocessor):
    """nbgrader preprocessor running ``sanitize_notebook`` (after ``GetGrades`` and ``ClearHiddenTests``).

    Without configured ``hidden_lines`` it reads the hidden tests from the gradebook (nbgrader keeps
    every source cell there), so plain ``nbgrader generate_feedback`` and the formgrader's feedback
    button are safe too with the course's nbgrader_config.py.
    """

    hidden_lines = List(Unicode(), help="secret hidden-test lines to remove from outputs").tag(config=True)
    hidden_cells = List(Unicode(), help="grade_ids of cells that held hidden tests").tag(config=True)

    def preprocess(self, nb, resources):
        lines, cells = list(self.hidden_lines), list(self.hidden_cells)
        info = (resources or {}).get("nbgrader", {})
        if not lines and not cells and info.get("db_url"):
            lines, cells = hidden_tests_from_gradebook(info["db_url"], info["assignment"], info["notebook"])
        return sanitize_notebook(nb, lines, cells), resources


def hidden_tests_from_gradebook(db_url: str, assignment: str, notebook: str) -> tuple[list[str], list[str]]:
    """(secret hidden lines, grade_ids of cells with hidden tests) of a notebook in a gradebook."""
    import nbformat
    from nbgrader.api import Gradebook

    from grader.markers import secret_lines

    with Gradebook(db_url) as gb:
        cells = [(c.name, c.cell_type, c.source or "") for c in gb.find_notebook(notebook, assignment).source_cells]
    nb = nbformat.v4.new_notebook(cells=[
        (nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell)(
            source, metadata={"nbgrader": {"grade_id": name}}) for name, kind, source in cells])
    return secret_lines(nb, "hidden"), hidden_cell_ids(nb)


def hidden_cell_ids(solution_nb) -> list[str]:
    """grade_ids of the solution notebook's cells that contain hidden tests."""
    from grader.markers import BEGIN_HIDDEN

    ids = []
    for cell in solution_nb.cells:
        src = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        if BEGIN_HIDDEN in src:
            ids.append(cell.metadata.get("nbgrader", {}).get("grade_id", ""))
    return ids
