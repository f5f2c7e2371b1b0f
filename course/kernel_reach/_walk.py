"""The walk: what each code object reads, followed through every function a kernel can reach."""

from __future__ import annotations

import dataclasses
import dis
import functools
import types

from ._policy import (CUDA_KERNEL_API, CourseKernelUsed, Finding, NUMBA_TYPE_NAMES, SimulatorDependent, _MISSING,
                      _VECTOR_TYPE, is_dispatcher, judge, python_function, refused_member_names)

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

