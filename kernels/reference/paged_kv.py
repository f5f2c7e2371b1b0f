"""A paged KV cache: gathering a sequence through its block table, decode-step attention over it,
and building a shuffled cache from contiguous keys and values, as a serving engine would.

``k_cache, v_cache: (num_blocks, kv_heads, block_size, head_dim)``,
``block_tables: (num_seqs, max_blocks_per_seq)`` int32, ``context_lens: (num_seqs,)`` int32.
"""

import numpy as np

from ._checks import _check_heads, _check_kv_lens, _float64, _int_array, _int_scalar, _real_array
from .softmax_attention import attention

__all__ = ["gather_kv", "paged_attention", "build_paged_cache"]


def _pages(context_len, block_size):
    """Pages (blocks) a context of ``context_len`` keys fills: the last one may be partial.

    Not ``kernels.launching.cdiv``: the references import nothing outside this package, so that a
    private copy of it (the grader's) depends on no module a submission could patch.
    """
    return -(-context_len // block_size)


def _check_block_table_entries(block_table, context_len, block_size, num_blocks, name):
    """The pages a sequence uses must index the block pool; the unused tail may hold anything."""
    pages = _pages(context_len, block_size)
    if pages > block_table.shape[-1]:
        raise ValueError(
            f"{name} has {block_table.shape[-1]} entries per sequence, but a context of "
            f"{context_len} keys in blocks of {block_size} needs {pages}")
    used = block_table[:pages]
    if np.any(used < 0) or np.any(used >= num_blocks):
        raise ValueError(
            f"{name} entries in use must lie in [0, num_blocks) = [0, {num_blocks}), got {used.tolist()}")
    return pages


def gather_kv(cache, block_table, context_len):
    """The contiguous keys (or values) of one sequence, read through its block table.

    cache: (num_blocks, kv_heads, block_size, head_dim); block_table: (max_blocks_per_seq,)
    integers; context_len: integer >= 0. Position t of the sequence lives in slot
    t % block_size of block ``block_table[t // block_size]``. Entries past the pages in use are
    never read (they may be padding such as -1).
    Returns: float64 (kv_heads, context_len, head_dim).
    """
    cache = _real_array(cache, "cache", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    block_table = _int_array(block_table, "block_table")
    if block_table.ndim != 1:
        raise ValueError(f"block_table must have 1 dimension (max_blocks_per_seq,), got shape {block_table.shape}")
    context_len = _int_scalar(context_len, "context_len", 0)
    num_blocks, kv_heads, block_size, head_dim = cache.shape
    pages = _check_block_table_entries(block_table, context_len, block_size, num_blocks, "block_table")
    # Reads one table entry and one page (kv_heads * block_size * head_dim) per page in use.
    chunks = [cache[block_table[p]].astype(np.float64) for p in range(pages)]
    gathered = np.concatenate(chunks, axis=1) if chunks else np.zeros((kv_heads, 0, head_dim))
    return gathered[:, :context_len]


def paged_attention(q, k_cache, v_cache, block_tables, context_lens, *, scale=None):
    """Decode-step attention over a paged KV cache, in float64.

    q: (num_seqs, heads, d), one query per sequence (the newest token), which sees all of its
    sequence's keys (no causal mask is needed for the last position).
    k_cache, v_cache: (num_blocks, kv_heads, block_size, d), heads a multiple of kv_heads.
    block_tables: (num_seqs, max_blocks_per_seq) integers; context_lens: (num_seqs,) integers.
    Only the first ceil(context_lens[s] / block_size) entries of row s are read.
    scale: default 1 / sqrt(d).
    Returns: float64 (num_seqs, heads, d); a sequence with context length 0 gives zeros.
    """
    q = _float64(q, "q", 3, "(num_seqs, heads, head_dim)")
    k_cache = _real_array(k_cache, "k_cache", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    v_cache = _real_array(v_cache, "v_cache", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache must have the shape of k_cache {k_cache.shape}, got {v_cache.shape}")
    num_seqs, heads, head_dim = q.shape
    num_blocks, kv_heads, block_size, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(f"k_cache head_dim ({cache_head_dim}) must equal q head_dim ({head_dim})")
    _check_heads(heads, kv_heads, "q", "k_cache")
    block_tables = _int_array(block_tables, "block_tables")
    if block_tables.ndim != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(
            f"block_tables must have shape (num_seqs, max_blocks_per_seq) with num_seqs = {num_seqs}, "
            f"got shape {block_tables.shape}")
    context_lens = _int_array(context_lens, "context_lens", (num_seqs,), "(num_seqs,)")
    if np.any(context_lens < 0):
        raise ValueError(f"context_lens must be >= 0, got {context_lens.tolist()}")
    for s in range(num_seqs):
        _check_block_table_entries(block_tables[s], int(context_lens[s]), block_size, num_blocks,
                                   f"block_tables[{s}]")
    out = np.zeros((num_seqs, heads, head_dim))
    for s in range(num_seqs):
        # Reads the pages in use of k_cache and v_cache once; writes one output row per head.
        keys = gather_kv(k_cache, block_tables[s], int(context_lens[s]))
        values = gather_kv(v_cache, block_tables[s], int(context_lens[s]))
        if not (np.all(np.isfinite(keys)) and np.all(np.isfinite(values))):
            raise ValueError(f"k_cache and v_cache must be finite in the slots of sequence {s}, "
                             "but they hold NaN or infinity there")
        out[s] = attention(q[s][None, :, None, :], keys[None], values[None], scale=scale)[0, :, 0, :]
    return out


def build_paged_cache(k, v, block_size, rng, context_lens=None, *, spare_blocks=1, fill_value=np.nan,
                      padding_pages=0):
    """Scatter contiguous K/V into a shuffled pool of blocks, as a serving engine would.

    k, v: (num_seqs, kv_heads, M, head_dim) float arrays, sequence s holding its keys at
    positions 0 .. context_lens[s] - 1. block_size: integer >= 1. rng: a numpy Generator that
    shuffles the pool. context_lens: (num_seqs,) integers in [0, M], default M for all.
    spare_blocks: extra blocks that belong to no sequence, the last ones of the pool (so an entry
    of -1 used as an index, which wraps to the last block in NumPy and on the simulator, reads a
    spare). fill_value: what every slot that holds no key contains (the tail of each partial last
    page and the spare blocks); NaN by default, so a kernel that reads past a context length shows
    it. padding_pages: extra -1 columns in every row of the table (a kernel reading a page past
    the end of the longest context then meets -1, not the end of the row).
    Returns: (k_cache, v_cache, block_tables, context_lens):
    k_cache, v_cache (num_blocks, kv_heads, block_size, head_dim) in the dtype of k;
    block_tables (num_seqs, max_blocks_per_seq) int32, padded with -1 past each sequence's pages;
    context_lens (num_seqs,) int32.
    """
    k = _real_array(k, "k", 4, "(num_seqs, kv_heads, seq, head_dim)")
    v = _real_array(v, "v", 4, "(num_seqs, kv_heads, seq, head_dim)")
    if v.shape != k.shape or v.dtype != k.dtype:
        raise ValueError(f"v must match k in shape and dtype: k is {k.shape} {k.dtype}, v is {v.shape} {v.dtype}")
    if k.dtype.kind in "iu":
        raise TypeError(f"k and v must have a float dtype, got {k.dtype}")
    block_size = _int_scalar(block_size, "block_size", 1)
    spare_blocks = _int_scalar(spare_blocks, "spare_blocks", 0)
    padding_pages = _int_scalar(padding_pages, "padding_pages", 0)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    num_seqs, kv_heads, M, head_dim = k.shape
    context_lens = _check_kv_lens(context_lens, num_seqs, M, "context_lens")
    pages = [_pages(int(n), block_size) for n in context_lens]
    num_blocks = sum(pages) + spare_blocks
    pool_order = rng.permutation(num_blocks - spare_blocks)   # physical block of the i-th page handed out
    k_cache = np.full((num_blocks, kv_heads, block_size, head_dim), fill_value, dtype=k.dtype)
    v_cache = np.full_like(k_cache, fill_value)
    block_tables = np.full((num_seqs, max(1, max(pages, default=0)) + padding_pages), -1, dtype=np.int32)
    handed_out = 0
    for s in range(num_seqs):
        for p in range(pages[s]):
            block = pool_order[handed_out]
            handed_out += 1
            block_tables[s, p] = block
            start, stop = p * block_size, min((p + 1) * block_size, int(context_lens[s]))
            k_cache[block, :, : stop - start] = k[s, :, start:stop]
            v_cache[block, :, : stop - start] = v[s, :, start:stop]
    return k_cache, v_cache, block_tables, context_lens.astype(np.int32)
