"""What the decode rungs of day 8 share: the cache formats and a decode step's inputs, the launchers' sizing,
and the device steps of their kernels.

Layout of a decode step (``docs/design-notes.md`` §2; day 6's with a narrower cache)::

    q, out:             (num_seqs, heads, head_dim) float32
    k_cache, v_cache:   (num_blocks, kv_heads, block_size, head_dim) float16 or float32, or uint8 codes
    k_scales, v_scales: (num_blocks, kv_heads) float32, with uint8 codes only
    block_tables:       (num_seqs, max_blocks_per_seq) int32
    context_lens:       (num_seqs,) int32

q, out and the partials stay float32: a row per head against a whole context of cache. The cache is fp16
(``np.float16``: one ``cvt.f32.f16`` an element), float32, or fp8 e4m3 codes with a float32 scale per
(block, kv_head) (``kernels.low_precision_attention.fp8``); bf16, which numba-cuda converts by a call to a
linked function, is read only by ``gqa_decode_wide_heads``, which loads it as words and turns each number into
float32 by moving its 16 bits to the top of a 32-bit word (``WIDE_CACHE_FORMATS``; ``docs/design-notes.md``
§4). ``WIDE_HEAD_DIM_MAX``: the head_dim the wide rungs take (``HEAD_DIM_MAX`` for the others). The kernels read a
cache as words: ``fp8_words`` (uint32 words of 4 codes: lane w loads channels 4 w ... 4 w + 3 in one load,
so head_dim must be a multiple of 4) and ``cache_words`` (the cache as one flat array of 4- or 8-byte words).

Here, for the launchers: ``cache_format``, ``check_decode_inputs`` and ``check_scales`` (every argument
validated, errors name it), ``no_scales``, and ``prepare_decode``, which checks and sizes a step alike for
the page-runs, half-warp and tensor-core rungs. For the kernels: ``lane_query`` (a lane's channels of q),
``fill_e4m3_table`` (the block's table of e4m3 values), ``batch_steps`` (the scores, online softmax and
partials of a batch of tokens, shared by three rungs) and ``merge_head_warps`` (the warps of a block
merged into day 6's partials; ``head_warps_merge`` makes it for any storage of the warps' results).
"""
from __future__ import annotations

import math
from types import SimpleNamespace as types_namespace

import numpy as np
from numba import cuda, float32

from kernels.gqa_attention import decode_grid, exchange_halves, subgroups_for
from kernels.launching import (FULL_MASK, WARP, default_scale, is_device_array, output_array, require_array,
                               require_dtype, require_int, require_int32, require_kv_heads, require_same_kind)
from kernels.paged_attention import CHANNELS, HEAD_DIM_MAX, THREADS, WARPS
from kernels.paging import (check_block_tables, decode_partition_size, longest_context, partial_buffers,
                            partitions_for, sm_count)

from .fp8 import e4m3_integer

__all__ = ["CACHE_FORMATS", "WIDE_CACHE_FORMATS", "WIDE_HEAD_DIM_MAX", "cache_format", "check_decode_inputs",
           "fp8_words", "cache_words", "no_scales", "check_scales", "prepare_decode", "runs_of", "fill_e4m3_table",
           "lane_query", "head_warps_merge", "merge_head_warps", "batch_steps"]

# Storage formats of the decode cache.
CACHE_FORMATS = ("float32", "float16", "fp8_e4m3")
# ... and of gqa_decode_wide_heads's, bf16 among them.
WIDE_CACHE_FORMATS = ("float32", "float16", "bfloat16", "fp8_e4m3")
# The largest head_dim of gqa_prefill_wide_heads and gqa_decode_wide_heads (Gemma's 256); the other rungs stop at
# day 6's HEAD_DIM_MAX, 128.
WIDE_HEAD_DIM_MAX = 256


# ----------------------------------------------------------------------------------------------
# Cache formats and a decode step's inputs
# ----------------------------------------------------------------------------------------------

def cache_format(k_cache, *, bf16: bool = False) -> str:
    """``"float32"``, ``"float16"`` or ``"fp8_e4m3"`` (uint8 codes) from the dtype of a cache, and with ``bf16``
    ``"bfloat16"`` too; TypeError naming ``k_cache`` for any other dtype."""
    allowed = (np.float32, np.float16, "bfloat16", np.uint8) if bf16 else (np.float32, np.float16, np.uint8)
    try:
        dtype = require_dtype("k_cache", k_cache, allowed)
    except TypeError as error:
        if bf16 or np.dtype(k_cache.dtype).name != "bfloat16":
            raise
        raise TypeError(f"{error} (a bf16 cache is read by gqa_decode_wide_heads)") from None
    return "fp8_e4m3" if dtype == np.uint8 else dtype.name


def check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens, *, wide: bool = False) -> tuple:
    """Validate a decode step's inputs; return (cache format, num_seqs, heads, head_dim, kv_heads).

    Day 6's ``check_paged_inputs`` with a cache of float32, float16 or uint8 codes (``cache_format``),
    both caches of one dtype: NumPy block tables are checked to the last entry a context uses. ``wide``
    (``gqa_decode_wide_heads``): a bf16 cache too, and head_dim up to ``WIDE_HEAD_DIM_MAX``.
    Raises TypeError or ValueError naming the argument.
    """
    fmt = cache_format(k_cache, bf16=wide)
    dtype = np.dtype(k_cache.dtype)
    num_seqs, heads, head_dim = require_array("q", q, (None, None, None), np.float32,
                                              dims=("num_seqs", "heads", "head_dim"))
    if wide and not 1 <= head_dim <= WIDE_HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {WIDE_HEAD_DIM_MAX} (WIDE_HEAD_DIM_MAX: a token's 32 lanes "
                         f"hold 8 channels each), got head_dim {head_dim} in shape {tuple(q.shape)}")
    if not wide and not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX: each lane holds "
                         f"{CHANNELS} channels), got head_dim {head_dim} in shape {tuple(q.shape)} "
                         f"(gqa_decode_wide_heads takes head_dim up to {WIDE_HEAD_DIM_MAX})")
    cache_dims = ("num_blocks", "kv_heads", "block_size", "head_dim")
    num_blocks, kv_heads, block_size, _ = require_array("k_cache", k_cache, (None, None, None, head_dim), dtype,
                                                        dims=cache_dims)
    require_dtype("v_cache", v_cache, dtype)
    require_array("v_cache", v_cache, tuple(k_cache.shape), dtype, dims=cache_dims)
    require_kv_heads(heads, kv_heads, q_name="q", kv_name="k_cache")
    if fmt == "fp8_e4m3" and head_dim % 4:
        raise ValueError(f"q must have a head_dim that is a multiple of 4 for an fp8 cache (a lane loads the codes "
                         f"of 4 channels as one 32-bit word), got head_dim {head_dim}")
    if block_size < 1:
        raise ValueError(f"k_cache must have block_size >= 1, got shape {tuple(k_cache.shape)}")
    (_, max_blocks) = require_int32("block_tables", block_tables, (num_seqs, None),
                                    dims=("num_seqs", "max_blocks_per_seq"))
    require_int32("context_lens", context_lens, (num_seqs,), dims=("num_seqs",))
    require_same_kind(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, context_lens=context_lens)
    if not is_device_array(q):
        check_block_tables(block_tables, context_lens, block_size, max_blocks, num_blocks)
    return fmt, num_seqs, heads, head_dim, kv_heads


def fp8_words(cache):
    """uint8 codes (..., head_dim) seen as uint32 words (..., head_dim // 4), no copy: word w of a row holds
    the codes of channels 4 w ... 4 w + 3, channel 4 w + j in byte j (little-endian), so one 4-byte load
    brings a lane 4 channels. NumPy or device arrays; head_dim must be a multiple of 4."""
    return cache.view(np.uint32)


def cache_words(cache, word=None):
    """A contiguous cache as the flat array of words ``gqa_decode_page_runs`` loads, no copy: uint64 words
    (4 fp16 numbers or 2 float32) or, for uint8 fp8 codes, uint32 words of 4 codes; ``word=np.uint64``: 8-byte
    words whatever the format (8 fp8 codes, as ``gqa_decode_half_warps`` loads them). NumPy or device arrays."""
    flat = cache.reshape(cache.size)
    return flat.view(word or (np.uint32 if np.dtype(cache.dtype) == np.uint8 else np.uint64))


# ----------------------------------------------------------------------------------------------
# What the decode launchers check and size alike
# ----------------------------------------------------------------------------------------------

# A 1 x 1 stand-in for the scales of a float32 or fp16 cache (the kernel never reads it), per kind.
_NO_SCALES: dict = {}


def no_scales(like):
    """A 1 x 1 float32 array of ones of the kind of ``like`` (NumPy or device), made once per kind: what the
    decode kernels take as the scales of a float32 or fp16 cache, which they never read."""
    kind = is_device_array(like)
    if kind not in _NO_SCALES:
        ones = np.ones((1, 1), np.float32)
        _NO_SCALES[kind] = cuda.to_device(ones) if kind else ones
    return _NO_SCALES[kind]


def check_scales(k_cache, k_scales, v_scales, fmt) -> None:
    """Validate the scales of a cache of format ``fmt``: None for float32 and fp16, float32 (num_blocks,
    kv_heads) arrays of the cache's kind for fp8 codes. Raises ValueError or TypeError naming the argument."""
    num_blocks, kv_heads = k_cache.shape[:2]
    if fmt != "fp8_e4m3":
        for name, scales in (("k_scales", k_scales), ("v_scales", v_scales)):
            if scales is not None:
                raise ValueError(f"{name} must be None for a {fmt} cache (scales belong to an fp8 cache of uint8 "
                                 f"codes), got an array")
        return
    for name, scales in (("k_scales", k_scales), ("v_scales", v_scales)):
        if scales is None:
            raise ValueError(f"{name} must be given for an fp8 cache (uint8 codes): one float32 scale per "
                             f"(block, kv_head), shape ({num_blocks}, {kv_heads})")
        require_array(name, scales, (num_blocks, kv_heads), np.float32, dims=("num_blocks", "kv_heads"))
    require_same_kind(k_cache=k_cache, k_scales=k_scales, v_scales=v_scales)


def prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out, partition_size,
                   max_context, *, channels: int, tokens, refused: dict | None = None, choose_partition=None,
                   wide: bool = False):
    """What the page-runs, half-warp, tensor-core and wide-head launchers check and size alike (``wide``: a bf16
    cache and head_dim up to ``WIDE_HEAD_DIM_MAX``, ``check_decode_inputs``). head_dim must be a multiple of
    ``channels`` (the channels of a lane's words); ``tokens(group, fmt, block_size)`` gives the multiple of tokens a
    partition must be and why, ``(n, "...")``; ``refused``: cache formats the rung does not run, with the message
    to raise; ``choose_partition(fmt, num_seqs, blocks_per_partition, longest, sm_count)``: the partition size
    when ``partition_size`` is None (default: day 7's ``decode_partition_size``). Returns ``(out, step)``:
    ``step`` is None when out is empty (nothing to launch), else a namespace with the format, the sizes, the
    scale, the partition size and count, the scales (ones but for fp8) and the partial buffers."""
    fmt, num_seqs, heads, head_dim, kv_heads = check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens,
                                                                   wide=wide)
    check_scales(k_cache, k_scales, v_scales, fmt)
    if refused and fmt in refused:
        raise ValueError(refused[fmt])
    if head_dim % channels:
        raise ValueError(f"q must have a head_dim that is a multiple of {channels} (a lane loads the words of "
                         f"{channels} channels), got head_dim {head_dim}")
    block_size = k_cache.shape[2]
    multiple, why = tokens(heads // kv_heads, fmt, block_size)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        blocks_per_partition = kv_heads * subgroups_for(heads // kv_heads)
        if choose_partition is None:
            partition_size = decode_partition_size(num_seqs, blocks_per_partition, longest, sm_count(q))
        else:
            partition_size = choose_partition(fmt, num_seqs, blocks_per_partition, longest, sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    if partition_size % multiple:
        raise ValueError(f"partition_size must be a multiple of {why}, got {partition_size}")
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out, None
    if fmt != "fp8_e4m3":
        k_scales = v_scales = no_scales(q)
    return out, types_namespace(fmt=fmt, num_seqs=num_seqs, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                                group=heads // kv_heads, block_size=block_size, scale=scale,
                                partition_size=partition_size, partitions=partitions, k_scales=k_scales,
                                v_scales=v_scales, partials=partial_buffers(q, num_seqs, heads, partitions, head_dim),
                                grid=decode_grid(num_seqs, heads, kv_heads, partitions))


def runs_of(run: int) -> tuple[int, str]:
    """``prepare_decode``'s ``tokens`` answer for a kernel whose warps read runs of ``run`` tokens: partitions
    must be a multiple of the run, and why."""
    return run, f"the run of {run} tokens (runs never cross a partition)"


# ----------------------------------------------------------------------------------------------
# Device steps the decode kernels share
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def fill_e4m3_table(table, tid):
    """The block's 256-entry table of ``value * 2**9`` of every e4m3 code, in shared memory; then a barrier."""
    for i in range(tid, 256, THREADS):
        table[i] = float32(e4m3_integer(i))
    cuda.syncthreads()


@cuda.jit(device=True, inline=True)
def lane_query(q, s, first, n_heads, d, scale, base, step, q_lane, acc):
    """Channels base, base + step, ... of heads first ... first + n_heads - 1 of q[s], scaled, into q_lane (0 past
    the heads or head_dim), and zeros into the accumulators."""
    for i in range(q_lane.shape[0]):
        for ch in range(q_lane.shape[1]):
            c = base + ch * step
            q_lane[i, ch] = q[s, first + i, c] * scale if i < n_heads and c < d else float32(0.0)
            acc[i, ch] = float32(0.0)


def head_warps_merge(read_max, read_sum, read_acc):
    """``merge_head_warps`` over any storage of the block's warps' maxima, sums and accumulators: the device
    functions ``read_max(store, w, i)``, ``read_sum(store, w, i)`` and ``read_acc(store, w, i, c)`` read warp w's
    of head i (channel c) from ``store``, whatever the kernel keeps them in (``gqa_decode_fp8_ring``: the words of
    its ring). Returns ``merge(store, partial_max, partial_sum, partial_acc, s, first, p, n_heads, d, tid)``."""

    @cuda.jit(device=True, inline=True)
    def merge(store, partial_max, partial_sum, partial_acc, s, first, p, n_heads, d, tid):
        cuda.syncthreads()
        for idx in range(tid, n_heads * d, THREADS):
            i = idx // d
            c = idx - i * d
            block_max = float32(-math.inf)
            for w in range(WARPS):
                block_max = max(block_max, read_max(store, w, i))
            block_sum = float32(0.0)
            channel = float32(0.0)
            if block_max > -math.inf:
                for w in range(WARPS):
                    factor = math.exp(read_max(store, w, i) - block_max)
                    block_sum += read_sum(store, w, i) * factor
                    channel += read_acc(store, w, i, c) * factor
            if c == 0:
                partial_max[s, first + i, p] = block_max
                partial_sum[s, first + i, p] = block_sum
            partial_acc[s, first + i, p, c] = channel

    return merge


@cuda.jit(device=True, inline=True)
def _max_in_arrays(store, w, i):
    return store[0][w, i]


@cuda.jit(device=True, inline=True)
def _sum_in_arrays(store, w, i):
    return store[1][w, i]


@cuda.jit(device=True, inline=True)
def _acc_in_arrays(store, w, i, c):
    return store[2][w, i, c]


_merge_arrays = head_warps_merge(_max_in_arrays, _sum_in_arrays, _acc_in_arrays)


@cuda.jit(device=True, inline=True)
def merge_head_warps(warp_max, warp_sum, warp_acc, partial_max, partial_sum, partial_acc, s, first, p, n_heads, d,
                     tid):
    """After a barrier: the block's warps' maxima, sums and accumulators (shared arrays (WARPS, GROUP_MAX) and
    (WARPS, GROUP_MAX, channels)) merged into day 6's partials of heads first ... first + n_heads - 1 of
    partition p."""
    _merge_arrays((warp_max, warp_sum, warp_acc), partial_max, partial_sum, partial_acc, s, first, p, n_heads, d,
                  tid)


def batch_steps(G: int, T: int, fmt: str, convert, lane_major: bool, lanes: int = WARP, channels: int | None = None):
    """The device functions the decode kernels of ``gqa_decode_mixed_precision``, ``gqa_decode_page_runs``,
    ``gqa_decode_half_warps`` and ``gqa_decode_wide_heads`` run on a batch of ``T`` tokens per warp for
    ``G`` heads (one butterfly for the ``G * T`` scores, the online softmax where the scores are), and the
    write of the block's partials; ``convert`` turns a token's stored K or V row into ``channels`` (default
    ``HEAD_DIM_MAX // lanes``) float32 numbers, ``lane_major``: lane l holds channels c l ... c l + c - 1 (else
    l, l + 32, ...).

    ``lanes``: the lanes that share a token (32, or 16: each half of the warp then runs its own batch of
    ``T`` tokens, with its own softmax, and ``write_partials`` merges the halves). Returns ``(tiling,
    score_batch, accumulate_batch, write_partials)``, ``tiling`` = ``(NPAD, SHIFT, LOG_T)``: score j is
    head j // T, token j % T; after the butterfly lane l holds score ``(l % lanes) >> SHIFT`` of its
    part of the warp."""
    FP8 = fmt == "fp8_e4m3"
    N = G * T
    LOG_NPAD = (N - 1).bit_length()
    NPAD = 1 << LOG_NPAD
    LOG_L = lanes.bit_length() - 1
    SHIFT = LOG_L - LOG_NPAD
    LOG_T = T.bit_length() - 1
    HEAD_LANES = (T << SHIFT) - 1
    CH = channels or HEAD_DIM_MAX // lanes
    if (NPAD > lanes or 1 << LOG_T != T or 1 << LOG_L != lanes or not 16 <= lanes <= WARP
            or fmt not in WIDE_CACHE_FORMATS or WARP != 32):
        raise ValueError(f"heads x tokens in flight must be at most lanes (16 or 32), tokens a power of two and "
                         f"fmt one of {WIDE_CACHE_FORMATS}, got {G} x {T}, {lanes} lanes, {fmt!r}")

    @cuda.jit(device=True, inline=True)
    def score_batch(q_lane, k_now, table, k_token, scores, lane):
        """This lane's score of the batch (each token converted once, for all G heads), summed over its lanes."""
        for j in range(NPAD):
            scores[j] = float32(0.0)
        for u in range(T):
            convert(k_now, u, table, k_token)
            for i in range(G):
                partial = scores[i * T + u]
                for ch in range(CH):
                    partial += q_lane[i, ch] * k_token[ch]
                scores[i * T + u] = partial
        if LOG_NPAD > 0:
            exchange_halves(scores, NPAD >> 1, lanes >> 1, lane)
        if LOG_NPAD > 1:
            exchange_halves(scores, NPAD >> 2, lanes >> 2, lane)
        if LOG_NPAD > 2:
            exchange_halves(scores, NPAD >> 3, lanes >> 3, lane)
        if LOG_NPAD > 3:
            exchange_halves(scores, NPAD >> 4, lanes >> 4, lane)
        if LOG_NPAD > 4:
            exchange_halves(scores, NPAD >> 5, lanes >> 5, lane)
        score = scores[0]
        for step in range(LOG_NPAD, LOG_L):
            score += cuda.shfl_xor_sync(FULL_MASK, score, (lanes >> 1) >> step)
        return score

    @cuda.jit(device=True, inline=True)
    def accumulate_batch(score, valid, k_scale, v_scale, running_max, running_sum, acc, v_now, table, v_token,
                         lane):
        """The online softmax over the batch's scores (``valid``: this lane's score is a token before the end;
        fp8: the page scales of its token), then every token's V row into the accumulators. Returns the
        new running maximum and sum."""
        part = lane & ~(lanes - 1)          # the first lane of this lane's part of the warp
        if FP8:
            score *= k_scale
        if not valid:
            score = float32(-math.inf)
        new_max = max(running_max, score)
        for b in range(LOG_T):
            new_max = max(new_max, cuda.shfl_xor_sync(FULL_MASK, new_max, 1 << (SHIFT + b)))
        weight = float32(0.0)
        if new_max > -math.inf:
            weight = math.exp(score - new_max)
        grew = new_max > running_max
        if cuda.any_sync(FULL_MASK, grew):
            correction = math.exp(running_max - new_max) if grew else float32(1.0)
            running_sum *= correction
            for i in range(G):
                head_correction = cuda.shfl_sync(FULL_MASK, correction, part + ((i * T) << SHIFT))
                for ch in range(CH):
                    acc[i, ch] *= head_correction
        running_sum += weight
        value_weight = weight * v_scale if FP8 else weight     # fp8: the page's V scale goes into the weight, once
        for u in range(T):
            convert(v_now, u, table, v_token)
            for i in range(G):
                token_weight = cuda.shfl_sync(FULL_MASK, value_weight, part + ((i * T + u) << SHIFT))
                for ch in range(CH):
                    acc[i, ch] += token_weight * v_token[ch]
        return new_max, running_sum

    @cuda.jit(device=True, inline=True)
    def write_partials(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, partial_max, partial_sum,
                       partial_acc, s, first, p, n_heads, d, warp, lane, tid):
        """The block's warps (and the parts of each warp) merged into day 6's partials of heads first ...
        first + n_heads - 1."""
        for b in range(LOG_T):
            running_sum += cuda.shfl_xor_sync(FULL_MASK, running_sum, 1 << (SHIFT + b))
        part = lane & ~(lanes - 1)
        if lanes < WARP:                    # the two halves of the warp: one softmax of both, lanes 0-15 keep it
            other_max = cuda.shfl_xor_sync(FULL_MASK, running_max, lanes)
            other_sum = cuda.shfl_xor_sync(FULL_MASK, running_sum, lanes)
            both_max = max(running_max, other_max)
            mine_factor = float32(0.0)
            other_factor = float32(0.0)
            if both_max > -math.inf:
                mine_factor = math.exp(running_max - both_max)
                other_factor = math.exp(other_max - both_max)
            running_max = both_max
            running_sum = running_sum * mine_factor + other_sum * other_factor
            for i in range(G):
                head_mine = cuda.shfl_sync(FULL_MASK, mine_factor, part + ((i * T) << SHIFT))
                head_other = cuda.shfl_sync(FULL_MASK, other_factor, part + ((i * T) << SHIFT))
                for ch in range(CH):
                    acc[i, ch] = acc[i, ch] * head_mine + cuda.shfl_xor_sync(FULL_MASK, acc[i, ch], lanes) * head_other
        mine = lane >> SHIFT
        if lane < lanes and lane & HEAD_LANES == 0 and mine < N:
            warp_max[warp, mine >> LOG_T] = running_max
            warp_sum[warp, mine >> LOG_T] = running_sum
        if lane < lanes:
            for i in range(G):
                for ch in range(CH):
                    c = lane * CH + ch if lane_major else lane + ch * WARP
                    if c < d:
                        warp_acc[warp, i, c] = acc[i, ch]
        merge_head_warps(warp_max, warp_sum, warp_acc, partial_max, partial_sum, partial_acc, s, first, p, n_heads, d,
                         tid)

    return (NPAD, SHIFT, LOG_T), score_batch, accumulate_batch, write_partials
