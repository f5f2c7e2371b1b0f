"""The day-3 lesson never shows an exercise's code, runs on synthetic recordings, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``): as committed, with the recordings
``course/data`` ships, then every cell that reads a recording runs again against synthetic ones,
and the claims its prose makes are checked: by computing them, and against the recordings
``course/data`` ships.
"""

import math
import pathlib

import nbformat
import numpy as np

from attention_fake_recordings import fake_recordings
from course.checking import random_inputs
from course.records import load_recording
from grader import markers
from kernels import reference
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSON = ROOT / "lessons" / "day03_lesson_online_softmax.ipynb"
SOLUTION = ROOT / "solutions" / "day03_online_softmax" / "day03_online_softmax.ipynb"


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
    assert "Nsight, `attention_v2_fused_rows`" in shown and "Nsight, `attention_v1_naive`" in shown
    assert "recorded on Fake GPU" in shown and "torch SDPA" in shown and "online" in shown
    assert "speed-up over the naive pipeline" in shown
    solution = nbformat.read(SOLUTION, as_version=4)
    leaked = [line for line in markers.secret_lines(solution, "solution") if line in run.shipped_text + shown]
    assert not leaked, f"the lesson's outputs show solution lines: {leaked[:3]}"


def _softmax_without_rescale(row):
    """The classic bug of the knowledge check: the running sum is never rescaled."""
    m, total = -math.inf, 0.0
    for value in row:
        m = max(m, value)
        total += math.exp(value - m)
    return np.exp(np.asarray(row) - m) / total


def test_a_missing_rescale_makes_rows_sum_below_one():
    """What the knowledge check says: below 1 always, most of all on increasing rows (never about 1.3)."""
    rng, seed = random_inputs()
    for _ in range(50):
        row = rng.standard_normal(int(rng.integers(2, 40))) * 3
        assert _softmax_without_rescale(row).sum() <= 1 + 1e-12, f"seed {seed}: {row}"
        increasing = np.sort(row)
        assert (_softmax_without_rescale(increasing).sum()
                <= _softmax_without_rescale(row).sum() + 1e-12), f"seed {seed}: {row}"
    assert np.allclose(reference.softmax(np.arange(8.0)).sum(), 1.0)
    assert _softmax_without_rescale(np.arange(8.0)).sum() < 0.5
    prose = _text(nbformat.read(LESSON, as_version=4), outputs=False)
    assert "1.3" not in prose and "less than 1" in prose


def test_the_recorded_timings_support_the_prose():
    """The lesson says the fused rung's gain over the naive pipeline shrinks again at the longest N."""
    timing = load_recording("day03_fused_timing")
    ms = {key: row["median_ms"] for key, row in timing.by("rung", "N", causal=False).items()}
    sizes = [n for n in timing.distinct("N", rung="attention_v1_naive") if ("attention_v2_fused_rows", n) in ms]
    gain = {n: ms[("attention_v1_naive", n)] / ms[("attention_v2_fused_rows", n)] for n in sizes}
    assert max(gain, key=gain.get) < sizes[-1], gain
    assert all(ms[("attention_v2_fused_rows", n)] > 5 * ms[("torch_sdpa", n)] for n in sizes), "far from torch"
