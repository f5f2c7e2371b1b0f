"""Feedback students may see: hidden tests cleared, tracebacks that cannot show hidden source.

By default nbgrader's feedback shows the hidden tests twice: as the grade cell's source and inside
tracebacks (the failing line of the hidden test). ``sanitize_notebook`` (and the preprocessor
``SanitizeFeedback`` that applies it inside ``nbgrader generate_feedback``):

- replaces the traceback of an error in a grade cell that held hidden tests by one line,
  ``ExceptionName: message``, the message being what the test author wrote for the student;
- removes from every output of every cell (streams, results, errors) each line that contains a
  secret hidden-test line (compared without ANSI colours), so not even a submission that prints
  the hidden tests it found in memory sees them in its feedback;
- shortens very long error messages.

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
HIDDEN_TRACEBACK_NOTE = "(the traceback inside a hidden test is not shown)"
MAX_MESSAGE_CHARS = 2000
TEXT_MIMETYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")


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


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [...]"


def sanitize_notebook(nb, hidden_lines: list[str], hidden_cells: list[str]):
    """Sanitize the outputs of an autograded notebook in place (and return it).

    hidden_lines: secret hidden-test lines (``grader.markers.secret_lines(solution, "hidden")``).
    hidden_cells: grade_ids of the cells that held hidden tests in the solution notebook.
    """
    hidden_cells = set(hidden_cells)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        in_hidden_cell = cell.metadata.get("nbgrader", {}).get("grade_id") in hidden_cells
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error":
                output["evalue"] = _shorten(scrub(strip_ansi(str(output.get("evalue", ""))), hidden_lines))
                if in_hidden_cell:
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output['evalue']}",
                                           HIDDEN_TRACEBACK_NOTE]
                else:
                    output["traceback"] = [scrub(line, hidden_lines) for line in output.get("traceback", [])]
            elif kind == "stream":
                output["text"] = scrub(output.get("text", ""), hidden_lines)
            elif kind in ("execute_result", "display_data"):
                data = output.get("data", {})
                for mimetype in TEXT_MIMETYPES:
                    if mimetype in data:
                        data[mimetype] = scrub(data[mimetype], hidden_lines)
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
    """nbgrader preprocessor running ``sanitize_notebook`` (after ``ClearHiddenTests``).

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
