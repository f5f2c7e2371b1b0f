"""Host-Python answers when graded: each runs in a new, guarded Python process that sends back only data.

Most exercises are kernels, and the grader runs nothing of a submission but its kernels
(``grader/cleanroom.py``). An answer in host Python (day 6's allocator) could, run in the grading
kernel, rebind whatever the hidden tests use, so it never runs there: the cleanroom turns the answer
cell into a ``course.hostcode.HostCode`` (its source and the name it defines), and the exercise's
check hands it to ``course.hostcode.run`` with the exercise's ``HostExercise`` (the ``kernels``
module whose names the answer is given, those names, and the driver that runs it). ``run`` passes
the request to the runner this module registered (``start_runner``), which executes the answer in a
new process, ``python -I -B`` this file:

- the process runs in a sandbox of the operating system (``grader.guard.answer_sandbox_command``,
  bubblewrap) where the course does not exist: no package, solution or test of it is on its file
  system, however a path is spelt (``os.open(name, dir_fd=...)`` included). It receives the source of
  the base module the exercise names (loaded as the only module of an otherwise empty ``kernels``
  package) and of the driver's module (which imports only the standard library) in its request, and
  loads them before anything else; then the guard (``grader/guard.py``, the one other file it is given)
  refuses writing any file, starting processes and the network, trusting no library, as a second layer.
  Where bubblewrap is missing (grading run with ``--no-isolation``), only that second layer holds;
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
PRIVATE_FOLDERS = ("kernels", "course", "grader", "inference", "solutions", "exercises", "lessons", "tests",
                   ".git")
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


# Where the answer's process finds its two files inside its sandbox.
SANDBOXED_HERE, SANDBOXED_GUARD = "/answer/host_answers.py", "/answer/guard.py"


def answer_command() -> list[str]:
    """The command of an answer's process: this file run by this Python, in a sandbox where the course
    does not exist when bubblewrap is there (``grader.guard.answer_sandbox_command``)."""
    import shutil

    if shutil.which("bwrap") is None:
        return [sys.executable, "-I", "-B", str(HERE)]
    guard = _load("_course_guard", GUARD) if "_course_guard" not in sys.modules else sys.modules["_course_guard"]
    return guard.answer_sandbox_command([sys.executable, "-I", "-B", SANDBOXED_HERE],
                                        files={str(HERE): SANDBOXED_HERE, str(GUARD): SANDBOXED_GUARD})


def run_process(request: dict) -> dict:
    """Run one answer in a new process (sandboxed and guarded: see ``_answer_process``); its reply, or the
    problem.

    Only where starting a process is allowed: the grading kernel uses the runner (``start_runner``).
    """
    import subprocess

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    timeout = float(request.get("timeout", TIMEOUT_S))
    try:
        # The process gets the code it may hold as text: nothing of the course is on its file system.
        request = {**request, "base_source": module_file(request["base"], BASE_PACKAGES).read_text("utf-8"),
                   "driver_source": module_file(request["driver"], DRIVER_PACKAGES).read_text("utf-8")}
    except (KeyError, TypeError, ValueError, OSError) as exc:
        return {"problem": f"the grader's request is not one it can run: {exc}"}
    try:
        done = subprocess.run(answer_command(), input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=os.environ.get("TMPDIR", "/tmp"))
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


def _from_source(name: str, source: str, filename: str):
    """A module made from its source text, registered under ``name`` (dataclasses look it up)."""
    import types

    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def _load_base(name: str, source: str):
    """The base module from its source, in packages that hold nothing else (nothing more can be found)."""
    import types

    parts = name.split(".")
    if len(parts) < 2 or parts[0] not in BASE_PACKAGES or not all(p.isidentifier() for p in parts):
        raise ValueError(f"{name!r} is not a module of {' or '.join(BASE_PACKAGES)}")
    parent = None
    for depth in range(1, len(parts)):
        package = types.ModuleType(".".join(parts[:depth]))
        package.__path__ = []              # nothing else of the course can be found through it
        sys.modules[package.__name__] = package
        if parent is not None:
            setattr(parent, parts[depth - 1], package)
        parent = package
    module = _from_source(name, source, "/".join(parts) + ".py")
    setattr(parent, parts[-1], module)
    return module


def _answer_process() -> None:
    reply_fd = os.dup(1)
    os.dup2(2, 1)                      # what the answer prints goes to stderr, never into the reply
    request = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull, encoding="utf-8")
    base = _load_base(request["base"], request["base_source"])
    driver = getattr(_from_source("_host_driver", request["driver_source"], "_host_driver.py"), request["function"])
    given = {name: getattr(base, name) for name in request["names"]}
    guard = _load("_course_guard", GUARD)
    # Unsandboxed (no bubblewrap), the course is on the file system: the guard refuses reading it.
    guard.install({"deny_read": [str(PROJECT_ROOT / f) for f in PRIVATE_FOLDERS] + [str(HERE.parent)],
                   "deny_write": ["/"], "trust_libraries": False})

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
