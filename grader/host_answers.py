"""Host-Python answers when graded: each runs in a new, guarded Python process that sends back only data.

Most exercises are kernels, and the grader runs nothing of a submission but its kernels
(``grader/cleanroom.py``). An answer in host Python (day 6's allocator) could, run in the grading
kernel, rebind whatever the hidden tests use, so it never runs there: the cleanroom turns the answer
cell into a ``course.hostcode.HostCode`` (its source and the name it defines), and the exercise's
check hands it to ``course.hostcode.run`` with the exercise's ``HostExercise`` (the ``kernels``
module whose names the answer is given, those names, and the driver that runs it). ``run`` passes
the request to the runner this module registered (``start_runner``), which executes the answer in a
new process, ``python -I -B`` this file:

- the process loads, by their files and before anything else, the base module the exercise names (as
  the only module of an otherwise empty ``kernels`` package, so nothing else of the course can be
  imported) and the driver's module (which imports only the standard library); then the guard
  (``grader/guard.py``, loaded by its path) refuses reading the course's folders, writing any file,
  starting processes and the network, trusting no library;
- it runs the cell's source with the given names, calls ``driver(answer, data, base)`` and writes
  back only its data (JSON), or the problem; what the answer prints goes to stderr;
- the check judges that data in the grading kernel, where nothing of the submission ran.

The grading kernel's guard refuses starting processes, so the runner is a process started before the
guard is installed (``grader/execute.py`` starts it in the kernel's preamble); it only ever starts
this file's guarded answer process, one per request. Nothing here names an exercise: what a process
holds is what the request's declaration says.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

TIMEOUT_S = 60
MAX_OUTPUT = 8 * 1024 * 1024
HERE = pathlib.Path(__file__).resolve()
PROJECT_ROOT = HERE.parent.parent
GUARD = HERE.with_name("guard.py")
# What the answer's process may not read (the guard's deny_read): the course, its solutions and tests.
PRIVATE_FOLDERS = ("kernels", "course", "grader", "solutions", "exercises", "lessons", "tests", ".git")
# Where a request's base module and driver module may come from.
BASE_PACKAGES = ("kernels",)
DRIVER_PACKAGES = ("course", "kernels")


def module_file(name: str, packages: tuple[str, ...]) -> pathlib.Path:
    """The file of the project module ``name`` (``kernels.abc`` -> ``kernels/abc.py``),
    which must be a module (not a package) of one of ``packages``."""
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) < 2 or parts[0] not in packages or not all(p.isidentifier() for p in parts):
        raise ValueError(f"{name!r} is not a module of {' or '.join(packages)}")
    path = PROJECT_ROOT.joinpath(*parts).with_suffix(".py")
    if not path.is_file() or not path.resolve().is_relative_to(PROJECT_ROOT / parts[0]):
        raise ValueError(f"no module {name!r} in the project")
    return path


def run_process(request: dict) -> dict:
    """Run one answer in a new process (guarded: see ``_answer_process``); its reply, or the problem.

    Only where starting a process is allowed: the grading kernel uses the runner (``start_runner``).
    """
    import subprocess

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    timeout = float(request.get("timeout", TIMEOUT_S))
    try:
        done = subprocess.run([sys.executable, "-I", "-B", str(HERE)],
                              input=json.dumps(request), capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=os.environ.get("TMPDIR", "/tmp"))
    except subprocess.TimeoutExpired:
        return {"problem": f"it did not finish its operations within {timeout:g} s (an endless loop?)"}
    lines = done.stdout[-MAX_OUTPUT:].strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        reason = done.stderr.strip().splitlines()[-1:] or [f"its process ended with status {done.returncode}"]
        return {"problem": reason[0][:300]}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"problem": "its process sent back something that is not a record"}


class _Runner:
    """A process, started before the grading kernel's guard, that starts each answer's process.

    The guard refuses starting processes in the grading kernel; this runner was started before it
    existed and only ever starts ``_answer_process`` (guarded itself) for a request.
    """

    def __init__(self):
        import subprocess
        import threading

        self.process = subprocess.Popen([sys.executable, "-I", "-B", str(HERE), "--serve"],
                                        text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        self.lock = threading.Lock()

    def ask(self, request: dict) -> dict:
        with self.lock:
            if self.process.poll() is not None:
                return {"problem": "the grader's runner of host answers has exited"}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        return json.loads(answer) if answer else {"problem": "the grader's runner of host answers has exited"}


_runner: _Runner | None = None


def start_runner() -> None:
    """Start the runner of host answers now and register it with ``course.hostcode`` (the grading
    kernel, before its guard is installed)."""
    global _runner
    from course import hostcode

    if _runner is None or _runner.process.poll() is not None:
        _runner = _Runner()
    hostcode.set_runner(_runner.ask)


def _serve() -> None:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(run_process(json.loads(line))) + "\n")
            sys.stdout.flush()


# --- the answer's process -----------------------------------------------------------------------------

def _load(name: str, path: pathlib.Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _load_base(name: str):
    """The base module from its file, in packages that hold nothing else (nothing more can be found)."""
    import types

    path = module_file(name, BASE_PACKAGES)
    parts = name.split(".")
    parent = None
    for depth in range(1, len(parts)):
        package = types.ModuleType(".".join(parts[:depth]))
        package.__path__ = []              # nothing else of the course can be found through it
        sys.modules[package.__name__] = package
        if parent is not None:
            setattr(parent, parts[depth - 1], package)
        parent = package
    module = _load(name, path)
    setattr(parent, parts[-1], module)
    return module


def _answer_process() -> None:
    reply_fd = os.dup(1)
    os.dup2(2, 1)                      # what the answer prints goes to stderr, never into the reply
    request = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull, encoding="utf-8")
    base = _load_base(request["base"])
    driver = getattr(_load("_host_driver", module_file(request["driver"], DRIVER_PACKAGES)), request["function"])
    given = {name: getattr(base, name) for name in request["names"]}
    guard = _load("_course_guard", GUARD)
    guard.install({"deny_read": [str(PROJECT_ROOT / f) for f in PRIVATE_FOLDERS], "deny_write": ["/"],
                   "trust_libraries": False})

    def reply(value: dict) -> None:
        os.write(reply_fd, (json.dumps(value) + "\n").encode())

    namespace = {"__name__": "__answer__", **given}
    try:
        exec(compile(request["source"], "<your answer cell>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - reported to the student, never raised here
        reply({"problem": f"the cell raised {type(exc).__name__}: {exc}"[:500]})
        return
    answer = namespace.get(request["name"])
    if not (isinstance(answer, type) if request["answer"] == "class" else callable(answer)):
        reply({"problem": f"the cell does not define the {request['answer']} {request['name']}"})
        return
    reply({"result": driver(answer, request["data"], base)})


if __name__ == "__main__":
    _serve() if sys.argv[1:] == ["--serve"] else _answer_process()
