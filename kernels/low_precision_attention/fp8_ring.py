"""Day 8's fp8 decode with its tiles copied ahead into shared memory: ``gqa_decode_fp8_ring`` and
``gqa_decode_fp8_lean_ring``.

``gqa_decode_tensor_cores`` keeps the bytes of at most one tile a warp in flight: the registers that receive
tile t + 1 while tile t is computed. On an H100 that was enough for an fp8 cache (0.88 to 0.92 of the copy
bandwidth at the steps of 512K tokens or more, ``course/data/day08_decode_timing.json``). On an H200, whose copy
bandwidth is 1.41 times as high, the same rung read its fp8 cache at 0.58 to 0.77 of copy (0.73 and 0.77 at the
two steps of 512K tokens or more, ``day08_decode_timing_other_gpu.json``), while its fp16 step kept up. Little's
law says why a faster memory needs more: the bytes in flight must be the bandwidth times the latency, and the
latency is the chip's. An fp8 tile of 16 tokens is 4 KB (K and V at head_dim 128), so an SM holding 3 blocks of
4 warps has at most 48 KB in flight, and less while its warps compute instead of waiting. At the H200's copy
bandwidth (4,200 GB/s in that recording: about 32 bytes a nanosecond for each of 132 SMs) 48 KB covers a latency
of 1.5 microseconds at most; the H100's 2,980 GB/s needed 1.41 times fewer bytes for the same latency.

This rung copies each warp's tiles with ``cp.async`` (16 bytes a copy, straight from global to shared memory,
no register held while the bytes travel) into a ring of ``RING_SLOTS`` slots, and computes each tile from its
slot with ``gqa_decode_tensor_cores``' own steps (``tensor_core_steps``: the score mma, the online softmax, the
weighted-V mma, unchanged). With 3 slots a warp has the next 2 tiles in flight while it computes one: 8 KB a
warp, about 96 KB an SM at 3 blocks, twice the register rung's. The slots' 16-byte chunks are rotated by their
row (``ring_chunk``), so the lanes' reads of a tile's K and V rows (8 rows of 32 bytes, 4 rows of 64 bytes) are
spread over the banks, 2 rows a bank at head_dim 128: two wavefronts for a warp's 256 bytes, the fewest there
can be. After the loop the ring holds the block's merge buffer (the warps' maxima, sums and accumulators as
float32 bits), so the whole block needs ``ring_shared_bytes(head_dim)`` of shared memory: 48 KB at head_dim 128,
the most a kernel may declare statically.

It computes exactly what ``gqa_decode_tensor_cores`` computes: the same tiles, the same instructions on the
same numbers, so its output is the same bits at the same partition size (a test holds that). Rows past a
context's end are copied as zeros instead of left as they were, and a zero weight times either gives zero.

Prediction, made before it ran on a GPU: at the long contexts of day 8's recording (16 x 32,768 and 64 x 16,384
tokens, group 4, head_dim 128) on an H200, 0.85 to 0.95 of copy, where the register rung read 0.73 and 0.77, if
bytes in flight are what held that rung back; at short partitions (16 x 8,192) no faster than it, since a warp
then computes a few tiles and fills its ring once for them. If it stays near the register rung at long contexts,
the limit is elsewhere (the instructions a tile costs: Nsight's issue-slot and stall figures will say).

Measured since, first on an H100: at 16 x 8,192, 16 x 32,768 and 64 x 16,384
tokens it read its cache at 0.38, 0.60 and 0.62 of copy, where ``gqa_decode_tensor_cores`` on the same fp8 cache in
the same run read 0.41, 0.88 and 0.92: two thirds of the register rung's speed at long contexts, its output the
same bits (the GPU test at full size). Nsight Compute on one step at 16 x 32,768 says why: the ring executed 383 M
warp instructions where the register rung executed 114 M (about 1,460 a warp and tile against 434), its warps
issued on 69% of cycles against 32%, and its leading stall reasons are "selected" and "not selected" (a warp
ready to issue and another one issuing): the schedulers were busy. The register rung's leading stall is
"long scoreboard", waiting on memory, as a rung short of bytes in flight should be; the ring traded that wait for
instructions: per tile each lane computes the addresses of its 8 copies (page, row, rotated chunk, bounds) and
reads 32 words of shared memory with 32-bit loads (17 M shared wavefronts, 8.4 M of them bank conflicts, where the
rotation was predicted to leave none beyond the minimum). On an H100, whose bytes in flight already sufficed, the
added instructions only cost (on the H200 too, below). The next
rung, then: the same ring with the per-tile address work hoisted (a lane's copies and reads are the same offsets
every tile) and 16-byte shared reads, so a tile costs about what the register rung's does.

That next rung is ``gqa_decode_fp8_lean_ring`` (``_build_ring_kernel(lean=True)``): the same ring, copies, slots and
steps, with every index of a lane's copies and reads in unsigned integers (numba's ``//`` and ``%`` on a signed
integer round towards minus infinity, which costs a few instructions more each, and a signed index is checked for
wrap-around before every load), and each 8-byte word of a slot read by one ``ld.shared.v2.u32``
(``kernels.intrinsics.load_shared_u32x2``) where the ring issues two 32-bit loads. The same words reach the same
steps, so its output is the ring's bits (a test holds that, on the simulator and at full size on a GPU). Measured on
an H100 (2026-12-07, each step alone, 10 launches between CUDA events, the better median of two runs), in two
stages:

- the 8-byte reads alone (predicted 0.68 to 0.75 of copy at the long steps): 0.64 at 16 x 32,768 and 0.67 at
  64 x 16,384, 1.10 and 1.12 times the ring. The prediction failed: the reads were a small part of what the ring
  adds.
- with the copies' and reads' indices unsigned too (predicted 0.70 to 0.78): 0.78 and 0.85, 1.38 and 1.44 times the
  ring, where the register rung read 0.85 and 0.90. Better than predicted: most of what the ring added was signed
  index arithmetic, recomputed for every tile. At 16 x 8,192 (a warp computes few tiles) 0.29, as the ring's 0.30.

The recording made since (``day08_decode_timing``, the same H100, 2026-12-07, the GPU's time alone): 0.84, 0.84 and
0.89 of copy at 16 x 32,768, 64 x 8,192 and 64 x 16,384, 1.42 to 1.45 times the ring, 0.93 to 0.95 times the
register rung, 3.28 to 3.46 times the best float32 step; the full-size checks on that GPU give the ring's errors
(its bits, checked by a test at full size there too).

On the H200 (``day08_decode_timing_other_gpu``, 2026-12-07, copy 4.2 TB/s, the GPU's time alone), at 16 x 32,768 and
64 x 16,384: the ring 0.42 and 0.44 of copy (its prediction, 0.85 to 0.95, failed), the lean ring 0.64 and 0.67,
the register rung 0.73 and 0.77; the lean ring 0.87 and 0.88 times the register rung and 2.74 and 2.83 times the
best float32 step. The goal (0.9 of copy and 3.5 times) is not met. The extra bytes in flight did not pay on the
faster memory either: both rings fell further behind the register rung there than on the H100 (the lean ring from
0.93 to 0.95 times it to 0.87 and 0.88), so per-tile instructions, not bytes in flight, are what limits them, and
what a next rung must cut.

Two more ways of keeping bytes in flight were probed on an H100 (2026-12-07) and left out: the first gained at most
3% over the register rung, the second lost about a quarter:

- ``gqa_decode_tensor_cores`` with each warp asking L2 for the tile d steps ahead of the one it loads (Hopper's
  ``cp.async.bulk.prefetch.L2``, one instruction for a tile's 2 KB of K and one for V; 10 calls queued between two
  events, 64 x 16,384 tokens): 0.85, 0.82, 0.64 and 0.55 of copy for d = 1, 2, 4 and 8 at 3 blocks an SM against
  the rung's 0.88; 0.90 at d = 2 and 2 blocks an SM (2 blocks without the prefetch were not timed); a
  ``prefetch.global.L2`` a row instead (d = 2), 0.80. More requests in flight bought little or no bandwidth, as with
  day 9's GEMV (``quantized_gemv_prequantized``).
- A ring filled by Hopper's bulk copies (``cp.async.bulk`` into shared memory, completion counted on an
  ``mbarrier``): one copy of a 128-byte row a lane a tile, so a tile costs each lane one copy instead of the lean
  ring's 8 and their address work, and rows padded (K 160 bytes, V 144) so that a half warp's 8-byte reads meet 16
  different pairs of banks. It gave the register rung's bits (at full size, and at contexts of 1 to 4,099 tokens).
  Predicted 0.90 to 0.95 of copy; measured (L2 flushed, the GPU's time alone) 0.70 at 16 x 32,768 and 0.71 at
  64 x 16,384 with 3 slots a warp and 3 blocks an SM, 0.59 and 0.58 with 4 slots and 2 blocks, where in the same run
  the register rung read 0.90 and 0.94 and the lean ring 0.85 and 0.89. The prediction failed. Not measured, so
  only a suspect: a bulk copy of 128 bytes is far smaller than the tiles the copy engine is built for, and each SM
  asked it for 384 of them per round of its warps' tiles.

fp8 caches only (the fp16 rung already reads at the copy bandwidth), head_dim a multiple of 16 up to 128 (a
16-byte copy holds 16 codes), compute capability 8.9 or later (PTX's e4m3 conversion).
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, int64, uint32, uint64

from kernels.gqa_attention import GROUP_MAX
from kernels.intrinsics import (bits_float, cp_async_16, cp_async_commit_group, cp_async_wait_group, float_bits,
                                load_shared_u32x2)
from kernels.launching import FULL_MASK, WARP
from kernels.paged_attention import HEAD_DIM_MAX, THREADS, WARPS, paged_attention_v2_merge_kernel

from .common import head_warps_merge, prepare_decode
from .partitions import tensor_partition_size
from .tensor_cores import TILE_TOKENS, tensor_core_steps

__all__ = ["RING_SLOTS", "RING_MIN_BLOCKS", "ring_shared_bytes", "ring_chunk", "gqa_decode_fp8_ring_kernel",
           "gqa_decode_fp8_ring", "gqa_decode_fp8_lean_ring_kernel", "gqa_decode_fp8_lean_ring"]

RING_SLOTS = 3          # tiles a warp's ring holds: the one computed and the next two in flight
RING_MIN_BLOCKS = 3     # blocks an SM must hold (launch_bounds), as for gqa_decode_tensor_cores on fp8
_CHUNK = 16             # bytes of a cp.async copy: 16 fp8 codes
_WORD_BYTES = 4         # the ring's words (uint32)
_RING_KERNELS: dict = {}


def _refused(rung: str) -> dict:
    return {fmt: (f"k_cache must hold fp8 e4m3 codes for {rung}, got {fmt}: gqa_decode_tensor_cores takes an fp16 "
                  f"cache, gqa_decode_half_warps a float32 one and gqa_decode_wide_heads a bf16 one")
            for fmt in ("float32", "float16", "bfloat16")}


def ring_shared_bytes(head_dim: int, slots: int = RING_SLOTS) -> int:
    """Shared memory of a block: each warp's ring of ``slots`` tiles of K and V rows (16 tokens each)."""
    return WARPS * slots * 2 * TILE_TOKENS * head_dim


def ring_chunk(row: int, chunk: int, chunks: int) -> int:
    """Where 16-byte chunk ``chunk`` of tile row ``row`` lies in its slot row of ``chunks`` chunks: rotated by the
    row (8 chunks a row, head_dim 128) or by the row's pair, quad ... (fewer chunks, so that 8 chunks still span
    a bank cycle's 128 bytes), so that the rows a warp reads at once do not all start in the same banks."""
    return (chunk + row // max(1, 8 // chunks)) % chunks


def _build_ring_kernel(D: int, BS: int, min_blocks: int = RING_MIN_BLOCKS, lean: bool = False):
    """The fp8 decode kernel whose warps copy their tiles into a ring in shared memory and compute them with
    ``tensor_core_steps``; head_dim ``D`` and page size ``BS`` fixed when compiling. The ring has RING_SLOTS = 3
    slots (the loop's ``cp_async_wait_group(2)`` is written for 3). ``lean=True``: ``gqa_decode_fp8_lean_ring``'s
    kernel, the copies' and reads' indices unsigned and a slot's 8-byte words read by ``load_shared_u32x2``."""
    if D % _CHUNK or not 0 < D <= HEAD_DIM_MAX:
        raise ValueError(f"{'gqa_decode_fp8_lean_ring' if lean else 'gqa_decode_fp8_ring'} takes a head_dim that is a "
                         f"multiple of {_CHUNK} up to {HEAD_DIM_MAX} "
                         f"(a 16-byte copy holds {_CHUNK} codes), got {D}")
    slots = RING_SLOTS
    ROW_WORDS = D // _WORD_BYTES                    # uint32 words of a row
    ACC_WORDS = WARPS * GROUP_MAX * D               # the merge buffer's accumulators, then maxima and sums

    # After the loop the ring's words hold the block's merge buffer as float bits: warp w's accumulator of head i,
    # channel c at word (w GROUP_MAX + i) D + c, its maxima from ACC_WORDS on, its sums after them.
    @cuda.jit(device=True, inline=True)
    def put(ring, index, x):
        ring[index // ROW_WORDS, index % ROW_WORDS] = float_bits(x)

    @cuda.jit(device=True, inline=True)
    def get(ring, index):
        return bits_float(ring[index // ROW_WORDS, index % ROW_WORDS])

    @cuda.jit(device=True, inline=True)
    def write_acc(ring, warp, row, c, x):
        put(ring, (warp * GROUP_MAX + row) * D + c, x)

    @cuda.jit(device=True, inline=True)
    def read_acc(ring, w, i, c):
        return get(ring, (w * GROUP_MAX + i) * D + c)

    @cuda.jit(device=True, inline=True)
    def max_word(w, i):
        return ACC_WORDS + w * GROUP_MAX + i

    @cuda.jit(device=True, inline=True)
    def sum_word(w, i):
        return ACC_WORDS + WARPS * GROUP_MAX + w * GROUP_MAX + i

    @cuda.jit(device=True, inline=True)
    def read_max(ring, w, i):
        return get(ring, max_word(w, i))

    @cuda.jit(device=True, inline=True)
    def read_sum(ring, w, i):
        return get(ring, sum_word(w, i))

    merge = head_warps_merge(read_max, read_sum, read_acc)
    steps = tensor_core_steps("fp8_e4m3", D, BS, write_acc)
    block_work, query_fragments, v_unit, compute_tile, store_accumulators = (
        steps[name] for name in ("block_work", "query_fragments", "v_unit", "compute_tile", "store_accumulators"))
    KCH, KSTEPS, VCH, MBLOCKS, STEP = (steps[name] for name in ("KCH", "KSTEPS", "VCH", "MBLOCKS", "STEP"))
    K_FULL, V_FULL, ONE_PAGE = steps["K_FULL"], steps["V_FULL"], steps["ONE_PAGE"]
    CHUNKS = D // _CHUNK                            # 16-byte chunks of a row
    COPIES = 2 * TILE_TOKENS * CHUNKS // WARP       # copies a lane issues a tile: K's and V's 16 rows
    TILE_ROWS = 2 * TILE_TOKENS                     # a slot: K rows 0-15, V rows 16-31
    RING_ROWS = WARPS * slots * TILE_ROWS
    SPREAD = max(1, 8 // CHUNKS)
    if ACC_WORDS + 2 * WARPS * GROUP_MAX > RING_ROWS * ROW_WORDS:
        raise ValueError(f"the ring of {slots} slots cannot hold the block's merge buffer at head_dim {D}")

    @cuda.jit(device=True, inline=True)
    def issue_tile(k_rows, v_rows, block_tables, s, kv_head, kv_heads, t, end, lane, ring, base):
        """Start the copies of tile t's K and V rows into the ring rows base ... base + 31 (rows past the end as
        zeros) and commit them as one group, empty past the end, so that every tile is one group."""
        if t < end:
            first_row = 0
            if ONE_PAGE:
                first_row = (block_tables[s, t // BS] * kv_heads + kv_head) * BS + t % BS
            for n in range(COPIES):
                c = lane + WARP * n
                kv = c // (TILE_TOKENS * CHUNKS)
                r = (c // CHUNKS) % TILE_TOKENS
                chunk = c % CHUNKS
                token = t + r
                valid = token < end
                row = 0
                if valid:
                    if ONE_PAGE:
                        row = first_row + r
                    else:
                        row = (block_tables[s, token // BS] * kv_heads + kv_head) * BS + token % BS
                col = 4 * ((chunk + r // SPREAD) % CHUNKS)
                if kv == 0:
                    cp_async_16(ring, base + r, col, k_rows, row, 8 * chunk, valid)
                else:
                    cp_async_16(ring, base + TILE_TOKENS + r, col, v_rows, row, 8 * chunk, valid)
        cp_async_commit_group()

    @cuda.jit(device=True, inline=True)
    def tile_scales(k_scales, v_scales, block_tables, s, kv_head, t, end, tq, k_sc, v_sc):
        """The page scales of this lane's score tokens of tile t (2 tq + e + 8 b), as load_tile loads them; tokens
        past the end keep what they held (their weights are zero)."""
        if ONE_PAGE:
            page = block_tables[s, t // BS]
            ks = k_scales[page, kv_head]
            vs = v_scales[page, kv_head]
            for b in range(2):
                for e in range(2):
                    k_sc[b, e] = ks
                    v_sc[b, e] = vs
        else:
            for b in range(2):
                for e in range(2):
                    token = t + 8 * b + 2 * tq + e
                    if token < end:
                        page = block_tables[s, token // BS]
                        k_sc[b, e] = k_scales[page, kv_head]
                        v_sc[b, e] = v_scales[page, kv_head]

    @cuda.jit(device=True, inline=True)
    def word_of(ring, row, r, w):
        """8-byte word w (codes 8 w ... 8 w + 7) of tile row r, stored at ring row ``row``."""
        col = 4 * ((w // 2 + r // SPREAD) % CHUNKS) + 2 * (w % 2)
        return uint64(ring[row, col]) | (uint64(ring[row, col + 1]) << uint64(32))

    @cuda.jit(device=True, inline=True)
    def read_tile(ring, base, g, tq, k_raw, v_raw):
        """The slot at ring row ``base`` into the registers compute_tile reads, as load_tile would have loaded
        them: K rows 8 b + g, words tq + 4 j; V rows 8 b + 2 tq + e, words g + 8 i; channels past D as zeros."""
        for b in range(2):
            r = 8 * b + g
            for j in range(KCH):
                w = tq + 4 * j
                k_raw[b, j, 0] = word_of(ring, base + r, r, w) if K_FULL or 8 * w < D else uint64(0)
            for e in range(2):
                r = 8 * b + 2 * tq + e
                for i in range(VCH):
                    w = g + 8 * i
                    v_raw[b, e, i, 0] = (word_of(ring, base + TILE_TOKENS + r, r, w) if V_FULL or 8 * w < D
                                         else uint64(0))

    # The lean ring's two changes: every index of a lane's copies and reads in uint32 (numba's // and % on a signed
    # integer round towards minus infinity, a few instructions more each, and its signed indices wrap around), the
    # slot's 8-byte words read by one ld.shared.v2.u32 each. The same copies, words and bits.
    @cuda.jit(device=True, inline=True)
    def issue_tile_lean(k_rows, v_rows, block_tables, s, kv_head, kv_heads, t, end, lane, ring, base):
        if t < end:
            first_row = 0
            if ONE_PAGE:
                first_row = (block_tables[s, t // BS] * kv_heads + kv_head) * BS + t % BS
            left = uint64(end - t)                          # tokens of the context from t on (numba's unsigned
            # arithmetic is 64 bits wide; an unsigned and a signed integer meet as float64, so each side keeps one)
            for n in range(COPIES):
                c = uint32(lane) + uint32(WARP * n)
                r = (c // uint32(CHUNKS)) % uint32(TILE_TOKENS)
                chunk = c % uint32(CHUNKS)
                valid = r < left
                row = 0
                if valid:
                    if ONE_PAGE:
                        row = first_row + int64(r)
                    else:
                        token = t + int64(r)
                        row = (block_tables[s, token // BS] * kv_heads + kv_head) * BS + token % BS
                col = uint32(4) * ((chunk + r // uint32(SPREAD)) % uint32(CHUNKS))
                if c < uint32(TILE_TOKENS * CHUNKS):         # K's copies first, then V's
                    cp_async_16(ring, uint32(base) + r, col, k_rows, row, uint32(8) * chunk, valid)
                else:
                    cp_async_16(ring, uint32(base + TILE_TOKENS) + r, col, v_rows, row, uint32(8) * chunk, valid)
        cp_async_commit_group()

    @cuda.jit(device=True, inline=True)
    def word_of_lean(ring, row, r, w):
        col = uint32(4) * ((w // uint32(2) + r // uint32(SPREAD)) % uint32(CHUNKS)) + uint32(2) * (w % uint32(2))
        low, high = load_shared_u32x2(ring, row, col)
        return uint64(low) | (uint64(high) << uint64(32))

    @cuda.jit(device=True, inline=True)
    def read_tile_lean(ring, base, g, tq, k_raw, v_raw):
        g, tq, base = uint32(g), uint32(tq), uint32(base)
        for b in range(2):
            r = uint32(8 * b) + g
            for j in range(KCH):
                w = tq + uint32(4 * j)
                k_raw[b, j, 0] = (word_of_lean(ring, base + r, r, w) if K_FULL or uint64(8) * w < uint64(D)
                                  else uint64(0))
            for e in range(2):
                r = uint32(8 * b + e) + uint32(2) * tq
                for i in range(VCH):
                    w = g + uint32(8 * i)
                    v_raw[b, e, i, 0] = (word_of_lean(ring, base + uint32(TILE_TOKENS) + r, r, w)
                                         if V_FULL or uint64(8) * w < uint64(D) else uint64(0))

    issue = issue_tile_lean if lean else issue_tile
    read = read_tile_lean if lean else read_tile

    def gqa_decode_fp8_ring_kernel(q, k_rows, v_rows, k_scales, v_scales, block_tables, context_lens, scale,
                                   partition_size, kv_heads, partial_max, partial_sum, partial_acc):
        s, p, kv_head, first, n_heads, start, end = block_work(q, kv_heads, context_lens, partition_size)
        tid = cuda.threadIdx.x
        warp = tid // WARP
        lane = tid % WARP
        g = lane >> 2
        tq = lane & 3
        ring = cuda.shared.array((RING_ROWS, ROW_WORDS), uint32, alignment=16)     # cp.async writes 16 bytes
        mine = warp * slots * TILE_ROWS                 # this warp's slots: rows mine + TILE_ROWS * slot ...

        qa = cuda.local.array((KSTEPS, 4), uint32)
        inv_f = query_fragments(q, s, first, n_heads, scale, g, tq, qa)
        pv_unit = v_unit(v_scales, block_tables, s, kv_head, start, end, lane)
        acc = cuda.local.array((MBLOCKS, 4), float32)
        for m in range(MBLOCKS):
            for x in range(4):
                acc[m, x] = float32(0.0)
        k_raw = cuda.local.array((2, KCH, 1), uint64)
        v_raw = cuda.local.array((2, 2, VCH, 1), uint64)
        k_sc = cuda.local.array((2, 2), float32)
        v_sc = cuda.local.array((2, 2), float32)
        for b in range(2):
            for e in range(2):
                k_sc[b, e] = v_sc[b, e] = float32(1.0)
        running_max = float32(-math.inf)
        running_sum = float32(0.0)

        # Tiles from start + 16 warp, STEP tokens apart; the warp's tile n goes to slot n % 3. Two tiles are issued
        # before the loop; each turn issues the tile two ahead, loads the page scales of the oldest, waits until
        # its copies have landed (at most the two newer groups in flight), reads it into registers and computes it.
        t0 = start + warp * TILE_TOKENS
        issue(k_rows, v_rows, block_tables, s, kv_head, kv_heads, t0, end, lane, ring, mine)
        issue(k_rows, v_rows, block_tables, s, kv_head, kv_heads, t0 + STEP, end, lane, ring, mine + TILE_ROWS)
        slot = 0
        while t0 < end:
            ahead = slot - 1 if slot > 0 else 2                 # the slot of tile t0 + 2 STEP: (slot + 2) % 3
            issue(k_rows, v_rows, block_tables, s, kv_head, kv_heads, t0 + 2 * STEP, end, lane, ring,
                       mine + TILE_ROWS * ahead)
            tile_scales(k_scales, v_scales, block_tables, s, kv_head, t0, end, tq, k_sc, v_sc)
            cp_async_wait_group(2)
            cuda.syncwarp(FULL_MASK)                            # every lane's copies of tile t0 have landed
            read(ring, mine + TILE_ROWS * slot, g, tq, k_raw, v_raw)
            cuda.syncwarp(FULL_MASK)                            # read by every lane before the slot is refilled
            running_max, running_sum = compute_tile(qa, k_raw, v_raw, k_sc, v_sc, t0, end, tq, inv_f, pv_unit,
                                                    running_max, running_sum, acc)
            t0 += STEP
            slot = slot + 1 if slot < 2 else 0
        cp_async_wait_group(0)

        running_sum += cuda.shfl_xor_sync(FULL_MASK, running_sum, 1)
        running_sum += cuda.shfl_xor_sync(FULL_MASK, running_sum, 2)
        cuda.syncthreads()                                      # every warp is done with its slots
        if tq == 0:
            put(ring, max_word(warp, g), running_max)
            put(ring, sum_word(warp, g), running_sum)
        store_accumulators(acc, pv_unit, warp, tq, g, ring)
        merge(ring, partial_max, partial_sum, partial_acc, s, first, p, n_heads, D, tid)

    if lean:
        name = "gqa_decode_fp8_lean_ring_kernel"
        gqa_decode_fp8_ring_kernel.__name__ = gqa_decode_fp8_ring_kernel.__qualname__ = name
    return cuda.jit(gqa_decode_fp8_ring_kernel, launch_bounds=(THREADS, min_blocks))


def gqa_decode_fp8_ring_kernel(head_dim: int, block_size: int = 16):
    """The ring decode kernel for a head_dim and a page size, compiled on first use and kept."""
    key = (int(head_dim), int(block_size), False)
    if key not in _RING_KERNELS:
        _RING_KERNELS[key] = _build_ring_kernel(*key[:2])
    return _RING_KERNELS[key]


def gqa_decode_fp8_lean_ring_kernel(head_dim: int, block_size: int = 16):
    """The lean ring's decode kernel (``_build_ring_kernel(lean=True)``) for a head_dim and a page size, compiled on
    first use and kept."""
    key = (int(head_dim), int(block_size), True)
    if key not in _RING_KERNELS:
        _RING_KERNELS[key] = _build_ring_kernel(*key[:2], lean=True)
    return _RING_KERNELS[key]


def _code_rows(cache, head_dim: int):
    """An fp8 cache (num_blocks, kv_heads, block_size, head_dim) of uint8 codes as rows of 16-bit words, one row a
    token of a KV head, the form ``cp_async_16`` copies from (no copy)."""
    rows = cache.size // head_dim
    return cache.reshape(cache.size).view(np.uint16).reshape(rows, head_dim // 2)


def gqa_decode_fp8_ring(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                        scale=None, out=None, partition_size=None, max_context=None,
                        kernel=gqa_decode_fp8_ring_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache of fp8 e4m3 codes, each warp's next tiles copied into a ring in shared
    memory while it computes one on tensor cores; returns out (num_seqs, heads, head_dim) float32, the bits
    ``gqa_decode_tensor_cores`` gives at the same ``partition_size``.

    The arguments of ``gqa_decode_tensor_cores`` with an fp8 cache only; head_dim a multiple of 16 up to 128 and
    ``partition_size`` a multiple of 16 (None: ``tensor_partition_size``). ``kernel`` is a function of the head_dim
    and the page size."""
    return _launch("gqa_decode_fp8_ring", q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale,
                   out, partition_size, max_context, kernel, merge_kernel)


def gqa_decode_fp8_lean_ring(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                             scale=None, out=None, partition_size=None, max_context=None,
                             kernel=gqa_decode_fp8_lean_ring_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """``gqa_decode_fp8_ring``'s step with its copies' and reads' index arithmetic in unsigned integers and each
    8-byte word of a slot read by one load; the same arguments, the same bits."""
    return _launch("gqa_decode_fp8_lean_ring", q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales,
                   scale, out, partition_size, max_context, kernel, merge_kernel)


def _launch(rung, q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out, partition_size,
            max_context, kernel, merge_kernel):
    out, step = prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                               partition_size, max_context, channels=_CHUNK, refused=_refused(rung),
                               tokens=lambda *_: (TILE_TOKENS, f"{TILE_TOKENS} (a warp's tile of tokens never "
                                                               f"crosses a partition)"),
                               choose_partition=tensor_partition_size)
    if step is None:
        return out
    if not config.ENABLE_CUDASIM and cuda.is_available():
        have = tuple(cuda.get_current_device().compute_capability)
        if have < (8, 9):
            raise ValueError(f"k_cache: an fp8 cache needs compute capability 8.9 or later for {rung}, "
                             f"this GPU has {have[0]}.{have[1]}: use gqa_decode_half_warps")
    kernel(step.head_dim, step.block_size)[step.grid, THREADS](
        q, _code_rows(k_cache, step.head_dim), _code_rows(v_cache, step.head_dim), step.k_scales, step.v_scales,
        block_tables, context_lens, step.scale, step.partition_size, step.kv_heads, *step.partials)
    merge_kernel[(step.heads, step.num_seqs), HEAD_DIM_MAX](*step.partials, out)
    return out
