"""Host-Python answers: driven in the notebook, and in a process of their own when graded.

Most exercises are kernels, and the grader runs nothing of a submission but its kernels
(``grader/cleanroom.py``). Day 6's allocator exercise is host Python: a class with ``append`` and
``fork`` on top of ``kernels.block_pool.BlockPool``. Run in the grading kernel, such code could
rebind whatever the hidden tests use, so the grader never runs it there. The cleanroom turns the
answer cell into a ``HostCode`` (its source and the names it defines), and a check hands that to
``run``, which executes it in a new Python process:

- the process holds the base classes the exercise gives (``BlockPool``, ``Step``, ``OutOfBlocks``),
  loaded from their file, and nothing else of the course: a ``kernels`` package with that one module,
  so the course's own ``BlockManager`` cannot be imported, and a guard (``grader/guard.py``) that
  refuses reading the course's folders, writing any file, starting processes and the network;
- it drives the class through the operations it is given (``drive``) and writes back only data:
  per operation, what the call returned or raised, and the state the class reports afterwards;
- the check judges that data in the grading kernel, where nothing of the submission ran.

In the student's notebook (Validate, ``course check``) ``run`` drives the class in place: the same
operations, the same record, the same judge.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

TIMEOUT_S = 60
MAX_OUTPUT = 8 * 1024 * 1024
PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
# What the answer's process may not read (the guard's deny_read): the course, its solutions and tests.
PRIVATE_FOLDERS = ("kernels", "course", "grader", "solutions", "exercises", "lessons", "tests", ".git")


class HostCode:
    """A name an answer cell defines, standing in for it where the grader runs that cell elsewhere."""

    def __init__(self, source: str, name: str):
        if not isinstance(source, str) or not isinstance(name, str) or not name.isidentifier():
            raise TypeError("HostCode needs the cell's source (str) and a name it defines (an identifier)")
        self.source, self.name = source, name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} is host Python: when graded it runs in a process of its own, "
                           "driven by the exercise's checks, not in this notebook")

    def __repr__(self) -> str:
        return f"<{self.name}: host Python, run in a process of its own when graded>"


def is_host_code(answer) -> bool:
    return type(answer).__name__ == "HostCode" and isinstance(getattr(answer, "source", None), str)


# --- driving an allocator ---------------------------------------------------------------------------

def _ints(values, what: str) -> list:
    out = []
    for value in values:
        if isinstance(value, bool):
            raise TypeError(f"{what} holds {value!r}, not an int")
        out.append(int(value))
    return out


def _step(step) -> dict:
    copies, writes = getattr(step, "copies", None), getattr(step, "writes", None)
    if copies is None or writes is None:
        raise TypeError(f"returned {type(step).__name__}, not a Step (with copies and writes)")
    return {"copies": [_ints(pair, "a copy") for pair in copies], "writes": [_ints(pair, "a write") for pair in writes]}


def _state(manager, handles: dict, num_blocks: int) -> dict:
    return {"tables": {str(h): _ints(manager.block_table(seq), "a block table") for h, seq in handles.items()},
            "refs": [int(manager.refcount(b)) for b in range(num_blocks)],
            "free": int(manager.num_free)}


def enumerate_handles(ops: list) -> list[tuple]:
    """``(handle, op)``: the handle an ``add`` or ``fork`` gives its sequence (None for other operations),
    counted whether or not the call succeeds, so that later operations name sequences the same way."""
    out, made = [], 0
    for op in ops:
        if op[0] in ("add", "fork"):
            out.append((made, op))
            made += 1
        else:
            out.append((None, op))
    return out


def drive(factory, scenarios: list[dict], *, out_of_blocks=None) -> list[list[dict]]:
    """Run each scenario's operations on a new ``factory(num_blocks, block_size)``; record each.

    An operation is ``["add", tokens]``, ``["append", h, token]``, ``["fork", h]`` or ``["free", h]``,
    where ``h`` counts the sequences of the scenario in the order ``add`` and ``fork`` made them. The
    record of an operation holds ``result`` (the handle a new sequence got, or the Step as lists),
    or ``out_of_blocks`` / ``error`` (the exception's type and message), and ``state`` afterwards:
    every live sequence's block table, the reference count of every block, the number free.
    """
    if out_of_blocks is None:
        from kernels.block_pool import OutOfBlocks as out_of_blocks
    records = []
    for scenario in scenarios:
        num_blocks, block_size = scenario["num_blocks"], scenario["block_size"]
        log: list[dict] = []
        records.append(log)
        try:
            manager = factory(num_blocks, block_size)
        except Exception as exc:  # noqa: BLE001 - the student's class: record what it raised
            log.append({"at": "init", "error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        handles: dict[int, object] = {}
        for handle, op in enumerate_handles(scenario["ops"]):
            record: dict = {}
            if op[0] != "add" and op[1] not in handles:
                # the add that would have made it ran out of blocks: nothing to do
                log.append({"skipped": f"sequence {op[1]} does not exist"})
                continue
            try:
                if op[0] == "add":
                    seq, step = manager.add_sequence(op[1])
                    handles[handle] = seq
                    record["result"] = {"handle": handle, **_step(step)}
                elif op[0] == "append":
                    record["result"] = _step(manager.append(handles[op[1]], op[2]))
                elif op[0] == "fork":
                    handles[handle] = manager.fork(handles[op[1]])
                    record["result"] = {"handle": handle}
                elif op[0] == "free":
                    manager.free(handles.pop(op[1]))
                    record["result"] = {}
                else:
                    raise ValueError(f"unknown operation {op[0]!r}")
                record["state"] = _state(manager, handles, num_blocks)
            except out_of_blocks as exc:
                record["out_of_blocks"] = str(exc)[:500]
                record["state"] = _state(manager, handles, num_blocks)
            except Exception as exc:  # noqa: BLE001
                record["error"] = f"{type(exc).__name__}: {exc}"[:500]
            log.append(record)
            if "error" in record:
                break
    return records


def run(answer, scenarios: list[dict], *, timeout: float = TIMEOUT_S) -> list[list[dict]]:
    """``drive`` the allocator class ``answer``: in place, or, for a ``HostCode``, in a process of its own."""
    if not is_host_code(answer):
        if not isinstance(answer, type):
            raise TypeError(f"answer must be your allocator class, got {type(answer).__name__}")
        return drive(answer, scenarios)
    request = {"source": answer.source, "name": answer.name, "scenarios": scenarios, "timeout": timeout}
    reply = _runner.ask(request) if _runner is not None else _run_process(request)
    if "problem" in reply:
        raise AssertionError(f"{answer.name} could not be run: {reply['problem']}")
    return reply["records"]


def _run_process(request: dict) -> dict:
    """Run one answer in a new process (guarded: see ``_answer_process``); its reply, or the problem."""
    import subprocess

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    timeout = float(request.get("timeout", TIMEOUT_S))
    try:
        done = subprocess.run([sys.executable, "-I", "-B", str(pathlib.Path(__file__).resolve())],
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

        self.process = subprocess.Popen([sys.executable, "-I", "-B", str(pathlib.Path(__file__).resolve()), "--serve"],
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
    """Start the runner of host answers now (the grading kernel, before its guard is installed)."""
    global _runner
    if _runner is None or _runner.process.poll() is not None:
        _runner = _Runner()


def _serve() -> None:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(_run_process(json.loads(line))) + "\n")
            sys.stdout.flush()


# --- the answer's process -----------------------------------------------------------------------------

def _load(name: str, path: pathlib.Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _answer_process() -> None:
    import types

    reply_fd = os.dup(1)
    os.dup2(2, 1)                      # what the answer prints goes to stderr, never into the reply
    request = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull, encoding="utf-8")
    package = types.ModuleType("kernels")
    package.__path__ = []              # nothing else of the course can be found through it
    sys.modules["kernels"] = package
    pool = _load("kernels.block_pool", PROJECT_ROOT / "kernels" / "block_pool.py")
    package.block_pool = pool
    guard = _load("_course_guard", PROJECT_ROOT / "grader" / "guard.py")
    guard.install({"deny_read": [str(PROJECT_ROOT / f) for f in PRIVATE_FOLDERS], "deny_write": ["/"],
                   "trust_libraries": False})

    def reply(value: dict) -> None:
        os.write(reply_fd, (json.dumps(value) + "\n").encode())

    namespace = {"__name__": "__answer__", "BlockPool": pool.BlockPool, "Step": pool.Step,
                 "OutOfBlocks": pool.OutOfBlocks}
    try:
        exec(compile(request["source"], "<your answer cell>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - reported to the student, never raised here
        reply({"problem": f"the cell raised {type(exc).__name__}: {exc}"[:500]})
        return
    factory = namespace.get(request["name"])
    if not isinstance(factory, type):
        reply({"problem": f"the cell does not define the class {request['name']}"})
        return
    reply({"records": drive(factory, request["scenarios"], out_of_blocks=pool.OutOfBlocks)})


if __name__ == "__main__":
    _serve() if sys.argv[1:] == ["--serve"] else _answer_process()
