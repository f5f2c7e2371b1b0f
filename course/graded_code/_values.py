"""The constant tables of :mod:`course.graded_code`, the values its interpreter holds that are not plain
Python data, :class:`Scope` and the resolving of math's, numpy's and numba's names (see the package's
docstring)."""

from __future__ import annotations

import ast
import builtins
import math

import numpy as np

MODULES = ("math", "numpy", "numba")

STEPS_PER_STATEMENT = 1_000_000
STEPS_PER_NOTEBOOK = 4_000_000
CHECKING_STEPS = 8_000_000      # what checking a notebook's cells may take, lines left out included
MAX_INT_BITS = 4096
MAX_DEPTH = 32

SCALAR_TYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                          "uint16", "uint32", "uint64", "bool_", "intp", "uintp"})
NUMBA_TYPES = SCALAR_TYPES | {"boolean", "void"}
BUILTIN_FUNCTIONS = frozenset({"range", "len", "tuple", "list", "dict", "set", "frozenset", "min", "max", "abs",
                               "int", "float", "bool", "round", "sum", "sorted", "reversed", "enumerate", "zip",
                               "divmod", "all", "any"})
BUILTIN_TYPES = {"int": int, "float": float, "bool": bool, "complex": complex, "str": str, "bytes": bytes,
                 "tuple": tuple, "list": list, "dict": dict, "set": set, "frozenset": frozenset, "range": range}
MATH_CONSTANTS = frozenset({"pi", "e", "tau", "inf", "nan"})
MATH_FUNCTIONS = frozenset({
    "sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "ceil", "floor", "trunc", "fabs",
    "fmod", "copysign", "hypot", "isqrt", "gcd", "lcm", "isfinite", "isinf", "isnan", "isclose", "degrees",
    "radians", "erf", "erfc", "gamma", "lgamma", "frexp", "ldexp", "modf", "remainder", "nextafter", "ulp",
    "fsum"})
NUMPY_CONSTANTS = frozenset({"pi", "e", "inf", "nan", "euler_gamma", "newaxis"})
NUMPY_FUNCTIONS = frozenset({
    "sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "arcsin",
    "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "floor", "ceil", "trunc", "rint", "abs", "absolute",
    "fabs", "sign", "minimum", "maximum", "fmin", "fmax", "power", "float_power", "hypot", "copysign",
    "nextafter", "spacing", "ldexp", "frexp", "isfinite", "isinf", "isnan", "square", "reciprocal", "round"})
INFO_ATTRIBUTES = frozenset({"max", "min", "eps", "epsneg", "tiny", "smallest_normal", "bits", "resolution",
                             "precision", "maxexp", "minexp", "nmant", "nexp", "iexp", "machep", "negep"})
SUBMODULES = frozenset({"numba.cuda", "numba.types", "numba.core", "numba.core.types"})
JIT = "numba.cuda.jit"
# What both numba-cuda's jit and its simulator's take (the simulator's takes no lineinfo, forceinline or
# max_registers: a kept decorator given one would raise when graded, and end its cell there).
JIT_KEYWORDS = frozenset({"device", "inline", "fastmath", "debug", "opt", "cache"})
# Keywords a whitelisted built-in may be called with (key= would call a function).
BUILTIN_KEYWORDS = {"sorted": {"reverse"}, "min": {"default"}, "max": {"default"}, "sum": {"start"},
                    "round": {"ndigits"}, "int": {"base"}, "enumerate": {"start"}, "zip": {"strict"},
                    "dict": None}
_PYTHON_NAMES = frozenset(dir(builtins))


class Refused(Exception):
    """A statement or expression that the rule leaves out; ``str()`` says why, as a clause."""


# ---------------------------------------------------------------------------------------------
# Values the interpreter holds that are not plain Python data
# ---------------------------------------------------------------------------------------------

class _Opaque:
    """Something a constant may hold and pass on, but not compute with."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


class _NumbaType(_Opaque):
    def __init__(self, name: str):
        super().__init__(f"numba.{name}")
        self.name = name


class _Signature(_Opaque):
    """A numba signature (``void(float32[:])``) or array type (``float32[:, :]``)."""


class _Kernel(_Opaque):
    """A kept kernel, used as a value (``KERNELS = (k1, k2)``)."""


class _Info(_Opaque):
    """``np.finfo(...)``/``np.iinfo(...)``: only its numeric attributes may be read."""

    def __init__(self, info):
        super().__init__(f"np.{type(info).__name__}(...)")
        self.info = info


class _Counted:
    """An iterator over ``values`` whose every step the interpreter counts (a generator expression, zip)."""

    def __init__(self, iterator, interpreter):
        self.iterator, self.interpreter = iterator, interpreter

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.iterator)
        self.interpreter.charge(1)
        return item


def _number(value) -> bool:
    return isinstance(value, (bool, int, float, complex)) or isinstance(value, (np.number, np.bool_))


def _python_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, bool)


_SEQUENCES = (tuple, list, str, bytes)
_CONTAINERS = (tuple, list, set, frozenset, dict)


def _type_name(value) -> str:
    return type(value).__name__


def _source_of(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------------------------
# What the kept code has bound
# ---------------------------------------------------------------------------------------------

class Scope:
    """Names bound so far by the notebook's given cells and the student's kept lines."""

    def __init__(self):
        self.modules: dict[str, str] = {}      # alias -> module ("math", "numpy", "numba.cuda", ...)
        self.functions: dict[str, str] = {}    # alias -> a function or type of them ("math.sqrt", "numba.float32")
        self.imported: dict[str, str] = {}     # alias -> anything else imported from them (numba.cuda.grid)
        self.values: dict[str, object] = {}    # name -> the value of a constant
        self.kernels: set[str] = set()         # kept @cuda.jit functions
        self.given: dict[str, str] = {}        # name -> what the notebook binds it to, when not a constant
        self.release: set[str] = set()         # names the notebook binds: never rebound by a student
        self.spent = 0                         # steps of the notebook's kept constants so far
        self.effort = 0                        # steps spent checking, lines left out included

    def copy(self) -> Scope:
        other = Scope()
        other.modules, other.functions, other.imported = dict(self.modules), dict(self.functions), dict(self.imported)
        other.values, other.kernels, other.given = dict(self.values), set(self.kernels), dict(self.given)
        other.release, other.spent, other.effort = self.release, self.spent, self.effort
        return other

    def bound(self) -> set[str]:
        """Every name that exists when graded at this point."""
        return (set(self.modules) | set(self.functions) | set(self.imported) | set(self.values) | self.kernels
                | set(self.given))

    def meaning(self, name: str):
        """What ``name`` is bound to, as a comparable tuple (None when unbound)."""
        for kind, table in (("module", self.modules), ("function", self.functions), ("imported", self.imported)):
            if name in table:
                return kind, table[name]
        if name in self.kernels:
            return ("kernel",)
        if name in self.values or name in self.given:
            return ("value",)
        return None

    def _forget(self, name: str) -> None:
        for table in (self.modules, self.functions, self.imported, self.values, self.given):
            table.pop(name, None)
        self.kernels.discard(name)

    def bind_value(self, name: str, value) -> None:
        self._forget(name)
        self.values[name] = value

    def bind_kernel(self, name: str) -> None:
        self._forget(name)
        self.kernels.add(name)


# ---------------------------------------------------------------------------------------------
# Resolving names and attributes of math, numpy and numba
# ---------------------------------------------------------------------------------------------

def _classify(qualified: str):
    """What ``math.sqrt``, ``numpy.float32``, ``numba.cuda`` ... is: ``(kind, detail)`` or None."""
    if qualified in SUBMODULES or qualified in MODULES:
        return "module", qualified
    module, _, name = qualified.rpartition(".")
    if not name or name.startswith("_"):
        return None
    if module == "math":
        if name in MATH_CONSTANTS:
            return "value", getattr(math, name)
        if name in MATH_FUNCTIONS:
            return "function", qualified
    elif module == "numpy":
        if name in SCALAR_TYPES:
            return "value", getattr(np, name)
        if name in NUMPY_CONSTANTS:
            return "value", getattr(np, name)
        if name in NUMPY_FUNCTIONS or name in ("finfo", "iinfo"):
            return "function", qualified
    elif module in ("numba", "numba.types", "numba.core.types"):
        if name in NUMBA_TYPES and not (module == "numba" and name == "float16"):     # numba.types.float16 only
            return "value", _NumbaType(name)
        if module == "numba" and name == "jit":
            return "function", "numba.jit"
    elif module == "numba.cuda" and name == "jit":
        return "function", JIT
    return None


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]
