"""What a kernel reads beyond its arguments, and whether a GPU would read the same (``docs/design-notes.md`` §7).

A graded kernel is compiled for a GPU and then run on the simulator, which counts its traffic. Compiling
proves the body *could* run on a GPU, not that the simulator runs what a GPU would: a kernel that reads
``numba.config.ENABLE_CUDASIM`` compiles (numba freezes a module's number into the code) and takes one
branch in the simulator and the other on a GPU, so the traffic or the rounding the tests proved is that of
a branch no GPU runs. And a kernel that calls a device function of the course's ``kernels`` package
(``kernels.paged_attention._warp_attend``, through any name) hands in the course's code as its own.

So before a student's kernel runs, :func:`check_reach` follows everything the kernel can reach, by value,
not by spelling: its Python function and every device function it can call (through a global, a module's
attribute, a closure, a default argument, a tuple), recursively. In each function's code it reads every
global, closure value and default, and every attribute chain read from one (``dis``: ``LOAD_GLOBAL``,
``LOAD_DEREF``, then ``LOAD_ATTR``/``LOAD_METHOD``), resolves the chain on the values the kernel will
see, and judges each value on the way:

- **refused as what differs between the simulator and a GPU** (:class:`SimulatorDependent`): numba's
  configuration (``numba.config``, ``numba.core.config``, ``numba.cuda.config``); the simulator's modules,
  types and functions (``numba.cuda.simulator``, ``cuda.simulator_collective_sync``, which ``course.simulator``
  adds); the course's own tools (``course.*``, ``grader.*``); the process (``os``, ``sys``,
  ``importlib``, ``builtins``; ``os.environ``); any other module than ``math``, ``numpy``, ``numba``,
  ``numba.cuda`` and numba's types; an attribute of ``numba.cuda`` outside numba's kernel API
  (:data:`CUDA_KERNEL_API`, numba's number types); Python's introspection (``getattr``, ``hasattr``,
  ``type``, ``isinstance``, ``__import__``, ``globals``, ``vars``, ... and every ``__dunder__`` name or
  attribute); an ``import`` inside the body; and, on a receiver no global names (a local that holds a
  module), an attribute whose name is one of the refused members of an allowed module (``config``,
  ``simulator``, ``environ``, ...);
- **refused as the course's kernels** (:class:`CourseKernelUsed`): a module of the ``kernels`` package, or a
  function (device function, kernel, plain Python function) whose code lives in ``kernels/``.

Everything else passes untouched (numbers, strings, tuples of them, numpy's and numba's types, ``math``,
``numpy``'s functions, numba's kernel API, the student's own device functions); whether it compiles is
``course.gpu_compile``'s question.

A number is a number: ``SIM = numba.config.ENABLE_CUDASIM`` computed at the top of a cell is the plain
``1`` by the time a kernel reads it, indistinguishable from a tile size. Such a constant is refused where
it is written, from its syntax tree, by :class:`ConstantScreen`, which the grader's clean room
(``grader/cleanroom.py``) asks about every top-level statement of a student's cell: an import or a
constant (or a kernel's default value) that reads numba outside its kernel API and number types, or the
process (``os``, ``sys``, ...), is not run.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import dis
import functools
import pathlib
import re
import types

from course.gpu_compile import PROJECT_ROOT

SIMULATOR_PHRASE = "reads what differs between the simulator and a GPU: "
COURSE_KERNEL_PHRASE = "uses the course's kernels: "

# numba-cuda's kernel API: the attributes of ``numba.cuda`` a kernel body may read (numba's number
# types too, judged by value). In the simulator ``numba.cuda`` also holds the simulator's own modules
# and host functions, which a GPU's ``numba.cuda`` does not: every other attribute is refused.
CUDA_KERNEL_API = frozenset({
    "threadIdx", "blockIdx", "blockDim", "gridDim", "laneid", "warpsize", "grid", "gridsize",
    "shared", "local", "const", "atomic",
    "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp",
    "threadfence", "threadfence_block", "threadfence_system",
    "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
    "all_sync", "any_sync", "eq_sync", "ballot_sync", "match_any_sync", "match_all_sync",
    "activemask", "lanemask_lt", "popc", "brev", "clz", "ffs", "fma", "cbrt", "selp", "nanosleep",
    "fp16", "bf16", "libdevice", "cg",
    "ldca", "ldcg", "ldcs", "ldlu", "ldcv", "stcg", "stcs", "stwb", "stwt",
})

# numba-cuda's vector types (``cuda.float32x4``, ``cuda.int2``), part of its kernel API too.
_VECTOR_TYPE = re.compile(r"(u?(char|short|int|long|longlong)|float|double)[1-4]|(u?int(8|16|32|64)|float(32|64))x[1-4]")


def in_kernel_api(name: str) -> bool:
    """Whether ``numba.cuda.<name>`` is part of numba's kernel API (or one of its number or vector types)."""
    return name in CUDA_KERNEL_API or name in NUMBA_TYPE_NAMES or _VECTOR_TYPE.fullmatch(name) is not None


# numba's number types by name (``numba.float32``, ``numba.cuda.float32``): what a constant or an
# import of a cell may take from numba besides ``numba.cuda`` and ``numba.types``.
NUMBA_TYPE_NAMES = frozenset({
    "boolean", "bool", "bool_", "b1", "byte", "char", "uchar", "short", "ushort", "intc", "uintc", "long_", "ulong",
    "longlong", "ulonglong", "int_", "uint", "intp", "uintp", "ssize_t", "size_t",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
    "float16", "float32", "float64", "double", "f2", "f4", "f8",
    "complex64", "complex128", "c8", "c16", "void", "none", "bfloat16",
})

# Modules whose whole content is the same for the simulator and a GPU, or is numba's kernel API.
ALLOWED_MODULES = frozenset({"math", "cmath", "numpy", "numba", "numba.core", "numba.cuda", "numba.types", "numba.core.types",
                             "numba.cuda.types", "numba.cuda.fp16", "numba.cuda.libdevice"})
_PROCESS_MODULES = frozenset({"os", "posix", "nt", "sys", "importlib", "builtins", "inspect", "platform", "gc",
                              "ctypes", "subprocess", "socket", "site", "sysconfig", "types"})
_PROCESS_OBJECTS = _PROCESS_MODULES - {"builtins"}      # the objects of builtins (int, range, min) are fine
_CONFIG_MODULES = frozenset({"numba.config", "numba.core.config", "numba.cuda.config", "numba.cuda.core.config"})

# Python's introspection: what it finds in the simulator (a Python object, a module, a type) is not what a
# GPU compiles. Refused by identity, whatever name holds it.
_INTROSPECTION = frozenset({
    "getattr", "hasattr", "setattr", "delattr", "__import__", "globals", "locals", "vars", "dir", "eval",
    "exec", "compile", "type", "isinstance", "issubclass", "id", "callable", "open", "super", "object",
    "breakpoint", "input", "memoryview", "help", "__build_class__",
})
_INTROSPECTION_IDS = frozenset(id(getattr(builtins, name)) for name in _INTROSPECTION if hasattr(builtins, name))

_MISSING = object()


class KernelRefused(AssertionError):
    """A student's kernel reaches what a graded kernel may not read; it does not run."""

    def __init__(self, message: str, findings: list):
        super().__init__(message)
        self.findings = findings


class SimulatorDependent(KernelRefused):
    """A kernel that reads what differs between the simulator and a GPU (numba's configuration, the
    simulator's own modules, the environment), so its branch in the simulator may not be a GPU's."""


class CourseKernelUsed(KernelRefused):
    """A kernel that calls (or reads) the course's own kernels, through whatever name."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One refused read: ``kind`` is ``"simulator"`` or ``"course_kernel"``; ``name`` as written, with
    the function that reads it; ``why`` what the value is."""

    kind: str
    name: str
    why: str
    where: str

    def __str__(self) -> str:
        phrase = SIMULATOR_PHRASE if self.kind == "simulator" else COURSE_KERNEL_PHRASE
        return f"{phrase}{self.name} ({self.why}; read in {self.where})"


# ---------------------------------------------------------------------------------------------
# Judging one value
# ---------------------------------------------------------------------------------------------

def _place(path_text: str) -> str | None:
    """``kernels``, ``course`` or ``grader`` when ``path_text`` is a file of that package of the project."""
    try:
        path = pathlib.Path(path_text).resolve()
    except (OSError, ValueError, TypeError):
        return None
    for package in ("kernels", "course", "grader"):
        if path.is_relative_to(PROJECT_ROOT / package):
            return package
    return None


def _module_place(name: str) -> str | None:
    root = (name or "").split(".")[0]
    return root if root in ("kernels", "course", "grader") else None


def python_function(value) -> types.FunctionType | None:
    """The Python function of a kernel or device function (numba's dispatcher, the simulator's kernel), of
    a plain function, or None."""
    if isinstance(value, types.FunctionType):
        return value
    if type(value).__module__.startswith("numba"):
        try:
            function = getattr(value, "py_func", None)
        except Exception:  # noqa: BLE001 - an odd object is simply not a kernel
            return None
        if isinstance(function, types.FunctionType):
            return function
    return None


def is_dispatcher(value) -> bool:
    """A kernel or device function of numba (on a GPU or in the simulator), not a plain function."""
    return not isinstance(value, types.FunctionType) and python_function(value) is not None


def _function_origin(function: types.FunctionType) -> str | None:
    return _place(function.__code__.co_filename) or _module_place(getattr(function, "__module__", ""))


def _relative(function: types.FunctionType) -> str:
    try:
        file = pathlib.Path(function.__code__.co_filename).resolve().relative_to(PROJECT_ROOT).as_posix()
    except (OSError, ValueError):
        file = function.__code__.co_filename
    return f"{file}: {function.__qualname__}"


def judge(value, own: bool = False) -> tuple[str, str] | None:
    """``(kind, why)`` when a kernel may not read ``value``; None when it may (a GPU reads the same).

    own: the course's ``kernels`` package is the kernel's own (the course's kernels, walked in tests)."""
    if isinstance(value, types.ModuleType):
        return _judge_module(value.__name__, own)
    function = python_function(value)
    if function is not None:
        origin = _function_origin(function)
        if origin == "kernels" and own:
            return None
        if origin == "kernels":
            return "course_kernel", f"the course's {'device function' if is_dispatcher(value) else 'function'} " \
                                    f"{_relative(function)}"
        if origin is not None:
            return "simulator", f"the course's own {function.__module__}.{function.__qualname__}, which runs " \
                                f"beside the simulator and does not exist on a GPU"
        module = getattr(function, "__module__", "") or ""
        if module.startswith("numba.cuda.simulator"):
            return "simulator", f"the simulator's {module}.{function.__qualname__}"
        return None
    if id(value) in _INTROSPECTION_IDS and getattr(builtins, getattr(value, "__name__", ""), None) is value:
        return "simulator", f"Python's {value.__name__}(): what it finds in the simulator (a Python object, a " \
                            f"module, a type) is not what a GPU compiles"
    if isinstance(value, tuple):
        for item in value:
            found = judge(item, own)
            if found is not None:
                return found
        return None
    module = value.__module__ if isinstance(value, type) else type(value).__module__
    module = module if isinstance(module, str) else ""
    place = _module_place(module)
    if place == "kernels" and own:
        return None
    if place == "kernels":
        return "course_kernel", f"an object of the course's {module}"
    if place is not None:
        return "simulator", f"an object of the course's own {module}, which does not exist on a GPU"
    if module.startswith("numba.cuda.simulator"):
        return "simulator", f"an object of the simulator's {module}"
    if module.split(".")[0] in _PROCESS_OBJECTS or module in _CONFIG_MODULES:
        return "simulator", f"an object of {module}, which describes this Python process, not a GPU"
    return None


def _judge_module(name: str, own: bool = False) -> tuple[str, str] | None:
    place = _module_place(name)
    if place == "kernels" and own:
        return None
    if place == "kernels":
        return "course_kernel", f"the course's module {name}"
    if place is not None:
        return "simulator", f"the course's own module {name}, which runs beside the simulator, not on a GPU"
    if name in _CONFIG_MODULES:
        return "simulator", f"numba's configuration {name}, which says whether the simulator runs"
    if name.startswith("numba.cuda.simulator"):
        return "simulator", f"the simulator's module {name}"
    if name.split(".")[0] in _PROCESS_MODULES:
        return "simulator", f"the module {name}, which describes this Python process (its environment, " \
                            f"modules, interpreter), not a GPU"
    if name in ALLOWED_MODULES:
        return None
    return "simulator", f"the module {name}, which is not math, numpy or numba's kernel API: what a kernel " \
                        f"reads there need not be what a GPU compiles"


@functools.lru_cache(maxsize=1)
def refused_member_names() -> frozenset:
    """The names of the members of the allowed modules that a kernel may not read (``config``,
    ``simulator``, ``random``, ...): refused as an attribute of any receiver, since a local may hold a module."""
    import importlib

    names = {"config", "simulator", "ENABLE_CUDASIM", "environ", "modules", "getenv", "core"}
    for module_name in ("math", "numpy", "numba", "numba.cuda", "numba.core.types"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, value in list(vars(module).items()):
            if name.startswith("_"):
                continue
            if module_name == "numba.cuda" and in_kernel_api(name):
                continue
            if judge(value) is not None:
                names.add(name)
    return frozenset(names)


# ---------------------------------------------------------------------------------------------
# What a code object reads: chains of attributes from a global or a closure value
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Read:
    root: str | None        # the global, free or local variable read (None: a receiver no name gives)
    scope: str              # "global", "free", "local", "import"
    attrs: tuple            # the attributes read from it, in order
    line: int | None


_ROOTS = {"LOAD_GLOBAL": "global", "LOAD_NAME": "global", "LOAD_DEREF": "free", "LOAD_CLASSDEREF": "free",
          "LOAD_CLOSURE": "free", "LOAD_FAST": "local", "LOAD_FAST_CHECK": "local", "LOAD_FAST_AND_CLEAR": "local"}
_ATTRS = ("LOAD_ATTR", "LOAD_METHOD")


@functools.lru_cache(maxsize=4096)
def _reads(code: types.CodeType) -> tuple:
    """Every chain ``root.a.b`` the code reads (nested code objects included): from a global, a closure
    value, a local (judged by the attributes' names), or a value no name gives (root None); and every
    import."""
    found = []
    line = code.co_firstlineno
    chain: list | None = None

    def close():
        if chain is not None:
            found.append(_Read(chain[0], chain[1], tuple(chain[2]), chain[3]))

    for ins in dis.get_instructions(code):
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        op = ins.opname
        if op in ("EXTENDED_ARG", "CACHE"):
            continue
        if op in _ROOTS and isinstance(ins.argval, str):
            close()
            scope = _ROOTS[op]
            if scope == "free" and ins.argval in code.co_cellvars:
                scope = "local"           # a variable of this function that an inner function shares
            chain = [ins.argval, scope, [], line]
        elif op in _ATTRS and isinstance(ins.argval, str):
            if chain is None:
                chain = [None, "local", [], line]      # read from a value no name gives (a local)
            chain[2].append(ins.argval)
        elif op in ("IMPORT_NAME", "IMPORT_FROM"):
            close()
            chain = None
            found.append(_Read(str(ins.argval), "import", (), line))
        else:
            close()
            chain = None
    close()
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_reads(const))
    return tuple(found)


# ---------------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Reach:
    """What a kernel reaches: the Python functions (the kernel's first) and what was refused."""

    functions: list
    findings: list


def _label(function: types.FunctionType, first: bool) -> str:
    return f"{'kernel' if first else 'device function'} {function.__qualname__}"


def _closure(function: types.FunctionType) -> dict:
    values = {}
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:          # an empty cell
            continue
    return values


def _lookup(function: types.FunctionType, read: _Read, closure: dict):
    if read.scope == "free":
        return closure.get(read.root, _MISSING)
    if read.scope != "global":
        return _MISSING
    if read.root in function.__globals__:
        return function.__globals__[read.root]
    space = function.__builtins__ if isinstance(function.__builtins__, dict) else vars(function.__builtins__)
    return space.get(read.root, _MISSING)


def reach(kernel, own: bool = False) -> Reach:
    """Walk ``kernel`` (a numba kernel, device function or Python function) and everything it can call.

    own: the course's ``kernels`` package counts as the kernel's own code (walked, not refused): for the
    course's kernels, which tests walk to show that everything they read passes."""
    first = python_function(kernel)
    if first is None:
        raise TypeError(f"expected a kernel, got {type(kernel).__name__}")
    todo = [(first, True)]
    seen: set = set()
    functions, findings = [], []

    def refuse(kind, name, why, where):
        finding = Finding(kind, name, why, where)
        if finding not in findings:
            findings.append(finding)

    def follow(value, name, where):
        """Judge a value a kernel reads; queue the device functions in it."""
        found = judge(value, own)
        if found is not None:
            refuse(found[0], name, found[1], where)
            return False
        if is_dispatcher(value):
            todo.append((python_function(value), False))
        elif isinstance(value, tuple):
            for index, item in enumerate(value):
                follow(item, f"{name}[{index}]", where)
        return True

    while todo:
        function, is_first = todo.pop(0)
        if id(function) in seen:
            continue
        seen.add(id(function))
        functions.append(function)
        where = _label(function, is_first)
        if not is_first:
            found = judge(function, own)
            if found is not None:
                refuse(found[0], function.__qualname__, found[1], where)
                continue
        closure = _closure(function)        # its values are judged where the code reads them
        defaults = dict(zip(function.__code__.co_varnames[function.__code__.co_argcount
                                                          - len(function.__defaults__ or ()):],
                            function.__defaults__ or ()))
        defaults.update(function.__kwdefaults__ or {})
        for name, value in defaults.items():
            follow(value, f"the default of {name}", where)
        for read in _reads(function.__code__):
            _judge_read(function, read, closure, where, follow, refuse, own)
    return Reach(functions, findings)


def _judge_read(function, read: _Read, closure: dict, where: str, follow, refuse, own: bool) -> None:
    line = f"{where}, line {read.line}" if read.line else where
    if read.scope == "import":
        refuse("simulator", f"import {read.root}", "an import inside a kernel: a GPU compiles no import", line)
        return
    written = ".".join(([read.root] if read.root else ["<a local value>"]) + list(read.attrs))
    dunder = [a for a in ([read.root] if read.root else []) + list(read.attrs) if a.startswith("__")]
    if dunder:
        refuse("simulator", written, f"{dunder[0]} is Python's own, not a GPU's", line)
        return
    value = _lookup(function, read, closure) if read.root is not None else _MISSING
    if value is _MISSING:
        # a receiver no global or closure value names (a local that may hold a module): judge by name
        _refuse_by_name(read.attrs, written, line, refuse)
        return
    steps, rest = _resolve(value, read.root, read.attrs)
    judged = [(name, v, judge(v, own)) for name, v in steps]
    refused = [(name, found) for name, _, found in judged if found is not None]
    if refused:
        kind = refused[0][1][0]
        why = refused[0][1][1]
        if kind == "course_kernel":          # name the deepest of the course's values: the device function
            why = [found for _, found in refused if found[0] == "course_kernel"][-1][1]
        refuse(kind, written, why, line)
        return
    if rest == "numba.cuda":
        refuse("simulator", written, "an attribute of numba.cuda outside numba's kernel API: in the simulator "
                                     "numba.cuda holds the simulator's own", line)
        return
    if rest:
        _refuse_by_name(rest, written, line, refuse)
    follow(steps[-1][1], steps[-1][0], line)


def _refuse_by_name(attrs, written: str, line: str, refuse) -> None:
    refused = [a for a in attrs if a in refused_member_names()]
    if refused:
        refuse("simulator", written, f"{refused[0]} is a member of numba, numpy or math that differs between the "
                                     f"simulator and a GPU, or is no kernel's", line)


def _resolve(value, root: str, attrs: tuple):
    """The values a chain ``root.a.b`` goes through (``[(written, value), ...]``), resolved as far as modules
    and classes go, and what is left: the attributes not resolved (read from a value: the compiler's
    question), ``()`` (all resolved, or numba's kernel API), or ``"numba.cuda"`` (an attribute of numba.cuda
    outside the kernel API)."""
    steps = [(root, value)]
    name = root
    for index, attr in enumerate(attrs):
        name = f"{name}.{attr}"
        if isinstance(value, types.ModuleType) and value.__name__ == "numba.cuda":
            if attr in CUDA_KERNEL_API or _VECTOR_TYPE.fullmatch(attr):
                return steps, ()         # numba's kernel API (the simulator's stand-in for it is not judged)
            member = vars(value).get(attr, _MISSING)
            if member is _MISSING:
                return steps, "numba.cuda"
            if attr not in NUMBA_TYPE_NAMES and not _is_numba_type(member) and judge(member) is None:
                return steps, "numba.cuda"
        elif isinstance(value, types.ModuleType):
            member = vars(value).get(attr, _MISSING)
            if member is _MISSING:
                member = _submodule(value, attr)
            if member is _MISSING:
                return steps, ()         # not there: the GPU compile says so
        elif isinstance(value, type):
            try:
                member = getattr(value, attr)
            except Exception:  # noqa: BLE001 - not there: the GPU compile says so
                return steps, ()
        else:
            return steps, attrs[index:]
        value = member
        steps.append((name, value))
    return steps, ()


def _submodule(module: types.ModuleType, attr: str):
    import sys

    return sys.modules.get(f"{module.__name__}.{attr}", _MISSING)


def _is_numba_type(value) -> bool:
    module = value.__module__ if isinstance(value, type) else type(value).__module__
    return isinstance(module, str) and (module.startswith("numba.core.types") or module.startswith("numba.cuda.types"))


def findings(kernel) -> list:
    """What ``kernel`` reaches that a graded kernel may not read (:class:`Finding`), course kernels first."""
    found = reach(kernel).findings
    return sorted(found, key=lambda f: f.kind != "course_kernel")


def check_reach(kernel) -> None:
    """Raise :class:`CourseKernelUsed` or :class:`SimulatorDependent` when ``kernel`` reaches what a graded
    kernel may not read; the message names each read and why."""
    found = findings(kernel)
    if not found:
        return
    function = python_function(kernel)
    name = function.__name__ if function is not None else "the kernel"
    lines = "\n".join(f"- {f}" for f in found)
    if found[0].kind == "course_kernel":
        raise CourseKernelUsed(
            f"{name} {found[0]}. A graded kernel must be your own code, not the course's kernels, whatever name "
            f"they are reached through; it was not run.\n{lines}", found)
    raise SimulatorDependent(
        f"{name} {found[0]}. A graded kernel must compute the same in the simulator as on a GPU, so it may not "
        f"read numba's configuration, the simulator's own modules, the environment or the course's tools; it "
        f"was not run.\n{lines}", found)


# ---------------------------------------------------------------------------------------------
# The top-level statements of a cell: constants computed from what differs
# ---------------------------------------------------------------------------------------------

def path_refusal(path: str) -> str | None:
    """Why a top-level statement may not read the dotted ``path`` (``numba.config.ENABLE_CUDASIM``), or None."""
    parts = path.split(".")
    if any(p.startswith("__") for p in parts):
        return f"{path}: {next(p for p in parts if p.startswith('__'))} is Python's own"
    root = parts[0]
    if root in _PROCESS_MODULES:
        return f"{path}: {root} describes this Python process, not a GPU"
    if root != "numba" or len(parts) == 1:
        return None
    second = parts[1]
    if second in NUMBA_TYPE_NAMES or second == "types":
        return None
    if second == "core" and len(parts) > 2 and parts[2] == "types":
        return None
    if second == "cuda":
        if len(parts) == 2 or in_kernel_api(parts[2]) or parts[2] in ("types", "jit"):
            return None         # (``jit``: the decorator, which only the clean room's rule lets through)
        if parts[2] in ("config", "simulator") or parts[2].startswith("simulator"):
            return f"{path}: numba's {'configuration' if parts[2] == 'config' else 'simulator'}, which differs " \
                   f"between the simulator and a GPU"
        return f"{path}: not part of numba's kernel API (in the simulator numba.cuda holds the simulator's own)"
    if second == "config" or second == "core":
        return f"{path}: numba's configuration, which says whether the simulator runs"
    return f"{path}: not one of numba's number types or its kernel API"


class ConstantScreen:
    """Which top-level statements of a submission read what differs between the simulator and a GPU.

    The clean room keeps a constant built from numbers and module attributes, so ``SIM =
    c.ENABLE_CUDASIM`` (after ``import numba.config as c``) or ``from numba.config import ENABLE_CUDASIM``
    would give the kernels a plain ``1`` that no launch check can tell from a tile size. The screen follows,
    statement by statement, what each name stands for (``c`` is ``numba.config``; ``X = numba.cuda`` makes
    ``X`` stand for ``numba.cuda``) and refuses an import, a constant, or a kernel's default values and
    annotations that read numba outside its number types and kernel API (:func:`path_refusal`), or the
    process (``os``, ``sys``, ...). Use one screen per notebook: :meth:`learn` the release's own imports,
    then ask :meth:`refusal` about each of the student's top-level statements, in order.
    """

    def __init__(self):
        self.paths: dict[str, str] = {}       # name -> the dotted path it stands for

    def copy(self) -> ConstantScreen:
        """A screen that goes on from here without changing this one (a trial of a line's statements)."""
        other = ConstantScreen()
        other.paths = dict(self.paths)
        return other

    def _path(self, node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.paths.get(node.id)
        if base is None:
            return None
        return ".".join([base, *reversed(parts)])

    def _references(self, node: ast.AST) -> list[str]:
        found = []
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Attribute, ast.Name)):
                path = self._path(sub)
                if path is not None:
                    found.append(path)
        return found

    def _bind(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.paths[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    self.paths[root] = root
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                if alias.name != "*":
                    self.paths[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Assign):
            path = self._path(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
            for target in node.targets:
                for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(element, ast.Name):
                        if path is not None and not isinstance(target, ast.Tuple):
                            self.paths[element.id] = path
                        else:
                            self.paths.pop(element.id, None)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.paths.pop(node.name, None)

    def learn(self, node: ast.stmt) -> None:
        """Record what a statement of the release binds (never refused)."""
        self._bind(node)

    def refusal(self, node: ast.stmt) -> str | None:
        """Why this top-level statement of a student's cell may not run (it reads what differs between the
        simulator and a GPU: ``"numba.config.ENABLE_CUDASIM: numba's configuration, ..."``), or None; a
        statement that may run is recorded."""
        paths: list[str] = []
        if isinstance(node, ast.Import):
            paths = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            paths = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            paths = self._references(node.value) if node.value is not None else []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            # the decorator is the clean room's (``@cuda.jit`` with constant arguments only)
            evaluated = [*args.defaults, *(d for d in args.kw_defaults if d is not None), node.returns,
                         *(a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg,
                                                  args.kwarg] if a is not None)]
            paths = [p for e in evaluated if e is not None for p in self._references(e)]
        for path in paths:
            why = path_refusal(path)
            if why is not None:
                return why
        self._bind(node)
        return None
