"""Day 8's fp8 ring decode, ``gqa_decode_fp8_ring`` (``kernels/low_precision_attention/fp8_ring.py``), on the
simulator at small shapes, and the two bit casts it adds to ``kernels.intrinsics`` (``float_bits``, ``bits_float``).

- The rung computes ``gqa_decode_tensor_cores``' tiles with that rung's own steps, only fed from a ring in shared
  memory: its output is the same bits at the same partition size, on the cases of the tensor-core rung's table
  that it takes and on its other cases moved to head_dim 16 (pages of 3, 8, 16 and 32; groups of 1, 4, 8 and 9;
  empty and partial tiles; head_dim 16 to 128, 48 among them, whose 3 chunks a row are rotated too), and on pages
  whose V scales lie 2**25 apart (pages of 3 and of 16); and it meets
  day 8's precision rule against the float64 reference (``check_decode``, NaN codes in every slot past a context).
- The launch: its kernel and day 6's merge; every K and V code of a context read once per block (the copies of
  rows past the end read nothing).
- ``ring_chunk`` places the 16-byte chunks so that the rows a warp reads at once spread over the banks: the K
  and V reads of a tile at head_dim 128 take two wavefronts of 128 bytes, the fewest 256 bytes can.
- Refusals before any launch: fp16, float32 and bf16 caches (naming the rungs that read them), a head_dim that
  is not a multiple of 16, a partition that is not a multiple of 16 tokens.
- A process without the simulator compiles the kernel for sm_80 and sm_90 at head_dim 64 and 128: cp.async
  copies waited for with wait_group 2 and 0, the mma, no local memory, the ring's 48 KB; where ptxas is installed,
  no stack frame and no spills within the 3 blocks an SM its launch bounds ask for.
- Marked ``gpu``: at 16 sequences of 8,192 tokens (head_dim 128, group 4, 8 KV heads, pages of 16) the same bits
  as ``gqa_decode_tensor_cores``.
"""

import re
import shutil
import textwrap

import numpy as np
import pytest

from ptx_in_background import compile_fixtures
from test_day08_kernels import TENSOR_CASES, TENSOR_V_SPREAD_CASES, check_decode, decode_case, decode_args
from test_tensor_core_gemm import assemble

import course
from course.checking import poison, random_inputs
from course.traffic import count_traffic
from kernels import low_precision_attention as lp
from kernels.intrinsics import bits_float, float_bits, load_shared_u32x2
from kernels.paged_attention import WARPS


def _fp8(params):
    """The fp8 cases of a table of the tensor-core rung whose head_dim the ring takes (a multiple of 16)."""
    return [p for p in params if p.values[0] == "fp8_e4m3" and p.values[5] % 16 == 0]


RING_CASES = _fp8(TENSOR_CASES) + [
    pytest.param("fp8_e4m3", 8, [150, 0, 47], 1, 9, 48, 160, id="fp8-g9-head-dim-48-pages-of-8"),
    pytest.param("fp8_e4m3", 16, [33, 64], 2, 4, 64, 16, id="fp8-g4-head-dim-64-one-tile-a-partition"),
    # the tensor-core table's cases at head_dim 8, here at 16: a tile over several pages, one-token and empty contexts
    pytest.param("fp8_e4m3", 3, [40, 17], 1, 8, 16, 16, id="fp8-g8-pages-of-3"),
    pytest.param("fp8_e4m3", 8, [13, 0], 2, 1, 16, 16, id="fp8-g1-pages-of-8"),
]


def both(case, partition_size):
    """The ring rung's and the tensor-core rung's outputs on one case, into NaN-poisoned arrays."""
    args = (case.q, case.k_cache, case.v_cache, case.tables, case.lens)
    ring = lp.gqa_decode_fp8_ring(*args, **case.extra, out=poison(np.empty_like(case.q)), partition_size=partition_size)
    tensor = lp.gqa_decode_tensor_cores(*args, **case.extra, out=poison(np.empty_like(case.q)),
                                        partition_size=partition_size)
    return ring, tensor


RINGS = ["gqa_decode_fp8_ring", "gqa_decode_fp8_lean_ring"]


@pytest.mark.parametrize("rung", RINGS)
@pytest.mark.parametrize("fmt, block_size, lens, kv_heads, group, d, partition_size", RING_CASES)
def test_the_ring_gives_the_tensor_core_rung_s_bits_and_meets_the_precision_rule(rung, fmt, block_size, lens, kv_heads,
                                                                                  group, d, partition_size):
    """Both rings (the lean one reads the same words of the same slots, its indices unsigned): every code read once,
    the precision rule, and the tensor-core rung's bits."""
    case = decode_case(fmt, lens, block_size, kv_heads=kv_heads, group=group, d=d, ramp=max(lens) > 200)
    with count_traffic() as t:
        ring = lp.RUNGS[rung](case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                              out=poison(np.empty_like(case.q)), partition_size=partition_size)
    assert t.kernel_names == [f"{rung}_kernel", "paged_attention_v2_merge_kernel"]
    readers = kv_heads * -(-group // 8)
    assert t.load_bytes["k_rows"] == t.load_bytes["v_rows"] == readers * sum(lens) * d, dict(t.load_bytes)
    check_decode(ring, case, f"{rung} out, group {group}, pages of {block_size}, head_dim {d}")
    _, tensor = both(case, partition_size)
    np.testing.assert_array_equal(ring.view(np.uint32), tensor.view(np.uint32),
                                  err_msg=f"{rung} against gqa_decode_tensor_cores, seed {case.seed}")


@pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator twin")
@pytest.mark.parametrize("shape, row, col, error, words", [
    ((4, 8), 1, 3, ValueError, "8-byte aligned address.*col a multiple of 2, got rows of 8 words and col 3"),
    ((4, 7), 0, 0, ValueError, "tile's rows must be a multiple of 2 words long.*got rows of 7 words"),
    ((4, 8), 4, 0, IndexError, "words 0 ... 1 of row 4 lie outside tile of shape \\(4, 8\\)"),
    ((4, 8), 0, 8, IndexError, "words 8 ... 9 of row 0 lie outside"),
])
def test_load_shared_u32x2_twin_reads_two_words_and_refuses_what_the_gpu_would_fault_on(shape, row, col, error,
                                                                                       words):
    tile = np.arange(32, dtype=np.uint32).reshape(4, 8)
    assert load_shared_u32x2(tile, 2, 4) == (20, 21) and load_shared_u32x2(tile, 3, 6) == (30, 31)
    with pytest.raises(error, match=words):
        load_shared_u32x2(np.zeros(shape, np.uint32), row, col)


@pytest.mark.parametrize("block_size, lens, kv_heads, group, d, partition_size", TENSOR_V_SPREAD_CASES)
def test_the_ring_holds_v_scales_far_apart_as_the_tensor_core_rung_does(block_size, lens, kv_heads, group, d,
                                                                        partition_size):
    d = 16
    case = decode_case("fp8_e4m3", lens, block_size, kv_heads=kv_heads, group=group, d=d, v_spread=True)
    ring, tensor = both(case, partition_size)
    check_decode(ring, case, f"gqa_decode_fp8_ring out, V scales spread, pages of {block_size}")
    np.testing.assert_array_equal(ring.view(np.uint32), tensor.view(np.uint32), err_msg=f"seed {case.seed}")


def test_a_ring_that_reads_a_tile_before_it_lands_fails_the_checks(monkeypatch):
    """The checks above can fail: the ring off by one, each turn waiting for all but 3 groups instead of 2 (so it
    reads the oldest slot before its copies have landed), gives other bits and misses the reference."""
    from kernels.low_precision_attention import fp8_ring

    case = decode_case("fp8_e4m3", [70, 33], 32, group=4, d=32)
    _, tensor = both(case, 96)
    wait = fp8_ring.cp_async_wait_group
    monkeypatch.setattr(fp8_ring, "cp_async_wait_group", lambda n: wait(n + 1 if n else 0))
    early = lp.gqa_decode_fp8_ring(case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                                   out=poison(np.empty_like(case.q)), partition_size=96)
    assert not np.array_equal(early.view(np.uint32), tensor.view(np.uint32))
    with pytest.raises(AssertionError):
        check_decode(early, case, "a ring that reads its oldest slot too early")


def test_ring_chunks_spread_a_warps_reads_over_the_banks():
    """At head_dim 128 (8 chunks a row) the K read of one step (rows g = 0 ... 7, 8-byte words tq + 4 j: chunks
    2 j and 2 j + 1) and the V read (rows 2 tq + e, words g + 8 i: chunks 4 i ... 4 i + 3) each put 2 rows' chunks in
    every 128-byte bank window: 2 wavefronts for 256 bytes, the fewest. Unrotated, the K read would take 8. Every
    row's placement is a permutation of its chunks, for 1 to 8 chunks a row."""
    for chunks in range(1, 9):
        for row in range(32):
            assert sorted(lp.ring_chunk(row, c, chunks) for c in range(chunks)) == list(range(chunks))

    def wavefronts(accesses, place):
        windows = {}
        for row, chunk in accesses:
            windows.setdefault((row * 8 + place(row, chunk)) % 8, set()).add((row, chunk))
        return max(len(v) for v in windows.values())

    rotated = lambda row, chunk: lp.ring_chunk(row, chunk, 8)
    for j in range(4):
        k_read = [(g, (tq + 4 * j) // 2) for g in range(8) for tq in range(4)]
        assert wavefronts(k_read, rotated) == 2 and wavefronts(k_read, lambda r, c: c) == 8
    for e in range(2):
        for i in range(2):
            v_read = [(2 * tq + e, (g + 8 * i) // 2) for tq in range(4) for g in range(8)]
            assert wavefronts(v_read, rotated) == 2


def test_bit_casts_keep_every_bit():
    """float_bits and bits_float (the simulator's twins; on a GPU an LLVM bitcast, compiled below) are each other's
    inverse on NaN, infinities, subnormals and -0.0."""
    x = np.array([1.5, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4e38, 2.0 ** -126], np.float32)
    words = np.array([float_bits(v) for v in x], np.uint32)
    np.testing.assert_array_equal(words, x.view(np.uint32))
    back = np.array([bits_float(w) for w in words], np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), x.view(np.uint32))


@pytest.mark.parametrize("args, error, words", [
    (decode_args(k_cache=np.zeros((6, 1, 4, 16), np.float16), v_cache=np.zeros((6, 1, 4, 16), np.float16),
                 k_scales=None, v_scales=None, q=np.zeros((2, 4, 16), np.float32)), ValueError,
     r"k_cache must hold fp8 e4m3 codes for gqa_decode_fp8_ring, got float16: gqa_decode_tensor_cores takes an fp16"),
    (decode_args(k_cache=np.zeros((6, 1, 4, 16), np.float32), v_cache=np.zeros((6, 1, 4, 16), np.float32),
                 k_scales=None, v_scales=None, q=np.zeros((2, 4, 16), np.float32)), ValueError,
     r"got float32: .*gqa_decode_half_warps a float32 one"),
    (decode_args(k_cache=np.zeros((6, 1, 4, 24), np.uint8), v_cache=np.zeros((6, 1, 4, 24), np.uint8),
                 q=np.zeros((2, 4, 24), np.float32)), ValueError,
     r"head_dim that is a multiple of 16.*got head_dim 24"),
    (dict(decode_args(k_cache=np.zeros((6, 1, 4, 16), np.uint8), v_cache=np.zeros((6, 1, 4, 16), np.uint8),
                      q=np.zeros((2, 4, 16), np.float32)), partition_size=24), ValueError,
     r"partition_size must be a multiple of 16 \(a warp's tile"),
], ids=["fp16", "float32", "head_dim 24", "partition 24"])
def test_the_ring_refuses_what_it_cannot_run_naming_it(args, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        lp.gqa_decode_fp8_ring(**args)
    assert t.launches == 0


def test_the_ring_fits_a_block_s_shared_memory():
    """3 slots of 16 K and 16 V rows a warp: 48 KB at head_dim 128, the static limit; the merge buffer fits in it."""
    assert lp.RING_SLOTS == 3 and lp.ring_shared_bytes(128) == 48 * 1024 == WARPS * 3 * 32 * 128
    assert lp.ring_shared_bytes(64) == 24 * 1024


# ------------------------------------------------------------------------------------------------
# PTX for sm_80 and sm_90 (compiled in the background process)
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from course.gpu_compile import COMPUTE_CAPABILITIES, ptx_for_targets
    from kernels import low_precision_attention as lp
    f32 = numba.float32
    rows = numba.uint16[:, ::1]
    signature = (f32[:, :, ::1], rows, rows, f32[:, ::1], f32[:, ::1], numba.int32[:, ::1], numba.int32[::1], f32,
                 numba.int64, numba.int64, f32[:, :, ::1], f32[:, :, ::1], f32[:, :, :, ::1])
    for d, lean in ((64, False), (128, False), (128, True)):
        kernel = (lp.gqa_decode_fp8_lean_ring_kernel if lean else lp.gqa_decode_fp8_ring_kernel)(d, 16)
        bounds = kernel.targetoptions.get("launch_bounds")
        for (major, minor), ptx in ptx_for_targets(kernel.py_func, signature, COMPUTE_CAPABILITIES,
                                                   launch_bounds=bounds).items():
            body = ptx[ptx.index(".entry"):]
            print(json.dumps({"d": d, "lean": lean, "cc": f"sm_{major}{minor}", "ptx": ptx, "local": ".local" in body,
                              "pair_loads": body.count("ld.shared.v2.u32"),
                              "f64": ".f64" in body, "calls": len(re.findall(r"\bcall(\.uni)?\s", body)),
                              "mma": body.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
                              "cp_async": body.count("cp.async.cg.shared.global"),
                              "waits": sorted(set(re.findall(r"cp\.async\.wait_group (\d+)", body))),
                              "e4m3": body.count("cvt.rn.f16x2.e4m3x2"),
                              "shared_aligns": re.findall(r"\.shared\s+\.align\s+(\d+)\s+\.b8", ptx),
                              "shared_bytes": sum(int(size) for size in re.findall(
                                  r"\.shared\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]", ptx))}), flush=True)
""")


compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM)


def records_of(compiled):
    records = compiled()
    assert {(r["d"], r["lean"], r["cc"]) for r in records} == {
        (d, lean, cc) for d, lean in ((64, False), (128, False), (128, True)) for cc in ("sm_80", "sm_90")}
    return records


def test_ptx_copies_with_cp_async_and_keeps_everything_in_registers(compiled):
    """No local memory, no call, no float64; the tensor-core rung's mmas (d / 16 x 2 for the scores, d / 8 x 2 for
    the weighted rows, hi and lo: 16 a tile at d = 64, 32 at 128) and e4m3 conversions; cp.async copies, waited for
    with wait_group 2 in the loop and 0 after it; the ring's shared memory and nothing else, aligned to 16 bytes
    (a 16-byte cp.async to an address that is not faults on a GPU; the simulator does not check the base)."""
    for r in records_of(compiled):
        where = f"d {r['d']} {r['cc']}"
        assert not r["local"] and not r["f64"] and r["calls"] == 0, where
        assert r["mma"] == r["d"] // 4 and r["e4m3"] > 0, where
        assert r["cp_async"] > 0 and r["waits"] == ["0", "2"], where
        assert r["shared_bytes"] == lp.ring_shared_bytes(r["d"]) <= 48 * 1024, where
        assert r["shared_aligns"] == ["16"], f"{where}: cp.async's 16-byte copies need a 16-byte aligned ring"
        # the lean ring reads a slot's 8-byte words in one load each, the ring in two
        assert (r["pair_loads"] > 0) == r["lean"], where


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA's PTX assembler) is not installed")
def test_ptx_assembles_without_stack_or_spills_within_its_launch_bounds(compiled, tmp_path):
    """ptxas keeps the kernel in registers at 3 blocks an SM (at most 65,536 / (128 x 3) = 170 a thread): no stack
    frame, no spills. sm_90 only: sm_80 has no e4m3 conversion (the launcher asks for compute capability 8.9)."""
    for r in records_of(compiled):
        if r["cc"] != "sm_90":
            continue
        report = assemble(r["ptx"], r["cc"], tmp_path)
        where = f"d {r['d']} {'lean ' if r['lean'] else ''}{r['cc']}"
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, f"{where}\n{report}"
        assert ".minnctapersm 3" in r["ptx"], where
        assert int(re.search(r"Used (\d+) registers", report).group(1)) <= 65536 // (128 * lp.RING_MIN_BLOCKS), report


# ------------------------------------------------------------------------------------------------
# On a GPU (make test-gpu DAY=08)
# ------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_ring_gives_the_tensor_core_rung_s_bits_at_full_size():
    """Both rings, 16 sequences of 8,192 tokens (the last one 8,000), 8 KV heads, group 4, head_dim 128, pages of 16, in the
    partitions tensor_partition_size picks: the same bits as gqa_decode_tensor_cores, and the precision rule."""
    from numba import cuda

    rng, seed = random_inputs()
    lens = [8192] * 15 + [8000]
    case = decode_case("fp8_e4m3", lens, 16, kv_heads=8, group=4, d=128, seed=seed)
    args = [cuda.to_device(a) for a in (case.q, case.k_cache, case.v_cache, case.tables, case.lens)]
    extra = {k: cuda.to_device(v) for k, v in case.extra.items()}
    ring = lp.gqa_decode_fp8_ring(*args, **extra, max_context=8192).copy_to_host()
    tensor = lp.gqa_decode_tensor_cores(*args, **extra, max_context=8192).copy_to_host()
    lean = lp.gqa_decode_fp8_lean_ring(*args, **extra, max_context=8192).copy_to_host()
    np.testing.assert_array_equal(ring.view(np.uint32), tensor.view(np.uint32), err_msg=f"seed {seed}")
    np.testing.assert_array_equal(lean.view(np.uint32), ring.view(np.uint32),
                                  err_msg=f"gqa_decode_fp8_lean_ring, seed {seed}")
    check_decode(ring, case, "gqa_decode_fp8_ring at full size")
