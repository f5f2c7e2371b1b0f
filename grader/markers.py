"""What is secret in a solution notebook: the text between nbgrader's markers.

A solution notebook marks solutions with ``### BEGIN SOLUTION`` / ``### END SOLUTION`` and hidden
tests with ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS``. The *secret lines* of a block
are its lines whose text appears nowhere in the notebook outside the blocks, not even inside a
longer line (text the student sees anyway, such as ``import numpy as np``, ``return out`` or
``seed=seed)``, is not a secret), and that carry content (at least ``MIN_SECRET_CHARS`` characters besides spaces and brackets). Release checks
and the leak test search for these lines.
"""

from __future__ import annotations

import re

import nbformat

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
MIN_SECRET_CHARS = 8
_TRIVIAL = re.compile(r"[\s()\[\]{},:;'\"#]")


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def split_blocks(source: str) -> dict[str, list[str]]:
    """Split a cell's lines into ``{"solution": [...], "hidden": [...], "visible": [...]}``.

    Marker lines belong to no list; lines outside every block are ``visible``.
    """
    parts: dict[str, list[str]] = {"solution": [], "hidden": [], "visible": []}
    current = "visible"
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith(BEGIN_SOLUTION):
            current = "solution"
        elif stripped.startswith(BEGIN_HIDDEN):
            current = "hidden"
        elif stripped.startswith((END_SOLUTION, END_HIDDEN)):
            current = "visible"
        else:
            parts[current].append(line)
    return parts


def _is_trivial(line: str) -> bool:
    return len(_TRIVIAL.sub("", line)) < MIN_SECRET_CHARS


def secret_lines(nb, kind: str) -> list[str]:
    """The secret lines (stripped, in order, without repeats) of a notebook's blocks.

    nb: a notebook (nbformat node or dict). kind: ``"solution"`` or ``"hidden"``.
    """
    if kind not in ("solution", "hidden"):
        raise ValueError(f"kind must be 'solution' or 'hidden', got {kind!r}")
    blocks: list[str] = []
    visible: list[str] = []
    for cell in nb["cells"]:
        parts = split_blocks(_source(cell))
        blocks.extend(line.strip() for line in parts[kind])
        visible.extend(parts["visible"])
    visible_text = "\n".join(visible)
    seen, result = set(), []
    for line in blocks:
        if line and line not in seen and not _is_trivial(line) and line not in visible_text:
            seen.add(line)
            result.append(line)
    return result


# Locked cells that neither hold an answer nor are graded: those the graded cells need (the set-up,
# the launchers, given constants) by their grade_id; every other one is an example for the student
# (a visible test, a plot, a table of bytes), not run when graded (``grader.execute``: that halves the
# grading time of a notebook). ``course release`` refuses a later cell that reads a name only an
# example binds (``grader.release``).
NEEDED_WHEN_GRADED = re.compile(r"(^|_)setup($|_)|_launcher$|_constants$")


def example_cells(nb) -> list[str]:
    """grade_ids of the example cells of a notebook: locked code cells, neither graded nor answered,
    whose grade_id does not say the graded cells need them (``NEEDED_WHEN_GRADED``)."""
    found = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id")
        if (cell.get("cell_type") == "code" and gid and meta.get("locked") and not meta.get("grade")
                and not meta.get("solution") and not NEEDED_WHEN_GRADED.search(gid)):
            found.append(gid)
    return found


def read_notebook(path) -> nbformat.NotebookNode:
    """Read a notebook as nbformat 4 without validation errors stopping us."""
    return nbformat.read(str(path), as_version=4)
