"""Day 9's quantized GEMV (``kernels.quantized_gemv``, ``kernels.quantized_gemv_repacked``,
``kernels.quantized_gemv_wide`` and ``kernels.quantized_gemv_persistent``) on the simulator, and its PTX.

Every rung against the GGUF references at awkward shapes (N not a multiple of the warps of a block, K = 32,
a row of 33 blocks so a lane takes two), over blocks of zeros, constant blocks, blocks at the extreme codes
and raw random bytes, into NaN-poisoned outputs; the repacked rungs also at a row of a whole chunk and one
block more, N not a multiple of their rows per warp, and the batched rung at T = 0, 1, 3 and 16 tokens; the
q8_1 and Q8_0 quantize kernels, ``half_from_bytes`` and ``dp4a`` bit for bit; ``q4_1_repack`` and
``q8_0_repack``; the wide rungs bit for bit against the dp4a rung (Q4_1) and against W times the q8_1 x (Q8_0),
at N not a multiple of their 32 rows a block and rows of a whole chunk and more, with K past their shared
memory refused; the persistent rungs bit for bit against the dp4a rung (Q4_1) and against W times the q8_1 x
(Q4_0), at N not a multiple of their grid's warps and rows of one step and more, ``q4_0_repack``; bad
arguments; traffic = ``course.models.quantized``. A process without the simulator compiles
the kernels for sm_80 and sm_90 and reads their PTX (dp4a, the fp16 conversions, word loads, the repacked
rungs' 8-byte loads, the wide rungs' 16-byte loads).
Sizes stay small: the whole file runs in well under a minute of simulator time.
"""

import textwrap

import numpy as np
import pytest

from ptx_in_background import compile_fixtures
from numba import cuda

from course.checking import check, poison, random_inputs, sum_rounding_bound
from course.models import quantized as model
from course.traffic import count_traffic
from kernels import intrinsics
from kernels import quantized_gemv as qg
from kernels import quantized_gemv_repacked as qgr
from kernels import quantized_gemv_persistent as qgp
from kernels import quantized_gemv_prequantized as qpq
from kernels import quantized_gemv_wide as qgw
from kernels import reference
from kernels.launching import WARP, cdiv

FORMATS = {"q8_0": (reference.quantize_q8_0, reference.dequantize_q8_0),
           "q4_0": (reference.quantize_q4_0, reference.dequantize_q4_0),
           "q4_1": (reference.quantize_q4_1, reference.dequantize_q4_1),
           "int4_g128": (reference.quantize_int4_g128, reference.dequantize_int4_g128)}
WARP_PER_ROW = {name: name.split("_gemv")[0] for name in qg.RUNGS if name.endswith("_warp_per_row")}
# (N, K): one row of one block; N not a multiple of GEMV_WARPS; a row of 33 blocks (lane 0 takes blocks 0 and 32).
SHAPES = [(1, 32), (5, 32), (9, 64), (2, 33 * 32)]
# The repacked rungs besides: N odd (a warp of 2 rows with one), 11 rows (the batched rung's last warp has 3 rows),
# a row of a whole chunk of 128 blocks and one more (the repacked rung's chunk loop, then its tail).
REPACKED_SHAPES = [(1, 32), (3, 96), (11, 32 * 5), (2, 129 * 32)]
LADDER = qpq.RUNGS               # day 9's whole ladder: quantized_gemv's four, the repacked, wide, persistent, prequantized
# The wide rungs besides: 33 rows (a block of 32 rows and one more), 70 rows (the last warp with 2 of its 4 rows),
# a row of a whole chunk (64 blocks for Q4_1, 32 for Q8_0) and one more, and of 3 chunks.
WIDE_SHAPES = [(33, 96), (70, 65 * 32), (6, 64 * 32), (3, 129 * 32)]


@pytest.fixture
def rng_seed():
    return random_inputs()


def gguf_weights(rng, fmt, n, k):
    """W (n, k) as GGUF bytes (n, k / 32, block bytes): blocks at three magnitudes, then the first blocks
    replaced by a block of zeros, a block of two values (the first and last codes), a constant block (Q4_1:
    d = 0); with two rows or more the last row is raw random bytes under random finite scales, so every code
    appears (Q8_0's -128 too, which quantizing never makes)."""
    weights = rng.standard_normal((n, k)) * rng.choice([1e-3, 1.0, 50.0], size=(n, 1))
    group = model.FORMAT_BLOCKS[fmt][0]             # 32 weights a block; int4_g128: 128 a group
    blocks = weights.reshape(-1, group)
    specials = [np.zeros(group), np.where(np.arange(group) % 3 == 0, -6.0, 5.25), np.full(group, 0.75)]
    for b, block in enumerate(specials[:len(blocks)]):
        blocks[b] = block
    w = FORMATS[fmt][0](weights.astype(np.float32)).reshape(n, k // group, -1)
    if n > 1:
        header = 4 if fmt == "q4_1" else 2
        w[-1] = rng.integers(0, 256, w[-1].shape, dtype=np.uint8)
        w[-1, :, :header] = rng.uniform(-2, 2, (k // group, header // 2)).astype("<f2").view(np.uint8)
    return w


def activations(rng, k):
    """x (k,) float32, its first block zeros when there are several (q8_1: a block with d = 0)."""
    x = rng.standard_normal(k).astype(np.float32)
    if k > 32:
        x[:32] = 0.0
    return x


def q8_1_rounding_bound(w, x, fmt):
    """Per output (N,), or (T, N) for a batch x, how far a float32 sum of a q8_1 rung's terms may lie from the
    float64 reference (``course.checking.sum_rounding_bound``): each block of 32 gives two terms, its codes' d s dot
    and its minimum's m sum(x) (zero for Q8_0), each made with at most 3 roundings of its own. Where a row's terms
    cancel, that is far above 1e-4 of the row's value, and a correct kernel must not fail there; a kernel that drops
    or misreads a block's term is off by about that term, far more (the bound is 2 B + 2 units of rounding of the
    terms' magnitudes, about 4e-6 of them at K = 1,056)."""
    tokens = np.atleast_2d(np.asarray(x, np.float32))
    codes, scales, sums = reference.quantize_q8_1(tokens)
    x_hat = reference.dequantize_q8_1(codes, scales)                      # (T, K)
    w = np.asarray(w)
    n, k = w.shape[0], tokens.shape[1]
    values = FORMATS[fmt][1](w.reshape(n, -1)).reshape(n, k // 32, 32)    # d q + m per weight
    d = w[..., :2].copy().view("<f2")[..., 0].astype(np.float64)
    if fmt == "int4_g128":
        d = np.repeat(d, 4, axis=-1)
    m = {"q8_0": 0 * d, "q4_0": -8 * d, "int4_g128": -8 * d}.get(fmt)
    if m is None:
        m = w[..., 2:4].copy().view("<f2")[..., 0].astype(np.float64)
    code_terms = np.einsum("nbj,tbj->tnb", values - m[..., None], x_hat.reshape(len(tokens), -1, 32))
    min_terms = np.broadcast_to(m[None] * np.asarray(sums, np.float64)[:, None, :], code_terms.shape)
    bound = sum_rounding_bound(np.concatenate([code_terms, min_terms], axis=-1), extra_roundings=3)
    return bound if np.ndim(x) == 2 else bound[0]


def check_q8_1(y, w, x, fmt, *, name, seed, dims=None):
    """``check`` against ``reference.gemv_q8_1``, a row's float32 rounding bounded by ``q8_1_rounding_bound``."""
    check(y, reference.gemv_q8_1(w, x, fmt), name=name, seed=seed, dims=dims, rounding=q8_1_rounding_bound(w, x, fmt))


def warp_per_row_reference(fmt, w, x):
    return FORMATS[fmt][1](w.reshape(w.shape[0], -1)) @ x.astype(np.float64)


# ------------------------------------------------------------------------------------------------
# Compiling for a GPU, in a subprocess started with the first test of this file
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from course.gpu_compile import COMPUTE_CAPABILITIES, ptx_for_targets
    from kernels import quantized_gemv as qg
    from kernels import quantized_gemv_repacked as qgr
    from kernels import quantized_gemv_wide as qgw
    from kernels import quantized_gemv_persistent as qgp
    from kernels import quantized_gemv_prequantized as qpq
    f32, u32, u8 = numba.float32[::1], numba.uint32[::1], numba.uint8[:, :, ::1]
    u64_3d, u32_2d, f32_2d = numba.uint64[:, :, ::1], numba.uint32[:, ::1], numba.float32[:, ::1]
    kernels = [
        ("q8_0_gemv_warp_per_row", qg.q8_0_gemv_warp_per_row_kernel, (u8, f32, f32)),
        ("q4_0_gemv_warp_per_row", qg.q4_0_gemv_warp_per_row_kernel, (u8, f32, f32)),
        ("q4_1_gemv_warp_per_row", qg.q4_1_gemv_warp_per_row_kernel, (u8, f32, f32)),
        ("q8_1_quantize", qg.q8_1_quantize_kernel, (f32, u32, f32, f32)),
        ("q8_0_quantize", qg.q8_0_quantize_kernel, (numba.float32[:, ::1], numba.int8[:, ::1], numba.float32[:, ::1])),
        ("q4_1_gemv_q8_1_dp4a", qg.q4_1_gemv_q8_1_dp4a_kernel, (numba.uint32[:, :, ::1], u32, f32, f32, f32)),
        ("q4_1_gemv_q8_1_repacked", qgr.q4_1_gemv_q8_1_repacked_kernel,
         (u64_3d, u32_2d, numba.uint64[::1], f32, f32, f32)),
        ("q4_1_gemv_q8_1_small_batch", qgr.q4_1_gemv_q8_1_small_batch_kernel,
         (u64_3d, u32_2d, numba.uint64[:, ::1], f32_2d, f32_2d, f32_2d)),
        ("q4_1_gemv_q8_1_wide", qgw.q4_1_gemv_q8_1_wide_kernel, (u32_2d, u32_2d, f32, f32)),
        ("q8_0_gemv_q8_1_wide", qgw.q8_0_gemv_q8_1_wide_kernel, (u32_2d, numba.uint16[:, ::1], f32, f32)),
        ("q4_1_gemv_q8_1_persistent", qgp.q4_1_gemv_q8_1_persistent_kernel, (u32_2d, u32_2d, f32, f32)),
        ("q4_0_gemv_q8_1_persistent", qgp.q4_0_gemv_q8_1_persistent_kernel, (u32_2d, numba.uint16[:, ::1], f32, f32)),
        ("int4_g128_gemv_q8_1_persistent", qgp.int4_g128_gemv_q8_1_persistent_kernel,
         (u32_2d, numba.uint16[:, ::1], f32, f32)),
        ("q4_1_gemv_q8_1_prequantized", qpq.q4_1_gemv_q8_1_prequantized_kernel, (u32_2d, u32_2d, u32_2d, f32, f32, f32)),
        ("q4_0_gemv_q8_1_prequantized", qpq.q4_0_gemv_q8_1_prequantized_kernel,
         (u32_2d, numba.uint16[:, ::1], u32_2d, f32, f32, f32)),
        ("int4_g128_gemv_q8_1_prequantized", qpq.int4_g128_gemv_q8_1_prequantized_kernel,
         (u32_2d, numba.uint16[:, ::1], u32_2d, f32, f32, f32)),
        ("q8_0_gemv_q8_1_prequantized", qpq.q8_0_gemv_q8_1_prequantized_kernel,
         (u32_2d, numba.uint16[:, ::1], u32_2d, f32, f32)),
    ]
    for name, kernel, signature in kernels:
        for (major, minor), ptx in ptx_for_targets(kernel.py_func, signature, COMPUTE_CAPABILITIES).items():
            body = ptx[ptx.index(".entry"):]
            print(json.dumps({"kernel": name, "cc": f"sm_{major}{minor}", "local": ".local" in body,
                              "f64": ".f64" in body, "dp4a": body.count("dp4a.s32.s32"),
                              "fp16_conversions": body.count("cvt.f32.f16"), "byte_loads": body.count("ld.global.u8")
                              + body.count("ld.global.s8"), "word_loads": body.count("ld.global.u32")
                              + body.count("ld.global.b32"), "wide_loads": body.count("ld.global.u64")
                              + body.count("ld.global.v2.u32") + body.count("ld.global.v4.u32"),
                              "loads_16_bytes": body.count("ld.global.nc.v4.u32")}), flush=True)
""")


compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM)


# ------------------------------------------------------------------------------------------------
# The rungs against the references
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
@pytest.mark.parametrize("rung", list(WARP_PER_ROW))
def test_warp_per_row_rungs_match_the_dequantized_product(rung, shape, rng_seed):
    rng, seed = rng_seed
    fmt = WARP_PER_ROW[rung]
    w, x = gguf_weights(rng, fmt, *shape), activations(rng, shape[1])
    y = qg.RUNGS[rung](w, x, out=poison(np.empty(shape[0], np.float32)))
    check(y, warp_per_row_reference(fmt, w, x), name=rung, seed=seed)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
def test_dp4a_rung_matches_w_times_the_quantized_activations(shape, rng_seed):
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "q4_1", *shape), activations(rng, shape[1])
    y = qg.q4_1_gemv_q8_1_dp4a(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, "q4_1", name="q4_1_gemv_q8_1_dp4a", seed=seed)


def test_dp4a_rung_pays_for_its_int8_activations(rng_seed):
    """Against W x with x unquantized the dp4a rung is off by about the activations' rounding (well above
    float32's error, well below a percent of y at these sizes), where the float rung is not."""
    rng, _ = rng_seed
    w, x = gguf_weights(rng, "q4_1", 8, 256), rng.standard_normal(256).astype(np.float32)
    exact = warp_per_row_reference("q4_1", w, x)
    y = qg.q4_1_gemv_q8_1_dp4a(w, x)
    error = np.linalg.norm(y - exact) / np.linalg.norm(exact)
    float_error = np.linalg.norm(qg.q4_1_gemv_warp_per_row(w, x) - exact) / np.linalg.norm(exact)
    assert float_error < 1e-5 < error
    # each activation is off by at most half its block's step, so each output by at most sum |w| * step / 2
    _, scales, _ = reference.quantize_q8_1(x)
    half_step = np.repeat(np.asarray(scales, np.float64) / 2, 32)
    bound = np.abs(reference.dequantize_q4_1(w.reshape(8, -1)).astype(np.float64)) @ half_step
    assert np.all(np.abs(y - exact) <= bound * (1 + 1e-3) + 1e-6), (np.abs(y - exact) / bound).max()


def test_q8_1_quantize_kernel_matches_the_reference_bit_for_bit():
    """Codes and scales exactly, sums to float32's rounding: random blocks, zeros, rounding ties (d = 1, so
    x = 2.5 must give 3, not numpy's even 2), a block so small that 1 / d overflows, and huge values."""
    rng = np.random.default_rng(9)
    ties = np.concatenate([[127.0], np.arange(-7.5, 8.0, 0.5)[:31]])
    blocks = [rng.standard_normal(32) * 3, np.zeros(32), ties, np.full(32, 1e-40), rng.uniform(-1e30, 1e30, 32),
              -ties]
    x = np.concatenate(blocks).astype(np.float32)
    n_blocks = x.size // 32
    x_q = np.full(n_blocks * 8, 0xDEADBEEF, np.uint32)
    x_scale, x_sum = poison(np.empty(n_blocks, np.float32)), poison(np.empty(n_blocks, np.float32))
    qg.q8_1_quantize_kernel[cdiv(n_blocks, qg.GEMV_WARPS), qg.GEMV_WARPS * WARP](x, x_q, x_scale, x_sum)
    codes, scales, sums = reference.quantize_q8_1(x)
    np.testing.assert_array_equal(x_q.view(np.int8), codes)
    np.testing.assert_array_equal(x_scale, scales)
    assert np.all(np.abs(x_sum - sums) <= 1e-6 * np.abs(x).reshape(-1, 32).sum(axis=1))
    assert codes[2 * 32 + 21] == 3 and codes[5 * 32 + 21] == -3            # 2.5 and -2.5: halves away from zero


def test_half_from_bytes_decodes_every_finite_fp16_bit_pattern():
    """Every fp16 number but inf and NaN (exponent field 31), subnormals and -0.0 included, exactly as NumPy reads
    its bytes (the device function run as Python)."""
    decode = getattr(qg.half_from_bytes, "py_func", qg.half_from_bytes)
    bits = np.arange(2 ** 16, dtype=np.uint32)
    bits = bits[(bits >> 10) & 0x1F != 0x1F]
    want = bits.astype(np.uint16).view(np.float16).astype(np.float32)
    got = np.array([decode(np.uint8(b & 0xFF), np.uint8(b >> 8)) for b in bits.tolist()], np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_q8_0_quantize_matches_the_reference_bit_for_bit():
    """Codes and float32 scales as ``reference.quantize_q8_0`` computes them (the q8_1 codes and d are Q8_0's), and
    their bytes as its bytes: random blocks, a block of zeros, rounding ties (d = 1: 2.5 gives 3, -5.5 gives -6), a
    block so small that 1 / d overflows, 3 rows of 5 blocks (15 warps: the last block of warps partial)."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 5 * 32)) * rng.choice([1e-3, 1.0, 300.0], (3, 1))).astype(np.float32)
    x[0, :32] = 0.0
    x[1, 32:64] = np.concatenate([[127.0], np.arange(-7.5, 8.0, 0.5)[:31]])
    x[2, 64:96] = 1e-40
    codes, scales = qg.q8_0_quantize(x, out=poison(np.empty(x.shape, np.int8)),
                                     out_scales=poison(np.empty((3, 5), np.float32)))
    want_codes, want_scales, _ = reference.quantize_q8_1(x)
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scales, want_scales)
    np.testing.assert_array_equal(qg.q8_0_bytes(codes, scales).reshape(3, -1), reference.quantize_q8_0(x))
    assert codes[1, 32 + 21] == 3 and codes[1, 32 + 5] == -6            # 2.5 and -5.5: halves away from zero
    assert qg.q8_0_quantize(np.zeros((2, 0), np.float32))[0].shape == (2, 0)
    with pytest.raises(ValueError, match="x must have K .* a multiple of 32"):
        qg.q8_0_quantize(np.zeros((2, 48), np.float32))


def test_dp4a_twin_is_a_dot_product_of_signed_bytes_that_wraps_like_int32():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 2 ** 32, 200, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2 ** 32, 200, dtype=np.uint64).astype(np.uint32)
    a[:2], b[:2] = 0x80808080, 0x80808080                 # -128 * -128, four times: 65536
    c = rng.integers(-2 ** 31, 2 ** 31, 200).astype(np.int32)
    c[0], c[1] = 0, 2 ** 31 - 65536                       # the second wraps to -2**31
    products = (a.view(np.int8).reshape(-1, 4).astype(np.int64) * b.view(np.int8).reshape(-1, 4)).sum(axis=1)
    want = ((c.astype(np.int64) + products + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    got = np.array([intrinsics.dp4a(np.uint32(ai), np.uint32(bi), np.int32(ci)) for ai, bi, ci in zip(a, b, c)])
    np.testing.assert_array_equal(got, want)
    assert got[0] == 65536 and got[1] == -2 ** 31


@pytest.mark.parametrize("rung", list(LADDER))
def test_empty_shapes(rung, rng_seed):
    """No rows: an empty y, nothing launched. K = 0: zeros."""
    weights, block = model.FORMAT_BLOCKS[model.RUNG_FORMATS[rung]]
    assert LADDER[rung](np.zeros((0, 2, block), np.uint8), np.ones(2 * weights, np.float32)).shape == (0,)
    y = LADDER[rung](np.zeros((3, 0, block), np.uint8), np.zeros(0, np.float32),
                     out=poison(np.empty(3, np.float32)))
    np.testing.assert_array_equal(y, np.zeros(3, np.float32))


@pytest.mark.parametrize("rung", list(LADDER))
def test_device_arrays_in_device_array_out(rung, rng_seed):
    rng, _ = rng_seed
    fmt = model.RUNG_FORMATS[rung]
    k = 2 * model.FORMAT_BLOCKS[fmt][0]
    w, x = gguf_weights(rng, fmt, 3, k), activations(rng, k)
    y = LADDER[rung](cuda.to_device(w), cuda.to_device(x))
    assert hasattr(y, "copy_to_host")
    np.testing.assert_array_equal(y.copy_to_host(), LADDER[rung](w, x))


W8 = np.zeros((2, 3, 34), np.uint8)
X = np.zeros(96, np.float32)


@pytest.mark.parametrize("call, error, words", [
    (lambda: qg.q8_0_gemv_warp_per_row(W8.astype(np.int8), X), TypeError, "w must have dtype uint8, got int8"),
    (lambda: qg.q8_0_gemv_warp_per_row(W8.reshape(2, -1), X), ValueError,
     r"w must have 3 dimensions \(rows=any, blocks=any, q8_0_block_bytes=34\)"),
    (lambda: qg.q4_0_gemv_warp_per_row(W8, X), ValueError,
     r"w must have shape \(rows=any, blocks=any, q4_0_block_bytes=18\), got \(2, 3, 34\) "
     r"\(q4_0_block_bytes is 34, not 18\)"),
    (lambda: qg.q8_0_gemv_warp_per_row(W8, X[:64]), ValueError,
     r"x must have shape \(K=96,\), got \(64,\) \(K is 64, not 96\)"),
    (lambda: qg.q4_1_gemv_warp_per_row(np.zeros((2, 3, 20), np.uint8), X.astype(np.float64)), TypeError,
     "x must have dtype float32, got float64"),
    (lambda: qg.q4_1_gemv_q8_1_dp4a(np.zeros((2, 3, 20), np.uint8), X, out=np.zeros(3, np.float32)), ValueError,
     r"out must have shape \(rows=2,\), got \(3,\)"),
    (lambda: qg.q8_0_gemv_warp_per_row(W8, cuda.to_device(X)), TypeError,
     "w, x must all be NumPy arrays or all be device arrays"),
    (lambda: qg.q8_0_gemv_warp_per_row(W8[:, :, ::-1], X), ValueError, "w must be C-contiguous"),
])
def test_bad_arguments_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------------
# The repacked rungs: q4_1_repack, bytes in flight, small batches
# ------------------------------------------------------------------------------------------------

def test_q4_1_repack_splits_each_block_into_its_codes_and_its_scales(rng_seed):
    """Codes (N, blocks, 4) uint32: the block's 16 bytes of codes as they are; scales (N, blocks) uint32: d in the
    low half, m in the high half; a device array gives device arrays."""
    rng, _ = rng_seed
    w = gguf_weights(rng, "q4_1", 3, 5 * 32)
    codes, scales = qgr.q4_1_repack(w)
    assert codes.dtype == scales.dtype == np.uint32 and codes.shape == (3, 5, 4) and scales.shape == (3, 5)
    assert codes.flags.c_contiguous and scales.flags.c_contiguous
    np.testing.assert_array_equal(codes.view(np.uint8).reshape(3, 5, 16), w[..., 4:])
    halves = scales.view(np.float16).reshape(3, 5, 2)
    np.testing.assert_array_equal(halves.view(np.uint16), w[..., :4].copy().view(np.uint16))
    on_device = qgr.q4_1_repack(cuda.to_device(w))
    assert isinstance(on_device, qgr.Q4_1Repacked) and hasattr(on_device.codes, "copy_to_host")
    np.testing.assert_array_equal(on_device.codes.copy_to_host(), codes)
    np.testing.assert_array_equal(on_device.scales.copy_to_host(), scales)
    assert qgr.q4_1_repack(np.zeros((2, 0, 20), np.uint8)).codes.shape == (2, 0, 4)


@pytest.mark.parametrize("shape", SHAPES + REPACKED_SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
def test_repacked_rung_matches_the_dp4a_rungs_reference(shape, rng_seed):
    """From the GGUF bytes (repacked by the launcher) and from weights repacked once: the same y, that of W times
    the q8_1 activations."""
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "q4_1", *shape), activations(rng, shape[1])
    want = reference.gemv_q8_1(w, x, "q4_1")
    y = qgr.q4_1_gemv_q8_1_repacked(w, x, out=poison(np.empty(shape[0], np.float32)))
    check(y, want, name="q4_1_gemv_q8_1_repacked", seed=seed)
    np.testing.assert_array_equal(qgr.q4_1_gemv_q8_1_repacked(qgr.q4_1_repack(w), x), y)


@pytest.mark.parametrize("tokens, shape", [(1, (5, 96)), (3, (11, 33 * 32)), (16, (5, 96)), (16, (1, 32)),
                                           (3, (6, 129 * 32))], ids=lambda v: str(v))
def test_batched_rung_matches_each_tokens_reference(tokens, shape, rng_seed):
    """x (T, K) gives y (T, N), row t the dp4a rung's y of token t: one token, 3 (a token of zeros among them: q8_1
    d = 0), the most (16), at N = 5 and 11 (the last warp's rows partial) and a row of 33 and 129 blocks."""
    rng, seed = rng_seed
    n, k = shape
    w = gguf_weights(rng, "q4_1", n, k)
    x = (rng.standard_normal((tokens, k)) * rng.choice([1e-3, 1.0, 30.0], (tokens, 1))).astype(np.float32)
    if tokens > 1:
        x[1] = 0.0
    y = qgr.q4_1_gemv_q8_1_small_batch(w, x, out=poison(np.empty((tokens, n), np.float32)))
    check_q8_1(y, w, x, "q4_1", name="q4_1_gemv_q8_1_small_batch", dims=("token", "row"), seed=seed)
    for t in range(tokens):                              # each token's row: the batch-1 rung's y, to float32's error
        np.testing.assert_allclose(y[t], qgr.q4_1_gemv_q8_1_repacked(w, x[t]), rtol=1e-5,
                                   atol=1e-5 * np.abs(y[t]).max())


def test_batched_rung_takes_one_token_as_a_vector_and_an_empty_batch(rng_seed):
    rng, _ = rng_seed
    w = qgr.q4_1_repack(gguf_weights(rng, "q4_1", 5, 64))
    x = activations(rng, 64)
    y = qgr.q4_1_gemv_q8_1_small_batch(w, x, out=poison(np.empty(5, np.float32)))
    assert y.shape == (5,)
    np.testing.assert_array_equal(y, qgr.q4_1_gemv_q8_1_small_batch(w, x[None, :])[0])
    assert qgr.q4_1_gemv_q8_1_small_batch(w, np.zeros((0, 64), np.float32)).shape == (0, 5)
    y = qgr.q4_1_gemv_q8_1_small_batch(cuda.to_device(np.zeros((3, 0, 20), np.uint8)),
                                   cuda.to_device(np.zeros((2, 0), np.float32)))
    np.testing.assert_array_equal(y.copy_to_host(), np.zeros((2, 3), np.float32))


W41 = np.zeros((2, 3, 20), np.uint8)


@pytest.mark.parametrize("call, error, words", [
    (lambda: qgr.q4_1_repack(W41[..., :18]), ValueError,
     r"w must have shape \(rows=any, blocks=any, q4_1_block_bytes=20\), got \(2, 3, 18\)"),
    (lambda: qgr.q4_1_repack(W41.astype(np.int8)), TypeError, "w must have dtype uint8, got int8"),
    (lambda: qgr.q4_1_gemv_q8_1_repacked(W41, X[:64]), ValueError, r"x must have shape \(K=96,\), got \(64,\)"),
    (lambda: qgr.q4_1_gemv_q8_1_repacked((W41, W41), X), TypeError,
     "w must be Q4_1 GGUF bytes .* or q4_1_repack's Q4_1Repacked, got a tuple of 2"),
    (lambda: qgr.q4_1_gemv_q8_1_repacked(qgr.Q4_1Repacked(np.zeros((2, 3, 4), np.int32), np.zeros((2, 3), np.uint32)),
                                         X), TypeError, "w.codes must have dtype uint32, got int32"),
    (lambda: qgr.q4_1_gemv_q8_1_repacked(qgr.Q4_1Repacked(np.zeros((2, 3, 4), np.uint32), np.zeros((2, 4), np.uint32)),
                                         X), ValueError,
     r"w.scales must have shape \(rows=2, blocks=3\), got \(2, 4\)"),
    (lambda: qgr.q4_1_gemv_q8_1_repacked(qgr.q4_1_repack(cuda.to_device(W41)), X), TypeError,
     "w.codes, w.scales, x must all be NumPy arrays or all be device arrays"),
    (lambda: qgr.q4_1_gemv_q8_1_repacked(W41, X, out=np.zeros(3, np.float32)), ValueError,
     r"out must have shape \(rows=2,\), got \(3,\)"),
    (lambda: qgr.q4_1_gemv_q8_1_small_batch(W41, np.zeros((17, 96), np.float32)), ValueError,
     "x must have at most 16 tokens .* got shape \\(17, 96\\)"),
    (lambda: qgr.q4_1_gemv_q8_1_small_batch(W41, np.zeros((2, 64), np.float32)), ValueError,
     r"x must have shape \(T=any, K=96\), got \(2, 64\)"),
    (lambda: qgr.q4_1_gemv_q8_1_small_batch(W41, np.zeros((2, 96), np.float32), out=np.zeros(2, np.float32)),
     ValueError, r"out must have 2 dimensions \(T=2, rows=2\)"),
    (lambda: qgr.q4_1_gemv_q8_1_small_batch(W41, np.zeros((2, 96), np.float64)), TypeError,
     "x must have dtype float32, got float64"),
])
def test_bad_arguments_of_the_repacked_rungs_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------------
# The wide rungs: one launch, 16-byte loads
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES + WIDE_SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
def test_wide_q4_1_rung_equals_the_dp4a_rung_bit_for_bit(shape, rng_seed):
    """Its blocks of threads quantize x themselves, in the order of the q8_1 kernel's butterfly, and each lane
    adds its blocks in the dp4a rung's order: the same bits, from the GGUF bytes and from weights repacked once;
    and the dp4a rung's reference within float32's error."""
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "q4_1", *shape), activations(rng, shape[1])
    y = qgw.q4_1_gemv_q8_1_wide(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, "q4_1", name="q4_1_gemv_q8_1_wide", seed=seed)
    np.testing.assert_array_equal(y, qg.q4_1_gemv_q8_1_dp4a(w, x))
    np.testing.assert_array_equal(qgw.q4_1_gemv_q8_1_wide(qgr.q4_1_repack(w), x), y)


@pytest.mark.parametrize("shape", SHAPES + WIDE_SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
def test_wide_q8_0_rung_matches_w_times_the_quantized_activations(shape, rng_seed):
    """Every code of Q8_0 (the raw bytes of the last row reach -128) against the q8_1 x, from the GGUF bytes and
    from weights repacked once."""
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "q8_0", *shape), activations(rng, shape[1])
    y = qgw.q8_0_gemv_q8_1_wide(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, "q8_0", name="q8_0_gemv_q8_1_wide", seed=seed)
    np.testing.assert_array_equal(qgw.q8_0_gemv_q8_1_wide(qgw.q8_0_repack(w), x), y)


def test_q8_0_repack_splits_each_block_into_its_codes_and_its_scale(rng_seed):
    rng, _ = rng_seed
    w = gguf_weights(rng, "q8_0", 3, 5 * 32)
    codes, scales = qgw.q8_0_repack(w)
    assert codes.dtype == np.uint32 and scales.dtype == np.uint16 and codes.shape == (3, 5, 8)
    assert scales.shape == (3, 5) and codes.flags.c_contiguous and scales.flags.c_contiguous
    np.testing.assert_array_equal(codes.view(np.uint8).reshape(3, 5, 32), w[..., 2:])
    np.testing.assert_array_equal(scales, w[..., :2].copy().view(np.uint16)[..., 0])
    on_device = qgw.q8_0_repack(cuda.to_device(w))
    assert isinstance(on_device, qgw.Q8_0Repacked) and hasattr(on_device.codes, "copy_to_host")
    np.testing.assert_array_equal(on_device.codes.copy_to_host(), codes)
    np.testing.assert_array_equal(on_device.scales.copy_to_host(), scales)


W80 = np.zeros((2, 3, 34), np.uint8)


@pytest.mark.parametrize("call, error, words", [
    (lambda: qgw.q4_1_gemv_q8_1_wide(np.zeros((1, qgw.WIDE_MAX_K // 32 + 1, 20), np.uint8),
                                     np.zeros(qgw.WIDE_MAX_K + 32, np.float32)), ValueError,
     f"x must have K at most {qgw.WIDE_MAX_K} for q4_1_gemv_q8_1_wide .* q4_1_gemv_q8_1_repacked takes any K"),
    (lambda: qgw.q8_0_gemv_q8_1_wide(np.zeros((1, qgw.WIDE_MAX_K // 32 + 1, 34), np.uint8),
                                     np.zeros(qgw.WIDE_MAX_K + 32, np.float32)), ValueError,
     f"x must have K at most {qgw.WIDE_MAX_K} for q8_0_gemv_q8_1_wide .* q8_0_gemv_warp_per_row takes any K"),
    (lambda: qgw.q8_0_gemv_q8_1_wide(W41, X), ValueError,
     r"w must have shape \(rows=any, blocks=any, q8_0_block_bytes=34\), got \(2, 3, 20\)"),
    (lambda: qgw.q8_0_gemv_q8_1_wide(qgr.q4_1_repack(W41), X), TypeError,
     "w must be Q8_0 GGUF bytes .* or q8_0_repack's Q8_0Repacked, got a Q4_1Repacked of 2"),
    (lambda: qgw.q8_0_gemv_q8_1_wide(qgw.Q8_0Repacked(np.zeros((2, 3, 8), np.uint32), np.zeros((2, 3), np.float16)),
                                     X), TypeError, "w.scales must have dtype uint16, got float16"),
    (lambda: qgw.q4_1_gemv_q8_1_wide(W41, X[:64]), ValueError, r"x must have shape \(K=96,\), got \(64,\)"),
    (lambda: qgw.q8_0_gemv_q8_1_wide(W80, X, out=np.zeros(3, np.float32)), ValueError,
     r"out must have shape \(rows=2,\), got \(3,\)"),
    (lambda: qgw.q8_0_gemv_q8_1_wide(qgw.q8_0_repack(cuda.to_device(W80)), X), TypeError,
     "w.codes, w.scales, x must all be NumPy arrays or all be device arrays"),
])
def test_bad_arguments_of_the_wide_rungs_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# The persistent rungs besides: 70 rows over 2 blocks of 32 warps (a warp with two rows, most with one), a row of
# one step (128 blocks) and one block more; K = 32 x 33 with N = 1 (one warp works, the others
# only quantize x).
PERSISTENT_SHAPES = [(70, 96), (3, 129 * 32), (1, 33 * 32)]


@pytest.mark.parametrize("shape", SHAPES + PERSISTENT_SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
def test_persistent_q4_1_rung_equals_the_dp4a_rung_bit_for_bit(shape, rng_seed):
    """Each block of threads quantizes x as the q8_1 kernel does, and each lane adds its blocks in the dp4a rung's
    order: the same bits on the simulator, from the GGUF bytes and from weights repacked once, on any grid."""
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "q4_1", *shape), activations(rng, shape[1])
    y = qgp.q4_1_gemv_q8_1_persistent(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, "q4_1", name="q4_1_gemv_q8_1_persistent", seed=seed)
    np.testing.assert_array_equal(y, qg.q4_1_gemv_q8_1_dp4a(w, x))
    np.testing.assert_array_equal(qgp.q4_1_gemv_q8_1_persistent(qgr.q4_1_repack(w), x, grid=3), y)


@pytest.mark.parametrize("fmt", ["q4_1", "int4_g128"])
def test_the_persistent_kernel_s_prefetch_switch_keeps_its_bits(fmt, rng_seed):
    """``_build(prefetch=True)``, which the docstring measured and left out of the rungs (W's first loads before the
    prologue), computes the rung's bits, so its timings compare like with like; with a zero block of x."""
    rng, seed = rng_seed
    n, k = 2, 9 * 128
    w, x = gguf_weights(rng, fmt, n, k), activations(rng, k)
    x[128:160] = 0.0
    launch = {"q4_1": qgp.q4_1_gemv_q8_1_persistent, "int4_g128": qgp.int4_g128_gemv_q8_1_persistent}[fmt]
    np.testing.assert_array_equal(launch(w, x, kernel=qgp._build(fmt, prefetch=True)), launch(w, x),
                                  err_msg=f"{fmt}, seed {seed}")


@pytest.mark.parametrize("shape", SHAPES + PERSISTENT_SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
def test_persistent_q4_0_rung_matches_w_times_the_quantized_activations(shape, rng_seed):
    """Every Q4_0 code (the raw bytes of the last row) against the q8_1 x, from the GGUF bytes and repacked."""
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "q4_0", *shape), activations(rng, shape[1])
    y = qgp.q4_0_gemv_q8_1_persistent(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, "q4_0", name="q4_0_gemv_q8_1_persistent", seed=seed)
    np.testing.assert_array_equal(qgp.q4_0_gemv_q8_1_persistent(qgp.q4_0_repack(w), x, grid=1), y)


def test_persistent_q4_0_rung_reads_the_nibbles_in_gguf_order():
    """Position-coded weights: code j of every block is j % 16 (low nibbles codes 0-15, high 16-31), d = 1, and x
    one-hot on position p: y is d (q_p - 8) x_p, so a kernel that pairs the nibbles with the wrong activations
    gives another code's value."""
    blocks = 2
    w = np.zeros((1, blocks, 18), np.uint8)
    w[..., :2] = np.array([1.0], "<f2").view(np.uint8)
    w[..., 2:] = (np.arange(16) % 16) | ((np.arange(16, 32) % 16) << 4)
    for p in (0, 5, 17, 31, 32 + 20):
        x = np.zeros(32 * blocks, np.float32)
        x[p] = 1.0
        y = qgp.q4_0_gemv_q8_1_persistent(w, x)
        assert y[0] == np.float32((p % 32) % 16 - 8), (p, y)


# int4_g128: one group, 5 rows of one group, 70 rows of 2 groups, and 3 rows of a step (128 blocks) and a group more.
INT4_SHAPES = [(1, 128), (5, 128), (70, 256), (3, 33 * 128)]


def as_q4_0(w):
    """int4_g128 bytes (N, groups, 66) as Q4_0 blocks (N, 4 groups, 18): each run of 16 bytes with its group's d."""
    n, groups, _ = w.shape
    blocks = np.empty((n, groups, 4, 18), np.uint8)
    blocks[..., :2] = w[:, :, None, :2]
    blocks[..., 2:] = w[..., 2:].reshape(n, groups, 4, 16)
    return blocks.reshape(n, 4 * groups, 18)


@pytest.mark.parametrize("shape", INT4_SHAPES, ids=lambda s: f"N{s[0]}_K{s[1]}")
def test_persistent_int4_g128_rung_matches_w_times_the_quantized_activations(shape, rng_seed):
    """Every code (the raw bytes of the last row) against the q8_1 x, from the bytes and repacked; and the Q4_0
    rung's bits on the same codes with each group's d written into its 4 blocks: each group's scale, loaded by one
    lane and shuffled, reaches the 4 lanes of its blocks."""
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "int4_g128", *shape), activations(rng, shape[1])
    y = qgp.int4_g128_gemv_q8_1_persistent(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, "int4_g128", name="int4_g128_gemv_q8_1_persistent", seed=seed)
    np.testing.assert_array_equal(qgp.int4_g128_gemv_q8_1_persistent(qgp.int4_g128_repack(w), x, grid=3), y)
    np.testing.assert_array_equal(qgp.q4_0_gemv_q8_1_persistent(as_q4_0(w), x), y)


def test_persistent_int4_g128_rung_reads_each_group_s_scale_and_the_nibbles_in_order():
    """Position-coded: code j of every block of 32 is j % 16, group g's d is 2^g, x one-hot on position p: y is
    2^(p // 128) ((p % 32) % 16 - 8), so the wrong nibble order or another group's (or block's) scale gives another
    value."""
    groups = 3
    w = np.zeros((1, groups, 66), np.uint8)
    w[0, :, :2] = (2.0 ** np.arange(groups)).astype("<f2").reshape(groups, 1).view(np.uint8)
    w[..., 2:] = np.tile((np.arange(16) % 16) | ((np.arange(16, 32) % 16) << 4), 4)
    for p in (0, 5, 17, 31, 32 + 20, 128 + 3, 128 + 96 + 30, 256 + 64 + 18):
        x = np.zeros(128 * groups, np.float32)
        x[p] = 1.0
        y = qgp.int4_g128_gemv_q8_1_persistent(w, x)
        assert y[0] == np.float32(2.0 ** (p // 128) * ((p % 32) % 16 - 8)), (p, y)


def test_int4_g128_repack_splits_each_group_into_four_blocks_of_codes_and_its_scale(rng_seed):
    rng, _ = rng_seed
    w = gguf_weights(rng, "int4_g128", 3, 2 * 128)
    codes, scales = qgp.int4_g128_repack(w)
    assert codes.dtype == np.uint32 and scales.dtype == np.uint16 and codes.shape == (3, 8, 4)
    assert scales.shape == (3, 2) and codes.flags.c_contiguous and scales.flags.c_contiguous
    np.testing.assert_array_equal(codes.view(np.uint8).reshape(3, 2, 64), w[..., 2:])
    np.testing.assert_array_equal(scales, w[..., :2].copy().view(np.uint16)[..., 0])
    on_device = qgp.int4_g128_repack(cuda.to_device(w))
    assert isinstance(on_device, qgp.Int4G128Repacked)
    np.testing.assert_array_equal(on_device.scales.copy_to_host(), scales)


def test_q4_0_repack_splits_each_block_into_its_codes_and_its_scale(rng_seed):
    rng, _ = rng_seed
    w = gguf_weights(rng, "q4_0", 3, 5 * 32)
    codes, scales = qgp.q4_0_repack(w)
    assert codes.dtype == np.uint32 and scales.dtype == np.uint16 and codes.shape == (3, 5, 4)
    assert scales.shape == (3, 5) and codes.flags.c_contiguous and scales.flags.c_contiguous
    np.testing.assert_array_equal(codes.view(np.uint8).reshape(3, 5, 16), w[..., 2:])
    np.testing.assert_array_equal(scales, w[..., :2].copy().view(np.uint16)[..., 0])
    on_device = qgp.q4_0_repack(cuda.to_device(w))
    assert isinstance(on_device, qgp.Q4_0Repacked)
    np.testing.assert_array_equal(on_device.codes.copy_to_host(), codes)


W40 = np.zeros((2, 3, 18), np.uint8)


@pytest.mark.parametrize("call, error, words", [
    (lambda: qgp.q4_1_gemv_q8_1_persistent(np.zeros((1, qgp.PERSISTENT_MAX_K // 32 + 1, 20), np.uint8),
                                           np.zeros(qgp.PERSISTENT_MAX_K + 32, np.float32)), ValueError,
     f"x must have K at most {qgp.PERSISTENT_MAX_K} for q4_1_gemv_q8_1_persistent .* q4_1_gemv_q8_1_repacked takes"),
    (lambda: qgp.q4_0_gemv_q8_1_persistent(W41, X), ValueError,
     r"w must have shape \(rows=any, blocks=any, q4_0_block_bytes=18\), got \(2, 3, 20\)"),
    (lambda: qgp.q4_0_gemv_q8_1_persistent(qgr.q4_1_repack(W41), X), TypeError,
     "w must be Q4_0 GGUF bytes .* or q4_0_repack's Q4_0Repacked, got a Q4_1Repacked of 2"),
    (lambda: qgp.q4_0_gemv_q8_1_persistent(qgp.Q4_0Repacked(np.zeros((2, 3, 4), np.uint32),
                                                            np.zeros((2, 3), np.float16)), X), TypeError,
     "w.scales must have dtype uint16, got float16"),
    (lambda: qgp.q4_1_gemv_q8_1_persistent(W41, X, grid=0), ValueError, "grid must be"),
    (lambda: qgp.q4_0_gemv_q8_1_persistent(W40, X, out=np.zeros(3, np.float32)), ValueError,
     r"out must have shape \(rows=2,\), got \(3,\)"),
    (lambda: qgp.int4_g128_gemv_q8_1_persistent(W40, X), ValueError,
     r"w must have shape \(rows=any, groups=any, int4_g128_block_bytes=66\), got \(2, 3, 18\)"),
    (lambda: qgp.int4_g128_gemv_q8_1_persistent(np.zeros((2, 1, 66), np.uint8), X), ValueError,
     r"x must have shape \(K=128,\), got \(96,\)"),
    (lambda: qgp.int4_g128_gemv_q8_1_persistent(qgp.q4_0_repack(W40), X), TypeError,
     "w must be int4_g128 bytes .* or int4_g128_repack's Int4G128Repacked, got a Q4_0Repacked of 2"),
    (lambda: qgp.int4_g128_gemv_q8_1_persistent(qgp.Int4G128Repacked(np.zeros((2, 3, 4), np.uint32),
                                                                      np.zeros((2, 1), np.uint16)), X), ValueError,
     "w.codes must have a multiple of 4 blocks of 32 .groups of 128., got 3"),
    (lambda: qgp.int4_g128_gemv_q8_1_persistent(qgp.Int4G128Repacked(np.zeros((2, 4, 4), np.uint32),
                                                                      np.zeros((2, 4), np.uint16)), X), ValueError,
     r"w.scales must have shape \(rows=2, groups=1\), got \(2, 4\)"),
])
def test_bad_arguments_of_the_persistent_rungs_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# The prequantized rungs: the persistent rungs' shapes and int4_g128's.
PREQUANTIZED = {"q4_1": (qgp.q4_1_gemv_q8_1_persistent, qpq.q4_1_gemv_q8_1_prequantized, qgr.q4_1_repack),
                "q4_0": (qgp.q4_0_gemv_q8_1_persistent, qpq.q4_0_gemv_q8_1_prequantized, qgp.q4_0_repack),
                "int4_g128": (qgp.int4_g128_gemv_q8_1_persistent, qpq.int4_g128_gemv_q8_1_prequantized,
                              qgp.int4_g128_repack)}
# Q8_0's prequantized rung against the wide rung (Q8_0 has no persistent rung): the same order of sums (a lane's
# blocks l, l + 32, ...), the wide rung holding K to WIDE_MAX_K.
Q8_0_SHAPES = [(1, 32), (37, 96), (70, 32 * 67), (33, 32 * 130)]


@pytest.mark.parametrize("fmt, shape", [(fmt, shape) for fmt in PREQUANTIZED
                                        for shape in (INT4_SHAPES[1:] if fmt == "int4_g128" else PERSISTENT_SHAPES)],
                         ids=lambda v: v if isinstance(v, str) else f"N{v[0]}_K{v[1]}")
def test_prequantized_rungs_equal_the_persistent_rungs_bit_for_bit(fmt, shape, rng_seed):
    """x's q8_1 blocks read from global memory where the persistent rungs read them from shared memory, the same
    sums in the same order: the same bits on the simulator, from a float32 x (quantized first) and from x's q8_1
    blocks, from the GGUF bytes and from weights repacked once, on any grid."""
    rng, seed = rng_seed
    persistent, prequantized, repack = PREQUANTIZED[fmt]
    w, x = gguf_weights(rng, fmt, *shape), activations(rng, shape[1])
    y = prequantized(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, fmt, name=f"{fmt}_gemv_q8_1_prequantized", seed=seed)
    np.testing.assert_array_equal(y, persistent(w, x), err_msg=f"seed {seed}")
    np.testing.assert_array_equal(prequantized(repack(w), qpq.quantize_activations(x), grid=3), y,
                                  err_msg=f"seed {seed}")


@pytest.mark.parametrize("shape", Q8_0_SHAPES, ids=lambda v: f"N{v[0]}_K{v[1]}")
def test_q8_0_prequantized_rung_equals_the_wide_rung_bit_for_bit(shape, rng_seed):
    """Q8_0 on x's q8_1 blocks: the reference's product, the wide rung's bits (it quantizes x in shared memory to
    the same blocks), from a float32 x and from its blocks, from the GGUF bytes and from ``q8_0_repack``'s layout."""
    rng, seed = rng_seed
    w, x = gguf_weights(rng, "q8_0", *shape), activations(rng, shape[1])
    y = qpq.q8_0_gemv_q8_1_prequantized(w, x, out=poison(np.empty(shape[0], np.float32)))
    check_q8_1(y, w, x, "q8_0", name="q8_0_gemv_q8_1_prequantized", seed=seed)
    np.testing.assert_array_equal(y, qgw.q8_0_gemv_q8_1_wide(w, x), err_msg=f"seed {seed}")
    np.testing.assert_array_equal(qpq.q8_0_gemv_q8_1_prequantized(qgw.q8_0_repack(w), qpq.quantize_activations(x),
                                                                  grid=3), y, err_msg=f"seed {seed}")


def test_q8_0_prequantized_rung_pairs_each_code_word_with_its_own():
    """Position-coded: W's code j of block b is ((j + 3 b) % 32) - 16 (d = 1), x one-hot on position (7 b) % 32 of
    block b with value (b + 1)^2 (code 127, scale (b + 1)^2 / 127): y = sum over b of ((10 b) % 32 - 16) (b + 1)^2. A word
    of W paired with another word of x, a byte order reversed, or another block's scale gives another number; and
    the sums of x, which Q8_0 never reads, can be anything."""
    blocks = 9
    w = np.zeros((1, blocks, 34), np.uint8)
    w[..., :2] = np.array([1.0], "<f2").view(np.uint8)
    for b in range(blocks):
        w[0, b, 2:] = (((np.arange(32) + 3 * b) % 32) - 16).astype(np.int8).view(np.uint8)
    x = np.zeros(32 * blocks, np.float32)
    for b in range(blocks):
        x[32 * b + (7 * b) % 32] = (b + 1) ** 2
    terms = [((10 * b) % 32 - 16) * (b + 1) ** 2 for b in range(blocks)]
    xq = qpq.quantize_activations(x)
    for given in (xq, xq._replace(sums=np.full(blocks, np.nan, np.float32))):
        y = qpq.q8_0_gemv_q8_1_prequantized(w, given)[0]
        assert abs(y - sum(terms)) <= 1e-5 * sum(map(abs, terms)), (y, sum(terms))


def test_quantize_activations_writes_reference_q8_1_blocks(rng_seed):
    """Codes, scales and sums as ``reference.quantize_q8_1`` gives them (a block of zeros first), 4 codes a word."""
    rng, seed = rng_seed
    x = activations(rng, 5 * 32)
    x[40] = 1e30                                          # a block whose amax is far above the others
    codes, scales, sums = qpq.quantize_activations(x)
    want_codes, want_scales, want_sums = reference.quantize_q8_1(x)
    np.testing.assert_array_equal(codes.view(np.int8), want_codes, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(scales, want_scales.astype(np.float32))
    # The warp's butterfly adds 32 float32 numbers in 5 rounds: each rounds once, so a block's sum lies within
    # 5 units of float32 rounding of the sum of its magnitudes (a sum near zero by cancellation has no relative bound).
    magnitudes = np.abs(x.astype(np.float64)).reshape(-1, 32).sum(axis=1)
    assert np.all(np.abs(sums - want_sums) <= 5 * 2.0 ** -24 * magnitudes), f"seed {seed}"
    assert codes.shape == (40,) and codes.dtype == np.uint32 and scales[0] == 0.0


def test_prequantized_rung_reads_each_block_of_x_with_its_own_scale_and_sum():
    """Position-coded x: block b of x is one-hot on position (5 b) % 32 with value b + 1, so its scale is
    (b + 1) / 127 and its sum b + 1; W's codes are j % 16 (Q4_1, d = 1, m = 1000): y = sum over b of
    ((5 b) % 32 % 16) (b + 1) + 1000 (b + 1): a block's codes paired with another block's scale or sum, or the
    nibbles in another order, give another number."""
    blocks = 6
    w = np.zeros((1, blocks, 20), np.uint8)
    w[..., :4] = np.array([1.0, 1000.0], "<f2").view(np.uint8)
    w[..., 4:] = (np.arange(16) % 16) | ((np.arange(16, 32) % 16) << 4)
    x = np.zeros(32 * blocks, np.float32)
    for b in range(blocks):
        x[32 * b + (5 * b) % 32] = b + 1
    want = sum(((5 * b) % 32 % 16) * (b + 1) + 1000 * (b + 1) for b in range(blocks))
    assert qpq.q4_1_gemv_q8_1_prequantized(w, qpq.quantize_activations(x))[0] == np.float32(want)


XQ = qpq.quantize_activations(np.zeros(96, np.float32))


@pytest.mark.parametrize("call, error, words", [
    (lambda: qpq.q4_1_gemv_q8_1_prequantized(W41, XQ._replace(codes=np.zeros(23, np.uint32))), ValueError,
     r"x.codes must have shape \(code_words=24,\), got \(23,\)"),
    (lambda: qpq.q4_1_gemv_q8_1_prequantized(W41, XQ._replace(codes=np.zeros(24, np.int32))), TypeError,
     "x.codes must have dtype uint32, got int32"),
    (lambda: qpq.q4_0_gemv_q8_1_prequantized(W40, XQ._replace(scales=np.zeros(2, np.float32))), ValueError,
     r"x.scales must have shape \(blocks=3,\), got \(2,\)"),
    (lambda: qpq.q4_0_gemv_q8_1_prequantized(W40, XQ._replace(sums=np.zeros(3, np.float64))), TypeError,
     "x.sums must have dtype float32, got float64"),
    (lambda: qpq.q4_1_gemv_q8_1_prequantized(W41, XQ._replace(sums=cuda.to_device(XQ.sums))), TypeError,
     "x.codes, x.scales, x.sums must all be NumPy arrays or all be device arrays"),
    (lambda: qpq.q4_1_gemv_q8_1_prequantized(W41, tuple(XQ)), TypeError,
     "x must be a float32 .K,. array or Q8_1Activations, got a tuple of 3"),
    (lambda: qpq.q4_1_gemv_q8_1_prequantized(W41, X[:64]), ValueError, r"x must have shape \(K=96,\), got \(64,\)"),
    (lambda: qpq.q4_1_gemv_q8_1_prequantized(cuda.to_device(W41), XQ), TypeError,
     "w, x must all be NumPy arrays or all be device arrays"),
    (lambda: qpq.q4_0_gemv_q8_1_prequantized(W40, XQ, grid=0), ValueError, "grid must be"),
    (lambda: qpq.int4_g128_gemv_q8_1_prequantized(W40, XQ, out=np.zeros(2, np.float32)), ValueError,
     r"w must have shape \(rows=any, groups=any, int4_g128_block_bytes=66\), got \(2, 3, 18\)"),
    (lambda: qpq.q4_1_gemv_q8_1_prequantized(W41, X, out=np.zeros(3, np.float32)), ValueError,
     r"out must have shape \(rows=2,\), got \(3,\)"),
    (lambda: qpq.q8_0_gemv_q8_1_prequantized(W41, XQ), ValueError,
     r"w must have shape \(rows=any, blocks=any, q8_0_block_bytes=34\), got \(2, 3, 20\)"),
    (lambda: qpq.q8_0_gemv_q8_1_prequantized(qgr.q4_1_repack(W41), XQ), TypeError,
     "w must be Q8_0 GGUF bytes"),
    (lambda: qpq.q8_0_gemv_q8_1_prequantized(W80, XQ._replace(scales=np.zeros(4, np.float32))), ValueError,
     r"x.scales must have shape \(blocks=3,\), got \(4,\)"),
    (lambda: qpq.quantize_activations(np.zeros(40, np.float32)), ValueError,
     "x must have a multiple of 32 elements .q8_1 blocks of 32., got K = 40"),
])
def test_bad_arguments_of_the_prequantized_rungs_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------------
# Traffic and the byte model
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rung", list(LADDER))
def test_counted_traffic_equals_the_model(rung, rng_seed):
    rng, _ = rng_seed
    n, k = 5, 2 * model.FORMAT_BLOCKS[model.RUNG_FORMATS[rung]][0]      # two blocks (int4_g128: two groups)
    w, x = gguf_weights(rng, model.RUNG_FORMATS[rung], n, k), activations(rng, k)
    with count_traffic() as t:
        LADDER[rung](w, x)
    counted = {name: (t.load_bytes[name], t.store_bytes[name]) for name in t.load_bytes}
    assert counted == model.traffic(rung, n, k)
    assert t.global_bytes == getattr(model, f"bytes_{rung}")(n, k)


@pytest.mark.parametrize("n, k, tokens", [(5, 64, 3), (9, 32 * 3, 16), (4, 32, 2)])
def test_counted_traffic_of_a_batch_equals_the_model(n, k, tokens, rng_seed):
    """The batched rung on T tokens, its weights already repacked (what a model holds): W once whatever T, each
    token's q8_1 blocks once per warp of 4 rows."""
    rng, _ = rng_seed
    w = qgr.q4_1_repack(gguf_weights(rng, "q4_1", n, k))
    x = rng.standard_normal((tokens, k)).astype(np.float32)
    with count_traffic() as t:
        qgr.q4_1_gemv_q8_1_small_batch(w, x)
    counted = {name: (t.load_bytes[name], t.store_bytes[name]) for name in t.load_bytes}
    assert counted == model.traffic("q4_1_gemv_q8_1_small_batch", n, k, tokens)
    assert t.global_bytes == model.bytes_q4_1_gemv_q8_1_small_batch(n, k, tokens)
    assert counted["codes"][0] + counted["scales"][0] == model.weight_bytes("q4_1", n, k)


def test_byte_model_numbers():
    assert qg.BLOCK_BYTES == model.BLOCK_BYTES and qg.QK == model.QK
    assert [float(model.bits_per_weight(f)) for f in ("q8_0", "q4_0", "q4_1", "int4_g128")] == [8.5, 4.5, 5.0, 4.125]
    assert model.FORMAT_BLOCKS["int4_g128"] == (qgp.INT4_GROUP, qgp.INT4_G128_BLOCK_BYTES)
    assert (qgp.INT4_GROUP, qgp.INT4_G128_BLOCK_BYTES) == (reference.INT4_GROUP, reference.INT4_G128_BLOCK_BYTES)
    # int4_g128: 16 bytes of codes per 32 weights and 2 of scale per 128, read once; x once per block of threads
    assert model.bytes_int4_g128_gemv_q8_1_persistent(5, 256, grid=2) == 5 * 2 * 66 + 2 * 256 * 4 + 5 * 4
    assert model.weight_bytes("q4_0", 4096, 4096) == 4096 * 128 * 18
    # At decode W is nearly all of it: a 4096 x 4096 Q4_0 GEMV moves W, then 16 KiB of x and of y.
    assert model.compulsory_bytes("q4_0_gemv_warp_per_row", 4096, 4096) == 4096 * 128 * 18 + 2 * 4096 * 4
    assert (model.compulsory_bytes("q4_1_gemv_q8_1_dp4a", 2, 64)
            == model.compulsory_bytes("q4_1_gemv_warp_per_row", 2, 64) + 2 * (64 + 2 * 8))
    assert model.bytes_q8_0_gemv_warp_per_row(3, 64) == 3 * 2 * 34 + 3 * 64 * 4 + 3 * 4
    assert model.flops(3, 64) == 384 and model.flops(3, 64, 5) == 5 * 384 and model.dp4a_count(3, 64, 5) == 5 * 48
    # the repacked rungs: W once; the q8_1 blocks (64 + 2 * 8 bytes per token here) once per warp of 2 (4) rows
    assert model.bytes_q4_1_gemv_q8_1_repacked(5, 64) == (4 * 64 + 64 + 16) + 5 * 2 * 20 + 3 * 80 + 5 * 4
    assert (model.bytes_q4_1_gemv_q8_1_small_batch(5, 64, 3)
            == 3 * (4 * 64 + 64 + 16) + 5 * 2 * 20 + 2 * 3 * 80 + 3 * 5 * 4)
    assert model.traffic("q4_1_gemv_q8_1_small_batch", 5, 64) == model.traffic_q4_1_gemv_q8_1_small_batch(5, 64, 1)
    assert (model.compulsory_bytes("q4_1_gemv_q8_1_repacked", 2, 64)
            == model.compulsory_bytes("q4_1_gemv_q8_1_dp4a", 2, 64)
            == model.compulsory_bytes("q4_1_gemv_q8_1_small_batch", 2, 64))
    assert (model.compulsory_bytes("q4_1_gemv_q8_1_small_batch", 2, 64, 4)
            == model.weight_bytes("q4_1", 2, 64) + 4 * (4 * 64 + 4 * 2 + 2 * (64 + 2 * 8)))
    assert (model.ROWS_PER_WARP, model.BATCH_ROWS_PER_WARP) == (qgr.ROWS_PER_WARP, qgr.BATCH_ROWS_PER_WARP)
    # the wide rungs: W once, x once per 32 rows (2 blocks of threads here), y; no q8_1 array in global memory
    assert model.bytes_q4_1_gemv_q8_1_wide(33, 64) == 33 * 2 * 20 + 2 * 64 * 4 + 33 * 4
    assert model.bytes_q8_0_gemv_q8_1_wide(33, 64) == 33 * 2 * 34 + 2 * 64 * 4 + 33 * 4
    assert (model.compulsory_bytes("q4_1_gemv_q8_1_wide", 2, 64)
            == model.compulsory_bytes("q4_1_gemv_warp_per_row", 2, 64))
    assert (model.compulsory_bytes("q8_0_gemv_q8_1_wide", 2, 64)
            == model.compulsory_bytes("q8_0_gemv_warp_per_row", 2, 64))
    assert model.WIDE_ROWS_PER_BLOCK == qgw.WIDE_WARPS * qgw.WIDE_ROWS_PER_WARP
    assert set(model.RUNG_FORMATS) == set(LADDER) and model.BATCHED_RUNGS == ("q4_1_gemv_q8_1_small_batch",)
    # the prequantized rungs, timed on x's q8_1 blocks: W, the blocks (K bytes of codes, 8 a block) and y once
    assert model.compulsory_bytes("int4_g128_gemv_q8_1_prequantized", 5, 256) == 5 * 2 * 66 + (256 + 8 * 8) + 5 * 4
    # Q8_0's reads the blocks' codes and scales, never their sums
    assert model.compulsory_bytes("q8_0_gemv_q8_1_prequantized", 5, 256) == 5 * 8 * 34 + (256 + 8 * 4) + 5 * 4
    assert model.traffic("q8_0_gemv_q8_1_prequantized", 5, 256)["x_sum"][0] == 0
    assert model.PREQUANTIZED_RUNGS == tuple(name for name in LADDER if name.endswith("_prequantized"))
    for call, error in [(lambda: model.weight_bytes("q5_0", 1, 32), ValueError),
                        (lambda: model.weight_bytes("q4_0", 1, 48), ValueError),
                        (lambda: model.weight_bytes("int4_g128", 1, 96), ValueError),
                        (lambda: model.flops(-1, 32), ValueError), (lambda: model.flops(1.0, 32), TypeError),
                        (lambda: model.traffic("q4_1_gemv", 1, 32), ValueError),
                        (lambda: model.compulsory_bytes("gemv", 1, 32), ValueError),
                        (lambda: model.traffic("q4_1_gemv_q8_1_repacked", 1, 32, 2), ValueError),
                        (lambda: model.compulsory_bytes("q4_1_gemv_q8_1_small_batch", 1, 32, 0), ValueError),
                        (lambda: model.flops(1, 32, 1.0), TypeError)]:
        with pytest.raises(error):
            call()


# ------------------------------------------------------------------------------------------------
# PTX for sm_80 and sm_90
# ------------------------------------------------------------------------------------------------

def test_ptx_of_every_kernel(compiled):
    """Float32 arithmetic only, nothing in local memory; the warp-per-row rungs read bytes and decode their fp16
    scales by arithmetic (``half_from_bytes``: no cvt.f32.f16), the dp4a rung reads words, converts d and m with
    cvt.f32.f16 and multiplies with dp4a."""
    records = compiled()
    assert {(r["kernel"], r["cc"]) for r in records} == {(k, cc) for k in (*WARP_PER_ROW, "q8_1_quantize",
                                                                         "q8_0_quantize", "q4_1_gemv_q8_1_dp4a",
                                                                         *REPACKED, *WIDE, *PERSISTENT,
                                                                         *PREQUANTIZED_PTX)
                                                          for cc in ("sm_80", "sm_90")}
    for r in records:
        assert not r["local"] and not r["f64"], r
        if r["kernel"] in WARP_PER_ROW:
            assert r["fp16_conversions"] == 0 and r["byte_loads"] > 0 and r["dp4a"] == 0, r
        if r["kernel"] == "q4_1_gemv_q8_1_dp4a":
            assert r["dp4a"] >= 2 and r["fp16_conversions"] == 2 and r["byte_loads"] == 0 and r["word_loads"] > 0, r
        if r["kernel"] in REPACKED:
            assert r["byte_loads"] == 0 and r["dp4a"] >= REPACKED[r["kernel"]]["dp4a"], r
            assert r["wide_loads"] >= REPACKED[r["kernel"]]["wide_loads"], r
        if r["kernel"] in WIDE:
            assert r["byte_loads"] == 0 and r["dp4a"] >= WIDE[r["kernel"]]["dp4a"], r
            assert r["loads_16_bytes"] >= WIDE[r["kernel"]]["loads_16_bytes"], r
        if r["kernel"] in PERSISTENT:
            assert r["byte_loads"] == 0 and r["dp4a"] >= PERSISTENT[r["kernel"]]["dp4a"], r
            assert r["loads_16_bytes"] >= PERSISTENT[r["kernel"]]["loads_16_bytes"], r
        if r["kernel"] in PREQUANTIZED_PTX:
            assert r["byte_loads"] == 0 and r["dp4a"] >= PREQUANTIZED_PTX[r["kernel"]]["dp4a"], r
            assert r["loads_16_bytes"] >= PREQUANTIZED_PTX[r["kernel"]]["loads_16_bytes"], r


# At least: the repacked rung's chunk unrolled, 2 rows x 4 blocks x 8 dp4a and 2 rows x 4 blocks x 2 8-byte loads of
# codes plus 4 blocks x 4 of activation codes; the batched rung's token loop unrolled, 16 tokens x 4 rows x 8 dp4a,
# 4 rows x 2 loads of codes and 16 tokens x 4 of activation codes.
REPACKED = {"q4_1_gemv_q8_1_repacked": {"dp4a": 64, "wide_loads": 32},
            "q4_1_gemv_q8_1_small_batch": {"dp4a": 512, "wide_loads": 72}}
# At least: a chunk's arithmetic unrolled, 4 rows x 2 blocks (Q4_1; Q8_0: 1 block) x 8 dp4a, and its loads twice (the
# first chunk's, issued before x is quantized, and the next chunk's in the loop): 4 x 2 of 16 bytes each time for
# Q4_1, 4 x 1 x 2 for Q8_0.
WIDE = {"q4_1_gemv_q8_1_wide": {"dp4a": 64, "loads_16_bytes": 16},
        "q8_0_gemv_q8_1_wide": {"dp4a": 32, "loads_16_bytes": 16}}
# At least: a step unrolled, PERSISTENT_ROWS x PERSISTENT_BLOCKS_PER_LANE blocks x 8 dp4a, each block's codes in one
# 16-byte load.
PERSISTENT = {name: {"dp4a": 8 * qgp.PERSISTENT_ROWS * qgp.PERSISTENT_BLOCKS_PER_LANE,
                     "loads_16_bytes": qgp.PERSISTENT_ROWS * qgp.PERSISTENT_BLOCKS_PER_LANE}
              for name in ("q4_1_gemv_q8_1_persistent", "q4_0_gemv_q8_1_persistent", "int4_g128_gemv_q8_1_persistent")}
# At least: a step unrolled, PREQUANTIZED_BLOCKS_PER_LANE blocks x 8 dp4a, each block's codes in one 16-byte load and
# its activation codes in two.
# Q8_0: its 32 bytes of codes in two 16-byte loads.
PREQUANTIZED_PTX = {f"{fmt}_gemv_q8_1_prequantized": {"dp4a": 8 * qpq.PREQUANTIZED_BLOCKS_PER_LANE,
                                                 "loads_16_bytes": 3 * qpq.PREQUANTIZED_BLOCKS_PER_LANE}
                    for fmt in ("q4_1", "q4_0", "int4_g128")}
PREQUANTIZED_PTX["q8_0_gemv_q8_1_prequantized"] = {"dp4a": 8 * qpq.PREQUANTIZED_Q8_0_BLOCKS_PER_LANE,
                                                   "loads_16_bytes": 4 * qpq.PREQUANTIZED_Q8_0_BLOCKS_PER_LANE}
