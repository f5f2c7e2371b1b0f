"""Mixed precision: attention whose tensors are stored in 16 or 8 bits and computed in float32.

Day 7's kernels read and write float32. These do the same work on tensors stored in a narrower
format: a value is converted to float32 when it is loaded, all arithmetic (the scores, the running
maximum and sum, the accumulator) is float32, and a result is rounded to its storage format once,
when it is stored. Half the bytes (fp16, bf16) or about a quarter (fp8) are stored, and the error
is the storage format's rounding, not an accumulation of it (``DESIGN.md`` §6). The rungs:

- ``gqa_prefill_mixed_tiles``: day 7's ``gqa_prefill_tiles`` (head_dim read at run time) with q, k,
  v and o stored in fp16 or bf16 (or float32): q converted to float32 and then scaled, K and V
  converted into float32 tiles as they are loaded, o rounded once when it is stored. The day's
  exercise. On an H100 (B = 1, 32 query heads over 8, N = 1,024, head_dim 128, causal, fp16) it
  takes 15.6 ms, what day 7's float32 rung takes, 8.6 times the next rung: half the bytes change
  nothing in a kernel whose time is its arithmetic and its local memory.
- ``gqa_prefill_mixed_precision``: day 7's ``gqa_prefill_flash`` (day 5's v5 extended to a block of
  ``positions`` query positions times the heads of a group, head_dim fixed at compile time, every
  group size) with q, k, v and o stored in fp16 or bf16 (or float32): each query row is converted
  into registers and scaled there, each K and V tile is converted into float32 shared memory as it
  is loaded, and o is rounded once when it is stored. Causal masking and ``kv_lens`` as day 7.
- ``gqa_decode_mixed_group``: day 7's ``gqa_decode_group`` (one token per warp at a time, arrays for
  ``GROUP_MAX`` heads) over a paged cache stored in fp16 (or float32): each element converted to
  float32 once, as its token is loaded, for every head of the block; q, the partials and out are
  float32. The day's exercise. On an H100 (16 sequences of 2,048 tokens, 32 query heads over 8,
  head_dim 128) it takes 0.56 ms, 2.0 times the next rung, and more than day 7's
  ``gqa_decode_group`` on a float32 cache in the same run (0.34 ms).
- ``gqa_decode_mixed_precision``: day 7's ``gqa_decode_split_k`` over a paged cache stored in fp16
  (or float32), or as fp8 e4m3 codes with a float32 scale per (block, kv_head) (``fp8_quantize``):
  each warp keeps the next batch of tokens in registers as stored and loads it while it computes the
  current one, and converts (fp16) or decodes (fp8) each element once per block; the fp8 scales
  multiply whole scores and weights. q, out and the partials stay float32 (a row per head against a
  whole context of cache); day 6's merge kernel combines the partitions.
- ``gqa_decode_page_runs``: the same decode with each warp on runs of ``RUN_TOKENS`` consecutive tokens
  of one page instead of tokens ``WARPS`` apart: a run's block-table entry is read once and its rows
  lie at constant offsets from one address, and lane l reads channels 4 l ... 4 l + 3 of a row as
  packed words (one 8-byte word of 4 fp16 numbers, two of 2 float32, one 4-byte word of 4 fp8 codes).
  Nothing in numba turns a word's bits into fp16 numbers, so ``_four_halves`` is an LLVM intrinsic
  (a bit cast, then ``cvt.f32.f16``; in the simulator a NumPy view). The previous rung spent most of
  its instructions on per-token 64-bit address arithmetic, table walks and moves of 16-bit values; on
  an H100 (8 x 32,768 and 64 x 4,096 tokens, 32 query heads on 8 KV heads, head_dim 128) this one
  reads an fp16 cache at 0.90 of the copy bandwidth where the previous took 0.51, 2.1 times the
  previous rung's float32 time, and its own float32 at 0.96. Nsight Compute at 16 x 8,192 tokens,
  group 4: 114 million warp instructions for the fp16 step where the previous rung issued 201 million.
  The fp8 step issues 138 million with 70% of the schedulers' issue slots busy and DRAM at 41% of its
  peak: instructions, not bytes, set its time (decoding the codes by shifts and fp16 bit casts instead
  of the shared table gave the same time to within 2%).
- ``gqa_decode_half_warps``: fewer instructions for each byte. Each token is read by half a warp (8
  channels a lane), so a batch's scores meet in a butterfly over 16 lanes and the weights reach 16
  lanes: half the shuffles per token of a whole warp's; head_dim and the page size are compiled in,
  so a run's rows are one address plus constant offsets and the walk along the table needs no
  64-bit division; two sets of registers take turns as the run computed and the run in flight; and
  on sm_89 and later (Ada, Hopper) fp8 codes become fp16 numbers two at a time through one PTX
  instruction, ``cvt.rn.f16x2.e4m3x2``, reached through ``_eight_codes``, an intrinsic holding that
  instruction as inline PTX (elsewhere, and as an option, the block's table). All arithmetic stays
  float32. On an H100 (4 x 131,072 tokens, group 4, head_dim 128, median of 7): the fp8 step takes
  0.522 ms, 0.69 of the copy bandwidth, 2.88 times ``gqa_decode_page_runs``'s float32 step (1.504 ms)
  and 1.50 times its fp8 step; fp16 0.836 ms (0.86 of copy), float32 as the previous rung.
- ``gqa_decode_tensor_cores``: the scores and the weighted sums of a tile of 16 tokens as tensor-core
  instructions, ``mma.sync.aligned.m16n8k16`` (fp16 inputs, float32 accumulators), held as inline PTX by
  the intrinsic ``_mma`` (in the simulator, ``course.simulator.mma_m16n8k16``). The cache's fp16 numbers
  and fp8 codes are exact in fp16; q and the weights are split into fp16 pairs ``hi + lo`` (22
  significant bits), so the step keeps float32's accuracy. fp16 and fp8 caches only. Its partitions
  come from ``tensor_partition_size``, a model of how an SM runs the few long blocks it holds. On an
  H100 (group 4, head_dim 128, steps of 512K tokens or more, the day's recording, GPU time alone): the
  fp8 step reads its cache at 0.88 to 0.92 of the copy bandwidth, 4.1 to 4.3 times
  ``gqa_decode_mixed_precision``'s float32 step and 3.6 to 3.7 times ``gqa_decode_page_runs``'s; fp16
  0.99 to 1.00 of copy. Nsight: the fp8 step waits on loads (issue slots 34% busy, 12 warps an SM at
  168 registers), no longer on instructions.

Tools that build and read an fp8 cache (kernels with launchers of the same pattern, not rungs of the
ladder: their outputs are bits, checked bit for bit, where the registry's check compares floats):

- ``fp8_quantize``: float32 to e4m3 codes (uint8) with one scale per group (a page of a KV head):
  the given scales, or ``amax / 448`` per group (one block per group reduces its amax); round to
  nearest even, subnormals included, saturating to +-448 (as ``cvt.rn.satfinite``). The day's
  exercise.
- ``fp8_dequantize``: codes and scales back to float32, ``code value * scale``

Storage formats and numba (``DESIGN.md`` §4). fp16 arrays are ``np.float16``: ``float32(x)`` of an
element is one ``cvt.f32.f16`` and a float32 stored into an fp16 array is rounded to nearest even.
bf16 arrays are ``ml_dtypes.bfloat16``: numba-cuda converts them by a call to a linked function (no
inline instruction without LTO), cheap in the prefill, which converts each element once per block,
and not offered for the decode cache. NumPy bf16 arrays cannot cross to a GPU through numba (the
buffer protocol has no bf16: "cannot include dtype 'E' in a buffer"), so the prefill moves them as
uint16 and views them as bf16 on the device (``_bf16_to_device``). fp8 is stored as ``uint8`` codes
and decoded in the kernel: numba has no fp8 conversion the simulator runs, and no bit cast either
(the simulator's libdevice ``int_as_float`` returns None), so nothing here reinterprets bits:

- decoding a code ``s eeee mmm``: ``value * 2**9`` is the integer ``(8 + m) << (e - 1)`` (normal)
  or ``m`` (subnormal), below 2**24, so one integer-to-float conversion is exact
  (``_e4m3_integer``). The decode kernel reads it from a 256-entry table in shared memory that each
  block fills: on an H100 the table took 0.403 ms where the arithmetic took 0.476 and a bit cast
  (GPU only) 0.406, in an earlier version of the kernel at group 4. The factor ``2**-9`` joins the
  page's scale.
- encoding (``_e4m3_code``): ``y = x / scale`` in float32 (IEEE division), then ``frexp`` gives the
  binade and the significand ``16 f`` in [8, 16), rounded to nearest even by hand (floor and the
  parity of the floor): bit for bit ``reference.quantize_fp8`` on the simulator and on a GPU.
- the decode kernel reads a row of codes as 32-bit words (``fp8_words``): lane w loads channels
  4 w ... 4 w + 3 in one load, so head_dim must be a multiple of 4.

On an H100 (16 sequences x 8,192 tokens, 32 query heads on 8 KV heads, head_dim 128, shuffled pages
of 16; bytes: each cache element read once per KV head, q and out; copy: torch's copy of as many
bytes, 2.97 TB/s counting reads and writes): day 7's fp32 kernel 0.462 ms (0.77 of the copy
bandwidth); this rung with a float32 cache 0.443 ms (0.81), fp16 0.358 ms (0.51, 1.29x day 7), fp8
0.355 ms (0.26, 1.30x). Narrow caches are not yet memory-bound: at group 4 fp8 moves half fp16's
bytes in the same time, so each batch of tokens costs its chain of shuffles, exponentials and
conversions, not its bytes (at group 1, which does a quarter of the work per token: fp16 0.298 ms,
fp8 0.226 ms against day 7's 0.382; at group 8 fp8 is slower than float32, 0.666 against 0.535 ms).

Layouts (``DESIGN.md`` §3). Prefill: ``q, o: (batch, heads, n_queries, head_dim)``, ``k, v: (batch,
kv_heads, n_keys, head_dim)``, all of one dtype. Decode::

    q, out:             (num_seqs, heads, head_dim) float32
    k_cache, v_cache:   (num_blocks, kv_heads, block_size, head_dim) float16 or float32, or uint8 codes
    k_scales, v_scales: (num_blocks, kv_heads) float32, with uint8 codes only
    block_tables:       (num_seqs, max_blocks_per_seq) int32
    context_lens:       (num_seqs,) int32

Launchers accept NumPy arrays or numba device arrays, validate every argument (errors name it),
size the grid as day 7 does, launch the kernels given as ``kernel=`` (and ``merge_kernel=``) and
return the output.
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, int32, types, uint32, uint64
from numba import types as numba_types
from types import SimpleNamespace as types_namespace

from kernels.flash_attention import prepare_kv_lens
from kernels.gqa_attention import (GROUP_MAX, HEAD_DIM_MAX, ROWS_MAX, TILE_KV, TILE_POS, decode_grid,
                                   decode_partition_size, prefill_block, prefill_grid, subgroups_for)
# Day 7's device functions: the butterfly that sums many scores at once and the walk along a block table.
from kernels.gqa_attention import _exchange, _next_pages, _prefill_tiling
from kernels.launching import (cdiv, default_scale, is_device_array, note_output, output_array, require_array,
                               require_bool, require_dtype, require_int, require_int32, require_kv_heads,
                               require_same_kind)
from kernels.paged_attention import (CHANNELS, FULL_MASK, THREADS, WARP, WARPS, longest_context,
                                     paged_attention_v2_merge_kernel, partitions_for)
# Day 6's block-table check, partial buffers (reused by shape on a GPU) and SM count, as day 7 uses them.
from kernels.paged_attention import _check_tables, _partials, _sm_count
from kernels.registry import Rung, ladder

__all__ = ["E4M3_MAX", "E4M3_MIN_NORMAL", "PREFILL_DTYPES", "CACHE_FORMATS", "TOKENS_IN_FLIGHT",
           "check_prefill_inputs", "gqa_prefill_mixed_tiles_kernel", "gqa_prefill_mixed_tiles",
           "gqa_prefill_mixed_precision_kernel", "gqa_prefill_mixed_precision", "cache_format", "check_decode_inputs",
           "decode_tiling", "fp8_words", "gqa_decode_mixed_group_kernel", "gqa_decode_mixed_group",
           "gqa_decode_mixed_precision_kernel", "gqa_decode_mixed_precision", "FP8_THREADS", "FP8_WARPS",
           "fp8_quantize_kernel", "fp8_quantize", "fp8_dequantize_kernel", "fp8_dequantize",
           "RUN_TOKENS", "run_tiling", "cache_words", "gqa_decode_page_runs_kernel", "gqa_decode_page_runs",
           "HALF_RUN_TOKENS", "half_warp_tiling", "gqa_decode_half_warps_kernel", "gqa_decode_half_warps",
           "TILE_TOKENS", "tensor_partition_size", "gqa_decode_tensor_cores_kernel", "gqa_decode_tensor_cores",
           "RUNGS"]

E4M3_MAX = 448.0
# Storage dtypes of the prefill (all four tensors share one) and of the decode cache.
PREFILL_DTYPES = ("float16", "bfloat16", "float32")
CACHE_FORMATS = ("float32", "float16", "fp8_e4m3")
# Tokens a decode warp loads at a time, by cache format and by the heads of its block (entry heads - 1).
# A warp holds two batches in registers (the one it computes, the one in flight), so a token costs 8
# registers per lane for float32 and for fp16 (4 K and 4 V numbers, one register each: numba has no
# packed half2) and 2 for fp8 (a K and a V word). Timed on an H100 at 16 x 8,192 tokens, 8 KV heads,
# head_dim 128 (ms; registers from ptxas): group 4: float32 T2 0.443 (111) < T4 0.496 (157); fp16 T2
# 0.358 (116) < T4 0.427 (164); fp8 T8 0.355 (144) < T4 0.400 (116). Group 8: fp16 T1 0.506 (125) < T2
# 0.532 (167); fp8 T4 0.666 (162) < T2 0.738 (143). Group 1: fp8 T16 0.226 < T8 0.252 (128 both).
# The other entries were not timed: float32 and fp16 take the most tokens that keep ptxas at 128
# registers or fewer (4 blocks of 128 threads per SM); fp8 groups 5 to 7 follow group 8.
TOKENS_IN_FLIGHT = {
    "float32": (4, 2, 2, 2, 1, 1, 1, 1),
    "float16": (4, 4, 4, 2, 2, 2, 2, 1),
    "fp8_e4m3": (16, 8, 8, 8, 4, 4, 4, 4),
}
_TWO_TO_MINUS_9 = 2.0 ** -9     # an e4m3 value is its integer _e4m3_integer times 2**-9
E4M3_MIN_NORMAL = 2.0 ** -6     # e4m3's smallest normal number: below it the codes step by 2**-9


# ----------------------------------------------------------------------------------------------
# fp8 e4m3 codes: decode and encode with integer and float arithmetic only
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _e4m3_integer(code):
    """``value * 2**9`` of an e4m3 code (0 ... 255) as an int32, exactly.

    Normal (exponent field e >= 1): ``(8 + m) << (e - 1)``; subnormal: ``m``. The NaN codes 0x7f
    and 0xff give +-480 * 2**9 (no cache the quantizer writes holds them). The int32(...) around
    each step keeps numba's arithmetic in 32 bits (it widens integer operations to 64)."""
    c = int32(code)
    e = int32((c >> 3) & 15)
    m = int32(c & 7)
    magnitude = int32((m | 8) << (e - 1)) if e > 0 else m
    return int32(-magnitude) if c & 0x80 else magnitude


@cuda.jit(device=True, inline=True)
def _fill_e4m3_table(table, tid):
    """The block's 256-entry table of ``value * 2**9`` of every e4m3 code, in shared memory; then a barrier."""
    for i in range(tid, 256, THREADS):
        table[i] = float32(_e4m3_integer(i))
    cuda.syncthreads()


@cuda.jit(device=True, inline=True)
def _lane_query(q, s, first, n_heads, d, scale, base, step, q_lane, acc):
    """Channels base, base + step, ... of heads first ... first + n_heads - 1 of q[s], scaled, into q_lane (0 past
    the heads or head_dim), and zeros into the accumulators."""
    for i in range(q_lane.shape[0]):
        for ch in range(q_lane.shape[1]):
            c = base + ch * step
            q_lane[i, ch] = q[s, first + i, c] * scale if i < n_heads and c < d else float32(0.0)
            acc[i, ch] = float32(0.0)


@cuda.jit(device=True, inline=True)
def _round_half_even(r):
    """The integer nearest to r >= 0 (ties to the even one), as an int32: floor, then the parity."""
    q = int32(math.floor(r))
    rest = r - float32(q)                       # exact: r < 2**24
    if rest > 0.5 or (rest == 0.5 and q & 1):
        q += 1
    return q


@cuda.jit(device=True, inline=True)
def _e4m3_code(y):
    """The e4m3 code (0 ... 255) of the e4m3 number nearest to float32 ``y``: ties to even,
    subnormals included, |y| > 448 and infinities saturate to +-448 (0x7e, 0xfe), NaN is 0x7f."""
    a = abs(y)
    if a != a:
        code = int32(0x7F)
    elif a >= E4M3_MAX:
        code = int32(0x7E)
    elif a < E4M3_MIN_NORMAL:
        code = _round_half_even(a * float32(512.0))        # multiples of 2**-9; 8 is the smallest normal
    else:
        f, e = math.frexp(a)                                # a = f * 2**e, f in [0.5, 1), e in [-5, 9]
        # exponent field e - 1 + 7, mantissa 16 f - 8; a significand that rounds up to 16 carries into
        # the exponent field by itself ((e + 6) * 8 + 8 = (e + 7) * 8)
        code = int32((int32(e) + 6) * 8 + _round_half_even(f * float32(16.0)) - 8)
    if math.copysign(float32(1.0), y) < 0:
        code = int32(code | 0x80)
    return code


# ----------------------------------------------------------------------------------------------
# Prefill: day 7's GQA flash tiles, stored in fp16 / bf16, computed in float32
# ----------------------------------------------------------------------------------------------

def check_prefill_inputs(q, k, v) -> tuple[int, int, int, int, int, int]:
    """Validate q (B, H, N, d), k and v (B, KVH, M, d) of one dtype of ``PREFILL_DTYPES``; return
    (B, H, KVH, N, M, d). ``H`` must be a multiple of ``KVH``, ``1 <= d <= HEAD_DIM_MAX``. Raises
    TypeError or ValueError naming the argument."""
    dtype = require_dtype("q", q, PREFILL_DTYPES)
    batch, heads, n_queries, head_dim = require_array("q", q, (None, None, None, None), dtype,
                                                      dims=("batch", "heads", "seq_q", "head_dim"))
    kv_dims = ("batch", "kv_heads", "seq_k", "head_dim")
    if np.dtype(k.dtype) != dtype or np.dtype(v.dtype) != dtype:
        name = "k" if np.dtype(k.dtype) != dtype else "v"
        raise TypeError(f"{name} must have the dtype of q ({dtype}), got {np.dtype((k if name == 'k' else v).dtype)}")
    _, kv_heads, n_keys, _ = require_array("k", k, (batch, None, None, head_dim), dtype, dims=kv_dims)
    require_array("v", v, (batch, kv_heads, n_keys, head_dim), dtype, dims=kv_dims)
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX: the shared-memory "
                         f"tiles are sized for it), got head_dim {head_dim} in shape {tuple(q.shape)}")
    require_kv_heads(heads, kv_heads, q_name="q", kv_name="k")
    require_same_kind(q=q, k=k, v=v)
    return batch, heads, kv_heads, n_queries, n_keys, head_dim


@cuda.jit
def gqa_prefill_mixed_tiles_kernel(q, k, v, kv_lens, o, scale, causal):
    """Day 7's ``gqa_prefill_tiles_kernel`` (its blocks, rows and tiles) on q, k, v and o stored in fp16
    or bf16. Every element is converted to float32 as it is loaded (q scaled after the conversion, K
    and V into float32 tiles), everything computed from it is float32, and o is rounded to its format
    once, when it is stored."""
    group = q.shape[1] // k.shape[1]
    subgroups = (group + ROWS_MAX - 1) // ROWS_MAX
    heads_per_block = (group + subgroups - 1) // subgroups
    positions = min(TILE_POS, ROWS_MAX // heads_per_block)
    kv_head = cuda.blockIdx.y // subgroups
    first = (cuda.blockIdx.y - kv_head * subgroups) * heads_per_block
    b = cuda.blockIdx.z
    t = cuda.threadIdx.x
    rows = cuda.blockDim.x
    n_queries = q.shape[2]
    d = q.shape[3]
    tile_start = cuda.blockIdx.x * positions
    local_position = t // heads_per_block
    position = tile_start + local_position
    head_in_group = first + (t - local_position * heads_per_block)
    h = kv_head * group + head_in_group
    k_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)

    active = position < n_queries and head_in_group < group
    for c in range(d):
        # Converted first, then scaled: the product of two fp16 numbers may pass fp16's 65504, and
        # q . k even more so; in float32 neither comes near its range.
        q_row[c] = float32(q[b, h, position, c]) * scale if active else float32(0.0)
        acc[c] = float32(0.0)
    row_max = float32(-math.inf)
    row_sum = float32(0.0)

    kv_end = min(kv_lens[b], k.shape[2])
    if causal:
        kv_end = min(kv_end, tile_start + positions, n_queries)
    for kv_start in range(0, kv_end, TILE_KV):
        n_tile = min(TILE_KV, kv_end - kv_start)
        for idx in range(t, n_tile * d, rows):
            j = idx // d
            c = idx - j * d
            k_tile[j, c] = float32(k[b, kv_head, kv_start + j, c])
            v_tile[j, c] = float32(v[b, kv_head, kv_start + j, c])
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
            # The sums of many keys stay float32: an fp16 accumulator would round at every key.
            for j in range(n_valid):
                p = math.exp(scores[j, t] - new_max)
                row_sum += p
                for c in range(d):
                    acc[c] += p * v_tile[j, c]
            row_max = new_max
        cuda.syncthreads()

    if active:
        inv_sum = float32(0.0)
        if row_sum > 0:
            inv_sum = float32(1.0) / row_sum
        for c in range(d):
            o[b, h, position, c] = acc[c] * inv_sum       # the one rounding to the format of o


_PREFILL_KERNELS: dict = {}


def gqa_prefill_mixed_precision_kernel(head_dim: int):
    """The prefill kernel for one ``head_dim`` (1 ... HEAD_DIM_MAX), compiled on first use and kept.

    numba compiles it once per storage dtype it is launched with (fp16, bf16, float32): the
    conversions ``float32(x)`` on load and the rounding on store follow the arrays' dtype."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"head_dim must lie in [1, {HEAD_DIM_MAX}], got {head_dim}")
    head_dim = int(head_dim)
    if head_dim not in _PREFILL_KERNELS:
        _PREFILL_KERNELS[head_dim] = _build_prefill_kernel(head_dim)
    return _PREFILL_KERNELS[head_dim]


def _build_prefill_kernel(D: int):
    """Day 7's prefill kernel with every load converted to float32 and the store rounded: thread t of
    block (x, y, b) owns position x * positions + t // heads_per_block of head t % heads_per_block
    of sub-group y % subgroups."""

    @cuda.jit
    def gqa_prefill_mixed_precision_kernel(q, k, v, kv_lens, o, scale, causal):
        group = q.shape[1] // k.shape[1]
        subgroups, heads_per_block, positions = _prefill_tiling(group)
        kv_head = cuda.blockIdx.y // subgroups
        first = (cuda.blockIdx.y - kv_head * subgroups) * heads_per_block
        b = cuda.blockIdx.z
        t = cuda.threadIdx.x
        rows = cuda.blockDim.x
        n_queries = q.shape[2]
        tile_start = cuda.blockIdx.x * positions
        local_position = t // heads_per_block
        position = tile_start + local_position
        head_in_group = first + (t - local_position * heads_per_block)
        h = kv_head * group + head_in_group
        # K and V tiles are float32 in shared memory: converted once by the thread that loads them,
        # then read by every row of the block without another conversion.
        k_tile = cuda.shared.array((TILE_KV, D), float32)
        v_tile = cuda.shared.array((TILE_KV, D), float32)
        scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)
        q_row = cuda.local.array(D, float32)
        acc = cuda.local.array(D, float32)

        active = position < n_queries and head_in_group < group
        # The scale goes into q before any product: fp16 logits of 1e4 and more are fine in float32,
        # and so is every product of two fp16 numbers.
        for c in range(D):
            q_row[c] = float32(q[b, h, position, c]) * scale if active else float32(0.0)
            acc[c] = float32(0.0)
        row_max = float32(-math.inf)
        row_sum = float32(0.0)

        kv_end = min(kv_lens[b], k.shape[2])
        if causal:
            kv_end = min(kv_end, tile_start + positions, n_queries)
        for kv_start in range(0, kv_end, TILE_KV):
            n_tile = min(TILE_KV, kv_end - kv_start)
            for idx in range(t, n_tile * D, rows):
                j = idx // D
                c = idx - j * D
                k_tile[j, c] = float32(k[b, kv_head, kv_start + j, c])
                v_tile[j, c] = float32(v[b, kv_head, kv_start + j, c])
            cuda.syncthreads()

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
            if row_sum > 0:
                inv_sum = float32(1.0) / row_sum
            for c in range(D):
                o[b, h, position, c] = acc[c] * inv_sum       # rounded once, to the dtype of o

    return gqa_prefill_mixed_precision_kernel


def _launch_prefill(q, k, v, causal, kv_lens, scale, out, kernel_for):
    """Validate, then launch ``kernel_for(head_dim)`` with day 7's prefill grid: both prefill rungs.
    NumPy bf16 arrays travel to a GPU as uint16 (``_bf16_to_device``)."""
    batch, heads, kv_heads, n_queries, n_keys, head_dim = check_prefill_inputs(q, k, v)
    causal = require_bool("causal", causal)
    lens = prepare_kv_lens(kv_lens, batch, n_keys, like=q)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q, dtype=np.dtype(q.dtype))
    if batch and heads and n_queries:
        launch = kernel_for(head_dim)[prefill_grid(batch, heads, kv_heads, n_queries), prefill_block(heads, kv_heads)]
        if _is_host_bf16(q):
            device_out = note_output(cuda.device_array(out.shape, np.uint16).view(out.dtype))
            launch(_bf16_to_device(q), _bf16_to_device(k), _bf16_to_device(v), lens, device_out, scale, causal)
            device_out.view(np.uint16).copy_to_host(out.view(np.uint16))
        else:
            launch(q, k, v, lens, out, scale, causal)
    return out


def gqa_prefill_mixed_tiles(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                            kernel=gqa_prefill_mixed_tiles_kernel):
    """Grouped-query flash attention on fp16, bf16 or float32 tensors with head_dim read at run time;
    returns out (B, H, N, d) in the dtype of q.

    The arguments and the grid of ``gqa_prefill_mixed_precision``; ``kernel`` is launched as it is
    (the day's exercise). Its query row and accumulator are arrays of ``HEAD_DIM_MAX`` floats, as in
    day 7's ``gqa_prefill_tiles``: the next rung fixes head_dim at compile time.
    """
    return _launch_prefill(q, k, v, causal, kv_lens, scale, out, lambda head_dim: kernel)


def gqa_prefill_mixed_precision(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                                kernel=gqa_prefill_mixed_precision_kernel):
    """Grouped-query flash attention on fp16, bf16 or float32 tensors; returns out (B, H, N, d) in
    the dtype of q.

    q (B, H, N, d), k and v (B, KVH, M, d) of one dtype of ``PREFILL_DTYPES`` (bf16:
    ``ml_dtypes.bfloat16``), NumPy or device arrays, ``H`` a multiple of ``KVH``, ``d <=
    HEAD_DIM_MAX``. ``causal``, ``kv_lens`` (B,) int32 and ``scale`` as for day 7's
    ``gqa_prefill_flash``; rows with no allowed key give 0. ``kernel`` is a function of head_dim
    that returns the kernel to launch; blocks and grid are day 7's (``prefill_block``,
    ``prefill_grid``).
    """
    return _launch_prefill(q, k, v, causal, kv_lens, scale, out, kernel)


def _is_host_bf16(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.name == "bfloat16"


def _bf16_to_device(a):
    """A NumPy bf16 array on the device. numba moves NumPy arrays through the buffer protocol, which has
    no bf16 (on a GPU the launch fails: "cannot include dtype 'E' in a buffer"), so the bits travel as
    uint16 and the device array is viewed as bf16 again."""
    return cuda.to_device(a.view(np.uint16)).view(a.dtype)


# ----------------------------------------------------------------------------------------------
# Decode: day 7's split-K GQA decode over an fp16 or fp8 cache
# ----------------------------------------------------------------------------------------------

def cache_format(k_cache) -> str:
    """``"float32"``, ``"float16"`` or ``"fp8_e4m3"`` (uint8 codes) from the dtype of a cache;
    TypeError naming ``k_cache`` for any other dtype."""
    dtype = require_dtype("k_cache", k_cache, (np.float32, np.float16, np.uint8))
    return "fp8_e4m3" if dtype == np.uint8 else dtype.name


def decode_tiling(group: int, fmt: str) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, tokens_in_flight)`` of the decode kernel for a group size and a
    cache format: day 7's sub-groups of at most ``GROUP_MAX`` heads, ``TOKENS_IN_FLIGHT[fmt]``."""
    if fmt not in CACHE_FORMATS:
        raise ValueError(f"fmt must be one of {CACHE_FORMATS}, got {fmt!r}")
    subgroups = subgroups_for(group)
    heads_per_block = cdiv(max(group, 1), subgroups)
    return subgroups, heads_per_block, TOKENS_IN_FLIGHT[fmt][heads_per_block - 1]


def check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens) -> tuple:
    """Validate a decode step's inputs; return (cache format, num_seqs, heads, head_dim, kv_heads).

    Day 6's ``check_paged_inputs`` with a cache of float32, float16 or uint8 codes (``cache_format``),
    both caches of one dtype: NumPy block tables are checked to the last entry a context uses.
    Raises TypeError or ValueError naming the argument.
    """
    fmt = cache_format(k_cache)
    dtype = np.dtype(k_cache.dtype)
    num_seqs, heads, head_dim = require_array("q", q, (None, None, None), np.float32,
                                              dims=("num_seqs", "heads", "head_dim"))
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX: each lane holds "
                         f"{CHANNELS} channels), got head_dim {head_dim} in shape {tuple(q.shape)}")
    cache_dims = ("num_blocks", "kv_heads", "block_size", "head_dim")
    num_blocks, kv_heads, block_size, _ = require_array("k_cache", k_cache, (None, None, None, head_dim), dtype,
                                                        dims=cache_dims)
    require_dtype("v_cache", v_cache, dtype)
    require_array("v_cache", v_cache, tuple(k_cache.shape), dtype, dims=cache_dims)
    require_kv_heads(heads, kv_heads, q_name="q", kv_name="k_cache")
    if fmt == "fp8_e4m3" and head_dim % 4:
        raise ValueError(f"q must have a head_dim that is a multiple of 4 for an fp8 cache (a lane loads the codes "
                         f"of 4 channels as one 32-bit word), got head_dim {head_dim}")
    if block_size < 1:
        raise ValueError(f"k_cache must have block_size >= 1, got shape {tuple(k_cache.shape)}")
    (_, max_blocks) = require_int32("block_tables", block_tables, (num_seqs, None),
                                    dims=("num_seqs", "max_blocks_per_seq"))
    require_int32("context_lens", context_lens, (num_seqs,), dims=("num_seqs",))
    require_same_kind(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, context_lens=context_lens)
    if not is_device_array(q):
        _check_tables(block_tables, context_lens, block_size, max_blocks, num_blocks)
    return fmt, num_seqs, heads, head_dim, kv_heads


@cuda.jit
def gqa_decode_mixed_group_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                                  partial_max, partial_sum, partial_acc):
    """Day 7's ``gqa_decode_group_kernel`` over a cache stored in fp16: block (x, s, p) serves the
    query heads first ... of KV head x // subgroups over partition p of sequence s, warp w takes tokens
    start + w, start + w + WARPS, ... Each element of a token's K and V rows is converted to float32
    once, as it is loaded, and serves every head of the block; scores, statistics and accumulators
    are float32, and so are q and the partials."""
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
    end = min(start + partition_size, context_lens[s])

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
                k_row[ch] = float32(k_cache[page, kv_head, slot, c])
                v_row[ch] = float32(v_cache[page, kv_head, slot, c])
        for i in range(GROUP_MAX):
            if i < n_heads:
                partial = float32(0.0)
                for ch in range(CHANNELS):
                    partial += q_lane[i, ch] * k_row[ch]
                for offset in (16, 8, 4, 2, 1):
                    partial += cuda.shfl_xor_sync(FULL_MASK, partial, offset)
                new_max = max(running_max[i], partial)
                correction = math.exp(running_max[i] - new_max)
                weight = math.exp(partial - new_max)
                # A context of thousands of tokens is summed here: float32, never the cache's fp16.
                running_sum[i] = running_sum[i] * correction + weight
                for ch in range(CHANNELS):
                    acc[i, ch] = acc[i, ch] * correction + weight * v_row[ch]
                running_max[i] = new_max

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
        if block_max > -math.inf:
            for w in range(WARPS):
                factor = math.exp(warp_max[w, i] - block_max)
                block_sum += warp_sum[w, i] * factor
                channel += warp_acc[w, i, c] * factor
        if c == 0:
            partial_max[s, first + i, p] = block_max
            partial_sum[s, first + i, p] = block_sum
        partial_acc[s, first + i, p, c] = channel


def gqa_decode_mixed_group(q, k_cache, v_cache, block_tables, context_lens, *, scale=None, out=None,
                           partition_size=None, max_context=None, kernel=gqa_decode_mixed_group_kernel,
                           merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16 (or float32), one block per (KV head,
    sequence, partition), then day 6's merge; returns out (num_seqs, heads, head_dim) float32.

    The arguments, grid and partials of day 7's ``gqa_decode_group``, with ``k_cache`` and ``v_cache``
    float16 or float32 (fp8 caches and their scales: ``gqa_decode_mixed_precision``). ``kernel`` is
    launched as it is (the day's exercise); ``merge_kernel`` is day 6's.
    """
    fmt, num_seqs, heads, head_dim, kv_heads = check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens)
    if fmt == "fp8_e4m3":
        raise TypeError("k_cache must have dtype float16 or float32 for gqa_decode_mixed_group, got uint8 (fp8 "
                        "codes): an fp8 cache and its scales go to gqa_decode_mixed_precision")
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        partition_size = decode_partition_size(num_seqs, kv_heads * subgroups_for(heads // kv_heads), longest,
                                               _sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    partial_max, partial_sum, partial_acc = _partials(q, num_seqs, heads, partitions, head_dim)
    kernel[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
        q, k_cache, v_cache, block_tables, context_lens, scale, partition_size, partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


_DECODE_KERNELS: dict = {}


def gqa_decode_mixed_precision_kernel(group: int, fmt: str):
    """The decode kernel for a group size and a cache format (``CACHE_FORMATS``), compiled on first
    use and kept. An fp8 kernel takes the codes as 32-bit words (``fp8_words``), 4 channels per lane."""
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an int, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group must be >= 1, got {group}")
    _, heads_per_block, tokens = decode_tiling(int(group), fmt)
    key = (heads_per_block, tokens, fmt)
    if key not in _DECODE_KERNELS:
        _DECODE_KERNELS[key] = _build_decode_kernel(*key)
    return _DECODE_KERNELS[key]


def fp8_words(cache):
    """uint8 codes (..., head_dim) seen as uint32 words (..., head_dim // 4), no copy: word w of a row holds
    the codes of channels 4 w ... 4 w + 3, channel 4 w + j in byte j (little-endian), so one 4-byte load
    brings a lane 4 channels. NumPy or device arrays; head_dim must be a multiple of 4."""
    return cache.view(np.uint32)


@cuda.jit(device=True, inline=True)
def _load_elements(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, first, end, lane, d, pages, slots,
                   k_raw, v_raw):
    """Issue the loads of the K and V rows of tokens first, first + WARPS, ... (those before ``end``) of a
    float32 or fp16 cache: lane's channels lane + 32 ch into k_raw[u, ch], v_raw[u, ch], unconverted.
    Returns the scales (1: a cache without scales). Unsigned indices, as day 7's ``_load_token``."""
    for u in range(len(pages)):
        if first + u * WARPS < end:
            row = (np.uint64(pages[u]), np.uint64(kv_head), np.uint64(slots[u]))
            k_row = k_cache[row]
            v_row = v_cache[row]
            base = np.uint64(lane)
            if lane + (CHANNELS - 1) * WARP < d:        # all of the lane's channels exist (head_dim 128)
                for ch in range(CHANNELS):
                    k_raw[u, ch] = k_row[base + np.uint64(ch * WARP)]
                    v_raw[u, ch] = v_row[base + np.uint64(ch * WARP)]
            else:
                for ch in range(CHANNELS):
                    if lane + ch * WARP < d:
                        k_raw[u, ch] = k_row[base + np.uint64(ch * WARP)]
                        v_raw[u, ch] = v_row[base + np.uint64(ch * WARP)]
    return float32(1.0), float32(1.0)


@cuda.jit(device=True, inline=True)
def _load_codes(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, first, end, lane, d, pages, slots,
                k_raw, v_raw):
    """Issue the loads of the same tokens of an fp8 cache seen as words: lane w < head_dim / 4 loads word w
    (channels 4 w ... 4 w + 3) of each K and V row into k_raw[u], v_raw[u]. Lane u < len(pages) also
    loads the page scales of token u and returns them times 2**-9 (the other lanes return 0): the
    scores and the weights read them from that lane. (Lane u reads its token's table entry again:
    ``pages[lane]`` would be an array index known only at run time, which puts ``pages`` in local memory.)"""
    words = k_cache.shape[3]
    for u in range(len(pages)):
        if first + u * WARPS < end and lane < words:
            at = (np.uint64(pages[u]), np.uint64(kv_head), np.uint64(slots[u]), np.uint64(lane))
            k_raw[u] = k_cache[at]
            v_raw[u] = v_cache[at]
    k_scale = float32(0.0)
    v_scale = float32(0.0)
    token = first + lane * WARPS
    if lane < len(pages) and token < end:
        page = np.uint64(block_tables[s, token // k_cache.shape[2]])
        k_scale = k_scales[page, np.uint64(kv_head)] * float32(_TWO_TO_MINUS_9)
        v_scale = v_scales[page, np.uint64(kv_head)] * float32(_TWO_TO_MINUS_9)
    return k_scale, v_scale


@cuda.jit(device=True, inline=True)
def _convert_elements(raw, u, table, out):
    """Token u's channels of a float32 or fp16 cache, as float32 (one conversion instruction each for fp16)."""
    for ch in range(CHANNELS):
        out[ch] = float32(raw[u, ch])


@cuda.jit(device=True, inline=True)
def _decode_codes(raw, u, table, out):
    """Token u's 4 channels of an fp8 word, decoded through the block's table: value * 2**9, exactly."""
    word = raw[u]
    for ch in range(CHANNELS):
        out[ch] = table[np.uint32(word >> np.uint32(8 * ch)) & np.uint32(0xFF)]


@cuda.jit(device=True, inline=True)
def _merge_warps(warp_max, warp_sum, warp_acc, partial_max, partial_sum, partial_acc, s, first, p, n_heads, d, tid):
    """After a barrier: the block's warps' maxima, sums and accumulators (shared memory) merged into day 6's
    partials of heads first ... first + n_heads - 1 of partition p."""
    cuda.syncthreads()
    for idx in range(tid, n_heads * d, THREADS):
        i = idx // d
        c = idx - i * d
        block_max = float32(-math.inf)
        for w in range(WARPS):
            block_max = max(block_max, warp_max[w, i])
        block_sum = float32(0.0)
        channel = float32(0.0)
        if block_max > -math.inf:
            for w in range(WARPS):
                factor = math.exp(warp_max[w, i] - block_max)
                block_sum += warp_sum[w, i] * factor
                channel += warp_acc[w, i, c] * factor
        if c == 0:
            partial_max[s, first + i, p] = block_max
            partial_sum[s, first + i, p] = block_sum
        partial_acc[s, first + i, p, c] = channel


def _batch_steps(G: int, T: int, fmt: str, convert, lane_major: bool, lanes: int = WARP):
    """The device functions both decode kernels of this module run on a batch of ``T`` tokens per warp for
    ``G`` heads (one butterfly for the ``G * T`` scores, the online softmax where the scores are), and the
    write of the block's partials; ``convert`` turns a token's stored K or V row into ``HEAD_DIM_MAX //
    lanes`` float32 numbers, ``lane_major``: lane l holds channels c l ... c l + c - 1 (else l, l + 32, ...).

    ``lanes``: the lanes that share a token (32, or 16: each half of the warp then runs its own batch of
    ``T`` tokens, with its own softmax, and ``write_partials`` merges the halves). Returns ``(tiling,
    score_batch, accumulate_batch, write_partials)``, ``tiling`` = ``(NPAD, SHIFT, LOG_T)``: score j is
    head j // T, token j % T; after the butterfly lane l holds score ``(l % lanes) >> SHIFT`` of its
    part of the warp."""
    FP8 = fmt == "fp8_e4m3"
    N = G * T
    LOG_NPAD = (N - 1).bit_length()
    NPAD = 1 << LOG_NPAD
    LOG_L = lanes.bit_length() - 1
    SHIFT = LOG_L - LOG_NPAD
    LOG_T = T.bit_length() - 1
    HEAD_LANES = (T << SHIFT) - 1
    CH = HEAD_DIM_MAX // lanes
    if (NPAD > lanes or 1 << LOG_T != T or 1 << LOG_L != lanes or not 16 <= lanes <= WARP
            or fmt not in CACHE_FORMATS or WARP != 32):
        raise ValueError(f"heads x tokens in flight must be at most lanes (16 or 32), tokens a power of two and "
                         f"fmt one of {CACHE_FORMATS}, got {G} x {T}, {lanes} lanes, {fmt!r}")

    @cuda.jit(device=True, inline=True)
    def score_batch(q_lane, k_now, table, k_token, scores, lane):
        """This lane's score of the batch (each token converted once, for all G heads), summed over its lanes."""
        for j in range(NPAD):
            scores[j] = float32(0.0)
        for u in range(T):
            convert(k_now, u, table, k_token)
            for i in range(G):
                partial = scores[i * T + u]
                for ch in range(CH):
                    partial += q_lane[i, ch] * k_token[ch]
                scores[i * T + u] = partial
        if LOG_NPAD > 0:
            _exchange(scores, NPAD >> 1, lanes >> 1, lane)
        if LOG_NPAD > 1:
            _exchange(scores, NPAD >> 2, lanes >> 2, lane)
        if LOG_NPAD > 2:
            _exchange(scores, NPAD >> 3, lanes >> 3, lane)
        if LOG_NPAD > 3:
            _exchange(scores, NPAD >> 4, lanes >> 4, lane)
        if LOG_NPAD > 4:
            _exchange(scores, NPAD >> 5, lanes >> 5, lane)
        score = scores[0]
        for step in range(LOG_NPAD, LOG_L):
            score += cuda.shfl_xor_sync(FULL_MASK, score, (lanes >> 1) >> step)
        return score

    @cuda.jit(device=True, inline=True)
    def accumulate_batch(score, valid, k_scale, v_scale, running_max, running_sum, acc, v_now, table, v_token,
                         lane):
        """The online softmax over the batch's scores (``valid``: this lane's score is a token before the end;
        fp8: the page scales of its token), then every token's V row into the accumulators. Returns the
        new running maximum and sum."""
        part = lane & ~(lanes - 1)          # the first lane of this lane's part of the warp
        if FP8:
            score *= k_scale
        if not valid:
            score = float32(-math.inf)
        new_max = max(running_max, score)
        for b in range(LOG_T):
            new_max = max(new_max, cuda.shfl_xor_sync(FULL_MASK, new_max, 1 << (SHIFT + b)))
        weight = float32(0.0)
        if new_max > -math.inf:
            weight = math.exp(score - new_max)
        grew = new_max > running_max
        if cuda.any_sync(FULL_MASK, grew):
            correction = math.exp(running_max - new_max) if grew else float32(1.0)
            running_sum *= correction
            for i in range(G):
                head_correction = cuda.shfl_sync(FULL_MASK, correction, part + ((i * T) << SHIFT))
                for ch in range(CH):
                    acc[i, ch] *= head_correction
        running_sum += weight
        value_weight = weight * v_scale if FP8 else weight     # fp8: the page's V scale goes into the weight, once
        for u in range(T):
            convert(v_now, u, table, v_token)
            for i in range(G):
                token_weight = cuda.shfl_sync(FULL_MASK, value_weight, part + ((i * T + u) << SHIFT))
                for ch in range(CH):
                    acc[i, ch] += token_weight * v_token[ch]
        return new_max, running_sum

    @cuda.jit(device=True, inline=True)
    def write_partials(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, partial_max, partial_sum,
                       partial_acc, s, first, p, n_heads, d, warp, lane, tid):
        """The block's warps (and the parts of each warp) merged into day 6's partials of heads first ...
        first + n_heads - 1."""
        for b in range(LOG_T):
            running_sum += cuda.shfl_xor_sync(FULL_MASK, running_sum, 1 << (SHIFT + b))
        part = lane & ~(lanes - 1)
        if lanes < WARP:                    # the two halves of the warp: one softmax of both, lanes 0-15 keep it
            other_max = cuda.shfl_xor_sync(FULL_MASK, running_max, lanes)
            other_sum = cuda.shfl_xor_sync(FULL_MASK, running_sum, lanes)
            both_max = max(running_max, other_max)
            mine_factor = float32(0.0)
            other_factor = float32(0.0)
            if both_max > -math.inf:
                mine_factor = math.exp(running_max - both_max)
                other_factor = math.exp(other_max - both_max)
            running_max = both_max
            running_sum = running_sum * mine_factor + other_sum * other_factor
            for i in range(G):
                head_mine = cuda.shfl_sync(FULL_MASK, mine_factor, part + ((i * T) << SHIFT))
                head_other = cuda.shfl_sync(FULL_MASK, other_factor, part + ((i * T) << SHIFT))
                for ch in range(CH):
                    acc[i, ch] = acc[i, ch] * head_mine + cuda.shfl_xor_sync(FULL_MASK, acc[i, ch], lanes) * head_other
        mine = lane >> SHIFT
        if lane < lanes and lane & HEAD_LANES == 0 and mine < N:
            warp_max[warp, mine >> LOG_T] = running_max
            warp_sum[warp, mine >> LOG_T] = running_sum
        if lane < lanes:
            for i in range(G):
                for ch in range(CH):
                    c = lane * CH + ch if lane_major else lane + ch * WARP
                    if c < d:
                        warp_acc[warp, i, c] = acc[i, ch]
        _merge_warps(warp_max, warp_sum, warp_acc, partial_max, partial_sum, partial_acc, s, first, p, n_heads, d, tid)

    return (NPAD, SHIFT, LOG_T), score_batch, accumulate_batch, write_partials


def _build_decode_kernel(G: int, T: int, fmt: str):
    """Day 7's decode kernel (``gqa_attention._build_decode_kernel``: block (x, s, p) serves query heads
    first ... first + n_heads - 1 of KV head x // subgroups over partition p of sequence s, ``T`` tokens
    per warp at a time, one butterfly for a batch's ``G * T`` scores, the online softmax where the scores
    are, day 6's partials), with what a narrow cache changes:

    - each warp keeps the next batch's K and V rows in registers as they are stored (fp16 numbers, or
      fp8 codes 4 to a 32-bit word) and issues their loads before it computes the current batch, so a
      batch's loads wait on DRAM while the batch before is computed (with day 7's order, load then
      compute, a warp has its loads in flight only while it waits, and half or a quarter of day 7's
      bytes in flight no longer hide DRAM's latency);
    - every element is converted (fp16: one instruction) or decoded (fp8: a 256-entry table of
      ``value * 2**9`` in shared memory, built by the block) once per block, as its token is scored
      and as it is accumulated, not once per head;
    - fp8: the page scales (times 2**-9) multiply a whole score and a whole weight, not each element:
      lane u loads those of token u, and the lane that holds a score reads its token's scales from
      that lane (two shuffles a batch).
    """
    FP8 = fmt == "fp8_e4m3"
    RAW = {"float32": float32, "float16": numba_types.float16, "fp8_e4m3": uint32}[fmt]
    RAW_SHAPE = (T,) if FP8 else (T, CHANNELS)
    TABLE_SIZE = 256 if FP8 else 1
    load_batch = _load_codes if FP8 else _load_elements
    convert = _decode_codes if FP8 else _convert_elements
    (NPAD, SHIFT, _), score_batch, accumulate_batch, write_partials = _batch_steps(G, T, fmt, convert,
                                                                                 lane_major=FP8)

    @cuda.jit
    def gqa_decode_mixed_precision_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens,
                                          scale, partition_size, partial_max, partial_sum, partial_acc):
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
        end = min(start + partition_size, context_lens[s])
        mine = lane >> SHIFT
        my_token = mine & (T - 1)

        table = cuda.shared.array(TABLE_SIZE, float32)
        if FP8:
            _fill_e4m3_table(table, tid)

        # Lane l holds channels l, l + 32, ... of each head (fp8: 4 l ... 4 l + 3, the channels of its word).
        q_lane = cuda.local.array((G, CHANNELS), float32)
        acc = cuda.local.array((G, CHANNELS), float32)
        k_now = cuda.local.array(RAW_SHAPE, RAW)
        v_now = cuda.local.array(RAW_SHAPE, RAW)
        k_next = cuda.local.array(RAW_SHAPE, RAW)
        v_next = cuda.local.array(RAW_SHAPE, RAW)
        k_token = cuda.local.array(CHANNELS, float32)
        v_token = cuda.local.array(CHANNELS, float32)
        scores = cuda.local.array(NPAD, float32)
        pages = cuda.local.array(T, int32)
        slots = cuda.local.array(T, int32)
        _lane_query(q, s, first, n_heads, d, scale, lane * CHANNELS if FP8 else lane, 1 if FP8 else WARP, q_lane, acc)
        for u in range(T):
            if FP8:
                k_next[u] = 0
                v_next[u] = 0
            else:
                for ch in range(CHANNELS):
                    k_next[u, ch] = 0
                    v_next[u, ch] = 0
        running_max = float32(-math.inf)
        running_sum = float32(0.0)

        # The first batch: its pages, then its loads.
        page_index = (start + warp) // block_size
        slot = start + warp - page_index * block_size
        page_index, slot = _next_pages(block_tables, s, start + warp, end, block_size, page_index, slot,
                                       pages, slots)
        k_scale_next, v_scale_next = load_batch(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head,
                                                start + warp, end, lane, d, pages, slots, k_next, v_next)
        for t0 in range(start + warp, end, T * WARPS):
            # This batch is what was loaded last; the next one's loads go out before it is computed.
            for u in range(T):
                if FP8:
                    k_now[u] = k_next[u]
                    v_now[u] = v_next[u]
                else:
                    for ch in range(CHANNELS):
                        k_now[u, ch] = k_next[u, ch]
                        v_now[u, ch] = v_next[u, ch]
            k_scale_now = k_scale_next
            v_scale_now = v_scale_next
            page_index, slot = _next_pages(block_tables, s, t0 + T * WARPS, end, block_size, page_index, slot,
                                           pages, slots)
            k_scale_next, v_scale_next = load_batch(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head,
                                                    t0 + T * WARPS, end, lane, d, pages, slots, k_next, v_next)

            score = score_batch(q_lane, k_now, table, k_token, scores, lane)
            # fp8: the page's scales, read from the lane that loaded them
            k_scale = cuda.shfl_sync(FULL_MASK, k_scale_now, my_token) if FP8 else float32(1.0)
            v_scale = cuda.shfl_sync(FULL_MASK, v_scale_now, my_token) if FP8 else float32(1.0)
            running_max, running_sum = accumulate_batch(score, mine < G * T and t0 + my_token * WARPS < end, k_scale,
                                                        v_scale, running_max, running_sum, acc, v_now, table, v_token,
                                                        lane)

        warp_max = cuda.shared.array((WARPS, G), float32)
        warp_sum = cuda.shared.array((WARPS, G), float32)
        warp_acc = cuda.shared.array((WARPS, G, HEAD_DIM_MAX), float32)
        write_partials(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, partial_max, partial_sum,
                       partial_acc, s, first, p, n_heads, d, warp, lane, tid)

    return gqa_decode_mixed_precision_kernel


# A 1 x 1 stand-in for the scales of a float32 or fp16 cache (the kernel never reads it), per kind.
_NO_SCALES: dict = {}


def _no_scales(like):
    kind = is_device_array(like)
    if kind not in _NO_SCALES:
        ones = np.ones((1, 1), np.float32)
        _NO_SCALES[kind] = cuda.to_device(ones) if kind else ones
    return _NO_SCALES[kind]


def _check_scales(k_cache, k_scales, v_scales, fmt) -> None:
    num_blocks, kv_heads = k_cache.shape[:2]
    if fmt != "fp8_e4m3":
        for name, scales in (("k_scales", k_scales), ("v_scales", v_scales)):
            if scales is not None:
                raise ValueError(f"{name} must be None for a {fmt} cache (scales belong to an fp8 cache of uint8 "
                                 f"codes), got an array")
        return
    for name, scales in (("k_scales", k_scales), ("v_scales", v_scales)):
        if scales is None:
            raise ValueError(f"{name} must be given for an fp8 cache (uint8 codes): one float32 scale per "
                             f"(block, kv_head), shape ({num_blocks}, {kv_heads})")
        require_array(name, scales, (num_blocks, kv_heads), np.float32, dims=("num_blocks", "kv_heads"))
    require_same_kind(k_cache=k_cache, k_scales=k_scales, v_scales=v_scales)


def gqa_decode_mixed_precision(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                               scale=None, out=None, partition_size=None, max_context=None,
                               kernel=gqa_decode_mixed_precision_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16, float32 or fp8 e4m3; returns out
    (num_seqs, heads, head_dim) float32.

    The arguments of day 7's ``gqa_decode_split_k``, with ``k_cache`` and ``v_cache`` float16,
    float32, or uint8 e4m3 codes (``fp8_quantize``) with ``k_scales`` and ``v_scales`` (num_blocks,
    kv_heads) float32: element ``[b, h, t, c]`` stands for ``value(k_cache[b, h, t, c]) * k_scales[b,
    h]``. q and out are float32. ``kernel`` is a function of the group size and the cache format
    (``gqa_decode_mixed_precision_kernel``); ``merge_kernel`` is day 6's.
    """
    fmt, num_seqs, heads, head_dim, kv_heads = check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens)
    _check_scales(k_cache, k_scales, v_scales, fmt)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        partition_size = decode_partition_size(num_seqs, kv_heads * subgroups_for(heads // kv_heads), longest,
                                               _sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out
    if fmt == "fp8_e4m3":
        k_cache, v_cache = fp8_words(k_cache), fp8_words(v_cache)
    else:
        k_scales = v_scales = _no_scales(q)
    partial_max, partial_sum, partial_acc = _partials(q, num_seqs, heads, partitions, head_dim)
    kernel(heads // kv_heads, fmt)[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
        q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens, scale, partition_size,
        partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


# ----------------------------------------------------------------------------------------------
# Decode over runs of a page: one table read per run, rows at constant offsets, packed words
# ----------------------------------------------------------------------------------------------

# Tokens of a run, by cache format, for blocks of up to 4 heads (fewer when heads x tokens would pass 32):
# timed on an H100 at group 4, 8 x 32,768 and 64 x 4,096 tokens, head_dim 128 (ms at 64 x 4,096):
# float32 T1 0.912, T2 0.752, T4 0.767; fp16 T2 0.482, T4 0.401, T8 0.413; fp8 T2 0.527, T4 0.430, T8 0.400.
RUN_TOKENS = {"float32": 2, "float16": 4, "fp8_e4m3": 8}
_RUN_KERNELS: dict = {}

if config.ENABLE_CUDASIM:       # the simulator runs kernels as Python: NumPy reinterprets the word's bytes
    @cuda.jit(device=True, inline=True)
    def _four_halves(word):
        """The 4 fp16 numbers packed in a uint64 word (channel 4 l + j in bits 16 j ... 16 j + 15), as float32."""
        h = np.array([word], np.uint64).view(np.float16)
        return float32(h[0]), float32(h[1]), float32(h[2]), float32(h[3])

    @cuda.jit(device=True, inline=True)
    def _two_floats(word):
        """The 2 float32 numbers packed in a uint64 word (the lower channel in the low 32 bits)."""
        f = np.array([word], np.uint64).view(np.float32)
        return f[0], f[1]
else:                           # on a GPU: an LLVM bit cast of the register (no instruction) and cvt.f32.f16
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def _four_halves(typingctx, word):
        if word != types.uint64:
            return None

        def codegen(context, builder, signature, args):
            vec = builder.bitcast(args[0], ir.VectorType(ir.HalfType(), 4))
            return context.make_tuple(builder, signature.return_type, [
                builder.fpext(builder.extract_element(vec, ir.Constant(ir.IntType(32), i)), ir.FloatType())
                for i in range(4)])
        return types.UniTuple(types.float32, 4)(types.uint64), codegen

    @intrinsic
    def _two_floats(typingctx, word):
        if word != types.uint64:
            return None

        def codegen(context, builder, signature, args):
            vec = builder.bitcast(args[0], ir.VectorType(ir.FloatType(), 2))
            return context.make_tuple(builder, signature.return_type, [
                builder.extract_element(vec, ir.Constant(ir.IntType(32), i)) for i in range(2)])
        return types.UniTuple(types.float32, 2)(types.uint64), codegen


if config.ENABLE_CUDASIM:
    @cuda.jit(device=True, inline=True)
    def _eight_codes(word):
        """The 8 e4m3 codes packed in a uint64 word (channel j in byte j), as float32 numbers (not scaled), as
        PTX's cvt.rn.f16x2.e4m3x2 gives them: the codes 0x7f and 0xff are NaN (the table says +-480)."""
        values = []
        for code in np.array([word], np.uint64).view(np.uint8):
            magnitude = math.nan if code & 0x7F == 0x7F else _e4m3_integer(code & 0x7F) * _TWO_TO_MINUS_9
            values.append(float32(-magnitude if code & 0x80 else magnitude))      # 0x80 is -0.0
        return tuple(values)
else:                           # sm_89 and later: PTX's cvt.rn.f16x2.e4m3x2 turns 2 codes into 2 fp16 numbers, exactly
    @intrinsic
    def _eight_codes(typingctx, word):
        if word != types.uint64:
            return None

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            pair = ir.LiteralStructType([i32, i32])
            # Both halves of a 32-bit word in one asm: ptxas reads each half in place (no shift, no move).
            convert = ir.InlineAsm(ir.FunctionType(pair, [i32]),
                                   "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; "
                                   "cvt.rn.f16x2.e4m3x2 $1, hi; }", "=r,=r,r")
            values = []
            for half in range(2):
                codes = builder.trunc(builder.lshr(args[0], ir.Constant(args[0].type, 32 * half)), i32)
                converted = builder.call(convert, [codes])
                for j in range(2):
                    halves = builder.bitcast(builder.extract_value(converted, j), ir.VectorType(ir.HalfType(), 2))
                    values += [builder.fpext(builder.extract_element(halves, ir.Constant(i32, e)), ir.FloatType())
                               for e in range(2)]
            return context.make_tuple(builder, signature.return_type, values)
        return types.UniTuple(types.float32, 8)(types.uint64), codegen


def _build_page_runs_kernel(G: int, T: int, fmt: str):
    """``gqa_decode_mixed_precision``'s kernel (``G`` heads a block, day 6's partials, the same batch steps,
    ``_batch_steps``) with each warp on runs of ``T`` consecutive tokens of one page: warp w takes tokens
    start + w T ... start + w T + T - 1, then the run ``T * WARPS`` tokens on. A run's table entry is read
    once and its rows lie ``row_words`` apart from one address; the cache arrives as a flat array of
    words (``cache_words``) and lane l loads the word(s) of channels 4 l ... 4 l + 3 of each row: one
    8-byte word of 4 halves (fp16), two of 2 floats (float32), one 4-byte word of 4 codes (fp8), turned
    into numbers by ``_four_halves``, ``_two_floats`` or the block's e4m3 table. fp8: the page's scales
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
            out[0], out[1] = _two_floats(raw[u, 0])
            out[2], out[3] = _two_floats(raw[u, 1])
        else:
            out[0], out[1], out[2], out[3] = _four_halves(raw[u, 0])

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
                k_scale = k_scales[page, kv_head] * float32(_TWO_TO_MINUS_9)
                v_scale = v_scales[page, kv_head] * float32(_TWO_TO_MINUS_9)
            if has_channels:
                for u in range(T):
                    if t + u < end:
                        for w in range(WORDS):
                            k_raw[u, w] = k_cache[row + uint64(u) * stride + uint64(w)]
                            v_raw[u, w] = v_cache[row + uint64(u) * stride + uint64(w)]
        return k_scale, v_scale

    (NPAD, SHIFT, _), score_batch, accumulate_batch, write_partials = _batch_steps(G, T, fmt, convert,
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
            _fill_e4m3_table(table, tid)

        q_lane = cuda.local.array((G, CHANNELS), float32)
        acc = cuda.local.array((G, CHANNELS), float32)
        k_now = cuda.local.array((T, WORDS), RAW)
        v_now = cuda.local.array((T, WORDS), RAW)
        k_next = cuda.local.array((T, WORDS), RAW)
        v_next = cuda.local.array((T, WORDS), RAW)
        k_token = cuda.local.array(CHANNELS, float32)
        v_token = cuda.local.array(CHANNELS, float32)
        scores = cuda.local.array(NPAD, float32)
        _lane_query(q, s, first, n_heads, d, scale, lane * CHANNELS, 1, q_lane, acc)
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


def cache_words(cache, word=None):
    """A contiguous cache as the flat array of words ``gqa_decode_page_runs`` loads, no copy: uint64 words
    (4 fp16 numbers or 2 float32) or, for uint8 fp8 codes, uint32 words of 4 codes; ``word=np.uint64``: 8-byte
    words whatever the format (8 fp8 codes, as ``gqa_decode_half_warps`` loads them). NumPy or device arrays."""
    flat = cache.reshape(cache.size)
    return flat.view(word or (np.uint32 if np.dtype(cache.dtype) == np.uint8 else np.uint64))


def _prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out, partition_size,
                    max_context, *, channels: int, tokens, refused: dict | None = None, choose_partition=None):
    """What the page-runs, half-warp and tensor-core launchers check and size alike. head_dim must be a multiple of
    ``channels`` (the channels of a lane's words); ``tokens(group, fmt, block_size)`` gives the multiple of tokens a
    partition must be and why, ``(n, "...")``; ``refused``: cache formats the rung does not run, with the message
    to raise; ``choose_partition(fmt, num_seqs, blocks_per_partition, longest, sm_count)``: the partition size
    when ``partition_size`` is None (default: day 7's ``decode_partition_size``). Returns ``(out, step)``:
    ``step`` is None when out is empty (nothing to launch), else a namespace with the format, the sizes, the
    scale, the partition size and count, the scales (ones but for fp8) and the partial buffers."""
    fmt, num_seqs, heads, head_dim, kv_heads = check_decode_inputs(q, k_cache, v_cache, block_tables, context_lens)
    _check_scales(k_cache, k_scales, v_scales, fmt)
    if refused and fmt in refused:
        raise ValueError(refused[fmt])
    if head_dim % channels:
        raise ValueError(f"q must have a head_dim that is a multiple of {channels} (a lane loads the words of "
                         f"{channels} channels), got head_dim {head_dim}")
    block_size = k_cache.shape[2]
    multiple, why = tokens(heads // kv_heads, fmt, block_size)
    scale = default_scale(head_dim, scale)
    longest = longest_context(context_lens, max_context)
    if partition_size is None:
        blocks_per_partition = kv_heads * subgroups_for(heads // kv_heads)
        if choose_partition is None:
            partition_size = decode_partition_size(num_seqs, blocks_per_partition, longest, _sm_count(q))
        else:
            partition_size = choose_partition(fmt, num_seqs, blocks_per_partition, longest, _sm_count(q))
    partition_size = require_int("partition_size", partition_size, minimum=1)
    if partition_size % multiple:
        raise ValueError(f"partition_size must be a multiple of {why}, got {partition_size}")
    partitions = partitions_for(longest, partition_size)
    out = output_array("out", out, (num_seqs, heads, head_dim), like=q)
    if not (num_seqs and heads):
        return out, None
    if fmt != "fp8_e4m3":
        k_scales = v_scales = _no_scales(q)
    return out, types_namespace(fmt=fmt, num_seqs=num_seqs, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                                group=heads // kv_heads, block_size=block_size, scale=scale,
                                partition_size=partition_size, partitions=partitions, k_scales=k_scales,
                                v_scales=v_scales, partials=_partials(q, num_seqs, heads, partitions, head_dim),
                                grid=decode_grid(num_seqs, heads, kv_heads, partitions))


def _runs_of(run: int) -> tuple[int, str]:
    return run, f"the run of {run} tokens (runs never cross a partition)"


def gqa_decode_page_runs(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                         scale=None, out=None, partition_size=None, max_context=None,
                         kernel=gqa_decode_page_runs_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in fp16, float32 or fp8 e4m3, each warp on runs of
    consecutive tokens of a page; returns out (num_seqs, heads, head_dim) float32.

    The arguments of ``gqa_decode_mixed_precision``; head_dim must be a multiple of 4 and
    ``partition_size`` a multiple of the run (``run_tiling``), so that no run crosses a page. ``kernel``
    is a function of the group size, the cache format and the page size (``gqa_decode_page_runs_kernel``).
    """
    out, step = _prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                                partition_size, max_context, channels=CHANNELS,
                                tokens=lambda group, fmt, block_size: _runs_of(run_tiling(group, fmt, block_size)[2]))
    if step is None:
        return out
    row_words = (step.head_dim // 4 if step.fmt == "fp8_e4m3"
                 else step.head_dim * np.dtype(k_cache.dtype).itemsize // 8)
    kernel(step.group, step.fmt, step.block_size)[step.grid, THREADS](
        q, cache_words(k_cache), cache_words(v_cache), step.k_scales, step.v_scales, block_tables, context_lens,
        step.scale, step.partition_size, step.kv_heads, step.block_size, row_words, *step.partials)
    merge_kernel[(step.heads, step.num_seqs), HEAD_DIM_MAX](*step.partials, out)
    return out
    if fmt != "fp8_e4m3":
        k_scales = v_scales = _no_scales(q)
    row_words = head_dim // 4 if fmt == "fp8_e4m3" else head_dim * np.dtype(k_cache.dtype).itemsize // 8
    partial_max, partial_sum, partial_acc = _partials(q, num_seqs, heads, partitions, head_dim)
    kernel(heads // kv_heads, fmt, block_size)[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
        q, cache_words(k_cache), cache_words(v_cache), k_scales, v_scales, block_tables, context_lens, scale,
        partition_size, kv_heads, block_size, row_words, partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


# ----------------------------------------------------------------------------------------------
# Decode with half a warp per token: fewer instructions for each byte of a narrow cache
# ----------------------------------------------------------------------------------------------

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
    half the shuffles of a warp's), and the halves' softmaxes meet once, at the end (``_batch_steps`` with
    16 lanes). A half's rows lie ``STRIDE`` words apart from one address, so its loads are that address
    plus constant offsets, and a run wholly before the end loads without a test per token. Two sets of
    registers take turns holding the run being computed and the run in flight (no copy between them).
    ``fp8_convert``: fp8 codes turn into numbers through PTX's ``cvt.rn.f16x2.e4m3x2`` (``_eight_codes``;
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
    SCALE_UNIT = _TWO_TO_MINUS_9 if TABLE else 1.0      # the table holds value * 2**9
    if BS % T or D % 8 or not 0 < D <= HEAD_DIM_MAX:
        raise ValueError(f"a half's {T} tokens must divide the page size, got {BS}; head_dim a multiple of 8 up to "
                         f"{HEAD_DIM_MAX}, got {D}")

    @cuda.jit(device=True, inline=True)
    def convert(raw, u, table, out):
        if FP8 and not TABLE:
            out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7] = _eight_codes(raw[u, 0])
        elif FP8:
            word = raw[u, 0]
            low = uint32(word & uint64(0xFFFFFFFF))
            high = uint32(word >> uint64(32))
            for ch in range(4):
                out[ch] = table[(low >> uint32(8 * ch)) & uint32(0xFF)]
                out[4 + ch] = table[(high >> uint32(8 * ch)) & uint32(0xFF)]
        elif FP32:
            for w in range(WORDS):
                out[2 * w], out[2 * w + 1] = _two_floats(raw[u, w])
        else:
            for w in range(WORDS):
                out[4 * w], out[4 * w + 1], out[4 * w + 2], out[4 * w + 3] = _four_halves(raw[u, w])

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

    (NPAD, SHIFT, _), score_batch, accumulate_batch, write_partials = _batch_steps(G, T, fmt, convert,
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
            _fill_e4m3_table(table, tid)

        q_lane = cuda.local.array((G, CH), float32)
        acc = cuda.local.array((G, CH), float32)
        k_a = cuda.local.array((T, WORDS), uint64)
        v_a = cuda.local.array((T, WORDS), uint64)
        k_b = cuda.local.array((T, WORDS), uint64)
        v_b = cuda.local.array((T, WORDS), uint64)
        k_token = cuda.local.array(CH, float32)
        v_token = cuda.local.array(CH, float32)
        scores = cuda.local.array(NPAD, float32)
        _lane_query(q, s, first, n_heads, D, scale, r * CH, 1, q_lane, acc)
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
    out, step = _prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                                partition_size, max_context, channels=8,
                                tokens=lambda group, fmt, block_size: _runs_of(half_warp_tiling(group, fmt, block_size)[2]))
    if step is None:
        return out
    kernel(step.group, step.fmt, step.head_dim, step.block_size)[step.grid, THREADS](
        q, cache_words(k_cache, np.uint64), cache_words(v_cache, np.uint64), step.k_scales, step.v_scales,
        block_tables, context_lens, step.scale, step.partition_size, step.kv_heads, *step.partials)
    merge_kernel[(step.heads, step.num_seqs), HEAD_DIM_MAX](*step.partials, out)
    return out
    if fmt != "fp8_e4m3":
        k_scales = v_scales = _no_scales(q)
    partial_max, partial_sum, partial_acc = _partials(q, num_seqs, heads, partitions, head_dim)
    kernel(heads // kv_heads, fmt, head_dim, block_size)[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](
        q, cache_words(k_cache, np.uint64), cache_words(v_cache, np.uint64), k_scales, v_scales, block_tables, context_lens, scale,
        partition_size, kv_heads, partial_max, partial_sum, partial_acc)
    merge_kernel[(heads, num_seqs), HEAD_DIM_MAX](partial_max, partial_sum, partial_acc, out)
    return out


def _has_fp8_convert() -> bool:
    """Whether the current device converts e4m3 codes to fp16 in one instruction (compute capability 8.9 and
    later; the simulator: ``_eight_codes`` in NumPy)."""
    if config.ENABLE_CUDASIM:
        return True
    return tuple(cuda.get_current_device().compute_capability) >= (8, 9)


# ----------------------------------------------------------------------------------------------
# Decode on tensor cores: mma.sync reached as inline PTX
# ----------------------------------------------------------------------------------------------

TILE_TOKENS = 16        # tokens a warp takes at a time in gqa_decode_tensor_cores: the k of an m16n8k16 mma
TENSOR_PARTITION_MIN = 64   # the shortest partition tensor_partition_size weighs
# q's largest channel (times the softmax scale) becomes this before q is split into fp16 hi + lo, and a weight
# of 1 times the partition's largest V scale becomes P_UNIT: both well inside fp16's range (65504), so hi
# keeps 11 significant bits and lo the next 11 (lo's spacing below 2**-14 is 2**-24, far under float32's).
Q_UNIT = 8192.0
P_UNIT = 8192.0
_LOW_WORD = 0xFFFFFFFF
_TENSOR_REFUSED = {"float32": "k_cache must be stored in fp16 or as fp8 e4m3 codes for the tensor-core decode (its "
                              "numbers enter the mma as fp16), got float32: gqa_decode_half_warps takes a float32 cache"}
# Blocks of 128 threads an SM must hold (launch_bounds: ptxas keeps the registers under 65,536 / (128 x blocks)),
# by cache format; a warp loads one tile at a time (two were slower). Timed on an H100 at group 4, head_dim 128,
# 4 x 131,072 tokens in day 7's partitions of 1,024 (ms, median of 7): fp8 1 tile, 1 block (ptxas's choice, 211 registers): 0.499; 1 tile, 3 blocks (168, no
# spills): 0.465; 2 tiles, 2 blocks (252): 0.551; 4 blocks spill. fp16 1 tile: 0.782 with 1 block (254
# registers), 0.788 with 2. Moving the rows of the warp's next 1, 2 or 4 tiles into L2 ahead of their loads
# (prefetch.global.L2) made every variant slower: fp8 0.470, 0.475, 0.553. Copying each warp's tiles into a
# ring of 2, 3 or 4 slots in shared memory with cp.async (no registers held while the bytes travel; 16-byte
# copies, rows swizzled against bank conflicts) and computing from there, in one run against this kernel
# (fp8 0.510 ms, 0.71 of copy; fp16 0.795): fp8 3 slots at 3 blocks 0.485 (0.75 of copy; at 32 x 16,384
# tokens 0.81 against 0.76), 2 slots at 4 blocks 0.693, 3 at 2 blocks 0.548, 4 at 2 blocks 0.557; fp16 2
# slots 0.805, 3 slots 1.04. At 16 x 8,192 tokens (a few tiles a warp) the ring was slower for both, fp8 0.305
# against 0.244, so the registers stay. Written for one tile a warp (no loop over a warp's tiles, arrays one
# dimension fewer), the kernel computes the same bits and ptxas schedules it a little better: in one run fp8
# 0.466 against 0.494 ms, fp16 0.780 against 0.793 (at 64 x 16,384 tokens 0.854 against 0.896, 1.494 against
# 1.510).
TENSOR_MIN_BLOCKS = {"float16": 1, "fp8_e4m3": 3}
_TENSOR_KERNELS: dict = {}

# Partitions of the tensor-core decode (partition_size=None). Few of its blocks fit an SM at once (the blocks
# the registers leave: 2 for fp16, 3 for fp8), each lives long, and an SM with one block left runs it slowly:
# so the partition is chosen by a model of an SM's time. The grid's blocks spread evenly over the SMs; an SM
# runs its share in rounds of as many blocks as it holds, a round of m blocks at TENSOR_SM_RATES[m] of its speed
# with all it holds, and each block costs TENSOR_BLOCK_COST tokens' worth on top of its partition (its start,
# the first loads, the merge of its warps). The constants were fitted (least squares on log time) to fp8 timings
# on an H100 (8 KV heads, group 4, head_dim 128, partitions of 512 to 32,768 tokens at 9 steps from 8 x 4,096
# to 4 x 131,072 tokens; ms at 16 x 32,768: 512 0.481, 1,024 0.444, 2,048 0.429, 4,096 0.412, 8,192 0.499,
# 16,384 0.426, 32,768 0.721). Timed again at the 17 steps of day 8's recording, partitions of 64 to 16,384
# tokens, the model's choice was within 0.6% of the fastest partition at every step, fp8 and fp16 alike. Day
# 7's rule (the longest of up to 1,024 tokens giving 6 blocks per SM) was up to 1.68 times slower for fp8 (8 x
# 1,024 tokens; 1.06 to 1.08 on steps of 512K tokens or more) and 1.75 for fp16. Doing without the scan of the
# partition's V scales (the largest met so far, rescaled like the running maximum) and issuing the first tile's
# loads before preparing q were tried too, together: 0.5 to 4.6% slower at 8 of 9 steps at day 7's partitions
# (0.9% faster at 8 x 4,096), 0.8% slower at 16 x 32,768 in partitions of 4,096, so neither is kept.
TENSOR_BLOCKS_PER_SM = {"float16": 2, "fp8_e4m3": 3}
TENSOR_SM_RATES = {1: 0.58, 2: 0.92, 3: 1.0}
TENSOR_BLOCK_COST = 140


def tensor_partition_size(fmt: str, num_seqs: int, blocks_per_partition: int, longest: int,
                          sm_count: int | None) -> int:
    """Tokens per partition of gqa_decode_tensor_cores when ``partition_size`` is None: of 64, 128, ... up to the
    first that holds the ``longest`` context, the one the SM model above finishes first (the shorter on a tie).
    Without an SM count (the simulator), day 6's ``PARTITION_SIZE``."""
    if not sm_count:
        return decode_partition_size(num_seqs, blocks_per_partition, longest, sm_count)
    holds = TENSOR_BLOCKS_PER_SM[fmt]
    best_time, best = math.inf, TENSOR_PARTITION_MIN
    size = TENSOR_PARTITION_MIN
    while True:
        per_sm = cdiv(num_seqs * blocks_per_partition * partitions_for(longest, size), sm_count)
        rounds, left = divmod(per_sm, holds)
        block = size + TENSOR_BLOCK_COST
        time = rounds * holds * block / TENSOR_SM_RATES[holds]
        if left:
            time += left * block / TENSOR_SM_RATES[left]
        if time < best_time:
            best_time, best = time, size
        if size >= longest:
            return best
        size *= 2

if config.ENABLE_CUDASIM:       # the simulator: NumPy on the bits, and course.simulator's warp-wide mma
    @cuda.jit(device=True, inline=True)
    def _e4m3_pairs(word):
        """The 4 e4m3 codes of a uint32 word (byte j: code j) as two uint32 words of 2 fp16 numbers each (codes
        0, 1 and 2, 3; the lower code in the low half), exactly as PTX's cvt.rn.f16x2.e4m3x2 gives them."""
        values = np.empty(4, np.float16)
        for j, code in enumerate(np.array([word], np.uint32).view(np.uint8)):
            magnitude = math.nan if code & 0x7F == 0x7F else _e4m3_integer(code & 0x7F) * _TWO_TO_MINUS_9
            values[j] = -magnitude if code & 0x80 else magnitude
        pairs = values.view(np.uint32)
        return uint32(pairs[0]), uint32(pairs[1])

    @cuda.jit(device=True, inline=True)
    def _byte_perm(a, b, selector):
        """PTX's prmt.b32: byte j of the result is byte ``selector >> 4 j & 7`` of b:a (a's bytes are 0-3)."""
        both = int(b) << 32 | int(a)
        out = 0
        for j in range(4):
            out |= (both >> 8 * (int(selector) >> 4 * j & 7) & 0xFF) << 8 * j
        return uint32(out)

    @cuda.jit(device=True, inline=True)
    def _pack_halves(low, high):
        """Two float32 numbers rounded to nearest fp16 and packed into a uint32 (``low`` in the low half)."""
        return uint32(np.array([low, high], np.float32).astype(np.float16).view(np.uint32)[0])

    @cuda.jit(device=True, inline=True)
    def _unpack_halves(word):
        """The two fp16 numbers of a uint32 word, as float32 (the low half first)."""
        h = np.array([word], np.uint32).view(np.float16)
        return float32(h[0]), float32(h[1])

    @cuda.jit(device=True, inline=True)
    def _mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """D = A B + C for an m16n8k16 tile, this lane's fragments (``course.simulator.mma_m16n8k16``)."""
        from course.simulator import mma_m16n8k16

        return mma_m16n8k16((a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3))
else:                           # on a GPU: inline PTX (cvt, prmt, mma.sync) and an LLVM bit cast
    def _asm_call(builder, text, constraints, result_types, operands):
        """The results of inline PTX ``text`` (LLVM wants one result as itself, several as a struct)."""
        single = len(result_types) == 1
        returns = result_types[0] if single else ir.LiteralStructType(result_types)
        function = ir.FunctionType(returns, [op.type for op in operands])
        result = builder.call(ir.InlineAsm(function, text, constraints), operands)
        return [result] if single else [builder.extract_value(result, i) for i in range(len(result_types))]

    @intrinsic
    def _e4m3_pairs(typingctx, word):
        if word != types.uint32:
            return None

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            pairs = _asm_call(builder, "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; "
                                       "cvt.rn.f16x2.e4m3x2 $1, hi; }", "=r,=r,r", [i32, i32], [args[0]])
            return context.make_tuple(builder, signature.return_type, pairs)
        return types.UniTuple(types.uint32, 2)(types.uint32), codegen

    @intrinsic
    def _byte_perm(typingctx, a, b, selector):
        if (a, b, selector) != (types.uint32,) * 3:
            return None

        def codegen(context, builder, signature, args):
            return _asm_call(builder, "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [ir.IntType(32)], list(args))[0]
        return types.uint32(types.uint32, types.uint32, types.uint32), codegen

    @intrinsic
    def _pack_halves(typingctx, low, high):
        if (low, high) != (types.float32,) * 2:
            return None

        def codegen(context, builder, signature, args):
            return _asm_call(builder, "cvt.rn.f16x2.f32 $0, $2, $1;", "=r,f,f", [ir.IntType(32)], list(args))[0]
        return types.uint32(types.float32, types.float32), codegen

    @intrinsic
    def _unpack_halves(typingctx, word):
        if word != types.uint32:
            return None

        def codegen(context, builder, signature, args):
            vec = builder.bitcast(args[0], ir.VectorType(ir.HalfType(), 2))
            return context.make_tuple(builder, signature.return_type, [
                builder.fpext(builder.extract_element(vec, ir.Constant(ir.IntType(32), i)), ir.FloatType())
                for i in range(2)])
        return types.UniTuple(types.float32, 2)(types.uint32), codegen

    @intrinsic
    def _mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        if (a0, a1, a2, a3, b0, b1) != (types.uint32,) * 6 or (c0, c1, c2, c3) != (types.float32,) * 4:
            return None

        def codegen(context, builder, signature, args):
            d = _asm_call(builder, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, "
                                   "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                          "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", [ir.FloatType()] * 4, list(args))
            return context.make_tuple(builder, signature.return_type, d)
        return types.UniTuple(types.float32, 4)(*(types.uint32,) * 6, *(types.float32,) * 4), codegen


@cuda.jit(device=True, inline=True)
def _split_halves(x0, x1):
    """Two float32 numbers as fp16 pairs hi + lo (hi: each rounded to fp16; lo: what rounding left, rounded)."""
    high = _pack_halves(x0, x1)
    h0, h1 = _unpack_halves(high)
    return high, _pack_halves(x0 - h0, x1 - h1)


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
    def compute_tile(qa, k_raw, v_raw, k_sc, v_sc, t, end, tq, inv_f, pv_unit, running_max, running_sum, acc):
        """Tile t's scores, online softmax (head g) and weighted V rows into acc; returns the new running
        maximum and this lane's share of the running sum."""
        scores = cuda.local.array((2, 2), float32)
        for b in range(2):
            c0 = c1 = c2 = c3 = float32(0.0)
            for j in range(KCH):
                if FP8:
                    word = k_raw[b, j, 0]
                    r0, r1 = _e4m3_pairs(uint32(word & LOW))
                    r2, r3 = _e4m3_pairs(uint32(word >> uint64(32)))
                else:
                    r0 = uint32(k_raw[b, j, 0] & LOW)
                    r1 = uint32(k_raw[b, j, 0] >> uint64(32))
                    r2 = uint32(k_raw[b, j, 1] & LOW)
                    r3 = uint32(k_raw[b, j, 1] >> uint64(32))
                c0, c1, c2, c3 = _mma(qa[2 * j, 0], qa[2 * j, 1], qa[2 * j, 2], qa[2 * j, 3], r0, r1, c0, c1, c2, c3)
                c0, c1, c2, c3 = _mma(qa[2 * j + 1, 0], qa[2 * j + 1, 1], qa[2 * j + 1, 2], qa[2 * j + 1, 3], r2, r3,
                                      c0, c1, c2, c3)
            scores[b, 0] = (c0 + c2) * (k_sc[b, 0] * inv_f)
            scores[b, 1] = (c1 + c3) * (k_sc[b, 1] * inv_f)
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
            alpha_even = cuda.shfl_sync(FULL_MASK, alpha, 8 * tq)        # heads 2 tq and 2 tq + 1: lanes 8 tq, 8 tq + 4
            alpha_odd = cuda.shfl_sync(FULL_MASK, alpha, 8 * tq + 4)
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
        high0, low0 = _split_halves(weights[0, 0], weights[0, 1])
        high1, low1 = _split_halves(weights[1, 0], weights[1, 1])
        for i in range(VCH):
            for c in range(CW):
                for hh in range(2):
                    pairs = cuda.local.array((2, 4), uint32)    # [b]: channels x, x + 1 (fp16) or x ... x + 3 (fp8)
                    for b in range(2):
                        a = uint32((v_raw[b, 0, i, c] >> uint64(32 * hh)) & LOW)
                        z = uint32((v_raw[b, 1, i, c] >> uint64(32 * hh)) & LOW)
                        if FP8:
                            pairs[b, 0], pairs[b, 1] = _e4m3_pairs(_byte_perm(a, z, uint32(0x5140)))
                            pairs[b, 2], pairs[b, 3] = _e4m3_pairs(_byte_perm(a, z, uint32(0x7362)))
                        else:
                            pairs[b, 0] = _byte_perm(a, z, uint32(0x5410))
                            pairs[b, 1] = _byte_perm(a, z, uint32(0x7632))
                    for x in range(2 if FP8 else 1):
                        m = 4 * i + (2 * hh + x if FP8 else 2 * c + hh)
                        a0, a1, a2, a3 = pairs[0, 2 * x], pairs[0, 2 * x + 1], pairs[1, 2 * x], pairs[1, 2 * x + 1]
                        d0, d1, d2, d3 = _mma(a0, a1, a2, a3, high0, high1, acc[m, 0], acc[m, 1], acc[m, 2], acc[m, 3])
                        acc[m, 0], acc[m, 1], acc[m, 2], acc[m, 3] = _mma(a0, a1, a2, a3, low0, low1, d0, d1, d2, d3)
        return new_max, running_sum

    @cuda.jit(launch_bounds=(THREADS, TENSOR_MIN_BLOCKS[fmt]))
    def gqa_decode_tensor_cores_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens, scale,
                                       partition_size, kv_heads, partial_max, partial_sum, partial_acc):
        group = q.shape[1] // kv_heads
        subgroups = (group + GROUP_MAX - 1) // GROUP_MAX
        kv_head = cuda.blockIdx.x // subgroups
        heads = (group + subgroups - 1) // subgroups
        first = kv_head * group + (cuda.blockIdx.x - kv_head * subgroups) * heads
        n_heads = min(heads, (kv_head + 1) * group - first)
        s = cuda.blockIdx.y
        p = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        warp = tid // WARP
        lane = tid % WARP
        g = lane >> 2
        tq = lane & 3
        start = p * partition_size
        end = min(start + partition_size, context_lens[s])

        # q of head g (channels 8 (tq + 4 j) ...), scaled so its largest channel is Q_UNIT, as fp16 hi + lo:
        # the A fragments of the score mma (rows g: hi, rows g + 8: lo) for every step along head_dim.
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
        qa = cuda.local.array((KSTEPS, 4), uint32)     # a0 hi(0, 1), a1 lo(0, 1), a2 hi(2, 3), a3 lo(2, 3)
        for j in range(KCH):
            for h in range(2):
                qa[2 * j + h, 0], qa[2 * j + h, 1] = _split_halves(q_raw[j, 4 * h] * f, q_raw[j, 4 * h + 1] * f)
                qa[2 * j + h, 2], qa[2 * j + h, 3] = _split_halves(q_raw[j, 4 * h + 2] * f, q_raw[j, 4 * h + 3] * f)

        # fp8: weights times the V scale are brought to P_UNIT by the partition's largest V scale.
        pv_unit = float32(P_UNIT)
        if FP8:
            vmax = float32(0.0)
            for index in range(start // BS + lane, (end + BS - 1) // BS, WARP):
                vmax = max(vmax, v_scales[block_tables[s, index], kv_head])
            for step in range(5):
                vmax = max(vmax, cuda.shfl_xor_sync(FULL_MASK, vmax, 1 << step))
            if vmax > 0:
                pv_unit = float32(P_UNIT) / vmax
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
        out_unit = float32(1.0) / pv_unit
        for i in range(VCH):
            for e in range(4):
                c = 8 * (g + 8 * i) + 2 * e         # channel of rows g (and c + 1: rows g + 8) of block 4 i + e
                if V_FULL or c < D:
                    m = 4 * i + e
                    warp_acc[warp, 2 * tq, c] = acc[m, 0] * out_unit
                    warp_acc[warp, 2 * tq + 1, c] = acc[m, 1] * out_unit
                    warp_acc[warp, 2 * tq, c + 1] = acc[m, 2] * out_unit
                    warp_acc[warp, 2 * tq + 1, c + 1] = acc[m, 3] * out_unit
        _merge_warps(warp_max, warp_sum, warp_acc, partial_max, partial_sum, partial_acc, s, first, p, n_heads, D,
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
    out, step = _prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
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

# ----------------------------------------------------------------------------------------------
# Tools: quantize to fp8 e4m3 codes with per-group scales, and back
# ----------------------------------------------------------------------------------------------

FP8_THREADS = 128       # threads of a quantize block (one block per group) and of a dequantize block
FP8_WARPS = FP8_THREADS // WARP    # warps of a quantize block


@cuda.jit
def fp8_quantize_kernel(x, scales, codes, compute_scales):
    """Block g quantizes group g (row g of x, (groups, group_size) float32) into row g of codes.

    With ``compute_scales`` the block first finds the group's amax (each thread over its elements,
    then a butterfly per warp and the warps' maxima in shared memory) and thread 0 writes
    ``scales[g] = amax / 448`` (1 for a group of zeros); else it reads ``scales[g]``."""
    g = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    n = x.shape[1]
    warp_amax = cuda.shared.array(FP8_WARPS, float32)
    if compute_scales:
        amax = float32(0.0)
        for i in range(tid, n, FP8_THREADS):
            amax = max(amax, abs(x[g, i]))
        for offset in (16, 8, 4, 2, 1):
            amax = max(amax, cuda.shfl_xor_sync(FULL_MASK, amax, offset))
        if tid % WARP == 0:
            warp_amax[tid // WARP] = amax
        cuda.syncthreads()
        for w in range(FP8_WARPS):
            amax = max(amax, warp_amax[w])
        scale = amax / float32(E4M3_MAX) if amax > 0 else float32(1.0)
        if tid == 0:
            scales[g] = scale
    else:
        scale = scales[g]
    for i in range(tid, n, FP8_THREADS):
        codes[g, i] = _e4m3_code(x[g, i] / scale)


def _grouped(name, a, group_ndim):
    """(groups, group_size) of ``a`` whose last ``group_ndim`` dimensions form a group, and the leading shape."""
    if a.ndim < group_ndim:
        raise ValueError(f"{name} must have at least group_ndim = {group_ndim} dimensions (its last group_ndim "
                         f"dimensions form a group), got shape {tuple(a.shape)}")
    lead = tuple(a.shape[:a.ndim - group_ndim])
    groups = math.prod(lead)
    return groups, (math.prod(a.shape) // groups if groups else 0), lead


def fp8_quantize(x, *, scales=None, group_ndim=2, out=None, out_scales=None, kernel=fp8_quantize_kernel):
    """Quantize float32 ``x`` to fp8 e4m3 codes with one float32 scale per group; returns (codes, scales).

    x: float32, any shape with at least ``group_ndim`` dimensions; its last ``group_ndim`` dimensions
    form a group (2, the default: a page of one KV head of a cache (num_blocks, kv_heads, block_size,
    head_dim), one scale per (block, kv_head)). scales: float32 of the leading shape
    ``x.shape[:-group_ndim]``, positive and finite (checked for NumPy arrays); None computes
    ``amax / 448`` per group (then x must be finite). Returns codes (uint8, the shape of x; ``out``)
    and the scales (the given array, or a new one: ``out_scales``). Bit for bit
    ``reference.quantize_fp8``. One block of ``FP8_THREADS`` threads per group.
    """
    require_dtype("x", x, np.float32)
    group_ndim = require_int("group_ndim", group_ndim, minimum=1)
    shape = tuple(x.shape)
    require_array("x", x, (None,) * len(shape), np.float32)
    groups, group_size, lead = _grouped("x", x, group_ndim)
    compute = scales is None
    if compute:
        if not is_device_array(x) and x.size and not np.all(np.isfinite(x)):
            raise ValueError("x must be finite when the scales are computed from it (amax / 448); give scales")
        scales = output_array("out_scales", out_scales, lead, like=x)
    else:
        if out_scales is not None:
            raise ValueError("out_scales must be None when scales are given (the given scales are returned)")
        require_array("scales", scales, lead, np.float32)
        require_same_kind(x=x, scales=scales)
        if not is_device_array(scales) and scales.size and not np.all(np.isfinite(scales) & (scales > 0)):
            raise ValueError("scales must be positive and finite")
    codes = output_array("out", out, shape, like=x, dtype=np.uint8)
    if groups and group_size:
        # The kernel sees (groups, group_size) views; those of the outputs are outputs too.
        group_scales = scales.reshape(groups)
        kernel[groups, FP8_THREADS](x.reshape(groups, group_size),
                                    note_output(group_scales) if compute else group_scales,
                                    note_output(codes.reshape(groups, group_size)), compute)
    return codes, scales


@cuda.jit
def fp8_dequantize_kernel(codes, scales, out):
    """Thread i writes out[g, c] = value(codes[g, c]) * scales[g] for element i = g * group_size + c."""
    i = cuda.grid(1)
    n = codes.shape[1]
    if i < codes.shape[0] * n:
        g = i // n
        c = i - g * n
        out[g, c] = float32(_e4m3_integer(codes[g, c])) * (scales[g] * float32(_TWO_TO_MINUS_9))


def fp8_dequantize(codes, scales, *, group_ndim=2, out=None, kernel=fp8_dequantize_kernel):
    """float32 values ``value(code) * scale`` of fp8 e4m3 codes (uint8) with one scale per group of
    their last ``group_ndim`` dimensions (scales: float32 of the leading shape); returns out, the
    shape of codes. Each is ``reference.dequantize_fp8`` rounded once to float32."""
    require_dtype("codes", codes, np.uint8)
    group_ndim = require_int("group_ndim", group_ndim, minimum=1)
    shape = tuple(codes.shape)
    require_array("codes", codes, (None,) * len(shape), np.uint8)
    groups, group_size, lead = _grouped("codes", codes, group_ndim)
    require_array("scales", scales, lead, np.float32)
    require_same_kind(codes=codes, scales=scales)
    out = output_array("out", out, shape, like=codes)
    total = groups * group_size
    if total:
        kernel[cdiv(total, FP8_THREADS), FP8_THREADS](codes.reshape(groups, group_size), scales.reshape(groups),
                                                      note_output(out.reshape(groups, group_size)))
    return out


RUNGS = ladder(
    Rung("gqa_prefill_mixed_tiles", gqa_prefill_mixed_tiles,
         "day 7's tiles on q, k, v and o stored in fp16 or bf16, converted on load; head_dim read at run time"),
    Rung("gqa_prefill_mixed_precision", gqa_prefill_mixed_precision,
         "head_dim fixed at compile time: each row's query and accumulator in registers, as day 7's flash rung"),
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
)
