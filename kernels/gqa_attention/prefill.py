"""Day 7's prefill rungs, ``gqa_prefill_tiles`` and ``gqa_prefill_flash`` (the ladder and its order:
``kernels.gqa_attention``): flash attention whose block serves the query heads of a group.

Inputs (``q, o: (batch, heads, n_queries, head_dim)``, ``k, v: (batch, kv_heads, n_keys,
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
  registers, ``2 * head_dim`` floats: at head_dim 128 the kernel compiles to all 255 registers, with
  248 bytes a thread spilled to local memory (recording ``course/data/day07_kernel_resources.json``), so
  the SM's 64K registers hold 256 such threads, and a block of 512 would not launch at all. Day 5's v5
  fits 4 blocks of 64, 256 threads, on an SM too: the larger block costs no occupancy. The scores stay in shared memory
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
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from kernels.flash_attention import TILE_Q
from kernels.launching import (cdiv, default_scale, output_array, require_bool, require_float32, require_kv_heads,
                               require_same_kind)
# Both rungs take head_dim up to 128, day 6's limit (HEAD_DIM_MAX).
from kernels.paged_attention import HEAD_DIM_MAX
# kv_lens checked and defaulted as day 5's launchers do.
from kernels.paging import prepare_kv_lens

__all__ = ["TILE_POS", "ROWS_MAX", "TILE_KV", "check_gqa_shapes", "prefill_tiling", "prefill_tiling_on_device",
           "prefill_block", "prefill_grid", "prefill_shared_bytes", "gqa_prefill_flash_kernel",
           "gqa_prefill_tiles_kernel", "gqa_prefill_tiles", "gqa_prefill_flash"]

# Prefill: query positions per block at most, day 5's tile (with group 1 the rung is day 5's v5).
TILE_POS = TILE_Q
# Prefill: rows (threads) per block at most, each with 2 * head_dim floats in registers: a block of
# 256 such threads uses the SM's 64K registers, one of 512 would not launch (see above).
ROWS_MAX = 256
# Prefill: keys per shared-memory tile. The K and V tiles and the scores of ROWS_MAX rows take
# (2 * 16 * 128 + 16 * 256) * 4 B = 32 KiB at head_dim 128, of the 48 KiB of static shared memory
# (day 5's 32 keys would need 64 KiB). The loads from global memory do not depend on it.
TILE_KV = 16


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
                         f"tiles are sized for it), got head_dim {head_dim} in shape {tuple(q.shape)} "
                         f"(day 8's gqa_prefill_wide_heads takes head_dim up to 256)")
    require_kv_heads(heads, kv_heads, q_name="q", kv_name="k")
    require_same_kind(q=q, k=k, v=v)
    return batch, heads, kv_heads, n_queries, n_keys, head_dim


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


# The same on the device: the prefill kernels of day 7 and day 8 call it.
prefill_tiling_on_device = cuda.jit(device=True, inline=True)(prefill_tiling)


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
        subgroups, heads_per_block, positions = prefill_tiling_on_device(group)
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
