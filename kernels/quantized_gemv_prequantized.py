"""Quantized GEMV on activations that arrive quantized: no prologue at all (day 9, the ladder's last rungs).

Shapes as in ``kernels.quantized_gemv_persistent``: W (N, K) in blocks of 32 weights (Q4_1, Q4_0, int4 with an
fp16 scale per group of 128, or Q8_0, each in its repacked layout), y (N,) float32. x is given as its q8_1 blocks
(``Q8_1Activations``: the codes, 4 a uint32 word, and each block's scale and exact sum), as the kernel that makes x
writes them: day 10's ``kernels.llama_layers.rmsnorm_q8_1_block_per_row`` quantizes the normalized hidden state in
the same kernel that normalizes it, so the GEMVs that read it never see a float32 x. ``quantize_activations(x)``
makes the same blocks from a float32 x in one launch of ``quantized_gemv.q8_1_quantize_kernel``; a launcher given a
float32 x calls it first (two launches, what the registry's checks run), given ``Q8_1Activations`` it launches the
GEMV alone (what a model does and the recordings time).

The rungs of day 9's whole ladder, ``RUNGS``, in order, one line each (all but the last four live in
``kernels.quantized_gemv``, ``kernels.quantized_gemv_repacked``, ``kernels.quantized_gemv_wide`` and
``kernels.quantized_gemv_persistent``):

- ``q8_0_gemv_warp_per_row``: a warp per row, a lane per block, each byte read once, a shuffle sum.
- ``q4_0_gemv_warp_per_row``: Q4_0, two weights per byte: one load, both nibbles unpacked in registers.
- ``q4_1_gemv_warp_per_row``: Q4_1, the block minimum paid once per block through the block's sum of x.
- ``q4_1_gemv_q8_1_dp4a``: x quantized to int8 blocks (q8_1) first, then 4 int8 products per ``dp4a``.
- ``q4_1_gemv_q8_1_repacked``: weights repacked at load time, 8-byte loads, 8 blocks in flight per lane.
- ``q4_1_gemv_q8_1_small_batch``: each block of W loaded once for the T <= 16 tokens of a decode batch.
- ``q4_1_gemv_q8_1_wide``: one launch, x quantized in each block's shared memory, 16-byte loads.
- ``q8_0_gemv_q8_1_wide``: the same for Q8_0.
- ``q4_1_gemv_q8_1_persistent``: one block per SM, x quantized once a block, every load of a step before its
  arithmetic, unsigned indices.
- ``q4_0_gemv_q8_1_persistent``: the same for Q4_0 (4.5 bits a weight).
- ``int4_g128_gemv_q8_1_persistent``: the same for int4 with an fp16 scale per group of 128 (4.125 bits a weight).
- ``q4_1_gemv_q8_1_prequantized``: the persistent rung's walk over W on x already quantized: no prologue, no barrier,
  each lane reading its blocks of x (32 bytes of codes in two 16-byte loads, the scale, the sum) where it needs them.
- ``q4_0_gemv_q8_1_prequantized``: the same for Q4_0.
- ``int4_g128_gemv_q8_1_prequantized``: the same for int4_g128.
- ``q8_0_gemv_q8_1_prequantized``: the same for Q8_0 (``q8_0_repack``'s layout): 32 bytes of codes a block in two
  16-byte loads, no minimum, so x's codes and scales are read and its sums never are.

Why (``kernels.quantized_gemv_persistent``'s measurements, H100): the persistent rungs spend about 4.7 us of each
call before W's first loads can start (x's load from DRAM, its quantization, the barrier after it), and no way of
hiding it inside the kernel worked (W's first step issued before it: slower; the quantization's shuffles
interleaved: 0.1 to 0.4 us). Without the prologue the int4_g128 rung took 17.4 us at 8192 x 8192, the goal of 3
times torch's fp16 GEMV there asks for 17.1. So x is quantized where it is made, once per token for every GEMV
that reads it, and these rungs start W's loads in their first instructions.

A lane reads block b of x right before the block's arithmetic, after the step's loads of W are issued: 40 bytes,
its 32 codes by ``kernels.intrinsics.load_u32x4`` twice (the read-only path), then its scale and its sum, which after
the first warp of an SM are L1 hits (x's blocks are 10 KB at K = 8,192, each read by every warp). Each lane sums its blocks
l, l + 32, l + 64, ... in that order with the persistent rung's float expression, and the warp's butterfly is the
same, so on the simulator these rungs give the persistent rungs' bits.

Prediction (before the first timing, an H100, L2 flushed, the GPU's time, int4_g128): about the persistent rung's
time without its prologue, 17 to 18.5 us at 8192 x 8192 (0.63 to 0.68 of copy) and 46 to 48 us at 28672 x 8192
(0.85 to 0.89), against the persistent rung's 22.3 and 50.9 us.

Measured (2026-12-07, L2 flushed by a read, the GPU's time, each kernel alone, twice); the prediction failed:

- H100, the first build (4 blocks a lane, as the persistent rungs): Q4_0 20.6 and 51.9 us against the persistent
  rung's 22.6 and 53.8 in the same run, Q4_1 22.2 and 56.3 against 24.1 and 58.0, int4_g128 22.9 and 56.5 against
  21.9 and 50.3: slower, because ``launch_bounds`` holds 1,024 threads an SM to 64 registers and int4_g128's group
  scales then spill 40 bytes a thread to local memory. With 2 blocks a lane (``PREQUANTIZED_BLOCKS_PER_LANE``, 54 or
  55 registers, no spill; the best of 2, 4 or 8 blocks a lane and 8, 16 or 32 warps a block): Q4_0 20.5 and 51.4,
  Q4_1 21.8 and 55.5, int4_g128 21.2 and 50.1. So removing the prologue saved 0.7 to 2.3 us at 8192 x 8192 and 0.2 to
  2.5 at 28672 x 8192, not the 4.7 that the persistent kernel without its quantization had suggested: that variant
  skipped x's loads as well, while these rungs still load 40 bytes of x a block (from L1 after the first warp; 2.5
  times the bytes of W an int4_g128 block brings) between W's arrival and the dp4a. In the same run the quantize
  kernel alone took 4.2 us at both shapes: a separate launch would cost more than the prologue it replaces, so x's
  blocks pay only where the kernel that makes x writes them (day 10's RMSNorm).
- H200 (the recording ``day09_gemv_timing_other_gpu``, copy 4.2 TB/s): Q4_0 16.5 and 39.6 us (0.54 and 0.79 of
  copy), Q4_1 17.8 and 42.4 (0.56 and 0.82), int4_g128 17.6 and 40.6 (0.47 and 0.71), against the persistent rungs'
  18.7 and 41.0, 19.9 and 44.3, 18.7 and 40.4: 1.06 to 1.13 times faster at 8192 x 8192, 0.99 to 1.05 at 28672 x
  8192. Against torch's fp16 GEMV, 2.45 and 3.33 times (Q4_0), and 1.59 and 1.95 times
  ``torch._weight_int4pack_mm``.
- Tried and left out (H200, the same session): each lane asking L2 for the next row's lines
  (``prefetch.global.L2``) while it multiplies the current one, one row or two rows ahead: slower in every case,
  int4_g128 18.3 to 19.8 us against 17.9 at 8192 x 8192 and 51 to 55 against 40.7 at 28672 x 8192. The prefetches
  compete with the loads the warps wait for.

Q8_0 (``q8_0_gemv_q8_1_prequantized``), measured on the H100 (2026-12-07, the same method): 1, 2 or 4 blocks a lane
and 32 warps a block, or 16 warps and 2 blocks an SM, all took 29.2 to 30.0 us at 8192 x 8192 and 85.3 to 86.5 at
28672 x 8192, but 4 blocks a lane (64 registers, 40 bytes spilled: 35.4 and 104.7 us); kept: 2 blocks a lane
(``PREQUANTIZED_Q8_0_BLOCKS_PER_LANE``, 60 registers). The recording ``day09_gemv_timing``: 29.8 and 86.3 us, 0.80
and 0.97 of copy, against ``q8_0_gemv_q8_1_wide``'s 36.1 and 111.1 (0.66 and 0.75). Its 34 bytes a block are
nearly twice a 4-bit block's, so the same walk keeps nearly twice the bytes in flight.

compute-sanitizer (H100, 2026-12-07): memcheck and racecheck report no error for the four rungs at 37 x 96,
1000 x 8288 and 4099 x 896 (rows and blocks that fill no step evenly), each within 2e-7 of ``reference.gemv_q8_1``.

What is left at 8192 x 8192 is a cost of reading 37.7 MB in one launch, not this walk. Probes on the H100
(2026-12-07, the same method; copy 3.0 TB/s):

- A kernel that only reads W's bytes, in this module's shape (one block of 1,024 threads an SM, each thread 4 loads
  of 16 bytes in flight, a grid-stride walk): Q4_0's 37.7 MB in 17.5 us (0.72 of copy), where
  ``q4_0_gemv_q8_1_prequantized`` took 20.2 in the recording; at 28672 x 8192 (132 MB) 47.0 (0.94) and 51.3; Q8_0's
  71.3 MB in 28.2 (0.84) against the rung's 29.8, its 250 MB in 83.7 (1.0) against 86.3. An empty kernel takes 3.0 us.
- The same read in 60 other shapes: 128 to 1,024 threads a block, 1 to 16 blocks an SM or one pass with a block
  per 16-byte chunk, 1 to 8 loads in flight a thread. The fastest read 37.7 MB in 17.0 us (0.74 of copy); 28 of
  the 32 shapes with at least 1,024 threads an SM took 17.0 to 17.4. At 132 MB the fastest took 46.2 us (0.96).
  No shape reads 37.7 MB at 0.8 of copy (15.7 us). A device-to-device copy of as many bytes took 13.2 us, but half
  of its bytes are writes, which can wait in L2 (50 MB) after the copy is timed, so it is no bound for a read.
- The walk with the next step's loads issued before the current step's arithmetic (two sets of registers at 1 or 2
  blocks a lane, the cursor running on across rows). Predicted before any timing: Q4_0 15 to 17 us at 8192 x 8192
  and 45 to 48 at 28672 x 8192. Measured: 20.0 to 20.1 us against this rung's 20.5 in the same run, and 52.1 to 54.8
  against 51.1. The prediction failed: the warps' bursts of loads were not what left DRAM idle.

So the rungs run within 1.03 to 1.15 times a plain read of their bytes in their own shape, and within 1.19 to 1.26
times the fastest read of 37.7 MB in any shape tried. The fastest reads of the two sizes fit a line: about 5.3 us a
launch plus the bytes at 3.2 TB/s. A cost per launch that large is 0.3 of the time at
37.7 MB and 0.1 at 132 MB. At 0.8 of copy, 37.7 MB must take 15.7 us; the bytes alone take 11.7 at 3.2 TB/s, which
leaves 4.0 us for the launch against the 5.3 the reads showed. No kernel seen on this GPU reads W's 37.7 MB in one
launch that fast.

Launchers ``q4_1_gemv_q8_1_prequantized(w, x, *, out=None, grid=None, quantize_kernel=..., kernel=...)``,
``q4_0_gemv_q8_1_prequantized(...)``, ``int4_g128_gemv_q8_1_prequantized(...)`` and ``q8_0_gemv_q8_1_prequantized(...)``:
``w`` as the persistent rungs take it (the GGUF or int4_g128 bytes, repacked at each call, or the repacked weights;
Q8_0 as ``q8_0_gemv_q8_1_wide`` takes it); ``x`` a float32 (K,) array
(quantized first by ``quantize_kernel``) or ``Q8_1Activations``; ``grid`` blocks of ``PREQUANTIZED_WARPS`` x 32
threads (by default one per SM; 2 for NumPy arrays and on the simulator); any N, K any multiple of 32 (of 128 for
int4_g128), no limit from shared memory (K = 0 gives zeros). NumPy arrays or numba device arrays
(``kernels.launching``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, uint32

from kernels import quantized_gemv_persistent
from kernels.intrinsics import dp4a, load_u32x4, unpack_halves
from kernels.launching import (WARP, cdiv, output_array, require_array, require_float32,
                               require_positive_int, require_same_kind)
from kernels.quantized_gemv import GEMV_WARPS, QK, q8_1_quantize_kernel, warp_sum
from kernels.quantized_gemv_persistent import (Q4_0Repacked, int4_g128_weights, persistent_grid, persistent_jit,
                                               q4_0_repack, step_loader)
from kernels.quantized_gemv_repacked import CODE_WORDS, repacked_weights
from kernels.quantized_gemv_wide import Q8_0Repacked, half_scale_weights, q8_0_repack
from kernels.registry import Rung, ladder

__all__ = ["PREQUANTIZED_WARPS", "PREQUANTIZED_BLOCKS_PER_LANE", "PREQUANTIZED_Q8_0_BLOCKS_PER_LANE", "Q8_1Activations",
           "quantize_activations", "q4_1_gemv_q8_1_prequantized_kernel", "q4_0_gemv_q8_1_prequantized_kernel",
           "int4_g128_gemv_q8_1_prequantized_kernel", "q8_0_gemv_q8_1_prequantized_kernel",
           "q4_1_gemv_q8_1_prequantized", "q4_0_gemv_q8_1_prequantized", "int4_g128_gemv_q8_1_prequantized",
           "q8_0_gemv_q8_1_prequantized", "RUNGS"]

PREQUANTIZED_WARPS = 32            # warps per block of threads
PREQUANTIZED_BLOCKS_PER_LANE = 2   # blocks of a row a lane loads per step (4-bit formats)
PREQUANTIZED_Q8_0_BLOCKS_PER_LANE = 2   # the same for Q8_0 (34 bytes a block)
PREQUANTIZED_BLOCKS_PER_SM = 1     # blocks of threads per SM
X_WORDS = QK // 4                  # uint32 words of a block's 32 activation codes
_LOW_NIBBLES = 0x0F0F0F0F


class Q8_1Activations(NamedTuple):
    """x (K,) as q8_1 blocks of 32: ``codes`` (K / 4,) uint32 (word 8 b + i holds codes 4 i ... 4 i + 3 of block b,
    the first in the low byte), ``scales`` (K / 32,) float32 (amax / 127) and ``sums`` (K / 32,) float32 (the block's
    exact sum of x): what ``reference.quantize_q8_1`` gives, as ``quantized_gemv.q8_1_quantize_kernel`` writes it."""

    codes: object
    scales: object
    sums: object


def quantize_activations(x, *, kernel=q8_1_quantize_kernel) -> Q8_1Activations:
    """x (K,) float32, K a multiple of 32, as ``Q8_1Activations`` of x's kind (NumPy or device): one launch of
    ``kernel`` (``quantized_gemv.q8_1_quantize_kernel``), a warp per block."""
    (k,) = require_float32("x", x, (None,), dims=("K",))
    if k % QK:
        raise ValueError(f"x must have a multiple of {QK} elements (q8_1 blocks of {QK}), got K = {k}")
    blocks = k // QK
    codes = output_array("codes", None, (blocks * X_WORDS,), like=x, dtype=np.uint32)
    scales = output_array("scales", None, (blocks,), like=x)
    sums = output_array("sums", None, (blocks,), like=x)
    if blocks:
        kernel[cdiv(blocks, GEMV_WARPS), GEMV_WARPS * WARP](x, codes, scales, sums)
    return Q8_1Activations(codes, scales, sums)


def _activations(x, blocks: int, quantize_kernel) -> Q8_1Activations:
    """x checked against ``blocks`` blocks of 32: ``Q8_1Activations`` as given, or a float32 x quantized."""
    if isinstance(x, Q8_1Activations):
        require_array("x.codes", x.codes, (blocks * X_WORDS,), np.uint32, dims=("code_words",))
        require_float32("x.scales", x.scales, (blocks,), dims=("blocks",))
        require_float32("x.sums", x.sums, (blocks,), dims=("blocks",))
        require_same_kind(**{"x.codes": x.codes, "x.scales": x.scales, "x.sums": x.sums})
        return x
    if isinstance(x, tuple):
        raise TypeError(f"x must be a float32 (K,) array or Q8_1Activations, got a {type(x).__name__} of {len(x)}")
    require_float32("x", x, (blocks * QK,), dims=("K",))
    return quantize_activations(x, kernel=quantize_kernel)


@cuda.jit(device=True, inline=True)
def q4_block_dot(c0, c1, c2, c3, x0, x1, x2, x3, x4, x5, x6, x7):
    """The int32 dot product of a 4-bit block's codes (16 bytes ``c0`` ... ``c3``: byte j's low nibble code j, its
    high nibble code j + 16) with the block's 32 int8 activation codes (``x0`` ... ``x7``, 4 a word): 8 ``dp4a``,
    in the persistent rungs' order."""
    dot = dp4a(uint32(c0 & uint32(_LOW_NIBBLES)), x0, int32(0))
    dot = dp4a(uint32((c0 >> uint32(4)) & uint32(_LOW_NIBBLES)), x4, dot)
    dot = dp4a(uint32(c1 & uint32(_LOW_NIBBLES)), x1, dot)
    dot = dp4a(uint32((c1 >> uint32(4)) & uint32(_LOW_NIBBLES)), x5, dot)
    dot = dp4a(uint32(c2 & uint32(_LOW_NIBBLES)), x2, dot)
    dot = dp4a(uint32((c2 >> uint32(4)) & uint32(_LOW_NIBBLES)), x6, dot)
    dot = dp4a(uint32(c3 & uint32(_LOW_NIBBLES)), x3, dot)
    return dp4a(uint32((c3 >> uint32(4)) & uint32(_LOW_NIBBLES)), x7, dot)


def _build(fmt: str, per_lane: int = PREQUANTIZED_BLOCKS_PER_LANE, warps: int = PREQUANTIZED_WARPS,
           per_sm: int = PREQUANTIZED_BLOCKS_PER_SM):
    """The rung's kernel for ``fmt`` ("q4_1", "q4_0" or "int4_g128", the scales as the persistent rungs take
    them): ``warps`` warps a block, ``per_sm`` blocks an SM, a warp one row at a time, a lane ``per_lane`` blocks of
    it per step, all of a step's loads of W issued before its arithmetic."""
    q4_1 = fmt == "q4_1"
    grouped = fmt == "int4_g128"
    step_blocks = per_lane * WARP
    load_step = step_loader(fmt, 1, per_lane)

    def kernel(codes, scales, x_q, x_scale, x_sum, y):
        lane = uint32(cuda.threadIdx.x % WARP)
        warp = uint32(cuda.threadIdx.x // WARP)
        n = uint32(scales.shape[0])
        blocks = uint32(scales.shape[1] * 4) if grouped else uint32(scales.shape[1])   # of 32 weights
        w_codes = cuda.local.array((1, per_lane, CODE_WORDS), uint32)
        w_scales = cuda.local.array((1, per_lane), uint32)
        all_warps = uint32(cuda.gridDim.x * warps)
        for row in range(uint32(cuda.blockIdx.x * warps) + warp, n, all_warps):
            acc = float32(0.0)
            for start in range(uint32(0), blocks, uint32(step_blocks)):
                load_step(codes, scales, w_codes, w_scales, row, start, lane, n, blocks)
                for u in range(per_lane):
                    b = start + uint32(u * WARP) + lane
                    if b < blocks:
                        x0, x1, x2, x3 = load_u32x4(x_q, b, uint32(0))
                        x4, x5, x6, x7 = load_u32x4(x_q, b, uint32(4))
                        dot = q4_block_dot(w_codes[0, u, 0], w_codes[0, u, 1], w_codes[0, u, 2], w_codes[0, u, 3],
                                           x0, x1, x2, x3, x4, x5, x6, x7)
                        d, m = unpack_halves(w_scales[0, u])
                        if not q4_1:
                            m = float32(-8.0) * d
                        acc += d * x_scale[b] * float32(dot) + m * x_sum[b]
            total = warp_sum(acc)
            if lane == uint32(0):
                y[row] = total

    kernel.__name__ = kernel.__qualname__ = f"{fmt}_gemv_q8_1_prequantized_kernel"
    kernel.__doc__ = (f"{per_sm} blocks of {warps} warps per SM, each warp walking rows warp, warp + all warps, ..., "
                      f"{step_blocks} blocks a step, every load of W in a step before its arithmetic; x's q8_1 blocks "
                      "read from global memory where they are used. W repacked (codes (N, blocks * 4) uint32, scales "
                      "(N, blocks), or (N, blocks / 4) for int4_g128); x_q (blocks, 8) uint32, x_scale and x_sum "
                      "(blocks,) float32.")
    return persistent_jit(kernel, warps, per_sm)


q4_1_gemv_q8_1_prequantized_kernel = _build("q4_1")
q4_0_gemv_q8_1_prequantized_kernel = _build("q4_0")
int4_g128_gemv_q8_1_prequantized_kernel = _build("int4_g128")


@cuda.jit(device=True, inline=True)
def q8_0_block_dot(w_codes, u, x0, x1, x2, x3, x4, x5, x6, x7):
    """The int32 dot product of a Q8_0 block's 32 int8 codes (``w_codes[u, 0]`` ... ``w_codes[u, 7]``, 4 a word,
    the first in the low byte) with the block's 32 int8 activation codes (``x0`` ... ``x7``): 8 ``dp4a``, word i
    with word i, in the wide rung's order."""
    dot = dp4a(w_codes[u, 0], x0, int32(0))
    dot = dp4a(w_codes[u, 1], x1, dot)
    dot = dp4a(w_codes[u, 2], x2, dot)
    dot = dp4a(w_codes[u, 3], x3, dot)
    dot = dp4a(w_codes[u, 4], x4, dot)
    dot = dp4a(w_codes[u, 5], x5, dot)
    dot = dp4a(w_codes[u, 6], x6, dot)
    return dp4a(w_codes[u, 7], x7, dot)


def _build_q8_0(per_lane: int = PREQUANTIZED_Q8_0_BLOCKS_PER_LANE, warps: int = PREQUANTIZED_WARPS,
                per_sm: int = PREQUANTIZED_BLOCKS_PER_SM):
    """The Q8_0 rung's kernel: the 4-bit rungs' walk, a block of W 32 bytes of codes (two 16-byte loads) and its d
    (2 bytes); no minimum, so no block sums of x are read."""
    step_blocks = per_lane * WARP

    def kernel(codes, scales, x_q, x_scale, y):
        lane = uint32(cuda.threadIdx.x % WARP)
        warp = uint32(cuda.threadIdx.x // WARP)
        n = uint32(scales.shape[0])
        blocks = uint32(scales.shape[1])
        w_codes = cuda.local.array((per_lane, X_WORDS), uint32)
        w_scales = cuda.local.array(per_lane, uint32)
        all_warps = uint32(cuda.gridDim.x * warps)
        for row in range(uint32(cuda.blockIdx.x * warps) + warp, n, all_warps):
            acc = float32(0.0)
            for start in range(uint32(0), blocks, uint32(step_blocks)):
                for u in range(per_lane):                 # every load of W in the step first
                    b = start + uint32(u * WARP) + lane
                    if b < blocks:
                        (w_codes[u, 0], w_codes[u, 1], w_codes[u, 2],
                         w_codes[u, 3]) = load_u32x4(codes, row, uint32(X_WORDS) * b)
                        (w_codes[u, 4], w_codes[u, 5], w_codes[u, 6],
                         w_codes[u, 7]) = load_u32x4(codes, row, uint32(X_WORDS) * b + uint32(4))
                        w_scales[u] = uint32(scales[row, b])
                for u in range(per_lane):
                    b = start + uint32(u * WARP) + lane
                    if b < blocks:
                        x0, x1, x2, x3 = load_u32x4(x_q, b, uint32(0))
                        x4, x5, x6, x7 = load_u32x4(x_q, b, uint32(4))
                        dot = q8_0_block_dot(w_codes, u, x0, x1, x2, x3, x4, x5, x6, x7)
                        d, _ = unpack_halves(w_scales[u])
                        acc += d * x_scale[b] * float32(dot)
            total = warp_sum(acc)
            if lane == uint32(0):
                y[row] = total

    kernel.__name__ = kernel.__qualname__ = "q8_0_gemv_q8_1_prequantized_kernel"
    kernel.__doc__ = (f"{per_sm} blocks of {warps} warps per SM, each warp walking rows warp, warp + all warps, ..., "
                      f"{step_blocks} blocks a step, every load of W in a step before its arithmetic; x's q8_1 codes "
                      "and scales read from global memory where they are used. W as q8_0_repack lays it out (codes "
                      "(N, blocks * 8) uint32, scales (N, blocks) uint16); x_q (blocks, 8) uint32, x_scale (blocks,) "
                      "float32.")
    return persistent_jit(kernel, warps, per_sm)


q8_0_gemv_q8_1_prequantized_kernel = _build_q8_0()


def _launch(kernel, quantize_kernel, w, n, blocks, x, out, grid):
    x = _activations(x, blocks, quantize_kernel)          # of w's kind: the weights' checks compared them
    if grid is not None:
        grid = require_positive_int("grid", grid)
    if out is not None:
        require_float32("out", out, (n,), dims=("rows",))
    out = output_array("out", out, (n,), like=x.codes)
    if n:
        if grid is None:
            grid = persistent_grid(x.codes) * getattr(kernel, "grid_per_sm", PREQUANTIZED_BLOCKS_PER_SM)
        words = w.codes.shape[2]                            # 4 for the 4-bit formats, 8 for Q8_0
        sums = () if words == X_WORDS else (x.sums,)        # Q8_0 has no minimum to pay through them
        kernel[grid, getattr(kernel, "threads", PREQUANTIZED_WARPS * WARP)](
            w.codes.reshape(n, blocks * words), w.scales, x.codes.reshape(blocks, X_WORDS), x.scales, *sums, out)
    return out


def _float_or_codes(x):
    """What the weights' checks compare x's kind with: x's codes when x is already quantized."""
    return x.codes if isinstance(x, Q8_1Activations) else x


def q4_1_gemv_q8_1_prequantized(w, x, *, out=None, grid=None, quantize_kernel=q8_1_quantize_kernel,
                                kernel=q4_1_gemv_q8_1_prequantized_kernel):
    """y = W x for Q4_1 weights ``w`` (the GGUF bytes (N, blocks, 20), repacked here, or ``q4_1_repack(w)``) and x
    (``Q8_1Activations``, or float32 (K,) quantized first by ``quantize_kernel``): one launch of ``kernel`` on ``grid``
    blocks of threads, ``q4_1_gemv_q8_1_persistent``'s product."""
    w, n, blocks = repacked_weights(w, _float_or_codes(x))
    return _launch(kernel, quantize_kernel, w, n, blocks, x, out, grid)


def q4_0_gemv_q8_1_prequantized(w, x, *, out=None, grid=None, quantize_kernel=q8_1_quantize_kernel,
                                kernel=q4_0_gemv_q8_1_prequantized_kernel):
    """y = W x for Q4_0 weights ``w`` (the GGUF bytes (N, blocks, 18), repacked here, or ``q4_0_repack(w)``) and x
    as ``q4_1_gemv_q8_1_prequantized`` takes it, with m = -8 d."""
    w, n, blocks = half_scale_weights(w, _float_or_codes(x), "q4_0", Q4_0Repacked, q4_0_repack)
    return _launch(kernel, quantize_kernel, w, n, blocks, x, out, grid)


def int4_g128_gemv_q8_1_prequantized(w, x, *, out=None, grid=None, quantize_kernel=q8_1_quantize_kernel,
                                     kernel=int4_g128_gemv_q8_1_prequantized_kernel):
    """y = W x for int4_g128 weights ``w`` (the bytes (N, K / 128, 66) of ``reference.quantize_int4_g128``, repacked
    here, or ``int4_g128_repack(w)``) and x as ``q4_1_gemv_q8_1_prequantized`` takes it, each group's d for its 4
    blocks."""
    w, n, blocks = int4_g128_weights(w, _float_or_codes(x))
    return _launch(kernel, quantize_kernel, w, n, blocks, x, out, grid)


def q8_0_gemv_q8_1_prequantized(w, x, *, out=None, grid=None, quantize_kernel=q8_1_quantize_kernel,
                                kernel=q8_0_gemv_q8_1_prequantized_kernel):
    """y = W x for Q8_0 weights ``w`` (the GGUF bytes (N, blocks, 34), repacked here, or ``q8_0_repack(w)``) and x as
    ``q4_1_gemv_q8_1_prequantized`` takes it (its block sums unread): ``q8_0_gemv_q8_1_wide``'s product, any K."""
    w, n, blocks = half_scale_weights(w, _float_or_codes(x), "q8_0", Q8_0Repacked, q8_0_repack)
    return _launch(kernel, quantize_kernel, w, n, blocks, x, out, grid)


RUNGS = ladder(
    *quantized_gemv_persistent.RUNGS.values(),
    Rung("q4_1_gemv_q8_1_prequantized", q4_1_gemv_q8_1_prequantized,
         "x arrives as q8_1 blocks, made by the kernel that made x: no prologue, W's loads from the first instruction"),
    Rung("q4_0_gemv_q8_1_prequantized", q4_0_gemv_q8_1_prequantized, "the same for Q4_0 (4.5 bits a weight)"),
    Rung("int4_g128_gemv_q8_1_prequantized", int4_g128_gemv_q8_1_prequantized,
         "the same for int4 with an fp16 scale per group of 128 (4.125 bits a weight)"),
    Rung("q8_0_gemv_q8_1_prequantized", q8_0_gemv_q8_1_prequantized,
         "the same for Q8_0: 32 bytes of codes a block in two 16-byte loads, no minimum, no sums of x"),
)
