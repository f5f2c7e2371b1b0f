"""``course doctor``: what this machine runs the course on, and what is wrong, with the fix.

Run it as ``course doctor`` or ``python -m course doctor``; in a notebook, ``course.doctor.report()``
also notices numba imported before ``course.use_device()``.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys

from course import device


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _numpy_too_new(version: str | None) -> bool:
    if version is None:
        return False
    major, minor = (int(p) for p in version.split(".")[:2])
    return (major, minor) >= (2, 5)


def _cuda_runtime() -> tuple[str | None, str]:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return load_nvidia_dynamic_lib("cudart").abs_path, ""
    except Exception as exc:  # any failure means numba-cuda cannot start, simulator included
        return None, f"{type(exc).__name__}: {exc}"


def diagnose(numba_imported_early: bool = False) -> tuple[list[tuple[str, str]], list[str]]:
    """Return ``(facts, problems)``: facts as (name, value) pairs, problems with their fixes."""
    facts: list[tuple[str, str]] = []
    problems: list[str] = []
    facts.append(("python", f"{platform.python_version()} ({sys.executable})"))
    versions = {name: _version(name) for name in ("numba", "numba-cuda", "numpy")}
    for name, ver in versions.items():
        facts.append((name, ver or "NOT INSTALLED"))
        if ver is None:
            problems.append(f"{name} is not installed: run `make lab` (or `pip install -e .`) "
                            "in the course folder.")

    gpus, why = device.probe_gpu()
    driver = _driver_version() if gpus else None
    if gpus:
        facts.append(("gpu", f"{_gpu_names()} (driver {driver or 'unknown'})"))
    else:
        facts.append(("gpu", f"none: {why}"))
    import os

    forced = os.environ.get("COURSE_DEVICE", "auto")
    target = "gpu" if (gpus and forced != "simulator") else "simulator"
    facts.append(("kernels run on", target + (" (COURSE_DEVICE=" + forced + ")" if forced != "auto" else "")))

    cudart, err = _cuda_runtime()
    facts.append(("CUDA runtime", cudart or "NOT FOUND"))
    if cudart is None:
        problems.append("numba-cuda needs the CUDA runtime library, even for the simulator "
                        f"({err}). Fix: pip install nvidia-cuda-runtime (CPU-only machine) or "
                        "numba-cuda[cu12] / numba-cuda[cu13] (machine with an NVIDIA GPU).")

    from inference import files

    try:
        facts.append(("model", f"{files.model_path()} (days 9 and 10)"))
    except FileNotFoundError as missing:
        facts.append(("model", "NOT INSTALLED (days 9 and 10 need it)"))
        problems.append(f"{missing}.")
    if target == "gpu" and _numpy_too_new(versions["numpy"]):
        problems.append(f"numpy {versions['numpy']} breaks numba-cuda 0.30 kernels on a real GPU "
                        "(np.row_stack was removed). Fix: pip install 'numpy>=2,<2.5'.")
    if target == "gpu" and _version("cuda-bindings") is None and _version("nvidia-cuda-runtime-cu12") is None:
        problems.append("a GPU is present but no CUDA bindings are installed. Fix: pip install "
                        "'numba-cuda[cu12]' (driver for CUDA 12) or 'numba-cuda[cu13]' (CUDA 13).")
    if numba_imported_early:
        problems.append("numba was imported before course.use_device(): the device can no longer "
                        "be chosen. Fix: restart the kernel and make `import course; "
                        "course.use_device()` the first cell.")
    return facts, problems


def _driver_version() -> str | None:
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        ver = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(ver)) == 0:
            return f"CUDA {ver.value // 1000}.{ver.value % 1000 // 10}"
    except OSError:
        return None
    return None


def _gpu_names() -> str:
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuInit(0)
    count = ctypes.c_int(0)
    lib.cuDeviceGetCount(ctypes.byref(count))
    names = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        lib.cuDeviceGet(ctypes.byref(dev), i)
        buf = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(buf, 256, dev)
        names.append(buf.value.decode())
    return ", ".join(names)


def report(short: bool = False) -> int:
    """Print the report; return 1 when something is wrong, else 0."""
    early = "numba" in sys.modules and device.selected() is None
    facts, problems = diagnose(numba_imported_early=early)
    if short:
        where = dict(facts)["kernels run on"]
        print(f"course doctor: kernels run on {where}; "
              + ("no problems found" if not problems else f"{len(problems)} problem(s), run `course doctor`"))
        return 1 if problems else 0
    width = max(len(k) for k, _ in facts)
    for key, value in facts:
        print(f"{key:<{width}}  {value}")
    if problems:
        print("\nproblems:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("\nno problems found")
    return 0


def run(args) -> int:
    """Entry point of the ``doctor`` subcommand."""
    return report(short=getattr(args, "short", False))
