"""``course release``: every committed exercise is what nbgrader makes from its solution, and safe.

Safe: no solution code, no hidden test, every grade cell locked, checksums right, no gradebook in
exercises/ (see grader/release.py). The day tests call ``assert_release_matches`` too; this file
checks every assignment at once and checks the command itself on the toy course.
"""

import json

import pytest

from course.cli import main
from grader import release
from grader.hidden import PROJECT_ROOT
from grader.nbgrader_api import assignments
from grader.toy import TOY, make_toy_course

ASSIGNMENTS = assignments(PROJECT_ROOT)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_committed_exercise_is_the_release_of_its_solution(name):
    release.assert_release_matches(name, root=PROJECT_ROOT)


def test_no_gradebook_or_solution_files_in_exercises():
    exercises = PROJECT_ROOT / "exercises"
    offenders = [p for p in exercises.rglob("*") if p.is_file() and (p.suffix in (".db", ".sqlite")
                                                                       or "gradebook" in p.name)]
    assert not offenders
    for name in ASSIGNMENTS:
        assert sorted(p.name for p in (exercises / name).iterdir() if p.name != ".ipynb_checkpoints") == sorted(
            p.name for p in (PROJECT_ROOT / "solutions" / name).iterdir() if p.name != ".ipynb_checkpoints")


def test_gradebook_is_ignored_by_git():
    ignored = (PROJECT_ROOT / ".gitignore").read_text().splitlines()
    assert "gradebook.db" in ignored and "/grading/" in ignored


@pytest.fixture()
def toy_root(tmp_path, monkeypatch):
    root = make_toy_course(tmp_path / "course")
    monkeypatch.chdir(root)
    return root


def test_release_command_generates_verifies_and_checks(toy_root, capsys):
    assert main(["release"]) == 0
    assert (toy_root / "exercises" / TOY / f"{TOY}.ipynb").is_file()
    assert not (toy_root / "gradebook.db").exists()
    assert main(["release", "--check", "day00"]) == 0
    out = capsys.readouterr().out
    assert "day00_toy" in out and "ok" in out
    # a stale release (the solution changed afterwards) fails --check
    source = toy_root / "solutions" / TOY / f"{TOY}.ipynb"
    nb = json.loads(source.read_text())
    nb["cells"][1]["source"] = "# Toy, edited"
    source.write_text(json.dumps(nb))
    assert main(["release", "--check"]) == 1
    assert "differs" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no assignment matches"):
        main(["release", "day99"])


def test_release_refuses_leaks_through_markdown(toy_root, capsys):
    """Marker text nbgrader does not act on passes into the release: the verification catches it;
    hidden tests in a cell that is not a grade cell make nbgrader fail: a failed release."""
    source = toy_root / "solutions" / TOY / f"{TOY}.ipynb"
    nb = json.loads(source.read_text())
    nb["cells"][1]["source"] += "\nGrading adds HIDDEN TESTS."
    source.write_text(json.dumps(nb))
    assert main(["release"]) == 1
    assert "marker text 'HIDDEN TESTS'" in capsys.readouterr().out
    nb["cells"][1]["source"] += "\n### BEGIN HIDDEN TESTS\nassert square(-4) == 16\n### END HIDDEN TESTS"
    source.write_text(json.dumps(nb))
    assert main(["release"]) == 1
    assert "could not generate" in capsys.readouterr().out


def test_generate_rejects_unknown_assignment(toy_root):
    with pytest.raises(ValueError, match="known: day00_toy"):
        release.generate(["day42"], root=toy_root)


def test_release_check_ignores_checkpoints_but_not_stray_files(toy_root, capsys):
    """JupyterLab writes .ipynb_checkpoints/ beside a notebook it opens (the browser tests do, while
    other tests run): that is not a stale release. A file the release would not make is."""
    assert main(["release"]) == 0
    folder = toy_root / "exercises" / TOY
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / f"{TOY}-checkpoint.ipynb").write_text("{}")
    assert main(["release", "--check"]) == 0
    (folder / "notes.txt").write_text("left behind")
    assert main(["release", "--check"]) == 1
    assert "notes.txt" in capsys.readouterr().out
