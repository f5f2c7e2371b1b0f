"""In a student's own notebook: which of their lines will not run when graded, and a kernel that needs one stopped.

When graded, only a student's kernels, constants and imports of math, numpy and numba run
(``course/graded_code/`` is the rule, ``grader/cleanroom.py`` applies it). A notebook run as written does
not show that: a helper function or a ``print`` at the top of an answer cell runs, and a kernel that needs a
name bound by such a line works here and fails to compile when graded. So ``course.use_device()`` (every
exercise's first cell) calls :func:`install` in a Jupyter kernel, and then:

- after every cell, the cell is recognised by its source among the course's released exercises
  (``exercises/*/*.ipynb``): one of a release's locked cells (the set-up cell, given constants, launchers,
  examples, tests; a test cell also by its first line, its docstring) or a cell the student wrote. The first
  locked cell that runs when graded (the set-up cell) says which exercise this is: from then on the cells
  are followed as grading follows them (``grader.cleanroom.clean_notebook``): the release's cells bind their names,
  each cell the student wrote is cleaned by the rule (but a host answer, day 6's allocator, recognised by the
  names its stub defines: it runs as written, in a process of its own), and under a cell with lines left
  out that bind a name a note names each line and says why (:func:`note`);
- on the simulator, a launch gate refuses to launch a kernel written in the notebook that uses, itself or
  through its device functions, a name that only such a line binds, or only an example cell (examples do
  not run when graded either): :class:`NotRunWhenGraded` names the line and the reason. The kernel would not
  compile when graded, so the visible check, Validate and ``course check`` fail now rather than the grade
  later.

Nothing is followed when grading (``NBGRADER_EXECUTION=autograde``: the grader cleaned the cells already),
nor in a notebook that is not an exercise (a lesson's cells match no release). ``course check`` runs the
cleaned cells, whose left-out lines are comments: the notes and the gate then have nothing to say.
"""

from __future__ import annotations

import dis
import json
import os
import types

from course import graded_code as rule


class NotRunWhenGraded(AssertionError):
    """A kernel needs a name that a line not run when graded binds."""


def _normal(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


class Release:
    """The cells of one released exercise, as the follower recognises them."""

    def __init__(self, name: str, nb: dict):
        self.name = name
        self.kinds: dict[str, tuple[str, str]] = {}      # normalised source -> (kind, grade_id)
        self.first_lines: dict[str, str] = {}            # a test cell's first line -> grade_id
        self.host_names: set[str] = set()                # what a host answer (day 6's allocator) defines
        cells = []
        for cell in nb.get("cells", []):
            if cell.get("cell_type") != "code":
                continue
            kind, source = rule.cell_kind(cell), rule.source_of(cell)
            if kind == rule.ANSWER:
                if cell.get("metadata", {}).get("course", {}).get("host_answer") is True:
                    self.host_names.update(n for node in rule.statements(source) for n in rule.bound_names(node))
                continue
            cells.append((kind, source))
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
            self.kinds.setdefault(_normal(source), (kind, gid))
            if kind == rule.GRADED and _normal(source):
                self.first_lines[_normal(source).splitlines()[0]] = gid
        self.names = rule.release_names(cells)

    def kind_of(self, source: str) -> tuple[str, str] | None:
        key = _normal(source)
        if key in self.kinds:
            return self.kinds[key]
        if key and key.splitlines()[0] in self.first_lines:
            return rule.GRADED, self.first_lines[key.splitlines()[0]]
        return None


def releases(folder=None) -> list[Release]:
    """Every released exercise whose answers are kernels (``exercises/<day>/<day>.ipynb``)."""
    folder = rule.PROJECT_ROOT / "exercises" if folder is None else folder
    found = []
    for path in sorted(folder.glob("*/*.ipynb")):
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if nb.get("metadata", {}).get("course", {}).get("graded_code", "kernels") == "kernels":
            found.append(Release(path.stem, nb))
    return found


class Follower:
    """One exercise's cells followed as grading follows them: what is bound when graded, what is not and why."""

    def __init__(self, release: Release):
        self.release = release
        self.scope = rule.Scope()
        self.scope.release = release.names
        self.missing: dict[str, str] = {}     # name -> why it does not exist when graded

    def cell(self, source: str) -> list[rule.Dropped]:
        """Follow one cell that ran; return the lines of a student's cell left out that bind a name."""
        known = self.release.kind_of(source)
        if known is not None:
            kind, gid = known
            if kind == rule.EXAMPLE:
                for node in rule.statements(source):
                    for name in rule.bound_names(node):
                        if name not in self.scope.bound():
                            self.missing[name] = (f"only the example cell {gid} binds it, and examples do not "
                                                  f"run when graded")
                return []
            rule.give(source, self.scope, kind=kind)
            for node in rule.statements(source):
                for name in rule.bound_names(node):
                    self.missing.pop(name, None)
            return []
        # A cell run again must not pay twice: here each cell has the notebook's budgets to itself (grading
        # and course check count the notebook's cells once, in order).
        self.scope.spent = self.scope.effort = 0
        defined = {n for node in rule.statements(source) for n in rule.bound_names(node)}
        if defined & self.release.host_names:
            return []        # a host answer: it runs in a process of its own when graded, as written
        cleaned = rule.clean_source(source, self.scope)
        left_out = {d.first for d in cleaned.dropped}
        for node in rule.statements(source):
            if rule.first_line(node) not in left_out:
                for name in rule.bound_names(node):
                    self.missing.pop(name, None)
        binding = [d for d in cleaned.dropped if d.binds]
        for dropped in binding:
            for name in dropped.binds:
                if name not in self.scope.bound():
                    self.missing[name] = f"it is bound by {dropped.text!r}, which does not run ({dropped.reason})"
        return binding


class Watch:
    """What :func:`install` registers: follows the cells of the exercise this notebook turns out to be."""

    def __init__(self, known: list[Release] | None = None):
        self._known = known
        self.followers: list[Follower] | None = None

    def known(self) -> list[Release]:
        if self._known is None:
            self._known = releases()
        return self._known

    def after(self, source: str) -> list[rule.Dropped]:
        """Follow a cell that ran; the lines left out that bind a name (for :func:`note`)."""
        if not source or not source.strip():
            return []
        if self.followers is None:
            matches = [r for r in self.known() if (r.kind_of(source) or ("",))[0] == rule.GIVEN]
            if not matches:
                return []
            self.followers = [Follower(r) for r in matches]
        matching = [f for f in self.followers if f.release.kind_of(source) is not None]
        if matching and len(matching) < len(self.followers):
            self.followers = matching
        found = [f.cell(source) for f in self.followers]
        return found[0]

    def problems(self, kernel) -> list[str]:
        """Why ``kernel`` (or a device function it calls) needs a name that will not exist when graded."""
        if not self.followers:
            return []
        follower = self.followers[0]
        out = []
        for name in used_names(kernel):
            if name in follower.missing and name not in follower.scope.bound():
                out.append(f"{name}: {follower.missing[name]}")
        return out


def _global_names(code: types.CodeType) -> set[str]:
    """The global names a function's code reads (not its attributes: ``cuda.blockIdx.x`` reads no ``x``)."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _in_a_notebook(function) -> bool:
    name = getattr(getattr(function, "__code__", None), "co_filename", "")
    return "ipykernel_" in name or name.startswith("<ipython-input")


def used_names(kernel) -> list[str]:
    """The kernel's name and the global names it and the notebook's device functions it calls use."""
    function = getattr(kernel, "py_func", None)
    if not isinstance(function, types.FunctionType):
        return []
    seen, order, stack = set(), [function.__name__], [function]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in sorted(_global_names(current.__code__)):
            if name not in current.__globals__:
                continue
            if name not in order:
                order.append(name)
            inner = getattr(current.__globals__[name], "py_func", None)
            if isinstance(inner, types.FunctionType) and _in_a_notebook(inner):
                stack.append(inner)
    return order


def note(dropped: list[rule.Dropped]) -> str:
    """The note printed under a cell whose lines binding a name will not run when graded."""
    lines = ["Not run when graded (only kernels, constants and imports of math, numpy and numba run):"]
    lines += [f"  {d.describe()}" for d in dropped]
    return "\n".join(lines)


_WATCH: list[Watch] = []


def _after_cell(result) -> None:
    try:
        info = getattr(result, "info", None)
        dropped = _WATCH[0].after(getattr(info, "raw_cell", "") or "")
    except Exception:  # noqa: BLE001 - a note must never break a student's cell
        return
    if dropped:
        print(note(dropped))


def _gate(kernel, args):
    function = getattr(kernel, "py_func", None)
    if not _WATCH or not _in_a_notebook(function):
        return None
    problems = _WATCH[0].problems(kernel)
    if problems:
        raise NotRunWhenGraded(
            f"{function.__name__} needs names that will not exist when graded:\n"
            + "\n".join(f"  {p}" for p in problems) + f"\n{rule.RULE}")
    return None


def install(*, simulator: bool = False) -> bool:
    """Follow this notebook's cells (an IPython kernel only; never when grading); with ``simulator``, also
    gate every launch of a notebook kernel. Returns whether it is installed. Calling it again is harmless."""
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "events"):
        return False
    if not _WATCH:
        _WATCH.append(Watch())
        shell.events.register("post_run_cell", _after_cell)
    if simulator:
        from course import simulator as sim

        sim.add_launch_gate(_gate)
    return True
