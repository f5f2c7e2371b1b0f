"""What of a submission runs when it is graded: its kernels, its constants and its imports, nothing else.

Hidden tests run in the same Python process as the code a student wrote. Whatever that code can
reach it can rebind: the checking helpers, ``numpy``, IPython's error display, the launchers. No scan
of the code can find every route to that. So the grader never runs the student's other code: before
a submission is executed, every code cell the student wrote (answer cells and cells they added) is
reduced to what a kernel exercise is made of, at the top level of the cell:

- functions decorated with ``@cuda.jit`` (kernels and device functions), whole;
- constants: ``NAME = expression`` (a name the release's cells do not bind) where the expression is built from numbers, strings, earlier
  constants, ``math`` and ``numpy``/``numba`` scalar types (``float32(-math.inf)``, ``2 * WARP``);
- imports of ``math``, ``numpy`` and ``numba`` (and their submodules);
- docstrings, comments and blank lines.

Every other top-level line is kept as a comment, ``# [not run when graded] <the line>``, so the
line numbers of the cell stay those of the submission and the feedback shows what was left out.
What a kernel body does is checked when it is launched: the grading kernel compiles each kernel for
a GPU before the simulator runs it (``course.gpu_compile``), so a body can only do what a GPU can.
Locked cells, test cells and the setup cell are the release's (nbgrader restores them).

An answer cell the release marks as host Python (cell metadata ``course.host_answer``: day 6's
allocator) is not run in the grading kernel at all. Each of its lines becomes a comment, ``# [run in
a process of its own when graded] <the line>``, and one line is added that binds each class and
function the cell defines to a ``course.hostcode.HostCode`` holding the cell's source; the checks
run that source in a separate, guarded process (``grader/host_answers.py``) and judge only the data it
sends back. There, an import of the course's ``kernels`` other than the given base
(``kernels.block_pool``), or a function whose syntax tree is that of the course's allocator, is left
out and reported like a kernel of the course.

The course's own kernels are public (``kernels/``), and a graded submission may not use them. A
student's cell that imports the ``kernels`` package or reaches into it (``cuda.jit(kernels.gemm.
gemm_v4_register_blocked_kernel.py_func)``) loses that line like any other; a ``@cuda.jit``
function whose syntax tree, with every name, docstring and comment taken out, is that of a kernel
of the course with at least ``COPY_MIN_NODES`` nodes (a kernel too short to be told apart from an
honest answer is never called a copy) is left out too, marked ``# [the course's kernel ...]``. Each
is reported (``course_kernel``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib

MARK = "# [not run when graded] "
HOST_MARK = "# [run in a process of its own when graded] "
HOST_BASES = ("kernels.block_pool",)     # what of the course a host answer may import: its base class
HOST_COURSE_CODE = ("kernels/block_manager.py",)   # the course's host code a host answer may not paste
COPY_MIN_NODES = 150
PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULES = ("math", "numpy", "numba")
# Scalar constructors a constant may call (bare, or as an attribute of numpy or numba).
SCALAR_TYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                          "uint16", "uint32", "uint64", "bool_", "intp", "uintp"})
BUILTIN_CALLS = frozenset({"int", "float", "bool", "min", "max", "abs", "round"})


@dataclasses.dataclass
class Cleaned:
    """A cell's source as graded, and its lines that were left out (1-based numbers)."""

    source: str
    left_out: list[int]
    course_kernels: list[str] = dataclasses.field(default_factory=list)   # what of the course it used


def _module_root(name: str) -> str:
    return name.split(".")[0]


class _Scope:
    """What the kept code has bound so far: module aliases, scalar constructors, constants."""

    def __init__(self):
        self.modules: dict[str, str] = {}     # alias -> root module (math, numpy, numba)
        self.callables: set[str] = set()      # bare names of allowed calls (float32, sqrt, ...)
        self.constants: set[str] = set()      # names bound by kept constants, kernels and imports
        self.release: set[str] = set()        # names the release's own cells bind: never rebound

    def bound(self) -> set[str]:
        return set(self.modules) | self.callables | self.constants


def _allowed_call(func: ast.AST, scope: _Scope) -> bool:
    if isinstance(func, ast.Name):
        return func.id in scope.callables or (func.id in BUILTIN_CALLS and func.id not in scope.bound())
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and not func.attr.startswith("_"):
        root = scope.modules.get(func.value.id)
        if root == "math":
            return True
        if root in ("numpy", "numba"):
            return func.attr in SCALAR_TYPES
    return False


def _allowed_expression(node: ast.AST, scope: _Scope) -> bool:
    """True when evaluating ``node`` can only compute a value from numbers and allowed names."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in scope.bound() or node.id in BUILTIN_CALLS
    if isinstance(node, ast.Attribute):
        return (not node.attr.startswith("_") and isinstance(node.value, ast.Name)
                and node.value.id in scope.modules)
    if isinstance(node, ast.Call):
        return (_allowed_call(node.func, scope)
                and all(_allowed_expression(a, scope) for a in node.args)
                and all(k.arg is not None and _allowed_expression(k.value, scope) for k in node.keywords))
    if isinstance(node, (ast.BinOp,)):
        return _allowed_expression(node.left, scope) and _allowed_expression(node.right, scope)
    if isinstance(node, ast.UnaryOp):
        return _allowed_expression(node.operand, scope)
    if isinstance(node, ast.BoolOp):
        return all(_allowed_expression(v, scope) for v in node.values)
    if isinstance(node, ast.Compare):
        return _allowed_expression(node.left, scope) and all(_allowed_expression(c, scope) for c in node.comparators)
    if isinstance(node, ast.IfExp):
        return all(_allowed_expression(n, scope) for n in (node.test, node.body, node.orelse))
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_allowed_expression(e, scope) for e in node.elts)
    if isinstance(node, ast.Subscript):
        return _allowed_expression(node.value, scope) and _allowed_expression(node.slice, scope)
    if isinstance(node, ast.Slice):
        return all(part is None or _allowed_expression(part, scope) for part in (node.lower, node.upper, node.step))
    return False


def _is_jit(decorator: ast.AST, scope: _Scope) -> bool:
    """``@cuda.jit``, ``@numba.cuda.jit`` or either called with constant arguments."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    dotted = []
    while isinstance(target, ast.Attribute):
        dotted.append(target.attr)
        target = target.value
    if not isinstance(target, ast.Name):
        return False
    dotted.append(target.id)
    dotted.reverse()
    ok = (dotted[-1] == "jit" and len(dotted) >= 2 and dotted[-2] == "cuda"
          and (len(dotted) == 2 and scope.modules.get(dotted[0]) == "numba.cuda"
               or len(dotted) == 3 and scope.modules.get(dotted[0]) == "numba"))
    if ok and isinstance(decorator, ast.Call):
        return all(isinstance(a, ast.Constant) for a in decorator.args) and all(
            k.arg is not None and isinstance(k.value, ast.Constant) for k in decorator.keywords)
    return ok


def _keep(node: ast.stmt, scope: _Scope) -> bool:
    """Whether a top-level statement runs when graded; updates ``scope`` with what it binds."""
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)
    if isinstance(node, ast.Import):
        if not all(_module_root(a.name) in MODULES for a in node.names):
            return False
        for alias in node.names:          # the release's names keep their meaning
            bound = alias.asname or _module_root(alias.name)
            target = "numba.cuda" if alias.asname and alias.name == "numba.cuda" else _module_root(alias.name)
            if bound in scope.release and scope.modules.get(bound) != target:
                return False
        for alias in node.names:
            if alias.asname:
                scope.modules[alias.asname] = "numba.cuda" if alias.name == "numba.cuda" else _module_root(alias.name)
            else:
                scope.modules[_module_root(alias.name)] = _module_root(alias.name)
        return True
    if isinstance(node, ast.ImportFrom):
        if node.level or not node.module or _module_root(node.module) not in MODULES:
            return False
        if any(a.name == "*" for a in node.names):
            return False
        for alias in node.names:          # the release's names keep their meaning
            bound = alias.asname or alias.name
            if bound in scope.release and not (
                    node.module == "numba" and alias.name == "cuda" and scope.modules.get(bound) == "numba.cuda"
                    or alias.name == bound and bound in SCALAR_TYPES and bound in scope.callables):
                return False
        for alias in node.names:
            bound = alias.asname or alias.name
            if node.module == "numba" and alias.name == "cuda":
                scope.modules[bound] = "numba.cuda"
            elif node.module == "math" or alias.name in SCALAR_TYPES:
                scope.callables.add(bound)
            else:
                scope.constants.add(bound)
        return True
    if isinstance(node, ast.Assign):
        names = []
        for target in node.targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            if not all(isinstance(e, ast.Name) for e in elements):
                return False
            names += [e.id for e in elements]
        if any(n in scope.modules or n in scope.callables or n in scope.release or n.startswith("__")
               for n in names):
            return False
        if not _allowed_expression(node.value, scope):
            return False
        scope.constants.update(names)
        return True
    if isinstance(node, ast.FunctionDef):
        if len(node.decorator_list) != 1 or not _is_jit(node.decorator_list[0], scope):
            return False
        if node.name in scope.modules or node.name in scope.callables or node.name in scope.release:
            return False
        # Defaults and annotations run when the function is defined: constants only.
        args = node.args
        evaluated = [*args.defaults, *(d for d in args.kw_defaults if d is not None), node.returns,
                     *(a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                       if a is not None)]
        if not all(e is None or _allowed_expression(e, scope) for e in evaluated):
            return False
        scope.constants.add(node.name)
        return True
    return False


class _Anonymous(ast.NodeTransformer):
    """Every name a kernel chooses replaced by its order of first appearance; docstrings dropped."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        return self.names.setdefault(name, f"n{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id=self._name(node.id), ctx=node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(arg=self._name(node.arg)), node)

    def visit_FunctionDef(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        node = ast.FunctionDef(name="kernel", args=node.args, body=body or [ast.Pass()], decorator_list=[],
                               returns=None, type_comment=None, type_params=[])
        return self.generic_visit(node)


def fingerprint(function: ast.FunctionDef) -> tuple[str, int]:
    """(the kernel's syntax tree without names, docstring or decorators; its number of nodes)."""
    import copy

    anonymous = _Anonymous().visit(copy.deepcopy(function))
    return ast.dump(anonymous, annotate_fields=False), sum(1 for _ in ast.walk(function))


@functools.lru_cache(maxsize=1)
def _course_jit_functions() -> tuple:
    """``(path, FunctionDef)`` of every ``@cuda.jit`` function in ``kernels/`` (read, not imported)."""
    found = []
    for path in sorted((PROJECT_ROOT / "kernels").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
                found.append((path, node))
    return tuple(found)


@functools.lru_cache(maxsize=1)
def course_kernels() -> dict[str, str]:
    """``{fingerprint: "kernels/gemm.py: gemm_v4_register_blocked_kernel"}`` of the course's kernels
    long enough to be told apart from an honest answer."""
    found = {}
    for path, node in _course_jit_functions():
        key, size = fingerprint(node)
        if size >= COPY_MIN_NODES:
            found[key] = f"{path.relative_to(PROJECT_ROOT).as_posix()}: {node.name}"
    return found


def course_kernel_names() -> frozenset:
    """The names of every ``@cuda.jit`` function in ``kernels/``."""
    return frozenset(node.name for _, node in _course_jit_functions())


def _reaches_course_kernels(node: ast.stmt) -> bool:
    """A statement that imports a kernel of the course, or reaches one through the ``kernels``
    package (``kernels.reduction.row_stats_v3_warp_shuffle_kernel.py_func``)."""
    named = course_kernel_names()
    if isinstance(node, ast.ImportFrom):
        return bool(node.module) and _module_root(node.module) == "kernels" and any(
            a.name in named for a in node.names)
    return any(isinstance(n, ast.Attribute) and n.attr in named for n in ast.walk(node))


@functools.lru_cache(maxsize=1)
def course_host_functions() -> dict[str, str]:
    """``{fingerprint: "kernels/block_manager.py: append"}``: the course's host functions that a host
    answer may not paste (long enough to be told apart from an honest answer)."""
    found = {}
    for relative in HOST_COURSE_CODE:
        for node in ast.walk(ast.parse((PROJECT_ROOT / relative).read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                key, size = fingerprint(node)
                if size >= COPY_MIN_NODES:
                    found[key] = f"{relative}: {node.name}"
    return found


def _host_uses_course(node: ast.stmt) -> str | None:
    """What of the course's code a top-level statement of a host answer uses, or None."""
    for sub in ast.walk(node):
        modules = []
        if isinstance(sub, ast.Import):
            modules = [a.name for a in sub.names]
        elif isinstance(sub, ast.ImportFrom) and not sub.level and sub.module:
            modules = [sub.module] + [f"{sub.module}.{a.name}" for a in sub.names]
        for module in modules:
            if _module_root(module) == "kernels" and not any(
                    module == base or module.startswith(base + ".") or base.startswith(module + ".")
                    or module == base.rpartition(".")[0] for base in HOST_BASES):
                return f"imports {module}"
        if isinstance(sub, ast.FunctionDef):
            twin = course_host_functions().get(fingerprint(sub)[0])
            if twin is not None:
                return f"{sub.name} is the course's own ({twin})"
    return None


def clean_host_source(source: str) -> Cleaned:
    """A host answer as graded: every line a comment, then one line binding each class and function it
    defines to a ``HostCode`` of its source (without the statements that use the course's code)."""
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    names, used, dropped = [], [], set()
    for node in tree.body if tree is not None else []:
        first, last = _first_line(node), node.end_lineno
        use = _host_uses_course(node)
        if use is not None:
            used.append(f"line {first}: {use}")
            dropped.update(range(first, last + 1))
            continue
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.append(node.name)
    kept = "\n".join(line for number, line in enumerate(lines, 1) if number not in dropped) + "\n"
    out = [(HOST_MARK + line if line.strip() else line) for line in lines]
    if tree is None:
        out.append("raise SyntaxError('this cell is not valid Python')  # [added by the grader]")
    elif names:
        bind = "; ".join(f"{name} = _HostCode_({kept!r}, {name!r})" for name in names)
        out.append(f"from course.hostcode import HostCode as _HostCode_; {bind}  # [added by the grader]")
    return Cleaned("\n".join(out) + "\n", [], used)


def _first_line(node: ast.stmt) -> int:
    lines = [node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]
    return min(lines)


def clean_source(source: str, scope: _Scope | None = None) -> Cleaned:
    """The cell as graded: kept statements verbatim, every other top-level line commented out."""
    scope = scope if scope is not None else _Scope()
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        numbered = [i for i, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
        return Cleaned("\n".join(MARK + line if i in numbered else line for i, line in enumerate(lines, 1)),
                       numbered)
    spans = [(_first_line(node), node.end_lineno, node) for node in tree.body]
    dropped: set[int] = set()
    copied: dict[int, str] = {}       # first line of a pasted kernel -> which of the course's
    used = []
    kept = []
    for first, last, node in spans:
        if _keep(node, scope):
            twin = course_kernels().get(fingerprint(node)[0]) if isinstance(node, ast.FunctionDef) else None
            if twin is None:
                kept.append((first, last))
                continue
            copied[first] = twin
            used.append(f"line {first}: {node.name} is the course's kernel ({twin})")
        elif _reaches_course_kernels(node):
            used.append(f"line {first}: {lines[first - 1].strip()[:80]}")
        dropped.update(range(first, last + 1))
    # A kept statement sharing a line with a dropped one (``a = 1; print(a)``) is dropped too.
    changed = True
    while changed:
        changed = False
        for first, last in list(kept):
            if dropped & set(range(first, last + 1)):
                dropped.update(range(first, last + 1))
                kept.remove((first, last))
                changed = True
    out = []
    left_out = []
    mark = MARK
    for number, line in enumerate(lines, 1):
        if number in copied:
            mark = "# [the course's kernel: not graded] "
        elif number not in dropped:
            mark = MARK
        if number in dropped and line.strip():
            out.append(mark + line)
            left_out.append(number)
        else:
            out.append(line)
    return Cleaned("\n".join(out) + ("\n" if source.endswith("\n") else ""), left_out, used)


def _meta(cell: dict) -> dict:
    nbgrader = cell.get("metadata", {}).get("nbgrader", {})
    return nbgrader if isinstance(nbgrader, dict) else {}


def host_answer(cell: dict) -> bool:
    """Whether the release marks this answer cell as host Python (cell metadata ``course.host_answer``)."""
    course = cell.get("metadata", {}).get("course", {})
    return isinstance(course, dict) and course.get("host_answer") is True


def graded_code(release: dict) -> str:
    """``"kernels"`` (the default: a course day) or ``"python"``, from the notebook's metadata
    ``course.graded_code``. A notebook whose answers are host Python (the grader's own toy course
    that tests the layers below this one) is run as submitted, without launch checks."""
    value = release.get("metadata", {}).get("course", {}).get("graded_code", "kernels")
    if value not in ("kernels", "python"):
        raise ValueError(f"notebook metadata course.graded_code must be 'kernels' or 'python', got {value!r}")
    return value


def release_scope(release: dict) -> _Scope:
    """What the release's own code cells import: usable by the student's constants, never rebound."""
    scope = _Scope()
    for cell in release.get("cells", []):
        if cell.get("cell_type") != "code" or _meta(cell).get("solution"):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        try:
            nodes = ast.parse(source).body
        except SyntaxError:
            continue
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not _keep(node, scope):
                # the release's other imports (course constants): usable as values, not calls
                scope.constants.update((a.asname or a.name).split(".")[0] for a in node.names)
    scope.release = scope.bound()
    return scope


def clean_notebook(submitted: dict, release: dict) -> tuple[list[str], list[str]]:
    """Reduce, in place, every code cell the student wrote; return (a note per cell that lost lines,
    each use of the course's kernels, with its cell).

    The student's cells are the answer cells of the release and code cells the release does not
    have. Names bound by the release's own code (the setup cell's imports) count as imports here,
    so a constant may use ``math`` or ``np`` that only the setup cell imported.
    """
    released_cells = {_meta(c).get("grade_id"): c for c in release.get("cells", []) if _meta(c).get("grade_id")}
    released = {gid: _meta(c) for gid, c in released_cells.items()}
    scope = release_scope(release)
    notes, used = [], []
    for index, cell in enumerate(submitted.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        gid = _meta(cell).get("grade_id")
        release_meta = released.get(gid)
        if release_meta is not None and not (release_meta.get("solution") and not release_meta.get("locked")):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        where = gid if release_meta is not None else f"added cell {index + 1}"
        if release_meta is not None and host_answer(released_cells[gid]):
            cleaned = clean_host_source(source)
            cell["source"] = cleaned.source
            used += [f"{where}, {use}" for use in cleaned.course_kernels]
            continue
        cleaned = clean_source(source, scope)
        if cleaned.left_out:
            cell["source"] = cleaned.source
            notes.append(f"{where}: {len(cleaned.left_out)} line(s)")
        used += [f"{where}, {use}" for use in cleaned.course_kernels]
    return notes, used
