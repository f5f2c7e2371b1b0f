"""Property-based tests of kernels.reference (hypothesis): awkward shapes and edge cases.

Empty and length-1 sequences, fully masked rows, kv_lens of 0, logits of +-1e4, every GQA group
size, partial last pages; quantization bounds and bit-exactness on data hypothesis picks.
"""

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType, quants
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kernels import reference as ref

FEW = settings(max_examples=40, deadline=None)

logits = st.floats(-1e4, 1e4, allow_nan=False) | st.just(-np.inf)
moderate = st.floats(-100, 100, allow_nan=False, allow_subnormal=False)


def _mask_by_definition(N, M, causal, kv_len, window):
    """Visibility spelled out one pair at a time, as the docstring states it."""
    mask = np.zeros((N, M), dtype=bool)
    for i in range(N):
        for j in range(M):
            exists = kv_len is None or j < kv_len
            looks_back = not (causal or window is not None) or j <= i
            in_window = window is None or j > i - window
            mask[i, j] = exists and looks_back and in_window
    return mask


@FEW
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6), elements=logits),
       st.floats(-1e4, 1e4))
def test_softmax_rows_sum_to_one_or_zero(x, shift):
    p = ref.softmax(x)
    assert p.shape == x.shape and np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    some_visible = np.isfinite(x).any(axis=-1)
    sums = p.sum(axis=-1)
    np.testing.assert_allclose(sums[some_visible], 1.0, rtol=1e-12)
    assert np.all(sums[~some_visible] == 0)
    assert np.all(p[np.isneginf(x)] == 0)
    np.testing.assert_allclose(ref.softmax(x + shift), p, atol=1e-9)   # shifting a row changes nothing


@st.composite
def attention_cases(draw):
    batch = draw(st.integers(1, 2))
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 3))
    N, M, d = draw(st.integers(0, 6)), draw(st.integers(0, 6)), draw(st.integers(1, 4))
    q = draw(hnp.arrays(np.float64, (batch, heads, N, d), elements=moderate))
    k = draw(hnp.arrays(np.float64, (batch, kv_heads, M, d), elements=moderate))
    v = draw(hnp.arrays(np.float64, (batch, kv_heads, M, d), elements=moderate))
    kv_lens = np.array(draw(st.lists(st.integers(0, M), min_size=batch, max_size=batch)), dtype=np.int32)
    causal = draw(st.booleans())
    window = draw(st.none() | st.integers(1, 7))
    scale = draw(st.none() | st.just(1.0))
    return q, k, v, kv_lens, causal, window, scale


@FEW
@given(attention_cases())
def test_attention_with_large_logits_matches_torch_and_is_zero_on_unseen_rows(case):
    """Entries up to 100 give logits up to +-4e4 (scale 1) or +-2e4 (scale 1/sqrt(d)): no overflow."""
    q, k, v, kv_lens, causal, window, scale = case
    batch, heads, N, _ = q.shape
    M = k.shape[2]
    out = ref.attention(q, k, v, causal=causal, kv_lens=kv_lens, window=window, scale=scale)
    assert out.shape == q.shape and np.all(np.isfinite(out))
    masks = np.stack([_mask_by_definition(N, M, causal, int(n), window) for n in kv_lens])[:, None]
    for b in range(batch):
        np.testing.assert_array_equal(ref.attention_mask(N, M, causal, int(kv_lens[b]), window), masks[b, 0])
    seen = np.broadcast_to(masks.any(axis=-1), (batch, heads, N))
    assert np.all(out[~seen] == 0)
    # With every value 1 the output is the sum of the attention weights: 1 wherever a key is seen.
    weights_sum = ref.attention(q, k, np.ones_like(v), causal=causal, kv_lens=kv_lens, window=window)
    np.testing.assert_allclose(weights_sum[seen], 1.0, rtol=1e-12)
    if N and M:
        theirs = F.scaled_dot_product_attention(
            torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
            attn_mask=torch.from_numpy(masks), scale=scale, enable_gqa=True).numpy()
        np.testing.assert_allclose(out[seen], theirs[seen], rtol=1e-9, atol=1e-9)


@FEW
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.integers(0, 9), st.data())
def test_paged_attention_equals_attention_over_kv_lens(kv_heads, group, block_size, M, data):
    num_seqs, d = data.draw(st.integers(1, 3)), 3
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    k = rng.standard_normal((num_seqs, kv_heads, M, d))
    v = rng.standard_normal((num_seqs, kv_heads, M, d))
    q = rng.standard_normal((num_seqs, kv_heads * group, d)) * 100
    context_lens = rng.integers(0, M + 1, size=num_seqs)
    k_cache, v_cache, tables, lens = ref.build_paged_cache(k, v, block_size, rng, context_lens)
    out = ref.paged_attention(q, k_cache, v_cache, tables, lens)
    expected = ref.attention(q[:, :, None, :], k, v, kv_lens=lens)[:, :, 0, :]
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert np.all(out[lens == 0] == 0)


finite_values = st.floats(-1e6, 1e6, allow_nan=False)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)


def _within_half_step(x, deq, scale):
    return np.all(np.abs(x - deq) <= scale / 2 * (1 + 1e-12))


@FEW
@given(hnp.arrays(np.float64, shapes, elements=finite_values), st.data())
def test_int8_round_trips_within_half_a_step(x, data):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1))
    q, scale = ref.quantize_int8(x, axis=axis)
    assert q.dtype == np.int8 and np.all(np.abs(q.astype(int)) <= 127) and np.all(scale > 0)
    assert _within_half_step(x, ref.dequantize_int8(q, scale), scale)
    q, scale, zero_point = ref.quantize_uint8_asymmetric(x, axis=axis)
    assert _within_half_step(x, ref.dequantize_uint8_asymmetric(q, scale, zero_point), scale)


@FEW
@given(hnp.arrays(np.int8, shapes.map(lambda s: (*s[:-1], 2 * s[-1])), elements=st.integers(-8, 7)))
def test_pack_int4_then_unpack_is_identity(q):
    packed = ref.pack_int4(q)
    assert packed.dtype == np.uint8 and packed.shape[-1] == q.shape[-1] // 2
    np.testing.assert_array_equal(ref.unpack_int4(packed), q)


@FEW
@given(st.sampled_from([2, 4, 8, 16]), st.integers(1, 3), st.integers(1, 3), st.data())
def test_int4_groups_round_trip_within_half_a_step(group_size, rows, groups, data):
    x = data.draw(hnp.arrays(np.float64, (rows, groups * group_size), elements=finite_values))
    packed, scales = ref.quantize_int4_groups(x, group_size)
    assert _within_half_step(x, ref.dequantize_int4_groups(packed, scales), np.repeat(scales, group_size, axis=1))


# Values that hit rounding ties in both formats and equal magnitudes of both signs, mixed with
# arbitrary float32 values.
# Magnitudes below 1e-30 are left out: a block of them has a scale whose inverse overflows,
# where llama.cpp's codes are undefined (test_reference.py checks what we store there).
gguf_values = st.floats(-1024, 1024, width=32).filter(lambda v: v == 0 or abs(v) > 1e-30) | st.sampled_from(
    [0.0, 0.5, -0.5, 1.5, 2.5, -8.0, 7.0, 127.0, 1024.0, -1024.0])


@FEW
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.sampled_from([32, 64])), elements=gguf_values))
def test_gguf_formats_match_the_gguf_package(x):
    for quantize, dequantize, qtype in [(ref.quantize_q8_0, ref.dequantize_q8_0, GGMLQuantizationType.Q8_0),
                                        (ref.quantize_q4_0, ref.dequantize_q4_0, GGMLQuantizationType.Q4_0),
                                        (ref.quantize_q4_1, ref.dequantize_q4_1, GGMLQuantizationType.Q4_1)]:
        ours = quantize(x)
        np.testing.assert_array_equal(ours, quants.quantize(x, qtype))
        np.testing.assert_array_equal(dequantize(ours), quants.dequantize(ours, qtype))


@FEW
@given(hnp.arrays(np.float64, 50, elements=st.floats(-7e4, 7e4, allow_nan=False)),
       hnp.arrays(np.float32, 50, elements=st.floats(width=32, allow_nan=False)),
       hnp.arrays(np.float32, 50, elements=st.floats(-448, 448, width=32)))
def test_round_to_matches_casts_and_is_idempotent(x64, x32, small32):
    fp16 = ref.round_to(x64, "fp16")
    with np.errstate(over="ignore"):                                       # beyond 65504: inf
        np.testing.assert_array_equal(fp16, x64.astype(np.float16).astype(np.float64))  # rounds once
    np.testing.assert_array_equal(ref.round_to(x32, "bf16"), x32.astype(ml_dtypes.bfloat16).astype(np.float64))
    e4m3 = ref.round_to(small32, "fp8_e4m3")
    np.testing.assert_array_equal(e4m3, small32.astype(ml_dtypes.float8_e4m3fn).astype(np.float64))
    for fmt, x, rounded in [("fp16", x64, fp16), ("fp8_e4m3", small32, e4m3)]:
        np.testing.assert_array_equal(ref.round_to(rounded, fmt), rounded)    # idempotent
        in_order = rounded[np.argsort(x)]
        assert np.all(in_order[1:] >= in_order[:-1])                        # monotone, inf included
