"""Day 8's decode: day 7's split-K GQA decode over a paged cache stored in fp16 or as fp8 codes.

Each cache element is converted to float32 (fp16) or decoded (fp8) once per block, as its token is loaded,
and serves every query head of the block; scores, statistics and accumulators are float32, and so are q,
the partials and out. The rungs:

- ``gqa_decode_mixed_group``: day 7's ``gqa_decode_group`` (one token per warp at a time, arrays for
  ``GROUP_MAX`` heads) over a paged cache stored in fp16 (or float32): each element converted to
  float32 once, as its token is loaded, for every head of the block; q, the partials and out are
  float32. The day's exercise.
- ``gqa_decode_mixed_precision``: day 7's ``gqa_decode_split_k`` over a paged cache stored in fp16
  (or float32), or as fp8 e4m3 codes with a float32 scale per (block, kv_head) (``fp8_quantize``):
  each warp keeps the next batch of tokens in registers as stored and loads it while it computes the
  current one, and converts (fp16) or decodes (fp8) each element once per block; the fp8 scales
  multiply whole scores and weights. q, out and the partials stay float32 (a row per head against a
  whole context of cache); day 6's merge kernel combines the partitions. ``_build_decode_kernel`` says
  what a narrow cache changes in day 7's kernel.

On an H100 (16 sequences x 8,192 tokens, 32 query heads on 8 KV heads, head_dim 128, shuffled pages of 16;
recording ``course/data/day08_decode_timing.json``, medians of a whole step; bytes: each cache element read
once per KV head, q and out; copy: torch's copy of as many bytes, 2.98 TB/s counting reads and writes) day
7's float32 kernel takes 0.455 ms (0.79 of the copy bandwidth), ``gqa_decode_mixed_precision`` 0.435 ms with
a float32 cache (0.83), 0.354 ms with fp16 (0.51, 1.28 times day 7) and 0.385 ms with fp8 (0.24, 1.18 times;
the GPU's time alone 0.331 ms). Narrow caches are not yet memory-bound: fp8 moves half fp16's bytes in no
less time, so each batch of tokens costs its chain of shuffles, exponentials and conversions, not its bytes.
The next rungs (``page_runs``, ``half_warps``, ``tensor_cores``) spend fewer instructions on each byte.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32, uint32
from numba import types as numba_types

from kernels.gqa_attention import GROUP_MAX, decode_grid, next_pages, subgroups_for
from kernels.launching import FULL_MASK, WARP, cdiv, default_scale, output_array, require_int
from kernels.paged_attention import CHANNELS, HEAD_DIM_MAX, THREADS, WARPS, paged_attention_v2_merge_kernel
from kernels.paging import decode_partition_size, longest_context, partial_buffers, partitions_for, sm_count

from .common import (CACHE_FORMATS, batch_steps, check_decode_inputs, check_scales, fill_e4m3_table, fp8_words,
                     lane_query, no_scales)
from .fp8 import TWO_TO_MINUS_9

__all__ = ["TOKENS_IN_FLIGHT", "decode_tiling", "gqa_decode_mixed_group_kernel", "gqa_decode_mixed_group",
           "gqa_decode_mixed_precision_kernel", "gqa_decode_mixed_precision"]

# Tokens a decode warp loads at a time, by cache format and by the heads of its block (entry heads - 1).
# A warp holds two batches in registers (the one it computes, the one in flight), so a token costs 8
# registers per lane for float32 and for fp16 (4 K and 4 V numbers, one register each: numba has no
# packed half2) and 2 for fp8 (a K and a V word). Timed on an H100 at 16 x 8,192 tokens, 8 KV heads,
# head_dim 128 (ms; registers from ptxas): group 4: float32 T2 0.443 (111) < T4 0.496 (157); fp16 T2
# 0.358 (116) < T4 0.427 (164); fp8 T8 0.355 (144) < T4 0.400 (116). Group 8: fp16 T1 0.506 (125) < T2
# 0.532 (167); fp8 T4 0.666 (162) < T2 0.738 (143). Group 1: fp8 T16 0.226 < T8 0.252 (128 both).
# The other entries were not timed: float32 and fp16 take the most tokens that keep ptxas at 128
# registers or fewer (4 blocks of 128 threads per SM); fp8 groups 5 to 7 follow group 8.
TOKENS_IN_FLIGHT = {
    "float32": (4, 2, 2, 2, 1, 1, 1, 1),
    "float16": (4, 4, 4, 2, 2, 2, 2, 1),
    "fp8_e4m3": (16, 8, 8, 8, 4, 4, 4, 4),
}


def decode_tiling(group: int, fmt: str) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, tokens_in_flight)`` of the decode kernel for a group size and a
    cache format: day 7's sub-groups of at most ``GROUP_MAX`` heads, ``TOKENS_IN_FLIGHT[fmt]``."""
    if fmt not in CACHE_FORMATS:
        raise ValueError(f"fmt must be one of {CACHE_FORMATS}, got {fmt!r}")
    subgroups = subgroups_for(group)
    heads_per_block = cdiv(max(group, 1), subgroups)
    return subgroups, heads_per_block, TOKENS_IN_FLIGHT[fmt][heads_per_block - 1]


@cuda.jit
def gqa_decode_mixed_group_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                                  partial_max, partial_sum, partial_acc):
    """Day 7's ``gqa_decode_group_kernel`` over a cache stored in fp16: block (x, s, p) serves the
    query heads first ... of KV head x // subgroups over partition p of sequence s, warp w takes tokens
    start + w, start + w + WARPS, ... Each element of a token's K and V rows is converted to float32
    once, as it is loaded, and serves every head of the block; scores, statistics and accumulators
    are float32, and so are q and the partials."""
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
    end = min(start + partition_size, context_lens[s])

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
                k_row[ch] = float32(k_cache[page, kv_head, slot, c])
                v_row[ch] = float32(v_cache[page, kv_head, slot, c])
        for i in range(GROUP_MAX):
            if i < n_heads:
                partial = float32(0.0)
                for ch in range(CHANNELS):
                    partial += q_lane[i, ch] * k_row[ch]
                for offset in (16, 8, 4, 2, 1):
                    partial += cuda.shfl_xor_sync(FULL_MASK, partial, offset)
                new_max = max(running_max[i], partial)
                correction = math.exp(running_max[i] - new_max)
                weight = math.exp(partial - new_max)
                # A context of thousands of tokens is summed here: float32, never the cache's fp16.
                running_sum[i] = running_sum[i] * correction + weight
                for ch in range(CHANNELS):
                    acc[i, ch] = acc[i, ch] * correction + weight * v_row[ch]
                running_max[i] = new_max

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
        if block_max > -math.inf:
            for w in range(WARPS):
                factor = math.exp(warp_max[w, i] - block_max)
                block_sum += warp_sum[w, i] * factor
                channel += warp_acc[w, i, c] * factor
        if c == 0:
            partial_max[s, first + i, p] = block_max
            partial_sum[s, first + i, p] = block_sum
        partial_acc[s, first + i, p, c] = channel


def gqa_decode_mixed_group(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                           partition_size=None, max_context=None, kernel=gqa_decode_mixed_group_kernel,
                           merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16 (or float32), one block per (KV head,
    sequence, partition), then day 6's merge; returns out (num_seqs, heads, head_dim) float32.

    The arguments, grid and partials of day 7's ``gqa_decode_group``, with ``k_cache`` and ``v_cache``
    float16 or float32 (fp8 caches and their scales: ``gqa_decode_mixed_precision``). ``kernel`` is
    launched as it is (the day's exercise); ``merge_kernel`` is day 6's.
    """
    fmt, num_seqs, heads, head_dim, kv_heads = check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens)
    if fmt == "fp8_e4m3":
        raise TypeError("k_cache must have dtype float16 or float32 for gqa_decode_mixed_group, got uint8 (fp8 "
                        "codes): an fp8 cache and its scales go to gqa_decode_mixed_precision")
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        partition_size = decode_partition_size(num_seqs, kv_heads * subgroups_for(heads // kv_heads), longest,
                                               sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    partial_max, partial_sum, partial_acc = partial_buffers(q, num_seqs, heads, partitions, head_dim)
    kernel[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
        q, k_cache, v_cache, block_tables, context_lens, scale, partition_size, partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


_DECODE_KERNELS: dict = {}


def gqa_decode_mixed_precision_kernel(group: int, fmt: str):
    """The decode kernel for a group size and a cache format (``CACHE_FORMATS``), compiled on first
    use and kept. An fp8 kernel takes the codes as 32-bit words (``fp8_words``), 4 channels per lane."""
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an int, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group must be >= 1, got {group}")
    _, heads_per_block, tokens = decode_tiling(int(group), fmt)
    key = (heads_per_block, tokens, fmt)
    if key not in _DECODE_KERNELS:
        _DECODE_KERNELS[key] = _build_decode_kernel(*key)
    return _DECODE_KERNELS[key]


@cuda.jit(device=True, inline=True)
def _load_elements(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, first, end, lane, d, pages, slots,
                   k_raw, v_raw):
    """Issue the loads of the K and V rows of tokens first, first + WARPS, ... (those before ``end``) of a
    float32 or fp16 cache: lane's channels lane + 32 ch into k_raw[u, ch], v_raw[u, ch], unconverted.
    Returns the scales (1: a cache without scales). Unsigned indices, as day 7's ``_load_token``."""
    for u in range(len(pages)):
        if first + u * WARPS < end:
            row = (np.uint64(pages[u]), np.uint64(kv_head), np.uint64(slots[u]))
            k_row = k_cache[row]
            v_row = v_cache[row]
            base = np.uint64(lane)
            if lane + (CHANNELS - 1) * WARP < d:        # all of the lane's channels exist (head_dim 128)
                for ch in range(CHANNELS):
                    k_raw[u, ch] = k_row[base + np.uint64(ch * WARP)]
                    v_raw[u, ch] = v_row[base + np.uint64(ch * WARP)]
            else:
                for ch in range(CHANNELS):
                    if lane + ch * WARP < d:
                        k_raw[u, ch] = k_row[base + np.uint64(ch * WARP)]
                        v_raw[u, ch] = v_row[base + np.uint64(ch * WARP)]
    return float32(1.0), float32(1.0)


@cuda.jit(device=True, inline=True)
def _load_codes(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, first, end, lane, d, pages, slots,
                k_raw, v_raw):
    """Issue the loads of the same tokens of an fp8 cache seen as words: lane w < head_dim / 4 loads word w
    (channels 4 w ... 4 w + 3) of each K and V row into k_raw[u], v_raw[u]. Lane u < len(pages) also
    loads the page scales of token u and returns them times 2**-9 (the other lanes return 0): the
    scores and the weights read them from that lane. (Lane u reads its token's table entry again:
    ``pages[lane]`` would be an array index known only at run time, which puts ``pages`` in local memory.)"""
    words = k_cache.shape[3]
    for u in range(len(pages)):
        if first + u * WARPS < end and lane < words:
            at = (np.uint64(pages[u]), np.uint64(kv_head), np.uint64(slots[u]), np.uint64(lane))
            k_raw[u] = k_cache[at]
            v_raw[u] = v_cache[at]
    k_scale = float32(0.0)
    v_scale = float32(0.0)
    token = first + lane * WARPS
    if lane < len(pages) and token < end:
        page = np.uint64(block_tables[s, token // k_cache.shape[2]])
        k_scale = k_scales[page, np.uint64(kv_head)] * float32(TWO_TO_MINUS_9)
        v_scale = v_scales[page, np.uint64(kv_head)] * float32(TWO_TO_MINUS_9)
    return k_scale, v_scale


@cuda.jit(device=True, inline=True)
def _convert_elements(raw, u, table, out):
    """Token u's channels of a float32 or fp16 cache, as float32 (one conversion instruction each for fp16)."""
    for ch in range(CHANNELS):
        out[ch] = float32(raw[u, ch])


@cuda.jit(device=True, inline=True)
def _decode_codes(raw, u, table, out):
    """Token u's 4 channels of an fp8 word, decoded through the block's table: value * 2**9, exactly."""
    word = raw[u]
    for ch in range(CHANNELS):
        out[ch] = table[np.uint32(word >> np.uint32(8 * ch)) & np.uint32(0xFF)]


def _build_decode_kernel(G: int, T: int, fmt: str):
    """Day 7's decode kernel (``gqa_attention.decode._build_decode_kernel``: block (x, s, p) serves query heads
    first ... first + n_heads - 1 of KV head x // subgroups over partition p of sequence s, ``T`` tokens
    per warp at a time, one butterfly for a batch's ``G * T`` scores, the online softmax where the scores
    are, day 6's partials), with what a narrow cache changes:

    - each warp keeps the next batch's K and V rows in registers as they are stored (fp16 numbers, or
      fp8 codes 4 to a 32-bit word) and issues their loads before it computes the current batch, so a
      batch's loads wait on DRAM while the batch before is computed (with day 7's order, load then
      compute, a warp has its loads in flight only while it waits, and half or a quarter of day 7's
      bytes in flight no longer hide DRAM's latency);
    - every element is converted (fp16: one instruction) or decoded (fp8: a 256-entry table of
      ``value * 2**9`` in shared memory, built by the block) once per block, as its token is scored
      and as it is accumulated, not once per head;
    - fp8: the page scales (times 2**-9) multiply a whole score and a whole weight, not each element:
      lane u loads those of token u, and the lane that holds a score reads its token's scales from
      that lane (two shuffles a batch).
    """
    FP8 = fmt == "fp8_e4m3"
    RAW = {"float32": float32, "float16": numba_types.float16, "fp8_e4m3": uint32}[fmt]
    RAW_SHAPE = (T,) if FP8 else (T, CHANNELS)
    TABLE_SIZE = 256 if FP8 else 1
    load_batch = _load_codes if FP8 else _load_elements
    convert = _decode_codes if FP8 else _convert_elements
    (NPAD, SHIFT, _), score_batch, accumulate_batch, write_partials = batch_steps(G, T, fmt, convert,
                                                                                 lane_major=FP8)

    @cuda.jit
    def gqa_decode_mixed_precision_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens,
                                          scale, partition_size, partial_max, partial_sum, partial_acc):
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
        end = min(start + partition_size, context_lens[s])
        mine = lane >> SHIFT
        my_token = mine & (T - 1)

        table = cuda.shared.array(TABLE_SIZE, float32)
        if FP8:
            fill_e4m3_table(table, tid)

        # Lane l holds channels l, l + 32, ... of each head (fp8: 4 l ... 4 l + 3, the channels of its word).
        q_lane = cuda.local.array((G, CHANNELS), float32)
        acc = cuda.local.array((G, CHANNELS), float32)
        k_now = cuda.local.array(RAW_SHAPE, RAW)
        v_now = cuda.local.array(RAW_SHAPE, RAW)
        k_next = cuda.local.array(RAW_SHAPE, RAW)
        v_next = cuda.local.array(RAW_SHAPE, RAW)
        k_token = cuda.local.array(CHANNELS, float32)
        v_token = cuda.local.array(CHANNELS, float32)
        scores = cuda.local.array(NPAD, float32)
        pages = cuda.local.array(T, int32)
        slots = cuda.local.array(T, int32)
        lane_query(q, s, first, n_heads, d, scale, lane * CHANNELS if FP8 else lane, 1 if FP8 else WARP, q_lane, acc)
        for u in range(T):
            if FP8:
                k_next[u] = 0
                v_next[u] = 0
            else:
                for ch in range(CHANNELS):
                    k_next[u, ch] = 0
                    v_next[u, ch] = 0
        running_max = float32(-math.inf)
        running_sum = float32(0.0)

        # The first batch: its pages, then its loads.
        page_index = (start + warp) // block_size
        slot = start + warp - page_index * block_size
        page_index, slot = next_pages(block_tables, s, start + warp, end, block_size, page_index, slot,
                                       pages, slots)
        k_scale_next, v_scale_next = load_batch(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head,
                                                start + warp, end, lane, d, pages, slots, k_next, v_next)
        for t0 in range(start + warp, end, T * WARPS):
            # This batch is what was loaded last; the next one's loads go out before it is computed.
            for u in range(T):
                if FP8:
                    k_now[u] = k_next[u]
                    v_now[u] = v_next[u]
                else:
                    for ch in range(CHANNELS):
                        k_now[u, ch] = k_next[u, ch]
                        v_now[u, ch] = v_next[u, ch]
            k_scale_now = k_scale_next
            v_scale_now = v_scale_next
            page_index, slot = next_pages(block_tables, s, t0 + T * WARPS, end, block_size, page_index, slot,
                                           pages, slots)
            k_scale_next, v_scale_next = load_batch(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head,
                                                    t0 + T * WARPS, end, lane, d, pages, slots, k_next, v_next)

            score = score_batch(q_lane, k_now, table, k_token, scores, lane)
            # fp8: the page's scales, read from the lane that loaded them
            k_scale = cuda.shfl_sync(FULL_MASK, k_scale_now, my_token) if FP8 else float32(1.0)
            v_scale = cuda.shfl_sync(FULL_MASK, v_scale_now, my_token) if FP8 else float32(1.0)
            running_max, running_sum = accumulate_batch(score, mine < G * T and t0 + my_token * WARPS < end, k_scale,
                                                        v_scale, running_max, running_sum, acc, v_now, table, v_token,
                                                        lane)

        warp_max = cuda.shared.array((WARPS, G), float32)
        warp_sum = cuda.shared.array((WARPS, G), float32)
        warp_acc = cuda.shared.array((WARPS, G, HEAD_DIM_MAX), float32)
        write_partials(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, partial_max, partial_sum,
                       partial_acc, s, first, p, n_heads, d, warp, lane, tid)

    return gqa_decode_mixed_precision_kernel


def gqa_decode_mixed_precision(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                               scale=None, out=None, partition_size=None, max_context=None,
                               kernel=gqa_decode_mixed_precision_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16, float32 or fp8 e4m3; returns out
    (num_seqs, heads, head_dim) float32.

    The arguments of day 7's ``gqa_decode_split_k``, with ``k_cache`` and ``v_cache`` float16,
    float32, or uint8 e4m3 codes (``fp8_quantize``) with ``k_scales`` and ``v_scales`` (num_blocks,
    kv_heads) float32: element ``[b, h, t, c]`` stands for ``value(k_cache[b, h, t, c]) * k_scales[b,
    h]``. q and out are float32. ``kernel`` is a function of the group size and the cache format
    (``gqa_decode_mixed_precision_kernel``); ``merge_kernel`` is day 6's.
    """
    fmt, num_seqs, heads, head_dim, kv_heads = check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens)
    check_scales(k_cache, k_scales, v_scales, fmt)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        partition_size = decode_partition_size(num_seqs, kv_heads * subgroups_for(heads // kv_heads), longest,
                                               sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    if fmt == "fp8_e4m3":
        k_cache, v_cache = fp8_words(k_cache), fp8_words(v_cache)
    else:
        k_scales = v_scales = no_scales(q)
    partial_max, partial_sum, partial_acc = partial_buffers(q, num_seqs, heads, partitions, head_dim)
    kernel(heads // kv_heads, fmt)[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
        q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens, scale, partition_size,
        partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out
