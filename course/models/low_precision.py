"""Bytes moved by the mixed-precision kernels (``kernels/low_precision_attention/``).

The rungs ask for the same elements as day 7's (``course.models.gqa``); what changes is the size of
each: 2 bytes for fp16 and bf16, 1 for an fp8 code, 4 for float32. So the element counts are day 7's
except where a narrow format changes what is loaded:

- ``requested_prefill``: day 7's ``requested_prefill``, element for element (q, k, v and o in the
  storage dtype, kv_lens int32).
- ``requested_prefill_wide``: ``gqa_prefill_wide_heads``, day 7's counts for blocks of rows of
  ``ceil(d / 128)`` threads (so ``ROWS_MAX / threads`` rows a block), every thread loading ``kv_lens`` once.
- ``requested_decode``: day 7's ``requested_decode`` for a float32 or fp16 cache. An fp8 cache is
  read as 32-bit words of 4 codes (``kernels.low_precision_attention.fp8_words``): ``d / 4`` loads of 4
  bytes per token and block instead of ``d``; the page scales are loaded once per token and block
  (by the lane that holds the token), each with its table entry read once more.
- ``requested_decode_runs``: ``gqa_decode_page_runs``, day 7's counts for q, the context lengths and the
  partials; the cache read as words (``row_words`` per token and block: ``d / 4`` words of 4 fp16
  numbers or of 4 fp8 codes, ``d / 2`` of 2 float32), each run's table entry (and fp8: its page's
  scales) read by every lane of its warp once per run, not once per token.
- ``requested_quantize``, ``requested_dequantize``: the tools that write and read an fp8 cache.
- ``load_bytes``: ``{argument: (loads, stores)}`` in elements to bytes, given each argument's itemsize;
  ``itemsizes_decode``, ``itemsizes_prefill``: those itemsizes for each kernel's arguments.
- ``compulsory_bytes_prefill``, ``compulsory_bytes_decode``: what must cross DRAM at least, at the
  storage format: q read and o written once, K and V read once per KV head (and, for fp8, the scales
  of the pages in use once). Timings divide these by the time to get GB/s. The decode's take a bf16
  cache too (``WIDE_CACHE_FORMATS``: ``gqa_decode_wide_heads``).
- ``decode_cache_saving``: the cache bytes a decode step reads at float32 over those at a format.

Arguments: as ``course.models.gqa``; ``fmt`` a cache format (``CACHE_FORMATS``: "float32",
"float16", "fp8_e4m3") or a storage dtype name ("float32", "float16", "bfloat16").
"""

from __future__ import annotations

from fractions import Fraction

from course.models import gqa
from kernels.launching import cdiv

__all__ = ["CACHE_FORMATS", "WIDE_CACHE_FORMATS", "ROW_CHANNELS", "ITEMSIZE", "FP8_THREADS", "RUN_TOKENS",
           "requested_prefill", "requested_prefill_wide", "requested_decode",
           "run_length", "row_words", "requested_decode_runs", "itemsizes_decode_runs", "requested_quantize",
           "requested_dequantize", "itemsizes_prefill", "itemsizes_decode", "load_bytes", "compulsory_bytes_prefill",
           "compulsory_bytes_decode", "decode_cache_saving"]

CACHE_FORMATS = ("float32", "float16", "fp8_e4m3")
# kernels.low_precision_attention.WIDE_CACHE_FORMATS: the formats of gqa_decode_wide_heads's cache
WIDE_CACHE_FORMATS = ("float32", "float16", "bfloat16", "fp8_e4m3")
# kernels' HEAD_DIM_MAX: channels of a row that one thread of gqa_prefill_wide_heads holds at most
ROW_CHANNELS = 128
# Bytes per stored element, by format or dtype name.
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8_e4m3": 1}
FP8_THREADS = 128      # kernels.low_precision_attention.FP8_THREADS: threads of a quantize or dequantize block
WORD = 4               # an fp8 cache is read as 4-byte words of 4 codes
# kernels.low_precision_attention.RUN_TOKENS (a test keeps the two in step): tokens of a run of gqa_decode_page_runs
RUN_TOKENS = {"float32": 2, "float16": 4, "fp8_e4m3": 8}


def _itemsize(fmt: str) -> int:
    if fmt not in ITEMSIZE:
        raise ValueError(f"fmt must be one of {sorted(ITEMSIZE)}, got {fmt!r}")
    return ITEMSIZE[fmt]


def _cache_format(fmt: str, formats: tuple = CACHE_FORMATS) -> str:
    if fmt not in formats:
        raise ValueError(f"fmt must be one of {formats}, got {fmt!r}")
    return fmt


def _check(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def requested_prefill(B: int, heads: int, kv_heads: int, N: int, d: int, M: int | None = None, *,
                      causal: bool = False, kv_lens=None) -> dict:
    """``{argument: (element loads, element stores)}`` of ``gqa_prefill_mixed_precision``: day 7's
    ``gqa_prefill_flash`` loads and stores the same elements (``course.models.gqa.requested_prefill``)."""
    return gqa.requested_prefill(B, heads, kv_heads, N, d, M, causal=causal, kv_lens=kv_lens)


def requested_prefill_wide(B: int, heads: int, kv_heads: int, N: int, d: int, M: int | None = None, *,
                           causal: bool = False, kv_lens=None) -> dict:
    """``{argument: (element loads, element stores)}`` of ``gqa_prefill_wide_heads``: ``parts = ceil(d /
    ROW_CHANNELS)`` threads a row, so blocks of ``gqa.ROWS_MAX // parts`` rows (``gqa.requested_prefill`` with
    that ``rows_max``); every q and o element is still loaded and stored once (each thread its channels), each
    block loads its key rows once (its tiles' size changes no load), and each of its ``parts`` threads a row
    loads ``kv_lens[b]``."""
    _check(d=d)
    parts = max(1, cdiv(d, ROW_CHANNELS))
    requested = gqa.requested_prefill(B, heads, kv_heads, N, d, M, causal=causal, kv_lens=kv_lens,
                                      rows_max=gqa.ROWS_MAX // parts)
    loads, stores = requested["kv_lens"]
    requested["kv_lens"] = (loads * parts, stores)
    return requested


def itemsizes_prefill(dtype: str) -> dict:
    """Bytes per element of each argument of the prefill kernel, for q, k, v and o stored as ``dtype``."""
    size = _itemsize(dtype)
    return {"q": size, "k": size, "v": size, "o": size, "kv_lens": 4}


def requested_decode(context_lens, heads: int, kv_heads: int, d: int, partition_size: int, fmt: str,
                     group_max: int = gqa.GROUP_MAX, warps: int = 4, warp: int = 32) -> dict:
    """``{argument: (element loads, element stores)}`` of ``gqa_decode_mixed_precision`` with a cache of
    format ``fmt``. float32 and fp16: day 7's counts, plus the scales arguments, never read. fp8: the
    cache arguments are words of 4 codes (``d / 4`` per token and block), and for each token and block
    one lane loads its table entry again and the page's K and V scales."""
    _cache_format(fmt)
    requested = gqa.requested_decode(context_lens, heads, kv_heads, d, partition_size, group_max, warps, warp)
    requested.update({"k_scales": (0, 0), "v_scales": (0, 0)})
    if fmt != "fp8_e4m3":
        return requested
    if d % WORD:
        raise ValueError(f"d must be a multiple of {WORD} for an fp8 cache, got {d}")
    readers = kv_heads * max(1, cdiv(gqa.group_size(heads, kv_heads), group_max))
    tokens = sum(int(n) for n in context_lens)
    table_loads, _ = requested["block_tables"]
    requested.update({"k_cache": (readers * tokens * d // WORD, 0), "v_cache": (readers * tokens * d // WORD, 0),
                      "block_tables": (table_loads + readers * tokens, 0),
                      "k_scales": (readers * tokens, 0), "v_scales": (readers * tokens, 0)})
    return requested


def run_length(group: int, fmt: str, block_size: int, group_max: int = gqa.GROUP_MAX, warp: int = 32) -> int:
    """Tokens of a run of ``gqa_decode_page_runs`` (``kernels.low_precision_attention.run_tiling``): RUN_TOKENS[fmt],
    halved until a block's heads times it fit a warp and it divides ``block_size``."""
    _cache_format(fmt)
    _check(group=group, block_size=block_size)
    heads_per_block = cdiv(max(group, 1), max(1, cdiv(group, group_max)))
    run = RUN_TOKENS[fmt]
    while run > 1 and (heads_per_block * run > warp or block_size % run):
        run //= 2
    return run


def row_words(d: int, fmt: str) -> int:
    """Words of one cache row as ``gqa_decode_page_runs`` reads it: 8-byte words of 4 fp16 or 2 float32
    numbers, 4-byte words of 4 fp8 codes."""
    _cache_format(fmt)
    return d // 4 if fmt == "fp8_e4m3" else d * ITEMSIZE[fmt] // 8


def requested_decode_runs(context_lens, heads: int, kv_heads: int, d: int, partition_size: int, fmt: str,
                          block_size: int, group_max: int = gqa.GROUP_MAX, warps: int = 4, warp: int = 32) -> dict:
    """``{argument: (element loads, element stores)}`` of ``gqa_decode_page_runs``, the cache arguments in words
    (``row_words`` per token and block). Runs: a block's partition of n tokens makes ceil(n / run) of
    them; every lane of the warp that takes a run loads its table entry, and for fp8 its page's K and V
    scales, once."""
    _cache_format(fmt)
    if d % 4:
        raise ValueError(f"d must be a multiple of 4, got {d}")
    requested = gqa.requested_decode(context_lens, heads, kv_heads, d, partition_size, group_max, warps, warp)
    group = gqa.group_size(heads, kv_heads)
    readers = kv_heads * max(1, cdiv(group, group_max))
    run = run_length(group, fmt, block_size, group_max, warp)
    lens = [int(n) for n in context_lens]
    partitions = max(1, cdiv(max(lens, default=0), partition_size))
    runs = sum(cdiv(max(0, min(partition_size, n - p * partition_size)), run) for n in lens for p in range(partitions))
    words = readers * sum(lens) * row_words(d, fmt)
    per_run = readers * runs * warp
    requested.update({"k_cache": (words, 0), "v_cache": (words, 0), "block_tables": (per_run, 0),
                      "k_scales": (per_run if fmt == "fp8_e4m3" else 0, 0),
                      "v_scales": (per_run if fmt == "fp8_e4m3" else 0, 0)})
    return requested


def itemsizes_decode_runs(fmt: str) -> dict:
    """Bytes per element of each argument of ``gqa_decode_page_runs`` and the merge (the cache: its words)."""
    return {**itemsizes_decode(fmt), "k_cache": WORD if fmt == "fp8_e4m3" else 8,
            "v_cache": WORD if fmt == "fp8_e4m3" else 8}


def itemsizes_decode(fmt: str) -> dict:
    """Bytes per element of each argument of the decode kernels (partition and merge) for a cache of
    format ``fmt`` (fp8: the 4-byte words the kernel reads)."""
    _cache_format(fmt)
    cache = WORD if fmt == "fp8_e4m3" else _itemsize(fmt)
    return {"q": 4, "k_cache": cache, "v_cache": cache, "k_scales": 4, "v_scales": 4, "block_tables": 4,
            "context_lens": 4, "partial_max": 4, "partial_sum": 4, "partial_acc": 4, "out": 4}


def requested_quantize(groups: int, group_size: int, compute_scales: bool, threads: int = FP8_THREADS) -> dict:
    """``fp8_quantize``: one block of ``threads`` per group. Computing the scales reads x twice (the
    amax, then the codes) and thread 0 stores the scale; given scales are read by every thread once.
    Each code is stored once."""
    _check(groups=groups, group_size=group_size, threads=threads)
    n = groups * group_size
    if compute_scales:
        return {"x": (2 * n, 0), "scales": (0, groups), "codes": (0, n)}
    return {"x": (n, 0), "scales": (groups * threads, 0), "codes": (0, n)}


def requested_dequantize(groups: int, group_size: int) -> dict:
    """``fp8_dequantize``: each element's code and its group's scale read once, its value written once."""
    _check(groups=groups, group_size=group_size)
    n = groups * group_size
    return {"codes": (n, 0), "scales": (n, 0), "out": (0, n)}


def load_bytes(requested: dict, itemsizes: dict) -> dict:
    """``{argument: (bytes loaded, bytes stored)}`` from element counts and each argument's bytes per element."""
    missing = set(requested) - set(itemsizes)
    if missing:
        raise ValueError(f"itemsizes must give every argument's bytes per element; missing {sorted(missing)}")
    return {name: (loads * itemsizes[name], stores * itemsizes[name]) for name, (loads, stores) in requested.items()}


def compulsory_bytes_prefill(B: int, heads: int, kv_heads: int, N: int, d: int, M: int | None = None,
                             dtype: str = "float16") -> int:
    """At least: q read and o written once per query head, K and V read once per KV head, in ``dtype``."""
    return gqa.compulsory_bytes_prefill(B, heads, kv_heads, N, d, M, itemsize=_itemsize(dtype))


def compulsory_bytes_decode(context_lens, heads: int, kv_heads: int, d: int, fmt: str, block_size: int = 16) -> int:
    """At least: K and V of each context read once per KV head at the cache format, q read and out written
    in float32, and for fp8 the K and V scales of every page in use (4 bytes each per KV head)."""
    _cache_format(fmt, WIDE_CACHE_FORMATS)
    _check(block_size=block_size)
    lens = [int(n) for n in context_lens]
    kv = 2 * kv_heads * sum(lens) * d * _itemsize(fmt)
    q_and_out = gqa.compulsory_bytes_decode([0] * len(lens), heads, kv_heads, d, itemsize=4)
    scales = 2 * kv_heads * sum(cdiv(n, block_size) for n in lens) * 4 if fmt == "fp8_e4m3" else 0
    return kv + q_and_out + scales


def decode_cache_saving(fmt: str, d: int = 128, block_size: int = 16) -> Fraction:
    """float32 cache bytes over ``fmt``'s for one token of one KV head (fp8 counts its share of the page's
    scales): 2 for fp16, 4 * 2d / (2d + 8 / block_size) for fp8 (3.992 at d 128, pages of 16)."""
    _cache_format(fmt)
    _check(d=d, block_size=block_size)
    if d == 0 or block_size == 0:
        raise ValueError("d and block_size must be >= 1")
    per_token = Fraction(2 * d * _itemsize(fmt)) + (Fraction(8, block_size) if fmt == "fp8_e4m3" else 0)
    return Fraction(2 * d * 4) / per_token
