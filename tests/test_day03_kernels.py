"""Day 3 kernels: the online softmax and attention fused one query row per thread, with their traffic.

On the simulator at small awkward sizes; the test marked gpu runs the recorder's Nsight and sanitizer
entry points. The recorder's full-size checks run on a GPU in test_gpu_days.py, with every other day's.
"""

import numpy as np
import pytest
from numba import cuda

from course.checking import CheckFailure, check, poison, random_inputs
from course.models import attention as model
from course.traffic import count_traffic
from kernels import reference
from kernels.attention import HEAD_DIM_MAX, attention_v2_fused_rows
from kernels.softmax import SOFTMAX_THREADS, softmax_online, softmax_rows

IDS = lambda s: "x".join(map(str, s))  # noqa: E731


def _qkv(B, H, N, M, d, seed=None, size=1.0):
    rng, seed = random_inputs(seed)
    q, k, v = (rng.standard_normal((B, H, n, d), dtype=np.float32) for n in (N, M, M))
    return q * np.float32(size), k * np.float32(size), v, seed


@pytest.mark.parametrize("cols", [1, 7, SOFTMAX_THREADS, SOFTMAX_THREADS + 1, 100])
def test_online_softmax_matches_reference_and_two_pass(cols):
    rng, seed = random_inputs()
    # a rising trend makes the running maximum change at many columns
    x = (2 * rng.standard_normal((3, cols)) + np.linspace(0, 6, cols)).astype(np.float32)
    p = softmax_online(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64)), name="P", seed=seed, rows_sum_to_one=True)
    check(p, softmax_rows(x).astype(np.float64), name="P against the two-pass kernel", seed=seed)


def test_online_softmax_masked_and_fully_masked_rows():
    rng, seed = random_inputs()
    n = SOFTMAX_THREADS + 3
    x = rng.standard_normal((n, n)).astype(np.float32)
    x[np.triu_indices(n, 1)] = -np.inf
    x[4] = -np.inf
    p = softmax_online(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64)), name="P", seed=seed)
    assert np.array_equal(p[4], np.zeros(n, np.float32)) and p[0, 0] == 1.0


def test_online_softmax_is_stable_for_logits_of_size_1e4():
    rng, seed = random_inputs()
    x = np.concatenate([1e4 + rng.standard_normal((1, 37)), np.linspace(-1e4, 1e4, 37)[None],
                        1e4 * rng.standard_normal((1, 37))]).astype(np.float32)
    check(softmax_online(x), reference.softmax(x.astype(np.float64)), name="P", seed=seed, rows_sum_to_one=True)


def test_online_softmax_accepts_device_arrays():
    rng, seed = random_inputs()
    x = rng.standard_normal((4, 50), dtype=np.float32)
    p = softmax_online(cuda.to_device(x))
    assert not isinstance(p, np.ndarray)
    check(p.copy_to_host(), reference.softmax(x.astype(np.float64)), name="P", seed=seed)


@pytest.mark.parametrize("shape", [(1, 2, 5, 9, 3), (2, 1, 1, 1, 6), (1, 1, 70, 2, 7), (1, 1, 3, 40, 12)], ids=IDS)
@pytest.mark.parametrize("causal", [False, True])
def test_fused_rows_match_reference(shape, causal):
    q, k, v, seed = _qkv(*shape)
    out = poison(np.empty_like(q))
    assert attention_v2_fused_rows(q, k, v, causal=causal, out=out) is out
    check(out, reference.attention(q, k, v, causal=causal), name=f"O, causal={causal}", seed=seed)


def test_fused_rows_causal_first_row_is_the_first_value():
    q, k, v, _ = _qkv(2, 3, 6, 6, 5)
    o = attention_v2_fused_rows(q, k, v, causal=True)
    assert np.allclose(o[:, :, 0], v[:, :, 0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_rows_large_logits_and_scale(causal):
    """Logits of size 1e4 through a scale. q and k are whole numbers and the scale a power of two, so every logit is
    exact in float32: a logit of that size rounded moves its weight by about 1e-3, past float32's tolerance, whenever
    two logits of a row come within a few units of each other, a failure of the seed, not of the kernel."""
    q, k, v, seed = _qkv(1, 2, 6, 6, 5, size=120.0)
    q, k = np.rint(q), np.rint(k)
    o = attention_v2_fused_rows(q, k, v, causal=causal, scale=0.25)
    check(o, reference.attention(q, k, v, causal=causal, scale=0.25), name="O, logits of size 1e4", seed=seed)


def test_fused_rows_without_keys_give_zeros_and_head_dim_up_to_the_limit():
    q, k, v, _ = _qkv(1, 2, 4, 0, 3)
    assert np.array_equal(attention_v2_fused_rows(q, k, v, out=poison(np.empty_like(q))), np.zeros_like(q))
    q, k, v, seed = _qkv(1, 1, 2, 3, HEAD_DIM_MAX)
    check(attention_v2_fused_rows(q, k, v), reference.attention(q, k, v), name="O, head_dim 128", seed=seed)


def test_fused_rows_accept_device_arrays():
    q, k, v, seed = _qkv(1, 2, 5, 7, 4)
    o = attention_v2_fused_rows(*(cuda.to_device(a) for a in (q, k, v)), causal=True)
    check(o.copy_to_host(), reference.attention(q, k, v, causal=True), name="O", seed=seed)


def test_missing_rescale_fails_the_check():
    """The check these tests rely on catches an online softmax that never rescales its sum."""
    rng, seed = random_inputs()
    x = np.linspace(0.0, 5.0, 12)[None]
    running = np.maximum.accumulate(x, axis=1)
    unrescaled = np.exp(x - x.max()) / np.exp(x - running).sum()
    with pytest.raises(CheckFailure):
        check(unrescaled, reference.softmax(x), name="P", seed=seed, dtype=np.float64, rows_sum_to_one=True)


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: attention_v2_fused_rows(q, k, v, causal=1), "causal must be True or False"),
    (lambda q, k, v: attention_v2_fused_rows(q, k, v.astype(np.float16)), "v must have dtype float32"),
    (lambda q, k, v: attention_v2_fused_rows(q, k[:, :1].copy(), v), "k must have shape"),
    (lambda q, k, v: attention_v2_fused_rows(q[..., :0].copy(), k[..., :0].copy(), v[..., :0].copy()), "head_dim >= 1"),
    (lambda q, k, v: attention_v2_fused_rows(q, k, v, out=np.empty((1, 2, 4, 5), np.float32)), "out must have shape"),
    (lambda q, k, v: softmax_online(q[0]), "x must have 2 dimensions"),
    (lambda q, k, v: softmax_online(q[0, 0].astype(np.int32)), "x must have dtype float32"),
])
def test_launchers_reject_bad_inputs(call, message):
    q, k, v, _ = _qkv(1, 2, 4, 5, 6)
    with pytest.raises((TypeError, ValueError), match=message):
        call(q, k, v)


def test_fused_rows_reject_a_head_dim_above_the_limit():
    q, k, v, _ = _qkv(1, 1, 1, 1, HEAD_DIM_MAX + 1)
    with pytest.raises(ValueError, match="HEAD_DIM_MAX"):
        attention_v2_fused_rows(q, k, v)


# ---------------------------------------------------------------------------------------------
# Traffic: counted on the simulator == the model, exactly; no N×M write
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 2, 9, 9, 3), (2, 1, 7, 12, 5), (1, 1, 12, 5, 2)], ids=IDS)
@pytest.mark.parametrize("causal", [False, True])
def test_fused_rows_traffic_equals_the_model(shape, causal):
    B, H, N, M, d = shape
    q, k, v, _ = _qkv(*shape)
    with count_traffic() as t:
        attention_v2_fused_rows(q, k, v, causal=causal)
    assert t.kernel_names == ["attention_v2_fused_rows_kernel"]
    assert t.global_bytes == model.bytes_fused_rows(B, H, N, d, M, causal=causal)
    pairs = model.causal_pairs(N, M) if causal else N * M
    assert dict(t.global_stores) == {"q": 0, "k": 0, "v": 0, "o": B * H * N * d}   # O only, once
    assert t.global_loads["q"] == B * H * N * d
    assert t.global_loads["k"] == t.global_loads["v"] == B * H * pairs * d          # once per query row


def test_online_softmax_reads_twice_where_the_two_pass_kernel_reads_three_times():
    rng, _ = random_inputs()
    x = rng.standard_normal((3, 45), dtype=np.float32)
    with count_traffic() as online:
        softmax_online(x)
    with count_traffic() as two_pass:
        softmax_rows(x)
    assert online.global_bytes == model.bytes_softmax_online(3, 45)
    assert online.global_loads["x"] == 2 * x.size and two_pass.global_loads["x"] == 3 * x.size


def test_causal_pairs():
    assert [model.causal_pairs(n) for n in (0, 1, 2, 5)] == [0, 1, 3, 15]
    assert model.causal_pairs(4, 2) == 1 + 2 + 2 + 2
    assert model.causal_pairs(2, 9) == 1 + 2
    assert model.flops_attention(1, 1, 5, 4, causal=True) == 4 * 15 * 4


# ---------------------------------------------------------------------------------------------
# The GPU recorder
# ---------------------------------------------------------------------------------------------

def test_ncu_cases_are_labelled_and_lazy():
    from course.record import day03

    cases = day03.ncu_cases()
    expected = [("attention_v2_fused_rows", n, {"causal": causal}) for causal in (False, True) for n in day03.NCU_SIZES]
    assert [(c.label, c.N, c.columns) for c in cases] == expected
    assert all(callable(c.run) for c in cases)


def test_recorder_check_and_nsight_cases_run_on_the_simulator(monkeypatch):
    """The recorder's code paths, shrunk to a simulator-sized shape (the GPU runs them at full size)."""
    from course.record import day03

    monkeypatch.setattr(day03, "SHAPE", {"B": 1, "H": 2, "d": 4})
    monkeypatch.setattr(day03, "SOFTMAX_ROWS", 3)
    monkeypatch.setattr(day03, "NCU_SHAPE", {"B": 1, "H": 1, "d": 4})
    monkeypatch.setattr(day03, "NCU_SIZES", (3,))
    day03.check_full_size(n=5)
    cases = day03.ncu_cases()
    with count_traffic() as t:
        for case in cases:
            case.run()
            case.run()
    assert [c.name for c in cases] == ["attention_v2_fused_rows:causal=False", "attention_v2_fused_rows:causal=True"]
    assert t.kernel_names == ["attention_v2_fused_rows_kernel"] * 4


@pytest.mark.gpu
def test_recorder_sanitize_and_ncu_case_run_on_gpu():
    from course.record import day03

    day03.sanitize()
    case = day03.ncu_cases()[-1]
    case.run()
    case.run()
    cuda.synchronize()
