"""Bytes moved, FLOPs and shared-memory passes of the tensor-core GEMM ladder (``kernels/tensor_core_gemm.py``).

``C = A B`` with A (M, K) and w = B^T (N, K) stored in fp16 or bf16 (2 bytes a number), C (M, N) float32. Every
rung does the same useful work, ``flops(M, N, K) = 2 M N K`` (a multiply and an add per term, on tensor cores);
the rungs differ in how they move the operands, not in what they read from global memory (v3's 16-byte copies
read exactly the numbers v1's 2-byte loads read, K being a multiple of 8 there).

- ``traffic_<rung>(M, N, K)``: ``{argument: (bytes loaded, bytes stored)}`` of the rung's kernel by kernel
  parameter name (``a``, ``w``, ``c``), exact for the kernels as written (``course.traffic`` counts the same
  numbers). Every rung takes 64 x 64 tiles of C and copies the rows of A and w a tile needs: each number of A is
  read once per block column, ``2 M K ceil(N / 64)`` bytes, each of w once per block row, ``2 N K ceil(M / 64)``;
  rows outside A or w and numbers past K are zero-filled without a load. C is written once.
- ``bytes_<rung>(M, N, K)``: the total of ``traffic_<rung>``; ``compulsory_bytes(M, N, K)``: A and w read once
  and C written once, the floor for DRAM; ``intensity(rung, M, N, K)``: FLOPs per byte of the rung's traffic.
- ``shared_words(M, N, K)``: ``(word loads, word stores)`` of shared memory, the same for every rung, exact as
  ``course.traffic`` counts them (a word is two numbers): per block and step of 32 along K its threads store 2 x 64
  x 16 words (both tiles, zeros included), and per 16-wide step along K inside K each of its 4 warps loads 32 x 16
  words (v1: 16 words a lane; v2 and v3: 4 ldmatrix.x4 of 16 bytes a lane; v3's copies land as 4 words each).
- ``fragment_loads(rung)``: the word addresses (in the shared tile of 64 rows of ``K_WORDS`` words) that one
  shared load instruction of the mma fragments asks for, one array per group of lanes the hardware serves
  together (v1: a 32-bit load by the 32 lanes; v2 and v3: ``ldmatrix.x4``, whose 4 matrices are 4 phases of 8
  rows of 16 bytes); ``shared_passes_per_mma_step(rung)``: the shared wavefronts a warp needs for the fragments of
  one 16-wide step along K (its 8 mmas), counted with ``course.models.gemm.bank_conflict_degree``. The rows of
  every rung's tiles are 64 bytes long, so every load meets 4-way bank conflicts: 64 passes for v1's 16 loads and for
  v2's and v3's 4 ldmatrix alike. A prediction for Nsight Compute's shared wavefronts, to be measured on a GPU.

Arguments are ints >= 0. The tile sizes are ``kernels.tensor_core_gemm``'s (a test keeps the two in step; this
module imports no numba).
"""

from __future__ import annotations

import numpy as np

from course.models.gemm import bank_conflict_degree
from kernels.launching import cdiv

__all__ = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "K_WORDS", "ITEMSIZE", "FLOAT32", "RUNGS", "flops", "compulsory_bytes",
           "traffic_tc_gemm_v1_mma_shared", "traffic_tc_gemm_v2_ldmatrix", "bytes_tc_gemm_v1_mma_shared",
           "bytes_tc_gemm_v2_ldmatrix", "traffic_tc_gemm_v3_cp_async", "bytes_tc_gemm_v3_cp_async", "traffic",
           "intensity", "shared_words", "fragment_loads", "shared_passes_per_mma_step"]

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
K_WORDS = BLOCK_K // 2      # uint32 words of a shared row (two 16-bit numbers a word)
ITEMSIZE = 2                # bytes of an fp16 or bf16 number
FLOAT32 = 4                 # bytes of an element of C
RUNGS = ("tc_gemm_v1_mma_shared", "tc_gemm_v2_ldmatrix", "tc_gemm_v3_cp_async")


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


def _tiled(M: int, N: int, K: int) -> dict:
    _check(M=M, N=N, K=K)
    if not M or not N:
        return {"a": (0, 0), "w": (0, 0), "c": (0, 0)}         # nothing is launched
    return {"a": (ITEMSIZE * M * K * cdiv(N, BLOCK_N), 0), "w": (ITEMSIZE * N * K * cdiv(M, BLOCK_M), 0),
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


def _total(traffic_of: dict) -> int:
    return sum(loads + stores for loads, stores in traffic_of.values())


def bytes_tc_gemm_v1_mma_shared(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v1_mma_shared``."""
    return _total(traffic_tc_gemm_v1_mma_shared(M, N, K))


def bytes_tc_gemm_v2_ldmatrix(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v2_ldmatrix``."""
    return _total(traffic_tc_gemm_v2_ldmatrix(M, N, K))


_TRAFFIC = {"tc_gemm_v1_mma_shared": traffic_tc_gemm_v1_mma_shared,
            "tc_gemm_v2_ldmatrix": traffic_tc_gemm_v2_ldmatrix,
            "tc_gemm_v3_cp_async": traffic_tc_gemm_v3_cp_async}


def bytes_tc_gemm_v3_cp_async(M: int, N: int, K: int) -> int:
    """All of ``traffic_tc_gemm_v3_cp_async``."""
    return _total(traffic_tc_gemm_v3_cp_async(M, N, K))


def traffic(rung: str, M: int, N: int, K: int) -> dict:
    """``traffic_<rung>(M, N, K)`` for a rung named as in ``kernels.tensor_core_gemm.RUNGS``."""
    if rung not in _TRAFFIC:
        raise ValueError(f"rung must be one of {sorted(_TRAFFIC)}, got {rung!r}")
    return _TRAFFIC[rung](M, N, K)


def intensity(rung: str, M: int, N: int, K: int) -> float:
    """FLOPs per byte of the rung's global traffic (the x axis of a roofline)."""
    moved = _total(traffic(rung, M, N, K))
    return flops(M, N, K) / moved if moved else 0.0


def shared_words(M: int, N: int, K: int) -> tuple[int, int]:
    """Shared-memory word loads and stores of either rung: ``(blocks 4 32 16 ceil(K / 16), blocks 2 64 16
    ceil(K / 32))`` with ceil(N / 64) ceil(M / 64) blocks."""
    _check(M=M, N=N, K=K)
    blocks = cdiv(N, BLOCK_N) * cdiv(M, BLOCK_M)
    return blocks * 4 * 32 * 16 * cdiv(K, 16), blocks * 2 * BLOCK_M * K_WORDS * cdiv(K, BLOCK_K)


def fragment_loads(rung: str) -> list[np.ndarray]:
    """The shared word addresses of one fragment load instruction of a warp, per group of lanes served together.

    v1: the 32 lanes' 32-bit load of a0 of the first mma row (lane 4 g + t: row g, word t). v2: the 4 phases of
    an ``ldmatrix.x4`` of A (lanes 8 i ... 8 i + 7 name rows (l % 16) and words 4 (l // 16) ... + 3, each row 4
    words). The warp's other fragment loads differ from these by a whole number of rows or by 4 words, which
    moves every address alike and leaves the banks' sharing as it is."""
    if rung == "tc_gemm_v1_mma_shared":
        return [np.array([(lane // 4) * K_WORDS + lane % 4 for lane in range(32)])]
    if rung in ("tc_gemm_v2_ldmatrix", "tc_gemm_v3_cp_async"):
        phases = []
        for matrix in range(4):
            lanes = range(8 * matrix, 8 * matrix + 8)
            phases.append(np.array([(lane % 16) * K_WORDS + 4 * (lane // 16) + j for lane in lanes for j in range(4)]))
        return phases
    raise ValueError(f"rung must be one of {list(RUNGS)}, got {rung!r}")


# Fragment load instructions of a warp per 16-wide step along K: v1 loads 2 mma rows x 4 words of A and 4 mma
# columns x 2 words of w; v2 and v3 issue one ldmatrix.x4 per mma row of A and one per pair of mma columns of w.
_LOADS_PER_STEP = {"tc_gemm_v1_mma_shared": 16, "tc_gemm_v2_ldmatrix": 4, "tc_gemm_v3_cp_async": 4}


def shared_passes_per_mma_step(rung: str) -> int:
    """Shared-memory wavefronts of a warp's fragment loads for one 16-wide step along K (8 mmas): the loads of
    the step times the passes each needs (the sum over its groups of lanes of ``bank_conflict_degree``)."""
    passes = sum(bank_conflict_degree(words) for words in fragment_loads(rung))
    return _LOADS_PER_STEP[rung] * passes
