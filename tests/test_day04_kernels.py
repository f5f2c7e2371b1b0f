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


def _inputs(m, n, k, seed=None):
    rng, seed = random_inputs(seed)
    return rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32), seed


@pytest.mark.parametrize("rung", list(gemm.RUNGS))
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=IDS)
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
    for name in ("TILE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "THREAD_M", "THREAD_N"):
        assert getattr(model, name) == getattr(gemm, name), name
    assert model.RUNGS == tuple(gemm.RUNGS)
    assert gemm.THREADS_X * gemm.THREAD_N == gemm.BLOCK_N and gemm.THREADS_Y * gemm.THREAD_M == gemm.BLOCK_M
    # v4's tile loads hand each thread the same number of slots.
    threads = gemm.THREADS_X * gemm.THREADS_Y
    assert (gemm.BLOCK_M * gemm.BLOCK_K) % threads == 0 and (gemm.BLOCK_K * gemm.BLOCK_N) % threads == 0


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
    for module in (gemm, transpose):
        for name in module.__all__:
            if name.endswith("_kernel"):
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
    assert values[0] == values[1] < values[2] < values[3]
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


def test_models_reject_bad_arguments():
    with pytest.raises(ValueError, match="M must be >= 0"):
        model.traffic_v1_naive(-1, 2, 3)
    with pytest.raises(TypeError, match="K must be an int"):
        model.bytes_v3_shared_tiles(2, 3, 4.0)
    with pytest.raises(ValueError, match="tile must be >= 1"):
        model.traffic_v3_shared_tiles(2, 3, 4, tile=0)
    with pytest.raises(ValueError, match="rung must be one of"):
        model.traffic("gemm_v9", 1, 1, 1)
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
    assert [c[0] for c in cases[:5]] == [*model.RUNGS, day04.TORCH_LABEL] and len(cases) == 5 * len(day04.NCU_SIZES)


@pytest.mark.gpu
def test_recorder_quick_run_on_gpu(tmp_path):
    from course.record import day04
    from course.records import load_recording

    paths = day04.record(tmp_path, quick=True)
    timing = load_recording(paths[0])
    rungs = {r["rung"] for r in timing.rows}
    assert rungs == {*gemm.RUNGS, day04.TORCH_LABEL}
    assert all(r["gflops"] > 0 and r["intensity"] > 0 for r in timing.rows)
