"""Day 7 kernels (kernels/gqa_attention/) on the simulator, at small shapes.

Each case runs one launch that serves both the comparison with the float64 reference (output
poisoned with NaN first) and the exact traffic count of ``course.models.gqa``; the counts prove
that K and V are read once per group of query heads, not once per query head as on days 5 and 6.
A prefill block holds ``positions = min(64, 256 // group)`` query positions of every head of a
group. Group sizes: 1 (multi-head, day 5's tiles), 2, 3, 4 (64 positions), 5 and 9 (51 and 28
positions: 255 and 252 rows), ``heads`` (multi-query), 257 and 300 (more than a prefill block's
256 rows: two blocks per KV head and position), and 9, more than a decode block serves at once
(``GROUP_MAX``: two blocks of 5 and 4 heads). The decode kernel is compiled per tiling (heads per
block, tokens in flight): the decode groups 1 and 2 (2 tokens), 3 and 4 (4 tokens), 8 and 9 (1
token) cover every kind, scores padded to a power of two (3 x 4 = 12 of 16) included. The
simulator runs one Python thread per GPU thread, so prompts and head_dim stay small. Decode caches
are shuffled pools of pages built by ``reference.build_paged_cache``: NaN in every slot past a
context's end and in the spare blocks, tables padded with -1.

test_kernels_pattern.py already checks each rung once against the reference and compiles every
kernel for sm_80 and sm_90; this file goes after the corners.
"""

import pathlib
import subprocess
import sys
import textwrap
import types
from fractions import Fraction

import numpy as np
import pytest
from numba import cuda

from course.checking import check, poison, random_inputs
from course.models import gqa as model
from course.models import paged_attention as day6_model
from course.traffic import count_traffic
from kernels import flash_attention, reference
from kernels.flash_attention import attention_v5_flash_registers
from kernels.gqa_attention import (DECODE_BLOCKS_PER_SM, DECODE_PARTITION_MAX, GROUP_MAX, HEAD_DIM_MAX, ROWS_MAX,
                                   TILE_KV, TILE_POS, TOKENS_IN_FLIGHT, decode_grid, decode_partition_size,
                                   decode_shared_bytes, decode_tiling, gqa_decode_group, gqa_decode_partition_kernel,
                                   gqa_decode_split_k, gqa_prefill_flash, gqa_prefill_flash_kernel, gqa_prefill_tiles,
                                   prefill_block, prefill_grid,
                                   prefill_shared_bytes, prefill_tiling, subgroups_for)
from kernels.paged_attention import PARTITION_SIZE, WARP, WARPS, paged_attention_v2_split_k

DIMS = ("batch", "head", "row", "col")
DECODE_DIMS = ("seq", "head", "channel")
STATIC_SHARED_LIMIT = 48 * 1024


def counted(traffic) -> dict:
    """``{argument: (loads, stores)}`` summed over the launches, in the form of ``requested_*``."""
    return {name: (traffic.global_loads[name], traffic.global_stores[name]) for name in traffic.global_loads}


# ------------------------------------------------------------------------------------------------
# Prefill
# ------------------------------------------------------------------------------------------------

def qkv(B, heads, kv_heads, N, M, d, seed=None, large_logits=False):
    """Random q (B, heads, N, d), k and v (B, kv_heads, M, d) float32, and the seed.

    large_logits: integer q and k in [-50, 50], so q·k reaches about 1e4 and is exact in float32.
    """
    rng, seed = random_inputs(seed)
    if large_logits:
        q = rng.integers(-50, 51, (B, heads, N, d)).astype(np.float32)
        k = rng.integers(-50, 51, (B, kv_heads, M, d)).astype(np.float32)
    else:
        q = rng.standard_normal((B, heads, N, d), dtype=np.float32)
        k = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    v = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    return q, k, v, seed


def run_prefill(q, k, v, **kwargs):
    return gqa_prefill_flash(q, k, v, out=poison(np.empty_like(q)), **kwargs)


# (B, heads, kv_heads, N, M, d, causal, kv_lens). A block: min(64, 256 // group) positions x group
# heads; keys come in tiles of 16, so most cases end on a partial key tile.
PREFILL_CASES = [
    pytest.param(1, 2, 2, 70, 70, 2, True, None, id="g1-mha-causal-two-tiles"),        # 64 + 6 positions
    pytest.param(2, 4, 2, 66, 33, 2, False, [33, 7], id="g2-kv_lens-two-tiles"),        # 128 rows, then 4
    pytest.param(1, 3, 1, 67, 80, 1, True, None, id="g3-causal-more-keys-d1"),          # 192 rows, then 9
    pytest.param(1, 6, 2, 23, 30, 40, False, [19], id="g3-kv_lens-d40"),               # one partial tile
    pytest.param(2, 4, 1, 66, 17, 1, True, [0, 11], id="mqa-causal-empty-sequence"),   # 256 rows, then 8
    pytest.param(1, 5, 1, 53, 9, 1, False, None, id="g5-51-positions"),               # 255 rows, then 10
    pytest.param(1, 9, 1, 30, 12, 2, True, [10], id="g9-28-positions-causal"),         # 252 rows, then 18
    pytest.param(1, 257, 1, 3, 4, 1, True, None, id="g257-two-subgroups-129-and-128"),  # 129 rows, 1 idle
    pytest.param(1, 600, 2, 2, 3, 1, False, [2], id="g300-two-kv-heads-two-subgroups"),
]


@pytest.mark.parametrize("B, heads, kv_heads, N, M, d, causal, kv_lens", PREFILL_CASES)
def test_prefill_matches_reference_and_its_traffic_model(B, heads, kv_heads, N, M, d, causal, kv_lens):
    q, k, v, seed = qkv(B, heads, kv_heads, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, np.int32)
    with count_traffic() as t:
        out = run_prefill(q, k, v, causal=causal, kv_lens=lens)
    ref = reference.attention(q, k, v, causal=causal, kv_lens=lens)
    check(out, ref, name=f"O of gqa_prefill_flash, group {heads // kv_heads}, causal={causal}, kv_lens={kv_lens}",
          dims=DIMS, seed=seed)
    if lens is not None:
        assert np.all(out[lens == 0] == 0.0), "rows of an empty sequence must be exactly 0"
    launch = t.per_launch[0]
    assert t.launches == 1 and launch.grid == prefill_grid(B, heads, kv_heads, N)
    assert launch.block[0] == prefill_block(heads, kv_heads) <= ROWS_MAX
    assert counted(t) == model.requested_prefill(B, heads, kv_heads, N, d, M, causal=causal, kv_lens=kv_lens)


# The exercise's rung: the same grid, tiling and loads, head_dim read at run time.
@pytest.mark.parametrize("B, heads, kv_heads, N, M, d, causal, kv_lens",
                         [PREFILL_CASES[i] for i in (1, 2, 4, 6)])
def test_prefill_tiles_matches_reference_and_the_same_traffic_model(B, heads, kv_heads, N, M, d, causal, kv_lens):
    q, k, v, seed = qkv(B, heads, kv_heads, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, np.int32)
    with count_traffic() as t:
        out = gqa_prefill_tiles(q, k, v, causal=causal, kv_lens=lens, out=poison(np.empty_like(q)))
    check(out, reference.attention(q, k, v, causal=causal, kv_lens=lens), dims=DIMS, seed=seed,
          name=f"O of gqa_prefill_tiles, group {heads // kv_heads}, causal={causal}, kv_lens={kv_lens}")
    assert t.kernel_names == ["gqa_prefill_tiles_kernel"]
    assert t.per_launch[0].grid == prefill_grid(B, heads, kv_heads, N)
    assert counted(t) == model.requested_prefill(B, heads, kv_heads, N, d, M, causal=causal, kv_lens=kv_lens)


def kv_loads(traffic) -> int:
    return traffic.global_loads["k"] + traffic.global_loads["v"]


def day5_on_repeated_kv(q, k, v, **kwargs):
    """Day 5's v5 on K and V repeated to the heads of q, counted: the naive mapping, one block per
    query head and tile of 64 positions."""
    group = q.shape[1] // k.shape[1]
    k_repeated = np.ascontiguousarray(np.repeat(k, group, axis=1))
    v_repeated = np.ascontiguousarray(np.repeat(v, group, axis=1))
    with count_traffic() as day5:
        out = attention_v5_flash_registers(q, k_repeated, v_repeated, out=poison(np.empty_like(q)), **kwargs)
    return out, day5


# (heads, kv_heads, N, M, causal, kv_lens, saving). A long prompt: more positions than a block holds.
LONG_PROMPTS = [
    # group 3: blocks of 64 positions as on day 5, so the blocks' key bounds coincide and the saving
    # is exactly the group, causal and with kv_lens too. 131 = 2 * 64 + 3 positions.
    # The first block's keys end at its last position (64), the others' at kv_lens (70).
    pytest.param(3, 1, 2 * TILE_POS + 3, 80, True, [70], 3, id="g3-causal-kv_lens-131-positions"),
    # group 8: blocks of 32 positions x 8 heads = 256 rows; 128 positions make 4 of them, and 2 day-5
    # tiles of 64 for each of the 8 heads: 4 times fewer K and V loads.
    pytest.param(8, 1, 128, 11, False, None, 4, id="g8-128-positions"),
]


@pytest.mark.parametrize("heads, kv_heads, N, M, causal, kv_lens, saving", LONG_PROMPTS)
def test_prefill_on_a_long_prompt_reads_kv_min_group_4_times_less_than_day5(heads, kv_heads, N, M, causal, kv_lens,
                                                                            saving):
    """The point of the rung: each K and V tile loaded into shared memory serves the whole group at
    many positions, so for a prompt longer than a block's positions the loads fall by min(group, 4)
    against day 5's v5 on the same inputs, where folding the group into day 5's 64 rows saves nothing."""
    group, d = heads // kv_heads, 1
    q, k, v, seed = qkv(1, heads, kv_heads, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, np.int32)
    assert N > prefill_tiling(group)[2] and saving == min(group, 4) == model.prefill_kv_saving(group)
    with count_traffic() as gqa:
        out = run_prefill(q, k, v, causal=causal, kv_lens=lens)
    out5, day5 = day5_on_repeated_kv(q, k, v, causal=causal, kv_lens=lens)
    ref = reference.attention(q, k, v, causal=causal, kv_lens=lens)
    check(out, ref, name="O of gqa_prefill_flash", dims=DIMS, seed=seed)
    check(out5, ref, name="O of attention_v5_flash_registers on repeated K, V", dims=DIMS, seed=seed)
    assert kv_loads(day5) == saving * kv_loads(gqa) > 0
    assert counted(gqa) == model.requested_prefill(1, heads, kv_heads, N, d, M, causal=causal, kv_lens=kv_lens)
    assert counted(day5) == model.requested_prefill_per_head(1, heads, kv_heads, N, d, M, causal=causal,
                                                             kv_lens=kv_lens)
    assert gqa.global_loads["q"] == day5.global_loads["q"] and gqa.global_stores["o"] == day5.global_stores["o"]


def test_prefill_on_a_short_prompt_reads_kv_once_per_group_where_day5_reads_it_once_per_head():
    # 10 positions of 4 heads on one KV head: day 5's v5 (K and V repeated to 4 heads) runs 4 blocks
    # of 10 rows, each loading all 40 keys; one GQA block holds the 40 rows.
    B, heads, kv_heads, N, M, d = 1, 4, 1, 10, 40, 4
    q, k, v, seed = qkv(B, heads, kv_heads, N, M, d)
    with count_traffic() as gqa:
        out = run_prefill(q, k, v)
    out5, day5 = day5_on_repeated_kv(q, k, v)
    ref = reference.attention(q, k, v)
    check(out, ref, name="O of gqa_prefill_flash", dims=DIMS, seed=seed)
    check(out5, ref, name="O of attention_v5_flash_registers on repeated K, V", dims=DIMS, seed=seed)
    per_head = model.requested_prefill_per_head(B, heads, kv_heads, N, d, M)
    assert day5.global_loads["k"] == per_head["k"][0] == heads * M * d
    assert gqa.global_loads["k"] == gqa.global_loads["v"] == M * d == day5.global_loads["k"] // heads


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_prefill_model_saves_group_on_short_prompts_and_min_group_4_on_long_ones(group, causal):
    """In the model: a head with fewer positions than a block holds reads K and V group times less
    than on day 5; a long prompt (a multiple of both blocks' positions) min(group, 4) times less
    without the mask, and at least that with it (smaller blocks waste fewer keys past the diagonal)."""
    heads, kv_heads, d = 2 * group, 2, 8
    kv = lambda r: r["k"][0] + r["v"][0]
    short_gqa = kv(model.requested_prefill(1, heads, kv_heads, 8, d, 256, causal=causal))
    short_day5 = kv(model.requested_prefill_per_head(1, heads, kv_heads, 8, d, 256, causal=causal))
    assert short_day5 == short_gqa * group
    long_gqa = kv(model.requested_prefill(1, heads, kv_heads, 4 * TILE_POS, d, causal=causal))
    long_day5 = kv(model.requested_prefill_per_head(1, heads, kv_heads, 4 * TILE_POS, d, causal=causal))
    saving = model.prefill_kv_saving(group)
    assert saving == min(group, 4)
    assert long_day5 >= long_gqa * saving and (causal or long_day5 == long_gqa * saving)
    assert (long_day5 > long_gqa * saving) == (causal and group > 4)   # blocks of fewer than 64 positions
    assert model.naive_bytes_prefill(1, heads, kv_heads, 8, d, 256) - model.compulsory_bytes_prefill(
        1, heads, kv_heads, 8, d, 256) == (group - 1) * kv_heads * 2 * 256 * d * 4


def test_prefill_tiling_of_every_group_fits_a_block():
    for group in range(1, 1100):
        subgroups, heads_per_block, positions = tiling = prefill_tiling(group)
        assert tiling == model.prefill_tiling(group)
        assert subgroups * heads_per_block >= group > (subgroups - 1) * heads_per_block
        assert 1 <= positions <= TILE_POS and positions * heads_per_block <= ROWS_MAX
        assert positions == TILE_POS or (positions + 1) * heads_per_block > ROWS_MAX   # as many as fit
    assert [prefill_tiling(g) for g in (1, 3, 4, 5, 8, 9, 256, 257, 300)] == [
        (1, 1, 64), (1, 3, 64), (1, 4, 64), (1, 5, 51), (1, 8, 32), (1, 9, 28), (1, 256, 1), (2, 129, 1),
        (2, 150, 1)]
    assert [model.prefill_kv_saving(g) for g in (1, 2, 3, 4, 5, 8, 9, 256)] == [
        1, 2, 3, 4, Fraction(255, 64), 4, Fraction(252, 64), 4]


def test_prefill_large_logits_do_not_overflow():
    q, k, v, seed = qkv(1, 2, 1, 20, 20, 16, large_logits=True)
    assert np.abs(np.einsum("bhid,bjd->bhij", q, k[:, 0])).max() > 5e3
    out = run_prefill(q, k, v, causal=True)
    check(out, reference.attention(q, k, v, causal=True), name="O, logits ~1e4", dims=DIMS, seed=seed)


def test_prefill_at_head_dim_128():
    q, k, v, seed = qkv(1, 2, 1, 3, 5, HEAD_DIM_MAX)
    out = run_prefill(q, k, v, causal=True)
    check(out, reference.attention(q, k, v, causal=True), name="O at head_dim 128", dims=DIMS, seed=seed)


def test_prefill_accepts_device_arrays_and_clamps_device_kv_lens():
    # Device lengths are not copied back to be validated; the kernel must still stay in bounds.
    q, k, v, seed = qkv(2, 3, 1, 6, 12, 4)
    lens = cuda.to_device(np.array([50, 5], dtype=np.int32))
    out = gqa_prefill_flash(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), causal=True, kv_lens=lens)
    assert hasattr(out, "copy_to_host")
    check(out.copy_to_host(), reference.attention(q, k, v, causal=True, kv_lens=np.array([12, 5])),
          name="O from device arrays", dims=DIMS, seed=seed)


def prefill_args(**change):
    """Two query heads on one KV head, 8 positions and keys, head_dim 4."""
    args = dict(q=np.zeros((1, 2, 8, 4), np.float32), k=np.zeros((1, 1, 8, 4), np.float32),
                v=np.zeros((1, 1, 8, 4), np.float32))
    args.update(change)
    return args


@pytest.mark.parametrize("change, error, words", [
    (dict(q=np.zeros((1, 3, 8, 4), np.float32), k=np.zeros((1, 2, 8, 4), np.float32),
          v=np.zeros((1, 2, 8, 4), np.float32)), ValueError,
     r"k must have kv_heads dividing the heads of q \(3\).*got kv_heads 2"),
    (dict(q=np.zeros((1, 2, 8, 4), np.float64)), TypeError, "q must have dtype float32"),
    (dict(k=np.zeros((2, 1, 8, 4), np.float32)), ValueError, r"k must have shape .*batch is 2, not 1"),
    (dict(v=np.zeros((1, 1, 7, 4), np.float32)), ValueError, "v must have shape"),
    (dict(v=np.zeros((1, 2, 8, 4), np.float32)), ValueError, r"v must have shape .*kv_heads is 2, not 1"),
    (dict(q=np.zeros((1, 2, 8, HEAD_DIM_MAX + 1), np.float32), k=np.zeros((1, 1, 8, HEAD_DIM_MAX + 1), np.float32),
          v=np.zeros((1, 1, 8, HEAD_DIM_MAX + 1), np.float32)), ValueError, "q must have 1 <= head_dim <= 128"),
    (dict(kv_lens=np.array([9], np.int32)), ValueError, "kv_lens must lie in"),
    (dict(kv_lens=np.array([3, 4], np.int32)), ValueError, "kv_lens must have shape"),
    (dict(causal=1), TypeError, "causal must be True or False"),
    (dict(out=np.zeros((1, 1, 8, 4), np.float32)), ValueError, "out must have shape"),
    (lambda: dict(v=cuda.to_device(np.zeros((1, 1, 8, 4), np.float32))), TypeError,
     "must all be NumPy arrays or all be device arrays"),
], ids=["heads not a multiple", "q float64", "k batch", "v keys", "v kv_heads", "head_dim 129",
        "kv_lens too long", "kv_lens shape", "causal int", "out shape", "mixed kinds"])
def test_prefill_rejects_bad_input_naming_the_argument(change, error, words):
    change = change() if callable(change) else change
    with count_traffic() as t, pytest.raises(error, match=words):
        gqa_prefill_flash(**prefill_args(**change))
    assert t.launches == 0


def test_prefill_empty_shapes_launch_nothing():
    with count_traffic() as t:
        out = gqa_prefill_flash(np.zeros((2, 4, 0, 4), np.float32), np.zeros((2, 2, 5, 4), np.float32),
                                np.zeros((2, 2, 5, 4), np.float32))
    assert out.shape == (2, 4, 0, 4) and t.launches == 0


def test_prefill_compiles_one_kernel_per_head_dim_and_rejects_others():
    assert gqa_prefill_flash_kernel(8) is gqa_prefill_flash_kernel(8)
    assert gqa_prefill_flash_kernel(8) is not gqa_prefill_flash_kernel(12)
    for bad, error in ((0, ValueError), (HEAD_DIM_MAX + 1, ValueError), (8.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="head_dim"):
            gqa_prefill_flash_kernel(bad)


# ------------------------------------------------------------------------------------------------
# Decode
# ------------------------------------------------------------------------------------------------

def decode_case(lens, block_size, *, kv_heads=1, group=2, d=4, large_logits=False, seed=None):
    """One decode step over a shuffled paged cache: NaN in every slot that holds no key (tails of
    partial last pages, two spare blocks at the end of the pool, the last being where a -1 entry
    lands when used as an index), and one -1 column padding every row of the table."""
    rng, seed = random_inputs(seed)
    heads = kv_heads * group
    shape = (len(lens), kv_heads, max(lens), d)
    if large_logits:
        k = rng.integers(-50, 51, shape).astype(np.float32)
        q = rng.integers(-50, 51, (len(lens), heads, d)).astype(np.float32)
    else:
        k = rng.standard_normal(shape, dtype=np.float32)
        q = rng.standard_normal((len(lens), heads, d), dtype=np.float32)
    v = rng.standard_normal(shape, dtype=np.float32)
    k_cache, v_cache, tables, context_lens = reference.build_paged_cache(
        k, v, block_size, rng, np.array(lens), spare_blocks=2, padding_pages=1)
    assert np.isfinite(k_cache).sum() == sum(lens) * kv_heads * d and np.isnan(k_cache[-1]).all()
    assert (tables[:, -1] == -1).all()
    return types.SimpleNamespace(q=q, k_cache=k_cache, v_cache=v_cache, tables=tables, lens=context_lens,
                                 seed=seed, heads=heads, kv_heads=kv_heads, group=group, d=d)


def check_decode(out, case, name):
    ref = reference.paged_attention(case.q, case.k_cache, case.v_cache, case.tables, case.lens)
    return check(out, ref, name=name, dims=DECODE_DIMS, seed=case.seed)


def run_decode(case, partition_size, launcher=gqa_decode_split_k, **kwargs):
    return launcher(case.q, case.k_cache, case.v_cache, case.tables, case.lens,
                    out=poison(np.empty_like(case.q)), partition_size=partition_size, **kwargs)


# (block_size, contexts of one launch, kv_heads, group, head_dim, partition_size). Together: empty
# contexts, one-token contexts, partial last pages, partitions that end inside a page, d > 32.
DECODE_CASES = [
    pytest.param(3, [1, 8], 2, 1, 4, 4, id="g1-mha"),
    pytest.param(4, [0, 5, 13], 1, 2, 4, 5, id="g2-empty-context"),
    pytest.param(16, [21, 1], 2, 3, 40, 11, id="g3-d40-partition-inside-a-page"),
    pytest.param(2, [6, 3], 1, 4, 4, 4, id="mqa-g4"),
    pytest.param(5, [23, 9], 1, GROUP_MAX, 8, 10, id="mqa-g8-one-token-in-flight"),
    pytest.param(4, [5], 1, GROUP_MAX + 1, 4, 8, id="mqa-g9-two-blocks-per-kv-head"),
]


@pytest.mark.parametrize("block_size, lens, kv_heads, group, d, partition_size", DECODE_CASES)
def test_decode_matches_reference_and_its_traffic_model(block_size, lens, kv_heads, group, d, partition_size):
    case = decode_case(lens, block_size, kv_heads=kv_heads, group=group, d=d)
    with count_traffic() as t:
        out = run_decode(case, partition_size)
    check_decode(out, case, f"gqa_decode_split_k out, group {group}, block_size {block_size}, contexts {lens}")
    assert t.kernel_names == ["gqa_decode_partition_kernel", "paged_attention_v2_merge_kernel"]
    partitions = max(1, -(-max(lens) // partition_size))
    assert t.per_launch[0].grid == decode_grid(len(lens), case.heads, kv_heads, partitions)
    assert counted(t) == model.requested_decode(lens, case.heads, kv_heads, d, partition_size)
    # K and V: each element of a context read once per block of the group (once per KV head while
    # the group fits one block), where day 6's v2 reads it once per query head.
    kv_loads = kv_heads * subgroups_for(group) * sum(lens) * d
    assert t.global_loads["k_cache"] == t.global_loads["v_cache"] == kv_loads
    day6 = day6_model.requested_v2(lens, case.heads, d, partition_size)
    assert day6["k_cache"][0] == kv_loads * group // subgroups_for(group)


@pytest.mark.parametrize("block_size, lens, kv_heads, group, d, partition_size",
                         [DECODE_CASES[i] for i in (1, 2, 5)])
def test_decode_group_matches_reference_and_the_same_traffic_model(block_size, lens, kv_heads, group, d,
                                                                   partition_size):
    """The exercise's rung: one token at a time, arrays of GROUP_MAX heads; the loads of the fast rung."""
    case = decode_case(lens, block_size, kv_heads=kv_heads, group=group, d=d)
    with count_traffic() as t:
        out = run_decode(case, partition_size, launcher=gqa_decode_group)
    check_decode(out, case, f"gqa_decode_group out, group {group}, block_size {block_size}, contexts {lens}")
    assert t.kernel_names == ["gqa_decode_group_kernel", "paged_attention_v2_merge_kernel"]
    assert counted(t) == model.requested_decode(lens, case.heads, kv_heads, d, partition_size)


def test_decode_reads_each_page_once_per_group_where_day6_reads_it_once_per_head():
    case = decode_case([6, 3], 2, kv_heads=1, group=4)
    with count_traffic() as gqa:
        out = run_decode(case, 4)
    with count_traffic() as day6:
        out6 = run_decode(case, 4, launcher=paged_attention_v2_split_k)
    check_decode(out, case, "gqa_decode_split_k out")
    check_decode(out6, case, "paged_attention_v2_split_k out")
    for name in ("k_cache", "v_cache"):
        assert gqa.global_loads[name] * case.group == day6.global_loads[name] == case.heads * 9 * case.d
    assert counted(day6) == day6_model.requested_v2([6, 3], case.heads, case.d, 4)
    # The compulsory bytes of the two mappings differ by the same factor in K and V.
    gqa_bytes = model.compulsory_bytes_decode([6, 3], case.heads, 1, case.d)
    day6_bytes = model.naive_bytes_decode([6, 3], case.heads, 1, case.d)
    q_and_out = 2 * 2 * case.heads * case.d * 4
    assert day6_bytes - q_and_out == case.group * (gqa_bytes - q_and_out)


@pytest.mark.parametrize("d, group", [(HEAD_DIM_MAX, 2), (1, 3)], ids=["d128", "d1"])
def test_decode_head_dim_at_its_limits(d, group):
    # 128: every lane holds 4 channels of each head; 1: one lane of 32 holds the only channel.
    case = decode_case([6], 4, group=group, d=d)
    with count_traffic() as t:
        out = run_decode(case, 4)
    check_decode(out, case, f"gqa_decode_split_k out, head_dim {d}")
    assert counted(t) == model.requested_decode([6], case.heads, 1, d, 4)


def test_decode_large_logits_do_not_overflow():
    case = decode_case([9, 4], 4, group=3, d=16, large_logits=True)
    out = run_decode(case, 4)
    check_decode(out, case, "gqa_decode_split_k out, logits ~1e4")


def test_decode_default_partition_size_and_device_arrays():
    case = decode_case([5, 0], 2, kv_heads=2, group=2, d=3)
    check_decode(run_decode(case, None), case, "gqa_decode_split_k out, default partition_size")
    device = [cuda.to_device(a) for a in (case.q, case.k_cache, case.v_cache, case.tables, case.lens)]
    with pytest.raises(ValueError, match="max_context must be given with device arrays"):
        gqa_decode_split_k(*device)
    out = gqa_decode_split_k(*device, partition_size=2, max_context=8)   # 4 partitions, 2 past every context
    check_decode(out.copy_to_host(), case, "gqa_decode_split_k out from device arrays, max_context 8")


def decode_args(**change):
    """Two sequences, two query heads on one KV head, blocks of 4, head_dim 4; contexts 5 and 3."""
    args = dict(q=np.zeros((2, 2, 4), np.float32), k_cache=np.zeros((6, 1, 4, 4), np.float32),
                v_cache=np.zeros((6, 1, 4, 4), np.float32),
                block_tables=np.array([[0, 1], [2, -1]], np.int32), context_lens=np.array([5, 3], np.int32))
    args.update(change)
    return args


@pytest.mark.parametrize("change, error, words", [
    (dict(q=np.zeros((2, 3, 4), np.float32), k_cache=np.zeros((6, 2, 4, 4), np.float32),
          v_cache=np.zeros((6, 2, 4, 4), np.float32)), ValueError,
     r"k_cache must have kv_heads dividing the heads of q \(3\).*got kv_heads 2"),
    (dict(q=np.zeros((2, 2, HEAD_DIM_MAX + 1), np.float32),
          k_cache=np.zeros((6, 1, 4, HEAD_DIM_MAX + 1), np.float32),
          v_cache=np.zeros((6, 1, 4, HEAD_DIM_MAX + 1), np.float32)), ValueError, "q must have 1 <= head_dim <= 128"),
    (dict(block_tables=np.array([[0, -1], [2, -1]], np.int32)), ValueError, r"block_tables\[0, 1\] is -1"),
    (dict(partition_size=0), ValueError, "partition_size must be an int >= 1"),
    (dict(max_context=4), ValueError, "max_context must be an int >= 5"),
    (dict(out=np.zeros((2, 2, 3), np.float32)), ValueError, "out must have shape"),
], ids=["heads not a multiple", "head_dim 129", "entry -1 in use", "partition_size 0", "max_context too small",
        "out shape"])
def test_decode_rejects_bad_input_naming_the_argument(change, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        gqa_decode_split_k(**decode_args(**change))
    assert t.launches == 0


# ------------------------------------------------------------------------------------------------
# Sizes, the model's constants, and what the GPU compiler makes of the kernels
# ------------------------------------------------------------------------------------------------

def test_grids_shared_memory_and_model_constants():
    assert prefill_grid(2, 9, 3, 64) == (1, 3, 2) and prefill_block(9, 3) == 3 * TILE_POS   # SmolLM2-135M
    assert prefill_grid(1, 32, 8, 2048) == (2048 // 64, 8, 1) and prefill_block(32, 8) == 256   # Llama 3 8B
    assert prefill_grid(1, 9, 1, 30) == (2, 1, 1) and prefill_block(9, 1) == 9 * 28
    assert prefill_grid(3, 600, 2, 5) == (5, 4, 3) and prefill_block(600, 2) == 150
    assert prefill_grid(1, 2, 2, 65) == flash_attention.flash_grid(1, 2, 65) and prefill_block(2, 2) == 64  # day 5
    assert decode_grid(4, 9, 3, 5) == (3, 4, 5)
    assert decode_grid(1, 2 * GROUP_MAX + 1, 1, 1) == (3, 1, 1)
    assert prefill_shared_bytes(64) == 24 * 1024 and prefill_shared_bytes(HEAD_DIM_MAX) == 32 * 1024
    assert prefill_shared_bytes(HEAD_DIM_MAX) <= STATIC_SHARED_LIMIT
    assert decode_shared_bytes() <= STATIC_SHARED_LIMIT
    assert decode_shared_bytes(4) == (2 * WARPS * 4 + WARPS * 4 * HEAD_DIM_MAX) * 4
    assert (model.TILE_POS, model.ROWS_MAX, model.TILE_KV, model.GROUP_MAX) == (TILE_POS, ROWS_MAX, TILE_KV, GROUP_MAX)
    assert model.DAY5_TILE_Q == flash_attention.TILE_Q == TILE_POS
    assert model.requested_decode([3], 2, 1, 4, 4) == model.requested_decode([3], 2, 1, 4, 4, GROUP_MAX, WARPS, WARP)
    with pytest.raises(ValueError, match="must divide heads"):
        model.requested_prefill(1, 3, 2, 8, 4)


@pytest.mark.parametrize("group, tiling", [(1, (1, 1, 2)), (2, (1, 2, 2)), (3, (1, 3, 4)), (4, (1, 4, 4)),
                                           (5, (1, 5, 1)), (8, (1, 8, 1)), (9, (2, 5, 1)), (32, (4, 8, 1)),
                                           (33, (5, 7, 1))])
def test_decode_tiling_and_its_shuffles(group, tiling):
    """Heads per block balanced over the sub-groups, tokens in flight by heads, at most 32 scores per
    batch; one butterfly for a batch's scores takes fewer shuffles than one per score (day 6)."""
    assert decode_tiling(group) == tiling
    subgroups, heads, tokens = tiling
    assert subgroups == subgroups_for(group) and heads * subgroups >= group > heads * (subgroups - 1)
    assert tokens == TOKENS_IN_FLIGHT[heads - 1] and heads * tokens <= WARP
    if heads * tokens > 1:
        assert model.decode_shuffles(heads, tokens) < model.day6_shuffles(heads, tokens)
    assert (model.decode_shuffles(4, 4), model.day6_shuffles(4, 4)) == (15 + 1 + 2 + 16, 5 * 16)
    assert (model.decode_shuffles(3, 4), model.decode_shuffles(8, 1), model.decode_shuffles(1, 2)) == (30, 17, 8)


def test_decode_compiles_one_kernel_per_tiling_and_rejects_bad_groups():
    assert gqa_decode_partition_kernel(4) is gqa_decode_partition_kernel(4)
    assert gqa_decode_partition_kernel(9) is gqa_decode_partition_kernel(10)       # blocks of 5 heads
    assert gqa_decode_partition_kernel(4) is not gqa_decode_partition_kernel(3)
    for bad, error in ((0, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="group"):
            gqa_decode_partition_kernel(bad)


def test_decode_partition_size_prefers_long_partitions_that_fill_the_gpu():
    # 132 SMs (H100): at least DECODE_BLOCKS_PER_SM * 132 = 792 blocks, partitions of at most 1,024 tokens.
    assert DECODE_BLOCKS_PER_SM * 132 == 792 and DECODE_PARTITION_MAX == 1024
    assert decode_partition_size(16, 8, 8192, 132) == 1024        # group 4: 16 x 8 x 8 = 1,024 blocks
    assert decode_partition_size(16, 4, 8192, 132) == 512         # group 8: 16 x 4 x 16 = 1,024 blocks
    assert decode_partition_size(16, 32, 8192, 132) == 1024       # group 1: 4,096 blocks
    assert decode_partition_size(8, 8, 1024, 132) == 64           # short contexts: the shortest partitions
    assert decode_partition_size(16, 8, 8192, None) == PARTITION_SIZE   # the simulator: day 6's


def test_per_head_arrays_live_in_registers_on_a_gpu():
    """Compiled for sm_90, no kernel uses local memory: every index of the per-thread arrays is known
    once the loops over the head dimension, the tokens in flight and the group's heads unroll. (At
    head_dim 128 the prefill thread's 256 floats exceed ptxas's 255 registers, so ptxas spills a few
    later on; the PTX still has them in registers.) The prefill kernel's static shared memory is
    ``prefill_shared_bytes``, the decode kernel's ``decode_shared_bytes``. Decode at groups 1, 3 and
    8: 2, 4 and 1 tokens in flight, 2, 12 (padded to 16) and 8 scores per batch."""
    program = textwrap.dedent(r"""
        import os, re
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
        import numba
        from numba import cuda
        from kernels.gqa_attention import gqa_decode_partition_kernel, gqa_prefill_flash_kernel
        f32, i32 = numba.float32, numba.int32[::1]
        a3, a4, table = f32[:, :, ::1], f32[:, :, :, ::1], numba.int32[:, ::1]
        decode = (a3, a4, a4, table, i32, f32, numba.int64, a3, a3, a4)
        prefill = (a4, a4, a4, i32, a4, f32, numba.boolean)
        for name, kernel, signature in (("decode1", gqa_decode_partition_kernel(1), decode),
                                        ("decode3", gqa_decode_partition_kernel(3), decode),
                                        ("decode8", gqa_decode_partition_kernel(8), decode),
                                        ("prefill64", gqa_prefill_flash_kernel(64), prefill),
                                        ("prefill128", gqa_prefill_flash_kernel(128), prefill)):
            ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
            shared = sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", ptx))
            print(name, ".local" in ptx, shared)
    """)
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", program], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split() for line in done.stdout.splitlines()]
    assert [line[:2] for line in lines] == [["decode1", "False"], ["decode3", "False"], ["decode8", "False"],
                                            ["prefill64", "False"], ["prefill128", "False"]]
    assert [int(line[2]) for line in lines] == [decode_shared_bytes(1), decode_shared_bytes(3), decode_shared_bytes(8),
                                                prefill_shared_bytes(64), prefill_shared_bytes(128)]
