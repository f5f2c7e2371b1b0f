"""``kernels.fused_llama.rope_qk_cache_write`` (day 10) against the three launches it replaces, on the simulator:
``rope_pairs_from_table`` on q, the same on k, then ``kv_cache_write`` of the turned k and of v. The same bits in
q and in both caches (the arithmetic is the same, in the same order), over a prompt of two sequences crossing
blocks in a shuffled table, a decode step of both, and the arguments the launches refuse."""

import numpy as np
import pytest

from kernels import reference
from kernels.fused_llama import rope_qk_cache_write
from kernels.kv_cache import kv_cache_write
from kernels.llama_layers import rope_pairs_from_table

pytestmark = pytest.mark.day10

HEADS, KV_HEADS, D, BLOCK_SIZE, NUM_BLOCKS, CONTEXT = 6, 2, 8, 4, 10, 20


def _step(rng, seqs, positions):
    t = len(seqs)
    q = rng.standard_normal((t, HEADS, D)).astype(np.float32)
    k = rng.standard_normal((t, KV_HEADS, D)).astype(np.float32)
    v = rng.standard_normal((t, KV_HEADS, D)).astype(np.float32)
    return q, k, v, np.array(seqs, np.int32), np.array(positions, np.int32)


@pytest.mark.parametrize("seqs, positions", [
    ([0] * 6 + [1] * 3, [0, 1, 2, 3, 4, 5, 0, 1, 2]),          # two prompts, the first crossing a block boundary
    ([0, 1], [6, 3]),                                           # a decode step of both
    ([1], [19]),                                                # the last position of the context
], ids=["prompts", "decode", "last"])
def test_one_launch_gives_the_bits_of_three(seqs, positions):
    rng = np.random.default_rng(len(seqs))
    tables = rng.permutation(NUM_BLOCKS).astype(np.int32).reshape(2, 5)
    table = reference.rope_table(CONTEXT, D, 1e4)
    q, k, v, s, p = _step(rng, seqs, positions)
    caches = [rng.standard_normal((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, D)).astype(np.float32) for _ in range(2)]
    want_q = rope_pairs_from_table(q, p, table)
    want_k, want_v = (c.copy() for c in caches)
    kv_cache_write(rope_pairs_from_table(k, p, table), v, s, p, tables, want_k, want_v)
    got_k, got_v = (c.copy() for c in caches)
    k_before, v_before = k.copy(), v.copy()
    got_q = rope_qk_cache_write(q, k, v, s, p, table, tables, got_k, got_v)
    assert got_q is q                                           # turned in place
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_k, want_k)
    np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_array_equal(k, k_before)                 # k and v are read, not written
    np.testing.assert_array_equal(v, v_before)


def _args(**changes):
    rng = np.random.default_rng(0)
    q, k, v, s, p = _step(rng, [0, 1], [2, 3])
    args = dict(q=q, k=k, v=v, token_seqs=s, positions=p, table=reference.rope_table(CONTEXT, D, 1e4),
                block_tables=np.arange(10, dtype=np.int32).reshape(2, 5),
                k_cache=np.zeros((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, D), np.float32),
                v_cache=np.zeros((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, D), np.float32))
    args.update(changes)
    return args


@pytest.mark.parametrize("changes, error, words", [
    (dict(q=np.zeros((2, HEADS, 7), np.float32)), ValueError, "q must have an even head_dim"),
    (dict(k=np.zeros((3, KV_HEADS, D), np.float32)), ValueError, r"k must have shape \(T=2, kv_heads=any, head_dim=8\)"),
    (dict(positions=np.array([2, CONTEXT], np.int32)), ValueError, "positions must be rows of table, 0 ... 19"),
    (dict(token_seqs=np.array([0, 0], np.int32), positions=np.array([3, 3], np.int32)), ValueError,
     "two writes to one slot race"),
    (dict(positions=np.array([2.0, 3.0], np.float32)), TypeError, "positions must have dtype int32"),
    (dict(v_cache=np.zeros((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, D + 2), np.float32)), ValueError, "v_cache must have shape"),
])
def test_bad_arguments_are_named(changes, error, words):
    with pytest.raises(error, match=words):
        rope_qk_cache_write(**_args(**changes))
