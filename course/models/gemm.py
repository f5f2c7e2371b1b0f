"""Bytes moved and FLOPs of the GEMM ladder (kernels/gemm.py), and a model of shared-memory banks.

``C = A @ B`` with A (M, K), B (K, N), C (M, N). Every rung does the same useful work,
``flops_gemm(M, N, K) = 2·M·N·K`` (a multiply and an add per term); the rungs differ in how often
they fetch the inputs from global memory.

Global traffic, exact for the kernels as written (``course.traffic`` counts the same numbers):

- ``traffic_<rung>(M, N, K, ...)`` returns an ``ElementTraffic`` (element loads of ``a`` and ``b``,
  element stores of ``c``); ``bytes_<rung>(M, N, K, ..., itemsize=4)`` is its byte total.
  v1 and v2 read a row of A and a column of B per element of C: ``2·M·N·K`` loads. v3 reads each
  element of A once per block column of C and each element of B once per block row:
  ``M·K·ceil(N/tile) + K·N·ceil(M/tile)``; tile slots outside the matrices are zero-filled without
  a load, so the count is exact for shapes the tile does not divide. v4 likewise with its block tile,
  and v5 to v9 with theirs (128×128 for v5 to v7; v8's and v9's tile depends on the shape and the GPU:
  ``traffic_v8_autotuned`` and ``traffic_v9_warp_tiled`` take it as ``tile``, by default the one
  they take untuned). v9 moves the same elements as v8: warp tiling changes which thread computes
  which part of the block tile, not what the block loads.
- ``compulsory_bytes(M, N, K)``: each input read once and C written once, the floor for DRAM.
- ``intensity(rung, M, N, K)``: FLOPs per byte of global traffic (the x axis of a roofline).

Shared-memory traffic of v3 to v8 (element counts, all shared arrays together), exact for the
kernels as written: every thread of a block, also one outside C, fills tile slots and runs the
full inner loop over the zero-padded tiles. (The simulator counts elements; on a GPU v5 to v9 read
each run of 4 neighbouring words with one 16-byte load.)

Banks: ``bank_of`` and ``bank_conflict_degree`` say which of the 32 four-byte banks each thread of
a warp hits and how many passes the access takes.

Arguments are ints >= 0; the tile sizes default to the kernels' constants (``kernels.gemm``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernels.launching import cdiv, largest_filling

__all__ = ["TILE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "THREAD_M", "THREAD_N", "WIDE_BLOCK_M", "WIDE_BLOCK_N",
           "WIDE_THREAD_M", "WIDE_THREAD_N", "TILE_SHAPES", "BLOCKS_TO_FILL", "RUNGS", "ElementTraffic",
           "flops_gemm", "compulsory_bytes", "traffic_v1_naive", "traffic_v2_coalesced",
           "traffic_v3_shared_tiles", "traffic_v4_register_blocked", "traffic_v5_wide_shared_loads",
           "traffic_v6_unrolled", "traffic_v7_double_buffered", "traffic_v8_autotuned", "traffic_v9_warp_tiled", "bytes_v1_naive",
           "bytes_v2_coalesced", "bytes_v3_shared_tiles", "bytes_v4_register_blocked",
           "bytes_v5_wide_shared_loads", "bytes_v6_unrolled", "bytes_v7_double_buffered", "bytes_v8_autotuned",
           "bytes_v9_warp_tiled", "untuned_tile_shape", "traffic", "intensity", "shared_loads_v3_shared_tiles",
           "shared_stores_v3_shared_tiles", "shared_loads_v4_register_blocked", "shared_stores_v4_register_blocked",
           "shared_loads_wide", "shared_stores_wide", "BANKS", "bank_of", "bank_conflict_degree"]

# The tile sizes of kernels/gemm.py (a test keeps the two in step; this module imports no numba).
TILE = 16
BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 8
THREAD_M = 4
THREAD_N = 4
# v5 to v9: block tiles of C, 8×8 of it per thread; v8 and v9 choose among TILE_SHAPES (kernels.gemm
# times them); untuned, it takes the largest that makes BLOCKS_TO_FILL blocks.
WIDE_BLOCK_M = 128
WIDE_BLOCK_N = 128
WIDE_THREAD_M = 8
WIDE_THREAD_N = 8
TILE_SHAPES = ((128, 128), (128, 64), (64, 128), (64, 64))
BLOCKS_TO_FILL = 128

RUNGS = ("gemm_v1_naive", "gemm_v2_coalesced", "gemm_v3_shared_tiles", "gemm_v4_register_blocked",
         "gemm_v5_wide_shared_loads", "gemm_v6_unrolled", "gemm_v7_double_buffered", "gemm_v8_autotuned",
         "gemm_v9_warp_tiled")


class ElementTraffic(NamedTuple):
    """Global element loads of ``a`` and ``b`` and stores of ``c`` of one GEMM launch."""

    a_loads: int
    b_loads: int
    c_stores: int

    def bytes(self, itemsize: int = 4) -> int:
        """Total bytes moved: (loads + stores) × itemsize."""
        _check(itemsize=itemsize)
        return (self.a_loads + self.b_loads + self.c_stores) * itemsize


def _check(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _check_tile(**tiles) -> None:
    for name, value in tiles.items():
        _check(**{name: value})
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def flops_gemm(M: int, N: int, K: int) -> int:
    """2·M·N·K: one multiply and one add per term of every dot product."""
    _check(M=M, N=N, K=K)
    return 2 * int(M) * int(N) * int(K)


def compulsory_bytes(M: int, N: int, K: int, itemsize: int = 4) -> int:
    """Read A and B once, write C once: what must cross DRAM even with a perfect cache."""
    _check(M=M, N=N, K=K, itemsize=itemsize)
    M, N, K = int(M), int(N), int(K)
    return (M * K + K * N + M * N) * itemsize


def traffic_v1_naive(M: int, N: int, K: int) -> ElementTraffic:
    """Each of the M·N threads loads a row of A and a column of B (K each) and stores one element."""
    _check(M=M, N=N, K=K)
    M, N, K = int(M), int(N), int(K)
    return ElementTraffic(a_loads=M * N * K, b_loads=M * N * K, c_stores=M * N)


def traffic_v2_coalesced(M: int, N: int, K: int) -> ElementTraffic:
    """The same elements as v1: coalescing changes how loads group into sectors, not how many there are."""
    return traffic_v1_naive(M, N, K)


def traffic_v3_shared_tiles(M: int, N: int, K: int, tile: int = TILE) -> ElementTraffic:
    """Each of the ceil(N/tile) block columns reads all of A once; each block row reads all of B once."""
    _check(M=M, N=N, K=K)
    _check_tile(tile=tile)
    M, N, K = int(M), int(N), int(K)
    if M == 0 or N == 0:  # the launcher launches nothing
        return ElementTraffic(0, 0, 0)
    return ElementTraffic(a_loads=M * K * cdiv(N, tile), b_loads=K * N * cdiv(M, tile), c_stores=M * N)


def traffic_v4_register_blocked(M: int, N: int, K: int, block_m: int = BLOCK_M,
                                block_n: int = BLOCK_N) -> ElementTraffic:
    """As v3 with a block tile of block_m × block_n: A is read ceil(N/block_n) times, B ceil(M/block_m)."""
    _check(M=M, N=N, K=K)
    _check_tile(block_m=block_m, block_n=block_n)
    M, N, K = int(M), int(N), int(K)
    if M == 0 or N == 0:
        return ElementTraffic(0, 0, 0)
    return ElementTraffic(a_loads=M * K * cdiv(N, block_n), b_loads=K * N * cdiv(M, block_m),
                          c_stores=M * N)


def traffic_v5_wide_shared_loads(M: int, N: int, K: int, block_m: int = WIDE_BLOCK_M,
                                 block_n: int = WIDE_BLOCK_N) -> ElementTraffic:
    """As v4 with 128×128 tiles: A is read ceil(N/128) times, B ceil(M/128) times."""
    return traffic_v4_register_blocked(M, N, K, block_m, block_n)


def traffic_v6_unrolled(M: int, N: int, K: int, block_m: int = WIDE_BLOCK_M,
                        block_n: int = WIDE_BLOCK_N) -> ElementTraffic:
    """The same elements as v5: v6 changes the instructions, not what they load."""
    return traffic_v4_register_blocked(M, N, K, block_m, block_n)


def traffic_v7_double_buffered(M: int, N: int, K: int, block_m: int = WIDE_BLOCK_M,
                               block_n: int = WIDE_BLOCK_N) -> ElementTraffic:
    """The same elements as v5: each step's slice is loaded once, one step ahead of its use."""
    return traffic_v4_register_blocked(M, N, K, block_m, block_n)


def untuned_tile_shape(M: int, N: int) -> tuple[int, int]:
    """The tile v8 takes when it has not timed the shape: the first of TILE_SHAPES with at least
    BLOCKS_TO_FILL blocks, else the smallest (``kernels.gemm.untuned_tile_shape``, kept in step)."""
    _check(M=M, N=N)
    return largest_filling(TILE_SHAPES, int(M), int(N), BLOCKS_TO_FILL)


def traffic_v8_autotuned(M: int, N: int, K: int, tile: tuple[int, int] | None = None) -> ElementTraffic:
    """v7's traffic at the block tile v8 launched (``tile`` = (block_m, block_n); default: the untuned choice)."""
    if tile is None:
        tile = untuned_tile_shape(M, N)
    if tuple(tile) not in TILE_SHAPES:
        raise ValueError(f"tile must be one of {TILE_SHAPES}, got {tile!r}")
    return traffic_v4_register_blocked(M, N, K, *tile)


def traffic_v9_warp_tiled(M: int, N: int, K: int, tile: tuple[int, int] | None = None) -> ElementTraffic:
    """v8's traffic at the block tile v9 launched: the same loads and stores, other threads doing them."""
    return traffic_v8_autotuned(M, N, K, tile)


def bytes_v1_naive(M: int, N: int, K: int, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v1_naive``: (2·M·N·K + M·N) × itemsize."""
    return traffic_v1_naive(M, N, K).bytes(itemsize)


def bytes_v2_coalesced(M: int, N: int, K: int, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v2_coalesced``: the same as v1."""
    return traffic_v2_coalesced(M, N, K).bytes(itemsize)


def bytes_v3_shared_tiles(M: int, N: int, K: int, tile: int = TILE, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v3_shared_tiles``."""
    return traffic_v3_shared_tiles(M, N, K, tile).bytes(itemsize)


def bytes_v4_register_blocked(M: int, N: int, K: int, block_m: int = BLOCK_M, block_n: int = BLOCK_N,
                              itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v4_register_blocked``."""
    return traffic_v4_register_blocked(M, N, K, block_m, block_n).bytes(itemsize)


def bytes_v5_wide_shared_loads(M: int, N: int, K: int, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v5_wide_shared_loads``."""
    return traffic_v5_wide_shared_loads(M, N, K).bytes(itemsize)


def bytes_v6_unrolled(M: int, N: int, K: int, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v6_unrolled``: the same as v5."""
    return traffic_v6_unrolled(M, N, K).bytes(itemsize)


def bytes_v7_double_buffered(M: int, N: int, K: int, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v7_double_buffered``: the same as v5."""
    return traffic_v7_double_buffered(M, N, K).bytes(itemsize)


def bytes_v8_autotuned(M: int, N: int, K: int, tile: tuple[int, int] | None = None, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v8_autotuned`` at ``tile`` (default: the untuned choice)."""
    return traffic_v8_autotuned(M, N, K, tile).bytes(itemsize)


def bytes_v9_warp_tiled(M: int, N: int, K: int, tile: tuple[int, int] | None = None, itemsize: int = 4) -> int:
    """Global bytes of ``gemm_v9_warp_tiled`` at ``tile`` (default: the untuned choice), as v8's."""
    return traffic_v9_warp_tiled(M, N, K, tile).bytes(itemsize)


_TRAFFIC = {
    "gemm_v1_naive": traffic_v1_naive,
    "gemm_v2_coalesced": traffic_v2_coalesced,
    "gemm_v3_shared_tiles": traffic_v3_shared_tiles,
    "gemm_v4_register_blocked": traffic_v4_register_blocked,
    "gemm_v5_wide_shared_loads": traffic_v5_wide_shared_loads,
    "gemm_v6_unrolled": traffic_v6_unrolled,
    "gemm_v7_double_buffered": traffic_v7_double_buffered,
    "gemm_v8_autotuned": traffic_v8_autotuned,
    "gemm_v9_warp_tiled": traffic_v9_warp_tiled,
}


def traffic(rung: str, M: int, N: int, K: int) -> ElementTraffic:
    """The element traffic of a rung by name (one of ``RUNGS``), with the kernels' tile sizes
    (for v8 and v9 the untuned choice; ``traffic_v8_autotuned`` takes the tile a tuned launch used)."""
    if rung not in _TRAFFIC:
        raise ValueError(f"rung must be one of {RUNGS}, got {rung!r}")
    return _TRAFFIC[rung](M, N, K)


def intensity(rung: str, M: int, N: int, K: int, itemsize: int = 4) -> float:
    """Arithmetic intensity of a rung: useful FLOPs per byte of global traffic."""
    moved = traffic(rung, M, N, K).bytes(itemsize)
    if moved == 0:
        raise ValueError(f"intensity needs a non-empty C, got M={M}, N={N}")
    return flops_gemm(M, N, K) / moved


# ----------------------------------------------------------------------------------------------
# Shared memory of v3 to v8
# ----------------------------------------------------------------------------------------------

def _steps_and_blocks(M, N, K, block_m, block_n, block_k):
    _check(M=M, N=N, K=K)
    _check_tile(block_m=block_m, block_n=block_n, block_k=block_k)
    if M == 0 or N == 0:
        return 0, 0
    return cdiv(K, block_k), cdiv(M, block_m) * cdiv(N, block_n)


def shared_stores_v3_shared_tiles(M: int, N: int, K: int, tile: int = TILE) -> int:
    """Per block and k-step, each of the tile² threads stores one slot of each tile (2·tile²)."""
    steps, blocks = _steps_and_blocks(M, N, K, tile, tile, tile)
    return blocks * steps * 2 * tile * tile


def shared_loads_v3_shared_tiles(M: int, N: int, K: int, tile: int = TILE) -> int:
    """Per block and k-step, each of the tile² threads reads a row of one tile and a column of the other (2·tile)."""
    steps, blocks = _steps_and_blocks(M, N, K, tile, tile, tile)
    return blocks * steps * tile * tile * 2 * tile


def shared_stores_v4_register_blocked(M: int, N: int, K: int, block_m: int = BLOCK_M, block_n: int = BLOCK_N,
                                      block_k: int = BLOCK_K) -> int:
    """Per block and k-step, the block fills block_m·block_k slots of the A tile and block_k·block_n of B."""
    steps, blocks = _steps_and_blocks(M, N, K, block_m, block_n, block_k)
    return blocks * steps * (block_m * block_k + block_k * block_n)


def shared_loads_v4_register_blocked(M: int, N: int, K: int, block_m: int = BLOCK_M, block_n: int = BLOCK_N,
                                     block_k: int = BLOCK_K, thread_m: int = THREAD_M,
                                     thread_n: int = THREAD_N) -> int:
    """Per k inside a step, each thread reads thread_m values of A and thread_n of B into registers."""
    _check_tile(thread_m=thread_m, thread_n=thread_n)
    steps, blocks = _steps_and_blocks(M, N, K, block_m, block_n, block_k)
    threads = (block_m // thread_m) * (block_n // thread_n)
    return blocks * steps * threads * block_k * (thread_m + thread_n)


def shared_stores_wide(M: int, N: int, K: int, block_m: int = WIDE_BLOCK_M, block_n: int = WIDE_BLOCK_N,
                       double_buffered: bool = False) -> int:
    """v5 to v9: per block and k-step, the block fills block_k slots of each of the block_m rows of the
    transposed A tile and of the block_n columns of the B tile. ``double_buffered`` (v7 to v9): the first
    step's slots are filled before the loop, also when K = 0 (with zeros), so at least one step counts."""
    steps, blocks = _steps_and_blocks(M, N, K, block_m, block_n, BLOCK_K)
    if double_buffered:
        steps = max(steps, 1)
    return blocks * steps * BLOCK_K * (block_m + block_n)


def shared_loads_wide(M: int, N: int, K: int, block_m: int = WIDE_BLOCK_M, block_n: int = WIDE_BLOCK_N) -> int:
    """v5 to v9: per k inside a step, each of the (block_m/8)·(block_n/8) threads reads 8 values of A and 8 of B."""
    steps, blocks = _steps_and_blocks(M, N, K, block_m, block_n, BLOCK_K)
    threads = (block_m // WIDE_THREAD_M) * (block_n // WIDE_THREAD_N)
    return blocks * steps * threads * BLOCK_K * (WIDE_THREAD_M + WIDE_THREAD_N)


# ----------------------------------------------------------------------------------------------
# Shared-memory banks
# ----------------------------------------------------------------------------------------------

BANKS = 32  # successive 4-byte words of shared memory sit in successive banks, modulo 32


def bank_of(word_addresses) -> np.ndarray:
    """The bank of each 4-byte word address (an int array, e.g. one address per thread of a warp)."""
    words = np.asarray(word_addresses)
    if not np.issubdtype(words.dtype, np.integer):
        raise TypeError(f"word_addresses must be integers, got dtype {words.dtype}")
    if words.size and words.min() < 0:
        raise ValueError(f"word_addresses must be >= 0, got {words.min()}")
    return words % BANKS


def bank_conflict_degree(word_addresses) -> int:
    """Passes a warp-wide access needs: the most *distinct* words that fall into one bank.

    Threads reading the same word share one pass (a broadcast), so 32 reads of one word cost 1;
    32 different words in one bank cost 32. A conflict-free access has degree 1.
    """
    words = np.unique(np.asarray(word_addresses).ravel())
    if words.size == 0:
        return 0
    return int(np.bincount(bank_of(words), minlength=BANKS).max())
