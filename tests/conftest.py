"""Test configuration: the simulator by default, the GPU with COURSE_DEVICE=gpu (`make test-gpu`).

The device is chosen here, before any test module imports numba.
"""

import os

import pytest

os.environ.setdefault("COURSE_DEVICE", "simulator")
os.environ.setdefault("MPLBACKEND", "Agg")

import course  # noqa: E402

course.use_device(quiet=True)


def pytest_report_header(config):
    return course.device_summary()


def pytest_collection_modifyitems(config, items):
    if course.on_simulator():
        skip = pytest.mark.skip(reason="needs a real NVIDIA GPU: run `make test-gpu` on one")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
