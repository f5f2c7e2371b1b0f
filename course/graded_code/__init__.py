"""What of a student's cell runs when it is graded: the rule, in one place for the grader (``grader/cleanroom.py``),
``course check`` (``grader/check.py``) and the notebook itself (``course/graded_notice.py``).

Hidden tests run in the same Python process as the student's code, so the grader runs none of it but what a
kernel exercise is made of, at the top level of each cell the student wrote (:data:`RULE` says it to students):

- **kernels**: ``def`` with exactly one decorator that is numba-cuda's ``jit``, however it was imported
  (``@cuda.jit``, ``@numba.cuda.jit``, ``@gpu.jit`` after ``from numba import cuda as gpu``, ``@nc.jit`` after
  ``import numba.cuda as nc``, ``@jit`` after ``from numba.cuda import jit``), bare or called with signatures
  (``"void(float32[:])"``, ``void(float32[:], int32)``) and the keywords of :data:`JIT_KEYWORDS` set to
  constants; its defaults and annotations must be constant expressions (below). The body is the kernel's:
  it is checked when launched, by compiling it for a GPU. Kernels and device functions may come in any order.
- **imports** of ``math``, ``numpy``, ``numba`` and their submodules, in every spelling (``import numba.cuda
  as nc``, ``from numba.cuda import jit, grid``, ``from numba import cuda as gpu``); never ``*``, and of numba
  only its number types, ``types`` and ``numba.cuda`` with its kernel API (``course.kernel_reach.path_refusal``:
  ``from numba.core.config import ENABLE_CUDASIM`` would hand a kernel a plain number that says where it runs).
- **constants**: ``NAME = expr``, ``A, B = expr``, ``A = B = expr``, ``NAME: annotation = expr`` and
  ``NAME += expr`` (a constant of the student's, not a list, dict or set: ``+=`` would change it in place),
  where ``expr`` is a *constant expression*;
- docstrings, ``pass``, comments and blank lines.

A **constant expression** is built from

- numbers, strings, ``True``/``False``/``None``; names bound by the notebook's given cells before this cell
  (the set-up cell's imports, the ``*_constants`` cells, constants imported from the course such as
  ``from kernels.reduction import TREE_THREADS``), and names bound by earlier kept lines (constants, kernels
  as values, imported modules and functions);
- arithmetic, comparison, boolean and conditional expressions; tuples, lists, dicts and sets, with ``*``
  unpacking, and comprehensions and generator expressions over them; indexing and slicing;
- calls of :data:`BUILTIN_FUNCTIONS` only (``range``, ``len``, ``tuple``, ``min``, ``sum``, ``zip``, ...,
  without ``key=``), of ``math``'s functions in :data:`MATH_FUNCTIONS`, of the scalar types of numpy and numba
  (``float32(-math.inf)``, ``np.int32(7)``), of numpy's scalar functions in :data:`NUMPY_FUNCTIONS` (on
  numbers only) and ``np.finfo``/``np.iinfo`` (``np.finfo(np.float32).max``);
- attributes of ``math``, ``numpy`` and ``numba`` only, and only those named in this module's tables.

Never: any other call (``print``, ``getattr``, ``__import__``, ``open``, a launcher, a method), an attribute of
anything but those modules (``np.__dict__``, ``().__class__``, ``x.real``), a private or dunder name,
``lambda``, ``:=``, f-strings and ``%`` formatting, ``**`` unpacking, ``await``/``yield``; a name the
notebook binds to something other than a constant (a launcher, ``exercise_checks``, the ``kernels``
package); binding a name the notebook gives, a Python built-in name or a dunder name.

**Evaluation is bounded.** The rule does not only read a constant: it computes it, here, with its own small
interpreter that does exactly what Python will do, step by step, and counts. Every element a constant builds
or iterates over, every element compared, hashed or searched, is a step; a statement may take
:data:`STEPS_PER_STATEMENT` steps and all the constants of a notebook :data:`STEPS_PER_NOTEBOOK`, an integer
may have :data:`MAX_INT_BITS` bits and a constant's nesting :data:`MAX_DEPTH` levels. A constant over a limit
(``tuple(range(10**12))``, ``10**10**10``) or one that raises (``1 / 0``) is left out, with the reason;
so what the grading kernel then evaluates cannot take more than a fraction of a second, whatever the
student wrote. Its value is known here too, which is how a later ``range(N)`` is bounded. A kept line never
raises when graded (it would end its cell there, and the kernels below it with it): what raises here, as
Python would (``1 / 0``, ``np.int32(2**40)``, ``max(3, 4, default=1)``), is left out. Checking is bounded
as well: :data:`CHECKING_STEPS` for a notebook's cells, lines left out included.

Everything else is left out, line by line: :func:`clean_source` turns it into a comment, :data:`MARK`
``<the line>``, and says why (:class:`Dropped`). Statements that share a line are kept or left out
together.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

from course.kernel_reach import path_refusal

from ._interpreter import Interpreter, _BINARY, _storable  # noqa: F401
from ._values import (  # noqa: F401  (the package's names, as they were in one module)
    BUILTIN_FUNCTIONS, BUILTIN_KEYWORDS, BUILTIN_TYPES, CHECKING_STEPS, INFO_ATTRIBUTES, JIT, JIT_KEYWORDS,
    MATH_CONSTANTS, MATH_FUNCTIONS, MAX_DEPTH, MAX_INT_BITS, MODULES, NUMBA_TYPES, NUMPY_CONSTANTS,
    NUMPY_FUNCTIONS, SCALAR_TYPES, STEPS_PER_NOTEBOOK, STEPS_PER_STATEMENT, SUBMODULES, Refused, Scope,
    _classify, _dotted, _NumbaType, _PYTHON_NAMES, _Signature, _source_of, _type_name)

PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
MARK = "# [not run when graded] "
RULE = ("When graded, only your kernels (@cuda.jit functions), imports of math, numpy and numba, and constants "
        "computed from numbers, the notebook's given constants and your earlier constants run: every other "
        "top-level line of your cells is skipped, so a kernel must not need it.")
# Locked cells the graded cells need, by grade_id (grader.markers.NEEDED_WHEN_GRADED is the same pattern).
NEEDED_WHEN_GRADED = re.compile(r"(^|_)setup($|_)|_launcher$|_constants$")

# Kinds of the notebook's cells, for :func:`cell_kind`.
ANSWER, GIVEN, GRADED, EXAMPLE = "answer", "given", "graded", "example"


# ---------------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------------

def _targets(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _targets(element)]
    if isinstance(target, ast.Starred):
        return _targets(target.value)
    raise Refused(f"it assigns to {_source_of(target)}: a constant binds names only")


def _bindable(name: str, scope: Scope) -> None:
    if name.startswith("__"):
        raise Refused(f"it binds {name}, one of Python's own names")
    if name in _PYTHON_NAMES:
        raise Refused(f"it rebinds {name}, one of Python's built-in names")
    if name in scope.release:
        raise Refused(f"it rebinds {name}, which the notebook gives")
    if name in scope.modules or name in scope.functions or name in scope.imported:
        raise Refused(f"it rebinds {name}, an imported name")


def bound_names(node: ast.stmt) -> list[str]:
    """The names a top-level statement binds (imports, assignments, definitions, loop variables)."""
    if isinstance(node, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names if a.name != "*"]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    names = []
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id not in names:
            names.append(sub.id)
    return names


def _numba_path(path: str) -> None:
    """Of numba, only its number types, ``types`` and ``numba.cuda``'s kernel API may be imported: its
    configuration or the simulator's modules would tell a kernel where it runs (``course.kernel_reach``)."""
    why = path_refusal(path)
    if why is not None:
        raise Refused(f"it imports {why}")


def _import_bindings(node: ast.stmt) -> list[tuple[str, str, str]]:
    """``(name, kind, what)`` an import of math, numpy or numba binds; refused for any other import."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] not in MODULES:
                raise Refused(f"it imports {alias.name}: only math, numpy and numba may be imported")
            _numba_path(alias.name)
            if alias.asname:
                out.append((alias.asname, "module", alias.name))
            else:
                root = alias.name.split(".")[0]
                out.append((root, "module", root))
        return out
    if node.level or not node.module or node.module.split(".")[0] not in MODULES:
        raise Refused(f"it imports from {'.' * node.level}{node.module or ''}: only math, numpy and numba may be "
                      f"imported")
    for alias in node.names:
        if alias.name == "*":
            raise Refused("it imports *, which hides what it binds")
        qualified = f"{node.module}.{alias.name}"
        _numba_path(qualified)
        found = _classify(qualified)
        bound = alias.asname or alias.name
        if found is None:
            out.append((bound, "imported", qualified))
        elif found[0] == "module":
            out.append((bound, "module", qualified))
        elif found[0] == "function" or isinstance(found[1], (_NumbaType,)) or isinstance(found[1], type):
            out.append((bound, "function", qualified))
        else:
            out.append((bound, "value", found[1]))
    return out


def _bind_import(bindings, scope: Scope) -> None:
    for name, kind, what in bindings:
        scope._forget(name)
        if kind == "module":
            scope.modules[name] = what
        elif kind == "function":
            scope.functions[name] = what
        elif kind == "imported":
            scope.imported[name] = what
        else:
            scope.values[name] = what


def _keep_import(node, scope: Scope) -> None:
    bindings = _import_bindings(node)
    for name, kind, what in bindings:
        if name.startswith("__"):
            raise Refused(f"it binds {name}, one of Python's own names")
        if name in scope.release:
            before = scope.meaning(name)
            same_scalar = (before is not None and before[0] == "function" == kind and name in SCALAR_TYPES
                           and before[1].rpartition(".")[2] == what.rpartition(".")[2] == name)
            if not same_scalar and (before is None or before[0] == "value" or before != (kind, what)):
                raise Refused(f"it rebinds {name}, which the notebook gives, to something else")
        elif name in _PYTHON_NAMES:
            raise Refused(f"it rebinds {name}, one of Python's built-in names")
        elif name in scope.values or name in scope.kernels:
            pass                    # a student's own constant replaced by an import: fine
    _bind_import(bindings, scope)


def _jit_of(decorator: ast.AST, scope: Scope) -> str | None:
    """The qualified name a decorator resolves to (``numba.cuda.jit``), or None."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    parts = _dotted(target)
    if not parts:
        return None
    head, rest = parts[0], parts[1:]
    if head in scope.modules:
        qualified = ".".join([scope.modules[head], *rest])
    elif head in scope.functions and not rest:
        qualified = scope.functions[head]
    else:
        return None
    return qualified


def _signature(value) -> bool:
    """A signature, or a list of them (the simulator's jit takes no tuple of them)."""
    if isinstance(value, (str, _Signature)):
        return True
    return isinstance(value, list) and all(isinstance(v, (str, _Signature)) for v in value)


def _keep_function(node: ast.FunctionDef, scope: Scope) -> None:
    if len(node.decorator_list) != 1:
        raise Refused("a function runs when graded only as a kernel: decorated with cuda.jit and nothing else"
                      if not node.decorator_list else "a kernel has exactly one decorator, cuda.jit")
    decorator = node.decorator_list[0]
    qualified = _jit_of(decorator, scope)
    if qualified == "numba.jit":
        raise Refused("numba.jit compiles for the CPU: a kernel is decorated with cuda.jit")
    if qualified != JIT:
        raise Refused(f"its decorator {_source_of(decorator)} is not numba-cuda's jit")
    interpreter = Interpreter(scope)
    if isinstance(decorator, ast.Call):
        if len(decorator.args) > 1:
            raise Refused("cuda.jit is given more than one signature argument (a list holds several)")
        for arg in decorator.args:
            if isinstance(arg, ast.Starred) or not _signature(interpreter.evaluate(arg)):
                raise Refused(f"cuda.jit is given {_source_of(arg)}, which is not a signature")
        for keyword in decorator.keywords:
            if keyword.arg not in JIT_KEYWORDS:
                raise Refused(f"cuda.jit is given {keyword.arg or '**'}=, which a graded kernel may not use "
                              f"(only {', '.join(sorted(JIT_KEYWORDS))})")
            _storable(interpreter.evaluate(keyword.value), interpreter)
    _bindable(node.name, scope)
    # Defaults and annotations run when the function is defined: constant expressions only.
    args = node.args
    for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        _storable(interpreter.evaluate(default), interpreter)
    for annotation in [node.returns, *(a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                               args.vararg, args.kwarg] if a is not None)]:
        if annotation is not None:
            interpreter.evaluate(annotation)
    scope.bind_kernel(node.name)


def _keep_assignment(node, scope: Scope) -> None:
    interpreter = Interpreter(scope)
    if isinstance(node, ast.AnnAssign):
        if node.value is None:
            raise Refused("an annotation alone binds nothing")
        if not node.simple or not isinstance(node.target, ast.Name):
            raise Refused(f"it assigns to {_source_of(node.target)}: a constant binds names only")
        interpreter.evaluate(node.annotation)
        targets = [node.target]
    elif isinstance(node, ast.AugAssign):
        if not isinstance(node.target, ast.Name):
            raise Refused(f"it assigns to {_source_of(node.target)}: a constant binds names only")
        name = node.target.id
        _bindable(name, scope)
        if name not in scope.values:
            raise Refused(f"{name} is not a constant of yours")
        if isinstance(scope.values[name], (list, dict, set)):
            raise Refused(f"it changes the {_type_name(scope.values[name])} {name} in place, which a constant "
                          f"may not (write {name} = {name} + ...)")
        if type(node.op) not in _BINARY:
            raise Refused(f"it uses the operator {type(node.op).__name__}, which a constant may not")
        value = interpreter.binary(type(node.op), scope.values[name], interpreter.evaluate(node.value))
        scope.bind_value(name, _storable(value, interpreter))
        return
    else:
        targets = node.targets
    names = [name for target in targets for name in _targets(target)]
    for name in names:
        _bindable(name, scope)
    value = _storable(interpreter.evaluate(node.value), interpreter)
    for target in targets:
        frame: dict = {}
        interpreter.assign(target, value, frame)
        for name, item in frame.items():        # parts of a value already checked
            scope.bind_value(name, item)


def keep(node: ast.stmt, scope: Scope) -> None:
    """Keep a top-level statement of a student's cell (binding what it binds in ``scope``), or raise
    :class:`Refused` saying why it is left out."""
    if isinstance(node, ast.Expr):
        if isinstance(node.value, ast.Constant):
            return
        raise Refused("it is an expression run for its effect (a call, a print), not a kernel, a constant or "
                      "an import")
    if isinstance(node, ast.Pass):
        return
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _keep_import(node, scope)
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return _keep_assignment(node, scope)
    if isinstance(node, ast.FunctionDef):
        return _keep_function(node, scope)
    what = {ast.ClassDef: "a class", ast.AsyncFunctionDef: "an async function", ast.If: "an if statement",
            ast.For: "a for loop", ast.While: "a while loop", ast.With: "a with statement", ast.Try: "a try statement",
            ast.Delete: "a del statement", ast.Global: "a global statement", ast.Assert: "an assert",
            ast.Raise: "a raise statement", ast.Match: "a match statement"}.get(type(node), "a statement")
    raise Refused(f"it is {what}, not a kernel, a constant or an import")


# ---------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Dropped:
    """A top-level statement left out: its lines (1-based), its first line's text, why, the names it binds."""

    first: int
    last: int
    text: str
    reason: str
    binds: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"line {self.first}: {self.text}  ({self.reason})"


@dataclasses.dataclass
class Cleaned:
    """A cell's source as graded, its lines that were left out (1-based numbers), and why."""

    source: str
    left_out: list[int]
    course_kernels: list[str] = dataclasses.field(default_factory=list)   # what of the course it used
    dropped: list[Dropped] = dataclasses.field(default_factory=list)


def first_line(node: ast.stmt) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _groups(nodes: list[ast.stmt]) -> list[list[ast.stmt]]:
    """Top-level statements grouped when they share a line (``a = 1; print(a)``)."""
    groups: list[list[ast.stmt]] = []
    for node in nodes:
        if groups and first_line(node) <= groups[-1][-1].end_lineno:
            groups[-1].append(node)
        else:
            groups.append([node])
    return groups


def clean_source(source: str, scope: Scope, *, veto=None) -> Cleaned:
    """The cell as graded: kept statements verbatim, every other top-level line commented out with ``MARK``.

    ``veto(node)`` may leave out a statement the rule keeps: it returns None or ``(reason, mark)``, the mark
    then starting its lines instead of ``MARK`` (the grader's copies of the course's kernels).
    """
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except (RecursionError, MemoryError, ValueError):
        tree = None
        exc = SyntaxError("it is nested too deeply to read")
        exc.lineno = 1
    except SyntaxError as error:
        tree, exc = None, error
    if tree is None:
        numbered = [i for i, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
        dropped = [Dropped(numbered[0], numbered[-1], lines[numbered[0] - 1].strip(),
                           f"the cell is not valid Python: {exc.msg} (line {exc.lineno})")] if numbered else []
        return Cleaned("\n".join(MARK + line if i in numbered else line for i, line in enumerate(lines, 1)),
                       numbered, dropped=dropped)
    marks: dict[int, str] = {}
    dropped: list[Dropped] = []
    for group in _groups(tree.body):
        trial = scope.copy()
        reasons = []
        for node in group:
            try:
                try:
                    keep(node, trial)
                except RecursionError:
                    raise Refused("it is nested too deeply to compute") from None
                vetoed = veto(node) if veto is not None else None
                if vetoed is not None:
                    reasons.append(vetoed[0])
                    for number in range(first_line(node), node.end_lineno + 1):
                        marks[number] = vetoed[1]
                else:
                    reasons.append(None)
            except Refused as why:
                reasons.append(str(why))
        if all(reason is None for reason in reasons):
            scope.__dict__.update(trial.__dict__)
            continue
        scope.effort = trial.effort        # what a line left out computed never runs: only checking it counts
        for node, reason in zip(group, reasons):
            first = first_line(node)
            dropped.append(Dropped(first, node.end_lineno, lines[first - 1].strip(),
                                   reason or "it shares a line with a statement that does not run",
                                   tuple(bound_names(node))))
    left_out_lines = {n for d in dropped for n in range(d.first, d.last + 1)}
    out, left_out = [], []
    for number, line in enumerate(lines, 1):
        if number in left_out_lines and line.strip():
            out.append(marks.get(number, MARK) + line)
            left_out.append(number)
        else:
            out.append(line)
    return Cleaned("\n".join(out) + ("\n" if source.endswith("\n") else ""), left_out, dropped=dropped)


# ---------------------------------------------------------------------------------------------
# The notebook's own cells
# ---------------------------------------------------------------------------------------------

def cell_kind(cell: dict) -> str:
    """How a cell of the *release* runs when graded: ``answer`` (the student's: cleaned), ``given`` (runs, and
    may give constants), ``graded`` (a test cell: runs) or ``example`` (a locked cell for the student, not run
    when graded: ``grader.markers.example_cells``)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("solution") and not meta.get("locked"):
        return ANSWER
    if meta.get("grade"):
        return GRADED
    gid = meta.get("grade_id")
    if gid and meta.get("locked") and not meta.get("solution") and not NEEDED_WHEN_GRADED.search(gid):
        return EXAMPLE
    return GIVEN


def source_of(cell: dict) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def statements(source: str) -> list[ast.stmt]:
    """The top-level statements of a cell (none when it is not valid Python)."""
    try:
        return ast.parse(source).body
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return []


def release_names(cells: list[tuple[str, str]]) -> set[str]:
    """Names a student may not rebind: whatever the given and test cells bind, and every import of the release."""
    names = set()
    for kind, source in cells:
        for node in statements(source):
            if kind in (GIVEN, GRADED) or isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update(bound_names(node))
    return names


def give(source: str, scope: Scope, *, kind: str = GIVEN) -> None:
    """Bind in ``scope`` what a cell of the notebook that runs when graded binds: imports of math, numpy and
    numba as a student's would, constants (of the cell, or imported from the course) with their values, and
    anything else as a name that is not a constant."""
    for node in statements(source):
        names = bound_names(node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                _bind_import(_import_bindings(node), scope)
                continue
            except Refused:
                pass
            if kind == GIVEN and isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    value = project_constant(node.module, alias.name)
                    name = alias.asname or alias.name
                    scope._forget(name)
                    if value is _MISSING:
                        scope.given[name] = f"imported from {node.module}"
                    else:
                        scope.values[name] = value
                continue
            for name in names:
                scope._forget(name)
                scope.given[name] = "a module of the course" if kind == GIVEN else "bound by a test cell"
            continue
        if kind == GIVEN and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            trial = scope.copy()
            trial.release = set()
            try:
                _keep_assignment(node, trial)
            except Refused:
                pass
            else:
                for name in names:
                    scope._forget(name)
                    scope.values[name] = trial.values.get(name)
                continue
        what = {ast.FunctionDef: "a function", ast.ClassDef: "a class"}.get(type(node), "not a constant")
        if kind == GRADED:
            what = "bound by a test cell"
        for name in names:
            scope._forget(name)
            scope.given[name] = what


_MISSING = object()
_MODULE_CONSTANTS: dict[str, dict] = {}
_BUSY: set[str] = set()


def _module_constants(module: str) -> dict:
    """The constants a module of the course's ``kernels`` defines at its top level, computed by the rule from
    its source (never imported): ``{name: value}``."""
    if module in _MODULE_CONSTANTS:
        return _MODULE_CONSTANTS[module]
    parts = module.split(".")
    if parts[0] != "kernels" or not all(p.isidentifier() for p in parts) or module in _BUSY:
        return {}
    base = PROJECT_ROOT.joinpath(*parts)
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if not path.is_file():
        return {}
    _BUSY.add(module)
    try:
        scope = Scope()
        give(path.read_text(encoding="utf-8"), scope)
    finally:
        _BUSY.discard(module)
    _MODULE_CONSTANTS[module] = dict(scope.values)
    return _MODULE_CONSTANTS[module]


def project_constant(module: str, name: str):
    """The value of constant ``name`` of the course's ``module``, or ``_MISSING`` when it is not a constant."""
    return _module_constants(module).get(name, _MISSING)
