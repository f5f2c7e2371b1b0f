"""``course grade SUBMISSIONS --scheduler ADDRESS``: grade a class on the workers of a Dask cluster.

The engine is Dask's distributed scheduler, which instructors can already deploy: on Kubernetes
(dask-kubernetes, dask-gateway), on Slurm or PBS (dask-jobqueue), or as ``dask scheduler`` and a
few ``dask worker ADDRESS`` started by hand. It brings what a class that outgrows one machine needs
and the grader would otherwise write itself: workers that join and leave, a task of a lost worker
run again elsewhere, a dashboard. A worker is the course installed like any grading machine (a
checkout, ``pip install -e .``, bubblewrap), started in the checkout: it grades the course found
from its working folder (``grader.nbgrader_api.course_root``), from its own solutions and hidden
tests, which never travel.

One run (``grade_on_cluster``, called by ``grader.grade.grade``):

1. The client registers a worker plugin for the run (``CourseWorker``). On every worker, those there
   now and those that join later, it compares the worker's course with the client's
   (``course_identity``: the commit where both know it, the sources of ``course``, ``kernels``,
   ``grader`` and ``inference``, every assignment's solutions and release, the versions that grade)
   and checks that the worker can isolate grading kernels. A worker that differs is refused with
   what differs (``differences``) and never gets the run's resource, so no task of the run goes to
   it; the others get the resource, one unit per thread. When no worker accepts, the run stops
   before any grading (``CourseMismatch``).
2. One task per (student, assignment) (``grade_submission``), holding data only: the submitted
   notebook and the files nbgrader's exchange left beside it, as bytes, with the student id, the
   notes of ``grader.collect`` and the timeouts; never a path of the client's. The worker writes them
   into a scratch folder of its own, releases the run's template from its own solutions once, and
   grades exactly as ``--jobs`` does (``grader.grade.GradingMachine``: a grading process per
   submission, in its sandbox, under the guard). It sends back the result, the feedback files, the
   executed notebook and the submission's gradebook, and deletes its copies.
3. The client searches the feedback that came back for the hidden-test lines of its own solutions
   (``hidden_lines_in_feedback``: what a student would see, as the catalog's leak test reads it)
   and writes everything where a local run writes it, the result last. ``grader.grade`` then builds
   the rows, the merged gradebook, the CSVs and the summary as for a local run.

Faults: the scheduler gives the task of a worker that dies or is killed to another worker; its
event (``remove-worker``) names the tasks the worker held, and the row's ``regraded`` (in the
result file and the summary, not in ``grades.csv``) says which worker was lost. A task whose workers
died more often than the scheduler allows (``distributed.scheduler.allowed-failures``, 3 by default)
is a ``grader_error`` row, which the next run grades again, as is a task that could not be graded
for any other reason: nothing submitted goes without a row. Results are written as they arrive, so
an interrupted run resumes where it stopped (``grader.grade.is_done``).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import html
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid

from distributed import WorkerPlugin

from grader.grade import ClusterUnavailable, GradingMachine, GradingRun, grading_task, prepare_template, run_task

# The events the run's workers log for the client (accepted, refused, started).
TOPIC = "course-grade"
# The packages whose sources a worker must share with the client, and the distributions whose versions.
IDENTITY_PACKAGES = ("course", "kernels", "grader", "inference")
IDENTITY_DISTRIBUTIONS = ("nbgrader", "nbconvert", "nbclient", "jupyter-client", "numba", "numba-cuda", "numpy")
# How long the client waits for a first worker, and for a worker again when every one it had is gone.
WORKER_WAIT_S = 120
# Files of a submission's folder that travel with its notebook: plain names only.
_PLAIN_NAME = re.compile(r"[^/\\\0]{1,255}")


class CourseMismatch(ClusterUnavailable):
    """No worker of the cluster grades the course of the client (each refusal says what differs)."""


# --- the course's identity --------------------------------------------------------------------


def _tree_hash(paths: list[pathlib.Path], base: pathlib.Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _folder_files(folder: pathlib.Path) -> list[pathlib.Path]:
    return [p for p in folder.rglob("*") if p.is_file()
            and not {".ipynb_checkpoints", "__pycache__"} & set(p.relative_to(folder).parts)]


def _package_hash(package: str) -> str:
    """The sources of an installed package (its ``.py`` files; the grader's samples are test data)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    digest = hashlib.sha256()
    for location in spec.submodule_search_locations:
        folder = pathlib.Path(location)
        files = [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts
                 and not (package == "grader" and p.relative_to(folder).parts[0] == "samples")]
        digest.update(_tree_hash(files, folder).encode())
    return digest.hexdigest()[:16]


def _git_commit(root: pathlib.Path) -> str | None:
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def course_identity(root=None) -> dict[str, str]:
    """What decides how this machine grades, part by part: ``{part: value}``.

    The git commit of the course folder where it has one; the Python version and the versions of
    the distributions that grade (``IDENTITY_DISTRIBUTIONS``); a hash of the sources of the installed
    ``course``, ``kernels``, ``grader`` and ``inference``; of ``nbgrader_config.py``; and, per
    assignment, of ``solutions/<assignment>/`` (solutions and hidden tests) and of
    ``exercises/<assignment>/`` (the release students got).
    """
    from grader.nbgrader_api import CONFIG_NAME, assignments, course_root

    root = pathlib.Path(root) if root else course_root()
    identity = {}
    commit = _git_commit(root)
    if commit:
        identity["commit"] = commit
    identity["python"] = "{}.{}".format(*sys.version_info[:2])
    for name in IDENTITY_DISTRIBUTIONS:
        try:
            identity[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            identity[name] = "not installed"
    for package in IDENTITY_PACKAGES:
        identity[f"package {package}"] = _package_hash(package)
    config = root / CONFIG_NAME
    identity[CONFIG_NAME] = hashlib.sha256(config.read_bytes()).hexdigest()[:16] if config.is_file() else "absent"
    for name in assignments(root):
        for kind in ("solutions", "exercises"):
            folder = root / kind / name
            identity[f"{kind}/{name}"] = _tree_hash(_folder_files(folder), folder) if folder.is_dir() else "absent"
    return identity


_SHOWN_VALUES = {"commit", "python", *IDENTITY_DISTRIBUTIONS}


def differences(here: dict, there: dict) -> list[str]:
    """What differs between the client's identity (``here``) and a worker's (``there``), in words;
    empty when the worker grades as the client would. The commit counts where both know theirs."""
    found = []
    for part in list(here) + [p for p in there if p not in here]:
        mine, theirs = here.get(part), there.get(part)
        if mine == theirs or (part == "commit" and (mine is None or theirs is None)):
            continue
        if mine is None:
            found.append(f"{part} (only on the worker)")
        elif theirs is None:
            found.append(f"{part} (missing on the worker)")
        elif part in _SHOWN_VALUES:
            short = 12 if part == "commit" else 40
            found.append(f"{part} ({mine[:short]} here, {theirs[:short]} on the worker)")
        else:
            found.append(f"{part} (other files)")
    return found


# --- the worker's side -------------------------------------------------------------------------


class CourseWorker(WorkerPlugin):
    """The run's plugin on every worker: checks the worker's course and isolation (``setup``), then
    grades the run's tasks there (``grade``) until the client removes it (``teardown``)."""

    def __init__(self, *, run_id: str, identity: dict, names: list[str], device: str, isolation: bool,
                 compile_limit_s: float):
        self.run_id = run_id
        self.name = f"course-grade-{run_id}"
        self.resource = f"course-grade-{run_id}"      # held only by workers that accepted the run
        self.identity = identity
        self.names = list(names)
        self.device = device
        self.isolation = isolation
        self.compile_limit_s = compile_limit_s
        self.refused: str | None = "not set up"

    def __getstate__(self):
        return {k: self.__dict__[k] for k in ("run_id", "name", "resource", "identity", "names", "device",
                                              "isolation", "compile_limit_s")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.refused = "not set up"

    async def setup(self, worker):
        self.root = None
        try:
            self.refused = await asyncio.to_thread(self._check)
        except Exception as exc:  # noqa: BLE001 - a worker that cannot tell is refused, with why
            self.refused = f"it could not check its course ({type(exc).__name__}: {exc})"
        worker.log_event(TOPIC, {"run": self.run_id, "event": "refused" if self.refused else "accepted",
                                 "worker": worker.address, "name": str(worker.name), "why": self.refused,
                                 "threads": worker.state.nthreads})
        if self.refused is None:
            self.scratch = pathlib.Path(worker.local_directory) / self.name
            self.scratch.mkdir(parents=True, exist_ok=True)
            self.machine = GradingMachine(self.device, isolation=self.isolation, compile_limit_s=self.compile_limit_s)
            self.hashes = None
            self.grading = 0               # submissions being graded now
            self.lock = threading.Lock()
            await worker.set_resources(**{self.resource: worker.state.nthreads})

    def _check(self) -> str | None:
        from grader.nbgrader_api import course_root

        self.root = course_root()
        found = differences(self.identity, course_identity(self.root))
        if found:
            return "its course differs from the client's: " + "; ".join(found)
        if self.isolation:
            from grader.guard import ISOLATION_HELP, isolation_problem

            problem = isolation_problem()
            if problem:
                return f"it cannot isolate grading kernels: {problem} (to fix: {ISOLATION_HELP})"
        return None

    async def teardown(self, worker):
        if self.refused is None:
            self.refused = "the run is over"
            await worker.set_resources(**{self.resource: 0})
            if self.grading:
                # An interrupted run: its grading processes end on their own; the worker is not held for them.
                threading.Thread(target=self.machine.close, name="course-grade-teardown", daemon=True).start()
            else:
                await asyncio.to_thread(self.machine.close)
            shutil.rmtree(self.scratch, ignore_errors=True)

    def grade(self, payload: dict, address: str) -> dict:
        """Grade one submission sent by the client; return what the client writes into the run's folder."""
        student, assignment = payload["student"], payload["assignment"]
        if assignment not in self.names or not re.fullmatch(r"[A-Za-z0-9.@-]+", student):
            raise ValueError(f"not a task of this run: {student!r}, {assignment!r}")
        out = self.scratch / "out"
        with self.lock:
            if self.hashes is None:        # the run's template, released from this worker's own solutions
                self.hashes = prepare_template(self.root, self.names, out)
        submissions = self.scratch / "submissions"
        folder = submissions / student / assignment
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, data in payload["files"].items():
            if not _PLAIN_NAME.fullmatch(name) or name in (".", ".."):
                raise ValueError(f"not a plain file name: {name!r}")
            (folder / name).write_bytes(data)
        from grader.collect import Submission

        sub = Submission(student, assignment, folder / f"{assignment}.ipynb", list(payload["notes"]))
        task = grading_task(sub, root=self.root, out=out, timeout=payload["timeout"], hashes=self.hashes,
                            secret_dirs=[str(submissions)], isolation=self.isolation)
        task["limit_s"] = payload["limit_s"]
        with self.lock:
            self.grading += 1
        try:
            result = self.machine.grade(task)
            return {"result": result, "worker": address, "files": _outputs(out, task)}
        finally:
            with self.lock:
                self.grading -= 1
            for path in (folder, out / "work" / student / assignment, out / "feedback" / student / assignment,
                         out / "autograded" / student / assignment):
                shutil.rmtree(path, ignore_errors=True)
            for path in (pathlib.Path(task["result_path"]), out / "work" / student / f"{assignment}.log",
                         out / "work" / student / f"{assignment}.task.json"):
                path.unlink(missing_ok=True)


def _outputs(out: pathlib.Path, task: dict) -> dict:
    """What a grading process wrote that the client keeps: ``{place: {name: bytes}}``."""
    student, assignment = task["student"], task["assignment"]
    feedback = out / "feedback" / student / assignment
    autograded = out / "autograded" / student / assignment / f"{assignment}.ipynb"
    work = pathlib.Path(task["work_dir"])
    log = work.parent / f"{work.name}.log"
    return {"feedback": {p.name: p.read_bytes() for p in sorted(feedback.iterdir()) if p.is_file()}
            if feedback.is_dir() else {},
            "autograded": {autograded.name: autograded.read_bytes()} if autograded.is_file() else {},
            "work": {name: (work / name).read_bytes() for name in ("gradebook.db",) if (work / name).is_file()},
            "log": {log.name: log.read_bytes()} if log.is_file() else {}}


def grade_submission(plugin_name: str, payload: dict) -> dict:
    """The task of one submission, run by a worker: grade it with the run's plugin (``CourseWorker``)."""
    from distributed import get_worker

    worker = get_worker()
    plugin = worker.plugins.get(plugin_name)
    if plugin is None or plugin.refused is not None:
        why = plugin.refused if plugin is not None else "it does not take part in this run"
        raise CourseMismatch(f"worker {worker.address} does not grade this run: {why}")
    worker.log_event(TOPIC, {"run": plugin.run_id, "event": "started", "worker": worker.address,
                             "pid": os.getpid(), "key": f"{payload['student']}/{payload['assignment']}"})
    return plugin.grade(payload, worker.address)


def worker_verdict(plugin_name: str, dask_worker=None) -> dict:
    """On a worker: its name, its threads and why it refused the run of ``plugin_name`` (None: it accepted)."""
    plugin = dask_worker.plugins.get(plugin_name)
    return {"name": str(dask_worker.name), "threads": dask_worker.state.nthreads,
            "refused": "it does not take part in this run" if plugin is None else plugin.refused}


# --- the client's side -------------------------------------------------------------------------


def _visible_text(name: str, data: bytes) -> str:
    """What a reader of a feedback file sees: HTML without tags, entities decoded; a notebook's
    sources and outputs; any other file as text."""
    text = data.decode("utf-8", errors="replace")
    if name.endswith(".html"):
        return html.unescape(re.sub(r"<[^>]+>", "", text))
    if name.endswith(".ipynb"):
        try:
            nb = json.loads(text)
        except json.JSONDecodeError:
            return text
        parts = []

        def add(value):
            parts.append("".join(value) if isinstance(value, list) else str(value))

        for cell in nb.get("cells", []):
            add(cell.get("source", ""))
            for output in cell.get("outputs", []):
                for key in ("text", "ename", "evalue"):
                    add(output.get(key, ""))
                parts.extend(str(line) for line in output.get("traceback", []))
                for value in output.get("data", {}).values():
                    add(value)
        return "\n".join(parts)
    return text


def hidden_lines_in_feedback(files: dict[str, bytes], hidden: list[str], submitted: set[str]) -> list[str]:
    """The hidden-test lines (``grader.markers.secret_lines``) a student would see in the feedback
    ``files`` (``{name: bytes}``), but for lines the student's own notebook holds."""
    text = "\n".join(_visible_text(name, data) for name, data in files.items())
    return [line for line in hidden if line not in submitted and line in text]


def _submitted_lines(data: bytes) -> set[str]:
    try:
        nb = json.loads(data)
        sources = [c.get("source", "") for c in nb.get("cells", [])]
    except (ValueError, AttributeError):
        return set()
    return {line.strip() for source in sources
            for line in ("".join(source) if isinstance(source, list) else str(source)).splitlines()}


def _payload(task: dict) -> dict:
    """The task as it travels: the submission's files as bytes, never a path of this machine."""
    notebook = pathlib.Path(task["notebook"])
    files = {f"{task['assignment']}.ipynb": notebook.read_bytes()}
    if notebook.parent.name == task["assignment"]:
        # As a local run does (grader.autograde): nbgrader's exchange files beside the notebook.
        for path in notebook.parent.iterdir():
            if path.is_file() and path.suffix != ".ipynb":
                files[path.name] = path.read_bytes()
    return {"student": task["student"], "assignment": task["assignment"], "notes": list(task["notes"]),
            "timeout": task["timeout"], "limit_s": task["limit_s"], "files": files}


def _failed(task: dict, why: str) -> dict:
    """The row of a submission the cluster could not grade (the next run grades it again)."""
    return {"student": task["student"], "assignment": task["assignment"], "status": "grader_error", "points": 0.0,
            "max_points": 0.0, "cells": {}, "flags": [], "events": [], "refused": [], "details": [why],
            "source_hash": task["source_hash"], "submission_hash": task["submission_hash"],
            "submission": task["notebook"], "seconds": 0.0}


def _write_back(task: dict, reply: dict, out: pathlib.Path, hidden: list[str], regraded: list[str]) -> dict:
    """Write what a worker sent back where a local run writes it, the result last; return the result."""
    from grader.autograde import write_result

    result = dict(reply["result"])
    if (result.get("student"), result.get("assignment")) != (task["student"], task["assignment"]):
        return write_result(_failed(task, f"worker {reply['worker']} answered for another submission"),
                            task["result_path"])
    student, assignment = task["student"], task["assignment"]
    files = reply["files"]
    expected = {"feedback": {f"{assignment}.html", f"{assignment}.ipynb", "timestamp.txt", "submission_secret.txt"},
                "autograded": {f"{assignment}.ipynb"}, "work": {"gradebook.db"}, "log": {f"{assignment}.log"}}
    strange = [f"{place}/{name}" for place, names in files.items() for name in names
               if name not in expected.get(place, ())]
    if strange:
        return write_result(_failed(task, f"worker {reply['worker']} sent unexpected files: {', '.join(strange)}"),
                            task["result_path"])
    feedback_dir = out / "feedback" / student / assignment
    autograded_dir = out / "autograded" / student / assignment
    work = pathlib.Path(task["work_dir"])
    for stale in (feedback_dir, autograded_dir, work):
        shutil.rmtree(stale, ignore_errors=True)
    leaked = hidden_lines_in_feedback(files["feedback"], hidden,
                                      _submitted_lines(pathlib.Path(task["notebook"]).read_bytes()))
    if leaked:
        result = _failed(task, f"the feedback from worker {reply['worker']} showed {len(leaked)} hidden-test "
                               "line(s) and was withheld")
    else:
        for place, folder in (("feedback", feedback_dir), ("autograded", autograded_dir), ("work", work),
                              ("log", work.parent)):
            if files[place]:
                folder.mkdir(parents=True, exist_ok=True)
            for name, data in files[place].items():
                (folder / name).write_bytes(data)
    result["submission"] = task["notebook"]
    result["worker"] = reply["worker"]
    if regraded:
        result["regraded"] = regraded
    return write_result(result, task["result_path"])


class _Cluster:
    """The run as the client sees it: workers that accepted or refused it, what each graded, the tasks a
    lost worker held. Scheduler events arrive on the client's event loop, hence the lock."""

    def __init__(self, run_id: str, keys: dict):
        self.run_id = run_id
        self.keys = keys                          # task key -> "student/assignment"
        self.lock = threading.Lock()
        self.accepted: dict[str, dict] = {}       # address -> {"threads", "since"}
        self.refused: dict[str, str] = {}         # address -> why
        self.names: dict[str, str] = {}           # address -> the worker's name
        self.lost: dict[str, list[str]] = collections.defaultdict(list)   # task key -> workers lost holding it
        self.done: collections.Counter = collections.Counter()
        self.news: list[str] = []                 # refusals to print

    def label(self, address: str) -> str:
        """``name (host:port)``, or ``host:port`` for a worker without a name of its own (a worker restarted
        by its nanny keeps its name, not its address)."""
        name = self.names.get(address)
        where = address.split("://")[-1]
        return f"{name} ({where})" if name and name != address else where

    def on_event(self, event) -> None:
        _, msg = event
        if not isinstance(msg, dict) or msg.get("run") != self.run_id:
            return
        if msg["event"] in ("accepted", "refused"):
            self.verdict(msg["worker"], {"name": msg.get("name"), "threads": msg.get("threads", 1),
                                         "refused": msg.get("why")})

    def verdict(self, address: str, verdict: dict) -> None:
        """A worker accepted the run or refused it (``worker_verdict``; the event a worker logs)."""
        with self.lock:
            if verdict.get("name"):
                self.names[address] = verdict["name"]
            if verdict["refused"] is None:
                self.accepted.setdefault(address, {"since": time.monotonic()})["threads"] = verdict["threads"]
            elif address not in self.refused:
                self.refused[address] = verdict["refused"]
                self.news.append(f"worker {self.label(address)} refused: {verdict['refused']}")

    def on_scheduler_event(self, event) -> None:
        _, msg = event
        if not isinstance(msg, dict) or msg.get("action") != "remove-worker":
            return
        address = msg.get("worker")
        with self.lock:
            label = self.label(address)
            self.accepted.pop(address, None)
            for key in {*msg.get("processing-tasks", ()), *msg.get("lost-computed-tasks", ())}:
                if key in self.keys:
                    self.lost[key].append(label)

    def threads(self) -> int:
        with self.lock:
            return sum(info["threads"] for info in self.accepted.values())

    def rates(self) -> str:
        """Notebooks per minute of each worker that graded any, since it joined the run."""
        now = time.monotonic()
        with self.lock:
            shown = []
            for address, count in sorted(self.done.items()):
                since = self.accepted.get(address, {}).get("since")
                rate = f"{60 * count / max(now - since, 1e-9):.1f}/min" if since else "gone"
                shown.append(f"{self.label(address)}: {count}, {rate}")
            return ", ".join(shown)


def _write_missing(run: GradingRun) -> None:
    for task in run.todo:
        if task["notebook"] is None:             # a missing notebook needs no grading process
            run_task(task, env={}, limit_s=0)


def _connect(scheduler, local_workers: int):
    """(client, cluster to close or None, whether to close the client)."""
    from distributed import Client, LocalCluster

    if isinstance(scheduler, Client):
        return scheduler, None, False
    if scheduler == "local":
        cluster = LocalCluster(n_workers=local_workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0")
        return Client(cluster), cluster, True
    try:
        if os.path.isfile(str(scheduler)):
            return Client(scheduler_file=str(scheduler), timeout=30), None, True
        return Client(str(scheduler), timeout=30), None, True
    except (OSError, TimeoutError) as exc:
        raise ClusterUnavailable(f"could not reach the Dask scheduler at {scheduler}: {exc}") from None


def _wait_for_workers(client, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not client.scheduler_info(n_workers=-1)["workers"]:
        if time.monotonic() > deadline:
            raise ClusterUnavailable(f"the cluster has no worker (waited {seconds:.0f} s): start some with "
                                     f"`dask worker {client.scheduler.address}` in the course's folder")
        time.sleep(0.5)


def grade_on_cluster(run: GradingRun, scheduler, *, device: str = "simulator", progress: bool = True,
                     local_workers: int = 1) -> None:
    """Grade ``run.todo`` on the cluster of ``scheduler``; write every result into ``run.out`` (see the
    module docstring). scheduler: an address (``tcp://host:8786``), a scheduler file, ``"local"`` (a
    cluster of ``local_workers`` processes on this machine, stopped at the end) or a
    ``distributed.Client``. Raises ``CourseMismatch`` when every worker refuses the run and
    ``ClusterUnavailable`` when there is no worker."""
    from distributed import KilledWorker, wait
    from tqdm import tqdm

    from grader.autograde import root_cause, write_result
    from grader.markers import read_notebook, secret_lines

    remote = [t for t in run.todo if t["notebook"] is not None]
    if not remote:
        _write_missing(run)
        return
    run_id = uuid.uuid4().hex[:12]
    keys = {f"course-grade-{run_id}-{t['student']}/{t['assignment']}": t for t in remote}
    state = _Cluster(run_id, {key: f"{t['student']}/{t['assignment']}" for key, t in keys.items()})
    isolation = all(t["isolation"] for t in remote)
    plugin = CourseWorker(run_id=run_id, identity=course_identity(run.root), names=run.names, device=device,
                          isolation=isolation, compile_limit_s=max(t["timeout"] for t in remote))
    hidden = {n: secret_lines(read_notebook(run.root / "solutions" / n / f"{n}.ipynb"), "hidden") for n in run.names}
    client, cluster, close_client = _connect(scheduler, local_workers)
    bar = None
    registered = False
    in_flight: dict = {}
    try:
        client.subscribe_topic(TOPIC, state.on_event)
        client.subscribe_topic("all", state.on_scheduler_event)
        _wait_for_workers(client, WORKER_WAIT_S)
        try:
            client.register_plugin(plugin, name=plugin.name)
        except Exception as exc:  # noqa: BLE001 - a worker without this grader cannot even load the plugin
            raise CourseMismatch(f"a worker of the cluster could not take part ({type(exc).__name__}: {exc}); "
                                 "its course is not this one") from None
        registered = True
        for address, verdict in client.run(worker_verdict, plugin.name).items():
            state.verdict(address, verdict)
        if not state.accepted:
            raise CourseMismatch("no worker of the cluster grades this course: " + "; ".join(
                f"worker {state.label(a)} refused: {why}" for a, why in state.refused.items()))
        _write_missing(run)
        bar = tqdm(total=len(remote), desc="grading on the cluster", unit="notebook", disable=not progress,
                   file=sys.stderr)
        pending = collections.deque(keys)
        alone_since = None
        while pending or in_flight:
            window = max(4, 2 * state.threads())
            while pending and len(in_flight) < window:
                key = pending.popleft()
                future = client.submit(grade_submission, plugin.name, _payload(keys[key]), key=key, pure=False,
                                       resources={plugin.resource: 1})
                in_flight[future] = key
            try:
                finished, _ = wait(list(in_flight), timeout=2, return_when="FIRST_COMPLETED")
            except TimeoutError:
                finished = set()
            with state.lock:
                news, state.news = state.news, []
            for line in news:
                (bar.write if progress else lambda text: print(text, file=sys.stderr))(f"course grade: {line}")
            for future in finished:
                key = in_flight.pop(future)
                task = keys[key]
                with state.lock:
                    lost = list(state.lost.get(key, []))
                try:
                    reply = future.result()
                except KilledWorker:
                    result = write_result(_failed(task, f"the workers holding it were lost {len(lost) or 'several'} "
                                                        f"times ({', '.join(lost)}); the next run grades it again"),
                                          task["result_path"])
                except Exception as exc:  # noqa: BLE001 - one submission's failure must not lose its row
                    result = write_result(_failed(task, f"not graded on the cluster: {type(exc).__name__}: "
                                                        f"{root_cause(str(exc))}"), task["result_path"])
                else:
                    regraded = [f"worker {w} was lost while it held it; graded again on "
                                f"{state.label(reply['worker'])}" for w in lost]
                    result = _write_back(task, reply, run.out, hidden[task["assignment"]], regraded)
                    with state.lock:
                        state.done[reply["worker"]] += 1
                future.release()
                bar.set_postfix_str(f"{result['student']}/{result['assignment']}: {result['status']}; "
                                    f"{state.rates()}", refresh=False)
                bar.update(1)
            if state.threads() or not in_flight:
                alone_since = None
            elif alone_since is None:
                alone_since = time.monotonic()
            elif time.monotonic() - alone_since > WORKER_WAIT_S:
                raise ClusterUnavailable(f"every worker that took part in the run is gone, and none came back in "
                                         f"{WORKER_WAIT_S} s; run the same command again to resume")
    except KeyboardInterrupt:
        print("\ncourse grade: interrupted; run the same command again to resume", file=sys.stderr)
        raise
    finally:
        if in_flight:
            client.cancel(list(in_flight))
        if bar is not None:
            bar.close()
        if registered:
            try:
                client.unregister_worker_plugin(plugin.name)
            except Exception:  # noqa: BLE001 - a cluster going away takes the plugin with it
                pass
        for topic in (TOPIC, "all"):
            try:
                client.unsubscribe_topic(topic)
            except ValueError:
                pass
        if close_client:
            client.close()
        if cluster is not None:
            cluster.close()
