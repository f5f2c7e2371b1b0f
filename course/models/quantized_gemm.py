"""Bytes moved and integer operations of the W8A8 GEMM ladder (``kernels/quantized_gemm.py``, day 9).

``y = (A_q W_q^T) sa sw`` with A_q (M, K) int8 and its per-token scales sa (M,) float32, W_q (N, K) int8 and its
per-channel scales sw (N,) float32, y (M, N) float32. Every rung does the same useful work, ``int_ops(M, N, K) =
2 M N K`` (a multiply and an add of int8 codes per term, int32 sums); the rungs differ in what does it (dp4a on
CUDA cores, mma.sync on tensor cores), not in what they read.

- ``traffic_<rung>(M, N, K)``: ``{argument: (bytes loaded, bytes stored)}`` of the rung's kernel, by kernel
  parameter name, exact for the kernels as written (``course.traffic`` counts the same numbers). v1 and v2
  take 64 x 64 tiles of y (``BLOCK_M`` x ``BLOCK_N``), v3 128 x 128 (``LARGE_BLOCK``), and copy the rows of A and W
  that a tile needs: each code of A is read once per block column, ``M K ceil(N / 64)`` bytes (v3: ``ceil(N /
  128)``), each code of W once per block row, ``N K ceil(M / 64)`` (v3: ``ceil(M / 128)``); rows outside A or W
  are zero-filled without a load (v3's 16-byte copies read exactly the codes v1's word loads read: K is a
  multiple of 32). In the epilogue every thread reads the scales of the rows and columns it holds, once: sa[m]
  is read by ``SCALE_READERS[rung][0]`` threads of each block column (v1: the 16 threads of a row of the block;
  v2: the 4 lanes of a row in each of 2 warps; v3: in each of 4), sw[n] by ``SCALE_READERS[rung][1]`` of each
  block row (16 in all three). y is written once.
- ``bytes_<rung>(M, N, K)``: the total of ``traffic_<rung>``.
- ``traffic_quantize_per_token(M, K)``: the tool that makes A_q and sa: x read twice (its largest magnitude,
  then its codes), A_q and sa written.
- ``compulsory_bytes(M, N, K)``: what must cross DRAM at least: A_q, W_q, sa, sw once and y once. Timings
  divide these by the time; ``intensity(rung, M, N, K)`` divides ``int_ops`` by a rung's bytes.

Arguments are ints >= 0; K a multiple of 32. The tile sizes are ``kernels.quantized_gemm``'s (a test keeps the
two in step; this module imports no numba).
"""

from __future__ import annotations

from kernels.launching import cdiv

__all__ = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "LARGE_BLOCK", "FLOAT32", "SCALE_READERS", "RUNGS", "int_ops",
           "compulsory_bytes", "traffic_w8a8_gemm_v1_dp4a", "traffic_w8a8_gemm_v2_tensor_cores",
           "traffic_w8a8_gemm_v3_large_tiles", "bytes_w8a8_gemm_v1_dp4a", "bytes_w8a8_gemm_v2_tensor_cores",
           "bytes_w8a8_gemm_v3_large_tiles", "traffic_quantize_per_token", "traffic", "intensity"]

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
LARGE_BLOCK = 128      # v3's tiles of y are LARGE_BLOCK x LARGE_BLOCK
FLOAT32 = 4            # bytes of a scale and of an element of y
# Threads that read sa[m] per block column and sw[n] per block row, by rung.
SCALE_READERS = {"w8a8_gemm_v1_dp4a": (16, 16), "w8a8_gemm_v2_tensor_cores": (8, 16),
                 "w8a8_gemm_v3_large_tiles": (16, 16)}
RUNGS = tuple(SCALE_READERS)
_BLOCKS = {"w8a8_gemm_v3_large_tiles": (LARGE_BLOCK, LARGE_BLOCK)}


def _check(*, any_k: bool = False, **sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if "K" in sizes and not any_k and sizes["K"] % BLOCK_K:
        raise ValueError(f"K must be a multiple of {BLOCK_K} (a k step of the tiles), got {sizes['K']}")


def int_ops(M: int, N: int, K: int) -> int:
    """A multiply and an add per term of every sum: 2 M N K (the 'FLOPs' of an integer GEMM)."""
    _check(M=M, N=N, K=K)
    return 2 * M * N * K


def compulsory_bytes(M: int, N: int, K: int) -> int:
    """A_q and W_q (a byte a code), sa and sw read once, y written once: M K + N K + 4 (M + N) + 4 M N."""
    _check(M=M, N=N, K=K)
    return M * K + N * K + FLOAT32 * (M + N) + FLOAT32 * M * N


def _tiled(rung: str, M: int, N: int, K: int) -> dict:
    _check(M=M, N=N, K=K)
    block_m, block_n = _BLOCKS.get(rung, (BLOCK_M, BLOCK_N))
    block_cols, block_rows = cdiv(N, block_n), cdiv(M, block_m)
    row_readers, col_readers = SCALE_READERS[rung]
    return {"a_q": (M * K * block_cols, 0), "sa": (FLOAT32 * M * row_readers * block_cols, 0),
            "w_q": (N * K * block_rows, 0), "sw": (FLOAT32 * N * col_readers * block_rows, 0),
            "y": (0, FLOAT32 * M * N)}


def traffic_w8a8_gemm_v1_dp4a(M: int, N: int, K: int) -> dict:
    """A once per block column, W once per block row, sa and sw by 16 threads of each block, y written."""
    return _tiled("w8a8_gemm_v1_dp4a", M, N, K)


def traffic_w8a8_gemm_v2_tensor_cores(M: int, N: int, K: int) -> dict:
    """v1's loads of A and W (the same tiles); sa by 8 lanes of each block column, sw by 16; y written."""
    return _tiled("w8a8_gemm_v2_tensor_cores", M, N, K)


def traffic_w8a8_gemm_v3_large_tiles(M: int, N: int, K: int) -> dict:
    """A once per 128-wide block column, W once per 128-high block row (half v2's); sa and sw by 16 lanes of each
    block; y written."""
    return _tiled("w8a8_gemm_v3_large_tiles", M, N, K)


def _total(traffic_of: dict) -> int:
    return sum(loads + stores for loads, stores in traffic_of.values())


def bytes_w8a8_gemm_v1_dp4a(M: int, N: int, K: int) -> int:
    """All of ``traffic_w8a8_gemm_v1_dp4a``."""
    return _total(traffic_w8a8_gemm_v1_dp4a(M, N, K))


def bytes_w8a8_gemm_v2_tensor_cores(M: int, N: int, K: int) -> int:
    """All of ``traffic_w8a8_gemm_v2_tensor_cores``."""
    return _total(traffic_w8a8_gemm_v2_tensor_cores(M, N, K))


def bytes_w8a8_gemm_v3_large_tiles(M: int, N: int, K: int) -> int:
    """All of ``traffic_w8a8_gemm_v3_large_tiles``."""
    return _total(traffic_w8a8_gemm_v3_large_tiles(M, N, K))


def traffic_quantize_per_token(M: int, K: int) -> dict:
    """x read twice (8 M K bytes), the codes written (M K), a scale per row written (4 M). Any K."""
    _check(M=M, K=K, any_k=True)
    return {"x": (2 * FLOAT32 * M * K, 0), "a_q": (0, M * K), "sa": (0, FLOAT32 * M)}


_TRAFFIC = {"w8a8_gemm_v1_dp4a": traffic_w8a8_gemm_v1_dp4a,
            "w8a8_gemm_v2_tensor_cores": traffic_w8a8_gemm_v2_tensor_cores,
            "w8a8_gemm_v3_large_tiles": traffic_w8a8_gemm_v3_large_tiles}


def traffic(rung: str, M: int, N: int, K: int) -> dict:
    """``traffic_<rung>(M, N, K)`` for a rung named as in ``kernels.quantized_gemm.RUNGS``."""
    if rung not in _TRAFFIC:
        raise ValueError(f"rung must be one of {sorted(_TRAFFIC)}, got {rung!r}")
    return _TRAFFIC[rung](M, N, K)


def intensity(rung: str, M: int, N: int, K: int) -> float:
    """Integer operations per byte of the rung's global traffic (the x axis of a roofline)."""
    moved = _total(traffic(rung, M, N, K))
    return int_ops(M, N, K) / moved if moved else 0.0
