"""Compile kernels for a GPU target in a child process while the simulator tests run: a module fixture's body.

``compiling(program)`` starts ``python -c program`` without the simulator (``NUMBA_ENABLE_CUDASIM=0``,
``COURSE_DEVICE=gpu``, the checkout first on the path), yields ``wait()``, which returns the JSON records the
program printed one per line (waiting for it the first time, failing with its stderr if it failed), and kills
the process if no test waited. Use it as ``yield from compiling(PROGRAM)`` in a ``scope="module"`` fixture.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

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
