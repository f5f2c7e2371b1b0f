"""Day 8's decode with half a warp per token: fewer instructions for each byte of a narrow cache.

- ``gqa_decode_half_warps``: each token is read by half a warp (8 channels a lane), so a batch's scores
  meet in a butterfly over 16 lanes and the weights reach 16 lanes: half the shuffles per token of a
  whole warp's; head_dim and the page size are compiled in, so a run's rows are one address plus
  constant offsets and the walk along the table needs no 64-bit division; two sets of registers take
  turns as the run computed and the run in flight; and on sm_89 and later (Ada, Hopper) fp8 codes
  become fp16 numbers two at a time through one PTX instruction, ``cvt.rn.f16x2.e4m3x2``, reached
  through ``kernels.intrinsics.eight_codes``, which holds that instruction as inline PTX (elsewhere, and
  as an option, the block's table). All arithmetic stays float32. On an H100 (16 x 32,768 tokens, group 4,
  head_dim 128; recording ``course/data/day08_decode_timing.json``, medians of a whole step) the fp8 step
  takes 0.489 ms, 0.74 of the copy bandwidth, 2.99 times less than ``gqa_decode_page_runs``'s float32
  step (1.464 ms) and 1.53 times less than its fp8 step; fp16 0.812 ms (0.89 of copy), float32 as the
  previous rung (1.471 ms).
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, uint32, uint64

from kernels.gqa_attention import GROUP_MAX, subgroups_for
from kernels.intrinsics import eight_codes, four_halves, two_floats
from kernels.launching import WARP, cdiv
from kernels.paged_attention import HEAD_DIM_MAX, THREADS, WARPS, paged_attention_v2_merge_kernel

from .common import CACHE_FORMATS, batch_steps, cache_words, fill_e4m3_table, lane_query, prepare_decode, runs_of
from .fp8 import TWO_TO_MINUS_9

__all__ = ["HALF", "HALF_CHANNELS", "HALF_RUN_TOKENS", "HALF_MIN_BLOCKS", "half_warp_tiling",
           "gqa_decode_half_warps_kernel", "gqa_decode_half_warps"]

HALF = WARP // 2                # lanes that share a token in gqa_decode_half_warps
HALF_CHANNELS = HEAD_DIM_MAX // HALF    # channels of a lane: one 8-byte word of fp8 codes, two of fp16, four of float32
# Tokens of a half warp's run, and blocks of 128 threads an SM must hold at once (ptxas keeps the registers
# under 65,536 / (128 x blocks)), by cache format. Timed on an H100 at group 4, 4 x 131,072 and 32 x 8,192
# tokens, head_dim 128 (ms at 4 x 131,072, median of 7): float32 T2 1.485; fp16 T2 0.845, T4 0.836; fp8 T2
# 0.714, T4 0.610 with 2 blocks (ptxas's choice, 187 registers), 0.522 with 3 (168, no spills). 4 blocks
# spill (128 registers).
HALF_RUN_TOKENS = {"float32": 2, "float16": 4, "fp8_e4m3": 4}
HALF_MIN_BLOCKS = {"float32": 1, "float16": 1, "fp8_e4m3": 3}
_HALF_KERNELS: dict = {}


def _build_half_warp_kernel(G: int, T: int, fmt: str, D: int, BS: int, fp8_convert: bool):
    """``gqa_decode_page_runs``'s kernel with each token read by half a warp, 8 channels a lane, and head_dim
    ``D`` and the page size ``BS`` fixed when compiling: warp w takes runs of ``2 T`` consecutive tokens,
    tokens start + 2 w T ... (half 0: the first T, half 1: the next T, each within one page), then the run
    ``2 T * WARPS`` tokens on; each half runs its own batch of ``G * T`` scores (a butterfly over 16 lanes:
    half the shuffles of a warp's), and the halves' softmaxes meet once, at the end (``batch_steps`` with
    16 lanes). A half's rows lie ``STRIDE`` words apart from one address, so its loads are that address
    plus constant offsets, and a run wholly before the end loads without a test per token. Two sets of
    registers take turns holding the run being computed and the run in flight (no copy between them).
    ``fp8_convert``: fp8 codes turn into numbers through PTX's ``cvt.rn.f16x2.e4m3x2`` (``eight_codes``;
    sm_89 and later), else through the block's table."""
    FP8 = fmt == "fp8_e4m3"
    FP32 = fmt == "float32"
    CH = HALF_CHANNELS
    WORDS = CH // (2 if FP32 else 4 if not FP8 else 8)      # 8-byte words of a lane's channels in a row
    STRIDE = D * (4 if FP32 else 2 if not FP8 else 1) // 8   # 8-byte words of a row
    RUN = 2 * T
    STEP = RUN * WARPS                                       # tokens from a warp's run to its next
    PAGE_STEP, SLOT_STEP = divmod(STEP, BS)
    FULL = D == HALF * CH
    TABLE = FP8 and not fp8_convert
    TABLE_SIZE = 256 if TABLE else 1
    SCALE_UNIT = TWO_TO_MINUS_9 if TABLE else 1.0      # the table holds value * 2**9
    if BS % T or D % 8 or not 0 < D <= HEAD_DIM_MAX:
        raise ValueError(f"a half's {T} tokens must divide the page size, got {BS}; head_dim a multiple of 8 up to "
                         f"{HEAD_DIM_MAX}, got {D}")

    @cuda.jit(device=True, inline=True)
    def convert(raw, u, table, out):
        if FP8 and not TABLE:
            out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7] = eight_codes(raw[u, 0])
        elif FP8:
            word = raw[u, 0]
            low = uint32(word & uint64(0xFFFFFFFF))
            high = uint32(word >> uint64(32))
            for ch in range(4):
                out[ch] = table[(low >> uint32(8 * ch)) & uint32(0xFF)]
                out[4 + ch] = table[(high >> uint32(8 * ch)) & uint32(0xFF)]
        elif FP32:
            for w in range(WORDS):
                out[2 * w], out[2 * w + 1] = two_floats(raw[u, w])
        else:
            for w in range(WORDS):
                out[4 * w], out[4 * w + 1], out[4 * w + 2], out[4 * w + 3] = four_halves(raw[u, w])

    @cuda.jit(device=True, inline=True)
    def load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words, head_words, page_index,
                 slot, t, end, half, has_channels, k_raw, v_raw):
        """Issue the loads of this half's T tokens of the run from token t (the half's first at page_index, slot)
        into k_raw and v_raw, as stored; return its page's scales (fp8; 1 otherwise, and past the end)."""
        k_scale = float32(1.0)
        v_scale = float32(1.0)
        if t + half * T < end:
            page = block_tables[s, page_index]
            row = uint64(page) * page_words + head_words + uint64(slot * STRIDE)
            if FP8:
                k_scale = k_scales[page, kv_head] * float32(SCALE_UNIT)
                v_scale = v_scales[page, kv_head] * float32(SCALE_UNIT)
            if has_channels:
                if t + RUN <= end:
                    for u in range(T):
                        for w in range(WORDS):
                            k_raw[u, w] = k_cache[row + uint64(u * STRIDE + w)]
                            v_raw[u, w] = v_cache[row + uint64(u * STRIDE + w)]
                else:
                    for u in range(T):
                        if t + half * T + u < end:
                            for w in range(WORDS):
                                k_raw[u, w] = k_cache[row + uint64(u * STRIDE + w)]
                                v_raw[u, w] = v_cache[row + uint64(u * STRIDE + w)]
        return k_scale, v_scale

    @cuda.jit(device=True, inline=True)
    def next_place(page_index, slot):
        """The page and slot ``STEP`` tokens on (no division: the step is a constant)."""
        page_index += PAGE_STEP
        slot += SLOT_STEP
        if SLOT_STEP and slot >= BS:
            slot -= BS
            page_index += 1
        return page_index, slot

    (NPAD, SHIFT, _), score_batch, accumulate_batch, write_partials = batch_steps(G, T, fmt, convert,
                                                                                 lane_major=True, lanes=HALF)

    @cuda.jit(launch_bounds=(THREADS, HALF_MIN_BLOCKS[fmt]))
    def gqa_decode_half_warps_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens, scale,
                                     partition_size, kv_heads, partial_max, partial_sum, partial_acc):
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
        half = lane // HALF
        r = lane % HALF
        start = p * partition_size
        end = min(start + partition_size, context_lens[s])
        mine = r >> SHIFT
        my_token = half * T + (mine & (T - 1))
        has_token = mine < G * T
        has_channels = FULL or r * CH < D

        table = cuda.shared.array(TABLE_SIZE, float32)
        if TABLE:
            fill_e4m3_table(table, tid)

        q_lane = cuda.local.array((G, CH), float32)
        acc = cuda.local.array((G, CH), float32)
        k_a = cuda.local.array((T, WORDS), uint64)
        v_a = cuda.local.array((T, WORDS), uint64)
        k_b = cuda.local.array((T, WORDS), uint64)
        v_b = cuda.local.array((T, WORDS), uint64)
        k_token = cuda.local.array(CH, float32)
        v_token = cuda.local.array(CH, float32)
        scores = cuda.local.array(NPAD, float32)
        lane_query(q, s, first, n_heads, D, scale, r * CH, 1, q_lane, acc)
        for u in range(T):
            for w in range(WORDS):
                k_a[u, w] = 0
                v_a[u, w] = 0
                k_b[u, w] = 0
                v_b[u, w] = 0
        running_max = float32(-math.inf)
        running_sum = float32(0.0)
        # Words from one page's rows to the next page's, and to this KV head's first row and lane's first word.
        page_words = uint64(kv_heads) * uint64(BS * STRIDE)
        head_words = uint64(kv_head) * uint64(BS * STRIDE) + uint64(r * WORDS)

        # This warp's first run of 2 T tokens: the page and slot of the half's first (one division per block),
        # then its loads. The halves walk the table apart (pages of 4 or 12 tokens part them).
        t0 = start + warp * RUN
        page_index = (t0 + half * T) // BS
        slot = t0 + half * T - page_index * BS
        k_scale_a, v_scale_a = load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words,
                                        head_words, page_index, slot, t0, end, half, has_channels, k_a, v_a)
        while t0 < end:
            # Run t0 is in registers a (or on its way); the next goes out into b, then run t0 is computed.
            page_index, slot = next_place(page_index, slot)
            k_scale_b, v_scale_b = load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words,
                                            head_words, page_index, slot, t0 + STEP, end, half, has_channels, k_b,
                                            v_b)
            score = score_batch(q_lane, k_a, table, k_token, scores, lane)
            running_max, running_sum = accumulate_batch(score, has_token and t0 + my_token < end, k_scale_a, v_scale_a,
                                                        running_max, running_sum, acc, v_a, table, v_token, lane)
            t0 += STEP
            if t0 >= end:
                break
            # The same with the roles of a and b swapped.
            page_index, slot = next_place(page_index, slot)
            k_scale_a, v_scale_a = load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words,
                                            head_words, page_index, slot, t0 + STEP, end, half, has_channels, k_a,
                                            v_a)
            score = score_batch(q_lane, k_b, table, k_token, scores, lane)
            running_max, running_sum = accumulate_batch(score, has_token and t0 + my_token < end, k_scale_b, v_scale_b,
                                                        running_max, running_sum, acc, v_b, table, v_token, lane)
            t0 += STEP

        warp_max = cuda.shared.array((WARPS, G), float32)
        warp_sum = cuda.shared.array((WARPS, G), float32)
        warp_acc = cuda.shared.array((WARPS, G, HEAD_DIM_MAX), float32)
        write_partials(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, partial_max, partial_sum,
                       partial_acc, s, first, p, n_heads, D, warp, lane, tid)

    return gqa_decode_half_warps_kernel


def half_warp_tiling(group: int, fmt: str, block_size: int) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, run)`` of ``gqa_decode_half_warps``: day 7's sub-groups, and a warp's run of
    ``2 * HALF_RUN_TOKENS[fmt]`` tokens, halved until each half's heads x tokens fit its 16 lanes and the run
    a half's tokens divide ``block_size`` (each half reads one page a run)."""
    if fmt not in CACHE_FORMATS:
        raise ValueError(f"fmt must be one of {CACHE_FORMATS}, got {fmt!r}")
    subgroups = subgroups_for(group)
    heads_per_block = cdiv(max(group, 1), subgroups)
    tokens = HALF_RUN_TOKENS[fmt]
    while tokens > 1 and (heads_per_block * tokens > HALF or block_size % tokens):
        tokens //= 2
    return subgroups, heads_per_block, 2 * tokens


def gqa_decode_half_warps_kernel(group: int, fmt: str, head_dim: int, block_size: int = 16,
                                 fp8_convert: bool | None = None):
    """The half-warp decode kernel for a group size, a cache format, a head_dim and a page size, compiled on
    first use and kept. ``fp8_convert``: decode fp8 with PTX's conversion (None: where the GPU has it,
    compute capability 8.9 and later, and in the simulator)."""
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an int, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group must be >= 1, got {group}")
    _, heads_per_block, run = half_warp_tiling(int(group), fmt, int(block_size))
    if fmt == "fp8_e4m3" and fp8_convert is None:
        fp8_convert = _has_fp8_convert()
    key = (heads_per_block, run // 2, fmt, int(head_dim), int(block_size), bool(fp8_convert) and fmt == "fp8_e4m3")
    if key not in _HALF_KERNELS:
        _HALF_KERNELS[key] = _build_half_warp_kernel(*key)
    return _HALF_KERNELS[key]


def gqa_decode_half_warps(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                          scale=None, out=None, partition_size=None, max_context=None,
                          kernel=gqa_decode_half_warps_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16, float32 or fp8 e4m3, each token read by half a warp;
    returns out (num_seqs, heads, head_dim) float32.

    The arguments of ``gqa_decode_mixed_precision``; head_dim must be a multiple of 8 and ``partition_size`` a
    multiple of the run (``half_warp_tiling``). ``kernel`` is a function of the group size, the cache format,
    the head_dim and the page size (``gqa_decode_half_warps_kernel``)."""
    out, step = prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                               partition_size, max_context, channels=8,
                               tokens=lambda group, fmt, pages: runs_of(half_warp_tiling(group, fmt, pages)[2]))
    if step is None:
        return out
    kernel(step.group, step.fmt, step.head_dim, step.block_size)[step.grid, THREADS](
        q, cache_words(k_cache, np.uint64), cache_words(v_cache, np.uint64), step.k_scales, step.v_scales,
        block_tables, context_lens, step.scale, step.partition_size, step.kv_heads, *step.partials)
    merge_kernel[(step.heads, step.num_seqs), HEAD_DIM_MAX](*step.partials, out)
    return out


def _has_fp8_convert() -> bool:
    """Whether the current device converts e4m3 codes to fp16 in one instruction (compute capability 8.9 and
    later; the simulator: ``eight_codes`` in NumPy)."""
    if config.ENABLE_CUDASIM:
        return True
    return tuple(cuda.get_current_device().compute_capability) >= (8, 9)
