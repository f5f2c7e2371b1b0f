"""``course check [dayNN ...]``: run your exercise notebooks' visible tests headlessly, get a table.

For each exercise notebook (``exercises/<day>/<day>.ipynb`` by default, or the notebooks in
``--path``), the notebook runs top to bottom in a fresh kernel (your file is not changed). An
exercise is an answer cell (the cell you edit) and the cells after it up to the next answer cell;
it passes when all of them run without an error. The table shows, per day and exercise, pass,
FAIL with the first failure message, or "not started" (the answer still raises
NotImplementedError).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys

from grader.nbgrader_api import assignments as list_assignments, course_root

MESSAGE_CHARS = 160


@dataclasses.dataclass
class Exercise:
    """One exercise of a notebook after running it."""

    name: str
    status: str          # "pass", "FAIL", "not started"
    message: str = ""


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _first_error(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            from grader.feedback import strip_ansi

            evalue = strip_ansi(str(output.get("evalue", ""))).strip().splitlines()
            return f"{output.get('ename', 'Error')}: {evalue[0] if evalue else ''}"
    return None


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
            if error:
                failures.append((_meta(cell).get("grade_id") or "a cell", error))
        if name == "setup" and not failures:
            continue
        if not failures:
            results.append(Exercise(name, "pass"))
        elif any(err.startswith("NotImplementedError") for _, err in failures):
            results.append(Exercise(name, "not started"))
        else:
            where, error = failures[0]
            results.append(Exercise(name, "FAIL", f"{where}: {error}"[:MESSAGE_CHARS]))
    return results


def run_notebook(path: pathlib.Path, timeout: int):
    """Execute a copy of the notebook at ``path`` in a fresh kernel; return the executed notebook."""
    import subprocess

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(nb, timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                            resources={"metadata": {"path": str(path.parent)}}, kernel_name="python3")
    try:
        client.execute(stderr=subprocess.DEVNULL)
    except (DeadKernelError, CellTimeoutError) as exc:
        # The cell that was running when the kernel died or hung is the first one not yet numbered;
        # the cells after it never ran, which must not read as passing.
        unrun = [c for c in nb.cells if c.cell_type == "code" and c.source.strip() and c.get("execution_count") is None]
        for i, cell in enumerate(unrun):
            evalue = "the kernel died or stopped answering in this cell" if i == 0 else "not run (the kernel died above)"
            cell.outputs = [nbformat.v4.new_output("error", ename=type(exc).__name__ if i == 0 else "NotRun",
                                                   evalue=evalue, traceback=[])]
    return nb


def find_notebooks(folder: pathlib.Path, names: list[str]) -> dict[str, pathlib.Path]:
    """``{assignment: notebook}`` for the assignments found in ``folder`` (``<a>/<a>.ipynb`` or ``<a>.ipynb``)."""
    found = {}
    for name in names:
        for candidate in (folder / name / f"{name}.ipynb", folder / f"{name}.ipynb"):
            if candidate.is_file():
                found[name] = candidate
                break
    return found


def format_table(results: dict[str, list[Exercise]]) -> str:
    lines = []
    for day, exercises in results.items():
        passed = sum(e.status == "pass" for e in exercises)
        lines.append(f"{day:34s} {passed}/{len(exercises)} exercises pass")
        for e in exercises:
            lines.append(f"  {e.name:32s} {e.status:12s} {e.message}")
    return "\n".join(lines)


def main_check(args) -> int:
    """The ``course check`` command."""
    from grader.release import expand_names

    root = course_root()
    folder = pathlib.Path(args.path).resolve() if args.path else root / "exercises"
    known = list_assignments(root) or sorted(p.stem for p in folder.rglob("day*.ipynb"))
    names = expand_names(args.assignments, known)
    notebooks = find_notebooks(folder, names)
    if not notebooks:
        print(f"course check: no exercise notebooks for {', '.join(names)} in {folder}")
        return 1
    os.environ.setdefault("MPLBACKEND", "Agg")
    results = {}
    for day, path in notebooks.items():
        print(f"running {path} ...", file=sys.stderr, flush=True)
        results[day] = exercises_of(run_notebook(path, args.timeout))
    print(format_table(results))
    return 0 if all(e.status == "pass" for ex in results.values() for e in ex) else 1
