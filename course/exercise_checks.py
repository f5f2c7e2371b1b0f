"""Visible checks of the graded exercises: the first call of a grade cell, after its docstring.

Validate (nbgrader's button and ``nbgrader validate``) judges a notebook by its grade cells, and a
student's copy of a grade cell holds only what is visible of it: without a visible check, a blank
notebook would pass. So each grade cell of days 1, 4 and 5 opens with one call from this module::

    exercise_checks.axpb_traffic_fits(axpb_v1_guarded, kernel=axpb_v1_guarded_kernel)

Each check runs the student's launcher (or, for day 5, the kernel with the course's grid) on one
small case, fast on the simulator, checks the property its grade cell grades and raises an
``AssertionError`` that says what is wrong and what the likely bug is. A check is never stricter
than the hidden tests of its cell, so it cannot cost a right answer its points. Checks return None:
nbgrader would read a value left at the end of a grade cell as partial credit. Traffic is counted
on the simulator only; on a GPU the traffic checks say so and pass (the grader counts on the
simulator).

Each check that compares values passes :func:`course.checking.check` the context its diagnoses
need: the student's kernel (``kernel=``, for the barrier mistakes of its source) and the inputs of
the computation (``reduction=``, ``gemm=``, ``attention=``), so that a classic mistake is named.
"""

from __future__ import annotations

import math

import numpy as np

from course.checking import check, poison, random_inputs
from course.device import on_simulator

__all__ = [
    "axpb_matches_reference", "axpb_traffic_fits",
    "normalize_rows_matches_reference", "normalize_rows_traffic_fits",
    "row_stats_match_reference", "row_stats_tree_traffic_fits", "row_stats_warp_traffic_fits",
    "gemm_matches_reference", "gemm_edge_shapes", "gemm_v3_traffic_fits", "gemm_v4_traffic_fits",
    "flash_matches_reference", "flash_handles_kv_lens", "flash_is_numerically_stable",
    "flash_traffic_fits_tiling", "flash_skips_masked_tiles", "flash_causal_key_end",
]

ATTENTION_DIMS = ("batch", "head", "row", "col")


def _passed(what: str) -> None:
    print(f"visible check passed: {what}")


def _counted(launch):
    """``(result, traffic)`` of ``launch()`` counted on the simulator; traffic is None on a GPU."""
    if not on_simulator():
        print("traffic is counted on the CUDA simulator only (COURSE_DEVICE=simulator); "
              "the grader counts it there")
        return launch(), None
    from course.traffic import count_traffic

    with count_traffic() as traffic:
        result = launch()
    return result, traffic


def _require_one_launch(traffic, kernel_name: str) -> None:
    assert traffic.kernel_names == [kernel_name], (
        f"expected one launch of {kernel_name}, saw {traffic.kernel_names}: the launcher must launch "
        f"your kernel, once")


def _loads(traffic, name: str) -> int:
    return traffic.global_loads.get(name, 0)


def _stores(traffic, name: str) -> int:
    return traffic.global_stores.get(name, 0)


# ------------------------------------------------------------------------------- day 1: the GPU model

def axpb_matches_reference(axpb, *, kernel=None) -> None:
    """``axpb(x, a, b, out=...)`` gives a*x + b for n = 1 and n = 129 (one element past a block)."""
    rng, seed = random_inputs()
    for n in (1, 129):
        x = rng.uniform(-1e4, 1e4, n).astype(np.float32)
        y = axpb(x, 2.5, -1.0, out=poison(np.empty(n, np.float32)))
        check(y, 2.5 * x.astype(np.float64) - 1.0, name=f"y (n={n})", dims=("i",), seed=seed, kernel=kernel)
    _passed("y = a*x + b for n = 1 and n = 129")


def axpb_traffic_fits(axpb, *, kernel=None) -> None:
    """One launch of axpb_v1_guarded_kernel reads each element of x once and writes each of y once."""
    rng, seed = random_inputs()
    n = 200
    x = rng.standard_normal(n).astype(np.float32)
    y, traffic = _counted(lambda: axpb(x, 1.5, 0.25, out=poison(np.empty(n, np.float32))))
    if traffic is not None:
        _require_one_launch(traffic, "axpb_v1_guarded_kernel")
        assert _loads(traffic, "x") == n, f"x was read {_loads(traffic, 'x')} times for n={n}: read each element once"
        assert _stores(traffic, "y") == n, f"y was written {_stores(traffic, 'y')} times for n={n}: write each element once"
    check(y, 1.5 * x.astype(np.float64) + 0.25, name="y", dims=("i",), seed=seed, kernel=kernel)
    _passed(f"n = {n}: x read {n} times, y written {n} times")


def normalize_rows_matches_reference(normalize_rows, *, kernel=None) -> None:
    """x / row_sums for a single element and for a partial row tile with head_dim 40 > 32."""
    from kernels.elementwise import ROWS_PER_BLOCK

    rng, seed = random_inputs()
    for shape in ((1, 1, 1, 1), (2, 3, 5, 40)):
        x = rng.uniform(-1e4, 1e4, shape).astype(np.float32)
        row_sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
        out = normalize_rows(x, row_sums, out=poison(np.empty(shape, np.float32)))
        check(out, x.astype(np.float64) / row_sums[..., None], name=f"out {shape}", dims=ATTENTION_DIMS,
              tile={"row": ROWS_PER_BLOCK}, seed=seed, kernel=kernel)
    _passed("out = x / row_sums for shapes (1, 1, 1, 1) and (2, 3, 5, 40)")


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
    x[2] = -np.abs(x[2])      # all negative: the max starts at -inf, not 0
    return x


def _check_row_stats(row_max, row_sum, x, seed, label="", *, threads=None, kernel=None) -> None:
    # With the block size, a wrong output is compared with the classic reduction mistakes.
    for name, op, out in (("row_max", "max", row_max), ("row_sum", "sum", row_sum)):
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


# ------------------------------------------------------------------------------- day 4: tiled GEMM

def _gemm_run(gemm, m, n, k, rng, *, counted=False):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    launch = lambda: gemm(a, b, out=poison(np.empty((m, n), np.float32)))  # noqa: E731
    c, traffic = _counted(launch) if counted else (launch(), None)
    return a, b, c, traffic


def _check_gemm(c, a, b, seed, tile: int, tile_k: int | None, kernel) -> None:
    from kernels import reference

    m, n = c.shape
    check(c, reference.gemm(a, b), name=f"C ({m}x{n}, K={a.shape[1]})", dims=("row", "col"),
          tile={"row": tile, "col": tile}, seed=seed, gemm=dict(a=a, b=b, tile_k=tile_k), kernel=kernel)


def gemm_matches_reference(gemm, *, tile: int, tile_k: int | None = None, kernel=None) -> None:
    """C = A B for a shape the tile does not divide: partial tiles in M, N and K.

    tile: the block tile along M and N; tile_k: the step along K (TILE, BLOCK_K), for the diagnoses.
    """
    rng, seed = random_inputs()
    m, n, k = tile + 1, 5, 9
    a, b, c, _ = _gemm_run(gemm, m, n, k, rng)
    _check_gemm(c, a, b, seed, tile, tile_k, kernel)
    _passed(f"C = A B for M, N, K = {m}, {n}, {k}")


def gemm_edge_shapes(gemm, *, tile: int, tile_k: int | None = None, kernel=None) -> None:
    """C = A B for a 1×1 product and for one row with K = 1."""
    rng, seed = random_inputs()
    for m, n, k in ((1, 1, 1), (1, 5, 1)):
        a, b, c, _ = _gemm_run(gemm, m, n, k, rng)
        _check_gemm(c, a, b, seed, tile, tile_k, kernel)
    _passed("C = A B for M, N, K = 1, 1, 1 and 1, 5, 1")


def _gemm_traffic(gemm, kernel_name, budget_of, m, n, k):
    # The values are graded by the other cells: a budget cell checks the counts only.
    rng, _ = random_inputs()
    _, _, _, traffic = _gemm_run(gemm, m, n, k, rng, counted=True)
    if traffic is not None:
        _require_one_launch(traffic, kernel_name)
        budget = budget_of(m, n, k)
        for name, counted, want, per in (("A", _loads(traffic, "a"), budget.a_loads, "block column"),
                                         ("B", _loads(traffic, "b"), budget.b_loads, "block row")):
            assert counted == want, (
                f"your kernel loaded {name} {counted} times for M, N, K = {m}, {n}, {k}; the budget is {want} "
                f"(each element once per {per}; the naive kernel loads it {m * n * k} times). "
                + ("More: is a slot outside the matrix read instead of set to 0, or a tile loaded twice?"
                   if counted > want else "Fewer: do some threads (those outside C?) skip loading their slots?"))
        assert _stores(traffic, "c") == m * n, f"C was stored {_stores(traffic, 'c')} times; each element once is {m * n}"
    return traffic


def gemm_v3_traffic_fits(gemm) -> None:
    """Shared tiles: A and B loaded exactly the budget, once per block column and block row."""
    from course.models import gemm as model

    m, n, k = 20, 21, 19
    _gemm_traffic(gemm, "gemm_v3_shared_tiles_kernel",
                  lambda m, n, k: model.traffic_v3_shared_tiles(m, n, k, tile=16), m, n, k)
    _passed(f"M, N, K = {m}, {n}, {k}: A and B loaded once per block column and block row")


def gemm_v4_traffic_fits(gemm) -> None:
    """Register blocking: A and B loaded once per 64-wide block tile, shared memory read within budget."""
    from course.models import gemm as model

    m, n, k = 70, 21, 9
    traffic = _gemm_traffic(gemm, "gemm_v4_register_blocked_kernel",
                            lambda m, n, k: model.traffic_v4_register_blocked(m, n, k, block_m=64, block_n=64),
                            m, n, k)
    if traffic is not None:
        shared_budget = model.shared_loads_v4_register_blocked(m, n, k)
        assert traffic.shared_loads <= shared_budget, (
            f"{traffic.shared_loads} shared loads, budget {shared_budget}: are a_frag and b_frag loaded once "
            f"per kk and reused for the THREAD_M x THREAD_N multiply-adds?")
    _passed(f"M, N, K = {m}, {n}, {k}: A and B loaded once per block tile, shared loads within budget")


# ------------------------------------------------------------------------------- day 5: flash attention

def flash_causal_key_end(tile_start: int, n_queries: int, kv_len: int, *, causal: bool, tile_q: int) -> int:
    """How many keys the query block starting at row ``tile_start`` needs: keys 0 ... end - 1.

    Every key below ``kv_len``; under the causal mask only those up to the block's last *existing*
    query row, ``min(tile_start + tile_q, n_queries) - 1``: in the last, partial query tile that is
    row N - 1, not ``tile_start + tile_q - 1``.
    """
    if not causal:
        return kv_len
    return min(kv_len, tile_start + tile_q, n_queries)


def _flash_run(kernel, B, H, N, M, d, *, causal, kv_lens=None, rng=None, large_logits=False, counted=False):
    """Launch ``kernel`` with the course's grid on fresh inputs: ``(o, reference, seed, traffic, attention)``,
    attention being the inputs and the mask as :func:`course.checking.check` takes them."""
    from kernels import reference
    from kernels.flash_attention import TILE_KV, TILE_Q, default_scale, flash_grid

    if rng is None:
        rng, seed = random_inputs()
    else:
        seed = None
    if large_logits:  # integers: q·k of about 1e4, exact in float32
        q = rng.integers(-50, 51, (B, H, N, d)).astype(np.float32)
        k = rng.integers(-50, 51, (B, H, M, d)).astype(np.float32)
    else:
        q = rng.standard_normal((B, H, N, d), dtype=np.float32)
        k = rng.standard_normal((B, H, M, d), dtype=np.float32)
    v = rng.standard_normal((B, H, M, d), dtype=np.float32)
    lens = np.full(B, M, dtype=np.int32) if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    o = poison(np.empty_like(q))
    launch = lambda: kernel[flash_grid(B, H, N), TILE_Q](q, k, v, lens, o, default_scale(d, None), causal)  # noqa: E731
    _, traffic = _counted(launch) if counted else (launch(), None)
    attention = dict(q=q, k=k, v=v, causal=causal, kv_lens=lens, tile_q=TILE_Q, tile_kv=TILE_KV)
    return o, reference.attention(q, k, v, causal=causal, kv_lens=lens), seed, traffic, attention


def _check_flash(o, want, seed, label, attention, kernel):
    from kernels.flash_attention import TILE_Q

    hint = ("with causal=True row i sees keys 0 ... i, its own position included" if attention["causal"]
            else "every key below kv_lens[b] counts") + "; a row that sees no key gives 0"
    check(o, want, name=f"O for {label}", dims=ATTENTION_DIMS, tile={"row": TILE_Q}, seed=seed,
          hints={"any": hint}, attention=attention, kernel=kernel)


def flash_matches_reference(kernel, *, causal: bool) -> None:
    """O matches the reference over two query tiles and two key tiles, N != M."""
    B, H, N, M, d = 1, 1, 70, 45, 4
    if causal:
        M = 80
    rng, seed = random_inputs()
    o, want, _, _, attention = _flash_run(kernel, B, H, N, M, d, causal=causal, rng=rng)
    _check_flash(o, want, seed, f"B={B} H={H} N={N} M={M} d={d} causal={causal}", attention, kernel)
    _passed(f"N={N}, M={M}, causal={causal}")


def flash_handles_kv_lens(kernel) -> None:
    """kv_lens of 0 (rows of exactly 0), 1 and an off-tile 37, causal."""
    kv_lens = [0, 1, 37]
    rng, seed = random_inputs()
    o, want, _, _, attention = _flash_run(kernel, 3, 1, 40, 40, 4, causal=True, kv_lens=kv_lens, rng=rng)
    assert np.all(o[0] == 0.0), "the rows of an empty sequence (kv_lens[b] == 0) must be exactly 0"
    _check_flash(o, want, seed, f"N=40 kv_lens={kv_lens} causal=True", attention, kernel)
    _passed(f"kv_lens = {kv_lens}, causal")


def flash_is_numerically_stable(kernel) -> None:
    """Logits of about 1e4 before scaling give finite, exact results."""
    rng, seed = random_inputs()
    o, want, _, _, attention = _flash_run(kernel, 1, 1, 40, 40, 16, causal=False, rng=rng, large_logits=True)
    _check_flash(o, want, seed, "logits of size 1e4", attention, kernel)
    _passed("logits of size 1e4")


def flash_traffic_fits_tiling(kernel) -> None:
    """Only O written; Q read once; K and V loaded once per query tile, not once per query row."""
    from kernels.flash_attention import TILE_Q

    B, H, N, d = 1, 1, 70, 4
    rng, seed = random_inputs()
    o, want, _, traffic, attention = _flash_run(kernel, B, H, N, N, d, causal=False, rng=rng, counted=True)
    if traffic is not None:
        assert traffic.launches == 1, f"one kernel launch expected; launches seen: {traffic.kernel_names}"
        stored = {name: count for name, count in traffic.global_stores.items() if count}
        assert stored == {"o": B * H * N * d}, (
            f"the kernel may write only o, each element once ({B * H * N * d} stores); stores counted: {stored}")
        assert B * H * N * d <= _loads(traffic, "q") <= 1.1 * B * H * N * d, (
            f"each query row must be read once ({B * H * N * d} loads of q); {_loads(traffic, 'q')} counted")
        tiles = math.ceil(N / TILE_Q)
        per_tile = B * H * tiles * N * d
        for name in ("k", "v"):
            counted = _loads(traffic, name)
            per_row = " (about once per query row: read the keys from the shared tile, not from global memory)"
            assert per_tile <= counted <= 1.1 * per_tile, (
                f"{name}: {counted} loads counted; a tiled kernel loads each key once per query tile, "
                f"{per_tile} loads here ({tiles} tiles of {TILE_Q} rows), where one load per query row would be "
                f"{B * H * N * N * d}" + (per_row if counted >= 0.5 * B * H * N * N * d else ""))
    _check_flash(o, want, seed, f"N={N} d={d}", attention, kernel)
    _passed(f"N={N}: only O written, Q read once, K and V once per query tile")


def flash_skips_masked_tiles(kernel) -> None:
    """Causal blocks load no key past their last existing row; no block loads keys past kv_lens."""
    from kernels.flash_attention import TILE_Q

    d = 4
    for N, M, causal, kv_len in ((128, 128, True, 128), (70, 100, True, 100), (70, 70, False, 40)):
        _, _, _, traffic, _ = _flash_run(kernel, 1, 1, N, M, d, causal=causal, kv_lens=[kv_len], counted=True)
        if traffic is None:
            return
        keys = sum(flash_causal_key_end(start, N, kv_len, causal=causal, tile_q=TILE_Q)
                   for start in range(0, N, TILE_Q))
        for name in ("k", "v"):
            counted = _loads(traffic, name)
            why = ("masking the key tiles above the diagonal is not enough: skip them, do not load them"
                   if causal else "keys at or past kv_lens[b] do not exist: do not load them")
            assert keys * d <= counted <= 1.1 * keys * d, (
                f"causal={causal}, N={N}, M={M}, kv_lens=[{kv_len}]: {counted} loads of {name} counted, "
                f"{keys * d} expected. The block of query rows r0..r1 needs keys 0 ... min(kv_len, r1 + 1) - 1 "
                f"(causal; r1 is the last row that exists, N - 1 in the last tile) or 0 ... kv_len - 1: "
                + (why if counted > keys * d else "every key a block needs must be loaded"))
    _passed("no key tile above the diagonal, past the last query row or past kv_lens is loaded")
