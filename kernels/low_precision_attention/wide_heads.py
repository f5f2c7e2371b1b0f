"""Day 8's rungs for the head sizes past 128 that current models use (Gemma's 256 and 192) and for a bf16 cache.

Every rung before these stops at day 6's ``HEAD_DIM_MAX`` = 128, for one reason in each family: a decode lane
holds a fixed number of channels of each head (4 a lane of a whole warp, 8 a lane of a half warp: 128 channels),
and a prefill thread holds its row's whole query and accumulator, 2 x 128 floats at 128, already more than its
255 registers. These two rungs take ``head_dim`` up to ``WIDE_HEAD_DIM_MAX`` = 256 by giving a row or a token
more threads, never a thread more channels, so no thread holds more than the fastest rung before it held at 128:

- ``gqa_prefill_wide_heads``: ``gqa_prefill_mixed_precision`` (fp16, bf16 or float32 tensors, float32
  arithmetic) with ``ceil(head_dim / 128)`` threads per (position, head) row: up to 128 one thread, as before;
  past it two neighbouring lanes, each holding every other channel of the row's query and accumulator (channels
  ``part, part + 2, ...``, so the two read neighbouring words of a K or V row in shared memory, no bank
  conflict). A score is the two lanes' halves of the dot product summed by one shuffle, and both lanes run the
  row's online softmax on the same sum. A block keeps its 256 threads (``ROWS_MAX``): 128 rows past 128, so
  ``positions * heads`` halves, and its K and V tiles hold 8 keys instead of 16, so its shared memory stays
  24 KiB (``wide_prefill_shared_bytes``; 16 keys would take the whole 48 KiB a block may allocate statically).
  bf16 tensors reach the kernel as their bits (uint16 views) and are converted without numba's call to a linked
  function (``kernels.intrinsics.bfloat16_value`` on load, ``bfloat16_bits``, one ``cvt.rn.bf16.f32``, on
  store): a loop over a thread's channels that holds a call is not unrolled, and its query and accumulator
  would go to local memory, as they do in ``gqa_prefill_mixed_precision`` on bf16.
- ``gqa_decode_wide_heads``: ``gqa_decode_half_warps`` (runs of tokens, head_dim and the page size compiled in,
  the cache read as 8-byte words, fp8 decoded by ``cvt.rn.f16x2.e4m3x2`` on sm_89 and later) with 8 channels a
  lane at every head_dim: up to 128 a token is read by half a warp, as before; past it by the whole warp (32
  lanes x 8 channels = 256), one batch of tokens a warp instead of one a half, so a lane's registers are those
  of the half-warp rung at 128 and its shared memory (each warp's accumulators, ``WARPS x heads x head_dim``
  floats) 32 KiB at 256. It also reads a bf16 cache (``WIDE_CACHE_FORMATS``): a bf16 number is the upper half of
  the float32 of the same value, so ``four_bfloat16s`` moves each 16-bit number of a word to the top of a 32-bit
  word and reads it as float32 (shifts and masks, no conversion call): the fp16 path's loads and arithmetic
  with another decode of the same words. head_dim must be a multiple of 8 (a lane loads 8 channels as words).

Their tilings past 128 (two threads a row and 8 keys a tile; a whole warp a token) are the smallest change that
lifts the limit, with each thread's registers unchanged, not a tuned choice, and only head_dim 128 has been timed:
on an H100, ``day08_decode_timing`` (2026-12-07) has the decode rung at 0.99 to 1.00 times ``gqa_decode_half_warps``'
speed on the float32, fp16 and fp8 caches at every recorded step, and on a bf16 cache at 0.99 to 1.00 times the
half-warp rung on fp16 (0.91 to 0.95 of the copy bandwidth at the steps of 524,288 tokens or more); and
``day08_prefill_timing`` (2026-12-05) the prefill rung at 9.0 to 9.6 TFLOP/s in fp16, bf16 and float32: as fast as
``gqa_prefill_mixed_precision`` in fp16 and float32, and 0.94 times its speed in bf16.

Layouts, arguments and checks are those of the rungs they extend (``docs/design-notes.md`` §2): the prefill's q,
k, v, o of one dtype of ``PREFILL_DTYPES`` (bf16: ``ml_dtypes.bfloat16``), the decode's float32 q and out over a
paged cache of float32, fp16, bf16 or fp8 e4m3 codes with their scales. A head_dim past 256, a bf16 cache in
another decode rung or a head_dim past 128 in another rung is refused with an error that names the argument and
the limit.
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, uint32, uint64

from kernels.gqa_attention import GROUP_MAX, ROWS_MAX, TILE_KV, TILE_POS, subgroups_for
from kernels.intrinsics import bfloat16_bits, bfloat16_value, eight_codes, four_halves, two_floats
from kernels.launching import WARP, cdiv, default_scale, note_output, output_array, require_bool
from kernels.paged_attention import HEAD_DIM_MAX, THREADS, WARPS, paged_attention_v2_merge_kernel
from kernels.paging import prepare_kv_lens

from .common import (WIDE_CACHE_FORMATS, WIDE_HEAD_DIM_MAX, batch_steps, cache_words, fill_e4m3_table, lane_query,
                     prepare_decode, runs_of)
from .fp8 import TWO_TO_MINUS_9
from .half_warps import HALF, HALF_CHANNELS
from .prefill import check_prefill_inputs

__all__ = ["WIDE_CHANNELS", "WIDE_RUN_TOKENS", "WIDE_MIN_BLOCKS", "row_threads", "wide_prefill_tiling",
           "wide_prefill_tiling_on_device", "wide_prefill_geometry", "wide_tile_kv", "wide_prefill_shared_bytes",
           "gqa_prefill_wide_heads_kernel", "gqa_prefill_wide_heads", "four_bfloat16s", "token_lanes",
           "wide_decode_tiling", "wide_decode_shared_bytes", "gqa_decode_wide_heads_kernel", "gqa_decode_wide_heads"]


# ----------------------------------------------------------------------------------------------
# Prefill: one or two threads a row
# ----------------------------------------------------------------------------------------------

def row_threads(head_dim: int) -> int:
    """Threads that share a prefill row at ``head_dim``: ``ceil(head_dim / HEAD_DIM_MAX)``, 1 up to 128, 2 up to 256,
    so a thread holds at most 128 channels of the row's query and accumulator."""
    return cdiv(head_dim, HEAD_DIM_MAX)


def wide_prefill_tiling(group: int, rows_max: int) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, positions)`` of a ``gqa_prefill_wide_heads`` block of at most ``rows_max``
    rows (``ROWS_MAX // row_threads(head_dim)``): day 7's ``prefill_tiling`` with that many rows. Plain integer
    arithmetic, so the kernel calls it too (as a device function)."""
    subgroups = (group + rows_max - 1) // rows_max
    heads_per_block = (group + subgroups - 1) // subgroups
    positions = min(TILE_POS, rows_max // heads_per_block)
    return subgroups, heads_per_block, positions


wide_prefill_tiling_on_device = cuda.jit(device=True, inline=True)(wide_prefill_tiling)


def wide_prefill_geometry(batch: int, heads: int, kv_heads: int, n_queries: int, head_dim: int):
    """``(grid, threads)`` of ``gqa_prefill_wide_heads``: day 7's grid (position tiles, KV heads x sub-groups,
    batch) over blocks of ``positions * heads_per_block`` rows of ``row_threads(head_dim)`` threads each."""
    parts = row_threads(head_dim)
    subgroups, heads_per_block, positions = wide_prefill_tiling(heads // kv_heads, ROWS_MAX // parts)
    return (cdiv(n_queries, positions), kv_heads * subgroups, batch), positions * heads_per_block * parts


def wide_tile_kv(head_dim: int) -> int:
    """Keys per K and V tile of ``gqa_prefill_wide_heads``: day 7's ``TILE_KV`` (16) up to 128, half of it past."""
    return TILE_KV if head_dim <= HEAD_DIM_MAX else TILE_KV // 2


def wide_prefill_shared_bytes(head_dim: int) -> int:
    """Static shared memory of one ``gqa_prefill_wide_heads`` block: K and V tiles of ``wide_tile_kv(head_dim)``
    keys of ``head_dim`` float32 channels (one more, of zeros, for an odd head_dim past 128), and a score per key
    for each of ``ROWS_MAX`` threads (24 KiB at 256)."""
    keys = wide_tile_kv(head_dim)
    parts = row_threads(head_dim)
    return (2 * keys * cdiv(head_dim, parts) * parts + keys * ROWS_MAX) * 4


_PREFILL_KERNELS: dict = {}


def gqa_prefill_wide_heads_kernel(head_dim: int, bf16: bool = False):
    """The prefill kernel for one ``head_dim`` (1 ... WIDE_HEAD_DIM_MAX), compiled on first use and kept; numba
    compiles it once per storage dtype it is launched with (fp16, float32). ``bf16``: the kernel of bf16 tensors,
    which takes them as their bits (uint16 arrays)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    if not 1 <= head_dim <= WIDE_HEAD_DIM_MAX:
        raise ValueError(f"head_dim must lie in [1, {WIDE_HEAD_DIM_MAX}] (WIDE_HEAD_DIM_MAX), got {head_dim}")
    key = (int(head_dim), bool(bf16))
    if key not in _PREFILL_KERNELS:
        _PREFILL_KERNELS[key] = _build_wide_prefill_kernel(*key)
    return _PREFILL_KERNELS[key]


def _build_wide_prefill_kernel(D: int, BF16: bool):
    """``gqa_prefill_mixed_precision``'s kernel with ``P = row_threads(D)`` threads a row: thread t of block
    (x, y, b) is part t % P of row t // P, which owns position x * positions + row // heads_per_block of head
    row % heads_per_block of sub-group y % subgroups, and holds channels part, part + P, ... of the row.

    ``BF16``: q, k, v and o are the bits of bf16 tensors (uint16), converted by ``bfloat16_value`` and
    ``bfloat16_bits``: numba-cuda's own bf16 conversions are calls to a linked function, and a loop over a
    thread's channels that holds a call is not unrolled, which leaves the row's query and accumulator in local
    memory (as in ``gqa_prefill_mixed_precision`` on bf16)."""
    P = row_threads(D)
    LOG_P = P.bit_length() - 1
    CH = cdiv(D, P)                         # channels of a thread (the last part may own one fewer)
    FULL = CH * P == D
    DP = CH * P                             # a row of a K or V tile: D, or D + 1, a column of zeros, for an odd D
    SHARED = CH if FULL else CH - 1         # channels every part of a row has
    ROWS = ROWS_MAX // P
    TK = wide_tile_kv(D)
    ROW_LANES = (1 << P) - 1                # the lanes of a row's threads, from its first
    if 1 << LOG_P != P or WARP % P or not 1 <= D <= WIDE_HEAD_DIM_MAX:
        raise ValueError(f"head_dim must lie in [1, {WIDE_HEAD_DIM_MAX}], got {D}")

    @cuda.jit(device=True, inline=True)
    def load(x):
        """A stored element as float32."""
        return bfloat16_value(x) if BF16 else float32(x)

    @cuda.jit(device=True, inline=True)
    def stored(x):
        """A float32 number rounded to the storage format (bf16: its bits; else numba rounds on the store)."""
        return bfloat16_bits(x) if BF16 else x

    @cuda.jit
    def gqa_prefill_wide_heads_kernel(q, k, v, kv_lens, o, scale, causal):
        group = q.shape[1] // k.shape[1]
        subgroups, heads_per_block, positions = wide_prefill_tiling_on_device(group, ROWS)
        kv_head = cuda.blockIdx.y // subgroups
        first = (cuda.blockIdx.y - kv_head * subgroups) * heads_per_block
        b = cuda.blockIdx.z
        t = cuda.threadIdx.x
        threads = cuda.blockDim.x
        row = t // P
        # (a mask, not t - row * P: the compiler then knows part >= 0, so a channel index part + P i needs no
        # check for a negative index, and the loops over a thread's channels unroll into registers)
        part = t & (P - 1)
        n_queries = q.shape[2]
        tile_start = cuda.blockIdx.x * positions
        local_position = row // heads_per_block
        position = tile_start + local_position
        head_in_group = first + (row - local_position * heads_per_block)
        h = kv_head * group + head_in_group
        # A row's P threads are neighbouring lanes of one warp (P divides 32): the mask of their shuffles.
        row_mask = uint32(ROW_LANES) << uint32(t % WARP - part)
        k_tile = cuda.shared.array((TK, DP), float32)
        v_tile = cuda.shared.array((TK, DP), float32)
        scores = cuda.shared.array((TK, ROWS_MAX), float32)     # scores[j, t]: thread t's copy of its row's score
        q_row = cuda.local.array(CH, float32)
        acc = cuda.local.array(CH, float32)

        active = position < n_queries and head_in_group < group      # the same for the P threads of a row
        for i in range(CH):
            q_row[i] = float32(0.0)
            acc[i] = float32(0.0)
        if active:
            for i in range(SHARED):
                q_row[i] = load(q[b, h, position, part + i * P]) * scale
            if not FULL and part + (CH - 1) * P < D:
                q_row[CH - 1] = load(q[b, h, position, part + (CH - 1) * P]) * scale
        if not FULL:        # the column past head_dim: 0, so the loops over a thread's channels need no test
            for j in range(t, TK, threads):
                k_tile[j, D] = float32(0.0)
                v_tile[j, D] = float32(0.0)
        row_max = float32(-math.inf)
        row_sum = float32(0.0)

        kv_end = min(kv_lens[b], k.shape[2])
        if causal:
            kv_end = min(kv_end, tile_start + positions, n_queries)
        for kv_start in range(0, kv_end, TK):
            n_tile = min(TK, kv_end - kv_start)
            for idx in range(t, n_tile * D, threads):
                j = idx // D
                c = idx - j * D
                k_tile[j, c] = load(k[b, kv_head, kv_start + j, c])
                v_tile[j, c] = load(v[b, kv_head, kv_start + j, c])
            cuda.syncthreads()

            n_valid = n_tile
            if causal:
                n_valid = min(n_tile, position - kv_start + 1)
            if active and n_valid > 0:
                tile_max = float32(-math.inf)
                for j in range(n_valid):
                    s = float32(0.0)
                    for i in range(CH):
                        s += q_row[i] * k_tile[j, part + i * P]
                    # The row's halves summed: a + b on one lane, b + a on the other, the same float32 number,
                    # so both lanes keep the same maximum and sum.
                    for step in range(LOG_P):
                        s += cuda.shfl_xor_sync(row_mask, s, 1 << step)
                    scores[j, t] = s
                    tile_max = max(tile_max, s)
                new_max = max(row_max, tile_max)
                correction = math.exp(row_max - new_max)
                row_sum *= correction
                for i in range(CH):
                    acc[i] *= correction
                for j in range(n_valid):
                    p = math.exp(scores[j, t] - new_max)
                    row_sum += p
                    for i in range(CH):
                        acc[i] += p * v_tile[j, part + i * P]
                row_max = new_max
            cuda.syncthreads()

        if active:
            inv_sum = float32(0.0)
            if row_sum > 0:
                inv_sum = float32(1.0) / row_sum
            for i in range(SHARED):
                o[b, h, position, part + i * P] = stored(acc[i] * inv_sum)       # rounded once, to the format of o
            if not FULL and part + (CH - 1) * P < D:
                o[b, h, position, part + (CH - 1) * P] = stored(acc[CH - 1] * inv_sum)

    return gqa_prefill_wide_heads_kernel


def gqa_prefill_wide_heads(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                           kernel=gqa_prefill_wide_heads_kernel):
    """Grouped-query flash attention on fp16, bf16 or float32 tensors with head_dim up to ``WIDE_HEAD_DIM_MAX``;
    returns out (B, H, N, d) in the dtype of q.

    The arguments of ``gqa_prefill_mixed_precision`` with ``1 <= d <= WIDE_HEAD_DIM_MAX``; ``kernel`` is a
    function of head_dim and of whether the tensors are bf16 that returns the kernel to launch; blocks of
    ``wide_prefill_geometry`` (day 7's up to 128, rows of two threads past it). bf16 tensors, NumPy or device
    arrays, reach the kernel as their bits (uint16 views, no copy), which NumPy moves to a GPU as any uint16
    array."""
    batch, heads, kv_heads, n_queries, n_keys, head_dim = check_prefill_inputs(q, k, v, wide=True)
    causal = require_bool("causal", causal)
    lens = prepare_kv_lens(kv_lens, batch, n_keys, like=q)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q, dtype=np.dtype(q.dtype))
    if batch and heads and n_queries:
        grid, block = wide_prefill_geometry(batch, heads, kv_heads, n_queries, head_dim)
        bf16 = np.dtype(q.dtype).name == "bfloat16"
        if bf16:
            kernel(head_dim, True)[grid, block](q.view(np.uint16), k.view(np.uint16), v.view(np.uint16), lens,
                                                note_output(out.view(np.uint16)), scale, causal)
        else:
            kernel(head_dim, False)[grid, block](q, k, v, lens, out, scale, causal)
    return out


# ----------------------------------------------------------------------------------------------
# Decode: 8 channels a lane, half a warp or a whole warp a token
# ----------------------------------------------------------------------------------------------

# Channels of a lane at every head_dim: one 8-byte word of fp8 codes, two of fp16 or bf16, four of float32.
WIDE_CHANNELS = HALF_CHANNELS
# Tokens of a part of a warp's run (the part: half a warp up to head_dim 128, the whole warp past it) and blocks of
# 128 threads an SM must hold at once (launch_bounds), by cache format: gqa_decode_half_warps's, timed on an H100 at
# head_dim 128, and a bf16 cache as an fp16 one (the same words, the same registers). Past 128 not timed.
WIDE_RUN_TOKENS = {"float32": 2, "float16": 4, "bfloat16": 4, "fp8_e4m3": 4}
WIDE_MIN_BLOCKS = {"float32": 1, "float16": 1, "bfloat16": 1, "fp8_e4m3": 3}
_BF16_LOW = 0xFFFF0000                  # the upper 16 bits of the low 32-bit half of a word
_BF16_HIGH = 0xFFFF000000000000         # ... of the high half
_DECODE_KERNELS: dict = {}


@cuda.jit(device=True, inline=True)
def four_bfloat16s(word):
    """The 4 bf16 numbers packed in a uint64 word (number j in bits 16 j ... 16 j + 15), as float32. A bf16 number's
    bits are the upper 16 bits of the float32 of the same value, so numbers 0 and 1 are moved to the top of the low
    and high 32-bit halves of one word, 2 and 3 of another, and each word is read as two float32 (``two_floats``,
    a bit cast): shifts and masks, exact, no conversion call."""
    low = ((word << uint64(16)) & uint64(_BF16_LOW)) | ((word << uint64(32)) & uint64(_BF16_HIGH))
    high = ((word >> uint64(16)) & uint64(_BF16_LOW)) | (word & uint64(_BF16_HIGH))
    x0, x1 = two_floats(low)
    x2, x3 = two_floats(high)
    return x0, x1, x2, x3


def token_lanes(head_dim: int) -> int:
    """Lanes that read one token in ``gqa_decode_wide_heads``, 8 channels each: half a warp (16) up to
    ``HEAD_DIM_MAX``, the whole warp (32) past it."""
    return HALF if head_dim <= HALF * WIDE_CHANNELS else WARP


def wide_decode_tiling(group: int, fmt: str, block_size: int, head_dim: int) -> tuple[int, int, int, int]:
    """``(subgroups, heads_per_block, lanes, run)`` of ``gqa_decode_wide_heads``: day 7's sub-groups, the lanes of a
    token (``token_lanes``) and a warp's run of tokens: each part of the warp (two halves, or the whole warp) takes
    ``WIDE_RUN_TOKENS[fmt]`` tokens, halved until its heads x tokens fit 16 lanes (a lane's registers are then the
    half-warp rung's) and its tokens divide ``block_size`` (a part reads one page a run)."""
    if fmt not in WIDE_CACHE_FORMATS:
        raise ValueError(f"fmt must be one of {WIDE_CACHE_FORMATS}, got {fmt!r}")
    subgroups = subgroups_for(group)
    heads_per_block = cdiv(max(group, 1), subgroups)
    tokens = WIDE_RUN_TOKENS[fmt]
    while tokens > 1 and (heads_per_block * tokens > HALF or block_size % tokens):
        tokens //= 2
    lanes = token_lanes(head_dim)
    return subgroups, heads_per_block, lanes, WARP // lanes * tokens


def wide_decode_shared_bytes(group: int, fmt: str, head_dim: int) -> int:
    """Static shared memory of one ``gqa_decode_wide_heads`` block: each warp's maximum, sum and accumulators of the
    block's heads (``head_dim`` floats each), and for fp8 through the table, its 256 values (32 KiB + 1 KiB at
    group 8 and head_dim 256)."""
    _, heads_per_block, _, _ = wide_decode_tiling(group, fmt, 16, head_dim)
    table = 256 if fmt == "fp8_e4m3" else 1
    return (2 * WARPS * heads_per_block + WARPS * heads_per_block * head_dim + table) * 4


def _build_wide_decode_kernel(G: int, T: int, fmt: str, D: int, BS: int, fp8_convert: bool):
    """``gqa_decode_half_warps``'s kernel with ``LANES = token_lanes(D)`` lanes a token, 8 channels each, and a bf16
    cache: warp w takes runs of ``PARTS * T`` consecutive tokens (``PARTS = 32 // LANES`` parts of the warp, part
    k the tokens k T ... k T + T - 1 of the run, within one page), then the run ``PARTS * T * WARPS`` tokens on;
    each part runs its own batch of ``G * T`` scores, a butterfly over its lanes, and the parts' softmaxes meet
    at the end (``batch_steps`` with ``LANES`` lanes of 8 channels). Two sets of registers take turns holding the
    run being computed and the run in flight."""
    FP8 = fmt == "fp8_e4m3"
    FP32 = fmt == "float32"
    BF16 = fmt == "bfloat16"
    LANES = token_lanes(D)
    PARTS = WARP // LANES
    CH = WIDE_CHANNELS
    WORDS = CH // (2 if FP32 else 8 if FP8 else 4)           # 8-byte words of a lane's channels in a row
    STRIDE = D * (4 if FP32 else 1 if FP8 else 2) // 8       # 8-byte words of a row
    RUN = PARTS * T
    STEP = RUN * WARPS                                       # tokens from a warp's run to its next
    PAGE_STEP, SLOT_STEP = divmod(STEP, BS)
    FULL = D == LANES * CH
    TABLE = FP8 and not fp8_convert
    TABLE_SIZE = 256 if TABLE else 1
    SCALE_UNIT = TWO_TO_MINUS_9 if TABLE else 1.0           # the table holds value * 2**9
    if fmt not in WIDE_CACHE_FORMATS or BS % T or D % CH or not 0 < D <= WIDE_HEAD_DIM_MAX:
        raise ValueError(f"fmt must be one of {WIDE_CACHE_FORMATS}, a part's {T} tokens must divide the page size, "
                         f"got {fmt!r} and {BS}; head_dim a multiple of {CH} up to {WIDE_HEAD_DIM_MAX}, got {D}")

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
        elif BF16:
            for w in range(WORDS):
                out[4 * w], out[4 * w + 1], out[4 * w + 2], out[4 * w + 3] = four_bfloat16s(raw[u, w])
        else:
            for w in range(WORDS):
                out[4 * w], out[4 * w + 1], out[4 * w + 2], out[4 * w + 3] = four_halves(raw[u, w])

    @cuda.jit(device=True, inline=True)
    def load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words, head_words, page_index,
                 slot, t, end, part, has_channels, k_raw, v_raw):
        """Issue the loads of this part's T tokens of the run from token t (the part's first at page_index, slot)
        into k_raw and v_raw, as stored; return its page's scales (fp8; 1 otherwise, and past the end)."""
        k_scale = float32(1.0)
        v_scale = float32(1.0)
        if t + part * T < end:
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
                        if t + part * T + u < end:
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
                                                                                 lane_major=True, lanes=LANES,
                                                                                 channels=CH)

    @cuda.jit(launch_bounds=(THREADS, WIDE_MIN_BLOCKS[fmt]))
    def gqa_decode_wide_heads_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, context_lens, scale,
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
        part = lane // LANES
        r = lane % LANES
        start = p * partition_size
        end = min(start + partition_size, context_lens[s])
        mine = r >> SHIFT
        my_token = part * T + (mine & (T - 1))
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

        # This warp's first run: the page and slot of the part's first token (one division per block), then its
        # loads. With two parts, each walks the table itself.
        t0 = start + warp * RUN
        page_index = (t0 + part * T) // BS
        slot = t0 + part * T - page_index * BS
        k_scale_a, v_scale_a = load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words,
                                        head_words, page_index, slot, t0, end, part, has_channels, k_a, v_a)
        while t0 < end:
            # Run t0 is in registers a (or on its way); the next goes out into b, then run t0 is computed.
            page_index, slot = next_place(page_index, slot)
            k_scale_b, v_scale_b = load_run(k_cache, v_cache, k_scales, v_scales, block_tables, s, kv_head, page_words,
                                            head_words, page_index, slot, t0 + STEP, end, part, has_channels, k_b,
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
                                            head_words, page_index, slot, t0 + STEP, end, part, has_channels, k_a,
                                            v_a)
            score = score_batch(q_lane, k_b, table, k_token, scores, lane)
            running_max, running_sum = accumulate_batch(score, has_token and t0 + my_token < end, k_scale_b, v_scale_b,
                                                        running_max, running_sum, acc, v_b, table, v_token, lane)
            t0 += STEP

        warp_max = cuda.shared.array((WARPS, G), float32)
        warp_sum = cuda.shared.array((WARPS, G), float32)
        warp_acc = cuda.shared.array((WARPS, G, D), float32)
        write_partials(running_max, running_sum, acc, warp_max, warp_sum, warp_acc, partial_max, partial_sum,
                       partial_acc, s, first, p, n_heads, D, warp, lane, tid)

    return gqa_decode_wide_heads_kernel


def gqa_decode_wide_heads_kernel(group: int, fmt: str, head_dim: int, block_size: int = 16,
                                 fp8_convert: bool | None = None):
    """The decode kernel for a group size, a cache format (``WIDE_CACHE_FORMATS``), a head_dim (a multiple of 8 up
    to ``WIDE_HEAD_DIM_MAX``) and a page size, compiled on first use and kept. ``fp8_convert``: decode fp8 with
    PTX's conversion (None: where the GPU has it, compute capability 8.9 and later, and in the simulator)."""
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)):
        raise TypeError(f"group must be an int, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group must be >= 1, got {group}")
    _, heads_per_block, lanes, run = wide_decode_tiling(int(group), fmt, int(block_size), int(head_dim))
    if fmt == "fp8_e4m3" and fp8_convert is None:
        fp8_convert = _has_fp8_convert()
    key = (heads_per_block, run * lanes // WARP, fmt, int(head_dim), int(block_size),
           bool(fp8_convert) and fmt == "fp8_e4m3")
    if key not in _DECODE_KERNELS:
        _DECODE_KERNELS[key] = _build_wide_decode_kernel(*key)
    return _DECODE_KERNELS[key]


def gqa_decode_wide_heads(q, k_cache, v_cache, block_tables, context_lens, *, k_scales=None, v_scales=None,
                          scale=None, out=None, partition_size=None, max_context=None,
                          kernel=gqa_decode_wide_heads_kernel, merge_kernel=paged_attention_v2_merge_kernel):
    """Decode attention over a paged cache stored in float32, fp16, bf16 or fp8 e4m3, head_dim up to
    ``WIDE_HEAD_DIM_MAX``; returns out (num_seqs, heads, head_dim) float32.

    The arguments of ``gqa_decode_half_warps``, with a bf16 cache too (``ml_dtypes.bfloat16``; its scales None, as
    fp16's): head_dim must be a multiple of 8 and ``partition_size`` a multiple of the run (``wide_decode_tiling``).
    ``kernel`` is a function of the group size, the cache format, the head_dim and the page size
    (``gqa_decode_wide_heads_kernel``); day 6's merge runs one thread a channel."""
    out, step = prepare_decode(q, k_cache, v_cache, block_tables, context_lens, k_scales, v_scales, scale, out,
                               partition_size, max_context, channels=WIDE_CHANNELS, wide=True,
                               tokens=lambda group, fmt, pages: runs_of(
                                   wide_decode_tiling(group, fmt, pages, q.shape[2])[3]))
    if step is None:
        return out
    kernel(step.group, step.fmt, step.head_dim, step.block_size)[step.grid, THREADS](
        q, cache_words(k_cache, np.uint64), cache_words(v_cache, np.uint64), step.k_scales, step.v_scales,
        block_tables, context_lens, step.scale, step.partition_size, step.kv_heads, *step.partials)
    merge_threads = HEAD_DIM_MAX if step.head_dim <= HEAD_DIM_MAX else WIDE_HEAD_DIM_MAX
    merge_kernel[(step.heads, step.num_seqs), merge_threads](*step.partials, out)
    return out


def _has_fp8_convert() -> bool:
    """Whether the current device converts e4m3 codes to fp16 in one instruction (compute capability 8.9 and
    later; the simulator: ``eight_codes`` in NumPy)."""
    if config.ENABLE_CUDASIM:
        return True
    return tuple(cuda.get_current_device().compute_capability) >= (8, 9)
