"""Writing into the paged KV cache: each new token's key and value go to the slot of its position.

Token ``t`` of a step belongs to sequence ``token_seqs[t]`` at position ``token_positions[t]``; its
slot is offset ``position % block_size`` of block ``block_tables[seq, position // block_size]``::

    k_new, v_new:     (num_tokens, kv_heads, head_dim) float32
    k_cache, v_cache: (num_blocks, kv_heads, block_size, head_dim) float32, written in place
    block_tables:     (num_seqs, max_blocks_per_seq) int32
    token_seqs, token_positions: (num_tokens,) int32

A prefill writes many positions of one sequence, a decode step one position of each sequence; both
are one launch. (vLLM's ``reshape_and_cache`` takes the slots computed on the host instead.)

- ``kv_cache_write``: one block per token; its threads copy the token's ``kv_heads * head_dim``
  floats of K and of V, neighbouring threads neighbouring floats (coalesced reads and writes).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from kernels.launching import cdiv, is_device_array, note_output, require_array, require_int32, require_same_kind
from kernels.registry import Rung, ladder

__all__ = ["THREADS", "kv_cache_write_kernel", "kv_cache_write", "check_cache_write", "check_cache_slots", "RUNGS"]

THREADS = 128


@cuda.jit
def kv_cache_write_kernel(k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache):
    """Block t copies token t's keys and values to its slot."""
    t = cuda.blockIdx.x
    kv_heads = k_new.shape[1]
    d = k_new.shape[2]
    block_size = k_cache.shape[2]
    position = token_positions[t]
    block = block_tables[token_seqs[t], position // block_size]
    slot = position % block_size
    for idx in range(cuda.threadIdx.x, kv_heads * d, cuda.blockDim.x):
        head = idx // d
        c = idx - head * d
        k_cache[block, head, slot, c] = k_new[t, head, c]
        v_cache[block, head, slot, c] = v_new[t, head, c]


def check_cache_write(k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache) -> int:
    """Check the arguments of a cache write (``kv_cache_write``'s, and those of every kernel that writes the cache
    as it does) and mark both caches as outputs; return the number of tokens.

    NumPy inputs are checked to the last index: every token's sequence has a row of the table, its
    position fits that row, the table entry names a block of the cache, and no two tokens share a
    slot (their writes would race). Raises TypeError or ValueError naming the argument.
    """
    num_tokens, kv_heads, head_dim = require_array("k_new", k_new, (None, None, None), np.float32,
                                                   dims=("num_tokens", "kv_heads", "head_dim"))
    require_array("v_new", v_new, (num_tokens, kv_heads, head_dim), np.float32,
                  dims=("num_tokens", "kv_heads", "head_dim"))
    require_same_kind(k_new=k_new, v_new=v_new, k_cache=k_cache)
    check_cache_slots(num_tokens, kv_heads, head_dim, token_seqs, token_positions, block_tables, k_cache, v_cache)
    return num_tokens


def check_cache_slots(num_tokens, kv_heads, head_dim, token_seqs, token_positions, block_tables, k_cache,
                      v_cache) -> None:
    """``check_cache_write`` for a kernel that makes the new keys and values itself: ``num_tokens`` tokens of
    ``kv_heads`` heads of ``head_dim`` channels (None: any) go to the caches, which are marked as outputs."""
    cache_dims = ("num_blocks", "kv_heads", "block_size", "head_dim")
    num_blocks, _, block_size, _ = require_array("k_cache", k_cache, (None, kv_heads, None, head_dim),
                                                 np.float32, dims=cache_dims)
    require_array("v_cache", v_cache, tuple(k_cache.shape), np.float32, dims=cache_dims)
    num_seqs, max_blocks = require_int32("block_tables", block_tables, (None, None),
                                         dims=("num_seqs", "max_blocks_per_seq"))
    require_int32("token_seqs", token_seqs, (num_tokens,), dims=("num_tokens",))
    require_int32("token_positions", token_positions, (num_tokens,), dims=("num_tokens",))
    require_same_kind(token_seqs=token_seqs, token_positions=token_positions, block_tables=block_tables,
                      k_cache=k_cache, v_cache=v_cache)
    if not is_device_array(k_cache) and num_tokens:
        _check_slots(token_seqs, token_positions, block_tables, num_seqs, max_blocks, block_size, num_blocks)
    note_output(k_cache)
    note_output(v_cache)


def kv_cache_write(k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache, *,
                   kernel=kv_cache_write_kernel):
    """Store each new token's K and V at its slot of ``k_cache`` and ``v_cache`` (in place); return both. The
    arguments are checked by ``check_cache_write`` (errors name the argument)."""
    num_tokens = check_cache_write(k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache)
    kv_heads, head_dim = k_new.shape[1], k_new.shape[2]
    if num_tokens and kv_heads and head_dim:
        kernel[num_tokens, min(THREADS, 32 * cdiv(kv_heads * head_dim, 32))](
            k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache)
    return k_cache, v_cache


def _check_slots(token_seqs, token_positions, block_tables, num_seqs, max_blocks, block_size, num_blocks):
    if token_seqs.min() < 0 or token_seqs.max() >= num_seqs:
        raise ValueError(f"token_seqs must lie in [0, {num_seqs - 1}] (rows of block_tables), got values "
                         f"from {token_seqs.min()} to {token_seqs.max()}")
    if token_positions.min() < 0 or token_positions.max() >= max_blocks * block_size:
        raise ValueError(f"token_positions must lie in [0, {max_blocks * block_size - 1}] ({max_blocks} blocks "
                         f"of {block_size} per sequence), got values from {token_positions.min()} to "
                         f"{token_positions.max()}")
    blocks = block_tables[token_seqs, token_positions // block_size]
    if blocks.min() < 0 or blocks.max() >= num_blocks:
        t = int(np.flatnonzero((blocks < 0) | (blocks >= num_blocks))[0])
        raise ValueError(f"token {t} (sequence {token_seqs[t]}, position {token_positions[t]}) maps to "
                         f"block_tables[{token_seqs[t]}, {token_positions[t] // block_size}] = {blocks[t]}, "
                         f"not a block of the cache (0 ... {num_blocks - 1})")
    slots = blocks.astype(np.int64) * block_size + token_positions % block_size
    unique, counts = np.unique(slots, return_counts=True)
    if np.any(counts > 1):
        slot = int(unique[np.argmax(counts > 1)])
        tokens = np.flatnonzero(slots == slot).tolist()
        raise ValueError(f"tokens {tokens} all map to slot {slot % block_size} of block {slot // block_size}: "
                         "two writes to one slot race (is a block shared by two sequences?)")


RUNGS = ladder(
    Rung("kv_cache_write", kv_cache_write, "one block per new token copies its K and V rows to their slot"),
)
