"""Day 4 kernels: the GEMM ladder and the shared-memory transpose, against the references.

On the simulator at small awkward sizes; the tests marked gpu repeat the checks at full size.
"""

import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda

from course.checking import CheckFailure, check, poison, random_inputs
from course.models import gemm as model
from course.traffic import count_traffic
from kernels import gemm, reference, transpose

GEMM_SHAPES = [(20, 21, 19), (1, 37, 5), (33, 1, 2), (7, 9, 1)]
IDS = lambda s: "x".join(map(str, s))  # noqa: E731
# From v5 on a block is 256 threads (v8 untuned: 64) running 512 multiply-adds per k-step each,
# seconds on the simulator: one shape with partial tiles in M, N and K (a second, 1-deep k-step).
# tests/test_gemm_traffic_model.py adds shapes that span several blocks.
WIDE_RUNGS = list(gemm.RUNGS)[list(gemm.RUNGS).index("gemm_v5_wide_shared_loads"):]
WIDE_SHAPES = [(37, 21, 9)]
RUNG_SHAPES = [(rung, shape) for rung in gemm.RUNGS
               for shape in (WIDE_SHAPES if rung in WIDE_RUNGS else GEMM_SHAPES)]


def _inputs(m, n, k, seed=None):
    rng, seed = random_inputs(seed)
    return rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32), seed


@pytest.mark.parametrize("rung, shape", RUNG_SHAPES, ids=lambda x: IDS(x) if isinstance(x, tuple) else x)
def test_gemm_rung_matches_reference(rung, shape):
    a, b, seed = _inputs(*shape)
    out = poison(np.empty(shape[:2], np.float32))
    c = gemm.RUNGS[rung](a, b, out=out)
    assert c is out
    check(c, reference.gemm(a, b), name=rung, dims=("row", "col"), seed=seed)


@pytest.mark.parametrize("rung", list(gemm.RUNGS))
def test_gemm_rung_k_zero_writes_zeros(rung):
    a, b, _ = _inputs(5, 7, 0)
    c = gemm.RUNGS[rung](a, b, out=poison(np.empty((5, 7), np.float32)))
    assert np.array_equal(c, np.zeros((5, 7), np.float32))


@pytest.mark.parametrize("shape", [(0, 4, 3), (4, 0, 3)], ids=IDS)
def test_gemm_empty_output_launches_nothing(shape):
    a, b, _ = _inputs(*shape)
    with count_traffic() as t:
        c = gemm.gemm_v3_shared_tiles(a, b)
    assert c.shape == shape[:2] and t.launches == 0


def test_gemm_accepts_device_arrays_and_returns_one():
    a, b, seed = _inputs(9, 11, 13)
    c = gemm.gemm_v4_register_blocked(cuda.to_device(a), cuda.to_device(b))
    assert not isinstance(c, np.ndarray)
    check(c.copy_to_host(), reference.gemm(a, b), name="C", seed=seed)


def test_wrong_result_fails_the_check():
    """The check these tests rely on catches a kernel that drops the last partial K tile."""
    a, b, seed = _inputs(20, 21, 19)
    wrong = a[:, :16] @ b[:16, :]
    with pytest.raises(CheckFailure):
        check(wrong, reference.gemm(a, b), name="C", seed=seed)


@pytest.mark.parametrize("launcher", [gemm.gemm_v1_naive, gemm.gemm_v3_shared_tiles])
def test_gemm_rejects_bad_inputs(launcher):
    a, b, _ = _inputs(4, 5, 6)
    with pytest.raises(TypeError, match="a must have dtype float32"):
        launcher(a.astype(np.float64), b)
    with pytest.raises(TypeError, match="b must be a NumPy array"):
        launcher(a, b.tolist())
    with pytest.raises(ValueError, match=r"b must have shape \(6, any\)"):
        launcher(a, b.T.copy())
    with pytest.raises(ValueError, match="a must be C-contiguous"):
        launcher(np.asfortranarray(a), b)
    with pytest.raises(ValueError, match="a must have 2 dimensions"):
        launcher(a[None], b)
    with pytest.raises(ValueError, match=r"out must have shape \(4, 5\)"):
        launcher(a, b, out=np.empty((5, 4), np.float32))


def test_constants_of_model_and_kernels_agree():
    for name in ("TILE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "THREAD_M", "THREAD_N", "WIDE_BLOCK_M", "WIDE_BLOCK_N",
                 "WIDE_THREAD_M", "WIDE_THREAD_N", "TILE_SHAPES", "BLOCKS_TO_FILL"):
        assert getattr(model, name) == getattr(gemm, name), name
    assert model.RUNGS == tuple(gemm.RUNGS)
    assert gemm.THREADS_X * gemm.THREAD_N == gemm.BLOCK_N and gemm.THREADS_Y * gemm.THREAD_M == gemm.BLOCK_M
    # v4's tile loads hand each thread the same number of slots.
    threads = gemm.THREADS_X * gemm.THREADS_Y
    assert (gemm.BLOCK_M * gemm.BLOCK_K) % threads == 0 and (gemm.BLOCK_K * gemm.BLOCK_N) % threads == 0
    for m, n in [(1, 1), (1024, 1024), (1024, 2048), (2048, 2048), (4096, 4096), (8192, 64), (70, 45)]:
        assert model.untuned_tile_shape(m, n) == gemm.untuned_tile_shape(m, n), (m, n)


def test_wide_tiles_fit_their_loaders_and_loads():
    """v5 to v8: _block_k_slices writes out BLOCK_K = 8 slices; every tile shape shares its loads out
    evenly, with whole 32-byte sectors; rows of the shared tiles are 16-byte aligned and 32·j + 4 words
    long (the transposed stores of A meet every bank once)."""
    assert gemm.BLOCK_K == 8 and gemm.WIDE_ACC == gemm.WIDE_THREAD_M * gemm.WIDE_THREAD_N
    assert (gemm.WIDE_BLOCK_M, gemm.WIDE_BLOCK_N) == gemm.TILE_SHAPES[0]
    for block_m, block_n in gemm.TILE_SHAPES:
        a_row_step, a_loads, b_col_step, b_loads = gemm._wide_loader(block_m, block_n)
        threads = (block_m // gemm.WIDE_THREAD_M) * (block_n // gemm.WIDE_THREAD_N)
        assert a_row_step * a_loads == block_m and b_col_step * b_loads == block_n and b_col_step >= 8
        assert threads * (a_loads + b_loads) == gemm.BLOCK_K * (block_m + block_n)
        row = max(block_m, block_n) + gemm.TILE_PAD
        assert row % 32 == gemm.TILE_PAD == gemm.VECTOR and (row * 4) % 16 == 0
        lanes = np.arange(32)
        assert model.bank_conflict_degree((lanes % gemm.BLOCK_K) * row + lanes // gemm.BLOCK_K) == 1
    assert gemm.untuned_tile_shape(4096, 4096) == (128, 128) and gemm.untuned_tile_shape(1024, 1024) == (128, 64)
    assert gemm.untuned_tile_shape(37, 21) == gemm.TILE_SHAPES[-1]


@pytest.mark.parametrize("factory", [gemm.gemm_v7_double_buffered_kernel, gemm.gemm_v9_warp_tiled_kernel],
                         ids=["v7", "v9"])
def test_kernel_factories_check_their_tile_and_keep_kernels(factory):
    assert factory(64, 64) is factory(64, 64)
    with pytest.raises(ValueError, match=r"must be one of .* got \(96, 128\)"):
        factory(96, 128)
    assert gemm.gemm_v7_double_buffered_kernel(64, 64) is not gemm.gemm_v9_warp_tiled_kernel(64, 64)


def test_v7_every_tile_shape_matches_reference():
    """The four kernels v8 chooses from, each at a shape with partial tiles in M, N and K."""
    a, b, seed = _inputs(20, 9, 9)
    want = reference.gemm(a, b)
    for block_m, block_n in gemm.TILE_SHAPES:
        out = poison(np.empty((20, 9), np.float32))
        kernel = gemm.gemm_v7_double_buffered_kernel(block_m, block_n)
        gemm.launch_gemm(kernel, a, b, out=out, grid=(1, 1), block=(block_n // 8, block_m // 8))
        check(out, want, name=f"v7 {block_m}x{block_n}", dims=("row", "col"), seed=seed)


def test_v9_every_tile_shape_matches_reference_with_every_warp_writing():
    """The warp-tiled kernels at a shape where several warps of each tile hold rows and columns of C
    (warps own 64×32 patches), partial in M, N and K: every element written once, and right."""
    a, b, seed = _inputs(70, 40, 9)
    want = reference.gemm(a, b)
    for block_m, block_n in gemm.TILE_SHAPES:
        out = poison(np.empty((70, 40), np.float32))
        grid, block = gemm.wide_grid(70, 40, block_m, block_n)
        gemm.launch_gemm(gemm.gemm_v9_warp_tiled_kernel(block_m, block_n), a, b, out=out, grid=grid, block=block)
        check(out, want, name=f"v9 {block_m}x{block_n}", dims=("row", "col"), seed=seed)


def test_autotune_refuses_the_simulator_and_v8_takes_the_untuned_tile():
    a, b, _ = _inputs(5, 7, 3)
    with pytest.raises(RuntimeError, match="needs a GPU"):
        gemm.autotune(a, b)
    assert gemm.tile_shape(5, 7, 3) == gemm.untuned_tile_shape(5, 7) and gemm.tuned() == []


# The simulator runs kernels as Python and never type-checks them; numba's CUDA front end does,
# without a GPU: a subprocess types and lowers every kernel of the day for compute capability 9.0.
# (It caught a shared-array shape written as TILE + 1, which is not a compile-time literal.)
TYPE_AND_LOWER = textwrap.dedent("""
    import inspect, os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    from numba import types
    from numba.cuda.compiler import compile_cuda
    from kernels import gemm, transpose
    matrix = types.Array(types.float32, 2, "C")
    # The kernels of v5 on (v7's built per tile) are left to tests/test_kernels_pattern.py, which
    # compiles every rung for sm_80 and sm_90: typing their unrolled bodies here too costs seconds each.
    wide = list(gemm.RUNGS)[list(gemm.RUNGS).index("gemm_v5_wide_shared_loads"):]
    for module in (gemm, transpose):
        for name in module.__all__:
            if name.endswith("_kernel") and name[:-len("_kernel")] not in wide:
                function = getattr(module, name).py_func
                arguments = (matrix,) * len(inspect.signature(function).parameters)
                compile_cuda(function, types.void, arguments, cc=(9, 0))
                print(name)
""")


def test_every_kernel_types_and_lowers_for_the_gpu():
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", TYPE_AND_LOWER], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.split()) == 8, done.stdout


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------

def test_intensity_climbs_the_ladder():
    n = 4096
    values = [model.intensity(rung, n, n, n) for rung in model.RUNGS]
    assert values[0] == values[1] < values[2] < values[3] < values[4] == values[5] == values[6]
    assert values[4] == pytest.approx(2 * values[3], rel=0.05)       # 128×128 tiles: half v4's reads
    assert values[7] == values[4]                                     # v8 untuned at 4096: 128×128
    tuned_64x128 = model.flops_gemm(n, n, n) / model.bytes_v8_autotuned(n, n, n, (64, 128))
    assert values[3] < tuned_64x128 < values[4]
    assert values[0] == pytest.approx(0.25, rel=1e-3)      # 2 FLOPs per 2 loads of 4 bytes
    assert values[2] == pytest.approx(gemm.TILE / 4, rel=1e-2)
    assert model.flops_gemm(2, 3, 4) == 48
    assert model.compulsory_bytes(2, 3, 4) == (8 + 12 + 6) * 4


def test_register_blocking_cuts_shared_reads_per_multiply_add():
    m = n = k = 128
    fmas = m * n * k
    blocks = (m // gemm.BLOCK_M) * (n // gemm.BLOCK_N)
    threads = gemm.THREADS_X * gemm.THREADS_Y
    assert model.shared_loads_v3_shared_tiles(m, n, k) == 2 * fmas
    per_fma = model.shared_loads_v4_register_blocked(m, n, k) / (blocks * threads * k * gemm.THREAD_M * gemm.THREAD_N)
    assert per_fma == (gemm.THREAD_M + gemm.THREAD_N) / (gemm.THREAD_M * gemm.THREAD_N)
    # v5 to v8: 8×8 per thread, 16 values of A and B per 64 multiply-adds, fetched 4 at a time.
    assert model.shared_loads_wide(m, n, k) / fmas == 16 / 64


def test_models_reject_bad_arguments():
    with pytest.raises(ValueError, match="M must be >= 0"):
        model.traffic_v1_naive(-1, 2, 3)
    with pytest.raises(TypeError, match="K must be an int"):
        model.bytes_v3_shared_tiles(2, 3, 4.0)
    with pytest.raises(ValueError, match="tile must be >= 1"):
        model.traffic_v3_shared_tiles(2, 3, 4, tile=0)
    with pytest.raises(ValueError, match="rung must be one of"):
        model.traffic("gemm_v9", 1, 1, 1)
    with pytest.raises(ValueError, match="tile must be one of"):
        model.traffic_v8_autotuned(64, 64, 64, tile=(32, 32))
    with pytest.raises(ValueError, match="non-empty C"):
        model.intensity("gemm_v1_naive", 0, 3, 4)
    with pytest.raises(TypeError, match="integers"):
        model.bank_of(np.array([0.5]))


def test_bank_model_column_of_a_tile():
    lanes = np.arange(32)
    column = 5
    assert model.bank_conflict_degree(lanes * 32 + column) == 32     # 32×32 tile: one bank
    assert model.bank_conflict_degree(lanes * 33 + column) == 1      # 32×33 tile: all 32 banks
    assert sorted(model.bank_of(lanes * 33 + column)) == list(range(32))
    assert model.bank_conflict_degree(lanes + 32 * column) == 1      # a row
    assert model.bank_conflict_degree(np.full(32, 7)) == 1           # one word: a broadcast
    assert model.bank_conflict_degree(lanes * 2) == 2                # stride 2: two-way
    assert model.bank_conflict_degree([]) == 0


def test_bank_model_of_the_gemm_tiles_is_conflict_free():
    """A warp of v3 (16×2 threads) and of v4 (16×2 threads) reading their tiles, one k at a time."""
    lanes = np.arange(32)
    tx, ty = lanes % 16, lanes // 16
    for kk in range(gemm.TILE):
        assert model.bank_conflict_degree(ty * gemm.TILE + kk) == 1            # a_tile[ty, kk]
        assert model.bank_conflict_degree(kk * gemm.TILE + tx) == 1            # b_tile[kk, tx]
    for kk in range(gemm.BLOCK_K):
        for i in range(gemm.THREAD_M):
            assert model.bank_conflict_degree((ty + i * gemm.THREADS_Y) * gemm.BLOCK_K + kk) == 1
        for j in range(gemm.THREAD_N):
            assert model.bank_conflict_degree(kk * gemm.BLOCK_N + tx + j * gemm.THREADS_X) == 1


# ---------------------------------------------------------------------------------------------
# Transpose
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rung", list(transpose.RUNGS))
@pytest.mark.parametrize("shape", [(40, 50), (1, 33)], ids=IDS)
def test_transpose_rungs(rung, shape):
    rng, _ = random_inputs()
    x = rng.standard_normal(shape, dtype=np.float32)
    with count_traffic() as t:
        out = transpose.RUNGS[rung](x, out=poison(np.empty(shape[::-1], np.float32)))
    assert np.array_equal(out, x.T)
    assert t.global_loads["x"] == x.size and t.global_stores["out"] == x.size


def test_transpose_rejects_bad_inputs():
    with pytest.raises(TypeError, match="x must have dtype float32"):
        transpose.transpose_v3_shared_padded(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"out must have shape \(4, 3\)"):
        transpose.transpose_v2_shared(np.zeros((3, 4), np.float32), out=np.zeros((3, 4), np.float32))


# ---------------------------------------------------------------------------------------------
# GPU: full size
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("rung", list(gemm.RUNGS))
def test_gemm_rung_full_size_on_gpu(rung):
    a, b, seed = _inputs(1000, 1531, 777)
    out = cuda.to_device(poison(np.empty((1000, 1531), np.float32)))
    gemm.RUNGS[rung](cuda.to_device(a), cuda.to_device(b), out=out)
    check(out.copy_to_host(), reference.gemm(a, b), name=rung, dims=("row", "col"), seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("rung", list(transpose.RUNGS))
def test_transpose_full_size_on_gpu(rung):
    rng, _ = random_inputs()
    x = rng.standard_normal((4099, 2050), dtype=np.float32)
    out = transpose.RUNGS[rung](cuda.to_device(x)).copy_to_host()
    assert np.array_equal(out, x.T)


# ---------------------------------------------------------------------------------------------
# The GPU recorder, as far as the simulator allows (timing needs a GPU)
# ---------------------------------------------------------------------------------------------

def test_recorder_checks_and_barrier_trials_run_on_the_simulator():
    from course.record import day04

    day04.check_full_size(shapes=((20, 21, 19),), transpose_shape=(33, 40))
    rec = day04.missing_barrier_trials(1, (33, 40))
    assert [r["kernel"] for r in rec.rows] == ["transpose_missing_barrier", "transpose_v3_shared_padded"]
    assert rec.rows[1]["wrong"] == 0 and rec.rows[0]["elements"] == 33 * 40
    cases = day04.ncu_cases()
    per_size = len(model.RUNGS) + 1
    assert [c[0] for c in cases[:per_size]] == [*model.RUNGS, day04.TORCH_LABEL]
    assert len(cases) == per_size * len(day04.NCU_SIZES)
    assert day04.rungs_at(4096) == list(gemm.RUNGS)
    assert day04.rungs_at(8192) == [r for r in gemm.RUNGS if r not in day04.SLOW_RUNGS]


@pytest.mark.gpu
def test_recorder_quick_run_on_gpu(tmp_path):
    from course.record import day04
    from course.records import load_recording

    paths = day04.record(tmp_path, quick=True)
    timing = load_recording(paths[0])
    rungs = {r["rung"] for r in timing.rows}
    assert rungs == {*gemm.RUNGS, day04.TORCH_LABEL}
    assert all(r["gflops"] > 0 and r["intensity"] > 0 for r in timing.rows)
    assert all(r["tile"] in {f"{m}x{n}" for m, n in gemm.TILE_SHAPES} for r in timing.rows
               if r["rung"] == "gemm_v8_autotuned")
    autotune = load_recording(next(p for p in paths if p.stem == "day04_gemm_autotune"))
    assert {r["N"] for r in autotune.rows if r["chosen"]} == set(day04.QUICK_GEMM_SIZES)
