"""Day 9's W8A8 prefill GEMM (``kernels.quantized_gemm``) on the simulator, its int8 mma twin, and its PTX.

The twin of ``kernels.intrinsics.mma_m16n8k32_s8`` against a NumPy integer product over all 32 lanes (random and
extreme codes, a sum that wraps); both rungs exact in the integer sum where an int16 accumulator would overflow,
at awkward shapes into NaN-poisoned outputs, with scales that differ per token and per channel; the per-token
quantizer bit for bit against ``reference.quantize_int8``, halves included; bad arguments; traffic =
``course.models.quantized_gemm``. A process without the simulator compiles the kernels for sm_80 and sm_90 and
reads their PTX. Sizes stay small: the file runs in a few seconds of simulator time.
"""

import re
import shutil
import textwrap

import numpy as np
import pytest

from ptx_in_background import compile_fixtures
from numba import cuda

import course
from course.checking import check, poison, random_inputs
from course.models import quantized_gemm as model
from course.traffic import count_traffic
from kernels import quantized_gemm as qg
from kernels import reference
from kernels.intrinsics import mma_m16n8k32_s8

RUNGS = list(qg.RUNGS)
# (M, N, K): one token of one channel; two block rows, the second with 3 rows; two block columns, the second
# with 6 columns, two k steps.
SHAPES = [(1, 1, 32), (67, 21, 32), (5, 70, 64)]
# v3's 128 x 128 tiles: two block rows and columns, the second step of 64 codes half past K.
LARGE_SHAPE = (130, 129, 96)


@pytest.fixture
def rng_seed():
    return random_inputs()


def codes(rng, *shape):
    """Random int8 codes, -128 and 127 among them."""
    q = rng.integers(-128, 128, shape).astype(np.int8)
    q.flat[0], q.flat[-1] = -128, 127
    return q


# ------------------------------------------------------------------------------------------------
# Compiling for a GPU, in a subprocess started with the first test of this file
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from course.gpu_compile import COMPUTE_CAPABILITIES, ptx_for_targets
    from kernels import quantized_gemm as qg
    words, f32, y = numba.uint32[:, ::1], numba.float32[::1], numba.float32[:, ::1]
    pairs = numba.uint16[:, ::1]
    kernels = [("w8a8_gemm_v1_dp4a", qg.w8a8_gemm_v1_dp4a_kernel, (words, f32, words, f32, y)),
               ("w8a8_gemm_v2_tensor_cores", qg.w8a8_gemm_v2_tensor_cores_kernel, (words, f32, words, f32, y)),
               ("w8a8_gemm_v3_large_tiles", qg.w8a8_gemm_v3_large_tiles_kernel, (pairs, f32, pairs, f32, y)),
               ("quantize_per_token", qg.quantize_per_token_kernel, (y, numba.int8[:, ::1], f32))]
    for name, kernel, signature in kernels:
        bounds = kernel.targetoptions.get("launch_bounds")
        for (major, minor), ptx in ptx_for_targets(kernel.py_func, signature, COMPUTE_CAPABILITIES,
                                                   launch_bounds=bounds).items():
            body = ptx[ptx.index(".entry"):]
            print(json.dumps({"kernel": name, "cc": f"sm_{major}{minor}", "local": ".local" in body,
                              "f64": ".f64" in body, "dp4a": body.count("dp4a.s32.s32"),
                              "mma": body.count("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
                              "word_loads": body.count("ld.global.u32") + body.count("ld.global.b32"),
                              "ldmatrix": body.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                              "cp_async": body.count("cp.async.cg.shared.global"),
                              "waits": sorted(set(re.findall(r"cp\.async\.wait_group (\d+)", body))),
                              "barriers": len(re.findall(r"\bbar\.sync\b", body)),
                              "shared_bytes": sum(int(size) for size in re.findall(
                                  r"\.shared\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]", ptx)),
                              "ptx": ptx}), flush=True)
""")


compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM)


# ------------------------------------------------------------------------------------------------
# The int8 mma's simulator twin
# ------------------------------------------------------------------------------------------------

def mma_s8_fragments(A, B, C):
    """Each lane's fragments of A (16 x 32 int8), B (32 x 8 int8) and C (16 x 8 int32), laid out as PTX's
    mma.m16n8k32 lays its s8 operands: (a: 4 uint32 words of 4 codes, b: 2 words, c: 4 int32) per lane."""
    def word(run):
        return np.ascontiguousarray(run, np.int8).view(np.uint32)[0]

    a, b, c = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.int32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a[lane] = [word(A[g, 4 * t:4 * t + 4]), word(A[g + 8, 4 * t:4 * t + 4]),
                   word(A[g, 4 * t + 16:4 * t + 20]), word(A[g + 8, 4 * t + 16:4 * t + 20])]
        b[lane] = [word(B[4 * t:4 * t + 4, g]), word(B[4 * t + 16:4 * t + 20, g])]
        c[lane] = [C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]]
    return a, b, c


@cuda.jit
def mma_s8_probe(a, b, c, d, lanes):
    lane = cuda.laneid
    if lane >= lanes[0]:
        return
    d[lane, 0], d[lane, 1], d[lane, 2], d[lane, 3] = mma_m16n8k32_s8(
        a[lane, 0], a[lane, 1], a[lane, 2], a[lane, 3], b[lane, 0], b[lane, 1], c[lane, 0], c[lane, 1], c[lane, 2],
        c[lane, 3])


def run_mma(A, B, C):
    a, b, c = mma_s8_fragments(A, B, C)
    d = np.full((32, 4), -1, np.int32)
    mma_s8_probe[1, 32](a, b, c, d, np.array([32]))
    return d


def wrapped(x):
    return ((np.asarray(x, np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


@pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator twin")
@pytest.mark.parametrize("fill", ["random", "-128", "127", "-128 x 127"])
def test_mma_s8_twin_is_the_integer_product_of_the_warps_fragments(fill, rng_seed):
    """D = A B + C from the 32 lanes' fragments, each lane's D in the layout of its C, exact: the extreme codes
    give sums of 32 products of 2**14 (2**19), past what an int16 would hold."""
    rng, seed = rng_seed
    A, B = codes(rng, 16, 32), codes(rng, 32, 8)
    if fill != "random":
        low, high = (-128, -128) if fill == "-128" else (127, 127) if fill == "127" else (-128, 127)
        A, B = np.full((16, 32), low, np.int8), np.full((32, 8), high, np.int8)
    C = rng.integers(-2 ** 20, 2 ** 20, (16, 8)).astype(np.int32)
    want = A.astype(np.int64) @ B.astype(np.int64) + C
    _, _, want_fragments = mma_s8_fragments(A, B, wrapped(want))
    np.testing.assert_array_equal(run_mma(A, B, C), want_fragments, err_msg=f"seed {seed}")


@pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator twin")
def test_mma_s8_twin_places_every_element_and_wraps_like_int32():
    """A one-hot A and B find each fragment slot: D[i, j] = A[i, k] B[k, j] for the one k where both are set;
    and an accumulator near 2**31 wraps to negative as the register does without .satfinite."""
    for i, k, j in [(0, 0, 0), (9, 5, 3), (15, 31, 7), (8, 16, 1), (7, 19, 6)]:
        A, B = np.zeros((16, 32), np.int8), np.zeros((32, 8), np.int8)
        A[i, k], B[k, j] = -3, 5
        want = np.zeros((16, 8), np.int64)
        want[i, j] = -15
        _, _, want_fragments = mma_s8_fragments(A, B, want.astype(np.int32))
        np.testing.assert_array_equal(run_mma(A, B, np.zeros((16, 8), np.int32)), want_fragments)
    A, B = np.full((16, 32), -128, np.int8), np.full((32, 8), -128, np.int8)
    C = np.full((16, 8), 2 ** 31 - 2 ** 18, np.int32)             # plus 32 * 2**14 = 2**19: past int32
    d = run_mma(A, B, C)
    assert (d == -2 ** 31 + 2 ** 18).all()


# ------------------------------------------------------------------------------------------------
# The rungs
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rung", RUNGS)
def test_integer_sum_is_exact_at_the_extreme_codes(rung):
    """All -128 (and -128 against 127): sums of 64 products of 2**14, 2**20 in magnitude, far past int16's
    32767; with unit scales y is the int64 sum itself (exact in float32). Random codes too."""
    rng = np.random.default_rng(9)
    ones_m, ones_n = np.ones(3, np.float32), np.ones(5, np.float32)
    for a_q, w_q in [(np.full((3, 64), -128, np.int8), np.full((5, 64), -128, np.int8)),
                     (np.full((3, 64), -128, np.int8), np.full((5, 64), 127, np.int8)),
                     (codes(rng, 3, 64), codes(rng, 5, 64))]:
        y = qg.RUNGS[rung](a_q, ones_m, w_q, ones_n, out=poison(np.empty((3, 5), np.float32)))
        want = a_q.astype(np.int64) @ w_q.astype(np.int64).T
        np.testing.assert_array_equal(y, want.astype(np.float32))
        assert np.abs(want).max() > 2 ** 15
    assert (qg.RUNGS[rung](np.full((1, 64), -128, np.int8), np.ones(1, np.float32), np.full((1, 64), -128, np.int8),
                           np.ones(1, np.float32)) == 64 * 2 ** 14).all()


@pytest.mark.parametrize("rung, shape", [(rung, shape) for rung in RUNGS for shape in SHAPES]
                         + [("w8a8_gemm_v3_large_tiles", LARGE_SHAPE)], ids=lambda x: "M{}_N{}_K{}".format(*x)
                         if isinstance(x, tuple) else x)
def test_rungs_match_the_reference_at_awkward_shapes(rung, shape, rng_seed):
    rng, seed = rng_seed
    m, n, k = shape
    a_q, w_q = codes(rng, m, k), codes(rng, n, k)
    sa, sw = rng.uniform(1e-3, 1e-1, m).astype(np.float32), rng.uniform(1e-3, 1e-2, n).astype(np.float32)
    y = qg.RUNGS[rung](a_q, sa, w_q, sw, out=poison(np.empty((m, n), np.float32)))
    check(y, reference.w8a8_matmul(a_q, sa, w_q, sw), name=rung, seed=seed)


@pytest.mark.parametrize("rung", RUNGS)
def test_epilogue_scales_rows_by_token_and_columns_by_channel(rung):
    """Codes of 1: every sum is K, so y[m, n] = K sa[m] sw[n], exact in powers of two; a square y with a scale per
    row and per column unlike each other catches sa and sw swapped, or one of them applied twice."""
    m = n = 6
    sa = (2.0 ** np.arange(m)).astype(np.float32)
    sw = (3 * 2.0 ** -np.arange(n, 2 * n)).astype(np.float32)
    y = qg.RUNGS[rung](np.ones((m, 32), np.int8), sa, np.ones((n, 32), np.int8), sw)
    np.testing.assert_array_equal(y, (32 * np.outer(sa.astype(np.float64), sw)).astype(np.float32))


@pytest.mark.parametrize("rung", RUNGS)
def test_empty_shapes(rung):
    """No tokens: an empty y, nothing launched. K = 0: zeros."""
    y = qg.RUNGS[rung](np.zeros((0, 32), np.int8), np.ones(0, np.float32), np.zeros((3, 32), np.int8),
                       np.ones(3, np.float32))
    assert y.shape == (0, 3)
    y = qg.RUNGS[rung](np.zeros((2, 0), np.int8), np.ones(2, np.float32), np.zeros((3, 0), np.int8),
                       np.ones(3, np.float32), out=poison(np.empty((2, 3), np.float32)))
    np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))


def test_device_arrays_in_device_array_out(rng_seed):
    rng, _ = rng_seed
    args = (codes(rng, 3, 32), np.ones(3, np.float32), codes(rng, 4, 32), np.ones(4, np.float32))
    for rung in RUNGS:
        y = qg.RUNGS[rung](*(cuda.to_device(a) for a in args))
        assert hasattr(y, "copy_to_host")
        np.testing.assert_array_equal(y.copy_to_host(), qg.RUNGS[rung](*args))


A8, W8, S3, S2 = np.zeros((3, 64), np.int8), np.zeros((2, 64), np.int8), np.ones(3, np.float32), np.ones(2, np.float32)


@pytest.mark.parametrize("call, error, words", [
    (lambda: qg.w8a8_gemm_v1_dp4a(A8.astype(np.int16), S3, W8, S2), TypeError, "a_q must have dtype int8, got int16"),
    (lambda: qg.w8a8_gemm_v2_tensor_cores(A8, S2, W8, S2), ValueError,
     r"sa must have shape \(M=3,\), got \(2,\) \(M is 2, not 3\)"),
    (lambda: qg.w8a8_gemm_v1_dp4a(A8, S3, W8[:, :32], S2), ValueError,
     r"w_q must have shape \(N=any, K=64\), got \(2, 32\) \(K is 32, not 64\)"),
    (lambda: qg.w8a8_gemm_v2_tensor_cores(A8, S3, W8, S2.astype(np.float64)), TypeError,
     "sw must have dtype float32, got float64"),
    (lambda: qg.w8a8_gemm_v1_dp4a(A8[:, :48].copy(), S3, W8[:, :48].copy(), S2), ValueError,
     r"a_q must have K \(its last dimension\) a multiple of 32, got shape \(3, 48\)"),
    (lambda: qg.w8a8_gemm_v2_tensor_cores(np.zeros((1, 131104), np.int8), S3[:1], np.zeros((1, 131104), np.int8),
                                          S2[:1]), ValueError, "a_q must have K at most 131071"),
    (lambda: qg.w8a8_gemm_v1_dp4a(A8, S3, W8, S2, out=np.zeros((2, 3), np.float32)), ValueError,
     r"out must have shape \(M=3, N=2\)"),
    (lambda: qg.w8a8_gemm_v2_tensor_cores(A8, S3, cuda.to_device(W8), S2), TypeError,
     "a_q, sa, w_q, sw must all be NumPy arrays or all be device arrays"),
    (lambda: qg.w8a8_gemm_v1_dp4a(np.zeros((64, 3), np.int8).T, S3, W8, S2), ValueError, "a_q must be C-contiguous"),
    (lambda: qg.quantize_per_token(A8), TypeError, "x must have dtype float32, got int8"),
    (lambda: reference.w8a8_matmul(A8, S2, W8, S2), ValueError, r"sa must have shape \(3,\)"),
    (lambda: reference.w8a8_matmul(A8, S3, W8.astype(np.int32), S2), TypeError, "w_q must have dtype int8"),
])
def test_bad_arguments_are_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------------
# The per-token quantizer
# ------------------------------------------------------------------------------------------------

def test_quantize_per_token_matches_the_reference_bit_for_bit(rng_seed):
    """Rows at four magnitudes, a row of zeros, a row with a subnormal amax; then rows of halves: amax 127
    (scale 1, exact halves 0.5 ... 126.5 rounded to even) and amax a random float32, with x = (j + 1/2) sa
    rounded to float32, whose float32 quotient by sa mostly lands on the half while the exact one lies off it."""
    rng, seed = rng_seed
    x = rng.standard_normal((10, 70)) * np.array([1e-3, 1, 30, 1e4, 1, 1, 1, 1, 1, 1])[:, None]
    x[4] = 0.0
    x[5] = rng.uniform(-1, 1, 70) * 1e-40
    x[6, :64] = np.arange(-31.5, 32.5)                  # exact halves, both signs
    x[6, 64:] = 127.0
    for r in (7, 8, 9):
        scale = np.float32(rng.uniform(0.5, 2) * 10.0 ** rng.integers(-3, 3))
        x[r, 0] = np.float32(127 * np.float64(scale))
        halves = (rng.integers(-127, 127, 69) + 0.5) * np.float64(scale)
        x[r, 1:] = halves.astype(np.float32)
    x = x.astype(np.float32)
    q, s = qg.quantize_per_token(x, out=np.full(x.shape, 99, np.int8), out_scales=poison(np.empty(10, np.float32)))
    want_q, want_s = reference.quantize_int8(x, axis=0)
    np.testing.assert_array_equal(s, want_s[:, 0], err_msg=f"seed {seed}")
    np.testing.assert_array_equal(q, want_q, err_msg=f"seed {seed}")
    assert (q[6, :64] == np.rint(np.arange(-31.5, 32.5))).all() and (q[4] == 0).all()


def test_quantized_tokens_through_the_tensor_cores(rng_seed):
    """The day's prefill end to end: x quantized per token, W per channel, y against x W^T in float64 within the
    rounding of the codes (half a step of each scale per value)."""
    rng, seed = rng_seed
    x, w = rng.standard_normal((9, 64)).astype(np.float32), rng.standard_normal((11, 64)).astype(np.float32)
    a_q, sa = qg.quantize_per_token(x)
    w_q, sw = reference.quantize_int8(w, axis=0)
    y = qg.w8a8_gemm_v2_tensor_cores(a_q, sa, w_q, sw[:, 0])
    check(y, reference.w8a8_matmul(a_q, sa, w_q, sw[:, 0]), name="w8a8_gemm_v2_tensor_cores", seed=seed)
    bound = 0.5 * (sa[:, None] * np.abs(w).sum(axis=1) + sw[:, 0] * np.abs(x).sum(axis=1)[:, None]) * 1.01
    assert (np.abs(y - x.astype(np.float64) @ w.T) <= bound).all()


# ------------------------------------------------------------------------------------------------
# Traffic and the models
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rung", RUNGS)
def test_counted_traffic_equals_the_model(rung, rng_seed):
    rng, _ = rng_seed
    m, n, k = 3, 67, 32
    args = (codes(rng, m, k), np.ones(m, np.float32), codes(rng, n, k), np.ones(n, np.float32))
    with count_traffic() as t:
        qg.RUNGS[rung](*args)
    assert {name: (t.load_bytes[name], t.store_bytes[name]) for name in t.load_bytes} == model.traffic(rung, m, n, k)
    assert t.global_bytes == getattr(model, f"bytes_{rung}")(m, n, k)
    with count_traffic() as t:
        qg.quantize_per_token(rng.standard_normal((5, 40)).astype(np.float32))
    assert {name: (t.load_bytes[name], t.store_bytes[name]) for name in t.load_bytes} == \
        model.traffic_quantize_per_token(5, 40)


def test_models_numbers():
    assert (model.BLOCK_M, model.BLOCK_N, model.BLOCK_K) == (qg.BLOCK_M, qg.BLOCK_N, qg.BLOCK_K)
    assert model.RUNGS == tuple(qg.RUNGS)
    assert model.SCALE_READERS["w8a8_gemm_v1_dp4a"] == (qg.THREADS_X, qg.THREADS_Y)
    assert model.SCALE_READERS["w8a8_gemm_v2_tensor_cores"] == (4 * qg.WARPS_N, 8 * qg.WARPS_M)
    assert model.int_ops(128, 64, 32) == 2 * 128 * 64 * 32
    assert model.compulsory_bytes(4096, 4096, 4096) == 2 * 4096 ** 2 + 8 * 4096 + 4 * 4096 ** 2
    # 4096 tokens through a 4096 x 4096 layer: A is read 64 times, W 64 times; y (float32) is twice A or W.
    assert model.traffic_w8a8_gemm_v1_dp4a(4096, 4096, 4096)["a_q"] == (64 * 4096 ** 2, 0)
    assert model.bytes_w8a8_gemm_v2_tensor_cores(1, 1, 32) == 32 + 8 * 4 + 32 + 16 * 4 + 4
    assert 60 < model.intensity("w8a8_gemm_v2_tensor_cores", 4096, 4096, 4096) < 64
    for call, error in [(lambda: model.int_ops(1, 1, 48), ValueError), (lambda: model.int_ops(-1, 1, 32), ValueError),
                        (lambda: model.int_ops(1.0, 1, 32), TypeError),
                        (lambda: model.traffic("w8a8_gemm", 1, 1, 32), ValueError)]:
        with pytest.raises(error):
            call()


# ------------------------------------------------------------------------------------------------
# PTX for sm_80 and sm_90
# ------------------------------------------------------------------------------------------------

def test_ptx_of_every_kernel(compiled):
    """The tensor-core rung multiplies with mma.sync.aligned.m16n8k32 (s8, s32 accumulators) and no dp4a, the
    CUDA-core rung with dp4a and no mma; both read A and W as words, keep everything in registers and use no
    float64 (the quantizer does, only to settle a quotient that lands on a half)."""
    records = compiled()
    assert {(r["kernel"], r["cc"]) for r in records} == {(k, cc) for k in (*RUNGS, "quantize_per_token")
                                                          for cc in ("sm_80", "sm_90")}
    for r in records:
        assert not r["local"], r
        if r["kernel"] == "w8a8_gemm_v1_dp4a":
            assert r["dp4a"] > 0 and r["mma"] == 0 and not r["f64"] and r["word_loads"] > 0, r
        if r["kernel"] == "w8a8_gemm_v2_tensor_cores":
            assert r["mma"] > 0 and r["dp4a"] == 0 and not r["f64"] and r["word_loads"] > 0, r
        if r["kernel"] == "w8a8_gemm_v3_large_tiles":
            # day 8's v5 loop: 16 mmas a warp per 32 codes of K (2 per 64-code step: 32), 6 ldmatrix.x4 per 32
            # codes (12), cp.async copies, one barrier a step, waits for all but 1 group and for all, 48 KB shared
            assert (r["mma"], r["ldmatrix"], r["dp4a"], r["word_loads"]) == (32, 12, 0, 0), where(r)
            assert r["cp_async"] > 0 and r["waits"] == ["0", "1"] and r["barriers"] == 1, where(r)
            assert r["shared_bytes"] == 48 * 1024 and not r["f64"], where(r)


def where(record) -> str:
    return f"{record['kernel']} {record['cc']}: " + ", ".join(f"{key} {value}" for key, value in record.items()
                                                               if key not in ("kernel", "cc", "ptx"))


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA's PTX assembler) is not installed")
def test_ptx_of_the_large_tiles_assembles_without_stack_or_spills(compiled, tmp_path):
    """ptxas accepts v3's inline PTX (cp.async, ldmatrix, the int8 mma) for sm_80 and sm_90 and keeps its 64
    accumulators a lane in registers within its launch bounds: no stack frame, no spills, at most 65,536 / (256
    LARGE_MIN_BLOCKS) = 128 registers, so two blocks fit an SM."""
    from test_tensor_core_gemm import assemble

    records = [r for r in compiled() if r["kernel"] == "w8a8_gemm_v3_large_tiles"]
    assert {r["cc"] for r in records} == {"sm_80", "sm_90"}
    for r in records:
        report = assemble(r["ptx"], r["cc"], tmp_path)
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, f"{where(r)}\n{report}"
        assert ".minnctapersm 2" in r["ptx"], where(r)
        assert int(re.search(r"Used (\d+) registers", report).group(1)) <= 65536 // (256 * qg.LARGE_MIN_BLOCKS), report
