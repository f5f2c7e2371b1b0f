"""Validate on a lesson says what it is (``grader/validate.py``), never "Success!".

The lesson and the exercise of a day share a file name, and JupyterLab puts Validate on every notebook's
toolbar. The Validator is configured as the lab's Validate button configures it (nbgrader's handler loads
``nbgrader_config.py`` from the server's folder, the course root): on each lesson it fails with a message
that names the day's exercise, without running the lesson; on an exercise it runs as before.
"""

from __future__ import annotations

import os
import pathlib

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("day*.ipynb"))


def _validator():
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.apps import NbGrader
    from nbgrader.validator import Validator

    app = NbGrader()
    cwd = os.getcwd()
    os.chdir(ROOT)                 # the lab's server runs in the course root, as `make lab` starts it
    try:
        paths = jupyter_config_path()
        paths.insert(0, os.getcwd())
        app.config_file_paths.append(paths)
        app.load_config_file()
    finally:
        os.chdir(cwd)
    return Validator(config=app.config)


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_validate_on_a_lesson_names_the_exercise_and_runs_nothing(lesson):
    result = _validator().validate(str(lesson))
    assert list(result) == ["failed"], result
    (failure,) = result["failed"]
    day = lesson.stem[:5]
    exercise = next((ROOT / "exercises").glob(f"{day}_*/{day}_*.ipynb"), None)
    said = " ".join(failure["raw_error"].split())        # the message is wrapped for the dialog
    assert "it is a lesson" in said
    if exercise is None:          # a day whose exercise is not released yet: Validate points at exercises/
        assert "The exercises are the notebooks of exercises/" in said
    else:
        assert f"exercises/{exercise.parent.name}/{exercise.name}" in failure["raw_error"]


def test_validate_on_a_notebook_of_one_s_own_says_it_is_not_an_exercise(tmp_path):
    path = tmp_path / "scratch.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), path)
    (failure,) = _validator().validate(str(path))["failed"]
    assert "not an exercise" in failure["raw_error"] and "exercises/" in failure["raw_error"]


def test_validate_on_the_blank_exercise_still_runs_its_graded_cells():
    exercise = ROOT / "exercises" / "day01_gpu_model" / "day01_gpu_model.ipynb"
    result = _validator().validate(str(exercise))
    assert result.get("failed") and not any("NotAnExercise" in f["raw_error"] for f in result["failed"])


def test_a_lesson_and_its_exercise_are_told_apart_at_a_glance():
    """A JupyterLab tab shows about the first 20 characters of a file name: a day's lesson and exercise must
    differ there (they were both ``day06_paged_attention.ipynb``)."""
    for lesson in LESSONS:
        exercise = next((ROOT / "exercises").glob(f"{lesson.stem[:5]}_*/*.ipynb"), None)
        if exercise is None:      # not released yet
            continue
        assert lesson.name[:16] != exercise.name[:16] and "lesson" in lesson.name[:13], (lesson.name, exercise.name)
