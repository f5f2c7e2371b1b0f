"""The compiler helper a grading run shares between its submissions, started by ``grader.compile_service``.

``python -m grader.compile_server LIMIT_S`` loads numba-cuda's GPU compiler once (``course.gpu_compile``
compiles, as it does in a student's own helper) and then compiles each request in a fresh fork of
itself under the grader's guard (:func:`serve_forking`), so no request's code runs where another is
compiled. The course's own helper, one per process without a grader, is ``course.gpu_compile.serve``.
"""

from __future__ import annotations

import json
import os
import sys

from course.gpu_compile import compile_request, warm_up
from grader import guard        # loaded before any fork: no child imports it itself

# What a compile may do in its process: nothing but compile (grader.guard; no library is trusted).
_CHILD_GUARD = {"deny_write": ["/"], "trust_libraries": False}


def _compile_in_child(request: dict, answer_fd: int) -> None:
    """In a fresh fork: keep only the answer pipe, guard the process, compile, answer, exit."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # Nothing of the server (its input, its output, other compiles' pipes) stays reachable.
        os.closerange(3, answer_fd)
        os.closerange(answer_fd + 1, 1 << 16)
        guard.install(_CHILD_GUARD)
        data = json.dumps(compile_request(request)).encode()
        while data:
            data = data[os.write(answer_fd, data):]
    finally:
        os._exit(0)


def _not_dumpable() -> None:
    """Make this process (and every fork of it) undumpable: no other process of the same user can then
    open its descriptors or memory through ``/proc`` (so a compile that escaped its guard still could not
    write answers into the server's output). Linux only; elsewhere nothing happens."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)      # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def serve_forking(limit_s: float = 600.0, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
    """The helper :class:`grader.compile_service.CompileService` shares between the submissions of a run.

    It loads the compiler once and then never compiles in its own process: per request line
    ``{"id": n, "request": {...}}`` it forks a child that compiles that request alone and answers
    through a pipe of its own, and writes ``{"id": n, "answer": {...}}`` (or ``{"id": n, "failed":
    why}`` when the child gave no answer within ``limit_s`` seconds or died). So no request's code
    (a kernel's source is executed to define it) ever runs where a later request is compiled, and
    every answer depends on its request only. The child closes every descriptor but its answer pipe
    and installs the grader's guard (no files written, no processes, no signals, no ctypes) before it
    reads the request. The server ends when its input closes.
    """
    import selectors
    import signal
    import time

    hello = warm_up()
    _not_dumpable()

    out = os.fdopen(stdout_fd, "wb", buffering=0)

    def send(message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[out.write(data):]

    send(hello)
    if not hello["ready"]:
        return
    selector = selectors.DefaultSelector()
    selector.register(stdin_fd, selectors.EVENT_READ, None)
    children: dict[int, dict] = {}          # answer pipe -> {"id", "pid", "data", "started"}
    pending = b""
    open_input = True

    def finish(fd: int, message: dict) -> None:
        child = children.pop(fd)
        selector.unregister(fd)
        os.close(fd)
        try:
            os.kill(child["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        send({"id": child["id"], **message})

    while open_input or children:
        for key, _ in selector.select(timeout=1.0):
            if key.fd == stdin_fd:
                chunk = os.read(stdin_fd, 1 << 20)
                if not chunk:
                    open_input = False
                    selector.unregister(stdin_fd)
                    for fd in list(children):
                        finish(fd, {"failed": "the grading run ended"})
                    continue
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if not line.strip():
                        continue
                    message = json.loads(line)
                    read_fd, write_fd = os.pipe()
                    pid = os.fork()
                    if pid == 0:
                        os.close(read_fd)
                        _compile_in_child(message["request"], write_fd)
                    os.close(write_fd)
                    children[read_fd] = {"id": message["id"], "pid": pid, "data": b"", "started": time.monotonic()}
                    selector.register(read_fd, selectors.EVENT_READ, None)
            else:
                chunk = os.read(key.fd, 1 << 20)
                if chunk:
                    children[key.fd]["data"] += chunk
                    continue
                try:
                    answer = json.loads(children[key.fd]["data"])
                    ok = isinstance(answer, dict) and isinstance(answer.get("errors"), list)
                except ValueError:
                    ok = False
                finish(key.fd, {"answer": answer} if ok else {"failed": "the compiler's process died"})
        now = time.monotonic()
        for fd, child in list(children.items()):
            if now - child["started"] > limit_s:
                finish(fd, {"failed": f"compiling took longer than {limit_s:.0f} s"})
        while True:          # reap finished children
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


if __name__ == "__main__":
    serve_forking(*map(float, sys.argv[1:2]))
