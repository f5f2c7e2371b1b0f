"""Day 8's tensor-core prefill, ``gqa_prefill_tensor_cores`` (``kernels/low_precision_attention/tensor_core_prefill.py``),
and the two intrinsics it adds (``ldmatrix_x4_trans``, ``pack_bfloat16s``), on the simulator at small shapes.

- The intrinsics' twins on their own: ``ldmatrix_x4_trans`` hands each lane the words the PTX ISA describes for
  ``ldmatrix.sync.aligned.m8n8.x4.trans.b16`` (written out below number by number from the ISA, not from the
  twin), from rows named in any order; those words fed to ``mma_m16n8k16`` (and its bf16 twin) as B give P V for
  a V tile stored row by row; misaligned rows are refused, naming the helper. ``pack_bfloat16s`` rounds as
  ml_dtypes rounds (ties to even, infinities, NaN), the low number in the low half.
- The rung against the float64 reference on small shapes, fp16 and bf16, causal or not, ``kv_lens`` shorter than
  the keys (an empty sequence among them), groups of 1, 2 and 4 query heads a KV head, N not a multiple of 64,
  M != N, head_dim 16 to 128, into NaN-poisoned outputs. Three rules, each stated where it is checked: day 8's
  storage-precision rule (``docs/design-notes.md`` §5, ``course.checking.check`` with the format and
  ``reference.attention_at_precision``), flash-attention's own (the error against the reference on the stored
  inputs at most twice that of the same attention computed in the storage dtype, ``attention_in_dtype``), and the
  bound the module's docstring derives for P rounded to the format before P V (``check_p_rounding_bound``): the
  rule of day 8's float32 rungs, one step of the format from the exact result on the stored inputs, plus ``u
  sum_j p_j |v_j|`` (u: the unit roundoff of P's format), which replaces that rule here, not silently.
- The launch: one kernel, grid (ceil(N / 64), H, B) of 128 threads; q read once, each block's K and V rows read
  once (up to its causal limit and kv_lens), o written once; device arrays in, device arrays out.
- Refusals before any launch: float32 tensors (naming gqa_prefill_mixed_precision), a head_dim not a multiple of
  16 or past 128 (naming the rungs that take it), mixed dtypes, a bad out, causal or kv_lens.
- A process without the simulator compiles the kernel, fp16 and bf16 at head_dim 64 and 128, for sm_80 and sm_90:
  the format's mma.sync (2 d / 16 x 8 a tile: S and P V), ldmatrix and ldmatrix.trans, cp.async, two barriers,
  the static shared memory ``tensor_prefill_shared_bytes`` says, no local memory, no call, no float64; where
  ptxas is installed, no stack frame and no spills.
- Marked ``gpu`` (``make test-gpu DAY=08``): B = 2, 32 query heads over 8, N = 1,024, d = 128, causal, fp16 and
  bf16, by the same rules; and the hardware's ldmatrix.trans layout against the ISA's.
"""

import math
import re
import shutil
import textwrap

import ml_dtypes
import numpy as np
import pytest
from numba import cuda, float32, uint32

from ptx_in_background import compile_fixtures
from test_tensor_core_gemm import assemble, ldmatrix_case, ldmatrix_probe_of, run_ldmatrix

from course.checking import check, poison, random_inputs
from course.traffic import count_traffic
from kernels import low_precision_attention as lp
from kernels import reference
from kernels.intrinsics import (ldmatrix_x4_trans, mma_m16n8k16, mma_m16n8k16_bf16, pack_bfloat16s,
                                pack_halves)

BF16 = ml_dtypes.bfloat16
FMT_OF = {"float16": "fp16", "bfloat16": "bf16"}
DTYPES = {"float16": np.float16, "bfloat16": BF16}
DIMS = ("batch", "head", "row", "col")
# P's format: its unit roundoff (the largest relative rounding error of a weight in [2**-14, 1]) and one step of
# the format relative to a value (the output's own rounding is at most half of it).
P_UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
STEP = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
FP16_SUBNORMAL_ERROR = 2.0 ** -25        # fp16 weights below 2**-14 are subnormal: an absolute error at most this


# ------------------------------------------------------------------------------------------------
# Compiling for a GPU, in a subprocess started with the first test of this file
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from course.gpu_compile import COMPUTE_CAPABILITIES, ptx_for_targets
    from kernels import low_precision_attention as lp
    words, numbers = numba.uint32[:, ::1], numba.uint16[:, ::1]
    signature = (words, numbers, numbers, numba.int32[::1], words, numba.float32, numba.boolean, numba.int64,
                 numba.int64, numba.int64, numba.int64)
    for fmt in lp.TENSOR_PREFILL_FORMATS:
        for d in (64, 128):
            kernel = lp.gqa_prefill_tensor_cores_kernel(fmt, d)
            for (major, minor), ptx in ptx_for_targets(kernel.py_func, signature, COMPUTE_CAPABILITIES).items():
                body = ptx[ptx.index(".entry"):]
                print(json.dumps({"fmt": fmt, "d": d, "cc": f"sm_{major}{minor}", "ptx": ptx,
                                  "local": ".local" in body, "f64": ".f64" in body,
                                  "calls": len(re.findall(r"\bcall(\.uni)?\s", body)),
                                  "mma_f16": body.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
                                  "mma_bf16": body.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                                  "ldmatrix": body.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                                  "ldmatrix_trans": body.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
                                  "cp_async": body.count("cp.async.cg.shared.global"),
                                  "waits": sorted(set(re.findall(r"cp\.async\.wait_group (\d+)", body))),
                                  "barriers": len(re.findall(r"\bbar\.sync\b", body)),
                                  "p_packs": body.count("cvt.rn.f16x2.f32") + body.count("cvt.rn.bf16x2.f32"),
                                  "shared_bytes": sum(int(size) for size in re.findall(
                                      r"\.shared\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]", ptx))}), flush=True)
""")


compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM)


# ------------------------------------------------------------------------------------------------
# ldmatrix.x4.trans: the PTX ISA's layout, written out number by number
# ------------------------------------------------------------------------------------------------

def ldmatrix_trans_layout(matrices: np.ndarray) -> np.ndarray:
    """What each lane holds after ``ldmatrix.sync.aligned.m8n8.x4.trans.b16`` of four 8 x 8 matrices of 16-bit
    numbers (``matrices`` (4, 8, 8) uint16, [matrix, row, column], row j of matrix i named by lane 8 i + j), by
    the PTX ISA ("Warp-level matrix load instruction: ldmatrix", with ``.trans`` each matrix is loaded in
    column-major form): destination register i of lane l holds two numbers of column l // 4 of matrix i, rows
    2 (l % 4) and 2 (l % 4) + 1, the first in the lower 16 bits. Returns (32, 4) uint32."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        column, pair = lane // 4, lane % 4
        for i in range(4):
            low, high = int(matrices[i, 2 * pair, column]), int(matrices[i, 2 * pair + 1, column])
            out[lane, i] = low | high << 16
    return out


ldmatrix_trans_probe = ldmatrix_probe_of(ldmatrix_x4_trans)      # the GEMM tests' probe of ldmatrix_x4, .trans


def ldmatrix_trans_case(rng):
    """``test_tensor_core_gemm.ldmatrix_case``'s tile and addresses, against the .trans layout."""
    return ldmatrix_case(rng, ldmatrix_trans_layout)


def run_ldmatrix_trans(words, rows, cols):
    return run_ldmatrix(words, rows, cols, ldmatrix_trans_probe)


def test_ldmatrix_x4_trans_gives_each_lane_the_isa_fragment_of_the_rows_it_named():
    rng, seed = random_inputs()
    for _ in range(3):
        words, rows, cols, want = ldmatrix_trans_case(rng)
        np.testing.assert_array_equal(run_ldmatrix_trans(words, rows, cols), want, err_msg=f"seed {seed}")


@cuda.jit
def p_times_v_probe(p_words, v_words, out, bf16):
    """One warp: P (16 x 16, row-major words) as the A fragment read from global memory, V (16 keys x 16 channels,
    row-major words) in shared memory, loaded as B by ldmatrix_x4_trans as the prefill loads it (lane l names key
    (l % 8) + 8 ((l // 8) % 2), chunk l // 16); out = P V (16 x 16 float32), two mmas of 8 channels."""
    tile = cuda.shared.array((16, 8), uint32, alignment=16)
    lane = cuda.threadIdx.x
    for j in range(4):
        tile[lane // 2, 4 * (lane % 2) + j] = v_words[lane // 2, 4 * (lane % 2) + j]
    cuda.syncthreads()
    g = lane >> 2
    t = lane & 3
    a0, a1, a2, a3 = p_words[g, t], p_words[g + 8, t], p_words[g, t + 4], p_words[g + 8, t + 4]
    b0, b1, b2, b3 = ldmatrix_x4_trans(tile, (lane & 7) + 8 * ((lane >> 3) & 1), 4 * (lane >> 4))
    zero = float32(0.0)
    if bf16:
        c = mma_m16n8k16_bf16(a0, a1, a2, a3, b0, b1, zero, zero, zero, zero)
        d = mma_m16n8k16_bf16(a0, a1, a2, a3, b2, b3, zero, zero, zero, zero)
    else:
        c = mma_m16n8k16(a0, a1, a2, a3, b0, b1, zero, zero, zero, zero)
        d = mma_m16n8k16(a0, a1, a2, a3, b2, b3, zero, zero, zero, zero)
    for e in range(2):
        out[g, 2 * t + e] = c[e]
        out[g + 8, 2 * t + e] = c[2 + e]
        out[g, 8 + 2 * t + e] = d[e]
        out[g + 8, 8 + 2 * t + e] = d[2 + e]


@pytest.mark.parametrize("fmt", lp.TENSOR_PREFILL_FORMATS)
def test_ldmatrix_trans_fragments_of_a_row_major_v_give_p_times_v(fmt):
    """V stored key by key (row-major, as attention stores it) becomes the mma's B operand through ldmatrix.trans:
    the product is P V, exact in float32 (products of 16-bit numbers summed over 16 keys)."""
    rng, seed = random_inputs()
    p = rng.uniform(0, 1, (16, 16)).astype(DTYPES[fmt])
    v = rng.standard_normal((16, 16)).astype(DTYPES[fmt])
    out = np.zeros((16, 16), np.float32)
    p_times_v_probe[1, 32](p.view(np.uint32), v.view(np.uint32), out, fmt == "bfloat16")
    want = p.astype(np.float64) @ v.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=f"seed {seed}")


def test_ldmatrix_trans_twin_refuses_misaligned_rows_naming_itself():
    words = np.zeros((16, 8), np.uint32)
    rows = np.arange(32, dtype=np.int32) % 16
    with pytest.raises(ValueError, match=r"ldmatrix_x4_trans: a row of a matrix is 16 bytes at a 16-byte aligned"):
        run_ldmatrix_trans(words, rows, np.full(32, 2, np.int32))


def test_pack_bfloat16s_rounds_as_ml_dtypes_low_number_low():
    """Round to nearest, ties to even (the two numbers exactly between bf16 neighbours), overflow to infinity, NaN
    kept; the first number in the low 16 bits, as ``pack_halves`` packs fp16."""
    rng, seed = random_inputs()
    specials = np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -0.0, np.inf, -np.inf, 3.4e38, 1e-40, 65504.0],
                        np.float32)
    numbers = np.concatenate([rng.standard_normal(64).astype(np.float32) * 10.0 ** rng.integers(-20, 20, 64),
                              specials])
    for low, high in zip(numbers[0::2], numbers[1::2]):
        word = int(pack_bfloat16s(low, high))
        want = np.array([low, high], np.float32).astype(BF16).view(np.uint16)
        assert (word & 0xFFFF, word >> 16) == (int(want[0]), int(want[1])), (low, high, seed)
    nan = int(pack_bfloat16s(np.float32(np.nan), np.float32(1.0)))
    assert np.isnan(np.array([nan & 0xFFFF], np.uint16).view(BF16)[0]) and nan >> 16 == 0x3F80
    assert int(pack_halves(np.float32(1.0), np.float32(2.0))) == 0x40003C00       # fp16's order, for comparison


# ------------------------------------------------------------------------------------------------
# The rung against the references
# ------------------------------------------------------------------------------------------------

def qkv(B, heads, kv_heads, N, M, d, seed=None):
    rng, seed = random_inputs(seed)
    q = rng.standard_normal((B, heads, N, d), dtype=np.float32)
    k = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    v = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    return q, k, v, seed


def allowed_keys(B, N, M, causal, kv_lens):
    """(B, 1, N, M) bool: key j for query i of batch b iff j < kv_lens[b] and (causal) j <= i."""
    lens = np.full(B, M) if kv_lens is None else np.asarray(kv_lens)
    keys = np.arange(M)
    allowed = np.broadcast_to(keys[None, None, None, :] < lens[:, None, None, None], (B, 1, N, M))
    if causal:
        allowed = allowed & (keys[None, :] <= np.arange(N)[:, None])[None, None]
    return allowed


def stored_weights(q, k, causal, kv_lens, scale=None):
    """The softmax weights (B, H, N, M) of attention on q and k as given (float64), rows without a key all 0."""
    B, heads, N, d = q.shape
    kv_heads, M = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    keys = np.repeat(k.astype(np.float64), heads // kv_heads, axis=1)
    scores = np.einsum("bhnd,bhmd->bhnm", q.astype(np.float64), keys) * scale
    allowed = allowed_keys(B, N, M, causal, kv_lens)
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0), allowed


def attention_in_dtype(q, k, v, dtype, causal, kv_lens):
    """flash-attention's ``attention_ref(..., upcast=False)`` in NumPy: attention computed in the storage dtype,
    each operation's result rounded to it (q times the scale, the scores, the softmax, the output), each product
    summed exactly (tensor cores sum in float32)."""
    r = lambda x: np.asarray(x).astype(dtype).astype(np.float64)
    heads, kv_heads, d = q.shape[1], k.shape[1], q.shape[3]
    qs = r(q.astype(np.float64) * r(1.0 / math.sqrt(d)))
    keys, values = (np.repeat(a.astype(np.float64), heads // kv_heads, axis=1) for a in (k, v))
    scores = r(np.einsum("bhnd,bhmd->bhnm", qs, keys))
    allowed = allowed_keys(q.shape[0], q.shape[2], k.shape[2], causal, kv_lens)
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    p = r(e / np.where(total > 0, total, 1.0))
    return r(np.einsum("bhnm,bhmd->bhnd", p, values))


def check_p_rounding_bound(out, stored, fmt, seed, name, causal, kv_lens):
    """The module docstring's bound: |out - exact| <= one step of the format x |exact| (the output's rounding,
    the rule of day 8's float32 rungs) + u sum_j p_j |v_j| (each weight rounded to P's format before P V, the row
    sum taken of the float32 weights) + (fp16) 2**-25 sum_j |v_j| over the allowed keys (subnormal weights) +
    float32's slack, 1e-5 max|exact|; exact: the float64 attention on the stored inputs."""
    q, k, v = (a.astype(np.float64) for a in stored)
    exact = reference.attention(q, k, v, causal=causal, kv_lens=kv_lens)
    weights, allowed = stored_weights(q, k, causal, kv_lens)
    magnitudes = np.repeat(np.abs(v), q.shape[1] // k.shape[1], axis=1)
    bound = (STEP[fmt] * np.abs(exact) + P_UNIT_ROUNDOFF[fmt] * np.einsum("bhnm,bhmd->bhnd", weights, magnitudes)
             + 1e-5 * np.abs(exact).max())
    if fmt == "float16":
        bound += FP16_SUBNORMAL_ERROR * np.einsum("bhnm,bhmd->bhnd", np.broadcast_to(allowed, weights.shape)
                                                  .astype(np.float64), magnitudes)
    far = np.abs(out.astype(np.float64) - exact) > bound
    assert not far.any(), (f"{name}: {far.sum()} elements past the bound of P rounded to {fmt}, first at "
                           f"{np.argwhere(far)[0].tolist()} (seed {seed})")
    return exact


def check_tensor_prefill(out, q, k, v, fmt, seed, name, causal=False, kv_lens=None):
    """Day 8's rule (§5) against the float64 reference on the float32 inputs; flash-attention's rule against the
    reference on the stored inputs; the bound of P's rounding (``check_p_rounding_bound``)."""
    dtype = DTYPES[fmt]
    assert out.dtype == np.dtype(dtype)
    ref = reference.attention(q, k, v, causal=causal, kv_lens=kv_lens)
    same = reference.attention_at_precision(q, k, v, FMT_OF[fmt], causal=causal, kv_lens=kv_lens)
    check(out.astype(np.float64), ref, name=name, dims=DIMS, seed=seed, precision=FMT_OF[fmt],
          same_precision_ref=same)
    stored = [a.astype(dtype) for a in (q, k, v)]
    exact = check_p_rounding_bound(out, stored, fmt, seed, name, causal, kv_lens)
    in_dtype = attention_in_dtype(*stored, dtype, causal, kv_lens)
    error, allowed_error = np.abs(out.astype(np.float64) - exact).max(), 2 * np.abs(in_dtype - exact).max()
    assert error <= allowed_error, (f"{name}: max error {error:.3g} against the reference on the stored inputs, "
                                    f"more than twice that of attention computed in {fmt} ({allowed_error:.3g}), "
                                    f"seed {seed}")


# (fmt, B, heads, kv_heads, N, M, d, causal, kv_lens): MHA on whole tiles; group 4 with N and M not multiples of 64
# and M != N; three key tiles, kv_lens cutting the second batch element inside one; an empty sequence; head_dim
# 128, the largest, and 16, 48 and 112 (an odd half of the chunks a row); group 2, more queries than keys, causal.
CASES = [
    pytest.param("float16", 1, 2, 2, 64, 64, 64, False, None, id="fp16-mha-whole-tiles"),
    pytest.param("bfloat16", 1, 4, 1, 70, 75, 64, True, None, id="bf16-g4-causal-70x75"),
    pytest.param("float16", 2, 4, 1, 50, 150, 64, False, [150, 37], id="fp16-g4-kv_lens-three-key-tiles"),
    pytest.param("bfloat16", 2, 2, 2, 65, 40, 32, True, [40, 0], id="bf16-mha-causal-empty-sequence"),
    pytest.param("float16", 1, 4, 2, 33, 20, 128, True, [13], id="fp16-g2-d128-causal-kv_lens"),
    pytest.param("bfloat16", 1, 2, 1, 20, 70, 128, False, [70], id="bf16-g2-d128"),
    pytest.param("float16", 1, 4, 1, 17, 9, 16, True, None, id="fp16-g4-d16-more-queries-than-keys"),
    pytest.param("bfloat16", 1, 2, 1, 9, 33, 48, False, None, id="bf16-g2-d48"),
    pytest.param("float16", 1, 1, 1, 80, 66, 112, True, None, id="fp16-d112-causal-two-position-blocks"),
]


def keys_read(B, heads, N, M, causal, kv_lens):
    """K (or V) rows a launch reads: each block of 64 positions reads keys 0 ... end - 1, end = kv_lens clamped to M
    and (causal) to the block's last position + 1 and to N."""
    lens = [M] * B if kv_lens is None else kv_lens
    total = 0
    for b in range(B):
        for first in range(0, N, lp.TENSOR_PREFILL_ROWS):
            end = min(lens[b], M)
            if causal:
                end = min(end, first + lp.TENSOR_PREFILL_ROWS, N)
            total += heads * end
    return total


@pytest.mark.parametrize("fmt, B, heads, kv_heads, N, M, d, causal, kv_lens", CASES)
def test_rung_meets_the_precision_rules_and_reads_each_input_once(fmt, B, heads, kv_heads, N, M, d, causal, kv_lens):
    q, k, v, seed = qkv(B, heads, kv_heads, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, np.int32)
    stored = [a.astype(DTYPES[fmt]) for a in (q, k, v)]
    with count_traffic() as t:
        out = lp.gqa_prefill_tensor_cores(*stored, causal=causal, kv_lens=lens,
                                          out=poison(np.empty(q.shape, DTYPES[fmt])))
    check_tensor_prefill(out, q, k, v, fmt, seed, f"gqa_prefill_tensor_cores {fmt} d {d}", causal=causal,
                         kv_lens=lens)
    if lens is not None:
        assert np.all(out[lens == 0].astype(np.float32) == 0.0)
    assert t.launches == 1 and t.per_launch[0].grid == lp.tensor_prefill_grid(B, heads, N) == (-(-N // 64), heads, B)
    assert t.per_launch[0].block[0] == lp.TENSOR_PREFILL_THREADS == 128
    # q as words of two numbers, k and v as numbers, o as words: q once, K and V rows once per block, o once.
    loads = {name: t.global_loads[name] for name in ("q", "k", "v", "o")}
    assert loads == {"q": B * heads * N * d // 2, "k": keys_read(B, heads, N, M, causal, kv_lens) * d,
                     "v": keys_read(B, heads, N, M, causal, kv_lens) * d, "o": 0}
    assert t.global_stores["o"] == B * heads * N * d // 2


def test_rung_takes_device_arrays_and_a_scale():
    q, k, v, seed = qkv(1, 4, 2, 30, 41, 64)
    stored = [cuda.to_device(a.astype(BF16)) for a in (q, k, v)]
    out = lp.gqa_prefill_tensor_cores(*stored, causal=True, scale=0.3)
    assert hasattr(out, "copy_to_host") and out.dtype == np.dtype(BF16)
    same = reference.attention_at_precision(q, k, v, "bf16", causal=True, scale=0.3)
    check(out.copy_to_host().astype(np.float64), reference.attention(q, k, v, causal=True, scale=0.3),
          precision="bf16", same_precision_ref=same, name="O from bf16 device arrays, scale 0.3", seed=seed)


def test_kernels_are_built_per_format_and_head_dim_and_kept():
    assert lp.gqa_prefill_tensor_cores_kernel("float16", 64) is lp.gqa_prefill_tensor_cores_kernel("float16", 64)
    assert lp.gqa_prefill_tensor_cores_kernel("float16", 64) is not lp.gqa_prefill_tensor_cores_kernel("bfloat16", 64)
    assert lp.tensor_prefill_shared_bytes(128) == 34816 <= 48 * 1024 and lp.tensor_prefill_shared_bytes(64) == 18432
    with pytest.raises(ValueError, match="fmt must be one of float16, bfloat16, got 'float32'"):
        lp.gqa_prefill_tensor_cores_kernel("float32", 64)
    with pytest.raises(ValueError, match=r"head_dim must be a multiple of 16 in \[16, 128\], got 72"):
        lp.gqa_prefill_tensor_cores_kernel("float16", 72)


# ------------------------------------------------------------------------------------------------
# What the rung refuses, before it launches
# ------------------------------------------------------------------------------------------------

def prefill_args(d=16, dtype=np.float16, **change):
    args = dict(q=np.zeros((1, 2, 5, d), dtype), k=np.zeros((1, 1, 7, d), dtype), v=np.zeros((1, 1, 7, d), dtype))
    args.update(change)
    return args


@pytest.mark.parametrize("args, error, words", [
    (prefill_args(dtype=np.float32), TypeError,
     r"q must be stored in fp16 or bf16 for gqa_prefill_tensor_cores .*got float32: gqa_prefill_mixed_precision "
     r"takes float32"),
    (prefill_args(72), ValueError,
     r"q must have head_dim a multiple of 16 .*up to 128 for gqa_prefill_tensor_cores, got head_dim 72.*"
     r"gqa_prefill_mixed_precision takes any head_dim up to 128"),
    (prefill_args(8), ValueError, r"multiple of 16 .*got head_dim 8"),
    (prefill_args(160), ValueError,
     r"q must have 1 <= head_dim <= 128 .*got head_dim 160.*gqa_prefill_wide_heads takes head_dim up to 256"),
    (prefill_args(dtype=np.float64), TypeError, "q must have dtype one of float16, bfloat16, float32, got float64"),
    (prefill_args(k=np.zeros((1, 1, 7, 16), BF16)), TypeError, r"k must have the dtype of q \(float16\), got bfloat16"),
    (prefill_args(v=np.zeros((1, 1, 6, 16), np.float16)), ValueError, r"v must have shape .*seq_k is 6, not 7"),
    (prefill_args(out=np.zeros((1, 2, 5, 16), np.float32)), TypeError, "out must have dtype float16"),
    (prefill_args(causal=1), TypeError, "causal must be True or False"),
    (prefill_args(kv_lens=np.array([8], np.int32)), ValueError, r"kv_lens must lie in \[0, 7\]"),
], ids=["float32", "head_dim 72", "head_dim 8", "head_dim 160", "float64", "k bf16", "v short", "out float32",
        "causal 1", "kv_lens past M"])
def test_rung_refuses_bad_arguments_naming_them(args, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        lp.gqa_prefill_tensor_cores(**args)
    assert t.launches == 0


def test_empty_shapes_launch_nothing_and_no_keys_give_zeros():
    with count_traffic() as t:
        out = lp.gqa_prefill_tensor_cores(**prefill_args(q=np.zeros((1, 2, 0, 16), np.float16)))
    assert out.shape == (1, 2, 0, 16) and t.launches == 0
    q, k, v, _ = qkv(1, 2, 1, 5, 0, 16)
    out = lp.gqa_prefill_tensor_cores(*(a.astype(np.float16) for a in (q, k, v)),
                                      out=poison(np.empty(q.shape, np.float16)))
    assert np.all(out.astype(np.float32) == 0.0)


# ------------------------------------------------------------------------------------------------
# PTX for sm_80 and sm_90 (compiled in the background process)
# ------------------------------------------------------------------------------------------------

def records_of(compiled):
    records = compiled()
    assert {(r["fmt"], r["d"], r["cc"]) for r in records} == {
        (fmt, d, cc) for fmt in lp.TENSOR_PREFILL_FORMATS for d in (64, 128) for cc in ("sm_80", "sm_90")}
    return records


def test_ptx_has_the_tensor_core_instructions_and_no_local_memory(compiled):
    """Every fragment and accumulator in registers (no ``.local``), no call, no float64; per tile of 64 keys a warp
    issues d / 16 x 8 mmas for S and 4 x d / 8 for P V, all of the tensors' format; d / 16 x 4 ldmatrix of K and
    d / 8 x 2 ldmatrix.trans of V; P packed by cvt.rn.f16x2.f32 or cvt.rn.bf16x2.f32 (16 words, and o's d / 4);
    cp.async copies waited for with wait_group 0; two barriers a tile; shared memory as sized."""
    for r in records_of(compiled):
        where = f"{r['fmt']} d {r['d']} {r['cc']}"
        d = r["d"]
        assert not r["local"] and not r["f64"] and r["calls"] == 0, where
        mmas = d // 16 * 8 + 4 * d // 8
        assert (r["mma_f16"], r["mma_bf16"]) == ((mmas, 0) if r["fmt"] == "float16" else (0, mmas)), where
        assert (r["ldmatrix"], r["ldmatrix_trans"]) == (d // 16 * 4, d // 8 * 2), where
        assert r["p_packs"] == 16 + d // 4, where
        assert r["cp_async"] > 0 and r["waits"] == ["0"] and r["barriers"] == 2, where
        assert r["shared_bytes"] == lp.tensor_prefill_shared_bytes(d) <= 48 * 1024, where


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA's PTX assembler) is not installed")
def test_ptx_assembles_without_stack_or_spills(compiled, tmp_path):
    """ptxas accepts the inline PTX for sm_80 and sm_90 and keeps everything in registers: no stack frame, no spill
    stores or loads, at most 255 registers a thread."""
    for r in records_of(compiled):
        report = assemble(r["ptx"], r["cc"], tmp_path)
        where = f"{r['fmt']} d {r['d']} {r['cc']}"
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, f"{where}\n{report}"
        assert int(re.search(r"Used (\d+) registers", report).group(1)) <= 255, where


# ------------------------------------------------------------------------------------------------
# On a GPU (make test-gpu DAY=08): full size, the hardware's ldmatrix.trans layout
# ------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("fmt", lp.TENSOR_PREFILL_FORMATS)
def test_gpu_rung_at_full_size(fmt):
    """B = 2, 32 query heads over 8, N = 1,024, d = 128, causal: the three rules of the simulator's cases."""
    from course.record.day08 import device_output, to_device_as

    q, k, v, seed = qkv(2, 32, 8, 1024, 1024, 128)
    stored = [to_device_as(a, fmt) for a in (q, k, v)]     # bf16 cannot cross numba's copies: its bits as uint16
    out, bits = device_output(q.shape, fmt)
    lp.gqa_prefill_tensor_cores(*stored, causal=True, out=out)
    out = bits.copy_to_host().view(DTYPES[fmt])
    check_tensor_prefill(out, q, k, v, fmt, seed, f"gqa_prefill_tensor_cores {fmt} at full size", causal=True)


@pytest.mark.gpu
def test_gpu_ldmatrix_trans_layout_is_the_isas():
    rng, seed = random_inputs()
    for _ in range(3):
        words, rows, cols, want = ldmatrix_trans_case(rng)
        np.testing.assert_array_equal(run_ldmatrix_trans(words, rows, cols), want, err_msg=f"seed {seed}")
