"""Day 8's decode over runs of a page: one table read per run, rows at constant offsets, packed words.

- ``gqa_decode_page_runs``: ``gqa_decode_mixed_precision`` with each warp on runs of ``RUN_TOKENS``
  consecutive tokens of one page instead of tokens ``WARPS`` apart: a run's block-table entry is read once
  and its rows lie at constant offsets from one address, and lane l reads channels 4 l ... 4 l + 3 of a
  row as packed words (one 8-byte word of 4 fp16 numbers, two of 2 float32, one 4-byte word of 4 fp8
  codes). Nothing in numba turns a word's bits into fp16 numbers, so ``kernels.intrinsics.four_halves``
  is an LLVM intrinsic (a bit cast, then ``cvt.f32.f16``; in the simulator a NumPy view). The previous
  rung spent most of its instructions on per-token 64-bit address arithmetic, table walks and moves of
  16-bit values. On an H100 (8 x 32,768 tokens, 32 query heads on 8 KV heads, head_dim 128; recording
  ``course/data/day08_decode_timing.json``) this rung reads an fp16 cache at 0.77 of the copy bandwidth
  where the previous took 0.51 (medians of a whole step; the GPU's time alone: 1.90 times shorter than the
  previous rung's float32 step), and a float32 cache at 0.97; an fp8 cache at 0.46 only, its time still
  set by instructions rather than bytes.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, uint32, uint64

from kernels.gqa_attention import GROUP_MAX, subgroups_for
from kernels.intrinsics import four_halves, two_floats
from kernels.launching import WARP, cdiv
from kernels.paged_attention import CHANNELS, HEAD_DIM_MAX, THREADS, WARPS, paged_attention_v2_merge_kernel

from .common import CACHE_FORMATS, batch_steps, cache_words, fill_e4m3_table, lane_query, prepare_decode, runs_of
from .fp8 import TWO_TO_MINUS_9

__all__ = ["RUN_TOKENS", "run_tiling", "gqa_decode_page_runs_kernel", "gqa_decode_page_runs"]

# Tokens of a run, by cache format, for blocks of up to 4 heads (fewer when heads x tokens would pass 32):
# timed on an H100 at group 4, 8 x 32,768 and 64 x 4,096 tokens, head_dim 128 (ms at 64 x 4,096):
# float32 T1 0.912, T2 0.752, T4 0.767; fp16 T2 0.482, T4 0.401, T8 0.413; fp8 T2 0.527, T4 0.430, T8 0.400.
RUN_TOKENS = {"float32": 2, "float16": 4, "fp8_e4m3": 8}
_RUN_KERNELS: dict = {}


def _build_page_runs_kernel(G: int, T: int, fmt: str):
    """``gqa_decode_mixed_precision``'s kernel (``G`` heads a block, day 6's partials, the same batch steps,
    ``batch_steps``) with each warp on runs of ``T`` consecutive tokens of one page: warp w takes tokens
    start + w T ... start + w T + T - 1, then the run ``T * WARPS`` tokens on. A run's table entry is read
    once and its rows lie ``row_words`` apart from one address; the cache arrives as a flat array of
    words (``cache_words``) and lane l loads the word(s) of channels 4 l ... 4 l + 3 of each row: one
    8-byte word of 4 halves (fp16), two of 2 floats (float32), one 4-byte word of 4 codes (fp8), turned
    into numbers by ``four_halves``, ``two_floats`` or the block's e4m3 table. fp8: the page's scales
    are read once per run and multiply whole scores and weights."""
    FP8 = fmt == "fp8_e4m3"
    FP32 = fmt == "float32"
    WORDS = 2 if FP32 else 1
    RAW = uint32 if FP8 else uint64
    TABLE_SIZE = 256 if FP8 else 1

    @cuda.jit(device=True, inline=True)
    def convert(raw, u, table, out):
        if FP8:
            word = raw[u, 0]
            for ch in range(CHANNELS):
                out[ch] = table[(word >> uint32(8 * ch)) & uint32(0xFF)]
        elif FP32:
            out[0], out[1] = two_floats(raw[u, 0])
            out[2], out[3] = two_floats(raw[u, 1])
        else:
            out[0], out[1], out[2], out[3] = four_halves(raw[u, 0])

    @cuda.jit(device=True, inline=True)
    def load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, kv_heads, block_size, page_index,
                 slot, t, end, lane_word, stride, has_channels, k_raw, v_raw):
        """Issue the loads of the run of T tokens from token t (at page_index, slot; those before ``end``) into
        k_raw and v_raw, as stored; return its page's scales (fp8; 1 otherwise, and for a run past the end)."""
        k_scale = float32(1.0)
        v_scale = float32(1.0)
        if t < end:
            page = block_tables[s, page_index]
            row = uint64(((page * kv_heads + kv_head) * block_size + slot)) * stride + lane_word
            if FP8:
                k_scale = k_scales[page, kv_head] * float32(TWO_TO_MINUS_9)
                v_scale = v_scales[page, kv_head] * float32(TWO_TO_MINUS_9)
            if has_channels:
                for u in range(T):
                    if t + u < end:
                        for w in range(WORDS):
                            k_raw[u, w] = k_cache[row + uint64(u) * stride + uint64(w)]
                            v_raw[u, w] = v_cache[row + uint64(u) * stride + uint64(w)]
        return k_scale, v_scale

    (NPAD, SHIFT, _), score_batch, accumulate_batch, write_partials = batch_steps(G, T, fmt, convert,
                                                                                 lane_major=True)

    @cuda.jit
    def gqa_decode_page_runs_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens, scale,
                                    partition_size, kv_heads, block_size, row_words, partial_max, partial_sum,
                                    partial_acc):
        group = q.shape[1] // kv_heads
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
        start = p * partition_size
        end = min(start + partition_size, context_lens[s])
        mine = lane >> SHIFT
        my_token = mine & (T - 1)
        has_channels = lane * CHANNELS < d

        table = cuda.shared.array(TABLE_SIZE, float32)
        if FP8:
            fill_e4m3_table(table, tid)

        q_lane = cuda.local.array((G, CHANNELS), float32)
        acc = cuda.local.array((G, CHANNELS), float32)
        k_now = cuda.local.array((T, WORDS), RAW)
        v_now = cuda.local.array((T, WORDS), RAW)
        k_next = cuda.local.array((T, WORDS), RAW)
        v_next = cuda.local.array((T, WORDS), RAW)
        k_token = cuda.local.array(CHANNELS, float32)
        v_token = cuda.local.array(CHANNELS, float32)
        scores = cuda.local.array(NPAD, float32)
        lane_query(q, s, first, n_heads, d, scale, lane * CHANNELS, 1, q_lane, acc)
        for u in range(T):
            for w in range(WORDS):
                k_next[u, w] = 0
                v_next[u, w] = 0
        running_max = float32(-math.inf)
        running_sum = float32(0.0)
        lane_word = uint64(lane * WORDS)
        stride = uint64(row_words)

        # This warp's first run of T tokens: its page and slot (one division per block), then its loads.
        t_first = start + warp * T
        page_index = t_first // block_size
        slot = t_first - page_index * block_size
        k_scale_next, v_scale_next = load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, kv_heads,
                                              block_size, page_index, slot, t_first, end, lane_word, stride,
                                              has_channels, k_next, v_next)
        for t0 in range(t_first, end, T * WARPS):
            for u in range(T):
                for w in range(WORDS):
                    k_now[u, w] = k_next[u, w]
                    v_now[u, w] = v_next[u, w]
            k_scale_now = k_scale_next
            v_scale_now = v_scale_next
            # The next run: T * WARPS tokens on, within a page or on a later one; its loads go out now.
            slot += T * WARPS
            while slot >= block_size:
                slot -= block_size
                page_index += 1
            k_scale_next, v_scale_next = load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head,
                                                  kv_heads, block_size, page_index, slot, t0 + T * WARPS, end,
                                                  lane_word, stride, has_channels, k_next, v_next)

            score = score_batch(q_lane, k_now, table, k_token, scores, lane)
            running_max, running_sum = accumulate_batch(score, mine < G * T and t0 + my_token < end, k_scale_now,
                                                        v_scale_now, running_max, running_sum, acc, v_now, table,
                                                        v_token, lane)

        warp_max = cuda.shared.array((WARPS, G), float32)
        warp_sum = cuda.shared.array((WARPS, G), float32)
        warp_acc = cuda.shared.array((WARPS, G, HEAD_DIM_MAX), float32)
        write_partials(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, partial_max, partial_sum,
                       partial_acc, s, first, p, n_heads, d, warp, lane, tid)

    return gqa_decode_page_runs_kernel


def run_tiling(group: int, fmt: str, block_size: int) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, run)`` of ``gqa_decode_page_runs``: day 7's sub-groups, and ``RUN_TOKENS[fmt]``
    halved until heads x run fits a warp's 32 scores and the run divides ``block_size`` (a run never
    leaves its page: pages of 3 tokens take runs of 1)."""
    if fmt not in CACHE_FORMATS:
        raise ValueError(f"fmt must be one of {CACHE_FORMATS}, got {fmt!r}")
    subgroups = subgroups_for(group)
    heads_per_block = cdiv(max(group, 1), subgroups)
    run = RUN_TOKENS[fmt]
    while run > 1 and (heads_per_block * run > WARP or block_size % run):
        run //= 2
    return subgroups, heads_per_block, run


def gqa_decode_page_runs_kernel(group: int, fmt: str, block_size: int = 16):
    """The page-runs decode kernel for a group size, a cache format and a page size, compiled on first use and kept."""
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an int, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group must be >= 1, got {group}")
    _, heads_per_block, run = run_tiling(int(group), fmt, int(block_size))
    key = (heads_per_block, run, fmt)
    if key not in _RUN_KERNELS:
        _RUN_KERNELS[key] = _build_page_runs_kernel(*key)
    return _RUN_KERNELS[key]


def gqa_decode_page_runs(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                         scale=None, out=None, partition_size=None, max_context=None,
                         kernel=gqa_decode_page_runs_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16, float32 or fp8 e4m3, each warp on runs of
    consecutive tokens of a page; returns out (num_seqs, heads, head_dim) float32.

    The arguments of ``gqa_decode_mixed_precision``; head_dim must be a multiple of 4 and
    ``partition_size`` a multiple of the run (``run_tiling``), so that no run crosses a page. ``kernel``
    is a function of the group size, the cache format and the page size (``gqa_decode_page_runs_kernel``).
    """
    out, step = prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                               partition_size, max_context, channels=CHANNELS,
                               tokens=lambda group, fmt, block_size: runs_of(run_tiling(group, fmt, block_size)[2]))
    if step is None:
        return out
    row_words = (step.head_dim // 4 if step.fmt == "fp8_e4m3"
                 else step.head_dim * np.dtype(k_cache.dtype).itemsize // 8)
    kernel(step.group, step.fmt, step.block_size)[step.grid, THREADS](
        q, cache_words(k_cache), cache_words(v_cache), step.k_scales, step.v_scales, block_tables, context_lens,
        step.scale, step.partition_size, step.kv_heads, step.block_size, row_words, *step.partials)
    merge_kernel[(step.heads, step.num_seqs), HEAD_DIM_MAX](*step.partials, out)
    return out
