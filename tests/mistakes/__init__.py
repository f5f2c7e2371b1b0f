"""The classic mistakes of each day: one table per day (``dayNN.py``), read by every test about them.

A :class:`Mistake` is a few characters a student gets wrong, written once as ``(old, new)`` edits of the
course's code in ``kernels/`` (the solution notebook's answer cells equal that code, see ``tests/days.py``'s
``solution_code``, so the same edit applies to the kernel and to its answer cell). What the tests assert
about it are its fields:

- ``names``/``words``: ``check`` names it, first cause ``names``, in a message with ``words``
  (``test_classic_mistakes.py``, which builds the wrong kernel with :meth:`Mistake.build`); with
  ``raises``, the kernel raises on the simulator and the runner's ``KernelFailed`` has cause ``names``.
- ``hidden_fails``: the hidden tests of that grade cell fail the answer cell with the mistake written in;
  ``visible_misses``: and the cell's visible check passes it (``test_dayNN_exercise.py``).
- ``feedback``: ``(check, words)`` pairs: the visible check ``course.exercise_checks.<check>`` fails the
  kernel with a message that has ``words`` (``test_dayNN_exercise.py``).
- ``wrong_answer``: one of the mistakes of the day's wrong answer, which nbgrader's Validate must fail in
  the grade cells ``tests/days.py`` names (``wrong_fails``; ``test_exercises.py``).
- ``samples``: the grader samples (``grader/samples/<assignment>/<sample>.py``) that make this mistake in
  ``cell``. A sample keeps its own ``EDITS`` (the samples are the grader's data, loaded by
  ``grader/sample_cases.py``, which does not read ``tests/``); ``test_grader_samples.py`` checks that the
  sample's cell is the table's edits applied to it, so its edits are the table's. ``sample_base``: the
  edits are of that sample's cell (``correct_alternative``, a kernel written differently), not of
  ``kernels/``; then ``kernel`` is None.

Edits are applied in order, each ``old`` found exactly once, or, with ``replace_all``, replaced wherever
it occurs (``test_classic_mistakes.py`` checks every table against the kernels). A mistake that two tests
make with different edits is two entries: one entry serves several tests only where the code they run is
the same, character for character.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import linecache
import pkgutil
import re
import textwrap

__all__ = ["Mistake", "mistaken", "TABLES", "ALL", "BY_LABEL", "assignment_of", "of_day", "MISTAKES"]


@dataclasses.dataclass(frozen=True)
class Mistake:
    label: str                          # what the student got wrong, unique over the course
    cell: str                           # the answer cell of the solution notebook it is made in
    kernel: str | None                  # "module.name" in kernels/ whose source ``edits`` change
    edits: tuple[tuple[str, str], ...]  # (old, new) text replacements, in order
    why: str                            # the mistake, in a line
    names: str | None = None            # the first cause check gives (or the KernelFailed cause, if raises)
    words: tuple[str, ...] = ()         # ... and words its message must use
    raises: bool = False
    hidden_fails: str | None = None     # the grade cell whose hidden tests fail it
    visible_misses: bool = False        # ... while that cell's visible check passes it
    feedback: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (visible check, words of its failure)
    wrong_answer: bool = False          # part of the day's wrong answer (Validate, tests/days.py)
    samples: tuple[str, ...] = ()       # grader samples that make it (their EDITS are these edits)
    sample_base: str | None = None      # the sample whose cell the edits change, if not kernels/
    replace_all: bool = False           # each old may occur several times: every occurrence is replaced

    def __post_init__(self):
        if not self.edits or not all(isinstance(e, tuple) and len(e) == 2 for e in self.edits):
            raise ValueError(f"{self.label}: edits must be (old, new) pairs, at least one")
        if (self.kernel is None) != (self.sample_base is not None):
            raise ValueError(f"{self.label}: a mistake changes a kernel of kernels/ or, for a sample only, "
                             f"the cell of another sample (sample_base), not both")
        if self.sample_base is not None and (self.names or self.hidden_fails or self.feedback or self.wrong_answer):
            raise ValueError(f"{self.label}: an edit of a sample's cell can only be a sample's mistake")

    def course_kernel(self):
        """The object of kernels/ that the edits change (a @cuda.jit kernel, or a class)."""
        module, name = self.kernel.rsplit(".", 1)
        return getattr(importlib.import_module(f"kernels.{module}"), name)

    def apply(self, source: str, *, where: str = "") -> str:
        """``source`` with the edits made, each ``old`` found exactly once (with ``replace_all``: at least
        once, and replaced everywhere), else a ValueError."""
        return _edited(source, self.edits, label=self.label, where=where, replace_all=self.replace_all)

    def build(self):
        """A copy of the course's kernel with the mistake written in, compiled as a new @cuda.jit kernel."""
        return _compiled(self.course_kernel(), self.edits, self.label, replace_all=self.replace_all)


def _edited(source: str, edits, *, label: str, where: str, replace_all: bool = False) -> str:
    for old, new in edits:
        count = source.count(old)
        if count != 1 and not (replace_all and count > 1):
            raise ValueError(f"{label}: {where or 'the source'} must contain {old!r} "
                             f"{'at least' if replace_all else 'exactly'} once to make this mistake; it contains "
                             f"it {count} times (has the code changed?)")
        source = source.replace(old, new)
    return source


def _compiled(kernel, edits, label: str, *, replace_all: bool = False):
    function = kernel.py_func
    source = _edited(textwrap.dedent(inspect.getsource(function)), edits, label=label, where=function.__name__,
                     replace_all=replace_all)
    filename = f"<mistake {label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(function.__globals__)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[function.__name__]


def mistaken(kernel, old: str, new: str, *, label: str):
    """A copy of ``kernel`` (a @cuda.jit kernel of ``kernels/``) with ``old`` replaced by ``new`` once,
    compiled in the globals of the kernel's module (so ``TILE``, ``float32``, ``math`` mean what they
    mean there). Its source is registered with ``linecache``, so ``inspect.getsource`` (and through it the
    barrier diagnoses of ``course.checking.check``) reads it like a kernel written in a notebook."""
    return _compiled(kernel, ((old, new),), label)


def _tables() -> dict[str, tuple[Mistake, ...]]:
    """Each ``dayNN`` module of this package: its ASSIGNMENT -> its TABLE, in the order of the days."""
    tables = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if re.fullmatch(r"day\d\d", info.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            tables[module.ASSIGNMENT] = module.TABLE
    return tables


TABLES: dict[str, tuple[Mistake, ...]] = _tables()      # assignment -> its day's mistakes, in order
ALL: tuple[Mistake, ...] = tuple(m for table in TABLES.values() for m in table)
BY_LABEL: dict[str, Mistake] = {m.label: m for m in ALL}
_ASSIGNMENT_OF = {m.label: assignment for assignment, table in TABLES.items() for m in table}
if len(BY_LABEL) != len(ALL):
    _labels = [m.label for m in ALL]
    raise ValueError(f"labels used twice: {sorted({label for label in _labels if _labels.count(label) > 1})}")


def assignment_of(label: str) -> str:
    """The assignment (``day05_flash_attention``) of a mistake's day."""
    return _ASSIGNMENT_OF[label]


def of_day(assignment: str) -> tuple[Mistake, ...]:
    return TABLES[assignment]


def __getattr__(name):
    # MISTAKES: label -> (course kernel, old, new) of each one-edit mistake check names, for the tests
    # written against the dict that came before the tables (tests/test_exercise_feedback.py). Built on
    # first use, so that tests/days.py reads the tables without importing kernels/.
    if name == "MISTAKES":
        return {m.label: (m.course_kernel(), *m.edits[0]) for m in ALL if m.names and len(m.edits) == 1}
    raise AttributeError(name)
