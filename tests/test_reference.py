"""kernels.reference checked against independent implementations.

Attention and softmax against torch (float64 on the CPU), the GGUF formats bit for bit against the
``gguf`` package, float rounding against an exhaustive search over every value of each format,
quantization against its defining error bounds and exact integer arithmetic.
"""

import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType, quants

from kernels import reference as ref


def test_importing_the_references_loads_numpy_only():
    """Notebooks import kernels before choosing the device: no numba, torch or ml_dtypes here."""
    code = ("import sys, kernels, kernels.reference; "
            "print(sorted(m for m in ('numba', 'torch', 'ml_dtypes') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=pathlib.Path(__file__).parents[1]).stdout.strip()
    assert loaded == "[]"


def test_the_package_re_exports_every_topic_module():
    """``reference.<name>`` for every public name of every topic module, the same object."""
    import importlib
    import pkgutil

    topics = [m.name for m in pkgutil.iter_modules(ref.__path__) if not m.name.startswith("_")]
    assert len(topics) >= 6
    for topic in topics:
        module = importlib.import_module(f"kernels.reference.{topic}")
        assert module.__all__, f"kernels.reference.{topic} must declare its public names"
        for name in module.__all__:
            assert name in ref.__all__ and getattr(ref, name) is getattr(module, name), (topic, name)
    assert not set(topics) & set(ref.__all__), "a topic module must not share a name with a function"


def test_a_pristine_copy_ignores_patched_topic_modules(monkeypatch):
    """The grader's private copy of the package loads private copies of its topic modules too."""
    from grader.hidden import pristine
    from kernels.reference import _checks, softmax_attention

    def wrong_softmax(x, axis=-1):
        return np.zeros_like(x)

    monkeypatch.setattr(ref, "softmax", wrong_softmax)
    monkeypatch.setattr(softmax_attention, "softmax", wrong_softmax)
    monkeypatch.setattr(_checks, "_float64", lambda x, *a, **k: np.zeros(1))
    monkeypatch.setitem(sys.modules, "kernels.reference.softmax_attention", None)
    private = pristine("kernels.reference")
    assert private.softmax_attention is not softmax_attention
    x = np.array([[0.0, np.log(3.0)]])
    np.testing.assert_allclose(private.softmax(x), [[0.25, 0.75]])
    q = k = v = np.ones((1, 1, 2, 2))
    np.testing.assert_allclose(private.attention(q, k, v), np.ones((1, 1, 2, 2)))


def _torch(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    """torch's attention on float64 numpy inputs; mask (batch, 1, N, M) bool, True = visible."""
    out = F.scaled_dot_product_attention(
        _torch(q), _torch(k), _torch(v), attn_mask=None if mask is None else _torch(mask),
        is_causal=is_causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return out.numpy()


def _qkv(rng, batch, heads, kv_heads, N, M, d):
    return (rng.standard_normal((batch, heads, N, d)), rng.standard_normal((batch, kv_heads, M, d)),
            rng.standard_normal((batch, kv_heads, M, d)))


# (batch, heads, kv_heads, N, M, head_dim): every GQA group size 1, 2, 4, 8, N < M, N > M, d = 1
SHAPES = [
    (2, 8, 8, 17, 17, 16),
    (1, 8, 4, 5, 33, 8),
    (3, 8, 2, 31, 9, 5),
    (2, 8, 1, 12, 12, 1),
    (1, 6, 3, 1, 7, 4),
]


# ------------------------------------------------------------------------------------------
# softmax
# ------------------------------------------------------------------------------------------

def test_softmax_matches_torch_with_masked_entries():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 11)) * 30
    x[rng.random(x.shape) < 0.4] = -np.inf
    x[2] = -np.inf                                        # a fully masked row
    ours = ref.softmax(x)
    theirs = torch.softmax(_torch(x), dim=-1).numpy()     # NaN on the fully masked row
    some_visible = np.isfinite(x).any(axis=1)
    np.testing.assert_allclose(ours[some_visible], theirs[some_visible], rtol=1e-13, atol=1e-300)
    assert np.all(ours[2] == 0)
    np.testing.assert_allclose(ours[some_visible].sum(axis=1), 1.0, rtol=1e-13)


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_softmax_along_any_axis_matches_torch(axis):
    x = np.random.default_rng(1).standard_normal((3, 4, 5)) * 1e4
    np.testing.assert_allclose(ref.softmax(x, axis=axis), torch.softmax(_torch(x), dim=axis).numpy(),
                               rtol=1e-12, atol=1e-300)


def test_softmax_of_empty_rows_is_empty():
    assert ref.softmax(np.zeros((3, 0))).shape == (3, 0)
    assert ref.softmax(np.zeros((0, 4))).shape == (0, 4)


# ------------------------------------------------------------------------------------------
# attention against torch's scaled_dot_product_attention
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
def test_attention_matches_torch(shape):
    q, k, v = _qkv(np.random.default_rng(2), *shape)
    np.testing.assert_allclose(ref.attention(q, k, v), _sdpa(q, k, v), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_causal_attention_matches_torch_is_causal_top_left(shape):
    """torch's is_causal keeps key j for query i iff j <= i, also when N != M."""
    q, k, v = _qkv(np.random.default_rng(3), *shape)
    np.testing.assert_allclose(ref.attention(q, k, v, causal=True), _sdpa(q, k, v, is_causal=True),
                               rtol=1e-12, atol=1e-12)


def _torch_mask(batch, N, M, kv_lens=None, causal=False, window=None):
    """The visibility mask built with torch ops (tril / triu), independently of ref.attention_mask."""
    mask = torch.ones(batch, 1, N, M, dtype=torch.bool)
    if causal or window is not None:
        mask &= torch.ones(N, M, dtype=torch.bool).tril(0)
    if window is not None:
        mask &= torch.ones(N, M, dtype=torch.bool).triu(-(window - 1))
    if kv_lens is not None:
        mask &= (torch.arange(M)[None, :] < torch.as_tensor(kv_lens)[:, None])[:, None, None, :]
    return mask.numpy()


def _compare_visible_rows(ours, theirs, mask):
    """Rows that see a key must match torch; rows that see none must be 0 in ours."""
    seen = mask.any(axis=-1)                                   # (batch, 1, N)
    seen = np.broadcast_to(seen, ours.shape[:3])
    np.testing.assert_allclose(ours[seen], theirs[seen], rtol=1e-12, atol=1e-12)
    assert np.all(ours[~seen] == 0)
    return seen


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_kv_lens_matches_torch_bool_mask(shape, causal):
    rng = np.random.default_rng(4)
    batch, _, _, N, M, _ = shape
    q, k, v = _qkv(rng, *shape)
    kv_lens = rng.integers(0, M + 1, size=batch).astype(np.int32)
    kv_lens[0] = 0                                            # a batch whose rows see nothing
    mask = _torch_mask(batch, N, M, kv_lens, causal)
    ours = ref.attention(q, k, v, causal=causal, kv_lens=kv_lens)
    seen = _compare_visible_rows(ours, _sdpa(q, k, v, mask), mask)
    assert not seen[0].any()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("window", [1, 3, 8])
def test_sliding_window_matches_torch_bool_mask(shape, window):
    rng = np.random.default_rng(5)
    batch, _, _, N, M, _ = shape
    q, k, v = _qkv(rng, *shape)
    kv_lens = rng.integers(0, M + 1, size=batch)
    mask = _torch_mask(batch, N, M, kv_lens, window=window)
    ours = ref.attention(q, k, v, window=window, kv_lens=kv_lens, scale=0.3)
    _compare_visible_rows(ours, F.scaled_dot_product_attention(
        _torch(q), _torch(k), _torch(v), attn_mask=_torch(mask), scale=0.3,
        enable_gqa=True).numpy(), mask)
    # A window implies the causal bound: causal=True changes nothing.
    np.testing.assert_array_equal(ours, ref.attention(q, k, v, causal=True, window=window,
                                                      kv_lens=kv_lens, scale=0.3))


def test_attention_mask_matches_torch_construction():
    for N, M in [(6, 6), (4, 9), (9, 4), (1, 1), (0, 3), (3, 0)]:
        for kv_len in [None, 0, M // 2, M]:
            for causal, window in [(False, None), (True, None), (False, 2), (True, 5)]:
                expected = _torch_mask(1, N, M, None if kv_len is None else [kv_len], causal, window)[0, 0]
                np.testing.assert_array_equal(ref.attention_mask(N, M, causal, kv_len, window), expected)


def test_large_logits_match_torch_without_overflow():
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng, 1, 4, 2, 9, 13, 8)
    q *= 1e4 / np.abs(ref.attention_scores(q, k)).max()       # logits up to +-1e4
    ours = ref.attention(q, k, v, causal=True)
    assert np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours, _sdpa(q, k, v, is_causal=True), rtol=1e-9, atol=1e-9)


def test_gqa_reads_kv_head_h_over_group():
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, 1, 6, 2, 4, 5, 3)
    out = ref.attention(q, k, v)
    for h in range(6):
        one_head = ref.attention(q[:, h:h + 1], k[:, h // 3:h // 3 + 1], v[:, h // 3:h // 3 + 1])
        np.testing.assert_array_equal(out[:, h:h + 1], one_head)


def test_attention_scores_are_scaled_q_dot_k():
    rng = np.random.default_rng(8)
    q, k, _ = _qkv(rng, 2, 4, 2, 3, 5, 6)
    s = ref.attention_scores(q, k)
    expected = torch.einsum("bhnd,bhmd->bhnm", _torch(q), _torch(k).repeat_interleave(2, dim=1)) / np.sqrt(6)
    np.testing.assert_allclose(s, expected.numpy(), rtol=1e-13)


def test_empty_sequences_give_empty_or_zero_outputs():
    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng, 2, 2, 1, 0, 4, 3)
    assert ref.attention(q, k, v).shape == (2, 2, 0, 3)
    q, k, v = _qkv(rng, 2, 2, 1, 3, 0, 3)
    np.testing.assert_array_equal(ref.attention(q, k, v, causal=True), np.zeros((2, 2, 3, 3)))


# ------------------------------------------------------------------------------------------
# paged attention
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("heads, kv_heads, block_size", [(4, 4, 4), (8, 2, 3), (6, 1, 16), (4, 2, 1)])
def test_paged_attention_equals_contiguous_attention(heads, kv_heads, block_size):
    rng = np.random.default_rng(10)
    num_seqs, M, d = 5, 23, 8
    _, k, v = _qkv(rng, num_seqs, heads, kv_heads, 1, M, d)
    q = rng.standard_normal((num_seqs, heads, d))
    context_lens = np.array([23, 1, 0, 17, 9], dtype=np.int32)     # full, short, empty, partial pages
    k_cache, v_cache, tables, lens = ref.build_paged_cache(k, v, block_size, rng, context_lens)
    out = ref.paged_attention(q, k_cache, v_cache, tables, lens)
    expected = ref.attention(q[:, :, None, :], k, v, kv_lens=context_lens)[:, :, 0, :]
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-13)
    assert np.all(out[2] == 0)


def test_build_paged_cache_places_every_token_through_the_table():
    rng = np.random.default_rng(11)
    k = rng.standard_normal((3, 2, 10, 4)).astype(np.float32)
    v = rng.standard_normal((3, 2, 10, 4)).astype(np.float32)
    context_lens = np.array([10, 7, 3])
    k_cache, v_cache, tables, lens = ref.build_paged_cache(k, v, 4, rng, context_lens, spare_blocks=2)
    assert k_cache.dtype == np.float32 and tables.dtype == np.int32 and lens.dtype == np.int32
    assert k_cache.shape == (3 + 2 + 1 + 2, 2, 4, 4) and tables.shape == (3, 3)
    used = tables[tables >= 0]
    assert len(set(used.tolist())) == used.size == 6                # no block shared
    assert not np.array_equal(np.sort(used), used)                  # the pool is shuffled
    for s, n in enumerate(context_lens):
        for t in range(n):                                          # the definition, token by token
            np.testing.assert_array_equal(k_cache[tables[s, t // 4], :, t % 4], k[s, :, t])
            np.testing.assert_array_equal(v_cache[tables[s, t // 4], :, t % 4], v[s, :, t])
        assert np.all(tables[s, -(-n // 4):] == -1)
        assert np.all(np.isnan(k_cache[tables[s, (n - 1) // 4], :, (n - 1) % 4 + 1:]))  # tail of last page
        np.testing.assert_array_equal(ref.gather_kv(k_cache, tables[s], n), k[s, :, :n])


def test_build_paged_cache_keeps_its_spares_last_and_pads_the_table():
    """A -1 entry used as an index (NumPy and the simulator wrap it to the last block) reads a spare."""
    rng = np.random.default_rng(14)
    k = rng.standard_normal((2, 1, 9, 3))
    k_cache, _, tables, _ = ref.build_paged_cache(k, k, 4, rng, np.array([9, 2]), spare_blocks=2, padding_pages=1)
    assert tables.shape == (2, 3 + 1) and np.all(tables[:, -1] == -1)
    assert sorted(tables[tables >= 0].tolist()) == [0, 1, 2, 3]      # the last two blocks are spares
    assert np.isnan(k_cache[-2:]).all() and np.isnan(k_cache[tables[0, -1]]).all()


def test_paged_attention_that_ignores_the_table_is_wrong():
    """The shuffled pool makes reading blocks in allocation order give a different answer."""
    rng = np.random.default_rng(12)
    _, k, v = _qkv(rng, 2, 2, 2, 1, 12, 4)
    q = rng.standard_normal((2, 2, 4))
    k_cache, v_cache, tables, lens = ref.build_paged_cache(k, v, 4, rng, fill_value=0.0)
    in_order = np.arange(tables.size, dtype=np.int32).reshape(tables.shape)
    assert not np.allclose(ref.paged_attention(q, k_cache, v_cache, in_order, lens),
                           ref.paged_attention(q, k_cache, v_cache, tables, lens))


# ------------------------------------------------------------------------------------------
# GEMM and int8
# ------------------------------------------------------------------------------------------

def test_gemm_matches_torch():
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal((5, 3))
    c = ref.gemm(a, b)                                       # float32 input, float64 arithmetic
    assert c.dtype == np.float64
    np.testing.assert_allclose(c, (_torch(a).double() @ _torch(b)).numpy(), rtol=1e-14, atol=1e-14)


def test_int8_per_tensor_round_trip_and_range():
    x = np.random.default_rng(14).standard_normal((9, 13)) * 3
    q, scale = ref.quantize_int8(x)
    assert q.dtype == np.int8 and scale.dtype == np.float32 and scale.shape == ()
    assert scale == np.float32(np.abs(x).max() / 127)
    assert np.abs(q).max() == 127 and q.min() >= -127
    assert np.all(np.abs(x - ref.dequantize_int8(q, scale)) <= scale / 2)
    np.testing.assert_array_equal(ref.quantize_int8(-x)[0], -q)       # symmetric


def test_int8_rounds_halves_to_even():
    x = np.array([127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.5])             # scale exactly 1
    q, scale = ref.quantize_int8(x)
    assert scale == 1.0
    np.testing.assert_array_equal(q, [127, 0, 2, 2, 0, -2, 4])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_int8_per_channel_equals_per_tensor_on_each_channel(axis):
    rng = np.random.default_rng(15)
    x = rng.standard_normal((4, 5, 6)) * rng.choice([1e-3, 1.0, 1e3], size=(4, 5, 6))
    q, scale = ref.quantize_int8(x, axis=axis)
    expected_shape = [1, 1, 1]
    expected_shape[axis] = x.shape[axis]
    assert scale.shape == tuple(expected_shape)
    for c in range(x.shape[axis]):
        q_c, scale_c = ref.quantize_int8(np.take(x, c, axis=axis))
        np.testing.assert_array_equal(np.take(q, c, axis=axis), q_c)
        assert scale.reshape(-1)[c] == scale_c


def test_per_channel_beats_per_tensor_when_channels_differ_in_size():
    rng = np.random.default_rng(16)
    x = rng.standard_normal((8, 64)) * np.logspace(-3, 1, 8)[:, None]
    per_tensor = ref.dequantize_int8(*ref.quantize_int8(x))
    per_row = ref.dequantize_int8(*ref.quantize_int8(x, axis=0))
    assert np.abs(x - per_row)[0].max() < np.abs(x - per_tensor)[0].max() / 100


def test_all_zero_channel_gets_a_positive_scale_and_zero_codes():
    x = np.zeros((3, 4))
    x[1] = [1.0, -2.0, 0.5, 0.0]
    q, scale = ref.quantize_int8(x, axis=0)
    assert np.all(scale > 0) and np.all(q[[0, 2]] == 0)
    np.testing.assert_array_equal(ref.dequantize_int8(q, scale)[[0, 2]], 0.0)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_uint8_asymmetric_round_trip(axis):
    rng = np.random.default_rng(17)
    x = rng.standard_normal((6, 10)) * 2 + 1.5
    x[0, 0] = 0.0
    q, scale, zero_point = ref.quantize_uint8_asymmetric(x, axis=axis)
    assert q.dtype == np.uint8 and scale.dtype == np.float32 and zero_point.dtype == np.int32
    assert np.all((zero_point >= 0) & (zero_point <= 255))
    deq = ref.dequantize_uint8_asymmetric(q, scale, zero_point)
    assert np.all(np.abs(x - deq) <= scale / 2)
    assert deq[0, 0] == 0.0                                          # zero is exact


@pytest.mark.parametrize("sign, zero_code", [(1.0, 0), (-1.0, 255)])
def test_uint8_asymmetric_one_signed_tensors(sign, zero_code):
    """The range is stretched to include 0: zero keeps an exact code at the end of the range."""
    x = sign * np.array([0.5, 1.0, 3.0])
    q, scale, zero_point = ref.quantize_uint8_asymmetric(x)
    assert zero_point == zero_code and scale == np.float32(3.0 / 255)
    assert np.all(np.abs(x - ref.dequantize_uint8_asymmetric(q, scale, zero_point)) <= scale / 2)


def test_gemm_int8_is_exact_with_power_of_two_scales():
    """With power-of-two scales every product and sum is exact, so both orders agree bit for bit."""
    rng = np.random.default_rng(18)
    a_q = rng.integers(-127, 128, size=(9, 40)).astype(np.int8)
    b_q = rng.integers(-127, 128, size=(40, 7)).astype(np.int8)
    a_scale = np.float32(2.0) ** rng.integers(-8, 3, size=(9, 1)).astype(np.float32)
    b_scale = np.float32(2.0) ** rng.integers(-8, 3, size=(1, 7)).astype(np.float32)
    expected = ref.gemm(ref.dequantize_int8(a_q, a_scale), ref.dequantize_int8(b_q, b_scale))
    np.testing.assert_array_equal(ref.gemm_int8(a_q, a_scale, b_q, b_scale), expected)


def test_gemm_int8_accumulates_exactly_then_scales():
    rng = np.random.default_rng(19)
    a, b = rng.standard_normal((6, 50)), rng.standard_normal((50, 4))
    (a_q, a_scale), (b_q, b_scale) = ref.quantize_int8(a, axis=0), ref.quantize_int8(b, axis=1)
    integer_product = (torch.from_numpy(a_q).long() @ torch.from_numpy(b_q).long()).numpy()
    np.testing.assert_array_equal(ref.gemm_int8(a_q, np.float32(1), b_q, np.float32(1)), integer_product)
    np.testing.assert_allclose(ref.gemm_int8(a_q, a_scale, b_q, b_scale),
                               ref.gemm(ref.dequantize_int8(a_q, a_scale), ref.dequantize_int8(b_q, b_scale)),
                               rtol=1e-13)
    # The quantized product is close to the float product: relative error of a few 1e-3.
    exact = ref.gemm(a, b)
    error = np.linalg.norm(ref.gemm_int8(a_q, a_scale, b_q, b_scale) - exact) / np.linalg.norm(exact)
    assert error < 2e-2


# ------------------------------------------------------------------------------------------
# int4
# ------------------------------------------------------------------------------------------

def test_unpack_then_pack_every_byte():
    every_byte = np.arange(256, dtype=np.uint8)
    values = ref.unpack_int4(every_byte)
    assert values.dtype == np.int8 and values.shape == (512,)
    np.testing.assert_array_equal(ref.pack_int4(values), every_byte)


def test_pack_int4_layout_low_nibble_first():
    rng = np.random.default_rng(20)
    q = rng.integers(-8, 8, size=(3, 10))
    packed = ref.pack_int4(q)
    for r in range(3):
        for i in range(5):
            expected = (int(q[r, 2 * i]) % 16) + 16 * (int(q[r, 2 * i + 1]) % 16)
            assert packed[r, i] == expected
    np.testing.assert_array_equal(ref.unpack_int4(packed), q)
    assert ref.pack_int4(np.array([-1, 0]))[0] == 0x0F and ref.pack_int4(np.array([0, -8]))[0] == 0x80


@pytest.mark.parametrize("group_size", [2, 8, 32])
def test_int4_groups_round_trip(group_size):
    rng = np.random.default_rng(21)
    x = rng.standard_normal((5, 64)) * rng.choice([1e-2, 1.0, 30.0], size=(5, 1))
    packed, scales = ref.quantize_int4_groups(x, group_size)
    assert packed.shape == (5, 32) and packed.dtype == np.uint8
    assert scales.shape == (5, 64 // group_size) and scales.dtype == np.float32
    q = ref.unpack_int4(packed)
    assert q.min() >= -7 and q.max() <= 7
    deq = ref.dequantize_int4_groups(packed, scales)
    per_element_scale = np.repeat(scales, group_size, axis=1)
    assert np.all(np.abs(x - deq) <= per_element_scale / 2)
    np.testing.assert_array_equal(per_element_scale, np.float32(np.abs(x).reshape(5, -1, group_size).max(-1) / 7)
                                  .repeat(group_size, axis=1))


# ------------------------------------------------------------------------------------------
# GGUF Q8_0, Q4_0 and Q4_1, bit for bit against the gguf package
# ------------------------------------------------------------------------------------------

FORMATS = [
    (ref.quantize_q8_0, ref.dequantize_q8_0, GGMLQuantizationType.Q8_0, 34),
    (ref.quantize_q4_0, ref.dequantize_q4_0, GGMLQuantizationType.Q4_0, 18),
    (ref.quantize_q4_1, ref.dequantize_q4_1, GGMLQuantizationType.Q4_1, 20),
]


def _tie_blocks():
    """Blocks whose values sit exactly on rounding ties, with scale 1 in both formats."""
    halves = np.arange(-7.5, 8, 0.5, dtype=np.float32)[:31]
    q8_ties = np.concatenate([[127.0], halves]).astype(np.float32)          # d = 127 / 127 = 1
    q4_ties = np.concatenate([[-8.0], halves]).astype(np.float32)           # d = -8 / -8 = 1
    below_half = np.full(32, np.nextafter(np.float32(-0.5), np.float32(-1)), dtype=np.float32)
    below_half[0] = -8.0          # x + 8.5 rounds to 8.0 in float32: truncates to 8, not to 7
    plus_first = np.linspace(-3, 3, 32).astype(np.float32)
    plus_first[[4, 20]] = [5.0, -5.0]                                        # equal magnitudes:
    minus_first = plus_first.copy()                                          # the first one decides
    minus_first[[4, 20]] = [-5.0, 5.0]
    return np.stack([q8_ties, q4_ties, below_half, plus_first, minus_first])


def _division_differs_block():
    """A Q8_0 block where round(x / d) and round(x * (1 / d)) differ: llama.cpp multiplies."""
    for top in np.linspace(1.0, 3.0, 400, dtype=np.float32):
        d = top / np.float32(127)
        inverse = np.float32(1) / d
        candidates = (np.arange(1, 127, dtype=np.float32) + np.float32(0.5)) * d
        for step in (-1, 0, 1):
            x = np.nextafter(candidates, candidates + step).astype(np.float32) if step else candidates
            by_division = np.floor((x / d).astype(np.float64) + 0.5)
            by_inverse = np.floor((x * inverse).astype(np.float64) + 0.5)
            differ = np.flatnonzero(by_division != by_inverse)
            if differ.size:
                block = np.linspace(-top, top, 32).astype(np.float32)
                block[1] = x[differ[0]]
                return block
    raise AssertionError("no block found where x / d and x * (1 / d) round differently")


def _constant_and_extreme_blocks():
    """Constant blocks (Q4_1: d = 0, the value is the minimum), blocks at the edge of fp16's range, blocks
    of two values only (the extreme codes of each format) and blocks whose scales are fp16 subnormals."""
    constant = np.array([3.0, -1e-3, 65504.0, -0.5])[:, None] * np.ones((4, 32))
    edges = np.linspace(-65504, 65504, 32)[None].repeat(2, axis=0)
    edges[1] = edges[1][::-1]
    two_values = np.where(np.arange(32) % 3 == 0, -6.0, 5.25)[None].repeat(2, axis=0)   # Q4_0: d = 0.75
    two_values[1] = -two_values[1]
    tiny = np.random.default_rng(24).uniform(-1, 1, (2, 32)) * np.array([[1e-5], [3e-7]])
    return np.concatenate([constant, edges, two_values, tiny])


def _gguf_test_data():
    rng = np.random.default_rng(22)
    blocks = [rng.standard_normal((6, 32)) * rng.choice([1e-4, 1.0, 1e3], size=(6, 1)),
              rng.uniform(-1, 1, (4, 32)), rng.standard_normal((2, 32)) ** 3,
              np.zeros((2, 32)), _constant_and_extreme_blocks(), _tie_blocks(), _division_differs_block()[None]]
    data = np.concatenate(blocks).astype(np.float32)
    data[-3, 7] = 0.0
    return data.reshape(-1, 64)                                           # rows of two blocks


@pytest.mark.parametrize("quantize, dequantize, qtype, block_bytes", FORMATS)
def test_gguf_quantize_is_bit_exact(quantize, dequantize, qtype, block_bytes):
    x = _gguf_test_data()
    ours = quantize(x)
    theirs = quants.quantize(x, qtype)
    assert ours.dtype == np.uint8 and ours.shape == (x.shape[0], 2 * block_bytes) == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(quantize(x.astype(np.float64)), theirs)   # float64 input: same bytes
    np.testing.assert_array_equal(quantize(x.reshape(-1)), theirs.reshape(-1))


@pytest.mark.parametrize("quantize, dequantize, qtype, block_bytes", FORMATS)
def test_gguf_dequantize_is_bit_exact(quantize, dequantize, qtype, block_bytes):
    rng = np.random.default_rng(23)
    x = _gguf_test_data()
    np.testing.assert_array_equal(dequantize(quantize(x)), quants.dequantize(quants.quantize(x, qtype), qtype))
    # Arbitrary bytes with finite fp16 scales decode the same way too.
    raw = rng.integers(0, 256, size=(5, 3 * block_bytes), dtype=np.uint8)
    scales = rng.uniform(-100, 100, size=(5, 3)).astype("<f2").view(np.uint8)
    for b in range(3):
        raw[:, b * block_bytes:b * block_bytes + 2] = scales[:, 2 * b:2 * b + 2]
    theirs = quants.dequantize(raw, qtype)
    assert theirs.shape == dequantize(raw).shape == (5, 96)
    np.testing.assert_array_equal(dequantize(raw), theirs)


def test_the_tie_data_tells_rounding_rules_apart():
    """The tie blocks are there to catch np.rint (half to even) in place of llama.cpp's roundf."""
    ties = _tie_blocks()[0]
    codes = quants.quantize(ties, GGMLQuantizationType.Q8_0)[2:].view(np.int8)
    assert not np.array_equal(codes, np.rint(ties).astype(np.int8))
    np.testing.assert_array_equal(codes, ref.quantize_q8_0(ties)[2:].view(np.int8))


@pytest.mark.parametrize("quantize, dequantize, qtype, block_bytes", FORMATS)
def test_gguf_block_too_small_for_its_inverse_scale_stores_zeros(quantize, dequantize, qtype, block_bytes):
    x = np.zeros(32, dtype=np.float32)
    x[3] = 1e-40                                     # d = x / 127 or x / 8: 1 / d overflows float32
    encoded = quantize(x)
    assert encoded.shape == (block_bytes,) and encoded[:2].view("<f2")[0] == 0   # fp16 d is +-0
    np.testing.assert_array_equal(dequantize(encoded), np.zeros(32))


def test_the_extreme_blocks_reach_the_extreme_codes():
    """The two-valued blocks of the test data use the first and last code of each 4-bit format."""
    blocks = _constant_and_extreme_blocks()[6:8].astype(np.float32)
    for quantize, header in [(ref.quantize_q4_0, 2), (ref.quantize_q4_1, 4)]:
        packed = quantize(blocks)[:, header:]
        assert set(np.concatenate([packed & 0x0F, packed >> 4]).ravel()) == {0, 15}, quantize.__name__


def test_q4_1_layout_stores_d_then_m_then_nibbles():
    x = np.linspace(-1.0, 2.0, 32).astype(np.float32)
    x[0], x[16], x[1] = -3.0, 12.0, 0.0                  # m = -3, d = 15 / 15 = 1: codes 0, 15 and 3
    packed = ref.quantize_q4_1(x)
    assert packed.shape == (20,)
    assert packed[:2].view("<f2")[0] == 1.0 and packed[2:4].view("<f2")[0] == -3.0
    assert packed[4] == 0 | (15 << 4) and packed[5] & 0x0F == 3
    np.testing.assert_array_equal(ref.dequantize_q4_1(packed)[[0, 1, 16]], [-3.0, 0.0, 12.0])


def test_q4_1_constant_block_has_zero_scale_and_its_value_as_minimum():
    packed = ref.quantize_q4_1(np.full((2, 32), [[0.1], [-7.0]], np.float32))
    assert packed.shape == (2, 20)
    np.testing.assert_array_equal(packed[:, :2].copy().view("<f2").ravel(), [0, 0])
    np.testing.assert_array_equal(packed[:, 2:4].copy().view("<f2").ravel(), np.float16([0.1, -7.0]))
    np.testing.assert_array_equal(packed[:, 4:], 0)
    np.testing.assert_array_equal(ref.dequantize_q4_1(packed), np.float16([[0.1], [-7.0]]).astype(np.float64)
                                  * np.ones((2, 32)))


def test_q4_1_rounds_d_q_plus_m_once_to_float32_as_llama_cpp():
    """A large d q plus a tiny m: the exact sum needs more than float32's 24 bits, and llama.cpp's value
    (and the gguf package's) is that sum rounded to float32."""
    block = np.zeros(20, np.uint8)
    block[:2] = np.array([1000.0], "<f2").view(np.uint8)
    block[2:4] = np.array([0.0001], "<f2").view(np.uint8)
    block[4:] = 0xFF                                       # every code 15: d q = 15000
    values = ref.dequantize_q4_1(block)
    exact = 15000.0 + float(np.float16(0.0001))
    assert values[0] == float(np.float32(exact)) != exact
    np.testing.assert_array_equal(values, quants.dequantize(block, GGMLQuantizationType.Q4_1))


def test_q4_1_refuses_a_range_or_a_minimum_beyond_fp16():
    wide = np.zeros(32, np.float32)
    wide[0], wide[1] = -6e5, 6e5                            # d = 1.2e6 / 15 = 80000 > 65504
    with pytest.raises(ValueError, match="a block scale does not fit in fp16"):
        ref.quantize_q4_1(wide)
    with pytest.raises(ValueError, match="a block minimum does not fit in fp16"):
        ref.quantize_q4_1(np.full(32, -7e4, np.float32))


def test_q8_1_activations_have_q8_0_codes_a_float32_scale_and_the_block_sums():
    """The codes are the gguf package's Q8_0 codes; the scale stays float32 (amax / 127), the sums exact."""
    x = _gguf_test_data()
    codes, scales, sums = ref.quantize_q8_1(x)
    assert codes.dtype == np.int8 and codes.shape == x.shape and scales.dtype == np.float32
    assert scales.shape == sums.shape == (x.shape[0], 2)
    theirs = quants.quantize(x, GGMLQuantizationType.Q8_0).reshape(-1, 34)[:, 2:].view(np.int8)
    np.testing.assert_array_equal(codes.reshape(-1, 32), theirs)
    blocks = x.reshape(-1, 32)
    np.testing.assert_array_equal(scales.reshape(-1), np.abs(blocks).max(axis=1) / np.float32(127))
    np.testing.assert_array_equal(sums.reshape(-1), blocks.astype(np.float64).sum(axis=1))
    values = ref.dequantize_q8_1(codes, scales)      # d q, block by block, in x's shape: within half a step of x
    assert values.dtype == np.float64 and values.shape == x.shape
    np.testing.assert_array_equal(values.reshape(-1, 32), codes.reshape(-1, 32) * scales.reshape(-1, 1).astype(np.float64))
    assert np.all(np.abs(values - x).reshape(-1, 32) <= scales.reshape(-1, 1) / 2 * (1 + 1e-6))


@pytest.mark.parametrize("fmt", ["q4_1", "q4_0", "q8_0"])
def test_gemv_q8_1_is_the_codes_times_the_q8_1_values_plus_the_minimum_times_the_exact_sums(fmt):
    """Block by block, from its definition: d sum_j q_j x^_j + m s, q the codes (Q4_0: q - 8 taken as q with
    m = -8 d), x^ x's q8_1 values, s x's exact block sum; a batch gives one row per token."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    w = np.asarray(getattr(ref, f"quantize_{fmt}")(rng.standard_normal((3, 64)).astype(np.float32))).reshape(3, 2, -1)
    want = np.zeros((2, 3))
    for t in range(2):
        codes, scales, sums = ref.quantize_q8_1(x[t])
        x_hat = ref.dequantize_q8_1(codes, scales).reshape(2, 32)
        for n in range(3):
            for b in range(2):
                d = float(w[n, b, :2].view("<f2")[0])
                if fmt == "q8_0":
                    q, m = w[n, b, 2:].view(np.int8).astype(np.float64), 0.0
                else:
                    packed = w[n, b, 4:] if fmt == "q4_1" else w[n, b, 2:]
                    q = np.concatenate([packed & 15, packed >> 4]).astype(np.float64)
                    m = float(w[n, b, 2:4].view("<f2")[0]) if fmt == "q4_1" else -8 * d
                want[t, n] += d * (q @ x_hat[b]) + m * sums[b]
    np.testing.assert_allclose(ref.gemv_q8_1(w, x, fmt), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref.gemv_q8_1(w, x[1], fmt), want[1], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="fmt must be one of 'q8_0', 'q4_0', 'q4_1', 'int4_g128', got 'q5_0'"):
        ref.gemv_q8_1(w, x, "q5_0")


def test_int4_g128_is_int4_groups_of_128_with_the_scale_in_fp16_laid_out_as_q4_0_blocks():
    """Per group of 128: d = amax / 7 stored in fp16, then 4 runs of 16 bytes, run r holding values 32 r ... 32 r +
    31 as Q4_0 holds a block (q + 8, byte j: value j low, value j + 16 high); the values d q within half a step of x
    (d the stored scale), the same codes as quantize_int4_groups' wherever the fp16 d rounds to the float32 one; a
    group of zeros gives d = 0 and codes 8."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    x[1, :128] = 0.0
    x[2, 128:] = np.arange(128) - 64.0                    # amax 64: d = 64 / 7, q = rint(v / d)
    w = ref.quantize_int4_g128(x)
    assert w.dtype == np.uint8 and w.shape == (3, 2 * ref.INT4_G128_BLOCK_BYTES)
    groups = w.reshape(3, 2, 66)
    d = groups[..., :2].copy().view("<f2")[..., 0].astype(np.float64)
    np.testing.assert_array_equal(d, (np.abs(x.reshape(3, 2, 128)).max(axis=2) / np.float32(7)).astype("<f2"))
    runs = groups[..., 2:].reshape(3, 2, 4, 16)
    codes = np.concatenate([runs & 15, runs >> 4], axis=3).reshape(3, 256).astype(np.int64)   # value order
    q = np.clip(np.rint(x.reshape(3, 2, 128) / np.where(d > 0, d, 1)[..., None]), -8, 7).reshape(3, 256)
    np.testing.assert_array_equal(codes - 8, np.where(np.repeat(d, 128, axis=1) > 0, q, 0))
    assert d[1, 0] == 0 and np.all(codes[1, :128] == 8)
    values = ref.dequantize_int4_g128(w)
    assert values.dtype == np.float64 and values.shape == x.shape
    np.testing.assert_array_equal(values, (codes - 8) * np.repeat(d, 128, axis=1))
    assert np.all(np.abs(values - x) <= np.repeat(d, 128, axis=1) / 2 * (1 + 1e-12))
    packed, scales = ref.quantize_int4_groups(x, 128)     # the same codes where fp16 keeps the float32 scale
    same = np.repeat(scales.astype("<f2").astype(np.float32) == scales, 128, axis=1)
    np.testing.assert_array_equal((codes - 8)[same], ref.unpack_int4(packed)[same])
    with pytest.raises(ValueError, match="multiple of 128"):
        ref.quantize_int4_g128(np.zeros((2, 96), np.float32))
    with pytest.raises(ValueError, match="does not fit in fp16"):
        ref.quantize_int4_g128(np.full(128, 1e6, np.float32))
    with pytest.raises(ValueError, match=r"multiple of 66 \(int4_g128 block size\)"):
        ref.dequantize_int4_g128(np.zeros(64, np.uint8))


def test_gemv_q8_1_of_int4_g128_takes_each_group_s_scale_for_its_four_blocks():
    """int4_g128 against the same codes stored as Q4_0 blocks, each carrying its group's d: the same product."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    w = ref.quantize_int4_g128(rng.standard_normal((3, 256)).astype(np.float32)).reshape(3, 2, 66)
    q4_0 = np.empty((3, 2, 4, 18), np.uint8)
    q4_0[..., :2] = w[:, :, None, :2]
    q4_0[..., 2:] = w[..., 2:].reshape(3, 2, 4, 16)
    np.testing.assert_allclose(ref.gemv_q8_1(w, x, "int4_g128"), ref.gemv_q8_1(q4_0.reshape(3, 8, 18), x, "q4_0"),
                               rtol=1e-12, atol=1e-12)


def test_q4_0_layout_puts_element_j_plus_16_in_the_high_nibble():
    x = np.zeros(32, dtype=np.float32)
    x[0], x[16], x[1] = -8.0, 7.0, 1.0                   # d = 1: codes 0, 15 and 9
    packed = ref.quantize_q4_0(x)
    assert packed.shape == (18,)
    assert packed[2] == 0 | (15 << 4) and packed[3] == 9 | (8 << 4)
    np.testing.assert_array_equal(ref.dequantize_q4_0(packed)[[0, 1, 16]], [-8.0, 1.0, 7.0])


# ------------------------------------------------------------------------------------------
# fp16, bf16, fp8 rounding against an exhaustive search over every value of the format
# ------------------------------------------------------------------------------------------

_LARGEST_POSITIVE_FINITE_CODE = {"fp16": (np.uint16, np.float16, 0x7BFF),
                                 "bf16": (np.uint16, ml_dtypes.bfloat16, 0x7F7F),
                                 "fp8_e4m3": (np.uint8, ml_dtypes.float8_e4m3fn, 0x7E)}


def _nearest_by_search(x, fmt):
    """Nearest representable value, ties to the even code, by searching all non-negative values."""
    code_type, value_type, last = _LARGEST_POSITIVE_FINITE_CODE[fmt]
    codes = np.arange(last + 1, dtype=code_type)
    values = codes.view(value_type).astype(np.float64)              # increasing with the code
    magnitude = np.abs(x)
    upper = np.clip(np.searchsorted(values, magnitude), 1, last)
    lower = upper - 1
    below, above = magnitude - values[lower], values[upper] - magnitude
    pick_upper = (above < below) | ((above == below) & (codes[upper] % 2 == 0))
    return np.copysign(np.where(pick_upper, values[upper], values[lower]), x)


def _random_in_range(rng, fmt, size):
    """Random float64 values spread over every binade of the format, subnormals included."""
    smallest_subnormal = {"fp16": 2.0**-24, "bf16": 2.0**-133, "fp8_e4m3": 2.0**-9}[fmt]
    top = ref.FLOAT_FORMATS[fmt]["max"]
    magnitude = np.exp(rng.uniform(np.log(smallest_subnormal / 4), np.log(top), size))
    return magnitude * rng.choice([-1.0, 1.0], size)


def _midpoints(fmt):
    """Every exact tie between two neighbouring positive values (up to 65535 of them)."""
    code_type, value_type, last = _LARGEST_POSITIVE_FINITE_CODE[fmt]
    values = np.arange(last + 1, dtype=code_type).view(value_type).astype(np.float64)
    return (values[:-1] + values[1:]) / 2


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3"])
def test_round_to_matches_exhaustive_search(fmt):
    rng = np.random.default_rng(24)
    x = np.concatenate([_random_in_range(rng, fmt, 20000), _midpoints(fmt), -_midpoints(fmt)[::7]])
    np.testing.assert_array_equal(ref.round_to(x, fmt), _nearest_by_search(x, fmt))


def test_fp16_matches_numpy_cast_from_float64():
    x = _random_in_range(np.random.default_rng(25), "fp16", 20000)
    np.testing.assert_array_equal(ref.round_to(x, "fp16"), x.astype(np.float16).astype(np.float64))


@pytest.mark.parametrize("fmt, torch_type, ml_type", [
    ("fp16", torch.float16, np.float16),
    ("bf16", torch.bfloat16, ml_dtypes.bfloat16),
    ("fp8_e4m3", torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
])
def test_round_to_matches_torch_and_ml_dtypes_on_float32_inputs(fmt, torch_type, ml_type):
    """From float32 the libraries round once, so they must agree with us exactly."""
    x = _random_in_range(np.random.default_rng(26), fmt, 20000).astype(np.float32)
    ours = ref.round_to(x, fmt)
    np.testing.assert_array_equal(ours, torch.from_numpy(x).to(torch_type).double().numpy())
    np.testing.assert_array_equal(ours, x.astype(ml_type).astype(np.float64))


def test_round_to_rounds_once_from_float64():
    """1 + 2**-8 + 2**-30 is just above the bf16 tie: nearest is 1 + 2**-7. Via float32 it is 1."""
    x = 1 + 2.0**-8 + 2.0**-30
    assert ref.round_to(x, "bf16") == 1 + 2.0**-7
    assert float(np.float32(x).astype(ml_dtypes.bfloat16)) == 1.0   # the double rounding we avoid


def test_round_to_overflow_and_special_values():
    big = np.array([65520.0, -1e6, 3.5e38, 464.0, 465.0, -1000.0, np.inf, -np.inf, np.nan])
    fp16 = ref.round_to(big, "fp16")
    np.testing.assert_array_equal(fp16[:3], [np.inf, -np.inf, np.inf])
    assert ref.round_to(65519.0, "fp16") == 65504.0                  # below the midpoint to 65536
    assert ref.round_to(3.4e38, "bf16") == np.inf and ref.round_to(3.39e38, "bf16") < np.inf
    e4m3 = ref.round_to(big, "fp8_e4m3")
    np.testing.assert_array_equal(e4m3[3:8], [448.0, 448.0, -448.0, 448.0, -448.0])  # saturates
    assert np.isnan(e4m3[8]) and np.isnan(fp16[8])
    assert np.signbit(ref.round_to(-1e-30, "fp16"))                  # underflow keeps the sign


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------

_rng = np.random.default_rng(27)
Q, K, V = _qkv(_rng, 2, 4, 2, 3, 5, 8)
CACHE = np.zeros((6, 2, 4, 8))
TABLES = np.array([[0, 1], [2, 3]], dtype=np.int32)
LENS = np.array([5, 8], dtype=np.int32)
Q_DECODE = np.zeros((2, 4, 8))

BAD_INPUTS = [
    (lambda: ref.softmax(np.array([1.0, np.nan])), ValueError, "NaN"),
    (lambda: ref.softmax(np.array(["a"])), TypeError, "x must hold real numbers"),
    (lambda: ref.softmax(np.ones(3), axis=1), ValueError, "axis"),
    (lambda: ref.attention(Q[0], K, V), ValueError, "q must have 4 dimensions"),
    (lambda: ref.attention(Q, K[:, :, :, :4], V), ValueError, "head_dim"),
    (lambda: ref.attention(Q, K[:1], V[:1]), ValueError, "batch"),
    (lambda: ref.attention(Q[:, :3], K, V), ValueError, "multiple of the kv_heads"),
    (lambda: ref.attention(Q, K, V[:, :, :4]), ValueError, "v must have the shape of k"),
    (lambda: ref.attention(Q, K, V, kv_lens=np.array([1.0, 2.0])), TypeError, "kv_lens must have an integer"),
    (lambda: ref.attention(Q, K, V, kv_lens=np.array([1, 6])), ValueError, "kv_lens must lie in"),
    (lambda: ref.attention(Q, K, V, kv_lens=np.array([1, 2, 3])), ValueError, "kv_lens must have shape"),
    (lambda: ref.attention(Q, K, V, window=0), ValueError, "window must be at least 1"),
    (lambda: ref.attention(Q, K, V, window=2.0), TypeError, "window must be an integer"),
    (lambda: ref.attention(Q, K, V, causal=1), TypeError, "causal must be True or False"),
    (lambda: ref.attention(Q, K, V, scale="1"), TypeError, "scale"),
    (lambda: ref.attention(Q.astype(bool), K, V), TypeError, "q must hold real numbers"),
    (lambda: ref.attention(np.where(Q > 1, np.inf, Q), K, V), ValueError, "q must be finite"),
    (lambda: ref.attention_mask(3, 4, kv_len=5), ValueError, "kv_len must be at most"),
    (lambda: ref.paged_attention(Q_DECODE, CACHE, CACHE, TABLES.astype(np.float32), LENS), TypeError,
     "block_tables must have an integer"),
    (lambda: ref.paged_attention(Q_DECODE, CACHE, CACHE, TABLES[:1], LENS), ValueError, "block_tables must have shape"),
    (lambda: ref.paged_attention(Q_DECODE, CACHE, CACHE, TABLES, np.array([5, 9], np.int32)), ValueError,
     "needs 3"),
    (lambda: ref.paged_attention(Q_DECODE, CACHE, CACHE, np.array([[0, 1], [2, 6]], np.int32), LENS), ValueError,
     "in use must lie in"),
    (lambda: ref.paged_attention(Q_DECODE, CACHE, CACHE, TABLES, LENS.astype(np.float64)), TypeError,
     "context_lens must have an integer"),
    (lambda: ref.paged_attention(Q_DECODE[:, :3], CACHE, CACHE, TABLES, LENS), ValueError, "multiple of the kv_heads"),
    (lambda: ref.paged_attention(Q_DECODE, CACHE, CACHE[:, :, :2], TABLES, LENS), ValueError, "v_cache must have"),
    (lambda: ref.paged_attention(Q_DECODE, CACHE * np.nan, CACHE, TABLES, LENS), ValueError, "must be finite"),
    (lambda: ref.build_paged_cache(K, V, 4, 0), TypeError, "rng must be a numpy.random.Generator"),
    (lambda: ref.build_paged_cache(K, V, 0, _rng), ValueError, "block_size must be at least 1"),
    (lambda: ref.gemm(np.ones((2, 3)), np.ones((2, 3))), ValueError, "inner dimensions"),
    (lambda: ref.gemm_int8(np.ones((2, 3), np.int16), 1.0, np.ones((3, 2), np.int8), 1.0), TypeError, "int8"),
    (lambda: ref.gemm_int8(np.ones((2, 3), np.int8), np.ones((1, 3)), np.ones((3, 2), np.int8), 1.0), ValueError,
     "a_scale must have shape"),
    (lambda: ref.quantize_int8(np.ones(3), axis=1), ValueError, "axis must be in"),
    (lambda: ref.quantize_int8(np.zeros(0)), ValueError, "must not be empty"),
    (lambda: ref.pack_int4(np.array([1, 8])), ValueError, "[-8, 7]"),
    (lambda: ref.pack_int4(np.array([1, 2, 3])), ValueError, "even"),
    (lambda: ref.unpack_int4(np.array([1, 2], np.int8)), TypeError, "uint8"),
    (lambda: ref.quantize_int4_groups(np.ones((2, 12)), 8), ValueError, "multiple of group_size"),
    (lambda: ref.dequantize_int4_groups(np.zeros((2, 6), np.uint8), np.ones((2, 5))), ValueError, "scales must"),
    (lambda: ref.quantize_q8_0(np.ones(48)), ValueError, "multiple of 32"),
    (lambda: ref.quantize_q4_0(np.full(32, 1e6)), ValueError, "does not fit in fp16"),
    (lambda: ref.dequantize_q4_0(np.zeros(34, np.uint8)), ValueError, "multiple of 18"),
    (lambda: ref.dequantize_q4_1(np.zeros(34, np.uint8)), ValueError, "multiple of 20"),
    (lambda: ref.quantize_q4_1(np.ones(40)), ValueError, "multiple of 32"),
    (lambda: ref.dequantize_q8_0(np.zeros(34, np.int8)), TypeError, "uint8"),
    (lambda: ref.round_to(1.0, "fp8"), ValueError, "fmt must be one of"),
]


@pytest.mark.parametrize("call, error, words", BAD_INPUTS, ids=[w for _, _, w in BAD_INPUTS])
def test_bad_input_is_rejected_with_a_clear_message(call, error, words):
    with pytest.raises(error, match=None) as info:
        call()
    assert words in str(info.value)
