"""The calls a constant may make (built-ins, math's and numpy's functions, scalar types), as a part of
:class:`course.graded_code._interpreter.Interpreter` (see the package's docstring)."""

from __future__ import annotations

import ast
import math

import numpy as np

from ._values import (BUILTIN_FUNCTIONS, BUILTIN_KEYWORDS, BUILTIN_TYPES, JIT, MAX_INT_BITS, Refused, _CONTAINERS,
                      _Counted, _Info, _number, _NumbaType, _Signature, _source_of, _type_name)


class _Calls:
    """The calls of :class:`~course.graded_code._interpreter.Interpreter`."""

    # -- calls -----------------------------------------------------------------------------------

    def callee(self, func: ast.AST, env: dict):
        """``(kind, what)`` of what a call calls, refused when a constant may not call it."""
        kind, what = self.resolve(func, env) if isinstance(func, (ast.Name, ast.Attribute)) else ("", None)
        name = _source_of(func)
        if kind == "builtin" or kind == "function" and what != "numba.jit" and what != JIT:
            return kind, what
        scalar_type = isinstance(what, _NumbaType) or isinstance(what, type) and issubclass(what, np.generic)
        if kind == "value" and scalar_type:
            return kind, what
        raise Refused(f"it calls {name}, which a constant may not call (only {', '.join(sorted(BUILTIN_FUNCTIONS))}, "
                      f"math's and numpy's functions and scalar types)")

    def _Call(self, node, env):
        kind, what = self.callee(node.func, env)
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                args.extend(self.iterate(self.evaluate(arg.value, env)))
            else:
                args.append(self.evaluate(arg, env))
        keywords = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise Refused("it uses ** unpacking, which a constant may not")
            keywords[keyword.arg] = self.evaluate(keyword.value, env)
        if kind == "builtin":
            return self.check_int(self._builtin(what, args, keywords))
        if kind == "value":
            return self._construct(what, args, keywords)
        return self.check_int(self._function(what, args, keywords))

    def _fail(self, exc):
        raise Refused(f"computing it raises {type(exc).__name__}: {exc}") from None

    def _builtin(self, name: str, args: list, keywords: dict):
        allowed = BUILTIN_KEYWORDS.get(name, set())
        if allowed is not None and set(keywords) - allowed:
            raise Refused(f"it calls {name} with {', '.join(sorted(set(keywords) - allowed))}=, which a constant "
                          f"may not")
        try:
            if name == "range":
                if not all(isinstance(a, (int, np.integer)) for a in args):
                    raise Refused("it calls range with something other than integers")
                return range(*args)
            if name == "len":
                if len(args) != 1 or not isinstance(args[0], (tuple, list, set, frozenset, dict, range, str, bytes)):
                    raise Refused("it takes len of something other than a container")
                return len(args[0])
            if name in ("tuple", "list", "set", "frozenset"):
                items = list(self.iterate(args[0])) if args else []
                if len(args) > 1:
                    raise Refused(f"it calls {name} with more than one argument")
                if name in ("set", "frozenset"):
                    return self._hashed(BUILTIN_TYPES[name], items)
                return BUILTIN_TYPES[name](items)
            if name == "dict":
                if len(args) > 1:
                    raise Refused("it calls dict with more than one argument")
                pairs = []
                if args:
                    source = args[0]
                    pairs = list(source.items()) if isinstance(source, dict) else [
                        tuple(self.iterate(pair)) for pair in self.iterate(source)]
                for key, value in [*pairs, *keywords.items()]:
                    self.size(key)
                return dict([*pairs, *keywords.items()])
            if name in ("min", "max"):
                function = min if name == "min" else max
                if len(args) == 1:
                    args = [list(self.iterate(args[0]))]
                    items = args[0]
                else:
                    items = args
                for item in items:
                    if not _number(item):
                        self.size(item)
                return function(*args, **keywords)
            if name in ("abs", "int", "float", "bool", "round", "divmod"):
                for arg in [*args, *keywords.values()]:
                    if isinstance(arg, (str, bytes)):
                        if name not in ("int", "float"):
                            raise Refused(f"it calls {name} on a string")
                        self.charge(len(arg))
                    elif not _number(arg) and arg is not None and not (
                            name == "bool" and isinstance(arg, (_CONTAINERS, range))):
                        raise Refused(f"it calls {name} on a {_type_name(arg)}")
                return {"abs": abs, "int": int, "float": float, "bool": bool, "round": round,
                        "divmod": divmod}[name](*args, **keywords)
            if name == "sum":
                if not args:
                    raise Refused("it calls sum without arguments")
                items = list(self.iterate(args[0]))
                for item in [*items, *args[1:], *keywords.values()]:
                    if not _number(item):
                        raise Refused(f"it sums a {_type_name(item)} (sum adds numbers only)")
                for item in items:
                    if isinstance(item, int) and item.bit_length() > MAX_INT_BITS:
                        raise Refused(f"it computes an integer of more than {MAX_INT_BITS} bits")
                return sum(items, *args[1:], **keywords)
            if name == "sorted":
                if len(args) != 1:
                    raise Refused("it calls sorted with more than one argument")
                items = list(self.iterate(args[0]))
                cost = sum(1 if _number(item) else self.size(item) for item in items)
                self.charge(cost * max(1, len(items).bit_length()))
                return sorted(items, **keywords)
            if name in ("all", "any"):
                return (all if name == "all" else any)(self.truth(item) for item in self.iterate(args[0]))
            if name == "reversed":
                if len(args) != 1 or not isinstance(args[0], (tuple, list, range, str, bytes)):
                    raise Refused("it reverses something other than a sequence")
                return _Counted(reversed(args[0]), self)
            if name == "enumerate":
                return _Counted(enumerate(self.iterate(args[0]), **keywords), self)
            if name == "zip":
                return _Counted(zip(*(self.iterate(a) for a in args), **keywords), self)
        except Refused:
            raise
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        raise Refused(f"it calls {name}, which a constant may not call")

    def _construct(self, what, args, keywords):
        """A scalar type called: a number of that type (numba's types cast as numba does: ``bool(x)`` for
        its booleans, numpy's type of the same name otherwise), or, for numba's, a signature."""
        if keywords:
            raise Refused("it calls a scalar type with keywords")
        numba_type = isinstance(what, _NumbaType)
        if numba_type and (not args or all(isinstance(a, (_NumbaType, _Signature)) for a in args)):
            return _Signature(f"signature {what.name}(...)")
        if len(args) > 1 or not all(_number(a) or isinstance(a, str) for a in args) or (
                numba_type and (what.name == "void" or not args)):
            raise Refused("it calls a scalar type on something other than one number")
        if args and isinstance(args[0], str):
            self.charge(len(args[0]))
        if numba_type:
            kind = bool if what.name in ("boolean", "bool_") else getattr(np, what.name)
        else:
            kind = what
        try:
            return kind(*args)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _function(self, qualified: str, args, keywords):
        module, _, name = qualified.rpartition(".")
        if keywords:
            raise Refused(f"it calls {qualified} with keywords, which a constant may not")
        if qualified in ("numpy.finfo", "numpy.iinfo"):
            if len(args) != 1:
                raise Refused(f"it calls {qualified} with {len(args)} arguments")
            dtype = args[0]
            if not (isinstance(dtype, type) and issubclass(dtype, np.generic)):
                raise Refused(f"it calls {qualified} on something other than one of numpy's scalar types")
            try:
                return _Info(getattr(np, name)(dtype))
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
        if name in ("fsum", "hypot") and module == "math":
            values = list(self.iterate(args[0])) if name == "fsum" and len(args) == 1 else args
            args = [values] if name == "fsum" else values
            checked = values
        else:
            checked = args
        if not all(_number(a) for a in checked):
            raise Refused(f"it calls {qualified} on something other than numbers")
        function = getattr(math if module == "math" else np, name)
        try:
            result = function(*args)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        if isinstance(result, tuple) and all(_number(r) for r in result):
            return result
        if not _number(result):
            raise Refused(f"{qualified} did not give a number")
        return result
