"""The catalog of sample submissions (grader/samples/) graded through the real pipeline.

Every case must get exactly its EXPECT; then every feedback page and handed-back notebook the run
wrote is searched for every hidden-test line of the solution notebooks. All cases are graded once
per session (cases with the same timeout in one run, 2 at a time); ``-k day01`` grades only the
selected cases. Slow (about 15 s of simulator per case on 2 cores): ``pytest -m "not slow"``
skips it.
"""

import html
import json
import pathlib
import re

import pytest

from grader.hidden import PROJECT_ROOT
from grader.markers import read_notebook, secret_lines
from grader.sample_cases import find_cases, mismatches, run_cases

CASES = find_cases()
RELEASED = {a: PROJECT_ROOT / "exercises" / a / f"{a}.ipynb" for a in {c.assignment for c in CASES}}


def _case_id(case):
    return f"{case.path.parent.name}/{case.name}"


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """Grade the selected cases once; returns (rows by student, the run's folder)."""
    selected = {item.callspec.params["case"].student for item in request.session.items
                if getattr(item, "callspec", None) and "case" in item.callspec.params}
    cases = [c for c in CASES if c.student in selected] or CASES
    missing = sorted({c.assignment for c in cases if not RELEASED[c.assignment].is_file()})
    if missing:
        pytest.fail(f"no released exercise for {missing}: run `course release`")
    workdir = tmp_path_factory.mktemp("catalog")
    return run_cases(cases, workdir, root=PROJECT_ROOT, jobs=2), workdir


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_sample_submission_gets_its_expected_score(graded, case):
    rows, _ = graded
    release = json.loads(RELEASED[case.assignment].read_text(encoding="utf-8"))
    problems = mismatches(case, rows.get(case.student), release)
    assert not problems, f"{_case_id(case)} ({case.doc.splitlines()[0] if case.doc else ''}):\n  " + "\n  ".join(problems)


def visible_text(path: pathlib.Path) -> str:
    """What a reader of a feedback file sees: HTML without tags, entities decoded; JSON decoded."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".html":
        return html.unescape(re.sub(r"<[^>]+>", "", raw))
    nb = json.loads(raw)
    parts = []

    def add(value):
        parts.append("".join(value) if isinstance(value, list) else str(value))

    for cell in nb["cells"]:
        add(cell["source"])
        for output in cell.get("outputs", []):
            for key in ("text", "ename", "evalue"):
                add(output.get(key, ""))
            parts.extend(output.get("traceback", []))
            for value in output.get("data", {}).values():
                add(value)
    return "\n".join(parts)


def leaks(path: pathlib.Path, hidden: list[str], submitted: set[str]) -> list[str]:
    """Hidden lines visible in a feedback file, except lines the student wrote themselves."""
    text = visible_text(path)
    return [line for line in hidden if line not in submitted and line in text]


def _hidden_lines(assignment):
    return secret_lines(read_notebook(PROJECT_ROOT / "solutions" / assignment / f"{assignment}.ipynb"), "hidden")


def _submitted_lines(workdir, student, assignment):
    found = list(workdir.glob(f"submissions/*/{student}/{assignment}/{assignment}.ipynb"))
    if not found:
        return set()
    try:
        nb = json.loads(found[0].read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return set()
    return {line.strip() for c in nb["cells"] for line in "".join(c["source"]).splitlines()}


@pytest.mark.slow
def test_feedback_never_shows_a_hidden_test_line(graded):
    rows, workdir = graded
    files = sorted(workdir.glob("out/*/feedback/*/*/*.html")) + sorted(workdir.glob("out/*/feedback/*/*/*.ipynb"))
    assert files, "the catalog run wrote no feedback"
    hidden = {a: _hidden_lines(a) for a in {p.parent.name for p in files}}
    found = []
    for path in files:
        student, assignment = path.parent.parent.name, path.parent.name
        for line in leaks(path, hidden[assignment], _submitted_lines(workdir, student, assignment)):
            found.append(f"{path.relative_to(workdir)}: {line}")
    assert not found, "hidden test lines in feedback:\n  " + "\n  ".join(found[:20])


@pytest.mark.slow
def test_the_leak_search_finds_hidden_lines_in_unsanitized_feedback(graded, tmp_path):
    """nbgrader's default feedback (plain HTML of the autograded notebook) must be caught."""
    from nbconvert import HTMLExporter

    _, workdir = graded
    autograded = sorted(workdir.glob("out/*/autograded/*/*/*.ipynb"))
    assert autograded
    path = autograded[0]
    body, _ = HTMLExporter().from_filename(str(path))
    page = tmp_path / "unsanitized.html"
    page.write_text(body, encoding="utf-8")
    assert leaks(page, _hidden_lines(path.parent.name), set()), "the leak search missed hidden tests shown as source"
