"""Choosing one of a kernel's builds per GPU and problem by timing each: day 4's v8 and the tensor-core GEMM's v7.

A rung that tunes has a few builds of one kernel (``options``: block tiles, warp shapes) and no model that picks
the fastest on every GPU. Its first launch on device arrays for a new problem times every option on this GPU
(``Tuner.tune``), keeps the fastest for the rest of the process, per GPU name, kernel and problem, and launches it
from then on. Where nothing can be timed (the simulator, NumPy arrays) the launcher takes its untuned option
(``kernels.launching.largest_filling``: the largest tile whose grid still has enough blocks to fill a large GPU).

- ``time_each(launches, repeat)``: ``{option: ms per launch}``, each launch once to compile and warm up, then
  ``repeat`` times back to back between two CUDA events (the mean counts).
- ``Tuner``: the choices of one module, ``pick(kernel, problem, arrays, launches, untuned)`` (what a launcher
  launches), ``choice(kernel, problem)``, ``tune(kernel, problem, launches)``, ``entries()``.
- ``gpu_name()``: this process's GPU, asked once.
"""

from __future__ import annotations

from typing import Callable, Hashable

from numba import config, cuda

from kernels.launching import is_device_array

__all__ = ["Tuner", "time_each", "gpu_name"]

_GPU_NAME: list = []


def gpu_name() -> str:
    """The name of this process's GPU, asked once (a launcher asks on every launch)."""
    if not _GPU_NAME:
        name = cuda.get_current_device().name
        _GPU_NAME.append(name.decode() if isinstance(name, bytes) else str(name))
    return _GPU_NAME[0]


def time_each(launches: dict, repeat: int = 5) -> dict:
    """``{option: ms}`` for ``launches`` ``{option: launch()}``: each launched once (compile, warm-up), then
    ``repeat`` times back to back between two CUDA events; ms is the mean per launch. GPU only."""
    if config.ENABLE_CUDASIM:
        raise RuntimeError("tuning times kernels and needs a GPU; the simulator has no clock to time them by")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be an int >= 1, got {repeat!r}")
    times = {}
    for option, launch in launches.items():
        launch()
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        for _ in range(repeat):
            launch()
        end.record()
        end.synchronize()
        times[option] = float(cuda.event_elapsed_time(start, end)) / repeat
    return times


class Tuner:
    """The options chosen by timing in this process: ``{(GPU name, kernel name, problem): {"choice", "ms"}}``.

    ``problem`` is a hashable that tells the problems apart (day 4: (M, N, K); the tensor-core GEMM: (fmt, M, N,
    K)); ``kernel`` names the kernel whose builds are the options, so two rungs tuning the same problem keep
    separate choices."""

    def __init__(self):
        self._chosen: dict = {}

    def choice(self, kernel: str, problem: Hashable):
        """The option tuned for ``kernel`` and ``problem`` on this GPU, or None (never on the simulator)."""
        if config.ENABLE_CUDASIM or not self._chosen:
            return None
        found = self._chosen.get((gpu_name(), kernel, problem))
        return None if found is None else found["choice"]

    def pick(self, kernel: str, problem: Hashable, arrays, launches: Callable[[], dict], untuned):
        """The option a launcher launches for ``problem``: ``untuned`` on the simulator or unless every one of
        ``arrays`` is a device array; else the option tuned for ``kernel`` on this GPU, tuning it first (``tune``
        of ``launches()``, ``{option: launch()}``) when the problem is new."""
        if config.ENABLE_CUDASIM or not all(is_device_array(x) for x in arrays):
            return untuned
        found = self.choice(kernel, problem)
        return found if found is not None else self.tune(kernel, problem, launches())["choice"]

    def tune(self, kernel: str, problem: Hashable, launches: dict, repeat: int = 5) -> dict:
        """Time ``launches`` (``time_each``), keep the fastest for ``kernel`` and ``problem`` on this GPU; return
        ``{"gpu", "kernel", "problem", "choice", "ms"}``."""
        times = time_each(launches, repeat)
        choice = min(times, key=times.get)
        gpu = gpu_name()
        self._chosen[gpu, kernel, problem] = {"choice": choice, "ms": times}
        return {"gpu": gpu, "kernel": kernel, "problem": problem, "choice": choice, "ms": times}

    def entries(self) -> list[dict]:
        """Every choice made, one dict per (GPU, kernel, problem), as ``tune`` returned it."""
        return [{"gpu": gpu, "kernel": kernel, "problem": problem, **entry}
                for (gpu, kernel, problem), entry in self._chosen.items()]
