"""Day 4, tiled GEMM: C = A B with shared tiles (v3) and register blocking (v4), and their loads."""

from __future__ import annotations

import re

import numpy as np

from course.checking import check, poison, random_inputs

from ._common import _counted, _launch_explained, _loads, _passed, _past_the_end, _require_one_launch, _stores

# What an index past A, B or C means in a tiled GEMM: (array, axis) -> the guard that let it through.
_GEMM_GUARDS = {
    ("a", 0): "A is read at a row past M - 1: a block over the bottom edge of C has threads whose row is >= M, "
              "so the load of the A tile needs its row guard (row < m) as well as its guard along K, and loads 0 "
              "where either fails",
    ("a", 1): "A is read at a column past K - 1: the last step along K hangs over the edge, so the load of the A "
              "tile needs its guard along K (k0 + the column in the tile < k), and loads 0 there",
    ("b", 0): "B is read at a row past K - 1: the last step along K hangs over the edge, so the load of the B "
              "tile needs its guard along K (k0 + the row in the tile < k), and loads 0 there",
    ("b", 1): "B is read at a column past N - 1: a block over the right edge of C has threads whose col is >= N, "
              "so the load of the B tile needs its column guard (col < n) as well as its guard along K, and "
              "loads 0 where either fails",
    ("c", 0): "C is written at a row past M - 1: the store needs its guard (row < m and col < n)",
    ("c", 1): "C is written at a column past N - 1: the store needs its guard (row < m and col < n)",
}

__all__ = ["gemm_matches_reference", "gemm_edge_shapes", "gemm_v3_traffic_fits", "gemm_v4_traffic_fits"]


def _gemm_likely(exc, line):
    """An index past A, B or C: the guard of a tile's load (or of the store) that is missing."""
    found = _past_the_end(exc, line)
    if found is None:
        return None
    _, axis, _, lead = found
    for name in ("a", "b", "c"):
        if re.search(rf"(?<![\w.]){name}\s*\[", line) and (name, axis) in _GEMM_GUARDS:
            return "tile_guard", lead + _GEMM_GUARDS[name, axis]
    return None


def _gemm_run(gemm, m, n, k, rng, *, counted=False):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    launch = lambda: _launch_explained(lambda: gemm(a, b, out=poison(np.empty((m, n), np.float32))),  # noqa: E731
                                       likely=_gemm_likely)
    c, traffic = _counted(launch) if counted else (launch(), None)
    return a, b, c, traffic


def _check_gemm(c, a, b, seed, tile: int, tile_k: int | None, kernel) -> None:
    from kernels import reference

    m, n = c.shape
    check(c, reference.gemm(a, b), name=f"C ({m}x{n}, K={a.shape[1]})", dims=("row", "col"),
          tile={"row": tile, "col": tile}, seed=seed, gemm=dict(a=a, b=b, tile_k=tile_k), kernel=kernel)


def gemm_matches_reference(gemm, *, tile: int, tile_k: int | None = None, kernel=None) -> None:
    """C = A B for shapes the tile does not divide: partial tiles in M, N and K, and a K of two full steps and
    a partial one.

    tile: the block tile along M and N; tile_k: the step along K (TILE, BLOCK_K), also for the diagnoses.
    """
    rng, seed = random_inputs()
    shapes = ((tile + 1, 5, 9), (5, 6, 2 * (tile_k or tile) + 3))
    for m, n, k in shapes:
        a, b, c, _ = _gemm_run(gemm, m, n, k, rng)
        _check_gemm(c, a, b, seed, tile, tile_k, kernel)
    _passed("C = A B for M, N, K = " + " and ".join(", ".join(map(str, shape)) for shape in shapes))


def gemm_edge_shapes(gemm, *, tile: int, tile_k: int | None = None, kernel=None) -> None:
    """C = A B for a 1×1 product and for one row with K = 1."""
    rng, seed = random_inputs()
    for m, n, k in ((1, 1, 1), (1, 5, 1)):
        a, b, c, _ = _gemm_run(gemm, m, n, k, rng)
        _check_gemm(c, a, b, seed, tile, tile_k, kernel)
    _passed("C = A B for M, N, K = 1, 1, 1 and 1, 5, 1")


def _gemm_traffic(gemm, kernel_name, budget_of, m, n, k, step_k):
    # The values are graded by the other cells: a budget cell checks the counts only.
    rng, _ = random_inputs()
    _, _, _, traffic = _gemm_run(gemm, m, n, k, rng, counted=True)
    if traffic is not None:
        _require_one_launch(traffic, kernel_name)
        budget = budget_of(m, n, k)
        whole = budget_of(m, n, k - k % step_k)      # what the steps of K but the last, partial one load
        for name, counted, want, short, per in (
                ("A", _loads(traffic, "a"), budget.a_loads, whole.a_loads, "block column"),
                ("B", _loads(traffic, "b"), budget.b_loads, whole.b_loads, "block row")):
            if counted > want:
                why = "More: is a slot outside the matrix read instead of set to 0, or a tile loaded twice?"
            elif counted == short:
                why = (f"Fewer, exactly what the first {k // step_k} steps along K load: the last, partial step "
                       f"along K is lost (K = {k} is not a multiple of {step_k}); loop over "
                       f"ceil(K / {step_k}) steps and load zeros where a tile hangs over the edge")
            else:
                why = "Fewer: do some threads (those outside C?) skip loading their slots?"
            assert counted == want, (
                f"your kernel loaded {name} {counted} times for M, N, K = {m}, {n}, {k}; the budget is {want} "
                f"(each element once per {per}; the naive kernel loads it {m * n * k} times). " + why)
        assert _stores(traffic, "c") == m * n, f"C was stored {_stores(traffic, 'c')} times; each element once is {m * n}"
    return traffic


def gemm_v3_traffic_fits(gemm) -> None:
    """Shared tiles: A and B loaded exactly the budget, once per block column and block row."""
    from course.models import gemm as model

    m, n, k = 20, 21, 19
    _gemm_traffic(gemm, "gemm_v3_shared_tiles_kernel",
                  lambda m, n, k: model.traffic_v3_shared_tiles(m, n, k, tile=16), m, n, k, 16)
    _passed(f"M, N, K = {m}, {n}, {k}: A and B loaded once per block column and block row")


def gemm_v4_traffic_fits(gemm) -> None:
    """Register blocking: A and B loaded once per 64-wide block tile, shared memory read within budget."""
    from course.models import gemm as model

    m, n, k = 70, 21, 9
    traffic = _gemm_traffic(gemm, "gemm_v4_register_blocked_kernel",
                            lambda m, n, k: model.traffic_v4_register_blocked(m, n, k, block_m=64, block_n=64),
                            m, n, k, 8)
    if traffic is not None:
        shared_budget = model.shared_loads_v4_register_blocked(m, n, k)
        assert traffic.shared_loads <= shared_budget, (
            f"{traffic.shared_loads} shared loads, budget {shared_budget}: are a_frag and b_frag loaded once "
            f"per kk and reused for the THREAD_M x THREAD_N multiply-adds?")
    _passed(f"M, N, K = {m}, {n}, {k}: A and B loaded once per block tile, shared loads within budget")
