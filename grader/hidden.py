"""Tamper-resistant tools for hidden tests: private, freshly loaded copies of project modules.

A student's cells run in the same Python process as the hidden tests that grade them, so a
student can replace ``course.checking.check`` by ``lambda *a, **k: None`` or make
``kernels.reference.attention`` return their own output. Hidden tests therefore never use the
module objects the student could reach by import; they ask for a pristine copy::

    from grader.hidden import pristine
    chk = pristine("course.checking")       # chk.check, chk.poison, chk.random_inputs
    ref = pristine("kernels.reference")
    traffic = pristine("course.traffic")

``pristine(name)`` executes the module's source file again, under a private module name, every
time it is called, and returns that new module object. The file is located from this package's
own location (the project root), not through ``sys.modules`` or ``importlib.util.find_spec``,
so replacing ``sys.modules["course.checking"]`` does not redirect it either.

What it protects against, and what it does not (the grader adds two more layers: a guard in the
grading kernel that refuses reading grader files, and a scan of the submitted code that flags
monkeypatching for review; see grader/README.md):

- protected: reassigning attributes of the imported module objects (``course.checking.check``,
  ``kernels.reference.softmax``, ``course.traffic.count_traffic``), replacing entries of
  ``sys.modules`` for the project's modules, editing the module objects' ``__dict__``;
- not protected: the copy's own imports resolve through ``sys.modules`` as usual, so a student who
  patches a *third-party* module (``numpy.linalg.norm``, ``numpy.allclose``) or a project module
  the copy imports by name still reaches the copy through it; a student who replaces
  ``grader.hidden.pristine`` itself before the hidden tests run; and code that finds the copy
  afterwards (``gc.get_objects()``) and edits it. In-process grading cannot stop a determined
  student with arbitrary code execution; those attempts are what the code scan flags.

A copy loaded here is a new module: its classes are not the classes of the normal import
(``pristine("course.checking").CheckFailure`` is a different class from
``course.checking.CheckFailure``; both subclass ``AssertionError``).
"""

from __future__ import annotations

import importlib.util
import itertools
import pathlib
import secrets
import sys
import types

# The project's packages whose modules can be loaded pristine; nothing else is looked up.
PROJECT_PACKAGES = ("course", "kernels", "grader", "inference")
PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent

_counter = itertools.count()
# A random token per process, so a student cannot pre-register the private names in sys.modules.
_token = secrets.token_hex(4)


def module_file(module_name: str) -> pathlib.Path:
    """Return the source file of a project module: ``course/checking.py`` or ``course/models/__init__.py``.

    Raises ValueError for a name outside the project's packages, FileNotFoundError when no such file.
    """
    if not isinstance(module_name, str):
        raise TypeError(f"module_name must be a str such as 'course.checking', got {type(module_name).__name__}")
    parts = module_name.split(".")
    if parts[0] not in PROJECT_PACKAGES or not all(p.isidentifier() for p in parts):
        raise ValueError(f"module_name must name a module of the packages {PROJECT_PACKAGES}, "
                         f"e.g. 'course.checking'; got {module_name!r}")
    base = PROJECT_ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no module {module_name!r}: neither {base.with_suffix('.py')} nor "
                            f"{base / '__init__.py'} exists")


def pristine(module_name: str) -> types.ModuleType:
    """Load a fresh, private copy of a project module from its source file and return it.

    module_name: dotted name inside the project, e.g. ``"course.checking"``,
    ``"kernels.reference"``, ``"course.traffic"``. Each call executes the file again, so the copy
    never carries state or patches from earlier cells. The copy's ``__name__`` is private
    (``course._pristine_<token>_<n>_checking``); relative imports inside a package copy load
    private copies of its submodules too.
    """
    path = module_file(module_name)
    parent, _, leaf = module_name.rpartition(".")
    # A private name inside the same parent package, so relative imports (``from .device import
    # x``) resolve to the real sibling modules, as the module expects.
    private = f"_pristine_{_token}_{next(_counter)}_{leaf}"
    if parent:
        private = f"{parent}.{private}"
    is_package = path.name == "__init__.py"
    spec = importlib.util.spec_from_file_location(
        private, path, submodule_search_locations=[str(path.parent)] if is_package else None)
    module = importlib.util.module_from_spec(spec)
    # Registered while it executes: dataclasses and typing look their module up by name.
    sys.modules[private] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(private, None)
        raise
    return module


class _ReadOnlyModule(types.ModuleType):
    """This module refuses attribute assignment: ``grader.hidden.pristine = fake`` raises.

    A speed bump, not a wall (``grader.hidden.__dict__`` can still be edited); the code scan
    flags any submission that touches ``grader``.
    """

    def __setattr__(self, name, value):
        raise AttributeError(f"grader.hidden is read-only during grading (tried to set {name!r})")

    def __delattr__(self, name):
        raise AttributeError(f"grader.hidden is read-only during grading (tried to delete {name!r})")


sys.modules[__name__].__class__ = _ReadOnlyModule
