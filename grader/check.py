"""``course check [dayNN ...]``: run your exercise notebooks' visible tests headlessly, get a table.

Where it looks: with ``--path DIR``, only in ``DIR``; otherwise in the current folder first (its
``dayNN_slug.ipynb`` files and ``dayNN_slug/dayNN_slug.ipynb`` subfolders), then in the course's
``exercises/``. A notebook counts as an exercise when it has answer cells (nbgrader ``solution``
cells), so lessons are never mistaken for exercises. Without day names it checks every exercise
of the first of those folders that holds any.

Each notebook runs top to bottom in a fresh kernel (your file is not changed). An exercise is an
answer cell and the cells after it up to the next answer cell; it passes when every one of its code
cells ran and the kernel replied "ok". The table names the file checked and gives, per exercise:

- ``pass``;
- ``FAIL`` with the whole message of the first failure (``course.check`` puts the likely cause there);
- ``not started``: the answer still raises ``NotImplementedError``;
- ``CRASH``: the kernel died in this exercise (``os._exit``, a segfault, memory exhausted);
- ``TIMEOUT``: a cell ran longer than ``--timeout`` seconds and was interrupted;
- ``not run``: the kernel died in an earlier exercise, so this one never ran.

A cell counts as run only once the kernel has answered it, so a kernel that dies is a crash every
time, however fast or slow the machine is.

The notebook runs as it will be graded: when the course's release of the assignment is found
(``exercises/<day>/<day>.ipynb`` under the course's root) and the notebook is one of it (a grade_id in
common), every cell the student wrote is first reduced by the grader's own function
(``grader.cleanroom.clean_notebook``: only kernels, constants and imports of math, numpy and numba run,
``course/graded_code/``), so "passes ``course check``" means "is not lost when graded". A line left out
that binds a name (a constant, a function, an import) is named under its exercise with why, after the
failure when the exercise fails (``line 4: HALF = helper(WARP)  (helper is not defined ...)``) and as a
note when it passes; the table ends with the rule in one sentence (``course.graded_code.RULE``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import sys

from grader.nbgrader_api import assignments as list_assignments, course_root

# A message is shown whole, each line wrapped to the terminal (the advice is often at the end of a long
# line); only a message of more than this many lines (a table of a hundred mismatches) is cut, with a mark.
MESSAGE_LINES = 60
MESSAGE_COLUMN = 48     # where a message starts in the table
ASSIGNMENT_NAME = re.compile(r"day\d\d_\w+")
NOT_RUN_WHEN_GRADED = "not_run_when_graded"     # cell metadata course_check.<this>: lines left out, with why
CRASHED = "KernelDied"
TIMED_OUT = "CellTimeout"
NOT_RUN = "NotRun"


@dataclasses.dataclass
class Exercise:
    """One exercise of a notebook after running it."""

    name: str
    status: str          # "pass", "FAIL", "CRASH", "TIMEOUT", "not started", "not run"
    message: str = ""    # where and why, possibly several lines


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _error_message(output) -> str:
    """``Name: message`` of an error output, every line of the message kept; a bare ``assert``
    (empty message) is described by the source line the traceback points at."""
    from grader.feedback import strip_ansi

    ename = output.get("ename", "Error")
    evalue = strip_ansi(str(output.get("evalue", ""))).strip()
    if not evalue:
        for frame in reversed(output.get("traceback", [])):
            arrows = [line for line in strip_ansi(frame).splitlines() if line.lstrip().startswith("---->")]
            if arrows:
                evalue = "failed at: " + arrows[-1].split("---->", 1)[1].strip().lstrip("0123456789").strip()
                break
    lines = evalue.splitlines() or [""]
    if len(lines) > MESSAGE_LINES:
        lines = lines[:MESSAGE_LINES] + [f"... ({len(lines) - MESSAGE_LINES} more lines)"]
    lines[0] = f"{ename}: {lines[0]}".rstrip()
    return "\n".join(lines)


def _first_error(cell):
    """The first error output of ``cell``, or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return output
    return None


def _left_out(cells) -> list[str]:
    """What ``run_notebook`` noted in these cells' metadata: lines that do not run when graded."""
    found = []
    for cell in cells:
        found += cell.get("metadata", {}).get("course_check", {}).get(NOT_RUN_WHEN_GRADED, [])
    return found


def exercises_of(nb) -> list[Exercise]:
    """Group an executed notebook's cells into exercises and judge each."""
    groups: list[tuple[str, list]] = [("setup", [])]
    for cell in nb.cells:
        meta = _meta(cell)
        if meta.get("solution") and cell.cell_type == "code":
            groups.append((meta.get("grade_id") or f"exercise {len(groups)}", []))
        groups[-1][1].append(cell)
    results = []
    for name, cells in groups:
        failures = []
        for cell in cells:
            if cell.cell_type != "code":
                continue
            error = _first_error(cell)
            if error is not None:
                failures.append((_meta(cell).get("grade_id") or "a cell", error))
        if name == "setup" and not failures:
            continue
        names = [error.get("ename") for _, error in failures]
        left_out = _left_out(cells)
        if not failures:
            results.append(Exercise(name, "pass", "\n".join(
                f"note, not run when graded (the checks did not need it): {line}" for line in left_out)))
        elif CRASHED in names:
            where, error = failures[names.index(CRASHED)]
            results.append(Exercise(name, "CRASH", f"{where}: {_error_message(error)}"))
        elif TIMED_OUT in names:
            where, error = failures[names.index(TIMED_OUT)]
            results.append(Exercise(name, "TIMEOUT", f"{where}: {_error_message(error)}"))
        elif names[0] == NOT_RUN:
            results.append(Exercise(name, "not run", _error_message(failures[0][1])))
        elif "NotImplementedError" in names:
            results.append(Exercise(name, "not started"))
        else:
            where, error = failures[0]
            results.append(Exercise(name, "FAIL", "\n".join(
                [f"{where}: {_error_message(error)}"] + [f"not run when graded: {line}" for line in left_out])))
    return results


def released_notebook(name: str, root: pathlib.Path | None = None) -> dict | None:
    """The course's release of assignment ``name`` (``exercises/<name>/<name>.ipynb``), as JSON, or None."""
    root = course_root() if root is None else root
    path = root / "exercises" / name / f"{name}.ipynb"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def as_graded(nb, release: dict | None) -> int:
    """Reduce, in place, the cells a student wrote in ``nb`` as grading will (``grader.cleanroom``), when
    ``release`` is the notebook's release and its answers are kernels; note in each cell's metadata
    (``course_check.not_run_when_graded``) the lines left out that bind a name, with why. Host answers
    (day 6's allocator) stay as written: they run in a process of their own when graded. Returns how many
    lines were left out."""
    from grader import cleanroom

    if release is None or cleanroom.graded_code(release) != "kernels":
        return 0
    ids = {_meta(c).get("grade_id") for c in release.get("cells", [])} - {None}
    if not ids & {_meta(c).get("grade_id") for c in nb.cells}:
        return 0
    explain: list = []
    cleanroom.clean_notebook(nb, release, host=False, explain=explain)
    for index, where, dropped in explain:
        if dropped.binds:
            meta = nb.cells[index].metadata.setdefault("course_check", {})
            meta.setdefault(NOT_RUN_WHEN_GRADED, []).append(f"{where}, {dropped.describe()}")
    return len(explain)


def run_notebook(path: pathlib.Path, timeout: int, release: dict | None = None):
    """Execute a copy of the notebook at ``path`` in a fresh kernel, its cells first reduced to what runs when
    graded when ``release`` is its release (:func:`as_graded`); return the executed notebook.

    Every code cell the kernel did not answer "ok" ends with an error output: the kernel's own
    error, ``CellTimeout`` for a cell interrupted after ``timeout`` seconds, ``KernelDied`` for the
    cell the kernel died in, ``NotRun`` for the cells after it.
    """
    import subprocess

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    nb = nbformat.read(str(path), as_version=4)
    as_graded(nb, release)
    replies: dict[int, dict] = {}

    def remember_reply(cell, cell_index, execute_reply):
        replies[cell_index] = (execute_reply or {}).get("content", {})

    timed_out = {"ename": TIMED_OUT, "evalue": f"the cell ran longer than {timeout} s and was interrupted "
                                            "(an endless loop, or a launch far too large for the simulator?)",
                 "traceback": []}
    client = NotebookClient(nb, timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                            error_on_timeout=timed_out, on_cell_executed=remember_reply,
                            resources={"metadata": {"path": str(path.parent)}}, kernel_name="python3")
    why = "the kernel died while running this cell (os._exit, a segfault, or memory exhausted?)"
    try:
        client.execute(stderr=subprocess.DEVNULL)
    except DeadKernelError:
        pass
    except (CellTimeoutError, RuntimeError) as exc:    # RuntimeError: the kernel did not start
        why = f"the kernel stopped answering: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    died = False
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        reply = replies.get(index)
        if reply is None:
            ename, evalue = (NOT_RUN, "not run: the kernel died in an earlier cell") if died else (CRASHED, why)
            cell.outputs = [*cell.get("outputs", []),
                            nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])]
            died = True
        elif reply.get("ename") == TIMED_OUT:
            cell.outputs = [nbformat.v4.new_output("error", **timed_out)]
        elif reply.get("status") != "ok" and _first_error(cell) is None:
            cell.outputs = [*cell.get("outputs", []),
                            nbformat.v4.new_output("error", ename=reply.get("ename") or "Error",
                                                   evalue=reply.get("evalue") or f"status {reply.get('status')}",
                                                   traceback=reply.get("traceback") or [])]
    return nb


def is_exercise(path: pathlib.Path) -> bool:
    """Whether the notebook at ``path`` has answer cells (nbgrader ``solution`` cells)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    return any(isinstance(c, dict) and c.get("metadata", {}).get("nbgrader", {}).get("solution") for c in cells)


def notebooks_in(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """``{assignment: notebook}`` for the exercise notebooks in ``folder``: ``dayNN_slug.ipynb`` or
    ``dayNN_slug/dayNN_slug.ipynb``, the first when both exist."""
    found: dict[str, pathlib.Path] = {}
    candidates = sorted(folder.glob("day*.ipynb")) + sorted(folder.glob("day*/day*.ipynb"))
    for path in candidates:
        name = path.stem
        if (not ASSIGNMENT_NAME.fullmatch(name) or name in found
                or path.parent not in (folder, folder / name) or not is_exercise(path)):
            continue
        found[name] = path
    return dict(sorted(found.items()))


def choose_notebooks(folders: list[pathlib.Path], requested: list[str],
                     known: list[str]) -> tuple[dict[str, pathlib.Path], list[str]]:
    """``({assignment: notebook}, [assignments asked for and not found])``.

    A requested assignment comes from the first folder that holds it; with none requested, every
    exercise of the first folder that holds any.
    """
    from grader.release import expand_names

    found = [notebooks_in(folder) for folder in folders]
    if not requested:
        for notebooks in found:
            if notebooks:
                return notebooks, []
        return {}, []
    everything = sorted(set(known).union(*found))
    chosen, missing = {}, []
    for name in expand_names(requested, everything):
        holders = [notebooks[name] for notebooks in found if name in notebooks]
        if holders:
            chosen[name] = holders[0]
        else:
            missing.append(name)
    return chosen, missing


def _shown(path: pathlib.Path) -> str:
    """``path`` relative to the current folder when it lies inside it."""
    try:
        return str(path.relative_to(pathlib.Path.cwd()))
    except ValueError:
        return str(path)


def _wrapped(message: str, width: int) -> list[str]:
    """Every line of ``message`` wrapped to ``width`` columns, nothing dropped; a continuation keeps the
    line's own indentation and two more spaces."""
    import textwrap

    out = []
    for line in message.splitlines() or [""]:
        indent = line[:len(line) - len(line.lstrip())]
        out += textwrap.wrap(line, width=width, subsequent_indent=indent + "  ", break_long_words=True,
                             break_on_hyphens=False, drop_whitespace=True) or [""]
    return out


def format_table(results: dict[str, list[Exercise]], paths: dict[str, pathlib.Path] | None = None,
                 width: int | None = None) -> str:
    """The table ``course check`` prints: a line per exercise, its message whole, wrapped to ``width``
    columns (default: the terminal's, at least 100)."""
    import shutil

    width = width or max(100, shutil.get_terminal_size((120, 24)).columns)
    lines = []
    for day, exercises in results.items():
        passed = sum(e.status == "pass" for e in exercises)
        where = f"  ({_shown(paths[day])})" if paths and day in paths else ""
        lines.append(f"{day:34s} {passed}/{len(exercises)} exercises pass{where}")
        for e in exercises:
            first, *rest = _wrapped(e.message, width - MESSAGE_COLUMN)
            lines.append(f"  {e.name:32s} {e.status:12s} {first}".rstrip())
            lines += [f"{'':{MESSAGE_COLUMN}s}{line}".rstrip() for line in rest]
    return "\n".join(lines)


def main_check(args) -> int:
    """The ``course check`` command."""
    root = course_root()
    if args.path is not None:
        folder = pathlib.Path(args.path).expanduser().resolve()
        if not folder.is_dir():
            print(f"course check: --path {args.path!r} is not a folder", file=sys.stderr)
            return 2
        folders = [folder]
    else:
        folders = list(dict.fromkeys([pathlib.Path.cwd().resolve(), (root / "exercises").resolve()]))
    notebooks, missing = choose_notebooks(folders, args.assignments, list_assignments(root))
    searched = " or ".join(_shown(folder) or "." for folder in folders)
    if missing:
        print(f"course check: no exercise notebook for {', '.join(missing)} in {searched}", file=sys.stderr)
    if not notebooks:
        print(f"course check: no exercise notebooks (dayNN_slug.ipynb with answer cells) in {searched}")
        return 1
    os.environ.setdefault("MPLBACKEND", "Agg")
    results = {}
    for day, path in notebooks.items():
        print(f"checking {_shown(path)} ...", file=sys.stderr, flush=True)
        results[day] = exercises_of(run_notebook(path, args.timeout, released_notebook(day, root)))
    print(format_table(results, notebooks))
    if any("not run when graded" in e.message for ex in results.values() for e in ex):
        from course.graded_code import RULE

        print(f"\n{RULE}")
    ok = not missing and all(e.status == "pass" for ex in results.values() for e in ex)
    return 0 if ok else 1
