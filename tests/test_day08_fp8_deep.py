"""Day 8's deep fp8 decode, ``gqa_decode_fp8_deep`` (``kernels/low_precision_attention/fp8_deep.py``), on the
simulator at small shapes, its PTX, and on a GPU at full size.

- The rung meets day 8's precision rule against the float64 reference (``check_decode``: float32's tolerance on the
  stored cache, the fp8 rule on the float32 cache, NaN codes in every slot past a context) at head_dim 64 and 128,
  pages of 3, 8, 16 and 32, groups of 1, 2 and 4 (hi and lo weights in one mma) and 8 and 9 (two mma), empty,
  one-token and partial tiles, growing logits, and on pages whose V scales lie 2**25 apart; every K and V code of a
  context read once per block.
- Each of the builder's choices alone (two tiles deep, 3 blocks an SM, 8-byte loads, one chain of score mma, the
  two weight mma at group 4) gives a correct kernel too: the probes that time them run correct code.
- The checks can fail: blocks of 8 heads packed as if they held 4 (heads 4-7 then take heads 0-3's lo weights)
  miss the reference.
- Refusals before any launch: fp16, float32 and bf16 caches (naming the rungs that read them), a head_dim that is
  not a multiple of 64, a partition that is not a multiple of 16 tokens.
- A process without the simulator compiles the kernel for sm_90 at head_dim 64 and 128, packed and not:
  16-byte loads, the mma of three tiles, no local memory, no float64; where ptxas is installed, no stack frame and
  no spills within the 2 blocks an SM its launch bounds ask for.
- Marked ``gpu``: 16 sequences of 8,192 tokens (head_dim 128, 8 KV heads, groups 4 and 8, pages of 16) by the
  precision rule, and within float32's rounding of ``gqa_decode_tensor_cores``.
"""

import re
import shutil
import textwrap

import numpy as np
import pytest

from ptx_in_background import compile_fixtures
from test_day08_kernels import TENSOR_V_SPREAD_CASES, check_decode, decode_args, decode_case
from test_tensor_core_gemm import assemble

from course.checking import poison, random_inputs
from course.traffic import count_traffic
from kernels import low_precision_attention as lp
from kernels.low_precision_attention import fp8_deep

# (block_size, contexts, kv_heads, group, head_dim, partition_size)
DEEP_CASES = [
    pytest.param(32, [70, 33], 1, 4, 128, 32, id="g4-head-dim-128-pages-of-32"),
    pytest.param(16, [300, 161], 1, 4, 64, 320, id="g4-growing-logits-many-tiles"),
    pytest.param(3, [40, 17], 1, 8, 64, 16, id="g8-pages-of-3"),
    pytest.param(8, [13, 0], 2, 1, 64, 16, id="g1-pages-of-8-empty-context"),
    pytest.param(16, [50, 1], 1, 9, 64, 48, id="g9-blocks-of-5-and-4-heads"),
    pytest.param(16, [37, 200], 2, 2, 128, 96, id="g2-two-kv-heads-partial-tiles"),
]


def deep(case, partition_size, kernel=lp.gqa_decode_fp8_deep_kernel):
    return lp.gqa_decode_fp8_deep(case.q, case.k_cache, case.v_cache, case.tables, case.lens, **case.extra,
                                  out=poison(np.empty_like(case.q)), partition_size=partition_size, kernel=kernel)


@pytest.mark.parametrize("block_size, lens, kv_heads, group, d, partition_size", DEEP_CASES)
def test_deep_meets_the_precision_rule_and_reads_the_cache_once(block_size, lens, kv_heads, group, d,
                                                                 partition_size):
    case = decode_case("fp8_e4m3", lens, block_size, kv_heads=kv_heads, group=group, d=d, ramp=max(lens) > 200)
    with count_traffic() as t:
        out = deep(case, partition_size)
    assert t.kernel_names == ["gqa_decode_fp8_deep_kernel", "paged_attention_v2_merge_kernel"]
    readers = kv_heads * -(-group // 8)
    loads = t.load_bytes
    k_bytes = loads.get("k_rows", 0) + loads.get("k_words", 0)
    v_bytes = loads.get("v_rows", 0) + loads.get("v_words", 0)
    assert k_bytes == v_bytes == readers * sum(lens) * d, dict(loads)
    # 16-byte loads of K always; of V at head_dim 128 (a lane's 16 channels), 8-byte words at 64
    assert loads.get("k_words", 0) == 0 and (loads.get("v_words", 0) == 0) == (d % 128 == 0), dict(loads)
    check_decode(out, case, f"gqa_decode_fp8_deep out, group {group}, pages of {block_size}, head_dim {d} "
                            f"(one weight mma: {lp.deep_packs(group)})")


@pytest.mark.parametrize("block_size, lens, kv_heads, group, d, partition_size", TENSOR_V_SPREAD_CASES)
def test_deep_holds_v_scales_far_apart(block_size, lens, kv_heads, group, d, partition_size):
    case = decode_case("fp8_e4m3", lens, block_size, kv_heads=kv_heads, group=group, d=64, v_spread=True)
    check_decode(deep(case, partition_size), case, f"gqa_decode_fp8_deep out, V scales spread, pages of {block_size}")


@pytest.mark.parametrize("knobs", [dict(depth=2), dict(min_blocks=3), dict(wide=False), dict(chains=1),
                                   dict(pack=False)],
                         ids=["two-tiles-deep", "3-blocks", "8-byte-loads", "one-chain", "two-weight-mma"])
def test_each_choice_of_the_builder_alone_is_correct(knobs):
    """The kernels the recorder times (day08_fp8_deep_choices), each with one of the rung's choices undone
    (deep_kernel_choosing), at head_dim 128 and group 4."""
    kernel = lp.deep_kernel_choosing(**knobs)
    case = decode_case("fp8_e4m3", [90, 41], 16, kv_heads=1, group=4, d=128)
    check_decode(deep(case, 48, kernel), case, f"gqa_decode_fp8_deep with {knobs or 'two weight mma'}")


@pytest.mark.filterwarnings("ignore:invalid value encountered")     # the rows the packed blocks never wrote
def test_blocks_of_8_heads_packed_as_if_4_fail_the_checks(monkeypatch):
    """The checks can fail: packed at group 8, columns 4-7 of the weights' mma take heads 0-3's lo weights instead
    of heads 4-7's, so half the heads miss the reference."""
    case = decode_case("fp8_e4m3", [40, 17], 16, group=8, d=64)
    check_decode(deep(case, 16), case, "unpacked at group 8")
    monkeypatch.setattr(fp8_deep, "DEEP_PACK_HEADS", 8)
    assert lp.deep_packs(8)
    with pytest.raises(AssertionError):
        check_decode(deep(case, 16), case, "packed at group 8")


def test_deep_partitions_are_chosen_for_2_blocks_an_sm():
    """The partition model weighs rounds of the blocks an SM holds: 2 for the deep rung (its launch bounds), 3 for
    the register rung on fp8. On 132 SMs (an H100 or H200) at 16 x 32,768 tokens, 8 KV heads: partitions of 16,384
    (256 blocks, one round of 264 places) against 4,096 (1,024 blocks) -- the grids Nsight showed, (8, 16, 2) and
    (8, 16, 8)."""
    assert lp.tensor_partition_size("fp8_e4m3", 16, 8, 32768, 132, holds=lp.DEEP_MIN_BLOCKS) == 16384
    assert lp.tensor_partition_size("fp8_e4m3", 16, 8, 32768, 132) == 4096


def test_deep_packs_blocks_of_at_most_4_heads():
    assert [lp.deep_packs(g) for g in range(1, 10)] == [True] * 4 + [False] * 5
    assert lp.DEEP_PACK_HEADS == 4 and lp.DEEP_MIN_BLOCKS == 2 and lp.DEEP_DEPTH == 3


@pytest.mark.parametrize("args, error, words", [
    (decode_args(k_cache=np.zeros((6, 1, 4, 64), np.float16), v_cache=np.zeros((6, 1, 4, 64), np.float16),
                 k_scales=None, v_scales=None, q=np.zeros((2, 4, 64), np.float32)), ValueError,
     r"k_cache must hold fp8 e4m3 codes for gqa_decode_fp8_deep, got float16: gqa_decode_tensor_cores takes an fp16"),
    (decode_args(k_cache=np.zeros((6, 1, 4, 64), np.float32), v_cache=np.zeros((6, 1, 4, 64), np.float32),
                 k_scales=None, v_scales=None, q=np.zeros((2, 4, 64), np.float32)), ValueError,
     r"got float32: .*gqa_decode_half_warps a float32 one"),
    (decode_args(k_cache=np.zeros((6, 1, 4, 32), np.uint8), v_cache=np.zeros((6, 1, 4, 32), np.uint8),
                 q=np.zeros((2, 4, 32), np.float32)), ValueError,
     r"head_dim that is a multiple of 64 for gqa_decode_fp8_deep .*got head_dim 32: gqa_decode_tensor_cores takes"),
    (dict(decode_args(k_cache=np.zeros((6, 1, 4, 64), np.uint8), v_cache=np.zeros((6, 1, 4, 64), np.uint8),
                      q=np.zeros((2, 4, 64), np.float32)), partition_size=24), ValueError,
     r"partition_size must be a multiple of 16 \(a warp's tile"),
], ids=["fp16", "float32", "head_dim 32", "partition 24"])
def test_deep_refuses_what_it_cannot_run_naming_it(args, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        lp.gqa_decode_fp8_deep(**args)
    assert t.launches == 0


# ------------------------------------------------------------------------------------------------
# PTX for sm_90 (compiled in the background process). Not for sm_80: the rung decodes e4m3 by an instruction
# of sm_89 and later, its launcher asks for 8.9, and ptxas refuses that PTX for sm_80
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from course.gpu_compile import ptx_for_targets
    from kernels import low_precision_attention as lp
    f32 = numba.float32
    rows, words = numba.uint32[:, ::1], numba.uint64[::1]
    signature = (f32[:, :, ::1], rows, rows, words, words, f32[:, ::1], f32[:, ::1], numba.int32[:, ::1],
                 numba.int32[::1], f32, numba.int64, numba.int64, f32[:, :, ::1], f32[:, :, ::1], f32[:, :, :, ::1])
    for d, pack in ((64, True), (128, True), (128, False)):
        kernel = lp.gqa_decode_fp8_deep_kernel(d, 16, pack)
        bounds = kernel.targetoptions.get("launch_bounds")
        for (major, minor), ptx in ptx_for_targets(kernel.py_func, signature, ((9, 0),),
                                                   launch_bounds=bounds).items():
            body = ptx[ptx.index(".entry"):]
            print(json.dumps({"d": d, "pack": pack, "cc": f"sm_{major}{minor}", "ptx": ptx,
                              "local": ".local" in body, "f64": ".f64" in body,
                              "calls": len(re.findall(r"\bcall(\.uni)?\s", body)),
                              "mma": body.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
                              "wide_loads": body.count("ld.global.nc.v4.u32"),
                              "e4m3": body.count("cvt.rn.f16x2.e4m3x2")}), flush=True)
""")

compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM)


def records_of(compiled):
    records = compiled()
    assert {(r["d"], r["pack"], r["cc"]) for r in records} == {
        (d, pack, "sm_90") for d, pack in ((64, True), (128, True), (128, False))}
    return records


def test_ptx_loads_16_bytes_and_keeps_everything_in_registers(compiled):
    """No local memory, no call, no float64. The loop computes three tiles (one a register set), each with d / 8
    score mma (two tokens' halves, d / 16 steps) and d / 16 weight mma packed or d / 8 not: at d = 128, 72 or 96
    mma; five tiles' loads are issued (two before the loop, one a turn of it), each K row's two units and, at
    d = 128, each V row's unit in one 16-byte load: 8 a tile at 128, 4 at 64 (V in 8-byte words there)."""
    for r in records_of(compiled):
        where = f"d {r['d']} pack {r['pack']} {r['cc']}"
        d = r["d"]
        assert not r["local"] and not r["f64"] and r["calls"] == 0, where
        assert r["mma"] == 3 * (d // 8 + (d // 16 if r["pack"] else d // 8)), where
        assert r["wide_loads"] == 5 * (2 * (d // 64) + (4 if d % 128 == 0 else 0)), where
        assert r["e4m3"] > 0, where


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA's PTX assembler) is not installed")
def test_ptx_assembles_without_stack_or_spills_within_its_launch_bounds(compiled, tmp_path):
    """ptxas keeps the three tiles in registers at 2 blocks an SM (at most 65,536 / (128 x 2) = 256, so 255 a
    thread): no stack frame, no spills."""
    for r in records_of(compiled):
        report = assemble(r["ptx"], r["cc"], tmp_path)
        where = f"d {r['d']} pack {r['pack']}"
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, f"{where}\n{report}"
        assert ".minnctapersm 2" in r["ptx"], where
        assert int(re.search(r"Used (\d+) registers", report).group(1)) <= 255, report


# ------------------------------------------------------------------------------------------------
# On a GPU (make test-gpu DAY=08)
# ------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("group", [4, 8])
def test_gpu_deep_meets_the_rule_at_full_size(group):
    """16 sequences of 8,192 tokens (the last 8,000), 8 KV heads, head_dim 128, pages of 16, in the partitions
    the launcher picks: the precision rule, and within float32's rounding of gqa_decode_tensor_cores."""
    from numba import cuda

    _, seed = random_inputs()
    lens = [8192] * 15 + [8000]
    case = decode_case("fp8_e4m3", lens, 16, kv_heads=8, group=group, d=128, seed=seed)
    args = [cuda.to_device(a) for a in (case.q, case.k_cache, case.v_cache, case.tables, case.lens)]
    extra = {k: cuda.to_device(v) for k, v in case.extra.items()}
    out = lp.gqa_decode_fp8_deep(*args, **extra, max_context=8192).copy_to_host()
    tensor = lp.gqa_decode_tensor_cores(*args, **extra, max_context=8192).copy_to_host()
    check_decode(out, case, f"gqa_decode_fp8_deep at full size, group {group}")
    np.testing.assert_allclose(out, tensor, rtol=1e-5, atol=1e-5 * float(np.abs(tensor).max()),
                               err_msg=f"seed {seed}")
