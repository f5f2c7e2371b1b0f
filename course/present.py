"""What lessons show, generated from code and data so the text always matches them.

::

    markdown_table(["N", "bytes"], [[1024, "4.2 MB"], [4096, "67 MB"]])      # displays in a notebook
    markdown_table(["kernel", "ms"], rows, align="lr", caption="Recorded on ...")

    # the series of a traffic plot (course.plots.plot_traffic), one value per size or None:
    counted_series(attention_v3_tiled, sizes, inputs, upto=128)   # bytes the simulator counts
    recorded_series(nsight, "attention_v3_tiled", sizes, per=64)  # DRAM bytes Nsight measured, per head

Numbers are formatted with thousands separators (integers) or 4 significant digits (floats);
strings are kept as given, so a cell can carry its own format (``f"{x:.2f}x"``) or Markdown.
"""

from __future__ import annotations

import numbers

__all__ = ["markdown_table", "format_cell", "counted_series", "recorded_series", "across_gpus_table",
           "FOLLOWS_COPY"]

# A step "follows the copy bandwidth" from one GPU to another when it gains at least this share of what the copy
# gained (the same fraction of copy on both, within 10%).
FOLLOWS_COPY = 0.9

_ALIGN = {"l": "---", "r": "---:", "c": ":---:"}


def format_cell(value) -> str:
    """One table cell as text: ints with separators, floats to 4 significant digits, None as a dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{value:,}"
    if isinstance(value, numbers.Real):
        return f"{value:,.4g}"
    text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(columns, rows, *, align: str | None = None, caption: str | None = None):
    """A Markdown table (an IPython ``Markdown`` object) with one header row.

    columns: the header cells.
    rows: one list of cells per row, each as long as ``columns``.
    align: one letter per column, ``l``, ``r`` or ``c``; by default the first column is left-aligned
        and the others right-aligned (numbers).
    caption: a paragraph shown above the table (where the numbers come from).
    The object's ``.data`` is the Markdown text.
    """
    from IPython.display import Markdown

    columns = list(columns)
    if not columns:
        raise ValueError("columns must name at least one column")
    rows = [list(row) for row in rows]
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"rows[{i}] has {len(row)} cells, expected {len(columns)} (one per column {columns})")
    align = "l" + "r" * (len(columns) - 1) if align is None else align
    if not isinstance(align, str) or len(align) != len(columns) or set(align) - set(_ALIGN):
        raise ValueError(f"align must be one of 'l', 'r', 'c' per column ({len(columns)} letters), got {align!r}")
    lines = ["| " + " | ".join(format_cell(c) for c in columns) + " |",
             "| " + " | ".join(_ALIGN[a] for a in align) + " |"]
    lines += ["| " + " | ".join(format_cell(c) for c in row) + " |" for row in rows]
    text = "\n".join(lines)
    return Markdown(f"{caption}\n\n{text}" if caption else text)


def counted_series(launch, sizes, inputs, *, upto: int | None = None) -> list:
    """Global bytes a launch moves at each size, counted on the simulator; None where not counted.

    launch: called as ``launch(*inputs(size))``. inputs: a function of the size that returns the
    arguments (fresh random arrays). upto: count only sizes up to this one (the simulator is slow).
    On a GPU nothing is counted (Nsight measures DRAM bytes there) and every value is None.
    """
    from course.device import on_simulator
    from course.traffic import count_traffic

    if not callable(launch) or not callable(inputs):
        raise TypeError("launch and inputs must be functions: launch(*inputs(size))")
    values = []
    for size in sizes:
        if not on_simulator() or (upto is not None and size > upto):
            values.append(None)
            continue
        with count_traffic() as traffic:
            launch(*inputs(size))
        values.append(traffic.global_bytes)
    return values


def recorded_series(recordings, label: str, sizes, *, per: float = 1, column: str = "dram_bytes",
                    x: str = "N", where: dict | None = None) -> list:
    """One recorded value per size for the rows labelled ``label`` (divided by ``per``); None where absent.

    recordings: a Recording, a list of them, or None (then every value is None). label: the rung's registry
    name (``attention_v4_flash``). per: e.g. the number of (batch, head) pairs the measurement covered, to
    plot bytes per head. where: other columns the rows must match (``course.records.where``), e.g.
    ``{"causal": False}`` where a rung was measured with and without a mask; two rows at one size raise
    ValueError.

    Nothing fails in silence: a label no recording has raises LookupError unless it names a rung of a registry
    or a row of a shipped recording (then that rung was not measured: every value None), and so do rows of the
    label of which none matches ``where``; both name what the recordings hold.
    """
    from course.records import check_names, where as matching

    if recordings is None:
        recordings = []
    elif not isinstance(recordings, (list, tuple)):
        recordings = [recordings]
    if not per or per < 0:
        raise ValueError(f"per must be a positive number, got {per!r}")
    if recordings:
        source = ", ".join(repr(getattr(rec, "name", "?")) for rec in recordings)
        every = [row for rec in recordings for row in rec.rows]
        check_names(every, {"label": label}, source)
        labelled = [row for row in every if row.get("label") == label]
        if labelled and where and not matching(labelled, **where):
            seen = {key: sorted({repr(row.get(key)) for row in labelled}) for key in where}
            raise LookupError(f"rows of {source} are labelled {label!r}, but none matches where={where}; "
                              f"theirs: {seen}")
    found = {}
    for rec in recordings:
        for row in matching(rec, label=label, **(where or {})):
            if row.get(x) is None or row.get(column) is None:
                continue
            if row[x] in found:
                raise ValueError(f"two rows labelled {label!r} at {x} = {row[x]}: tell them apart with where=")
            found[row[x]] = row[column] / per
    return [found.get(size) for size in sizes]


def _span(values, form: str = ".2f") -> str:
    low, high = min(values), max(values)
    return f"{low:{form}}" if f"{low:{form}}" == f"{high:{form}}" else f"{low:{form}} to {high:{form}}"


def across_gpus_table(first, second, steps) -> list[str]:
    """The same steps recorded on two GPUs, as a lesson shows them: a table (``course.records.across_gpus``: each
    step's fraction of the copy bandwidth on each GPU and how many times faster the second ran it, over the points
    both recorded) and one line a step, returned: whether it follows the copy bandwidth (gains at least
    ``FOLLOWS_COPY`` of what the copy gained at every point) or falls short of it. ``steps``: ``(name, selector)``
    pairs as ``across_gpus`` takes them."""
    from course.records import across_gpus

    points, rows = across_gpus(first, second, steps)
    if not points:
        return [f"the two recordings share no step of {', '.join(name for name, _ in steps)}"]
    names = [rec.device.removeprefix("NVIDIA ") for rec in (first, second)]
    gain = second.ceilings["copy_gbps"] / first.ceilings["copy_gbps"]
    table = markdown_table(
        ["step", f"of the copy bandwidth, {names[0]}", f"of the copy bandwidth, {names[1]}",
         f"how much faster on the {names[1]}"],
        [[name, _span(a), _span(b), _span(g)] for name, a, b, g in rows], align="lrrr",
        caption=f"GPU time alone, at {len(points)} steps of {points[0][0] * points[0][1]:,} to "
                f"{max(s * c for s, c in points):,} tokens ({first.stamp}; {second.stamp}):")
    from IPython.display import display

    display(table)
    lines = [f"copy bandwidth: {first.ceilings['copy_gbps']:,.0f} GB/s on the {names[0]}, "
             f"{second.ceilings['copy_gbps']:,.0f} GB/s on the {names[1]}: {gain:.2f} times as much"]
    for name, _, _, gains in rows:
        verdict = ("follows the copy bandwidth" if min(gains) >= FOLLOWS_COPY * gain else
                   "falls short of the copy bandwidth: it waits on something the faster memory does not shorten")
        lines.append(f"{name}: {_span(gains)} times as fast on the {names[1]}, {verdict}")
    return lines
