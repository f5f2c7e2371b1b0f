"""Mixed precision: attention whose tensors are stored in 16 or 8 bits and computed in float32 (day 8).

Day 7's kernels read and write float32. These do the same work on tensors stored in a narrower
format: a value is converted to float32 when it is loaded, all arithmetic (the scores, the running
maximum and sum, the accumulator) is float32, and a result is rounded to its storage format once,
when it is stored. Half the bytes (fp16, bf16) or about a quarter (fp8) are stored, and the error
is the storage format's rounding, not an accumulation of it (``docs/design-notes.md`` §5). The rungs,
each module's docstring saying what it adds and what it measured:

- ``gqa_prefill_mixed_tiles`` (``prefill``): day 7's ``gqa_prefill_tiles`` on q, k, v and o stored in fp16
  or bf16, converted as they are loaded; head_dim read at run time. The day's exercise.
- ``gqa_prefill_mixed_precision`` (``prefill``): day 7's ``gqa_prefill_flash`` so: head_dim fixed at
  compile time, each row's query and accumulator in registers.
- ``gqa_prefill_wide_heads`` (``wide_heads``): head_dim up to 256 (``WIDE_HEAD_DIM_MAX``): past 128, two
  threads share a row, each with every other channel of its query and accumulator, and tiles of 8 keys.
- ``gqa_prefill_tensor_cores`` (``tensor_core_prefill``): FlashAttention-2 on ``mma.sync`` m16n8k16 for fp16 and
  bf16 tensors: a warp's 16 query rows in registers, K and V tiles of 64 keys copied by cp.async, P rounded to
  the tensors' format and fed from the score mma's accumulators to the P V mma, V through ldmatrix ``.trans``.
- ``gqa_decode_mixed_group`` (``decode``): day 7's ``gqa_decode_group`` over a paged cache stored in fp16,
  each element converted once per block. The day's exercise.
- ``gqa_decode_mixed_precision`` (``decode``): day 7's ``gqa_decode_split_k`` with tokens in flight over a
  cache of fp16 or of fp8 e4m3 codes with a scale per page.
- ``gqa_decode_page_runs`` (``page_runs``): each warp on runs of consecutive tokens of a page, one table
  read a run, rows read as packed words.
- ``gqa_decode_half_warps`` (``half_warps``): half a warp per token, head_dim and the page size compiled
  in, fp8 decoded by PTX's ``cvt.rn.f16x2.e4m3x2``.
- ``gqa_decode_tensor_cores`` (``tensor_cores``): the scores and weighted sums as ``mma.sync`` through
  inline PTX, q and the weights as fp16 hi + lo, float32 sums; its partitions from a fitted model
  (``partitions``).
- ``gqa_decode_wide_heads`` (``wide_heads``): the half-warp rung with head_dim up to 256, a whole warp a token
  past 128 (8 channels a lane either way), and a bf16 cache, decoded from its words by shifts.
- ``gqa_decode_fp8_ring`` (``fp8_ring``): the tensor-core rung's steps on an fp8 cache, each warp's next two
  tiles copied by cp.async into a ring in shared memory while it computes one: twice the bytes in flight.
- ``gqa_decode_fp8_lean_ring`` (``fp8_ring``): the ring with its copies' and reads' indices unsigned and each
  8-byte word of a slot read by one load: the ring's bits for far fewer instructions a tile.
- ``gqa_decode_fp8_deep`` (``fp8_deep``): the tensor-core rung on fp8 with three tiles in registers a warp (two in
  flight), 16-byte loads, one weight mma a block of V for blocks of at most 4 heads and two chains of score mma.

Tools that build and read an fp8 cache (``fp8``; kernels with launchers of the same pattern, not rungs of
the ladder: their outputs are bits, checked bit for bit, where the registry's check compares floats):

- ``fp8_quantize``: float32 to e4m3 codes (uint8) with one scale per group (a page of a KV head), round to
  nearest even, saturating; the given scales or ``amax / 448`` per group. The day's exercise.
- ``fp8_dequantize``: codes and scales back to float32, ``code value * scale``.

The modules: ``prefill``, ``decode``, ``page_runs``, ``half_warps``, ``tensor_cores``, ``wide_heads``,
``tensor_core_prefill``, ``fp8_ring``, ``fp8_deep`` (the rungs, as above), ``fp8`` (the e4m3 codec and the
tools), ``partitions`` (the tensor-core decode's partition model) and ``common`` (what the decode rungs share:
the cache formats and their checks, a decode step's sizing, the device steps of their kernels, and the layout of
a decode step). The instructions numba cannot write
(bit casts, fp8 conversions, byte permutes, the mma) are ``kernels.intrinsics``.

Launchers accept NumPy arrays or numba device arrays, validate every argument (errors name it), size the
grid as day 7 does, launch the kernels given as ``kernel=`` (and ``merge_kernel=``) and return the output.
Everything is importable from this package, as ``kernels.low_precision_attention.<name>``.
"""
from __future__ import annotations

# Day 6's and day 7's constants that the kernels of this day are written with (the exercise's given cells
# hold them, and its hidden tests check them against this package).
from kernels.gqa_attention import GROUP_MAX, HEAD_DIM_MAX, ROWS_MAX, TILE_KV, TILE_POS
from kernels.launching import FULL_MASK, WARP
from kernels.paged_attention import CHANNELS, THREADS, WARPS
from kernels.registry import Rung, ladder

from .common import (CACHE_FORMATS, WIDE_CACHE_FORMATS, WIDE_HEAD_DIM_MAX, cache_format, cache_words,
                     check_decode_inputs, fp8_words)
from .decode import (TOKENS_IN_FLIGHT, decode_tiling, gqa_decode_mixed_group, gqa_decode_mixed_group_kernel,
                     gqa_decode_mixed_precision, gqa_decode_mixed_precision_kernel)
from .fp8 import (E4M3_MAX, E4M3_MIN_NORMAL, FP8_THREADS, FP8_WARPS, fp8_dequantize, fp8_dequantize_kernel,
                  fp8_quantize, fp8_quantize_kernel)
from .half_warps import (HALF, HALF_CHANNELS, HALF_MIN_BLOCKS, HALF_RUN_TOKENS, gqa_decode_half_warps,
                         gqa_decode_half_warps_kernel, half_warp_tiling)
from .page_runs import RUN_TOKENS, gqa_decode_page_runs, gqa_decode_page_runs_kernel, run_tiling
from .partitions import (TENSOR_BLOCK_COST, TENSOR_BLOCKS_PER_SM, TENSOR_PARTITION_MIN, TENSOR_SM_RATES,
                         tensor_partition_size)
from .prefill import (PREFILL_DTYPES, check_prefill_inputs, gqa_prefill_mixed_precision,
                      gqa_prefill_mixed_precision_kernel, gqa_prefill_mixed_tiles, gqa_prefill_mixed_tiles_kernel)
from .tensor_core_prefill import (TENSOR_PREFILL_FORMATS, TENSOR_PREFILL_HEAD_DIM_STEP, TENSOR_PREFILL_KEYS,
                                  TENSOR_PREFILL_ROWS, TENSOR_PREFILL_THREADS, TENSOR_PREFILL_WARPS,
                                  gqa_prefill_tensor_cores, gqa_prefill_tensor_cores_kernel, tensor_prefill_grid,
                                  tensor_prefill_shared_bytes)
from .tensor_cores import (P_UNIT, Q_UNIT, TENSOR_MIN_BLOCKS, TILE_TOKENS, gqa_decode_tensor_cores,
                           gqa_decode_tensor_cores_kernel, tensor_core_steps)
from .fp8_ring import (RING_MIN_BLOCKS, RING_SLOTS, gqa_decode_fp8_lean_ring, gqa_decode_fp8_lean_ring_kernel,
                       gqa_decode_fp8_ring, gqa_decode_fp8_ring_kernel, ring_chunk,
                       ring_shared_bytes)
from .fp8_deep import (DEEP_DEPTH, DEEP_HEAD_DIM_STEP, DEEP_MIN_BLOCKS, DEEP_PACK_HEADS, deep_kernel_choosing,
                       deep_packs, gqa_decode_fp8_deep, gqa_decode_fp8_deep_kernel)
from .wide_heads import (WIDE_CHANNELS, WIDE_MIN_BLOCKS, WIDE_RUN_TOKENS, four_bfloat16s, gqa_decode_wide_heads,
                         gqa_decode_wide_heads_kernel, gqa_prefill_wide_heads, gqa_prefill_wide_heads_kernel,
                         row_threads, token_lanes, wide_decode_shared_bytes, wide_decode_tiling, wide_prefill_geometry,
                         wide_prefill_shared_bytes, wide_prefill_tiling, wide_tile_kv)

__all__ = ["E4M3_MAX", "E4M3_MIN_NORMAL", "PREFILL_DTYPES", "CACHE_FORMATS", "TOKENS_IN_FLIGHT",
           "check_prefill_inputs", "gqa_prefill_mixed_tiles_kernel", "gqa_prefill_mixed_tiles",
           "gqa_prefill_mixed_precision_kernel", "gqa_prefill_mixed_precision", "cache_format", "check_decode_inputs",
           "decode_tiling", "fp8_words", "gqa_decode_mixed_group_kernel", "gqa_decode_mixed_group",
           "gqa_decode_mixed_precision_kernel", "gqa_decode_mixed_precision", "FP8_THREADS", "FP8_WARPS",
           "fp8_quantize_kernel", "fp8_quantize", "fp8_dequantize_kernel", "fp8_dequantize",
           "RUN_TOKENS", "run_tiling", "cache_words", "gqa_decode_page_runs_kernel", "gqa_decode_page_runs",
           "HALF_RUN_TOKENS", "half_warp_tiling", "gqa_decode_half_warps_kernel", "gqa_decode_half_warps",
           "TILE_TOKENS", "tensor_partition_size", "gqa_decode_tensor_cores_kernel", "gqa_decode_tensor_cores",
           "WIDE_CACHE_FORMATS", "row_threads", "wide_prefill_tiling", "wide_prefill_geometry", "wide_tile_kv",
           "wide_prefill_shared_bytes", "gqa_prefill_wide_heads_kernel", "gqa_prefill_wide_heads", "four_bfloat16s",
           "token_lanes", "wide_decode_tiling", "wide_decode_shared_bytes", "gqa_decode_wide_heads_kernel",
           "gqa_decode_wide_heads", "TENSOR_PREFILL_FORMATS", "tensor_prefill_grid", "tensor_prefill_shared_bytes",
           "gqa_prefill_tensor_cores_kernel", "gqa_prefill_tensor_cores", "tensor_core_steps", "ring_shared_bytes",
           "ring_chunk", "gqa_decode_fp8_ring_kernel", "gqa_decode_fp8_ring", "gqa_decode_fp8_lean_ring_kernel",
           "gqa_decode_fp8_lean_ring", "deep_packs", "deep_kernel_choosing", "gqa_decode_fp8_deep_kernel",
           "gqa_decode_fp8_deep", "RUNGS",
           # the constants of days 6 and 7 the kernels use, and those of the later rungs
           "WARP", "WARPS", "THREADS", "CHANNELS", "FULL_MASK", "HEAD_DIM_MAX", "GROUP_MAX", "TILE_POS", "ROWS_MAX",
           "TILE_KV", "HALF", "HALF_CHANNELS", "HALF_MIN_BLOCKS", "Q_UNIT", "P_UNIT", "TENSOR_MIN_BLOCKS",
           "TENSOR_PARTITION_MIN", "TENSOR_BLOCKS_PER_SM", "TENSOR_SM_RATES", "TENSOR_BLOCK_COST", "WIDE_HEAD_DIM_MAX",
           "WIDE_CHANNELS", "WIDE_RUN_TOKENS", "WIDE_MIN_BLOCKS", "TENSOR_PREFILL_ROWS", "TENSOR_PREFILL_KEYS",
           "TENSOR_PREFILL_WARPS", "TENSOR_PREFILL_THREADS", "TENSOR_PREFILL_HEAD_DIM_STEP", "RING_SLOTS",
           "RING_MIN_BLOCKS", "DEEP_DEPTH", "DEEP_MIN_BLOCKS", "DEEP_PACK_HEADS", "DEEP_HEAD_DIM_STEP"]

RUNGS = ladder(
    Rung("gqa_prefill_mixed_tiles", gqa_prefill_mixed_tiles,
         "day 7's tiles on q, k, v and o stored in fp16 or bf16, converted on load; head_dim read at run time"),
    Rung("gqa_prefill_mixed_precision", gqa_prefill_mixed_precision,
         "head_dim fixed at compile time: each row's query and accumulator in registers, as day 7's flash rung"),
    Rung("gqa_prefill_wide_heads", gqa_prefill_wide_heads,
         "head_dim up to 256: past 128 two threads share a row, every other channel each, in tiles of 8 keys"),
    Rung("gqa_prefill_tensor_cores", gqa_prefill_tensor_cores,
         "FlashAttention-2 on mma.sync for fp16 and bf16: P from the score mma's accumulators into the P V mma"),
    Rung("gqa_decode_mixed_group", gqa_decode_mixed_group,
         "day 7's one block per (KV head, sequence, partition) over an fp16 cache, each element converted once"),
    Rung("gqa_decode_mixed_precision", gqa_decode_mixed_precision,
         "day 7's fast kernel with tokens in flight; a cache of fp16 or of fp8 e4m3 codes with a scale per page"),
    Rung("gqa_decode_page_runs", gqa_decode_page_runs,
         "each warp on runs of consecutive tokens of a page: one table read a run, rows read as packed words"),
    Rung("gqa_decode_half_warps", gqa_decode_half_warps,
         "half a warp per token, 8 channels a lane, head_dim and page size compiled in; fp8 decoded by cvt"),
    Rung("gqa_decode_tensor_cores", gqa_decode_tensor_cores,
         "scores and weighted sums as mma.sync through inline PTX: q and weights as fp16 hi + lo, float32 sums"),
    Rung("gqa_decode_wide_heads", gqa_decode_wide_heads,
         "half warps with head_dim up to 256 (a whole warp a token past 128) and a bf16 cache, decoded by shifts"),
    Rung("gqa_decode_fp8_ring", gqa_decode_fp8_ring,
         "the tensor-core steps on fp8, each warp's next two tiles copied by cp.async into a ring in shared memory"),
    Rung("gqa_decode_fp8_lean_ring", gqa_decode_fp8_lean_ring,
         "the ring with unsigned index arithmetic and 8-byte reads of its slots: the same bits, fewer instructions"),
    Rung("gqa_decode_fp8_deep", gqa_decode_fp8_deep,
         "fp8 on tensor cores, three tiles deep in registers, 16-byte loads, hi and lo weights in one mma's columns"),
)
