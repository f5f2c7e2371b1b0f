"""Paged attention: one decode step over a KV cache kept in fixed-size blocks (pages).

A decode step has one new query per sequence, and it attends to every key of that sequence so far:
``out[s, h] = softmax(q[s, h] @ K_s.T * scale) @ V_s``, where ``K_s`` and ``V_s`` are the first
``context_lens[s]`` keys and values of sequence ``s``, read through its block table. The layout
(``docs/design-notes.md`` §2, as in vLLM)::

    q, out:           (num_seqs, heads, head_dim) float32
    k_cache, v_cache: (num_blocks, kv_heads, block_size, head_dim) float32
    block_tables:     (num_seqs, max_blocks_per_seq) int32; position t of sequence s lives in
                      slot t % block_size of block block_tables[s, t // block_size]
    context_lens:     (num_seqs,) int32

Query head ``h`` reads KV head ``h // (heads // kv_heads)``: one block per query head, which reads
its KV head once per query head of the group (day 7 reads it once per group).

- ``paged_attention_v1_block_per_head``: one block of ``WARPS`` warps per (query head, sequence)
  walks the sequence's tokens through its block table; a warp takes ``TOKENS_IN_FLIGHT`` tokens at a
  time, its 32 lanes read each key row together (coalesced) and add up q.k with warp shuffles; each warp keeps a
  running maximum, sum and accumulator (online softmax), and the warps merge theirs in shared memory
  at the end. Every K and V element of a context is read once per query head.
- ``paged_attention_v2_split_k``: v1 with each context cut into partitions of ``partition_size``
  tokens, one block per (query head, sequence, partition), so that a few long sequences still fill
  the GPU (flash-decoding); each block writes its partial maximum, sum and accumulator, and a second
  kernel merges the partitions with day 3's algebra. A partition past the end of its sequence's
  context writes an empty partial (maximum -inf, sum 0).
- ``paged_attention_v3_one_launch``: v2 in one launch. Each block writes its partial as v2's
  partition kernel does, then takes a ticket from a counter of its (query head, sequence); the
  block that draws the last ticket merges that pair's partials into ``out`` (v2's merge) and sets
  the counter back to 0. A decode step pays the host's cost of one launch instead of two.

``kv_cache_write`` (in ``kernels.kv_cache``) stores the new tokens' keys and values into the cache;
``kernels.block_manager`` is the host-side allocator that hands out the blocks.

Launchers accept NumPy arrays or numba device arrays (``kernels.launching``), validate, size the
grid, launch the kernels given as ``kernel=`` (and ``merge_kernel=``) and return the output.
"""

from __future__ import annotations

import math
import weakref

import numpy as np
from numba import cuda, float32, int32

from kernels.launching import (FULL_MASK, WARP, default_scale, is_device_array, note_output, output_array,
                               require_array, require_int, require_int32, require_kv_heads, require_same_kind)
# What this day's launchers share with the decode launchers of later days: the block-table check, the
# partials, the SM count and the partitions (v2's PARTITION_SIZE and the rule that shortens them).
from kernels.paging import (BLOCKS_PER_SM, MIN_PARTITION_SIZE, PARTITION_SIZE, check_block_tables,
                            choose_partition_size, longest_context, partial_buffers, partitions_for, sm_count)
from kernels.registry import Rung, ladder

__all__ = ["WARP", "WARPS", "THREADS", "HEAD_DIM_MAX", "PARTITION_SIZE", "TOKENS_IN_FLIGHT", "check_paged_inputs",
           "paged_attention_v1_block_per_head_kernel", "paged_attention_v1_block_per_head",
           "paged_attention_v2_partition_kernel", "paged_attention_v2_merge_kernel",
           "paged_attention_v2_split_k", "paged_attention_v3_one_launch_kernel", "paged_attention_v3_one_launch",
           "partitions_for", "choose_partition_size", "MIN_PARTITION_SIZE", "BLOCKS_PER_SM", "RUNGS"]

# Warps per block: each walks every WARPS-th token of the context (or of the partition).
WARPS = 4
THREADS = WARPS * WARP
# Lane l holds channels l, l + 32, l + 64, l + 96 of the query and of its accumulator: a loop over
# CHANNELS (known when the kernel compiles) keeps them in registers.
HEAD_DIM_MAX = 128
CHANNELS = HEAD_DIM_MAX // WARP
# Tokens a warp loads before it computes with any of them: more bytes in flight per warp.
TOKENS_IN_FLIGHT = 4


def check_paged_inputs(q, k_cache, v_cache, block_tables, context_lens) -> tuple:
    """Validate a decode step's inputs; return (num_seqs, heads, head_dim, kv_heads, block_size).

    NumPy inputs are checked to the last index the kernels read: every context fits its row of the
    block table, and every table entry a context uses names a block of the cache (entries past
    the pages in use are never read and may be padding such as -1). Device arrays are checked for
    shape and dtype only (their values are not copied back). Raises TypeError or ValueError naming
    the argument.
    """
    num_seqs, heads, head_dim = require_array("q", q, (None, None, None), np.float32,
                                              dims=("num_seqs", "heads", "head_dim"))
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX: each lane holds "
                         f"{CHANNELS} channels), got head_dim {head_dim} in shape {tuple(q.shape)} "
                         f"(day 8's gqa_decode_wide_heads takes head_dim up to 256)")
    cache_dims = ("num_blocks", "kv_heads", "block_size", "head_dim")
    num_blocks, kv_heads, block_size, _ = require_array("k_cache", k_cache, (None, None, None, head_dim),
                                                        np.float32, dims=cache_dims)
    require_array("v_cache", v_cache, tuple(k_cache.shape), np.float32, dims=cache_dims)
    require_kv_heads(heads, kv_heads, q_name="q", kv_name="k_cache")
    if block_size < 1:
        raise ValueError(f"k_cache must have block_size >= 1, got shape {tuple(k_cache.shape)}")
    (_, max_blocks) = require_int32("block_tables", block_tables, (num_seqs, None),
                                    dims=("num_seqs", "max_blocks_per_seq"))
    require_int32("context_lens", context_lens, (num_seqs,), dims=("num_seqs",))
    require_same_kind(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables,
                      context_lens=context_lens)
    if not is_device_array(q):
        check_block_tables(block_tables, context_lens, block_size, max_blocks, num_blocks)
    return num_seqs, heads, head_dim, kv_heads, block_size


# ----------------------------------------------------------------------------------------------
# The work of one warp: tokens first, first + stride, ... < end, with an online softmax
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale, first, end, stride, acc):
    """One warp's running (maximum, sum) over its tokens first, first + stride, ... < end; ``acc``
    (this lane's CHANNELS) accumulates p * v. The warp takes TOKENS_IN_FLIGHT tokens at a time and
    loads all their K and V before it uses any, so their loads wait on DRAM together. Every lane
    returns the same maximum and sum (the scores are summed by a butterfly)."""
    lane = cuda.threadIdx.x % WARP
    d = q.shape[2]
    block_size = k_cache.shape[2]
    q_lane = cuda.local.array(CHANNELS, float32)
    k_regs = cuda.local.array((TOKENS_IN_FLIGHT, CHANNELS), float32)
    v_regs = cuda.local.array((TOKENS_IN_FLIGHT, CHANNELS), float32)
    scores = cuda.local.array(TOKENS_IN_FLIGHT, float32)
    for i in range(CHANNELS):
        c = lane + i * WARP
        q_lane[i] = q[s, h, c] * scale if c < d else float32(0.0)
        acc[i] = float32(0.0)
        for u in range(TOKENS_IN_FLIGHT):
            k_regs[u, i] = float32(0.0)
            v_regs[u, i] = float32(0.0)
    running_max = float32(-math.inf)
    running_sum = float32(0.0)
    for t0 in range(first, end, TOKENS_IN_FLIGHT * stride):
        for u in range(TOKENS_IN_FLIGHT):
            t = t0 + u * stride
            if t < end:
                block = block_tables[s, t // block_size]
                slot = t % block_size
                for i in range(CHANNELS):
                    c = lane + i * WARP
                    if c < d:
                        k_regs[u, i] = k_cache[block, kv_head, slot, c]
                        v_regs[u, i] = v_cache[block, kv_head, slot, c]
        new_max = running_max
        for u in range(TOKENS_IN_FLIGHT):
            partial = float32(0.0)
            for i in range(CHANNELS):
                partial += q_lane[i] * k_regs[u, i]
            # After the butterfly every lane holds the whole dot product q . k_t.
            for offset in (16, 8, 4, 2, 1):
                partial += cuda.shfl_xor_sync(FULL_MASK, partial, offset)
            scores[u] = partial if t0 + u * stride < end else float32(-math.inf)
            new_max = max(new_max, scores[u])
        correction = math.exp(running_max - new_max)       # 0 for the first tokens, 1 if no new max
        running_sum *= correction
        for i in range(CHANNELS):
            acc[i] *= correction
        for u in range(TOKENS_IN_FLIGHT):
            p = math.exp(scores[u] - new_max)              # 0 for a token past the end
            running_sum += p
            for i in range(CHANNELS):
                acc[i] += p * v_regs[u, i]
        running_max = new_max
    return running_max, running_sum


@cuda.jit(device=True, inline=True)
def _merge_warps(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, d):
    """Put each warp's state in shared memory, then (after a barrier) thread c < d combines channel c.

    Returns (the block's maximum, its sum, channel c's accumulator) in thread c, all relative to
    the block's maximum; a block that saw no token has maximum -inf, sum 0, accumulator 0.
    """
    tid = cuda.threadIdx.x
    warp = tid // WARP
    lane = tid % WARP
    if lane == 0:
        warp_max[warp] = running_max
        warp_sum[warp] = running_sum
    for i in range(CHANNELS):
        c = lane + i * WARP
        if c < d:
            warp_acc[warp, c] = acc[i]
    cuda.syncthreads()
    block_max = float32(-math.inf)
    for w in range(WARPS):
        block_max = max(block_max, warp_max[w])
    block_sum = float32(0.0)
    channel = float32(0.0)
    if block_max > -math.inf:       # else no warp saw a token: exp(-inf - -inf) would be NaN
        for w in range(WARPS):
            weight = math.exp(warp_max[w] - block_max)
            block_sum += warp_sum[w] * weight
            if tid < d:
                channel += warp_acc[w, tid] * weight
    return block_max, block_sum, channel


# ----------------------------------------------------------------------------------------------
# v1: one block per (query head, sequence)
# ----------------------------------------------------------------------------------------------

@cuda.jit
def paged_attention_v1_block_per_head_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, out):
    """Block (h, s) writes out[s, h]: its WARPS warps take every WARPS-th token of the context."""
    h = cuda.blockIdx.x
    s = cuda.blockIdx.y
    kv_head = h // (q.shape[1] // k_cache.shape[1])
    warp = cuda.threadIdx.x // WARP
    acc = cuda.local.array(CHANNELS, float32)
    warp_max = cuda.shared.array(WARPS, float32)
    warp_sum = cuda.shared.array(WARPS, float32)
    warp_acc = cuda.shared.array((WARPS, HEAD_DIM_MAX), float32)
    d = q.shape[2]
    running_max, running_sum = _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale,
                                            warp, context_lens[s], WARPS, acc)
    block_max, block_sum, channel = _merge_warps(running_max, running_sum, acc, warp_max, warp_sum,
                                                 warp_acc, d)
    tid = cuda.threadIdx.x
    if tid < d:
        out[s, h, tid] = channel / block_sum if block_sum > 0 else float32(0.0)


def paged_attention_v1_block_per_head(q, k_cache, v_cache, block_tables, context_lens, *, scale=None,
                                      out=None, kernel=paged_attention_v1_block_per_head_kernel):
    """Decode attention over a paged cache with the v1 kernel; returns out (num_seqs, heads, head_dim).

    See the module docstring for the shapes; a sequence with context length 0 gives zeros.
    """
    num_seqs, heads, head_dim, _, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, context_lens)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if num_seqs and heads:
        kernel[(heads, num_seqs), THREADS](q, k_cache, v_cache, block_tables, context_lens, scale, out)
    return out


# ----------------------------------------------------------------------------------------------
# v2: split-K over partitions of the context, then a merge
# ----------------------------------------------------------------------------------------------

@cuda.jit
def paged_attention_v2_partition_kernel(q, k_cache, v_cache, block_tables, context_lens, scale,
                                        partition_size, partial_max, partial_sum, partial_acc):
    """Block (h, s, p) attends to tokens p*partition_size ... of sequence s and writes its partial:
    partial_max[s, h, p], partial_sum[s, h, p] and partial_acc[s, h, p, :] (not divided by the sum)."""
    h = cuda.blockIdx.x
    s = cuda.blockIdx.y
    p = cuda.blockIdx.z
    kv_head = h // (q.shape[1] // k_cache.shape[1])
    warp = cuda.threadIdx.x // WARP
    acc = cuda.local.array(CHANNELS, float32)
    warp_max = cuda.shared.array(WARPS, float32)
    warp_sum = cuda.shared.array(WARPS, float32)
    warp_acc = cuda.shared.array((WARPS, HEAD_DIM_MAX), float32)
    d = q.shape[2]
    start = p * partition_size
    end = min(start + partition_size, context_lens[s])    # end <= start: a partition with no token
    running_max, running_sum = _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale,
                                            start + warp, end, WARPS, acc)
    block_max, block_sum, channel = _merge_warps(running_max, running_sum, acc, warp_max, warp_sum,
                                                 warp_acc, d)
    tid = cuda.threadIdx.x
    if tid == 0:
        partial_max[s, h, p] = block_max
        partial_sum[s, h, p] = block_sum
    if tid < d:
        partial_acc[s, h, p, tid] = channel


@cuda.jit
def paged_attention_v2_merge_kernel(partial_max, partial_sum, partial_acc, out):
    """Block (h, s): thread c merges channel c of the partitions of out[s, h] (day 3's algebra)."""
    h = cuda.blockIdx.x
    s = cuda.blockIdx.y
    c = cuda.threadIdx.x
    partitions = partial_max.shape[2]
    if c < out.shape[2]:
        m = float32(-math.inf)
        for p in range(partitions):
            m = max(m, partial_max[s, h, p])
        total = float32(0.0)
        channel = float32(0.0)
        if m > -math.inf:               # else no partition saw a token: the context is empty
            for p in range(partitions):
                weight = math.exp(partial_max[s, h, p] - m)   # 0 for an empty partition
                total += partial_sum[s, h, p] * weight
                channel += partial_acc[s, h, p, c] * weight
        out[s, h, c] = channel / total if total > 0 else float32(0.0)


def paged_attention_v2_split_k(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                               partition_size=None, max_context=None,
                               kernel=paged_attention_v2_partition_kernel,
                               merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention with v2: partitions, then their merge; returns out (num_seqs, heads, head_dim).

    ``partition_size``: tokens per partition; None chooses one that fills the GPU
    (``choose_partition_size``). ``max_context``: the longest context, which sizes the grid; with
    NumPy inputs it is read from ``context_lens``, with device arrays it must be given (reading it
    back would add a copy to every timed launch) and at least the longest context.
    """
    num_seqs, heads, head_dim, _, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, context_lens)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        partition_size = choose_partition_size(num_seqs, heads, longest, sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    partial_max, partial_sum, partial_acc = partial_buffers(q, num_seqs, heads, partitions, head_dim)
    kernel[(heads, num_seqs, partitions), THREADS](q, k_cache, v_cache, block_tables, context_lens, scale,
                                                    partition_size, partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


# ----------------------------------------------------------------------------------------------
# v3: v2 in one launch; the last block of each (query head, sequence) merges its partials
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _merge_partitions(partial_max, partial_sum, partial_acc, s, h, c):
    """Channel c of out[s, h] from the partials of all partitions, with day 3's algebra (v2's merge):
    weights exp(m_p - m) under the largest maximum m, so an empty partition (-inf, 0, 0) weighs 0;
    0 where every partition is empty (an empty context)."""
    partitions = partial_max.shape[2]
    m = float32(-math.inf)
    for p in range(partitions):
        m = max(m, partial_max[s, h, p])
    total = float32(0.0)
    channel = float32(0.0)
    if m > -math.inf:
        for p in range(partitions):
            weight = math.exp(partial_max[s, h, p] - m)
            total += partial_sum[s, h, p] * weight
            channel += partial_acc[s, h, p, c] * weight
    return channel / total if total > 0 else float32(0.0)


@cuda.jit
def paged_attention_v3_one_launch_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                                         partial_max, partial_sum, partial_acc, tickets, out):
    """Block (h, s, p) writes partition p's partial as v2's partition kernel does, then takes a ticket
    from tickets[s, h]; the block that draws the last one (of gridDim.z) merges the partials of
    (s, h) into out[s, h] and sets tickets[s, h] back to 0 for the next launch.

    Why the last block may read every partial: each block writes its partial, fences it (visible at
    device scope) and only then takes its ticket, so a block that draws ticket gridDim.z - 1 knows
    that every block of (s, h) has written and fenced its partial; its own fence after the ticket
    orders its reads after theirs. No block waits for another, so any number of blocks may be resident.
    """
    h = cuda.blockIdx.x
    s = cuda.blockIdx.y
    p = cuda.blockIdx.z
    kv_head = h // (q.shape[1] // k_cache.shape[1])
    warp = cuda.threadIdx.x // WARP
    acc = cuda.local.array(CHANNELS, float32)
    warp_max = cuda.shared.array(WARPS, float32)
    warp_sum = cuda.shared.array(WARPS, float32)
    warp_acc = cuda.shared.array((WARPS, HEAD_DIM_MAX), float32)
    merges = cuda.shared.array(1, int32)        # 1 in the block that drew the last ticket of (s, h)
    d = q.shape[2]
    start = p * partition_size
    end = min(start + partition_size, context_lens[s])    # end <= start: a partition with no token
    running_max, running_sum = _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale,
                                            start + warp, end, WARPS, acc)
    block_max, block_sum, channel = _merge_warps(running_max, running_sum, acc, warp_max, warp_sum,
                                                 warp_acc, d)
    tid = cuda.threadIdx.x
    if tid == 0:
        partial_max[s, h, p] = block_max
        partial_sum[s, h, p] = block_sum
    if tid < d:
        partial_acc[s, h, p, tid] = channel
    cuda.threadfence()          # this thread's stores reach device scope before the ticket below
    cuda.syncthreads()          # every thread of the block has fenced its stores
    if tid == 0:
        ticket = cuda.atomic.add(tickets, (s, h), 1)
        merges[0] = 0
        if ticket == cuda.gridDim.z - 1:       # every other block of (s, h) took its ticket before
            tickets[s, h] = 0                   # no block of this launch touches it again
            merges[0] = 1
            cuda.threadfence()                  # the merge's loads come after the other blocks' stores
    cuda.syncthreads()
    if merges[0] == 1 and tid < d:
        out[s, h, tid] = _merge_partitions(partial_max, partial_sum, partial_acc, s, h, tid)


# The ticket counters of v3 on the GPU, kept by shape like v2's partials: zeros when made, and
# zeros again after every launch (the last block of each (s, h) resets its own).
_TICKETS: dict = {}


def _tickets(like, num_seqs: int, heads: int):
    """int32 zeros (num_seqs, heads) for v3's tickets: a new NumPy array, or a device array reused by shape."""
    if not is_device_array(like):
        return note_output(np.zeros((num_seqs, heads), np.int32))
    key = (num_seqs, heads)
    if key not in _TICKETS:
        if len(_TICKETS) >= 8:
            _TICKETS.pop(next(iter(_TICKETS)))
        _TICKETS[key] = cuda.to_device(np.zeros((num_seqs, heads), np.int32))
    return note_output(_TICKETS[key])


# The device arrays (q, k_cache, v_cache, block_tables, context_lens, out) that v3's last call
# checked, as weak references, and what check_paged_inputs returned for them.
_CHECKED: list = [(), None]


def _check_once(q, k_cache, v_cache, block_tables, context_lens, out) -> tuple:
    """``check_paged_inputs`` and the check of ``out`` (None: allocated here), skipped when the arrays
    are the very device arrays that the last call checked: a device array's shape, dtype and layout
    never change, and its values are not checked (``check_paged_inputs``). A decode loop passes the
    same arrays at every step, and the checks are most of a launcher's own Python time (numba's
    launch is the rest). NumPy arrays are checked every time (their block tables and lengths are read)."""
    arrays = (q, k_cache, v_cache, block_tables, context_lens, out)
    refs, sizes = _CHECKED
    if out is not None and len(refs) == 6 and all(ref() is a for ref, a in zip(refs, arrays)):
        return sizes, note_output(out)
    sizes = check_paged_inputs(q, k_cache, v_cache, block_tables, context_lens)
    out = output_array("out", out, sizes[:3], like=q)
    if is_device_array(q):                      # then all of them are (check_paged_inputs)
        try:
            _CHECKED[:] = [tuple(weakref.ref(a) for a in arrays[:5] + (out,)), sizes]
        except TypeError:                       # an array type without weak references: check every call
            _CHECKED[:] = [(), None]
    return sizes, out


def paged_attention_v3_one_launch(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                                  partition_size=None, max_context=None,
                                  kernel=paged_attention_v3_one_launch_kernel):
    """Decode attention with v3: v2's partitions and merge in one launch; returns out (num_seqs, heads, head_dim).

    ``partition_size`` and ``max_context`` as in ``paged_attention_v2_split_k``. The partials and
    the ticket counters are reused by shape on the GPU, so two launches of one shape must not run
    at once on two streams (the course launches on the default stream only). Device arrays that
    the previous call checked are not checked again (``_check_once``).
    """
    (num_seqs, heads, head_dim, _, _), out = _check_once(q, k_cache, v_cache, block_tables, context_lens, out)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        partition_size = choose_partition_size(num_seqs, heads, longest, sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    if not (num_seqs and heads):
        return out
    partial_max, partial_sum, partial_acc = partial_buffers(q, num_seqs, heads, partitions, head_dim)
    kernel[(heads, num_seqs, partitions), THREADS](q, k_cache, v_cache, block_tables, context_lens, scale,
                                                    partition_size, partial_max, partial_sum, partial_acc,
                                                    _tickets(q, num_seqs, heads), out)
    return out


RUNGS = ladder(
    Rung("paged_attention_v1_block_per_head", paged_attention_v1_block_per_head,
         "one block per (query head, sequence) walks the context through the block table; warps merge in shared memory"),
    Rung("paged_attention_v2_split_k", paged_attention_v2_split_k,
         "contexts cut into partitions, one block each, and a second kernel that merges the partials"),
    Rung("paged_attention_v3_one_launch", paged_attention_v3_one_launch,
         "v2 in one launch: the last block of each (query head, sequence), found by an atomic ticket, merges"),
)
