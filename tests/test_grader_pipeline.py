"""``course release`` / ``course grade`` end to end on the toy course (grader/toy.py): every status,
feedback without hidden tests, CSVs, the merged gradebook, zips, resuming and idempotent reruns."""

import csv
import json
import shutil
import zipfile

import pytest

from grader import release
from grader.grade import grade
from grader.markers import read_notebook, secret_lines
from grader.report import summary_table
from grader.sample_cases import Case, build_submission
from grader.toy import ADD_ONE_SOLUTION, SQUARE_SOLUTION, TOY, make_toy_course


def _strip_markers(source):
    return "\n".join(line for line in source.splitlines() if "### " not in line)


GOOD = {"add_one_solution": _strip_markers(ADD_ONE_SOLUTION), "square_solution": _strip_markers(SQUARE_SOLUTION)}
# name -> (cells to replace, cells to delete, raw file text or None)
SUBMISSIONS = {
    "good": (GOOD, (), None),
    "blank": ({}, (), None),
    "crash": ({**GOOD, "square_solution": "import os\n\ndef square(x):\n    os._exit(1)"}, (), None),
    "loop": ({**GOOD, "square_solution": "def square(x):\n    while True:\n        pass"}, (), None),
    "edit": ({**GOOD, "square_solution": "def square(x):\n    return 0", "square_tests": "pass"}, (), None),
    "delete": ({**GOOD, "square_solution": "def square(x):\n    return 0"}, ("square_tests",), None),
    "broken": ({}, (), '{"cells": ['),
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A released toy course and a class of submissions, graded once for the module's tests."""
    base = tmp_path_factory.mktemp("toy")
    root = make_toy_course(base / "course")
    release.generate([TOY], root=root)
    released = json.loads((root / "exercises" / TOY / f"{TOY}.ipynb").read_text())
    subs = base / "submissions"
    for student, (cells, delete, raw) in SUBMISSIONS.items():
        path = subs / student / TOY / f"{TOY}.ipynb"
        path.parent.mkdir(parents=True)
        case = Case(student, TOY, path, "", {"status": "graded"}, cells, delete=delete)
        path.write_text(raw if raw is not None else json.dumps(build_submission(case, released)))
    (subs / "nobody").mkdir()                   # a student folder without the notebook
    out = base / "out"
    rows = grade(subs, out, jobs=2, timeout=10, root=root, progress=False)
    return {"root": root, "subs": subs, "out": out, "rows": {r["student"]: r for r in rows}}


def test_release_of_the_toy_is_clean_and_reproducible(toy):
    root = toy["root"]
    assert release.verify_release(TOY, root=root) == []
    release.assert_release_matches(TOY, root=root)
    assert not (root / "gradebook.db").exists(), "the release gradebook must stay out of the course folder"


def test_release_check_catches_leaks_and_unlocked_cells(toy, tmp_path):
    root = tmp_path / "course"
    shutil.copytree(toy["root"], root)
    path = root / "exercises" / TOY / f"{TOY}.ipynb"
    nb = json.loads(path.read_text())
    hidden = secret_lines(read_notebook(root / "solutions" / TOY / f"{TOY}.ipynb"), "hidden")[0]
    nb["cells"][5]["source"] += "\n" + hidden
    nb["cells"][3]["metadata"]["nbgrader"]["locked"] = False
    path.write_text(json.dumps(nb))
    (root / "exercises" / "gradebook.db").write_text("")
    problems = "\n".join(release.verify_release(TOY, root=root))
    assert "hidden test line" in problems and "not locked" in problems and "checksum" in problems
    assert "gradebook" in problems
    with pytest.raises(AssertionError, match="out of date"):
        release.assert_release_matches(TOY, root=root)


def test_release_check_refuses_a_cell_that_needs_an_example():
    """Examples are not run when graded, so a later cell may not read a name only an example binds."""
    def cell(gid, source, **flags):
        meta = {"grade_id": gid, "locked": True, "grade": False, "solution": False, **flags}
        return {"cell_type": "code", "source": source, "metadata": {"nbgrader": meta}}

    nb = {"cells": [cell("setup", "import numpy as np"), cell("f_launcher", "def f(x):\n    return x"),
                    cell("f_visible_test", "x = np.ones(3)\nhelper = f(x)\nprint(helper)"),
                    cell("f_matches", "y = np.ones(2)\nassert f(y).sum() == 2\nassert helper is not None",
                         grade=True, points=1)]}
    problems = release._check_examples("demo", nb)
    assert len(problems) == 1 and "reads 'helper', which only the example cell f_visible_test binds" in problems[0]
    nb["cells"][3]["source"] = "helper = f(np.ones(2))\nassert helper.sum() == 2"     # binds its own
    assert release._check_examples("demo", nb) == []


def test_examples_are_not_run_when_graded(toy):
    from grader.execute import EXAMPLE_NOTE

    graded = json.loads((toy["out"] / "autograded" / "good" / TOY / f"{TOY}.ipynb").read_text())
    example = next(c for c in graded["cells"] if c["metadata"]["nbgrader"]["grade_id"] == "add_one_example")
    assert ["".join(o.get("text", "")) for o in example["outputs"]] == [EXAMPLE_NOTE]


@pytest.mark.parametrize("student, status, points, detail", [
    ("good", "graded", 4, ""),
    ("blank", "graded", 0, ""),
    ("crash", "kernel_crashed", 3, "kernel crashed in square_tests"),
    ("loop", "timed_out", 3, "timed out in square_tests"),
    ("edit", "tampered", 3, "edited locked cells (the originals were graded): square_tests"),
    ("delete", "tampered", 3, "deleted test cells (scored 0): square_tests"),
    ("broken", "invalid_json", 0, "not valid JSON"),
    ("nobody", "missing", 0, "no notebook"),
])
def test_every_submission_gets_a_status_and_its_points(toy, student, status, points, detail):
    row = toy["rows"][student]
    assert (row["status"], row["points"]) == (status, points), row["details"]
    assert detail in " | ".join(row["details"])
    assert row["max_points"] == 4


def test_csv_files_and_summary(toy):
    out = toy["out"]
    with open(out / "grades.csv") as f:
        grades = {r["student"]: r for r in csv.DictReader(f)}
    assert set(grades) == set(toy["rows"]) and all(r["status"] for r in grades.values())
    assert grades["crash"]["status"] == "kernel_crashed" and grades["crash"]["points"] == "3"
    with open(out / "lms.csv") as f:
        lms = list(csv.DictReader(f))
    assert {r["student"]: r["total"] for r in lms}["good"] == "4"
    with open(out / "grades_by_cell.csv") as f:
        assert len(list(csv.DictReader(f))) == 3 * len(toy["rows"])
    table = summary_table(list(toy["rows"].values()))
    assert "day00_toy" in table and "needs a look" in table and "crash/day00_toy: kernel_crashed" in table


def test_merged_gradebook_has_every_graded_submission(toy):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{toy['out'] / 'gradebook.db'}") as gb:
        scores = {s.student.id: s.score for s in gb.assignment_submissions(TOY)}
        flagged = {s.student.id for s in gb.assignment_submissions(TOY) if any(n.flagged for n in s.notebooks)}
    assert scores["good"] == 4 and scores["crash"] == 3
    assert "broken" not in scores and "nobody" not in scores
    assert {"crash", "loop", "edit", "delete"} <= flagged and "good" not in flagged


def test_feedback_is_written_and_shows_no_hidden_test(toy):
    root, out = toy["root"], toy["out"]
    hidden = secret_lines(read_notebook(root / "solutions" / TOY / f"{TOY}.ipynb"), "hidden")
    assert hidden, "the toy must have hidden lines for this test to mean anything"
    for student in ("good", "blank", "crash", "loop", "edit", "delete"):
        html_text = (out / "feedback" / student / TOY / f"{TOY}.html").read_text()
        handback = (out / "feedback" / student / TOY / f"{TOY}.ipynb").read_text()
        for line in hidden:
            assert line not in html_text and json.dumps(line)[1:-1] not in handback, (student, line)
    assert "could not be read" in (out / "feedback" / "broken" / TOY / f"{TOY}.html").read_text()
    # the instructor's copy keeps the hidden tests (this is why autograded/ is secret)
    assert hidden[0] in (out / "autograded" / "good" / TOY / f"{TOY}.ipynb").read_text()


def test_rerun_skips_graded_and_regrades_changed_submissions(toy, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(toy["out"], out)
    good = toy["subs"] / "good" / TOY / f"{TOY}.ipynb"
    before = {s: json.loads((out / "results" / s / f"{TOY}.json").read_text()) for s in ("good", "blank")}
    changed = tmp_path / "subs"
    shutil.copytree(toy["subs"], changed)
    (changed / "blank" / TOY / f"{TOY}.ipynb").write_text(good.read_text())   # blank resubmits a good one
    rows = {r["student"]: r for r in grade(changed, out, jobs=2, timeout=10, root=toy["root"], progress=False)}
    assert rows["good"]["seconds"] == before["good"]["seconds"], "an unchanged submission is not regraded"
    assert rows["blank"]["points"] == 4, "a changed submission is regraded"
    assert rows["crash"]["status"] == "kernel_crashed"


def test_a_template_built_once_is_reused_until_the_solutions_change(toy, tmp_path, monkeypatch):
    import grader.grade as grading

    built = []
    real = release.generate
    monkeypatch.setattr(release, "generate", lambda *a, **k: built.append(a) or real(*a, **k))
    grading._prepare_template(toy["root"], [TOY], tmp_path / "again")     # the fixture's grade built it
    assert built == []
    made = tmp_path / "again" / "template"
    assert (made / "gradebook.db").read_bytes() == (toy["out"] / "template" / "gradebook.db").read_bytes()
    assert (made / "release" / TOY / f"{TOY}.ipynb").read_text() == (
        toy["out"] / "template" / "release" / TOY / f"{TOY}.ipynb").read_text()
    root = tmp_path / "course"
    shutil.copytree(toy["root"], root)
    grading._prepare_template(root, [TOY], tmp_path / "other_root")
    assert len(built) == 1, "another course folder gets its own template"
    solution = root / "solutions" / TOY / f"{TOY}.ipynb"
    solution.write_text(solution.read_text().replace("Toy", "Toy, edited", 1))
    grading._prepare_template(root, [TOY], tmp_path / "edited")
    assert len(built) == 2, "an edited solution is released again"


def test_zip_of_lms_style_names(toy, tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(toy["subs"] / "good" / TOY / f"{TOY}.ipynb", f"{TOY}_grace_1_original.ipynb")
        z.writestr(f"{TOY}_hal_1_original.ipynb", "not json")
    rows = {r["student"]: r for r in grade(archive, tmp_path / "out", jobs=1, timeout=10, root=toy["root"],
                                           progress=False)}
    assert (rows["grace"]["status"], rows["grace"]["points"]) == ("graded", 4)
    assert rows["hal"]["status"] == "invalid_json"


def test_grade_rejects_bad_arguments(toy, tmp_path):
    with pytest.raises(ValueError, match="jobs"):
        grade(toy["subs"], tmp_path, jobs=0, root=toy["root"])
    with pytest.raises(ValueError, match="device"):
        grade(toy["subs"], tmp_path, device="tpu", root=toy["root"])
    with pytest.raises(ValueError, match="folder or a .zip"):
        grade(tmp_path / "nothing.txt", tmp_path, root=toy["root"])


def test_grade_command_resumes_and_prints_the_summary(toy, tmp_path, monkeypatch, capsys):
    from course.cli import main

    out = tmp_path / "out"
    shutil.copytree(toy["out"], out)
    monkeypatch.chdir(toy["root"])
    assert main(["grade", str(toy["subs"]), "--out", str(out), "--jobs", "2", "--timeout", "10"]) == 0
    printed = capsys.readouterr()
    assert "already graded" in printed.err
    assert "crash/day00_toy: kernel_crashed" in printed.out and "grades.csv" in printed.out
