"""A solution notebook's cells as code to run in tests: the answer cells with a mistake written in, then
the visible check or the hidden tests of one grade cell (``test_dayNN_exercise.py``)."""

from __future__ import annotations

import linecache
import pathlib
import warnings

import nbformat
import pytest

from grader import markers

ROOT = pathlib.Path(__file__).resolve().parents[1]


class SolutionCells:
    """The code cells of ``solutions/<assignment>/<assignment>.ipynb``; ``run_first``: the cells (setup,
    constants, answers, launchers) to run before a grade cell, in order."""

    def __init__(self, assignment: str, run_first: tuple[str, ...]):
        self.path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
        self.label = assignment[:5]
        self.run_first = run_first
        nb = nbformat.read(self.path, as_version=4)
        self.cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells if c.cell_type == "code"}
        self.graded = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                       if c.cell_type == "code" and c.metadata["nbgrader"].get("grade")}

    @classmethod
    def for_grading(cls, assignment: str) -> "SolutionCells":
        """The notebook with, as ``run_first``, every cell the grade cells need, in order: the answer cells and
        the locked cells named as needed when graded (``setup*``, ``*_constants``, ``*_launcher``)."""
        nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
        examples = set(markers.example_cells(nb))
        needed = tuple(c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.cell_type == "code"
                       and not c.metadata["nbgrader"].get("grade") and c.metadata["nbgrader"]["grade_id"] not in examples)
        return cls(assignment, needed)

    @property
    def answers(self) -> list[str]:
        """The answer cells, in order."""
        nb = nbformat.read(self.path, as_version=4)
        return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                if c.cell_type == "code" and c.metadata["nbgrader"].get("solution")]

    def run(self, name: str, source: str, namespace: dict) -> None:
        filename = f"<{self.label} {name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)

    def parts(self, grade_id: str) -> tuple[str, str]:
        """(the visible part of a grade cell, its hidden tests)."""
        visible, _, rest = self.cells[grade_id].partition(markers.BEGIN_HIDDEN)
        return visible, rest.partition(markers.END_HIDDEN)[0]

    def with_edits(self, cell: str, edits) -> dict:
        """The namespace of the notebook run up to its grade cells, with ``edits`` ((old, new) text
        replacements, each found at least once) made to answer cell ``cell``."""
        namespace: dict = {"__name__": "__main__"}      # as in a notebook: some hidden tests check it
        for gid in self.run_first:
            source = "\n".join(line for line in self.cells[gid].splitlines()
                               if line.strip() not in (markers.BEGIN_SOLUTION, markers.END_SOLUTION))
            if gid == cell:
                for old, new in edits:
                    assert old in source, f"{cell} no longer contains {old!r}"
                    source = source.replace(old, new)
            self.run(gid, source, namespace)
        return namespace

    def hidden_tests_fail(self, grade_id: str, cell: str, edits, visible_misses_it: bool) -> None:
        """Run the answers with ``edits`` in ``cell``; the hidden tests of ``grade_id`` must fail (and, where
        ``visible_misses_it``, its visible check must pass)."""
        namespace = self.with_edits(cell, edits)
        visible, hidden = self.parts(grade_id)
        assert hidden.strip(), grade_id
        if visible_misses_it:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.run(f"{grade_id} visible", visible, namespace)   # the visible check does not see it ...
        with pytest.raises(AssertionError):
            self.run(f"{grade_id} hidden", hidden, namespace)          # ... the hidden tests do
