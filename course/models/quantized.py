"""Bytes moved by the quantized GEMV ladder (``kernels/quantized_gemv.py``, day 9).

``y = W x`` with W (N, K) stored in a GGUF block format, x (K,) and y (N,) float32. A block holds 32
weights of a row (``QK``); its bytes, by format (``BLOCK_BYTES``): Q8_0 34 (an fp16 scale and 32 int8
codes: 8.5 bits per weight), Q4_0 18 (an fp16 scale and 32 nibbles: 4.5 bits), Q4_1 20 (an fp16 scale, an
fp16 minimum and 32 nibbles: 5 bits). Next to float32 weights (32 bits) a GEMV reads 3.8, 7.1 or 6.4 times
fewer bytes of W, and at decode W is nearly all of the traffic. The course's int4_g128
(``reference.quantize_int4_g128``) keeps one fp16 scale per group of 128 weights: 66 bytes a group, 4.125 bits a
weight (``FORMAT_BLOCKS`` gives every format's weights and bytes a block).

- ``weight_bytes(fmt, N, K)``: the bytes of W in format ``fmt``; ``bits_per_weight(fmt)``.
- ``traffic_<rung>(N, K)``: ``{argument: (bytes loaded, bytes stored)}`` of the rung's kernels, by kernel
  parameter name, exact for the kernels as written (``course.traffic`` counts the same numbers; arguments
  of the same name in two kernels add up). The warp-per-row rungs read each byte of W once, the whole x once
  per row (N K float32 loads, which L1 and L2 serve after the first row) and write y. ``q4_1_gemv_q8_1_dp4a``
  first reads x once and writes its q8_1 blocks (``x_q``: K bytes of codes as K / 4 words, ``x_scale`` and
  ``x_sum``: a float32 each per block), then reads W as words (the same bytes), the codes once per row
  (N K bytes instead of 4 N K) and a scale and a sum per block and row.
  The rungs of ``kernels.quantized_gemv_repacked`` read W repacked (``codes``: 16 bytes per block, ``scales``:
  4, the same 20 bytes) and the q8_1 blocks once per warp, not once per row: ``q4_1_gemv_q8_1_repacked`` takes
  ``ROWS_PER_WARP`` (2) rows a warp, so ceil(N / 2) warps each read K bytes of codes and a scale and a sum per
  block; ``q4_1_gemv_q8_1_small_batch`` (``traffic_q4_1_gemv_q8_1_small_batch(N, K, T)``, T tokens) reads W once
  whatever T, quantizes x per token (T K floats read, T q8_1 rows written) and its ceil(N / 4) warps
  (``BATCH_ROWS_PER_WARP``) each read all T tokens' q8_1 blocks once: T ceil(N / 4) (K + 8 K / 32) bytes,
  served by L1 and L2, then write T N floats of y.
  The persistent rungs (``traffic_q4_1_gemv_q8_1_persistent(N, K, grid)``, its Q4_0 and int4_g128 twins) read W's
  codes and scales once (int4_g128: a scale per group of 128, each read by one lane) and x once per block of
  threads of their grid (``SIMULATOR_GRID`` on the simulator, one per SM on a GPU), whatever N, and write y.
  The prequantized rungs (``traffic_q4_1_gemv_q8_1_prequantized(N, K)``, its Q4_0, int4_g128 and Q8_0 twins), called
  with a float32 x, run the quantize kernel first; their GEMV reads W's codes and scales once and x's q8_1 blocks once
  per row (from L1 on a GPU; Q8_0's rung reads their codes and scales, not their sums), and writes y.
- ``bytes_<rung>(N, K)``: the total of ``traffic_<rung>`` (``bytes_q4_1_gemv_q8_1_small_batch(N, K, T)``).
- ``compulsory_bytes(rung, N, K, T=1)``: what must cross DRAM at least: W once, x and y once per token, and for
  the q8_1 rungs their q8_1 blocks written once and read once per token; for the prequantized rungs, timed on x's
  q8_1 blocks, W, those blocks (Q8_0's: their codes and scales) and y once. Timings divide these by the time.
- ``flops(N, K, T=1)``: a multiply and an add per weight and token, 2 T N K, for every rung (T = 1 but for
  the batched rung); ``dp4a_count(N, K, T=1)``: the dp4a a q8_1 rung issues, one per 4 weights and token,
  T N K / 4 lane-instructions (T N K / 128 warp instructions).

Where a batched GEMV stops being memory bound: its compulsory bytes are 5 N K / 8 + T (13 K / 2 + 4 N), W's
5/8 byte per weight and little else at small T, while its work grows as T: 2 T operations and T / 4 dp4a per
weight, besides the float work per block. Its arithmetic intensity ``flops / compulsory_bytes`` is about 3.2 T
operations per byte; ``dp4a_count`` over a GPU's dp4a rate, against the compulsory bytes over its bandwidth,
gives the T past which the dp4a (and the instructions around them) take longer than W takes to stream. An fp16
GEMM reads 2 bytes per weight, 3.2 times Q4_1's, and its tensor cores keep it memory bound to T of a few hundred:
past the T where the batched GEMV's instruction time exceeds the fp16 GEMM's streaming time, the GEMM wins.

Arguments are ints >= 0 (T >= 1 where a rung takes it); K a multiple of 32 (of 128 for int4_g128).
"""

from __future__ import annotations

from fractions import Fraction

from kernels.reference import (GGUF_BLOCK_SIZE, INT4_G128_BLOCK_BYTES, INT4_GROUP, Q4_0_BLOCK_BYTES, Q4_1_BLOCK_BYTES,
                               Q8_0_BLOCK_BYTES)

__all__ = ["QK", "BLOCK_BYTES", "FORMAT_BLOCKS", "RUNG_FORMATS", "BATCHED_RUNGS", "ROWS_PER_WARP", "BATCH_ROWS_PER_WARP",
           "bits_per_weight", "weight_bytes", "flops", "dp4a_count",
           "traffic_q8_0_gemv_warp_per_row", "traffic_q4_0_gemv_warp_per_row", "traffic_q4_1_gemv_warp_per_row",
           "traffic_q4_1_gemv_q8_1_dp4a", "traffic_q4_1_gemv_q8_1_repacked", "traffic_q4_1_gemv_q8_1_small_batch",
           "bytes_q8_0_gemv_warp_per_row", "bytes_q4_0_gemv_warp_per_row", "bytes_q4_1_gemv_warp_per_row",
           "bytes_q4_1_gemv_q8_1_dp4a", "bytes_q4_1_gemv_q8_1_repacked", "bytes_q4_1_gemv_q8_1_small_batch",
           "WIDE_ROWS_PER_BLOCK", "traffic_q4_1_gemv_q8_1_wide", "traffic_q8_0_gemv_q8_1_wide",
           "bytes_q4_1_gemv_q8_1_wide", "bytes_q8_0_gemv_q8_1_wide", "SIMULATOR_GRID",
           "traffic_q4_1_gemv_q8_1_persistent", "traffic_q4_0_gemv_q8_1_persistent",
           "bytes_q4_1_gemv_q8_1_persistent", "bytes_q4_0_gemv_q8_1_persistent",
           "traffic_int4_g128_gemv_q8_1_persistent", "bytes_int4_g128_gemv_q8_1_persistent",
           "PREQUANTIZED_RUNGS", "traffic_q4_1_gemv_q8_1_prequantized", "traffic_q4_0_gemv_q8_1_prequantized",
           "traffic_int4_g128_gemv_q8_1_prequantized", "bytes_q4_1_gemv_q8_1_prequantized", "bytes_q4_0_gemv_q8_1_prequantized",
           "bytes_int4_g128_gemv_q8_1_prequantized", "traffic_q8_0_gemv_q8_1_prequantized",
           "bytes_q8_0_gemv_q8_1_prequantized", "traffic",
           "compulsory_bytes"]

QK = GGUF_BLOCK_SIZE
BLOCK_BYTES = {"q8_0": Q8_0_BLOCK_BYTES, "q4_0": Q4_0_BLOCK_BYTES, "q4_1": Q4_1_BLOCK_BYTES}    # GGUF's, 32 weights
# Every format's block: (weights, bytes), GGUF's and the course's int4 with a scale per group of 128.
FORMAT_BLOCKS = {**{fmt: (QK, size) for fmt, size in BLOCK_BYTES.items()},
                 "int4_g128": (INT4_GROUP, INT4_G128_BLOCK_BYTES)}
# The weight format each rung of kernels.quantized_gemv_repacked (day 9's whole ladder) reads.
RUNG_FORMATS = {"q8_0_gemv_warp_per_row": "q8_0", "q4_0_gemv_warp_per_row": "q4_0",
                "q4_1_gemv_warp_per_row": "q4_1", "q4_1_gemv_q8_1_dp4a": "q4_1", "q4_1_gemv_q8_1_repacked": "q4_1",
                "q4_1_gemv_q8_1_small_batch": "q4_1", "q4_1_gemv_q8_1_wide": "q4_1", "q8_0_gemv_q8_1_wide": "q8_0",
                "q4_1_gemv_q8_1_persistent": "q4_1", "q4_0_gemv_q8_1_persistent": "q4_0",
                "int4_g128_gemv_q8_1_persistent": "int4_g128", "q4_1_gemv_q8_1_prequantized": "q4_1",
                "q4_0_gemv_q8_1_prequantized": "q4_0", "int4_g128_gemv_q8_1_prequantized": "int4_g128",
                "q8_0_gemv_q8_1_prequantized": "q8_0"}
PREQUANTIZED_RUNGS = ("q4_1_gemv_q8_1_prequantized", "q4_0_gemv_q8_1_prequantized", "int4_g128_gemv_q8_1_prequantized",
                      "q8_0_gemv_q8_1_prequantized")
BATCHED_RUNGS = ("q4_1_gemv_q8_1_small_batch",)      # the rungs that take T tokens at once
ROWS_PER_WARP = 2              # rows per warp of q4_1_gemv_q8_1_repacked: its warps read the q8_1 blocks
BATCH_ROWS_PER_WARP = 4        # rows per warp of q4_1_gemv_q8_1_small_batch
WIDE_ROWS_PER_BLOCK = 32       # rows per block of threads of the wide rungs: each block reads all of x once
SIMULATOR_GRID = 2             # blocks of threads of the persistent rungs on the simulator (a GPU: one per SM)
SCALE_BYTES = {"q8_0": 2, "q4_0": 2, "q4_1": 4}     # a block's bytes of scale (and minimum), beside its codes
Q8_1_RUNGS = ("q4_1_gemv_q8_1_dp4a", "q4_1_gemv_q8_1_repacked", "q4_1_gemv_q8_1_small_batch")
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


def _format_block(fmt: str) -> tuple[int, int]:
    if fmt not in FORMAT_BLOCKS:
        raise ValueError(f"fmt must be one of {sorted(FORMAT_BLOCKS)}, got {fmt!r}")
    return FORMAT_BLOCKS[fmt]


def bits_per_weight(fmt: str) -> Fraction:
    """Bits of storage per weight in format ``fmt``, its scale (and minimum) included: 17/2, 9/2, 5 or 33/8."""
    weights, size = _format_block(fmt)
    return Fraction(8 * size, weights)


def weight_bytes(fmt: str, N: int, K: int) -> int:
    """Bytes of W (N, K) in format ``fmt``: N K / 32 blocks (int4_g128: N K / 128 groups)."""
    _check(N=N, K=K)
    weights, size = _format_block(fmt)
    if K % weights:
        raise ValueError(f"K must be a multiple of {weights} for {fmt}, got {K}")
    return N * (K // weights) * size


def flops(N: int, K: int, T: int = 1) -> int:
    """A multiply and an add per weight and token."""
    _check(N=N, K=K, T=T)
    return 2 * T * N * K


def dp4a_count(N: int, K: int, T: int = 1) -> int:
    """The dp4a of a q8_1 rung, as lane-instructions: one per 4 weights and token (8 per block of 32)."""
    _check(N=N, K=K, T=T)
    return T * N * K // 4


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


def _q8_1_quantize(K: int, T: int) -> dict:
    """The q8_1 quantize kernel on T tokens: x read, K bytes of codes and a scale and a sum per block written."""
    blocks = K // QK
    return {"x": (T * K * FLOAT32, 0), "x_q": (0, T * K), "x_scale": (0, T * blocks * FLOAT32),
            "x_sum": (0, T * blocks * FLOAT32)}


def _repacked(N: int, K: int, T: int, rows_per_warp: int, fmt: str = "q4_1") -> dict:
    """The quantize kernel, then a GEMV over the repacked 4-bit W of ``fmt`` (codes, a nibble a weight, and scales
    once) whose ceil(N / rows_per_warp) warps each read every token's q8_1 blocks once."""
    blocks = K // QK
    warps = -(-N // rows_per_warp)
    found = _q8_1_quantize(K, T)
    for name, loads in (("x_q", warps * T * K), ("x_scale", warps * T * blocks * FLOAT32),
                        ("x_sum", warps * T * blocks * FLOAT32)):
        found[name] = (loads, found[name][1])
    codes = N * K if fmt == "q8_0" else N * K // 2          # a byte a weight, or a nibble
    found.update({"codes": (codes, 0), "scales": (weight_bytes(fmt, N, K) - codes, 0), "y": (0, T * N * FLOAT32)})
    return found


def traffic_q4_1_gemv_q8_1_repacked(N: int, K: int) -> dict:
    """The quantize kernel as the dp4a rung's; then W's 20 bytes per block once (16 of ``codes``, 4 of
    ``scales``), the q8_1 blocks once per warp of ``ROWS_PER_WARP`` rows, y written."""
    _check(N=N, K=K)
    return _repacked(N, K, 1, ROWS_PER_WARP)


def traffic_q4_1_gemv_q8_1_small_batch(N: int, K: int, T: int = 1) -> dict:
    """T tokens: the quantize kernel on T K floats; W once (``codes`` and ``scales``); each token's q8_1 blocks
    once per warp of ``BATCH_ROWS_PER_WARP`` rows, T ceil(N / 4) (K + 8 K / 32) bytes; y (T, N) written."""
    _check(N=N, K=K, T=T)
    return _repacked(N, K, T, BATCH_ROWS_PER_WARP)


def _wide(fmt: str, N: int, K: int) -> dict:
    """One kernel: W's codes and scales once, x once per block of threads of ``WIDE_ROWS_PER_BLOCK`` rows (each
    quantizes all of x into its shared memory: nothing of q8_1 crosses global memory), y written."""
    _check(N=N, K=K)
    blocks = K // QK
    scale = SCALE_BYTES[fmt]
    return {"codes": (N * blocks * (BLOCK_BYTES[fmt] - scale), 0), "scales": (N * blocks * scale, 0),
            "x": (-(-N // WIDE_ROWS_PER_BLOCK) * K * FLOAT32, 0), "y": (0, N * FLOAT32)}


def traffic_q4_1_gemv_q8_1_wide(N: int, K: int) -> dict:
    """W's 16 bytes of codes and 4 of scales per block once; x (4 K bytes, from L2 after the first block of
    threads) once per 32 rows; y written."""
    return _wide("q4_1", N, K)


def traffic_q8_0_gemv_q8_1_wide(N: int, K: int) -> dict:
    """W's 32 bytes of codes and 2 of scale per block once; x once per 32 rows; y written."""
    return _wide("q8_0", N, K)


def _persistent(fmt: str, N: int, K: int, grid: int) -> dict:
    """One kernel on ``grid`` blocks of threads: W's codes and scales once, x once per block of threads (each
    quantizes all of x into its shared memory, whatever its share of the rows), y written."""
    _check(N=N, K=K, grid=grid)
    size = weight_bytes(fmt, N, K)
    codes = N * K // 2 if fmt != "q8_0" else N * K           # a nibble a weight (Q8_0: a byte)
    return {"codes": (codes, 0), "scales": (size - codes, 0), "x": (grid * K * FLOAT32 if N else 0, 0),
            "y": (0, N * FLOAT32)}


def traffic_q4_1_gemv_q8_1_persistent(N: int, K: int, grid: int = SIMULATOR_GRID) -> dict:
    """W's 16 bytes of codes and 4 of scales per block once; x (4 K bytes, from L2 after the first block of
    threads) once per block of threads (``grid``: ``SIMULATOR_GRID`` on the simulator, a GPU's SMs on it); y
    written."""
    return _persistent("q4_1", N, K, grid)


def traffic_q4_0_gemv_q8_1_persistent(N: int, K: int, grid: int = SIMULATOR_GRID) -> dict:
    """W's 16 bytes of codes and 2 of scale per block once; x once per block of threads; y written."""
    return _persistent("q4_0", N, K, grid)


def traffic_int4_g128_gemv_q8_1_persistent(N: int, K: int, grid: int = SIMULATOR_GRID) -> dict:
    """W's 16 bytes of codes per block of 32 and 2 of scale per group of 128 once (one lane of 4 loads each scale);
    x once per block of threads; y written."""
    return _persistent("int4_g128", N, K, grid)


def _prequantized(fmt: str, N: int, K: int) -> dict:
    """The q8_1 quantize kernel on x, then one kernel: W's codes and scales once, x's q8_1 blocks once per row (each
    warp reads every block of x for each row it walks: L1 serves them after the first warp of an SM), y written:
    ``_repacked``'s traffic with one row a warp; Q8_0, which has no minimum, reads no sums."""
    _check(N=N, K=K)
    found = _repacked(N, K, 1, 1, fmt)
    if fmt == "q8_0":
        found["x_sum"] = (0, found["x_sum"][1])
    return found


def traffic_q4_1_gemv_q8_1_prequantized(N: int, K: int) -> dict:
    """Given a float32 x (the registry's call): the quantize kernel, then W's 16 bytes of codes and 4 of scales per
    block once, x's q8_1 blocks (K bytes of codes, a scale and a sum a block) once per row, y written. Given x's
    q8_1 blocks (what a model and the recordings pass), the same without the quantize kernel."""
    return _prequantized("q4_1", N, K)


def traffic_q4_0_gemv_q8_1_prequantized(N: int, K: int) -> dict:
    """As ``traffic_q4_1_gemv_q8_1_prequantized``, with 2 bytes of scale per block."""
    return _prequantized("q4_0", N, K)


def traffic_int4_g128_gemv_q8_1_prequantized(N: int, K: int) -> dict:
    """As ``traffic_q4_1_gemv_q8_1_prequantized``, with 2 bytes of scale per group of 128 (one lane of 4 loads each)."""
    return _prequantized("int4_g128", N, K)


def traffic_q8_0_gemv_q8_1_prequantized(N: int, K: int) -> dict:
    """As ``traffic_q4_1_gemv_q8_1_prequantized`` for Q8_0: 32 bytes of codes and 2 of scale per block once, x's
    q8_1 codes and scales once per row (not its sums: Q8_0 has no minimum), y written."""
    return _prequantized("q8_0", N, K)


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


def bytes_q4_1_gemv_q8_1_repacked(N: int, K: int) -> int:
    """All of ``traffic_q4_1_gemv_q8_1_repacked``."""
    return _total(traffic_q4_1_gemv_q8_1_repacked(N, K))


def bytes_q4_1_gemv_q8_1_small_batch(N: int, K: int, T: int = 1) -> int:
    """All of ``traffic_q4_1_gemv_q8_1_small_batch``."""
    return _total(traffic_q4_1_gemv_q8_1_small_batch(N, K, T))


def bytes_q4_1_gemv_q8_1_wide(N: int, K: int) -> int:
    """All of ``traffic_q4_1_gemv_q8_1_wide``: 20 N K / 32 + 4 K ceil(N / 32) + 4 N."""
    return _total(traffic_q4_1_gemv_q8_1_wide(N, K))


def bytes_q8_0_gemv_q8_1_wide(N: int, K: int) -> int:
    """All of ``traffic_q8_0_gemv_q8_1_wide``: 34 N K / 32 + 4 K ceil(N / 32) + 4 N."""
    return _total(traffic_q8_0_gemv_q8_1_wide(N, K))


def bytes_q4_1_gemv_q8_1_persistent(N: int, K: int, grid: int = SIMULATOR_GRID) -> int:
    """All of ``traffic_q4_1_gemv_q8_1_persistent``: 20 N K / 32 + 4 K grid + 4 N."""
    return _total(traffic_q4_1_gemv_q8_1_persistent(N, K, grid))


def bytes_q4_0_gemv_q8_1_persistent(N: int, K: int, grid: int = SIMULATOR_GRID) -> int:
    """All of ``traffic_q4_0_gemv_q8_1_persistent``: 18 N K / 32 + 4 K grid + 4 N."""
    return _total(traffic_q4_0_gemv_q8_1_persistent(N, K, grid))


def bytes_int4_g128_gemv_q8_1_persistent(N: int, K: int, grid: int = SIMULATOR_GRID) -> int:
    """All of ``traffic_int4_g128_gemv_q8_1_persistent``: 66 N K / 128 + 4 K grid + 4 N."""
    return _total(traffic_int4_g128_gemv_q8_1_persistent(N, K, grid))


def bytes_q4_1_gemv_q8_1_prequantized(N: int, K: int) -> int:
    """All of ``traffic_q4_1_gemv_q8_1_prequantized``."""
    return _total(traffic_q4_1_gemv_q8_1_prequantized(N, K))


def bytes_q4_0_gemv_q8_1_prequantized(N: int, K: int) -> int:
    """All of ``traffic_q4_0_gemv_q8_1_prequantized``."""
    return _total(traffic_q4_0_gemv_q8_1_prequantized(N, K))


def bytes_int4_g128_gemv_q8_1_prequantized(N: int, K: int) -> int:
    """All of ``traffic_int4_g128_gemv_q8_1_prequantized``."""
    return _total(traffic_int4_g128_gemv_q8_1_prequantized(N, K))


def bytes_q8_0_gemv_q8_1_prequantized(N: int, K: int) -> int:
    """All of ``traffic_q8_0_gemv_q8_1_prequantized``."""
    return _total(traffic_q8_0_gemv_q8_1_prequantized(N, K))


_TRAFFIC = {"q8_0_gemv_warp_per_row": traffic_q8_0_gemv_warp_per_row,
            "q4_0_gemv_warp_per_row": traffic_q4_0_gemv_warp_per_row,
            "q4_1_gemv_warp_per_row": traffic_q4_1_gemv_warp_per_row,
            "q4_1_gemv_q8_1_dp4a": traffic_q4_1_gemv_q8_1_dp4a,
            "q4_1_gemv_q8_1_repacked": traffic_q4_1_gemv_q8_1_repacked,
            "q4_1_gemv_q8_1_small_batch": traffic_q4_1_gemv_q8_1_small_batch,
            "q4_1_gemv_q8_1_wide": traffic_q4_1_gemv_q8_1_wide,
            "q8_0_gemv_q8_1_wide": traffic_q8_0_gemv_q8_1_wide,
            "q4_1_gemv_q8_1_persistent": traffic_q4_1_gemv_q8_1_persistent,
            "q4_0_gemv_q8_1_persistent": traffic_q4_0_gemv_q8_1_persistent,
            "int4_g128_gemv_q8_1_persistent": traffic_int4_g128_gemv_q8_1_persistent,
            "q4_1_gemv_q8_1_prequantized": traffic_q4_1_gemv_q8_1_prequantized,
            "q4_0_gemv_q8_1_prequantized": traffic_q4_0_gemv_q8_1_prequantized,
            "int4_g128_gemv_q8_1_prequantized": traffic_int4_g128_gemv_q8_1_prequantized,
            "q8_0_gemv_q8_1_prequantized": traffic_q8_0_gemv_q8_1_prequantized}


def _tokens(rung: str, T) -> int:
    if rung not in RUNG_FORMATS:
        raise ValueError(f"rung must be one of {sorted(RUNG_FORMATS)}, got {rung!r}")
    _check(T=T)
    if T < 1 or (T != 1 and rung not in BATCHED_RUNGS):
        raise ValueError(f"T must be 1 for {rung} (the batched rungs: {', '.join(BATCHED_RUNGS)} take T >= 1), "
                         f"got {T}")
    return T


def traffic(rung: str, N: int, K: int, T: int = 1) -> dict:
    """``traffic_<rung>(N, K)`` (the batched rung's ``(N, K, T)``) for a rung named as in
    ``kernels.quantized_gemv_repacked.RUNGS``."""
    if _tokens(rung, T) != 1:
        return _TRAFFIC[rung](N, K, T)
    return _TRAFFIC[rung](N, K)


def compulsory_bytes(rung: str, N: int, K: int, T: int = 1) -> int:
    """What must cross DRAM at least: W in the rung's format once, x and y once per token; the blocks of the q8_1
    rungs that quantize x in a kernel of its own (K bytes of codes, a scale and a sum per block) are written once
    and read once per token as well (the wide rungs keep them in shared memory). The prequantized rungs, given x's
    q8_1 blocks (as they are timed), read those blocks once and never x."""
    T = _tokens(rung, T)
    if rung in PREQUANTIZED_RUNGS:                        # Q8_0's rung reads the blocks' scales, not their sums
        extra = FLOAT32 if RUNG_FORMATS[rung] == "q8_0" else Q8_1_EXTRA
        return weight_bytes(RUNG_FORMATS[rung], N, K) + T * (K + K // QK * extra + N * FLOAT32)
    total = weight_bytes(RUNG_FORMATS[rung], N, K) + T * (K * FLOAT32 + N * FLOAT32)
    if rung in Q8_1_RUNGS:
        total += 2 * T * (K + K // QK * Q8_1_EXTRA)
    return total
