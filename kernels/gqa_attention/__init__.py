"""Grouped-query attention (GQA): K and V have ``kv_heads`` heads, fewer than the ``heads`` of Q.

Query head ``h`` reads KV head ``h // group`` with ``group = heads // kv_heads`` (``docs/design-notes.md`` §2):
the ``group`` query heads ``kv_head * group ... kv_head * group + group - 1`` share one KV head.
Day 5 and day 6 ran one block per query head, so every query head of a group read the shared
K and V itself. Here one block serves several query heads of a group and reads K and V once for all
of them:

- ``gqa_prefill_tiles``: day 5's flash kernel (v4, head_dim read at run time) for K and V of
  ``kv_heads`` heads: one block per tile of ``positions`` query positions times the ``group`` heads
  of one KV head, one thread per (position, head) row, so each K and V tile staged in shared memory
  serves every query head of the group at once. The day's exercise. Its query row and accumulator,
  arrays of HEAD_DIM_MAX floats indexed by a loop bound known only at run time, live in local memory.
- ``gqa_prefill_flash``: the same with head_dim fixed at compile time (day 5's v5), so each row's
  query and accumulator live in registers. K and V are read once per ``positions`` positions of a
  group where day 5 reads them once per 64 positions of each head. On an H100 (B = 2, N = 4,096, 32
  query heads, causal; recording ``course/data/day07_prefill_timing.json``) it takes 29.1 ms at head_dim
  128 over 8 KV heads, 0.92 of torch's fp32 SDPA's speed, and 8.5 ms at head_dim 64, 2.5 times torch's.
- ``gqa_decode_group``: day 6's split-K paged decode with one block per (KV head, sequence,
  partition) instead of per query head: each warp loads a token's K and V once and scores it for
  each of the up to ``GROUP_MAX`` query heads of its group, one butterfly per score, so every page
  is read once per group, not once per query head; day 6's merge kernel then combines the
  partitions. The day's exercise.
- ``gqa_decode_split_k``: the same traffic, fast: a kernel compiled per group size
  (``gqa_decode_partition_kernel(group)``), several tokens in flight and one butterfly for all the
  scores of a batch (``decode``).

The modules: ``prefill`` (the prefill rungs: how a block's rows fold a group's heads and how many
positions a block takes, ``prefill_tiling``, and the check of q, k and v) and ``decode`` (the decode
rungs: their tiling, ``decode_tiling``, what makes the fast one fast, and the device steps day 8's
decode kernels share, ``exchange_halves`` and ``next_pages``). Each module's docstring says how its
rungs work and what they measured.

Launchers accept NumPy arrays or numba device arrays (``kernels.launching``), validate their
inputs (``heads`` must be a multiple of ``kv_heads``), size the grid, launch the kernels given as
``kernel=`` (and ``merge_kernel=``) and return the output. ``head_dim`` is at most ``HEAD_DIM_MAX``.
Everything is importable from this package, as ``kernels.gqa_attention.<name>``.
"""

from __future__ import annotations

# Day 6's constants that the kernels of this day are written with (the exercise's given cells hold them,
# and its hidden tests check them against this package), and the decode partitions of kernels.paging
# (partition_size=None), which day 8's decode launchers share.
from kernels.launching import FULL_MASK, WARP
from kernels.paged_attention import CHANNELS, HEAD_DIM_MAX, THREADS, WARPS
from kernels.paging import DECODE_BLOCKS_PER_SM, DECODE_PARTITION_MAX, decode_partition_size
from kernels.registry import Rung, ladder

from .decode import (GROUP_MAX, TOKENS_IN_FLIGHT, decode_grid, decode_shared_bytes, decode_tiling, exchange_halves,
                     gqa_decode_group, gqa_decode_group_kernel, gqa_decode_partition_kernel, gqa_decode_split_k,
                     next_pages, subgroups_for)
from .prefill import (ROWS_MAX, TILE_KV, TILE_POS, check_gqa_shapes, gqa_prefill_flash, gqa_prefill_flash_kernel,
                      gqa_prefill_tiles, gqa_prefill_tiles_kernel, prefill_block, prefill_grid, prefill_shared_bytes,
                      prefill_tiling, prefill_tiling_on_device)

__all__ = ["HEAD_DIM_MAX", "GROUP_MAX", "TOKENS_IN_FLIGHT", "DECODE_PARTITION_MAX", "DECODE_BLOCKS_PER_SM",
           "TILE_POS", "ROWS_MAX", "TILE_KV", "check_gqa_shapes", "prefill_tiling", "prefill_tiling_on_device",
           "prefill_block", "prefill_grid", "prefill_shared_bytes", "gqa_prefill_tiles_kernel", "gqa_prefill_tiles",
           "gqa_prefill_flash_kernel", "gqa_prefill_flash", "subgroups_for", "decode_tiling", "decode_grid",
           "decode_shared_bytes", "decode_partition_size", "exchange_halves", "next_pages", "gqa_decode_group_kernel",
           "gqa_decode_group", "gqa_decode_partition_kernel", "gqa_decode_split_k", "RUNGS",
           # the constants of day 6 the kernels use
           "WARP", "WARPS", "THREADS", "CHANNELS", "FULL_MASK"]

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
