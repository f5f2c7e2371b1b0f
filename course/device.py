"""Choose numba's CUDA simulator or a real GPU before numba is imported, and report on it.

The simulator must be chosen through ``NUMBA_ENABLE_CUDASIM=1`` *before* numba is first
imported, so this module never imports numba at module level.

Choice, in order:

1. ``use_device("simulator")`` or ``use_device("gpu")`` when a notebook asks explicitly;
2. the environment variable ``COURSE_DEVICE`` (``simulator``, ``gpu`` or ``auto``);
3. ``auto``: the GPU if the CUDA driver reports at least one device, else the simulator.
"""

from __future__ import annotations

import ctypes
import os
import sys

CHOICES = ("auto", "simulator", "gpu")

_selected: str | None = None
_reason: str = ""


def probe_gpu() -> tuple[int, str]:
    """Count CUDA devices through the driver library, without importing numba.

    Returns ``(count, why)``: ``why`` explains a count of zero in words.
    """
    names = ["libcuda.so.1", "libcuda.so"] if sys.platform != "win32" else ["nvcuda.dll"]
    if sys.platform == "darwin":
        return 0, "macOS has no CUDA driver"
    lib = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return 0, "no NVIDIA driver library (libcuda) on this machine"
    if lib.cuInit(0) != 0:
        return 0, "the NVIDIA driver is installed but cuInit failed (no usable GPU)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return 0, "the NVIDIA driver reports no GPU"
    return count.value, f"the NVIDIA driver reports {count.value} GPU(s)"


def _numba_imported() -> bool:
    return "numba" in sys.modules


def use_device(choice: str | None = None, *, quiet: bool = False) -> str:
    """Select the simulator or the GPU for this process and print one line saying which and why.

    Call it in a notebook's first cell, before anything imports numba. Returns ``"simulator"``
    or ``"gpu"``. Calling it again with the same outcome is harmless.
    """
    global _selected, _reason
    if choice is None:
        choice = os.environ.get("COURSE_DEVICE", "auto").strip().lower() or "auto"
        source = "COURSE_DEVICE" if "COURSE_DEVICE" in os.environ else None
    else:
        source = "use_device()"
    if not isinstance(choice, str) or choice.lower() not in CHOICES:
        raise ValueError(f"device choice must be one of {CHOICES}, got {choice!r}")
    choice = choice.lower()

    if choice == "auto":
        if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
            target, reason = "simulator", "NUMBA_ENABLE_CUDASIM=1 is set"
        else:
            count, why = probe_gpu()
            target = "gpu" if count else "simulator"
            reason = why
    else:
        target = choice
        reason = f"asked for by {source}"
        if target == "gpu":
            count, why = probe_gpu()
            if not count:
                raise RuntimeError(f"a GPU was asked for by {source}, but {why}. "
                                   "Use use_device('simulator') or COURSE_DEVICE=simulator.")

    want_sim = target == "simulator"
    if _numba_imported():
        import numba

        is_sim = bool(numba.config.ENABLE_CUDASIM)
        if is_sim != want_sim:
            raise RuntimeError(
                f"numba was imported before course.use_device() and is already set up for the "
                f"{'simulator' if is_sim else 'GPU'}, but {target} was selected ({reason}). "
                "Restart the kernel and make `import course; course.use_device()` the first cell.")
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if want_sim else "0"

    _selected, _reason = target, reason
    from course import graded_notice

    if want_sim:
        from course import simulator

        simulator.install()
        # In an exercise notebook: notes under cells whose lines will not run when graded, and a launch of a
        # kernel that needs one of them refused (before the GPU compile check, which would only say NameError).
        graded_notice.install(simulator=True)
        if os.environ.get("COURSE_GPU_CHECK", "1") != "0":
            from course import gates

            gates.check_notebook_kernels()
    else:
        graded_notice.install()
    # An error raised through the course's code shows its cause first, the student's own lines, and the
    # rest of the traceback folded (course/tracebacks.py).
    from course import tracebacks

    tracebacks.install()
    if not quiet:
        print(device_summary())
    return target


def selected() -> str | None:
    """The device ``use_device`` chose (``"simulator"`` or ``"gpu"``); None before it ran."""
    return _selected


def on_simulator() -> bool:
    """True when kernels run on numba's CUDA simulator (selecting the device first if needed)."""
    if _selected is None and not _numba_imported():
        use_device(quiet=True)
    import numba

    return bool(numba.config.ENABLE_CUDASIM)


def device_summary() -> str:
    """One line: where kernels run and why."""
    if _selected is None:
        return "course: no device selected yet; call course.use_device()"
    if _selected == "simulator":
        return (f"course: kernels run on numba's CUDA simulator ({_reason}); "
                "everything works, timings are recorded GPU results")
    name = _gpu_name()
    return f"course: kernels run on the GPU {name} ({_reason})"


def _gpu_name() -> str:
    try:
        from numba import cuda

        return cuda.get_current_device().name.decode() if isinstance(
            cuda.get_current_device().name, bytes) else str(cuda.get_current_device().name)
    except Exception as exc:  # the doctor explains failures in detail
        return f"(name unavailable: {exc})"
