"""Day 9's quantized GEMV (``kernels.quantized_gemv``) on the simulator, and its PTX.

Every rung against the GGUF references at awkward shapes (N not a multiple of the warps of a block, K = 32,
a row of 33 blocks so a lane takes two), over blocks of zeros, constant blocks, blocks at the extreme codes
and raw random bytes, into NaN-poisoned outputs; the q8_1 and Q8_0 quantize kernels, ``half_from_bytes`` and
``dp4a`` bit for bit; bad arguments; traffic = ``course.models.quantized``. A process without the simulator
compiles the kernels for sm_80 and sm_90 and reads their PTX (dp4a, the fp16 conversions, word loads). Sizes
stay small: the whole file runs in a few seconds of simulator time.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda

from course.checking import check, poison, random_inputs
from course.models import quantized as model
from course.traffic import count_traffic
from kernels import intrinsics
from kernels import quantized_gemv as qg
from kernels import reference
from kernels.launching import WARP, cdiv

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORMATS = {"q8_0": (reference.quantize_q8_0, reference.dequantize_q8_0),
           "q4_0": (reference.quantize_q4_0, reference.dequantize_q4_0),
           "q4_1": (reference.quantize_q4_1, reference.dequantize_q4_1)}
WARP_PER_ROW = {name: name.split("_gemv")[0] for name in qg.RUNGS if name.endswith("_warp_per_row")}
# (N, K): one row of one block; N not a multiple of GEMV_WARPS; a row of 33 blocks (lane 0 takes blocks 0 and 32).
SHAPES = [(1, 32), (5, 32), (9, 64), (2, 33 * 32)]


@pytest.fixture
def rng_seed():
    return random_inputs()


def gguf_weights(rng, fmt, n, k):
    """W (n, k) as GGUF bytes (n, k / 32, block bytes): blocks at three magnitudes, then the first blocks
    replaced by a block of zeros, a block of two values (the first and last codes), a constant block (Q4_1:
    d = 0); with two rows or more the last row is raw random bytes under random finite scales, so every code
    appears (Q8_0's -128 too, which quantizing never makes)."""
    weights = rng.standard_normal((n, k)) * rng.choice([1e-3, 1.0, 50.0], size=(n, 1))
    blocks = weights.reshape(-1, 32)
    specials = [np.zeros(32), np.where(np.arange(32) % 3 == 0, -6.0, 5.25), np.full(32, 0.75)]
    for b, block in enumerate(specials[:len(blocks)]):
        blocks[b] = block
    w = FORMATS[fmt][0](weights.astype(np.float32)).reshape(n, k // 32, -1)
    if n > 1:
        header = 4 if fmt == "q4_1" else 2
        w[-1] = rng.integers(0, 256, w[-1].shape, dtype=np.uint8)
        w[-1, :, :header] = rng.uniform(-2, 2, (k // 32, header // 2)).astype("<f2").view(np.uint8)
    return w


def activations(rng, k):
    """x (k,) float32, its first block zeros when there are several (q8_1: a block with d = 0)."""
    x = rng.standard_normal(k).astype(np.float32)
    if k > 32:
        x[:32] = 0.0
    return x


def warp_per_row_reference(fmt, w, x):
    return FORMATS[fmt][1](w.reshape(w.shape[0], -1)) @ x.astype(np.float64)


def dp4a_reference(w, x):
    """sum over blocks of d sum_j q_j x^_j + m sum_j x_j, x^ the q8_1 values of x: W x as the dp4a rung defines it."""
    codes, scales, sums = reference.quantize_q8_1(x)
    x_hat = (codes.reshape(-1, 32) * scales.astype(np.float64)[:, None]).reshape(-1)
    without_minimum = w.copy()
    without_minimum[..., 2:4] = 0                      # m = 0: the values are d q exactly
    minimums = w[..., 2:4].copy().view("<f2")[..., 0].astype(np.float64)
    return reference.dequantize_q4_1(without_minimum.reshape(w.shape[0], -1)) @ x_hat + minimums @ sums


# ------------------------------------------------------------------------------------------------
# Compiling for a GPU, in a subprocess started with the first test of this file
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from course.gpu_compile import COMPUTE_CAPABILITIES, ptx_for_targets
    from kernels import quantized_gemv as qg
    f32, u32, u8 = numba.float32[::1], numba.uint32[::1], numba.uint8[:, :, ::1]
    kernels = [
        ("q8_0_gemv_warp_per_row", qg.q8_0_gemv_warp_per_row_kernel, (u8, f32, f32)),
        ("q4_0_gemv_warp_per_row", qg.q4_0_gemv_warp_per_row_kernel, (u8, f32, f32)),
        ("q4_1_gemv_warp_per_row", qg.q4_1_gemv_warp_per_row_kernel, (u8, f32, f32)),
        ("q8_1_quantize", qg.q8_1_quantize_kernel, (f32, u32, f32, f32)),
        ("q8_0_quantize", qg.q8_0_quantize_kernel, (numba.float32[:, ::1], numba.int8[:, ::1], numba.float32[:, ::1])),
        ("q4_1_gemv_q8_1_dp4a", qg.q4_1_gemv_q8_1_dp4a_kernel, (numba.uint32[:, :, ::1], u32, f32, f32, f32)),
    ]
    for name, kernel, signature in kernels:
        for (major, minor), ptx in ptx_for_targets(kernel.py_func, signature, COMPUTE_CAPABILITIES).items():
            body = ptx[ptx.index(".entry"):]
            print(json.dumps({"kernel": name, "cc": f"sm_{major}{minor}", "local": ".local" in body,
                              "f64": ".f64" in body, "dp4a": body.count("dp4a.s32.s32"),
                              "fp16_conversions": body.count("cvt.f32.f16"), "byte_loads": body.count("ld.global.u8")
                              + body.count("ld.global.s8"), "word_loads": body.count("ld.global.u32")
                              + body.count("ld.global.b32")}), flush=True)
""")


@pytest.fixture(scope="module")
def compiled():
    """Compile the day's kernels for sm_80 and sm_90 in a fresh process without the simulator."""
    process = subprocess.Popen([sys.executable, "-c", COMPILE_PROGRAM], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "COURSE_DEVICE": "gpu",
                                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                               os.environ.get("PYTHONPATH")]))})
    records = []

    def wait():
        if not records:
            stdout, stderr = process.communicate(timeout=600)
            assert process.returncode == 0, stderr[-3000:]
            records.extend(json.loads(line) for line in stdout.splitlines())
        return records

    yield wait
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.fixture(scope="module", autouse=True)
def _start_compiling(request):
    if any(item.name.startswith("test_ptx") for item in request.session.items):
        request.getfixturevalue("compiled")


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
    check(y, dp4a_reference(w, x), name="q4_1_gemv_q8_1_dp4a", seed=seed)


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


@pytest.mark.parametrize("rung", list(qg.RUNGS))
def test_empty_shapes(rung, rng_seed):
    """No rows: an empty y, nothing launched. K = 0: zeros."""
    fmt = model.RUNG_FORMATS[rung]
    block = qg.BLOCK_BYTES[fmt]
    assert qg.RUNGS[rung](np.zeros((0, 2, block), np.uint8), np.ones(64, np.float32)).shape == (0,)
    y = qg.RUNGS[rung](np.zeros((3, 0, block), np.uint8), np.zeros(0, np.float32),
                       out=poison(np.empty(3, np.float32)))
    np.testing.assert_array_equal(y, np.zeros(3, np.float32))


@pytest.mark.parametrize("rung", list(qg.RUNGS))
def test_device_arrays_in_device_array_out(rung, rng_seed):
    rng, _ = rng_seed
    fmt = model.RUNG_FORMATS[rung]
    w, x = gguf_weights(rng, fmt, 3, 64), activations(rng, 64)
    y = qg.RUNGS[rung](cuda.to_device(w), cuda.to_device(x))
    assert hasattr(y, "copy_to_host")
    np.testing.assert_array_equal(y.copy_to_host(), qg.RUNGS[rung](w, x))


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
# Traffic and the byte model
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rung", list(qg.RUNGS))
def test_counted_traffic_equals_the_model(rung, rng_seed):
    rng, _ = rng_seed
    n, k = 5, 64
    w, x = gguf_weights(rng, model.RUNG_FORMATS[rung], n, k), activations(rng, k)
    with count_traffic() as t:
        qg.RUNGS[rung](w, x)
    counted = {name: (t.load_bytes[name], t.store_bytes[name]) for name in t.load_bytes}
    assert counted == model.traffic(rung, n, k)
    assert t.global_bytes == getattr(model, f"bytes_{rung}")(n, k)


def test_byte_model_numbers():
    assert qg.BLOCK_BYTES == model.BLOCK_BYTES and qg.QK == model.QK
    assert [float(model.bits_per_weight(f)) for f in ("q8_0", "q4_0", "q4_1")] == [8.5, 4.5, 5.0]
    assert model.weight_bytes("q4_0", 4096, 4096) == 4096 * 128 * 18
    # At decode W is nearly all of it: a 4096 x 4096 Q4_0 GEMV moves W, then 16 KiB of x and of y.
    assert model.compulsory_bytes("q4_0_gemv_warp_per_row", 4096, 4096) == 4096 * 128 * 18 + 2 * 4096 * 4
    assert (model.compulsory_bytes("q4_1_gemv_q8_1_dp4a", 2, 64)
            == model.compulsory_bytes("q4_1_gemv_warp_per_row", 2, 64) + 2 * (64 + 2 * 8))
    assert model.bytes_q8_0_gemv_warp_per_row(3, 64) == 3 * 2 * 34 + 3 * 64 * 4 + 3 * 4
    assert model.flops(3, 64) == 384
    for call, error in [(lambda: model.weight_bytes("q5_0", 1, 32), ValueError),
                        (lambda: model.weight_bytes("q4_0", 1, 48), ValueError),
                        (lambda: model.flops(-1, 32), ValueError), (lambda: model.flops(1.0, 32), TypeError),
                        (lambda: model.traffic("q4_1_gemv", 1, 32), ValueError),
                        (lambda: model.compulsory_bytes("gemv", 1, 32), ValueError)]:
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
                                                                         "q8_0_quantize", "q4_1_gemv_q8_1_dp4a")
                                                          for cc in ("sm_80", "sm_90")}
    for r in records:
        assert not r["local"] and not r["f64"], r
        if r["kernel"] in WARP_PER_ROW:
            assert r["fp16_conversions"] == 0 and r["byte_loads"] > 0 and r["dp4a"] == 0, r
        if r["kernel"] == "q4_1_gemv_q8_1_dp4a":
            assert r["dp4a"] >= 2 and r["fp16_conversions"] == 2 and r["byte_loads"] == 0 and r["word_loads"] > 0, r
