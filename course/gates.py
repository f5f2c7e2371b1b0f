"""The checks every kernel launch passes while a submission is graded (on the simulator).

``install()`` registers three checks with the simulator (``course.simulator.add_launch_gate``) for
every launch of a kernel that is not one of the course's own:

- **it reads nothing that differs between the simulator and a GPU, and none of the course's kernels**
  (``course.kernel_reach``): the kernel and every device function it can call, through whatever
  global, module attribute, closure, default or tuple, are walked by value; a kernel that reads
  numba's configuration (``numba.config.ENABLE_CUDASIM``), the simulator's own modules or functions,
  the environment, Python's introspection or the course's tools fails with
  ``SimulatorDependent`` (it could take one branch here and another on a GPU), and one that reaches a
  function or module of the course's ``kernels`` package fails with ``CourseKernelUsed``; each message
  names what was read, where, and why;
- **before it runs, it compiles for a GPU** (``course.gpu_compile``): a body that calls NumPy,
  builds a list or touches any Python object would run in the simulator, never on a GPU, and
  never runs here either;
- **it leaves its inputs as they were**: every array argument that the launcher did not create
  with ``kernels.launching.output_array`` (the outputs, and a launcher's scratch) is compared,
  byte for byte, with a copy taken before the launch. A kernel that writes an input fails with a
  message that names it, so a test's reference, computed from the inputs, is never computed from
  what the kernel left in them.

``check_notebook_kernels()`` is the first two checks, for students (``course.use_device()``
installs it on the simulator): a kernel written in a notebook that would not compile for a GPU
fails at its first launch with the compiler's reason, and one that reads what differs between the
simulator and a GPU (or the course's kernels) fails with the same message grading would give; where
the compiler is not installed it says so once and lets launches run.
"""

from __future__ import annotations

import inspect

from course.gpu_compile import PROJECT_ROOT, CompilerUnavailable, check_compiles
from course.kernel_reach import check_reach      # raises SimulatorDependent or CourseKernelUsed


class InputWritten(AssertionError):
    """A kernel changed an array that was given to it as an input."""


def _is_course_kernel(kernel) -> bool:
    import pathlib

    code = getattr(getattr(kernel, "py_func", None), "__code__", None)
    if code is None:
        return False
    try:
        path = pathlib.Path(code.co_filename).resolve()
    except (OSError, ValueError):
        return False
    return path.is_relative_to(PROJECT_ROOT / "kernels") or path.is_relative_to(PROJECT_ROOT / "course")


def _parameter_names(kernel, count: int) -> list[str]:
    try:
        names = list(inspect.signature(kernel.py_func).parameters)
    except (TypeError, ValueError):
        names = []
    return names + [f"argument {i + 1}" for i in range(len(names), count)]


def _input_guard(kernel, args):
    """A copy of each input array now; the check that none changed, for after the launch."""
    import numpy as np

    from kernels.launching import is_output_array

    names = _parameter_names(kernel, len(args))
    before = []
    for name, arg in zip(names, args):
        array = getattr(arg, "_ary", arg)
        if isinstance(array, np.ndarray) and array.ndim > 0 and not is_output_array(arg):
            before.append((name, array, array.copy()))
    if not before:
        return None

    def after():
        for name, array, copy in before:
            if array.tobytes() != copy.tobytes():
                changed = int(np.count_nonzero((array.view(np.uint8).reshape(-1, array.itemsize)
                                                != copy.view(np.uint8).reshape(-1, copy.itemsize)).any(axis=1)))
                kernel_name = getattr(kernel.py_func, "__name__", "the kernel")
                raise InputWritten(
                    f"{kernel_name} wrote to its input {name}: {changed} of its {array.size} elements changed "
                    f"during the launch. A kernel may write only its outputs (the tests compute the expected "
                    f"result from the inputs as they were); keep scratch values in registers or shared memory.")
    return after


def _gate(kernel, args):
    if _is_course_kernel(kernel):
        return None
    check_reach(kernel)
    check_compiles(kernel, *args)
    return _input_guard(kernel, args)


def install(compile_service: str | None = None) -> None:
    """Check every launch of a kernel that is not the course's: GPU compile first, inputs untouched after.

    Starts the compiler's helper process (or connects to the grading run's compile service at the
    socket ``compile_service``, ``grader.compile_service``) now, before anything may forbid starting
    processes.
    """
    from course import gpu_compile, simulator

    gpu_compile.start_helper(compile_service)
    simulator.add_launch_gate(_gate)
    _grading.append(_gate)


def _in_a_notebook(kernel) -> bool:
    code = getattr(getattr(kernel, "py_func", None), "__code__", None)
    name = getattr(code, "co_filename", "")
    return "ipykernel_" in name or name.startswith("<ipython-input")


_unavailable: list = []
_grading: list = []         # install() ran: the grading checks see every launch, the students' check stands aside


def _notebook_gate(kernel, args):
    """For students: a kernel written in a notebook reads nothing that differs between the simulator and a GPU
    and compiles for a GPU before the simulator runs it."""
    if _grading or not _in_a_notebook(kernel):
        return None
    check_reach(kernel)
    if _unavailable:
        return None
    try:
        check_compiles(kernel, *args, on_disk=True)
    except CompilerUnavailable as exc:
        _unavailable.append(exc)
        print(f"(kernels are not checked for a GPU here: {exc})")
    return None


def check_notebook_kernels() -> None:
    """On the simulator, compile each kernel defined in a notebook for a GPU before it first runs.

    ``course.use_device()`` calls this (``COURSE_GPU_CHECK=0`` turns it off): a kernel the
    simulator would run but no GPU could fails at once, with the compiler's reason, instead of
    on the first GPU it meets. Results are remembered per kernel source and argument types, in the
    process and on disk (``course.gpu_compile.cache_dir``), so only a kernel's first launch ever pays
    (about a second for the helper, a fraction for a kernel).
    Where the compiler is not installed it says so once and checks nothing.
    """
    from course import simulator

    simulator.add_launch_gate(_notebook_gate)
