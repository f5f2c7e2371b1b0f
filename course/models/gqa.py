"""Bytes moved by grouped-query attention (``kernels/gqa_attention/``), and by the naive mapping.

GQA: ``heads`` query heads share ``kv_heads`` K and V heads, ``group = heads // kv_heads`` query
heads per KV head. The naive mapping (days 5 and 6) runs one block per query head, so each query
head reads the K and V of its KV head itself: ``group`` reads of each K and V element. The GQA
rungs run one block per KV head (and tile, or partition) for the whole group.

- ``requested_prefill``, ``requested_decode``: the element loads and stores ``gqa_prefill_flash`` and
  ``gqa_decode_split_k`` ask for, by kernel argument, as the simulator counts them
  (``course.traffic``), so tests compare the two for equality.
- ``requested_prefill_per_head``: day 5's ``attention_v5_flash_registers`` on K and V repeated to
  ``heads`` heads (one block per query head and tile of 64 positions); for decode the naive
  mapping is day 6's ``course.models.paged_attention.requested_v2``.
- ``prefill_tiling``, ``prefill_kv_saving``: the prefill block's shape, and what it saves.
- ``compulsory_bytes_*``: what must cross DRAM at least: q read, out written, K and V read once
  per KV head (``group`` times less than ``naive_bytes_*``, which reads them once per query head).
- ``decode_shuffles``, ``day6_shuffles``: warp shuffles per batch of tokens of a decode warp, with
  the scores of all heads and tokens summed by one butterfly, and with one butterfly per score.

What each rung saves. Decode: a block reads each page once for up to ``group_max`` query heads, so
K and V traffic falls by ``group`` (by ``group / ceil(group / group_max)`` for larger groups): the
decode step is memory-bound and its time falls with it. Prefill: a block holds ``positions``
query positions times the group's heads (``prefill_tiling``: ``positions = min(tile_pos, rows_max //
group)``, 64 and 256 by default), and loads each K and V tile once for all of them; day 5 loads it
once per 64 positions of each head. For a long prompt the K and V loads fall by
``prefill_kv_saving(group) = group * positions / 64`` (over the sub-groups beyond 256): ``group``
up to 4, about 4 beyond (3.98 at 5, 4 at 8). Under the causal mask a block loads keys up to its largest position, as on day 5, so
with fewer positions per block it also wastes fewer keys past the diagonal.

Arguments: ``B`` batch, ``heads``, ``kv_heads``, ``N`` query positions, ``M`` keys (default N),
``d`` head_dim, ``context_lens`` a sequence of ints (decode), ``itemsize`` bytes per element (4 for
float32). Defaults of ``rows_max``, ``tile_pos``, ``day5_tile``, ``group_max``, ``warps`` and ``warp``
are the kernels' constants (tests check that they agree). Counts are Python ints.
"""

from __future__ import annotations

from fractions import Fraction

from course.models import paged_attention as paged
from kernels.launching import cdiv

__all__ = ["group_size", "prefill_tiling", "prefill_kv_saving", "prefill_key_rows", "requested_prefill",
           "requested_prefill_per_head", "compulsory_bytes_prefill", "naive_bytes_prefill", "requested_decode",
           "compulsory_bytes_decode", "naive_bytes_decode", "decode_shuffles", "day6_shuffles"]

TILE_POS = 64      # kernels.gqa_attention.TILE_POS: query positions of a prefill block, at most
ROWS_MAX = 256     # kernels.gqa_attention.ROWS_MAX: rows (threads) of a prefill block, at most
TILE_KV = 16       # kernels.gqa_attention.TILE_KV: keys per shared-memory tile (loads do not depend on it)
DAY5_TILE_Q = 64   # kernels.flash_attention.TILE_Q: positions of one head in a day-5 block
GROUP_MAX = 8      # kernels.gqa_attention.GROUP_MAX: query heads of one decode block


def _check(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def group_size(heads: int, kv_heads: int) -> int:
    """``heads // kv_heads``; raises ValueError unless kv_heads divides heads."""
    _check(heads=heads, kv_heads=kv_heads)
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"kv_heads ({kv_heads}) must divide heads ({heads})")
    return heads // kv_heads


def _kv_lens(kv_lens, B: int, M: int) -> list[int]:
    lens = [M] * B if kv_lens is None else [int(n) for n in kv_lens]
    if len(lens) != B or any(not 0 <= n <= M for n in lens):
        raise ValueError(f"kv_lens must hold {B} lengths in [0, {M}], got {lens}")
    return lens


def prefill_tiling(group: int, rows_max: int = ROWS_MAX, tile_pos: int = TILE_POS) -> tuple[int, int, int]:
    """``(subgroups, heads_per_block, positions)`` of a prefill block for ``group`` query heads per KV head.

    ``subgroups = ceil(group / rows_max)`` blocks share the group, ``heads_per_block = ceil(group /
    subgroups)`` heads each (the last may hold fewer), at ``positions = min(tile_pos, rows_max //
    heads_per_block)`` query positions: ``positions * heads_per_block <= rows_max`` threads.
    """
    _check(group=group, rows_max=rows_max, tile_pos=tile_pos)
    if min(group, rows_max, tile_pos) < 1:
        raise ValueError(f"group, rows_max and tile_pos must be >= 1, got {group}, {rows_max}, {tile_pos}")
    subgroups = cdiv(group, rows_max)
    heads_per_block = cdiv(group, subgroups)
    return subgroups, heads_per_block, min(tile_pos, rows_max // heads_per_block)


def prefill_kv_saving(group: int, rows_max: int = ROWS_MAX, tile_pos: int = TILE_POS,
                      day5_tile: int = DAY5_TILE_Q) -> Fraction:
    """Day 5's K and V loads over ``gqa_prefill_flash``'s for a long prompt: ``group / day5_tile``
    passes over K and V per position against ``subgroups / positions``. Exact without the causal
    mask when ``positions`` and ``day5_tile`` both divide the prompt; a lower bound with it."""
    subgroups, _, positions = prefill_tiling(group, rows_max, tile_pos)
    return Fraction(group * positions, day5_tile * subgroups)


def prefill_key_rows(N: int, M: int, kv_len: int, positions: int, causal: bool = False) -> int:
    """Key rows the blocks of one (batch element, KV head, sub-group) load: each block of
    ``positions`` query positions loads its keys once, up to ``kv_len`` and, causal, up to its
    largest query position."""
    _check(N=N, M=M, kv_len=kv_len, positions=positions)
    if positions < 1:
        raise ValueError("positions must be >= 1")
    total = 0
    for tile_start in range(0, N, positions):
        end = min(kv_len, M)
        if causal:
            end = min(end, tile_start + positions, N)
        total += end
    return total


def requested_prefill(B: int, heads: int, kv_heads: int, N: int, d: int, M: int | None = None, *,
                      causal: bool = False, kv_lens=None, rows_max: int = ROWS_MAX,
                      tile_pos: int = TILE_POS) -> dict:
    """``{argument: (element loads, element stores)}`` of ``gqa_prefill_flash``.

    Blocks: ``ceil(N / positions) * kv_heads * subgroups`` per batch element, of ``positions *
    heads_per_block`` threads (``prefill_tiling``). Every (position, head) row loads its query
    row and stores its output row once; each block loads its key rows of K and of V once, d
    elements each; every thread of every block loads ``kv_lens[b]`` once.
    """
    M = N if M is None else M
    group = group_size(heads, kv_heads)
    _check(B=B, N=N, d=d, M=M)
    subgroups, heads_per_block, positions = prefill_tiling(group, rows_max, tile_pos)
    lens = _kv_lens(kv_lens, B, M)
    keys = kv_heads * subgroups * sum(prefill_key_rows(N, M, n, positions, causal) for n in lens)
    blocks = B * kv_heads * subgroups * cdiv(N, positions)
    return {"q": (B * heads * N * d, 0), "k": (keys * d, 0), "v": (keys * d, 0),
            "kv_lens": (blocks * positions * heads_per_block, 0), "o": (0, B * heads * N * d)}


def requested_prefill_per_head(B: int, heads: int, kv_heads: int, N: int, d: int, M: int | None = None, *,
                               causal: bool = False, kv_lens=None, day5_tile: int = DAY5_TILE_Q) -> dict:
    """The naive mapping: day 5's ``attention_v5_flash_registers`` given K and V repeated to ``heads``
    heads, one block per query head and tile of ``day5_tile`` positions, which loads the K and V
    tiles of its KV head itself (``requested_prefill`` with one head per block)."""
    group_size(heads, kv_heads)
    return requested_prefill(B, heads, heads, N, d, M, causal=causal, kv_lens=kv_lens, rows_max=day5_tile,
                             tile_pos=day5_tile)


def compulsory_bytes_prefill(B: int, heads: int, kv_heads: int, N: int, d: int, M: int | None = None,
                             itemsize: int = 4) -> int:
    """At least: Q read and O written once per query head, K and V read once per KV head."""
    M = N if M is None else M
    group_size(heads, kv_heads)
    _check(B=B, N=N, d=d, M=M, itemsize=itemsize)
    return B * (2 * heads * N * d + 2 * kv_heads * M * d) * itemsize


def naive_bytes_prefill(B: int, heads: int, kv_heads: int, N: int, d: int, M: int | None = None,
                        itemsize: int = 4) -> int:
    """``compulsory_bytes_prefill`` when each query head reads K and V itself: ``group`` times the K and V."""
    group_size(heads, kv_heads)
    return compulsory_bytes_prefill(B, heads, heads, N, d, M, itemsize)


def requested_decode(context_lens, heads: int, kv_heads: int, d: int, partition_size: int,
                     group_max: int = GROUP_MAX, warps: int = 4, warp: int = 32) -> dict:
    """``{argument: (element loads, element stores)}`` of ``gqa_decode_split_k``: day 6's
    ``requested_v2`` except for what a block of the group reads once for all its heads.

    Blocks: ``kv_heads * ceil(group / group_max)`` per sequence and partition. Each warp loads the
    queries of its block's heads (so q as on day 6); each token's K and V rows are loaded once per
    block that covers it, d elements each, and its table entry by each of the warp's lanes; every
    thread loads its sequence's context length once. Partials and the merge: as day 6's (same
    layout, same merge kernel).
    """
    group = group_size(heads, kv_heads)
    _check(d=d, partition_size=partition_size, group_max=group_max, warps=warps, warp=warp)
    if partition_size == 0 or group_max == 0:
        raise ValueError("partition_size and group_max must be >= 1")
    lens = [int(n) for n in context_lens]
    requested = paged.requested_v2(lens, heads, d, partition_size, warps, warp)
    readers = kv_heads * max(1, cdiv(group, group_max))       # blocks that read one token's K and V
    tokens = sum(lens)
    partitions = max(1, cdiv(max(lens, default=0), partition_size))
    requested.update({"k_cache": (readers * tokens * d, 0), "v_cache": (readers * tokens * d, 0),
                      "block_tables": (readers * tokens * warp, 0),
                      "context_lens": (len(lens) * readers * partitions * warps * warp, 0)})
    return requested


def compulsory_bytes_decode(context_lens, heads: int, kv_heads: int, d: int, itemsize: int = 4) -> int:
    """At least: K and V of each context read once per KV head, q read and out written once."""
    group_size(heads, kv_heads)
    _check(d=d, itemsize=itemsize)
    lens = [int(n) for n in context_lens]
    return (2 * kv_heads * sum(lens) * d + 2 * len(lens) * heads * d) * itemsize


def naive_bytes_decode(context_lens, heads: int, kv_heads: int, d: int, itemsize: int = 4) -> int:
    """Day 6's mapping (``course.models.paged_attention.compulsory_bytes_decode``): K and V read once
    per query head, ``group`` times ``compulsory_bytes_decode``'s K and V."""
    group_size(heads, kv_heads)
    return paged.compulsory_bytes_decode(context_lens, heads, kv_heads, d, itemsize)


def _log2(n: int, name: str) -> int:
    if n < 1 or n & (n - 1):
        raise ValueError(f"{name} must be a power of two >= 1, got {n}")
    return n.bit_length() - 1


def decode_shuffles(heads_per_block: int, tokens_in_flight: int, warp: int = 32) -> int:
    """Shuffles of a ``gqa_decode_split_k`` warp per batch of ``tokens_in_flight`` tokens, each scored
    for ``heads_per_block`` heads (``n = heads_per_block * tokens_in_flight`` scores), in a batch that
    raises no head's maximum (one that does adds ``heads_per_block``: each head's correction):

    - ``npad - 1`` to sum all n partial dot products over the warp at once (``npad``: n rounded up to
      a power of two; lanes trade halves of their values at each step), then ``log2(warp / npad)``
      plain butterfly steps, after which every lane holds one whole score;
    - ``log2(tokens_in_flight)`` for each head's maximum over its tokens' lanes;
    - ``n`` to read each score's weight from its lane into the accumulators of every lane.

    At 4 heads and 4 tokens: 15 + 1 + 2 + 16 = 34, where ``day6_shuffles`` gives 80.
    """
    _check(heads_per_block=heads_per_block, tokens_in_flight=tokens_in_flight, warp=warp)
    scores = heads_per_block * tokens_in_flight
    log_warp = _log2(warp, "warp")
    log_tokens = _log2(tokens_in_flight, "tokens_in_flight")
    log_npad = (scores - 1).bit_length()
    if scores < 1 or log_npad > log_warp:
        raise ValueError(f"heads_per_block * tokens_in_flight must lie in [1, {warp}], got {scores}")
    return (1 << log_npad) - 1 + (log_warp - log_npad) + log_tokens + scores


def day6_shuffles(heads_per_block: int, tokens_in_flight: int, warp: int = 32) -> int:
    """Shuffles of the same batch with one butterfly per score, as day 6's ``_warp_attend`` sums its
    one head's (and this rung's first version summed every head's): ``log2(warp)`` per score."""
    _check(heads_per_block=heads_per_block, tokens_in_flight=tokens_in_flight, warp=warp)
    return _log2(warp, "warp") * heads_per_block * tokens_in_flight
