"""Timing, traffic and roofline plots with one look across the course.

- :func:`plot_timing` draws a Recording: one line per rung against a size, the torch baseline
  dashed, the measured ceiling dotted, and a legend that says where the numbers come from
  ("recorded on <device> (<date>)" or "live on <device>").
- :func:`plot_traffic` draws bytes moved four ways: ``"model: attention_v1_naive"`` (the analytic model),
  ``"counted: your kernel"`` (the simulator's counter), ``"Nsight: attention_v1_naive"`` (recorded DRAM bytes)
  and ``"compulsory: ..."`` (the least any version must move, dotted).
- :func:`plot_roofline` places kernels under the copy-bandwidth and fp32-matmul roofs.

A rung keeps its colour in every plot: ``v1_...`` is the first colour, ``v2_...`` the second, and
so on; torch is dark grey and dashed, "your kernel" red. Every function returns its Axes.

Log scales are safe both ways: a rate axis starts at 0 through its data limits, not through a fixed
``set_ylim(0, ...)``, so ``ax.set_yscale("log")`` afterwards (or ``log_y=True``) still shows every
curve. Every line drawn from a Recording remembers the recording's stamp
(:func:`recording_stamp_of`), and the legend that the plot functions build carries that stamp;
add a curve with :func:`add_legend` rather than ``ax.legend()``, which would drop it.
"""

from __future__ import annotations

import re

from course.records import Recording, where as _where

__all__ = ["plot_timing", "plot_traffic", "plot_roofline", "rung_colour", "add_legend", "recording_stamp_of",
           "distinguish", "look_alike", "hidden_series", "colour_distance", "STYLE"]

STYLE = {
    "figsize": (6.4, 4.0),
    "rungs": ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"),
    "others": ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#a6761d"),
    "yours": "#d62728",
    "line": {"linewidth": 1.8, "marker": "o", "markersize": 4},
    "baseline": {"color": "0.2", "linestyle": "--", "linewidth": 1.8, "marker": ""},
    "ceiling": {"color": "0.45", "linestyle": ":", "linewidth": 1.3},
    "sources": {  # traffic: how each source of byte counts is drawn
        "model": {"linestyle": "-", "marker": "", "linewidth": 1.6, "alpha": 0.85},
        "counted": {"linestyle": "none", "marker": "o", "markersize": 6, "fillstyle": "none"},
        "nsight": {"linestyle": "none", "marker": "s", "markersize": 5},
        "compulsory": {"linestyle": ":", "marker": "", "linewidth": 1.5},
    },
    "grid": {"alpha": 0.3, "linewidth": 0.6},
    "legend": {"fontsize": "small", "title_fontsize": "small", "frameon": False},
}
Y_LABELS = {"tflops": "TFLOP/s", "gbps": "GB/s", "useful_gbps": "useful GB/s",
            "median_ms": "time per call (ms, median)"}
X_LABELS = {"N": "sequence length N", "M": "rows M", "K": "inner dimension K", "d": "head_dim d",
            "batch": "batch size", "context_len": "context length"}

_VERSION = re.compile(r"(?:^|[_\s:])v(\d+)(?:$|[_\s])")
_assigned: dict[str, str] = {}
_STAMP_ATTRIBUTE = "_course_recording_stamp"
_LEGEND_TITLE_ATTRIBUTE = "_course_legend_title"


def recording_stamp_of(artist) -> str | None:
    """The stamp of the Recording an artist was drawn from (``recorded on ...``), else None."""
    return getattr(artist, _STAMP_ATTRIBUTE, None)


def _mark_recorded(artists, recording) -> None:
    if recording is not None and not recording.live:
        for artist in artists:
            setattr(artist, _STAMP_ATTRIBUTE, recording.stamp)


def _is_baseline(label: str) -> bool:
    low = label.lower()
    return low.startswith("torch") or "baseline" in low


def rung_colour(label: str) -> str:
    """The colour of a rung in every plot: by its version number ``vN``, else fixed at first use."""
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    rung = label.split(":", 1)[-1].strip()
    if _is_baseline(rung):
        return STYLE["baseline"]["color"]
    if "your" in rung.lower():
        return STYLE["yours"]
    match = _VERSION.search(rung)
    if match:
        return STYLE["rungs"][(int(match.group(1)) - 1) % len(STYLE["rungs"])]
    if rung not in _assigned:
        _assigned[rung] = STYLE["others"][len(_assigned) % len(STYLE["others"])]
    return _assigned[rung]


def _series_style(label: str) -> dict:
    if _is_baseline(label):
        return dict(STYLE["baseline"])
    return {**STYLE["line"], "color": rung_colour(label)}


# Two colours closer than this (CIELAB distance) read as one colour in a legend: the greens of the two
# palettes above are 16 apart, their oranges 14, purples 17, pinks 30; blue and orange are 122.
CLOSE_COLOURS = 31.0
# Markers given, in order, to a series whose colour looks like an earlier one's in the same axes.
SPARE_MARKERS = ("s", "^", "D", "v", "P", "X", "<", ">")


def colour_distance(a, b) -> float:
    """How far apart two matplotlib colours look: the Euclidean distance in CIELAB (1976)."""
    from matplotlib.colors import to_rgb

    def lab(colour):
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
        r, g, b_ = linear
        xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b_) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b_,
               (0.0193 * r + 0.1192 * g + 0.9505 * b_) / 1.08883)
        f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz]
        return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])

    return sum((p - q) ** 2 for p, q in zip(lab(a), lab(b))) ** 0.5


def _labelled(ax) -> list:
    """The lines of ``ax`` a legend names (labels not starting with an underscore), in drawing order."""
    return [line for line in ax.lines if not str(line.get_label()).startswith("_") and line.get_visible()]


def _look(line) -> tuple:
    marker = line.get_marker()
    return (line.get_linestyle() if line.get_linestyle() not in ("", " ", "none") else "None",
            marker if marker not in ("", " ", None, "none") else "None")


def look_alike(ax) -> list[tuple[str, str]]:
    """Pairs of series of ``ax`` a reader cannot tell apart: colours closer than ``CLOSE_COLOURS`` drawn
    with the same line style and the same marker."""
    lines = _labelled(ax)
    return [(a.get_label(), b.get_label()) for i, a in enumerate(lines) for b in lines[i + 1:]
            if _look(a) == _look(b) and colour_distance(a.get_color(), b.get_color()) < CLOSE_COLOURS]


def distinguish(ax) -> None:
    """Make every series of ``ax`` one a reader can find: a series that looks like an earlier one
    (``look_alike``) gets a marker of its own, and a series drawn over another that it would hide entirely
    (``hidden_series``: two rungs with the same numbers) is drawn hollow and larger, or dashed, so the one
    under it shows through. Colours stay those of the rungs."""
    _mark_look_alikes(ax)
    lines = {line.get_label(): line for line in _labelled(ax)}
    for _ in range(len(lines)):
        found = hidden_series(ax)
        if not found:
            break
        for _, above in found:
            top = lines[above]
            if _look(top)[1] != "None":
                top.set_fillstyle("none")
                top.set_markersize(top.get_markersize() + 3)
                top.set_markeredgewidth(max(1.5, top.get_markeredgewidth()))
            if _look(top)[0] != "None":
                top.set_linestyle("--" if top.get_linestyle() == "-" else ":")


def _mark_look_alikes(ax) -> None:
    lines = _labelled(ax)
    for i, line in enumerate(lines):
        clashes = [other for other in lines[:i] if _look(other) == _look(line)
                   and colour_distance(other.get_color(), line.get_color()) < CLOSE_COLOURS]
        if not clashes:
            continue
        taken = {_look(other)[1] for other in lines[:i]
                 if colour_distance(other.get_color(), line.get_color()) < CLOSE_COLOURS}
        spare = next((m for m in SPARE_MARKERS if m not in taken), None)
        if spare is not None:
            line.set_marker(spare)
            if line.get_markersize() < 4:
                line.set_markersize(4)


def hidden_series(ax, pixels: float = 1.0) -> list[tuple[str, str]]:
    """``(hidden, above)`` pairs: a series of ``ax`` every point of which is drawn under a point of a series
    drawn above it (later, or at a higher zorder), with a marker at least as large and filled, and a line at
    least as wide where the hidden one has a line: its legend entry names something no one can see."""
    import numpy as np

    def points(line):
        xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
        with np.errstate(all="ignore"):
            shown = line.get_transform().transform(xy) if len(xy) else xy
        return shown[np.isfinite(shown).all(axis=1)] if len(shown) else shown

    def covers(top, under) -> bool:
        top_style, under_style = _look(top), _look(under)
        if under_style[1] != "None":
            if top_style[1] == "None":
                return False
            if top.get_fillstyle() == "none":      # a ring hides only the same ring under it
                if not (under.get_fillstyle() == "none" and top_style[1] == under_style[1]
                        and abs(top.get_markersize() - under.get_markersize()) < 1):
                    return False
            elif top.get_markersize() < under.get_markersize():
                return False
        if under_style[0] != "None" and (top_style[0] in ("None", "--", ":", "-.")
                                         or top.get_linewidth() < under.get_linewidth()):
            return False        # no line on top, or a broken one: the line under it shows
        p, q = points(under), points(top)
        if not len(p) or not len(q):
            return False
        distance = np.sqrt(((p[:, None, :] - q[None, :, :]) ** 2).sum(axis=2)).min(axis=1)
        return bool((distance <= pixels).all())

    ax.get_xlim(), ax.get_ylim()        # the limits as drawn, so the points land where a reader sees them
    lines = _labelled(ax)
    order = sorted(range(len(lines)), key=lambda i: (lines[i].get_zorder(), i))
    found = []
    for rank, i in enumerate(order):
        for j in order[rank + 1:]:
            if covers(lines[j], lines[i]):
                found.append((lines[i].get_label(), lines[j].get_label()))
                break
    return found


def _new_axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=STYLE["figsize"], layout="constrained")
    return ax


def _finish(ax, xlabel: str, ylabel: str, title: str | None, legend_title: str | None) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="major", **STYLE["grid"])
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    setattr(ax, _LEGEND_TITLE_ATTRIBUTE, legend_title)
    add_legend(ax)


def add_legend(ax, **options):
    """Redraw the legend of ``ax`` (after adding a curve) and keep the title a plot function gave it; a
    series whose colour looks like an earlier one's gets a marker of its own first (``distinguish``).

    The title says where recorded numbers come from; ``ax.legend()`` alone would drop it.
    options: passed to ``ax.legend`` (``ncols=2``, ``loc=...``) over the course's legend style.
    """
    title = options.pop("title", getattr(ax, _LEGEND_TITLE_ATTRIBUTE, None))
    distinguish(ax)
    return ax.legend(title=title, **{**STYLE["legend"], **options})


def _floor_at_zero(ax, lines, x) -> None:
    """Start a linear y axis at 0 through the data limits, so that a log scale still autoscales."""
    ax.update_datalim([(x, 0.0)], updatex=False)
    for line in lines:
        line.sticky_edges.y.append(0.0)
    ax.autoscale_view()


def _plain_ticks(axis) -> None:
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))


def _auto_log(ax, xs, ys=(), log_y: bool = True) -> None:
    """Log axes where positive values span a decade or more (sizes in base 2, plain numbers)."""
    xs = [v for v in xs if v > 0]
    ys = [v for v in ys if v > 0]
    if xs and max(xs) / min(xs) >= 8:
        ax.set_xscale("log", base=2)
        _plain_ticks(ax.xaxis)
    if log_y and ys and max(ys) / min(ys) >= 30:
        ax.set_yscale("log")


def plot_timing(rec: Recording, x: str = "N", y: str = "tflops", series: str | tuple = "rung", ax=None,
                title: str | None = None, where: dict | None = None, log_y: bool | None = None):
    """Plot ``y`` against ``x`` for every value of ``series`` in a Recording's rows.

    series: the column whose values name the curves (the rung, as the registry names it), or a tuple of
        columns, e.g. ``("rung", "fmt")``: one curve per pair, labelled ``"gqa_decode_page_runs, float16"``.
    where: keep only rows with these values, e.g. ``{"d": 64, "causal": True}``; a tuple or set of
        values keeps rows with any of them (``course.records.where``).
    log_y: True for a log y axis (rungs that span orders of magnitude), False for linear; None
        chooses: times on a log axis when they span a decade and more, rates (GB/s, TFLOP/s)
        linear from 0, read as a fraction of the ceiling.
    Rows without ``x`` or ``y`` are skipped; torch rows (``series`` value starting with "torch")
    are the dashed baseline. With ``y="gbps"`` or ``"tflops"`` the recording's ceiling is drawn.
    """
    if not isinstance(rec, Recording):
        raise TypeError(f"rec must be a Recording (course.records), got {type(rec).__name__}")
    named = (series,) if isinstance(series, str) else tuple(series) if isinstance(series, (tuple, list)) else None
    for arg, value in (("x", x), ("y", y)) + tuple(("series", c) for c in named or (None,)):
        if not isinstance(value, str):
            raise TypeError(f"{arg} must be a column name (str), got {value!r}")
    where = {} if where is None else where
    if not isinstance(where, dict):
        raise TypeError(f"where must be a dict of column -> value, got {type(where).__name__}")
    if log_y not in (None, True, False):
        raise TypeError(f"log_y must be True, False or None (choose), got {log_y!r}")
    groups: dict[str, list] = {}
    for row in _where(rec, **where):
        if row.get(x) is not None and row.get(y) is not None:
            label = ", ".join(str(row[c]) for c in named if row.get(c) is not None) or "?"
            groups.setdefault(label, []).append(row)
    if not groups:
        columns = sorted({k for row in rec.rows for k in row})
        raise ValueError(f"no rows of {rec.name!r} have both {x!r} and {y!r}"
                         f"{' and match ' + repr(where) if where else ''}; columns: {columns}")
    ax = _new_axes(ax)
    all_x, all_y, drawn = [], [], []
    ordered = sorted(groups, key=lambda label: (_is_baseline(label), list(groups).index(label)))
    for label in ordered:
        rows = sorted(groups[label], key=lambda r: r[x])
        xs, ys = [r[x] for r in rows], [r[y] for r in rows]
        drawn += ax.plot(xs, ys, label=label, **_series_style(label))
        if y == "median_ms" and all("p10_ms" in r and "p90_ms" in r for r in rows):
            drawn.append(ax.fill_between(xs, [r["p10_ms"] for r in rows], [r["p90_ms"] for r in rows],
                                         color=_series_style(label)["color"], alpha=0.15, linewidth=0))
        all_x += xs
        all_y += ys
    ceiling = {"gbps": ("copy_gbps", "copy ceiling {:,.0f} GB/s"),
               "tflops": ("fp32_tflops", "fp32 matmul ceiling {:,.1f} TFLOP/s")}.get(y)
    if ceiling and rec.ceilings.get(ceiling[0]):
        value = rec.ceilings[ceiling[0]]
        drawn.append(ax.axhline(value, label=ceiling[1].format(value), **STYLE["ceiling"]))
        all_y.append(value)
    _mark_recorded(drawn, rec)
    rate = y in ("gbps", "tflops", "useful_gbps")
    # Times span decades (log); rates are read as a fraction of the ceiling (linear, from 0).
    _auto_log(ax, all_x, all_y, log_y=not rate if log_y is None else False)
    if log_y:
        ax.set_yscale("log")
    elif rate and not ax.get_yscale() == "log":
        _floor_at_zero(ax, drawn, min(all_x))
    _finish(ax, X_LABELS.get(x, x), Y_LABELS.get(y, y), title, rec.stamp)
    return ax


def _format_bytes(value: float, _pos=None) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:g} {unit}"
    return f"{value:g} B"


def plot_traffic(sizes, series: dict, ax=None, x: str = "N", title: str | None = None,
                 recording=None):
    """Plot bytes moved against size, one series per ``"<source>: <rung>"`` label.

    sizes: the x values (e.g. sequence lengths).
    series: label -> list of bytes, one per size (None where not measured). The source before
        the colon sets the marker (model: line, counted: hollow circles, Nsight: squares), the
        rung after it the colour.
        ``"compulsory: Q, K, V, O once"`` draws a dotted bound (grey unless it names a rung).
    recording: the Recording the Nsight numbers come from (or a list of them, when the rungs were
        recorded separately); the legend then says so.
    """
    sizes = list(sizes) if not isinstance(sizes, (str, bytes)) else None
    if not sizes or not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in sizes):
        raise TypeError("sizes must be a non-empty list of numbers")
    if not isinstance(series, dict) or not series:
        raise TypeError("series must be a non-empty dict of label -> list of bytes")
    for label, values in series.items():
        if not isinstance(label, str) or len(list(values)) != len(sizes):
            raise ValueError(f"series[{label!r}] must have one value per size ({len(sizes)}), "
                             f"got {len(list(values))}")
    recordings = [] if recording is None else [recording] if isinstance(recording, Recording) else list(recording)
    if not all(isinstance(rec, Recording) for rec in recordings):
        raise TypeError(f"recording must be a Recording, a list of them, or None, got {recording!r}")
    stamps = list(dict.fromkeys(rec.stamp for rec in recordings))
    from matplotlib.ticker import FuncFormatter

    ax = _new_axes(ax)
    all_y = []
    for label, values in series.items():
        points = [(s, v) for s, v in zip(sizes, values) if v is not None]
        if not points:
            continue
        source = label.split(":", 1)[0].strip().lower() if ":" in label else ""
        colour = rung_colour(label)
        if source == "compulsory" and not _VERSION.search(label.split(":", 1)[-1]):
            colour = STYLE["ceiling"]["color"]       # a bound of the operation, not of one rung
        style = {**STYLE["line"], **STYLE["sources"].get(source, {}), "color": colour}
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], label=label, **style)
        if source == "nsight" and stamps and not all(rec.live for rec in recordings):
            setattr(line, _STAMP_ATTRIBUTE, "; ".join(stamps))
        all_y += [p[1] for p in points]
    _auto_log(ax, sizes, all_y)
    ax.yaxis.set_major_formatter(FuncFormatter(_format_bytes))
    stamp = f"Nsight {'; '.join(stamps)}" if stamps else None
    _finish(ax, X_LABELS.get(x, x), "global memory traffic", title, stamp)
    return ax


def plot_roofline(points, ceilings, ax=None, title: str | None = None,
                  recording: Recording | None = None):
    """Place kernels under the roofs of memory bandwidth and fp32 compute.

    points: list of ``{"label": str, "intensity": FLOP per byte, "tflops": achieved TFLOP/s}``.
    ceilings: ``{"copy_gbps": ..., "fp32_tflops": ...}`` or a Recording (its ceilings and stamp).
    """
    if isinstance(ceilings, Recording):
        recording = recording or ceilings
        ceilings = ceilings.ceilings
    if not isinstance(ceilings, dict):
        raise TypeError(f"ceilings must be a dict or a Recording, got {type(ceilings).__name__}")
    for key in ("copy_gbps", "fp32_tflops"):
        value = ceilings.get(key)
        if not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"ceilings[{key!r}] must be a positive number, got {value!r}")
    if not isinstance(points, (list, tuple)) or not points:
        raise TypeError("points must be a non-empty list of {'label', 'intensity', 'tflops'} dicts")
    for i, p in enumerate(points):
        if not isinstance(p, dict) or not isinstance(p.get("label"), str) or not all(
                isinstance(p.get(k), (int, float)) and p[k] > 0 for k in ("intensity", "tflops")):
            raise ValueError(f"points[{i}] must have a str 'label' and positive 'intensity' and "
                             f"'tflops', got {p!r}")
    bandwidth_tb = ceilings["copy_gbps"] / 1000.0   # TB/s times FLOP/byte is TFLOP/s
    peak = ceilings["fp32_tflops"]
    ridge = peak / bandwidth_tb
    intensities = [p["intensity"] for p in points]
    lo = min(min(intensities), ridge) / 4
    hi = max(max(intensities), ridge) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax = _new_axes(ax)
    roof = ax.plot(xs, [min(peak, bandwidth_tb * v) for v in xs], label=(
        f"roof: copy {ceilings['copy_gbps']:,.0f} GB/s, fp32 {peak:,.1f} TFLOP/s"),
        **{**STYLE["ceiling"], "linestyle": "-"})
    _mark_recorded(roof, recording)
    ax.axvline(ridge, **STYLE["ceiling"])
    ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, peak), textcoords="offset points",
                xytext=(4, -12), fontsize="x-small", color=STYLE["ceiling"]["color"])
    for p in points:
        drawn = ax.plot([p["intensity"]], [p["tflops"]], label=p["label"],
                        **{**_series_style(p["label"]), "linestyle": "none", "marker": "o", "markersize": 7})
        _mark_recorded(drawn, recording)
    ax.set_xscale("log", base=2)
    _plain_ticks(ax.xaxis)
    ax.set_yscale("log")
    low_y = min(min(p["tflops"] for p in points), bandwidth_tb * lo)
    ax.set_ylim(low_y / 2, peak * 2)
    stamp = recording.stamp if recording is not None else None
    _finish(ax, "arithmetic intensity (FLOP/byte)", "TFLOP/s", title, stamp)
    return ax

