"""``kernels.fused_llama.rope_qk_cache_write`` (day 10) against the three launches it replaces, on the simulator:
``rope_pairs_from_table`` on q, the same on k, then ``kv_cache_write`` of the turned k and of v. The same bits in
q and in both caches (the arithmetic is the same, in the same order), over a prompt of two sequences crossing
blocks in a shuffled table, a decode step of both, and the arguments the launches refuse; and
``q4_1_norm_qkv_rope_cache``, which adds the norm and the Q, K, V projections, against the two launches it replaces."""

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


# ---------------------------------------------------------------------------------------------
# q4_1_norm_qkv_rope_cache: the norm, Q, K, V, RoPE and the cache write in one launch
# ---------------------------------------------------------------------------------------------

K = 96


def _qkv_args(rng, seqs, positions, heads=HEADS):
    rows = (heads + 2 * KV_HEADS) * D
    w = reference.quantize_q4_1(rng.standard_normal((rows, K))).reshape(rows, K // 32, 20)
    x = rng.standard_normal((len(seqs), K)).astype(np.float32)
    norm_weight = (1 + rng.standard_normal(K) / 10).astype(np.float32)
    return dict(w=w, x=x, norm_weight=norm_weight, token_seqs=np.array(seqs, np.int32),
                positions=np.array(positions, np.int32), table=reference.rope_table(CONTEXT, D, 1e4),
                block_tables=rng.permutation(NUM_BLOCKS).astype(np.int32).reshape(2, 5),
                k_cache=rng.standard_normal((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, D)).astype(np.float32),
                v_cache=rng.standard_normal((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, D)).astype(np.float32))


@pytest.mark.parametrize("seqs, positions", [
    ([0] * 6 + [1] * 3, [0, 1, 2, 3, 4, 5, 0, 1, 2]),          # 9 tokens: a pass of 8, then one of 1
    ([0, 1], [6, 3]),                                           # a decode step of both
    ([1], [19]),                                                # one token: the kernel of one token a pass
], ids=["prompts", "decode", "one"])
def test_the_qkv_launch_with_rope_and_the_cache_write_gives_the_bits_of_two(seqs, positions):
    """``q4_1_norm_qkv_rope_cache`` against ``q4_1_norm_qkv_quarters`` then ``rope_qk_cache_write``: the same bits in
    q and in both caches (the same sums, turned by the same arithmetic), and only the tokens' slots written."""
    from kernels.fused_llama import q4_1_norm_qkv_quarters, q4_1_norm_qkv_rope_cache

    a = _qkv_args(np.random.default_rng(len(seqs)), seqs, positions)
    t = len(seqs)
    q, k, v = q4_1_norm_qkv_quarters(a["w"], a["x"], a["norm_weight"], eps=1e-5,
                                     rows=(HEADS * D, KV_HEADS * D, KV_HEADS * D))
    want_k, want_v = a["k_cache"].copy(), a["v_cache"].copy()
    want_q = rope_qk_cache_write(q.reshape(t, HEADS, D), k.reshape(t, KV_HEADS, D), v.reshape(t, KV_HEADS, D),
                                 a["token_seqs"], a["positions"], a["table"], a["block_tables"], want_k, want_v)
    before = a["k_cache"].copy()
    got_q = q4_1_norm_qkv_rope_cache(**a, eps=1e-5)
    np.testing.assert_array_equal(got_q.reshape(t, HEADS, D), want_q)
    np.testing.assert_array_equal(a["k_cache"], want_k)
    np.testing.assert_array_equal(a["v_cache"], want_v)
    assert (a["k_cache"] != before).any(axis=(1, 3)).sum() == t      # one slot of every KV head per token


def test_the_qkv_launch_turns_pairs_not_halves():
    """Test of the test above: q from the same sums turned by rotate-half (channel i with i + d/2, the convention the
    GGUF's permuted rows do not use) differs from the launch's q."""
    from kernels.fused_llama import q4_1_norm_qkv_quarters, q4_1_norm_qkv_rope_cache

    a = _qkv_args(np.random.default_rng(5), [0, 1], [6, 3])
    q, _, _ = q4_1_norm_qkv_quarters(a["w"], a["x"], a["norm_weight"], eps=1e-5,
                                     rows=(HEADS * D, KV_HEADS * D, KV_HEADS * D))
    q = q.reshape(2, HEADS, D).astype(np.float64)
    angles = a["positions"][:, None] * 1e4 ** (-np.arange(D // 2) * 2 / D)
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    first, second = q[..., :D // 2], q[..., D // 2:]
    halves = np.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)
    got = q4_1_norm_qkv_rope_cache(**a, eps=1e-5).reshape(2, HEADS, D)
    assert np.abs(got - halves).max() > 1e-2
    np.testing.assert_allclose(got, reference.rope_pairs(q, a["positions"], 1e4), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("changes, error, words", [
    (dict(w=np.zeros((HEADS * D + 2 * KV_HEADS * D + 2, K // 32, 20), np.uint8)), ValueError,
     r"w's 82 rows must be Wq's \(a multiple of k_cache's head_dim 8"),
    (dict(k_cache=np.zeros((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, 7), np.float32)), ValueError, "which must be even"),
    (dict(positions=np.array([2, CONTEXT], np.int32)), ValueError, "positions must be rows of table, 0 ... 19"),
    (dict(token_seqs=np.array([0, 0], np.int32), positions=np.array([3, 3], np.int32)), ValueError,
     "two writes to one slot race"),
    (dict(x=np.zeros((2, K + 32), np.float32)), ValueError, r"x must have shape \(T=any, K=96\)"),
    (dict(v_cache=np.zeros((NUM_BLOCKS, KV_HEADS, BLOCK_SIZE, D + 2), np.float32)), ValueError, "v_cache must have shape"),
])
def test_the_qkv_launch_names_its_bad_arguments(changes, error, words):
    from kernels.fused_llama import q4_1_norm_qkv_rope_cache

    a = _qkv_args(np.random.default_rng(0), [0, 1], [2, 3])
    a.update(changes)
    with pytest.raises(error, match=words):
        q4_1_norm_qkv_rope_cache(**a, eps=1e-5)
