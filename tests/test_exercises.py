"""The exercise notebooks of every graded day (the table in ``days.py``), one set of tests.

For each day: the solution's kernels are the kernels of ``kernels/``; its launcher cells are the
course's launchers given the student's kernels; its grade cells open with a docstring and a visible
check, and sum to the day's points; ``exercises/`` is the release of ``solutions/``; and nbgrader's
Validate (the Python ``Validator``: ``nbgrader validate`` exits 0 even on failure) tells the truth:
it passes the solution and a correct answer, and fails the blank release and a wrong answer in the
grade cells the table names. The sample submissions of ``grader/samples/`` are graded by the
grader's own tests; here only their form is checked against the notebook.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import inspect
import multiprocessing
import pathlib
import types

import nbformat
import pytest

from days import DAYS, BY_NAME
from grader import markers
from grader.release import assert_release_matches
from grader.sample_cases import load_case

ROOT = pathlib.Path(__file__).resolve().parents[1]
ASSIGNMENTS = [day.assignment for day in DAYS]
CELL_TIMEOUT_S = 300


def _solution_path(name: str) -> pathlib.Path:
    return ROOT / "solutions" / name / f"{name}.ipynb"


def _release_path(name: str) -> pathlib.Path:
    return ROOT / "exercises" / name / f"{name}.ipynb"


def _cells_by_id(nb) -> dict:
    return {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): c for c in nb.cells}


def _grade_cells(nb) -> list:
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def _without_solution_markers(source: str) -> str:
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (markers.BEGIN_SOLUTION, markers.END_SOLUTION))


def _kernels_object(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(f"kernels.{module}"), name)


def _source(function) -> str:
    return inspect.getsource(getattr(function, "py_func", None) or function).rstrip("\n")


def _cell_code(dotted) -> str:
    """The source a solution cell holds: one function of kernels/, or several two blank lines apart."""
    names = (dotted,) if isinstance(dotted, str) else dotted
    return "\n\n\n".join(_source(_kernels_object(name)) for name in names)


# ------------------------------------------------------------------------ one source of truth

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_kernels_are_the_kernels_of_kernels(assignment):
    """Each solution cell, markers aside, is the source of its kernel in kernels/."""
    day = BY_NAME[assignment]
    cells = _cells_by_id(nbformat.read(_solution_path(assignment), as_version=4))
    solutions = {gid for gid, c in cells.items() if c.metadata.get("nbgrader", {}).get("solution")}
    assert solutions == set(day.solution_code), "the table in tests/days.py must list every solution cell"
    for grade_id, dotted in day.solution_code.items():
        assert not cells[grade_id].metadata["nbgrader"].get("grade"), f"solution cell {grade_id} is also a grade cell"
        assert _without_solution_markers(cells[grade_id].source) == _cell_code(dotted), (
            f"cell {grade_id} differs from kernels.{dotted}")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_launcher_is_the_course_launcher_given_the_students_kernel(assignment):
    """A launcher cell forwards every argument to its launcher in kernels/, adding the notebook's kernels.

    Run against a stand-in for kernels/ that records the call; the real launcher must take each
    keyword, with the course's kernel of the same name as its default.
    """
    day = BY_NAME[assignment]
    cells = _cells_by_id(nbformat.read(_solution_path(assignment), as_version=4))
    for launcher in day.launchers:
        calls = []
        recorder = lambda *args, **options: calls.append((args, options)) or "returned"  # noqa: E731
        stand_in = types.SimpleNamespace(**{launcher.module: types.SimpleNamespace(**{launcher.launcher: recorder})})
        students = {name: object() for name in launcher.kernels.values()}
        namespace = {"kernels": stand_in, **students}
        exec(cells[launcher.cell].source, namespace)
        assert namespace[launcher.name]("first", 2, out="given") == "returned", launcher.cell
        expected = {"out": "given", **{keyword: students[name] for keyword, name in launcher.kernels.items()}}
        assert calls == [(("first", 2), expected)], (
            f"cell {launcher.cell} must call kernels.{launcher.module}.{launcher.launcher} with every argument it "
            f"gets and the notebook's kernels {launcher.kernels}; it called {calls}")
        course_launcher = getattr(importlib.import_module(f"kernels.{launcher.module}"), launcher.launcher)
        parameters = inspect.signature(course_launcher).parameters
        for keyword, kernel_name in launcher.kernels.items():
            assert keyword in parameters, f"kernels.{launcher.module}.{launcher.launcher} takes no {keyword}="
            default = parameters[keyword].default
            assert getattr(getattr(default, "py_func", default), "__name__", None) == kernel_name, (
                f"kernels.{launcher.module}.{launcher.launcher}({keyword}=...) defaults to {default!r}, "
                f"not the course's {kernel_name}")


@pytest.mark.parametrize("assignment", [d.assignment for d in DAYS if d.constants])
def test_given_constants_are_those_of_kernels(assignment):
    day = BY_NAME[assignment]
    cells = _cells_by_id(nbformat.read(_solution_path(assignment), as_version=4))
    for cell_id, module in day.constants.items():
        namespace = {}
        exec(cells[cell_id].source, namespace)
        names = [name for name in namespace if name.isupper()]
        assert names, f"cell {cell_id} defines no constant"
        for name in names:
            assert namespace[name] == getattr(importlib.import_module(f"kernels.{module}"), name), (cell_id, name)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_grade_cells_open_with_a_docstring_and_a_visible_check_and_total_the_points(assignment):
    day = BY_NAME[assignment]
    grades = _grade_cells(nbformat.read(_solution_path(assignment), as_version=4))
    assert sum(c.metadata["nbgrader"]["points"] for c in grades) == day.points
    for cell in grades:
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        first, _, rest = cell.source.partition("\n")
        assert first.startswith('"""') and first.endswith('"""') and len(first) > 6, grade_id
        assert markers.BEGIN_HIDDEN in cell.source, grade_id
        visible = rest.split(markers.BEGIN_HIDDEN)[0]
        assert any(line.strip() and not line.lstrip().startswith("#") for line in visible.splitlines()), (
            f"grade cell {grade_id} has no visible check: Validate would pass a blank answer")
        if day.every_hidden_test_uses_pristine:
            assert "pristine(" in cell.source, grade_id


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it reads as variables), anywhere in the cell."""
    import ast

    bound, read = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


def grade_cells_needing_earlier_grade_cells(nb) -> dict[str, dict[str, str]]:
    """grade_id -> {name: the earlier grade cell that binds it} for every grade cell that reads a name only
    an earlier grade cell binds (not the cell itself, nor any other cell before it)."""
    import builtins

    given, from_grade, found = set(dir(builtins)), {}, {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        bound, read = _names(_without_solution_markers(cell.source))
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("grade"):
            needed = {name: from_grade[name] for name in read - bound - given if name in from_grade}
            if needed:
                found[grade_id] = needed
            for name in bound - given:
                from_grade.setdefault(name, grade_id)
        else:
            given |= bound
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_grade_cell_needs_what_an_earlier_grade_cell_defines(assignment):
    """A grade cell stops at its first failing line: its visible check failing, or a timeout and the grader's
    restart, leaves undefined whatever its hidden tests define after that line. So no grade cell may read a
    name only an earlier grade cell binds (shared harnesses load ``grader.hidden_helpers`` themselves), and
    every later exercise is graded as if the earlier one had passed."""
    nb = nbformat.read(_solution_path(assignment), as_version=4)
    assert grade_cells_needing_earlier_grade_cells(nb) == {}


def test_the_rule_of_self_contained_grade_cells_finds_a_shared_helper():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy as np\nx = 1"),
        nbformat.v4.new_code_cell("check_a()\ndef helper(n):\n    return n + x\nchk = 2",
                                  metadata={"nbgrader": {"grade": True, "grade_id": "a"}}),
        nbformat.v4.new_code_cell("def own(y):\n    return y\nassert own(helper(chk)) == np.int64(3)",
                                  metadata={"nbgrader": {"grade": True, "grade_id": "b"}})])
    assert grade_cells_needing_earlier_grade_cells(nb) == {"b": {"helper": "a", "chk": "a"}}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_exercise_is_the_release_of_the_solution(assignment):
    assert_release_matches(assignment)


@pytest.mark.parametrize("assignment", [d.assignment for d in DAYS if (ROOT / "grader" / "samples" / d.assignment).is_dir()])
def test_samples_name_every_grade_cell_and_only_solution_cells(assignment):
    cells = _cells_by_id(nbformat.read(_solution_path(assignment), as_version=4))
    points = {gid: c.metadata["nbgrader"]["points"] for gid, c in cells.items()
              if c.metadata.get("nbgrader", {}).get("grade")}
    solutions = {gid for gid, c in cells.items() if c.metadata.get("nbgrader", {}).get("solution")}
    paths = sorted((ROOT / "grader" / "samples" / assignment).glob("*.py"))
    names = [p.stem for p in paths]
    assert {"correct_ours", "correct_alternative"} <= set(names), names
    assert any(n.startswith("cheating") for n in names) and any("wrong" in n for n in names), names
    for path in paths:
        case = load_case(path)
        assert case.doc and case.expect["status"] in ("graded", "tampered", "course_kernel"), path.name
        assert set(case.expect["points"]) == set(points), path.name
        assert all(0 <= got <= points[gid] for gid, got in case.expect["points"].items()), path.name
        assert set(case.cells) <= solutions, path.name


# ------------------------------------------------------------------------ Validate tells the truth

def _answer(assignment: str, answer: str):
    """The notebook a student would validate: the release, blank or with the solution's cells
    (``correct``) or with the table's mistakes in them (``wrong``). The correct answer's grade cells
    also get their hidden tests back, as the grader runs them. Cells after the last grade cell cannot
    change a grade and are left out of the wrong answer, to keep the run short."""
    day = BY_NAME[assignment]
    nb = nbformat.read(_release_path(assignment), as_version=4)
    if answer == "blank":
        return nb
    solution = _cells_by_id(nbformat.read(_solution_path(assignment), as_version=4))
    answers = {gid: _without_solution_markers(solution[gid].source) for gid in day.solution_code}
    if answer == "correct":
        answers.update({gid: solution[gid].source for gid, cell in solution.items()
                        if cell.metadata["nbgrader"].get("grade") and not cell.metadata["nbgrader"].get("solution")})
    if answer == "wrong":
        for mutation in day.wrong:
            assert mutation.old in answers[mutation.cell], (
                f"the wrong answer of {assignment} no longer applies to cell {mutation.cell}: {mutation.old!r}")
            answers[mutation.cell] = answers[mutation.cell].replace(mutation.old, mutation.new)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    if answer == "correct":
        from nbgrader.utils import compute_checksum

        for cell in nb.cells:           # a locked cell's checksum is of its source: the hidden tests' too
            if "checksum" in cell.metadata.get("nbgrader", {}) and "### BEGIN HIDDEN TESTS" in cell.source:
                cell.metadata.nbgrader.checksum = compute_checksum(cell)
    if answer == "wrong":
        last_grade = max(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
        nb.cells = nb.cells[:last_grade + 1]
    return nb


def _validate(path: pathlib.Path):
    """nbgrader's Validator on ``path``: ``(results, executed notebook)``."""
    from nbgrader.validator import Validator
    from traitlets.config import Config

    class KeepingValidator(Validator):
        def _preprocess(self, nb):
            self.executed = super()._preprocess(nb)
            return self.executed

    from grader.autograde import KERNEL_START_ATTEMPTS, kernel_did_not_start

    config = Config()
    config.Execute.timeout = CELL_TIMEOUT_S
    config.Execute.startup_timeout = 300      # a kernel starting while both CI cores are busy
    for attempt in range(1, KERNEL_START_ATTEMPTS + 1):
        validator = KeepingValidator(config=config)
        try:
            return validator.validate(str(path)), validator.executed
        except RuntimeError as exc:        # the kernel never started (a port taken meanwhile): nothing ran yet
            if attempt == KERNEL_START_ATTEMPTS or not kernel_did_not_start({"error": str(exc)}):
                raise


def _failed_grade_ids(results, nb) -> set[str]:
    failed_sources = {item["source"] for item in results.get("failed", [])}
    return {c.metadata["nbgrader"]["grade_id"] for c in _grade_cells(nb) if c.source.strip() in failed_sources}


def _errors(nb) -> list:
    return [(c.get("id"), o.ename, o.evalue[:300]) for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]


ANSWERS = ("correct", "wrong", "blank")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_validate_tells_the_truth(assignment, tmp_path):
    """Validate passes a correct answer, hidden tests included (the release with the solution's answers
    and, in each grade cell, the hidden tests the grader adds), and no cell of it raises; it fails every
    grade cell of the blank release, and the table's grade cells of a wrong answer.

    Each validation runs in a process of its own (nbgrader's Validator changes the working folder
    and the environment, which threads would share): the correct answer first, alone, so that the
    GPU compiles of its kernels are remembered (``course.gpu_compile.cache_dir``) before the other
    two, which share most of them, run at once.
    """
    day = BY_NAME[assignment]
    paths = {}
    for answer in ANSWERS:
        paths[answer] = tmp_path / f"{answer}_{assignment}.ipynb"
        nbformat.write(_answer(assignment, answer), paths[answer])
    processes = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(ANSWERS) - 1, mp_context=processes) as pool:
        outcomes = {"correct": pool.submit(_validate, paths["correct"]).result()}
        others = [answer for answer in ANSWERS if answer != "correct"]
        outcomes.update(zip(others, pool.map(_validate, [paths[answer] for answer in others])))

    for answer, (results, _) in outcomes.items():
        assert set(results) <= {"failed"}, f"{answer}: Validate did not judge the grade cells: {sorted(results)}"
    results, executed = outcomes["correct"]
    assert not results.get("failed"), (
        "Validate fails the correct answer (hidden tests included):\n"
        + "\n".join(r["raw_error"][-600:] for r in results["failed"]))
    assert not _errors(executed), "a cell of the correct answer raises"
    hidden = [c for c in _grade_cells(executed) if "### BEGIN HIDDEN TESTS" in c.source]
    assert hidden, "the correct answer was validated without its hidden tests"

    results, executed = outcomes["blank"]
    grade_ids = {c.metadata["nbgrader"]["grade_id"] for c in _grade_cells(executed)}
    passed = grade_ids - _failed_grade_ids(results, executed)
    assert not passed, f"Validate passes these grade cells of a blank notebook: {sorted(passed)}"

    results, executed = outcomes["wrong"]
    failed = _failed_grade_ids(results, executed)
    expected = grade_ids if day.wrong_fails is None else set(day.wrong_fails)
    assert failed == expected, (
        f"grade cells failed by the wrong answer ({'; '.join(m.why for m in day.wrong)}): {sorted(failed)}; "
        f"expected {sorted(expected)}")


# ------------------------------------------------------------------------ day 5's visible checks name the mistake

def _day05_kernel(*mutations):
    """attention_v4_flash_kernel of the solution notebook with (old, new) text changes, compiled here."""
    cells = _cells_by_id(nbformat.read(_solution_path("day05_flash_attention"), as_version=4))
    source = _without_solution_markers(cells["flash_kernel"].source)
    for old, new in mutations:
        assert old in source, old
        source = source.replace(old, new)
    namespace = {}
    exec(cells["setup_device"].source, namespace)
    exec(source, namespace)
    return namespace["attention_v4_flash_kernel"]


@pytest.mark.day05
def test_day05_visible_checks_name_masking_instead_of_skipping():
    from course import exercise_checks

    masking = _day05_kernel(("    if causal:\n        kv_end = min(kv_end, tile_start + TILE_Q, n_queries)\n", ""))
    exercise_checks.flash_matches_reference(masking, causal=True)      # right answers ...
    with pytest.raises(AssertionError, match="masking the key tiles above the diagonal is not enough: skip them"):
        exercise_checks.flash_skips_masked_tiles(masking)              # ... from the wrong work


@pytest.mark.day05
def test_day05_visible_checks_name_the_bound_of_the_last_partial_tile():
    from course import exercise_checks

    whole_tile = _day05_kernel(("tile_start + TILE_Q, n_queries)", "tile_start + TILE_Q)"))
    with pytest.raises(AssertionError, match=r"N=70, M=100.*N - 1 in the last tile"):
        exercise_checks.flash_skips_masked_tiles(whole_tile)


@pytest.mark.day05
def test_day05_visible_checks_name_loading_keys_once_per_row():
    from course import exercise_checks

    per_row = _day05_kernel(("s += q_row[c] * k_tile[j, c]", "s += q_row[c] * k[b, h, kv_start + j, c]"))
    exercise_checks.flash_matches_reference(per_row, causal=False)
    with pytest.raises(AssertionError, match="once per query row: read the keys from the shared tile"):
        exercise_checks.flash_traffic_fits_tiling(per_row)
