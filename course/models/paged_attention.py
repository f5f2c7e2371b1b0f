"""Bytes moved by a decode step over a paged KV cache (``kernels/paged_attention.py``, ``kernels/kv_cache.py``).

- ``kv_bytes_per_token``: what one token adds to the KV cache of a model, all layers.
- ``compulsory_bytes_decode``: what one decode step must move at least: the K and V of every
  context read once per query head that reads them (``group`` query heads share a KV head and, on
  day 6, each reads it itself), q read and out written once. The timing recordings divide it by
  the time to get GB/s.
- ``requested_*``: the element loads and stores the course's kernels ask for, by argument, as the
  simulator counts them (``course.traffic``), so tests compare the two for equality.

Arguments: ``context_lens`` a sequence of ints (one per sequence), ``heads`` query heads,
``kv_heads`` KV heads, ``d`` head_dim, ``itemsize`` bytes per element (4 for float32).
"""

from __future__ import annotations

from kernels.launching import cdiv

__all__ = ["kv_bytes_per_token", "compulsory_bytes_decode", "flops_decode", "requested_v1", "requested_v2",
           "requested_v3", "requested_cache_write", "decode_arithmetic_intensity"]


def _check(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _lens(context_lens) -> list[int]:
    lens = [int(n) for n in context_lens]
    if any(n < 0 for n in lens):
        raise ValueError(f"context_lens must be >= 0, got {lens}")
    return lens


def kv_bytes_per_token(layers: int, kv_heads: int, d: int, itemsize: int = 2) -> int:
    """2 (K and V) · layers · kv_heads · head_dim · bytes: the cache one token occupies in a model."""
    _check(layers=layers, kv_heads=kv_heads, d=d, itemsize=itemsize)
    return 2 * layers * kv_heads * d * itemsize


def compulsory_bytes_decode(context_lens, heads: int, kv_heads: int, d: int, itemsize: int = 4) -> int:
    """K and V of each context read once per query head (day 6's mapping), q read, out written."""
    _check(heads=heads, kv_heads=kv_heads, d=d, itemsize=itemsize)
    lens = _lens(context_lens)
    return (2 * heads * sum(lens) * d + 2 * len(lens) * heads * d) * itemsize


def flops_decode(context_lens, heads: int, d: int) -> int:
    """q·k and p·v as 2 FLOPs per multiply-add: 4 · heads · Σ context · d."""
    _check(heads=heads, d=d)
    return 4 * heads * sum(_lens(context_lens)) * d


def decode_arithmetic_intensity(heads: int, kv_heads: int, itemsize: int = 4) -> float:
    """FLOPs per byte of K and V when each KV element is read by ``heads // kv_heads`` query heads
    at once: 4 FLOPs (two multiply-adds) per 2 elements read, times the group size."""
    _check(heads=heads, kv_heads=kv_heads, itemsize=itemsize)
    return 4 * (heads // kv_heads) / (2 * itemsize)


def requested_v1(context_lens, heads: int, d: int, warps: int = 4, warp: int = 32) -> dict:
    """``{argument: (element loads, element stores)}`` of ``paged_attention_v1_block_per_head``.

    Per (query head, sequence) block: each warp loads q once (d elements); every lane of the warp
    that takes a token loads its table entry; K and V are each read once (d per token);
    every thread loads the context length once; d outputs are written.
    """
    _check(heads=heads, d=d, warps=warps, warp=warp)
    lens = _lens(context_lens)
    tokens = sum(lens)
    return {"q": (len(lens) * heads * warps * d, 0),
            "k_cache": (heads * tokens * d, 0), "v_cache": (heads * tokens * d, 0),
            "block_tables": (heads * tokens * warp, 0),
            "context_lens": (len(lens) * heads * warps * warp, 0),
            "out": (0, len(lens) * heads * d)}


def requested_v2(context_lens, heads: int, d: int, partition_size: int, warps: int = 4, warp: int = 32) -> dict:
    """Like ``requested_v1`` for the partition kernel of v2 over ``P = ceil(longest / partition_size)``
    partitions per sequence, each writing a partial (maximum, sum, d accumulators), and its merge
    kernel (each of d threads reads every partial maximum, sum and its own channel, writes one)."""
    _check(heads=heads, d=d, partition_size=partition_size, warps=warps, warp=warp)
    if partition_size == 0:
        raise ValueError("partition_size must be >= 1, got 0")
    lens = _lens(context_lens)
    tokens = sum(lens)
    partitions = max(1, cdiv(max(lens, default=0), partition_size))
    blocks = len(lens) * heads * partitions
    # A merge thread reads the maxima once to find the largest, and, unless the context is empty
    # (every maximum -inf), every maximum, sum and its channel's accumulator once more.
    merge_reads = heads * d * partitions * sum(1 for n in lens if n)
    return {"q": (blocks * warps * d, 0),
            "k_cache": (heads * tokens * d, 0), "v_cache": (heads * tokens * d, 0),
            "block_tables": (heads * tokens * warp, 0),
            "context_lens": (blocks * warps * warp, 0),
            "partial_max": (len(lens) * heads * d * partitions + merge_reads, blocks),
            "partial_sum": (merge_reads, blocks),
            "partial_acc": (merge_reads, blocks * d),
            "out": (0, len(lens) * heads * d)}


def requested_v3(context_lens, heads: int, d: int, partition_size: int, warps: int = 4, warp: int = 32) -> dict:
    """``paged_attention_v3_one_launch``: ``requested_v2`` (the same partitions and the same merge, now
    done by the last block of each (query head, sequence) instead of a second kernel), plus the
    tickets: each block's atomic add (one load, one store) and one store per (query head, sequence),
    the last block's reset to 0."""
    requested = requested_v2(context_lens, heads, d, partition_size, warps, warp)
    pairs = len(_lens(context_lens)) * heads
    blocks = pairs * max(1, cdiv(max(_lens(context_lens), default=0), partition_size))
    return {**requested, "tickets": (blocks, blocks + pairs)}


def requested_cache_write(num_tokens: int, kv_heads: int, d: int, threads_per_token: int | None = None) -> dict:
    """``kv_cache_write``: each token's K and V rows read and written once; each of its threads reads
    the token's sequence, position and table entry once."""
    _check(num_tokens=num_tokens, kv_heads=kv_heads, d=d)
    threads = threads_per_token if threads_per_token is not None else min(128, 32 * cdiv(kv_heads * d, 32))
    rows = num_tokens * kv_heads * d
    per_thread = num_tokens * threads
    return {"k_new": (rows, 0), "v_new": (rows, 0), "k_cache": (0, rows), "v_cache": (0, rows),
            "token_seqs": (per_thread, 0), "token_positions": (per_thread, 0), "block_tables": (per_thread, 0)}
