"""Does a kernel compile for a real GPU? Checked on any machine, beside the simulator.

The simulator runs a kernel's body as plain Python, so it accepts code no GPU could run: a call
of a NumPy function on an array, a Python list, a string, an object's method. This module compiles
a simulator kernel to PTX for sm_80 and sm_90 with numba-cuda's real compiler (NVVM, from the
``nvidia-nvvm`` package; no GPU or driver needed), in a helper process of its own, because a
process uses either the simulator or the real compiler, never both::

    from course.gpu_compile import check_compiles
    check_compiles(my_kernel, x, y)       # raises GpuCompileError naming the line that failed

The helper is started once per process and answers every later check; results are remembered per
kernel source, constants and argument types. A student's checks (``course.gates.check_notebook_kernels``)
are also remembered on disk, so a restarted kernel or a second notebook that launches the same kernel
with the same argument types asks no compiler at all: in ``$COURSE_COMPILE_CACHE`` (``off`` turns
it off), else ``$XDG_CACHE_HOME/course/gpu-compile`` or ``~/.cache/course/gpu-compile``, one small
JSON file per kernel that compiled, named after the SHA-256 of the request (less its comment lines
and the file names a notebook gives its cells, which change with every kernel process) and of the
compiler's versions and this module's source. A kernel that fails is asked again, so its message names its own cell. Grading
never reads or writes that folder: a file there is the student's own. What the helper gets is rebuilt from the kernel:
its source (decorators dropped), and each global name it uses that is a module, a number, a
string, a tuple of those, a numba type or a device function (``@cuda.jit(device=True)``, checked
the same way). Any other global is left out, so a kernel that uses it fails to compile, as it
would on a GPU.

In grading, ``course.gates.install()`` makes every launch of a kernel that is not one of the
course's own compile first: a body that could not run on a GPU never runs in the simulator either.
There the grading kernel asks the run's compile service (``grader.compile_service``) instead of a
helper of its own; the service's helper (``grader.compile_server``) compiles each request with
:func:`compile_request`, in a fresh fork of itself.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import types

COMPUTE_CAPABILITIES = ((8, 0), (9, 0))
PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
_SCALARS = (bool, int, float, str, type(None))


class GpuCompileError(AssertionError):
    """A kernel that the simulator runs but numba-cuda cannot compile for a GPU."""


class CompilerUnavailable(RuntimeError):
    """numba-cuda's GPU compiler (NVVM) is not installed here."""


# ---------------------------------------------------------------------------------------------
# What the helper is sent: the kernel's source and the globals it uses, as plain data
# ---------------------------------------------------------------------------------------------

def _value(value):
    """A global as data, or None when it cannot be sent (the compile then fails on it)."""
    import numpy as np

    if isinstance(value, types.ModuleType):
        name = value.__name__
        return {"module": "numba.cuda" if name.startswith("numba.cuda") else name}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"scalar": value.dtype.name, "repr": repr(value.item())}
    if isinstance(value, tuple):
        items = [_value(v) for v in value]
        return {"tuple": items} if all(item is not None for item in items) else None
    if type(value).__module__.startswith("numba.core.types"):
        return {"numba_type": str(value)}
    if getattr(value, "_device", False) and hasattr(value, "py_func"):
        return {"device": kernel_bundle(value)}
    return None


def _names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def kernel_bundle(kernel) -> dict:
    """The source of a simulator kernel (or device function) and the globals it uses, as data."""
    function = getattr(kernel, "py_func", kernel)
    if not isinstance(function, types.FunctionType):
        raise TypeError(f"kernel must be a @cuda.jit kernel, got {type(kernel).__name__}")
    lines, first = inspect.getsourcelines(function)
    source = textwrap.dedent("".join(lines))
    env = {}
    for name in sorted(_names(function.__code__)):
        if name in function.__globals__:
            value = _value(function.__globals__[name])
            if value is not None:
                env[name] = value
    return {"name": function.__name__, "source": source, "first_line": first,
            "file": function.__code__.co_filename, "globals": env}


def describe_args(args) -> list:
    """Each launch argument as the helper rebuilds its numba type."""
    import numpy as np

    described = []
    for arg in args:
        array = getattr(arg, "_ary", arg)
        if isinstance(array, np.ndarray) and array.ndim > 0:
            layout = "C" if array.flags.c_contiguous else "F" if array.flags.f_contiguous else "A"
            described.append({"array": array.dtype.name, "ndim": array.ndim, "layout": layout})
        elif isinstance(arg, (bool, np.bool_)):
            described.append({"scalar": "bool"})
        elif isinstance(arg, np.generic):
            described.append({"scalar": arg.dtype.name})
        elif isinstance(arg, int):
            described.append({"scalar": "int64"})
        elif isinstance(arg, float):
            described.append({"scalar": "float64"})
        else:
            described.append({"unsupported": type(arg).__name__})
    return described


# ---------------------------------------------------------------------------------------------
# The helper process (runs without the simulator)
# ---------------------------------------------------------------------------------------------

def _rebuild(value, namespace_of):
    import importlib

    import numba
    import numpy as np

    kind, data = next(iter(value.items()))
    if kind == "module":
        return importlib.import_module(data)
    if kind in ("bool", "int", "str"):
        return data
    if kind == "float":
        return float(data)
    if kind == "scalar":
        return np.dtype(data).type(float(value["repr"]) if np.dtype(data).kind == "f" else int(value["repr"]))
    if kind == "tuple":
        return tuple(_rebuild(v, namespace_of) for v in data)
    if kind == "numba_type":
        return getattr(numba.types, data)
    if kind == "device":
        from numba import cuda
        return cuda.jit(device=True)(namespace_of(data))
    raise ValueError(f"cannot rebuild {kind}")


def _function(bundle):
    """The plain Python function of a bundle, its decorators blanked out (line numbers kept)."""
    import ast

    source = bundle["source"]
    tree = ast.parse(source)
    node = tree.body[0]
    lines = source.splitlines()
    for decorator in node.decorator_list:
        for number in range(decorator.lineno, decorator.end_lineno + 1):
            lines[number - 1] = ""
    text = "\n" * (bundle["first_line"] - 1) + "\n".join(lines) + "\n"
    namespace = {}
    for name, value in bundle["globals"].items():
        namespace[name] = _rebuild(value, _function)
    exec(compile(text, bundle["file"], "exec"), namespace)
    return namespace[bundle["name"]]


def _numba_type(described):
    import numba
    import numpy as np

    if "array" in described:
        if described["array"] == "bfloat16":      # ml_dtypes' bf16: numba.from_dtype does not know it
            from numba.cuda import types as cuda_types
            element = cuda_types.bfloat16
        else:
            element = numba.from_dtype(np.dtype(described["array"]))
        return numba.types.Array(element, described["ndim"], described["layout"])
    if "scalar" in described:
        return numba.types.boolean if described["scalar"] == "bool" else numba.from_dtype(np.dtype(described["scalar"]))
    raise TypeError(f"a launch argument of type {described['unsupported']} cannot be passed to a GPU kernel")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _message(exc: BaseException, bundle: dict) -> str:
    """The compiler's complaint, short: the line of the kernel it is about, then its first lines."""
    text = _ANSI.sub("", f"{type(exc).__name__}: {exc}")
    file = re.escape(bundle["file"])
    locations = re.findall(r'File "' + file + r'", line (\d+)|' + file + r' \((\d+)\)', text)
    locations = [a or b for a, b in locations]
    text = text.replace(bundle["file"], "<your cell>")
    lines = [line for line in text.splitlines() if line.strip()]
    head = "\n".join(lines[:4])
    source = bundle["source"].splitlines()
    if locations:
        number = int(locations[-1])
    else:
        # numba names the function or global it could not type, not always the line: find its use
        names = re.findall(r"name '(\w+)' is not defined|<(?:built-in )?function (\w+)|Untyped global name '(\w+)'", text)
        words = [w for group in names for w in group if w]
        number = None
        for word in words:
            for index, line in enumerate(source[1:], start=1):
                code = line.split("#")[0]
                if re.search(rf"\b{re.escape(word)}\b", code) and not code.lstrip().startswith(("def ", "@")):
                    number = bundle["first_line"] + index
                    break
            if number is not None:
                break
        if number is None:
            return head
    index = number - bundle["first_line"]
    code = source[index].strip() if 0 <= index < len(source) else ""
    return f"line {number} of the cell: {code}\n{head}"


def ptx_for_targets(function, signature, ccs=COMPUTE_CAPABILITIES, *, launch_bounds=None):
    """``{cc: PTX}`` of a kernel (a plain Python function) for each compute capability.

    numba's ``compile_ptx`` types and lowers the function again for every target, and for a large
    kernel that is most of the time (GEMM v7 for two targets: 36 s that way, 19 s here). Here it is typed and
    lowered once, for the lowest target asked (so no instruction of a newer one is chosen), and NVVM
    turns that one module into PTX for each target. ``launch_bounds``: a kernel's ``@cuda.jit(launch_bounds=...)``
    (``kernel.targetoptions.get("launch_bounds")``), written into the PTX as ``.maxntid`` and ``.minnctapersm`` so
    that ptxas budgets the registers as it will for the kernel. Raises what the compiler raised, with the target
    it was compiling for in the exception's ``cc`` (``"any"`` when typing or lowering failed).
    """
    from numba.cuda.compiler import _compile_pyfunc_with_fixup    # numba-cuda 0.30 (pyproject.toml pins it)

    targets = sorted(tuple(cc) for cc in ccs)
    try:
        library, _ = _compile_pyfunc_with_fixup(function, signature, device=False, cc=targets[0], abi="numba",
                                                launch_bounds=launch_bounds)
    except Exception as exc:
        exc.cc = "any"
        raise
    ptx = {}
    for cc in targets:
        try:
            ptx[cc] = "\n".join(library.get_asm_strs(cc=cc))
        except Exception as exc:
            exc.cc = f"sm_{cc[0]}{cc[1]}"
            raise
    return ptx


def compile_request(request: dict) -> dict:
    """In the helper: compile one kernel for each compute capability; the errors, if any."""
    bundle = request["bundle"]
    errors = []
    try:
        function = _function(bundle)
        signature = tuple(_numba_type(a) for a in request["args"])
    except Exception as exc:  # noqa: BLE001 - a broken kernel is an answer, not a helper crash
        return {"errors": [{"cc": "any", "message": _message(exc, bundle)}]}
    try:
        ptx_for_targets(function, signature, request.get("ccs", COMPUTE_CAPABILITIES))
    except Exception as exc:  # noqa: BLE001
        errors.append({"cc": getattr(exc, "cc", "any"), "message": _message(exc, bundle)})
    return {"errors": errors}


def warm_up() -> dict:
    """Load numba-cuda's compiler and NVVM once: ``{"ready": True}`` or why not."""
    try:
        from numba import cuda
        from numba.cuda import dispatcher

        # Device functions are compiled for "the current device", which needs a driver; there is
        # none here, so they get the first target's compute capability.
        class _NoDevice:
            compute_capability = COMPUTE_CAPABILITIES[0]
        dispatcher.get_current_device = _NoDevice
        cuda.compile_ptx(lambda a: None, "void(float32[:])", cc=COMPUTE_CAPABILITIES[0])
    except Exception as exc:  # noqa: BLE001
        return {"ready": False, "why": f"{type(exc).__name__}: {exc}"}
    return {"ready": True}


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """The helper's loop: one JSON request per line in, one JSON answer per line out."""
    hello = warm_up()
    stdout.write(json.dumps(hello) + "\n")
    stdout.flush()
    if not hello["ready"]:
        return
    for line in stdin:
        if line.strip():
            stdout.write(json.dumps(compile_request(json.loads(line))) + "\n")
            stdout.flush()


# ---------------------------------------------------------------------------------------------
# The client: one helper per process, started on first need (or by start_helper)
# ---------------------------------------------------------------------------------------------

class _Helper:
    def __init__(self):
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "COURSE_DEVICE": "gpu",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, "-m", "course.gpu_compile"], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, cwd=str(PROJECT_ROOT),
                                        # its own session: a Jupyter kernel that shuts down signals its
                                        # process group; the helper ends by itself when its input closes
                                        start_new_session=True)
        self.lock = threading.Lock()
        self.ready = None

    def ask(self, request: dict) -> dict:
        with self.lock:
            if self.ready is None:
                hello = json.loads(self.process.stdout.readline() or '{"ready": false, "why": "the helper exited"}')
                self.ready = hello
            if not self.ready.get("ready"):
                raise CompilerUnavailable(
                    "numba-cuda's GPU compiler is not available here: " + self.ready.get("why", "")
                    + " (install the course's dependencies: nvidia-nvvm and nvidia-cuda-nvrtc)")
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
            if not answer:
                raise CompilerUnavailable("the GPU compiler helper exited")
            return json.loads(answer)


class _Service:
    """The compile service of a grading run (``grader.compile_service``), in place of a helper of our own."""

    def __init__(self, path: str):
        import socket

        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket.connect(path)
        self.reader = self.socket.makefile("rb")
        self.lock = threading.Lock()
        self.broken = False

    def ask(self, request: dict) -> dict:
        with self.lock:
            try:
                if self.broken:
                    raise OSError
                self.socket.sendall((json.dumps(request) + "\n").encode())
                answer = self.reader.readline()
                if not answer:
                    raise OSError
            except OSError:
                self.broken = True
                raise CompilerUnavailable("the grading run's GPU compiler service closed") from None
            answer = json.loads(answer)
            if "unavailable" in answer:
                raise CompilerUnavailable(answer["unavailable"])
            return answer


_helper: _Helper | _Service | None = None
_results: dict[str, list] = {}


def cache_dir() -> pathlib.Path | None:
    """The folder where a student's compile answers are remembered across processes (None: off)."""
    chosen = os.environ.get("COURSE_COMPILE_CACHE", "")
    if chosen.strip().lower() in ("off", "0", "no", "false"):
        return None
    if chosen:
        return pathlib.Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "course" / "gpu-compile"


_salt: list[str] = []


def _compiler_salt() -> str:
    """What else decides an answer: numba's and numba-cuda's versions and this module's source."""
    if not _salt:
        from importlib import metadata

        versions = []
        for package in ("numba", "numba-cuda"):
            try:
                versions.append(f"{package} {metadata.version(package)}")
            except metadata.PackageNotFoundError:
                versions.append(f"{package} none")
        source = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()
        _salt.append(" ".join(versions) + " " + source)
    return _salt[0]


def _what_compiles(value):
    """The request less what cannot change whether it compiles: each bundle's ``file`` and ``first_line``
    (a notebook names its cells per kernel process) and the source's comment lines (an exercise's
    ``### BEGIN SOLUTION`` markers)."""
    if isinstance(value, dict):
        return {k: ("\n".join(line for line in v.splitlines() if not line.lstrip().startswith("#"))
                    if k == "source" and isinstance(v, str) else _what_compiles(v))
                for k, v in value.items() if k not in ("file", "first_line")}
    if isinstance(value, list):
        return [_what_compiles(v) for v in value]
    return value


def _disk_key(request: dict) -> str:
    text = json.dumps(_what_compiles(request), sort_keys=True)
    return hashlib.sha256(f"{_compiler_salt()}\n{text}".encode()).hexdigest()


def _compiled_before(request: dict) -> bool:
    """Whether the cache folder says this request compiled (a file of it, naming its key)."""
    folder = cache_dir()
    if folder is None:
        return False
    key = _disk_key(request)
    try:
        answer = json.loads((folder / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(answer, dict) and answer.get("key") == key and answer.get("errors") == []


def _remember_compiled(request: dict) -> None:
    folder = cache_dir()
    if folder is None:
        return
    key = _disk_key(request)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"{key}.json.{os.getpid()}.tmp"
        partial.write_text(json.dumps({"key": key, "errors": []}), encoding="utf-8")
        os.replace(partial, folder / f"{key}.json")
    except OSError:
        pass        # a read-only home: the answer is still remembered in this process


def _get_helper() -> _Helper | _Service:
    global _helper
    if _helper is None or (isinstance(_helper, _Helper) and _helper.process.poll() is not None):
        _helper = _Helper()
    return _helper


def compile_errors(kernel, *args, on_disk: bool = False) -> list[dict]:
    """``[]`` when ``kernel`` compiles for sm_80 and sm_90 with these arguments; else the errors.

    on_disk: also look the answer up in (and add it to) the student's cache folder (:func:`cache_dir`);
    never while grading."""
    request = {"bundle": kernel_bundle(kernel), "args": describe_args(args), "ccs": COMPUTE_CAPABILITIES}
    key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    if key not in _results:
        if on_disk and _compiled_before(request):
            _results[key] = []
        else:
            _results[key] = _get_helper().ask(request)["errors"]
            if on_disk and not _results[key]:
                _remember_compiled(request)
    return _results[key]


def check_compiles(kernel, *args, on_disk: bool = False) -> None:
    """Raise GpuCompileError, naming the line, when ``kernel`` would not compile for a GPU (on_disk:
    as for :func:`compile_errors`)."""
    errors = compile_errors(kernel, *args, on_disk=on_disk)
    if errors:
        name = getattr(getattr(kernel, "py_func", kernel), "__name__", "the kernel")
        first = errors[0]
        target = "" if first["cc"] == "any" else f" ({first['cc']})"
        raise GpuCompileError(
            f"{name} runs in the simulator but does not compile for a GPU{target}; a GPU kernel can "
            f"only use numbers, arrays and cuda.* inside its body, not Python objects, lists or NumPy "
            f"functions. The compiler says:\n{first['message']}")


def start_helper(service: str | None = None) -> None:
    """Start the helper process now (it is otherwise started by the first check).

    service: the socket of the grading run's compile service (``grader.compile_service``): connect
    to it instead, and ask it every later check; where it cannot be reached, start a helper.
    """
    global _helper
    if service:
        try:
            _helper = _Service(service)
            return
        except OSError:
            pass
    _get_helper()


if __name__ == "__main__":
    serve()
