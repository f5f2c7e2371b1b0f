"""Bytes moved, FLOPs and shared-memory passes of the tensor-core GEMM ladder (``kernels/tensor_core_gemm.py``).

``C = A B`` with A (M, K) and w = B^T (N, K) stored in fp16 or bf16 (2 bytes a number), C (M, N) float32. Every
rung does the same useful work, ``flops(M, N, K) = 2 M N K`` (a multiply and an add per term, on tensor cores);
the rungs differ in how they move the operands (v3's to v7's 16-byte copies read exactly the numbers v1's
2-byte loads read, K being a multiple of 8 there) and, for v5 and v6, in how often: their tiles of C are 128 x 128.
v7 runs one of ``TILES`` (block, warp_tile_m, warp_tile_n), the one its first launch timed fastest on the GPU or,
untimed, ``untuned_tile(M, N)``; its functions take that ``tile`` (default the untuned one).

- ``traffic_<rung>(M, N, K)``: ``{argument: (bytes loaded, bytes stored)}`` of the rung's kernel by kernel
  parameter name (``a``, ``w``, ``c``), exact for the kernels as written (``course.traffic`` counts the same
  numbers). v1-v4 take 64 x 64 tiles of C and copy the rows of A and w a tile needs: each number of A is read
  once per block column, ``2 M K ceil(N / 64)`` bytes, each of w once per block row, ``2 N K ceil(M / 64)``; v5's
  v6's, v8's and v9's tiles are 128 x 128: ``2 M K ceil(N / 128)`` and ``2 N K ceil(M / 128)``; v7's those of its
  tile.
  Rows outside A or w and numbers past K are zero-filled without a load. C is written once.
- ``bytes_<rung>(M, N, K)``: the total of ``traffic_<rung>``; ``compulsory_bytes(M, N, K)``: A and w read once
  and C written once, the floor for DRAM; ``intensity(rung, M, N, K)``: FLOPs per byte of the rung's traffic.
- ``shared_words(M, N, K, rung=...)``: ``(word loads, word stores)`` of shared memory, exact as ``course.traffic``
  counts them (a word is two numbers), the same for v1-v4 (the default): per block and step of 32 along K its
  threads store 2 x 64 x 16 words (both tiles, zeros included), and per 16-wide step along K inside K each of its
  4 warps loads 32 x 16 words (v1: 16 words a lane; v2-v4: 4 ldmatrix.x4 of 16 bytes a lane; v3's and v4's copies
  land as 4 words each). v5: 2 x 128 x 16 words stored per block and step, and each of its 8 warps loads 32 x 24
  words per 16-wide step (6 ldmatrix.x4 a lane). v6: v5's stores, and each of its 4 warps loads 32 x 32 words per
  16-wide step (8 ldmatrix.x4 a lane). v7: its tile's, by the same rule. v8: v6's warps and loads, in steps of 64
  along K (2 x 128 x 32 words stored per block and step), every 16 of each step loaded, past K too (its copies
  write zeros there and it skips no mma). v9: v8's (its stores of C are wider, not more: the same bytes).
- ``fragment_loads(rung)``: the word addresses (in the shared tile of rows of ``K_WORDS`` words) that one shared
  load instruction of the mma fragments asks for, one array per group of lanes the hardware serves together (v1:
  a 32-bit load by the 32 lanes; v2-v6: ``ldmatrix.x4``, whose 4 matrices are 4 phases of 8 rows of 16 bytes; v4's
  and v5's rows swizzled, ``swizzled_word``); ``shared_passes_per_mma_step(rung)``: the shared wavefronts a warp
  needs for the fragments of one 16-wide step along K (``warp_mmas_per_step(rung)`` mmas: 8, v5 16, v6 32), counted with
  ``course.models.gemm.bank_conflict_degree``. The rows of every rung's tiles are 64 bytes long, so v1-v3's loads
  meet 4-way bank conflicts: 64 passes for v1's 16 loads and for v2's and v3's 4 ldmatrix alike; v4's swizzle
  puts the 8 rows of every phase in 8 different groups of 4 banks: 16 passes for its 4 ldmatrix, 24 for v5's 6
  (16 mmas) and 32 for v6's 8 (32 mmas). v8's rows are 128 bytes long, 8 chunks XOR-swizzled by the row's low 3
  bits (``deep_swizzled_word``): 32 passes for its 8, as v6; v9's are v8's. ``shared_load_wavefronts(rung, M, N,
  K)``: those passes over a whole launch, with the fewest its loads could take, a prediction for Nsight Compute's
  shared-load wavefronts and bank conflicts (``python -m course.record day08 --ncu-shared`` measures them).

Arguments are ints >= 0. The tile sizes are ``kernels.tensor_core_gemm``'s (a test keeps the two in step; this
module imports no numba).
"""

from __future__ import annotations

import numpy as np

from course.models.gemm import bank_conflict_degree
from kernels.launching import cdiv, largest_filling

__all__ = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "K_WORDS", "LARGE_BLOCK_M", "LARGE_BLOCK_N", "ITEMSIZE", "FLOAT32",
           "RUNGS", "flops", "compulsory_bytes", "traffic_tc_gemm_v1_mma_shared", "traffic_tc_gemm_v2_ldmatrix",
           "bytes_tc_gemm_v1_mma_shared", "bytes_tc_gemm_v2_ldmatrix", "traffic_tc_gemm_v3_cp_async",
           "bytes_tc_gemm_v3_cp_async", "traffic_tc_gemm_v4_swizzled", "bytes_tc_gemm_v4_swizzled",
           "traffic_tc_gemm_v5_large_tiles", "bytes_tc_gemm_v5_large_tiles", "traffic_tc_gemm_v6_wide_warps",
           "bytes_tc_gemm_v6_wide_warps", "TILES", "BLOCKS_TO_FILL", "RUNG_TILES", "untuned_tile",
           "traffic_tc_gemm_v7_tuned", "bytes_tc_gemm_v7_tuned", "traffic", "intensity", "shared_words",
           "swizzled_word", "fragment_loads", "fragment_loads_per_step", "warp_mmas_per_step",
           "shared_passes_per_mma_step", "DEEP_K", "DEEP_K_WORDS", "traffic_tc_gemm_v8_deep_steps",
           "bytes_tc_gemm_v8_deep_steps", "deep_swizzled_word", "shared_load_wavefronts", "DEEP_RUNGS",
           "traffic_tc_gemm_v9_paired_stores", "bytes_tc_gemm_v9_paired_stores"]

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
K_WORDS = BLOCK_K // 2      # uint32 words of a shared row (two 16-bit numbers a word)
LARGE_BLOCK_M = 128         # v5's tiles of C
LARGE_BLOCK_N = 128
LARGE_WARPS = 8
ITEMSIZE = 2                # bytes of an fp16 or bf16 number
FLOAT32 = 4                 # bytes of an element of C
DEEP_K = 64                 # v8's and v9's step along K: rows of 32 words (128 bytes)
DEEP_K_WORDS = DEEP_K // 2
RUNGS = ("tc_gemm_v1_mma_shared", "tc_gemm_v2_ldmatrix", "tc_gemm_v3_cp_async", "tc_gemm_v4_swizzled",
         "tc_gemm_v5_large_tiles", "tc_gemm_v6_wide_warps", "tc_gemm_v7_tuned", "tc_gemm_v8_deep_steps",
         "tc_gemm_v9_paired_stores")
DEEP_RUNGS = ("tc_gemm_v8_deep_steps", "tc_gemm_v9_paired_stores")     # steps of DEEP_K, rows of 128 bytes
# v7's tiles (block, warp_tile_m, warp_tile_n), largest first, and its untuned rule: the largest whose grid has at
# least BLOCKS_TO_FILL blocks (kernels.tensor_core_gemm's; a test keeps them in step).
TILES = ((128, 64, 64), (128, 64, 32), (64, 64, 32), (64, 32, 32))
BLOCKS_TO_FILL = 128
# The tile each rung of a fixed shape runs, as v7 names them.
RUNG_TILES = {"tc_gemm_v1_mma_shared": (64, 32, 32), "tc_gemm_v2_ldmatrix": (64, 32, 32),
              "tc_gemm_v3_cp_async": (64, 32, 32), "tc_gemm_v4_swizzled": (64, 32, 32),
              "tc_gemm_v5_large_tiles": (128, 64, 32), "tc_gemm_v6_wide_warps": (128, 64, 64),
              "tc_gemm_v8_deep_steps": (128, 64, 64), "tc_gemm_v9_paired_stores": (128, 64, 64)}


def _check(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def flops(M: int, N: int, K: int) -> int:
    """A multiply and an add per term of every sum: 2 M N K."""
    _check(M=M, N=N, K=K)
    return 2 * M * N * K


def compulsory_bytes(M: int, N: int, K: int) -> int:
    """A and w read once (2 bytes a number), C written once (4 bytes an element): 2 M K + 2 N K + 4 M N."""
    _check(M=M, N=N, K=K)
    return ITEMSIZE * (M * K + N * K) + FLOAT32 * M * N


def _tiled(M: int, N: int, K: int, block_m: int = BLOCK_M, block_n: int = BLOCK_N) -> dict:
    _check(M=M, N=N, K=K)
    if not M or not N:
        return {"a": (0, 0), "w": (0, 0), "c": (0, 0)}         # nothing is launched
    return {"a": (ITEMSIZE * M * K * cdiv(N, block_n), 0), "w": (ITEMSIZE * N * K * cdiv(M, block_m), 0),
            "c": (0, FLOAT32 * M * N)}


def traffic_tc_gemm_v1_mma_shared(M: int, N: int, K: int) -> dict:
    """A once per block column, w once per block row (2 bytes a number), C written once."""
    return _tiled(M, N, K)


def traffic_tc_gemm_v2_ldmatrix(M: int, N: int, K: int) -> dict:
    """v1's traffic: ldmatrix changes how the fragments leave shared memory, not what enters it."""
    return _tiled(M, N, K)


def traffic_tc_gemm_v3_cp_async(M: int, N: int, K: int) -> dict:
    """v1's traffic: a 16-byte copy reads the 8 numbers v1 reads one by one (K a multiple of 8)."""
    return _tiled(M, N, K)


def traffic_tc_gemm_v4_swizzled(M: int, N: int, K: int) -> dict:
    """v3's traffic: the swizzle moves the 16-byte chunks within shared rows, not what is read."""
    return _tiled(M, N, K)


def traffic_tc_gemm_v5_large_tiles(M: int, N: int, K: int) -> dict:
    """A once per 128-wide block column, w once per 128-high block row (2 bytes a number), C written once: for
    M and N multiples of 128, half of v1-v4's loads."""
    return _tiled(M, N, K, LARGE_BLOCK_M, LARGE_BLOCK_N)


def traffic_tc_gemm_v6_wide_warps(M: int, N: int, K: int) -> dict:
    """v5's traffic: the same 128 x 128 tiles, split among 4 warps instead of 8."""
    return _tiled(M, N, K, LARGE_BLOCK_M, LARGE_BLOCK_N)


def traffic_tc_gemm_v8_deep_steps(M: int, N: int, K: int) -> dict:
    """v6's traffic: the same 128 x 128 tiles; a step of 64 along K changes how often the block meets, not what it
    reads (copies past K read nothing)."""
    return _tiled(M, N, K, LARGE_BLOCK_M, LARGE_BLOCK_N)


def traffic_tc_gemm_v9_paired_stores(M: int, N: int, K: int) -> dict:
    """v8's traffic: its stores of C are 8 bytes wide, the same bytes."""
    return _tiled(M, N, K, LARGE_BLOCK_M, LARGE_BLOCK_N)


def untuned_tile(M: int, N: int) -> tuple[int, int, int]:
    """The tile v7 takes untuned (simulator, NumPy arrays): the first of ``TILES`` whose grid over C has at least
    BLOCKS_TO_FILL blocks, else the smallest."""
    _check(M=M, N=N)
    return largest_filling(TILES, M, N, BLOCKS_TO_FILL, tile=lambda t: (t[0], t[0]))


def _tile(M: int, N: int, tile) -> tuple[int, int, int]:
    if tile is None:
        return untuned_tile(M, N)
    if tuple(tile) not in TILES:
        raise ValueError(f"tile must be one of {', '.join(map(str, TILES))}, got {tile!r}")
    return tuple(tile)


def traffic_tc_gemm_v7_tuned(M: int, N: int, K: int, tile=None) -> dict:
    """The traffic of the fixed-shape rungs at ``tile`` (block, warp_tile_m, warp_tile_n) of ``TILES``, the one the
    run chose (default ``untuned_tile``): A once per block column, w once per block row, C written once. The warps'
    shape changes no global byte."""
    block = _tile(M, N, tile)[0]
    return _tiled(M, N, K, block, block)


def _total(traffic_of: dict) -> int:
    return sum(loads + stores for loads, stores in traffic_of.values())


def bytes_tc_gemm_v1_mma_shared(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v1_mma_shared``."""
    return _total(traffic_tc_gemm_v1_mma_shared(M, N, K))


def bytes_tc_gemm_v2_ldmatrix(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v2_ldmatrix``."""
    return _total(traffic_tc_gemm_v2_ldmatrix(M, N, K))


def bytes_tc_gemm_v3_cp_async(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v3_cp_async``."""
    return _total(traffic_tc_gemm_v3_cp_async(M, N, K))


def bytes_tc_gemm_v4_swizzled(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v4_swizzled``."""
    return _total(traffic_tc_gemm_v4_swizzled(M, N, K))


def bytes_tc_gemm_v5_large_tiles(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v5_large_tiles``."""
    return _total(traffic_tc_gemm_v5_large_tiles(M, N, K))


def bytes_tc_gemm_v6_wide_warps(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v6_wide_warps``."""
    return _total(traffic_tc_gemm_v6_wide_warps(M, N, K))


def bytes_tc_gemm_v8_deep_steps(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v8_deep_steps``."""
    return _total(traffic_tc_gemm_v8_deep_steps(M, N, K))


def bytes_tc_gemm_v9_paired_stores(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v9_paired_stores``."""
    return _total(traffic_tc_gemm_v9_paired_stores(M, N, K))


def bytes_tc_gemm_v7_tuned(M: int, N: int, K: int, tile=None) -> int:
    """All of ``traffic_tc_gemm_v7_tuned`` at ``tile``."""
    return _total(traffic_tc_gemm_v7_tuned(M, N, K, tile))


_TRAFFIC = {"tc_gemm_v1_mma_shared": traffic_tc_gemm_v1_mma_shared,
            "tc_gemm_v2_ldmatrix": traffic_tc_gemm_v2_ldmatrix,
            "tc_gemm_v3_cp_async": traffic_tc_gemm_v3_cp_async,
            "tc_gemm_v4_swizzled": traffic_tc_gemm_v4_swizzled,
            "tc_gemm_v5_large_tiles": traffic_tc_gemm_v5_large_tiles,
            "tc_gemm_v6_wide_warps": traffic_tc_gemm_v6_wide_warps,
            "tc_gemm_v7_tuned": traffic_tc_gemm_v7_tuned,
            "tc_gemm_v8_deep_steps": traffic_tc_gemm_v8_deep_steps,
            "tc_gemm_v9_paired_stores": traffic_tc_gemm_v9_paired_stores}


def traffic(rung: str, M: int, N: int, K: int, tile=None) -> dict:
    """``traffic_<rung>(M, N, K)`` for a rung named as in ``kernels.tensor_core_gemm.RUNGS``; ``tile``: v7's
    (default its untuned tile), refused for the other rungs, whose tile is fixed."""
    if rung not in _TRAFFIC:
        raise ValueError(f"rung must be one of {sorted(_TRAFFIC)}, got {rung!r}")
    if rung == "tc_gemm_v7_tuned":
        return traffic_tc_gemm_v7_tuned(M, N, K, tile)
    _rung_tile(rung, M, N, tile)                     # refuses a tile for a rung whose tile is fixed
    return _TRAFFIC[rung](M, N, K)


def intensity(rung: str, M: int, N: int, K: int, tile=None) -> float:
    """FLOPs per byte of the rung's global traffic (the x axis of a roofline); ``tile`` as ``traffic``."""
    moved = _total(traffic(rung, M, N, K, tile))
    return flops(M, N, K) / moved if moved else 0.0


def _rung(rung: str) -> str:
    if rung not in RUNGS:
        raise ValueError(f"rung must be one of {list(RUNGS)}, got {rung!r}")
    return rung


def _rung_tile(rung: str, M: int, N: int, tile) -> tuple[int, int, int]:
    if _rung(rung) == "tc_gemm_v7_tuned":
        return _tile(M, N, tile)
    if tile is not None:
        raise ValueError(f"tile is v7's choice; {rung} always runs {RUNG_TILES[rung]}, got tile={tile!r}")
    return RUNG_TILES[rung]


def shared_words(M: int, N: int, K: int, rung: str = "tc_gemm_v1_mma_shared", tile=None) -> tuple[int, int]:
    """Shared-memory word loads and stores of a rung, ``(blocks warps 32 4 loads ceil(K / 16), blocks 2 block 16
    ceil(K / 32))`` for ceil(N / block) ceil(M / block) blocks of ``warps`` warps whose fragments take ``loads``
    ldmatrix.x4 (4 words a lane) per 16 of K (``fragment_loads_per_step``): v1-v4 (64, 4 warps, 4 loads; v1's 16
    32-bit loads a lane are the same words), v5 (128, 8 warps, 6), v6 (128, 4 warps, 8); v7 at ``tile`` (default
    its untuned tile)."""
    _check(M=M, N=N, K=K)
    block, warp_tile_m, warp_tile_n = _rung_tile(rung, M, N, tile)
    blocks = cdiv(N, block) * cdiv(M, block)
    warps = (block // warp_tile_m) * (block // warp_tile_n)
    loads = warps * 32 * 4 * _ldmatrix_per_step((block, warp_tile_m, warp_tile_n))
    if rung in DEEP_RUNGS:                      # every 16 of each step of 64, past K too (zeros, no skipped mma)
        steps = cdiv(K, DEEP_K)
        return blocks * loads * steps * (DEEP_K // 16), blocks * 2 * block * DEEP_K_WORDS * steps
    return blocks * loads * cdiv(K, 16), blocks * 2 * block * K_WORDS * cdiv(K, BLOCK_K)


def deep_swizzled_word(row: int, chunk: int) -> int:
    """v8's layout (``kernels.tensor_core_gemm.ring_swizzle(8)``): the word of a shared row of ``DEEP_K_WORDS``
    words (8 chunks of 16 bytes) where chunk ``chunk`` starts, chunk position chunk ^ (row & 7)."""
    return 4 * (chunk ^ (row & 7))


def swizzled_word(row: int, chunk: int) -> int:
    """v4's and v5's layout (``kernels.tensor_core_gemm._swizzled``): the word of a shared row of ``K_WORDS`` words
    where its 16-byte chunk ``chunk`` (0 ... 3) starts, chunk position chunk ^ ((row >> 1) & 3)."""
    return 4 * (chunk ^ ((row >> 1) & 3))


def fragment_loads(rung: str) -> list[np.ndarray]:
    """The shared word addresses of one fragment load instruction of a warp, per group of lanes served together.

    v1: the 32 lanes' 32-bit load of a0 of the first mma row (lane 4 g + t: row g, word t). v2 and v3: the 4
    phases of an ``ldmatrix.x4`` of A (lanes 8 i ... 8 i + 7 name rows (l % 16) and chunk l // 16, words 4 (l // 16)
    ... + 3, each row 4 words). v4, v5 and v6: the same rows and chunks, each chunk at its swizzled word. The warp's
    other fragment loads differ from these by a multiple of 8 rows or by 2 chunks (the next 16 of K), which leaves
    the banks' sharing as it is (for v4 and v5: each phase's 8 rows still take each pair of row parity and
    ``(row >> 1) & 3`` once, and XOR by 2 permutes the chunks)."""
    if _rung(rung) == "tc_gemm_v1_mma_shared":
        return [np.array([(lane // 4) * K_WORDS + lane % 4 for lane in range(32)])]
    swizzled = rung in ("tc_gemm_v4_swizzled", "tc_gemm_v5_large_tiles", "tc_gemm_v6_wide_warps", "tc_gemm_v7_tuned")
    deep = rung in DEEP_RUNGS
    phases = []
    for matrix in range(4):
        lanes = range(8 * matrix, 8 * matrix + 8)
        rows_chunks = [(lane % 16, lane // 16) for lane in lanes]
        if deep:
            starts = [row * DEEP_K_WORDS + deep_swizzled_word(row, chunk) for row, chunk in rows_chunks]
        else:
            starts = [row * K_WORDS + (swizzled_word(row, chunk) if swizzled else 4 * chunk)
                      for row, chunk in rows_chunks]
        phases.append(np.array([start + j for start in starts for j in range(4)]))
    return phases


def _ldmatrix_per_step(tile) -> int:
    """ldmatrix.x4 of a warp per 16-wide step along K: one per mma row of A, one per pair of mma columns of w."""
    _, warp_tile_m, warp_tile_n = tile
    return warp_tile_m // 16 + warp_tile_n // 16


def fragment_loads_per_step(rung: str, tile=None) -> int:
    """Fragment load instructions of a warp per 16-wide step along K: v1 loads 2 mma rows x 4 words of A and 4 mma
    columns x 2 words of w (16); the others one ldmatrix.x4 per mma row of A and one per pair of mma columns of w:
    v2-v4 2 + 2, v5 4 + 2, v6 4 + 4, v7 its tile's."""
    if _rung(rung) == "tc_gemm_v1_mma_shared":
        return 16
    return _ldmatrix_per_step(_rung_tile(rung, 0, 0, tile))


def warp_mmas_per_step(rung: str, tile=None) -> int:
    """The mmas of a warp per 16-wide step along K: 2 x 4 for v1-v4, 4 x 4 for v5, 4 x 8 for v6, v7's tile's."""
    _, warp_tile_m, warp_tile_n = _rung_tile(rung, 0, 0, tile)
    return (warp_tile_m // 16) * (warp_tile_n // 8)


def shared_passes_per_mma_step(rung: str, tile=None) -> int:
    """Shared-memory wavefronts of a warp's fragment loads for one 16-wide step along K (``warp_mmas_per_step``
    mmas): the loads of the step times the passes each needs (the sum over its groups of lanes of
    ``bank_conflict_degree``)."""
    passes = sum(bank_conflict_degree(words) for words in fragment_loads(rung))
    return fragment_loads_per_step(rung, tile) * passes


def shared_load_wavefronts(rung: str, M: int, N: int, K: int, tile=None) -> tuple[int, int]:
    """The shared-load wavefronts of one launch, as Nsight Compute counts them
    (``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld``), and the fewest those loads could take without a bank
    conflict: ``(blocks warps steps shared_passes_per_mma_step, blocks warps steps loads groups)`` for the 16-wide
    steps along K a warp loads fragments for (v8: every 16 of each step of 64, past K too) and ``groups`` lanes'
    groups a load is served in (v1's 32-bit load: 1; ldmatrix.x4: its 4 matrices). The fragments are a rung's only
    shared loads (v1's and v2's staging stores and v3-v8's copies write shared memory, which this count leaves out).
    Their difference is what bank conflicts add (``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld``)."""
    _check(M=M, N=N, K=K)
    block, warp_tile_m, warp_tile_n = _rung_tile(rung, M, N, tile)
    launch_warps = cdiv(N, block) * cdiv(M, block) * (block // warp_tile_m) * (block // warp_tile_n)
    steps = cdiv(K, DEEP_K) * (DEEP_K // 16) if rung in DEEP_RUNGS else cdiv(K, 16)
    groups = len(fragment_loads(rung))
    return (launch_warps * steps * shared_passes_per_mma_step(rung, tile),
            launch_warps * steps * fragment_loads_per_step(rung, tile) * groups)
