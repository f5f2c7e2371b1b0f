"""Bytes moved by the quantized GEMV ladder (``kernels/quantized_gemv.py``, day 9).

``y = W x`` with W (N, K) stored in a GGUF block format, x (K,) and y (N,) float32. A block holds 32
weights of a row (``QK``); its bytes, by format (``BLOCK_BYTES``): Q8_0 34 (an fp16 scale and 32 int8
codes: 8.5 bits per weight), Q4_0 18 (an fp16 scale and 32 nibbles: 4.5 bits), Q4_1 20 (an fp16 scale, an
fp16 minimum and 32 nibbles: 5 bits). Next to float32 weights (32 bits) a GEMV reads 3.8, 7.1 or 6.4 times
fewer bytes of W, and at decode W is nearly all of the traffic.

- ``weight_bytes(fmt, N, K)``: the bytes of W in format ``fmt``; ``bits_per_weight(fmt)``.
- ``traffic_<rung>(N, K)``: ``{argument: (bytes loaded, bytes stored)}`` of the rung's kernels, by kernel
  parameter name, exact for the kernels as written (``course.traffic`` counts the same numbers; arguments
  of the same name in two kernels add up). The warp-per-row rungs read each byte of W once, the whole x once
  per row (N K float32 loads, which L1 and L2 serve after the first row) and write y. ``q4_1_gemv_q8_1_dp4a``
  first reads x once and writes its q8_1 blocks (``x_q``: K bytes of codes as K / 4 words, ``x_scale`` and
  ``x_sum``: a float32 each per block), then reads W as words (the same bytes), the codes once per row
  (N K bytes instead of 4 N K) and a scale and a sum per block and row.
- ``bytes_<rung>(N, K)``: the total of ``traffic_<rung>``.
- ``compulsory_bytes(rung, N, K)``: what must cross DRAM at least: W, x and y once, and for
  ``q4_1_gemv_q8_1_dp4a`` its q8_1 blocks written once and read once. Timings divide these by the time.
- ``flops(N, K)``: a multiply and an add per weight, 2 N K, for every rung.

Arguments are ints >= 0; K a multiple of 32.
"""

from __future__ import annotations

from fractions import Fraction

from kernels.reference import GGUF_BLOCK_SIZE, Q4_0_BLOCK_BYTES, Q4_1_BLOCK_BYTES, Q8_0_BLOCK_BYTES

__all__ = ["QK", "BLOCK_BYTES", "RUNG_FORMATS", "bits_per_weight", "weight_bytes", "flops",
           "traffic_q8_0_gemv_warp_per_row", "traffic_q4_0_gemv_warp_per_row", "traffic_q4_1_gemv_warp_per_row",
           "traffic_q4_1_gemv_q8_1_dp4a", "bytes_q8_0_gemv_warp_per_row", "bytes_q4_0_gemv_warp_per_row",
           "bytes_q4_1_gemv_warp_per_row", "bytes_q4_1_gemv_q8_1_dp4a", "traffic", "compulsory_bytes"]

QK = GGUF_BLOCK_SIZE
BLOCK_BYTES = {"q8_0": Q8_0_BLOCK_BYTES, "q4_0": Q4_0_BLOCK_BYTES, "q4_1": Q4_1_BLOCK_BYTES}
# The weight format each rung of kernels.quantized_gemv reads.
RUNG_FORMATS = {"q8_0_gemv_warp_per_row": "q8_0", "q4_0_gemv_warp_per_row": "q4_0",
                "q4_1_gemv_warp_per_row": "q4_1", "q4_1_gemv_q8_1_dp4a": "q4_1"}
FLOAT32 = 4        # bytes of x, y, and of a q8_1 block's scale and sum
Q8_1_EXTRA = 2 * FLOAT32    # bytes of a q8_1 block beside its 32 codes: its scale and its sum


def _check(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if "K" in sizes and sizes["K"] % QK:
        raise ValueError(f"K must be a multiple of {QK} (a GGUF block), got {sizes['K']}")


def _block_bytes(fmt: str) -> int:
    if fmt not in BLOCK_BYTES:
        raise ValueError(f"fmt must be one of {sorted(BLOCK_BYTES)}, got {fmt!r}")
    return BLOCK_BYTES[fmt]


def bits_per_weight(fmt: str) -> Fraction:
    """Bits of storage per weight in format ``fmt``, its scale (and minimum) included: 17/2, 9/2 or 5."""
    return Fraction(8 * _block_bytes(fmt), QK)


def weight_bytes(fmt: str, N: int, K: int) -> int:
    """Bytes of W (N, K) in format ``fmt``: N K / 32 blocks."""
    _check(N=N, K=K)
    return N * (K // QK) * _block_bytes(fmt)


def flops(N: int, K: int) -> int:
    """A multiply and an add per weight."""
    _check(N=N, K=K)
    return 2 * N * K


def _warp_per_row(fmt: str, N: int, K: int) -> dict:
    _check(N=N, K=K)
    return {"w": (weight_bytes(fmt, N, K), 0), "x": (N * K * FLOAT32, 0), "y": (0, N * FLOAT32)}


def traffic_q8_0_gemv_warp_per_row(N: int, K: int) -> dict:
    """Each byte of W once (34 per block), x once per row, y written."""
    return _warp_per_row("q8_0", N, K)


def traffic_q4_0_gemv_warp_per_row(N: int, K: int) -> dict:
    """Each byte of W once (18 per block), x once per row, y written."""
    return _warp_per_row("q4_0", N, K)


def traffic_q4_1_gemv_warp_per_row(N: int, K: int) -> dict:
    """Each byte of W once (20 per block), x once per row, y written."""
    return _warp_per_row("q4_1", N, K)


def traffic_q4_1_gemv_q8_1_dp4a(N: int, K: int) -> dict:
    """The quantize kernel: x read once, K bytes of codes and a scale and a sum per block written. The GEMV:
    W's bytes once (as 5 words per block), the codes once per row, the scales and sums once per block and row."""
    _check(N=N, K=K)
    blocks = K // QK
    return {"x": (K * FLOAT32, 0), "x_q": (N * K, K), "x_scale": (N * blocks * FLOAT32, blocks * FLOAT32),
            "x_sum": (N * blocks * FLOAT32, blocks * FLOAT32), "w": (weight_bytes("q4_1", N, K), 0),
            "y": (0, N * FLOAT32)}


def _total(traffic: dict) -> int:
    return sum(loads + stores for loads, stores in traffic.values())


def bytes_q8_0_gemv_warp_per_row(N: int, K: int) -> int:
    """All of ``traffic_q8_0_gemv_warp_per_row``: 34 N K / 32 + 4 N K + 4 N."""
    return _total(traffic_q8_0_gemv_warp_per_row(N, K))


def bytes_q4_0_gemv_warp_per_row(N: int, K: int) -> int:
    """All of ``traffic_q4_0_gemv_warp_per_row``: 18 N K / 32 + 4 N K + 4 N."""
    return _total(traffic_q4_0_gemv_warp_per_row(N, K))


def bytes_q4_1_gemv_warp_per_row(N: int, K: int) -> int:
    """All of ``traffic_q4_1_gemv_warp_per_row``: 20 N K / 32 + 4 N K + 4 N."""
    return _total(traffic_q4_1_gemv_warp_per_row(N, K))


def bytes_q4_1_gemv_q8_1_dp4a(N: int, K: int) -> int:
    """All of ``traffic_q4_1_gemv_q8_1_dp4a``."""
    return _total(traffic_q4_1_gemv_q8_1_dp4a(N, K))


_TRAFFIC = {"q8_0_gemv_warp_per_row": traffic_q8_0_gemv_warp_per_row,
            "q4_0_gemv_warp_per_row": traffic_q4_0_gemv_warp_per_row,
            "q4_1_gemv_warp_per_row": traffic_q4_1_gemv_warp_per_row,
            "q4_1_gemv_q8_1_dp4a": traffic_q4_1_gemv_q8_1_dp4a}


def traffic(rung: str, N: int, K: int) -> dict:
    """``traffic_<rung>(N, K)`` for a rung named as in ``kernels.quantized_gemv.RUNGS``."""
    if rung not in _TRAFFIC:
        raise ValueError(f"rung must be one of {sorted(_TRAFFIC)}, got {rung!r}")
    return _TRAFFIC[rung](N, K)


def compulsory_bytes(rung: str, N: int, K: int) -> int:
    """What must cross DRAM at least: W in the rung's format, x and y once; the dp4a rung's q8_1 blocks
    (K bytes of codes, a scale and a sum per block) are written once and read once as well."""
    if rung not in RUNG_FORMATS:
        raise ValueError(f"rung must be one of {sorted(RUNG_FORMATS)}, got {rung!r}")
    total = weight_bytes(RUNG_FORMATS[rung], N, K) + K * FLOAT32 + N * FLOAT32
    if rung == "q4_1_gemv_q8_1_dp4a":
        total += 2 * (K + K // QK * Q8_1_EXTRA)
    return total
