"""The GEMM traffic model (course.models.gemm) equals what the simulator counts, element for element.

Shapes include tiles that do not divide M, N or K, a single row or column, K = 1 and K = 0.
A tiled kernel that reads its tile slots outside the matrices (instead of zero-filling them)
is kept here as the wrong implementation the exact check must catch.
"""

import numpy as np
import pytest
from numba import cuda, float32

from course.models import gemm as model
from course.traffic import count_traffic
from kernels import gemm

# (M, N, K): divisible, not divisible in every dimension, one row, one column, K = 1, K = 0.
SHAPES = [(16, 32, 16), (20, 21, 19), (1, 37, 20), (33, 1, 18), (19, 23, 1), (5, 7, 0)]
# v4's block tile is 64×64: shapes that leave partial tiles in M and N as well as in K.
SHAPES_V4 = [(64, 64, 16), (70, 67, 19), (1, 66, 9), (65, 1, 3), (3, 5, 0)]


def _inputs(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32))


def _counted(launcher, a, b):
    with count_traffic() as t:
        c = launcher(a, b)
    return t, c


@pytest.mark.parametrize("rung", ["gemm_v1_naive", "gemm_v3_shared_tiles"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_naive_and_shared_tiles_count_equals_model(rung, shape):
    m, n, k = shape
    t, c = _counted(gemm.RUNGS[rung], *_inputs(m, n, k))
    expected = model.traffic(rung, m, n, k)
    assert t.launches == 1 and t.kernel_names == [f"{rung}_kernel"]
    assert (t.global_loads["a"], t.global_loads["b"], t.global_stores["c"]) == tuple(expected)
    assert t.global_bytes == expected.bytes(4)


@pytest.mark.parametrize("shape", [(20, 21, 19), (1, 37, 5)], ids=lambda s: "x".join(map(str, s)))
def test_coalesced_count_equals_model(shape):
    m, n, k = shape
    t, _ = _counted(gemm.gemm_v2_coalesced, *_inputs(m, n, k))
    assert (t.global_loads["a"], t.global_loads["b"], t.global_stores["c"]) == tuple(
        model.traffic_v2_coalesced(m, n, k))


@pytest.mark.parametrize("shape", SHAPES_V4, ids=lambda s: "x".join(map(str, s)))
def test_register_blocked_count_equals_model(shape):
    m, n, k = shape
    t, _ = _counted(gemm.gemm_v4_register_blocked, *_inputs(m, n, k))
    expected = model.traffic_v4_register_blocked(m, n, k)
    assert (t.global_loads["a"], t.global_loads["b"], t.global_stores["c"]) == tuple(expected)
    assert t.shared_loads == model.shared_loads_v4_register_blocked(m, n, k)
    assert t.shared_stores == model.shared_stores_v4_register_blocked(m, n, k)


@pytest.mark.parametrize("shape", [(20, 21, 19), (33, 1, 18)], ids=lambda s: "x".join(map(str, s)))
def test_shared_tiles_shared_memory_count_equals_model(shape):
    m, n, k = shape
    t, _ = _counted(gemm.gemm_v3_shared_tiles, *_inputs(m, n, k))
    assert t.shared_loads == model.shared_loads_v3_shared_tiles(m, n, k)
    assert t.shared_stores == model.shared_stores_v3_shared_tiles(m, n, k)


def test_shared_tiles_read_tile_times_less_than_naive():
    m = n = k = 32
    naive = model.traffic_v1_naive(m, n, k)
    tiled = model.traffic_v3_shared_tiles(m, n, k)
    assert naive.a_loads == gemm.TILE * tiled.a_loads and naive.b_loads == gemm.TILE * tiled.b_loads


def test_partial_tiles_are_not_rounded_away():
    """A model that divides by the tile (N/tile) instead of counting tiles (ceil) is wrong here."""
    m, n, k = 20, 21, 19
    tiled = model.traffic_v3_shared_tiles(m, n, k)
    assert tiled.a_loads == m * k * 2 and tiled.a_loads != round(m * k * n / gemm.TILE)
    assert tiled.b_loads == k * n * 2


@cuda.jit
def _tiles_read_out_of_range_kernel(a, b, c):
    """Like v3, but clamps indices into the matrices instead of zero-filling: extra loads, right answer."""
    a_tile = cuda.shared.array((gemm.TILE, gemm.TILE), float32)
    b_tile = cuda.shared.array((gemm.TILE, gemm.TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * gemm.TILE + ty
    col = cuda.blockIdx.x * gemm.TILE + tx
    m, k = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, k, gemm.TILE):
        kk_a = k0 + tx
        kk_b = k0 + ty
        a_tile[ty, tx] = a[min(row, m - 1), min(kk_a, k - 1)] if kk_a < k else 0.0
        b_tile[ty, tx] = b[min(kk_b, k - 1), min(col, n - 1)] if kk_b < k else 0.0
        cuda.syncthreads()
        for kk in range(gemm.TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        cuda.syncthreads()
    if row < m and col < n:
        c[row, col] = acc


def test_exact_count_catches_a_kernel_that_reads_outside_the_matrix():
    m, n, k = 20, 21, 19
    a, b = _inputs(m, n, k)
    launch = lambda a, b: gemm.launch_gemm(_tiles_read_out_of_range_kernel, a, b,  # noqa: E731
                                           grid=(2, 2), block=(gemm.TILE, gemm.TILE))
    t, c = _counted(launch, a, b)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    expected = model.traffic_v3_shared_tiles(m, n, k)
    assert t.global_loads["a"] > expected.a_loads and t.global_loads["b"] > expected.b_loads


# v5 to v9: 128×128 tiles (v8 and v9 untuned at these sizes: 64×64). Shapes of two block rows, the second
# one row deep, and a partial k-step; kept small, a block being 256 threads on the simulator.
SHAPES_WIDE = [(129, 5, 9), (3, 130, 9), (2, 3, 0)]
WIDE_RUNGS = list(gemm.RUNGS)[list(gemm.RUNGS).index("gemm_v5_wide_shared_loads"):]


@pytest.mark.parametrize("rung", WIDE_RUNGS)
@pytest.mark.parametrize("shape", SHAPES_WIDE, ids=lambda s: "x".join(map(str, s)))
def test_wide_tiles_count_equals_model(rung, shape):
    m, n, k = shape
    a, b = _inputs(m, n, k)
    t, c = _counted(gemm.RUNGS[rung], a, b)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    expected = model.traffic(rung, m, n, k)
    assert (t.global_loads["a"], t.global_loads["b"], t.global_stores["c"]) == tuple(expected)
    tuned = rung in ("gemm_v8_autotuned", "gemm_v9_warp_tiled")       # untuned here: the tile untuned_tile_shape gives
    tile = model.untuned_tile_shape(m, n) if tuned else (gemm.WIDE_BLOCK_M, gemm.WIDE_BLOCK_N)
    assert t.shared_loads == model.shared_loads_wide(m, n, k, *tile)
    double_buffered = tuned or rung == "gemm_v7_double_buffered"
    assert t.shared_stores == model.shared_stores_wide(m, n, k, *tile, double_buffered=double_buffered)


def test_v8_model_follows_the_tile():
    """A 64×128 tile reads A twice as often as a 128×128 one, B as often."""
    big = model.traffic_v8_autotuned(4096, 4096, 4096, (128, 128))
    tall = model.traffic_v8_autotuned(4096, 4096, 4096, (64, 128))
    assert tall.a_loads == big.a_loads and tall.b_loads == 2 * big.b_loads
    assert model.traffic_v8_autotuned(4096, 4096, 4096) == big == model.traffic_v5_wide_shared_loads(4096, 4096, 4096)
