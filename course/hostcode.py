"""Host-Python answers: what an exercise declares of one, and where it runs.

Most exercises are kernels, and the grader runs nothing of a submission but its kernels. An exercise
whose answer is host Python (day 6's allocator: a class on top of a base class of ``kernels``)
declares it in its check module with a ``HostExercise`` (day 6's: ``ALLOCATOR`` in
``course/exercise_checks/day06_allocator.py``):

- ``base``: the module of ``kernels`` whose names the answer is given (it must import nothing of the
  project: where the answer is graded, it is all there is of the course);
- ``names``: those names, bound in the namespace the answer cell runs in;
- ``driver``: ``"module:function"``, the function that runs the answer through the exercise's
  operations and returns only data (lists, dicts, numbers, strings), called as
  ``driver(answer, data, base)``. Its module imports nothing but the standard library, because where
  the answer is graded it is loaded by its file, before the course's folders become unreadable;
- ``answer``: what the cell defines, a ``"class"`` or a ``"function"``.

A check hands the declaration, the answer and the operations to ``run`` and judges the data that comes
back. In the student's notebook (Validate, ``course check``) ``run`` calls the driver on the answer in
place. When graded, the answer cell never runs in the grading kernel: the grader turns it into a
``HostCode`` (its source and the name it defines), and ``run`` hands that to the runner the grader
registered with ``set_runner``, which runs the source in a guarded process of its own and sends back
the driver's data, or the problem. The judge is the same either way, and only ever sees data.
"""

from __future__ import annotations

import dataclasses
import importlib

TIMEOUT_S = 60
ANSWER_KINDS = ("class", "function")


class HostCode:
    """A name an answer cell defines, standing in for it where the grader runs that cell elsewhere."""

    def __init__(self, source: str, name: str):
        if not isinstance(source, str) or not isinstance(name, str) or not name.isidentifier():
            raise TypeError("HostCode needs the cell's source (str) and a name it defines (an identifier)")
        self.source, self.name = source, name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} is host Python: when graded it runs in a process of its own, "
                           "driven by the exercise's checks, not in this notebook")

    def __repr__(self) -> str:
        return f"<{self.name}: host Python, run in a process of its own when graded>"


def is_host_code(answer) -> bool:
    return type(answer).__name__ == "HostCode" and isinstance(getattr(answer, "source", None), str)


def _dotted(name: str) -> bool:
    return isinstance(name, str) and bool(name) and all(part.isidentifier() for part in name.split("."))


@dataclasses.dataclass(frozen=True)
class HostExercise:
    """What the process of a host answer holds: the given names of one ``kernels`` module, and a driver
    (the module docstring says what each field is for)."""

    base: str
    names: tuple[str, ...]
    driver: str
    answer: str = "class"

    def __post_init__(self):
        module, _, function = self.driver.partition(":") if isinstance(self.driver, str) else ("", "", "")
        if not _dotted(self.base) or self.base.split(".")[0] != "kernels":
            raise ValueError(f"base must name a module of kernels ('kernels.<module>'); got {self.base!r}")
        if not isinstance(self.names, tuple) or not all(isinstance(n, str) and n.isidentifier() for n in self.names):
            raise ValueError(f"names must be a tuple of identifiers (the base's names the answer gets); "
                             f"got {self.names!r}")
        if not _dotted(module) or not function.isidentifier():
            raise ValueError(f"driver must be 'module:function' ('course.exercise_checks.<module>:<function>'); "
                             f"got {self.driver!r}")
        if self.answer not in ANSWER_KINDS:
            raise ValueError(f"answer must be one of {ANSWER_KINDS}; got {self.answer!r}")

    @property
    def driver_module(self) -> str:
        return self.driver.partition(":")[0]

    @property
    def driver_function(self) -> str:
        return self.driver.partition(":")[2]

    def accepts(self, answer) -> bool:
        """Whether ``answer`` is what the cell should define: a class, or a function."""
        return isinstance(answer, type) if self.answer == "class" else callable(answer)

    def request(self, answer: HostCode, data, timeout: float = TIMEOUT_S) -> dict:
        """What a runner is handed for ``answer``: this declaration, the cell's source and the driver's data."""
        return {"base": self.base, "names": list(self.names), "driver": self.driver_module,
                "function": self.driver_function, "answer": self.answer, "source": answer.source,
                "name": answer.name, "data": data, "timeout": timeout}


_runner = None


def set_runner(runner) -> None:
    """Register what runs a ``HostCode`` (the grader's ``grader.host_answers.start_runner`` does, in the
    grading kernel): a callable taking ``HostExercise.request(...)`` and returning ``{"result": data}``
    or ``{"problem": why}``. None unregisters it."""
    global _runner
    if runner is not None and not callable(runner):
        raise TypeError(f"a runner of host answers must be callable, got {type(runner).__name__}")
    _runner = runner


def run(exercise: HostExercise, answer, data, *, timeout: float = TIMEOUT_S):
    """The driver's data for ``answer`` on ``data``: in place, or, for a ``HostCode``, through the runner."""
    if not isinstance(exercise, HostExercise):
        raise TypeError(f"exercise must be a HostExercise, got {type(exercise).__name__}")
    if is_host_code(answer):
        if _runner is None:
            raise RuntimeError(f"{answer.name} is host Python held as its source: host answers run in a process "
                               "of their own only when graded, and no runner of them was started here (the "
                               "grader starts one before the first cell)")
        reply = _runner(exercise.request(answer, data, timeout))
        if not isinstance(reply, dict) or ("problem" not in reply and "result" not in reply):
            raise AssertionError(f"{answer.name} could not be run: the runner sent back no result")
        if "problem" in reply:
            raise AssertionError(f"{answer.name} could not be run: {reply['problem']}")
        return reply["result"]
    if not exercise.accepts(answer):
        raise TypeError(f"answer must be the {exercise.answer} your answer cell defines, got {type(answer).__name__}")
    driver = getattr(importlib.import_module(exercise.driver_module), exercise.driver_function)
    return driver(answer, data, importlib.import_module(exercise.base))
