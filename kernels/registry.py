"""The registry of a kernel ladder: its rungs in order, each with its launcher and what it adds.

Every kernel module ends with ``RUNGS = ladder(Rung(...), ...)``, the rungs in the order its
docstring lists them. Recorders, tests and lessons loop over ``RUNGS`` instead of naming rungs by
hand, so a new rung is a kernel, a launcher and one registry entry::

    for name, rung in gemm.RUNGS.items():
        c = rung(a, b)                  # a rung is called like its launcher

``RUNGS`` maps the rung's name (its label in recordings and plots) to a ``Rung``. The kernels a
rung launches are the keyword-only parameters of its launcher named ``kernel`` or ``*_kernel``,
with their defaults: ``rung.kernels`` reads them from the signature, so the registry never repeats
them, and ``rung(..., kernel=student_kernel)`` launches another kernel with the same checks and grid.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from typing import Callable, Mapping

__all__ = ["Rung", "ladder", "kernel_parameters"]


def kernel_parameters(launcher: Callable) -> dict:
    """``{keyword: default kernel}`` for the keyword-only parameters ``kernel`` and ``*_kernel`` of ``launcher``."""
    parameters = inspect.signature(launcher).parameters.values()
    return {p.name: p.default for p in parameters
            if p.kind is inspect.Parameter.KEYWORD_ONLY and (p.name == "kernel" or p.name.endswith("_kernel"))}


@dataclass(frozen=True)
class Rung:
    """One rung of a ladder: ``name`` (its label), ``launcher`` and one line on what it ``adds``."""

    name: str
    launcher: Callable
    adds: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"name must be an identifier such as 'gemm_v1_naive', got {self.name!r}")
        if not callable(self.launcher):
            raise TypeError(f"launcher of rung {self.name!r} must be callable, got {type(self.launcher).__name__}")
        if not isinstance(self.adds, str) or not self.adds.strip() or "\n" in self.adds:
            raise ValueError(f"adds of rung {self.name!r} must be one line saying what the rung adds, "
                             f"got {self.adds!r}")
        if not kernel_parameters(self.launcher):
            raise TypeError(f"the launcher {self.launcher.__name__} of rung {self.name!r} must take the kernel "
                            "it launches as a keyword-only parameter named kernel (or *_kernel)")

    @property
    def kernels(self) -> dict:
        """The kernels the launcher launches unless told otherwise: ``{keyword: kernel}``."""
        return kernel_parameters(self.launcher)

    def __call__(self, *args, **kwargs):
        return self.launcher(*args, **kwargs)


def ladder(*rungs: Rung) -> Mapping[str, Rung]:
    """A read-only ``{name: rung}`` mapping in ladder order; names must be unique."""
    by_name: dict[str, Rung] = {}
    for rung in rungs:
        if not isinstance(rung, Rung):
            raise TypeError(f"every rung must be a Rung, got {type(rung).__name__}")
        if rung.name in by_name:
            raise ValueError(f"rung names must be unique, {rung.name!r} appears twice")
        by_name[rung.name] = rung
    return types.MappingProxyType(by_name)
