"""Every lesson runs top to bottom on the simulator, and every figure it draws can be read.

Each lesson is executed as committed, in a fresh kernel, with the recordings ``course/data`` holds.
A hook in the kernel looks at every figure a cell leaves open, before the cell's output is shown,
and fails the lesson on

- an axes with nothing drawn in it;
- a curve with no point inside the visible part of its axes (a log axis whose lower limit was set
  to 0 pushes every curve onto an edge);
- a log axis whose limits are not positive;
- a series drawn from a GPU recording whose axes or figure legend does not carry the recording's
  "recorded on <device> (<date>)" stamp;
- two series of one axes a reader cannot tell apart (colours that look alike, drawn with the same line
  and marker: ``course.plots.look_alike``);
- a series hidden under another, every point of it covered (``course.plots.hidden_series``): its legend
  entry names something no one can see.

Set ``LESSON_FIGURES_DIR`` to a folder to keep a PNG of every figure (named after lesson and cell).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
import warnings
from dataclasses import dataclass

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("day*.ipynb"))
# Seconds one lesson may take on the simulator (2 CI cores), within its day's budget (pyproject.toml). As with the
# days' budgets (tests/conftest.py), a lesson over it is a warning, which --day-budget-strict turns into a failure:
# the time depends on the machine and on what the other worker runs beside it.
BUDGET_S = 120
REPORT = "FIGURE-CHECK-REPORT:"


def lesson_over_budget(stem: str, elapsed: float) -> str:
    """The warning of a lesson that ran longer than BUDGET_S (conftest's --day-budget-strict matches its words)."""
    return f"lesson {stem} took {elapsed:.0f} s on the simulator, over its {BUDGET_S} s budget"


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
    from course.plots import hidden_series, look_alike, recording_stamp_of

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
    for first, second in look_alike(ax):
        problems.append(f"{name!r}: {first!r} and {second!r} look alike (colours too close, same line and marker)")
    for hidden, above in hidden_series(ax):
        problems.append(f"{name!r}: {hidden!r} is drawn entirely under {above!r} and cannot be seen")
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
    """Check (and optionally save) every open figure after each cell, then close it; note each cell that
    reads a recording (any use of ``course.records.DATA_DIR``) by a hash of its source.

    Runs inside the notebook's kernel: the Agg backend keeps ``plt.show()`` from closing figures
    before the hook sees them. ``_watch_recordings(folder)`` in the kernel points ``DATA_DIR`` at another
    folder of recordings, still watched.
    """
    import matplotlib

    matplotlib.use("Agg")
    import warnings

    import matplotlib.pyplot as plt
    from IPython import get_ipython

    import course.records

    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    namespace = get_ipython().user_ns
    found = namespace.setdefault("_figure_check_results", [])
    reading = namespace.setdefault("_cells_reading_recordings", [])
    counter = {"cell": 0, "source": ""}

    class WatchedFolder(type(pathlib.Path())):
        """``course.records.DATA_DIR`` that notes the cell using it."""

        def _note(self):
            if counter["source"] not in reading:
                reading.append(counter["source"])

        def __truediv__(self, other):
            self._note()
            return pathlib.Path(self) / other

        def glob(self, pattern, *args, **kwargs):
            self._note()
            return pathlib.Path(self).glob(pattern, *args, **kwargs)

    def watch(folder) -> None:
        course.records.DATA_DIR = WatchedFolder(folder)

    namespace["_watch_recordings"] = watch
    watch(course.records.DATA_DIR)

    def note_cell(info):
        counter["source"] = _source_hash(info.raw_cell or "")

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

    get_ipython().events.register("pre_run_cell", note_cell)
    get_ipython().events.register("post_run_cell", check_open_figures)


def _source_hash(source: str) -> str:
    import hashlib

    return hashlib.sha256(source.encode()).hexdigest()


def _free_reads(node, local: frozenset = frozenset()) -> set[str]:
    """Names ``node`` reads that are not bound inside it: a function's arguments and locals, and a
    comprehension's or lambda's variables, are its own."""
    import ast

    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
              ast.GeneratorExp)
    if isinstance(node, scopes):
        inner = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        if not isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner |= {arg.arg for arg in ast.walk(node.args) if isinstance(arg, ast.arg)}
        local = local | inner
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return set() if node.id in local else {node.id}
    found = set()
    for child in ast.iter_child_nodes(node):
        found |= _free_reads(child, local)
    return found


def _bindings(source: str) -> tuple[set[str], set[str], dict[str, set[str]]]:
    """(names a cell binds at its top level, names it reads without binding them itself, and for each
    function or class it defines, the names its body reads)."""
    import ast

    from IPython.core.inputtransformer2 import TransformerManager

    tree = ast.parse(TransformerManager().transform_cell(source))
    bound, defined = set(), {}
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
              ast.DictComp, ast.GeneratorExp)

    def visit(node) -> None:          # the names bound at the cell's top level, not inside a scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            defined[node.name] = _free_reads(node)
            return
        if isinstance(node, scopes):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return bound, _free_reads(tree) - bound, defined


def cells_depending_on(cells: list[str], reading: set[int]) -> list[int]:
    """Indices of the cells to run again when the recordings change: each cell that reads one, and each
    later cell that reads a name one of those bound (and so on). A function or class such a cell
    defines counts as changed only where its body reads a changed name: a helper defined beside a
    recording is the same helper with other recordings."""
    changed: set[str] = set()
    again = []
    for index, source in enumerate(cells):
        bound, read, defined = _bindings(source)
        if index in reading or read & changed:
            again.append(index)
            changed |= bound - set(defined)
            for name, body_reads in defined.items():
                if body_reads & changed:
                    changed.add(name)
                else:
                    changed.discard(name)
        else:
            changed -= bound            # bound again from what the recordings do not change
    return again


@dataclass
class LessonRun:
    shipped: object             # the executed lesson, with the recordings course/data ships
    shipped_text: str           # everything it printed or displayed
    fake_text: str              # what the cells that depend on recordings showed, run again with the fakes
    rerun: list[str]            # the first line of each cell run again
    fake: object = None         # those cells, executed


def _report(cell) -> list:
    text = next(out.text for out in cell.outputs if out.get("text", "").startswith(REPORT))
    return json.loads(text[len(REPORT):])


def _figure_problems_of(figures) -> list[str]:
    return [f"cell {f['cell']}, figure {f['figure']}: {p}" for f in figures for p in f["problems"]]


def run_lesson(lesson_path: pathlib.Path, fake_dir: pathlib.Path | None = None) -> LessonRun:
    """Run a lesson top to bottom in a fresh kernel with the shipped recordings, every figure checked; then,
    in the same kernel, run again with the recordings of ``fake_dir`` each cell that reads a recording and
    each later cell that uses what those computed (``cells_depending_on``), figures checked again. One
    run of the lesson covers both sets of recordings.

    Raises (AssertionError) on a cell that fails or on any figure that cannot be read.
    """
    nb = nbformat.read(lesson_path, as_version=4)
    png_dir = os.environ.get("LESSON_FIGURES_DIR")
    setup = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
             f"import test_lesson_figures\n"
             f"test_lesson_figures.install_hook({lesson_path.stem!r}, {png_dir!r})")
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code" and cell.source.strip()]
    report = f"import json\nprint({REPORT!r} + json.dumps([_figure_check_results, _cells_reading_recordings]))"
    nb.cells.insert(0, nbformat.v4.new_code_cell(setup))
    nb.cells.append(nbformat.v4.new_code_cell(report))
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(lesson_path.parent)}})
    start = time.perf_counter()
    fake_text, rerun, fake = "", [], None
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        figures, reading = _report(nb.cells[-1])
        problems = _figure_problems_of(figures)
        assert not problems, f"{lesson_path.name}:\n" + "\n".join(problems)
        assert figures, f"{lesson_path.name} draws no figure at all"
        if fake_dir is not None:
            reading = set(reading)
            again = cells_depending_on(sources, {i for i, s in enumerate(sources) if _source_hash(s) in reading})
            assert again, f"{lesson_path.name}: no cell reads a recording"
            cells = [nbformat.v4.new_code_cell(f"_figure_check_results.clear()\n_watch_recordings({str(fake_dir)!r})")]
            cells += [nbformat.v4.new_code_cell(sources[i]) for i in again]
            cells.append(nbformat.v4.new_code_cell(report))
            first = len(nb.cells)
            nb.cells.extend(cells)                 # nbclient stores each result in the notebook it runs
            for offset, cell in enumerate(cells):
                client.execute_cell(cell, first + offset)
            del nb.cells[first:]
            problems = _figure_problems_of(_report(cells[-1])[0])
            assert not problems, f"{lesson_path.name} with the recordings of {fake_dir}:\n" + "\n".join(problems)
            fake = nbformat.v4.new_notebook(cells=cells[1:-1])
            fake_text = output_text(fake)
            rerun = [sources[i].splitlines()[0] for i in again]
    elapsed = time.perf_counter() - start
    if elapsed >= BUDGET_S:
        warnings.warn(lesson_over_budget(lesson_path.stem, elapsed))
    return LessonRun(nb, output_text(nb), fake_text, rerun, fake)


def output_text(nb) -> str:
    """Everything an executed notebook printed or displayed as text, one string."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            for value in output.get("data", {}).values():
                parts.append(value if isinstance(value, str) else "")
    return "\n".join(parts)


def test_every_lesson_is_run_by_its_day_s_tests():
    """Each day's lesson tests run its lesson once (``run_lesson``): with the shipped recordings and, for the
    cells that depend on them, with synthetic ones."""
    for lesson in LESSONS:
        test = ROOT / "tests" / f"test_{lesson.stem[:5]}_lesson.py"
        assert test.is_file(), f"{lesson.name} has no tests/{test.name} to run it"
        source = test.read_text()
        assert "run_lesson(LESSON" in source and f'"{lesson.stem}' in source, f"{test.name} does not run {lesson.name}"


def test_a_cell_that_uses_what_a_recording_cell_computed_runs_again():
    cells = ["import numpy as np\nsizes = [1, 2]",              # 0: reads no recording
             "rec = live_else_recorded('x')\nbest = rec.rows[0]",  # 1: reads one
             "print(best)",                                       # 2: uses what 1 computed
             "best = 3\nprint(best)",                             # 3: binds it again first
             "print(best, sizes)",                                # 4: 3's value
             "def show(r):\n    print(r)",                        # 5
             "show(rec)",                                         # 6: uses 1's rec
             "%matplotlib inline\nshow(sizes)",                  # 7: a magic, and nothing of 1
             "def run(x):\n    return x\nceiling = live_else_recorded('y')",  # 8: reads one, defines a helper
             "print(run(sizes))",                                 # 9: the helper does not change
             "def scaled(x):\n    return x * len(rec.rows)\nprint(ceiling)",  # 10: 8's ceiling; a helper reading 1's rec
             "print(scaled(2))"]                                  # 11: rec changed, so did scaled
    assert cells_depending_on(cells, {1, 8}) == [1, 2, 6, 8, 10, 11]


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


def test_series_that_look_alike_fail_until_told_apart(plt):
    from course.plots import add_legend

    _, ax = plt.subplots()
    for step, (label, colour) in enumerate((("rung a", "#2ca02c"), ("rung b", "#66a61e"), ("rung c", "#1f77b4"))):
        ax.plot([1, 2, 3], [1, 2 + step, 3 + 2 * step], color=colour, marker="o", label=label)   # two greens
    ax.plot([1, 2, 3], [3, 2, 1], color="#2ca02c", linestyle="--", marker="", label="model of rung a")
    ax.figure.canvas.draw()
    assert [p for p in axes_problems(ax) if "look alike" in p] == [
        "'untitled axes': 'rung a' and 'rung b' look alike (colours too close, same line and marker)"]
    add_legend(ax)                  # the course's legend gives the second green a marker of its own
    assert ax.lines[1].get_marker() != ax.lines[0].get_marker() and not axes_problems(ax)


def test_a_series_drawn_under_another_fails(plt):
    _, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 4, 9], "s", markersize=5, label="under")
    ax.plot([1, 2, 3], [1, 4, 9], "s", markersize=7, label="above")
    ax.plot([1, 2, 3], [2, 5, 10], "o", markersize=7, fillstyle="none", label="hollow, elsewhere")
    ax.plot([1, 2, 3], [2, 5, 10], "o", markersize=4, label="inside the hollow one")
    ax.figure.canvas.draw()
    assert [p for p in axes_problems(ax) if "cannot be seen" in p] == [
        "'untitled axes': 'under' is drawn entirely under 'above' and cannot be seen"]
    from course.plots import add_legend

    ax.plot([1, 2, 3], [5, 6, 7], "-", color="C3", label="a line")
    ax.plot([1, 2, 3], [5, 6, 7], "-", color="C4", label="the same line on top")
    add_legend(ax)                  # the course's legend draws what lies on top hollow, or dashed
    ax.figure.canvas.draw()
    assert ax.lines[1].get_fillstyle() == "none" and ax.lines[5].get_linestyle() == "--"
    assert not axes_problems(ax)
