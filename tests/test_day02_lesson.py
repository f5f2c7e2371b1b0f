"""The day-2 lesson never shows an exercise's code, runs on synthetic recordings, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``): as committed, with the recordings
``course/data`` ships, then every cell that reads a recording runs again against synthetic ones,
and the claims its prose makes are checked: against the simulator, and against the recordings
``course/data`` ships.
"""

import math
import pathlib
import warnings

import nbformat
import numpy as np
import pytest
from numba import cuda

import course
from attention_fake_recordings import fake_recordings
from course.records import load_recording
from grader import markers
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSON = ROOT / "lessons" / "day02_lesson_naive_attention.ipynb"
SOLUTION = ROOT / "solutions" / "day02_naive_attention" / "day02_naive_attention.ipynb"


def _text(nb, outputs: bool) -> str:
    if not outputs:
        return "\n".join(c.source for c in nb.cells)
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts += [v for v in output.get("data", {}).values() if isinstance(v, str)]
    return "\n".join(parts)


def test_lesson_never_shows_the_exercise_kernels():
    lesson = nbformat.read(LESSON, as_version=4)
    solution = nbformat.read(SOLUTION, as_version=4)
    shown = {line.strip() for line in _text(lesson, outputs=False).splitlines()}
    leaked = [line for line in markers.secret_lines(solution, "solution") if line in shown]
    assert not leaked, f"the lesson shows solution lines: {leaked[:3]}"


def test_lesson_runs_with_recordings(tmp_path):
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    run = run_lesson(LESSON, fake_dir=tmp_path)
    shown = run.fake_text
    assert "Nsight measured" in shown and "compulsory traffic" in shown
    assert "recorded on Fake GPU" in shown and "torch SDPA" in shown and "takes the most" in shown
    solution = nbformat.read(SOLUTION, as_version=4)
    leaked = [line for line in markers.secret_lines(solution, "solution") if line in run.shipped_text + shown]
    assert not leaked, f"the lesson's outputs show solution lines: {leaked[:3]}"


@cuda.jit
def _exp_unshifted(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = math.exp(x[i])


def _run_exp(logit):
    x, out = np.array([2.0, logit], dtype=np.float32), np.zeros(2, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _exp_unshifted[1, 32](x, out)
    return out, caught


@pytest.mark.skipif(not course.on_simulator(), reason="checks what the simulator does")
def test_what_the_lesson_says_about_exp_overflow_on_the_simulator():
    """A logit of 100 gives inf with a warning; 1000 raises OverflowError (the lesson's max-simulator cell)."""
    out, caught = _run_exp(100.0)
    assert np.isinf(out[1]) and caught, "exp(100) stored as float32 should be inf, with a warning"
    with pytest.raises(OverflowError):
        _run_exp(1000.0)
    prose = _text(nbformat.read(LESSON, as_version=4), outputs=False)
    assert "a logit of 100 raises" not in prose.lower()
    assert "OverflowError" in prose and "709" in prose


def test_the_recorded_pipeline_supports_the_prose():
    """The lesson says the time goes to the scores and PV kernels, the softmax taking a small share."""
    timing = load_recording("day02_naive_timing")
    n_big = max(timing.distinct("N"))
    ms = {name: timing.one(kernel=name, N=n_big)["median_ms"]
          for name in ("scores_kernel", "softmax_rows_kernel", "pv_kernel")}
    pipeline = timing.one(rung="attention_v1_naive", N=n_big)["median_ms"]
    assert ms["softmax_rows_kernel"] < 0.1 * pipeline, (ms, pipeline)
    assert ms["scores_kernel"] > ms["softmax_rows_kernel"] and ms["pv_kernel"] > ms["softmax_rows_kernel"], ms
