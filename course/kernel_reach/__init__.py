"""What a kernel reads beyond its arguments, and whether a GPU would read the same (``docs/design-notes.md`` §7).

A graded kernel is compiled for a GPU and then run on the simulator, which counts its traffic. Compiling
proves the body *could* run on a GPU, not that the simulator runs what a GPU would: a kernel that reads
``numba.config.ENABLE_CUDASIM`` compiles (numba freezes a module's number into the code) and takes one
branch in the simulator and the other on a GPU, so the traffic or the rounding the tests proved is that of
a branch no GPU runs. And a kernel that calls a device function of the course's ``kernels`` package
(``kernels.paged_attention._warp_attend``, through any name) hands in the course's code as its own.

So before a student's kernel runs, :func:`check_reach` follows everything the kernel can reach, by value,
not by spelling: its Python function and every device function it can call (through a global, a module's
attribute, a closure, a default argument, a tuple), recursively. In each function's code it reads every
global, closure value and default, and every attribute chain read from one (``dis``: ``LOAD_GLOBAL``,
``LOAD_DEREF``, then ``LOAD_ATTR``/``LOAD_METHOD``), resolves the chain on the values the kernel will
see, and judges each value on the way:

- **refused as what differs between the simulator and a GPU** (:class:`SimulatorDependent`): numba's
  configuration (``numba.config``, ``numba.core.config``, ``numba.cuda.config``); the simulator's modules,
  types and functions (``numba.cuda.simulator``, ``cuda.simulator_collective_sync``, which ``course.simulator``
  adds); the course's own tools (``course.*``, ``grader.*``); the process (``os``, ``sys``,
  ``importlib``, ``builtins``; ``os.environ``); any other module than ``math``, ``numpy``, ``numba``,
  ``numba.cuda`` and numba's types; an attribute of ``numba.cuda`` outside numba's kernel API
  (:data:`CUDA_KERNEL_API`, numba's number types); Python's introspection (``getattr``, ``hasattr``,
  ``type``, ``isinstance``, ``__import__``, ``globals``, ``vars``, ... and every ``__dunder__`` name or
  attribute); an ``import`` inside the body; and, on a receiver no global names (a local that holds a
  module), an attribute whose name is one of the refused members of an allowed module (``config``,
  ``simulator``, ``environ``, ...);
- **refused as the course's kernels** (:class:`CourseKernelUsed`): a module of the ``kernels`` package, or a
  function (device function, kernel, plain Python function) whose code lives in ``kernels/``.

Everything else passes untouched (numbers, strings, tuples of them, numpy's and numba's types, ``math``,
``numpy``'s functions, numba's kernel API, the student's own device functions); whether it compiles is
``course.gpu_compile``'s question.

A number is a number: ``SIM = numba.config.ENABLE_CUDASIM`` computed at the top of a cell is the plain
``1`` by the time a kernel reads it, indistinguishable from a tile size. Such a constant is refused where
it is written, from its syntax tree, by :class:`ConstantScreen`, which the grader's clean room
(``grader/cleanroom.py``) asks about every top-level statement of a student's cell: an import or a
constant (or a kernel's default value) that reads numba outside its kernel API and number types, or the
process (``os``, ``sys``, ...), is not run.

The package: ``_policy`` (what is refused and why, the judgement of one value, the errors), ``_walk``
(what each code object reads, followed through everything a kernel can reach) and ``_screen`` (the
top-level statements of a cell).
"""

from __future__ import annotations

from ._policy import (ALLOWED_MODULES, COURSE_KERNEL_PHRASE, CUDA_KERNEL_API, CourseKernelUsed, Finding,
                      KernelRefused, NUMBA_TYPE_NAMES, SIMULATOR_PHRASE, SimulatorDependent, in_kernel_api,
                      is_dispatcher, judge, python_function, refused_member_names)  # noqa: F401
from ._walk import (Reach, check_reach, findings, reach)  # noqa: F401
from ._screen import (ConstantScreen, path_refusal)  # noqa: F401

__all__ = [
    "ALLOWED_MODULES", "COURSE_KERNEL_PHRASE", "CUDA_KERNEL_API", "ConstantScreen", "CourseKernelUsed",
    "Finding", "KernelRefused", "NUMBA_TYPE_NAMES", "Reach", "SIMULATOR_PHRASE", "SimulatorDependent",
    "check_reach", "findings", "in_kernel_api", "is_dispatcher", "judge", "path_refusal", "python_function",
    "reach", "refused_member_names",
]
