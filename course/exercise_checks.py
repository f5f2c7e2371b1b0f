"""Visible checks of the graded exercises: the first call of a grade cell, after its docstring.

Validate (nbgrader's button and ``nbgrader validate``) judges a notebook by its grade cells, and a
student's copy of a grade cell holds only what is visible of it: without a visible check, a blank
notebook would pass. So each grade cell of days 1, 4, 5 and 6 opens with one call from this module::

    exercise_checks.axpb_traffic_fits(axpb_v1_guarded, kernel=axpb_v1_guarded_kernel)

Each check runs the student's launcher (or, for days 5 and 6, the kernel with the course's grid) on one
small case, fast on the simulator, checks the property its grade cell grades and raises an
``AssertionError`` that says what is wrong and what the likely bug is. A check is never stricter
than the hidden tests of its cell, so it cannot cost a right answer its points. Checks return None:
nbgrader would read a value left at the end of a grade cell as partial credit. Traffic is counted
on the simulator only; on a GPU the traffic checks say so and pass (the grader counts on the
simulator).

Each check that compares values passes :func:`course.checking.check` the context its diagnoses
need: the student's kernel (``kernel=``, for the barrier mistakes of its source) and the inputs of
the computation (``reduction=``, ``gemm=``, ``attention=``), so that a classic mistake is named.
Day 6's checks add the paged diagnoses (``course.diagnoses.paged``) in front of ``check``'s own, and
turn an exception raised inside a kernel on the simulator (an index past an array, 0/0, an
overflowing exp) into a :class:`KernelFailed` that names the likely bug. Their runners
(``cache_write_run``, ``paged_v1_run``, ``paged_v2_run`` for the course's partition kernel and the
student's merge, ``merge_run`` for the merge alone on partials computed in NumPy) and budgets
(``*_traffic_problems``) are what the hidden tests call too, on more cases.
"""

from __future__ import annotations

import math

import numpy as np

from course.checking import CheckFailure, check, is_poison, poison, random_inputs
from course.device import on_simulator

__all__ = [
    "axpb_matches_reference", "axpb_traffic_fits",
    "normalize_rows_matches_reference", "normalize_rows_traffic_fits",
    "row_stats_match_reference", "row_stats_tree_traffic_fits", "row_stats_warp_traffic_fits",
    "gemm_matches_reference", "gemm_edge_shapes", "gemm_v3_traffic_fits", "gemm_v4_traffic_fits",
    "flash_matches_reference", "flash_handles_kv_lens", "flash_is_numerically_stable",
    "flash_traffic_fits_tiling", "flash_skips_masked_tiles", "flash_causal_key_end",
    "cache_write_matches_reference", "cache_write_traffic_fits",
    "paged_v1_matches_reference", "paged_v1_handles_mixed_lengths", "paged_v1_is_numerically_stable",
    "paged_v1_traffic_fits", "merge_matches_reference", "merge_handles_empty_partitions", "merge_traffic_fits",
    "KernelFailed", "paged_inputs", "check_paged", "paged_v1_run", "paged_v2_run", "merge_run",
    "paged_v1_traffic_problems",
    "merge_traffic_problems", "cache_write_case", "cache_write_expected", "cache_write_run", "check_cache_write",
    "cache_write_traffic_problems",
    "gqa_prefill_matches_reference", "gqa_prefill_handles_every_group", "gqa_prefill_traffic_fits",
    "gqa_decode_matches_reference", "gqa_decode_handles_every_group", "gqa_decode_traffic_fits",
    "gqa_prefill_case", "gqa_prefill_run", "check_gqa_prefill", "gqa_prefill_traffic_problems",
    "gqa_decode_run", "merge_partials", "check_gqa_decode", "gqa_decode_traffic_problems",
    "mixed_prefill_matches_reference", "mixed_prefill_long_rows", "mixed_prefill_large_logits",
    "mixed_decode_matches_reference", "mixed_decode_long_context", "mixed_decode_traffic_fits",
    "fp8_quantize_matches_reference", "fp8_quantize_computes_scales",
    "mixed_prefill_case", "mixed_prefill_run", "check_mixed_prefill", "mixed_decode_case", "mixed_decode_run",
    "check_mixed_decode", "fp8_corner_values", "fp8_quantize_case", "fp8_cache_case", "fp8_quantize_run",
    "check_fp8_codes", "check_fp8_scales",
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


# ------------------------------------------------------------------------------- day 6: paged attention

PAGED_DIMS = ("seq", "head", "channel")
CACHE_DIMS = ("block", "kv_head", "slot", "channel")


class KernelFailed(AssertionError):
    """A kernel raised inside the simulator (an index past an array, 0/0, an overflowing exp);
    ``cause`` is the key of :func:`course.diagnoses.paged.launch_error`."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


def _launch_explained(launch, sizes: dict):
    """``launch()``; an IndexError, ZeroDivisionError or OverflowError from the kernel becomes a
    :class:`KernelFailed` that names the likely bug."""
    from course.diagnoses.paged import launch_error

    try:
        return launch()
    except (IndexError, ZeroDivisionError, OverflowError) as exc:
        found = launch_error(exc, sizes)
        if found is None:
            raise
        raise KernelFailed(found[1], found[0]) from exc


# What check's own diagnoses state as facts (kept next to a finding that names the cause; the rest
# of its output patterns only guess, and are dropped then, as check itself does for its contexts).
_FACT_KEYS = ("unwritten", "nonfinite", "empty_row_nan", "divergent_barrier", "early_return_barrier",
              "missing_barrier")


# Findings that describe what an output looks like rather than match a model of one mistake: they give
# way to a model of check's own that names the mistake.
_WEAK_KEYS = ("lowp_rounding",)


def _with_findings(findings, out, want, **options):
    """``check(out, want, **options)``; on failure the findings (``[(key, message)]``, computed only
    then) go first among its causes, followed by the facts among check's own. Findings that only
    describe (``_WEAK_KEYS``) are dropped when a model of check's own names the mistake."""
    from course.diagnoses import CONTEXT_KEYS

    try:
        return check(out, want, **options)
    except CheckFailure as failure:
        found = findings()
        named = [key for key in failure.result.causes
                 if key in CONTEXT_KEYS and key not in ("row0_key0", "empty_sequence")]
        if not found or (named and all(key in _WEAK_KEYS for key, _ in found)):
            raise
        result = failure.result
        kept = [(key, message) for key, message in zip(result.causes, result.diagnoses) if key in _FACT_KEYS]
        result.causes = [key for key, _ in found + kept]
        result.diagnoses = [message for _, message in found + kept]
        raise CheckFailure(result) from None


def paged_inputs(rng, context_lens, *, heads: int, kv_heads: int, head_dim: int, block_size: int,
                 large_logits: bool = False, spare_blocks: int = 2) -> dict:
    """A decode step over a shuffled paged cache (``kernels.reference.build_paged_cache``), as a
    dict: q, k_cache, v_cache, block_tables, context_lens and the kernel's scale (float32
    1/sqrt(head_dim)).

    Every slot that holds no key is NaN: the tail of each partial last page and ``spare_blocks``
    blocks that belong to no sequence, at the end of the pool (the last one is what a -1 entry
    reads on the simulator). Each row of block_tables is padded with -1 past its pages, with at
    least one column of padding. large_logits: integer q and k in [-50, 50], so q·k reaches about
    1e4 and is exact in float32 (use a head_dim of 16 or 64, whose scale 1/4 or 1/8 keeps the scores
    exact too: a rounded score of size 1e3 would carry an error the softmax magnifies).
    """
    from kernels import reference

    lens = np.array([int(n) for n in context_lens], dtype=np.int32)
    shape = (len(lens), kv_heads, int(lens.max(initial=0)), head_dim)
    if large_logits:
        k = rng.integers(-50, 51, shape).astype(np.float32)
    else:
        k = rng.standard_normal(shape, dtype=np.float32)
    v = rng.standard_normal(shape, dtype=np.float32)
    k_cache, v_cache, tables, lens = reference.build_paged_cache(
        k, v, block_size, rng, lens, spare_blocks=max(1, spare_blocks), padding_pages=1)
    if large_logits:
        q = rng.integers(-50, 51, (len(lens), heads, head_dim)).astype(np.float32)
    else:
        q = rng.standard_normal((len(lens), heads, head_dim), dtype=np.float32)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=tables,
                context_lens=lens, scale=np.float32(1.0 / math.sqrt(head_dim)))


def _paged_sizes(case: dict) -> dict:
    num_blocks, kv_heads, block_size, _ = case["k_cache"].shape
    return dict(heads=case["q"].shape[1], kv_heads=kv_heads, block_size=block_size, num_blocks=num_blocks,
                max_pages=case["block_tables"].shape[1])


def _paged_label(case: dict) -> str:
    num_seqs, heads, d = case["q"].shape
    return (f"context_lens={case['context_lens'].tolist()}, block_size={case['k_cache'].shape[2]}, heads={heads}, "
            f"kv_heads={case['k_cache'].shape[1]}, head_dim={d}")


def check_paged(out, case: dict, *, seed=None, label: str = "", kernel=None, partition_size: int | None = None):
    """Compare a decode output (num_seqs, heads, head_dim) with the float64 reference; on failure name
    the paged mistake it shows (``course.diagnoses.paged``). Returns the CheckResult."""
    from course.diagnoses.paged import decode_findings
    from kernels import reference

    keys = ("q", "k_cache", "v_cache", "block_tables", "context_lens")
    want = reference.paged_attention(*(case[k] for k in keys), scale=float(case["scale"]))
    got = np.asarray(out)
    findings = lambda: decode_findings(got.astype(np.float64), want, case, partition_size=partition_size,  # noqa: E731
                                       poisoned=is_poison(got))
    result = _with_findings(findings, out, want, name=f"out for {label or _paged_label(case)}", dims=PAGED_DIMS,
                            seed=seed, kernel=kernel)
    empty = np.flatnonzero(case["context_lens"] == 0)
    if empty.size and not (got[empty] == 0).all():
        raise AssertionError(f"sequence {int(empty[0])} has context_lens = 0, no key: out[{int(empty[0])}] must be "
                             "exactly 0 for every head (write zeros when the sum is 0)")
    return result


def paged_v1_run(kernel, context_lens, *, heads: int = 2, kv_heads: int = 1, head_dim: int = 8,
                 block_size: int = 4, large_logits: bool = False, rng=None, counted: bool = False):
    """Launch a v1 kernel with the course's grid, (heads, num_seqs) blocks of THREADS threads, on a fresh
    case: ``(out, case, seed, traffic)`` (traffic None unless counted on the simulator)."""
    from kernels.paged_attention import THREADS

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    out = poison(np.empty(case["q"].shape, np.float32))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens", "scale")]
    launch = lambda: kernel[(heads, len(case["context_lens"])), THREADS](*args, out)  # noqa: E731
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    return out, case, seed, traffic


def paged_v2_run(merge_kernel, context_lens, *, partition_size: int, heads: int = 2, kv_heads: int = 1,
                 head_dim: int = 8, block_size: int = 4, large_logits: bool = False, rng=None, counted: bool = False):
    """v2 (the course's partition kernel, then ``merge_kernel``) on a fresh case: ``(out, case, seed, traffic)``."""
    from kernels.paged_attention import paged_attention_v2_split_k

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    out = poison(np.empty(case["q"].shape, np.float32))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens")]
    launch = lambda: paged_attention_v2_split_k(*args, scale=case["scale"], out=out,  # noqa: E731
                                                partition_size=partition_size, merge_kernel=merge_kernel)
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    return out, case, seed, traffic


def merge_run(merge_kernel, context_lens, *, partition_size: int, heads: int = 1, kv_heads: int = 1,
              head_dim: int = 8, block_size: int = 4, large_logits: bool = False, rng=None, counted: bool = False):
    """The merge alone, launched with v2's grid on the partials of a fresh case computed in NumPy (what the
    course's partition kernel writes, rounded to float32): ``(out, case, seed, traffic)``. The partials
    are inputs: the merge may not write them."""
    from course.diagnoses.paged import partial_arrays
    from kernels.paged_attention import HEAD_DIM_MAX

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    partials = [a.astype(np.float32) for a in partial_arrays(case, partition_size)]
    out = poison(np.empty(case["q"].shape, np.float32))
    launch = lambda: merge_kernel[(heads, len(case["context_lens"])), HEAD_DIM_MAX](*partials, out)  # noqa: E731
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    return out, case, seed, traffic


def paged_v1_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one v1 launch breaks of its budget (an empty list: nothing)."""
    num_seqs, heads, d = case["q"].shape
    tokens = int(case["context_lens"].sum())
    problems = []
    if traffic.kernel_names != ["paged_attention_v1_block_per_head_kernel"]:
        return [f"expected one launch of paged_attention_v1_block_per_head_kernel, saw {traffic.kernel_names}"]
    stored = {name: count for name, count in traffic.global_stores.items() if count}
    if stored != {"out": num_seqs * heads * d}:
        problems.append(f"the kernel may write only out, each element once ({num_seqs * heads * d} stores); "
                        f"stores counted: {stored}")
    want = heads * tokens * d
    for name in ("k_cache", "v_cache"):
        counted = _loads(traffic, name)
        if counted != want:
            why = ("more: is a slot past a context's end, or a token twice, read? (each warp takes every "
                   "WARPS-th token)" if counted > want else
                   "fewer: is a key of the context skipped, or are the scores computed from something else?")
            problems.append(f"{name} was loaded {counted} times for {_paged_label(case)}; the budget is each "
                            f"element of a context once per query head: heads · Σ context_lens · head_dim = "
                            f"{heads} · {tokens} · {d} = {want}; {why}")
    return problems


def merge_traffic_problems(traffic, case: dict, partition_size: int) -> list[str]:
    """What the counted traffic of the merge launch (the last one: v2's second, or ``merge_run``'s) breaks
    of its budget."""
    from kernels.launching import cdiv
    from kernels.paged_attention import HEAD_DIM_MAX

    num_seqs, heads, d = case["q"].shape
    lens = case["context_lens"].tolist()
    partitions = max(1, cdiv(max(lens, default=0), partition_size))
    names = traffic.kernel_names
    if names not in (["paged_attention_v2_merge_kernel"],
                     ["paged_attention_v2_partition_kernel", "paged_attention_v2_merge_kernel"]):
        return [f"expected one launch of paged_attention_v2_merge_kernel (after the partition kernel); saw {names}"]
    merge = traffic.per_launch[-1]
    problems = []
    stored = {name: count for name, count in merge.global_stores.items() if count}
    if stored != {"out": num_seqs * heads * d}:
        problems.append(f"the merge may write only out, each element once ({num_seqs * heads * d} stores); stores "
                        f"counted: {stored} (the partials are its inputs)")
    used = heads * d * sum(cdiv(n, partition_size) for n in lens)   # accumulators of partitions that saw a key
    every = num_seqs * heads * partitions * d
    acc = merge.global_loads.get("partial_acc", 0)
    if not used <= acc <= every:
        problems.append(f"partial_acc was loaded {acc} times; every accumulator of a partition that saw a key must "
                        f"be read ({used}), and none more than once ({every} in all): a thread reads its own "
                        "channel of each partition once")
    bound = 2 * HEAD_DIM_MAX * num_seqs * heads * partitions
    for name in ("partial_max", "partial_sum"):
        counted = merge.global_loads.get(name, 0)
        if counted > bound:
            problems.append(f"{name} was loaded {counted} times, more than twice per thread and partition ({bound}): "
                            "read each partition's maximum and sum at most twice")
    return problems


def _raise_problems(problems: list[str]) -> None:
    if problems:
        raise AssertionError("\n".join(problems))


def paged_v1_matches_reference(kernel) -> None:
    """A shuffled block table, a partial last page, two query heads per KV head."""
    context_lens = [13]
    out, case, seed, _ = paged_v1_run(kernel, context_lens, heads=4, kv_heads=2, head_dim=8, block_size=4)
    check_paged(out, case, seed=seed, kernel=kernel)
    _passed(f"context_lens = {context_lens}, block_size 4, 4 query heads over 2 KV heads")


def paged_v1_handles_mixed_lengths(kernel) -> None:
    """Sequences of 0, a whole page and a page and a bit in one launch; out is 0 for the empty one."""
    context_lens = [0, 4, 6]
    out, case, seed, _ = paged_v1_run(kernel, context_lens, heads=1, kv_heads=1, head_dim=4, block_size=4)
    check_paged(out, case, seed=seed, kernel=kernel)
    _passed(f"context_lens = {context_lens} in one launch")


def paged_v1_is_numerically_stable(kernel) -> None:
    """Logits of about 1e4 before scaling give finite, exact results."""
    out, case, seed, _ = paged_v1_run(kernel, [9, 17], heads=1, kv_heads=1, head_dim=16, block_size=4,
                                      large_logits=True)
    check_paged(out, case, seed=seed, label="logits of size 1e4", kernel=kernel)
    _passed("logits of size 1e4")


def paged_v1_traffic_fits(kernel) -> None:
    """Only out written; each K and V element of a context read once per query head."""
    out, case, seed, traffic = paged_v1_run(kernel, [3, 8], heads=1, kv_heads=1, head_dim=4, block_size=4,
                                            counted=True)
    if traffic is not None:
        _raise_problems(paged_v1_traffic_problems(traffic, case))
    _passed("out written once; K and V of each context read once per query head")


def merge_matches_reference(kernel) -> None:
    """v2 with 5-token partitions (2 per sequence) merged by your kernel, logits of about 1e4."""
    out, case, seed, _ = paged_v2_run(kernel, [6, 9], partition_size=5, heads=1, kv_heads=1, head_dim=16,
                                      block_size=4, large_logits=True)
    check_paged(out, case, seed=seed, kernel=kernel, partition_size=5,
                label="context_lens=[6, 9], partition_size=5, logits of size 1e4")
    _passed("context_lens = [6, 9] in partitions of 5, logits of size 1e4")


def merge_handles_empty_partitions(kernel) -> None:
    """Partitions that saw no key: an empty context next to a short and a long one (the merge alone)."""
    context_lens = [0, 2, 29]
    out, case, seed, _ = merge_run(kernel, context_lens, partition_size=5, heads=1, kv_heads=1, head_dim=4,
                                   block_size=4)
    check_paged(out, case, seed=seed, kernel=kernel, partition_size=5)
    _passed(f"context_lens = {context_lens} in partitions of 5")


def merge_traffic_fits(kernel) -> None:
    """The merge writes only out and reads each partial a bounded number of times (the merge alone)."""
    out, case, seed, traffic = merge_run(kernel, [2, 9], partition_size=5, heads=2, kv_heads=1, head_dim=4,
                                         block_size=4, counted=True)
    if traffic is not None:
        _raise_problems(merge_traffic_problems(traffic, case, 5))
    _passed("the merge writes out only and reads each partial a bounded number of times")


def cache_write_case(rng, spans, *, kv_heads: int, head_dim: int, block_size: int, shuffle_tokens: bool = False,
                     spare_blocks: int = 2) -> dict:
    """A step that writes new tokens into a cache of random content, as a dict.

    spans: ``(start, count)`` per sequence: its new tokens take positions start ... start + count - 1
    (a prefill starts at 0 with many, a decode step adds 1 after the context). Each sequence owns
    the pages up to its last new position, shuffled in the pool; rows of block_tables are padded with
    -1. shuffle_tokens: the tokens come in random order instead of sequence by sequence.
    Keys: k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache (the cache before).
    """
    from kernels.launching import cdiv

    pages = [cdiv(start + count, block_size) for start, count in spans]
    num_blocks = sum(pages) + spare_blocks
    order = rng.permutation(num_blocks)
    tables = np.full((len(spans), max(pages, default=0) + 1), -1, np.int32)
    handed_out = 0
    for s, n in enumerate(pages):
        tables[s, :n] = order[handed_out:handed_out + n]
        handed_out += n
    seqs = np.array([s for s, (_, count) in enumerate(spans) for _ in range(count)], dtype=np.int32)
    positions = np.array([start + i for start, count in spans for i in range(count)], dtype=np.int32)
    if shuffle_tokens:
        perm = rng.permutation(len(seqs))
        seqs, positions = seqs[perm], positions[perm]
    shape = (num_blocks, kv_heads, block_size, head_dim)
    return dict(k_new=rng.standard_normal((len(seqs), kv_heads, head_dim), dtype=np.float32),
                v_new=rng.standard_normal((len(seqs), kv_heads, head_dim), dtype=np.float32),
                token_seqs=seqs, token_positions=positions, block_tables=tables,
                k_cache=rng.standard_normal(shape, dtype=np.float32),
                v_cache=rng.standard_normal(shape, dtype=np.float32))


def cache_write_expected(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """The caches after the write, in NumPy: each token's rows at its slot, every other slot as it was."""
    k, v = case["k_cache"].copy(), case["v_cache"].copy()
    block_size = k.shape[2]
    for t, (s, pos) in enumerate(zip(case["token_seqs"].tolist(), case["token_positions"].tolist())):
        block = case["block_tables"][s, pos // block_size]
        k[block, :, pos % block_size] = case["k_new"][t]
        v[block, :, pos % block_size] = case["v_new"][t]
    return k, v


def cache_write_run(kernel, spans, *, kv_heads: int = 2, head_dim: int = 4, block_size: int = 4,
                    shuffle_tokens: bool = False, rng=None, counted: bool = False):
    """Launch a cache-write kernel with the course's grid (one block per token) on a fresh case:
    ``(k_cache, v_cache, case, seed, traffic)``; ``case`` keeps the caches as they were before."""
    from kernels.kv_cache import THREADS
    from kernels.launching import cdiv, note_output

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = cache_write_case(rng, spans, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size,
                            shuffle_tokens=shuffle_tokens)
    k_cache, v_cache = note_output(case["k_cache"].copy()), note_output(case["v_cache"].copy())
    args = [case[k] for k in ("k_new", "v_new", "token_seqs", "token_positions", "block_tables")]
    threads = min(THREADS, 32 * cdiv(kv_heads * head_dim, 32))
    launch = lambda: kernel[len(case["token_seqs"]), threads](*args, k_cache, v_cache)  # noqa: E731
    sizes = dict(kv_heads=kv_heads, block_size=block_size, max_pages=case["block_tables"].shape[1],
                 num_blocks=k_cache.shape[0])
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), sizes)
    return k_cache, v_cache, case, seed, traffic


def check_cache_write(k_cache, v_cache, case: dict, *, seed=None, label: str = ""):
    """Both caches equal the expected ones, bit for bit; on failure name the token and the slot.
    Returns the CheckResult of v_cache (both passed)."""
    from course.diagnoses.paged import cache_write_findings

    want_k, want_v = cache_write_expected(case)
    label = label or (f"{len(case['token_seqs'])} tokens, block_size {k_cache.shape[2]}, "
                      f"kv_heads {k_cache.shape[1]}, head_dim {k_cache.shape[3]}")
    findings = lambda: cache_write_findings(k_cache, v_cache, want_k, want_v, case["k_cache"],  # noqa: E731
                                            case["v_cache"], case)
    for name, got, want in (("k_cache", k_cache, want_k), ("v_cache", v_cache, want_v)):
        result = _with_findings(findings, got, want, name=f"{name} after writing {label}", dims=CACHE_DIMS,
                                tile={"slot": k_cache.shape[2]}, seed=seed)
        if not np.array_equal(got, want):
            raise AssertionError(f"{name} after writing {label}: close to the expected values but not equal; a "
                                 "copy must move each value unchanged")
    return result


def cache_write_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one cache-write launch breaks of its budget."""
    if traffic.kernel_names != ["kv_cache_write_kernel"]:
        return [f"expected one launch of kv_cache_write_kernel, saw {traffic.kernel_names}"]
    rows = case["k_new"].size
    problems = []
    stored = {name: count for name, count in traffic.global_stores.items() if count}
    if stored != {"k_cache": rows, "v_cache": rows}:
        problems.append(f"a write stores each new key and value once ({rows} stores into each cache) and nothing "
                        f"else; stores counted: {stored}")
    for name in ("k_new", "v_new"):
        if _loads(traffic, name) != rows:
            problems.append(f"{name} was loaded {_loads(traffic, name)} times; it has {rows} elements: read each once")
    for name in ("k_cache", "v_cache"):
        if _loads(traffic, name):
            problems.append(f"{name} was loaded {_loads(traffic, name)} times: a write does not need to read the cache")
    return problems


def cache_write_matches_reference(kernel) -> None:
    """A prefill that crosses two block boundaries, a decode step into a partial page and one into a new page."""
    spans = [(0, 9), (6, 1), (8, 1)]
    k_cache, v_cache, case, seed, _ = cache_write_run(kernel, spans, kv_heads=2, head_dim=4, block_size=4)
    check_cache_write(k_cache, v_cache, case, seed=seed)
    _passed(f"new tokens at positions (start, count) = {spans} per sequence, block_size 4")


def cache_write_traffic_fits(kernel) -> None:
    """Each new key and value read once and stored once; the cache is not read."""
    k_cache, v_cache, case, seed, traffic = cache_write_run(kernel, [(0, 5), (3, 1)], kv_heads=2, head_dim=4,
                                                            block_size=4, counted=True)
    if traffic is not None:
        _raise_problems(cache_write_traffic_problems(traffic, case))
    _passed("each new key and value read once and stored once")


# ------------------------------------------------------------------------------- day 7: grouped-query attention

def gqa_prefill_case(rng, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *, causal: bool,
                     kv_lens=None, large_logits: bool = False) -> dict:
    """A prefill over K and V of ``kv_heads`` heads, as a dict: q (B, heads, N, d), k and v (B, kv_heads,
    M, d), kv_lens (B,) int32, causal and the kernel's scale (float32 1/sqrt(d)). large_logits: integer q
    and k in [-50, 50], q·k of about 1e4 and exact in float32."""
    if large_logits:
        q = rng.integers(-50, 51, (B, heads, N, d)).astype(np.float32)
        k = rng.integers(-50, 51, (B, kv_heads, M, d)).astype(np.float32)
    else:
        q = rng.standard_normal((B, heads, N, d), dtype=np.float32)
        k = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    v = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    lens = np.full(B, M, dtype=np.int32) if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    return dict(q=q, k=k, v=v, kv_lens=lens, causal=causal, scale=np.float32(1.0 / math.sqrt(d)))


def _gqa_label(case: dict) -> str:
    B, heads, N, d = case["q"].shape
    kv_heads, M = case["k"].shape[1], case["k"].shape[2]
    return (f"B={B} heads={heads} kv_heads={kv_heads} (group {heads // kv_heads}) N={N} M={M} d={d} "
            f"causal={case['causal']} kv_lens={case['kv_lens'].tolist()}")


def gqa_prefill_run(kernel, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *, causal: bool,
                    kv_lens=None, large_logits: bool = False, rng=None, counted: bool = False):
    """Launch a GQA prefill kernel with the course's grid (``prefill_grid``, ``prefill_block`` threads)
    on a fresh case: ``(o, case, seed, traffic)``."""
    from kernels.gqa_attention import prefill_block, prefill_grid

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = gqa_prefill_case(rng, B, heads, kv_heads, N, M, d, causal=causal, kv_lens=kv_lens,
                            large_logits=large_logits)
    o = poison(np.empty_like(case["q"]))
    args = (case["q"], case["k"], case["v"], case["kv_lens"], o, case["scale"], causal)
    launch = lambda: kernel[prefill_grid(B, heads, kv_heads, N), prefill_block(heads, kv_heads)](*args)  # noqa: E731
    sizes = dict(kv_heads=kv_heads, heads=heads, kv_line=("k[", "v["))
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), sizes)
    return o, case, seed, traffic


def check_gqa_prefill(o, case: dict, *, seed=None, label: str = "", kernel=None):
    """Compare a GQA prefill output with the float64 reference; on failure name the head map, the
    unwritten heads, or (on K and V repeated to the query heads) day 5's attention mistakes."""
    from course.diagnoses.gqa import head_findings
    from course.diagnoses.paged import _close
    from kernels import reference
    from kernels.gqa_attention import TILE_KV, prefill_block, prefill_tiling

    q, k, v, lens, causal = case["q"], case["k"], case["v"], case["kv_lens"], case["causal"]
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    want = reference.attention(q, k, v, causal=causal, kv_lens=lens)
    got = np.asarray(o)

    def attend(kv_of):
        index = [kv_of(h) for h in range(heads)]
        return reference.attention(q, k[:, index], v[:, index], causal=causal, kv_lens=lens)

    findings = lambda: head_findings(got.astype(np.float64), want, heads=heads, kv_heads=kv_heads,  # noqa: E731
                                     poisoned=is_poison(got), attend=attend, close=_close, prefix="gqa")
    repeated = dict(q=q, k=np.repeat(k, group, axis=1), v=np.repeat(v, group, axis=1), causal=causal,
                    kv_lens=lens, tile_q=prefill_tiling(group)[2], tile_kv=TILE_KV)
    hint = ("with causal=True row i sees keys 0 ... i, its own position included" if causal
            else "every key below kv_lens[b] counts") + "; a row that sees no key gives 0"
    rows, tile = prefill_block(heads, kv_heads), TILE_KV * q.shape[3]
    if rows < tile:
        hint += (f". Here a block has {rows} rows (threads) and a K tile {TILE_KV} x {q.shape[3]} = {tile} elements: "
                 "does every thread load elements t, t + rows, ... of the tile, until all of it is loaded?")
    return _with_findings(findings, o, want, name=f"O for {label or _gqa_label(case)}", dims=ATTENTION_DIMS,
                          seed=seed, hints={"any": hint}, attention=repeated, kernel=kernel)


def gqa_prefill_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one GQA prefill launch breaks of its budget: o written once, q read
    once, and each K and V element a block needs read once per block (``course.models.gqa``), not once
    per query head of the group."""
    from course.models import gqa as model

    q, k = case["q"], case["k"]
    B, heads, N, d = q.shape
    kv_heads, M = k.shape[1], k.shape[2]
    group = heads // kv_heads
    if traffic.launches != 1:
        return [f"expected one launch of your kernel, saw {traffic.kernel_names}"]
    problems = []
    stored = {name: count for name, count in traffic.global_stores.items() if count}
    if stored != {"o": q.size}:
        problems.append(f"the kernel may write only o, each element once ({q.size} stores); stores counted: {stored}")
    if not q.size <= _loads(traffic, "q") <= 1.1 * q.size:
        problems.append(f"each query row must be read once ({q.size} loads of q); {_loads(traffic, 'q')} counted")
    budget = model.requested_prefill(B, heads, kv_heads, N, d, M, causal=case["causal"],
                                     kv_lens=case["kv_lens"].tolist())
    for name in ("k", "v"):
        want, counted = budget[name][0], _loads(traffic, name)
        if want <= counted <= 1.1 * want:
            continue
        if counted > want:
            why = (f" That is about {counted / max(want, 1):.3g} times the budget"
                   + (f", the group size {group}: the tile was loaded once per query head of the group. Load "
                      "each K and V tile once per block into shared memory, then let every (position, head) row "
                      "of the block read it there" if group > 1 and counted >= 0.9 * group * want else
                      ": is a key loaded past the keys the block needs (past kv_lens[b], or under the causal "
                      "mask past the block's last query position), or twice?"))
        else:
            why = " Fewer: every key a block needs must be loaded (up to kv_lens[b], causal: up to its last position)."
        problems.append(f"{name} was loaded {counted} times for {_gqa_label(case)}; the budget is {want}: each "
                        "element of the keys a block needs, once per block (a block holds positions x the heads of "
                        f"a group).{why}")
    return problems


def gqa_prefill_matches_reference(kernel) -> None:
    """Two query heads per KV head, two KV heads, causal, two key tiles."""
    o, case, seed, _ = gqa_prefill_run(kernel, 1, 4, 2, 20, 20, 4, causal=True)
    check_gqa_prefill(o, case, seed=seed, kernel=kernel)
    _passed("4 query heads over 2 KV heads, N = 20, causal")


def gqa_prefill_handles_every_group(kernel) -> None:
    """MHA (group 1, where a block's 64 rows load a tile of 16 keys x 8 channels), and MQA with kv_lens."""
    for args, options in (((1, 2, 2, 18, 18, 8), dict(causal=False)),
                          ((2, 3, 1, 12, 14, 4), dict(causal=True, kv_lens=[14, 5]))):
        o, case, seed, _ = gqa_prefill_run(kernel, *args, **options)
        check_gqa_prefill(o, case, seed=seed, kernel=kernel)
    _passed("group 1 (MHA) with head_dim 8, group 3 = heads (MQA) with kv_lens [14, 5], causal")


def gqa_prefill_traffic_fits(kernel) -> None:
    """Only o written; q read once; K and V read once per block, for all the heads of its group."""
    o, case, seed, traffic = gqa_prefill_run(kernel, 1, 4, 1, 10, 12, 4, causal=False, counted=True)
    if traffic is not None:
        _raise_problems(gqa_prefill_traffic_problems(traffic, case))
    check_gqa_prefill(o, case, seed=seed, kernel=kernel)
    _passed("o written once, q read once, K and V once per block for its 4 heads")


def merge_partials(partial_max, partial_sum, partial_acc) -> np.ndarray:
    """Day 6's merge in NumPy (float64): ``out[s, h] = Σ_p e^(m_p - m) a_p / Σ_p e^(m_p - m) ℓ_p``, 0 where
    no partition saw a key. A NaN partial (one never written holds the poison) makes its row NaN."""
    maxima = np.asarray(partial_max, np.float64)
    sums = np.asarray(partial_sum, np.float64)
    accs = np.asarray(partial_acc, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = maxima.max(axis=2, keepdims=True)
        weight = np.where(np.isneginf(maxima), 0.0, np.exp(maxima - np.where(np.isfinite(m), m, 0.0)))
        weight = np.where(np.isnan(maxima), np.nan, weight)
        total = (weight * sums).sum(axis=2)
        out = (weight[..., None] * accs).sum(axis=2)
        return np.where(total[..., None] > 0, out / np.where(total > 0, total, 1.0)[..., None],
                        np.where(np.isnan(total)[..., None], np.nan, 0.0))


def gqa_decode_run(kernel, context_lens, *, heads: int, kv_heads: int, head_dim: int = 8, block_size: int = 4,
                   partition_size: int = 8, large_logits: bool = False, rng=None, counted: bool = False):
    """Your partition kernel with the course's grid (``decode_grid``, THREADS threads) on a fresh paged case,
    its partials poisoned first, then merged in NumPy (:func:`merge_partials`, day 6's algebra):
    ``(out, case, seed, traffic, partials)``; out is float32, traffic that of your kernel alone."""
    from kernels.gqa_attention import THREADS, decode_grid
    from kernels.paged_attention import partitions_for

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    num_seqs = len(case["context_lens"])
    partitions = partitions_for(int(case["context_lens"].max(initial=0)), partition_size)
    partials = tuple(poison(np.empty(shape, np.float32)) for shape in
                     ((num_seqs, heads, partitions), (num_seqs, heads, partitions),
                      (num_seqs, heads, partitions, head_dim)))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens", "scale")]
    launch = lambda: kernel[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](  # noqa: E731
        *args, partition_size, *partials)
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    case["partition_size"] = partition_size
    return merge_partials(*partials).astype(np.float32), case, seed, traffic, partials


def check_gqa_decode(out, case: dict, partials, *, seed=None, label: str = "", kernel=None):
    """Compare the merged decode output with the float64 reference; on failure name the heads whose
    partials were never written, the head map, or day 6's paged mistakes."""
    from course.diagnoses.gqa import head_findings

    heads, kv_heads = case["q"].shape[1], case["k_cache"].shape[1]
    # A head whose partials were never written: they still hold the poison.
    unwritten = np.broadcast_to(is_poison(partials[2]).all(axis=(2, 3))[..., None], case["q"].shape)
    found = head_findings(np.asarray(out).astype(np.float64), None, heads=heads, kv_heads=kv_heads,
                          poisoned=unwritten, attend=lambda kv_of: None, close=None, prefix="gqa")
    if found:
        raise AssertionError(f"out for {label or _paged_label(case)}: {found[0][1]}")
    # The head maps and day 6's mistakes: course.diagnoses.paged, through check_paged.
    return check_paged(out, case, seed=seed, label=label, kernel=kernel)


def gqa_decode_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one launch of your partition kernel breaks of its budget: only the partials written, each once; each K and V element of a context read once per block
    of its group (once per KV head while the group fits a block), not once per query head."""
    from kernels.gqa_attention import subgroups_for

    num_seqs, heads, d = case["q"].shape
    kv_heads = case["k_cache"].shape[1]
    group = heads // kv_heads
    lens = case["context_lens"].tolist()
    if traffic.launches != 1:
        return [f"expected one launch of your kernel, saw {traffic.kernel_names}"]
    launch = traffic.per_launch[0]
    partitions = max(1, -(-max(lens, default=0) // case["partition_size"]))
    problems = []
    stored = {name: count for name, count in launch.global_stores.items() if count}
    want_stored = {"partial_max": num_seqs * heads * partitions, "partial_sum": num_seqs * heads * partitions,
                   "partial_acc": num_seqs * heads * partitions * d}
    if stored != want_stored:
        problems.append(f"the partition kernel may write only the partials, each element once ({want_stored}); "
                        f"stores counted: {stored}")
    readers = kv_heads * subgroups_for(group)
    want = readers * sum(lens) * d
    for name in ("k_cache", "v_cache"):
        counted = launch.global_loads.get(name, 0)
        if counted == want:
            continue
        if counted > want and group > 1 and counted >= 0.9 * group * want / subgroups_for(group):
            why = (f"about {counted / max(want, 1):.3g} times the budget: each token's K and V row was loaded once per "
                   "query head of the group. Load a token's rows once per warp and score them for every head of "
                   "the block")
        elif counted > want:
            why = "more: is a slot past a context's end, or a token twice, read? (warp w takes every WARPS-th token)"
        else:
            why = "fewer: is a key of the context skipped?"
        problems.append(f"{name} was loaded {counted} times for {_paged_label(case)}; the budget is each element of a "
                        f"context once per block of its group: {readers} block(s) per token x Σ context_lens "
                        f"{sum(lens)} x head_dim {d} = {want}; {why}")
    return problems


def gqa_decode_matches_reference(kernel) -> None:
    """Two KV heads with 2 query heads each, a shuffled table, a partial last page, two partitions."""
    out, case, seed, _, partials = gqa_decode_run(kernel, [11], heads=4, kv_heads=2, head_dim=8, block_size=4,
                                                  partition_size=8)
    check_gqa_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("context_lens = [11] in partitions of 8, 4 query heads over 2 KV heads")


def gqa_decode_handles_every_group(kernel) -> None:
    """MHA (group 1) with an empty context, and MQA with a group of GROUP_MAX + 1 (two blocks per KV head)."""
    from kernels.gqa_attention import GROUP_MAX

    for lens, heads, kv_heads in (([0, 5], 2, 2), ([6], GROUP_MAX + 1, 1)):
        out, case, seed, _, partials = gqa_decode_run(kernel, lens, heads=heads, kv_heads=kv_heads, head_dim=4,
                                                      block_size=4, partition_size=8)
        check_gqa_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed(f"group 1 with context_lens [0, 5]; group {GROUP_MAX + 1} (two blocks per KV head)")


def gqa_decode_traffic_fits(kernel) -> None:
    """Only the partials written; each K and V element read once per KV head, for its whole group."""
    out, case, seed, traffic, partials = gqa_decode_run(kernel, [5, 3], heads=4, kv_heads=1, head_dim=4,
                                                        block_size=4, partition_size=8, counted=True)
    if traffic is not None:
        _raise_problems(gqa_decode_traffic_problems(traffic, case))
    check_gqa_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("the partials written once; each page read once for the 4 query heads of its KV head")


# ------------------------------------------------------------------------------- day 8: mixed precision

def _storage_dtype(fmt: str):
    """The NumPy dtype of a storage format: "fp16" is np.float16, "bf16" ml_dtypes' bfloat16."""
    import ml_dtypes

    formats = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
    if fmt not in formats:
        raise ValueError(f"fmt must be one of {tuple(formats)}, got {fmt!r}")
    return formats[fmt]


# Integers in [-n, n] for large logits, by format: exact in it (fp16 up to 2048, bf16 up to 256). fp16's are
# large enough that their products pass 65504 (q·k of 16 of them reaches about 2e6); bf16 has float32's range.
_BIG_LOGIT_INT = {"fp16": 600, "bf16": 200}


def mixed_prefill_case(rng, fmt: str, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *, causal: bool,
                       kv_lens=None, values: str = "normal", large_logits: bool = False) -> dict:
    """A prefill stored in ``fmt`` ("fp16" or "bf16"), as a dict: q (B, heads, N, d), k and v (B, kv_heads,
    M, d) float32 as drawn, ``stored``: the three rounded to ``fmt``, kv_lens, causal, fmt and the scale
    (float32 1/sqrt(d)).

    values: "normal" (standard normal v), "offset" (v uniform in [1, 2): every output near 1.5, so the
    rounding of a long sum shows) or "sharp" (q and k multiples of 1/16 below 4 in size, exact in both
    formats, sharing a common direction: every scaled logit near 4 sqrt(d) give or take 1, so a logit
    rounded to 11 bits moves every weight, where storage moves none). large_logits: KV head 0 and its
    query heads hold integers, exact in ``fmt`` (fp16: in [-600, 600], whose products pass 65504, fp16's
    largest; bf16: in [-200, 200]), and in each sequence key 0 of KV head 0 equals query 0 of head 0, so
    q·k before the scale reaches about 2e6 (fp16) or 2e5 (bf16) there; the other KV heads stay standard
    normal."""
    dtype = _storage_dtype(fmt)
    q = rng.standard_normal((B, heads, N, d), dtype=np.float32)
    k = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    if values == "offset":
        v = rng.uniform(1.0, 2.0, (B, kv_heads, M, d)).astype(np.float32)
    elif values in ("normal", "sharp"):
        v = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    else:
        raise ValueError(f"values must be 'normal', 'offset' or 'sharp', got {values!r}")
    if values == "sharp":
        common = rng.choice(np.array([-2.0, 2.0], np.float32), (B, kv_heads, 1, d))
        sixteenths = lambda a: (np.round(a * 16) / 16).astype(np.float32)  # noqa: E731
        q = sixteenths(np.repeat(common, heads // kv_heads, axis=1) + rng.normal(0.0, 0.5, q.shape))
        k = sixteenths(common + rng.normal(0.0, 0.5, k.shape))
    if large_logits:
        group, n = heads // kv_heads, _BIG_LOGIT_INT[fmt]
        q[:, :group] = rng.integers(-n, n + 1, (B, group, N, d))
        k[:, 0] = rng.integers(-n, n + 1, (B, M, d))
        if N and M:
            k[:, 0, 0] = q[:, 0, 0]
    lens = np.full(B, M, dtype=np.int32) if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    return dict(q=q, k=k, v=v, stored=tuple(a.astype(dtype) for a in (q, k, v)), kv_lens=lens, causal=causal,
                fmt=fmt, scale=np.float32(1.0 / math.sqrt(d)))


def _mixed_label(case: dict) -> str:
    B, heads, N, d = case["q"].shape
    kv_heads, M = case["k"].shape[1], case["k"].shape[2]
    return (f"{case['fmt']}, B={B} heads={heads} kv_heads={kv_heads} N={N} M={M} d={d} causal={case['causal']} "
            f"kv_lens={case['kv_lens'].tolist()}")


def mixed_prefill_run(kernel, fmt: str, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *,
                      causal: bool, kv_lens=None, values: str = "normal", large_logits: bool = False, rng=None):
    """Your prefill kernel through the course's launcher (``gqa_prefill_mixed_tiles``: day 7's grid) on a
    fresh case stored in ``fmt``, its output poisoned first: ``(o, case, seed)``, o in ``fmt``."""
    from kernels.low_precision_attention import gqa_prefill_mixed_tiles

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = mixed_prefill_case(rng, fmt, B, heads, kv_heads, N, M, d, causal=causal, kv_lens=kv_lens, values=values,
                              large_logits=large_logits)
    o = poison(np.empty(case["q"].shape, _storage_dtype(fmt)))
    launch = lambda: gqa_prefill_mixed_tiles(*case["stored"], causal=causal, kv_lens=case["kv_lens"],  # noqa: E731
                                             scale=case["scale"], out=o, kernel=kernel)
    _launch_explained(launch, dict(kv_heads=kv_heads, heads=heads, kv_line=("k[", "v[")))
    return o, case, seed


def _prefill_rows(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """(keys each row sums, the largest |q·k| of each row before the scale), both (B, heads, N), from the
    stored q and k."""
    q, k = (a.astype(np.float64) for a in case["stored"][:2])
    B, heads, N, _ = q.shape
    group = heads // k.shape[1]
    lens = np.minimum(case["kv_lens"].astype(np.int64), k.shape[2])
    ends = np.broadcast_to(lens[:, None, None], (B, heads, N)).copy()
    if case["causal"]:
        ends = np.minimum(ends, np.arange(1, N + 1)[None, None, :])
    logits = np.einsum("bhid,bhjd->bhij", q, np.repeat(k, group, axis=1))
    allowed = np.arange(k.shape[2])[None, None, None, :] < ends[..., None]
    return ends, np.abs(np.where(allowed, logits, 0.0)).max(axis=-1, initial=0.0)


def _rule_limit(ref: np.ndarray, same: np.ndarray) -> float:
    """The largest error the precision rule (DESIGN.md §6) allows: twice storage's, plus the atol."""
    from course.checking import LOWP_DEFAULT_ATOL, LOWP_FACTOR

    finite = np.isfinite(ref)
    scale = float(np.abs(ref[finite]).max(initial=0.0))
    return LOWP_FACTOR * float(np.abs(same - ref)[finite].max(initial=0.0)) + LOWP_DEFAULT_ATOL * scale


def check_mixed_prefill(o, case: dict, *, seed=None, label: str = "", kernel=None):
    """Compare a mixed-precision prefill output with the float64 reference on the inputs as drawn, under
    the precision rule of ``DESIGN.md`` §6: at most twice the error of the same attention done exactly on
    the stored inputs and stored once (``reference.attention_at_precision``). On failure name unscaled
    logits past fp16's range, a sum kept at the storage precision, the head map, or day 5's mistakes."""
    from course.diagnoses.gqa import head_findings
    from course.diagnoses.paged import _close
    from course.diagnoses.precision import accumulation_findings, overflow_findings, rounding_findings
    from kernels import reference
    from kernels.gqa_attention import TILE_KV, prefill_tiling

    q, k, v = case["q"], case["k"], case["v"]
    lens, causal, fmt = case["kv_lens"], case["causal"], case["fmt"]
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    o_host = np.asarray(o)
    if o_host.dtype != _storage_dtype(fmt):
        raise AssertionError(f"O for {label or _mixed_label(case)} must be stored in {fmt} "
                             f"({_storage_dtype(fmt)}), got {o_host.dtype}")
    ref = reference.attention(q, k, v, causal=causal, kv_lens=lens)
    same = reference.attention_at_precision(q, k, v, fmt, causal=causal, kv_lens=lens)
    stored = [a.astype(np.float64) for a in case["stored"]]
    got = o_host.astype(np.float64)
    noise = float(np.linalg.norm((same - ref)[np.isfinite(ref)])) / max(float(np.linalg.norm(ref)), 1e-30)
    close = lambda a, b: _close(a, b, max(1e-3, 4 * noise))  # noqa: E731

    def attend(kv_of):
        index = [kv_of(h) for h in range(heads)]
        return reference.attention(stored[0], stored[1][:, index], stored[2][:, index], causal=causal, kv_lens=lens)

    def findings():
        found = head_findings(got, reference.attention(*stored, causal=causal, kv_lens=lens), heads=heads,
                              kv_heads=kv_heads, poisoned=is_poison(o_host), attend=attend, close=close, prefix="gqa")
        if found:
            return found
        lengths, logits = _prefill_rows(case)
        limit = _rule_limit(ref, same)
        return (overflow_findings(got, ref, logits, fmt=fmt)
                or accumulation_findings(got, ref, same, lengths, fmt=fmt, limit=limit)
                or rounding_findings(got, ref, same, fmt=fmt, limit=limit))

    repeated = dict(q=stored[0], k=np.repeat(stored[1], group, axis=1), v=np.repeat(stored[2], group, axis=1),
                    causal=causal, kv_lens=lens, scale=float(case["scale"]), tile_q=prefill_tiling(group)[2],
                    tile_kv=TILE_KV)
    hint = (f"q, k, v and o are stored in {fmt}: convert each element to float32 as it is loaded "
            "(float32(x)), scale q in float32, compute and accumulate in float32, and round once, when o is stored")
    return _with_findings(findings, o_host, ref, name=f"O for {label or _mixed_label(case)}", dims=ATTENTION_DIMS,
                          seed=seed, precision=fmt, same_precision_ref=same, hints={"any": hint},
                          attention=repeated, kernel=kernel)


def mixed_prefill_matches_reference(kernel) -> None:
    """fp16: two query heads per KV head, causal, two key tiles; bf16: a group of 3 with kv_lens [17, 0];
    fp16 with sharp logits (all near 16 after the scale)."""
    for fmt, args, options in (("fp16", (1, 4, 2, 20, 20, 8), dict(causal=True)),
                               ("bf16", (2, 3, 1, 9, 17, 4), dict(causal=False, kv_lens=[17, 0])),
                               ("fp16", (1, 2, 1, 4, 12, 16), dict(causal=False, values="sharp"))):
        o, case, seed = mixed_prefill_run(kernel, fmt, *args, **options)
        check_mixed_prefill(o, case, seed=seed, kernel=kernel)
    _passed("fp16, 4 query heads over 2 KV heads, causal; bf16, group 3 with kv_lens [17, 0]; fp16, sharp logits")


def mixed_prefill_long_rows(kernel) -> None:
    """fp16, rows of 16 and of 256 keys: the error may not grow with the keys a row sums."""
    o, case, seed = mixed_prefill_run(kernel, "fp16", 2, 1, 1, 3, 256, 4, causal=False, kv_lens=[16, 256],
                                      values="offset")
    check_mixed_prefill(o, case, seed=seed, kernel=kernel)
    _passed("fp16, rows of 16 and 256 keys, within twice the error of storage")


def mixed_prefill_large_logits(kernel) -> None:
    """fp16, KV head 0 with q·k past 65504 before the scale (products of its numbers too), KV head 1 with
    small logits."""
    o, case, seed = mixed_prefill_run(kernel, "fp16", 1, 2, 2, 6, 7, 16, causal=False, large_logits=True)
    check_mixed_prefill(o, case, seed=seed, label="fp16, q·k up to 2e6 before the scale", kernel=kernel)
    _passed("fp16 with q·k up to 2e6 before the scale")


def mixed_decode_case(rng, context_lens, *, heads: int, kv_heads: int, head_dim: int, block_size: int,
                      values: str = "normal", large_logits: bool = False) -> dict:
    """``paged_inputs`` with the cache stored in fp16: ``k_cache`` and ``v_cache`` float16 (NaN in every slot
    that holds no key), ``k_cache32`` and ``v_cache32`` the float32 caches they round. values "offset": V
    uniform in [1, 2); "flat": that and q / 256, so every weight is within about 2% of 1 and a sum over
    the tokens grows with their number (an fp16 sum past 64 then rounds each weight the same way, and the
    error adds up instead of averaging out); large_logits: integer q and K in [-600, 600] (exact in fp16, their products past
    65504) and the first key of sequence 0 on KV head 0 equal to query 0 of that sequence, so q·k reaches
    about 2e6 before the scale."""
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
    unused = np.isnan(case["k_cache"])
    if values in ("offset", "flat"):
        case["v_cache"] = np.where(unused, np.nan, rng.uniform(1.0, 2.0, unused.shape)).astype(np.float32)
    elif values != "normal":
        raise ValueError(f"values must be 'normal', 'offset' or 'flat', got {values!r}")
    if values == "flat":
        case["q"] = (case["q"] / 256).astype(np.float32)
    if large_logits:
        big = lambda shape: rng.integers(-_BIG_LOGIT_INT["fp16"], _BIG_LOGIT_INT["fp16"] + 1, shape)  # noqa: E731
        case["k_cache"] = np.where(unused, np.nan, big(unused.shape)).astype(np.float32)
        case["q"] = big(case["q"].shape).astype(np.float32)
        if case["context_lens"].size and case["context_lens"][0] > 0:
            case["k_cache"][case["block_tables"][0, 0], 0, 0] = case["q"][0, 0]
    case["k_cache32"], case["v_cache32"] = case["k_cache"], case["v_cache"]
    case["k_cache"], case["v_cache"] = case["k_cache32"].astype(np.float16), case["v_cache32"].astype(np.float16)
    return case


def mixed_decode_run(kernel, context_lens, *, heads: int, kv_heads: int, head_dim: int = 8, block_size: int = 4,
                     partition_size: int = 8, values: str = "normal", large_logits: bool = False, rng=None,
                     counted: bool = False):
    """Your partition kernel with the course's grid (``decode_grid``, THREADS threads) on a fresh case whose
    cache is stored in fp16 (:func:`mixed_decode_case`), its partials poisoned first, then merged in NumPy
    (:func:`merge_partials`): ``(out, case, seed, traffic, partials)``; traffic that of your kernel alone."""
    from kernels.gqa_attention import THREADS, decode_grid
    from kernels.paged_attention import partitions_for

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = mixed_decode_case(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                             block_size=block_size, values=values, large_logits=large_logits)
    num_seqs = len(case["context_lens"])
    partitions = partitions_for(int(case["context_lens"].max(initial=0)), partition_size)
    partials = tuple(poison(np.empty(shape, np.float32)) for shape in
                     ((num_seqs, heads, partitions), (num_seqs, heads, partitions),
                      (num_seqs, heads, partitions, head_dim)))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens", "scale")]
    launch = lambda: kernel[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](  # noqa: E731
        *args, partition_size, *partials)
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    case["partition_size"] = partition_size
    return merge_partials(*partials).astype(np.float32), case, seed, traffic, partials


def check_mixed_decode(out, case: dict, partials=None, *, seed=None, label: str = "", kernel=None):
    """Compare the merged decode output with the float64 reference on the float32 cache the fp16 one
    rounds, under the precision rule (at most twice the error of the same decode done exactly on the fp16
    cache); on failure name the heads never written (from the partials, when given), a sum kept in fp16,
    logits past fp16's range, or day 6 and 7's paged mistakes."""
    from course.diagnoses.gqa import head_findings
    from course.diagnoses.paged import decode_findings
    from course.diagnoses.precision import accumulation_findings, overflow_findings, rounding_findings
    from kernels import reference

    heads, kv_heads = case["q"].shape[1], case["k_cache"].shape[1]
    label = label or _paged_label(case) + ", fp16 cache"
    if partials is not None:
        unwritten = np.broadcast_to(is_poison(partials[2]).all(axis=(2, 3))[..., None], case["q"].shape)
        found = head_findings(np.asarray(out).astype(np.float64), None, heads=heads, kv_heads=kv_heads,
                              poisoned=unwritten, attend=lambda kv_of: None, close=None, prefix="gqa")
        if found:
            raise AssertionError(f"out for {label}: {found[0][1]}")
    tables, lens = case["block_tables"], case["context_lens"]
    stored = dict(case, k_cache=case["k_cache"].astype(np.float64), v_cache=case["v_cache"].astype(np.float64),
                  scale=float(case["scale"]))
    same = reference.paged_attention(case["q"], stored["k_cache"], stored["v_cache"], tables, lens,
                                     scale=float(case["scale"]))
    ref = reference.paged_attention(case["q"], case["k_cache32"], case["v_cache32"], tables, lens,
                                    scale=float(case["scale"]))
    got = np.asarray(out).astype(np.float64)

    def findings():
        found = decode_findings(got, same, stored, poisoned=is_poison(np.asarray(out)))
        if found:
            return found
        group = heads // kv_heads
        logits = np.zeros(case["q"].shape[:2])
        for s, n in enumerate(lens.tolist()):
            if n:
                pages = [stored["k_cache"][tables[s, p]] for p in range(-(-n // stored["k_cache"].shape[2]))]
                keys = np.concatenate(pages, axis=1)[:, :n]                       # (kv_heads, n, d)
                for h in range(heads):
                    logits[s, h] = np.abs(keys[h // group] @ case["q"][s, h].astype(np.float64)).max()
        rows = np.broadcast_to(lens[:, None], logits.shape)
        limit = _rule_limit(ref, same)
        return (overflow_findings(got, ref, logits, fmt="fp16")
                or accumulation_findings(got, ref, same, rows, fmt="fp16", limit=limit)
                or rounding_findings(got, ref, same, fmt="fp16", limit=limit))

    result = _with_findings(findings, out, ref, name=f"out for {label}", dims=PAGED_DIMS, seed=seed,
                            precision="fp16", same_precision_ref=same, kernel=kernel,
                            hints={"any": "the cache is stored in fp16: convert each element to float32 as it is "
                                          "loaded (float32(x)) and keep every score, maximum, sum and accumulator "
                                          "in float32"})
    empty = np.flatnonzero(lens == 0)
    if empty.size and not (np.asarray(out)[empty] == 0).all():
        raise AssertionError(f"sequence {int(empty[0])} has context_lens = 0, no key: out[{int(empty[0])}] must be "
                             "exactly 0 for every head (write zeros when the sum is 0)")
    return result


def mixed_decode_matches_reference(kernel) -> None:
    """An fp16 cache: 2 query heads on one KV head, a shuffled table, a partial last page, two partitions."""
    out, case, seed, _, partials = mixed_decode_run(kernel, [11], heads=2, kv_heads=1, head_dim=8, block_size=4,
                                                    partition_size=8)
    check_mixed_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("fp16 cache, context_lens = [11] in partitions of 8, 2 query heads over 1 KV head")


def mixed_decode_long_context(kernel) -> None:
    """An fp16 cache, a context of 256 tokens in one partition with every weight near 1, so the sums grow."""
    out, case, seed, _, partials = mixed_decode_run(kernel, [256], heads=1, kv_heads=1, head_dim=32,
                                                    block_size=16, partition_size=256, values="flat")
    check_mixed_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("fp16 cache, a context of 256 tokens summed with weights near 1, within twice the error of storage")


def mixed_decode_traffic_fits(kernel) -> None:
    """Only the partials written; each fp16 element of the cache read once per KV head, for its whole group
    (the values are graded by the other cells)."""
    _, case, _, traffic, _ = mixed_decode_run(kernel, [5, 3], heads=4, kv_heads=1, head_dim=4, block_size=4,
                                              partition_size=8, counted=True)
    if traffic is not None:
        _raise_problems(gqa_decode_traffic_problems(traffic, case))
        cache_bytes = traffic.load_bytes["k_cache"] + traffic.load_bytes["v_cache"]
        print(f"{cache_bytes} bytes of cache read for {2 * sum(case['context_lens'].tolist()) * 4} elements of K and V")
    _passed("the partials written once; each fp16 page read once for the 4 query heads of its KV head")


def fp8_corner_values() -> np.ndarray:
    """float32 values that decide an e4m3 encoding, both signs: every finite e4m3 value, every midpoint
    between neighbours (a tie), a quarter of the way between neighbours on either side, values past 448
    and infinities (saturation), float32 subnormals and the smallest e4m3 subnormals' midpoints, -0.0 and NaN."""
    from kernels import reference

    values = reference.fp8_e4m3_values()
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    gaps = np.diff(finite)
    middles = np.concatenate([finite[:-1] + gaps / 2, finite[:-1] + gaps / 4, finite[:-1] + 3 * gaps / 4])
    beyond = [449.0, 464.0, 464.5, 479.0, 480.0, 1e30, np.inf, 1e-40, 2.0 ** -10, 3 * 2.0 ** -11]
    magnitudes = np.concatenate([finite, middles, beyond]).astype(np.float32)
    return np.concatenate([magnitudes, -magnitudes, [np.float32(np.nan)]]).astype(np.float32)


# Scales whose float32 reciprocal is off by nearly half a unit in the last place: with x = tie * scale (exact),
# x / scale is the tie exactly, and x * (1 / scale) lands on one side of it, so about half of e4m3's ties come
# out as the other code when a kernel multiplies by the reciprocal instead of dividing.
FP8_RECIPROCAL_SCALES = (61.0, 63.0, 0.953125, 15.0)


def fp8_quantize_case(rng, values, *, block_size: int = 4, head_dim: int = 16, kv_heads: int = 2,
                      power_of_two_scales: bool = True, scale_choices=None) -> dict:
    """``values`` (float32, shuffled) laid out as a cache (num_blocks, kv_heads, block_size, head_dim), the
    last page padded with random normal numbers, and a scale per (block, kv_head): powers of two (x / scale
    is then each value exactly, x = value * scale), random in [1e-3, 1e3] (x = value * scale rounded), or
    drawn from ``scale_choices`` (such as ``FP8_RECIPROCAL_SCALES``)."""
    values = rng.permutation(np.asarray(values, np.float32))
    page = block_size * head_dim
    pages = -(-values.size // page)
    num_blocks = -(-pages // kv_heads)
    flat = rng.standard_normal(num_blocks * kv_heads * page).astype(np.float32)
    flat[:values.size] = values
    y = flat.reshape(num_blocks, kv_heads, block_size, head_dim)
    if scale_choices is not None:
        scales = rng.choice(np.asarray(scale_choices, np.float32), (num_blocks, kv_heads)).astype(np.float32)
    elif power_of_two_scales:
        scales = (2.0 ** rng.integers(-8, 9, (num_blocks, kv_heads))).astype(np.float32)
    else:
        scales = (10.0 ** rng.uniform(-3, 3, (num_blocks, kv_heads))).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        x = (y * scales[..., None, None]).astype(np.float32)
    return dict(x=x, scales=scales)


def fp8_cache_case(rng, num_blocks: int, kv_heads: int, block_size: int, head_dim: int) -> dict:
    """A float32 cache whose pages have magnitudes from 1e-3 to 1e3, one page of zeros and one page whose
    largest |x| is negative (so its largest x is not its largest |x|)."""
    shape = (num_blocks, kv_heads, block_size, head_dim)
    x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, (num_blocks, kv_heads, 1, 1))
    x = x.astype(np.float32)
    if x.shape[0] * x.shape[1] >= 3:
        x[0, 0] = 0.0
        x[-1, -1] = -np.abs(x[-1, -1])
        x[-1, -1, 0, 0] *= 3.0
    return dict(x=x, scales=None)


def fp8_quantize_run(kernel, case: dict):
    """Your quantize kernel through the course's launcher (``fp8_quantize``: one block of FP8_THREADS per
    (block, kv_head)) on ``case``, codes (and computed scales) poisoned first: ``(codes, scales)``."""
    from kernels.low_precision_attention import fp8_quantize

    x, scales = case["x"], case["scales"]
    codes = poison(np.empty(x.shape, np.uint8))
    out_scales = None if scales is not None else poison(np.empty(x.shape[:2], np.float32))
    try:
        return fp8_quantize(x, scales=scales, out=codes, out_scales=out_scales, kernel=kernel)
    except ZeroDivisionError as exc:
        raise KernelFailed("division by zero in the kernel: a page of zeros has amax 0; its scale is 1 (then every "
                           "code is 0), not amax / 448 = 0", "fp8_zero_scale") from exc


def _fp8_where(index, shape) -> str:
    names = ("block", "kv_head", "slot", "channel")[-len(shape):] if len(shape) <= 4 else None
    if names is None:
        return f"element {tuple(int(i) for i in index)}"
    return ", ".join(f"{n} {int(i)}" for n, i in zip(names, index))


def check_fp8_codes(codes, case: dict, scales=None, *, seed=None, label: str = "") -> None:
    """The codes equal ``reference.quantize_fp8``'s bit for bit (with ``scales``, the scales used: the
    case's given ones by default); on failure name the first code that differs and the encoding mistake."""
    from course.diagnoses.precision import fp8_findings
    from kernels import reference

    x = case["x"]
    scales = case["scales"] if scales is None else np.asarray(scales)
    want, _ = reference.quantize_fp8(x, scales)
    got = np.asarray(codes)
    wrong = got != want
    if not wrong.any():
        return
    index = np.unravel_index(int(np.argmax(wrong)), got.shape)
    groups = int(np.prod(x.shape[:2]))
    with np.errstate(over="ignore", invalid="ignore"):
        y = (x.reshape(groups, -1) / scales.reshape(groups, 1)).astype(np.float32)
    values = reference.fp8_e4m3_values()
    g, w = int(got[index]), int(want[index])
    got_words = "the poison 0xff, never written" if is_poison(got)[index] else f"0x{g:02x} ({values[g]:.6g})"
    lines = [f"fp8 codes for {label or f'a cache of shape {x.shape}'} differ from the reference (seed {seed})",
             f"  wrong codes: {int(wrong.sum())} of {got.size}",
             f"  first wrong: {_fp8_where(index, got.shape)}: x = {float(x[index]):.9g}, scale = "
             f"{float(scales[index[:2]]):.9g}, x / scale = {float(x[index] / scales[index[:2]]):.9g}: got "
             f"{got_words}, expected 0x{w:02x} ({values[w]:.6g})"]
    found = fp8_findings(got.reshape(groups, -1), y, x.reshape(groups, -1).astype(np.float64),
                         scales.reshape(groups).astype(np.float64))
    if found:
        lines += ["likely cause:"] + [f"  - {message}" for _, message in found]
    else:
        lines.append("  the code of y = x / scale is the e4m3 number nearest to y (ties to the even code), "
                     "subnormals included, +-448 past 448, 0x7f for NaN, the sign in bit 7")
    if seed is not None:
        lines.append(f"Repeat it with random_inputs(seed={seed}).")
    raise AssertionError("\n".join(lines))


def check_fp8_scales(got_scales, case: dict, *, seed=None, label: str = "") -> None:
    """The computed scales equal ``reference.quantize_fp8``'s bit for bit: amax / 448 per group, 1 for a
    group of zeros; on failure name the first that differs and the mistake the scales follow."""
    from course.diagnoses.precision import fp8_scale_findings
    from kernels import reference

    x = case["x"]
    _, want = reference.quantize_fp8(x)
    got = np.asarray(got_scales)
    wrong = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if not wrong.any():
        return
    b, h = (int(i) for i in np.argwhere(wrong)[0])
    groups = int(np.prod(x.shape[:2]))
    unwritten = " (the poison: never written)" if is_poison(got)[b, h] else ""
    lines = [f"fp8 scales for {label or f'a cache of shape {x.shape}'} differ from the reference (seed {seed})",
             f"  wrong scales: {int(wrong.sum())} of {got.size}",
             f"  first wrong: block {b}, kv_head {h}: the page's largest |x| is {float(np.abs(x[b, h]).max()):.9g}; "
             f"got scale {float(got[b, h]):.9g}{unwritten}, expected {float(want[b, h]):.9g} (amax / 448, 1 for a "
             "page of zeros)"]
    found = fp8_scale_findings(got.reshape(groups), x.reshape(groups, -1))
    if found:
        lines += ["likely cause:"] + [f"  - {message}" for _, message in found]
    if seed is not None:
        lines.append(f"Repeat it with random_inputs(seed={seed}).")
    raise AssertionError("\n".join(lines))


def fp8_quantize_matches_reference(kernel) -> None:
    """Given power-of-two scales: ties, values between codes, subnormals, past 448, -0.0; then the ties again
    with scales whose reciprocal is not exact (x / scale is one division, not x times 1 / scale); bit for bit."""
    rng, seed = random_inputs()
    picks = fp8_corner_values()
    wanted = np.concatenate([picks[np.abs(picks) <= 2.0], [500.0, -1e30, 2.0 ** -10, -0.0]]).astype(np.float32)
    case = fp8_quantize_case(rng, wanted, block_size=4, head_dim=16, kv_heads=2)
    codes, _ = fp8_quantize_run(kernel, case)
    check_fp8_codes(codes, case, seed=seed)
    case = fp8_quantize_case(rng, wanted, block_size=4, head_dim=16, kv_heads=2, scale_choices=FP8_RECIPROCAL_SCALES)
    codes, _ = fp8_quantize_run(kernel, case)
    check_fp8_codes(codes, case, seed=seed, label="ties with scales 61, 63, 0.953125 and 15")
    _passed(f"{2 * case['x'].size} codes bit for bit: ties (with power-of-two and other scales), subnormals, "
            f"saturation, -0.0")


def fp8_quantize_computes_scales(kernel) -> None:
    """Scales computed per (block, kv_head): amax / 448, 1 for a page of zeros, bit for bit (the codes are
    graded by the other cell)."""
    rng, seed = random_inputs()
    case = fp8_cache_case(rng, 3, 2, 4, 8)
    _, scales = fp8_quantize_run(kernel, case)
    check_fp8_scales(scales, case, seed=seed)
    _passed("a scale per page (a page of zeros among them), bit for bit")
