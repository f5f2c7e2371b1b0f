"""Compile kernels for a GPU target in a child process while the simulator tests run: a module fixture's body.

``compiling(program)`` starts ``python -c program`` without the simulator (``NUMBA_ENABLE_CUDASIM=0``,
``COURSE_DEVICE=gpu``, the checkout first on the path), yields ``wait()``, which returns the JSON records the
program printed one per line (waiting for it the first time, failing with its stderr if it failed), and kills
the process if no test waited. ``compile_fixtures(PROGRAM, prefix)`` makes a test file's two fixtures from it:
``compiled`` (module scope, the ``wait`` above) and ``_start_compiling`` (autouse), which starts the child before
the file's simulator tests when any selected test's name starts with ``prefix``, so both run at once::

    compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM, "test_ptx")
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def compiling(program: str):
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen([sys.executable, "-c", program], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0",
                                                            "COURSE_DEVICE": "gpu", "PYTHONPATH": path})
    records = []

    def wait():
        if not records:
            stdout, stderr = process.communicate(timeout=600)
            assert process.returncode == 0, stderr[-3000:]
            records.extend(json.loads(line) for line in stdout.splitlines())
        return records

    yield wait
    if process.poll() is None:
        process.kill()
        process.communicate()


def compile_fixtures(program: str, prefix: str = "test_ptx"):
    """A test file's ``compiled`` fixture (module scope: ``wait()`` of ``compiling(program)``) and its autouse
    ``_start_compiling``, which starts the child as soon as the file's tests begin if a selected test's name starts
    with ``prefix`` (the tests that read the records). Assign both to those names at the file's top level."""
    @pytest.fixture(scope="module", name="compiled")
    def compiled():
        yield from compiling(program)

    @pytest.fixture(scope="module", autouse=True, name="_start_compiling")
    def start_compiling(request):
        if any(item.name.startswith(prefix) for item in request.session.items):
            request.getfixturevalue("compiled")

    return compiled, start_compiling
