"""Device selection and `course doctor`, in fresh processes (the choice happens before numba loads)."""

import os
import subprocess
import sys

import pytest

import course
from course import device


def _run(code, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("COURSE_DEVICE", "NUMBA_ENABLE_CUDASIM")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def test_auto_selects_simulator_without_a_gpu_and_says_why():
    if device.probe_gpu()[0]:
        pytest.skip("this machine has a GPU: auto selects it (covered by the gpu tests)")
    proc = _run("import course; print(course.use_device())")
    assert proc.returncode == 0, proc.stderr
    first, last = proc.stdout.strip().splitlines()[0], proc.stdout.strip().splitlines()[-1]
    assert "simulator" in first and "no NVIDIA driver" in first or "reports no GPU" in first
    assert last == "simulator"


def test_environment_variable_forces_the_simulator():
    proc = _run("import course; course.use_device(); import numba; print(numba.config.ENABLE_CUDASIM)",
                COURSE_DEVICE="simulator")
    assert proc.returncode == 0, proc.stderr
    assert "asked for by COURSE_DEVICE" in proc.stdout
    assert proc.stdout.strip().endswith("1")


def test_numba_imported_too_early_is_a_clear_error():
    proc = _run("import numba, course; course.use_device('simulator')")
    assert proc.returncode != 0
    assert "numba was imported before course.use_device()" in proc.stderr
    assert "Restart the kernel" in proc.stderr


def test_bad_choice_names_the_argument():
    with pytest.raises(ValueError, match="device choice must be one of"):
        course.use_device("tpu")


def test_gpu_requested_without_one_is_refused():
    if device.probe_gpu()[0]:
        pytest.skip("this machine has a GPU")
    proc = _run("import course; course.use_device('gpu')")
    assert proc.returncode != 0 and "a GPU was asked for" in proc.stderr


def test_doctor_tells_the_truth_here():
    proc = subprocess.run([sys.executable, "-m", "course", "doctor"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COURSE_DEVICE": "auto"})
    out = proc.stdout
    import numba
    import numpy

    assert f"numba           {numba.__version__}" in out
    assert f"numpy           {numpy.__version__}" in out
    if device.probe_gpu()[0]:
        assert "kernels run on  gpu" in out
    else:
        assert "gpu             none:" in out and "kernels run on  simulator" in out
    assert proc.returncode == (1 if "problems:" in out else 0)


def test_doctor_flags_numpy_too_new_on_a_gpu(monkeypatch):
    monkeypatch.setattr(device, "probe_gpu", lambda: (1, "test GPU"))
    from course import doctor

    monkeypatch.setattr(doctor, "_version", lambda name: {"numpy": "2.5.0"}.get(name, "1.0"))
    monkeypatch.setattr(doctor, "_driver_version", lambda: "CUDA 13.0")
    monkeypatch.setattr(doctor, "_gpu_names", lambda: "Test GPU")
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    facts, problems = doctor.diagnose()
    assert any("numpy 2.5.0 breaks numba-cuda" in p and "numpy>=2,<2.5" in p for p in problems)


def test_doctor_flags_a_missing_cuda_runtime(monkeypatch):
    from course import doctor

    monkeypatch.setattr(doctor, "_cuda_runtime", lambda: (None, "DynamicLibNotFoundError: cudart"))
    facts, problems = doctor.diagnose()
    assert dict(facts)["CUDA runtime"] == "NOT FOUND"
    assert any("pip install nvidia-cuda-runtime" in p for p in problems)


def test_doctor_flags_numba_imported_early():
    from course import doctor

    _, problems = doctor.diagnose(numba_imported_early=True)
    assert any("imported before course.use_device()" in p for p in problems)
