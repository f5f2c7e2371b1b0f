"""Day 1, the GPU model: axpb, normalize_rows and the row statistics (a shared-memory tree, warp shuffles)."""

from __future__ import annotations

import numpy as np

from course.checking import check, is_poison, poison, random_inputs

from ._common import (
    ATTENTION_DIMS, _counted, _launch_explained, _loads, _passed, _past_the_end, _require_one_launch, _stores,
    _with_findings,
)

__all__ = ["axpb_matches_reference", "axpb_traffic_fits",
           "normalize_rows_matches_reference", "normalize_rows_traffic_fits",
           "row_stats_match_reference", "row_stats_tree_traffic_fits", "row_stats_warp_traffic_fits"]


def _axpb_likely(exc, line):
    """An index past x or y: a thread at i >= n got past the bounds guard (KernelFailed's cause)."""
    found = _past_the_end(exc, line)
    if found is None:
        return None
    index, _, size, lead = found
    return "bounds_guard", lead + (
        f"Thread i = {index} is past the last element (n = {size}) and got through the bounds guard: the grid "
        "rounds n up to whole blocks, so the threads at i >= n must do nothing. Is the guard missing, or "
        "`i <= n` instead of `i < n`?")


def _axpb_run(axpb, x, a, b):
    n = x.size
    return _launch_explained(lambda: axpb(x, a, b, out=poison(np.empty(n, np.float32))), likely=_axpb_likely)


def axpb_matches_reference(axpb, *, kernel=None) -> None:
    """``axpb(x, a, b, out=...)`` gives a*x + b for n = 127, 129 (one element past a block) and 1."""
    rng, seed = random_inputs()
    for n in (127, 129, 1):
        x = rng.uniform(-1e4, 1e4, n).astype(np.float32)
        y = _axpb_run(axpb, x, 2.5, -1.0)
        check(y, 2.5 * x.astype(np.float64) - 1.0, name=f"y (n={n})", dims=("i",), seed=seed, kernel=kernel)
    _passed("y = a*x + b for n = 127, 129 and 1")


def axpb_traffic_fits(axpb, *, kernel=None) -> None:
    """One launch of axpb_v1_guarded_kernel reads each element of x once and writes each of y once."""
    rng, seed = random_inputs()
    n = 200
    x = rng.standard_normal(n).astype(np.float32)
    y, traffic = _counted(lambda: _axpb_run(axpb, x, 1.5, 0.25))
    if traffic is not None:
        _require_one_launch(traffic, "axpb_v1_guarded_kernel")
        assert _loads(traffic, "x") == n, f"x was read {_loads(traffic, 'x')} times for n={n}: read each element once"
        assert _stores(traffic, "y") == n, f"y was written {_stores(traffic, 'y')} times for n={n}: write each element once"
    check(y, 1.5 * x.astype(np.float64) + 0.25, name="y", dims=("i",), seed=seed, kernel=kernel)
    _passed(f"n = {n}: x read {n} times, y written {n} times")


def _column_loop_findings(out):
    """``[("column_loop", message)]`` when exactly the columns past a block's threads are unwritten, in every
    row: the kernel has one thread per column and no loop over the columns."""
    from kernels.elementwise import COLS_PER_BLOCK

    unwritten = is_poison(out)
    cols = out.shape[-1]
    if cols <= COLS_PER_BLOCK or not unwritten[..., COLS_PER_BLOCK:].all() or unwritten[..., :COLS_PER_BLOCK].any():
        return []
    return [("column_loop", f"columns {COLS_PER_BLOCK} ... {cols - 1} were never written, in any row, and the "
             f"columns before them were: a block has {COLS_PER_BLOCK} threads along x and the grid has no blocks "
             "along the columns, so one thread per column leaves the rest out. Loop over the columns: col = "
             f"threadIdx.x, threadIdx.x + blockDim.x, ... while col < head_dim ({cols} here)")]


def normalize_rows_matches_reference(normalize_rows, *, kernel=None) -> None:
    """x / row_sums for a partial row tile with 7 rows and head_dim 40 > 32, and for a single element."""
    from kernels.elementwise import ROWS_PER_BLOCK

    rng, seed = random_inputs()
    for shape in ((2, 3, 7, 40), (1, 1, 1, 1)):
        x = rng.uniform(-1e4, 1e4, shape).astype(np.float32)
        row_sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
        out = normalize_rows(x, row_sums, out=poison(np.empty(shape, np.float32)))
        _with_findings(lambda: _column_loop_findings(out), out, x.astype(np.float64) / row_sums[..., None],
                       name=f"out {shape}", dims=ATTENTION_DIMS, tile={"row": ROWS_PER_BLOCK}, seed=seed,
                       kernel=kernel)
    _passed("out = x / row_sums for shapes (2, 3, 7, 40) and (1, 1, 1, 1)")


def normalize_rows_traffic_fits(normalize_rows, *, kernel=None) -> None:
    """Grid (row tiles, heads, batch); x read once, out written once, a row sum read once per thread."""
    from kernels.elementwise import COLS_PER_BLOCK

    rng, seed = random_inputs()
    shape = (2, 2, 5, 40)
    x = rng.standard_normal(shape).astype(np.float32)
    row_sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
    out, traffic = _counted(lambda: normalize_rows(x, row_sums, out=poison(np.empty(shape, np.float32))))
    if traffic is not None:
        _require_one_launch(traffic, "normalize_rows_v1_3d_grid_kernel")
        grid = traffic.per_launch[0].grid
        assert grid == (2, 2, 2), f"grid {grid}: expected (row tiles, heads, batch) = (2, 2, 2)"
        assert _loads(traffic, "x") == x.size, f"x was read {_loads(traffic, 'x')} times; it has {x.size} elements"
        assert _stores(traffic, "out") == x.size, (
            f"out was written {_stores(traffic, 'out')} times; it has {x.size} elements")
        budget = row_sums.size * COLS_PER_BLOCK
        assert _loads(traffic, "row_sums") <= budget, (
            f"row_sums was read {_loads(traffic, 'row_sums')} times; budget: once per thread ({budget}): "
            f"keep the row's sum in a register")
    check(out, x.astype(np.float64) / row_sums[..., None], name="out", dims=ATTENTION_DIMS, seed=seed,
          kernel=kernel)
    _passed(f"shape {shape}: x read once, out written once, row sums within budget")


def _row_stats_case(rng):
    x = rng.uniform(-1e4, 1e4, (3, 70)).astype(np.float32)
    # All negative and at least 1,000 below 0: the max starts at -inf, not 0. An entry near 0 would let a max
    # that starts at 0 pass within the tolerance of rows whose entries reach 1e4 (seed 150 did).
    x[2] = -np.abs(x[2]) - np.float32(1e3)
    return x


def _check_row_stats(row_max, row_sum, x, seed, label="", *, threads=None, kernel=None) -> None:
    # With the block size, a wrong output is compared with the classic reduction mistakes. The sum first: a
    # wrong max can fit the models of several mistakes (the largest entry sits in the partials of both), a
    # wrong sum fits one.
    for name, op, out in (("row_sum", "sum", row_sum), ("row_max", "max", row_max)):
        reduction = None if threads is None else dict(x=x, op=op, threads=threads)
        check(out, getattr(x.astype(np.float64), op)(axis=1), name=f"{name}{label}", dims=("row",), seed=seed,
              reduction=reduction, kernel=kernel)


def row_stats_match_reference(row_stats, *, threads: int | None = None, kernel=None) -> None:
    """Row max and sum for 70 columns (more than a block), an all-negative row and a single column.

    threads: the kernel's block size (TREE_THREADS, SHUFFLE_THREADS), for the diagnoses.
    """
    rng, seed = random_inputs()
    for x in (_row_stats_case(rng), rng.uniform(-1e4, 1e4, (1, 1)).astype(np.float32)):
        outs = (poison(np.empty(x.shape[0], np.float32)), poison(np.empty(x.shape[0], np.float32)))
        row_max, row_sum = row_stats(x, out=outs)
        _check_row_stats(row_max, row_sum, x, seed, f" {x.shape}", threads=threads, kernel=kernel)
    _passed("row max and row sum for shapes (3, 70) with an all-negative row, and (1, 1)")


def _row_stats_traffic(row_stats, kernel_name: str, threads: int, kernel):
    rng, seed = random_inputs()
    rows, cols = 2, 100
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    (row_max, row_sum), traffic = _counted(lambda: row_stats(x))
    if traffic is not None:
        _require_one_launch(traffic, kernel_name)
        assert _loads(traffic, "x") == rows * cols, (
            f"x was read {_loads(traffic, 'x')} times; budget: each of its {rows * cols} elements once")
        for name in ("row_max", "row_sum"):
            assert _stores(traffic, name) == rows, (
                f"{name} was written {_stores(traffic, name)} times for {rows} rows: once per row, by one thread")
    _check_row_stats(row_max, row_sum, x, seed, threads=threads, kernel=kernel)
    return traffic, rows


def row_stats_tree_traffic_fits(row_stats, *, kernel=None) -> None:
    """x read once, one store per output and row, 2 to 4 x TREE_THREADS shared stores per row."""
    from kernels.reduction import TREE_THREADS

    traffic, rows = _row_stats_traffic(row_stats, "row_stats_v2_shared_tree_kernel", TREE_THREADS, kernel)
    if traffic is not None:
        low, high = 2 * TREE_THREADS * rows, 4 * TREE_THREADS * rows
        assert low <= traffic.shared_stores <= high, (
            f"{traffic.shared_stores} shared stores for {rows} rows; a shared-memory tree of {TREE_THREADS} "
            f"threads makes {low} to {high}")
    _passed("x read once, outputs written once per row, the partials in shared memory")


def row_stats_warp_traffic_fits(row_stats, *, kernel=None) -> None:
    """x read once, one store per output and row, at most one shared value per warp and statistic."""
    from kernels.reduction import SHUFFLE_THREADS, WARPS_PER_BLOCK

    traffic, rows = _row_stats_traffic(row_stats, "row_stats_v3_warp_shuffle_kernel", SHUFFLE_THREADS, kernel)
    if traffic is not None:
        budget = 2 * WARPS_PER_BLOCK * rows
        assert traffic.shared_stores <= budget, (
            f"{traffic.shared_stores} shared stores for {rows} rows; budget: one max and one sum per warp "
            f"({budget}): reduce within each warp with shuffles, not through shared memory")
    _passed("x read once, outputs written once per row, one shared value per warp and statistic")
