"""What of a submission runs when it is graded: its kernels, its constants and its imports, nothing else.

Hidden tests run in the same Python process as the code a student wrote. Whatever that code can
reach it can rebind: the checking helpers, ``numpy``, IPython's error display, the launchers. No scan
of the code can find every route to that. So the grader never runs the student's other code: before
a submission is executed, every code cell the student wrote (answer cells and cells they added) is
reduced to what a kernel exercise is made of, at the top level of the cell:

- functions decorated with numba-cuda's ``jit`` (kernels and device functions), whole, however ``jit``
  was imported (``@cuda.jit``, ``@gpu.jit`` after ``from numba import cuda as gpu``, ``@jit`` after
  ``from numba.cuda import jit``), with constant defaults, annotations and decorator arguments;
- constants: ``NAME = expression`` (also ``A, B = ...``, ``NAME: int = ...``, ``NAME += ...``; never a name
  the release's cells bind, a built-in or a dunder) where the expression is a *constant expression*:
  numbers, strings, the release's given constants (``WARP``, ``TREE_THREADS`` imported from the course) and
  earlier constants, arithmetic, tuples, lists, dicts, sets and comprehensions over them, and calls of a
  short list of pure functions (``range``, ``len``, ``tuple``, ``min``, ``sum``, ... ``math``'s, numpy's and
  numba's scalar types and numpy's scalar functions): ``HALF = WARP // 2``, ``TABLE = tuple(i * i for i in
  range(16))``, ``NEG = float32(-math.inf)``;
- imports of ``math``, ``numpy`` and ``numba`` (and their submodules), in every spelling (of numba only its
  number types, ``types`` and ``numba.cuda``'s kernel API: never its configuration or the simulator's modules);
- docstrings, comments and blank lines.

The rule itself, its grammar and the bounded evaluation of constants (each is computed here first, step by
step, so that no constant can take the grading kernel more than a moment: ``tuple(range(10**12))`` and
``10**10**10`` are left out) are in ``course/graded_code/``: ``course check`` (``grader/check.py``) applies
the same function to a student's notebook before running its visible checks, and the notebook itself
(``course/graded_notice.py``, installed by ``course.use_device()``) says under each cell which of its lines
will not run and fails a launch of a kernel that needs one of them. So "passes ``course check``" means "is
not lost when graded".

Every other top-level line is kept as a comment, ``# [not run when graded] <the line>``, so the
line numbers of the cell stay those of the submission and the feedback shows what was left out.
What a kernel body does is checked when it is launched: the grading kernel compiles each kernel for
a GPU before the simulator runs it (``course.gpu_compile``), so a body can only do what a GPU can.
Locked cells, test cells and the setup cell are the release's (nbgrader restores them); a constant may use
what the release's cells that run when graded (``setup*``, ``*_constants``, ``*_launcher``, the test
cells) bind *before* the student's cell, as far as it is a constant.

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
function whose syntax tree, with every name, docstring and comment taken out, is that of a function
of the course is left out too, marked ``# [the course's kernel ...]``, when the cell's matching functions
are the substance of the exercise (``course_copies``: at least ``COPY_MIN_NODES`` nodes together, or a
device function of at least ``DEVICE_COPY_MIN_NODES``; a kernel too short to be told apart from an honest
answer is never called a copy). Each is reported (``course_kernel``).
"""

from __future__ import annotations

import ast
import functools
import pathlib

from course import graded_code as rule
from course.graded_code import MARK, MODULES, Cleaned, Scope  # noqa: F401  (the grader's names for them)

HOST_MARK = "# [run in a process of its own when graded] "
COPY_MARK = "# [the course's kernel: not graded] "
HOST_BASES = ("kernels.block_pool", "kernels.step_ops")   # what of the course a host answer may import: its base
HOST_COURSE_CODE = ("kernels/block_manager.py",)   # the course's host code a host answer may not paste
COPY_MIN_NODES = 150
# A long device function carries an idea of its own (an encoder, a merge of two softmax states): pasted
# verbatim from the course, one of this many nodes is the course's even where a whole kernel would be too
# short to call a copy. Shorter helpers (a rounding rule of 67 nodes, a warp maximum) are what an honest
# student may well write node for node: alone they stay the student's (no honest sample of the catalog
# matches any course function, of any size).
DEVICE_COPY_MIN_NODES = 100
PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _module_root(name: str) -> str:
    return name.split(".")[0]


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
def course_functions() -> dict[str, tuple[str, int, bool]]:
    """``{fingerprint: (label, nodes, is a device function)}`` of every ``@cuda.jit`` function of the course."""
    found = {}
    for path, node in _course_jit_functions():
        key, size = fingerprint(node)
        device = any("device" in ast.unparse(d) for d in node.decorator_list)
        found.setdefault(key, (f"{path.relative_to(PROJECT_ROOT).as_posix()}: {node.name}", size, device))
    return found


def course_copies(nodes) -> dict[int, str]:
    """``{first line: what of the course it is}`` for the ``@cuda.jit`` functions of one answer cell that are
    the course's. The substance of an exercise is its answer cell's code taken together: the functions whose
    syntax trees (names, docstrings and comments aside) are the course's count as the course's when they make
    up ``COPY_MIN_NODES`` nodes together (a kernel, or an encoder and its rounding pasted side by side), or
    when one of them is a device function of ``DEVICE_COPY_MIN_NODES`` nodes or more. Shorter matches (a
    five-line guarded kernel that anyone would write the same way) stay the student's."""
    known = course_functions()
    matches = {}
    for node in nodes:
        if isinstance(node, ast.FunctionDef):
            try:
                twin = known.get(fingerprint(node)[0])
            except RecursionError:      # nested deeper than any function of the course: not a copy
                twin = None
            if twin is not None:
                matches[rule.first_line(node)] = twin
    total = sum(size for _, size, _ in matches.values())
    if total >= COPY_MIN_NODES or any(device and size >= DEVICE_COPY_MIN_NODES for _, size, device in matches.values()):
        return {line: label for line, (label, _, _) in matches.items()}
    return {}


def course_kernel_names() -> frozenset:
    """The names of every ``@cuda.jit`` function in ``kernels/``."""
    return frozenset(node.name for _, node in _course_jit_functions())


def kernel_module_names(nodes) -> frozenset:
    """The names that statements ``nodes`` bind to the course's ``kernels`` package or one of its modules
    (``import kernels.reduction as kr``: ``kr``; ``from kernels import reduction``: ``reduction``), and
    ``kernels`` itself."""
    bound = {"kernels"}
    named = course_kernel_names()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                bound.update(a.asname or a.name.split(".")[0] for a in sub.names
                             if _module_root(a.name) == "kernels")
            elif isinstance(sub, ast.ImportFrom) and not sub.level and sub.module \
                    and _module_root(sub.module) == "kernels":
                bound.update(a.asname or a.name for a in sub.names if a.name not in named)
    return frozenset(bound)


def _attribute_root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _reaches_course_kernels(node: ast.stmt, modules: frozenset = frozenset({"kernels"})) -> bool:
    """A statement that imports a kernel of the course, or reaches one through the ``kernels``
    package (``kernels.reduction.row_stats_v3_warp_shuffle_kernel.py_func``): an attribute named like a
    course kernel counts only when read from a name bound to the package (``modules``), never from an
    object of the student's own (a helper class's ``self.kernel``)."""
    named = course_kernel_names()
    if isinstance(node, ast.ImportFrom):
        return not node.level and bool(node.module) and _module_root(node.module) == "kernels" and any(
            a.name in named for a in node.names)
    return any(isinstance(n, ast.Attribute) and n.attr in named and _attribute_root(n.value) in modules
               for n in ast.walk(node))


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
    return rule.first_line(node)


def _copy_veto(copies: dict[int, str]):
    """The veto of ``rule.clean_source`` that leaves out the cell's functions that are the course's
    (``course_copies``): ``(reason, mark)`` for those, None for the rest."""
    def veto(node: ast.stmt):
        twin = copies.get(rule.first_line(node)) if isinstance(node, ast.FunctionDef) else None
        return None if twin is None else (f"it is the course's kernel ({twin})", COPY_MARK)
    return veto


def clean_source(source: str, scope: Scope | None = None, kernel_modules: frozenset | None = None) -> Cleaned:
    """The cell as graded (``course.rule.clean_source``), the course's kernels left out and reported.

    kernel_modules: the names bound to the course's ``kernels`` package or its modules
    (``kernel_module_names``); by default those this cell binds."""
    scope = scope if scope is not None else Scope()
    given = {name for name, what in scope.modules.items() if _module_root(str(what)) == "kernels"}
    nodes = {rule.first_line(n): n for n in rule.statements(source)}
    cleaned = rule.clean_source(source, scope, veto=_copy_veto(course_copies(nodes.values())))
    if kernel_modules is None:
        kernel_modules = kernel_module_names(nodes.values())
    kernel_modules = frozenset(kernel_modules) | given
    for dropped in cleaned.dropped:
        node = nodes.get(dropped.first)
        if node is None:
            continue
        if dropped.reason.startswith("it is the course's kernel"):
            twin = dropped.reason[len("it is the course's kernel ("):-1]
            cleaned.course_kernels.append(f"line {dropped.first}: {node.name} is the course's kernel ({twin})")
        elif _reaches_course_kernels(node, kernel_modules):
            cleaned.course_kernels.append(f"line {dropped.first}: {dropped.text[:80]}")
    return cleaned


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


def _kinds(cells: list[dict]) -> list[tuple[str, str]]:
    return [(rule.cell_kind(c), rule.source_of(c)) for c in cells if c.get("cell_type") == "code"]


def release_scope(release: dict) -> Scope:
    """What the release's cells that run when graded bind, all of them, in the release's order: what a cell the
    student adds at the end of the notebook may use."""
    cells = [(kind, source) for kind, source in _kinds(release.get("cells", [])) if kind != rule.ANSWER]
    scope = Scope()
    scope.release = rule.release_names(cells)
    for kind, source in cells:
        if kind in (rule.GIVEN, rule.GRADED):
            rule.give(source, scope, kind=kind)
    return scope


def clean_notebook(submitted: dict, release: dict, *, host: bool = True,
                   explain: list | None = None) -> tuple[list[str], list[str]]:
    """Reduce, in place, every code cell the student wrote; return (a note per cell that lost lines,
    each use of the course's kernels, with its cell).

    The student's cells are the answer cells of the release and code cells the release does not have.
    They are cleaned in the submission's order, each with what the release's cells before it that run when
    graded bind (those cells as the release has them: nbgrader restores them), so a constant may use ``WARP``
    from a ``*_constants`` cell above it and ``math`` or ``np`` that only the setup cell imported.
    ``host=False`` leaves host answers (day 6's allocator) as they are (``course check``). ``explain``, a
    list, receives ``(cell index, where, graded_code.Dropped)`` for every statement left out.
    """
    released_cells = {_meta(c).get("grade_id"): c for c in release.get("cells", []) if _meta(c).get("grade_id")}
    scope = Scope()
    scope.release = rule.release_names(
        [(kind, source) for kind, source in _kinds(release.get("cells", [])) if kind != rule.ANSWER])
    notes, used = [], []
    modules = kernel_module_names(
        node for cell in submitted.get("cells", []) if cell.get("cell_type") == "code"
        for node in rule.statements(rule.source_of(cell)))
    for index, cell in enumerate(submitted.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        gid = _meta(cell).get("grade_id")
        released = released_cells.get(gid)
        kind = rule.cell_kind(released) if released is not None else rule.ANSWER
        if released is not None and released.get("cell_type") != "code":
            continue
        if kind != rule.ANSWER:
            if kind in (rule.GIVEN, rule.GRADED):
                rule.give(rule.source_of(released), scope, kind=kind)
            continue
        source = rule.source_of(cell)
        where = gid if released is not None else f"added cell {index + 1}"
        if released is not None and host_answer(released):
            if host:
                cleaned = clean_host_source(source)
                cell["source"] = cleaned.source
                used += [f"{where}, {use}" for use in cleaned.course_kernels]
            continue
        cleaned = clean_source(source, scope, modules)
        if cleaned.left_out:
            cell["source"] = cleaned.source
            notes.append(f"{where}: {len(cleaned.left_out)} line(s)")
        if explain is not None:
            explain += [(index, where, dropped) for dropped in cleaned.dropped]
        used += [f"{where}, {use}" for use in cleaned.course_kernels]
    return notes, used
