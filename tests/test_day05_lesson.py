"""Day 5 lesson: it never shows the kernel the exercise asks for, and its prose holds.

The lesson runs once (``test_lesson_figures.run_lesson``): as committed, with the recordings
``course/data`` ships, then the cells that read a recording again against synthetic ones, so that the
timing and Nsight cells run with other data too,
and the claims its prose makes are checked against the recordings ``course/data`` ships.
"""

import inspect
import io
import pathlib
import tokenize

import nbformat

from course.models import attention as model
from course.records import load_recording
from day05_fake_recordings import fake_recordings
from grader import markers
from kernels import flash_attention
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day05_flash_attention"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"
LESSON = ROOT / "lessons" / "day05_lesson_flash_attention.ipynb"
EXERCISE_KERNEL = "attention_v4_flash"


def exercise_only_lines() -> list[str]:
    """Solution lines of the v4 kernel that rung v3 (which the lesson shows) does not have.

    Short generic lines (``if causal:``, which the lesson's NumPy code has too) are left out.
    """
    solution = nbformat.read(SOLUTION, as_version=4)
    v3_source = inspect.getsource(flash_attention.attention_v3_tiled_kernel.py_func)
    v3 = {line.split("  #")[0].strip() for line in v3_source.splitlines()}  # code, trailing comments aside
    return [line for line in markers.secret_lines(solution, "solution") if line not in v3 and len(line) > 12]


def code_names(source: str) -> set[str]:
    """The names a cell's code uses (not its strings: a recording names the rung it timed, a label, not a call)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    return {token.string for token in tokens if token.type == tokenize.NAME}


def test_lesson_never_shows_the_exercise_kernel():
    lesson = nbformat.read(LESSON, as_version=4)
    used = set().union(*(code_names(c.source) for c in lesson.cells if c.cell_type == "code"))
    assert EXERCISE_KERNEL not in used, "the lesson's code uses the rung the exercise asks for"
    assert {"attention_v3_tiled", "attention_v5_flash_registers"} <= used    # the names are read
    text = "\n".join(c.source for c in lesson.cells)
    assert exercise_only_lines(), "the v4 kernel should differ from v3"
    leaked = [line for line in exercise_only_lines() if line in text]
    assert not leaked, f"the lesson shows lines of the exercise's kernel: {leaked[:3]}"


def test_the_recordings_support_the_prose():
    """What the lesson's text says about the H100 numbers: B_c is defined before use, the register count
    it promises is recorded, causal time lands above half, v3 gains far less than B_r over v2, v3's
    DRAM bytes exceed its model while v5's come near the compulsory bytes, and v5 needs more registers."""
    lesson = nbformat.read(LESSON, as_version=4)
    text = [c.source for c in lesson.cells]
    first_use = next(i for i, cell in enumerate(text) if "B_c" in cell)
    assert "$B_c$" in text[first_use] and "TILE_KV" in text[first_use], "B_c is used before it is defined"
    assert any("print(f\"REGISTERS_PER_THREAD" in cell for cell in text), "REGISTERS_PER_THREAD is promised, never shown"

    timing = load_recording("day05_flash_timing")
    n_big = max(timing.distinct("N"))
    ms = {key: r["median_ms"] for key, r in timing.by("rung", "causal", N=n_big).items()}
    assert 0.5 < ms["attention_v4_flash", True] / ms["attention_v4_flash", False] < 0.75, ms
    assert ms["attention_v2_fused_rows", False] / ms["attention_v3_tiled", False] < flash_attention.TILE_Q / 4, ms
    nsight = load_recording("day05_dram_bytes")
    n = max(nsight.distinct("N"))
    dram = {label: r["dram_bytes"] / 64 for label, r in nsight.by("label", N=n, causal=False).items()}
    assert dram["attention_v3_tiled"] > model.bytes_flash(1, 1, n, 64, flash_attention.TILE_Q)
    assert dram["attention_v5_flash_registers"] < 2 * model.compulsory_bytes_fused(1, 1, n, 64)
    registers = {rung: r["registers"] for rung, r in load_recording("day05_kernel_resources").by("rung").items()}
    assert registers["attention_v5_flash_registers"] > registers["attention_v4_flash"]


def test_lesson_runs_with_recordings_and_shows_no_solution(tmp_path):
    for rec in fake_recordings():
        rec.save(tmp_path / f"{rec.name}.json")
    run = run_lesson(LESSON, fake_dir=tmp_path)
    shown = run.fake_text
    assert "recorded on Fake GPU" in shown and "of torch SDPA fp32" in shown
    assert "No recording" not in shown and "REGISTERS_PER_THREAD = 50" in shown
    assert "At head_dim 128 (B=4, H=16, N = 4,096; recorded on Fake GPU" in shown
    assert "0.67 of torch SDPA fp32 full (30.0 TFLOP/s) and 0.70 of torch SDPA fp32 causal" in shown
    assert "At head_dim 128 (B=4, H=16, N = 4,096; recorded on NVIDIA" in run.shipped_text
    leaked = [line for line in exercise_only_lines() if line in run.shipped_text + shown]
    assert not leaked, f"the lesson's outputs show lines of the exercise's kernel: {leaked[:3]}"

