"""``course grade SUBMISSIONS``: autograde a class in parallel; feedback, grades CSV, summary.

Output folder (``--out``, default ``./grading``), what is secret marked (*)::

    grades.csv            one row per (student, assignment): status, points, details, flags
    grades_by_cell.csv    one row per grade cell
    not_graded.csv        every submitted file that was not graded (older attempts, unknown names), and why
    lms.csv               one row per student, a column per assignment and a total: for an LMS
    feedback/<student>/<assignment>/<assignment>.html   hand these back (and the .ipynb beside it)
    gradebook.db (*)      nbgrader gradebook of all submissions (``nbgrader export --db ...``)
    autograded/ (*)       the executed notebooks, hidden tests included
    results/ (*), work/ (*), template/ (*)   per-submission records and course folders

Each submission is graded by its own process (``grader.autograde``) with its own gradebook,
``--jobs`` at a time on this machine, or by the workers of a Dask cluster (``--scheduler``,
``grader.distributed``); the gradebooks are merged at the end. Both take the same path: one task
per submission (``grading_task``), run by a ``GradingMachine``, its result written into the run's
folder, then the same rows, merge, CSVs and summary. A run can be interrupted and run again:
submissions already graded are skipped unless ``--force``, the submitted file changed, or the
solutions changed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

from grader.autograde import FINAL_STATUSES, file_hash
from grader.collect import NotGraded, Submission, extract_zip, find_submissions
from grader.nbgrader_api import assignments as list_assignments, course_root
from grader.report import read_not_graded, summary_table, write_csvs, write_not_graded

# Extra seconds a submission may take beyond its cells' timeouts before its process is killed.
STARTUP_ALLOWANCE_S = 120
# Grading processes running now (so an interrupted run can stop them all).
_RUNNING: set = set()


# Templates this process has built, kept in memory (never in a new place on disk, where ungraded code
# could look): {key: {relative path: bytes}}. A class graded by one `course grade` builds one; a
# process that grades many times (the test suite) builds each once.
_TEMPLATES: dict[tuple, dict[str, bytes]] = {}


def _folder_hash(folder: pathlib.Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def prepare_template(root: pathlib.Path, names: list[str], out: pathlib.Path) -> dict[str, str]:
    """Release ``names`` into ``out/template`` with its own gradebook; return each solution's hash.

    The release depends only on the solution folders: one already built by this process from the
    same files is written out again instead of generated (nbgrader takes seconds to start).
    """
    from grader.release import generate

    template = out / "template"
    if template.exists():
        shutil.rmtree(template)
    template.mkdir(parents=True)
    key = (str(root.resolve()), tuple(names), tuple(_folder_hash(root / "solutions" / n) for n in names))
    if key in _TEMPLATES:
        for rel, data in _TEMPLATES[key].items():
            (template / rel).parent.mkdir(parents=True, exist_ok=True)
            (template / rel).write_bytes(data)
    else:
        generate(names, root=root, release_dir=template / "release", db_path=template / "gradebook.db")
        _TEMPLATES[key] = {str(p.relative_to(template)): p.read_bytes() for p in template.rglob("*") if p.is_file()}
    return {name: file_hash(root / "solutions" / name / f"{name}.ipynb") for name in names}


_prepare_template = prepare_template       # its earlier name


def _submissions_folder(path: pathlib.Path, out: pathlib.Path, assignments: list[str]) -> pathlib.Path:
    """A folder of submissions: ``path`` itself, or a zip extracted under ``out/collected``.

    A single folder that wraps everything (``export/...``) is looked into, unless it is one
    student's folder (it holds ``<assignment>/`` folders or ``<assignment>.ipynb``).
    """
    if path.is_file() and path.suffix.lower() == ".zip":
        folder = extract_zip(path, out / "collected" / path.stem)
    elif path.is_dir():
        folder = path
    else:
        raise ValueError(f"SUBMISSIONS must be a folder or a .zip file, got {path}")
    entries = [p for p in folder.iterdir() if p.name not in ("__MACOSX", ".DS_Store")]
    if len(entries) == 1 and entries[0].is_dir():
        children = {p.stem if p.suffix == ".ipynb" else p.name for p in entries[0].iterdir()}
        if not children & set(assignments) and entries[0].name not in assignments:
            return entries[0]
    return folder


def grading_task(sub: Submission, *, root, out, timeout, hashes, secret_dirs, isolation=True) -> dict:
    """What a grading process needs to grade ``sub`` of the course at ``root`` into the run's folder ``out``
    (``grader.autograde``); hashes: each assignment's solution hash (``prepare_template``)."""
    key = f"{sub.student}/{sub.assignment}"
    return {
        "student": sub.student, "assignment": sub.assignment,
        "notebook": str(sub.notebook) if sub.notebook else None, "notes": sub.notes,
        "submission_hash": file_hash(sub.notebook) if sub.notebook else None,
        "course_root": str(root), "template_dir": str(out / "template"), "out_dir": str(out),
        "work_dir": str(out / "work" / key), "result_path": str(out / "results" / f"{key}.json"),
        "timeout": timeout, "source_hash": hashes[sub.assignment], "secret_dirs": secret_dirs,
        "isolation": isolation,
    }


def is_done(task: dict) -> bool:
    """Whether the run's folder holds a final result of ``task`` for the same submission and solution."""
    path = pathlib.Path(task["result_path"])
    if not path.is_file():
        return False
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return False
    return (old.get("status") in FINAL_STATUSES and old.get("source_hash") == task["source_hash"]
            and old.get("submission_hash") == task["submission_hash"]
            and old.get("isolation", True) == task["isolation"])


def _code_cells(nb: dict) -> int:
    return sum(1 for c in nb["cells"] if c.get("cell_type") == "code")


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for proc in parent.children(recursive=True) + [parent]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _worker_env(device: str) -> dict:
    env = dict(os.environ)
    env["COURSE_DEVICE"] = device
    env["NUMBA_ENABLE_CUDASIM"] = "1" if device == "simulator" else "0"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("MPLBACKEND", "Agg")
    # One thread per process for NumPy/torch: parallelism comes from --jobs.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(var, "1")
    return env


class _Forks:
    """Grading processes as forks of a warm ``python -m grader.autograde --forks`` (``serve_forks``).

    A new Python process spends a second and more importing nbgrader, nbconvert and the grader
    before it grades; a fork of a process that imported them once starts at once, and is otherwise
    the same fresh process (the forking process never runs anything of a submission).
    """

    def __init__(self, env: dict):
        self.process = subprocess.Popen([sys.executable, "-m", "grader.autograde", "--forks"], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        self.lock = threading.Lock()
        self.waiting: dict[int, dict] = {}
        self.next_id = 0
        self.ready = threading.Event()
        self.usable = False
        threading.Thread(target=self._read, name="grading-forks", daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.process.stdout:
                message = json.loads(line)
                if "ready" in message:
                    self.usable = bool(message["ready"])
                    self.ready.set()
                    continue
                with self.lock:
                    item = self.waiting.get(message.get("id"))
                if item is None:
                    continue
                if "pid" in message:
                    item["pid"] = message["pid"]
                    item["started"].set()
                elif "exit" in message:
                    item["code"] = message["exit"]
                    item["started"].set()
                    item["done"].set()
        except ValueError:
            pass
        finally:
            # The forking process is gone: a grading process it started and did not report ended
            # with no code known (its result file says how it went).
            self.usable = False
            self.ready.set()
            with self.lock:
                items, self.waiting = list(self.waiting.values()), {}
            for item in items:
                item["started"].set()
                item["done"].set()

    def start(self, task_file: pathlib.Path, log_path: pathlib.Path) -> dict | None:
        """Start grading ``task_file``: ``{"pid", "done" (an Event), "code"}``; None when the forking
        process is not usable (the caller starts a process itself)."""
        self.ready.wait()
        if not self.usable:
            return None
        item = {"pid": None, "code": None, "started": threading.Event(), "done": threading.Event()}
        with self.lock:
            self.next_id += 1
            number = self.next_id
            self.waiting[number] = item
            try:
                self.process.stdin.write((json.dumps({"id": number, "task": str(task_file),
                                                      "log": str(log_path)}) + "\n").encode())
                self.process.stdin.flush()
            except (OSError, ValueError):
                self.waiting.pop(number, None)
                return None
        item["started"].wait()
        return item if item["pid"] is not None else None

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Forked:
    """A grading process started by ``_Forks``, as ``_RUNNING`` and ``_kill_tree`` see it."""

    def __init__(self, pid: int):
        self.pid = pid


def _run_process(task_file: pathlib.Path, log_path: pathlib.Path, *, env: dict, limit_s: float,
                 forks: _Forks | None) -> str | None:
    """Grade ``task_file`` in a grading process of its own (a fork of ``forks`` where there is one);
    None when it exited normally, else what went wrong."""
    item = forks.start(task_file, log_path) if forks is not None else None
    if item is not None:
        import psutil

        started = time.monotonic()
        proc = _Forked(item["pid"])
        _RUNNING.add(proc)
        try:
            finished = item["done"].wait(limit_s)
            if finished and item["code"] is None:
                # The forking process ended before this one: wait for it here (its result file tells).
                try:
                    psutil.Process(item["pid"]).wait(max(1.0, limit_s - (time.monotonic() - started)))
                except psutil.NoSuchProcess:
                    pass
                except psutil.TimeoutExpired:
                    finished = False
            if not finished:
                _kill_tree(item["pid"])
                item["done"].wait(30)
                return f"the whole submission took longer than {limit_s:.0f} s and was stopped"
        finally:
            _RUNNING.discard(proc)
        code = item["code"]
        return None if code in (0, None) else f"the grading process exited with code {code}"
    with open(log_path, "wb") as log:
        # A session of its own: Ctrl-C in the terminal reaches only `course grade`, which then stops
        # every grading process tree itself (see _run_all).
        proc = subprocess.Popen([sys.executable, "-m", "grader.autograde", str(task_file)], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _RUNNING.add(proc)
        try:
            proc.wait(timeout=limit_s)
            return None if proc.returncode == 0 else f"the grading process exited with code {proc.returncode}"
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)
            proc.wait()
            return f"the whole submission took longer than {limit_s:.0f} s and was stopped"
        finally:
            _RUNNING.discard(proc)


def run_task(task: dict, *, env: dict, limit_s: float, forks: _Forks | None = None) -> dict:
    """Run one ``grader.autograde`` process; whatever happens, return a result with a status.

    A missing notebook needs no process: its row is written here. forks: start the process as a
    fork of this warm process (``_Forks``) rather than as a new Python.
    """
    if task["notebook"] is None:
        from grader.autograde import grade_one, write_result

        return write_result(grade_one(task), task["result_path"])
    work = pathlib.Path(task["work_dir"])
    work.parent.mkdir(parents=True, exist_ok=True)
    task_file = work.parent / f"{work.name}.task.json"
    task_file.write_text(json.dumps(task), encoding="utf-8")
    result_path = pathlib.Path(task["result_path"])
    result_path.unlink(missing_ok=True)
    log_path = work.parent / f"{work.name}.log"
    problem = _run_process(task_file, log_path, env=env, limit_s=limit_s, forks=forks)
    if result_path.is_file() and problem is None:
        result = json.loads(result_path.read_text(encoding="utf-8"))
    else:
        from grader.autograde import root_cause

        tail = [root_cause(log_path.read_text(errors="replace"))]
        result = {"student": task["student"], "assignment": task["assignment"],
                  "status": "timed_out" if "longer than" in (problem or "") else "grader_error",
                  "points": 0.0, "max_points": 0.0, "cells": {}, "flags": [], "events": [], "refused": [],
                  "details": [problem or "no result written"] + (tail if "longer than" not in (problem or "") else []),
                  "source_hash": task["source_hash"], "submission_hash": task["submission_hash"],
                  "submission": task["notebook"], "seconds": limit_s}
        result_path.parent.mkdir(parents=True, exist_ok=True)
        result_path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


class IsolationUnavailable(RuntimeError):
    """Grading kernels cannot be isolated here, and running without isolation was not asked for."""


class ClusterUnavailable(RuntimeError):
    """The cluster of ``--scheduler`` cannot grade: not reached, no worker, or every worker refused
    (``grader.distributed``)."""


class GradingMachine:
    """What the grading processes of one machine share, started on first need and stopped by ``close``:
    their environment, the warm process they are forked from (``_Forks``), the GPU compile service
    (``grader.compile_service``, on the simulator with isolation) and matplotlib's font list.

    ``course grade`` runs one for the run on this machine (``--jobs`` threads call ``grade`` at once);
    a worker of a cluster runs one for the run it takes part in (``grader.distributed``).
    forks: start grading processes as forks of a warm process (worth it from the second notebook on).
    compile_limit_s: the longest one compile may take (the run's longest per-cell timeout).
    """

    def __init__(self, device: str = "simulator", *, isolation: bool = True, forks: bool = True,
                 compile_limit_s: float = 120):
        self.device = device
        self.isolation = isolation
        self.env = _worker_env(device)
        self.compile_limit_s = compile_limit_s
        self.shared: dict = {}
        self.forks: _Forks | None = None
        self.service = None
        self._want_forks = forks
        self._started = False
        self._lock = threading.Lock()

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            if self.isolation:
                from grader.guard import matplotlib_font_cache

                # Built once for the machine (not once per grading process), bound read-only into every sandbox.
                self.shared["font_cache"] = matplotlib_font_cache()
                if self.device == "simulator":
                    from grader.compile_service import CompileService

                    try:
                        self.service = CompileService(limit_s=self.compile_limit_s)
                        self.shared["compile_service"] = self.service.path
                    except OSError:     # no socket here: every grading kernel starts a compiler helper of its own
                        self.service = None
            if self._want_forks:
                self.forks = _Forks(self.env)

    def grade(self, task: dict) -> dict:
        """Grade ``task`` (``grading_task`` with ``limit_s``) in a grading process; return its result."""
        if task["notebook"] is not None:
            self._start()
            task.update(self.shared)
        return run_task(task, env=self.env, limit_s=task["limit_s"], forks=self.forks)

    def close(self) -> None:
        with self._lock:
            forks, service, self.forks, self.service = self.forks, self.service, None, None
        if forks is not None:
            forks.close()
        if service is not None:
            service.close()


@dataclasses.dataclass
class GradingRun:
    """One run of ``course grade``: the course, the run's folder and a task per (student, assignment)."""

    root: pathlib.Path
    out: pathlib.Path
    names: list[str]                 # the assignments graded
    tasks: list[dict]                # one per row, in the order of the rows
    todo: list[dict]                 # those graded now: the others were graded by an earlier run
    max_points: dict[str, float]     # per assignment


def grade(submissions, out, *, jobs: int = 1, device: str = "simulator", timeout: int = 120,
          force: bool = False, only: list[str] | None = None, root=None, progress: bool = True,
          isolation: bool = True, timeouts: dict[str, int] | None = None, scheduler=None) -> list[dict]:
    """Grade every submission found in ``submissions`` (folder or zip) into ``out``; return the rows.

    Writes the files listed in the module docstring. Rows are result dicts (``grader.autograde``).
    isolation: run every grading kernel in a bubblewrap sandbox (``grader.guard.sandbox_command``);
    when that is impossible here, raise ``IsolationUnavailable`` saying how to get it. False runs
    the kernels without it (the Python guard remains). timeouts: per student id, a per-cell
    timeout other than ``timeout`` (the sample catalog grades cases with their own timeouts in
    one run).

    With isolation, on the simulator, the run's grading kernels share one GPU compile service
    (``grader.compile_service``): a kernel's compile check already answered for one submission is
    not compiled again for another.

    scheduler: grade on the workers of a Dask cluster instead of here (``grader.distributed``): the
    scheduler's address, its scheduler file, ``"local"`` (a cluster of ``jobs`` worker processes on
    this machine) or a ``distributed.Client``. Each worker checks isolation and the course itself.
    """
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    if device not in ("simulator", "gpu"):
        raise ValueError(f"device must be 'simulator' or 'gpu', got {device!r}")
    for value in [timeout, *(timeouts or {}).values()]:
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"timeout must be a positive number of seconds, got {value!r}")
    if not isinstance(isolation, bool):
        raise TypeError(f"isolation must be True or False, got {isolation!r}")
    if isolation and scheduler is None:
        from grader.guard import ISOLATION_HELP, isolation_problem

        problem = isolation_problem()
        if problem:
            raise IsolationUnavailable(f"grading needs student code isolated from the grader's files, and {problem}. "
                                       f"To get it, {ISOLATION_HELP}.")
    run = plan_run(submissions, out, root=root, only=only, timeout=timeout, timeouts=timeouts,
                   isolation=isolation, force=force)
    skipped = len(run.tasks) - len(run.todo)
    if skipped and progress:
        print(f"course grade: {skipped} submission(s) already graded; skipping them (--force grades again)",
              file=sys.stderr)
    if scheduler is None:
        machine = GradingMachine(device, isolation=isolation, forks=sum(1 for t in run.todo if t["notebook"]) > 1,
                                 compile_limit_s=max((t["timeout"] for t in run.todo), default=timeout))
        try:
            _run_all(run.todo, machine=machine, jobs=jobs, progress=progress)
        finally:
            machine.close()
    else:
        try:
            from grader.distributed import grade_on_cluster
        except ModuleNotFoundError as exc:
            if exc.name not in ("distributed", "dask"):
                raise
            raise ClusterUnavailable("grading on a cluster needs Dask's distributed scheduler: "
                                     "pip install -e '.[cluster]' in the course's folder") from None
        grade_on_cluster(run, scheduler, device=device, progress=progress, local_workers=jobs)
    return finish_run(run)


def plan_run(submissions, out, *, root=None, only=None, timeout: int = 120, timeouts=None, isolation: bool = True,
             force: bool = False) -> GradingRun:
    """Find the submissions, write ``not_graded.csv``, release the run's template and make its tasks."""
    root = pathlib.Path(root) if root else course_root()
    out = pathlib.Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    known = list_assignments(root)
    if not known:
        raise ValueError(f"no assignments in {root / 'solutions'}")
    folder = _submissions_folder(pathlib.Path(submissions).resolve(), out, known)
    not_graded: list[NotGraded] = []
    found = find_submissions(folder, known, expected=only, not_graded=not_graded)
    write_not_graded(not_graded, out)
    names = sorted({s.assignment for s in found})
    hashes = prepare_template(root, names, out) if names else {}
    secret_dirs = [str(pathlib.Path(submissions).resolve()), str(folder)]
    timeouts = dict(timeouts or {})
    tasks = [grading_task(s, root=root, out=out, timeout=timeouts.get(s.student, timeout), hashes=hashes,
                          secret_dirs=secret_dirs, isolation=isolation) for s in found]
    todo = [t for t in tasks if force or not is_done(t)]
    released = {n: json.loads((out / "template" / "release" / n / f"{n}.ipynb").read_text(encoding="utf-8"))
                for n in names}
    for task in todo:
        task["limit_s"] = limit_s(task["timeout"], released[task["assignment"]])
    max_points = {n: sum(float(c["metadata"].get("nbgrader", {}).get("points", 0)) for c in nb["cells"]
                         if c["metadata"].get("nbgrader", {}).get("grade")) for n, nb in released.items()}
    return GradingRun(root=root, out=out, names=names, tasks=tasks, todo=todo, max_points=max_points)


def limit_s(timeout: int, released: dict) -> float:
    """How long a whole submission may take: its cells' timeouts plus ``STARTUP_ALLOWANCE_S``."""
    return timeout * (_code_cells(released) + 4) + STARTUP_ALLOWANCE_S


def finish_run(run: GradingRun) -> list[dict]:
    """The rows of every task from the run's results; the merged gradebook and the CSVs written."""
    rows = []
    for task in run.tasks:
        row = json.loads(pathlib.Path(task["result_path"]).read_text(encoding="utf-8"))
        row["work_dir"] = task["work_dir"]
        if not row["max_points"]:          # a grading process that died wrote no cells
            row["max_points"] = run.max_points[task["assignment"]]
        rows.append(row)
    if run.names:
        from grader.merge import merge_gradebooks

        merge_gradebooks(run.out / "template" / "gradebook.db", rows, run.out / "gradebook.db")
    write_csvs(rows, run.out)
    return rows


def _run_all(todo: list[dict], *, machine: GradingMachine, jobs, progress) -> None:
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="grading", unit="notebook", disable=not progress or not todo,
               file=sys.stderr)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(machine.grade, t): t for t in todo}
        for future in concurrent.futures.as_completed(futures):
            row = future.result()
            bar.set_postfix_str(f"{row['student']}/{row['assignment']}: {row['status']}", refresh=False)
            bar.update(1)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        stop_grading_processes()
        print("\ncourse grade: interrupted; run the same command again to resume", file=sys.stderr)
        raise
    finally:
        pool.shutdown(wait=True)
        bar.close()


def stop_grading_processes() -> None:
    """Kill every grading process this process runs now, with what it started."""
    for proc in list(_RUNNING):
        _kill_tree(proc.pid)


def _hidden_tests_count_traffic(root: pathlib.Path, assignment: str) -> bool:
    from grader.markers import read_notebook, split_blocks

    nb = read_notebook(root / "solutions" / assignment / f"{assignment}.ipynb")
    return any("count_traffic" in line for cell in nb.cells for line in split_blocks(cell.source)["hidden"])


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main_grade(args) -> int:
    """The ``course grade`` command."""
    started = time.time()
    signal.signal(signal.SIGTERM, _interrupt)      # `kill` stops the grading processes too
    root = course_root()
    only = None
    if args.assignments:
        from grader.release import expand_names

        only = expand_names(args.assignments, list_assignments(root))
    if args.gpu:
        counting = [a for a in (only or list_assignments(root)) if _hidden_tests_count_traffic(root, a)]
        if counting:
            print(f"course grade: warning: the hidden tests of {', '.join(counting)} count memory traffic, which "
                  "only the simulator can do; on a GPU those tests fail. Grade them without --gpu.",
                  file=sys.stderr)
    isolation = not getattr(args, "no_isolation", False)
    if not isolation:
        print("course grade: warning: --no-isolation: student code runs with access to every file this user can "
              "read (solutions, gradebooks, other submissions); only the Python guard stands in the way.",
              file=sys.stderr)
    scheduler = getattr(args, "scheduler", None)
    try:
        rows = grade(args.submissions, args.out, jobs=args.jobs, device="gpu" if args.gpu else "simulator",
                     timeout=args.timeout, force=args.force, only=only, root=root, isolation=isolation,
                     scheduler=scheduler)
    except IsolationUnavailable as exc:
        print(f"course grade: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"course grade: {exc}", file=sys.stderr)
        return 2
    except ClusterUnavailable as exc:
        print(f"course grade: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(summary_table(rows, read_not_graded(args.out)))
    out = pathlib.Path(args.out)
    print(f"\n{len(rows)} submission(s) in {time.time() - started:.0f} s. Wrote {out / 'grades.csv'}, "
          f"{out / 'lms.csv'} and feedback in {out / 'feedback'} (hand back only feedback/; the rest is secret).")
    return 0
