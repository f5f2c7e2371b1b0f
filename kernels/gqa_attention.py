"""Grouped-query attention (GQA): K and V have ``kv_heads`` heads, fewer than the ``heads`` of Q.

Query head ``h`` reads KV head ``h // group`` with ``group = heads // kv_heads`` (``DESIGN.md`` §3):
the ``group`` query heads ``kv_head * group ... kv_head * group + group - 1`` share one KV head.
Day 5 and day 6 ran one block per query head, so every query head of a group read the shared
K and V itself. Here one block serves several query heads of a group and reads K and V once for all
of them:

- ``gqa_prefill_tiles``: day 5's flash kernel (v4, head_dim read at run time) for K and V of
  ``kv_heads`` heads: one block per tile of ``positions`` query positions times the ``group`` heads
  of one KV head, one thread per (position, head) row, so each K and V tile staged in shared memory
  serves every query head of the group at once. The day's exercise. On an H100 (N = 4,096, B = 2,
  32 query heads over 8, causal) it takes 318 ms at head_dim 128 and 98.8 ms at 64, 11 times the
  next rung: its query row and accumulator, arrays of HEAD_DIM_MAX floats, live in local memory.
- ``gqa_prefill_flash``: the same with head_dim fixed at compile time (day 5's v5), so each row's
  query and accumulator live in registers. K and V are read once per ``positions`` positions of a
  group where day 5 reads them once per 64 positions of each head.
- ``gqa_decode_group``: day 6's split-K paged decode with one block per (KV head, sequence,
  partition) instead of per query head: each warp loads a token's K and V once and scores it for
  each of the up to ``GROUP_MAX`` query heads of its group, one butterfly per score, so every page
  is read once per group, not once per query head; day 6's merge kernel then combines the
  partitions. The day's exercise. On an H100 (16 sequences of 8,192 tokens, head_dim 128, 32 query
  heads) it takes 3.48, 1.26 and 0.84 ms at groups 1, 4 and 8, 2.4 to 3 times the next rung.
- ``gqa_decode_split_k``: the same traffic, fast: a kernel compiled per group size
  (``gqa_decode_partition_kernel(group)``), several tokens in flight and one butterfly for all the
  scores of a batch (below).

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
  summed together, lanes trading halves of them at each step (``_exchange``), with 15 + 1 shuffles
  for 16 scores where summing each alone takes 5 x 16; then every lane holds one whole score and
  does the online softmax for it, one exponential per lane, and the accumulators read the weights
  from the lanes that hold them (one shuffle each). A batch that raises no head's maximum skips
  the rescaling of the accumulators (a warp vote);
- cheap addresses: a token's K and V rows are indexed with unsigned integers (numba adds no
  wraparound for negative indices, and the lane's channels are constant offsets from the row), and
  its block-table entry is read one batch ahead, by a walk along the table without divisions;
- long partitions (``decode_partition_size``): up to 1,024 tokens where the grid stays large.

On an H100 (16 sequences of 8,192 tokens, head_dim 128, 32 query heads, fp32, shuffled pages of 16)
the first version of this kernel, arrays sized ``GROUP_MAX``, 2 tokens in flight and one butterfly
per score at any group, took 3.33, 1.25 and 0.94 ms at groups 1, 4 and 8 (177 registers, so 2
blocks per SM: 0.43, 0.29 and 0.19 of the copy bandwidth, counting K and V once per group). This
one takes 1.43, 0.45 and 0.28 ms (1.01, 0.79 and 0.64 of the copy bandwidth; 64, 128 and 121
registers, no local memory); day 6's v2, one block per query head, takes 1.46 ms at group 1. At a
group of 8 the time no longer halves with the bytes: each token carries 8 heads of work, and the
kernel is bound by its instructions and their latency rather than by memory (a quarter to a third
of the instructions of its loop are numba's 64-bit index arithmetic).

Launchers accept NumPy arrays or numba device arrays (``kernels.launching``), validate their
inputs (``heads`` must be a multiple of ``kv_heads``), size the grid, launch the kernels given as
``kernel=`` (and ``merge_kernel=``) and return the output. ``head_dim`` is at most ``HEAD_DIM_MAX``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32

from kernels.flash_attention import TILE_Q, prepare_kv_lens
from kernels.launching import (cdiv, default_scale, output_array, require_bool, require_float32,
                               require_int, require_kv_heads, require_same_kind)
from kernels.paged_attention import HEAD_DIM_MAX as PAGED_HEAD_DIM_MAX
from kernels.paged_attention import (CHANNELS, FULL_MASK, MIN_PARTITION_SIZE, PARTITION_SIZE, THREADS, WARP, WARPS,
                                     check_paged_inputs, longest_context, paged_attention_v2_merge_kernel, partitions_for)
# Day 6's partial buffers (reused by shape on a GPU) and SM count: v2's partials have this layout too.
from kernels.paged_attention import _partials, _sm_count
from kernels.registry import Rung, ladder

__all__ = ["HEAD_DIM_MAX", "GROUP_MAX", "TOKENS_IN_FLIGHT", "DECODE_PARTITION_MAX", "DECODE_BLOCKS_PER_SM",
           "TILE_POS", "ROWS_MAX", "TILE_KV", "check_gqa_shapes", "prefill_tiling", "prefill_block", "prefill_grid",
           "prefill_shared_bytes", "gqa_prefill_tiles_kernel", "gqa_prefill_tiles", "gqa_prefill_flash_kernel",
           "gqa_prefill_flash", "subgroups_for", "decode_tiling",
           "decode_grid", "decode_shared_bytes", "decode_partition_size", "gqa_decode_group_kernel", "gqa_decode_group",
           "gqa_decode_partition_kernel",
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
# Decode partitions (partition_size=None): the largest of DECODE_PARTITION_MAX, half of it, ... down to
# day 6's 64 whose grid still gives each SM DECODE_BLOCKS_PER_SM blocks (1.5 waves of the 4 blocks an
# SM holds). Longer than day 6's 512 where the grid allows: a block pays about one batch's latency
# before its first score and a merge at its end, and at 16 x 8,192 tokens the group of 4 took 0.497,
# 0.468 and 0.455 ms with partitions of 256, 512 and 1,024, the group of 8 0.359, 0.307 and 0.282 ms
# with 128, 256 and 512.
DECODE_PARTITION_MAX = 1024
DECODE_BLOCKS_PER_SM = 6


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


@cuda.jit
def gqa_prefill_tiles_kernel(q, k, v, kv_lens, o, scale, causal):
    """Block (x, y, b): query positions x * positions ... of the heads_per_block query heads
    (y % subgroups) * heads_per_block ... of KV head y // subgroups (``prefill_tiling``); thread t
    owns position t // heads_per_block of head t % heads_per_block of them. Each K and V tile is
    loaded into shared memory once and serves every row of the block."""
    group = q.shape[1] // k.shape[1]
    # prefill_tiling(group): sub-groups of at most ROWS_MAX heads, at most TILE_POS positions
    subgroups = (group + ROWS_MAX - 1) // ROWS_MAX
    heads_per_block = (group + subgroups - 1) // subgroups
    positions = min(TILE_POS, ROWS_MAX // heads_per_block)
    kv_head = cuda.blockIdx.y // subgroups
    first = (cuda.blockIdx.y - kv_head * subgroups) * heads_per_block   # the block's first head of the group
    b = cuda.blockIdx.z
    t = cuda.threadIdx.x
    rows = cuda.blockDim.x                          # positions * heads_per_block
    n_queries = q.shape[2]
    d = q.shape[3]
    tile_start = cuda.blockIdx.x * positions
    local_position = t // heads_per_block
    position = tile_start + local_position
    head_in_group = first + (t - local_position * heads_per_block)
    h = kv_head * group + head_in_group             # the query head of this row
    k_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)     # scores[j, t]: row t, key j of the tile
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)

    active = position < n_queries and head_in_group < group
    for c in range(d):
        q_row[c] = q[b, h, position, c] * scale if active else float32(0.0)
        acc[c] = float32(0.0)
    row_max = float32(-math.inf)
    row_sum = float32(0.0)

    # The keys the block needs: those that exist and, under the causal mask, those up to its last
    # query position (all heads of the block share its positions).
    kv_end = min(kv_lens[b], k.shape[2])
    if causal:
        kv_end = min(kv_end, tile_start + positions, n_queries)
    for kv_start in range(0, kv_end, TILE_KV):
        n_tile = min(TILE_KV, kv_end - kv_start)
        # Every thread loads elements t, t + rows, ...: the block has fewer rows than a tile has
        # elements whenever TILE_KV * d > rows.
        for idx in range(t, n_tile * d, rows):
            j = idx // d
            c = idx - j * d
            k_tile[j, c] = k[b, kv_head, kv_start + j, c]
            v_tile[j, c] = v[b, kv_head, kv_start + j, c]
        cuda.syncthreads()

        n_valid = n_tile
        if causal:
            n_valid = min(n_tile, position - kv_start + 1)
        if active and n_valid > 0:
            tile_max = float32(-math.inf)
            for j in range(n_valid):
                score = float32(0.0)
                for c in range(d):
                    score += q_row[c] * k_tile[j, c]
                scores[j, t] = score
                tile_max = max(tile_max, score)
            new_max = max(row_max, tile_max)
            correction = math.exp(row_max - new_max)
            row_sum *= correction
            for c in range(d):
                acc[c] *= correction
            for j in range(n_valid):
                p = math.exp(scores[j, t] - new_max)
                row_sum += p
                for c in range(d):
                    acc[c] += p * v_tile[j, c]
            row_max = new_max
        cuda.syncthreads()          # the tile is read by every row before the next one replaces it

    if active:
        inv_sum = float32(0.0)
        if row_sum > 0:  # a row with no allowed key (kv_lens[b] == 0) gives zeros
            inv_sum = float32(1.0) / row_sum
        for c in range(d):
            o[b, h, position, c] = acc[c] * inv_sum


def _launch_prefill(q, k, v, causal, kv_lens, scale, out, kernel_for) -> np.ndarray:
    """Validate, then launch ``kernel_for(head_dim)`` with the prefill grid: both prefill rungs."""
    batch, heads, kv_heads, n_queries, n_keys, head_dim = check_gqa_shapes(q, k, v)
    causal = require_bool("causal", causal)
    lens = prepare_kv_lens(kv_lens, batch, n_keys, like=q)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q)
    if batch and heads and n_queries:
        grid = prefill_grid(batch, heads, kv_heads, n_queries)
        kernel_for(head_dim)[grid, prefill_block(heads, kv_heads)](q, k, v, lens, out, scale, causal)
    return out


def gqa_prefill_tiles(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                      kernel=gqa_prefill_tiles_kernel):
    """Grouped-query flash attention with head_dim read at run time; returns out (B, H, N, d).

    The arguments and the grid of ``gqa_prefill_flash``; ``kernel`` is launched as it is (the day's
    exercise). Its query row and accumulator are arrays of ``HEAD_DIM_MAX`` floats, which the
    compiler keeps in local memory: the next rung fixes head_dim at compile time.
    """
    return _launch_prefill(q, k, v, causal, kv_lens, scale, out, lambda head_dim: kernel)


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
    return _launch_prefill(q, k, v, causal, kv_lens, scale, out, kernel)


# ----------------------------------------------------------------------------------------------
# Decode: one block per (KV head, sequence, partition) scores each token for its group's heads
# ----------------------------------------------------------------------------------------------

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


def decode_partition_size(num_seqs: int, blocks_per_partition: int, longest: int, sm_count: int | None) -> int:
    """Tokens per partition when ``partition_size`` is None: the largest of ``DECODE_PARTITION_MAX``,
    half of it, ... (at least 64) whose grid of ``num_seqs * blocks_per_partition`` blocks per
    partition gives each SM ``DECODE_BLOCKS_PER_SM`` blocks. Without an SM count (the simulator), day
    6's ``PARTITION_SIZE``."""
    if not sm_count:
        return PARTITION_SIZE
    size = DECODE_PARTITION_MAX
    while (size > MIN_PARTITION_SIZE
           and num_seqs * blocks_per_partition * partitions_for(longest, size) < DECODE_BLOCKS_PER_SM * sm_count):
        size //= 2
    return size


_DECODE_KERNELS: dict = {}


def gqa_decode_partition_kernel(group: int):
    """The decode kernel for a group size (query heads per KV head), compiled on first use and kept.

    The kernel is specialized on ``heads_per_block`` and ``tokens_in_flight`` (``decode_tiling``):
    each lane's queries and accumulators are arrays of exactly the block's heads, and every loop over
    heads, tokens and channels has a constant bound, so all of them unroll into registers (no local
    memory; tests/test_day07_kernels.py checks the PTX). Groups with the same tiling (9 and 10:
    blocks of 5 heads) share one kernel.
    """
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an int, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group must be >= 1, got {group}")
    _, heads_per_block, tokens = decode_tiling(int(group))
    key = (heads_per_block, tokens)
    if key not in _DECODE_KERNELS:
        _DECODE_KERNELS[key] = _build_decode_kernel(heads_per_block, tokens)
    return _DECODE_KERNELS[key]


@cuda.jit(device=True, inline=True)
def _exchange(scores, half, offset, lane):
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
def _next_pages(block_tables, s, first, end, block_size, page_index, slot, pages, slots):
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


def _build_decode_kernel(G: int, T: int):
    """Block (x, s, p) serves query heads first ... first + n_heads - 1 (at most ``G``) of KV head
    x // subgroups over tokens p*partition_size ... of sequence s, ``T`` tokens per warp at a time,
    and writes their partials in day 6's layout: partial_max[s, h, p], partial_sum[s, h, p] and
    partial_acc[s, h, p, :] (not divided by the sum).

    A batch of ``T`` tokens gives a lane ``N = G * T`` partial dot products (score j: head j // T,
    token j % T). The butterfly of ``_exchange`` sums them over the warp with ``NPAD - 1`` shuffles
    (``NPAD``: N rounded up to a power of two, at most 32), after which lane l holds the whole score
    ``l >> SHIFT`` (``SHIFT = 5 - log2 NPAD``: ``2**SHIFT`` lanes hold each score). The online
    softmax is then done where the scores are: each lane keeps the running maximum of its head and
    the running sum of its token slot, and computes one weight (and, when its head's maximum grew,
    one correction); the accumulators, which every lane keeps for its channels of all G heads, then
    read each weight and correction from its lane with one shuffle.
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

    @cuda.jit
    def gqa_decode_partition_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
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
        page_index, slot = _next_pages(block_tables, s, start + warp, end, block_size, page_index, slot,
                                       pages, slots)
        for t0 in range(start + warp, end, T * WARPS):
            for u in range(T):
                if t0 + u * WARPS < end:
                    _load_token(k_cache, v_cache, pages[u], kv_head, slots[u], lane, d, k_regs, v_regs, u)
            page_index, slot = _next_pages(block_tables, s, t0 + T * WARPS, end, block_size, page_index, slot,
                                           pages, slots)
            for j in range(NPAD):
                partial = float32(0.0)
                if j < N:
                    for ch in range(CHANNELS):
                        partial += q_lane[j // T, ch] * k_regs[j % T, ch]
                scores[j] = partial
            # NPAD - 1 shuffles leave one sum of 32 / NPAD lanes in each lane; the steps left sum those.
            if LOG_NPAD > 0:
                _exchange(scores, NPAD >> 1, 16, lane)
            if LOG_NPAD > 1:
                _exchange(scores, NPAD >> 2, 8, lane)
            if LOG_NPAD > 2:
                _exchange(scores, NPAD >> 3, 4, lane)
            if LOG_NPAD > 3:
                _exchange(scores, NPAD >> 4, 2, lane)
            if LOG_NPAD > 4:
                _exchange(scores, NPAD >> 5, 1, lane)
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

    return gqa_decode_partition_kernel


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
    """Validate, then launch ``kernel_for(group)`` on the decode grid and the merge: both decode rungs."""
    num_seqs, heads, head_dim, kv_heads, _ = check_paged_inputs(q, k_cache, v_cache, block_tables, context_lens)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    blocks_per_partition = kv_heads * subgroups_for(heads // kv_heads)
    if partition_size is None:
        partition_size = decode_partition_size(num_seqs, blocks_per_partition, longest, _sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    partial_max, partial_sum, partial_acc = _partials(q, num_seqs, heads, partitions, head_dim)
    kernel_for(heads // kv_heads)[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
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


RUNGS = ladder(
    Rung("gqa_prefill_tiles", gqa_prefill_tiles,
         "blocks of up to 64 positions x the heads of a group share each K and V tile; head_dim read at run time"),
    Rung("gqa_prefill_flash", gqa_prefill_flash,
         "blocks of up to 64 positions x all heads of a group: a K and V tile serves the group at once"),
    Rung("gqa_decode_group", gqa_decode_group,
         "one block per (KV head, sequence, partition): each token loaded once, scored for each head of the group"),
    Rung("gqa_decode_split_k", gqa_decode_split_k,
         "one block per (KV head, sequence, partition): each page read once per group, scored for all its heads"),
)
