"""course.checking: the pass rules, and each diagnosis triggered by a deliberately wrong output.

Every wrong output below is a bug a student could write; the test asserts which detectors fire
(exactly), so a detector that fires on the wrong bug fails here too.
"""

import numpy as np
import pytest

from course.checking import (DETECTORS, CheckFailure, CheckResult, check, is_poison, poison,
                             random_inputs)

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
    assert res.causes == ["unwritten", "tile_edge"] and "col >= 16" in str(res)


# --------------------------------------------------------------------------- detectors


def test_unwritten_rows_grid_too_small(ref):
    out = poison(np.empty(SHAPE, np.float32))
    out[:, :, :32] = ref[:, :, :32]
    res = failure(out, ref, tile={"row": 16}, seed=11)
    assert res.causes == ["unwritten", "tile_edge"]
    text = str(res)
    assert "never written" in text and "grid large enough" in text and "row >= 32" in text
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
    out = (ref * rng.uniform(0.5, 1.5, (2, 3, 16, 1))).astype(np.float32)
    res = failure(out, ref, rows_sum_to_one=True)
    assert res.causes == ["row_sums"] and "running sum rescaled" in str(res)


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


def test_every_detector_is_exercised_by_this_file():
    source = open(__file__).read()
    assert all(f'"{key}"' in source for key in DETECTORS)


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
])
def test_check_validates_its_arguments(ref, kwargs, error, words):
    kwargs = {"dims": DIMS, **kwargs}
    with pytest.raises(error, match=words):
        check(ref.astype(np.float32), ref, **kwargs)


def test_same_precision_ref_shape_is_checked(ref):
    with pytest.raises(ValueError, match="same_precision_ref must have shape"):
        check(ref.astype(np.float16), ref, precision="fp16", same_precision_ref=ref[0])
