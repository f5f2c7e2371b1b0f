"""A guard installed in every grading kernel: what a submission may not do while it is graded.

``install(policy)`` adds a Python audit hook (PEP 578) to the kernel before the first cell runs.
Audit hooks cannot be removed from Python code once added. The hook refuses, with a
``PermissionError`` the student sees in the feedback, and records in a report file:

- reading or listing the grader's secrets: the solution notebooks, the sample submissions, any
  gradebook or database, the grading folder outside the submission's own working folder;
- writing, renaming or deleting anything inside the project (so ``course/checking.py`` on disk,
  which ``grader.hidden.pristine`` loads, cannot be rewritten, nor its cached bytecode) or the
  grading folder outside the submission's own working folder; bytecode caching that the import
  system attempts on its own is refused without being reported;
- starting processes, opening network connections, opening SQLite databases, and looking up C
  functions that would do the same through ``ctypes`` (``system``, ``open``, ``execve``, ...).

Library code that legitimately starts helper programs (``ctypes.util.find_library``, CUDA's
library finder, numba-cuda's driver) may, when it runs in its own module (code compiled by a
submission under a borrowed file name does not count).

Limits: an audit hook sees Python-level operations only. Native code that calls the C library
directly without ``ctypes`` look-ups (a compiled extension the student brings along) is not seen;
nbgrader's own kernel start-up happens before the guard exists. The grader's scan of the submitted
code flags ``ctypes``, ``exec`` and the like for an instructor's review.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import sys

# Audit events and the index of their path argument(s).
_READ_EVENTS = {"os.listdir": (0,), "os.scandir": (0,), "glob.glob": (0,), "glob.glob/2": (0,),
                "shutil.copyfile": (0,), "shutil.copytree": (0,), "shutil.make_archive": (1,)}
_WRITE_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1),
                 "os.mkdir": (0,), "os.chmod": (0,), "os.chown": (0,), "os.symlink": (0, 1), "os.link": (0, 1),
                 "os.truncate": (0,), "os.utime": (0,), "shutil.rmtree": (0,), "shutil.move": (0, 1),
                 "shutil.chown": (0,), "os.removexattr": (0,), "os.setxattr": (0,)}
_DENIED_EVENTS = {
    "subprocess.Popen": "starting a process", "os.system": "starting a process", "os.exec": "starting a process",
    "os.posix_spawn": "starting a process", "os.spawn": "starting a process", "os.fork": "starting a process",
    "os.forkpty": "starting a process", "pty.spawn": "starting a process", "os.startfile": "starting a process",
    "socket.connect": "a network connection", "socket.bind": "a network connection",
    "socket.getaddrinfo": "a network connection", "socket.sendto": "a network connection",
    "urllib.Request": "a network connection", "sqlite3.connect": "opening a database",
    "os.kill": "signalling a process", "os.killpg": "signalling a process",
}
# C functions a submission could reach through ctypes to do what the events above refuse.
_DENIED_C_FUNCTIONS = frozenset({
    "system", "popen", "execv", "execve", "execvp", "execl", "execlp", "fork", "vfork", "posix_spawn",
    "open", "open64", "openat", "openat64", "fopen", "fopen64", "creat", "unlink", "unlinkat", "rename",
    "renameat", "remove", "rmdir", "truncate", "socket", "connect", "kill", "ptrace", "dlopen",
})

_installed = False


def _trusted_locations() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files, folders) of library code allowed to start processes: ``ctypes.util.find_library``
    runs ldconfig/gcc (numba's import does), CUDA's library finder and numba-cuda's driver run
    helper programs on a GPU."""
    import ctypes.util
    import importlib.util

    folders = []
    for package in ("cuda.pathfinder", "numba_cuda"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            folders.extend(os.path.realpath(p) + os.sep for p in spec.submodule_search_locations)
    return (os.path.realpath(ctypes.util.__file__),), tuple(folders)


def _runs_trusted_code(frame, files, folders) -> bool:
    """True when ``frame`` or a caller runs code of a trusted library module, in that module's own
    globals (code compiled by a submission under a borrowed file name runs in other globals)."""
    for _ in range(60):
        if frame is None:
            return False
        filename = os.path.realpath(frame.f_code.co_filename)
        if filename in files or filename.startswith(folders):
            module = sys.modules.get(frame.f_globals.get("__name__", ""))
            if module is not None and getattr(module, "__dict__", None) is frame.f_globals \
                    and os.path.realpath(getattr(module, "__file__", "") or "") == filename:
                return True
        frame = frame.f_back
    return False


def _paths(values) -> list[str]:
    out = []
    for value in values:
        if isinstance(value, int):  # a file descriptor: already open, nothing to check
            continue
        try:
            raw = os.fsdecode(os.fspath(value))
        except TypeError:
            continue
        out.append(os.path.realpath(raw.split("*", 1)[0] or "."))
    return out


def _under(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def install(policy: dict | str) -> None:
    """Install the guard in this process (once; later calls do nothing).

    policy: dict or its JSON with lists of folders ``deny_read`` and ``deny_write``, a list
    ``allow`` of folders exempt from both (the submission's working folder), ``report``: a file to
    append one JSON line to per refused operation, and ``trust_libraries`` (default true): false
    lets no library start a process either (the process of a host answer, ``grader.host_answers``).
    """
    global _installed
    if _installed:
        return
    if isinstance(policy, str):
        policy = json.loads(policy)
    if not isinstance(policy, dict):
        raise TypeError(f"policy must be a dict or its JSON, got {type(policy).__name__}")
    deny_read = tuple(os.path.realpath(p) for p in policy.get("deny_read", []))
    deny_write = tuple(os.path.realpath(p) for p in policy.get("deny_write", []))
    allow = tuple(os.path.realpath(p) for p in policy.get("allow", []))
    report = open(policy["report"], "a", buffering=1, encoding="utf-8") if policy.get("report") else None
    database_suffixes = (".db", ".db-journal", ".sqlite", ".sqlite3")
    trusted_files, trusted_folders = _trusted_locations() if policy.get("trust_libraries", True) else ((), ())

    def refuse(what: str, detail: str):
        # Python's import system caches bytecode in __pycache__ and quietly goes on when it cannot:
        # refused (a forged .pyc would replace the checking code), but not a sign of cheating.
        if report is not None and os.sep + "__pycache__" + os.sep not in detail:
            report.write(json.dumps({"refused": what, "detail": detail}) + "\n")
        raise PermissionError(f"the grader does not allow {what} while grading ({detail})")

    def secret_to_read(path: str) -> bool:
        if _under(path, allow):
            return False
        name = os.path.basename(path).lower()
        return _under(path, deny_read) or name.endswith(database_suffixes) or "gradebook" in name

    def protected_to_write(path: str) -> bool:
        return not _under(path, allow) and (_under(path, deny_write) or _under(path, deny_read))

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode = args[0], args[1]
            writing = isinstance(mode, str) and any(c in mode for c in "wax+")
            if isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
                writing = True
            for p in _paths([path]):
                if secret_to_read(p):
                    refuse("reading grader files", p)
                if writing and protected_to_write(p):
                    refuse("writing into the course or grading folders", p)
        elif event in _READ_EVENTS:
            for p in _paths(args[i] for i in _READ_EVENTS[event] if i < len(args)):
                if secret_to_read(p):
                    refuse("reading grader files", p)
        elif event in _WRITE_EVENTS:
            for p in _paths(args[i] for i in _WRITE_EVENTS[event] if i < len(args)):
                if protected_to_write(p) or secret_to_read(p):
                    refuse("changing files in the course or grading folders", p)
        elif event in _DENIED_EVENTS:
            if _DENIED_EVENTS[event] == "starting a process" and _runs_trusted_code(
                    sys._getframe(1), trusted_files, trusted_folders):
                return
            refuse(_DENIED_EVENTS[event], f"{event}{args[:1]!r}")
        elif event == "ctypes.dlsym" and len(args) > 1 and args[1] in _DENIED_C_FUNCTIONS:
            refuse("calling C library functions that reach files, processes or the network",
                   f"ctypes {args[1]}")

    sys.addaudithook(hook)
    _installed = True


# --- isolation by the operating system ------------------------------------------------------------
#
# The audit hook above sees Python only. The grading kernel itself runs inside a bubblewrap
# sandbox (Linux namespaces): a file system of its own where only the system, the Python
# installation, the course's packages and the submission's scratch folder exist. Solutions,
# gradebooks, the grading output, other submissions and the repository's .git are not hidden by a
# rule that code could get around: they are not there. Only the scratch folder, a private /tmp and
# the guard's report file are writable.

ISOLATION_HELP = ("install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install "
                  "bubblewrap`, conda: `conda install -c conda-forge bubblewrap`) on a Linux machine that allows "
                  "user namespaces (a container needs them too, e.g. docker run --security-opt seccomp=unconfined); "
                  "or, on a machine with nothing secret on it, run `course grade --no-isolation`")
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_NAMESPACES = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent"]


def readable_folders() -> list[str]:
    """What a grading kernel needs to read: the Python installations and the course's packages."""
    import importlib.util
    import site

    folders = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), *map(os.path.realpath,
                                                                                    site.getsitepackages())}
    for package in ("course", "kernels", "grader", "inference"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            folders.update(os.path.realpath(p) for p in spec.submodule_search_locations)
    # One folder inside another is bound once, by the outer one.
    ordered = sorted(folders)
    return [f for f in ordered if not any(f != o and f.startswith(o.rstrip(os.sep) + os.sep) for o in ordered)]


def python_folders() -> list[str]:
    """The Python installation alone: its prefixes and site-packages, one folder inside another bound once."""
    import site

    folders = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), *map(os.path.realpath,
                                                                                    site.getsitepackages())}
    ordered = sorted(folders)
    return [f for f in ordered if not any(f != o and f.startswith(o.rstrip(os.sep) + os.sep) for o in ordered)]


def course_folders() -> list[str]:
    """Where the course's code and secrets lie: its packages (wherever Python finds them) and the folders
    of the repository beside them (solutions, exercises, lessons, tests, the git store)."""
    import importlib.util

    found = set()
    for package in ("course", "kernels", "grader", "inference"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            found.update(os.path.realpath(p) for p in spec.submodule_search_locations)
    root = pathlib.Path(__file__).resolve().parent.parent
    for name in ("course", "kernels", "grader", "inference", "solutions", "exercises", "lessons", "tests", ".git"):
        found.add(str(root / name))
    return sorted(found)


def answer_sandbox_command(command: list[str], *, files: dict[str, str], bwrap: str | None = None) -> list[str]:
    """``command`` in a bubblewrap sandbox where nothing of the course exists (a host answer's process).

    It sees the system folders and the Python installation, read-only; the course's packages and the
    repository's folders are absent (where one lies inside a bound folder, an empty folder covers it);
    ``files`` ({path here: path inside}) are bound read-only, one by one; a private /tmp is the working
    folder; no network. Works inside the grading kernel's own sandbox too (no /proc is mounted, which a
    nested sandbox may not do). The Python guard inside the process is a second layer: this one does not
    depend on seeing how a path was spelt (``os.open(name, dir_fd=...)`` included).
    """
    import shutil

    bwrap = bwrap or shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed: " + ISOLATION_HELP)
    # The private /tmp first: a Python installation inside /tmp (a course cloned there, its virtual
    # environment with it) is bound on top of it, not hidden under it.
    args = [bwrap, *_NAMESPACES, "--unshare-net", "--new-session", "--dev", "/dev", "--tmpfs", "/tmp"]
    bound = [folder for folder in SYSTEM_FOLDERS if os.path.isdir(folder)]
    for folder in bound:
        args += ["--ro-bind", folder, folder]
    for folder in python_folders():
        if not _under(folder, bound):
            args += ["--ro-bind", folder, folder]
            bound.append(folder)
    for folder in course_folders():
        if os.path.isdir(folder) and _under(folder, bound):
            args += ["--tmpfs", folder]
    for source, target in files.items():
        args += ["--ro-bind", source, target]
    args += ["--remount-ro", "/", "--chdir", "/tmp", "--"]
    return args + list(command)


def hidden_inside_readable() -> list[str]:
    """Folders inside the readable ones that hold secrets: the grader's sample submissions."""
    import importlib.util

    spec = importlib.util.find_spec("grader")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [os.path.join(os.path.realpath(p), "samples") for p in spec.submodule_search_locations
            if os.path.isdir(os.path.join(p, "samples"))]


SANDBOX_MPLCONFIGDIR = "/tmp/mplconfig"


@functools.lru_cache(maxsize=1)
def matplotlib_font_cache() -> list[str]:
    """Matplotlib's font list, built once per process in a folder of its own (``course grade`` builds
    it once per run and hands it to every grading process).

    Without it, a notebook's first plot inside the sandbox (an empty home) would build the list
    itself by running ``fc-list``, which the guard refuses: every notebook that plots would read as
    tampered. The files are bound read-only into the sandbox's ``SANDBOX_MPLCONFIGDIR``. Returns the
    paths of the cache files (none where matplotlib is not installed).
    """
    import atexit
    import shutil
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="course-grader-mpl-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    env = {**os.environ, "MPLCONFIGDIR": folder, "MPLBACKEND": "Agg"}
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, capture_output=True,
                   timeout=300, check=False)
    return sorted(str(path) for path in pathlib.Path(folder).glob("fontlist-*.json"))


def sandbox_command(command: list[str], *, scratch: str, files: list[str] = (), writable_files: list[str] = (),
                    bwrap: str | None = None, font_cache: list[str] | None = None) -> list[str]:
    """``command`` wrapped in a bubblewrap sandbox.

    scratch: the only folder the command may write (and its working folder). files: single files
    it must read (the kernel's connection file, the socket of the run's compile service).
    writable_files: single files it may append to (the guard's report). font_cache: matplotlib's
    font list files to bind read-only (default: ``matplotlib_font_cache()``, built once per process;
    ``course grade`` builds them once per run and hands them to every grading process). Everything
    else it sees: ``SYSTEM_FOLDERS``, ``readable_folders()`` read-only minus
    ``hidden_inside_readable()``, a private /tmp, /proc and a minimal /dev.
    """
    import shutil

    bwrap = bwrap or shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed: " + ISOLATION_HELP)
    # The sandbox's root is a file system of its own; made read-only below, once every mount point
    # exists, so that only /tmp (private, gone with the sandbox) and the scratch folder are writable.
    args = [bwrap, *_NAMESPACES]
    for folder in SYSTEM_FOLDERS:
        args += ["--ro-bind-try", folder, folder]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/tmp/home"]
    for folder in readable_folders():
        args += ["--ro-bind", folder, folder]
    for folder in hidden_inside_readable():
        args += ["--tmpfs", folder]
    for path in files:
        args += ["--ro-bind", path, path]
    for path in writable_files:
        args += ["--bind", path, path]
    args += ["--dir", SANDBOX_MPLCONFIGDIR, "--setenv", "MPLCONFIGDIR", SANDBOX_MPLCONFIGDIR]
    for path in matplotlib_font_cache() if font_cache is None else font_cache:
        args += ["--ro-bind", path, f"{SANDBOX_MPLCONFIGDIR}/{os.path.basename(path)}"]
    scratch = os.path.realpath(scratch)
    args += ["--bind", scratch, scratch, "--remount-ro", "/", "--chdir", scratch,
             "--setenv", "HOME", "/tmp/home", "--setenv", "TMPDIR", "/tmp",
             # In the sandbox's process namespace the kernel's parent is bubblewrap's init, not the
             # process jupyter_client names here: ipykernel would take that for its parent's exit.
             "--unsetenv", "JPY_PARENT_PID", "--"]
    return args + list(command)


@functools.lru_cache(maxsize=1)
def isolation_problem() -> str | None:
    """Why grading kernels cannot be isolated on this machine, or None when they can (asked once
    per process: the answer needs a sandbox started)."""
    import shutil
    import subprocess
    import tempfile

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    with tempfile.TemporaryDirectory() as scratch:
        probe = sandbox_command([sys.executable, "-c", "import grader, course, kernels"], scratch=scratch, bwrap=bwrap)
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap could not start: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap is installed but cannot create a sandbox here: {last}"
    return None
