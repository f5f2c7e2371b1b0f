"""What the walk refuses and why: the tables, the judgement of a value, the errors."""

from __future__ import annotations

import builtins
import dataclasses
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

