"""Day 8 kernels (kernels/low_precision_attention/) on the simulator, at small shapes.

Mixed precision is judged by ``docs/design-notes.md`` §5: a kernel's error against the float64 reference on the
unrounded inputs may be at most twice the error of the same computation done in NumPy at the same
storage precision (``reference.attention_at_precision``, a paged decode over the rounded or
dequantized cache), plus a small atol; and, since the kernels compute in float32 on exactly the
stored values, each output is also within float32's tolerance of the reference on the stored
values. A deliberately wrong low-precision answer (stored in bf16 where fp16 was asked for, logits
multiplied in fp16) fails the same check. fp8 codes are compared bit for bit with
``reference.quantize_fp8`` and, where no saturation happens, with ml_dtypes' float8_e4m3fn: ties to
even, subnormals, +-448 and beyond, NaN and -0.0.

Each kernel case runs one launch that serves both the comparison (output poisoned with NaN first)
and the exact traffic count of ``course.models.low_precision``. Decode caches are shuffled pools of
pages (``reference.build_paged_cache``) with NaN (fp16) or NaN codes (fp8) in every slot past a
context's end and tables padded with -1. The kernels compiled for sm_90 at the formats
the registry test does not launch (it runs float32) are compiled in a subprocess started when this
file's tests start, so the compiler runs beside the simulator.

test_kernels_pattern.py checks each rung once on float32 against the reference and compiles it.
"""

import functools
import textwrap
import types
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from ptx_in_background import compile_fixtures
from numba import cuda

from course.checking import CheckFailure, check, poison, random_inputs
from course.models import gqa as day7_model
from course.models import low_precision as model
from course.traffic import count_traffic
from kernels import low_precision_attention as lp
from kernels import reference
from kernels.gqa_attention import decode_partition_size, prefill_block, prefill_grid
from kernels.intrinsics import eight_codes, four_halves, two_floats
from kernels.paged_attention import PARTITION_SIZE
from kernels.low_precision_attention import (FP8_THREADS, TOKENS_IN_FLIGHT, decode_tiling, fp8_dequantize, fp8_quantize,
                                             gqa_decode_mixed_precision, gqa_prefill_mixed_precision)

DIMS = ("batch", "head", "row", "col")
DECODE_DIMS = ("seq", "head", "channel")
BF16 = ml_dtypes.bfloat16
FMT_OF = {np.float16: "fp16", BF16: "bf16"}


def counted(traffic) -> dict:
    return {name: (traffic.global_loads[name], traffic.global_stores[name]) for name in traffic.global_loads}


def counted_bytes(traffic) -> dict:
    return {name: (traffic.load_bytes[name], traffic.store_bytes[name]) for name in traffic.load_bytes}


# ------------------------------------------------------------------------------------------------
# Compiling for a GPU, in a subprocess started with the first test of this file
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from numba import cuda
    from numba.cuda import types
    from kernels import low_precision_attention as lp
    f32, i32, table = numba.float32, numba.int32[::1], numba.int32[:, ::1]
    a2, a3, a4 = numba.float32[:, ::1], numba.float32[:, :, ::1], numba.float32[:, :, :, ::1]
    def decode(raw):
        cache = raw[:, :, :, ::1]
        return (a3, cache, cache, a2, a2, table, i32, f32, numba.int64, a3, a3, a4)
    def runs(word):
        words = word[::1]
        return (a3, words, words, a2, a2, table, i32, f32, numba.int64, numba.int64, numba.int64, numba.int64,
                a3, a3, a4)
    def halves():
        words = numba.uint64[::1]
        return (a3, words, words, a2, a2, table, i32, f32, numba.int64, numba.int64, a3, a3, a4)
    def prefill(t):
        x = t[:, :, :, ::1]
        return (x, x, x, i32, x, f32, numba.boolean)
    kernels = [
        ("decode fp16 group 4", lp.gqa_decode_mixed_precision_kernel(4, "float16"), decode(types.float16)),
        ("decode fp8 group 4", lp.gqa_decode_mixed_precision_kernel(4, "fp8_e4m3"), decode(numba.uint32)),
        ("page runs fp16 group 4", lp.gqa_decode_page_runs_kernel(4, "float16"), runs(numba.uint64)),
        ("page runs fp8 group 4", lp.gqa_decode_page_runs_kernel(4, "fp8_e4m3"), runs(numba.uint32)),
        ("half warps fp16 group 4", lp.gqa_decode_half_warps_kernel(4, "float16", 128), halves()),
        ("half warps fp8 group 4", lp.gqa_decode_half_warps_kernel(4, "fp8_e4m3", 128, fp8_convert=True), halves()),
        ("half warps fp8 table group 4", lp.gqa_decode_half_warps_kernel(4, "fp8_e4m3", 128, fp8_convert=False),
         halves()),
        ("tensor cores fp16", lp.gqa_decode_tensor_cores_kernel("float16", 128), halves()),
        ("tensor cores fp8", lp.gqa_decode_tensor_cores_kernel("fp8_e4m3", 128), halves()),
        ("prefill fp16", lp.gqa_prefill_mixed_precision_kernel(16), prefill(types.float16)),
        ("prefill bf16", lp.gqa_prefill_mixed_precision_kernel(16), prefill(types.bfloat16)),
        ("quantize", lp.fp8_quantize_kernel, (a2, numba.float32[::1], numba.uint8[:, ::1], numba.boolean)),
        ("dequantize", lp.fp8_dequantize_kernel, (numba.uint8[:, ::1], numba.float32[::1], a2)),
    ]
    for name, kernel, signature in kernels:
        # the registry test compiles every rung for sm_80 and sm_90 (float32); PTX's e4m3 conversion needs sm_89
        for cc in ((9, 0), (8, 0)) if "table" in name else ((9, 0),):
            record = {"kernel": name, "cc": f"sm_{cc[0]}{cc[1]}"}
            try:
                ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=cc)
                body = ptx[ptx.index(".entry"):]
                record.update(local=".local" in body, ieee_division="div.rn.f32" in body,
                              fp16_conversions=body.count("cvt.f32.f16"),
                              e4m3_conversions=body.count("cvt.rn.f16x2.e4m3x2"),
                              mma=body.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"))
            except Exception as exc:
                record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            print(json.dumps(record), flush=True)
""")


compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM, "test_kernels_compile")


# ------------------------------------------------------------------------------------------------
# References: fp8 codes bit for bit
# ------------------------------------------------------------------------------------------------

def e4m3_corners() -> np.ndarray:
    """Every finite e4m3 value, every midpoint between neighbours (the ties), values beyond 448 and
    infinities (saturation), float32 subnormals, NaN and -0.0, with both signs: float32 (1, n)."""
    values = reference.fp8_e4m3_values()
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    ties = (finite[:-1] + finite[1:]) / 2
    beyond = [449.0, 464.0, 464.5, 479.0, 480.0, 1e30, np.inf, np.nan, 1e-40, 2.0 ** -10, 3 * 2.0 ** -11]
    x = np.concatenate([finite, ties, beyond]).astype(np.float32)
    return np.concatenate([x, -x, [np.float32(-0.0)]])[None, :]


def ml_dtypes_codes(y) -> np.ndarray:
    return np.asarray(y, np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def test_e4m3_values_are_ml_dtypes_float8_e4m3fn():
    codes = np.arange(256, dtype=np.uint8)
    assert np.array_equal(reference.fp8_e4m3_values(), codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64),
                          equal_nan=True)
    assert reference.fp8_e4m3_values()[0x7E] == reference.E4M3_MAX == lp.E4M3_MAX == 448.0


def test_reference_quantize_is_ml_dtypes_where_nothing_saturates_and_satfinite_where_it_does():
    x = e4m3_corners()
    codes, scales = reference.quantize_fp8(x, np.ones(1, np.float32), group_ndim=1)
    in_range = np.abs(x) <= 448
    assert np.array_equal(codes[in_range], ml_dtypes_codes(x[in_range]))          # ties to even, subnormals
    big = np.isfinite(x) & (np.abs(x) > 448) | np.isinf(x)
    assert set(codes[big & (x > 0)]) == {0x7E} and set(codes[big & (x < 0)]) == {0xFE}
    assert codes[0, -1] == 0x80 and set(codes[np.isnan(x)]) == {0x7F, 0xFF}
    rng, seed = random_inputs()
    x = (rng.standard_normal((3, 4, 5, 8)) * rng.uniform(0.01, 100, (3, 4, 1, 1))).astype(np.float32)
    x[1, 2] = 0.0
    codes, scales = reference.quantize_fp8(x)
    amax = np.abs(x).max(axis=(2, 3))
    assert scales[1, 2] == 1.0 and np.array_equal(scales[amax > 0], (amax / np.float32(448))[amax > 0])
    y = x / scales[:, :, None, None]
    assert np.array_equal(codes, ml_dtypes_codes(np.clip(y, -448, 448))), f"seed {seed}"
    assert np.array_equal(reference.dequantize_fp8(codes, scales),
                          codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * scales[:, :, None, None])


@pytest.mark.parametrize("call, error, words", [
    (lambda: reference.quantize_fp8(np.ones((2, 3), np.float32), np.ones(3, np.float32), group_ndim=1), ValueError,
     r"scales must have the leading shape \(2,\)"),
    (lambda: reference.quantize_fp8(np.array([[1.0, np.inf]], np.float32), group_ndim=1), ValueError,
     "x must be finite when the scales are computed"),
    (lambda: reference.quantize_fp8(np.ones((2, 3), np.float32), np.zeros(2, np.float32), group_ndim=1), ValueError,
     "scales must be positive and finite"),
    (lambda: reference.dequantize_fp8(np.ones((2, 3), np.int8), np.ones(2), group_ndim=1), TypeError,
     "codes must have dtype uint8"),
    (lambda: reference.quantize_fp8(np.ones(3, np.float32)), ValueError, "x must have at least group_ndim = 2"),
])
def test_references_reject_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------------
# The fp8 tools: quantize and dequantize
# ------------------------------------------------------------------------------------------------

def test_quantize_kernel_is_bit_exact_at_ties_subnormals_saturation_nan_and_minus_zero():
    x = e4m3_corners()
    ones = np.ones(1, np.float32)
    with count_traffic() as t:
        codes, scales = fp8_quantize(x, scales=ones, group_ndim=1, out=poison(np.empty(x.shape, np.uint8)))
    want, _ = reference.quantize_fp8(x, ones, group_ndim=1)
    wrong = np.flatnonzero(codes != want)
    assert not wrong.size, (f"{wrong.size} codes differ, first at x = {x.flat[wrong[0]]!r}: got "
                            f"{codes.flat[wrong[0]]:#04x}, expected {want.flat[wrong[0]]:#04x}")
    in_range = np.abs(x) <= 448
    assert np.array_equal(codes[in_range], ml_dtypes_codes(x[in_range])) and scales is ones
    assert counted(t) == model.requested_quantize(1, x.size, compute_scales=False)


def test_quantize_computes_scales_per_page_and_dequantize_inverts_it():
    rng, seed = random_inputs()
    cache = (rng.standard_normal((5, 2, 3, 8)) * rng.uniform(0.01, 50, (5, 2, 1, 1))).astype(np.float32)
    cache[3, 1] = 0.0                               # a page of zeros: scale 1, codes 0
    with count_traffic() as t:
        codes, scales = fp8_quantize(cache)
    want_codes, want_scales = reference.quantize_fp8(cache)
    assert np.array_equal(scales, want_scales) and scales[3, 1] == 1.0, f"seed {seed}"
    assert np.array_equal(codes, want_codes), f"seed {seed}: {np.count_nonzero(codes != want_codes)} codes differ"
    assert counted(t) == model.requested_quantize(10, 24, compute_scales=True)
    with count_traffic() as t:
        values = fp8_dequantize(codes, scales, out=poison(np.empty(cache.shape, np.float32)))
    assert np.array_equal(values, reference.dequantize_fp8(codes, scales).astype(np.float32)), f"seed {seed}"
    assert counted(t) == model.requested_dequantize(10, 24)
    # Quantizing costs at most half a step of e4m3 (2**-4 of the value, relatively) times the scale.
    assert np.all(np.abs(values - cache) <= np.maximum(np.abs(cache) / 16, 2.0 ** -10 * scales[:, :, None, None]))


@pytest.mark.parametrize("call, error, words", [
    (lambda: fp8_quantize(np.ones((2, 3), np.float64)), TypeError, "x must have dtype float32, got float64"),
    (lambda: fp8_quantize(np.ones((2, 3), np.float32), group_ndim=0), ValueError, "group_ndim must be an int >= 1"),
    (lambda: fp8_quantize(np.ones((2, 3), np.float32), scales=np.ones(3, np.float32), group_ndim=1), ValueError,
     r"scales must have shape \(2,\)"),
    (lambda: fp8_quantize(np.ones((2, 3), np.float32), scales=np.zeros(2, np.float32), group_ndim=1), ValueError,
     "scales must be positive and finite"),
    (lambda: fp8_quantize(np.full((2, 3), np.nan, np.float32), group_ndim=1), ValueError,
     "x must be finite when the scales are computed"),
    (lambda: fp8_quantize(np.ones((2, 3), np.float32), out=np.zeros((2, 3), np.int8)), TypeError,
     "out must have dtype uint8"),
    (lambda: fp8_dequantize(np.ones((2, 3), np.int8), np.ones(2, np.float32), group_ndim=1), TypeError,
     "codes must have dtype uint8"),
    (lambda: fp8_dequantize(np.ones((2, 3), np.uint8), np.ones((2, 1), np.float32), group_ndim=1), ValueError,
     r"scales must have 1 dimension"),
], ids=["x float64", "group_ndim 0", "scales shape", "scales zero", "x nan", "out int8", "codes int8",
        "dequantize scales shape"])
def test_fp8_tools_reject_bad_input_naming_the_argument(call, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        call()
    assert t.launches == 0


# ------------------------------------------------------------------------------------------------
# Prefill: fp16 and bf16 storage, float32 arithmetic
# ------------------------------------------------------------------------------------------------

def qkv(B, heads, kv_heads, N, M, d, seed=None, magnitude=None):
    """Random float32 q (B, heads, N, d), k and v (B, kv_heads, M, d); ``magnitude``: integer q and k in
    [-magnitude, magnitude] (exact in fp16 up to 2048, in bf16 up to 256), so the logits are large."""
    rng, seed = random_inputs(seed)
    if magnitude:
        q = rng.integers(-magnitude, magnitude + 1, (B, heads, N, d)).astype(np.float32)
        k = rng.integers(-magnitude, magnitude + 1, (B, kv_heads, M, d)).astype(np.float32)
    else:
        q = rng.standard_normal((B, heads, N, d), dtype=np.float32)
        k = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    v = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    return q, k, v, seed


def check_prefill(out, q, k, v, dtype, seed, name, **mask):
    """The §6 rule against the float64 reference on the float32 inputs, and float32's tolerance
    (once the output's own rounding is allowed for) against the reference on the stored inputs."""
    fmt = FMT_OF[dtype]
    assert out.dtype == np.dtype(dtype)
    ref = reference.attention(q, k, v, **mask)
    same = reference.attention_at_precision(q, k, v, fmt, **mask)
    result = check(out, ref, name=name, dims=DIMS, seed=seed, precision=fmt, same_precision_ref=same)
    exact = reference.attention(*(a.astype(dtype) for a in (q, k, v)), **mask)
    ulp = 2.0 ** -10 if fmt == "fp16" else 2.0 ** -7       # one step of the format, relative to the value
    far = np.abs(out.astype(np.float64) - exact) > ulp * np.abs(exact) + 1e-5 * np.abs(exact).max()
    assert not far.any(), (f"{name}: {far.sum()} elements more than one {fmt} step from the exact result on the "
                           f"stored inputs, first at {np.argwhere(far)[0].tolist()} (seed {seed})")
    return result


# (dtype, B, heads, kv_heads, N, M, d, causal, kv_lens): groups 2, 3 and 5; a second position tile; an
# empty sequence; more keys than queries; a partial key tile of 16.
PREFILL_CASES = [
    pytest.param(np.float16, 1, 4, 2, 19, 23, 8, True, None, id="fp16-g2-causal"),
    pytest.param(BF16, 2, 3, 1, 9, 17, 12, False, [17, 0], id="bf16-g3-kv_lens-empty-sequence"),
    pytest.param(np.float16, 1, 5, 1, 53, 9, 4, True, [7], id="fp16-g5-51-positions-two-tiles"),
]


@pytest.mark.parametrize("dtype, B, heads, kv_heads, N, M, d, causal, kv_lens", PREFILL_CASES)
def test_prefill_meets_the_precision_rule_and_its_traffic_model(dtype, B, heads, kv_heads, N, M, d, causal, kv_lens):
    q, k, v, seed = qkv(B, heads, kv_heads, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, np.int32)
    stored = [a.astype(dtype) for a in (q, k, v)]
    with count_traffic() as t:
        out = gqa_prefill_mixed_precision(*stored, causal=causal, kv_lens=lens,
                                          out=poison(np.empty(q.shape, dtype)))
    check_prefill(out, q, k, v, dtype, seed, f"O of gqa_prefill_mixed_precision ({FMT_OF[dtype]})",
                  causal=causal, kv_lens=lens)
    if lens is not None:
        assert np.all(out[lens == 0].astype(np.float32) == 0.0)
    assert t.launches == 1 and t.per_launch[0].grid == prefill_grid(B, heads, kv_heads, N)
    assert t.per_launch[0].block[0] == prefill_block(heads, kv_heads)
    requested = model.requested_prefill(B, heads, kv_heads, N, d, M, causal=causal, kv_lens=kv_lens)
    assert counted(t) == requested
    assert counted_bytes(t) == model.load_bytes(requested, model.itemsizes_prefill(np.dtype(dtype).name))


def test_prefill_fp16_logits_beyond_fp16_range_stay_finite():
    """q . k reaches about 2e5 here, past fp16's 65504: the kernel scales q in float32 before the product
    and accumulates in float32, so nothing overflows. The same product computed in fp16 arithmetic
    (a kernel that multiplies stored values without converting them first) gives inf, and the check
    rejects its NaN output."""
    q, k, v, seed = qkv(1, 2, 1, 6, 7, 16, magnitude=200)
    k[0, 0, 3] = q[0, 0, 5]                             # q . k = |q|**2, about 2e5
    logits = np.einsum("bhid,bjd->bhij", q, k[:, 0])
    assert np.abs(logits).max() > 65504
    out = gqa_prefill_mixed_precision(*(a.astype(np.float16) for a in (q, k, v)), causal=True)
    assert np.isfinite(out.astype(np.float32)).all()
    check_prefill(out, q, k, v, np.float16, seed, "O with logits past fp16's range", causal=True)
    with np.errstate(over="ignore", invalid="ignore"):
        fp16_logits = np.einsum("bhid,bjd->bhij", q.astype(np.float16), k[:, 0].astype(np.float16))
        e = np.exp(fp16_logits - fp16_logits.max(axis=-1, keepdims=True))
        wrong = (e / e.sum(axis=-1, keepdims=True)) @ v[:, 0].astype(np.float16)
    assert np.isinf(fp16_logits).any()
    with pytest.raises(CheckFailure):
        check(wrong, reference.attention(q, k, v), precision="fp16", name="O from fp16 logits",
              same_precision_ref=reference.attention_at_precision(q, k, v, "fp16"))


def test_a_wrong_storage_precision_fails_the_precision_rule():
    """bf16 keeps 8 significant bits where fp16 keeps 11: an answer stored in bf16 is about eight times
    further from the reference than fp16 storage costs, and fails the fp16 rule."""
    q, k, v, seed = qkv(1, 4, 2, 24, 24, 16)
    ref = reference.attention(q, k, v, causal=True)
    fp16 = reference.attention_at_precision(q, k, v, "fp16", causal=True)
    bf16 = reference.attention_at_precision(q, k, v, "bf16", causal=True)
    check(fp16, ref, precision="fp16", same_precision_ref=fp16, name="fp16 reference")
    with pytest.raises(CheckFailure):
        check(bf16, ref, precision="fp16", same_precision_ref=fp16, name="bf16 where fp16 was asked", seed=seed)


def prefill_args(**change):
    args = dict(q=np.zeros((1, 2, 8, 4), np.float16), k=np.zeros((1, 1, 8, 4), np.float16),
                v=np.zeros((1, 1, 8, 4), np.float16))
    args.update(change)
    return args


@pytest.mark.parametrize("change, error, words", [
    (dict(q=np.zeros((1, 2, 8, 4), np.float64)), TypeError, "q must have dtype one of float16, bfloat16, float32"),
    (dict(k=np.zeros((1, 1, 8, 4), np.float32)), TypeError, r"k must have the dtype of q \(float16\), got float32"),
    (dict(v=np.zeros((1, 1, 8, 4), BF16)), TypeError, r"v must have the dtype of q \(float16\), got bfloat16"),
    (dict(v=np.zeros((1, 1, 7, 4), np.float16)), ValueError, r"v must have shape .*seq_k is 7, not 8"),
    (dict(out=np.zeros((1, 2, 8, 4), np.float32)), TypeError, "out must have dtype float16"),
    (dict(causal=1), TypeError, "causal must be True or False"),
], ids=["q float64", "k float32", "v bf16", "v short", "out float32", "causal 1"])
def test_prefill_rejects_bad_input_naming_the_argument(change, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        gqa_prefill_mixed_precision(**prefill_args(**change))
    assert t.launches == 0


# ------------------------------------------------------------------------------------------------
# Decode: an fp16 or fp8 cache, float32 q, out and arithmetic
# ------------------------------------------------------------------------------------------------

def decode_case(fmt, lens, block_size, *, kv_heads=1, group=2, d=8, magnitude=None, ramp=False, v_spread=False,
                seed=None):
    """One decode step over a shuffled paged cache stored as ``fmt``: slots that hold no key are NaN
    (fp16) or the NaN code 0x7f (fp8), two spare blocks end the pool, every table row ends with -1.
    ``cache32``: the float32 cache the stored one rounds (fp16) or quantizes (fp8, scales per page).
    ``ramp``: keys grow 16-fold along the context, so a later tile's scores often beat the running maximum.
    ``v_spread``: the values of each page are scaled by 2**u, the u spaced evenly over [-12, 13] and shuffled
    along the context, so in every draw the V scales of pages differ about 2**25-fold, rise and fall, and reach
    past 8 (a weight of 1 times such a scale times P_UNIT would overflow fp16)."""
    rng, seed = random_inputs(seed)
    heads = kv_heads * group
    shape = (len(lens), kv_heads, max(lens), d)
    if magnitude:
        k = rng.integers(-magnitude, magnitude + 1, shape).astype(np.float32)
        q = rng.integers(-magnitude, magnitude + 1, (len(lens), heads, d)).astype(np.float32)
        k[0, 0, 0] = q[0, 0]                        # one logit is |q|**2
    else:
        k = rng.standard_normal(shape, dtype=np.float32)
        q = rng.standard_normal((len(lens), heads, d), dtype=np.float32)
    if ramp:
        k *= np.geomspace(0.25, 4.0, shape[2], dtype=np.float32)[:, None]
    v = rng.standard_normal(shape, dtype=np.float32) * rng.uniform(0.5, 4.0, (1, kv_heads, 1, 1)).astype(np.float32)
    if v_spread:
        pages = -(-shape[2] // block_size)
        exponents = rng.permutation(np.linspace(-12.0, 13.0, pages))
        v *= np.exp2(exponents).astype(np.float32).repeat(block_size)[:shape[2], None]
    k32, v32, tables, context_lens = reference.build_paged_cache(k, v, block_size, rng, np.array(lens), spare_blocks=2,
                                                                 padding_pages=1)
    unused = np.isnan(k32)
    extra = {}
    if fmt == "float32":
        k_cache, v_cache = k32, v32
        k_stored, v_stored = k_cache, v_cache
    elif fmt == "float16":
        k_cache, v_cache = k32.astype(np.float16), v32.astype(np.float16)
        k_stored, v_stored = k_cache, v_cache
    else:
        k_cache, k_scales = reference.quantize_fp8(np.nan_to_num(k32))
        v_cache, v_scales = reference.quantize_fp8(np.nan_to_num(v32))
        k_cache[unused], v_cache[unused] = 0x7F, 0x7F
        extra = dict(k_scales=k_scales, v_scales=v_scales)
        k_stored, v_stored = (reference.dequantize_fp8(np.where(unused, 0, c).astype(np.uint8), s)
                              for c, s in ((k_cache, k_scales), (v_cache, v_scales)))
    return types.SimpleNamespace(fmt=fmt, q=q, k_cache=k_cache, v_cache=v_cache, extra=extra, tables=tables,
                                 lens=context_lens, seed=seed, heads=heads, kv_heads=kv_heads, group=group, d=d,
                                 cache32=(k32, v32), stored=(k_stored, v_stored))


def run_decode(case, partition_size, **kwargs):
    return gqa_decode_mixed_precision(case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                                      out=poison(np.empty_like(case.q)), partition_size=partition_size, **kwargs)


def check_decode(out, case, name):
    """float32's tolerance against the reference on the stored cache, and the §6 rule against the
    reference on the float32 cache the stored one came from."""
    on_stored = reference.paged_attention(case.q, *case.stored, case.tables, case.lens)
    check(out, on_stored, name=name, dims=DECODE_DIMS, seed=case.seed)
    if case.fmt == "float32":
        return
    exact = reference.paged_attention(case.q, *case.cache32, case.tables, case.lens)
    check(out, exact, name=name + " vs the float32 cache", dims=DECODE_DIMS, seed=case.seed,
          precision="fp16" if case.fmt == "float16" else "fp8", same_precision_ref=on_stored)


# (fmt, block_size, contexts, kv_heads, group, head_dim, partition_size): empty and one-token contexts,
# partial last pages, partitions ending inside a page, groups of 1, 3, 4, 8 and 9 (two blocks of 5 and 4
# heads per KV head); tokens in flight 4 and 8 (group 3), 8 (group 4), 2 (group 9), 16 (group 1) and 4
# (group 8: 32 scores a batch, the whole butterfly).
DECODE_CASES = [
    pytest.param("float16", 4, [0, 5, 13], 1, 3, 8, 5, id="fp16-g3-empty-context"),
    pytest.param("fp8_e4m3", 4, [0, 5, 13], 1, 3, 8, 5, id="fp8-g3-empty-context"),
    pytest.param("fp8_e4m3", 3, [7, 1], 2, 4, 12, 4, id="fp8-g4-partition-inside-a-page"),
    pytest.param("float16", 5, [9], 1, 9, 4, 8, id="fp16-g9-two-blocks-per-kv-head"),
    pytest.param("fp8_e4m3", 2, [6], 2, 1, 16, 32, id="fp8-g1-mha"),
    pytest.param("fp8_e4m3", 4, [6], 1, 8, 4, 8, id="fp8-g8-32-scores-a-batch"),
]


@pytest.mark.parametrize("fmt, block_size, lens, kv_heads, group, d, partition_size", DECODE_CASES)
def test_decode_meets_the_precision_rule_and_its_traffic_model(fmt, block_size, lens, kv_heads, group, d,
                                                               partition_size):
    case = decode_case(fmt, lens, block_size, kv_heads=kv_heads, group=group, d=d)
    with count_traffic() as t:
        out = run_decode(case, partition_size)
    check_decode(out, case, f"gqa_decode_mixed_precision out, {fmt} cache, group {group}, contexts {lens}")
    assert t.kernel_names == ["gqa_decode_mixed_precision_kernel", "paged_attention_v2_merge_kernel"]
    requested = model.requested_decode(lens, case.heads, kv_heads, d, partition_size, fmt)
    assert counted(t) == requested
    assert counted_bytes(t) == model.load_bytes(requested, model.itemsizes_decode(fmt))
    # The cache: each element of a context read once per block of the group, at its format's size.
    subgroups = decode_tiling(group, fmt)[0]
    cache_bytes = kv_heads * subgroups * sum(lens) * d * model.ITEMSIZE[fmt]
    assert t.load_bytes["k_cache"] == t.load_bytes["v_cache"] == cache_bytes


# (fmt, block_size, contexts, kv_heads, group, head_dim, partition_size): runs of 8, 4 and 2 tokens (pages of
# 16 and 8), runs shortened to fit a warp (group 8: 4 x 8 > 32) and to divide the page (pages of 3 and 6:
# runs of 1 and 2), empty and one-token contexts, partial last pages and partial last runs, partitions of
# one run, two blocks per KV head (group 9), head_dim 4 and 12 (lanes without channels).
RUN_CASES = [
    pytest.param("float16", 16, [0, 37, 1], 2, 4, 8, 64, id="fp16-g4-runs-of-4"),
    pytest.param("fp8_e4m3", 16, [21, 3], 1, 4, 12, 16, id="fp8-g4-runs-of-8"),
    pytest.param("float32", 8, [19], 2, 3, 4, 8, id="fp32-g3-runs-of-2"),
    pytest.param("fp8_e4m3", 16, [40], 1, 8, 4, 8, id="fp8-g8-runs-of-4"),
    pytest.param("float16", 3, [7, 0], 1, 9, 4, 2, id="fp16-g9-pages-of-3"),
    pytest.param("fp8_e4m3", 6, [13], 2, 1, 8, 4, id="fp8-g1-pages-of-6"),
]


@pytest.mark.parametrize("fmt, block_size, lens, kv_heads, group, d, partition_size", RUN_CASES)
def test_page_runs_meet_the_precision_rule_and_their_traffic_model(fmt, block_size, lens, kv_heads, group, d,
                                                                   partition_size):
    """gqa_decode_page_runs: right on the stored cache and by the §6 rule (slots past every context are NaN,
    so a row read past an end shows); its loads are the model's, the cache read once per block as words."""
    case = decode_case(fmt, lens, block_size, kv_heads=kv_heads, group=group, d=d)
    with count_traffic() as t:
        out = lp.gqa_decode_page_runs(case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                                      out=poison(np.empty_like(case.q)), partition_size=partition_size)
    check_decode(out, case, f"gqa_decode_page_runs out, {fmt} cache, group {group}, pages of {block_size}")
    assert t.kernel_names == ["gqa_decode_page_runs_kernel", "paged_attention_v2_merge_kernel"]
    requested = model.requested_decode_runs(lens, case.heads, kv_heads, d, partition_size, fmt, block_size)
    assert counted(t) == requested
    assert counted_bytes(t) == model.load_bytes(requested, model.itemsizes_decode_runs(fmt))
    subgroups = decode_tiling(group, fmt)[0]
    assert t.load_bytes["k_cache"] == t.load_bytes["v_cache"] == kv_heads * subgroups * sum(lens) * d * model.ITEMSIZE[fmt]


def test_page_runs_tiling_matches_its_model_and_rejects_what_it_cannot_run():
    assert model.RUN_TOKENS == lp.RUN_TOKENS
    for fmt in model.CACHE_FORMATS:
        for group in (1, 3, 4, 8, 9):
            for block_size in (1, 3, 6, 8, 16):
                _, heads, run = lp.run_tiling(group, fmt, block_size)
                assert run == model.run_length(group, fmt, block_size) and heads * run <= 32 and block_size % run == 0
    assert [lp.run_tiling(4, fmt, 16)[2] for fmt in model.CACHE_FORMATS] == [2, 4, 8]      # timed on an H100
    assert lp.gqa_decode_page_runs_kernel(4, "float16") is lp.gqa_decode_page_runs_kernel(4, "float16", 16)
    half = dict(HALF_CACHE, k_scales=None, v_scales=None)
    with count_traffic() as t:
        with pytest.raises(ValueError, match="partition_size must be a multiple of the run of 4 tokens"):
            lp.gqa_decode_page_runs(**decode_args(**half, q=np.zeros((2, 4, 4), np.float32)), partition_size=6)
        with pytest.raises(ValueError, match="head_dim that is a multiple of 4"):
            lp.gqa_decode_page_runs(**decode_args(q=np.zeros((2, 2, 6), np.float32),
                                                  k_cache=np.zeros((6, 1, 4, 6), np.float16),
                                                  v_cache=np.zeros((6, 1, 4, 6), np.float16), k_scales=None,
                                                  v_scales=None))
    assert t.launches == 0


# (fmt, block_size, contexts, kv_heads, group, head_dim, partition_size) for gqa_decode_half_warps: halves of
# 4, 2 and 1 tokens (runs of 8, 4, 2), heads x tokens cut to a half's 16 lanes (group 8), pages of 3 and 6 that
# part the two halves of a run, empty and one-token contexts, partial last runs, partitions of one run, two
# blocks per KV head (group 9), head_dim 8 and 24 (lanes without channels) and 128 (every lane).
HALF_CASES = [
    pytest.param("float16", 16, [0, 37, 1], 2, 4, 8, 64, id="fp16-g4-halves-of-4"),
    pytest.param("fp8_e4m3", 16, [21, 3], 1, 4, 24, 16, id="fp8-g4-halves-of-4"),
    pytest.param("float32", 8, [19], 2, 3, 8, 8, id="fp32-g3-halves-of-2"),
    pytest.param("fp8_e4m3", 16, [40], 1, 8, 8, 8, id="fp8-g8-halves-of-2"),
    pytest.param("float16", 3, [7, 0], 1, 9, 8, 2, id="fp16-g9-pages-of-3"),
    pytest.param("fp8_e4m3", 6, [13], 2, 1, 8, 4, id="fp8-g1-pages-of-6"),
    pytest.param("fp8_e4m3", 16, [70, 33], 1, 4, 128, 32, id="fp8-g4-head-dim-128"),
]


@pytest.mark.parametrize("fmt, block_size, lens, kv_heads, group, d, partition_size", HALF_CASES)
def test_half_warps_meet_the_precision_rule_and_read_the_cache_once(fmt, block_size, lens, kv_heads, group, d,
                                                                   partition_size):
    """gqa_decode_half_warps: right on the stored cache and by the §6 rule (slots past every context are NaN);
    every K and V element of a context read once per block, a table entry (and fp8's scales) once per half
    of a run by each of its 16 lanes. fp8: both ways of decoding, PTX's conversion and the table."""
    case = decode_case(fmt, lens, block_size, kv_heads=kv_heads, group=group, d=d)
    for fp8_convert in ((True, False) if fmt == "fp8_e4m3" else (None,)):
        kernel = functools.partial(lp.gqa_decode_half_warps_kernel, fp8_convert=fp8_convert)
        with count_traffic() as t:
            out = lp.gqa_decode_half_warps(case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                                           out=poison(np.empty_like(case.q)), partition_size=partition_size,
                                           kernel=kernel)
        check_decode(out, case, f"gqa_decode_half_warps out, {fmt} cache, group {group}, pages of {block_size}, "
                                f"fp8_convert={fp8_convert}")
        assert t.kernel_names == ["gqa_decode_half_warps_kernel", "paged_attention_v2_merge_kernel"]
        subgroups, _, run = lp.half_warp_tiling(group, fmt, block_size)
        readers = kv_heads * subgroups
        assert t.load_bytes["k_cache"] == t.load_bytes["v_cache"] == readers * sum(lens) * d * model.ITEMSIZE[fmt]
        halves = sum(-(-max(0, min(partition_size, n - p * partition_size)) // (run // 2))
                     for n in lens for p in range(-(-max(lens) // partition_size)))
        assert t.global_loads["block_tables"] == readers * halves * 16
        scales = readers * halves * 16 if fmt == "fp8_e4m3" else 0
        assert t.global_loads["k_scales"] == t.global_loads["v_scales"] == scales


def test_half_warp_tiling_and_what_it_cannot_run():
    for fmt in model.CACHE_FORMATS:
        for group in (1, 3, 4, 8, 9):
            for block_size in (1, 3, 6, 8, 16):
                _, heads, run = lp.half_warp_tiling(group, fmt, block_size)
                assert run % 2 == 0 and heads * run // 2 <= 16 and block_size % (run // 2) == 0
    assert [lp.half_warp_tiling(4, fmt, 16)[2] for fmt in model.CACHE_FORMATS] == [4, 8, 8]     # timed on an H100
    assert lp.gqa_decode_half_warps_kernel(4, "float16", 8) is lp.gqa_decode_half_warps_kernel(4, "float16", 8, 16)
    half = dict(HALF_CACHE, k_scales=None, v_scales=None)
    with count_traffic() as t:
        with pytest.raises(ValueError, match="partition_size must be a multiple of the run of 8 tokens"):
            lp.gqa_decode_half_warps(**decode_args(**{k: np.zeros((6, 1, 4, 8), np.float16) for k in half
                                                      if k.endswith("cache")}, k_scales=None, v_scales=None,
                                                   q=np.zeros((2, 4, 8), np.float32)), partition_size=4)
        with pytest.raises(ValueError, match="head_dim that is a multiple of 8"):
            lp.gqa_decode_half_warps(**decode_args(**half))
    assert t.launches == 0


# (fmt, block_size, contexts, kv_heads, group, head_dim, partition_size) for gqa_decode_tensor_cores: pages of 16
# and 32 (a tile in one page) and of 3, 6 and 8 (a tile over several pages, a lane's rows on different pages),
# empty, one-token and partial last tiles, groups of 1, 3, 4, 8 and 9 (two blocks of 5 and 4 heads per KV head),
# head_dim 8 and 24 (lanes without channels: of K, t >= 1 and 3; of V, g >= 1 and 3), 72 and 128; contexts of
# 250 and 300 tokens in one partition (4 or 5 tiles a warp) whose keys grow along the context, so the running
# maximum of a head often grows after its accumulators hold weighted rows.
TENSOR_CASES = [
    pytest.param("float16", 16, [0, 37, 1], 2, 4, 8, 64, id="fp16-g4-pages-of-16"),
    pytest.param("fp8_e4m3", 16, [21, 3], 1, 4, 24, 16, id="fp8-g4-head-dim-24"),
    pytest.param("fp8_e4m3", 3, [40, 17], 1, 8, 8, 16, id="fp8-g8-pages-of-3"),
    pytest.param("float16", 6, [29], 1, 9, 72, 32, id="fp16-g9-pages-of-6-head-dim-72"),
    pytest.param("fp8_e4m3", 8, [13, 0], 2, 1, 8, 16, id="fp8-g1-pages-of-8"),
    pytest.param("fp8_e4m3", 32, [70, 33], 1, 4, 128, 32, id="fp8-g4-head-dim-128"),
    pytest.param("float16", 16, [50], 1, 8, 128, 48, id="fp16-g8-head-dim-128"),
    pytest.param("fp8_e4m3", 16, [300, 161], 1, 4, 16, 320, id="fp8-g4-growing-logits-many-tiles"),
    pytest.param("float16", 5, [250], 1, 3, 16, 256, id="fp16-g3-growing-logits-pages-of-5"),
]
# fp8 pages whose V scales differ about 2**25-fold (v_spread), one page a tile (pages of 16) or several (pages
# of 3): the weights, brought to P_UNIT by the partition's largest V scale, span the whole range.
TENSOR_V_SPREAD_CASES = [
    pytest.param(16, [300, 97], 1, 4, 16, 320, id="fp8-pages-of-16"),
    pytest.param(3, [200], 1, 2, 8, 208, id="fp8-pages-of-3"),
]


@pytest.mark.parametrize("fmt, block_size, lens, kv_heads, group, d, partition_size", TENSOR_CASES)
def test_tensor_cores_meet_the_precision_rule_and_read_the_cache_once(fmt, block_size, lens, kv_heads, group, d,
                                                                     partition_size):
    """gqa_decode_tensor_cores (the simulator's mma: kernels.intrinsics.mma_m16n8k16's twin): right to float32's
    tolerance on the stored cache and by the §6 rule (slots past every context are NaN); every K and V element
    of a context read once per block."""
    case = decode_case(fmt, lens, block_size, kv_heads=kv_heads, group=group, d=d, ramp=max(lens) > 200)
    with count_traffic() as t:
        out = lp.gqa_decode_tensor_cores(case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                                         out=poison(np.empty_like(case.q)), partition_size=partition_size)
    check_decode(out, case, f"gqa_decode_tensor_cores out, {fmt} cache, group {group}, pages of {block_size}")
    assert t.kernel_names == ["gqa_decode_tensor_cores_kernel", "paged_attention_v2_merge_kernel"]
    readers = kv_heads * -(-group // 8)
    assert t.load_bytes["k_cache"] == t.load_bytes["v_cache"] == readers * sum(lens) * d * model.ITEMSIZE[fmt]


@pytest.mark.parametrize("block_size, lens, kv_heads, group, d, partition_size", TENSOR_V_SPREAD_CASES)
def test_tensor_cores_hold_v_scales_far_apart(block_size, lens, kv_heads, group, d, partition_size):
    """gqa_decode_tensor_cores on an fp8 cache whose pages' V scales rise and fall along the context: each weight
    times its page's V scale, over the partition's largest and times P_UNIT, stays within fp16's range (no
    overflow) and its hi + lo pair keeps float32's precision (pages of small scale are not lost)."""
    case = decode_case("fp8_e4m3", lens, block_size, kv_heads=kv_heads, group=group, d=d, v_spread=True)
    scales = case.extra["v_scales"][case.tables[0, :-(-lens[0] // block_size)], 0]
    assert scales.max() > 65504 / lp.P_UNIT and scales.max() > 1e5 * scales.min(), f"seed {case.seed}"
    assert np.any(np.diff(scales) > 0) and np.any(np.diff(scales) < 0), f"seed {case.seed}"
    out = lp.gqa_decode_tensor_cores(case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                                     out=poison(np.empty_like(case.q)), partition_size=partition_size)
    check_decode(out, case, f"gqa_decode_tensor_cores out, fp8 cache with V scales spread, pages of {block_size}")


# The fastest partition of gqa_decode_tensor_cores on an H100 (132 SMs), fp8 cache, 8 KV heads, group 4, head_dim
# 128, partitions of 512 to 32,768 tokens timed at each step: {(num_seqs, context): tokens}.
FASTEST_FP8_PARTITIONS = {(8, 4096): 1024, (32, 2048): 2048, (128, 1024): 1024, (64, 4096): 2048, (16, 8192): 4096,
                          (64, 8192): 4096, (16, 32768): 4096, (4, 131072): 4096, (64, 16384): 8192}


def test_tensor_partition_size_picks_the_partitions_timed_fastest():
    """tensor_partition_size's model of an SM's time picks the partition that was fastest at every step timed;
    day 7's rule picks another at most of them. Without an SM count (the simulator) it is day 6's size."""
    picks = {step: lp.tensor_partition_size("fp8_e4m3", step[0], 8, step[1], 132) for step in FASTEST_FP8_PARTITIONS}
    assert picks == FASTEST_FP8_PARTITIONS
    day7 = {step: decode_partition_size(step[0], 8, step[1], 132) for step in FASTEST_FP8_PARTITIONS}
    assert sum(day7[step] != best for step, best in FASTEST_FP8_PARTITIONS.items()) >= 6, day7
    assert lp.tensor_partition_size("fp8_e4m3", 4, 8, 1000, None) == PARTITION_SIZE
    for fmt in ("float16", "fp8_e4m3"):
        for seqs, longest, sms in ((1, 1, 132), (1, 100, 132), (3, 70_000, 108), (256, 4096, 132), (2, 10**6, 16)):
            size = lp.tensor_partition_size(fmt, seqs, 8, longest, sms)
            assert size % lp.TILE_TOKENS == 0 and lp.TENSOR_PARTITION_MIN <= size < max(2 * longest, 128), (seqs, size)


def test_eight_codes_are_the_e4m3_numbers_bit_for_bit():
    """eight_codes (on a GPU: PTX's cvt.rn.f16x2.e4m3x2, compiled above; here NumPy) turns every one of the
    256 codes into its e4m3 number, NaN, -0.0 and subnormals included, channel j from byte j."""
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    got = np.array([eight_codes(word) for word in codes.view(np.uint64)], np.float32).reshape(-1)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).sum() == 2     # 0x7f and 0xff
    assert np.array_equal(got[~np.isnan(got)].view(np.uint32), want[~np.isnan(want)].view(np.uint32))


def test_packed_words_turn_into_the_numbers_they_hold():
    """The simulator's four_halves and two_floats read a word's bytes as fp16 and float32 numbers, NaN,
    infinities, subnormals and -0.0 included (on a GPU: an LLVM bit cast, compiled below)."""
    halves = np.array([1.5, -0.0, np.inf, 6e-8, np.nan, -65504.0, 2.0 ** -14, 3.0], np.float16)
    for word, want in zip(halves.view(np.uint64), halves.reshape(-1, 4)):
        got = np.array(four_halves(word), np.float32)
        assert np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))
    floats = np.array([1e-45, -np.inf, 3.25, np.nan], np.float32)
    for word, want in zip(floats.view(np.uint64), floats.reshape(-1, 2)):
        assert np.array_equal(np.array(two_floats(word), np.float32).view(np.uint32), want.view(np.uint32))


def test_decode_large_logits_do_not_overflow():
    case = decode_case("float16", [9, 4], 4, group=3, d=16, magnitude=50)
    keys = reference.gather_kv(case.cache32[0], case.tables[0], int(case.lens[0]))      # (kv_heads, tokens, d)
    assert (case.q[0] @ keys[0].T).max() > 5e3
    check_decode(run_decode(case, 4), case, "gqa_decode_mixed_precision out, logits ~1e4")


def test_decode_cache_bytes_fall_with_the_format():
    """The same decode step moves 2 and almost 4 times fewer cache bytes at fp16 and fp8 than at float32."""
    assert model.decode_cache_saving("float16") == 2
    assert model.decode_cache_saving("fp8_e4m3") == Fraction(1024, 256 + Fraction(1, 2)) > Fraction(399, 100)
    lens, heads, kv_heads, d = [8192] * 16, 32, 8, 128
    fp32, fp16, fp8 = (model.compulsory_bytes_decode(lens, heads, kv_heads, d, fmt) for fmt in model.CACHE_FORMATS)
    q_and_out = 2 * 16 * heads * d * 4
    day7 = day7_model.compulsory_bytes_decode(lens, heads, kv_heads, d)
    assert fp32 - q_and_out == 2 * (fp16 - q_and_out) == day7 - q_and_out
    assert fp8 - q_and_out == (fp32 - q_and_out) // 4 + 2 * kv_heads * 16 * 512 * 4


def test_launchers_accept_device_arrays():
    """Device arrays in, device arrays out; the decode needs max_context (its value is not copied back)."""
    q, k, v, seed = qkv(1, 2, 1, 5, 6, 4)
    stored = [cuda.to_device(a.astype(np.float16)) for a in (q, k, v)]
    out = gqa_prefill_mixed_precision(*stored, causal=True)
    assert hasattr(out, "copy_to_host")
    check_prefill(out.copy_to_host(), q, k, v, np.float16, seed, "O from device arrays", causal=True)
    case = decode_case("fp8_e4m3", [5], 4, group=1, d=4)
    device = [cuda.to_device(a) for a in (case.q, case.k_cache, case.v_cache, case.tables, case.lens)]
    scales = {name: cuda.to_device(a) for name, a in case.extra.items()}
    with pytest.raises(ValueError, match="max_context must be given with device arrays"):
        gqa_decode_mixed_precision(*device, **scales)
    out = gqa_decode_mixed_precision(*device, **scales, max_context=5, partition_size=4)
    check_decode(out.copy_to_host(), case, "gqa_decode_mixed_precision out from device arrays")


def decode_args(**change):
    """Two sequences, two query heads on one KV head, an fp8 cache of blocks of 4, head_dim 4."""
    args = dict(q=np.zeros((2, 2, 4), np.float32), k_cache=np.zeros((6, 1, 4, 4), np.uint8),
                v_cache=np.zeros((6, 1, 4, 4), np.uint8), block_tables=np.array([[0, 1], [2, -1]], np.int32),
                context_lens=np.array([5, 3], np.int32), k_scales=np.ones((6, 1), np.float32),
                v_scales=np.ones((6, 1), np.float32))
    args.update(change)
    return args


HALF_CACHE = dict(k_cache=np.zeros((6, 1, 4, 4), np.float16), v_cache=np.zeros((6, 1, 4, 4), np.float16))


@pytest.mark.parametrize("change, error, words", [
    (dict(k_scales=None), ValueError, r"k_scales must be given for an fp8 cache .*shape \(6, 1\)"),
    (dict(v_scales=np.ones((6, 2), np.float32)), ValueError, r"v_scales must have shape .*kv_heads is 2, not 1"),
    (dict(HALF_CACHE, k_scales=np.ones((6, 1), np.float32), v_scales=None), ValueError,
     "k_scales must be None for a float16 cache"),
    (dict(v_cache=np.zeros((6, 1, 4, 4), np.float16)), TypeError, "v_cache must have dtype uint8, got float16"),
    (dict(k_cache=np.zeros((6, 1, 4, 4), BF16)), TypeError, "k_cache must have dtype one of float32, float16, uint8"),
    (dict(q=np.zeros((2, 2, 6), np.float32), k_cache=np.zeros((6, 1, 4, 6), np.uint8),
          v_cache=np.zeros((6, 1, 4, 6), np.uint8)), ValueError, "head_dim that is a multiple of 4 for an fp8 cache"),
    (dict(q=np.zeros((2, 2, 4), np.float16)), TypeError, "q must have dtype float32"),
    (dict(block_tables=np.array([[0, -1], [2, -1]], np.int32)), ValueError, r"block_tables\[0, 1\] is -1"),
    (dict(partition_size=0), ValueError, "partition_size must be an int >= 1"),
], ids=["fp8 without scales", "scales shape", "fp16 with scales", "v_cache dtype", "bf16 cache", "head_dim 6",
        "q fp16", "entry -1 in use", "partition_size 0"])
def test_decode_rejects_bad_input_naming_the_argument(change, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        gqa_decode_mixed_precision(**decode_args(**change))
    assert t.launches == 0


def test_decode_tiling_model_constants_and_kernel_cache():
    for fmt in model.CACHE_FORMATS:
        for group in (1, 3, 4, 8, 9):
            subgroups, heads, tokens = decode_tiling(group, fmt)
            assert heads * tokens <= 32 and tokens & (tokens - 1) == 0 and tokens == TOKENS_IN_FLIGHT[fmt][heads - 1]
    assert [decode_tiling(g, "fp8_e4m3")[2] for g in (1, 4, 8)] == [16, 8, 4]     # timed on an H100
    assert [decode_tiling(g, "float16")[2] for g in (1, 4, 8)] == [4, 2, 1]
    assert model.FP8_THREADS == FP8_THREADS and model.CACHE_FORMATS == lp.CACHE_FORMATS
    assert lp.gqa_decode_mixed_precision_kernel(4, "float16") is lp.gqa_decode_mixed_precision_kernel(4, "float16")
    assert lp.gqa_decode_mixed_precision_kernel(4, "float16") is not lp.gqa_decode_mixed_precision_kernel(4, "fp8_e4m3")
    for bad, error in ((0, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="group"):
            lp.gqa_decode_mixed_precision_kernel(bad, "float16")
    with pytest.raises(ValueError, match="fmt must be one of"):
        lp.gqa_decode_mixed_precision_kernel(4, "bfloat16")


# ------------------------------------------------------------------------------------------------
# What the GPU compiler makes of the kernels
# ------------------------------------------------------------------------------------------------

def test_kernels_compile_for_sm90_at_every_storage_format(compiled):
    """fp16, bf16 and fp8 versions of the kernels compile for sm_90 (the registry test compiles the
    float32 ones, and the tensor-core decode on fp16, for sm_80 and sm_90); the decode kernels keep their per-lane arrays in registers (no local memory);
    fp16 loads convert with ``cvt.f32.f16``; the quantizer divides with IEEE rounding (``div.rn.f32``),
    which its bit-exactness needs."""
    records = {(r["kernel"], r["cc"]): r for r in compiled()}
    assert len(records) == 14
    failures = [f"{name} for {cc}: {r['error']}" for (name, cc), r in records.items() if "error" in r]
    assert not failures, "\n".join(failures)
    for cc in ("sm_90",):
        assert not records["decode fp16 group 4", cc]["local"] and not records["decode fp8 group 4", cc]["local"]
        assert records["decode fp16 group 4", cc]["fp16_conversions"] > 0
        assert not records["page runs fp16 group 4", cc]["local"] and not records["page runs fp8 group 4", cc]["local"]
        assert records["page runs fp16 group 4", cc]["fp16_conversions"] >= 4      # _four_halves: cvt.f32.f16
        assert records["prefill fp16", cc]["fp16_conversions"] > 0
        for name in ("half warps fp16 group 4", "half warps fp8 group 4", "half warps fp8 table group 4"):
            assert not records[name, cc]["local"], name
        assert records["half warps fp8 group 4", cc]["e4m3_conversions"] >= 4      # _eight_codes: 2 codes each
        assert records["half warps fp8 table group 4", cc]["e4m3_conversions"] == 0
        assert records["quantize", cc]["ieee_division"]
        for name in ("tensor cores fp16", "tensor cores fp8"):      # per tile: 16 score mmas, 16 value mmas
            assert not records[name, cc]["local"] and records[name, cc]["mma"] >= 32, name
        assert records["tensor cores fp8", cc]["e4m3_conversions"] >= 32     # _e4m3_pairs: 2 codes each
    assert not records["half warps fp8 table group 4", "sm_80"]["local"]
