"""Day 1 kernels on the simulator: every rung against NumPy at awkward sizes, bad inputs, traffic = model.

Sizes stay small: a row of the block-per-row reductions costs about 0.2 s on the simulator.
"""

import numpy as np
import pytest

from course.checking import CheckFailure, check, poison, random_inputs
from course.models import reduction as model
from kernels import elementwise, reduction


@pytest.fixture
def rng_seed():
    return random_inputs()


# ------------------------------------------------------------------------------------------ elementwise

@pytest.mark.parametrize("n", [1, 127, 129, 1000])
@pytest.mark.parametrize("launch", [elementwise.copy_v1_guarded, elementwise.copy_v2_grid_stride])
def test_copy_rungs_match_at_awkward_sizes(launch, n, rng_seed):
    rng, seed = rng_seed
    x = rng.standard_normal(n).astype(np.float32)
    out = launch(x, out=poison(np.empty(n, np.float32)))
    check(out, x.astype(np.float64), name=launch.__name__, seed=seed)


def test_grid_stride_covers_more_elements_than_threads(rng_seed):
    rng, seed = rng_seed
    x = rng.standard_normal(333).astype(np.float32)
    out = elementwise.copy_v2_grid_stride(x, blocks=2, threads_per_block=32)   # 64 threads, 333 elements
    check(out, x.astype(np.float64), name="copy_v2_grid_stride", seed=seed)


@pytest.mark.parametrize("n", [1, 128, 1001])
def test_axpb_matches(n, rng_seed):
    rng, seed = rng_seed
    x = rng.uniform(-1e4, 1e4, n).astype(np.float32)
    a, b = rng.uniform(-3, 3, 2)
    out = elementwise.axpb_v1_guarded(x, a, b, out=poison(np.empty(n, np.float32)))
    ref = np.float64(np.float32(a)) * x.astype(np.float64) + np.float64(np.float32(b))
    check(out, ref, name="axpb_v1_guarded", seed=seed)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 40), (1, 2, 9, 7)])
def test_normalize_rows_matches(shape, rng_seed):
    rng, seed = rng_seed
    x = rng.standard_normal(shape).astype(np.float32)
    sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
    out = elementwise.normalize_rows_v1_3d_grid(x, sums, out=poison(np.empty(shape, np.float32)))
    check(out, x.astype(np.float64) / sums[..., None], name="normalize_rows_v1_3d_grid",
          dims=("batch", "head", "row", "col"), seed=seed)


def test_normalize_rows_grid_is_row_tiles_heads_batch():
    grid, block = elementwise.normalize_rows_grid((3, 5, 9, 40))
    assert grid == (3, 5, 3) and block == (elementwise.COLS_PER_BLOCK, elementwise.ROWS_PER_BLOCK)


@pytest.mark.parametrize("stride", [1, 3, 8])
def test_strided_read_picks_every_stride_th_element(stride, rng_seed):
    rng, seed = rng_seed
    n = 50
    x = rng.standard_normal((n - 1) * stride + 1).astype(np.float32)
    out = elementwise.strided_read(x, stride, n)
    check(out, x[::stride].astype(np.float64), name="strided_read", seed=seed)


def test_empty_inputs_launch_nothing():
    from course.traffic import count_traffic

    with count_traffic() as t:
        assert elementwise.copy_v1_guarded(np.empty(0, np.float32)).shape == (0,)
        assert elementwise.axpb_v1_guarded(np.empty(0, np.float32), 1.0, 2.0).shape == (0,)
        row_max, row_sum = reduction.row_stats_v2_shared_tree(np.empty((0, 5), np.float32))
    assert row_max.shape == row_sum.shape == (0,)
    assert t.launches == 0


@pytest.mark.parametrize("call, error, words", [
    (lambda: elementwise.copy_v1_guarded(np.zeros(4, np.float64)), TypeError, "float32"),
    (lambda: elementwise.copy_v1_guarded(np.zeros((2, 2), np.float32)), ValueError, r"x must have 1 dimension \(any,\)"),
    (lambda: elementwise.copy_v1_guarded([1.0, 2.0]), TypeError, "NumPy"),
    (lambda: elementwise.copy_v1_guarded(np.zeros(8, np.float32)[::2]), ValueError, "contiguous"),
    (lambda: elementwise.copy_v1_guarded(np.zeros(4, np.float32), threads_per_block=2048),
     ValueError, "threads_per_block"),
    (lambda: elementwise.copy_v2_grid_stride(np.zeros(4, np.float32), blocks=0), ValueError, "blocks"),
    (lambda: elementwise.axpb_v1_guarded(np.zeros(4, np.float32), "2", 1.0), TypeError, "a must"),
    (lambda: elementwise.axpb_v1_guarded(np.zeros(4, np.float32), 2.0, 1.0,
                                         out=np.zeros(5, np.float32)), ValueError, "out"),
    (lambda: elementwise.normalize_rows_v1_3d_grid(np.zeros((1, 2, 3, 4), np.float32),
                                                   np.ones((1, 2, 4), np.float32)), ValueError, "row_sums"),
    (lambda: elementwise.strided_read(np.zeros(10, np.float32), 4, 4), ValueError, "at least"),
    (lambda: elementwise.strided_read(np.zeros(10, np.float32), 0, 4), ValueError, "stride"),
    (lambda: reduction.row_stats_v2_shared_tree(np.zeros((3, 0), np.float32)), ValueError, "column"),
    (lambda: reduction.row_stats_v3_warp_shuffle(np.zeros(3, np.float32)), ValueError, "dimensions"),
    (lambda: reduction.row_stats_v1_thread_per_row(np.zeros((3, 2), np.float32), out=[None, None]),
     TypeError, "tuple"),
])
def test_launchers_reject_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------ reductions

def _row_stats_refs(x):
    x64 = x.astype(np.float64)
    return x64.max(axis=1), x64.sum(axis=1)


@pytest.mark.parametrize("rung", list(reduction.RUNGS))
def test_row_stats_rungs_match_at_awkward_sizes(rung, rng_seed):
    """One launch per rung covers cols > block (loop), cols < 32, and one column, with ±1e4 values."""
    rng, seed = rng_seed
    launch = reduction.RUNGS[rung]
    for shape in [(2, 131), (1, 5), (1, 1)]:
        x = rng.uniform(-1e4, 1e4, shape).astype(np.float32)
        outs = (poison(np.empty(shape[0], np.float32)), poison(np.empty(shape[0], np.float32)))
        row_max, row_sum = launch(x, out=outs)
        want_max, want_sum = _row_stats_refs(x)
        check(row_max, want_max, name=f"row_max {rung}", dims=("row",), seed=seed)
        check(row_sum, want_sum, name=f"row_sum {rung}", dims=("row",), seed=seed)


@pytest.mark.parametrize("rung", list(reduction.RUNGS))
def test_row_max_of_negative_rows_is_not_zero(rung, rng_seed):
    """All-negative rows shorter than a block: a max that starts from 0 instead of -inf fails here."""
    rng, seed = rng_seed
    x = -rng.uniform(1.0, 1e4, (1, 20)).astype(np.float32)
    row_max, _ = reduction.RUNGS[rung](x)
    check(row_max, x.astype(np.float64).max(axis=1), name=f"row_max {rung}", dims=("row",), seed=seed)


def test_row_max_zero_identity_bug_is_caught():
    """The check above can fail: a max that starts from 0 gives 0 on a negative row."""
    x = -np.linspace(1, 5, 20, dtype=np.float32)[None, :]
    wrong = np.maximum(x.max(axis=1), 0.0).astype(np.float32)
    with pytest.raises(CheckFailure):
        check(wrong, x.astype(np.float64).max(axis=1), name="row_max", dims=("row",))


# ------------------------------------------------------------------------------------------ traffic

def test_elementwise_traffic_equals_model(rng_seed):
    from course.traffic import count_traffic

    rng, _ = rng_seed
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    for rung, launch in (("copy_v1_guarded", elementwise.copy_v1_guarded),
                         ("copy_v2_grid_stride", elementwise.copy_v2_grid_stride),
                         ("axpb_v1_guarded", lambda v: elementwise.axpb_v1_guarded(v, 2.0, 1.0))):
        with count_traffic() as t:
            launch(x)
        assert t.launches == 1
        assert t.global_loads["x"] == n and t.global_stores["y"] == n
        assert t.global_bytes == getattr(model, f"bytes_{rung}")(n), rung

    shape = (2, 2, 5, 40)
    xs = rng.standard_normal(shape).astype(np.float32)
    sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
    with count_traffic() as t:
        elementwise.normalize_rows_v1_3d_grid(xs, sums)
    assert t.global_loads["x"] == xs.size and t.global_stores["out"] == xs.size
    # Every thread of a row reads its row sum: COLS_PER_BLOCK element loads per row, which a warp
    # serves with one broadcast, so the model (DRAM bytes) charges each row sum once.
    assert t.global_loads["row_sums"] == sums.size * elementwise.COLS_PER_BLOCK
    assert (xs.size + xs.size + sums.size) * 4 == model.bytes_normalize_rows_v1_3d_grid(*shape)


def test_strided_read_counts_elements_not_sectors(rng_seed):
    """The simulator counts the n reads whatever the stride; the DRAM model charges whole sectors."""
    from course.traffic import count_traffic

    rng, _ = rng_seed
    n = 64
    counted = []
    for stride in (1, 4, 8, 16):
        x = rng.standard_normal((n - 1) * stride + 1).astype(np.float32)
        with count_traffic() as t:
            elementwise.strided_read(x, stride, n)
        counted.append(t.global_bytes)
    assert counted == [model.useful_bytes_strided_read(n)] * 4
    assert [model.dram_bytes_strided_read(n, s) // (n * 4) for s in (1, 4, 8, 16)] == [2, 5, 9, 9]


@pytest.mark.parametrize("rung", list(reduction.RUNGS))
def test_row_stats_traffic_equals_model(rung, rng_seed):
    from course.traffic import count_traffic

    rng, _ = rng_seed
    rows, cols = 2, 70
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    with count_traffic() as t:
        reduction.RUNGS[rung](x)
    assert t.launches == 1
    assert t.global_loads["x"] == rows * cols
    assert t.global_stores["row_max"] == rows and t.global_stores["row_sum"] == rows
    assert t.global_bytes == getattr(model, f"bytes_row_stats_{rung}")(rows, cols)
    if rung == "v2_shared_tree":
        assert t.shared_stores == model.shared_stores_row_stats_v2_shared_tree(rows, reduction.TREE_THREADS)
    if rung == "v3_warp_shuffle":
        assert t.shared_stores == model.shared_stores_row_stats_v3_warp_shuffle(rows, reduction.WARPS_PER_BLOCK)


# ------------------------------------------------------------------------------------------ models

def test_models_reject_bad_sizes():
    with pytest.raises(ValueError, match="n must"):
        model.bytes_copy_v1_guarded(-1)
    with pytest.raises(ValueError, match="power of two"):
        model.shared_stores_row_stats_v2_shared_tree(1, 48)
    with pytest.raises(ValueError, match="stride"):
        model.dram_bytes_strided_read(10, 0)
    with pytest.raises(ValueError, match="itemsize"):
        model.bytes_axpb_v1_guarded(10, itemsize=0)


def test_model_values():
    assert model.bytes_axpb_v1_guarded(10) == 80 and model.flops_axpb_v1_guarded(10) == 20
    assert model.bytes_row_stats_v1_thread_per_row(3, 5) == (15 + 6) * 4
    assert model.flops_row_stats(3, 5) == 30
    assert model.shared_stores_row_stats_v2_shared_tree(1, 4) == 8 + 6
    assert model.shared_stores_row_stats_v3_warp_shuffle(3, 2) == 12
    assert model.bytes_normalize_rows_v1_3d_grid(1, 2, 3, 4) == (2 * 24 + 6) * 4


def test_random_cycle_visits_every_slot_once():
    from kernels.probes import random_cycle

    chain = random_cycle(50, 4, np.random.default_rng(0))
    seen, j = [], 0
    for _ in range(50):
        seen.append(j)
        j = int(chain[j])
    assert j == 0 and sorted(seen) == [4 * k for k in range(50)]


def test_recorder_sanitize_runs_on_the_simulator(monkeypatch):
    """Every kernel the GPU recorder launches, at the small sizes of ``sanitize()``, then the probes' results.

    The simulator has no cache-hint loads and no nanosleep, so this test stands in plain indexing
    for ``cuda.ldcg`` (the GPU bypasses L1 with it; the values read are the same) and a no-op for
    ``cuda.nanosleep``.
    """
    from numba.cuda.simulator import kernelapi

    from course.record import day01
    from kernels import probes

    monkeypatch.setattr(kernelapi.FakeCUDAModule, "ldcg", staticmethod(lambda a, i: a[i]), raising=False)
    monkeypatch.setattr(kernelapi.FakeCUDAModule, "nanosleep", staticmethod(lambda ns: None), raising=False)
    day01.sanitize()
    assert int(probes.read_words(np.ones(1024, np.uint64), 3000, blocks=1).sum()) == 3000
    shared_sums = probes.read_shared(np.ones(probes.SHARED_WORDS, np.uint64), 5, blocks=1)
    assert np.all(shared_sums == 5 * probes.LOADS_IN_FLIGHT)
    chain = probes.random_cycle(16, probes.LINE_INTS, np.random.default_rng(3))
    assert probes.chase(chain, 16, level="l2")[0] == 0          # a full lap returns to the start
    chain = probes.random_cycle(probes.CHASE_SHARED_SLOTS, 1, np.random.default_rng(4))
    assert probes.chase(chain, probes.CHASE_SHARED_SLOTS, level="shared")[0] == 0
