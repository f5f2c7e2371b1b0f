"""The top-level statements of a cell: constants computed from what differs between the simulator and a GPU."""

from __future__ import annotations

import ast
import types

from ._policy import (NUMBA_TYPE_NAMES, _PROCESS_MODULES, in_kernel_api)

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
