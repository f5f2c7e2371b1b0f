"""The layers of the project, kept by reading every module's imports (parsed, never imported).

Four packages, each standing on the ones before it:

- ``kernels``: the kernels, their launchers and the NumPy references. It stands alone: a kernel
  module never imports ``inference``, ``course`` or ``grader``, so a kernel can be read, run and copied
  without the course's tools around it.
- ``inference``: the model of days 9 and 10 (its file, tokenizer, NumPy forward pass and the engine on the
  kernels). It may use ``kernels`` only: a model that runs outside the lab.
- ``course``: what a student and a lesson use (the simulator, checks, plots, recordings). It may use
  ``kernels`` and ``inference`` but not ``grader``: the course works without the grader. The one exception is the
  command-line front door ``course/cli.py``, whose ``course check``, ``course release`` and
  ``course grade`` hand over to the grader.
- ``grader``: grading, which may use both.

And no module imports another module's private names (rule (c), :func:`test_no_private_names_of_other_modules`).

The modules read are every ``.py`` file under ``kernels/``, ``inference/``, ``course/`` and ``grader/`` except those
that are data rather than code (:data:`DATA`: the grader's sample submissions). Every import counts,
at module level or inside a function: ``import x``, ``from x import y``, relative imports (resolved
to absolute names), and ``importlib.import_module("x")`` or ``__import__("x")`` with a literal name.
A module loaded by its file counts as an import of it too (:func:`file_loads_of`): a path to a ``.py``
file of the project written in the code, as one string (``"grader/guard.py"``) or as a path expression
whose literal parts name the package and the file (``ROOT / "grader" / "guard.py"``,
``os.path.join(ROOT, "grader", "guard.py")``, ``ROOT.joinpath("grader", "guard.py")``). Docstrings
and other bare strings are prose, not paths; a path built from names alone is not seen.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "inference", "course", "grader")
# Folders under the packages that hold data written as Python, not the project's code.
DATA = {
    "grader/samples": "sample student submissions: the grader reads them as data and grades them",
}
# The only module of ``course`` that may import ``grader``: ``course check``, ``release`` and ``grade``.
COURSE_FRONT_DOOR = "course/cli.py"


@dataclasses.dataclass(frozen=True)
class Import:
    """One import in one file: ``module`` as an absolute name; ``name`` the name taken from it
    (``from module import name``, or ``module.name`` as an attribute), None for the module itself."""

    path: str           # the importing file, relative to the repository, e.g. "course/gates.py"
    line: int
    module: str
    name: str | None
    text: str           # the statement as written
    by_path: bool = False   # the module's file is loaded by its path (see file_loads_of), not imported

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def module_of(path: str) -> str:
    """``course/record/day06.py`` -> ``course.record.day06``; ``course/__init__.py`` -> ``course``."""
    parts = pathlib.PurePosixPath(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: str) -> str:
    """The package a file belongs to (for relative imports): its folder as a dotted name."""
    return ".".join(pathlib.PurePosixPath(path).parent.parts)


def is_private(name: str) -> bool:
    """A name that starts with an underscore and is not a dunder (``__all__``, ``__version__``)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__") and len(name) > 4)


def private_owner(module: str) -> str | None:
    """Where a private module may be used from: the package above its first private part
    (``kernels.reference._checks`` -> ``kernels.reference``); None for a public module."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if is_private(part):
            return ".".join(parts[:index])
    return None


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _dotted(node) -> str | None:
    """``a.b.c`` for an expression made of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


# A literal naming a .py file of a package of the project: "grader/guard.py", "../course/x/y.py".
_FILE_LITERAL = re.compile(r"(?<![\w.])(" + "|".join(PACKAGES) + r")[/\\]((?:\w+[/\\])*\w+)\.py\b")


def _path_parts(node) -> list | None:
    """The parts of a path expression, left to right: ``a / b / c``, ``os.path.join(a, b)``,
    ``p.joinpath(a, b)``; None for any other expression."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left = _path_parts(node.left)
        return (left if left is not None else [node.left]) + [node.right]
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) \
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in ("join", "joinpath"):
        base = [node.func.value] if isinstance(node.func, ast.Attribute) and node.func.attr == "joinpath" else []
        return base + list(node.args)
    return None


def file_loads_of(path: str, source: str) -> list[Import]:
    """Every project module a file names by its path in its code (a docstring or bare string aside), as an
    ``Import`` with ``by_path``: a literal ``"grader/guard.py"``, or a path expression whose literal
    parts are a package of the project, then folders, then a ``.py`` file (``ROOT / "grader" / "guard.py"``)."""
    tree = ast.parse(source, filename=path)
    lines = source.splitlines()
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    found: dict[tuple[int, str], Import] = {}

    def add(node, module: str) -> None:
        text = " ".join(line.strip() for line in lines[node.lineno - 1:node.end_lineno])
        found.setdefault((node.lineno, module), Import(path, node.lineno, module, None, text, by_path=True))

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            for match in _FILE_LITERAL.finditer(node.value):
                add(node, ".".join([match.group(1), *re.split(r"[/\\]", match.group(2))]))
        parts = _path_parts(node)
        if not parts:
            continue
        literals = [p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else None for p in parts]
        for start, head in enumerate(literals):
            if head not in PACKAGES:
                continue
            tail = []
            for part in literals[start + 1:]:
                if part is None or not all(piece.isidentifier() for piece in part.removesuffix(".py").split("/")):
                    break
                tail += part.removesuffix(".py").split("/")
                if part.endswith(".py"):
                    add(node, ".".join([head, *tail]))
                    break
    return list(found.values())


def imports_of(path: str, source: str, modules: set[str]) -> list[Import]:
    """Every import of one file. ``modules``: the project's modules (to tell a submodule taken with
    ``from package import sub`` from a name, and which names an import binds to a project module)."""
    tree = ast.parse(source, filename=path)
    lines = source.splitlines()
    package = package_of(path)
    found: list[Import] = []
    bound: dict[str, str] = {}          # a local name bound to a project module -> that module

    def text(node) -> str:
        return " ".join(line.strip() for line in lines[node.lineno - 1:node.end_lineno])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(path, node.lineno, alias.name, None, text(node)))
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    bound[root] = root
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            for alias in node.names:
                if alias.name == "*":
                    found.append(Import(path, node.lineno, module, None, text(node)))
                elif f"{module}.{alias.name}" in modules:        # a submodule: that module is imported
                    found.append(Import(path, node.lineno, f"{module}.{alias.name}", None, text(node)))
                    bound[alias.asname or alias.name] = f"{module}.{alias.name}"
                else:
                    found.append(Import(path, node.lineno, module, alias.name, text(node)))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            called = _dotted(node.func)
            if called in ("importlib.import_module", "import_module", "__import__"):
                found.append(Import(path, node.lineno, node.args[0].value, None, text(node)))
    # ``module._name`` where ``module`` was bound by an import of a project module
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            dotted = _dotted(node.value)
            if dotted is None or dotted.split(".")[0] not in bound:
                continue
            head, _, rest = dotted.partition(".")
            module = bound[head] + (f".{rest}" if rest else "")
            if module in modules:
                found.append(Import(path, node.lineno, module, node.attr, text(node)))
    found += file_loads_of(path, source)
    return sorted(found, key=lambda i: (i.line, i.module, i.name or ""))


def layer_of(module: str) -> str | None:
    root = module.split(".")[0]
    return root if root in PACKAGES else None


# ---------------------------------------------------------------------------------------------
# The rules: each returns its violations as messages naming the file, the line and the import
# ---------------------------------------------------------------------------------------------

def kernels_violations(found: list[Import]) -> list[str]:
    """Rule (a): ``kernels`` imports nothing from ``course`` or ``grader``."""
    out = []
    for imp in found:
        if layer_of(module_of(imp.path)) == "kernels" and layer_of(imp.module) in ("course", "grader"):
            out.append(f"{imp.where()}\n    kernels/ imports {imp.module} from {layer_of(imp.module)}/: kernels "
                       f"stand alone (rule a). What a kernel module needs belongs in kernels/ (a helper of "
                       f"kernels, e.g. kernels/intrinsics/ or kernels/launching.py); {layer_of(imp.module)}/ "
                       f"may import it from there, not the other way round.")
    return out


def inference_violations(found: list[Import]) -> list[str]:
    """Rule (a'): ``inference`` imports nothing from ``course`` or ``grader``, and ``kernels`` nothing from it."""
    out = []
    for imp in found:
        layer = layer_of(module_of(imp.path))
        if layer == "inference" and layer_of(imp.module) in ("course", "grader"):
            out.append(f"{imp.where()}\n    inference/ imports {imp.module} from {layer_of(imp.module)}/: the model "
                       f"runs on kernels/ alone (rule a'); the course decides what the model needs decided (the "
                       f"device) and passes it in.")
        if layer == "kernels" and layer_of(imp.module) == "inference":
            out.append(f"{imp.where()}\n    kernels/ imports {imp.module} from inference/: kernels stand alone "
                       f"(rule a'); what both need belongs in kernels/.")
    return out


def course_violations(found: list[Import]) -> list[str]:
    """Rule (b): ``course`` imports nothing from ``grader``, except its command-line front door; loading a
    file of ``grader/`` by its path is importing it."""
    out = []
    for imp in found:
        if layer_of(module_of(imp.path)) == "course" and layer_of(imp.module) == "grader" \
                and imp.path != COURSE_FRONT_DOOR:
            how = (f"loads {imp.module.replace('.', '/')}.py by its path, which imports {imp.module} in effect"
                   if imp.by_path else f"imports {imp.module}")
            out.append(f"{imp.where()}\n    course/ {how} from grader/: the course works without "
                       f"the grader (rule b; only {COURSE_FRONT_DOOR} hands commands over to it). What only "
                       f"grading needs belongs in grader/, which may import course/; what both need belongs "
                       f"in course/.")
    return out


def private_violations(found: list[Import]) -> list[str]:
    """Rule (c): no module uses a private name of another project module (see the test's docstring)."""
    out = []
    for imp in found:
        if layer_of(imp.module) is None:
            continue                    # another project's private names are not this rule's business
        importer = module_of(imp.path)
        importer_package = package_of(imp.path)
        if imp.module == importer:
            continue
        owner = private_owner(imp.module)
        if owner is not None:
            if not within(importer_package, owner):
                out.append(f"{imp.where()}\n    {importer} imports the private module {imp.module} (rule c): it is "
                           f"private to {owner}. Give what it needs a public name in a public module of "
                           f"{owner}, or move the user into {owner}.")
            continue                    # a private module's names are its package's to use
        if imp.name is not None and is_private(imp.name):
            out.append(f"{imp.where()}\n    {importer} uses {imp.module}.{imp.name}, a private name of another "
                       f"module (rule c). Give it a public name in {imp.module} (and a docstring: it is now "
                       f"an interface), or move it to a private module of the package both share "
                       f"(like kernels/reference/_checks.py).")
    return out


# ---------------------------------------------------------------------------------------------
# The project
# ---------------------------------------------------------------------------------------------

def project_sources(root: pathlib.Path = ROOT) -> dict[str, str]:
    """``{relative path: source}`` of every module of the three packages, less :data:`DATA`."""
    sources = {}
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            relative = file.relative_to(root).as_posix()
            if any(pathlib.PurePosixPath(relative).is_relative_to(folder) for folder in DATA):
                continue
            sources[relative] = file.read_text(encoding="utf-8")
    return sources


def all_imports(sources: dict[str, str]) -> list[Import]:
    modules = {module_of(path) for path in sources}
    return [imp for path, source in sources.items() for imp in imports_of(path, source, modules)]


@pytest.fixture(scope="module")
def project_imports() -> list[Import]:
    return all_imports(project_sources())


def _report(violations: list[str]) -> str:
    return f"{len(violations)} import(s) break the project's layers:\n" + "\n".join(violations)


def test_the_scan_reads_the_project(project_imports):
    """Every package is read, the data folders are not, and imports of all kinds are found."""
    paths = {imp.path for imp in project_imports}
    for package in PACKAGES:
        assert any(path.startswith(package + "/") for path in paths), f"no module of {package}/ was read"
    assert not any(path.startswith(folder + "/") for path in paths for folder in DATA)
    assert (ROOT / "grader/samples").is_dir(), "grader/samples moved: update DATA in this test"
    assert any(imp.path == COURSE_FRONT_DOOR and imp.module.startswith("grader.") for imp in project_imports), \
        f"{COURSE_FRONT_DOOR} no longer hands over to the grader: update COURSE_FRONT_DOOR in this test"


def test_kernels_import_nothing_of_course_or_grader(project_imports):
    """Rule (a): ``kernels/`` imports nothing from ``course/`` or ``grader/``."""
    violations = kernels_violations(project_imports)
    assert not violations, _report(violations)


def test_inference_imports_nothing_of_course_or_grader(project_imports):
    """Rule (a'): ``inference/`` imports nothing from ``course/`` or ``grader/``, ``kernels/`` nothing from it."""
    violations = inference_violations(project_imports)
    assert not violations, _report(violations)
    synthetic = all_imports({"inference/__init__.py": "", "inference/chat.py": "import course\nimport kernels\n",
                             "kernels/__init__.py": "", "kernels/gemm.py": "from inference import gguf\n",
                             "course/__init__.py": ""})
    assert [v.split("\n")[0] for v in inference_violations(synthetic)] == [
        "inference/chat.py:1: import course", "kernels/gemm.py:1: from inference import gguf"]


def test_course_imports_nothing_of_grader(project_imports):
    """Rule (b): ``course/`` imports nothing from ``grader/``, except ``course/cli.py``."""
    violations = course_violations(project_imports)
    assert not violations, _report(violations)


def test_no_private_names_of_other_modules(project_imports):
    """Rule (c): no module of the project uses another module's private names.

    A private name starts with an underscore and is not a dunder (``__version__`` is public). A
    module may not take one from another project module, neither by ``from m import _x`` nor as
    ``m._x`` on a module it imported: what another module needs is an interface, and gets a public
    name. A module whose own name is private (``kernels/reference/_checks.py``) is private to its
    package: the modules of that package (and of the packages below it) may import it and all of its
    names; no module outside may. Private names of third-party libraries (numba's
    ``_compile_pyfunc_with_fixup`` in ``course/gpu_compile.py``, pinned in ``pyproject.toml``) are
    outside this rule, which is about the project's own modules.
    """
    violations = private_violations(project_imports)
    assert not violations, _report(violations)


# ---------------------------------------------------------------------------------------------
# The checker fails where it should: synthetic sources that break each rule
# ---------------------------------------------------------------------------------------------

SYNTHETIC = {
    "kernels/__init__.py": "",
    "kernels/gemm.py": (
        "import numpy as np\n"
        "from course.simulator import mma\n"                       # (a)
        "def launch():\n"
        "    import grader.guard\n"                                # (a), inside a function
        "    from ..course import plots\n"                         # (a), relative, resolved
        "    return importlib.import_module('course.traffic')\n"   # (a), by name
    ),
    "kernels/launching.py": "from kernels.gemm import _tile, __all__\nfrom .reference import _checks\n",
    "kernels/reference/__init__.py": "from ._checks import _close\nfrom kernels.reference._checks import helper\n",
    "kernels/reference/_checks.py": "def _close(): pass\ndef helper(): pass\n",
    "kernels/reference/softmax.py": "from ._checks import _close\nfrom . import _checks\n_checks._close()\n",
    "course/__init__.py": "",
    "course/cli.py": "def main():\n    from grader.check import main_check\n",     # the front door: allowed
    "course/simulator.py": "_GATES = []\n",
    "course/plots.py": "",
    "course/traffic.py": "",
    "course/gates.py": (
        "from course import simulator\n"
        "import course.simulator as sim\n"
        "import course.traffic\n"
        "from numba.cuda.compiler import _compile_pyfunc_with_fixup\n"    # third party: allowed
        "def f():\n"
        "    from . import guard_twin\n"
        "    from grader import guard\n"                                  # (b)
        "    return simulator._GATES, sim._GATES, course.simulator._GATES\n"   # (c) three times
    ),
    "course/guard_twin.py": "",
    "course/hostcode.py": (
        '"""Runs grader/guard.py? A docstring is prose, never a path."""\n'
        "import os, pathlib\n"
        "ROOT = pathlib.Path(__file__).parent.parent\n"
        "GUARD = ROOT / 'grader' / 'guard.py'\n"                                  # (b), a path expression
        "def load():\n"
        "    return spec_from_file_location('g', os.path.join(ROOT, 'grader', 'guard.py'))\n"   # (b), joined
        "HELPER = ROOT.joinpath('grader', 'compile_server.py')\n"                # (b), joinpath
        "SCRIPT = f'{ROOT}/grader/host_answers.py'\n"                             # (b), one literal
        "NOTE = 'see grader/README.md'\n"                                         # not a module: allowed
        "BASE = ROOT / 'kernels' / 'block_pool.py'\n"                             # course may load kernels
    ),
    "course/record/__init__.py": "",
    "course/record/day06.py": "def _contiguous(): pass\n",
    "course/record/day07.py": "from .day06 import _contiguous\n",                # (c), relative
    "grader/__init__.py": "",
    "grader/guard.py": "",
    "grader/check.py": "from course.simulator import _GATES\nimport kernels.gemm\n",   # (c); grader may use course
}


def test_the_checker_finds_what_breaks_each_rule():
    found = all_imports(SYNTHETIC)

    kernels = kernels_violations(found)
    assert [v.split("\n")[0] for v in kernels] == [
        "kernels/gemm.py:2: from course.simulator import mma",
        "kernels/gemm.py:4: import grader.guard",
        "kernels/gemm.py:5: from ..course import plots",
        "kernels/gemm.py:6: return importlib.import_module('course.traffic')",
    ]
    assert "rule a" in kernels[0] and "kernels/intrinsics/" in kernels[0]

    course = course_violations(found)
    assert [v.split("\n")[0] for v in course] == [
        "course/gates.py:7: from grader import guard",
        "course/hostcode.py:4: GUARD = ROOT / 'grader' / 'guard.py'",
        "course/hostcode.py:6: return spec_from_file_location('g', os.path.join(ROOT, 'grader', 'guard.py'))",
        "course/hostcode.py:7: HELPER = ROOT.joinpath('grader', 'compile_server.py')",
        "course/hostcode.py:8: SCRIPT = f'{ROOT}/grader/host_answers.py'",
    ]
    assert "rule b" in course[0] and "belongs in grader/" in course[0]
    assert "loads grader/guard.py by its path, which imports grader.guard in effect" in course[1]
    assert [imp.module for imp in found if imp.path == "course/hostcode.py" and imp.by_path] == [
        "grader.guard", "grader.guard", "grader.compile_server", "grader.host_answers", "kernels.block_pool"]

    private = private_violations(found)
    assert [v.split("\n")[0] for v in private] == [
        "kernels/launching.py:1: from kernels.gemm import _tile, __all__",
        "kernels/launching.py:2: from .reference import _checks",
        "course/gates.py:8: return simulator._GATES, sim._GATES, course.simulator._GATES",
        "course/gates.py:8: return simulator._GATES, sim._GATES, course.simulator._GATES",
        "course/gates.py:8: return simulator._GATES, sim._GATES, course.simulator._GATES",
        "course/record/day07.py:1: from .day06 import _contiguous",
        "grader/check.py:1: from course.simulator import _GATES",
    ]
    assert "kernels.gemm._tile" in private[0] and "rule c" in private[0]
    assert "private module kernels.reference._checks" in private[1] and "private to kernels.reference" in private[1]
    assert "course.record.day06._contiguous" in private[5]


def test_each_rule_fails_the_test_that_keeps_it():
    """The tests above, run on the synthetic project, fail and name what broke them."""
    found = all_imports(SYNTHETIC)
    for test, rule in ((test_kernels_import_nothing_of_course_or_grader, "from course.simulator import mma"),
                       (test_course_imports_nothing_of_grader, "from grader import guard"),
                       (test_course_imports_nothing_of_grader, "GUARD = ROOT / 'grader' / 'guard.py'"),
                       (test_no_private_names_of_other_modules, "from .day06 import _contiguous")):
        with pytest.raises(AssertionError, match=rule.replace(".", r"\.").replace("(", r"\(")):
            test(found)


def test_a_clean_project_passes():
    clean = {path: source for path, source in SYNTHETIC.items()
             if path not in ("kernels/gemm.py", "kernels/launching.py", "course/gates.py", "course/hostcode.py",
                             "course/record/day07.py", "grader/check.py")}
    found = all_imports(clean)
    assert found and not kernels_violations(found) and not course_violations(found) and not private_violations(found)
