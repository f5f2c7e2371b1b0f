"""Day 8's fp8 decode for a faster memory: ``gqa_decode_fp8_deep``, the tensor-core rung with more tiles in flight
a warp.

``gqa_decode_tensor_cores`` keeps one tile (16 tokens, 4 KB of an fp8 cache at head_dim 128) in flight a warp while
it computes another. By Little's law a memory delivers bytes in flight / latency, and the H200's memory is 1.4 times
the H100's at about the same latency, so the same warps reach a smaller fraction of it: the register rung read 0.90
to 0.94 of the copy bandwidth on an H100 and 0.73 to 0.77 on an H200 at the recording's long steps. Nsight Compute
on an H100 (16 x 32,768 tokens, 2026-12-07) says where its warps wait: of about 8.3 cycles between a warp's
instructions, 3.5 wait on global loads (long scoreboard) and 2.7 on the fixed latency of the instruction before
(the chains of mma and conversions), with 2.7 warps a scheduler and a third of the issue slots used. The rings of
cp.async (``fp8_ring``) kept more bytes in flight but paid for them in instructions: the lean ring executed 1.9
times the register rung's (the same step) and was slower on both GPUs.

This rung keeps the registers and makes four choices, each an argument of the builder so that each can be timed
undone alone (``deep_kernel_choosing``; the recorder's ``day08_fp8_deep_choices``):

- **three tiles deep**: a warp holds the tile it computes and the next two in flight (the register rung: the next
  one), at 2 blocks an SM (launch_bounds; ptxas: 240 registers, no spills), so each SM keeps 8 warps x 2 tiles in
  flight where the register rung keeps 12 x 1;
- **16-byte loads** (``kernels.intrinsics.load_u32x4``): a lane's K words of a token in 2 loads instead of 4 and
  its V words in 1 instead of 2 (head_dim 128). A score sums its channels in any order, so lane ``tq`` reads the
  16-byte units ``tq``, ``tq + 4`` of a K row and q's fragments follow that order; V's channels are output
  positions, so lane ``g`` reads unit ``g`` (channels 16 g ... 16 g + 15) and its accumulators are stored there;
- **one weight mma a block of V**: q and the weights are split into fp16 ``hi + lo``, and the register rung runs
  two mma a block of 16 output channels, ``hi`` then ``lo``. When a block holds at most 4 query heads
  (``DEEP_PACK_HEADS``), columns 0-3 of the mma's B fragment take the heads' ``hi`` weights and columns 4-7 their
  ``lo`` weights (one shuffle from the lane 16 away), so one mma does both; the two halves are added when the
  accumulators are stored;
- **two chains of score mma**: the steps along head_dim alternate between two accumulators, added at the end, so
  no mma waits on the one before it.

The sums are float32 throughout, as the register rung's; only their order differs (the hi and lo products are
added at the end, the score's steps in two chains), so the output is not the register rung's bits but within
float32's rounding of them. fp8 e4m3 caches only, head_dim a multiple of 64 up to 128 (four lanes share a K
row's 16-byte units), compute capability 8.9 or later. Its partitions come from ``tensor_partition_size`` for
blocks of which an SM holds 2.

Measured on an H100 80GB HBM3 (2026-12-07, ``course/data/day08_fp8_deep_choices.json``, the GPU's time, L2 flushed):
at 16 x 32,768 and 64 x 16,384 tokens the rung took 369 and 732 us against the register rung's 396 and 774, 0.98
of the copy bandwidth at both (1.08 and 1.06 times the register rung). Each choice undone alone cost 1% or less
(0.97 to 0.98 of copy), so on that GPU, already near its copy bandwidth, the choices cannot be told apart; the
register rung compiled for 2 blocks an SM alone (a probe, not a rung) read 0.93 and 0.98. Nsight Compute at 16 x
32,768: 1.9 warps a scheduler, each waiting 2.4 cycles on loads and 1.3 on the instruction before, per issued
instruction (the register rung: 3.5 and 2.7), DRAM 87% busy (82%). The instructions did not fall: 117 million
against the register rung's 114 million (the 16-byte loads' and the packed mma's savings spent on the 2-D
addresses, the shuffles and the third set of registers). compute-sanitizer's memcheck is clean on the recorder's
small launches (groups 3 and 9), and the GPU tests pass at 16 x 8,192 tokens, groups 4 and 8.

Predicted for an H200 before it ran there: 0.85 to 0.95 of copy at those steps (twice the register rung's tiles in
flight a warp at two thirds of its warps: 1.33 times its bytes in flight, and a third of the issue slots busy on
the H100 leaves room for 1.4 times the instructions a second).
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, int32, uint32, uint64

from kernels.gqa_attention import GROUP_MAX
from kernels.intrinsics import byte_perm, e4m3_pairs, load_u32x4, mma_m16n8k16
from kernels.launching import FULL_MASK, WARP, cdiv
from kernels.paged_attention import HEAD_DIM_MAX, THREADS, WARPS, paged_attention_v2_merge_kernel

from .common import cache_words, merge_head_warps, prepare_decode
from .partitions import tensor_partition_size
from .tensor_cores import Q_UNIT, TILE_TOKENS, split_halves, tensor_core_steps

__all__ = ["DEEP_DEPTH", "DEEP_MIN_BLOCKS", "DEEP_PACK_HEADS", "DEEP_HEAD_DIM_STEP", "deep_packs",
           "deep_kernel_choosing", "gqa_decode_fp8_deep_kernel", "gqa_decode_fp8_deep"]

DEEP_DEPTH = 3          # tiles a warp holds in registers: the one it computes and the next two in flight
DEEP_MIN_BLOCKS = 2     # blocks of 128 threads an SM must hold (launch_bounds): up to 255 registers a thread
DEEP_PACK_HEADS = 4     # a block of at most this many query heads puts hi and lo weights in one mma's columns
DEEP_HEAD_DIM_STEP = 64  # head_dim must be a multiple of this: 4 lanes share a K row in 16-byte units
_UNIT_WORDS = 4         # uint32 words of a 16-byte load (16 fp8 codes)
_LOW_WORD = 0xFFFFFFFF
_DEEP_KERNELS: dict = {}
_REFUSED = {fmt: (f"k_cache must hold fp8 e4m3 codes for gqa_decode_fp8_deep, got {fmt}: gqa_decode_tensor_cores "
                  f"takes an fp16 cache, gqa_decode_half_warps a float32 one and gqa_decode_wide_heads a bf16 one")
            for fmt in ("float32", "float16", "bfloat16")}


def deep_packs(group: int) -> bool:
    """Whether ``gqa_decode_fp8_deep``'s blocks hold few enough query heads (at most ``DEEP_PACK_HEADS``) for one
    weight mma a block of V: a block takes ``group`` heads, or an even share of them past ``GROUP_MAX``."""
    subgroups = cdiv(group, GROUP_MAX)
    return cdiv(group, subgroups) <= DEEP_PACK_HEADS


def _build_deep_kernel(D: int, BS: int, pack: bool, depth: int = DEEP_DEPTH, min_blocks: int = DEEP_MIN_BLOCKS,
                       wide: bool = True, chains: int = 2):
    """The deep decode kernel for head_dim ``D`` (a multiple of 64 up to 128) and page size ``BS``. ``pack``: one
    weight mma a block of V (a block of at most ``DEEP_PACK_HEADS`` heads). The rung's other choices are arguments
    so that each can be timed alone: ``depth`` tiles in registers (2: the register rung's), ``min_blocks`` for
    launch_bounds, ``wide`` 16-byte loads (False: 8-byte words, as the register rung), ``chains`` of score mma
    (1 or 2)."""
    if D % DEEP_HEAD_DIM_STEP or not 0 < D <= HEAD_DIM_MAX or depth not in (2, 3) or chains not in (1, 2):
        raise ValueError(f"the deep decode takes head_dim a multiple of {DEEP_HEAD_DIM_STEP} up to {HEAD_DIM_MAX}, "
                         f"depth 2 or 3 and 1 or 2 chains, got {D}, {depth} and {chains}")
    steps = tensor_core_steps("fp8_e4m3", D, BS)
    block_work, v_unit, softmax_tile = steps["block_work"], steps["v_unit"], steps["softmax_tile"]
    KL = D // 64                    # K loads of 16 bytes a row a lane: units tq + 4 l
    KSTEPS = D // 16                # mma steps along head_dim: 4 a 16-byte unit
    VW = 2 if (wide and D % 128 == 0) else 1    # 8-byte words of a V load
    VL = D // (64 * VW)             # V loads a token a lane: chunks (8 bytes) VW (g + 8 l) + c
    VWORDS = 2 * VW                 # uint32 words of a V load
    MBLOCKS = D // 16               # mma blocks of 16 output channels
    ONE_PAGE = BS % TILE_TOKENS == 0
    STEP = TILE_TOKENS * WARPS
    ROW_WORDS = D // 4              # uint32 words of a row
    WORDS64 = D // 8                # uint64 words of a row
    PACK, DEPTH, WIDE, CHAINS = pack, depth, wide, chains
    LOW = uint64(_LOW_WORD)

    @cuda.jit(device=True, inline=True)
    def load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                  head_rows, t, end, g, tq, k_raw, v_raw, k_sc, v_sc):
        """Issue the loads of tile t: K rows t + g and t + 8 + g (units tq + 4 l), V rows t + 2 tq + e + 8 b
        (units g + 8 l), as uint32 words, and the page scales of the V rows' tokens. Past the end nothing loads."""
        if t >= end:
            return
        full = t + TILE_TOKENS <= end
        base = uint64(0)
        if ONE_PAGE:
            page = block_tables[s, t // BS]
            base = uint64(page) * page_rows + head_rows + uint64(t % BS)
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
                    row = base + uint64(8 * b + g)
                else:
                    row = uint64(block_tables[s, token // BS]) * page_rows + head_rows + uint64(token % BS)
                for l in range(KL):
                    u = tq + 4 * l
                    if WIDE:
                        w0, w1, w2, w3 = load_u32x4(k_rows, row, uint32(_UNIT_WORDS * u))
                        k_raw[b, l, 0] = w0
                        k_raw[b, l, 1] = w1
                        k_raw[b, l, 2] = w2
                        k_raw[b, l, 3] = w3
                    else:
                        for c in range(2):
                            x = k_words[row * uint64(WORDS64) + uint64(2 * u + c)]
                            k_raw[b, l, 2 * c] = uint32(x & LOW)
                            k_raw[b, l, 2 * c + 1] = uint32(x >> uint64(32))
            for e in range(2):
                token = t + 8 * b + 2 * tq + e
                if full or token < end:
                    if ONE_PAGE:
                        row = base + uint64(8 * b + 2 * tq + e)
                    else:
                        page = block_tables[s, token // BS]
                        row = uint64(page) * page_rows + head_rows + uint64(token % BS)
                        k_sc[b, e] = k_scales[page, kv_head]
                        v_sc[b, e] = v_scales[page, kv_head]
                    for l in range(VL):
                        if VW == 2:
                            w0, w1, w2, w3 = load_u32x4(v_rows, row, uint32(_UNIT_WORDS * (g + 8 * l)))
                            v_raw[b, e, l, 0] = w0
                            v_raw[b, e, l, 1] = w1
                            v_raw[b, e, l, 2] = w2
                            v_raw[b, e, l, 3] = w3
                        else:
                            x = v_words[row * uint64(WORDS64) + uint64(g + 8 * l)]
                            v_raw[b, e, l, 0] = uint32(x & LOW)
                            v_raw[b, e, l, 1] = uint32(x >> uint64(32))

    @cuda.jit(device=True, inline=True)
    def query_fragments(q, s, first, n_heads, scale, g, tq, qa):
        """q of head g as the score mma's A fragments (rows g: hi, rows g + 8: lo), step 4 l + h holding channels
        16 (tq + 4 l) + 4 h ... + 3, the channels of word h of the lane's K unit l; scaled so its largest channel
        is Q_UNIT. Returns the scale's inverse, which the scores undo."""
        q_raw = cuda.local.array((KSTEPS, 4), float32)
        amax = float32(0.0)
        for l in range(KL):
            for h in range(4):
                for e in range(4):
                    x = float32(0.0)
                    if g < n_heads:
                        x = q[s, first + g, 16 * (tq + 4 * l) + 4 * h + e] * scale
                    q_raw[4 * l + h, e] = x
                    amax = max(amax, abs(x))
        amax = max(amax, cuda.shfl_xor_sync(FULL_MASK, amax, 1))
        amax = max(amax, cuda.shfl_xor_sync(FULL_MASK, amax, 2))
        f = float32(Q_UNIT) / amax if amax > 0 else float32(1.0)
        for k in range(KSTEPS):
            qa[k, 0], qa[k, 1] = split_halves(q_raw[k, 0] * f, q_raw[k, 1] * f)
            qa[k, 2], qa[k, 3] = split_halves(q_raw[k, 2] * f, q_raw[k, 3] * f)
        return float32(1.0) / f

    @cuda.jit(device=True, inline=True)
    def compute_tile(qa, k_raw, v_raw, k_sc, v_sc, t, end, lane, tq, inv_f, pv_unit, running_max, running_sum, acc):
        """Tile t's scores, online softmax (head g) and weighted V rows into acc; returns the new running maximum
        and this lane's share of the running sum."""
        scores = cuda.local.array((2, 2), float32)
        for b in range(2):
            c0 = c1 = c2 = c3 = float32(0.0)
            d0 = d1 = d2 = d3 = float32(0.0)
            for k in range(KSTEPS):
                r0, r1 = e4m3_pairs(k_raw[b, k // 4, k % 4])
                if CHAINS == 2 and k % 2:
                    d0, d1, d2, d3 = mma_m16n8k16(qa[k, 0], qa[k, 1], qa[k, 2], qa[k, 3], r0, r1, d0, d1, d2, d3)
                else:
                    c0, c1, c2, c3 = mma_m16n8k16(qa[k, 0], qa[k, 1], qa[k, 2], qa[k, 3], r0, r1, c0, c1, c2, c3)
            scores[b, 0] = ((c0 + c2) + (d0 + d2)) * (k_sc[b, 0] * inv_f)
            scores[b, 1] = ((c1 + c3) + (d1 + d3)) * (k_sc[b, 1] * inv_f)
        # columns 2 tq and 2 tq + 1 of the accumulators: heads 2 tq, 2 tq + 1, or (packed) heads 2 (tq % 2) and
        # 2 (tq % 2) + 1, whose hi weights lanes tq < 2 hold and lo weights lanes tq >= 2
        new_max, running_sum, high0, low0, high1, low1 = softmax_tile(scores, v_sc, t, end, tq,
                                                                      2 * (tq % 2) if PACK else 2 * tq, pv_unit,
                                                                      running_max, running_sum, acc)
        if PACK:
            # columns 4-7 (lanes 16-31) take the lo weights of heads 0-3, from the lanes 16 below
            other0 = uint32(cuda.shfl_xor_sync(FULL_MASK, int32(low0), 16))
            other1 = uint32(cuda.shfl_xor_sync(FULL_MASK, int32(low1), 16))
            if lane >= 16:
                high0 = other0
                high1 = other1
        for l in range(VL):
            for c in range(VW):
                for hh in range(2):
                    pairs = cuda.local.array((2, 4), uint32)    # [b]: channels x ... x + 3 of 2 tokens
                    for b in range(2):
                        a = v_raw[b, 0, l, 2 * c + hh]
                        z = v_raw[b, 1, l, 2 * c + hh]
                        pairs[b, 0], pairs[b, 1] = e4m3_pairs(byte_perm(a, z, uint32(0x5140)))
                        pairs[b, 2], pairs[b, 3] = e4m3_pairs(byte_perm(a, z, uint32(0x7362)))
                    for x in range(2):
                        m = 4 * (VW * l + c) + 2 * hh + x
                        a0, a1, a2, a3 = pairs[0, 2 * x], pairs[0, 2 * x + 1], pairs[1, 2 * x], pairs[1, 2 * x + 1]
                        d0, d1, d2, d3 = mma_m16n8k16(a0, a1, a2, a3, high0, high1,
                                                      acc[m, 0], acc[m, 1], acc[m, 2], acc[m, 3])
                        if not PACK:
                            d0, d1, d2, d3 = mma_m16n8k16(a0, a1, a2, a3, low0, low1, d0, d1, d2, d3)
                        acc[m, 0], acc[m, 1], acc[m, 2], acc[m, 3] = d0, d1, d2, d3
        return new_max, running_sum

    @cuda.jit(device=True, inline=True)
    def store_accumulators(acc, pv_unit, warp, tq, g, warp_acc):
        """This warp's accumulators, undone of the weights' unit, into its rows of the block's merge buffer; packed,
        lanes tq < 2 add the lo halves the lanes two along hold."""
        out_unit = float32(1.0) / pv_unit
        for l in range(VL):
            for c in range(VW):
                for e in range(4):
                    m = 4 * (VW * l + c) + e
                    ch = 8 * (VW * (g + 8 * l) + c) + 2 * e
                    x0 = acc[m, 0] * out_unit
                    x1 = acc[m, 1] * out_unit
                    x2 = acc[m, 2] * out_unit
                    x3 = acc[m, 3] * out_unit
                    if PACK:
                        x0 += cuda.shfl_xor_sync(FULL_MASK, x0, 2)
                        x1 += cuda.shfl_xor_sync(FULL_MASK, x1, 2)
                        x2 += cuda.shfl_xor_sync(FULL_MASK, x2, 2)
                        x3 += cuda.shfl_xor_sync(FULL_MASK, x3, 2)
                    if not PACK or tq < 2:
                        warp_acc[warp, 2 * tq, ch] = x0
                        warp_acc[warp, 2 * tq + 1, ch] = x1
                        warp_acc[warp, 2 * tq, ch + 1] = x2
                        warp_acc[warp, 2 * tq + 1, ch + 1] = x3

    @cuda.jit(launch_bounds=(THREADS, min_blocks))
    def gqa_decode_fp8_deep_kernel(q, k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables,
                                   context_lens, scale, partition_size, kv_heads, partial_max, partial_sum,
                                   partial_acc):
        s, p, kv_head, first, n_heads, start, end = block_work(q, kv_heads, context_lens, partition_size)
        tid = cuda.threadIdx.x
        warp = tid // WARP
        lane = tid % WARP
        g = lane >> 2
        tq = lane & 3

        qa = cuda.local.array((KSTEPS, 4), uint32)
        inv_f = query_fragments(q, s, first, n_heads, scale, g, tq, qa)
        pv_unit = v_unit(v_scales, block_tables, s, kv_head, start, end, lane)
        acc = cuda.local.array((MBLOCKS, 4), float32)
        for m in range(MBLOCKS):
            for x in range(4):
                acc[m, x] = float32(0.0)
        k_a = cuda.local.array((2, KL, 4), uint32)
        k_b = cuda.local.array((2, KL, 4), uint32)
        k_c = cuda.local.array((2, KL, 4), uint32)
        v_a = cuda.local.array((2, 2, VL, VWORDS), uint32)
        v_b = cuda.local.array((2, 2, VL, VWORDS), uint32)
        v_c = cuda.local.array((2, 2, VL, VWORDS), uint32)
        ks_a = cuda.local.array((2, 2), float32)
        ks_b = cuda.local.array((2, 2), float32)
        ks_c = cuda.local.array((2, 2), float32)
        vs_a = cuda.local.array((2, 2), float32)
        vs_b = cuda.local.array((2, 2), float32)
        vs_c = cuda.local.array((2, 2), float32)
        for b in range(2):
            for x in range(2):
                ks_a[b, x] = ks_b[b, x] = ks_c[b, x] = vs_a[b, x] = vs_b[b, x] = vs_c[b, x] = float32(1.0)
            for l in range(KL):
                for w in range(4):
                    k_a[b, l, w] = k_b[b, l, w] = k_c[b, l, w] = 0
            for x in range(2):
                for l in range(VL):
                    for w in range(VWORDS):
                        v_a[b, x, l, w] = v_b[b, x, l, w] = v_c[b, x, l, w] = 0
        running_max = float32(-math.inf)
        running_sum = float32(0.0)
        page_rows = uint64(kv_heads) * uint64(BS)
        head_rows = uint64(kv_head) * uint64(BS)

        # Warp w's tiles: from start + 16 w, STEP tokens apart; the registers a, b (and c) take them in turn, each
        # tile's loads issued DEPTH - 1 tiles before it is computed.
        t0 = start + warp * TILE_TOKENS
        load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                  head_rows, t0, end, g, tq, k_a, v_a, ks_a, vs_a)
        if DEPTH == 3:
            load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                      head_rows, t0 + STEP, end, g, tq, k_b, v_b, ks_b, vs_b)
            while t0 < end:
                load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                          head_rows, t0 + 2 * STEP, end, g, tq, k_c, v_c, ks_c, vs_c)
                running_max, running_sum = compute_tile(qa, k_a, v_a, ks_a, vs_a, t0, end, lane, tq, inv_f, pv_unit,
                                                        running_max, running_sum, acc)
                t0 += STEP
                if t0 >= end:
                    break
                load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                          head_rows, t0 + 2 * STEP, end, g, tq, k_a, v_a, ks_a, vs_a)
                running_max, running_sum = compute_tile(qa, k_b, v_b, ks_b, vs_b, t0, end, lane, tq, inv_f, pv_unit,
                                                        running_max, running_sum, acc)
                t0 += STEP
                if t0 >= end:
                    break
                load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                          head_rows, t0 + 2 * STEP, end, g, tq, k_b, v_b, ks_b, vs_b)
                running_max, running_sum = compute_tile(qa, k_c, v_c, ks_c, vs_c, t0, end, lane, tq, inv_f, pv_unit,
                                                        running_max, running_sum, acc)
                t0 += STEP
        else:
            while t0 < end:
                load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                          head_rows, t0 + STEP, end, g, tq, k_b, v_b, ks_b, vs_b)
                running_max, running_sum = compute_tile(qa, k_a, v_a, ks_a, vs_a, t0, end, lane, tq, inv_f, pv_unit,
                                                        running_max, running_sum, acc)
                t0 += STEP
                if t0 >= end:
                    break
                load_tile(k_rows, v_rows, k_words, v_words, k_scales, v_scales, block_tables, s, kv_head, page_rows,
                          head_rows, t0 + STEP, end, g, tq, k_a, v_a, ks_a, vs_a)
                running_max, running_sum = compute_tile(qa, k_b, v_b, ks_b, vs_b, t0, end, lane, tq, inv_f, pv_unit,
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

    return gqa_decode_fp8_deep_kernel


def deep_kernel_choosing(*, depth: int = DEEP_DEPTH, min_blocks: int = DEEP_MIN_BLOCKS, wide: bool = True,
                         chains: int = 2, pack: bool = True):
    """A ``kernel=`` for ``gqa_decode_fp8_deep`` with some of the rung's choices undone, to time each alone:
    ``depth`` tiles in registers (2: one in flight, as the register rung), ``min_blocks`` an SM (launch_bounds),
    ``wide`` 16-byte loads (False: 8-byte words), ``chains`` of score mma (1: each waits on the one before) and
    ``pack`` (False: two weight mma a block of V even where one would do). Every choice gives a correct kernel;
    with the defaults, the rung's own (``gqa_decode_fp8_deep_kernel``). Kernels are compiled on first use and
    kept, one per head_dim, page size, packing and choices."""
    choices = dict(depth=int(depth), min_blocks=int(min_blocks), wide=bool(wide), chains=int(chains))

    def kernel(head_dim: int, block_size: int = 16, packs: bool = True):
        key = (int(head_dim), int(block_size), bool(pack and packs), tuple(sorted(choices.items())))
        if key not in _DEEP_KERNELS:
            _DEEP_KERNELS[key] = _build_deep_kernel(*key[:3], **choices)
        return _DEEP_KERNELS[key]

    return kernel


_rung_kernel = deep_kernel_choosing()


def gqa_decode_fp8_deep_kernel(head_dim: int, block_size: int = 16, pack: bool = True):
    """The deep decode kernel for a head_dim, a page size and whether its blocks pack hi and lo weights into one
    mma (``deep_packs``), compiled on first use and kept: ``deep_kernel_choosing()``'s, every choice taken."""
    return _rung_kernel(head_dim, block_size, pack)


def _deep_partition(fmt, num_seqs, blocks_per_partition, longest, sm_count):
    return tensor_partition_size(fmt, num_seqs, blocks_per_partition, longest, sm_count, holds=DEEP_MIN_BLOCKS)


def gqa_decode_fp8_deep(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None, scale=None,
                        out=None, partition_size=None, max_context=None, kernel=gqa_decode_fp8_deep_kernel,
                        merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache of fp8 e4m3 codes on tensor cores, three tiles deep a warp, in 16-byte
    loads, with one weight mma a block of V where a block holds at most ``DEEP_PACK_HEADS`` heads; returns out
    (num_seqs, heads, head_dim) float32.

    The arguments of ``gqa_decode_tensor_cores`` with an fp8 cache only; head_dim a multiple of 64 up to 128 and
    ``partition_size`` a multiple of 16 (None: ``tensor_partition_size`` for blocks of which an SM holds
    ``DEEP_MIN_BLOCKS``). ``kernel`` is a function of the head_dim, the page size and ``deep_packs``."""
    out, step = prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                               partition_size, max_context, channels=8, refused=_REFUSED,
                               tokens=lambda *_: (TILE_TOKENS, f"{TILE_TOKENS} (a warp's tile of tokens never "
                                                               f"crosses a partition)"),
                               choose_partition=_deep_partition)
    if step is not None and step.head_dim % DEEP_HEAD_DIM_STEP:
        raise ValueError(f"q must have a head_dim that is a multiple of {DEEP_HEAD_DIM_STEP} for gqa_decode_fp8_deep "
                         f"(four lanes share a K row in 16-byte loads), got head_dim {step.head_dim}: "
                         f"gqa_decode_tensor_cores takes any multiple of 8")
    if step is None:
        return out
    if not config.ENABLE_CUDASIM and cuda.is_available():
        have = tuple(cuda.get_current_device().compute_capability)
        if have < (8, 9):
            raise ValueError(f"k_cache: an fp8 cache needs compute capability 8.9 or later for gqa_decode_fp8_deep, "
                             f"this GPU has {have[0]}.{have[1]}: use gqa_decode_half_warps")
    D = step.head_dim
    rows = [cache_words(cache).reshape(cache.size // D, D // 4) for cache in (k_cache, v_cache)]   # a token's row
    kernel(D, step.block_size, deep_packs(step.group))[step.grid, THREADS](
        q, *rows, cache_words(k_cache, np.uint64), cache_words(v_cache, np.uint64), step.k_scales, step.v_scales,
        block_tables, context_lens, step.scale, step.partition_size, step.kv_heads, *step.partials)
    merge_kernel[(step.heads, step.num_seqs), HEAD_DIM_MAX](*step.partials, out)
    return out
