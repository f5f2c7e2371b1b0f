"""Day 8's decode on tensor cores: the scores and weighted sums of a tile of tokens as mma.sync, reached as inline PTX.

- ``gqa_decode_tensor_cores``: the scores and the weighted sums of a tile of 16 tokens as tensor-core
  instructions, ``mma.sync.aligned.m16n8k16`` (fp16 inputs, float32 accumulators), held as inline PTX by
  ``kernels.intrinsics.mma_m16n8k16`` (in the simulator, its twin: one exchange among the warp's lanes
  that computes the product once). The cache's fp16 numbers and fp8 codes are exact in fp16; q and the
  weights are split into fp16 pairs ``hi + lo`` (22 significant bits), so the step keeps float32's
  accuracy. fp16 and fp8 caches only. Its partitions come from ``tensor_partition_size``
  (``kernels.low_precision_attention.partitions``), a model of how an SM runs the few long blocks it
  holds. On an H100 (group 4, head_dim 128, the steps of 512K tokens or more of the recording
  ``course/data/day08_decode_timing.json``, GPU time alone): the fp8 step reads its cache at 0.88 to 0.92
  of the copy bandwidth, 4.1 to 4.3 times as fast as ``gqa_decode_mixed_precision``'s float32 step and
  3.6 to 3.7 times ``gqa_decode_page_runs``'s; fp16 at 0.99 to 1.00 of copy. The fp8 step waits on
  loads, no longer on instructions.
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, uint32, uint64

from kernels.gqa_attention import GROUP_MAX
from kernels.intrinsics import byte_perm, e4m3_pairs, mma_m16n8k16, pack_halves, unpack_halves
from kernels.launching import FULL_MASK, WARP, cdiv
from kernels.paged_attention import HEAD_DIM_MAX, THREADS, WARPS, paged_attention_v2_merge_kernel

from .common import cache_words, merge_head_warps, prepare_decode
from .partitions import tensor_partition_size

__all__ = ["TILE_TOKENS", "Q_UNIT", "P_UNIT", "TENSOR_MIN_BLOCKS", "split_halves", "gqa_decode_tensor_cores_kernel",
           "gqa_decode_tensor_cores"]

TILE_TOKENS = 16        # tokens a warp takes at a time in gqa_decode_tensor_cores: the k of an m16n8k16 mma
# q's largest channel (times the softmax scale) becomes this before q is split into fp16 hi + lo, and a weight
# of 1 times the partition's largest V scale becomes P_UNIT: both well inside fp16's range (65504), so hi
# keeps 11 significant bits and lo the next 11 (lo's spacing below 2**-14 is 2**-24, far under float32's).
Q_UNIT = 8192.0
P_UNIT = 8192.0
_LOW_WORD = 0xFFFFFFFF
_TENSOR_REFUSED = {"float32": "k_cache must be stored in fp16 or as fp8 e4m3 codes for the tensor-core decode (its "
                              "numbers enter the mma as fp16), got float32: gqa_decode_half_warps takes a float32 "
                              "cache"}
# Blocks of 128 threads an SM must hold (launch_bounds: ptxas keeps the registers under 65,536 / (128 x blocks)), by
# cache format; a warp loads one tile at a time (two were slower). Timed on an H100 at group 4, head_dim 128, 4 x
# 131,072 tokens in day 7's partitions of 1,024 (ms, median of 7): fp8 1 tile, 1 block (ptxas's choice, 211
# registers): 0.499; 1 tile, 3 blocks (168, no spills): 0.465; 2 tiles, 2 blocks (252): 0.551; 4 blocks spill. fp16 1
# tile: 0.782 with 1 block (254 registers), 0.788 with 2. Moving the rows of the warp's next 1, 2 or 4 tiles into L2
# ahead of their loads (prefetch.global.L2) made every variant slower: fp8 0.470, 0.475, 0.553. Copying each warp's
# tiles into a ring of 2, 3 or 4 slots in shared memory with cp.async (no registers held while the bytes travel;
# 16-byte copies, rows swizzled against bank conflicts) and computing from there, in one run against this kernel (fp8
# 0.510 ms, 0.71 of copy; fp16 0.795): fp8 3 slots at 3 blocks 0.485 (0.75 of copy; at 32 x 16,384 tokens 0.81 against
# 0.76), 2 slots at 4 blocks 0.693, 3 at 2 blocks 0.548, 4 at 2 blocks 0.557; fp16 2 slots 0.805, 3 slots 1.04. At 16
# x 8,192 tokens (a few tiles a warp) the ring was slower for both, fp8 0.305 against 0.244, so the registers stay.
# Written for one tile a warp (no loop over a warp's tiles, arrays one dimension fewer), the kernel computes the same
# bits and ptxas schedules it a little better: in one run fp8 0.466 against 0.494 ms, fp16 0.780 against 0.793 (at 64
# x 16,384 tokens 0.854 against 0.896, 1.494 against 1.510).
TENSOR_MIN_BLOCKS = {"float16": 1, "fp8_e4m3": 3}
_TENSOR_KERNELS: dict = {}


@cuda.jit(device=True, inline=True)
def split_halves(x0, x1):
    """Two float32 numbers as fp16 pairs hi + lo (hi: each rounded to fp16; lo: what rounding left, rounded)."""
    high = pack_halves(x0, x1)
    h0, h1 = unpack_halves(high)
    return high, pack_halves(x0 - h0, x1 - h1)


@cuda.jit(device=True, inline=True)
def _write_warp_acc(warp_acc, warp, row, c, x):
    warp_acc[warp, row, c] = x


def tensor_core_steps(fmt: str, D: int, BS: int, write_acc=_write_warp_acc):
    """The device steps of the tensor-core decode for a cache format (fp16 or fp8), head_dim ``D`` and page size
    ``BS``, shared by ``gqa_decode_tensor_cores`` and the rungs that feed the same steps otherwise
    (``gqa_decode_fp8_ring``) or take some of them (``gqa_decode_fp8_deep``), as a dict: ``block_work`` (the block's sequence, partition, KV head and query
    heads, and the partition's tokens), ``query_fragments`` (q of the block's heads as the score mma's A
    fragments; returns the factor to undo), ``v_unit`` (fp8: P_UNIT over the partition's largest V scale),
    ``load_tile`` (a tile's K and V words from the cache into registers), ``compute_tile`` (a tile's scores,
    online softmax and weighted V rows from those registers), ``softmax_tile`` (the online softmax of a tile's
    scores, which ``compute_tile`` runs: the weights as fp16 hi + lo), ``store_accumulators`` (a warp's float32 sums into
    its rows of the block's merge buffer, through ``write_acc(store, warp, row, channel, x)``: by default into a
    shared array (WARPS, GROUP_MAX, channels)), and the sizes ``KCH``, ``KSTEPS``, ``VCH``, ``CW``, ``MBLOCKS``,
    ``K_FULL``, ``V_FULL``, ``ONE_PAGE``, ``STEP`` and ``STRIDE``. The decode these steps make, described on the kernel
    (``_build_tensor_core_kernel``).
    """
    FP8 = fmt == "fp8_e4m3"
    if fmt not in ("float16", "fp8_e4m3") or D % 8 or not 0 < D <= HEAD_DIM_MAX:
        raise ValueError(f"the tensor-core decode takes an fp16 or fp8 cache and a head_dim that is a multiple of 8 "
                         f"up to {HEAD_DIM_MAX}, got {fmt!r} and {D}")
    CW = 1 if FP8 else 2                    # 8-byte words of a chunk of 8 channels
    STRIDE = D * CW // 8                    # 8-byte words of a row
    KCH = cdiv(D, 32)                       # chunks of a K row a lane reads: chunk t + 4 j
    KSTEPS = 2 * KCH                        # mma steps along head_dim, 16 channels each
    VCH = cdiv(D, 64)                       # chunks of a V row a lane reads: chunk g + 8 i
    MBLOCKS = 4 * VCH                       # mma blocks of 16 output channels
    K_FULL = D % 32 == 0                    # every lane has every chunk it reads
    V_FULL = D % 64 == 0
    ONE_PAGE = BS % TILE_TOKENS == 0        # a tile (which starts at a multiple of 16) lies in one page
    STEP = TILE_TOKENS * WARPS              # tokens from a warp's tile to its next
    LOW = uint64(_LOW_WORD)

    @cuda.jit(device=True, inline=True)
    def row_of(block_tables, s, page_words, head_words, token):
        page = block_tables[s, token // BS]
        return page, uint64(page) * page_words + head_words + uint64((token % BS) * STRIDE)

    @cuda.jit(device=True, inline=True)
    def load_tile(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words, head_words, t, end,
                  g, tq, k_raw, v_raw, k_sc, v_sc):
        """Issue the loads of tile t: K rows t + g and t + 8 + g, V rows t + 2 tq + e + 8 b, as stored, and (fp8)
        the page scales of those V rows' tokens, the tokens of this lane's scores. Past the end nothing loads."""
        if t >= end:
            return
        full = t + TILE_TOKENS <= end
        if ONE_PAGE:
            page = block_tables[s, t // BS]
            base = uint64(page) * page_words + head_words + uint64((t % BS) * STRIDE)
            if FP8:
                ks = k_scales[page, kv_head]
                vs = v_scales[page, kv_head]
                for b in range(2):
                    for e in range(2):
                        k_sc[b, e] = ks
                        v_sc[b, e] = vs
        for b in range(2):
            token = t + 8 * b + g
            if full or token < end:
                if ONE_PAGE:
                    row = base + uint64((8 * b + g) * STRIDE)
                else:
                    _, row = row_of(block_tables, s, page_words, head_words, token)
                for j in range(KCH):
                    w = tq + 4 * j
                    if K_FULL or 8 * w < D:
                        for c in range(CW):
                            k_raw[b, j, c] = k_cache[row + uint64(w * CW + c)]
            for e in range(2):
                token = t + 8 * b + 2 * tq + e
                if full or token < end:
                    if ONE_PAGE:
                        row = base + uint64((8 * b + 2 * tq + e) * STRIDE)
                    else:
                        page, row = row_of(block_tables, s, page_words, head_words, token)
                        if FP8:
                            k_sc[b, e] = k_scales[page, kv_head]
                            v_sc[b, e] = v_scales[page, kv_head]
                    for i in range(VCH):
                        w = g + 8 * i
                        if V_FULL or 8 * w < D:
                            for c in range(CW):
                                v_raw[b, e, i, c] = v_cache[row + uint64(w * CW + c)]

    @cuda.jit(device=True, inline=True)
    def softmax_tile(scores, v_sc, t, end, tq, head, pv_unit, running_max, running_sum, acc):
        """The online softmax of a tile's scores (this lane's: head g, tokens t + 8 b + 2 tq + e; past the end
        -inf): the new running maximum, the accumulators rescaled where it grew (their columns 2 tq and 2 tq + 1
        belong to heads ``head`` and ``head + 1``, whose lanes 4 head ... hold the factor), this lane's share of the
        running sum, and the weights times their page's V scale and pv_unit as fp16 hi + lo pairs (tokens 2 tq,
        2 tq + 1 of each half-tile): ``(new_max, running_sum, high0, low0, high1, low1)``."""
        tile_max = float32(-math.inf)
        for b in range(2):
            for e in range(2):
                if t + 8 * b + 2 * tq + e >= end:
                    scores[b, e] = float32(-math.inf)
                tile_max = max(tile_max, scores[b, e])
        tile_max = max(tile_max, cuda.shfl_xor_sync(FULL_MASK, tile_max, 1))
        tile_max = max(tile_max, cuda.shfl_xor_sync(FULL_MASK, tile_max, 2))
        new_max = max(running_max, tile_max)
        grew = new_max > running_max
        if cuda.any_sync(FULL_MASK, grew):
            alpha = math.exp(running_max - new_max) if grew else float32(1.0)
            running_sum *= alpha
            alpha_even = cuda.shfl_sync(FULL_MASK, alpha, 4 * head)
            alpha_odd = cuda.shfl_sync(FULL_MASK, alpha, 4 * head + 4)
            for m in range(MBLOCKS):
                acc[m, 0] *= alpha_even
                acc[m, 1] *= alpha_odd
                acc[m, 2] *= alpha_even
                acc[m, 3] *= alpha_odd
        weights = cuda.local.array((2, 2), float32)
        for b in range(2):
            for e in range(2):
                weight = float32(0.0)
                if scores[b, e] > -math.inf:
                    weight = math.exp(scores[b, e] - new_max)
                running_sum += weight
                weights[b, e] = weight * (v_sc[b, e] * pv_unit)
        high0, low0 = split_halves(weights[0, 0], weights[0, 1])
        high1, low1 = split_halves(weights[1, 0], weights[1, 1])
        return new_max, running_sum, high0, low0, high1, low1

    @cuda.jit(device=True, inline=True)
    def compute_tile(qa, k_raw, v_raw, k_sc, v_sc, t, end, tq, inv_f, pv_unit, running_max, running_sum, acc):
        """Tile t's scores, online softmax (head g) and weighted V rows into acc; returns the new running
        maximum and this lane's share of the running sum."""
        scores = cuda.local.array((2, 2), float32)
        for b in range(2):
            c0 = c1 = c2 = c3 = float32(0.0)
            for j in range(KCH):
                if FP8:
                    word = k_raw[b, j, 0]
                    r0, r1 = e4m3_pairs(uint32(word & LOW))
                    r2, r3 = e4m3_pairs(uint32(word >> uint64(32)))
                else:
                    r0 = uint32(k_raw[b, j, 0] & LOW)
                    r1 = uint32(k_raw[b, j, 0] >> uint64(32))
                    r2 = uint32(k_raw[b, j, 1] & LOW)
                    r3 = uint32(k_raw[b, j, 1] >> uint64(32))
                c0, c1, c2, c3 = mma_m16n8k16(qa[2 * j, 0], qa[2 * j, 1], qa[2 * j, 2], qa[2 * j, 3], r0, r1,
                                              c0, c1, c2, c3)
                c0, c1, c2, c3 = mma_m16n8k16(qa[2 * j + 1, 0], qa[2 * j + 1, 1], qa[2 * j + 1, 2], qa[2 * j + 1, 3],
                                              r2, r3, c0, c1, c2, c3)
            scores[b, 0] = (c0 + c2) * (k_sc[b, 0] * inv_f)
            scores[b, 1] = (c1 + c3) * (k_sc[b, 1] * inv_f)
        new_max, running_sum, high0, low0, high1, low1 = softmax_tile(scores, v_sc, t, end, tq, 2 * tq, pv_unit,
                                                                      running_max, running_sum, acc)
        for i in range(VCH):
            for c in range(CW):
                for hh in range(2):
                    pairs = cuda.local.array((2, 4), uint32)    # [b]: channels x, x + 1 (fp16) or x ... x + 3 (fp8)
                    for b in range(2):
                        a = uint32((v_raw[b, 0, i, c] >> uint64(32 * hh)) & LOW)
                        z = uint32((v_raw[b, 1, i, c] >> uint64(32 * hh)) & LOW)
                        if FP8:
                            pairs[b, 0], pairs[b, 1] = e4m3_pairs(byte_perm(a, z, uint32(0x5140)))
                            pairs[b, 2], pairs[b, 3] = e4m3_pairs(byte_perm(a, z, uint32(0x7362)))
                        else:
                            pairs[b, 0] = byte_perm(a, z, uint32(0x5410))
                            pairs[b, 1] = byte_perm(a, z, uint32(0x7632))
                    for x in range(2 if FP8 else 1):
                        m = 4 * i + (2 * hh + x if FP8 else 2 * c + hh)
                        a0, a1, a2, a3 = pairs[0, 2 * x], pairs[0, 2 * x + 1], pairs[1, 2 * x], pairs[1, 2 * x + 1]
                        d0, d1, d2, d3 = mma_m16n8k16(a0, a1, a2, a3, high0, high1,
                                                      acc[m, 0], acc[m, 1], acc[m, 2], acc[m, 3])
                        acc[m, 0], acc[m, 1], acc[m, 2], acc[m, 3] = mma_m16n8k16(a0, a1, a2, a3, low0, low1,
                                                                                  d0, d1, d2, d3)
        return new_max, running_sum

    @cuda.jit(device=True, inline=True)
    def block_work(q, kv_heads, context_lens, partition_size):
        """This block's share of the step (grid: KV head x subgroup of its query heads, sequence, partition): the
        sequence s, the partition p, the KV head, its first query head and how many it takes, and the tokens
        start ... end - 1 of the partition that the sequence holds."""
        group = q.shape[1] // kv_heads
        subgroups = (group + GROUP_MAX - 1) // GROUP_MAX
        kv_head = cuda.blockIdx.x // subgroups
        heads = (group + subgroups - 1) // subgroups
        first = kv_head * group + (cuda.blockIdx.x - kv_head * subgroups) * heads
        n_heads = min(heads, (kv_head + 1) * group - first)
        s = cuda.blockIdx.y
        p = cuda.blockIdx.z
        start = p * partition_size
        return s, p, kv_head, first, n_heads, start, min(start + partition_size, context_lens[s])

    @cuda.jit(device=True, inline=True)
    def query_fragments(q, s, first, n_heads, scale, g, tq, qa):
        """q of head g (channels 8 (tq + 4 j) ...), scaled so its largest channel is Q_UNIT, as fp16 hi + lo into
        qa: the A fragments of the score mma (rows g: hi, rows g + 8: lo) for every step along head_dim. Returns
        the scale's inverse, which the scores undo."""
        q_raw = cuda.local.array((KCH, 8), float32)
        amax = float32(0.0)
        for j in range(KCH):
            for e in range(8):
                c = 8 * (tq + 4 * j) + e
                x = float32(0.0)
                if g < n_heads and c < D:
                    x = q[s, first + g, c] * scale
                q_raw[j, e] = x
                amax = max(amax, abs(x))
        amax = max(amax, cuda.shfl_xor_sync(FULL_MASK, amax, 1))
        amax = max(amax, cuda.shfl_xor_sync(FULL_MASK, amax, 2))
        f = float32(Q_UNIT) / amax if amax > 0 else float32(1.0)
        inv_f = float32(1.0) / f
        for j in range(KCH):
            for h in range(2):
                qa[2 * j + h, 0], qa[2 * j + h, 1] = split_halves(q_raw[j, 4 * h] * f, q_raw[j, 4 * h + 1] * f)
                qa[2 * j + h, 2], qa[2 * j + h, 3] = split_halves(q_raw[j, 4 * h + 2] * f, q_raw[j, 4 * h + 3] * f)
        return inv_f

    @cuda.jit(device=True, inline=True)
    def v_unit(v_scales, block_tables, s, kv_head, start, end, lane):
        """fp8: weights times the V scale are brought to P_UNIT by the partition's largest V scale (the factor,
        for the whole warp); fp16: P_UNIT."""
        pv_unit = float32(P_UNIT)
        if FP8:
            vmax = float32(0.0)
            for index in range(start // BS + lane, (end + BS - 1) // BS, WARP):
                vmax = max(vmax, v_scales[block_tables[s, index], kv_head])
            for step in range(5):
                vmax = max(vmax, cuda.shfl_xor_sync(FULL_MASK, vmax, 1 << step))
            if vmax > 0:
                pv_unit = float32(P_UNIT) / vmax
        return pv_unit

    @cuda.jit(device=True, inline=True)
    def store_accumulators(acc, pv_unit, warp, tq, g, store):
        """This warp's accumulators, undone of the weights' unit, into its rows of the block's merge buffer."""
        out_unit = float32(1.0) / pv_unit
        for i in range(VCH):
            for e in range(4):
                c = 8 * (g + 8 * i) + 2 * e         # channel of rows g (and c + 1: rows g + 8) of block 4 i + e
                if V_FULL or c < D:
                    m = 4 * i + e
                    write_acc(store, warp, 2 * tq, c, acc[m, 0] * out_unit)
                    write_acc(store, warp, 2 * tq + 1, c, acc[m, 1] * out_unit)
                    write_acc(store, warp, 2 * tq, c + 1, acc[m, 2] * out_unit)
                    write_acc(store, warp, 2 * tq + 1, c + 1, acc[m, 3] * out_unit)

    return {"block_work": block_work, "query_fragments": query_fragments, "v_unit": v_unit, "load_tile": load_tile,
            "compute_tile": compute_tile, "softmax_tile": softmax_tile, "store_accumulators": store_accumulators,
            "KCH": KCH, "KSTEPS": KSTEPS, "VCH": VCH, "CW": CW, "MBLOCKS": MBLOCKS, "K_FULL": K_FULL, "V_FULL": V_FULL, "ONE_PAGE": ONE_PAGE,
            "STEP": STEP, "STRIDE": STRIDE}


def _build_tensor_core_kernel(fmt: str, D: int, BS: int):
    """The decode kernel whose scores and weighted sums are mma.sync instructions (m16n8k16, fp16 inputs,
    float32 accumulators) on an fp16 or fp8 cache, head_dim ``D`` and page size ``BS`` fixed when compiling.

    Warp w takes tiles of 16 consecutive tokens, start + 16 w, then 64 tokens on. Lane 4 g + t:

    - scores: S (16 x 8 tokens) = Q (16 x 16 channels) K^T, rows 0-7 of Q the block's heads' q in fp16 (hi)
      and rows 8-15 what that rounding left (lo), so one mma gives both halves of every score; the lane reads
      token g of each half-tile, channels 8 (t + 4 j) ... + 7, which are its columns of the mma (a score
      sums over channels in any order, so q's fragments follow the same order). It ends holding the scores
      of head g for tokens 2t, 2t + 1 of both half-tiles: the columns of P^T that the next mma takes.
    - weights: the online softmax of head g over those 4 tokens (2 shuffles finish the tile's maximum), each
      weight times its page's V scale and P_UNIT, split again into fp16 hi + lo.
    - values: O^T (16 channels x 8 heads) += V^T (16 x 16 tokens) P^T, for hi and for lo. The lane reads
      tokens 2t, 2t + 1, 2t + 8, 2t + 9, channels 8 (g + 8 i) ... + 7, and a byte (fp8) or half (fp16)
      permute pairs the two tokens of each channel, as V^T's fragment wants them.

    The cache is read as 8-byte words, each exactly once; q, the scores' accumulators and the output stay
    float32, and the fp16 numbers are the cache's values themselves (an e4m3 code is exact in fp16)."""
    FP8 = fmt == "fp8_e4m3"
    steps = tensor_core_steps(fmt, D, BS)
    block_work, query_fragments, v_unit, load_tile, compute_tile, store_accumulators = (
        steps[name] for name in ("block_work", "query_fragments", "v_unit", "load_tile", "compute_tile",
                                 "store_accumulators"))
    KCH, KSTEPS, VCH, CW, MBLOCKS, STEP, STRIDE = (steps[name] for name in ("KCH", "KSTEPS", "VCH", "CW", "MBLOCKS",
                                                                           "STEP", "STRIDE"))

    @cuda.jit(launch_bounds=(THREADS, TENSOR_MIN_BLOCKS[fmt]))
    def gqa_decode_tensor_cores_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens, scale,
                                       partition_size, kv_heads, partial_max, partial_sum, partial_acc):
        s, p, kv_head, first, n_heads, start, end = block_work(q, kv_heads, context_lens, partition_size)
        tid = cuda.threadIdx.x
        warp = tid // WARP
        lane = tid % WARP
        g = lane >> 2
        tq = lane & 3

        qa = cuda.local.array((KSTEPS, 4), uint32)     # a0 hi(0, 1), a1 lo(0, 1), a2 hi(2, 3), a3 lo(2, 3)
        inv_f = query_fragments(q, s, first, n_heads, scale, g, tq, qa)

        pv_unit = v_unit(v_scales, block_tables, s, kv_head, start, end, lane)
        acc = cuda.local.array((MBLOCKS, 4), float32)
        for m in range(MBLOCKS):
            for x in range(4):
                acc[m, x] = float32(0.0)
        k_a = cuda.local.array((2, KCH, CW), uint64)
        k_b = cuda.local.array((2, KCH, CW), uint64)
        v_a = cuda.local.array((2, 2, VCH, CW), uint64)
        v_b = cuda.local.array((2, 2, VCH, CW), uint64)
        ks_a = cuda.local.array((2, 2), float32)
        ks_b = cuda.local.array((2, 2), float32)
        vs_a = cuda.local.array((2, 2), float32)
        vs_b = cuda.local.array((2, 2), float32)
        for b in range(2):
            for x in range(2):
                ks_a[b, x] = ks_b[b, x] = vs_a[b, x] = vs_b[b, x] = float32(1.0)
            for j in range(KCH):
                for c in range(CW):
                    k_a[b, j, c] = k_b[b, j, c] = 0
            for x in range(2):
                for i in range(VCH):
                    for c in range(CW):
                        v_a[b, x, i, c] = v_b[b, x, i, c] = 0
        running_max = float32(-math.inf)
        running_sum = float32(0.0)
        page_words = uint64(kv_heads) * uint64(BS * STRIDE)
        head_words = uint64(kv_head) * uint64(BS * STRIDE)

        # Warp w's tiles: from start + 16 w, STEP tokens apart. Registers a hold the tile being computed while the
        # next one loads into b, then the other way round.
        t0 = start + warp * TILE_TOKENS
        load_tile(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words, head_words, t0, end, g,
                  tq, k_a, v_a, ks_a, vs_a)
        while t0 < end:
            load_tile(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words, head_words,
                      t0 + STEP, end, g, tq, k_b, v_b, ks_b, vs_b)
            running_max, running_sum = compute_tile(qa, k_a, v_a, ks_a, vs_a, t0, end, tq, inv_f, pv_unit,
                                                    running_max, running_sum, acc)
            t0 += STEP
            if t0 >= end:
                break
            load_tile(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words, head_words,
                      t0 + STEP, end, g, tq, k_a, v_a, ks_a, vs_a)
            running_max, running_sum = compute_tile(qa, k_b, v_b, ks_b, vs_b, t0, end, tq, inv_f, pv_unit,
                                                    running_max, running_sum, acc)
            t0 += STEP

        running_sum += cuda.shfl_xor_sync(FULL_MASK, running_sum, 1)
        running_sum += cuda.shfl_xor_sync(FULL_MASK, running_sum, 2)
        warp_max = cuda.shared.array((WARPS, GROUP_MAX), float32)
        warp_sum = cuda.shared.array((WARPS, GROUP_MAX), float32)
        warp_acc = cuda.shared.array((WARPS, GROUP_MAX, HEAD_DIM_MAX), float32)
        if tq == 0:
            warp_max[warp, g] = running_max
            warp_sum[warp, g] = running_sum
        store_accumulators(acc, pv_unit, warp, tq, g, warp_acc)
        merge_head_warps(warp_max, warp_sum, warp_acc, partial_max, partial_sum, partial_acc, s, first, p, n_heads, D,
                     tid)

    return gqa_decode_tensor_cores_kernel


def gqa_decode_tensor_cores_kernel(fmt: str, head_dim: int, block_size: int = 16):
    """The tensor-core decode kernel for a cache format (fp16 or fp8), a head_dim and a page size, compiled on
    first use and kept."""
    key = (fmt, int(head_dim), int(block_size))
    if key not in _TENSOR_KERNELS:
        _TENSOR_KERNELS[key] = _build_tensor_core_kernel(*key)
    return _TENSOR_KERNELS[key]


def gqa_decode_tensor_cores(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                            scale=None, out=None, partition_size=None, max_context=None,
                            kernel=gqa_decode_tensor_cores_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16 or fp8 e4m3, its scores and weighted sums on tensor
    cores; returns out (num_seqs, heads, head_dim) float32.

    The arguments of ``gqa_decode_mixed_precision``, with an fp16 or fp8 cache (a float32 cache has no fp16
    form to multiply: use ``gqa_decode_half_warps``); head_dim must be a multiple of 8 and ``partition_size``
    of 16, the tokens of a warp's tile. fp8 needs PTX's e4m3 conversion (compute capability 8.9 or later) and
    fp16 an mma (8.0 or later); ``partition_size`` None: ``tensor_partition_size``. ``kernel`` is a function of
    the format, the head_dim and the page size."""
    out, step = prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                               partition_size, max_context, channels=8, refused=_TENSOR_REFUSED,
                               tokens=lambda *_: (TILE_TOKENS, f"{TILE_TOKENS} (a warp's tile of tokens never "
                                                               f"crosses a partition)"),
                               choose_partition=tensor_partition_size)
    if step is None:
        return out
    if not config.ENABLE_CUDASIM and cuda.is_available():       # (without a GPU the kernel can still be compiled)
        needed = (8, 9) if step.fmt == "fp8_e4m3" else (8, 0)
        have = tuple(cuda.get_current_device().compute_capability)
        if have < needed:
            raise ValueError(f"k_cache: a {step.fmt} cache needs compute capability {needed[0]}.{needed[1]} or later "
                             f"for the tensor-core decode, this GPU has {have[0]}.{have[1]}: use gqa_decode_half_warps")
    kernel(step.fmt, step.head_dim, step.block_size)[step.grid, THREADS](
        q, cache_words(k_cache, np.uint64), cache_words(v_cache, np.uint64), step.k_scales, step.v_scales,
        block_tables, context_lens, step.scale, step.partition_size, step.kv_heads, *step.partials)
    merge_kernel[(step.heads, step.num_seqs), HEAD_DIM_MAX](*step.partials, out)
    return out
