"""Day 2 kernels: scores, the stable row softmax, PV and the naive pipeline, with their traffic model.

On the simulator at small awkward sizes; the test marked gpu runs the recorder's Nsight and sanitizer
entry points. The recorder's full-size checks run on a GPU in test_gpu_days.py, with every other day's.
"""

import math

import numpy as np
import pytest
from numba import cuda

from course.checking import CheckFailure, check, poison, random_inputs
from course.models import attention as model
from course.traffic import count_traffic
from kernels import reference
from kernels.attention import attention_pv, attention_scores, attention_v1_naive
from kernels.softmax import SOFTMAX_THREADS, softmax_rows

SHAPES = [(1, 2, 5, 7, 3), (2, 1, 1, 1, 6), (1, 1, 9, 1, 1), (1, 2, 3, 40, 12)]  # B, H, N, M, d
IDS = lambda s: "x".join(map(str, s))  # noqa: E731


def _qkv(B, H, N, M, d, seed=None):
    rng, seed = random_inputs(seed)
    q = rng.standard_normal((B, H, N, d), dtype=np.float32)
    k = rng.standard_normal((B, H, M, d), dtype=np.float32)
    v = rng.standard_normal((B, H, M, d), dtype=np.float32)
    return q, k, v, seed


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_scores_match_reference(shape):
    q, k, _, seed = _qkv(*shape)
    out = poison(np.empty(shape[:3] + (shape[3],), np.float32))
    s = attention_scores(q, k, scale=0.7, out=out)
    assert s is out
    check(s, reference.attention_scores(q, k, scale=0.7), name="S", seed=seed)


@pytest.mark.parametrize("cols", [1, 7, SOFTMAX_THREADS, SOFTMAX_THREADS + 1, 100])
def test_softmax_rows_matches_reference(cols):
    rng, seed = random_inputs()
    x = (3 * rng.standard_normal((3, cols))).astype(np.float32)
    p = softmax_rows(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64)), name="P", seed=seed, rows_sum_to_one=True)


def test_softmax_rows_is_stable_for_logits_of_size_1e4():
    rng, seed = random_inputs()
    x = np.concatenate([1e4 + rng.standard_normal((1, 37)), -1e4 + rng.standard_normal((1, 37)),
                        1e4 * rng.standard_normal((1, 37))]).astype(np.float32)
    check(softmax_rows(x), reference.softmax(x.astype(np.float64)), name="P", seed=seed, rows_sum_to_one=True)


def test_softmax_rows_gives_masked_entries_zero():
    x = np.array([[0.5, -np.inf, 2.0, -np.inf]], np.float32)
    check(softmax_rows(x), reference.softmax(x.astype(np.float64)), name="P")


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_pv_matches_reference(shape):
    B, H, N, M, d = shape
    rng, seed = random_inputs()
    p = reference.softmax(rng.standard_normal((B, H, N, M))).astype(np.float32)
    v = rng.standard_normal((B, H, M, d), dtype=np.float32)
    o = attention_pv(p, v, out=poison(np.empty((B, H, N, d), np.float32)))
    check(o, p.astype(np.float64) @ v.astype(np.float64), name="O", seed=seed)


@pytest.mark.parametrize("shape", [(1, 2, 5, 7, 3), (2, 1, 1, 1, 6)], ids=IDS)
def test_naive_attention_matches_reference(shape):
    q, k, v, seed = _qkv(*shape)
    out = poison(np.empty_like(q))
    assert attention_v1_naive(q, k, v, out=out) is out
    check(out, reference.attention(q, k, v), name="O", seed=seed)


def test_naive_attention_accepts_device_arrays_and_returns_one():
    q, k, v, seed = _qkv(1, 1, 3, 4, 5)
    o = attention_v1_naive(*(cuda.to_device(a) for a in (q, k, v)), scale=0.25)
    assert not isinstance(o, np.ndarray)
    check(o.copy_to_host(), reference.attention(q, k, v, scale=0.25), name="O", seed=seed)


def test_empty_queries_launch_nothing():
    q, k, v, _ = _qkv(1, 2, 0, 3, 4)
    with count_traffic() as t:
        o = attention_v1_naive(q, k, v)
    assert o.shape == (1, 2, 0, 4) and t.launches == 0


def test_wrong_scale_fails_the_check():
    """The check these tests rely on catches a scores kernel that forgets the scale."""
    q, k, _, seed = _qkv(1, 1, 4, 5, 16)
    s = attention_scores(q, k, scale=1.0)
    with pytest.raises(CheckFailure):
        check(s, reference.attention_scores(q, k), name="S", seed=seed)


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: attention_v1_naive(q.astype(np.float64), k, v), "q must have dtype float32"),
    (lambda q, k, v: attention_v1_naive(q, k[:, :, :, :2].copy(), v), "k must have shape"),
    (lambda q, k, v: attention_v1_naive(q, k, v[:, :, :1].copy()), "v must have shape"),
    (lambda q, k, v: attention_v1_naive(q[0], k, v), "q must have 4 dimensions"),
    (lambda q, k, v: attention_v1_naive(q, k[:, :, :0].copy(), v[:, :, :0].copy()), "at least one key"),
    (lambda q, k, v: attention_scores(q, k.transpose(0, 1, 3, 2)), "k must"),
    (lambda q, k, v: attention_scores(q, k, scale="big"), "scale must be a number"),
    (lambda q, k, v: attention_scores(q, k, scale=math.inf), "scale must be finite"),
    (lambda q, k, v: attention_pv(q, v), "v must have shape"),
    (lambda q, k, v: softmax_rows(q), "x must have 2 dimensions"),
    (lambda q, k, v: softmax_rows(q[0, 0], out=np.empty((3, 3), np.float32)), "out must have shape"),
    (lambda q, k, v: softmax_rows(q[0, 0][:, ::2]), "C-contiguous"),
    (lambda q, k, v: softmax_rows([[1.0]]), "x must be a NumPy array or a numba device array"),
    (lambda q, k, v: softmax_rows(q[0, 0], out=cuda.to_device(np.empty((4, 6), np.float32))), "NumPy array like"),
])
def test_launchers_reject_bad_inputs(call, message):
    q, k, v, _ = _qkv(1, 2, 4, 5, 6)
    with pytest.raises((TypeError, ValueError), match=message):
        call(q, k, v)


# ---------------------------------------------------------------------------------------------
# Traffic: counted on the simulator == the model, exactly
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 2, 5, 7, 3), (2, 1, 3, 3, 8)], ids=IDS)
def test_counted_traffic_equals_the_model_per_kernel(shape):
    B, H, N, M, d = shape
    q, k, v, _ = _qkv(*shape)
    with count_traffic() as t:
        attention_v1_naive(q, k, v)
    assert t.kernel_names == ["scores_kernel", "softmax_rows_kernel", "pv_kernel"]
    scores, softmax, pv = t.per_launch
    assert scores.global_bytes == model.bytes_scores(B, H, N, d, M)
    assert softmax.global_bytes == model.bytes_softmax_rows(B * H * N, M)
    assert pv.global_bytes == model.bytes_pv(B, H, N, d, M)
    assert t.global_bytes == model.bytes_naive(B, H, N, d, M)
    # S and P are written in full, once each, and read back: the N×M round trips of the pipeline.
    assert scores.global_stores["s"] == softmax.global_stores["out"] == B * H * N * M
    assert softmax.global_loads["x"] == 3 * B * H * N * M and pv.global_loads["p"] == B * H * N * M * d


def test_compulsory_traffic_is_below_the_requested_and_grows_like_n_squared():
    for n in (64, 1024):
        assert model.compulsory_bytes_naive(4, 16, n, 64) < model.bytes_naive(4, 16, n, 64)
    ratio = model.compulsory_bytes_naive(1, 1, 8192, 64) / model.compulsory_bytes_naive(1, 1, 4096, 64)
    assert 3.9 < ratio < 4.0
    assert model.footprint_naive(1, 32, 16384) == 2 * 32 * 16384 ** 2 * 4


def test_flash_model_reads_kv_once_per_query_tile():
    B, H, N, d = 2, 3, 100, 16
    per_head = N * d + 2 * 2 * N * d + N * d        # ceil(100 / 64) = 2 query tiles
    assert model.bytes_flash(B, H, N, d, block_q=64) == B * H * per_head * 4
    assert model.bytes_flash(B, H, N, d, block_q=1) == model.bytes_fused_rows(B, H, N, d)
    assert model.bytes_flash(B, H, N, d, block_q=64, itemsize=2) * 2 == model.bytes_flash(B, H, N, d, block_q=64)


@pytest.mark.parametrize("call, error", [
    (lambda: model.bytes_naive(1, 1, 2.0, 4), TypeError),
    (lambda: model.bytes_naive(1, -1, 2, 4), ValueError),
    (lambda: model.bytes_scores(1, 1, 2, True), TypeError),
    (lambda: model.bytes_flash(1, 1, 8, 4, block_q=0), ValueError),
    (lambda: model.footprint_naive(1, 1, 8, M=-2), ValueError),
])
def test_models_reject_bad_arguments(call, error):
    with pytest.raises(error):
        call()


# ---------------------------------------------------------------------------------------------
# The GPU recorder: cases are well formed without a GPU; the rest needs one
# ---------------------------------------------------------------------------------------------

def test_ncu_cases_are_labelled_and_lazy():
    from course.record import day02

    cases = day02.ncu_cases()
    assert [(c.label, c.N, c.columns) for c in cases] == [("attention_v1_naive", n, {"causal": False})
                                                         for n in day02.NCU_SIZES]
    assert all(callable(c.run) for c in cases)


def test_recorder_check_and_nsight_case_run_on_the_simulator(monkeypatch):
    """The recorder's code paths, shrunk to a simulator-sized shape (the GPU runs them at full size)."""
    from course.record import day02

    monkeypatch.setattr(day02, "SHAPE", {"B": 1, "H": 2, "d": 4})
    monkeypatch.setattr(day02, "NCU_SHAPE", {"B": 1, "H": 1, "d": 4})
    monkeypatch.setattr(day02, "NCU_SIZES", (3,))
    day02.check_full_size(n=5)
    (case,) = day02.ncu_cases()
    with count_traffic() as t:
        case.run()
        case.run()
    assert (case.label, case.N) == ("attention_v1_naive", 3)
    assert t.kernel_names == ["scores_kernel", "softmax_rows_kernel", "pv_kernel"] * 2


@pytest.mark.gpu
def test_recorder_sanitize_and_ncu_case_run_on_gpu():
    from course.record import day02

    day02.sanitize()
    case = day02.ncu_cases()[0]
    case.run()
    case.run()
    cuda.synchronize()
