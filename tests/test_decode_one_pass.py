"""``kernels.gqa_attention.gqa_decode_one_pass`` (day 10) against ``gqa_decode_split_k``, the two launches it
replaces, on the simulator: the same blocks write the same partials, and the last block of each (KV head,
sequence) merges them as day 6's merge kernel does, so the output has the same bits, over groups of 1, 3, 4 and 9
(two blocks a KV head), an empty context, one partition and many. The tickets are left at zero for the next
launch, and a kernel that merges in the first block to finish instead of the last is caught. ``load_f32_l2``'s
twin reads what it is asked and names what it refuses."""

import numpy as np
import pytest
from numba import cuda, int32

from kernels import paging
from kernels.gqa_attention import decode
from kernels.intrinsics import load_f32_l2

pytestmark = pytest.mark.day10

BLOCK_SIZE, NUM_BLOCKS = 4, 40


def _inputs(rng, lens, heads, kv_heads, d):
    seqs, width = len(lens), max(1, -(-max(lens) // BLOCK_SIZE))
    q = rng.standard_normal((seqs, heads, d)).astype(np.float32)
    k = rng.standard_normal((NUM_BLOCKS, kv_heads, BLOCK_SIZE, d)).astype(np.float32)
    v = rng.standard_normal((NUM_BLOCKS, kv_heads, BLOCK_SIZE, d)).astype(np.float32)
    tables = rng.permutation(NUM_BLOCKS)[:seqs * width].reshape(seqs, width).astype(np.int32)
    return q, k, v, tables, np.array(lens, np.int32)


@pytest.mark.parametrize("lens, heads, kv_heads, d, partition", [
    ([37, 5], 9, 3, 64, 8),           # SmolLM2's group, 5 partitions, one sequence shorter than the rest
    ([1], 4, 1, 32, 4),               # one position, one partition
    ([0, 9, 13], 6, 2, 16, 4),        # an empty context among others
    ([21], 18, 2, 8, 3),              # a group of 9: two blocks a KV head, 7 partitions
    ([12, 12], 4, 4, 8, 16),          # group 1, one partition longer than the context
], ids=["smollm2", "one_position", "empty", "group9", "one_partition"])
def test_one_launch_gives_the_bits_of_split_k_and_its_merge(lens, heads, kv_heads, d, partition):
    rng = np.random.default_rng(len(lens) * heads)
    q, k, v, tables, context = _inputs(rng, lens, heads, kv_heads, d)
    want = decode.gqa_decode_split_k(q, k, v, tables, context, partition_size=partition)
    got = decode.gqa_decode_one_pass(q, k, v, tables, context, partition_size=partition,
                                     out=np.full_like(want, np.nan))
    np.testing.assert_array_equal(got, want)
    if min(lens) == 0:
        assert not got[int(np.argmin(lens))].any()        # an empty context gives zeros, as the merge kernel's


def test_device_arrays_share_tickets_that_each_launch_leaves_at_zero():
    rng = np.random.default_rng(3)
    q, k, v, tables, context = _inputs(rng, [30, 17], 9, 3, 16)
    want = decode.gqa_decode_split_k(q, k, v, tables, context, partition_size=8)
    args = [cuda.to_device(a) for a in (q, k, v, tables, context)]
    for _ in range(2):               # the second launch finds the tickets the first left
        got = decode.gqa_decode_one_pass(*args, partition_size=8, max_context=30).copy_to_host()
        np.testing.assert_array_equal(got, want)
    tickets = paging.ticket_buffer(args[0], 2, 3)
    assert tickets.shape == (2, 3) and not tickets.copy_to_host().any()


def _wrong_ticket(winner_offset: int, reset: bool):
    """``decode.last_to_finish`` made wrong: the ticket that merges is ``gridDim.z - 1 + winner_offset`` (1: one past
    the last, which no block takes), and with ``reset=False`` the tickets are not set back to zero."""
    @cuda.jit(device=True)
    def wrong(tickets, s):
        last = cuda.shared.array(1, int32)
        cuda.threadfence()
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            last[0] = int32(cuda.atomic.add(tickets, (s, cuda.blockIdx.x), 1) == cuda.gridDim.z - 1 + winner_offset)
            if last[0] and reset:
                tickets[s, cuda.blockIdx.x] = 0
        cuda.syncthreads()
        return last[0] != 0
    return wrong


@pytest.mark.parametrize("winner_offset, reset, launches", [(1, True, 1), (0, False, 2)],
                         ids=["no_block_merges", "tickets_not_reset"])
def test_a_wrong_ticket_is_caught(monkeypatch, winner_offset, reset, launches):
    """The tests above can fail: a ticket that no block takes leaves out unwritten, and tickets left counted make the
    second launch merge nothing. (A block that merges before the others have written cannot be caught here: the
    simulator runs blocks one after another, so the GPU's test of this rung is the one that can.)"""
    rng = np.random.default_rng(5)
    q, k, v, tables, context = _inputs(rng, [37, 22], 9, 3, 16)
    want = decode.gqa_decode_split_k(q, k, v, tables, context, partition_size=8)
    monkeypatch.setattr(decode, "last_to_finish", _wrong_ticket(winner_offset, reset))
    monkeypatch.setattr(paging, "_TICKETS", {})       # the wrong kernel's counts stay out of the other tests' tickets
    wrong = decode._build_decode_kernel(3, 4, one_pass=True)
    args = [cuda.to_device(a) for a in (q, k, v, tables, context)]
    for _ in range(launches):
        out = cuda.to_device(np.full_like(want, np.nan))
        decode.gqa_decode_one_pass(*args, partition_size=8, max_context=37, out=out, kernel=lambda group: wrong)
    assert np.isnan(out.copy_to_host()).all()


def test_load_f32_l2_twin_reads_the_element_and_names_what_it_refuses():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert load_f32_l2(a, (1, 2, 3)) == 23.0
    with pytest.raises(TypeError, match="float32 array and a tuple of 3 indices"):
        load_f32_l2(a.astype(np.float64), (0, 0, 0))
    with pytest.raises(TypeError, match="tuple of 3 indices"):
        load_f32_l2(a, (0, 0))
    with pytest.raises(IndexError, match="index 3 of dimension 1"):
        load_f32_l2(a, (0, 3, 0))
