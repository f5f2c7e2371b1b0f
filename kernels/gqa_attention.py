"""Grouped-query attention (GQA): K and V have ``kv_heads`` heads, fewer than the ``heads`` of Q.

Query head ``h`` reads KV head ``h // group`` with ``group = heads // kv_heads`` (``DESIGN.md`` §3):
the ``group`` query heads ``kv_head * group ... kv_head * group + group - 1`` share one KV head.
Day 5 and day 6 ran one block per query head, so every query head of a group read the shared
K and V itself. Here one block serves several query heads of a group and reads K and V once for all
of them:

- ``gqa_prefill_flash``: day 5's flash kernel with head_dim fixed at compile time, for K and V of
  ``kv_heads`` heads: one block per tile of ``positions`` query positions times the ``group``
  heads of one KV head, one thread per (position, head) row, so each K and V tile staged in
  shared memory serves every query head of the group at once: K and V are read once per
  ``positions`` positions of a group where day 5 reads them once per 64 positions of each head.
- ``gqa_decode_split_k``: day 6's split-K paged decode with one block per (KV head, sequence,
  partition) instead of per query head: each warp loads a token's K and V once and scores it for
  the up to ``GROUP_MAX`` query heads of its group, so every page is read once per group, not
  once per query head; day 6's merge kernel then combines the partitions.

Prefill (``q, o: (batch, heads, n_queries, head_dim)``, ``k, v: (batch, kv_heads, n_keys,
head_dim)``, causal and ``kv_lens`` exactly as ``attention_v4_flash``). The block's row tile grows
with the group: ``positions * group`` rows, ``positions`` query positions with all heads of the
group, folded position-major (thread ``t`` has position ``t // group``, head ``t % group``). Each
K and V tile loaded into shared memory then serves ``group`` heads at ``positions`` positions, and
K and V cross from global memory ``n_queries / positions`` times per KV head instead of day 5's
``group * n_queries / 64``. (Folding the group into day 5's 64 rows instead would save nothing on
a long prompt: each tile would hold ``64 / group`` positions, and K and V would still be read
``group * n_queries / 64`` times.)

How many positions: ``positions = min(TILE_POS, ROWS_MAX // group)``, ``TILE_POS = 64`` and
``ROWS_MAX = 256`` rows (threads) per block (``prefill_tiling``):

- at most 256 threads, because one thread per row keeps its query row and accumulator in
  registers, ``2 * head_dim`` floats: the kernel compiles to 211 registers at head_dim 64 (day
  5's v5: 201) and to all 255 at 128, with 248 bytes a thread spilled to local memory, so the SM's
  64K registers hold 256 such threads, and a block of 512 would not launch at all. Day 5's v5 fits 4 blocks of 64, 256
  threads, on an SM too: the larger block costs no occupancy. The scores stay in shared memory
  (``TILE_KV * ROWS_MAX`` floats) and the key tile shrinks to ``TILE_KV = 16`` keys, so K, V and
  the scores take 24 KiB at head_dim 64 and 32 KiB at 128, under the 48 KiB a block may allocate
  statically;
- at most 64 positions: with ``group = 1`` the rung is day 5's v5 (tiles of 64 positions of one
  head), and the causal mask wastes no more keys past the diagonal than day 5 does (the block
  loads keys up to its largest position; its positions are consecutive, whatever the group).

So K and V traffic falls by ``group`` up to a group of 4 (Llama 3 8B and 70B: 4 and 8, SmolLM2:
3), and by about 4 beyond (``group * positions / 64``: 3.98 at 5, 4 at 8, 3.94 at 9); a larger
block would buy more only with fewer registers per row. Position-major order keeps the few
positions of a warp together, so the causal mask diverges inside a warp no more than on day 5.
A group larger than ``ROWS_MAX`` (multi-query attention with very many heads) is split into
``ceil(group / ROWS_MAX)`` sub-groups of at most 256 heads, one block each per position (each
reads K and V itself); any group from 1 to ``heads`` works, and ``positions`` need not divide
``n_queries`` (the last tile is partial). ``course.models.gqa`` counts the element loads.

Decode, the layout and the inputs of ``paged_attention_v2_split_k`` (``kernels.paged_attention``)::

    q, out:           (num_seqs, heads, head_dim) float32
    k_cache, v_cache: (num_blocks, kv_heads, block_size, head_dim) float32
    block_tables:     (num_seqs, max_blocks_per_seq) int32
    context_lens:     (num_seqs,) int32

A block keeps, per lane, the query and the accumulator of each of its query heads in registers
(arrays sized ``GROUP_MAX`` when the kernel compiles). A group larger than ``GROUP_MAX`` (multi-query
attention with many heads) is served by ``ceil(group / GROUP_MAX)`` blocks per KV head, each of
which reads the pages once. The partials have day 6's layout ``(num_seqs, heads, partitions)``, so
day 6's merge kernel merges them unchanged.

Launchers accept NumPy arrays or numba device arrays (``kernels.launching``), validate their
inputs (``heads`` must be a multiple of ``kv_heads``), size the grid, launch the kernels given as
``kernel=`` (and ``merge_kernel=``) and return the output. ``head_dim`` is at most ``HEAD_DIM_MAX``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from kernels.flash_attention import TILE_Q, prepare_kv_lens
from kernels.launching import (cdiv, default_scale, is_device_array, output_array, require_bool, require_float32,
                               require_int, require_kv_heads, require_same_kind)
from kernels.paged_attention import HEAD_DIM_MAX as PAGED_HEAD_DIM_MAX
from kernels.paged_attention import (CHANNELS, FULL_MASK, THREADS, WARP, WARPS, check_paged_inputs,
                                     choose_partition_size, paged_attention_v2_merge_kernel, partitions_for)
# Day 6's partial buffers (reused by shape on a GPU) and SM count: v2's partials have this layout too.
from kernels.paged_attention import _partials, _sm_count
from kernels.registry import Rung, ladder

__all__ = ["HEAD_DIM_MAX", "GROUP_MAX", "TOKENS_IN_FLIGHT", "TILE_POS", "ROWS_MAX", "TILE_KV", "check_gqa_shapes",
           "prefill_tiling", "prefill_block", "prefill_grid", "prefill_shared_bytes", "gqa_prefill_flash_kernel",
           "gqa_prefill_flash", "subgroups_for", "decode_grid", "decode_shared_bytes", "gqa_decode_partition_kernel",
           "gqa_decode_split_k", "RUNGS"]

# Both rungs take head_dim up to 128 (day 6's limit).
HEAD_DIM_MAX = PAGED_HEAD_DIM_MAX
# Prefill: query positions per block at most, day 5's tile (with group 1 the rung is day 5's v5).
TILE_POS = TILE_Q
# Prefill: rows (threads) per block at most, each with 2 * head_dim floats in registers: a block of
# 256 such threads uses the SM's 64K registers, one of 512 would not launch (see above).
ROWS_MAX = 256
# Prefill: keys per shared-memory tile. The K and V tiles and the scores of ROWS_MAX rows take
# (2 * 16 * 128 + 16 * 256) * 4 B = 32 KiB at head_dim 128, of the 48 KiB of static shared memory
# (day 5's 32 keys would need 64 KiB). The loads from global memory do not depend on it.
TILE_KV = 16
# Query heads one decode block serves: each lane keeps a query and an accumulator of CHANNELS
# floats per head in registers, 2 * GROUP_MAX * CHANNELS = 64 registers. 8 covers the groups of most
# models (Llama 3: 4 and 8; SmolLM2-135M: 3); a larger group takes ceil(group / 8) blocks per KV head.
GROUP_MAX = 8
# Tokens a decode warp loads before it computes with them: 2, not day 6's 4, as each token now
# carries up to GROUP_MAX heads of work. With 4 the loop over the heads grows past what the
# compiler unrolls, and every per-head array indexed in it moves to local memory (DRAM behind the
# caches): tests/test_day07_kernels.py checks the PTX for local memory.
TOKENS_IN_FLIGHT = 2


def check_gqa_shapes(q, k, v) -> tuple[int, int, int, int, int, int]:
    """Validate float32 q (B, H, N, d), k and v (B, KVH, M, d); return (B, H, KVH, N, M, d).

    ``H`` must be a multiple of ``KVH`` and ``1 <= d <= HEAD_DIM_MAX``. Raises TypeError or
    ValueError naming the argument.
    """
    batch, heads, n_queries, head_dim = require_float32("q", q, (None, None, None, None),
                                                        dims=("batch", "heads", "seq_q", "head_dim"))
    kv_dims = ("batch", "kv_heads", "seq_k", "head_dim")
    _, kv_heads, n_keys, _ = require_float32("k", k, (batch, None, None, head_dim), dims=kv_dims)
    require_float32("v", v, (batch, kv_heads, n_keys, head_dim), dims=kv_dims)
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX: the shared-memory "
                         f"tiles are sized for it), got head_dim {head_dim} in shape {tuple(q.shape)}")
    require_kv_heads(heads, kv_heads, q_name="q", kv_name="k")
    require_same_kind(q=q, k=k, v=v)
    return batch, heads, kv_heads, n_queries, n_keys, head_dim


# ----------------------------------------------------------------------------------------------
# Prefill: tiles of TILE_POS query positions x the heads of a group, which share one KV head
# ----------------------------------------------------------------------------------------------

def prefill_tiling(group: int) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, positions)`` of ``gqa_prefill_flash`` for a group size >= 1.

    ``subgroups = ceil(group / ROWS_MAX)`` blocks share a KV head's group, ``heads_per_block =
    ceil(group / subgroups)`` heads each (the last may hold fewer), and a block takes ``positions =
    min(TILE_POS, ROWS_MAX // heads_per_block)`` query positions: ``positions * heads_per_block
    <= ROWS_MAX`` rows. Plain integer arithmetic, so the kernel calls it too (as a device function).
    """
    subgroups = (group + ROWS_MAX - 1) // ROWS_MAX
    heads_per_block = (group + subgroups - 1) // subgroups
    positions = min(TILE_POS, ROWS_MAX // heads_per_block)
    return subgroups, heads_per_block, positions


_prefill_tiling = cuda.jit(device=True, inline=True)(prefill_tiling)


def prefill_block(heads: int, kv_heads: int) -> int:
    """Threads (rows) of one ``gqa_prefill_flash`` block: ``positions * heads_per_block`` <= ROWS_MAX."""
    _, heads_per_block, positions = prefill_tiling(heads // kv_heads)
    return positions * heads_per_block


def prefill_grid(batch: int, heads: int, kv_heads: int, n_queries: int) -> tuple[int, int, int]:
    """The 3D grid of ``gqa_prefill_flash``: (position tiles, KV heads x sub-groups, batch)."""
    subgroups, _, positions = prefill_tiling(heads // kv_heads)
    return (cdiv(n_queries, positions), kv_heads * subgroups, batch)


def prefill_shared_bytes(head_dim: int = HEAD_DIM_MAX, itemsize: int = 4) -> int:
    """Static shared memory of one prefill block: K and V tiles of ``head_dim``, and the scores of
    ``ROWS_MAX`` rows (the array is sized for the largest block, whatever the group)."""
    return (2 * TILE_KV * head_dim + TILE_KV * ROWS_MAX) * itemsize


_PREFILL_KERNELS: dict = {}


def gqa_prefill_flash_kernel(head_dim: int):
    """The prefill kernel for one ``head_dim`` (1 ... HEAD_DIM_MAX), compiled on first use and kept.

    As day 5's v5, ``head_dim`` is a constant inside the kernel, so the loops over it unroll and
    each thread's query row and accumulator live in registers (at head_dim 128 they are 256 floats,
    more than a thread's 255 registers: the compiler spills part of them).
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"head_dim must lie in [1, {HEAD_DIM_MAX}], got {head_dim}")
    head_dim = int(head_dim)
    if head_dim not in _PREFILL_KERNELS:
        _PREFILL_KERNELS[head_dim] = _build_prefill_kernel(head_dim)
    return _PREFILL_KERNELS[head_dim]


def _build_prefill_kernel(D: int):
    """Day 5's v5 for a block of (position, head) rows: thread t of block (x, y, b) owns position
    x * positions + t // heads_per_block of head t % heads_per_block of sub-group y % subgroups."""

    @cuda.jit
    def kernel(q, k, v, kv_lens, o, scale, causal):
        group = q.shape[1] // k.shape[1]
        subgroups, heads_per_block, positions = _prefill_tiling(group)
        kv_head = cuda.blockIdx.y // subgroups
        first = (cuda.blockIdx.y - kv_head * subgroups) * heads_per_block   # the block's first head of the group
        b = cuda.blockIdx.z
        t = cuda.threadIdx.x
        rows = cuda.blockDim.x                          # positions * heads_per_block
        n_queries = q.shape[2]
        tile_start = cuda.blockIdx.x * positions
        local_position = t // heads_per_block
        position = tile_start + local_position
        head_in_group = first + (t - local_position * heads_per_block)
        h = kv_head * group + head_in_group             # the query head of this row
        k_tile = cuda.shared.array((TILE_KV, D), float32)
        v_tile = cuda.shared.array((TILE_KV, D), float32)
        # scores[j, t]: row t's score for key j of the tile, as on day 5 (consecutive rows,
        # consecutive banks), sized for the largest block.
        scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)
        q_row = cuda.local.array(D, float32)
        acc = cuda.local.array(D, float32)

        active = position < n_queries and head_in_group < group
        for c in range(D):
            q_row[c] = q[b, h, position, c] * scale if active else float32(0.0)
            acc[c] = float32(0.0)
        row_max = float32(-math.inf)
        row_sum = float32(0.0)

        # Keys the block needs: those that exist and, under the causal mask, those up to its
        # largest query position (every head of the block has the same positions).
        kv_end = min(kv_lens[b], k.shape[2])
        if causal:
            kv_end = min(kv_end, tile_start + positions, n_queries)
        for kv_start in range(0, kv_end, TILE_KV):
            n_tile = min(TILE_KV, kv_end - kv_start)
            # One load of the tile serves the block's heads_per_block heads at each of its positions.
            for idx in range(t, n_tile * D, rows):
                j = idx // D
                c = idx - j * D
                k_tile[j, c] = k[b, kv_head, kv_start + j, c]
                v_tile[j, c] = v[b, kv_head, kv_start + j, c]
            cuda.syncthreads()

            # The causal mask follows the row's own position, not the block's.
            n_valid = n_tile
            if causal:
                n_valid = min(n_tile, position - kv_start + 1)
            if active and n_valid > 0:
                tile_max = float32(-math.inf)
                for j in range(n_valid):
                    s = float32(0.0)
                    for c in range(D):
                        s += q_row[c] * k_tile[j, c]
                    scores[j, t] = s
                    tile_max = max(tile_max, s)
                new_max = max(row_max, tile_max)
                correction = math.exp(row_max - new_max)
                row_sum *= correction
                for c in range(D):
                    acc[c] *= correction
                for j in range(n_valid):
                    p = math.exp(scores[j, t] - new_max)
                    row_sum += p
                    for c in range(D):
                        acc[c] += p * v_tile[j, c]
                row_max = new_max
            cuda.syncthreads()

        if active:
            inv_sum = float32(0.0)
            if row_sum > 0:  # a row with no allowed key (kv_lens[b] == 0) gives zeros
                inv_sum = float32(1.0) / row_sum
            for c in range(D):
                o[b, h, position, c] = acc[c] * inv_sum

    return kernel


def gqa_prefill_flash(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                      kernel=gqa_prefill_flash_kernel):
    """Grouped-query flash attention; returns out (B, H, N, d).

    q (B, H, N, d), k and v (B, KVH, M, d) float32, NumPy or device arrays, ``H`` a multiple of
    ``KVH`` (query head h reads KV head h // (H // KVH)) and ``d <= HEAD_DIM_MAX``. ``causal``: key j
    is allowed for query i iff j <= i. ``kv_lens`` (B,) int32: only the first ``kv_lens[b]`` keys
    exist (default: all M). Rows with no allowed key give 0. ``kernel`` is a function of head_dim
    that returns the kernel to launch, as for day 5's v5; blocks have ``prefill_block(H, KVH)``
    threads.
    """
    batch, heads, kv_heads, n_queries, n_keys, head_dim = check_gqa_shapes(q, k, v)
    causal = require_bool("causal", causal)
    lens = prepare_kv_lens(kv_lens, batch, n_keys, like=q)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q)
    if batch and heads and n_queries:
        grid = prefill_grid(batch, heads, kv_heads, n_queries)
        kernel(head_dim)[grid, prefill_block(heads, kv_heads)](q, k, v, lens, out, scale, causal)
    return out


# ----------------------------------------------------------------------------------------------
# Decode: one block per (KV head, sequence, partition) scores each token for its group's heads
# ----------------------------------------------------------------------------------------------

def subgroups_for(group: int) -> int:
    """Blocks per KV head, sequence and partition: ceil(group / GROUP_MAX), at least 1."""
    return max(1, cdiv(group, GROUP_MAX))


def decode_grid(num_seqs: int, heads: int, kv_heads: int, partitions: int) -> tuple[int, int, int]:
    """The grid of ``gqa_decode_partition_kernel``: (KV heads x sub-groups, sequences, partitions)."""
    return (kv_heads * subgroups_for(heads // kv_heads), num_seqs, partitions)


def decode_shared_bytes(itemsize: int = 4) -> int:
    """Static shared memory of one decode block: each warp's maximum, sum and accumulators per head."""
    return (2 * WARPS * GROUP_MAX + WARPS * GROUP_MAX * HEAD_DIM_MAX) * itemsize


@cuda.jit
def gqa_decode_partition_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                                partial_max, partial_sum, partial_acc):
    """Block (x, s, p) serves query heads first ... first + n_heads - 1 of KV head x // subgroups
    over tokens p*partition_size ... of sequence s, and writes their partials in day 6's layout:
    partial_max[s, h, p], partial_sum[s, h, p] and partial_acc[s, h, p, :] (not divided by the sum)."""
    group = q.shape[1] // k_cache.shape[1]
    subgroups = (group + GROUP_MAX - 1) // GROUP_MAX
    kv_head = cuda.blockIdx.x // subgroups
    first = kv_head * group + (cuda.blockIdx.x % subgroups) * GROUP_MAX
    n_heads = min(GROUP_MAX, (kv_head + 1) * group - first)
    s = cuda.blockIdx.y
    p = cuda.blockIdx.z
    tid = cuda.threadIdx.x
    warp = tid // WARP
    lane = tid % WARP
    d = q.shape[2]
    block_size = k_cache.shape[2]
    start = p * partition_size
    end = min(start + partition_size, context_lens[s])    # end <= start: a partition with no token

    # Lane l holds channels l, l + 32, ... of each head's query and accumulator (day 6's layout),
    # for GROUP_MAX heads: every index below is a loop variable of a loop with a constant bound,
    # so the arrays live in registers.
    q_lane = cuda.local.array((GROUP_MAX, CHANNELS), float32)
    acc = cuda.local.array((GROUP_MAX, CHANNELS), float32)
    running_max = cuda.local.array(GROUP_MAX, float32)
    running_sum = cuda.local.array(GROUP_MAX, float32)
    k_regs = cuda.local.array((TOKENS_IN_FLIGHT, CHANNELS), float32)
    v_regs = cuda.local.array((TOKENS_IN_FLIGHT, CHANNELS), float32)
    scores = cuda.local.array(TOKENS_IN_FLIGHT, float32)
    for i in range(GROUP_MAX):
        running_max[i] = float32(-math.inf)
        running_sum[i] = float32(0.0)
        for ch in range(CHANNELS):
            c = lane + ch * WARP
            q_lane[i, ch] = q[s, first + i, c] * scale if i < n_heads and c < d else float32(0.0)
            acc[i, ch] = float32(0.0)
    for u in range(TOKENS_IN_FLIGHT):
        for ch in range(CHANNELS):
            k_regs[u, ch] = float32(0.0)
            v_regs[u, ch] = float32(0.0)

    # Warp w takes tokens start + w, start + w + WARPS, ..., TOKENS_IN_FLIGHT at a time: each token's
    # K and V rows are loaded once, by one warp, and serve all n_heads query heads.
    for t0 in range(start + warp, end, TOKENS_IN_FLIGHT * WARPS):
        for u in range(TOKENS_IN_FLIGHT):
            t = t0 + u * WARPS
            if t < end:
                block = block_tables[s, t // block_size]
                slot = t % block_size
                for ch in range(CHANNELS):
                    c = lane + ch * WARP
                    if c < d:
                        k_regs[u, ch] = k_cache[block, kv_head, slot, c]
                        v_regs[u, ch] = v_cache[block, kv_head, slot, c]
        for i in range(GROUP_MAX):
            if i < n_heads:      # the same for every lane: the warp stays converged for its shuffles
                new_max = running_max[i]
                for u in range(TOKENS_IN_FLIGHT):
                    partial = float32(0.0)
                    for ch in range(CHANNELS):
                        partial += q_lane[i, ch] * k_regs[u, ch]
                    for offset in (16, 8, 4, 2, 1):
                        partial += cuda.shfl_xor_sync(FULL_MASK, partial, offset)
                    scores[u] = partial if t0 + u * WARPS < end else float32(-math.inf)
                    new_max = max(new_max, scores[u])
                correction = math.exp(running_max[i] - new_max)   # new_max is finite: token t0 exists
                running_sum[i] *= correction
                for ch in range(CHANNELS):
                    acc[i, ch] *= correction
                for u in range(TOKENS_IN_FLIGHT):
                    weight = math.exp(scores[u] - new_max)          # 0 for a token past the end
                    running_sum[i] += weight
                    for ch in range(CHANNELS):
                        acc[i, ch] += weight * v_regs[u, ch]
                running_max[i] = new_max

    # The warps' states, head by head, meet in shared memory; then thread tid combines the
    # (head, channel) pairs tid, tid + THREADS, ... of the block (day 6's merge of warps, per head).
    warp_max = cuda.shared.array((WARPS, GROUP_MAX), float32)
    warp_sum = cuda.shared.array((WARPS, GROUP_MAX), float32)
    warp_acc = cuda.shared.array((WARPS, GROUP_MAX, HEAD_DIM_MAX), float32)
    for i in range(GROUP_MAX):
        if i < n_heads:
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
                weight = math.exp(warp_max[w, i] - block_max)
                block_sum += warp_sum[w, i] * weight
                channel += warp_acc[w, i, c] * weight
        if c == 0:
            partial_max[s, first + i, p] = block_max
            partial_sum[s, first + i, p] = block_sum
        partial_acc[s, first + i, p, c] = channel


def gqa_decode_split_k(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                       partition_size=None, max_context=None, kernel=gqa_decode_partition_kernel,
                       merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache, one block per (KV head, sequence, partition), then day 6's
    merge; returns out (num_seqs, heads, head_dim).

    The arguments of ``paged_attention_v2_split_k``: ``partition_size`` (None chooses one that fills
    the GPU with this rung's blocks), ``max_context`` (the longest context: read from
    ``context_lens`` for NumPy inputs, required with device arrays).
    """
    num_seqs, heads, head_dim, kv_heads, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, context_lens)
    scale = default_scale(head_dim, scale)
    if is_device_array(context_lens):
        if max_context is None:
            raise ValueError("max_context must be given with device arrays: the longest context sizes "
                             "the grid, and its value is not copied back from the device")
        longest = require_int("max_context", max_context, minimum=0)
    else:
        longest = int(context_lens.max()) if context_lens.size else 0
        if max_context is not None:
            require_int("max_context", max_context, minimum=longest)
    blocks_per_partition = kv_heads * subgroups_for(heads // kv_heads)
    if partition_size is None:
        partition_size = choose_partition_size(num_seqs, blocks_per_partition, longest, _sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    partial_max, partial_sum, partial_acc = _partials(q, num_seqs, heads, partitions, head_dim)
    kernel[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
        q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
        partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


RUNGS = ladder(
    Rung("gqa_prefill_flash", gqa_prefill_flash,
         "blocks of up to 64 positions x all heads of a group: a K and V tile serves the group at once"),
    Rung("gqa_decode_split_k", gqa_decode_split_k,
         "one block per (KV head, sequence, partition): each page read once per group, scored for all its heads"),
)
