"""Day 7's decode rungs, ``gqa_decode_group`` and ``gqa_decode_split_k`` (the ladder and its order:
``kernels.gqa_attention``): paged decode whose block serves the query heads of a group.

The layout and the inputs are those of ``paged_attention_v2_split_k`` (``kernels.paged_attention``)::

    q, out:           (num_seqs, heads, head_dim) float32
    k_cache, v_cache: (num_blocks, kv_heads, block_size, head_dim) float32
    block_tables:     (num_seqs, max_blocks_per_seq) int32
    context_lens:     (num_seqs,) int32

A block keeps, per lane, the query and the accumulator of each of its query heads in registers. A
group larger than ``GROUP_MAX`` (multi-query attention with many heads) is served by ``ceil(group /
GROUP_MAX)`` blocks per KV head of ``ceil(group / subgroups)`` heads each, each of which reads the
pages once. The partials have day 6's layout ``(num_seqs, heads, partitions)``, so day 6's merge
kernel merges them unchanged. What makes the decode kernel fast (``_build_decode_kernel``):

- one kernel per tiling: ``gqa_decode_partition_kernel(group)`` compiles a kernel whose per-head
  arrays hold exactly the block's heads (``decode_tiling``), as day 5's v5 fixes head_dim, so a
  group of 4 carries no registers or loops for 8;
- ``TOKENS_IN_FLIGHT`` by the block's heads: a warp loads 1, 2 or 4 tokens before it computes;
- one butterfly for all the scores of a batch: a warp's ``heads * tokens`` partial dot products are
  summed together, lanes trading halves of them at each step (``exchange_halves``), with 15 + 1 shuffles
  for 16 scores where summing each alone takes 5 x 16; then every lane holds one whole score and
  does the online softmax for it, one exponential per lane, and the accumulators read the weights
  from the lanes that hold them (one shuffle each). A batch that raises no head's maximum skips
  the rescaling of the accumulators (a warp vote);
- cheap addresses: a token's K and V rows are indexed with unsigned integers (numba adds no
  wraparound for negative indices, and the lane's channels are constant offsets from the row), and
  its block-table entry is read one batch ahead, by a walk along the table without divisions;
- long partitions (``decode_partition_size``): up to 1,024 tokens where the grid stays large.

On an H100 (16 sequences of 8,192 tokens, head_dim 128, 32 query heads, fp32, shuffled pages of 16;
recording ``course/data/day07_group_timing.json``) this kernel takes 1.43, 0.452 and 0.281 ms at groups
1, 4 and 8 (1.01, 0.80 and 0.64 of the copy bandwidth, counting K and V once per group), where day 6's
v2, one block per query head, takes 1.46, 1.22 and 1.20 ms; at group 4 it compiles to 128 registers and
no local memory (``course/data/day07_kernel_resources.json``). At a group of 8 the time no longer halves
with the bytes: each token carries 8 heads of work, and the kernel is bound by its instructions and
their latency rather than by memory (numba's 64-bit index arithmetic is a good part of the instructions
of its loop).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32

from kernels.intrinsics import load_f32_l2
from kernels.launching import FULL_MASK, WARP, cdiv, default_scale, output_array, require_int
# Day 6's warps, channels and head_dim limit, its check of a decode step's inputs and its merge kernel.
from kernels.paged_attention import (CHANNELS, HEAD_DIM_MAX, THREADS, WARPS, check_paged_inputs,
                                     paged_attention_v2_merge_kernel)
# What the decode launchers share (day 6's partials, whose layout the partitions here keep; the SM count; the
# partitions, day 7's rule among them).
from kernels.paging import (decode_partition_size, longest_context, partial_buffers, partitions_for, sm_count,
                            ticket_buffer)

__all__ = ["GROUP_MAX", "TOKENS_IN_FLIGHT", "subgroups_for", "decode_tiling", "decode_grid", "decode_shared_bytes",
           "gqa_decode_partition_kernel", "exchange_halves", "next_pages", "gqa_decode_group_kernel",
           "gqa_decode_group", "gqa_decode_split_k", "gqa_decode_one_pass_kernel", "last_to_finish", "merge_if_last",
           "gqa_decode_one_pass"]

# Query heads one decode block serves at most: each lane keeps a query and an accumulator of CHANNELS
# floats per head in registers, 2 * 8 * CHANNELS = 64 registers. 8 covers the groups of most models
# (Llama 3: 4 and 8; SmolLM2-135M: 3); a larger group takes ceil(group / 8) blocks per KV head.
GROUP_MAX = 8
# Tokens a decode warp loads before it computes with them, by the heads its block serves (entry
# heads - 1), chosen on an H100 at 16 x 8,192 tokens: 2 for 1 or 2 heads (64 and 74 registers, so 8
# and 6 blocks share an SM; at 2 heads 4 tokens ran 7 % slower), 4 for 3 or 4 (as day 6's v2; 127 and
# 128 registers, 4 blocks; at 4 heads 2 tokens ran 7 % slower), 1 for 5 to 8, whose every token
# already carries 5 to 8 heads of work (96 to 121 registers; at 8 heads 2 tokens take 168, leaving
# room for 3 blocks, and ran 25 % slower). 3 and 5 to 7 heads were not timed.
TOKENS_IN_FLIGHT = (2, 2, 4, 4, 1, 1, 1, 1)
# Decode partitions (partition_size=None): decode_partition_size, DECODE_PARTITION_MAX and DECODE_BLOCKS_PER_SM,
# in kernels.paging, which day 8's decode launchers share.


def subgroups_for(group: int) -> int:
    """Blocks per KV head, sequence and partition: ceil(group / GROUP_MAX), at least 1."""
    return max(1, cdiv(group, GROUP_MAX))


def decode_tiling(group: int) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, tokens_in_flight)`` of ``gqa_decode_split_k`` for a group size >= 1.

    ``subgroups = ceil(group / GROUP_MAX)`` blocks share a KV head's group, ``heads_per_block =
    ceil(group / subgroups)`` heads each (the last may hold fewer: a group of 9 is served as 5 + 4),
    and each warp loads ``TOKENS_IN_FLIGHT[heads_per_block - 1]`` tokens at a time.
    """
    subgroups = subgroups_for(group)
    heads_per_block = cdiv(max(group, 1), subgroups)
    return subgroups, heads_per_block, TOKENS_IN_FLIGHT[heads_per_block - 1]


def decode_grid(num_seqs: int, heads: int, kv_heads: int, partitions: int) -> tuple[int, int, int]:
    """The grid of ``gqa_decode_partition_kernel``: (KV heads x sub-groups, sequences, partitions)."""
    return (kv_heads * subgroups_for(heads // kv_heads), num_seqs, partitions)


def decode_shared_bytes(group: int = GROUP_MAX, itemsize: int = 4) -> int:
    """Static shared memory of one decode block of the kernel for ``group``: each warp's maximum, sum
    and accumulators per head of the block."""
    _, heads_per_block, _ = decode_tiling(group)
    return (2 * WARPS * heads_per_block + WARPS * heads_per_block * HEAD_DIM_MAX) * itemsize


_DECODE_KERNELS: dict = {}


def gqa_decode_partition_kernel(group: int):
    """The decode kernel for a group size (query heads per KV head), compiled on first use and kept.

    The kernel is specialized on ``heads_per_block`` and ``tokens_in_flight`` (``decode_tiling``):
    each lane's queries and accumulators are arrays of exactly the block's heads, and every loop over
    heads, tokens and channels has a constant bound, so all of them unroll into registers (no local
    memory; tests/test_day07_kernels.py checks the PTX). Groups with the same tiling (9 and 10:
    blocks of 5 heads) share one kernel.
    """
    return _decode_kernel(group, one_pass=False)


def _decode_kernel(group, one_pass: bool):
    """The kernel of ``gqa_decode_partition_kernel(group)`` or, with ``one_pass``, of
    ``gqa_decode_one_pass_kernel(group)``: compiled on first use and kept."""
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an int, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group must be >= 1, got {group}")
    _, heads_per_block, tokens = decode_tiling(int(group))
    key = (heads_per_block, tokens, one_pass)
    if key not in _DECODE_KERNELS:
        _DECODE_KERNELS[key] = _build_decode_kernel(heads_per_block, tokens, one_pass=one_pass)
    return _DECODE_KERNELS[key]


def gqa_decode_one_pass_kernel(group: int):
    """``gqa_decode_partition_kernel(group)`` with the merge at its end (``merge_if_last``): two more arguments,
    ``tickets`` (num_seqs, grid x) int32, zero between launches, and ``out``. Compiled on first use and kept."""
    return _decode_kernel(group, one_pass=True)


@cuda.jit(device=True, inline=True)
def exchange_halves(scores, half, offset, lane):
    """One step of the butterfly that sums many values at once: lanes ``offset`` apart trade halves.

    The lane whose bit ``offset`` is clear keeps ``scores[:half]``, its partner ``scores[half:2 *
    half]``; each sends the other half and adds what it receives, so ``half`` shuffles halve the
    values a lane holds (a plain butterfly would take one shuffle per value per step)."""
    upper = (lane & offset) != 0
    for j in range(half):
        low = scores[j]                 # both read once, then selected: a select between two array
        high = scores[j + half]         # reads would become a read at a computed index (local memory)
        keep = high if upper else low
        give = low if upper else high
        scores[j] = keep + cuda.shfl_xor_sync(FULL_MASK, give, offset)


@cuda.jit(device=True, inline=True)
def next_pages(block_tables, s, first, end, block_size, page_index, slot, pages, slots):
    """Pages and slots of tokens first, first + WARPS, ... (``len(pages)`` of them) of sequence s.

    (page_index, slot) is token first's place in the block table; the returned pair is the place of
    the token after them, so that the walk along the table needs no division. Tokens at or past
    ``end`` get page 0 (never read: no K or V row is loaded for them)."""
    for u in range(len(pages)):
        pages[u] = block_tables[s, page_index] if first + u * WARPS < end else 0
        slots[u] = slot
        slot += WARPS
        while slot >= block_size:           # at most once while block_size >= WARPS
            slot -= block_size
            page_index += 1
    return page_index, slot


@cuda.jit(device=True, inline=True)
def _load_token(k_cache, v_cache, page, kv_head, slot, lane, d, k_regs, v_regs, u):
    """Lane's channels of one token's K and V rows into k_regs[u] and v_regs[u].

    The indices are unsigned: numba then adds no wraparound for negative indices, each row's
    address is computed once, and the lane's channels lie at constant offsets from it (a fraction of
    the integer instructions of ``k_cache[page, kv_head, slot, c]`` for every channel)."""
    row = (np.uint64(page), np.uint64(kv_head), np.uint64(slot))
    k_row = k_cache[row]
    v_row = v_cache[row]
    first = np.uint64(lane)
    if lane + (CHANNELS - 1) * WARP < d:        # all of the lane's channels exist (head_dim 128)
        for ch in range(CHANNELS):
            k_regs[u, ch] = k_row[first + np.uint64(ch * WARP)]
            v_regs[u, ch] = v_row[first + np.uint64(ch * WARP)]
    else:
        for ch in range(CHANNELS):
            if lane + ch * WARP < d:
                k_regs[u, ch] = k_row[first + np.uint64(ch * WARP)]
                v_regs[u, ch] = v_row[first + np.uint64(ch * WARP)]


def _build_decode_kernel(G: int, T: int, one_pass: bool = False):
    """Block (x, s, p) serves query heads first ... first + n_heads - 1 (at most ``G``) of KV head
    x // subgroups over tokens p*partition_size ... of sequence s, ``T`` tokens per warp at a time,
    and writes their partials in day 6's layout: partial_max[s, h, p], partial_sum[s, h, p] and
    partial_acc[s, h, p, :] (not divided by the sum).

    A batch of ``T`` tokens gives a lane ``N = G * T`` partial dot products (score j: head j // T,
    token j % T). The butterfly of ``exchange_halves`` sums them over the warp with ``NPAD - 1`` shuffles
    (``NPAD``: N rounded up to a power of two, at most 32), after which lane l holds the whole score
    ``l >> SHIFT`` (``SHIFT = 5 - log2 NPAD``: ``2**SHIFT`` lanes hold each score). The online
    softmax is then done where the scores are: each lane keeps the running maximum of its head and
    the running sum of its token slot, and computes one weight (and, when its head's maximum grew,
    one correction); the accumulators, which every lane keeps for its channels of all G heads, then
    read each weight and correction from its lane with one shuffle.

    ``one_pass=True`` compiles ``gqa_decode_one_pass_kernel`` instead: the same block, then ``merge_if_last``.
    """
    N = G * T
    LOG_NPAD = (N - 1).bit_length()
    NPAD = 1 << LOG_NPAD
    SHIFT = 5 - LOG_NPAD
    LOG_T = T.bit_length() - 1
    HEAD_LANES = (T << SHIFT) - 1       # lane & HEAD_LANES == 0: the first lane of a head's scores
    if NPAD > WARP or 1 << LOG_T != T or WARP != 32:
        raise ValueError(f"heads x tokens in flight must be at most {WARP} and tokens a power of two, "
                         f"got {G} x {T}")

    @cuda.jit(device=True, inline=True)
    def partition(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                  partial_max, partial_sum, partial_acc):
        group = q.shape[1] // k_cache.shape[1]
        subgroups = (group + GROUP_MAX - 1) // GROUP_MAX
        kv_head = cuda.blockIdx.x // subgroups
        first = kv_head * group + (cuda.blockIdx.x - kv_head * subgroups) * G
        n_heads = min(G, (kv_head + 1) * group - first)
        s = cuda.blockIdx.y
        p = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        warp = tid // WARP
        lane = tid % WARP
        d = q.shape[2]
        block_size = k_cache.shape[2]
        start = p * partition_size
        end = min(start + partition_size, context_lens[s])    # end <= start: a partition with no token
        mine = lane >> SHIFT            # the score this lane holds after the butterfly
        my_token = mine & (T - 1)

        # Lane l holds channels l, l + 32, ... of each head's query and accumulator (day 6's layout).
        q_lane = cuda.local.array((G, CHANNELS), float32)
        acc = cuda.local.array((G, CHANNELS), float32)
        k_regs = cuda.local.array((T, CHANNELS), float32)
        v_regs = cuda.local.array((T, CHANNELS), float32)
        scores = cuda.local.array(NPAD, float32)
        pages = cuda.local.array(T, int32)
        slots = cuda.local.array(T, int32)
        for i in range(G):
            for ch in range(CHANNELS):
                c = lane + ch * WARP
                q_lane[i, ch] = q[s, first + i, c] * scale if i < n_heads and c < d else float32(0.0)
                acc[i, ch] = float32(0.0)
        for u in range(T):
            for ch in range(CHANNELS):
                k_regs[u, ch] = float32(0.0)
                v_regs[u, ch] = float32(0.0)
        running_max = float32(-math.inf)    # of head mine // T
        running_sum = float32(0.0)          # of the tokens in slot mine % T of head mine // T

        # Warp w takes tokens start + w, start + w + WARPS, ..., T at a time: each token's K and V
        # rows are loaded once, by one warp, and serve all the block's query heads. The table entries
        # of a batch are read during the batch before (one division for the whole walk).
        page_index = (start + warp) // block_size
        slot = start + warp - page_index * block_size
        page_index, slot = next_pages(block_tables, s, start + warp, end, block_size, page_index, slot,
                                       pages, slots)
        for t0 in range(start + warp, end, T * WARPS):
            for u in range(T):
                if t0 + u * WARPS < end:
                    _load_token(k_cache, v_cache, pages[u], kv_head, slots[u], lane, d, k_regs, v_regs, u)
            page_index, slot = next_pages(block_tables, s, t0 + T * WARPS, end, block_size, page_index, slot,
                                           pages, slots)
            for j in range(NPAD):
                partial = float32(0.0)
                if j < N:
                    for ch in range(CHANNELS):
                        partial += q_lane[j // T, ch] * k_regs[j % T, ch]
                scores[j] = partial
            # NPAD - 1 shuffles leave one sum of 32 / NPAD lanes in each lane; the steps left sum those.
            if LOG_NPAD > 0:
                exchange_halves(scores, NPAD >> 1, 16, lane)
            if LOG_NPAD > 1:
                exchange_halves(scores, NPAD >> 2, 8, lane)
            if LOG_NPAD > 2:
                exchange_halves(scores, NPAD >> 3, 4, lane)
            if LOG_NPAD > 3:
                exchange_halves(scores, NPAD >> 4, 2, lane)
            if LOG_NPAD > 4:
                exchange_halves(scores, NPAD >> 5, 1, lane)
            score = scores[0]
            for step in range(LOG_NPAD, 5):
                score += cuda.shfl_xor_sync(FULL_MASK, score, 16 >> step)
            if mine >= N or t0 + my_token * WARPS >= end:
                score = float32(-math.inf)      # a padding score, or a token past the end
            # The head's new maximum: over the T lanes (T << SHIFT apart at most) of its tokens.
            new_max = max(running_max, score)
            for b in range(LOG_T):
                new_max = max(new_max, cuda.shfl_xor_sync(FULL_MASK, new_max, 1 << (SHIFT + b)))
            weight = float32(0.0)
            if new_max > -math.inf:             # -inf only in the padding lanes
                weight = math.exp(score - new_max)     # 0 for a token past the end
            # Most batches raise no head's maximum: the accumulators then need no rescaling.
            grew = new_max > running_max
            if cuda.any_sync(FULL_MASK, grew):
                correction = math.exp(running_max - new_max) if grew else float32(1.0)   # 0 at first
                running_sum *= correction
                for i in range(G):
                    head_correction = cuda.shfl_sync(FULL_MASK, correction, (i * T) << SHIFT)
                    for ch in range(CHANNELS):
                        acc[i, ch] *= head_correction
            running_sum += weight
            running_max = new_max
            for i in range(G):
                for u in range(T):
                    token_weight = cuda.shfl_sync(FULL_MASK, weight, (i * T + u) << SHIFT)
                    for ch in range(CHANNELS):
                        acc[i, ch] += token_weight * v_regs[u, ch]

        # Each head's sum over its T token slots; the first lane of each head then holds its state.
        for b in range(LOG_T):
            running_sum += cuda.shfl_xor_sync(FULL_MASK, running_sum, 1 << (SHIFT + b))
        # The warps' states, head by head, meet in shared memory; then thread tid combines the
        # (head, channel) pairs tid, tid + THREADS, ... of the block (day 6's merge of warps, per head).
        warp_max = cuda.shared.array((WARPS, G), float32)
        warp_sum = cuda.shared.array((WARPS, G), float32)
        warp_acc = cuda.shared.array((WARPS, G, HEAD_DIM_MAX), float32)
        if lane & HEAD_LANES == 0 and mine < N:
            warp_max[warp, mine >> LOG_T] = running_max
            warp_sum[warp, mine >> LOG_T] = running_sum
        for i in range(G):
            for ch in range(CHANNELS):
                c = lane + ch * WARP
                if c < d:
                    warp_acc[warp, i, c] = acc[i, ch]
        cuda.syncthreads()
        for idx in range(tid, n_heads * d, THREADS):
            i = idx // d
            c = idx - i * d
            block_max = float32(-math.inf)
            for w in range(WARPS):
                block_max = max(block_max, warp_max[w, i])
            block_sum = float32(0.0)
            channel = float32(0.0)
            if block_max > -math.inf:       # else no warp saw a token: exp(-inf - -inf) would be NaN
                for w in range(WARPS):
                    factor = math.exp(warp_max[w, i] - block_max)
                    block_sum += warp_sum[w, i] * factor
                    channel += warp_acc[w, i, c] * factor
            if c == 0:
                partial_max[s, first + i, p] = block_max
                partial_sum[s, first + i, p] = block_sum
            partial_acc[s, first + i, p, c] = channel
        return first, n_heads

    if not one_pass:
        @cuda.jit
        def gqa_decode_partition_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                                        partial_max, partial_sum, partial_acc):
            partition(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                      partial_max, partial_sum, partial_acc)
        return gqa_decode_partition_kernel

    @cuda.jit
    def gqa_decode_one_pass_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                                   partial_max, partial_sum, partial_acc, tickets, out):
        first, n_heads = partition(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                                   partial_max, partial_sum, partial_acc)
        merge_if_last(q, partial_max, partial_sum, partial_acc, tickets, out, first, n_heads)
    return gqa_decode_one_pass_kernel


@cuda.jit(device=True, inline=True)
def last_to_finish(tickets, s):
    """Whether this block is the last of sequence ``s`` and its grid column (KV head and sub-group) to finish, the
    same answer in all its threads: it fences its writes (they reach L2 before its ticket), then thread 0 takes a
    ticket, ``tickets[s, x]`` counted up by one atomically; the last of the ``gridDim.z`` tickets answers yes, and
    sets the count back to 0 for the next launch."""
    last = cuda.shared.array(1, int32)
    cuda.threadfence()
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        last[0] = int32(cuda.atomic.add(tickets, (s, cuda.blockIdx.x), 1) == cuda.gridDim.z - 1)
        if last[0]:                         # every other block has taken its ticket: zero for the next launch
            tickets[s, cuda.blockIdx.x] = 0
    cuda.syncthreads()
    return last[0] != 0


@cuda.jit(device=True, inline=True)
def merge_if_last(q, partial_max, partial_sum, partial_acc, tickets, out, first, n_heads):
    """The end of a one-pass decode block (x, s, p) that served query heads first ... first + n_heads - 1: its
    partials written, the block that finishes last of (s, x) (``last_to_finish``) merges every partition of those
    heads into out, as day 6's merge kernel does, reading them from L2 (``load_f32_l2``, past an L1 that may hold
    older lines)."""
    s = cuda.blockIdx.y
    partitions = cuda.gridDim.z
    tid = cuda.threadIdx.x
    d = q.shape[2]
    if not last_to_finish(tickets, s):
        return
    cuda.threadfence()
    for idx in range(tid, n_heads * d, THREADS):
        i = idx // d
        c = idx - i * d
        h = first + i
        m = float32(-math.inf)
        for p in range(partitions):
            m = max(m, load_f32_l2(partial_max, (s, h, p)))
        total = float32(0.0)
        channel = float32(0.0)
        if m > -math.inf:                   # else no partition saw a token: the context is empty
            for p in range(partitions):
                weight = math.exp(load_f32_l2(partial_max, (s, h, p)) - m)     # 0 for an empty partition
                total += load_f32_l2(partial_sum, (s, h, p)) * weight
                channel += load_f32_l2(partial_acc, (s, h, p, c)) * weight
        out[s, h, c] = channel / total if total > 0 else float32(0.0)


@cuda.jit
def gqa_decode_group_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                            partial_max, partial_sum, partial_acc):
    """Block (x, s, p) serves the n_heads (at most GROUP_MAX) query heads first ... of KV head
    x // subgroups over the tokens p * partition_size ... of sequence s, and writes their partials
    in day 6's layout. Warp w takes tokens start + w, start + w + WARPS, ...: it loads each token's
    K and V rows once and scores the token for every head of the block (one butterfly per head)."""
    group = q.shape[1] // k_cache.shape[1]
    subgroups = (group + GROUP_MAX - 1) // GROUP_MAX
    heads_per_block = (group + subgroups - 1) // subgroups
    kv_head = cuda.blockIdx.x // subgroups
    first = kv_head * group + (cuda.blockIdx.x - kv_head * subgroups) * heads_per_block
    n_heads = min(heads_per_block, (kv_head + 1) * group - first)
    s = cuda.blockIdx.y
    p = cuda.blockIdx.z
    tid = cuda.threadIdx.x
    warp = tid // WARP
    lane = tid % WARP
    d = q.shape[2]
    block_size = k_cache.shape[2]
    start = p * partition_size
    end = min(start + partition_size, context_lens[s])    # end <= start: a partition with no token

    # Lane l holds channels l, l + 32, ... of each head's query and accumulator (day 6's layout).
    q_lane = cuda.local.array((GROUP_MAX, CHANNELS), float32)
    acc = cuda.local.array((GROUP_MAX, CHANNELS), float32)
    running_max = cuda.local.array(GROUP_MAX, float32)
    running_sum = cuda.local.array(GROUP_MAX, float32)
    k_row = cuda.local.array(CHANNELS, float32)
    v_row = cuda.local.array(CHANNELS, float32)
    for i in range(GROUP_MAX):
        for ch in range(CHANNELS):
            c = lane + ch * WARP
            q_lane[i, ch] = q[s, first + i, c] * scale if i < n_heads and c < d else float32(0.0)
            acc[i, ch] = float32(0.0)
        running_max[i] = float32(-math.inf)
        running_sum[i] = float32(0.0)
    for ch in range(CHANNELS):
        k_row[ch] = float32(0.0)
        v_row[ch] = float32(0.0)

    for t in range(start + warp, end, WARPS):
        page = block_tables[s, t // block_size]
        slot = t % block_size
        for ch in range(CHANNELS):
            c = lane + ch * WARP
            if c < d:
                k_row[ch] = k_cache[page, kv_head, slot, c]
                v_row[ch] = v_cache[page, kv_head, slot, c]
        # The token's K and V, loaded once, serve every head of the block.
        for i in range(GROUP_MAX):
            if i < n_heads:
                partial = float32(0.0)
                for ch in range(CHANNELS):
                    partial += q_lane[i, ch] * k_row[ch]
                for offset in (16, 8, 4, 2, 1):     # every lane ends with the whole score
                    partial += cuda.shfl_xor_sync(FULL_MASK, partial, offset)
                new_max = max(running_max[i], partial)
                correction = math.exp(running_max[i] - new_max)      # 0 at the first token
                weight = math.exp(partial - new_max)
                running_sum[i] = running_sum[i] * correction + weight
                for ch in range(CHANNELS):
                    acc[i, ch] = acc[i, ch] * correction + weight * v_row[ch]
                running_max[i] = new_max

    # The warps' states meet in shared memory, head by head; then thread tid combines the (head,
    # channel) pairs tid, tid + THREADS, ... of the block (day 6's merge of warps, per head).
    warp_max = cuda.shared.array((WARPS, GROUP_MAX), float32)
    warp_sum = cuda.shared.array((WARPS, GROUP_MAX), float32)
    warp_acc = cuda.shared.array((WARPS, GROUP_MAX, HEAD_DIM_MAX), float32)
    for i in range(GROUP_MAX):
        if lane == 0:
            warp_max[warp, i] = running_max[i]
            warp_sum[warp, i] = running_sum[i]
        for ch in range(CHANNELS):
            c = lane + ch * WARP
            if c < d:
                warp_acc[warp, i, c] = acc[i, ch]
    cuda.syncthreads()
    for idx in range(tid, n_heads * d, THREADS):
        i = idx // d
        c = idx - i * d
        block_max = float32(-math.inf)
        for w in range(WARPS):
            block_max = max(block_max, warp_max[w, i])
        block_sum = float32(0.0)
        channel = float32(0.0)
        if block_max > -math.inf:       # else no warp saw a token: exp(-inf - -inf) would be NaN
            for w in range(WARPS):
                factor = math.exp(warp_max[w, i] - block_max)
                block_sum += warp_sum[w, i] * factor
                channel += warp_acc[w, i, c] * factor
        if c == 0:
            partial_max[s, first + i, p] = block_max
            partial_sum[s, first + i, p] = block_sum
        partial_acc[s, first + i, p, c] = channel


def _launch_decode(q, k_cache, v_cache, block_tables, context_lens, scale, out, partition_size, max_context,
                   kernel_for, merge_kernel) -> np.ndarray:
    """Validate, then launch ``kernel_for(group)`` on the decode grid and the merge (every decode rung), or, with
    ``merge_kernel=None``, the one-pass kernel alone."""
    num_seqs, heads, head_dim, kv_heads, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, context_lens)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    blocks_per_partition = kv_heads * subgroups_for(heads // kv_heads)
    if partition_size is None:
        partition_size = decode_partition_size(num_seqs, blocks_per_partition, longest, sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    partial_max, partial_sum, partial_acc = partial_buffers(q, num_seqs, heads, partitions, head_dim)
    grid = decode_grid(num_seqs, heads, kv_heads, partitions)
    if merge_kernel is None:                # one pass: the last block of each (KV head, sequence) merges
        kernel_for(heads // kv_heads)[grid, THREADS](
            q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
            partial_max, partial_sum, partial_acc, ticket_buffer(q, num_seqs, grid[0]), out)
        return out
    kernel_for(heads // kv_heads)[grid, THREADS](
        q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
        partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


def gqa_decode_group(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                     partition_size=None, max_context=None, kernel=gqa_decode_group_kernel,
                     merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache, one block per (KV head, sequence, partition), then day 6's
    merge; returns out (num_seqs, heads, head_dim).

    The arguments, grid and partials of ``gqa_decode_split_k``; ``kernel`` is launched as it is (the
    day's exercise): one token per warp at a time and one butterfly per score, with arrays sized for
    ``GROUP_MAX`` heads whatever the group.
    """
    return _launch_decode(q, k_cache, v_cache, block_tables, context_lens, scale, out, partition_size,
                          max_context, lambda group: kernel, merge_kernel)


def gqa_decode_split_k(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                       partition_size=None, max_context=None, kernel=gqa_decode_partition_kernel,
                       merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache, one block per (KV head, sequence, partition), then day 6's
    merge; returns out (num_seqs, heads, head_dim).

    The arguments of ``paged_attention_v2_split_k``: ``partition_size`` (None: ``decode_partition_size``,
    long partitions that still fill the GPU with this rung's blocks), ``max_context`` (the longest
    context: read from ``context_lens`` for NumPy inputs, required with device arrays). ``kernel`` is
    a function of the group size that returns the kernel to launch (``gqa_decode_partition_kernel``),
    as for the prefill rung; ``merge_kernel`` is day 6's.
    """
    return _launch_decode(q, k_cache, v_cache, block_tables, context_lens, scale, out, partition_size,
                          max_context, kernel, merge_kernel)


def gqa_decode_one_pass(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                        partition_size=None, max_context=None, kernel=gqa_decode_one_pass_kernel):
    """Decode attention over a paged cache in one launch: ``gqa_decode_split_k``'s blocks, of which the last to
    finish for each (KV head, sequence) merges the partitions (``merge_if_last``); returns out (num_seqs, heads,
    head_dim). The arguments of ``gqa_decode_split_k``; ``kernel`` a function of the group size
    (``gqa_decode_one_pass_kernel``). The tickets are a workspace of the shape (``kernels.paging.ticket_buffer``),
    zero again after every launch, so two launches of one shape must not run at once.

    Day 10's rung (``kernels.fused_llama.RUNGS``), measured slower than the two launches it replaces (its entry
    there says by how much and why): the same bits, every block longer by a fence and an atomic."""
    return _launch_decode(q, k_cache, v_cache, block_tables, context_lens, scale, out, partition_size,
                          max_context, kernel, None)
