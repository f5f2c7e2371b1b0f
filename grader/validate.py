"""nbgrader's Validate, told what a lesson is: nothing may tell a student a lesson "passes all the tests".

Validate (the toolbar button of JupyterLab, ``nbgrader validate``) runs a notebook and reports its graded
cells. On a notebook with no graded cell, a lesson, it used to run the whole lesson and answer "Success!
Your notebook passes all the tests." while the day's exercise, in a file of the same name, was blank.
``ValidateExecute`` replaces nbgrader's Execute step in Validate (``nbgrader_config.py``): a notebook
without any graded cell is not run, and Validate fails with one cell whose error says what the notebook
is and where the exercise of that day is.
"""

from __future__ import annotations

import pathlib
import re

from nbformat import from_dict
from nbgrader.preprocessors import Execute

__all__ = ["ValidateExecute", "not_an_exercise"]

ROOT = pathlib.Path(__file__).resolve().parent.parent


def not_an_exercise(nb, folder: str | None = None) -> str:
    """What Validate says of a notebook with no graded cell (a lesson, a scratch notebook), naming the
    exercise of its day when its first heading says which day it is (``# Day 6: ...``)."""
    heading = next((cell.source for cell in nb.cells if cell.cell_type == "markdown"), "")
    day = re.match(r"\s*#\s*Day\s+(\d+)\b", heading)
    exercises = sorted((ROOT / "exercises").glob(f"day{int(day.group(1)):02d}_*/day*.ipynb")) if day else []
    is_lesson = folder is not None and pathlib.Path(folder).resolve() == ROOT / "lessons"
    what = "a lesson" if is_lesson else "not an exercise (a lesson or a notebook of your own)"
    where = (f" The exercise of day {int(day.group(1))} is exercises/{exercises[0].parent.name}/{exercises[0].name}:"
             f" open it and press Validate there." if exercises else
             " The exercises are the notebooks of exercises/: open one and press Validate there.")
    from course.tracebacks import wrapped

    return "\n".join(wrapped(f"This notebook has no graded cell: it is {what}, so Validate checked nothing in "
                             f"it.{where}"))


class ValidateExecute(Execute):
    """nbgrader's Execute, except that a notebook with no graded cell is not run and fails Validate."""

    def preprocess(self, nb, resources=None, km=None):
        import os

        if any(cell.get("metadata", {}).get("nbgrader", {}).get("grade") for cell in nb.cells):
            return super().preprocess(nb, resources, km=km)
        message = not_an_exercise(nb, os.getcwd())       # Validate runs in the notebook's folder
        nb.cells = [from_dict({
            "cell_type": "code", "execution_count": None, "id": "not-an-exercise", "source": "# nothing graded here",
            "metadata": {"nbgrader": {"grade": True, "grade_id": "not_an_exercise", "points": 1, "locked": True,
                                      "solution": False, "schema_version": 3}},
            "outputs": [{"output_type": "error", "ename": "NotAnExercise", "evalue": message,
                         "traceback": [f"NotAnExercise: {message}"]}]})]
        return nb, resources
