"""The catalog of sample submissions (grader/samples/) graded through the real pipeline.

Every case must get exactly its EXPECT; then every feedback page and handed-back notebook the run
wrote is searched for every hidden-test line of the solution notebooks. The cases are graded once
per group (a day's cases, or the course-wide cases of ``_course/``: one grading run, 2 at a time, a
case's TIMEOUT for that case alone), so each day's grading time counts for that day and the course-wide
cases' for the course; ``-k day01`` or ``--day 01`` grades only the selected cases. Slow (about 15 s
of simulator per case on 2 cores): ``pytest -m "not slow"`` skips it.
"""

import html
import json
import pathlib
import re

import pytest

from grader.hidden import PROJECT_ROOT
from grader.markers import read_notebook, secret_lines
from grader.sample_cases import COURSE_WIDE, edit_cell, find_cases, kernel_cell, mismatches, run_cases

CASES = find_cases()
ASSIGNMENTS = sorted({c.assignment for c in CASES})
RELEASED = {a: PROJECT_ROOT / "exercises" / a / f"{a}.ipynb" for a in ASSIGNMENTS}


def _case_id(case):
    return f"{case.path.parent.name}/{case.name}"


def group_of(case) -> str:
    """The grading run a case belongs to: its day, or ``_course`` for the course-wide cases."""
    return COURSE_WIDE if case.path.parent.name == COURSE_WIDE else case.assignment


GROUPS = sorted({group_of(c) for c in CASES})


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """Grade the selected cases, one group (a day's cases, or the course-wide ones) at a time on first need.

    Returns ``grade(group) -> (rows by student, the run's folder)``. Grading per group puts each
    day's grading time on that day's tests, and the course-wide cases' on course-wide tests.
    """
    selected = {item.callspec.params["case"].student for item in request.session.items
                if getattr(item, "callspec", None) and "case" in item.callspec.params}
    cases = [c for c in CASES if c.student in selected] or CASES
    missing = sorted({c.assignment for c in cases if not RELEASED[c.assignment].is_file()})
    if missing:
        pytest.fail(f"no released exercise for {missing}: run `course release`")
    runs = {}

    def grade(group):
        if group not in runs:
            workdir = tmp_path_factory.mktemp(f"catalog-{group.strip('_')}")
            mine = [c for c in cases if group_of(c) == group]
            runs[group] = run_cases(mine, workdir, root=PROJECT_ROOT, jobs=2), workdir
        return runs[group]

    return grade


def test_edits_replace_lines_found_exactly_once_keeping_their_indentation():
    source = "def f(x):\n    if x:\n        y = 1\n    if x:\n        return y\n"
    assert edit_cell(source, [("y = 1", "y = 2\nz = 3")]) == "def f(x):\n    if x:\n        y = 2\n        z = 3\n    if x:\n        return y\n"
    assert edit_cell(source, [("""
        if x:
            return y
        """, "")]) == "def f(x):\n    if x:\n        y = 1\n"
    with pytest.raises(ValueError, match=r"'if x:' occur 2 times"):
        edit_cell(source, [("if x:", "if not x:")], where="f")
    with pytest.raises(ValueError, match="occur 0 times"):
        edit_cell(source, [("y = 10", "y = 2")], where="f")


@pytest.mark.parametrize("case", [c for c in CASES if c.path.name == "correct_ours.py"], ids=_case_id)
def test_correct_samples_are_the_kernels_of_the_course(case):
    """Every cell of ``correct_ours`` is a kernel of kernels/, so the sample cannot drift from it."""
    import importlib
    import inspect

    sources = {}
    for name in ("elementwise", "reduction", "attention", "softmax", "gemm", "flash_attention", "kv_cache",
                 "paged_attention", "gqa_attention", "low_precision_attention", "low_precision_attention.fp8",
                 "quantized_gemv", "quantized_gemm", "llama_layers"):
        module = importlib.import_module(f"kernels.{name}")
        sources.update({kernel_cell(obj): name for obj in vars(module).values() if hasattr(obj, "py_func")})

    def made_of_kernels(cell: str) -> bool:
        """The cell is one kernel of kernels/, or several (device functions first), blank lines apart."""
        rest = cell
        while rest:
            match = next((source for source in sources if rest.startswith(source)), None)
            if match is None:
                return False
            rest = rest[len(match):].lstrip("\n")
        return True

    from kernels.block_manager import BlockManager
    from kernels.decode_step import decode_step

    # the host answers: day 6's allocator class, day 10's decode step
    host = (inspect.getsource(BlockManager), inspect.getsource(decode_step))
    assert case.cells and all(made_of_kernels(cell) or cell in host for cell in case.cells.values())


def test_a_wrong_sample_whose_edit_no_longer_applies_fails_to_load(tmp_path, monkeypatch):
    import grader.sample_cases as sample_cases

    day = tmp_path / "day05_flash_attention"
    day.mkdir()
    (day / "correct_ours.py").write_text(
        "EXPECT = {'status': 'graded'}\nCELLS = {'flash_kernel': 'def k():\\n    n_valid = n_tile\\n'}\n")
    (day / "wrong.py").write_text(
        "BASE = 'correct_ours'\nEXPECT = {'status': 'graded'}\n"
        "EDITS = {'flash_kernel': [('n_valid = min(n_tile, row - kv_start + 1)', 'n_valid = 0')]}\n")
    (day / "wrong_cell.py").write_text(
        "BASE = 'correct_ours'\nEXPECT = {'status': 'graded'}\nEDITS = {'no_such_cell': [('a', 'b')]}\n")
    monkeypatch.setattr(sample_cases, "SAMPLES_DIR", tmp_path)
    with pytest.raises(ValueError, match="wrong.py, cell flash_kernel: the line"):
        sample_cases.load_case(day / "wrong.py")
    with pytest.raises(ValueError, match="no_such_cell"):
        sample_cases.load_case(day / "wrong_cell.py")


# The wrong samples of each day: neither correct nor a cheat (a cheat is not a classic mistake).
WRONG_SAMPLES = [c for c in CASES
                 if c.path.parent.name != COURSE_WIDE and not c.name.startswith(("correct", "cheating"))]


def _sample_cells(assignment: str, name: str) -> dict:
    return next(c.cells for c in CASES if c.assignment == assignment and c.name == name
                and c.path.parent.name == assignment)


@pytest.mark.parametrize("case", WRONG_SAMPLES, ids=_case_id)
def test_a_wrong_sample_makes_mistakes_of_its_day_table(case):
    """A wrong sample keeps its EDITS (the grader's data does not read tests/), and each of its cells that is
    neither ours (``correct_ours``) nor the written-differently answer (``correct_alternative``) is the
    mistakes of the day's table (``tests/mistakes/dayNN.py``) that name the sample, written into the cell
    they change: so the table is where a day's classic mistakes are, the samples' too."""
    from mistakes import of_day

    ours, alternative = (_sample_cells(case.assignment, name) for name in ("correct_ours", "correct_alternative"))
    for gid, cell in case.cells.items():
        if cell in (ours.get(gid), alternative.get(gid)):
            continue
        mistakes = [m for m in of_day(case.assignment) if case.name in m.samples and m.cell == gid]
        assert mistakes, (f"{case.name}, cell {gid}: its mistake is not in the day's table; add it to "
                          f"tests/mistakes/{case.assignment[:5]}.py with samples=({case.name!r},)")
        bases = {m.sample_base or "correct_ours" for m in mistakes}
        assert len(bases) == 1, f"{case.name}, cell {gid}: its mistakes change the cells of {sorted(bases)}"
        made = _sample_cells(case.assignment, bases.pop())[gid]
        for mistake in mistakes:
            made = mistake.apply(made, where=f"{case.name}'s base, cell {gid}")
        assert cell == made, (f"{case.name}, cell {gid}: the table's mistakes {[m.label for m in mistakes]} "
                              f"make another cell")


def test_every_sample_the_tables_name_makes_its_mistake():
    """Each sample a mistake of the tables names exists, and the mistake's cell is not a correct one there."""
    from mistakes import ALL, assignment_of

    wrong = {(c.assignment, c.name): c for c in WRONG_SAMPLES}
    for mistake in ALL:
        assignment = assignment_of(mistake.label)
        for name in mistake.samples:
            assert (assignment, name) in wrong, f"{mistake.label}: no wrong sample {assignment}/{name}"
            cell = wrong[assignment, name].cells.get(mistake.cell)
            correct = [_sample_cells(assignment, base).get(mistake.cell)
                       for base in ("correct_ours", "correct_alternative")]
            assert cell is not None and cell not in correct, f"{mistake.label}: {name} does not change {mistake.cell}"


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


def _errors_in_graded_cells(workdir, case) -> list[str]:
    """The last line of each error a grade cell of the case's autograded notebook shows."""
    found = list(workdir.glob(f"out/*/autograded/{case.student}/{case.assignment}/{case.assignment}.ipynb"))
    if not found:
        return []
    errors = []
    for cell in json.loads(found[0].read_text(encoding="utf-8"))["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if gid and output.get("output_type") == "error":
                text = f"{output.get('ename')}: {output.get('evalue', '')}".strip().splitlines()
                errors.append(f"{gid} raised {' / '.join(text[:6])[:600]}")
    return errors


# ---------------------------------------------------------------------------------------------
# The catalog: one class per grading run, so `make test` (pytest-xdist, --dist loadscope) gives
# each run to one worker and spreads the runs over the workers.
# ---------------------------------------------------------------------------------------------

def _catalog_class(group: str) -> type:
    cases = [c for c in CASES if group_of(c) == group]

    class Catalog:
        @pytest.mark.slow
        @pytest.mark.parametrize("case", cases, ids=_case_id)
        def test_sample_submission_gets_its_expected_score(self, graded, case):
            rows, workdir = graded(group)
            release = json.loads(RELEASED[case.assignment].read_text(encoding="utf-8"))
            problems = mismatches(case, rows.get(case.student), release)
            if problems:
                problems += _errors_in_graded_cells(workdir, case)
            assert not problems, (f"{_case_id(case)} ({case.doc.splitlines()[0] if case.doc else ''}):\n  "
                                  + "\n  ".join(problems))

        @pytest.mark.slow
        def test_feedback_never_shows_a_hidden_test_line(self, graded):
            _, workdir = graded(group)
            files = sorted(workdir.glob("out/*/feedback/*/*/*.html")) + sorted(workdir.glob("out/*/feedback/*/*/*.ipynb"))
            assert files, f"the catalog run of {group} wrote no feedback"
            found = []
            for path in files:
                student, assignment = path.parent.parent.name, path.parent.name
                for line in leaks(path, _hidden_lines(assignment), _submitted_lines(workdir, student, assignment)):
                    found.append(f"{path.relative_to(workdir)}: {line}")
            assert not found, "hidden test lines in feedback:\n  " + "\n  ".join(found[:20])

        if group == next(g for g in GROUPS if g != COURSE_WIDE):
            @pytest.mark.slow
            def test_the_leak_search_finds_hidden_lines_in_unsanitized_feedback(self, graded, tmp_path):
                """nbgrader's default feedback (plain HTML of the autograded notebook) must be caught."""
                from nbconvert import HTMLExporter

                _, workdir = graded(group)
                autograded = sorted(workdir.glob("out/*/autograded/*/*/*.ipynb"))
                assert autograded
                path = autograded[0]
                body, _ = HTMLExporter().from_filename(str(path))
                page = tmp_path / "unsanitized.html"
                page.write_text(body, encoding="utf-8")
                assert leaks(page, _hidden_lines(path.parent.name), set()), "the leak search missed hidden tests shown as source"

    name = "CourseWide" if group == COURSE_WIDE else "".join(part.title() for part in group.split("_"))
    Catalog.__name__ = Catalog.__qualname__ = f"TestCatalog{name}"
    if group != COURSE_WIDE:
        Catalog = getattr(pytest.mark, group[:5])(Catalog)     # its time counts for its day
    return Catalog


for _group in GROUPS:
    _class = _catalog_class(_group)
    globals()[_class.__name__] = _class
del _group, _class
