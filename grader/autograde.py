"""Autograde one submission in a course folder of its own: ``python -m grader.autograde TASK.json``.

``course grade`` runs one such process per submission (several at a time), so every
submission has its own gradebook and nothing one submission does can stop the others. The
process writes a result (JSON) with a status, the points of every grade cell and the details:

status, worst first: ``missing`` (no notebook), ``invalid_json`` (not a readable notebook),
``wrong_notebook`` (a notebook, but not this assignment's: another day's, or a new one),
``tampered`` (locked cells edited or deleted, grader files touched), ``course_kernel`` (the course's own
kernels imported, re-jitted or pasted: those exercises score 0),
``kernel_crashed``, ``timed_out``, ``grader_error`` (nbgrader itself failed), ``graded``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import sys
import time
import traceback

from grader.submission import ignore_unknown_grading_cells, read_submission, wrong_notebook

STATUSES = ("missing", "invalid_json", "wrong_notebook", "tampered", "course_kernel", "kernel_crashed", "timed_out",
            "grader_error", "graded")
# Statuses a later run does not redo (unless --force or the submission/solution changed).
FINAL_STATUSES = frozenset(STATUSES) - {"grader_error"}


def file_hash(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()[:16]


def _config(task: dict, paths: dict):
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput,
                                        DeduplicateIds, GetGrades, IgnorePattern, LimitOutput, OverwriteCells,
                                        OverwriteKernelspec, SaveAutoGrades)
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    from grader.execute import GuardedExecute
    from grader.markers import example_cells, read_notebook
    from grader.feedback import ClearHiddenTestsOfGradeCells, SanitizeFeedback
    from grader.nbgrader_api import load_config
    from grader.restore import RestoreDeletedCells

    root = pathlib.Path(task["course_root"])
    # The run's GPU compile service (grader.compile_service), for kernels graded with launch checks in a sandbox.
    service = task.get("compile_service") or ""
    if not (paths.get("launch_checks", True) and task.get("isolation", True) and os.path.exists(service)):
        service = ""
    return load_config(root, **{
        "CourseDirectory.root": str(paths["work"]),
        "CourseDirectory.source_directory": str(root / "solutions"),
        "CourseDirectory.release_directory": str(paths["release_dir"]),
        "CourseDirectory.submitted_directory": "submitted",
        "CourseDirectory.autograded_directory": "autograded",
        "CourseDirectory.feedback_directory": "feedback",
        "CourseDirectory.db_url": f"sqlite:///{paths['work'] / 'gradebook.db'}",
        "Autograde.sanitize_preprocessors": [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
                                             RestoreDeletedCells, CheckCellMetadata],
        "Autograde.autograde_preprocessors": [GuardedExecute, IgnorePattern, ClearMetadataPreprocessor,
                                              LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata],
        "RestoreDeletedCells.release_notebook": str(paths["release_nb"]),
        "GuardedExecute.timeout": int(task["timeout"]),
        "GuardedExecute.interrupt_on_timeout": True,
        "GuardedExecute.error_on_timeout": {
            "ename": "CellTimeoutError",
            "evalue": f"this cell ran longer than {int(task['timeout'])} s and was interrupted; the grader "
                      "restarted the kernel for the cells below",
            "traceback": [f"CellTimeoutError: this cell ran longer than {int(task['timeout'])} s"]},
        "GuardedExecute.guard_policy": json.dumps(_guard_policy(task, paths)),
        "GuardedExecute.events_file": str(paths["events"]),
        "GuardedExecute.launch_checks": paths.get("launch_checks", True),
        "GuardedExecute.compile_service": service,
        "GuardedExecute.examples": json.dumps(example_cells(read_notebook(paths["release_nb"]))),
        "GuardedExecute.working_dir": str(paths["autograded_dir"]),
        "GuardedExecute.sandbox": json.dumps({"scratch": str(paths["autograded_dir"]),
                                              "writable_files": [str(paths["guard_report"])],
                                              "files": [service] if service else [],
                                              "font_cache": task.get("font_cache")})
                                  if task.get("isolation", True) else "",
        "GenerateFeedback.preprocessors": [GetGrades, ClearHiddenTestsOfGradeCells, SanitizeFeedback, CSSHTMLHeaderPreprocessor],
        "SanitizeFeedback.hidden_lines": paths["hidden_lines"],
        "SanitizeFeedback.hidden_cells": paths["hidden_cells"],
    })


def _guard_policy(task: dict, paths: dict) -> dict:
    from grader.hidden import PROJECT_ROOT

    root = pathlib.Path(task["course_root"])
    deny_read = [root / "solutions", PROJECT_ROOT / "solutions", PROJECT_ROOT / "grader" / "samples",
                 pathlib.Path(task["out_dir"])]
    deny_read += [pathlib.Path(p) for p in task.get("secret_dirs", [])]
    deny_write = [root, PROJECT_ROOT, pathlib.Path(task["out_dir"])]
    for package in ("course", "kernels", "grader", "inference"):       # wherever they are installed
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            deny_write.extend(pathlib.Path(p) for p in spec.submodule_search_locations)
    return {"deny_read": [str(p) for p in deny_read], "deny_write": [str(p) for p in deny_write],
            "allow": [str(paths["autograded_dir"])], "report": str(paths["guard_report"])}


def _paths(task: dict) -> dict:
    work = pathlib.Path(task["work_dir"])
    student, assignment = task["student"], task["assignment"]
    template = pathlib.Path(task["template_dir"])
    return {
        "work": work,
        "release_dir": template / "release",
        "release_nb": template / "release" / assignment / f"{assignment}.ipynb",
        "solution_nb": pathlib.Path(task["course_root"]) / "solutions" / assignment / f"{assignment}.ipynb",
        "submitted_nb": work / "submitted" / student / assignment / f"{assignment}.ipynb",
        "autograded_dir": work / "autograded" / student / assignment,
        "autograded_nb": work / "autograded" / student / assignment / f"{assignment}.ipynb",
        "feedback_html": work / "feedback" / student / assignment / f"{assignment}.html",
        "events": work / "events.json",
        "guard_report": work / "guard.jsonl",
    }


def _scores(db_path: pathlib.Path, student: str, assignment: str) -> dict:
    from nbgrader.api import Gradebook, MissingEntry

    cells = {}
    with Gradebook(f"sqlite:///{db_path}") as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return cells
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                cells[grade.name] = {"points": float(grade.score or 0.0), "max_points": float(grade.max_score)}
    return cells


def _max_points(release: dict) -> dict:
    out = {}
    for cell in release.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            out[meta["grade_id"]] = float(meta.get("points", 0))
    return out


def _write_handback(paths: dict, out_dir: pathlib.Path, task: dict, result: dict) -> None:
    """The autograded notebook, cleared of hidden tests and sanitized, next to the HTML feedback."""
    import nbformat

    from grader.feedback import ClearHiddenTestsOfGradeCells, sanitize_notebook

    nb = nbformat.read(str(paths["autograded_nb"]), as_version=4)
    nb, _ = ClearHiddenTestsOfGradeCells().preprocess(nb, {})
    scores = {gid: (cell["points"], cell["max_points"]) for gid, cell in result["cells"].items()}
    sanitize_notebook(nb, paths["hidden_lines"], paths["hidden_cells"], scores)
    target = out_dir / "feedback" / task["student"] / task["assignment"]
    target.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(target / f"{task['assignment']}.ipynb"))


# nbgrader's ``release_feedback`` reads these two files beside the HTML; ``nbgrader collect`` wrote
# them beside the submitted notebook. Their content is checked against what nbgrader writes.
EXCHANGE_FILES = {"timestamp.txt": re.compile(r"[0-9][0-9A-Za-z :.+\-]{0,63}"),
                  "submission_secret.txt": re.compile(r"[A-Za-z0-9_\-]{1,128}")}
# A feedback page larger than this (student's own markdown included) is replaced by a note.
MAX_FEEDBACK_PAGE_BYTES = 4_000_000


def _hand_back_exchange_files(submitted_dir: pathlib.Path, feedback_dir: pathlib.Path) -> None:
    """Copy nbgrader's exchange files from the submission as collected, never from the folder the
    submission ran in (it could write anything there), and only when they hold what nbgrader writes."""
    for name, pattern in EXCHANGE_FILES.items():
        source = submitted_dir / name
        if not source.is_file() or source.is_symlink() or source.stat().st_size > 200:
            continue
        text = source.read_text(encoding="utf-8", errors="replace").strip()
        if pattern.fullmatch(text):
            (feedback_dir / name).write_text(text, encoding="utf-8")


def _note_html(title: str, message: str) -> str:
    import html

    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(message)}</p></body></html>\n")


def _new_result(task: dict, max_points: dict) -> dict:
    return {"student": task["student"], "assignment": task["assignment"], "status": "graded", "points": 0.0,
            "max_points": sum(max_points.values()),
            "cells": {gid: {"points": 0.0, "max_points": mp} for gid, mp in max_points.items()},
            "details": list(task.get("notes", [])), "flags": [], "source_hash": task["source_hash"],
            "submission": task.get("notebook"), "submission_hash": task.get("submission_hash"),
            "events": [], "refused": [], "seconds": 0.0, "isolation": task.get("isolation", True)}


def _prepare_course_folder(task: dict, paths: dict, submitted: dict) -> None:
    """A fresh nbgrader course folder for this submission: its notebook (as read and repaired by
    ``read_submission`` and ``ignore_unknown_grading_cells``) and a gradebook copy."""
    work, assignment = paths["work"], task["assignment"]
    if work.exists():
        shutil.rmtree(work)
    paths["submitted_nb"].parent.mkdir(parents=True)
    paths["submitted_nb"].write_text(json.dumps(submitted, indent=1), encoding="utf-8")
    folder = pathlib.Path(task["notebook"]).parent
    if folder.name == assignment:
        # nbgrader's layout: ``nbgrader collect`` leaves timestamp.txt (late penalties) and
        # submission_secret.txt (``release_feedback`` needs it) beside the notebook.
        for path in folder.iterdir():
            if path.is_file() and path.suffix != ".ipynb":
                shutil.copyfile(path, paths["submitted_nb"].parent / path.name)
    shutil.copyfile(pathlib.Path(task["template_dir"]) / "gradebook.db", work / "gradebook.db")


def _publish(paths: dict, out_dir: pathlib.Path, task: dict, api, result: dict) -> None:
    """Feedback HTML and the handed-back notebook into ``out/feedback``; the executed notebook
    (hidden tests included) into ``out/autograded``.

    nbgrader copies every file of the folder the submission ran in next to its feedback page; none
    of those is handed back: the feedback folder holds the page and the notebook the grader wrote
    and nbgrader's two exchange files."""
    from grader.nbgrader_api import venv_on_path

    student, assignment = task["student"], task["assignment"]
    with venv_on_path():
        fb = api.generate_feedback(assignment, student, force=True)
    feedback_dir = out_dir / "feedback" / student / assignment
    feedback_dir.mkdir(parents=True, exist_ok=True)
    page = paths["feedback_html"]
    if fb.get("success") and page.is_file() and not page.is_symlink():
        if page.stat().st_size <= MAX_FEEDBACK_PAGE_BYTES:
            shutil.copyfile(page, feedback_dir / page.name)
        else:
            (feedback_dir / page.name).write_text(_note_html(
                f"{assignment}: feedback too large", "The feedback page of this notebook was larger than "
                f"{MAX_FEEDBACK_PAGE_BYTES // 1_000_000} MB and is not shown; your points are in the gradebook."),
                encoding="utf-8")
            result["details"].append("feedback page too large: replaced by a note")
        _hand_back_exchange_files(paths["submitted_nb"].parent, feedback_dir)
    else:
        result["details"].append("feedback HTML failed: " + root_cause(fb.get("log", "") + fb.get("error", "")))
    _write_handback(paths, out_dir, task, result)
    secret_copy = out_dir / "autograded" / student / assignment
    secret_copy.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paths["autograded_nb"], secret_copy / f"{assignment}.ipynb")


def _read_events(paths: dict) -> tuple[list, list]:
    """(timeouts and crashes recorded by GuardedExecute, operations the guard refused)."""
    events = json.loads(paths["events"].read_text()) if paths["events"].exists() else []
    refused = [json.loads(line) for line in paths["guard_report"].read_text().splitlines() if line.strip()] \
        if paths["guard_report"].exists() else []
    return events, refused


# A grading kernel that dies or stays silent before it answers its first request has run nothing of the
# submission: another process took one of the ports it was given between their choice and its start
# (jupyter_client picks free ports, then the kernel binds them), or the machine was too busy. Grading
# again is safe and gives the grade the submission deserves.
KERNEL_START_ATTEMPTS = 3
_KERNEL_DID_NOT_START = ("Kernel died before replying to kernel_info", "Kernel didn't respond in")


def _outcome_text(outcome: dict) -> str:
    return str(outcome.get("log", "")) + str(outcome.get("error", ""))


def kernel_did_not_start(outcome: dict) -> bool:
    """Whether nbgrader's autograde failed because its kernel never started (see ``KERNEL_START_ATTEMPTS``)."""
    return not outcome.get("success") and any(why in _outcome_text(outcome) for why in _KERNEL_DID_NOT_START)


def autograde_once_started(api, assignment: str, student: str, details: list) -> dict:
    """nbgrader's autograde of one submission, run again (up to ``KERNEL_START_ATTEMPTS`` in all) while it
    fails because its kernel never started; each retry is noted in ``details``. Returns the last outcome."""
    for attempt in range(1, KERNEL_START_ATTEMPTS + 1):
        outcome = api.autograde(assignment, student, force=True, create=True)
        if not kernel_did_not_start(outcome) or attempt == KERNEL_START_ATTEMPTS:
            return outcome
        details.append(f"the grading kernel did not start ({root_cause(_outcome_text(outcome))}); graded again")
    return outcome


def grade_one(task: dict) -> dict:
    """Grade the submission described by ``task`` (see ``grader.grade``); return the result dict."""
    from grader import cleanroom, markers, tamper
    from grader.feedback import hidden_cell_ids
    from grader.launch_refusals import launch_refusals
    from grader.nbgrader_api import make_api, venv_on_path

    started = time.time()
    student, assignment = task["student"], task["assignment"]
    out_dir = pathlib.Path(task["out_dir"])
    paths = _paths(task)
    release = json.loads(paths["release_nb"].read_text(encoding="utf-8"))
    result = _new_result(task, _max_points(release))
    # Nothing from an earlier grading of this submission survives into this one.
    for stale in (out_dir / "feedback" / student / assignment, out_dir / "autograded" / student / assignment):
        shutil.rmtree(stale, ignore_errors=True)

    def finish(status: str) -> dict:
        result["status"] = status
        result["points"] = round(sum(c["points"] for c in result["cells"].values()), 6)
        result["seconds"] = round(time.time() - started, 2)
        return result

    if not task.get("notebook"):
        return finish("missing")
    submitted, problem = read_submission(pathlib.Path(task["notebook"]))

    def not_graded(status: str, why: str, student_message: str) -> dict:
        result["details"].append(why)
        feedback_dir = out_dir / "feedback" / student / assignment
        feedback_dir.mkdir(parents=True, exist_ok=True)
        (feedback_dir / f"{assignment}.html").write_text(
            _note_html(f"{assignment}: not graded", student_message + " It scores 0; ask your instructor to accept "
                       "a fixed copy."), encoding="utf-8")
        return finish(status)

    if submitted is None:
        return not_graded("invalid_json", problem, f"Your notebook could not be read ({problem}).")
    what = wrong_notebook(submitted, release, assignment, pathlib.Path(task["course_root"]))
    if what is not None:
        return not_graded("wrong_notebook", f"this file is {what}, not {assignment}",
                          f"The file you submitted for {assignment} is {what}, not the notebook of {assignment}.")
    result["details"].extend(ignore_unknown_grading_cells(submitted, release))

    structure = tamper.compare_with_release(submitted, release)
    context = [c.get("source", "") if isinstance(c.get("source"), str) else "".join(c.get("source", []))
               for c in release["cells"] if c.get("cell_type") == "code"]
    findings = tamper.scan_code(tamper.student_code_cells(submitted, release), context_sources=context)
    kernels_only = cleanroom.graded_code(release) == "kernels"
    left_out, course_kernels = cleanroom.clean_notebook(submitted, release) if kernels_only else ([], [])
    paths["launch_checks"] = kernels_only
    if left_out:
        result["details"].append("not run when graded (only kernels, constants and imports of math, numpy "
                                 "and numba are): " + "; ".join(left_out))

    _prepare_course_folder(task, paths, submitted)
    solution = markers.read_notebook(paths["solution_nb"])
    paths["hidden_lines"] = markers.secret_lines(solution, "hidden")
    paths["hidden_cells"] = hidden_cell_ids(solution)
    api = make_api(_config(task, paths))
    if task.get("isolation", True):
        # What the sandbox binds must exist before the kernel starts: nbgrader creates the
        # autograded folder itself, and the guard appends its refusals to the report.
        paths["autograded_dir"].mkdir(parents=True, exist_ok=True)
        paths["guard_report"].touch()
    with venv_on_path():
        outcome = autograde_once_started(api, assignment, student, result["details"])
    events, refused = _read_events(paths)
    result["events"], result["refused"] = events, refused
    if not outcome.get("success") or not paths["autograded_nb"].exists():
        result["details"].append("nbgrader autograde failed: " + root_cause(_outcome_text(outcome)))
        return finish("grader_error")
    for gid, score in _scores(paths["work"] / "gradebook.db", student, assignment).items():
        result["cells"][gid] = score
    _publish(paths, out_dir, task, api, result)
    status = _status(result, structure, findings, events, refused)
    # Launches the grading kernel refused (course.kernel_reach): a use of the course's kernels counts as
    # the clean room's findings do; a read of what differs between the simulator and a GPU is named.
    launched, differs = launch_refusals(json.loads(paths["autograded_nb"].read_text(encoding="utf-8")))
    course_kernels = [*course_kernels, *(f"{use} (its launch was refused)" for use in launched)]
    if differs:
        result["details"].append("reads what differs between the simulator and a GPU (its launch was refused): "
                                 + "; ".join(differs))
    if course_kernels:
        result["details"].append("uses the course's own kernels (not graded): " + "; ".join(course_kernels))
        if STATUSES.index("course_kernel") < STATUSES.index(status):
            status = "course_kernel"
    return finish(status)


def _status(result: dict, structure: dict, findings, events: list, refused: list) -> str:
    """Fill details and flags; return the worst status that applies."""
    details, flags = result["details"], result["flags"]
    statuses = set()
    if structure["deleted_grade"]:
        details.append("deleted test cells (scored 0): " + ", ".join(structure["deleted_grade"]))
        statuses.add("tampered")
    if structure["edited_locked"]:
        details.append("edited locked cells (the originals were graded): " + ", ".join(structure["edited_locked"]))
        statuses.add("tampered")
    if structure["metadata_changed"]:
        details.append("changed grading metadata of: " + ", ".join(structure["metadata_changed"]))
        statuses.add("tampered")
    if structure["deleted_locked"]:
        details.append("deleted locked cells: " + ", ".join(structure["deleted_locked"]))
        statuses.add("tampered")
    if structure["deleted_solution"]:
        details.append("deleted answer cells: " + ", ".join(structure["deleted_solution"]))
    for item in refused:
        details.append(f"refused {item['refused']} ({item['detail']})")
        statuses.add("tampered")
    # The scan flags for a human; it decides nothing: the code it reads never ran (grader.cleanroom).
    for finding in findings:
        flags.append(str(finding))
    for event in events:
        if event["kind"] == "crash":
            details.append(f"kernel crashed in {event['cell']}")
            statuses.add("kernel_crashed")
        else:
            details.append(f"timed out in {event['cell']}")
            statuses.add("timed_out")
        if event.get("rebuild", "ok") != "ok":
            details.append(f"could not restart after it ({event['rebuild']}); later cells scored 0")
    return next((s for s in STATUSES if s in statuses), "graded")


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|KeyError|StopIteration)"
                             r"(?::\s*(.*))?$")
_FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def root_cause(text: str) -> str:
    """The root cause in a log or traceback: the first exception raised (later ones are reactions to
    it, such as nbgrader's "see the above traceback") and the innermost frame where it was raised
    (``KeyError: 'x' (in find_cell, grader/restore.py:31)``); else the log's first error line, else
    its last line."""
    lines = [line.rstrip() for line in text.strip().splitlines()]
    frame = None
    for line in lines:
        if _FRAME_LINE.match(line):
            frame = _FRAME_LINE.match(line)
        elif frame is not None and _EXCEPTION_LINE.match(line.strip()):
            path = pathlib.PurePath(frame.group(1))
            return f"{line.strip()} (in {frame.group(3)}, {'/'.join(path.parts[-2:])}:{frame.group(2)})"
    exceptions = [line.strip() for line in lines if _EXCEPTION_LINE.match(line.strip())]
    if exceptions:
        return exceptions[0]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors[0] if errors else lines[-1] if lines else "no message").strip()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m grader.autograde TASK.json", file=sys.stderr)
        return 2
    task_path = pathlib.Path(argv[0])
    task = json.loads(task_path.read_text(encoding="utf-8"))
    try:
        result = grade_one(task)
    except Exception:  # one broken submission must not lose its row: record why
        result = {"student": task["student"], "assignment": task["assignment"], "status": "grader_error",
                  "points": 0.0, "max_points": 0.0, "cells": {}, "flags": [], "events": [], "refused": [],
                  "details": ["the grader failed: " + root_cause(traceback.format_exc())],
                  "source_hash": task["source_hash"], "submission_hash": task.get("submission_hash"),
                  "submission": task.get("notebook"), "seconds": 0.0}
    write_result(result, task["result_path"])
    return 0


def write_result(result: dict, path) -> dict:
    """Write a result atomically (a reader never sees half a file); return it."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return result


# What grading a submission imports, loaded once by ``serve_forks`` before it forks.
_WARM_MODULES = ("jupyter_client.manager", "nbclient", "nbformat", "nbconvert", "nbgrader.api", "nbgrader.apps",
                 "nbgrader.preprocessors", "psutil", "grader.cleanroom", "grader.execute", "grader.feedback",
                 "grader.guard", "grader.hidden", "grader.markers", "grader.nbgrader_api", "grader.restore",
                 "grader.tamper")


def _warm_up() -> None:
    """Import what grading a submission uses, fingerprint the course's kernels, and render a page once
    (lazy imports of nbconvert)."""
    import nbformat
    from nbconvert import HTMLExporter

    for name in _WARM_MODULES:
        importlib.import_module(name)
    from grader import cleanroom

    # The fingerprints of the course's kernels and host code: seconds of parsing in every process otherwise.
    cleanroom.course_functions(), cleanroom.course_host_functions(), cleanroom.course_kernel_names()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# *warm* `up`"),
                                         nbformat.v4.new_code_cell("x = 1", outputs=[nbformat.v4.new_output(
                                             "stream", text="1\n")])])
    HTMLExporter().from_notebook_node(nb)


def serve_forks(stdin_fd: int = 0, stdout_fd: int = 1) -> None:
    """``python -m grader.autograde --forks``: start grading processes as forks of a warm process.

    ``course grade`` runs one per grading run. Each request line ``{"id": n, "task": TASK.json,
    "log": LOG}`` is answered ``{"id": n, "pid": pid}`` by a fork of this process, in a session of its
    own, with the log as its output, that does what ``python -m grader.autograde TASK.json`` does
    and exits; when it has exited, ``{"id": n, "exit": code}`` (a negative code: the signal that
    stopped it). This process only imports and forks: nothing of a submission ever runs in it, so
    every fork starts as a fresh grading process would, without paying a second of imports. It
    ends when its input closes.
    """
    import selectors

    protocol = os.dup(stdout_fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, stdout_fd)            # a stray print of an import cannot break the protocol
    out = os.fdopen(protocol, "w", buffering=1, encoding="utf-8")
    try:
        _warm_up()
        out.write(json.dumps({"ready": True}) + "\n")
    except Exception as exc:  # noqa: BLE001 - course grade then starts grading processes itself
        out.write(json.dumps({"ready": False, "why": f"{type(exc).__name__}: {exc}"}) + "\n")
        return
    selector = selectors.DefaultSelector()
    selector.register(stdin_fd, selectors.EVENT_READ)
    running: dict[int, object] = {}          # pid -> request id
    pending = b""
    open_input = True
    while open_input or running:
        if open_input and selector.select(timeout=0.1):
            chunk = os.read(stdin_fd, 65536)
            if not chunk:
                open_input = False
                selector.unregister(stdin_fd)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if not line.strip():
                    continue
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        os.setsid()
                        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                        os.dup2(null, 0)
                        os.dup2(log, 1)
                        os.dup2(log, 2)
                        for fd in (log, null, protocol, stdin_fd if stdin_fd > 2 else -1):
                            if fd > 2:
                                os.close(fd)
                        code = main([request["task"]])
                    except BaseException:  # noqa: BLE001 - the log says why; the parent sees the code
                        traceback.print_exc()
                    finally:
                        try:
                            import atexit

                            atexit._run_exitfuncs()      # what a process's normal exit does (temporary folders)
                            sys.stdout.flush()
                            sys.stderr.flush()
                        finally:
                            os._exit(code)
                running[pid] = request["id"]
                out.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
        elif not open_input:
            time.sleep(0.1)
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                running.clear()
                break
            if pid == 0:
                break
            out.write(json.dumps({"id": running.pop(pid, None), "exit": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--forks"]:
        serve_forks()
        sys.exit(0)
    sys.exit(main())
