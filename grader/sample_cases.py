"""The catalog of sample submissions that tests the grader, and the harness that runs it.

A case is a Python file ``grader/samples/<assignment>/<case>.py`` (per exercise, written with the
day) or ``grader/samples/_course/<case>.py`` (course-wide cheats and failures)::

    \"\"\"One line: what this submission does and why it deserves its score.\"\"\"
    EXPECT = {"status": "graded", "points": {"<grade cell grade_id>": 2, ...}}
    CELLS = {"<grade_id of a cell>": '''full replacement source of that cell''', ...}

The correct sample of a day, ``correct_ours.py``, takes its cells from ``kernels/`` with
:func:`kernel_cell`, and a wrong sample is a small change of it, so neither can drift from the
course's kernels::

    BASE = "correct_ours"
    EDITS = {"flash_kernel": [("n_valid = min(n_tile, row - kv_start + 1)",      # old line(s)
                               "n_valid = min(n_tile, row - kv_start)")]}       # new line(s)

Optional names: ``ASSIGNMENT`` (required in ``_course``: the assignment the case targets),
``BASE`` (the name of a case of that assignment whose CELLS are applied first, e.g.
``"correct_ours"``, so a cheat in one exercise leaves the others correct), ``EDITS`` (per
grade_id, ``(old, new)`` replacements applied by :func:`edit_cell` to the BASE's cell),
``OTHERS`` (a case whose cells replace the BASE's cells that EDITS leave alone: a wrong sample
edits our kernel of one exercise and takes the others from ``correct_alternative``, because our
kernels pasted whole are the course's and score 0; or ``"blank"``: the other exercises stay as
released, unanswered, and score 0 at once, so grading the case costs only the exercise it is about), ``DELETE`` (grade_ids of cells the submission deleted), ``RAW`` (the submitted file's text instead
of a notebook, e.g. broken JSON), ``MISSING = True`` (the student submitted nothing for it),
``TIMEOUT`` (seconds per cell for this case), and in ``EXPECT``: ``"details"`` / ``"flags"`` (lists
of text each row's details / review flags must contain). A per-day case's ``"points"`` must name
every grade cell of the assignment; a ``_course`` case names the cells it is about.

``build_submission`` makes the submitted notebook from the *released* exercise (as a student
would) by replacing cells by grade_id. ``run_cases`` grades a set of cases through the real
pipeline (``grader.grade.grade``) and ``mismatches`` compares each row with its EXPECT.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import pathlib
import re
import runpy
import textwrap

BLANK = "blank"     # OTHERS = BLANK: the cells a wrong sample does not edit stay unanswered
SAMPLES_DIR = pathlib.Path(__file__).resolve().parent / "samples"
COURSE_WIDE = "_course"


@dataclasses.dataclass
class Case:
    """One sample submission and what it must get."""

    name: str
    assignment: str
    path: pathlib.Path
    doc: str
    expect: dict
    cells: dict
    delete: tuple = ()
    raw: str | None = None
    missing: bool = False
    timeout: int | None = None

    @property
    def student(self) -> str:
        """The student id the case is graded as: ``<folder>-<case>`` with ``-`` for ``_``."""
        return f"{self.path.parent.name.strip('_')}-{self.name}".replace("_", "-")


def kernel_cell(kernel) -> str:
    """The source of a ``@cuda.jit`` kernel of ``kernels/`` as a notebook cell (decorator included)."""
    function = getattr(kernel, "py_func", None)
    if function is None:
        raise TypeError(f"kernel must be a @cuda.jit kernel, got {type(kernel).__name__}")
    return inspect.getsource(function)


def _stripped(lines) -> list[str]:
    """The code of each line without indentation or trailing comment (edits name code, not comments)."""
    return [re.sub(r"\s+#.*$", "", line.strip()) for line in lines]


def edit_cell(source: str, edits, *, where: str = "cell") -> str:
    """Apply ``(old, new)`` replacements to the cell ``source`` and return the edited source.

    ``old`` is one line or several consecutive lines, compared without their indentation and trailing
    comments; it must occur exactly once in the cell, or a ValueError names it (so a wrong sample cannot silently stop
    being wrong when the correct kernel changes). ``new`` (dedented; several lines allowed, ``""``
    deletes) takes the indentation of the first old line.
    """
    lines = source.splitlines()
    for old, new in edits:
        want = _stripped(textwrap.dedent(old).strip("\n").splitlines())
        if not want or not all(want):
            raise ValueError(f"{where}: an edit's old text must be non-blank lines, got {old!r}")
        starts = [i for i in range(len(lines) - len(want) + 1) if _stripped(lines[i:i + len(want)]) == want]
        if len(starts) != 1:
            raise ValueError(f"{where}: the line(s) {old!r} occur {len(starts)} times in the correct cell, "
                             "expected exactly once; update the edit to the kernel in kernels/")
        first = lines[starts[0]]
        indent = first[:len(first) - len(first.lstrip())]
        replacement = [indent + line if line.strip() else "" for line in textwrap.dedent(new).strip("\n").splitlines()]
        lines[starts[0]:starts[0] + len(want)] = replacement
    return "\n".join(lines) + "\n"


def load_case(path) -> Case:
    """Read one case file (it is executed: case files are project code, not submissions)."""
    path = pathlib.Path(path)
    ns = runpy.run_path(str(path))
    folder = path.parent.name
    assignment = ns.get("ASSIGNMENT", folder)
    if folder == COURSE_WIDE and "ASSIGNMENT" not in ns:
        raise ValueError(f"{path}: a course-wide case must set ASSIGNMENT")
    cells = dict(ns.get("CELLS", {}))
    edits = dict(ns.get("EDITS", {}))
    if edits and not ns.get("BASE"):
        raise ValueError(f"{path}: EDITS change the cells of a BASE case; set BASE (e.g. 'correct_ours')")
    if ns.get("BASE"):
        base = load_case(SAMPLES_DIR / assignment / f"{ns['BASE']}.py")
        unknown = sorted(set(edits) - set(base.cells))
        if unknown:
            raise ValueError(f"{path}: EDITS name cells {unknown} that the BASE case {ns['BASE']!r} does not set")
        edited = {gid: edit_cell(base.cells[gid], changes, where=f"{path.name}, cell {gid}")
                  for gid, changes in edits.items()}
        others = ns.get("OTHERS")
        if others == BLANK:
            rest = {}
        else:
            rest = load_case(SAMPLES_DIR / assignment / f"{others}.py").cells if others else base.cells
        cells = {**rest, **edited, **cells}
    elif ns.get("OTHERS"):
        raise ValueError(f"{path}: OTHERS fills the cells a BASE case's EDITS leave alone; set BASE too")
    expect = ns.get("EXPECT")
    if not isinstance(expect, dict) or "status" not in expect:
        raise ValueError(f"{path}: EXPECT must be a dict with at least 'status', got {expect!r}")
    return Case(name=path.stem, assignment=assignment, path=path, doc=(ns.get("__doc__") or "").strip(),
                expect=expect, cells=cells, delete=tuple(ns.get("DELETE", ())),
                raw=ns.get("RAW"), missing=bool(ns.get("MISSING", False)), timeout=ns.get("TIMEOUT"))


def find_cases(assignment: str | None = None, *, course_wide: bool = True, samples_dir=SAMPLES_DIR) -> list[Case]:
    """Cases for ``assignment`` (default: all), course-wide ones included when they target it."""
    samples_dir = pathlib.Path(samples_dir)
    cases = []
    for folder in sorted(p for p in samples_dir.iterdir() if p.is_dir()) if samples_dir.is_dir() else []:
        if folder.name == COURSE_WIDE and not course_wide:
            continue
        if folder.name != COURSE_WIDE and assignment is not None and folder.name != assignment:
            continue
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            case = load_case(path)
            if assignment is None or case.assignment == assignment:
                cases.append(case)
    return cases


def _gid(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def build_submission(case: Case, release: dict) -> dict:
    """The submitted notebook: the release with ``case.cells`` replaced and ``case.delete`` removed."""
    nb = copy.deepcopy(release)
    known = {_gid(c) for c in nb["cells"]}
    unknown = (set(case.cells) | set(case.delete)) - known
    if unknown:
        raise ValueError(f"{case.path}: no cells with grade_id {sorted(unknown)} in the released {case.assignment}")
    nb["cells"] = [c for c in nb["cells"] if _gid(c) not in case.delete]
    for cell in nb["cells"]:
        if _gid(cell) in case.cells:
            cell["source"] = case.cells[_gid(cell)]
    return nb


def write_submissions(cases: list[Case], folder: pathlib.Path, release_dir: pathlib.Path) -> None:
    """Write each case as ``folder/<student>/<assignment>/<assignment>.ipynb`` (or nothing, if missing)."""
    for case in cases:
        target = pathlib.Path(folder) / case.student / case.assignment
        target.mkdir(parents=True, exist_ok=True)
        if case.missing:
            continue
        notebook = target / f"{case.assignment}.ipynb"
        if case.raw is not None:
            notebook.write_text(case.raw, encoding="utf-8")
        else:
            release = json.loads((release_dir / case.assignment / f"{case.assignment}.ipynb").read_text("utf-8"))
            notebook.write_text(json.dumps(build_submission(case, release), indent=1), encoding="utf-8")


def run_cases(cases: list[Case], workdir, *, root, jobs: int = 2, timeout: int = 120) -> dict[str, dict]:
    """Grade the cases through ``grader.grade.grade``; return ``{case.student: row}``.

    The cases are one grading run (one folder of submissions, ``jobs`` at a time); a case with a
    ``TIMEOUT`` gets that per-cell timeout (``grade(timeouts=...)``), the others ``timeout``.
    """
    from grader.grade import grade

    root = pathlib.Path(root)
    workdir = pathlib.Path(workdir)
    folder = workdir / "submissions" / "run"
    write_submissions(cases, folder, root / "exercises")
    wanted = {(c.student, c.assignment) for c in cases}
    rows = {}
    for row in grade(folder, workdir / "out" / "run", jobs=jobs, timeout=timeout,
                     timeouts={c.student: c.timeout for c in cases if c.timeout},
                     only=sorted({c.assignment for c in cases}), root=root, progress=False):
        if (row["student"], row["assignment"]) in wanted:
            rows[row["student"]] = row
    return rows


def grade_ids(release: dict) -> list[str]:
    """grade_ids of the grade cells of a released notebook."""
    return [_gid(c) for c in release["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def mismatches(case: Case, row: dict | None, release: dict | None = None) -> list[str]:
    """How the graded row differs from the case's EXPECT (empty when it matches)."""
    if row is None:
        return [f"{case.student}: no row"]
    problems = []
    if row["status"] != case.expect["status"]:
        problems.append(f"status {row['status']!r}, expected {case.expect['status']!r} "
                        f"(details: {'; '.join(row['details'])[:500]})")
    expected_points = case.expect.get("points", {})
    if release is not None and case.path.parent.name != COURSE_WIDE:
        missing = set(grade_ids(release)) - set(expected_points)
        if missing:
            problems.append(f"EXPECT['points'] does not name the grade cells {sorted(missing)}")
    for gid, points in expected_points.items():
        got = row["cells"].get(gid, {}).get("points")
        if got is None or abs(got - points) > 1e-6:
            problems.append(f"{gid}: {got} points, expected {points}")
    if "total" in case.expect and abs(row["points"] - case.expect["total"]) > 1e-6:
        problems.append(f"total {row['points']}, expected {case.expect['total']}")
    for key in ("details", "flags"):
        text = " | ".join(row[key])
        for needle in case.expect.get(key, []):
            if needle not in text:
                problems.append(f"{key} lack {needle!r}: {text[:400]}")
    if problems:
        # Every cell short of its points, so a mismatch in the total alone still says where.
        short = [f"{gid} {cell.get('points')}/{cell.get('max_points')}" for gid, cell in row["cells"].items()
                 if cell.get("points") != cell.get("max_points")]
        problems.append("cells short of their points: " + (", ".join(short) or "none"))
    return problems
