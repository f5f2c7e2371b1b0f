"""Head sizes up to 256 and a bf16 cache: ``gqa_prefill_wide_heads`` and ``gqa_decode_wide_heads``
(``kernels/low_precision_attention/wide_heads.py``) over the parameter grids of two public test suites, at the
simulator's sizes, and what every rung refuses.

- flash-attention's ``test_flash_attn_output``: its 12 head sizes (32, 40, 59, 64, 80, 96, 111, 128, 160, 192,
  224, 256), MHA, GQA and MQA (9 query heads over 9, 3 and 1 KV heads), causal or not, fp16 and bf16, pairs of
  query and key lengths shrunk from its ten (113/203 ... 2048/2048) to a dozen or two, seqlen_q != seqlen_k
  among them. Its rule, at most twice the error of the same attention computed by torch in the storage dtype
  against a float64 reference, is here the course's storage-precision rule (``docs/design-notes.md`` §5), whose
  same-precision reference is exact arithmetic on the stored inputs, rounded once. The causal mask is the
  course's (key j for query i iff j <= i); flash-attention aligns it to the bottom right when the lengths differ.
- vLLM's ``test_paged_attention``: heads 32/8, 40/40 and 64/8 shrunk to 8/2, 5/5 and 16/2 (the same groups: 4,
  1 and 8), its 8 head sizes (64 to 256), pages of 16 and 32, bf16, fp16 and fp8 caches (fp8: e4m3 codes with a
  scale per page and KV head), block tables drawn at random from a small pool, so pages repeat within and
  across sequences. Its rule ``|out - ref| <= 1e-3 + 1e-5 |ref|`` (fp8: 1e-2) against the float64 reference on
  the cache as stored, and the course's: float32's tolerance there, §5 against the float32 cache it came from.
- up to head_dim 128 the new rungs compute what ``gqa_prefill_mixed_precision`` and ``gqa_decode_half_warps``
  compute, bit for bit; both read K and V once per block; bf16's bit conversions equal ml_dtypes'.
- refusals: a head_dim past 256 (or not a multiple of 8 in the decode), a cache dtype no rung reads, and in every
  other prefill and decode rung of days 6 to 8 a head_dim past 128 or a bf16 cache, each a ValueError or
  TypeError naming the argument and the limit, before any launch.
- the new kernels at head_dim 255 and 256 compile for sm_80 and sm_90 without local memory, bf16 without a call
  (a subprocess started with this file's first test; ``tests/test_kernels_pattern.py`` compiles each rung at its
  small shape).

At full length, on a GPU (marked ``gpu``, skipped on the simulator; ``make test-gpu DAY=08``): flash-attention's
cases at its ten length pairs and batch of 4, by the same rules; vLLM's at its heads, 7 sequences, contexts up to
57,600 tokens and 4,321 pages, by its rule against a reference computed a KV head at a time.
"""

import textwrap

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

from ptx_in_background import compile_fixtures

from course.checking import check, poison, random_inputs
from course.models import low_precision as model
from course.traffic import count_traffic
from kernels import gqa_attention, paged_attention, reference
from kernels import low_precision_attention as lp
from kernels.intrinsics import bfloat16_bits, bfloat16_value

pytestmark = pytest.mark.day08

BF16 = ml_dtypes.bfloat16
FMT_OF = {"float16": "fp16", "bfloat16": "bf16", "fp8_e4m3": "fp8"}
DIMS = ("batch", "head", "row", "col")
DECODE_DIMS = ("seq", "head", "channel")


# ------------------------------------------------------------------------------------------------
# Compiling for a GPU, in a subprocess started with the first test of this file
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, re
    import numba
    from numba import cuda
    from numba.cuda import types
    from kernels import low_precision_attention as lp
    f32, i32, table = numba.float32, numba.int32[::1], numba.int32[:, ::1]
    a2, a3, a4 = numba.float32[:, ::1], numba.float32[:, :, ::1], numba.float32[:, :, :, ::1]
    words = numba.uint64[::1]
    decode = (a3, words, words, a2, a2, table, i32, f32, numba.int64, numba.int64, a3, a3, a4)
    def prefill(t):
        x = t[:, :, :, ::1]
        return (x, x, x, i32, x, f32, numba.boolean)
    kernels = [
        ("prefill fp16 256", lp.gqa_prefill_wide_heads_kernel(256), prefill(types.float16), ((8, 0), (9, 0))),
        ("prefill bf16 256", lp.gqa_prefill_wide_heads_kernel(256, True), prefill(numba.uint16), ((8, 0), (9, 0))),
        ("prefill fp32 255", lp.gqa_prefill_wide_heads_kernel(255), prefill(types.float32), ((9, 0),)),
        ("decode bf16 256 group 4", lp.gqa_decode_wide_heads_kernel(4, "bfloat16", 256), decode, ((8, 0), (9, 0))),
        ("decode fp16 256 group 8", lp.gqa_decode_wide_heads_kernel(8, "float16", 256), decode, ((9, 0),)),
        ("decode fp8 256 group 4", lp.gqa_decode_wide_heads_kernel(4, "fp8_e4m3", 256, fp8_convert=True), decode,
         ((9, 0),)),
        ("decode fp8 table 256 group 4", lp.gqa_decode_wide_heads_kernel(4, "fp8_e4m3", 256, fp8_convert=False),
         decode, ((8, 0),)),
    ]
    for name, kernel, signature, targets in kernels:
        for cc in targets:
            record = {"kernel": name, "cc": f"sm_{cc[0]}{cc[1]}"}
            try:
                ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=cc)
                body = ptx[ptx.index(".entry"):]
                shared = sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", ptx))
                record.update(local=".local" in body, calls=len(re.findall(r"\bcall(\.uni)?\s", body)),
                              shared=shared, bf16_roundings=body.count("cvt.rn.bf16.f32"),
                              shuffles=body.count("shfl.sync"))
            except Exception as exc:
                record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            print(json.dumps(record), flush=True)
""")


compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM, "test_wide_kernels_compile")


# ------------------------------------------------------------------------------------------------
# Prefill: flash-attention's grid
# ------------------------------------------------------------------------------------------------

FLASH_HEAD_SIZES = (32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256)
FLASH_HEADS = {"mha": (9, 9), "gqa": (9, 3), "mqa": (9, 1)}
# flash-attention's (seqlen_q, seqlen_k) pairs, shrunk: unequal both ways, equal, off by one, a single query.
FLASH_LENGTHS = ((11, 19), (16, 27), (19, 11), (8, 8), (15, 16), (16, 15), (1, 9), (21, 21))


def _flash_cases(lengths=FLASH_LENGTHS, batches=(1, 2)):
    """Every head size causal and not, the head layouts, length pairs and dtypes taking turns, so that each
    head size meets two of each and every head layout, pair and dtype meets several head sizes."""
    cases = []
    for i, d in enumerate(FLASH_HEAD_SIZES):
        for causal in (False, True):
            layout = tuple(FLASH_HEADS)[(i + causal) % 3]
            n, m = lengths[(2 * i + causal) % len(lengths)]
            dtype = ("float16", "bfloat16")[(i + causal + i // 3) % 2]
            batch = batches[1] if i % 4 == 1 and not causal else batches[0]
            cases.append(pytest.param(d, layout, n, m, causal, dtype, batch,
                                      id=f"d{d}-{layout}-{n}x{m}-{'causal' if causal else 'full'}-{FMT_OF[dtype]}"
                                         f"-batch{batch}"))
    return cases


def prefill_inputs(batch, heads, kv_heads, n, m, d, seed=None):
    rng, seed = random_inputs(seed)
    q = rng.standard_normal((batch, heads, n, d), dtype=np.float32)
    k = rng.standard_normal((batch, kv_heads, m, d), dtype=np.float32)
    v = rng.standard_normal((batch, kv_heads, m, d), dtype=np.float32)
    return q, k, v, seed


def check_prefill(out, q, k, v, dtype, seed, name, **mask):
    """§5 against the float64 reference on the float32 inputs; and against the reference on the stored inputs,
    within one step of the storage format (the output's own rounding) plus float32's slack."""
    ref = reference.attention(q, k, v, **mask)
    if dtype == "float32":
        return check(out, ref, name=name, dims=DIMS, seed=seed)
    fmt = FMT_OF[dtype]
    assert out.dtype == np.dtype(BF16 if dtype == "bfloat16" else dtype)
    same = reference.attention_at_precision(q, k, v, fmt, **mask)
    check(out.astype(np.float64), ref, name=name, dims=DIMS, seed=seed, precision=fmt, same_precision_ref=same)
    exact = reference.attention(*(a.astype(out.dtype).astype(np.float64) for a in (q, k, v)), **mask)
    step = 2.0 ** -10 if fmt == "fp16" else 2.0 ** -7
    far = np.abs(out.astype(np.float64) - exact) > step * np.abs(exact) + 1e-5 * np.abs(exact).max()
    assert not far.any(), (f"{name}: {far.sum()} elements more than one {fmt} step from the exact result on the "
                           f"stored inputs, first at {np.argwhere(far)[0].tolist()} (seed {seed})")


@pytest.mark.parametrize("d, layout, n, m, causal, dtype, batch", _flash_cases())
def test_prefill_over_flash_attentions_grid(d, layout, n, m, causal, dtype, batch):
    heads, kv_heads = FLASH_HEADS[layout]
    q, k, v, seed = prefill_inputs(batch, heads, kv_heads, n, m, d)
    stored = [a.astype(BF16 if dtype == "bfloat16" else dtype) for a in (q, k, v)]
    out = lp.gqa_prefill_wide_heads(*stored, causal=causal, out=poison(np.empty(q.shape, stored[0].dtype)))
    check_prefill(out, q, k, v, dtype, seed, f"gqa_prefill_wide_heads, head_dim {d}, {layout}, {n} x {m}",
                  causal=causal)


@pytest.mark.parametrize("d, heads, kv_heads, n, m, causal, kv_lens, dtype", [
    pytest.param(256, 8, 2, 37, 11, True, [9, 0], "float16", id="d256-g4-two-position-blocks-empty-sequence"),
    pytest.param(131, 6, 2, 9, 17, False, [17, 5], "float32", id="d131-odd-past-128-float32"),
    pytest.param(200, 3, 3, 6, 9, True, None, "bfloat16", id="d200-mha"),
])
def test_prefill_kv_lens_and_its_traffic_model(d, heads, kv_heads, n, m, causal, kv_lens, dtype):
    """Rows of two threads past 128, position blocks of ROWS_MAX / 2 rows and K and V tiles of 8 keys: q and o
    crossed once, each block's keys loaded once (``course.models.low_precision.requested_prefill_wide``); kv_lens
    masks keys and gives zeros to an empty sequence."""
    batch = 1 if kv_lens is None else len(kv_lens)
    lens = None if kv_lens is None else np.array(kv_lens, np.int32)
    q, k, v, seed = prefill_inputs(batch, heads, kv_heads, n, m, d)
    stored = [a.astype(BF16 if dtype == "bfloat16" else dtype) for a in (q, k, v)]
    with count_traffic() as t:
        out = lp.gqa_prefill_wide_heads(*stored, causal=causal, kv_lens=lens,
                                        out=poison(np.empty(q.shape, stored[0].dtype)))
    check_prefill(out, q, k, v, dtype, seed, f"gqa_prefill_wide_heads, head_dim {d}, kv_lens {kv_lens}",
                  causal=causal, kv_lens=lens)
    if lens is not None:
        assert np.all(out[lens == 0].astype(np.float32) == 0.0)
    grid, threads = lp.wide_prefill_geometry(batch, heads, kv_heads, n, d)
    assert t.launches == 1 and t.per_launch[0].grid == grid and t.per_launch[0].block[0] == threads
    requested = model.requested_prefill_wide(batch, heads, kv_heads, n, d, m, causal=causal, kv_lens=kv_lens)
    assert {name: (t.global_loads[name], t.global_stores[name]) for name in t.global_loads} == requested


def test_prefill_up_to_128_is_the_mixed_precision_rung_bit_for_bit():
    """At head_dim 128 and below a row is one thread with tiles of 16 keys: gqa_prefill_mixed_precision's
    arithmetic in its order, so the same bits (bf16 converted through its bits here, through numba there)."""
    for d, dtype, causal in ((128, np.float16, True), (111, BF16, False), (40, np.float32, True)):
        q, k, v, _ = prefill_inputs(1, 6, 2, 17, 21, d)
        stored = [a.astype(dtype) for a in (q, k, v)]
        wide = lp.gqa_prefill_wide_heads(*stored, causal=causal)
        taught = lp.gqa_prefill_mixed_precision(*stored, causal=causal)
        assert np.array_equal(wide.view(np.uint8), taught.view(np.uint8)), (d, dtype)


def test_prefill_tiling_past_128():
    """Two threads a row past 128: blocks keep ROWS_MAX threads, and the tiles of 8 keys keep shared memory
    at 24 KiB at 256 (tiles of 16 would take all 48 KiB a block may declare)."""
    assert [lp.row_threads(d) for d in (1, 128, 129, 256)] == [1, 1, 2, 2]
    assert lp.wide_prefill_geometry(1, 32, 8, 4096, 128) == (((4096 // 64), 8, 1), 256)      # day 7's, group 4
    assert lp.wide_prefill_geometry(1, 32, 8, 4096, 256) == (((4096 // 32), 8, 1), 256)      # 32 positions x 4 x 2
    assert lp.wide_prefill_geometry(2, 9, 1, 30, 160) == ((3, 1, 2), 14 * 9 * 2)            # MQA of 9 heads
    assert lp.wide_prefill_shared_bytes(256) == 24 * 1024 and lp.wide_prefill_shared_bytes(128) == 32 * 1024
    assert lp.wide_prefill_shared_bytes(255) == lp.wide_prefill_shared_bytes(256)          # a column of zeros
    assert model.ROW_CHANNELS == lp.HEAD_DIM_MAX
    assert lp.gqa_prefill_wide_heads_kernel(256) is lp.gqa_prefill_wide_heads_kernel(256, False)
    assert lp.gqa_prefill_wide_heads_kernel(256) is not lp.gqa_prefill_wide_heads_kernel(256, True)


def test_prefill_takes_device_arrays_of_bf16():
    q, k, v, seed = prefill_inputs(1, 4, 1, 7, 12, 192)
    stored = [cuda.to_device(a.astype(BF16)) for a in (q, k, v)]
    out = lp.gqa_prefill_wide_heads(*stored, causal=True)
    assert hasattr(out, "copy_to_host") and out.dtype == np.dtype(BF16)
    check_prefill(out.copy_to_host(), q, k, v, "bfloat16", seed, "O from bf16 device arrays", causal=True)


# ------------------------------------------------------------------------------------------------
# Decode: vLLM's grid
# ------------------------------------------------------------------------------------------------

VLLM_HEAD_SIZES = (64, 80, 96, 112, 120, 128, 192, 256)
VLLM_HEADS = {"32/8": (8, 2), "40/40": (5, 5), "64/8": (16, 2)}      # shrunk, the groups kept
VLLM_BLOCK_SIZES = (16, 32)
VLLM_FORMATS = ("bfloat16", "float16", "fp8_e4m3")


def _vllm_cases():
    """Each head size once, the head layouts, page sizes and formats taking turns; the head sizes past 128 with
    every format; a float32 cache once. (layout, head_dim, page size, format, partition size or None.)"""
    cases = []
    for i, d in enumerate(VLLM_HEAD_SIZES):
        formats = VLLM_FORMATS if d > 128 else (VLLM_FORMATS[i % 3],)
        for j, fmt in enumerate(formats):
            layout = tuple(VLLM_HEADS)[(i + j) % 3]
            block_size = VLLM_BLOCK_SIZES[(i + j) % 2]
            partition_size = 32 if (i + j) % 2 else None
            cases.append(pytest.param(layout, d, block_size, fmt, partition_size,
                                      id=f"{layout}-d{d}-pages-of-{block_size}-{fmt}"
                                         f"{'-partitions-of-32' if partition_size else ''}"))
    cases.append(pytest.param("32/8", 256, 16, "float32", 32, id="32/8-d256-pages-of-16-float32-partitions-of-32"))
    return cases


def vllm_case(layout, d, block_size, fmt, seed=None, num_seqs=2, num_blocks=7, longest=None, layouts=VLLM_HEADS):
    """q and a pool of ``num_blocks`` pages, normal values; ``num_seqs`` contexts of random lengths up to
    ``longest`` (default: a page and a part) with one of the longest, each table drawn at random from the pool
    (pages repeat). ``layouts``: the (query, KV) heads of each layout. Returns a dict with the stored cache, the
    float32 cache it came from, the stored cache as numbers (float64; fp8: dequantized) and the scales."""
    rng, seed = random_inputs(seed)
    heads, kv_heads = layouts[layout]
    longest = longest or 2 * block_size - 3
    lens = rng.integers(1, longest + 1, num_seqs).astype(np.int32)
    lens[rng.integers(num_seqs)] = longest
    tables = rng.integers(0, num_blocks, (num_seqs, -(-longest // block_size))).astype(np.int32)
    q = rng.standard_normal((num_seqs, heads, d), dtype=np.float32)
    k32, v32 = (rng.standard_normal((num_blocks, kv_heads, block_size, d), dtype=np.float32) for _ in range(2))
    extra = {}
    if fmt == "fp8_e4m3":
        (k_cache, k_scales), (v_cache, v_scales) = reference.quantize_fp8(k32), reference.quantize_fp8(v32)
        extra = dict(k_scales=k_scales, v_scales=v_scales)
        stored = reference.dequantize_fp8(k_cache, k_scales), reference.dequantize_fp8(v_cache, v_scales)
    else:
        k_cache, v_cache = (a.astype(BF16 if fmt == "bfloat16" else fmt) for a in (k32, v32))
        stored = tuple(a.astype(np.float32) for a in (k_cache, v_cache))            # exact
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, tables=tables, lens=lens, extra=extra, stored=stored,
                cache32=(k32, v32), seed=seed, heads=heads, kv_heads=kv_heads)


def grouped_paged_attention(q, k_cache, v_cache, block_tables, context_lens):
    """``reference.paged_attention`` computed a KV head at a time, in float64, on the pages of each context
    (``reference.gather_kv``), without repeating K and V to every query head: the reference of the
    full-length steps, whose repeated K and V would take gigabytes."""
    num_seqs, heads, d = q.shape
    kv_heads = k_cache.shape[1]
    out = np.zeros(q.shape)
    for s in range(num_seqs):
        keys, values = (reference.gather_kv(cache, block_tables[s], int(context_lens[s])) for cache in (k_cache,
                                                                                                        v_cache))
        if keys.shape[1] == 0:
            continue
        query = q[s].astype(np.float64).reshape(kv_heads, heads // kv_heads, d)
        scores = np.einsum("kgd,knd->kgn", query, keys) / np.sqrt(d)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        out[s] = np.einsum("kgn,knd->kgd", weights, values).reshape(heads, d)
    return out


def check_decode(out, case, fmt, name, paged_reference=reference.paged_attention, course_rules=True):
    """vLLM's rule against the reference on the stored cache; and the course's: float32's tolerance there, §5
    against the float32 cache the stored one came from."""
    on_stored = paged_reference(case["q"], *case["stored"], case["tables"], case["lens"])
    atol = 1e-2 if fmt == "fp8_e4m3" else 1e-3
    over = np.abs(out - on_stored) > atol + 1e-5 * np.abs(on_stored)
    assert not over.any(), (f"{name}: {over.sum()} elements past vLLM's atol {atol} + rtol 1e-5, first at "
                            f"{np.argwhere(over)[0].tolist()} (seed {case['seed']})")
    if not course_rules:
        return
    check(out, on_stored, name=name, dims=DECODE_DIMS, seed=case["seed"])
    if fmt != "float32":
        exact = paged_reference(case["q"], *case["cache32"], case["tables"], case["lens"])
        check(out, exact, name=name + " vs the float32 cache", dims=DECODE_DIMS, seed=case["seed"],
              precision=FMT_OF[fmt], same_precision_ref=on_stored)


def run_wide_decode(case, **kwargs):
    return lp.gqa_decode_wide_heads(case["q"], case["k_cache"], case["v_cache"], case["tables"], case["lens"],
                                    **case["extra"], out=poison(np.empty_like(case["q"])), **kwargs)


@pytest.mark.parametrize("layout, d, block_size, fmt, partition_size", _vllm_cases())
def test_decode_over_vllms_grid(layout, d, block_size, fmt, partition_size):
    case = vllm_case(layout, d, block_size, fmt)
    with count_traffic() as t:
        out = run_wide_decode(case, partition_size=partition_size)
    check_decode(out, case, fmt, f"gqa_decode_wide_heads, heads {layout} (shrunk), head_dim {d}, pages of "
                                 f"{block_size}, {fmt} cache, contexts {case['lens'].tolist()}")
    assert t.kernel_names == ["gqa_decode_wide_heads_kernel", "paged_attention_v2_merge_kernel"]
    # Each K and V element of a context read once per block of the group, as words of its format.
    readers = case["kv_heads"] * lp.wide_decode_tiling(case["heads"] // case["kv_heads"], fmt, block_size, d)[0]
    cache_bytes = readers * int(case["lens"].sum()) * d * model.ITEMSIZE[fmt]
    assert t.load_bytes["k_cache"] == t.load_bytes["v_cache"] == cache_bytes


def test_decode_up_to_128_is_the_half_warp_rung_bit_for_bit():
    """At head_dim 128 and below a token is read by half a warp with the half-warp rung's runs: the same bits
    (fp8 through PTX's conversion and through the table)."""
    for layout, d, block_size, fmt in (("32/8", 128, 16, "float16"), ("64/8", 64, 16, "fp8_e4m3"),
                                       ("40/40", 8, 16, "float32")):
        case = vllm_case(layout, d, block_size, fmt, num_seqs=1)
        args = (case["q"], case["k_cache"], case["v_cache"], case["tables"], case["lens"])
        for convert in ((True, False) if fmt == "fp8_e4m3" else (None,)):
            wide = lp.gqa_decode_wide_heads(*args, **case["extra"], partition_size=32,
                                            kernel=lambda *a: lp.gqa_decode_wide_heads_kernel(*a, fp8_convert=convert))
            taught = lp.gqa_decode_half_warps(*args, **case["extra"], partition_size=32,
                                              kernel=lambda *a: lp.gqa_decode_half_warps_kernel(*a,
                                                                                               fp8_convert=convert))
            assert np.array_equal(wide.view(np.uint32), taught.view(np.uint32)), (d, fmt, convert)


def test_decode_tiling_past_128():
    """Half a warp a token up to 128, the whole warp past it; a part's tokens as the half-warp rung's (bf16 as
    fp16), so a warp's run halves past 128; shared memory 32 KiB at group 8 and head_dim 256."""
    for fmt in lp.WIDE_CACHE_FORMATS:
        for group in (1, 4, 5, 8, 9):
            for block_size in (1, 3, 16, 32):
                _, heads, lanes, run = lp.wide_decode_tiling(group, fmt, block_size, 256)
                tokens = run * lanes // 32
                assert lanes == 32 and heads * tokens <= 16 and block_size % tokens == 0
                if fmt in lp.CACHE_FORMATS:
                    assert lp.wide_decode_tiling(group, fmt, block_size, 128)[3] == lp.half_warp_tiling(
                        group, fmt, block_size)[2]
    assert [lp.token_lanes(d) for d in (8, 128, 136, 256)] == [16, 16, 32, 32]
    assert lp.wide_decode_tiling(4, "bfloat16", 16, 256) == (1, 4, 32, 4)
    assert lp.wide_decode_tiling(4, "bfloat16", 16, 128) == lp.wide_decode_tiling(4, "float16", 16, 128)
    assert lp.wide_decode_shared_bytes(8, "float16", 256) == (2 * 4 * 8 + 4 * 8 * 256 + 1) * 4
    assert model.WIDE_CACHE_FORMATS == lp.WIDE_CACHE_FORMATS
    assert model.compulsory_bytes_decode([5, 9], 8, 2, 256, "bfloat16") == model.compulsory_bytes_decode(
        [5, 9], 8, 2, 256, "float16")
    key = lp.gqa_decode_wide_heads_kernel(4, "bfloat16", 256)
    assert key is lp.gqa_decode_wide_heads_kernel(4, "bfloat16", 256, 16)
    with pytest.raises(ValueError, match="fmt must be one of"):
        lp.gqa_decode_wide_heads_kernel(4, "float64", 256)
    with pytest.raises(ValueError, match="head_dim a multiple of 8 up to 256"):
        lp.gqa_decode_wide_heads_kernel(4, "float16", 264)


def test_decode_takes_device_arrays_of_a_bf16_cache():
    case = vllm_case("32/8", 192, 16, "bfloat16")
    device = [cuda.to_device(case[name]) for name in ("q", "k_cache", "v_cache", "tables", "lens")]
    with pytest.raises(ValueError, match="max_context must be given with device arrays"):
        lp.gqa_decode_wide_heads(*device)
    out = lp.gqa_decode_wide_heads(*device, max_context=int(case["lens"].max()), partition_size=16)
    check_decode(out.copy_to_host(), case, "bfloat16", "gqa_decode_wide_heads out from device arrays")


def test_bf16_bits_are_ml_dtypes_bits():
    """The simulator's bfloat16_bits rounds float32 to bf16 as ml_dtypes does (ties to even, overflow to
    infinity, subnormals, -0.0; NaN stays NaN), bfloat16_value reads all 65,536 bit patterns back, and
    four_bfloat16s the numbers of a word (on a GPU: cvt.rn.bf16.f32, a shift and bit casts, compiled below)."""
    ties = (np.arange(1, 256, dtype=np.uint32) << 16 | 0x8000).view(np.float32)       # halfway between two bf16
    x = np.concatenate([ties, -ties, np.array([0.0, -0.0, 1e-40, -3e-39, 3.3895e38, 3.3961e38, 3.4e38, np.inf,
                                               -np.inf, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 65504.0], np.float32),
                        np.random.default_rng(8).standard_normal(200).astype(np.float32) * 1e3])
    got = np.array([bfloat16_bits(v) for v in x], np.uint16)
    assert np.array_equal(got, x.astype(BF16).view(np.uint16))
    assert np.isnan(bfloat16_value(bfloat16_bits(np.float32(np.nan))))
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    values = np.array([bfloat16_value(b) for b in every], np.float32)
    want = every.view(BF16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(values), nan) and np.array_equal(values[~nan].view(np.uint32),
                                                                    want[~nan].view(np.uint32))
    numbers = np.array([1.5, -0.0, np.inf, 1e-40, np.nan, -3.0e38, 2.0 ** -126, 7.0], BF16)
    for word, four in zip(numbers.view(np.uint64), numbers.reshape(-1, 4)):
        got = np.array(lp.four_bfloat16s(word), np.float32)
        assert np.array_equal(got.view(np.uint32), four.astype(np.float32).view(np.uint32))


# ------------------------------------------------------------------------------------------------
# What each rung refuses, before it launches
# ------------------------------------------------------------------------------------------------

def prefill_args(d, dtype=np.float16):
    return dict(q=np.zeros((1, 2, 5, d), dtype), k=np.zeros((1, 1, 5, d), dtype), v=np.zeros((1, 1, 5, d), dtype))


def decode_args(d, dtype=np.float16, **change):
    """Two sequences, two query heads on one KV head, pages of 4, contexts 5 and 3."""
    args = dict(q=np.zeros((2, 2, d), np.float32), k_cache=np.zeros((6, 1, 4, d), dtype),
                v_cache=np.zeros((6, 1, 4, d), dtype), block_tables=np.array([[0, 1], [2, -1]], np.int32),
                context_lens=np.array([5, 3], np.int32))
    args.update(change)
    return args


@pytest.mark.parametrize("launch, args, error, words", [
    (lp.gqa_prefill_wide_heads, prefill_args(264), ValueError,
     r"q must have 1 <= head_dim <= 256 \(WIDE_HEAD_DIM_MAX.*got head_dim 264"),
    (lp.gqa_prefill_wide_heads, prefill_args(8, np.float64), TypeError,
     "q must have dtype one of float16, bfloat16, float32, got float64"),
    (lp.gqa_decode_wide_heads, decode_args(264, BF16), ValueError,
     r"q must have 1 <= head_dim <= 256 \(WIDE_HEAD_DIM_MAX.*got head_dim 264"),
    (lp.gqa_decode_wide_heads, decode_args(59, BF16), ValueError, "head_dim that is a multiple of 8"),
    (lp.gqa_decode_wide_heads, decode_args(8, np.float64), TypeError,
     "k_cache must have dtype one of float32, float16, bfloat16, uint8, got float64"),
    (lp.gqa_decode_wide_heads, decode_args(8, BF16, k_scales=np.ones((6, 1), np.float32)), ValueError,
     "k_scales must be None for a bfloat16 cache"),
    (lp.gqa_decode_wide_heads, decode_args(8, BF16, q=np.zeros((2, 2, 8), BF16)), TypeError,
     "q must have dtype float32"),
    (lp.gqa_decode_wide_heads, decode_args(8, np.float16, v_cache=np.zeros((6, 1, 4, 8), BF16)), TypeError,
     "v_cache must have dtype float16, got bfloat16"),
], ids=["prefill head_dim 264", "prefill float64", "decode head_dim 264", "decode head_dim 59",
        "decode float64 cache", "decode bf16 with scales", "decode bf16 q", "decode mixed caches"])
def test_wide_rungs_refuse_what_they_cannot_run_naming_the_argument_and_the_limit(launch, args, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        launch(**args)
    assert t.launches == 0
    with pytest.raises(ValueError, match=r"head_dim must lie in \[1, 256\]"):
        lp.gqa_prefill_wide_heads_kernel(257)


def _other_rungs(kind):
    """The prefill or decode rungs of days 6 to 8 other than the wide ones, by name."""
    ladders = (paged_attention.RUNGS, gqa_attention.RUNGS, lp.RUNGS)
    names = {name: rung for ladder in ladders for name, rung in ladder.items()
             if name.startswith(f"gqa_{kind}") or (kind == "decode" and name.startswith("paged_attention"))}
    return {name: rung for name, rung in names.items() if not name.endswith("_wide_heads")}


@pytest.mark.parametrize("name", sorted(_other_rungs("prefill")))
def test_other_prefill_rungs_refuse_head_dim_past_128_naming_the_wide_rung(name):
    rung = _other_rungs("prefill")[name]
    dtype = np.float32 if name in gqa_attention.RUNGS else np.float16
    with count_traffic() as t, pytest.raises(ValueError, match=r"q must have 1 <= head_dim <= 128 .*got head_dim "
                                                               r"160.*gqa_prefill_wide_heads takes head_dim up to 256"):
        rung(**prefill_args(160, dtype))
    assert t.launches == 0 and lp.WIDE_HEAD_DIM_MAX == 256


@pytest.mark.parametrize("name", sorted(_other_rungs("decode")))
def test_other_decode_rungs_refuse_head_dim_past_128_and_a_bf16_cache(name):
    rung = _other_rungs("decode")[name]
    dtype = np.float16 if name in lp.RUNGS else np.float32
    with count_traffic() as t:
        with pytest.raises(ValueError, match=r"q must have 1 <= head_dim <= 128 .*got head_dim 160.*"
                                             r"gqa_decode_wide_heads takes head_dim up to 256"):
            rung(**decode_args(160, dtype))
        words = (r"k_cache must have dtype one of float32, float16, uint8, got bfloat16 \(a bf16 cache is read by "
                 r"gqa_decode_wide_heads\)" if name in lp.RUNGS else "k_cache must have dtype float32, got bfloat16")
        with pytest.raises(TypeError, match=words):
            rung(**decode_args(8, BF16))
    assert t.launches == 0


# ------------------------------------------------------------------------------------------------
# At full length, on a GPU (make test-gpu DAY=08): skipped on the simulator
# ------------------------------------------------------------------------------------------------

# flash-attention's ten (seqlen_q, seqlen_k) pairs and its batch of 4.
FLASH_FULL_LENGTHS = ((113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024),
                      (1023, 1024), (1024, 1023), (2048, 2048))
# vLLM's heads, its 7 sequences (the last of the longest context), MAX_SEQ_LEN on an H100 (its largest shared
# memory a block may opt in to, 227 KiB, in float32 numbers, less 512) and NUM_BLOCKS.
VLLM_FULL_HEADS = {"32/8": (32, 8), "40/40": (40, 40), "64/8": (64, 8)}
VLLM_FULL = dict(num_seqs=7, longest=57_600, num_blocks=4321, layouts=VLLM_FULL_HEADS)


def test_the_full_length_reference_is_the_paged_reference():
    """grouped_paged_attention, the full-length steps' reference, equals reference.paged_attention."""
    case = vllm_case("64/8", 24, 4, "float16", num_seqs=3, longest=9)
    case["lens"][0] = 0
    got = grouped_paged_attention(case["q"], *case["stored"], case["tables"], case["lens"])
    want = reference.paged_attention(case["q"], *case["stored"], case["tables"], case["lens"])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.gpu
@pytest.mark.parametrize("d, layout, n, m, causal, dtype, batch", _flash_cases(FLASH_FULL_LENGTHS, (4, 4)))
def test_prefill_over_flash_attentions_grid_at_full_length(d, layout, n, m, causal, dtype, batch):
    test_prefill_over_flash_attentions_grid(d, layout, n, m, causal, dtype, batch)


@pytest.mark.gpu
@pytest.mark.parametrize("layout, d, block_size, fmt, partition_size", _vllm_cases())
def test_decode_over_vllms_grid_at_full_length(layout, d, block_size, fmt, partition_size):
    """Contexts up to 57,600 tokens over 4,321 pages drawn at random (repeating), vLLM's rule against the
    reference on the stored cache."""
    case = vllm_case(layout, d, block_size, fmt, **VLLM_FULL)
    out = run_wide_decode(case, partition_size=partition_size)
    check_decode(out, case, fmt, f"gqa_decode_wide_heads, heads {layout}, head_dim {d}, pages of {block_size}, "
                                 f"{fmt} cache, contexts {case['lens'].tolist()}",
                 paged_reference=grouped_paged_attention, course_rules=False)


# ------------------------------------------------------------------------------------------------
# What the GPU compiler makes of the wide kernels (waits for the subprocess: keep it last)
# ------------------------------------------------------------------------------------------------

def test_wide_kernels_compile_for_sm80_and_sm90_without_local_memory(compiled):
    """At head_dim 255 and 256 every thread's channels are compile-time indices (registers, no local memory);
    bf16 takes no call (``bfloat16_value``, ``bfloat16_bits``: cvt.rn.bf16.f32), the prefill's rows of two
    threads sum their halves with a shuffle; shared memory as sized (24 KiB prefill; decode 16 and 32 KiB)."""
    records = {(r["kernel"], r["cc"]): r for r in compiled()}
    assert len(records) == 10
    failures = [f"{name} for {cc}: {r['error']}" for (name, cc), r in records.items() if "error" in r]
    assert not failures, "\n".join(failures)
    for (name, cc), record in records.items():
        assert not record["local"], (name, cc)
        assert record["calls"] == 0, (name, cc)
    for cc in ("sm_80", "sm_90"):
        assert records["prefill bf16 256", cc]["bf16_roundings"] >= 1
        assert records["prefill fp16 256", cc]["shuffles"] >= 1
        assert records["prefill fp16 256", cc]["shared"] == lp.wide_prefill_shared_bytes(256)
        assert records["decode bf16 256 group 4", cc]["shared"] == lp.wide_decode_shared_bytes(4, "bfloat16", 256)
    assert records["decode fp16 256 group 8", "sm_90"]["shared"] == 32 * 1024 + 4 * 8 * 2 * 4 + 4
