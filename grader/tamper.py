"""Compare a submission with its release, and scan the student's code for a human to review.

nbgrader's ``OverwriteCells`` silently restores locked cells a student edited, and a deleted grade
cell simply scores nothing; neither is reported. ``compare_with_release`` reports both, by
``grade_id``. ``scan_code`` reads the code the student wrote (solution cells and cells they
added) without running it and reports, as flags for an instructor (never as a status: the
top-level code it reads is not run when graded, see ``grader.cleanroom``):

- ``tamper``: assigning to (or deleting, ``setattr``-ing) an attribute of an imported module or of a
  name imported from the course, the kernels, the grader, numpy, torch, numba, IPython, sys or
  builtins (``course.checking.check = ...``, ``np.allclose = ...``), writing ``sys.modules``;
- ``review``: code a kernel exercise has no need for and a cheat does (``exec``, ``open``,
  ``subprocess``, ``ctypes``, ``sys._getframe``, ``gc.get_objects``, IPython hooks, the input
  history ``In``, the ``grader`` package, shell escapes ``!``).
"""

from __future__ import annotations

import ast
import dataclasses
import re

WATCHED_MODULES = ("course", "kernels", "grader", "inference", "numpy", "torch", "numba", "IPython", "sys", "builtins",
                   "math", "importlib", "ml_dtypes", "nbgrader", "nbclient", "ipykernel")
REVIEW_CALLS = {
    "exec": "exec()", "eval": "eval()", "compile": "compile()", "__import__": "__import__()", "open": "open()",
    "setattr": "setattr()", "delattr": "delattr()", "globals": "globals()", "breakpoint": "breakpoint()",
    "get_ipython": "the IPython shell (get_ipython)",
}
REVIEW_MODULES = {
    "subprocess": "starting processes", "socket": "the network", "urllib": "the network", "requests": "the network",
    "http": "the network", "ctypes": "ctypes", "cffi": "cffi", "sqlite3": "a database", "gc": "the garbage collector",
    "inspect": "frame inspection", "linecache": "source caches", "importlib": "importlib", "pickle": "pickle",
    "marshal": "marshal", "base64": "base64", "codecs": "codecs", "shutil": "file operations", "glob": "file search",
    "signal": "signals", "threading": "threads", "multiprocessing": "processes", "grader": "the grader package",
    "nbgrader": "nbgrader", "nbformat": "notebook files", "pathlib": "file paths", "os": "the os module",
    "builtins": "builtins", "dis": "bytecode", "types": "code objects",
}
REVIEW_ATTRIBUTES = {
    "_getframe": "frame inspection", "f_back": "frame inspection", "f_locals": "frame inspection",
    "f_globals": "frame inspection", "tb_frame": "frame inspection", "__code__": "code objects",
    "__globals__": "function globals", "get_objects": "the garbage collector", "get_referrers": "the garbage collector",
    "input_transformers_post": "IPython hooks", "input_transformers_cleanup": "IPython hooks",
    "ast_transformers": "IPython hooks", "set_custom_exc": "IPython hooks", "events": "IPython hooks",
    "excepthook": "exception hooks", "settrace": "tracing hooks", "setprofile": "tracing hooks",
    "_exit": "os._exit", "kill": "signalling processes", "system": "os.system", "popen": "os.popen",
    "modules": "sys.modules", "__dict__": "module or object dictionaries", "__builtins__": "builtins",
}
HISTORY_NAMES = {"In", "Out", "_ih", "_oh", "_i", "_ii", "_iii", "__builtins__"}


@dataclasses.dataclass
class Finding:
    """One finding of the code scan: kind ``tamper`` or ``review``, where, and what."""

    kind: str
    cell: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.cell} line {self.line}: {self.what}"


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _meta(cell) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def compare_with_release(submitted: dict, release: dict) -> dict:
    """How the submitted notebook's nbgrader cells differ from the release, by grade_id.

    Returns ``{"deleted_grade": [...], "deleted_locked": [...], "deleted_solution": [...],
    "edited_locked": [...], "metadata_changed": [...]}`` (lists of grade_ids; empty when intact).
    """
    submitted_cells: dict[str, dict] = {}
    for cell in submitted.get("cells", []):
        gid = _meta(cell).get("grade_id")
        if gid is not None and gid not in submitted_cells:
            submitted_cells[gid] = cell
    report = {"deleted_grade": [], "deleted_locked": [], "deleted_solution": [], "edited_locked": [],
              "metadata_changed": []}
    for cell in release.get("cells", []):
        meta = _meta(cell)
        gid = meta.get("grade_id")
        if gid is None:
            continue
        theirs = submitted_cells.get(gid)
        if theirs is None:
            key = "deleted_grade" if meta.get("grade") else "deleted_solution" if meta.get("solution") \
                else "deleted_locked"
            report[key].append(gid)
            continue
        if meta.get("locked") and (_source(theirs).strip() != _source(cell).strip()
                                   or theirs.get("cell_type") != cell.get("cell_type")):
            report["edited_locked"].append(gid)
        their_meta = _meta(theirs)
        if any(bool(their_meta.get(k)) != bool(meta.get(k)) for k in ("grade", "solution", "locked")) \
                or their_meta.get("points") != meta.get("points"):
            report["metadata_changed"].append(gid)
    return report


def student_code_cells(submitted: dict, release: dict) -> list[tuple[str, str]]:
    """(label, source) of the code the student wrote: solution cells and cells not in the release."""
    release_meta = {_meta(c).get("grade_id"): _meta(c) for c in release.get("cells", []) if _meta(c).get("grade_id")}
    cells = []
    for index, cell in enumerate(submitted.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        gid = _meta(cell).get("grade_id")
        released = release_meta.get(gid)
        if released is None:
            cells.append((gid or f"added cell {index}", _source(cell)))
        elif released.get("solution") and not released.get("locked"):
            cells.append((gid, _source(cell)))
    return cells


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _watched(module: str) -> bool:
    return module.split(".")[0] in WATCHED_MODULES


def imported_names(sources: list[str]) -> set[str]:
    """Names bound by imports of watched modules in these sources (``np``, ``cuda``, ``check``)."""
    names: set[str] = set()
    for source in sources:
        tree = _parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _watched(alias.name):
                        names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and _watched(node.module) and not node.level:
                names.update(alias.asname or alias.name for alias in node.names)
    return names


_MAGIC = re.compile(r"^\s*[%!]")


def _parse(source: str):
    cleaned = "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())
    try:
        return ast.parse(cleaned)
    except SyntaxError:
        return None


def scan_code(cells: list[tuple[str, str]], *, context_sources: list[str] = ()) -> list[Finding]:
    """Scan (label, source) code cells; ``context_sources`` add imports (e.g. the locked first cell)."""
    watched = imported_names([src for _, src in cells] + list(context_sources)) | set(WATCHED_MODULES)
    findings: list[Finding] = []
    for label, source in cells:
        for number, line in enumerate(source.splitlines(), 1):
            if line.lstrip().startswith("!"):
                findings.append(Finding("review", label, number, "a shell command (!)"))
        tree = _parse(source)
        if tree is None:
            continue
        findings.extend(_scan_tree(tree, label, watched))
    return findings


def _scan_tree(tree, label: str, watched: set[str]) -> list[Finding]:
    found = []

    def add(kind, node, what):
        found.append(Finding(kind, label, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _root_name(t) in watched:
                    add("tamper", node, f"changes {ast.unparse(t)}")
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name in ("setattr", "delattr") and node.args and _root_name(node.args[0]) in watched:
                add("tamper", node, f"{name}() on {ast.unparse(node.args[0])}")
            elif name in REVIEW_CALLS:
                add("review", node, REVIEW_CALLS[name])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                top = module.split(".")[0]
                if top in REVIEW_MODULES:
                    add("review", node, f"imports {module} ({REVIEW_MODULES[top]})")
        elif isinstance(node, ast.Attribute) and node.attr in REVIEW_ATTRIBUTES:
            add("review", node, f"{ast.unparse(node)} ({REVIEW_ATTRIBUTES[node.attr]})")
        elif isinstance(node, ast.Name) and node.id in HISTORY_NAMES:
            add("review", node, f"{node.id} (the kernel's input history or builtins)")
    # One finding per (kind, what) and line is enough.
    unique = {(f.kind, f.line, f.what): f for f in found}
    return sorted(unique.values(), key=lambda f: (f.line, f.kind, f.what))
