"""The GPU compile check of a grading run, shared by its submissions and remembered per request.

Every grading kernel checks each kernel of the submission by compiling it for sm_80 and sm_90
(``course.gates``, ``course.gpu_compile``). Alone, each kernel starts its own compiler helper
(about 1.5 s of CPU) and compiles every kernel it launches, although most submissions of a class
hold the same kernels in many of their cells (unchanged cells of the release, a common answer).
``course grade`` instead runs one ``CompileService`` for the run:

- the service listens on a Unix socket in a private folder; each grading kernel connects to it
  (the socket file is bound into the kernel's sandbox) before its guard is installed, and sends
  the same requests it would send its own helper;
- an answer is remembered under the SHA-256 of the exact request (the kernel's source, file name
  and first line, the globals it uses as data, the argument types, the targets), so a request
  byte for byte the same as an earlier one gets the earlier answer;
- a request not seen yet goes to one helper started for the run, inside a sandbox of its own
  (``grader.guard.sandbox_command``: nothing of the grader's, nothing writable that matters),
  which compiles each request in a fresh fork of itself that runs nothing else, under the
  grader's guard (``grader.compile_server``). The helper's own process never runs a
  request's code.

Why sharing cannot change a grade: an answer is computed from its request alone, by a process in
which no other request ran, and it is remembered only here, in the grading process, which student
code cannot reach (no kernel can write to it; the socket carries requests in and answers out). A
submission can only get answers to the requests it sends, the same answers its own helper would
have given. The helper makes itself undumpable before it forks, so a compile that got past its
guard could still not open the helper's output through ``/proc`` to forge another request's answer
(whose id, a random token, it could not guess either). An answer is remembered only when the compile finished and answered; a helper that
died, or a compile that ran past the time limit, is answered as unavailable and asked again next
time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import secrets
import threading

# The longest request line a kernel may send (a kernel's source and its device functions).
MAX_REQUEST_BYTES = 4 << 20


def request_key(request: dict) -> str:
    """The key an answer is remembered under: the SHA-256 of the request as canonical JSON."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _valid_request(request) -> bool:
    return (isinstance(request, dict) and set(request) == {"bundle", "args", "ccs"}
            and isinstance(request["bundle"], dict) and isinstance(request["args"], list)
            and isinstance(request["ccs"], list))


class CompileService:
    """One compile helper and one memory of answers for a grading run (see the module docstring).

    ``path`` is the socket the grading kernels connect to. ``limit_s``: the longest a single
    compile may take (the run's per-cell timeout: the cell that waits for it has failed by then).
    ``sandboxed``: run the helper in a bubblewrap sandbox (``course grade`` with isolation).
    """

    def __init__(self, *, limit_s: float = 120.0, sandboxed: bool = True):
        self.limit_s = float(limit_s)
        self.sandboxed = sandboxed
        self.folder = tempfile.mkdtemp(prefix="course-compile-")
        self.path = os.path.join(self.folder, "compile.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(self.path)
            self._listener.listen(64)
        except OSError:
            self._listener.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self._lock = threading.Lock()
        self._answers: dict[str, dict] = {}           # request key -> answer
        self._computing: dict[str, threading.Event] = {}
        self._waiting: dict[str, dict] = {}           # request id -> {"event", "reply", "helper"}
        self._helper: subprocess.Popen | None = None
        self._hello: dict | None = None
        self._helper_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        self.stats = {"requests": 0, "remembered": 0, "compiled": 0}      # answered from memory / compiled
        threading.Thread(target=self._accept, name="compile-service", daemon=True).start()

    # --- answering -----------------------------------------------------------------------------

    def answer(self, request: dict) -> dict:
        """``{"errors": [...]}`` for a request (remembered or compiled now), or ``{"unavailable": why}``
        (the kernel raises ``CompilerUnavailable`` with it, as when a helper of its own fails)."""
        if not _valid_request(request):
            return {"unavailable": "not a compile request"}
        key = request_key(request)
        with self._lock:
            self.stats["requests"] += 1
        while True:
            with self._lock:
                if key in self._answers:
                    self.stats["remembered"] += 1
                    return self._answers[key]
                event = self._computing.get(key)
                if event is None:
                    event = self._computing[key] = threading.Event()
                    break
            event.wait()      # the same request is being compiled for another kernel: wait for its answer
        try:
            reply = self._compile(request)
            if "answer" in reply:
                with self._lock:
                    self._answers[key] = reply["answer"]
                    self.stats["compiled"] += 1
                return reply["answer"]
            return {"unavailable": reply.get("failed", "the GPU compiler helper exited")}
        finally:
            with self._lock:
                self._computing.pop(key, None)
            event.set()

    def _compile(self, request: dict) -> dict:
        helper = self._start_helper()
        if helper is None:
            why = (self._hello or {}).get("why", "the helper did not start")
            return {"failed": f"numba-cuda's GPU compiler is not available here: {why} (install the course's "
                              "dependencies: nvidia-nvvm and nvidia-cuda-nvrtc)"}
        with self._lock:
            number = secrets.token_hex(16)      # not guessable by a compile that runs beside it
            waiting = self._waiting[number] = {"event": threading.Event(), "reply": None, "helper": helper}
        try:
            with self._helper_lock:
                helper.stdin.write((json.dumps({"id": number, "request": request}) + "\n").encode())
                helper.stdin.flush()
        except (OSError, ValueError):
            with self._lock:
                self._waiting.pop(number, None)
            return {"failed": "the GPU compiler helper exited"}
        # The helper answers every request within its limit; a little more for a busy machine.
        if not waiting["event"].wait(self.limit_s + 60):
            with self._lock:
                self._waiting.pop(number, None)
            return {"failed": f"compiling took longer than {self.limit_s:.0f} s"}
        return waiting["reply"]

    def _start_helper(self) -> subprocess.Popen | None:
        """The running helper, started now if needed; None where it cannot run (said in ``_hello``)."""
        with self._helper_lock:
            if self._helper is None or self._helper.poll() is not None:
                started = threading.Event()
                # A thread of its own starts and reads the helper for as long as it runs: the sandbox
                # dies with the thread that started it (bubblewrap's --die-with-parent).
                threading.Thread(target=self._run_helper, args=(started,), name="compile-helper",
                                 daemon=True).start()
                started.wait()
            return self._helper if (self._hello or {}).get("ready") else None

    def _run_helper(self, started: threading.Event) -> None:
        from course.gpu_compile import PROJECT_ROOT

        try:
            env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "COURSE_DEVICE": "gpu",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
            command = [sys.executable, "-m", "grader.compile_server", str(self.limit_s)]
            cwd = str(PROJECT_ROOT)
            if self.sandboxed:
                from grader.guard import sandbox_command

                cwd = tempfile.mkdtemp(prefix="scratch-", dir=self.folder)     # empty, and nothing to write
                command = sandbox_command(command, scratch=cwd)
            helper = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
            line = helper.stdout.readline()
            try:
                hello = json.loads(line) if line else {"ready": False, "why": "the helper exited"}
            except ValueError:
                hello = {"ready": False, "why": "the helper did not answer"}
        except Exception as exc:  # noqa: BLE001 - a helper that cannot start is an answer, not a crash
            self._helper, self._hello = None, {"ready": False, "why": f"{type(exc).__name__}: {exc}"}
            started.set()
            return
        self._helper, self._hello = helper, hello
        started.set()
        for line in helper.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                waiting = self._waiting.pop(message.get("id"), None)
            if waiting is not None:
                waiting["reply"] = message
                waiting["event"].set()
        helper.wait()
        # The helper is gone: whoever still waits for it gets no answer (a new one starts on the next request).
        with self._lock:
            lost = [n for n, item in self._waiting.items() if item["helper"] is helper]
            lost = [self._waiting.pop(n) for n in lost]
        for item in lost:
            item["reply"] = {"failed": "the GPU compiler helper exited"}
            item["event"].set()

    # --- the socket ----------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._connections.add(connection)
            threading.Thread(target=self._serve, args=(connection,), name="compile-client", daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        """One grading kernel: a request per line in, its answer per line out, one at a time."""
        try:
            reader = connection.makefile("rb")
            while True:
                line = reader.readline(MAX_REQUEST_BYTES + 1)
                if not line or len(line) > MAX_REQUEST_BYTES or not line.endswith(b"\n"):
                    return
                try:
                    request = json.loads(line)
                except ValueError:
                    return
                connection.sendall((json.dumps(self.answer(request)) + "\n").encode())
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(connection)
            connection.close()

    def close(self) -> None:
        """Stop listening, end the helper and remove the socket's folder."""
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._helper_lock:
            helper, self._helper = self._helper, None
        if helper is not None:
            try:
                helper.stdin.close()
            except OSError:
                pass
            try:
                helper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
