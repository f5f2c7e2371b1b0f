"""The bounded interpreter of constant expressions of :mod:`course.graded_code` (see the package's
docstring)."""

from __future__ import annotations

import ast
import operator

import numpy as np

from ._calls import _Calls
from ._values import (BUILTIN_FUNCTIONS, BUILTIN_TYPES, CHECKING_STEPS, INFO_ATTRIBUTES, MAX_DEPTH, MAX_INT_BITS,
                      STEPS_PER_NOTEBOOK, STEPS_PER_STATEMENT, Refused, Scope, _CONTAINERS, _PYTHON_NAMES, _SEQUENCES,
                      _classify, _Counted, _Info, _Kernel, _number, _NumbaType, _Opaque, _python_int, _Signature,
                      _source_of, _type_name)


# ---------------------------------------------------------------------------------------------
# The interpreter of constant expressions
# ---------------------------------------------------------------------------------------------

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor, ast.BitAnd: operator.and_}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert, ast.Not: operator.not_}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


class Interpreter(_Calls):
    """Evaluates one constant expression as Python would, counting its steps (see the module's docstring)."""

    def __init__(self, scope: Scope, *, budget: int = STEPS_PER_STATEMENT):
        self.scope = scope
        self.steps = 0
        self.budget = budget

    # -- costs ---------------------------------------------------------------------------------

    def charge(self, steps: int) -> None:
        self.steps += steps
        self.scope.spent += steps
        self.scope.effort += steps
        if self.scope.effort > CHECKING_STEPS:
            raise Refused(f"checking your cells' constants took more than {CHECKING_STEPS:,} steps: the rest "
                          f"is left out")
        if self.steps > self.budget:
            raise Refused(f"it takes more than {self.budget:,} steps to compute: a constant must stay small "
                          f"(it is computed before any kernel runs)")
        if self.scope.spent > STEPS_PER_NOTEBOOK:
            raise Refused(f"the notebook's constants together take more than {STEPS_PER_NOTEBOOK:,} steps to "
                          f"compute")

    def size(self, value) -> int:
        """Charge, and return, the number of elements ``value`` holds, nested ones included."""
        total, stack = 0, [value]
        while stack:
            item = stack.pop()
            total += 1
            self.charge(1)
            if isinstance(item, (str, bytes)):
                total += len(item)
                self.charge(len(item))
            elif isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, (tuple, list, set, frozenset)):
                stack.extend(item)
        return total

    def depth(self, value) -> int:
        """Nesting depth of a value (charged like :meth:`size`); refused beyond ``MAX_DEPTH``."""
        deepest, stack = 0, [(value, 1)]
        while stack:
            item, level = stack.pop()
            self.charge(1)
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                raise Refused(f"its value is nested more than {MAX_DEPTH} levels deep")
            if isinstance(item, dict):
                stack.extend((x, level + 1) for x in (*item.keys(), *item.values()))
            elif isinstance(item, (tuple, list, set, frozenset)):
                stack.extend((x, level + 1) for x in item)
        return deepest

    def iterate(self, value):
        """Iterate over ``value`` one counted step per element."""
        if isinstance(value, (tuple, list, set, frozenset, dict, range, str, bytes, _Counted)):
            for item in value:
                self.charge(1)
                yield item
            return
        raise Refused(f"it iterates over a {_type_name(value)}")

    # -- the checks of a value -------------------------------------------------------------------

    def check_int(self, value):
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
            raise Refused(f"it computes an integer of more than {MAX_INT_BITS} bits")
        if isinstance(value, np.ndarray):
            raise Refused("it computes a NumPy array (a constant holds numbers, tuples and the like)")
        return value

    # -- expressions -----------------------------------------------------------------------------

    def evaluate(self, node: ast.AST, env: dict | None = None):
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise Refused(self._not_allowed(node))
        self.charge(1)
        return method(node, env or {})

    @staticmethod
    def _not_allowed(node: ast.AST) -> str:
        words = {ast.Lambda: "a lambda", ast.NamedExpr: "the := operator", ast.JoinedStr: "an f-string",
                 ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Starred: "* unpacking here"}
        what = words.get(type(node), f"a {type(node).__name__} expression")
        return f"it uses {what}, which a constant may not"

    def _Constant(self, node, env):
        value = node.value
        if isinstance(value, (str, bytes)):
            self.charge(len(value))
        return self.check_int(value)

    def _Name(self, node, env):
        kind, what = self.resolve_name(node.id, env)
        if kind == "value":
            return what
        if kind == "builtin" and node.id in BUILTIN_TYPES:
            return BUILTIN_TYPES[node.id]
        raise Refused(self._not_a_value(node.id, kind, what))

    @staticmethod
    def _not_a_value(text: str, kind: str, what) -> str:
        if kind == "module":
            return f"{text} is a module: a constant may not hold it"
        return f"{text} is a function: a constant may call it (if it is allowed) but not hold it"

    def resolve_name(self, name: str, env: dict):
        """``(kind, what)`` of a name: ``value``, ``module``, ``function`` or ``builtin``; refused otherwise."""
        if name.startswith("__"):
            raise Refused(f"it uses {name}, one of Python's own names")
        for frame in reversed(env.get("__frames__", ())):
            if name in frame:
                return "value", frame[name]
        scope = self.scope
        if name in scope.values:
            return "value", scope.values[name]
        if name in scope.kernels:
            return "value", _Kernel(f"kernel {name}")
        if name in scope.modules:
            return "module", scope.modules[name]
        if name in scope.functions:
            found = _classify(scope.functions[name])
            if found is None:
                raise Refused(f"{name} is not something a constant may use")
            return found
        if name in scope.imported:
            raise Refused(f"{name} ({scope.imported[name]}) is not one of the numbers, types and functions "
                          f"of math, numpy and numba a constant may use (a kernel may)")
        if name in scope.given:
            raise Refused(f"{name} is given by the notebook but is not a constant ({scope.given[name]})")
        if name in BUILTIN_FUNCTIONS or name in BUILTIN_TYPES:
            return "builtin", name
        if name in scope.release:
            raise Refused(f"{name} is not defined yet at this point: the notebook gives it in a later cell")
        if name in _PYTHON_NAMES:
            raise Refused(f"it uses {name}, which a constant may not use")
        raise Refused(f"{name} is not defined by the notebook's given cells or an earlier kept line")

    def resolve(self, node: ast.AST, env: dict):
        """``(kind, what)`` of a Name or an Attribute chain over math, numpy and numba."""
        if isinstance(node, ast.Name):
            return self.resolve_name(node.id, env)
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise Refused(f"it reads {_source_of(node)}, a private attribute")
            kind, what = self.resolve(node.value, env) if isinstance(node.value, (ast.Name, ast.Attribute)) \
                else ("value", self.evaluate(node.value, env))
            if kind == "module":
                found = _classify(f"{what}.{node.attr}")
                if found is None:
                    raise Refused(f"{_source_of(node)} is not one of the numbers, types and functions of math, "
                                  f"numpy and numba a constant may use")
                return found
            if kind == "value" and isinstance(what, _Info) and node.attr in INFO_ATTRIBUTES:
                return "value", getattr(what.info, node.attr)
            raise Refused(f"it reads {_source_of(node)}: a constant may read attributes of math, numpy and "
                          f"numba only")
        return "value", self.evaluate(node, env)

    def _Attribute(self, node, env):
        kind, what = self.resolve(node, env)
        if kind == "value":
            return what
        raise Refused(self._not_a_value(_source_of(node), kind, what))

    def _BinOp(self, node, env):
        op = type(node.op)
        if op not in _BINARY:
            raise Refused(f"it uses the operator {type(node.op).__name__}, which a constant may not")
        left = self.evaluate(node.left, env)
        right = self.evaluate(node.right, env)
        return self.binary(op, left, right)

    def binary(self, op, left, right):
        numbers = _number(left) and _number(right)
        if not numbers:
            self._check_sequence_operation(op, left, right)
        elif op is ast.Pow and _python_int(left) and _python_int(right) and right > 0 and abs(left) > 1:
            if left.bit_length() * right > MAX_INT_BITS:
                raise Refused(f"it computes an integer of more than {MAX_INT_BITS} bits")
        elif op is ast.LShift and _python_int(left) and _python_int(right) and right > 0 and left:
            if left.bit_length() + right > MAX_INT_BITS:
                raise Refused(f"it computes an integer of more than {MAX_INT_BITS} bits")
        try:
            result = _BINARY[op](left, right)
        except Exception as exc:  # noqa: BLE001 - whatever Python raises, the line would raise when graded
            raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None
        return self.check_int(result)

    def _check_sequence_operation(self, op, left, right):
        """Operations on containers and strings: concatenation, repetition, set and dict algebra."""
        if op is ast.Add and type(left) is type(right) and isinstance(left, (tuple, list, str, bytes)):
            self.charge(len(left) + len(right))
            return
        if op is ast.Mult:
            sequence, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
            if isinstance(sequence, _SEQUENCES) and isinstance(count, int):
                self.charge(max(0, len(sequence) * count))
                return
        if op in (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor) and isinstance(left, (set, frozenset)) \
                and isinstance(right, (set, frozenset)):
            self.charge(self.size(left) + self.size(right))
            return
        if op is ast.BitOr and isinstance(left, dict) and isinstance(right, dict):
            self.charge(self.size(left) + self.size(right))
            return
        if op is ast.Mod and isinstance(left, (str, bytes)):
            raise Refused("it formats a string with %, which a constant may not")
        raise Refused(f"it applies {op.__name__} to a {_type_name(left)} and a {_type_name(right)}, which a "
                      f"constant may not")

    def _UnaryOp(self, node, env):
        value = self.evaluate(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not self.truth(value)
        if not _number(value):
            raise Refused(f"it applies {type(node.op).__name__} to a {_type_name(value)}")
        try:
            return self.check_int(_UNARY[type(node.op)](value))
        except Exception as exc:  # noqa: BLE001
            raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None

    def truth(self, value) -> bool:
        if isinstance(value, (_Counted,)):
            raise Refused("it takes the truth of an iterator")
        try:
            return bool(value)
        except Exception as exc:  # noqa: BLE001
            raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None

    def _BoolOp(self, node, env):
        value = None
        for operand in node.values:
            self.check(operand)
        for operand in node.values:
            value = self.evaluate(operand, env)
            truth = self.truth(value)
            if isinstance(node.op, ast.And) and not truth or isinstance(node.op, ast.Or) and truth:
                return value
        return value

    def _IfExp(self, node, env):
        self.check(node.body)
        self.check(node.orelse)
        return self.evaluate(node.body if self.truth(self.evaluate(node.test, env)) else node.orelse, env)

    def check(self, node: ast.AST) -> None:
        """What a branch Python will not take may not hold either (its syntax only: it is never computed)."""
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Lambda, ast.NamedExpr, ast.JoinedStr, ast.Await, ast.Yield, ast.YieldFrom)):
                raise Refused(self._not_allowed(sub))
            if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
                raise Refused(f"it reads {_source_of(sub)}, a private attribute")
            if isinstance(sub, ast.Name) and sub.id.startswith("__"):
                raise Refused(f"it uses {sub.id}, one of Python's own names")

    def _Compare(self, node, env):
        left = self.evaluate(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.evaluate(comparator, env)
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (tuple, list, set, frozenset, dict, range, str, bytes)):
                    raise Refused(f"it looks for a value in a {_type_name(right)}")
                if isinstance(right, (str, bytes)):
                    if not isinstance(left, type(right)):
                        raise Refused("it looks for a non-string in a string")
                    self.charge(len(right) * max(1, len(left)))
                elif not isinstance(right, range):
                    self.charge(self.size(right) + self.size(left))
            elif not isinstance(op, (ast.Is, ast.IsNot)):
                for operand in (left, right):
                    if isinstance(operand, (_CONTAINERS, str, bytes)):
                        self.size(operand)
                    elif isinstance(operand, (_Opaque, _Counted)):
                        raise Refused(f"it compares a {operand!r}")
            try:
                result = _COMPARE[type(op)](left, right)
            except Exception as exc:  # noqa: BLE001
                raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None
            if isinstance(result, np.ndarray):
                raise Refused("it computes a NumPy array")
            if not self.truth(result):
                return result
            left = right
        return result

    def _elements(self, nodes, env) -> list:
        out = []
        for element in nodes:
            if isinstance(element, ast.Starred):
                out.extend(self.iterate(self.evaluate(element.value, env)))
            else:
                out.append(self.evaluate(element, env))
        return out

    def _Tuple(self, node, env):
        return tuple(self._elements(node.elts, env))

    def _List(self, node, env):
        return self._elements(node.elts, env)

    def _Set(self, node, env):
        elements = self._elements(node.elts, env)
        return self._hashed(set, elements)

    def _hashed(self, kind, elements):
        for element in elements:
            self.size(element)
        try:
            return kind(elements)
        except Exception as exc:  # noqa: BLE001
            raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None

    def _Dict(self, node, env):
        result = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                raise Refused("it uses ** unpacking, which a constant may not")
            k, v = self.evaluate(key, env), self.evaluate(value, env)
            self.size(k)
            try:
                result[k] = v
            except Exception as exc:  # noqa: BLE001
                raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None
        return result

    def _Subscript(self, node, env):
        value = self.evaluate(node.value, env)
        index = self.evaluate(node.slice, env)
        return self.subscript(value, index)

    def subscript(self, value, index):
        if isinstance(value, _NumbaType) or isinstance(value, type) and (
                issubclass(value, np.generic) or value in BUILTIN_TYPES.values()):
            return _Signature(f"{value!r}[...]") if isinstance(value, _NumbaType) else self._generic(value, index)
        if isinstance(value, dict):
            self.size(index)
        elif not isinstance(value, (tuple, list, str, bytes, range)):
            raise Refused(f"it indexes a {_type_name(value)}")
        elif not (isinstance(index, (int, np.integer, slice))):
            raise Refused(f"it indexes with a {_type_name(index)}")
        try:
            result = value[index]
        except Exception as exc:  # noqa: BLE001
            raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None
        if isinstance(index, slice) and not isinstance(result, range):
            self.charge(len(result))
        return result

    @staticmethod
    def _generic(value, index):
        try:
            return value[index]           # tuple[int, ...]: a type hint
        except Exception as exc:  # noqa: BLE001
            raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None

    def _Slice(self, node, env):
        parts = [None if part is None else self.evaluate(part, env) for part in (node.lower, node.upper, node.step)]
        for part in parts:
            if part is not None and not isinstance(part, (int, np.integer)):
                raise Refused(f"it slices with a {_type_name(part)}")
        return slice(*parts)

    # -- comprehensions --------------------------------------------------------------------------

    def _comprehension(self, node, env, produce):
        frames = list(env.get("__frames__", ()))

        def walk(generators, frames):
            if not generators:
                produce({"__frames__": tuple(frames)})
                return
            generator, rest = generators[0], generators[1:]
            if generator.is_async:
                raise Refused("it uses async for, which a constant may not")
            iterable = self.evaluate(generator.iter, {"__frames__": tuple(frames)})
            for item in self.iterate(iterable):
                frame = {}
                self.assign(generator.target, item, frame)
                inner = frames + [frame]
                if all(self.truth(self.evaluate(condition, {"__frames__": tuple(inner)}))
                       for condition in generator.ifs):
                    walk(rest, inner)

        walk(list(node.generators), frames)

    def _ListComp(self, node, env):
        out = []
        self._comprehension(node, env, lambda inner: out.append(self.evaluate(node.elt, inner)))
        return out

    def _GeneratorExp(self, node, env):
        return _Counted(iter(self._ListComp(node, env)), self)

    def _SetComp(self, node, env):
        return self._hashed(set, self._ListComp(node, env))

    def _DictComp(self, node, env):
        out = {}

        def produce(inner):
            key = self.evaluate(node.key, inner)
            self.size(key)
            try:
                out[key] = self.evaluate(node.value, inner)
            except Refused:
                raise
            except Exception as exc:  # noqa: BLE001
                raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None

        self._comprehension(node, env, produce)
        return out

    def assign(self, target: ast.AST, value, frame: dict) -> None:
        """Bind ``target`` (a name, or tuples and lists of names) to ``value`` in ``frame`` as Python would."""
        if isinstance(target, ast.Name):
            if target.id.startswith("__"):
                raise Refused(f"it binds {target.id}, one of Python's own names")
            frame[target.id] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
            items = list(self.iterate(value))
            if len(items) != len(target.elts):
                raise Refused(f"unpacking it raises ValueError: {len(items)} values for {len(target.elts)} names")
            for element, item in zip(target.elts, items):
                self.assign(element, item, frame)
            return
        raise Refused(f"it assigns to {_source_of(target)}: a constant binds names only")


def _storable(value, interpreter: Interpreter):
    """A value a constant may be bound to: numbers, strings, ranges, containers of those, scalar types, numba
    signatures and kernels; never an iterator, a function or ``np.finfo(...)``. Its nesting is bounded."""
    interpreter.depth(value)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (tuple, list, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, _Counted):
            raise Refused("its value is an iterator: make it a tuple (tuple(...))")
        elif not (item is None or item is Ellipsis or _number(item) or isinstance(item, (str, bytes, range))
                  or isinstance(item, (_NumbaType, _Signature, _Kernel))
                  or isinstance(item, type) and (issubclass(item, np.generic) or item in BUILTIN_TYPES.values())):
            what = item.what if isinstance(item, _Opaque) else f"a {_type_name(item)}"
            raise Refused(f"its value is {what}, not a constant")
    return value


# ---------------------------------------------------------------------------------------------
