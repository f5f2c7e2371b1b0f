"""course.checking: the pass rules, and each diagnosis triggered by a deliberately wrong output.

Every wrong output below is a bug a student could write; the test asserts which detectors fire
(exactly), so a detector that fires on the wrong bug fails here too.
"""

import pathlib

import ml_dtypes
import numpy as np
import pytest
from numba import cuda, float32

from course.checking import (DETECTORS, BarrierWarning, CheckFailure, CheckResult, check, is_poison,
                             poison, random_inputs, sum_rounding_bound)

DIMS = ("batch", "head", "row", "col")
SHAPE = (2, 3, 40, 24)          # 40 rows: not a multiple of the row tile 16


@pytest.fixture
def ref():
    rng, _ = random_inputs(seed=1)
    return rng.standard_normal(SHAPE)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def failure(out, ref, **kwargs) -> CheckResult:
    kwargs.setdefault("dims", DIMS)
    with pytest.raises(CheckFailure) as info:
        check(out, ref, **kwargs)
    assert isinstance(info.value, AssertionError)
    assert str(info.value) == str(info.value.result)
    return info.value.result


# --------------------------------------------------------------------------- inputs and poison


def test_random_inputs_are_fresh_and_repeatable():
    (rng_a, seed_a), (rng_b, seed_b) = random_inputs(), random_inputs()
    assert isinstance(seed_a, int) and seed_a != seed_b
    again, _ = random_inputs(seed_a)
    assert np.array_equal(rng_a.standard_normal(5), again.standard_normal(5))
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(TypeError, match="seed"):
            random_inputs(bad)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.int32, np.uint8,
                                   "bfloat16"])
def test_poison_is_recognised_and_differs_from_computed_nan(dtype):
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    a = poison(np.empty((3, 5), dtype))
    assert is_poison(a).all()
    a[1, 2] = 0
    assert is_poison(a).sum() == 14
    if np.dtype(dtype).kind == "f":
        with np.errstate(invalid="ignore"):
            computed = np.array([np.inf], dtype) - np.array([np.inf], dtype)   # a NaN a kernel makes
        assert np.isnan(computed).all() and not is_poison(computed).any()


def test_poison_device_array():
    from numba import cuda

    d = cuda.device_array((4, 3), np.float32)
    assert poison(d) is d
    assert is_poison(d.copy_to_host()).all()
    with pytest.raises(TypeError, match="out must be"):
        poison([1.0, 2.0])


# --------------------------------------------------------------------------- pass rules


def test_correct_float32_output_passes(ref):
    res = check(ref.astype(np.float32), ref, name="O", dims=DIMS, tile={"row": 16}, seed=7)
    assert res.passed and res.rel_err < 1e-6 and res.n_wrong == 0
    assert "O: OK" in str(res) and "seed 7" in str(res)


def test_correct_output_as_device_array(ref):
    from numba import cuda

    assert check(cuda.to_device(ref.astype(np.float32)), ref).passed


def test_empty_output_passes():
    assert check(np.empty((0, 4), np.float32), np.empty((0, 4))).passed


def test_one_bad_element_fails_even_when_frobenius_error_is_small():
    rng, _ = random_inputs(seed=2)
    ref = rng.standard_normal((512, 512))
    out = ref.astype(np.float32)
    out[100, 200] += 0.05                        # rel_err ~1e-4 of a 512x512 matrix: still wrong
    res = failure(out, ref, dims=("row", "col"))
    assert res.n_wrong == 1 and res.first_wrong == {"row": 100, "col": 200}
    ref[7, 9] = 3.0
    out = ref.astype(np.float32)
    out[7, 9] *= 1.01                            # 1% off one large element
    assert failure(out, ref, dims=("row", "col")).first_wrong == {"row": 7, "col": 9}


def test_small_error_everywhere_fails_by_frobenius_rule(ref):
    rng, _ = random_inputs(seed=3)
    out = (ref * (1 + 3e-4 * rng.choice([-1.0, 1.0], ref.shape))).astype(np.float32)
    res = failure(out, ref)
    assert res.n_wrong == 0 and res.rel_err > 1e-4
    assert res.causes == ["spread"] and "lower precision" in str(res)


def test_nonfinite_reference_entries_must_match():
    ref = np.array([[0.5, -np.inf], [np.inf, 2.0]])
    assert check(ref.astype(np.float32), ref, dims=("row", "col")).passed
    out = ref.astype(np.float32)
    out[0, 1] = 0.0
    assert failure(out, ref, dims=("row", "col")).first_wrong == {"row": 0, "col": 1}


def _gemm_fp16(rng, accumulate=np.float32):
    a, b = rng.standard_normal((64, 96)), rng.standard_normal((96, 48))
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    ref = a @ b
    same = (a16.astype(np.float32) @ b16.astype(np.float32)).astype(np.float16)
    return a16, b16, ref, same


def test_low_precision_passes_within_twice_the_same_precision_error():
    rng, seed = random_inputs(seed=4)
    a16, b16, ref, same = _gemm_fp16(rng)
    # A kernel that sums in another order: a different but equally good fp16 result.
    other = sum(a16[:, k:k + 1].astype(np.float32) * b16[k:k + 1, :].astype(np.float32)
                for k in reversed(range(96))).astype(np.float16)
    res = check(other, ref, precision="fp16", same_precision_ref=same, seed=seed)
    assert res.passed and res.same_precision_max_abs_err > 0


def test_low_precision_threshold_is_twice_plus_atol():
    rng, _ = random_inputs(seed=5)
    _, _, ref, same = _gemm_fp16(rng)
    err = same.astype(np.float64) - ref
    assert check(ref + 1.9 * err, ref, precision="lowp", same_precision_ref=same, atol=0.0).passed
    res = failure(ref + 2.5 * err, ref, precision="lowp", same_precision_ref=same, atol=0.0,
                  dims=("row", "col"))
    assert "2 x" in res.limit
    assert check(ref + 2.5 * err, ref, precision="lowp", same_precision_ref=same,
                 atol=float(np.abs(err).max())).passed


BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["fp16", "bf16"])
def test_an_fp16_or_bf16_element_may_be_the_other_neighbour_of_the_same_precision_answer(dtype):
    """A float32 result near a rounding midpoint is stored as either neighbour: one unit in the last place
    beyond the same-precision answer's own error passes, even where twice the largest such error is less;
    two units fail."""
    ulp = float(np.spacing(np.array(1.0, dtype)).astype(np.float64))
    ref = np.array([1.0 + 0.3 * ulp, 3.0, -2.0])        # same-precision errors: 0.3 ulp, 0, 0
    same = ref.astype(dtype)
    neighbour = same.copy()
    neighbour[0] = np.array(1.0 + ulp, dtype)           # 0.7 ulp off: more than 2 x 0.3 ulp
    assert check(neighbour, ref, precision="lowp", same_precision_ref=same, atol=0.0).passed
    two_off = same.copy()
    two_off[0] = np.array(1.0 + 2 * ulp, dtype)
    res = failure(two_off, ref, precision="lowp", same_precision_ref=same, atol=0.0, dims=("i",))
    assert "unit in the last place" in res.limit and res.n_wrong == 1
    # float32 outputs are not rounded to a storage format: no such allowance.
    res = failure(neighbour.astype(np.float32), ref, precision="lowp", same_precision_ref=same, atol=0.0,
                  dims=("i",))
    assert "unit in the last place" not in res.limit


def test_the_unit_in_the_last_place_is_that_of_the_format_asked_for():
    """A bf16 answer judged as fp16 is allowed one fp16 unit beyond its own error, not one bf16 unit
    (8 times larger), and fails; the same answer judged as bf16 passes."""
    fp16_ulp = 2.0 ** -10
    ref = np.array([1.0 + 0.3 * fp16_ulp, 3.0, -2.0])
    bf16_answer = np.array([1.0 + 2.0 ** -7, 3.0, -2.0]).astype(BF16)     # one bf16 unit above 1
    res = failure(bf16_answer, ref, precision="fp16", same_precision_ref=ref.astype(np.float16), atol=0.0,
                  dims=("i",))
    assert res.n_wrong == 1 and "one fp16 unit in the last place" in res.limit
    assert check(bf16_answer, ref, precision="bf16", same_precision_ref=ref.astype(BF16), atol=0.0).passed


def test_wrong_low_precision_answers_fail():
    rng, _ = random_inputs(seed=6)
    a16, b16, ref, same = _gemm_fp16(rng)
    # Accumulating in float16 instead of float32: a real precision bug, caught.
    acc = np.zeros((64, 48), np.float16)
    for k in range(96):
        acc = (acc + a16[:, k:k + 1] * b16[k:k + 1, :]).astype(np.float16)
    failure(acc, ref, precision="fp16", same_precision_ref=same, dims=("row", "col"))
    res = failure((same * np.float16(1.01)).astype(np.float16), ref, precision="fp16",
                  same_precision_ref=same, dims=("row", "col"))
    assert res.causes == ["scale"]


def test_int8_exact_output_and_unwritten_sentinel():
    rng, _ = random_inputs(seed=8)
    ref = np.clip(np.round(rng.standard_normal((8, 20)) * 40), -127, 127)
    out = ref.astype(np.int8)
    assert check(out, ref, precision="int8", same_precision_ref=out, dtype=np.int8).passed
    out = poison(np.empty((8, 20), np.int8))
    out[:, :16] = ref[:, :16]
    res = failure(out, ref, precision="int8", same_precision_ref=ref.astype(np.int8),
                  dims=("row", "col"), tile={"col": 8})
    assert res.causes == ["unwritten"] and "col >= 16" in str(res)


# --------------------------------------------------------------------------- detectors


def test_unwritten_rows_grid_too_small(ref):
    out = poison(np.empty(SHAPE, np.float32))
    out[:, :, :32] = ref[:, :, :32]
    res = failure(out, ref, tile={"row": 16}, seed=11)
    assert res.causes == ["unwritten"]       # whole tiles unwritten: not a guard at the tile edge
    text = str(res)
    assert "never written" in text and "ceiling division" in text and "row >= 32" in text
    assert "first wrong: batch 0, head 0, row 32, col 0 (row tile 2 = row 32..39)" in text
    assert "got poison (never written)" in text
    assert "seed 11" in text and "random_inputs(seed=11)" in text
    assert res.n_wrong == 2 * 3 * 8 * 24


def test_nan_and_inf_produced(ref):
    out = ref.astype(np.float32)
    out[:, :, 5, 3] = np.nan       # the canonical NaN that arithmetic makes, not the poison
    out[:, :, 7, 1] = np.inf
    res = failure(out, ref)
    assert res.causes == ["nonfinite"]
    assert "subtract the row max" in str(res) and "6 NaN and 6 inf" in str(res)


def test_all_zeros(ref):
    res = failure(np.zeros(SHAPE, np.float32), ref)
    assert res.causes == ["zeros"] and "copy_to_host" in str(res)


def test_partial_last_tile(ref):
    out = ref.astype(np.float32)
    out[:, :, 32:] += 1.0
    res = failure(out, ref, tile={"row": 16})
    assert res.causes == ["tile_edge"]
    assert "not a multiple of the tile 16" in str(res) and "row < n" in str(res)


def test_last_full_tile():
    rng, _ = random_inputs(seed=9)
    ref = rng.standard_normal((2, 3, 48, 24))
    out = ref.astype(np.float32)
    out[:, :, 32:] += 1.0
    assert failure(out, ref, tile={"row": 16}).causes == ["last_tile"]


@pytest.mark.parametrize("axis,dim", [(2, "row"), (3, "col")])
def test_only_first_row_or_col(ref, axis, dim):
    out = ref.astype(np.float32)
    index = [slice(None)] * 4
    index[axis] = 0
    out[tuple(index)] = 0.0
    res = failure(out, ref)
    assert res.causes == ["first"] and f"only {dim} 0 is wrong" in str(res)


def test_only_last_col(ref):
    out = ref.astype(np.float32)
    out[..., -1] = 0.0
    res = failure(out, ref)
    assert res.causes == ["last"] and "col 23" in str(res)


def test_only_first_tile(ref):
    out = ref.astype(np.float32)
    out[:, :, :16] *= 0.5
    out[:, :, :16] += 0.1
    res = failure(out, ref, tile={"row": 16})
    assert res.causes == ["first_tile"]


def test_every_tile_but_the_first(ref):
    out = ref.astype(np.float32)
    out[:, :, 16:] = ref[:, :, :24]
    res = failure(out, ref, tile={"row": 16})
    assert res.causes == ["tile_offset"] and "tile offset" in str(res)


def test_last_element_of_each_tile(ref):
    out = ref.astype(np.float32)
    out[:, :, [15, 31]] = 0.0
    res = failure(out, ref, tile={"row": 16})
    assert res.causes == ["tile_boundary"] and "last row of each tile" in str(res)


@pytest.mark.parametrize("factor,words", [(1 / 8, "1/8 = 1/sqrt(64)"), (np.sqrt(128), "sqrt(128)"),
                                          (-1.0, "sign is flipped")])
def test_constant_scale_factor(ref, factor, words):
    res = failure((ref * factor).astype(np.float32), ref)
    assert res.causes == ["scale"] and words in str(res)


def test_transposed():
    rng, _ = random_inputs(seed=10)
    ref = rng.standard_normal((2, 3, 24, 24))
    res = failure(np.swapaxes(ref, -1, -2).astype(np.float32), ref)
    assert res.causes == ["transposed"] and "row and col swapped" in str(res)


def test_softmax_of_wrongly_scaled_logits():
    rng, _ = random_inputs(seed=12)
    x = rng.standard_normal((2, 3, 16, 32))
    res = failure(softmax(x * 8).astype(np.float32), softmax(x), rows_sum_to_one=True)
    assert res.causes == ["temperature"] and "sqrt(64)" in str(res)


def test_rows_not_summing_to_one():
    rng, _ = random_inputs(seed=13)
    ref = softmax(rng.standard_normal((2, 3, 16, 32)))
    below = (ref * rng.uniform(0.5, 0.95, (2, 3, 16, 1))).astype(np.float32)
    res = failure(below, ref, rows_sum_to_one=True)
    assert res.causes == ["row_sums"] and "sum below 1" in str(res) and "running sum rescaled" in str(res)
    above = (ref * rng.uniform(1.05, 1.5, (2, 3, 16, 1))).astype(np.float32)
    res = failure(above, ref, rows_sum_to_one=True)
    assert res.causes == ["row_sums"] and "sum above 1" in str(res) and "rescaled" not in str(res)
    mixed = (ref * rng.uniform(0.5, 1.5, (2, 3, 16, 1))).astype(np.float32)
    res = failure(mixed, ref, rows_sum_to_one=True)
    assert res.causes == ["row_sums"] and "exactly once" in str(res)


def test_each_row_off_by_its_own_factor(ref):
    rng, _ = random_inputs(seed=14)
    out = (ref * rng.uniform(0.5, 1.5, SHAPE[:-1] + (1,))).astype(np.float32)
    res = failure(out, ref)
    assert res.causes == ["row_scale"] and "divided by its own final sum" in str(res)


def test_only_some_slices_wrong(ref):
    out = ref.astype(np.float32)
    out[1, 2] = ref[1, 0]          # head 2 read KV head 0: a wrong group mapping
    res = failure(out, ref)
    assert res.causes == ["slices"]
    text = str(res)
    assert "only 1 of 6 (batch, head) slices is wrong: (batch 1, head 2)" in text
    assert "(batch 1, head 2) holds what belongs at (batch 1, head 0)" in text


def test_no_pattern(ref):
    rng, _ = random_inputs(seed=15)
    res = failure(rng.standard_normal(SHAPE).astype(np.float32), ref)
    assert res.causes == [] and "no simple pattern" in str(res)


def test_hints_are_added(ref):
    res = failure((ref / 8).astype(np.float32), ref,
                  hints={"scale": "Multiply the scores by `scale`.", "any": "See lesson 5."})
    assert "Multiply the scores by `scale`." in res.diagnoses[0]
    assert res.diagnoses[-1] == "See lesson 5."


def test_every_detector_is_exercised_by_this_file_or_by_a_real_kernel():
    here = pathlib.Path(__file__).parent
    source = "".join(path.read_text() for path in [here / "test_checking.py", here / "test_classic_mistakes.py",
                                                    *sorted((here / "mistakes").glob("day*.py"))])
    missing = [key for key in DETECTORS if f'"{key}"' not in source]
    assert not missing, f"detectors no test triggers: {missing}"


# --------------------------------------------------------------------------- non-finite outputs


def test_nan_in_a_fully_masked_row_is_named_as_zero_over_zero():
    rng, _ = random_inputs(seed=16)
    x = rng.standard_normal((4, 12))
    x[2] = -np.inf
    ref = np.nan_to_num(softmax(np.where(np.isinf(x), -1e300, x)))
    ref[2] = 0.0
    out = ref.astype(np.float32)
    out[2] = np.nan
    res = failure(out, ref, dims=("row", "col"), rows_sum_to_one=True)
    assert res.causes == ["empty_row_nan"] and "0/0 is NaN" in str(res) and "subtract the row max" not in str(res)


@pytest.mark.parametrize("broken", [np.nan, 0.0])
def test_masked_rows_broken_by_an_empty_state_merge(broken):
    rng, _ = random_inputs(seed=17)
    x = rng.standard_normal((4, 40))
    x[1, 10:] = -np.inf
    ref = softmax(x)
    out = ref.astype(np.float32)
    out[1] = broken            # NaN, or zeros when the NaN sum failed a `sum > 0` test
    res = failure(out, ref, dims=("row", "col"), rows_sum_to_one=True)
    assert res.causes == ["masked_nan"] and "exp(-inf - (-inf))" in str(res)


def test_nan_in_unmasked_rows_is_still_blamed_on_overflow():
    rng, _ = random_inputs(seed=18)
    ref = softmax(rng.standard_normal((4, 40)))
    out = ref.astype(np.float32)
    out[3] = np.nan
    res = failure(out, ref, dims=("row", "col"), rows_sum_to_one=True)
    assert res.causes[0] == "nonfinite" and not {"masked_nan", "empty_row_nan", "row_sums"} & set(res.causes)


# --------------------------------------------------------------------------- attention context


def attention_np(q, k, v, allowed, scale):
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    s = np.where(allowed[:, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    p = np.where(allowed[:, None], np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    total = p.sum(axis=-1, keepdims=True)
    return np.divide(p @ v, total, out=np.zeros(q.shape), where=total > 0)


@pytest.fixture
def qkv():
    rng, _ = random_inputs(seed=19)
    return tuple(rng.standard_normal((2, 2, 12, 4)) for _ in range(3))


def masks(n, m, lens, causal, tile_q=None, strict=False, lens_delta=0, keep=None):
    i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    allowed = j[None] < (np.asarray(lens) + lens_delta)[:, None, None]
    if causal:
        bound = (i // tile_q + 1) * tile_q if tile_q else i + (0 if strict else 1)
        allowed = allowed & (j < bound)[None]
    if keep is not None:
        allowed = allowed & (j < keep)[None]
    return allowed


@pytest.mark.parametrize("wrong_mask,causal,key,words", [
    (dict(strict=True), True, "causal_strict", "j < i instead of j <= i"),
    (dict(tile_q=8), True, "diagonal_unmasked", "inside the diagonal tile"),
    (dict(lens_delta=1), True, "kv_lens_off_by_one", "one key too many"),
    (dict(lens_delta=-1), False, "kv_lens_off_by_one", "one key too few"),
    (dict(keep=8), False, "keys_dropped", "last, partial tile of keys"),
])
def test_attention_mask_mistakes_are_named(qkv, wrong_mask, causal, key, words):
    q, k, v = qkv
    lens = np.array([12, 9], np.int32)
    scale = 0.5
    ref = attention_np(q, k, v, masks(12, 12, lens, causal), scale)
    wrong = attention_np(q, k, v, masks(12, 12, lens, causal, **wrong_mask), scale).astype(np.float32)
    context = dict(q=q.astype(np.float32), k=k.astype(np.float32), v=v.astype(np.float32), causal=causal,
                   kv_lens=lens, scale=scale, tile_q=8, tile_kv=8)
    res = failure(wrong, ref, attention=context)
    assert key in res.causes and words in str(res), str(res)
    assert "no simple pattern" not in str(res)


def test_attention_without_causal_mask_or_kv_lens(qkv):
    q, k, v = qkv
    lens = np.array([12, 7], np.int32)
    ref = attention_np(q, k, v, masks(12, 12, lens, True), 0.5)
    no_mask = attention_np(q, k, v, masks(12, 12, lens, False), 0.5).astype(np.float32)
    res = failure(no_mask, ref, attention=dict(q=q, k=k, v=v, causal=True, kv_lens=lens, scale=0.5))
    assert res.causes == ["row0_key0", "causal_missing"]
    no_lens = attention_np(q, k, v, masks(12, 12, [12, 12], True), 0.5).astype(np.float32)
    res = failure(no_lens, ref, attention=dict(q=q, k=k, v=v, causal=True, kv_lens=lens, scale=0.5))
    assert res.causes == ["kv_lens_ignored"]
    reversed_mask = attention_np(q, k, v, masks(12, 12, lens, False) & (np.arange(12)[None, None, :] >= np.arange(12)[None, :, None]), 0.5)
    res = failure(reversed_mask.astype(np.float32), ref, attention=dict(q=q, k=k, v=v, causal=True, kv_lens=lens, scale=0.5))
    assert "causal_reversed" in res.causes


@pytest.mark.parametrize("factor,words", [(2.0, "is missing"), (0.5, "is applied twice")])
def test_attention_scale_mistakes(qkv, factor, words):
    q, k, v = qkv
    allowed = masks(12, 12, [12, 12], False)
    ref = attention_np(q, k, v, allowed, 0.5)
    wrong = attention_np(q, k, v, allowed, 0.5 * factor).astype(np.float32)
    res = failure(wrong, ref, attention=dict(q=q, k=k, v=v, scale=0.5))
    assert res.causes == ["attention_scale"] and words in str(res)


def test_online_softmax_rescale_mistakes(qkv):
    from course.diagnoses.contexts import _attend_online

    q, k, v = qkv
    context = dict(q=q, k=k, v=v, causal=False, kv_lens=np.array([12, 12]), scale=0.5, tile_q=None, tile_kv=4)
    allowed = masks(12, 12, [12, 12], False)
    ref = attention_np(q, k, v, allowed, 0.5)
    assert np.allclose(_attend_online(context, allowed, 0.5, 4, True, True), ref)   # the model itself
    for rescale_acc, key in ((False, "acc_not_rescaled"), (True, "sum_not_rescaled")):
        wrong = _attend_online(context, allowed, 0.5, 4, rescale_acc, not rescale_acc).astype(np.float32)
        res = failure(wrong, ref, attention={**context, "kv_lens": None, "tile_q": None})
        assert res.causes == [key] and "4 at a time" in str(res)


def test_empty_sequence_rows_must_be_zero(qkv):
    q, k, v = qkv
    lens = np.array([12, 0], np.int32)
    ref = attention_np(q, k, v, masks(12, 12, lens, False), 0.5)
    out = ref.astype(np.float32)
    out[1, 0, 3] = 0.25
    res = failure(out, ref, attention=dict(q=q, k=k, v=v, kv_lens=lens, scale=0.5))
    assert res.causes[0] == "empty_sequence" and "kv_lens[1] = 0" in str(res)


def test_a_failed_assert_alone_leaves_the_output_patterns_on(qkv):
    q, k, v = qkv
    ref = attention_np(q, k, v, masks(12, 12, [12, 12], True), 0.5)
    out = ref.astype(np.float32)
    out[:, :, 0] *= 0.5                          # only row 0 wrong, and no model of a mistake fits
    res = failure(out, ref, attention=dict(q=q, k=k, v=v, causal=True, scale=0.5),
                  hints={"row0_key0": "Row 0 has one key: see the lesson's mask figure."})
    assert res.causes == ["row0_key0", "row_scale", "first"]
    assert "Row 0 has one key" in res.diagnoses[0]


def test_context_names_no_cause_when_none_fits(qkv):
    q, k, v = qkv
    rng, _ = random_inputs(seed=20)
    ref = attention_np(q, k, v, masks(12, 12, [12, 12], False), 0.5)
    res = failure(rng.standard_normal(ref.shape).astype(np.float32), ref,
                  attention=dict(q=q, k=k, v=v, scale=0.5, tile_kv=4), reduction=None)
    assert res.causes == [] and "no simple pattern" in str(res)
    assert check(ref.astype(np.float32), ref, attention=dict(q=q, k=k, v=v, scale=0.5, causal=False)).passed


# --------------------------------------------------------------------------- reduction and GEMM contexts


def test_reduction_context_names_the_tree_mistakes():
    rng, _ = random_inputs(seed=21)
    x = rng.standard_normal((3, 200))
    x[1] = -np.abs(x[1])
    threads = 64
    partials = np.stack([x[:, t::threads].sum(axis=1) for t in range(threads)], axis=1)
    context = dict(x=x.astype(np.float32), op="sum", threads=threads)
    cases = [(partials[:, ::4].sum(axis=1), "tree_early", "stopped 2 levels early"),
             (partials[:, :1].sum(axis=1), "tree_early", "only thread 0's own partial"),
             (partials[:, :32].sum(axis=1), "tree_partial", "the first warp"),
             (partials[:, :16].sum(axis=1), "tree_partial", "start at stride 32"),
             (x[:, :64].sum(axis=1), "stride_loop", "only the first 64 columns")]
    for wrong, key, words in cases:
        res = failure(wrong.astype(np.float32), x.sum(axis=1), dims=("row",), reduction=context)
        assert res.causes == [key] and words in str(res), str(res)
    res = failure(np.maximum(x.max(axis=1), 0).astype(np.float32), x.max(axis=1), dims=("row",),
                  reduction={**context, "op": "max"})
    assert res.causes == ["max_identity"] and "last" not in res.causes


def _float32_loop_sum(x):
    acc = np.zeros(x.shape[0], np.float32)
    for col in range(x.shape[1]):
        acc += x[:, col]
    return acc


def test_a_cancelling_float32_sum_passes_with_its_reduction_context():
    """A row whose sum cancels: float32's honest rounding is far above 1e-4 of the sum, in any order."""
    x = np.array([[1e4, 1e-3, -1e4]], np.float32)
    got = _float32_loop_sum(x)                       # 1e4 + 1e-3 rounds to 1e4 + 2^-10: 2% off row 0
    want = x.astype(np.float64).sum(axis=1)
    assert abs(got[0] - want[0]) > 1e-3 * abs(want[0])
    with pytest.raises(CheckFailure):
        check(got, want, dims=("row",))              # without the context: the plain fp32 rule
    check(got, want, dims=("row",), reduction=dict(x=x, op="sum", threads=64))
    # A sum that leaves an element out, or counts one twice, still fails with the context.
    for wrong in (_float32_loop_sum(x[:, :2]), got + x[:, 0]):
        with pytest.raises(CheckFailure):
            check(wrong, want, dims=("row",), reduction=dict(x=x, op="sum", threads=64))


def test_a_cancelling_sum_of_known_terms_passes_with_its_rounding_bound():
    """An output that sums terms the caller knows (a GEMV's per-block products), not a row of an input: its bound
    comes in as ``rounding=``, from ``sum_rounding_bound``, and waives rel_err as a reduction context's does."""
    terms = np.array([[1e4, 1e-3, -1e4], [1e-3, 2e-3, 3e-3]])
    got = _float32_loop_sum(terms.astype(np.float32))
    want = terms.sum(axis=1)
    bound = sum_rounding_bound(terms, extra_roundings=3)
    assert bound[1] == pytest.approx(5 * 2.0 ** -24 * 6e-3, rel=1e-6)     # gamma_(2 + 3) times the magnitudes
    with pytest.raises(CheckFailure):
        check(got, want, dims=("row",))
    check(got, want, dims=("row",), rounding=bound)
    # a term left out; a row that does not cancel, off by far more than its bound
    for wrong in (_float32_loop_sum(terms[:, :2].astype(np.float32)), got + np.array([0, 1e-4], np.float32)):
        with pytest.raises(CheckFailure):
            check(wrong, want, dims=("row",), rounding=bound)
    for call, words in [(lambda: check(got, want, rounding=bound[:1]), "rounding must be a bound >= 0 per element"),
                        (lambda: check(got, want, rounding=-bound), "rounding must be a bound >= 0 per element"),
                        (lambda: check(got, want, rounding=bound, reduction=dict(x=terms, op="sum", threads=64)),
                         "rounding is for fp32 outputs without a sum's reduction context"),
                        (lambda: sum_rounding_bound(terms, extra_roundings=-1), "extra_roundings must be an int >= 0")]:
        with pytest.raises(ValueError, match=words):
            call()


def test_the_hidden_row_sum_inputs_pass_a_correct_float32_sum_for_every_seed():
    """The seed never decides a score (docs/design-notes.md section 5): day 1's hidden row-sum shapes, a
    strided-loop-then-tree sum as the course's kernels do it, over many seeds."""
    threads = 64

    def tree_sum(x):
        part = np.zeros((x.shape[0], threads), np.float32)
        for col in range(x.shape[1]):
            part[:, col % threads] += x[:, col]
        while part.shape[1] > 1:
            half = part.shape[1] // 2
            part = part[:, :half] + part[:, half:]
        return part[:, 0]

    failed = []
    for seed in range(3000):
        rng, _ = random_inputs(seed=seed)
        for shape in ((2, 131), (2, 20), (1, 64)):
            x = rng.uniform(-1e4, 1e4, shape).astype(np.float32)
            try:
                check(tree_sum(x), x.astype(np.float64).sum(axis=1), dims=("row",), seed=seed,
                      reduction=dict(x=x, op="sum", threads=threads))
            except CheckFailure:
                failed.append((seed, shape))
    assert not failed, failed[:5]


def test_gemm_context_names_the_k_loop_mistakes():
    rng, _ = random_inputs(seed=22)
    a, b = rng.standard_normal((9, 19)), rng.standard_normal((19, 11))
    context = dict(a=a, b=b, tile_k=8)
    wrapped = np.arange(19) % 8
    for wrong, key in ((a[:, :16] @ b[:16], "k_steps_dropped"), (a[:, wrapped] @ b, "tile_offset_k"),
                       (a @ b[wrapped], "tile_offset_k")):
        assert failure(wrong.astype(np.float32), a @ b, dims=("row", "col"), gemm=context).causes == [key]
    square_b = rng.standard_normal((19, 19))
    res = failure((a @ square_b.T).astype(np.float32), a @ square_b, dims=("row", "col"),
                  gemm=dict(a=a, b=square_b))
    assert res.causes == ["transposed_operand"]


# --------------------------------------------------------------------------- the kernel's source


def tree_without_barrier(x, out):
    partial = cuda.shared.array(32, float32)
    tid = cuda.threadIdx.x
    partial[tid] = x[tid]
    cuda.syncthreads()
    half = 16
    while half > 0:
        if tid < half:
            partial[tid] += partial[tid + half]
        half //= 2
    out[0] = partial[0]


def tile_loop_without_first_barrier(a, out):
    tile = cuda.shared.array(32, float32)
    tid = cuda.threadIdx.x
    acc = float32(0.0)
    for start in range(0, a.shape[0], 32):
        tile[tid] = a[start + tid]
        acc += tile[31 - tid]
        cuda.syncthreads()
    out[tid] = acc


def barrier_in_a_branch(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i]
        cuda.syncthreads()


def test_kernel_source_findings():
    from course.diagnoses import kernel_findings

    assert [key for key, _ in kernel_findings(tree_without_barrier)] == ["missing_barrier"]
    (key, message), = kernel_findings(tile_loop_without_first_barrier)
    assert key == "missing_barrier" and "written" in message and "then read" in message
    (key, message), = kernel_findings(barrier_in_a_branch)
    assert key == "divergent_barrier" and "if i < a.shape[0]:" in message
    assert kernel_findings(len) == [] and kernel_findings(lambda: None) == []


def test_barrier_findings_come_first_on_failure_and_as_warnings_on_a_pass(ref):
    out = ref.astype(np.float32)
    with pytest.warns(BarrierWarning, match="depends on the thread"):
        passed = check(out, ref, dims=DIMS, kernel=barrier_in_a_branch)
    assert passed.passed and "bug the simulator hides" in str(passed) and "depends on the thread" in str(passed)
    res = failure(out * 2, ref, kernel=barrier_in_a_branch)
    assert res.causes == ["divergent_barrier", "scale"] and not res.warnings


def test_float64_comparisons_are_not_labelled_fp32(ref):
    text = str(check(ref, ref, dims=DIMS, dtype=np.float64))
    assert "(float64," in text and "fp32" not in text
    assert "(float32," in str(check(ref.astype(np.float32), ref, dims=DIMS))
    assert "does not match the reference (float64," in str(failure(ref * 2, ref, dtype=np.float64))


# --------------------------------------------------------------------------- validation


def test_shape_and_dtype_mismatch_name_the_argument(ref):
    with pytest.raises(ValueError, match=r"out \(O\) must have shape \(2, 3, 40, 24\).*transposed"):
        check(np.zeros((2, 3, 24, 40), np.float32), ref, name="O")
    with pytest.raises(ValueError, match="out .* must have shape"):
        check(np.zeros((2, 3, 40), np.float32), ref)
    with pytest.raises(TypeError, match="must have dtype float32, got float64"):
        check(ref, ref)
    with pytest.raises(TypeError, match="ref must be a NumPy array"):
        check(ref.astype(np.float32), ref.tolist())
    with pytest.raises(TypeError, match="out must hold numbers"):
        check(np.zeros(SHAPE, bool), ref, dtype=bool)


@pytest.mark.parametrize("kwargs,error,words", [
    ({"dims": ("row", "col")}, ValueError, "dims must be 4 distinct names"),
    ({"dims": ("a", "a", "b", "c")}, ValueError, "distinct"),
    ({"tile": {"query": 16}}, ValueError, "not in dims"),
    ({"tile": {"row": 0}}, ValueError, "positive int"),
    ({"tile": [16]}, TypeError, "tile must be a dict"),
    ({"precision": "fp64"}, ValueError, "precision must be one of"),
    ({"precision": "lowp"}, ValueError, "needs same_precision_ref"),
    ({"same_precision_ref": np.zeros(SHAPE)}, ValueError, "only for low precision"),
    ({"hints": {"scael": "x"}}, ValueError, "unknown keys"),
    ({"name": ""}, TypeError, "name must be"),
    ({"rtol": -1}, ValueError, "rtol"),
    ({"atol": -1.0}, ValueError, "atol"),
    ({"seed": "1"}, TypeError, "seed"),
    ({"rows_sum_to_one": 1}, TypeError, "rows_sum_to_one"),
    ({"attention": [1]}, TypeError, "attention must be a dict"),
    ({"attention": {"q": 1}}, ValueError, "missing"),
    ({"attention": {"q": np.zeros(SHAPE), "k": np.zeros(SHAPE), "v": np.zeros(SHAPE), "causal": 1}},
     TypeError, r"attention\['causal'\]"),
    ({"attention": {"q": np.zeros((2, 3, 41, 24)), "k": np.zeros(SHAPE), "v": np.zeros(SHAPE)}},
     ValueError, r"attention\['q'\] must have the shape of out"),
    ({"attention": {"q": np.zeros(SHAPE), "k": np.zeros(SHAPE), "v": np.zeros((2, 3, 40, 23))}},
     ValueError, r"attention\['k'\] and attention\['v'\]"),
    ({"attention": {"q": np.zeros(SHAPE), "k": np.zeros(SHAPE), "v": np.zeros(SHAPE), "kv_lens": np.zeros(3)}},
     ValueError, r"attention\['kv_lens'\]"),
    ({"attention": {"q": np.zeros(SHAPE), "k": np.zeros(SHAPE), "v": np.zeros(SHAPE), "tile_kv": 0}},
     ValueError, r"attention\['tile_kv'\]"),
    ({"reduction": {"x": np.zeros((3, 4)), "op": "max"}}, ValueError, "reduction takes exactly the keys"),
    ({"reduction": {"x": np.zeros((3, 4)), "op": "max", "threads": 32}}, ValueError, r"reduction\['x'\]"),
    ({"gemm": {"a": np.zeros((3, 4))}}, ValueError, "gemm must be a dict"),
    ({"kernel": 3}, TypeError, "kernel must be"),
])
def test_check_validates_its_arguments(ref, kwargs, error, words):
    kwargs = {"dims": DIMS, **kwargs}
    with pytest.raises(error, match=words):
        check(ref.astype(np.float32), ref, **kwargs)


def test_same_precision_ref_shape_is_checked(ref):
    with pytest.raises(ValueError, match="same_precision_ref must have shape"):
        check(ref.astype(np.float16), ref, precision="fp16", same_precision_ref=ref[0])
