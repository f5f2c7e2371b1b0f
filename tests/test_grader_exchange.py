"""A JupyterHub-style class through nbgrader's exchange, tried on a local exchange folder.

Instructor: ``nbgrader release_assignment``; a student: ``nbgrader fetch_assignment``, answers,
``nbgrader submit``; instructor: ``nbgrader collect``, then ``course grade submitted/``, copies the
feedback into the course's ``feedback/`` and ``nbgrader release_feedback``; the student
``nbgrader fetch_feedback`` gets the HTML page, which shows no hidden test. This is the sequence
grader/README.md documents for a large class.
"""

import getpass
import json
import os
import shutil
import subprocess
import sys

import pytest

from grader import release
from grader.grade import grade
from grader.markers import read_notebook, secret_lines
from grader.toy import ADD_ONE_SOLUTION, SQUARE_SOLUTION, TOY, make_toy_course

COURSE_ID = "llm-kernels"


def nbgrader(*args, cwd, exchange):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(os.path.dirname(sys.executable), "nbgrader"), *args, f"--Exchange.root={exchange}"]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def _answer(path):
    nb = json.loads(path.read_text())
    answers = {"add_one_solution": ADD_ONE_SOLUTION, "square_solution": SQUARE_SOLUTION}
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell["source"] = "\n".join(line for line in answers[gid].splitlines() if "### " not in line)
    path.write_text(json.dumps(nb))


@pytest.mark.slow
def test_release_fetch_submit_collect_grade_feedback(tmp_path):
    course = make_toy_course(tmp_path / "course")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)            # nbgrader wants an exchange everyone can write to
    student_home = tmp_path / "student"
    student_home.mkdir()
    release.generate([TOY], root=course, db_path=course / "gradebook.db")

    nbgrader("release_assignment", TOY, cwd=course, exchange=exchange)
    nbgrader("fetch_assignment", TOY, f"--course={COURSE_ID}", cwd=student_home, exchange=exchange)
    fetched = student_home / TOY / f"{TOY}.ipynb"
    assert fetched.is_file()
    _answer(fetched)
    nbgrader("submit", TOY, f"--course={COURSE_ID}", cwd=student_home, exchange=exchange)
    nbgrader("collect", TOY, cwd=course, exchange=exchange)
    student = getpass.getuser()
    assert (course / "submitted" / student / TOY / "timestamp.txt").is_file()

    out = tmp_path / "grading"
    rows = grade(course / "submitted", out, jobs=1, timeout=60, root=course, progress=False)
    assert [(r["student"], r["status"], r["points"]) for r in rows] == [(student, "graded", 4.0)]

    shutil.copytree(out / "feedback", course / "feedback", dirs_exist_ok=True)
    nbgrader("release_feedback", TOY, cwd=course, exchange=exchange)
    nbgrader("fetch_feedback", TOY, f"--course={COURSE_ID}", cwd=student_home, exchange=exchange)
    pages = list((student_home / TOY / "feedback").rglob("*.html"))
    assert pages, "the student received no feedback"
    text = pages[0].read_text()
    assert "Score" in text or "score" in text
    for line in secret_lines(read_notebook(course / "solutions" / TOY / f"{TOY}.ipynb"), "hidden"):
        assert line not in text


def test_submitted_timestamp_reaches_the_gradebook(tmp_path):
    """A timestamp.txt beside a submitted notebook (nbgrader's layout) is kept: late penalties work."""
    course = make_toy_course(tmp_path / "course")
    release.generate([TOY], root=course)
    folder = tmp_path / "submitted" / "ada" / TOY
    folder.mkdir(parents=True)
    shutil.copyfile(course / "exercises" / TOY / f"{TOY}.ipynb", folder / f"{TOY}.ipynb")
    (folder / "timestamp.txt").write_text("2030-01-02 03:04:05.000000 UTC")
    out = tmp_path / "out"
    grade(tmp_path / "submitted", out, jobs=1, timeout=60, root=course, progress=False)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        submission = gb.find_submission(TOY, "ada")
        assert submission.timestamp is not None and submission.timestamp.year == 2030


def test_plain_nbgrader_feedback_is_safe_with_the_course_config(tmp_path):
    """nbgrader_config.py makes `nbgrader autograde` survive a crash and `nbgrader generate_feedback`
    (the formgrader's button too) clear hidden tests from sources and tracebacks."""
    course = make_toy_course(tmp_path / "course")
    exchange = tmp_path / "exchange"
    release.generate([TOY], root=course, db_path=course / "gradebook.db")
    released = json.loads((course / "exercises" / TOY / f"{TOY}.ipynb").read_text())
    for cell in released["cells"]:
        if cell["metadata"]["nbgrader"]["grade_id"] == "square_solution":
            cell["source"] = "import os\ndef square(x):\n    os._exit(1)"
    folder = course / "submitted" / "ada" / TOY
    folder.mkdir(parents=True)
    (folder / f"{TOY}.ipynb").write_text(json.dumps(released))
    nbgrader("autograde", TOY, cwd=course, exchange=exchange)
    nbgrader("generate_feedback", TOY, cwd=course, exchange=exchange)
    page = (course / "feedback" / "ada" / TOY / f"{TOY}.html").read_text()
    assert "KernelCrashed" in page
    for line in secret_lines(read_notebook(course / "solutions" / TOY / f"{TOY}.ipynb"), "hidden"):
        assert line not in page
