"""Day 6 kernels (kernels/paged_attention.py, kernels/kv_cache.py) on the simulator, at small shapes.

Every decode case is built so that a kernel reading what it should not shows it: each slot past a
context's end and every block outside the block tables holds NaN, the table rows are padded with
-1 (an index the simulator wraps to the last block, which is always one of the NaN blocks), and
the blocks of the tables are shuffled. One launch serves both the comparison with the float64
reference and the exact traffic count of ``course.models.paged_attention``. The last tests run
deliberately wrong kernels through the same checks, to show that the checks can fail.

test_kernels_pattern.py already checks each rung once against the reference and compiles every
kernel for the GPU; this file goes after the corners.
"""

import math
import types

import numpy as np
import pytest
from numba import cuda, float32

from course.checking import CheckFailure, check, poison, random_inputs
from course.exercise_checks import paged_inputs
from course.models import paged_attention as model
from course.traffic import count_traffic
from kernels import reference
from kernels.block_manager import BlockManager
from kernels.kv_cache import kv_cache_write
from kernels.launching import cdiv
from kernels.paged_attention import (HEAD_DIM_MAX, THREADS, paged_attention_v1_block_per_head,
                                     paged_attention_v2_merge_kernel, paged_attention_v2_partition_kernel,
                                     paged_attention_v2_split_k, paged_attention_v3_one_launch)

DIMS = ("seq", "head", "channel")


def decode_case(lens, block_size, *, kv_heads=1, group=2, d=4, large_logits=False, seed=None):
    """One decode step over a shuffled paged cache (``exercise_checks.paged_inputs``); NaN wherever
    no key of a context lies, the last block a NaN spare (where a table entry of -1 lands when used
    as an index), and a -1 column in every row. large_logits: integer q and k in [-50, 50], so q.k
    reaches 1e4 before scaling and is exact in float32."""
    rng, seed = random_inputs(seed)
    heads = kv_heads * group
    case = paged_inputs(rng, lens, heads=heads, kv_heads=kv_heads, head_dim=d, block_size=block_size,
                        large_logits=large_logits)
    k_cache, v_cache, tables = case["k_cache"], case["v_cache"], case["block_tables"]
    # The setup itself: finite exactly in the slots of the contexts, NaN everywhere else.
    assert np.isfinite(k_cache).sum() == np.isfinite(v_cache).sum() == sum(lens) * kv_heads * d
    assert np.isnan(k_cache[-1]).all() and (tables[:, -1] == -1).all()
    return types.SimpleNamespace(q=case["q"], k_cache=k_cache, v_cache=v_cache, tables=tables,
                                 lens=case["context_lens"], seed=seed, heads=heads, d=d)


def check_decode(out, case, name):
    ref = reference.paged_attention(case.q, case.k_cache, case.v_cache, case.tables, case.lens)
    return check(out, ref, name=name, dims=DIMS, seed=case.seed)


def counted(traffic) -> dict:
    """``{argument: (loads, stores)}`` summed over the launches, in the form of ``requested_*``."""
    return {name: (traffic.global_loads[name], traffic.global_stores[name]) for name in traffic.global_loads}


def run_v1(case, **kwargs):
    return paged_attention_v1_block_per_head(case.q, case.k_cache, case.v_cache, case.tables, case.lens,
                                             out=poison(np.empty_like(case.q)), **kwargs)


def run_v2(case, partition_size, *, launcher=paged_attention_v2_split_k, **kwargs):
    return launcher(case.q, case.k_cache, case.v_cache, case.tables, case.lens,
                    out=poison(np.empty_like(case.q)), partition_size=partition_size, **kwargs)


def run_v3(case, partition_size, **kwargs):
    return run_v2(case, partition_size, launcher=paged_attention_v3_one_launch, **kwargs)


# ------------------------------------------------------------------------------------------------
# Decode: v1 and v2 against the reference, and their traffic, in one launch each
# ------------------------------------------------------------------------------------------------

# (block_size, contexts of one launch, kv_heads, head_dim, v2's partition_size). Together: empty
# contexts, contexts of one token, of exactly one page, of several pages with a partial last one,
# next to each other in one launch, and two partitions per context in v2.
CASES = [
    pytest.param(1, [0, 1, 5], 1, 4, 3, id="block1"),
    pytest.param(3, [1, 8], 2, 40, 4, id="block3-gqa-d40"),        # 2 KV heads of 2 query heads; d > 32
    pytest.param(16, [0, 1, 16, 21], 1, 4, 11, id="block16"),      # a partition ends inside a page
]


@pytest.mark.parametrize("block_size, lens, kv_heads, d, partition_size", CASES)
def test_v1_matches_reference_and_its_traffic_model(block_size, lens, kv_heads, d, partition_size):
    case = decode_case(lens, block_size, kv_heads=kv_heads, d=d)
    with count_traffic() as t:
        out = run_v1(case)
    check_decode(out, case, f"v1 out, block_size {block_size}, contexts {lens}")
    assert t.launches == 1
    assert counted(t) == model.requested_v1(lens, case.heads, d)


@pytest.mark.parametrize("block_size, lens, kv_heads, d, partition_size", CASES)
def test_v2_matches_reference_and_its_traffic_model(block_size, lens, kv_heads, d, partition_size):
    case = decode_case(lens, block_size, kv_heads=kv_heads, d=d)
    with count_traffic() as t:
        out = run_v2(case, partition_size)
    check_decode(out, case, f"v2 out, block_size {block_size}, contexts {lens}, partitions of {partition_size}")
    assert counted(t) == model.requested_v2(lens, case.heads, d, partition_size)
    # The partitions together read each K and V element of a context once per query head (and
    # the output is right, so no element was read twice and another skipped) and write only
    # their partials, each once; the merge reads no K or V.
    partitions_kernel, merge = t.per_launch
    assert t.kernel_names == ["paged_attention_v2_partition_kernel", "paged_attention_v2_merge_kernel"]
    blocks = len(lens) * case.heads * max(1, cdiv(max(lens), partition_size))
    assert partitions_kernel.global_loads["k_cache"] == partitions_kernel.global_loads["v_cache"] \
        == case.heads * sum(lens) * d
    assert {name: n for name, n in partitions_kernel.global_stores.items() if n} == \
        {"partial_max": blocks, "partial_sum": blocks, "partial_acc": blocks * d}
    assert "k_cache" not in merge.global_loads and merge.global_stores["out"] == len(lens) * case.heads * d


def test_v3_matches_reference_and_its_traffic_model_in_one_launch():
    # Contexts 0, 1, 16 and 21 in partitions of 11: two partitions each, empty ones among them; the
    # large logits give partitions maxima thousands apart, which the last block's merge must rescale.
    case = decode_case([0, 1, 16, 21], 16, large_logits=True)
    with count_traffic() as t:
        out = run_v3(case, 11)
    check_decode(out, case, "v3 out, contexts [0, 1, 16, 21], partitions of 11")
    assert t.kernel_names == ["paged_attention_v3_one_launch_kernel"]
    assert counted(t) == model.requested_v3(case.lens, case.heads, case.d, 11)


@pytest.mark.parametrize("rung, d", [("v1", HEAD_DIM_MAX), ("v2", 1)])
def test_head_dim_at_its_limits(rung, d):
    # 128: every lane holds 4 channels, all in use; 1: one lane of 32 holds the only channel.
    case = decode_case([6], 4, group=1, d=d)
    with count_traffic() as t:
        out = run_v1(case) if rung == "v1" else run_v2(case, 4)
    check_decode(out, case, f"{rung} out, head_dim {d}")
    want = model.requested_v1([6], 1, d) if rung == "v1" else model.requested_v2([6], 1, d, 4)
    assert counted(t) == want


@pytest.mark.parametrize("rung", ["v1", "v2"])
def test_large_logits_do_not_overflow(rung):
    # q.k up to 1e4 (5e3 after the scale 1/sqrt(4)): exp without the running maximum overflows.
    # v2's partitions of 3 tokens see maxima thousands apart, which the merge must rescale.
    case = decode_case([9, 4], 4, d=4, large_logits=True)
    out = run_v1(case) if rung == "v1" else run_v2(case, 3)
    check_decode(out, case, f"{rung} out with logits up to 1e4")


def test_v2_partitions_that_saw_no_key_write_an_empty_partial_and_merge_to_nothing():
    # More partitions than the longest context needs: partition 2 of sequence 0 and every
    # partition of sequence 1 (context 0) see no key.
    case = decode_case([3, 0], 2, group=1, d=3)
    heads, partitions = 1, 3
    shape = (2, heads, partitions)
    partial_max, partial_sum = poison(np.empty(shape, np.float32)), poison(np.empty(shape, np.float32))
    partial_acc = poison(np.empty(shape + (case.d,), np.float32))
    paged_attention_v2_partition_kernel[(heads, 2, partitions), THREADS](
        case.q, case.k_cache, case.v_cache, case.tables, case.lens, np.float32(1 / math.sqrt(case.d)), 2,
        partial_max, partial_sum, partial_acc)
    empty = np.array([[[False, False, True]], [[True, True, True]]])
    assert (partial_max[empty] == -np.inf).all() and (partial_sum[empty] == 0).all()
    assert (partial_acc[empty] == 0).all()
    assert np.isfinite(partial_max[~empty]).all() and (partial_sum[~empty] >= 1).all()
    out = poison(np.empty_like(case.q))
    paged_attention_v2_merge_kernel[(heads, 2), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    check_decode(out, case, "v2 merge over empty partitions")
    assert (out[1] == 0).all()                     # an empty context gives zeros, not NaN


@pytest.mark.parametrize("launcher", [paged_attention_v2_split_k, paged_attention_v3_one_launch], ids=["v2", "v3"])
def test_split_k_with_device_arrays_a_generous_max_context_and_reused_buffers(launcher):
    # max_context 12 sizes the grid for 3 partitions of 4: the last sees no key of either context.
    # The second call needs partial buffers (and v3 ticket counters) of the first call's shape: it
    # gets the first call's back, so v3's counters must be back at 0 after each launch.
    for lens in ([5, 0], [0, 2]):
        case = decode_case(lens, 2, group=1, d=3)
        device = [cuda.to_device(a) for a in (case.q, case.k_cache, case.v_cache, case.tables, case.lens)]
        out = launcher(*device, partition_size=4, max_context=12)
        check_decode(out.copy_to_host(), case, f"{launcher.__name__} out from device arrays, contexts {lens}")


# ------------------------------------------------------------------------------------------------
# kv_cache_write
# ------------------------------------------------------------------------------------------------

def cache_write_case(block_size, kv_heads, d, seqs, positions, seed=None):
    """Two sequences of three pages each in a shuffled pool with two spare blocks; random cache."""
    rng, seed = random_inputs(seed)
    num_blocks = 8
    tables = rng.permutation(num_blocks)[:6].astype(np.int32).reshape(2, 3)
    k_cache = rng.standard_normal((num_blocks, kv_heads, block_size, d), dtype=np.float32)
    v_cache = rng.standard_normal((num_blocks, kv_heads, block_size, d), dtype=np.float32)
    n = len(seqs)
    return types.SimpleNamespace(
        k_new=rng.standard_normal((n, kv_heads, d), dtype=np.float32),
        v_new=rng.standard_normal((n, kv_heads, d), dtype=np.float32),
        seqs=np.array(seqs, np.int32), positions=np.array(positions, np.int32), tables=tables,
        k_cache=k_cache, v_cache=v_cache, seed=seed)


def expected_after_writes(case):
    """The caches with each token's rows at its slot, every other slot as it was."""
    k_want, v_want = case.k_cache.copy(), case.v_cache.copy()
    block_size = k_want.shape[2]
    for t, (s, position) in enumerate(zip(case.seqs, case.positions)):
        block = case.tables[s, position // block_size]
        k_want[block, :, position % block_size] = case.k_new[t]
        v_want[block, :, position % block_size] = case.v_new[t]
    return k_want, v_want


def write_tokens(block_size):
    """Sequence 0 fills every slot of its first page; sequence 1 writes from the last slot of its
    first page across the whole second page to the first slot of its third."""
    seq0 = list(range(block_size))
    seq1 = list(range(block_size - 1, 2 * block_size + 1))
    return [0] * len(seq0) + [1] * len(seq1), seq0 + seq1


@pytest.mark.parametrize("block_size, kv_heads, d", [(1, 1, 3), (3, 2, 5), (4, 2, 70)],
                         ids=["block1", "block3", "block4-140-floats"])   # 140 floats: threads loop twice
def test_kv_cache_write_fills_its_slots_and_leaves_every_other_slot(block_size, kv_heads, d):
    seqs, positions = write_tokens(block_size)
    case = cache_write_case(block_size, kv_heads, d, seqs, positions)
    k_want, v_want = expected_after_writes(case)
    assert not np.array_equal(k_want, case.k_cache)
    with count_traffic() as t:
        k_out, v_out = kv_cache_write(case.k_new, case.v_new, case.seqs, case.positions, case.tables,
                                      case.k_cache, case.v_cache)
    assert k_out is case.k_cache and v_out is case.v_cache          # in place
    np.testing.assert_array_equal(case.k_cache, k_want, err_msg=f"k_cache (seed {case.seed})")
    np.testing.assert_array_equal(case.v_cache, v_want, err_msg=f"v_cache (seed {case.seed})")
    assert counted(t) == model.requested_cache_write(len(seqs), kv_heads, d)


# ------------------------------------------------------------------------------------------------
# Errors name the argument, before anything is launched
# ------------------------------------------------------------------------------------------------

def decode_args(**change):
    """Two sequences, blocks of 4, 6 blocks of 1 KV head and head_dim 4; contexts 5 and 3."""
    args = dict(q=np.zeros((2, 2, 4), np.float32), k_cache=np.zeros((6, 1, 4, 4), np.float32),
                v_cache=np.zeros((6, 1, 4, 4), np.float32),
                block_tables=np.array([[0, 1], [2, -1]], np.int32), context_lens=np.array([5, 3], np.int32))
    args.update(change)
    return args


DECODE_ERRORS = [
    (dict(q=np.zeros((2, 2, 4), np.float64)), TypeError, "q must have dtype float32"),
    (dict(k_cache=np.zeros((6, 1, 4, 4), np.float16)), TypeError, "k_cache must have dtype float32"),
    (dict(v_cache=np.zeros((6, 1, 3, 4), np.float32)), ValueError, "v_cache must have shape"),
    (dict(block_tables=np.array([[0, 1], [2, -1]], np.int64)), TypeError, "block_tables must have dtype int32"),
    (dict(context_lens=np.array([5, 3], np.int64)), TypeError, "context_lens must have dtype int32"),
    (dict(context_lens=np.array([5, 9], np.int32)), ValueError,
     r"context_lens\[1\] is 9, more tokens than the 2 blocks of 4"),
    (dict(context_lens=np.array([5, -1], np.int32)), ValueError, "context_lens must be >= 0"),
    (dict(block_tables=np.array([[0, 6], [2, -1]], np.int32)), ValueError,
     r"block_tables\[0, 1\] is 6, not a block of the cache"),
    (dict(block_tables=np.array([[0, -1], [2, -1]], np.int32)), ValueError, r"block_tables\[0, 1\] is -1"),
    (dict(q=np.zeros((2, 2, HEAD_DIM_MAX + 1), np.float32),
          k_cache=np.zeros((6, 1, 4, HEAD_DIM_MAX + 1), np.float32),
          v_cache=np.zeros((6, 1, 4, HEAD_DIM_MAX + 1), np.float32)), ValueError, "q must have 1 <= head_dim <= 128"),
    (dict(q=np.zeros((2, 3, 4), np.float32), k_cache=np.zeros((6, 2, 4, 4), np.float32),
          v_cache=np.zeros((6, 2, 4, 4), np.float32)), ValueError, "k_cache must have kv_heads dividing"),
    (dict(out=np.zeros((2, 2, 3), np.float32)), ValueError, "out must have shape"),
    (lambda: dict(v_cache=cuda.to_device(np.zeros((6, 1, 4, 4), np.float32))), TypeError,
     "must all be NumPy arrays or all be device arrays"),   # made when the test runs, not at import
]
DECODE_ERROR_IDS = ["q float64", "k_cache float16", "v_cache shape", "block_tables int64", "context_lens int64",
                    "context past its row", "context negative", "entry past the cache", "entry -1 in use",
                    "head_dim 129", "heads not a multiple", "out shape", "mixed kinds"]


@pytest.mark.parametrize("change, error, words", DECODE_ERRORS, ids=DECODE_ERROR_IDS)
@pytest.mark.parametrize("launcher", [paged_attention_v1_block_per_head, paged_attention_v2_split_k,
                                      paged_attention_v3_one_launch], ids=["v1", "v2", "v3"])
def test_decode_launchers_reject_bad_input_naming_the_argument(launcher, change, error, words):
    change = change() if callable(change) else change
    with count_traffic() as t, pytest.raises(error, match=words):
        launcher(**decode_args(**change))
    assert t.launches == 0


def test_decode_launchers_accept_padding_past_the_pages_in_use():
    # Row 1 uses 1 block of its 2 entries; any value past it is never read.
    args = decode_args(block_tables=np.array([[0, 1], [2, 12345]], np.int32))
    args["context_lens"] = np.array([0, 1], np.int32)
    assert np.isfinite(paged_attention_v1_block_per_head(**args)).all()


@pytest.mark.parametrize("change, error, words", [
    (dict(partition_size=0), ValueError, "partition_size must be an int >= 1"),
    (dict(partition_size=2.0), TypeError, "partition_size must be an int"),
    (dict(max_context=4), ValueError, "max_context must be an int >= 5"),
], ids=["partition_size 0", "partition_size float", "max_context too small"])
@pytest.mark.parametrize("launcher", [paged_attention_v2_split_k, paged_attention_v3_one_launch], ids=["v2", "v3"])
def test_split_k_rejects_bad_partitioning(launcher, change, error, words):
    with count_traffic() as t, pytest.raises(error, match=words):
        launcher(**decode_args(), **change)
    assert t.launches == 0


@pytest.mark.parametrize("launcher", [paged_attention_v2_split_k, paged_attention_v3_one_launch], ids=["v2", "v3"])
def test_split_k_needs_max_context_with_device_arrays(launcher):
    device = {name: cuda.to_device(a) for name, a in decode_args().items()}
    with count_traffic() as t, pytest.raises(ValueError, match="max_context must be given with device arrays"):
        launcher(**device)
    assert t.launches == 0


def test_v3_checks_every_array_that_differs_from_those_its_last_call_checked():
    # v3 does not check again the very device arrays its last call checked (their shape, dtype and
    # layout cannot have changed); an array that is not one of them is checked, and named.
    device = {name: cuda.to_device(a) for name, a in decode_args().items()}
    out = cuda.to_device(np.zeros((2, 2, 4), np.float32))
    for _ in range(2):
        paged_attention_v3_one_launch(**device, out=out, max_context=5)
    wrong = {"q": cuda.to_device(np.zeros((2, 2, 4), np.float64)), "out": cuda.to_device(np.zeros((2, 2, 3), np.float32)),
             "context_lens": cuda.to_device(np.array([5, 3], np.int64))}
    for name, array in wrong.items():
        with count_traffic() as t, pytest.raises((TypeError, ValueError), match=f"^{name} must"):
            paged_attention_v3_one_launch(**{**device, "out": out, name: array}, max_context=5)
        assert t.launches == 0


def write_args(**change):
    """Three tokens of sequence 0 at positions 0, 1, 2; blocks of 2; table rows of 2 blocks."""
    args = dict(k_new=np.zeros((3, 1, 4), np.float32), v_new=np.zeros((3, 1, 4), np.float32),
                token_seqs=np.array([0, 0, 0], np.int32), token_positions=np.array([0, 1, 2], np.int32),
                block_tables=np.array([[3, 1], [0, 2]], np.int32),
                k_cache=np.zeros((4, 1, 2, 4), np.float32), v_cache=np.zeros((4, 1, 2, 4), np.float32))
    args.update(change)
    return args


@pytest.mark.parametrize("change, error, words", [
    (dict(k_new=np.zeros((3, 1, 4), np.float64)), TypeError, "k_new must have dtype float32"),
    (dict(v_new=np.zeros((2, 1, 4), np.float32)), ValueError, "v_new must have shape"),
    (dict(k_cache=np.zeros((4, 2, 2, 4), np.float32)), ValueError, "k_cache must have shape"),
    (dict(token_positions=np.array([0, 1, 2], np.int64)), TypeError, "token_positions must have dtype int32"),
    (dict(token_seqs=np.array([0, 0, 2], np.int32)), ValueError, r"token_seqs must lie in \[0, 1\]"),
    (dict(token_positions=np.array([0, 1, 4], np.int32)), ValueError, r"token_positions must lie in \[0, 3\]"),
    (dict(block_tables=np.array([[3, -1], [0, 2]], np.int32)), ValueError,
     r"token 2 \(sequence 0, position 2\) maps to block_tables\[0, 1\] = -1"),
    (dict(block_tables=np.array([[3, 4], [0, 2]], np.int32)), ValueError, r"block_tables\[0, 1\] = 4"),
    (dict(token_positions=np.array([0, 1, 1], np.int32)), ValueError,
     r"tokens \[1, 2\] all map to slot 1 of block 3"),
    (dict(token_seqs=np.array([0, 0, 1], np.int32), token_positions=np.array([0, 2, 2], np.int32),
          block_tables=np.array([[3, 1], [0, 1]], np.int32)), ValueError, "is a block shared by two sequences"),
], ids=["k_new float64", "v_new shape", "k_cache kv_heads", "positions int64", "seq past the table",
        "position past the row", "entry -1", "entry past the cache", "two tokens one slot", "shared block"])
def test_kv_cache_write_rejects_bad_input_naming_the_argument(change, error, words):
    args = write_args(**change)
    before = args["k_cache"].copy()
    with count_traffic() as t, pytest.raises(error, match=words):
        kv_cache_write(**args)
    assert t.launches == 0 and np.array_equal(args["k_cache"], before)


# ------------------------------------------------------------------------------------------------
# End to end: the block manager's steps applied to the cache, then a decode step, several times
# ------------------------------------------------------------------------------------------------

def test_block_manager_cache_write_and_v1_decode_agree_with_the_reference_over_several_steps():
    rng, seed = random_inputs()
    block_size, num_blocks, kv_heads, heads, d, vocab = 3, 16, 1, 2, 4, 6
    key_of = rng.standard_normal((vocab, kv_heads, d), dtype=np.float32)     # token id -> its K row
    value_of = rng.standard_normal((vocab, kv_heads, d), dtype=np.float32)
    k_cache = np.full((num_blocks, kv_heads, block_size, d), np.nan, np.float32)
    v_cache = np.full_like(k_cache, np.nan)
    bm = BlockManager(num_blocks, block_size)
    seen = {"copies": 0, "shared at add": 0}

    def tables(seqs):
        width = max(len(bm.block_table(s)) for s in seqs) + 1
        rows = np.full((len(seqs), width), -1, np.int32)
        for row, s in enumerate(seqs):
            rows[row, :len(bm.block_table(s))] = bm.block_table(s)
        return rows

    def apply(steps):
        """The copies of every step (NumPy), then all their writes in one kv_cache_write launch."""
        for _, step in steps:
            for src, dst in step.copies:
                k_cache[dst], v_cache[dst] = k_cache[src], v_cache[src]
                seen["copies"] += 1
        seqs = sorted(bm.sequences())
        writes = [(seqs.index(s), position, slot) for s, step in steps for position, slot in step.writes]
        table = tables(seqs)
        token_seqs = np.array([w[0] for w in writes], np.int32)
        positions = np.array([w[1] for w in writes], np.int32)
        for row, position, slot in writes:   # the kernel finds the slot the manager chose
            assert table[row, position // block_size] * block_size + position % block_size == slot
        ids = [bm.tokens(seqs[row])[position] for row, position, _ in writes]
        kv_cache_write(key_of[ids], value_of[ids], token_seqs, positions, table, k_cache, v_cache)

    def decode(step_name):
        seqs = sorted(bm.sequences())
        table, lens = tables(seqs), np.array([bm.context_len(s) for s in seqs], np.int32)
        for row, s in enumerate(seqs):   # every sequence reads its own tokens' K and V back
            ids = bm.tokens(s)
            np.testing.assert_array_equal(reference.gather_kv(k_cache, table[row], lens[row]),
                                          key_of[ids].transpose(1, 0, 2), err_msg=f"K of seq {s}, {step_name}")
            np.testing.assert_array_equal(reference.gather_kv(v_cache, table[row], lens[row]),
                                          value_of[ids].transpose(1, 0, 2), err_msg=f"V of seq {s}, {step_name}")
        q = rng.standard_normal((len(seqs), heads, d), dtype=np.float32)
        out = paged_attention_v1_block_per_head(q, k_cache, v_cache, table, lens, out=poison(np.empty_like(q)))
        check(out, reference.paged_attention(q, k_cache, v_cache, table, lens), name=f"v1 out, {step_name}",
              dims=DIMS, seed=seed)

    def add(prompt):
        free_before = bm.num_free
        seq, step = bm.add_sequence(prompt)
        if free_before - bm.num_free < len(bm.block_table(seq)):
            seen["shared at add"] += 1
        return seq, step

    def append_all(step_name):
        apply([(s, bm.append(s, int(rng.integers(vocab)))) for s in sorted(bm.sequences())])
        decode(step_name)

    a = add([0, 1, 2, 3, 4, 5, 1])                 # two full blocks and one token
    b = add([0, 1, 2, 3, 4, 5, 2, 2])              # the same two full blocks: shared
    apply([a, b])
    decode("after two prompts")
    c = bm.fork(a[0])                             # c shares a's partly filled block
    append_all("fork, then every sequence appends")       # a copies on write, c writes in place
    assert bm.block_table(c)[:2] == bm.block_table(a[0])[:2] and bm.block_table(c)[2] != bm.block_table(a[0])[2]
    append_all("second decode step")
    bm.free(b[0])
    e = add(bm.tokens(a[0])[:6] + [3])            # a's first two blocks again, after b left
    apply([e])
    append_all("after a free and a new prompt")
    assert seen["copies"] >= 1 and seen["shared at add"] >= 2, seen


# ------------------------------------------------------------------------------------------------
# The checks can fail: deliberately wrong kernels, through the same checks
# ------------------------------------------------------------------------------------------------

# The wrong v1 kernels are written plainly (thread c of block (h, s) walks the whole context for
# channel c), so that they depend on nothing inside kernels/paged_attention.py; v1_serial is the
# same kernel without the mistake, and passes.

@cuda.jit(device=True)
def serial_attention(q, k_cache, v_cache, block_tables, s, h, kv_head, scale, end, out):
    c = cuda.threadIdx.x
    if c < q.shape[2]:
        block_size = k_cache.shape[2]
        running_max = -math.inf
        running_sum = 0.0
        acc = 0.0
        for t in range(end):
            block = block_tables[s, t // block_size]
            slot = t % block_size
            score = 0.0
            for i in range(q.shape[2]):
                score += q[s, h, i] * k_cache[block, kv_head, slot, i]
            score *= scale
            new_max = max(running_max, score)
            correction = math.exp(running_max - new_max)
            p = math.exp(score - new_max)
            running_sum = running_sum * correction + p
            acc = acc * correction + p * v_cache[block, kv_head, slot, c]
            running_max = new_max
        out[s, h, c] = acc / running_sum if running_sum > 0 else 0.0


@cuda.jit
def v1_serial(q, k_cache, v_cache, block_tables, context_lens, scale, out):
    h, s = cuda.blockIdx.x, cuda.blockIdx.y
    serial_attention(q, k_cache, v_cache, block_tables, s, h, h // (q.shape[1] // k_cache.shape[1]), scale,
                     context_lens[s], out)


@cuda.jit
def v1_interleaved_groups(q, k_cache, v_cache, block_tables, context_lens, scale, out):
    """Query head h reading KV head h % kv_heads instead of h // group (a GQA mistake)."""
    h, s = cuda.blockIdx.x, cuda.blockIdx.y
    serial_attention(q, k_cache, v_cache, block_tables, s, h, h % k_cache.shape[1], scale, context_lens[s], out)


@cuda.jit
def v1_reads_whole_pages(q, k_cache, v_cache, block_tables, context_lens, scale, out):
    """Attending to every slot of the last page, past the context's end."""
    h, s = cuda.blockIdx.x, cuda.blockIdx.y
    block_size = k_cache.shape[2]
    end = (context_lens[s] + block_size - 1) // block_size * block_size
    serial_attention(q, k_cache, v_cache, block_tables, s, h, h // (q.shape[1] // k_cache.shape[1]), scale,
                     end, out)


@cuda.jit
def merge_without_rescale(partial_max, partial_sum, partial_acc, out):
    """v2's merge adding the partitions' sums and accumulators as they are, each relative to its
    own maximum."""
    h, s, c = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    if c < out.shape[2]:
        total = float32(0.0)
        channel = float32(0.0)
        for p in range(partial_max.shape[2]):
            total += partial_sum[s, h, p]
            channel += partial_acc[s, h, p, c]
        out[s, h, c] = channel / total if total > 0 else float32(0.0)


@cuda.jit
def cache_write_ignoring_the_table(k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache):
    """kv_cache_write treating the logical page as the physical block."""
    t = cuda.blockIdx.x
    d = k_new.shape[2]
    block_size = k_cache.shape[2]
    position = token_positions[t]
    block = position // block_size
    for idx in range(cuda.threadIdx.x, k_new.shape[1] * d, cuda.blockDim.x):
        head = idx // d
        c = idx - head * d
        k_cache[block, head, position % block_size, c] = k_new[t, head, c]
        v_cache[block, head, position % block_size, c] = v_new[t, head, c]


def test_the_decode_check_catches_kv_heads_taken_in_the_wrong_order():
    case = decode_case([5, 2], 2, kv_heads=2, group=2)
    check_decode(run_v1(case, kernel=v1_serial), case, "v1_serial out")      # without the mistake: passes
    with pytest.raises(CheckFailure, match="does not match the reference"):
        check_decode(run_v1(case, kernel=v1_interleaved_groups), case, "v1 with h % kv_heads")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # NaN - NaN, as intended
def test_the_decode_check_catches_a_kernel_that_reads_past_the_context():
    case = decode_case([5, 1], 4)        # partial last pages: 3 NaN slots after each context
    # NaN keys make the scores NaN; whichever way the NaN goes, the output is wrong
    with pytest.raises(CheckFailure, match="does not match the reference"):
        check_decode(run_v1(case, kernel=v1_reads_whole_pages), case, "v1 reading whole pages")


def test_the_decode_check_catches_a_merge_without_rescale():
    case = decode_case([9], 4, group=1, d=4, large_logits=True)
    with pytest.raises(CheckFailure, match="does not match the reference"):
        check_decode(run_v2(case, 3, merge_kernel=merge_without_rescale), case, "v2 merging without rescale")


def test_the_cache_write_check_catches_a_write_that_ignores_the_block_table():
    seqs, positions = write_tokens(3)
    case = cache_write_case(3, 1, 4, seqs, positions)
    k_want, _ = expected_after_writes(case)
    kv_cache_write(case.k_new, case.v_new, case.seqs, case.positions, case.tables, case.k_cache, case.v_cache,
                   kernel=cache_write_ignoring_the_table)
    assert not np.array_equal(case.k_cache, k_want)
