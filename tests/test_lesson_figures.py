"""Every lesson runs top to bottom on the simulator, and every figure it draws can be read.

Each lesson is executed as committed, in a fresh kernel, with the recordings ``course/data`` holds.
A hook in the kernel looks at every figure a cell leaves open, before the cell's output is shown,
and fails the lesson on

- an axes with nothing drawn in it;
- a curve with no point inside the visible part of its axes (a log axis whose lower limit was set
  to 0 pushes every curve onto an edge);
- a log axis whose limits are not positive;
- a series drawn from a GPU recording whose axes or figure legend does not carry the recording's
  "recorded on <device> (<date>)" stamp.

Set ``LESSON_FIGURES_DIR`` to a folder to keep a PNG of every figure (named after lesson and cell).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("day*.ipynb"))
# Seconds one lesson may take on the simulator (2 CI cores), within its day's budget (pyproject.toml).
BUDGET_S = 120
REPORT = "FIGURE-CHECK-REPORT:"


# ----------------------------------------------------------------------------- checks of one figure

def _visible_points(line, ax) -> int:
    """How many of a line's points land inside the axes' drawing area, in display coordinates."""
    import numpy as np

    xy = np.column_stack([np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)])
    if xy.size == 0:
        return 0
    with np.errstate(all="ignore"):
        shown = line.get_transform().transform(xy)
        if line.get_linestyle() not in ("None", "none", "", " ") and len(shown) > 1:
            # A drawn segment counts where it crosses the frame, as a ceiling line from edge to edge does.
            steps = np.linspace(0.0, 1.0, 17)[:, None, None]
            shown = (shown[:-1] + steps * (shown[1:] - shown[:-1])).reshape(-1, 2)
    box = ax.bbox
    # Half a pixel inside the frame: a curve pinned to an edge is not a curve anyone can read.
    inside = ((shown[:, 0] > box.x0 + 0.5) & (shown[:, 0] < box.x1 - 0.5)
              & (shown[:, 1] > box.y0 + 0.5) & (shown[:, 1] < box.y1 - 0.5))
    return int(np.count_nonzero(inside & np.isfinite(shown).all(axis=1)))


def _legend_texts(ax) -> str:
    legends = [ax.get_legend()] + list(ax.figure.legends)
    parts = []
    for legend in legends:
        if legend is None:
            continue
        parts.append(legend.get_title().get_text())
        parts += [text.get_text() for text in legend.get_texts()]
    return "\n".join(parts)


def axes_problems(ax) -> list[str]:
    """What makes this axes unreadable, as sentences; empty when it is fine."""
    from course.plots import recording_stamp_of

    name = ax.get_title() or ax.get_ylabel() or "untitled axes"
    problems = []
    drawn = ax.lines + ax.collections + ax.images + ax.patches
    if not drawn:
        return [f"{name!r}: nothing is drawn in it"]
    for axis, limits, scale in (("x", ax.get_xlim(), ax.get_xscale()), ("y", ax.get_ylim(), ax.get_yscale())):
        if scale == "log" and not (min(limits) > 0 and all(math.isfinite(v) for v in limits)):
            problems.append(f"{name!r}: log {axis} axis with limits {limits}")
    for line in ax.lines:
        label = line.get_label()
        if len(line.get_xdata()) and not _visible_points(line, ax):
            problems.append(f"{name!r}: no point of {label!r} lies inside the visible range "
                            f"(x {ax.get_xlim()}, y {ax.get_ylim()}, {ax.get_yscale()} y)")
    stamps = {recording_stamp_of(artist) for artist in drawn} - {None}
    legends = _legend_texts(ax)
    for stamp in sorted(stamps):
        if stamp not in legends:
            problems.append(f"{name!r}: a series recorded on a GPU is drawn without the label {stamp!r}")
    return problems


def figure_problems(figure) -> list[str]:
    return [problem for ax in figure.axes if ax.get_visible() and ax.axison for problem in axes_problems(ax)]


# ----------------------------------------------------------------------------- the hook in the kernel

def install_hook(lesson: str, png_dir: str | None) -> None:
    """Check (and optionally save) every open figure after each cell, then close it.

    Runs inside the notebook's kernel: the Agg backend keeps ``plt.show()`` from closing figures
    before the hook sees them.
    """
    import matplotlib

    matplotlib.use("Agg")
    import warnings

    import matplotlib.pyplot as plt
    from IPython import get_ipython

    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    found = get_ipython().user_ns.setdefault("_figure_check_results", [])
    counter = {"cell": 0}

    def check_open_figures(result):
        counter["cell"] += 1
        for number in plt.get_fignums():
            figure = plt.figure(number)
            figure.canvas.draw()          # limits, ticks and legends as they would be shown
            found.append({"cell": counter["cell"], "figure": number, "axes": len(figure.axes),
                          "problems": figure_problems(figure)})
            if png_dir:
                figure.savefig(pathlib.Path(png_dir) / f"{lesson}_cell{counter['cell']:02d}_fig{number}.png", dpi=70)
        plt.close("all")

    get_ipython().events.register("post_run_cell", check_open_figures)


def execute_lesson(lesson_path: pathlib.Path, data_dir: pathlib.Path | None = None):
    """Run a lesson in a fresh kernel with every figure checked; return the executed notebook.

    data_dir: a folder of recordings that replaces ``course/data`` for this run (synthetic ones).
    Raises (AssertionError) on a cell that fails or on any figure that cannot be read.
    """
    nb = nbformat.read(lesson_path, as_version=4)
    png_dir = os.environ.get("LESSON_FIGURES_DIR")
    setup = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
             f"import test_lesson_figures\n"
             f"test_lesson_figures.install_hook({lesson_path.stem!r}, {png_dir!r})")
    if data_dir is not None:
        setup += f"\nimport course.records, pathlib\ncourse.records.DATA_DIR = pathlib.Path({str(data_dir)!r})"
    nb.cells.insert(0, nbformat.v4.new_code_cell(setup))
    nb.cells.append(nbformat.v4.new_code_cell(f"import json\nprint({REPORT!r} + json.dumps(_figure_check_results))"))
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(lesson_path.parent)}}).execute()
    elapsed = time.perf_counter() - start
    assert elapsed < BUDGET_S, f"{lesson_path.stem} took {elapsed:.0f} s on the simulator, over its {BUDGET_S} s budget"
    report = next(out.text for out in nb.cells[-1].outputs if out.get("text", "").startswith(REPORT))
    figures = json.loads(report[len(REPORT):])
    problems = [f"cell {f['cell']}, figure {f['figure']}: {p}" for f in figures for p in f["problems"]]
    assert not problems, f"{lesson_path.name}:\n" + "\n".join(problems)
    assert figures, f"{lesson_path.name} draws no figure at all"
    return nb


def output_text(nb) -> str:
    """Everything an executed notebook printed or displayed as text, one string."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            for value in output.get("data", {}).values():
                parts.append(value if isinstance(value, str) else "")
    return "\n".join(parts)


# Lessons whose day's own tests already run them as committed, with the shipped recordings (and so
# with every figure checked): each run costs half a minute of the day's budget.
SHIPPED_RUN_IN = {"day07_grouped_query_attention": "test_day07_lesson.py::test_lesson_runs_with_the_shipped_recordings",
                  "day08_mixed_precision": "test_day08_lesson.py::test_lesson_runs_with_the_shipped_recordings"}


@pytest.mark.parametrize("assignment", [path.stem for path in LESSONS if path.stem not in SHIPPED_RUN_IN])
def test_lesson_runs_and_every_figure_can_be_read(assignment):
    """As committed, with the recordings course/data ships: what a student sees without a GPU."""
    execute_lesson(ROOT / "lessons" / f"{assignment}.ipynb")


def test_the_lessons_run_elsewhere_are_run_there_with_the_shipped_recordings():
    for lesson, test in SHIPPED_RUN_IN.items():
        module, name = test.split("::")
        source = (ROOT / "tests" / module).read_text()
        body = source.split(f"def {name}(", 1)[1].split("\ndef ", 1)[0]
        assert "execute_lesson(LESSON" in body and 'ROOT / "course" / "data"' in body, (lesson, test)
        assert f'LESSON = ROOT / "lessons" / "{lesson}.ipynb"' in source or lesson in source, (lesson, test)


# ----------------------------------------------------------------------------- the checks catch what they should

@pytest.fixture
def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    yield pyplot
    pyplot.close("all")


def _recording(device="Fake GPU"):
    from course.records import Recording

    rec = Recording(name="day99_demo", device=device, driver="fake 1.0", versions={},
                    date="2025-11-22T10:00:00+00:00", ceilings={"copy_gbps": 3000.0, "fp32_tflops": 50.0})
    for n in (256, 1024, 4096):
        for rung, tflops in (("v1_naive", 0.05), ("v4_flash", 4.0), ("torch_sdpa", 20.0)):
            rec.add(rung=rung, N=n, tflops=tflops * n / 4096, median_ms=n / tflops / 1e3)
    return rec


def test_a_log_axis_whose_floor_is_zero_fails(plt):
    from course.plots import plot_timing

    ax = plot_timing(_recording(), y="tflops", log_y=True)
    ax.figure.canvas.draw()
    assert not axes_problems(ax)
    ax = plot_timing(_recording(), y="tflops")
    ax.set_ylim(0, 60)          # the old day-5 bug: a fixed linear floor of 0, then a log scale
    ax.set_yscale("log")
    ax.figure.canvas.draw()
    assert any("log y axis with limits" in p for p in axes_problems(ax))


def test_a_rate_plot_switched_to_log_afterwards_still_shows_every_curve(plt):
    from course.plots import plot_timing

    ax = plot_timing(_recording(), y="tflops")
    assert ax.get_ylim()[0] == 0
    ax.set_yscale("log")
    ax.figure.canvas.draw()
    assert ax.get_ylim()[0] > 0 and not axes_problems(ax)


def test_a_curve_pinned_to_the_floor_of_a_linear_axis_fails(plt):
    from course.plots import plot_timing

    ax = plot_timing(_recording(), y="tflops", log_y=False)   # 0.01 TFLOP/s against a 50 TFLOP/s ceiling
    ax.figure.canvas.draw()
    assert any("no point of 'v1_naive'" in p for p in axes_problems(ax))


def test_an_empty_axes_and_a_curve_out_of_range_fail(plt):
    _, (empty, off) = plt.subplots(1, 2)
    off.plot([1, 2, 3], [1, 2, 3], label="curve")
    off.set_xlim(10, 20)
    off.figure.canvas.draw()
    assert axes_problems(empty) == ["'untitled axes': nothing is drawn in it"]
    assert any("no point of 'curve'" in p for p in axes_problems(off))


def test_a_recorded_series_without_its_stamp_fails(plt):
    from course.plots import plot_traffic

    rec = _recording()
    ax = plot_traffic([256, 1024], {"model: v1_naive": [1e6, 1.6e7], "Nsight: v1_naive": [2e6, 3e7]},
                      recording=rec)
    ax.figure.canvas.draw()
    assert not axes_problems(ax)
    ax.legend(fontsize="small")     # the old day-5 bug: a new legend drops the "recorded on" title
    assert any("without the label 'recorded on Fake GPU (2025-11-22)'" in p for p in axes_problems(ax))
