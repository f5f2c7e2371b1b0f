"""Quantized GEMV on a persistent grid, x quantized once per resident block, unsigned indices (day 9, continued).

Shapes as in ``kernels.quantized_gemv_wide``: W (N, K) in blocks of 32 weights, x (K,) float32, y (N,) float32,
K = 32 blocks. Three formats, each from its repacked layout (made once at load time, never timed): Q4_1
(``Q4_1Repacked``: 16 bytes of codes and a word of d and m a block) and Q4_0 (``Q4_0Repacked``, made by
``q4_0_repack``: the same 16 bytes of codes and d alone, 2 bytes, so a block is 18 bytes: 4.5 bits a
weight against Q4_1's 5), and int4_g128 (``Int4G128Repacked``, made by ``int4_g128_repack``: Q4_0's codes and one
d for every 4 blocks, 4.125 bits a weight). A Q4_0 weight is d (q - 8): the rung computes it as Q4_1 with m = -8 d,
so the formats share one kernel and one reference (``q4_1_gemv_q8_1_dp4a``'s, W times x quantized to q8_1 in the codes'
product and times the exact block sums of x in the minimum's). On Q4_1, on the simulator, the rung gives that
rung's bits (each lane sums its blocks l, l + 32, l + 64, ... in that order with the same float expression, and
the warp's butterfly is the same); on an H100 it came within 2e-7 of them (relative to the largest |y|): the
compiler fuses multiplies and adds its own way in each kernel.

The rungs of day 9's whole ladder, ``RUNGS``, in order, one line each (the first eight live in
``kernels.quantized_gemv``, ``kernels.quantized_gemv_repacked`` and ``kernels.quantized_gemv_wide``):

- ``q8_0_gemv_warp_per_row``: a warp per row, a lane per block, each byte read once, a shuffle sum.
- ``q4_0_gemv_warp_per_row``: Q4_0, two weights per byte: one load, both nibbles unpacked in registers.
- ``q4_1_gemv_warp_per_row``: Q4_1, the block minimum paid once per block through the block's sum of x.
- ``q4_1_gemv_q8_1_dp4a``: x quantized to int8 blocks (q8_1) first, then 4 int8 products per ``dp4a``.
- ``q4_1_gemv_q8_1_repacked``: weights repacked at load time, 8-byte loads, 8 blocks in flight per lane.
- ``q4_1_gemv_q8_1_small_batch``: each block of W loaded once for the T <= 16 tokens of a decode batch.
- ``q4_1_gemv_q8_1_wide``: one launch, x quantized in each block's shared memory, 16-byte loads.
- ``q8_0_gemv_q8_1_wide``: the same for Q8_0.
- ``q4_1_gemv_q8_1_persistent``: ``PERSISTENT_BLOCKS_PER_SM`` block of ``PERSISTENT_WARPS`` warps per SM,
  launched once; each block quantizes x to q8_1 into its shared memory once, then its warps walk their share of
  the rows, every index unsigned (numba checks a signed index for wrap-around before every load).
- ``q4_0_gemv_q8_1_persistent``: the same for Q4_0 (4.5 bits a weight).
- ``int4_g128_gemv_q8_1_persistent``: the same for int4 with an fp16 scale per group of 128 (4.125 bits a weight:
  ``reference.quantize_int4_g128``, GPTQ's and AWQ's kind of format), each group's scale loaded by one lane of 4 and
  shuffled to the other 3.

Why (the Nsight profile of the two rungs before it, H100, 28672 x 8192): ``q4_1_gemv_q8_1_wide`` and
``q4_1_gemv_q8_1_repacked`` issue an instruction on only about a third of their schedulers' cycles, with 16 and
26 warps an SM, and many of their instructions are not the work: before each of the wide rung's shared loads,
numba's signed 64-bit index takes a ``shr``, an ``and`` and two ``add`` of 64 bits (the wrap-around of a negative
index), 40 such instructions for a block's 8 activation words and its 8 ``dp4a``. And the wide rung quantizes x
1,792 times at 28672 x 8192, once per block of 32 rows.

Prediction (written before the first version was timed, for 16 warps a block, 2 rows a warp and the next step's
loads issued before the current step's arithmetic): the DRAM bytes are W's once, and with the instructions gone
and the loads overlapped, W should stream at 0.85 to 0.9 of the copy bandwidth at 28672 x 8192 and at 0.75 to
0.85 at 8192 x 8192, where the kernel is about 10 us on an H200 and its first microsecond (the launch, x's
quantization, the first loads) weighs most.

Measured on an H100 (2026-12-06, L2 flushed by a read, the GPU's time, Q4_1; copy 3.0 TB/s); the prediction
failed:

- The first version (16 warps a block, 2 rows a warp, two sets of registers, 120 registers a thread): 27.6 us at
  8192 x 8192 (0.51 of copy) and 61.7 us at 28672 x 8192 (0.79), against ``q4_1_gemv_q8_1_repacked``'s 26.8 and
  58.1 us. Nsight: DRAM bytes W's once; 8.4 M and 20.6 M warp instructions, one issued every 2.8 cycles per
  scheduler. Its Q4_0 twin: 26.1 and 57.1 us.
- Without the second set of registers, over warps, rows and blocks a lane (``_build``'s parameters): every
  variant 24 to 33 us at 8192 x 8192 and 58 to 67 us at 28672 x 8192. The best is this module's: 32 warps a
  block, one row a warp, 4 blocks a lane, 56 registers: 24.1 us (0.58 of copy) and 57.9 us (0.85). In the same
  run torch's fp16 GEMV took 48.9 and 156 us and ``torch._weight_int4pack_mm`` 27.4 and 80.6 us.

The recording (``day09_gemv_timing``, the same H100, L2 flushed by a read): Q4_1 24.1 and 57.9 us (0.58 and 0.85
of copy, 2.03 and 2.68 times torch's fp16 GEMV), Q4_0 22.6 and 53.2 us (2.17 and 2.91 times; 1.20 and 1.51 times
``torch._weight_int4pack_mm``). At 28672 x 8192 the Q4_1 rung reads W as fast as the repacked rung does, and at
8192 x 8192 it is 10% faster; the Q4_0 rung, 10% fewer bytes, 6 and 9% faster still. Full size (8192 x 8192) against
the float64 reference on the H100: rel_err 1.2e-7 (Q4_1) and 1.9e-7 (Q4_0); compute-sanitizer's memcheck and
racecheck: no error.

Where the rest goes, timed on the same H100 by ``_build``'s switches: without x's quantization the Q4_1 kernel
takes 19.6 and 53.3 us (0.72 and 0.92 of copy); the quantization alone 8.1 us, of which an empty kernel's 3.2 us
is the floor every timing here includes. So each block's quantization of x costs about 4.5 us a call at both
shapes, the largest cost left at 8192 x 8192.

Hiding the prologue behind W's first loads does not work. ``_build(prefetch=True)`` issues each warp's first step
(4 blocks a lane: 10.8 MB of W over the GPU, about 3.6 us at the copy bandwidth) before x's quantization; the
prediction was 3 to 4 us saved at both shapes. Measured on an H100 (2026-12-06, two runs each, the same bits): it
is slower, Q4_1 26.1 and 25.6 us against 24.6 and 24.4 at 8192 x 8192, 60.3 and 60.7 against 59.1 and 59.4 at
28672 x 8192, and Q4_0 1.3 to 1.7 us slower. The prologue's own loads of x (32 KB, cold) then queue behind those
megabytes, and its path (load x, quantize, barrier) is what the warps wait for.

Nor are the prologue's shuffles its cost. A warp quantizes 4 blocks of x at a time, and each block's 13 shuffles (5
for the maximum, 5 for the sum, 3 to pack the codes) depend on one another: about 50 in a row, at tens of cycles
each. A probe of ``_build`` ran a batch's blocks side by side (each butterfly step over the whole batch, the codes'
shuffles as 32-bit words), so that the chains overlap; the prediction was 2 to 3 us saved at both shapes, batches of
8 blocks the most. Measured on an H100 (2026-12-07, the same bits, each kernel alone twice, L2 flushed): 0.1 to 0.4
us saved with batches of 4, less with 8 (64 registers where Q4_0 and Q4_1 have 56), at both shapes and in all three
formats, while the same kernel without the prologue (``quantize=False``) was 4.6 to 4.8 us faster. So the chains
were not the cost: the rungs keep their prologue, and ``_build`` did not keep the probe. What is left of those 4.7 us is the time before W's
first loads can start: x's own load from DRAM, the barrier, and the ramp of the loads after it. The next step this
points to is x quantized once, before the GEMV, by the kernel that makes x (day 10 fuses it into RMSNorm).

int4_g128 is Q4_0's kernel with one scale for 4 blocks: a group's 128 codes are stored as 4
Q4_0 blocks' codes (q + 8, byte j: code j low, code j + 16 high), so the codes' loads and dp4a are Q4_0's, and a
weight d (q - 8) is again d q + m with m = -8 d. Lanes 4 g ... 4 g + 3 hold one group's 4 blocks (a lane's blocks
are lane, lane + 32, ... from a multiple of 32), so the first of them loads the group's 2 bytes of d and
``shfl_sync`` hands it to the others: each byte of W is read once. Its bytes are 8% fewer than Q4_0's and 18%
fewer than Q4_1's; the prediction where W streams at the copy bandwidth: as much faster than Q4_0, 4.5 / 4.125 =
1.09 times, at 28672 x 8192, and less at 8192 x 8192, where the prologue weighs more. Measured on an H100
(the recording ``day09_gemv_timing``, 2026-12-07, L2 flushed by a read, the GPU's time): 22.3 and 50.9 us against
Q4_0's 23.1 and 54.0, 1.04 and 1.06 times faster, so the prediction held in direction and fell short in size; 2.29
and 3.21 times torch's fp16 GEMV, 1.23 and 1.58 times ``torch._weight_int4pack_mm``; 0.52 and 0.80 of the copy
bandwidth. Nsight (``day09_dram_bytes``): 34.7 MB read at 8192 x 8192, W's 34.6 MB once. Full size against the
float64 reference on the same H100 (``day09_full_size_checks``): rel_err 1.6e-7 at both shapes; compute-sanitizer's
memcheck and racecheck: no error.

Launchers ``q4_1_gemv_q8_1_persistent(w, x, *, out=None, grid=None, kernel=...)``,
``q4_0_gemv_q8_1_persistent(...)`` and ``int4_g128_gemv_q8_1_persistent(...)``: ``w`` the GGUF bytes (repacked at each call: what the registry's checks pass)
or the repacked weights (what a model keeps and the recordings time; int4_g128: the bytes of
``reference.quantize_int4_g128`` or ``int4_g128_repack``'s); ``grid`` blocks of threads (by default
``PERSISTENT_BLOCKS_PER_SM`` per SM of the GPU; 2 for NumPy arrays and on the simulator) of ``PERSISTENT_WARPS``
x 32 threads, 40 bytes of dynamic shared memory per block of x; any N, K any multiple of 32 (of 128 for int4_g128)
up to ``PERSISTENT_MAX_K`` (K = 0 gives zeros). NumPy arrays or numba device arrays (``kernels.launching``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, uint32, uint64

from kernels.intrinsics import dp4a, load_u32x4, unpack_halves
from kernels.launching import WARP, is_device_array, require_array, require_positive_int, require_same_kind
from kernels.paging import sm_count
from kernels.quantized_gemv import QK, q8_1_block, warp_sum
from kernels import quantized_gemv_wide
from kernels.quantized_gemv_repacked import CODE_WORDS, repacked_weights
from kernels.quantized_gemv_wide import half_scale_weights, shared_x_output, split_half_scales
from kernels.registry import Rung, ladder

__all__ = ["PERSISTENT_WARPS", "PERSISTENT_ROWS", "PERSISTENT_BLOCKS_PER_LANE", "PERSISTENT_MAX_K",
           "Q4_0Repacked", "q4_0_repack", "Int4G128Repacked", "int4_g128_repack", "int4_g128_weights", "persistent_grid",
           "persistent_shared_bytes", "step_loader", "persistent_jit", "q4_1_gemv_q8_1_persistent_kernel", "q4_0_gemv_q8_1_persistent_kernel",
           "int4_g128_gemv_q8_1_persistent_kernel", "q4_1_gemv_q8_1_persistent", "q4_0_gemv_q8_1_persistent",
           "int4_g128_gemv_q8_1_persistent", "INT4_GROUP", "INT4_G128_BLOCK_BYTES", "RUNGS"]

PERSISTENT_WARPS = 32            # warps per block of threads
PERSISTENT_ROWS = 1              # rows of W a warp multiplies at once, sharing each activation load
PERSISTENT_BLOCKS_PER_LANE = 4   # blocks of each of those rows a lane loads per step
PERSISTENT_BLOCKS_PER_SM = 1     # blocks of threads per SM
_THREADS = PERSISTENT_WARPS * WARP
_STEP_BLOCKS = PERSISTENT_BLOCKS_PER_LANE * WARP      # blocks of a row a warp takes per step
_X_WORDS = QK // 4                                    # uint32 words of a block's 32 activation codes
_X_WIDE = QK // 8                                     # the same as uint64
_SHARED_LIMIT = 48 * 1024
_SHARED_PER_BLOCK = 4 * (_X_WORDS + 2)                # codes, scale and sum of a block of x
PERSISTENT_MAX_K = _SHARED_LIMIT // _SHARED_PER_BLOCK * QK
_X_BATCH = 4                                          # blocks of x a warp loads before it quantizes them
_LOW_NIBBLES = 0x0F0F0F0F
INT4_GROUP = 128                                      # weights of a group of int4_g128 (one fp16 scale)
INT4_G128_BLOCK_BYTES = 66                            # its bytes: the scale, then 64 bytes of codes
_GROUP_BLOCKS = INT4_GROUP // QK                      # blocks of 32 of a group of int4_g128 (one scale)
_FULL_MASK = 0xFFFFFFFF


class Q4_0Repacked(NamedTuple):
    """Q4_0 weights laid out for ``q4_0_gemv_q8_1_persistent``: ``codes`` (N, blocks, 4) uint32, each block's 16
    bytes of codes as in GGUF (byte j: code j low, code j + 16 high), and ``scales`` (N, blocks) uint16, the bits
    of each block's fp16 d."""

    codes: object
    scales: object


class Int4G128Repacked(NamedTuple):
    """int4_g128 weights laid out for ``int4_g128_gemv_q8_1_persistent``: ``codes`` (N, blocks, 4) uint32, each
    block of 32 codes' 16 bytes as in Q4_0 (byte j: code j + 8 low, code j + 16 + 8 high), and ``scales`` (N, K /
    128) uint16, the bits of each group's fp16 d: 4.125 bits a weight."""

    codes: object
    scales: object


def int4_g128_repack(w) -> Int4G128Repacked:
    """The int4_g128 bytes w (N, K / 128, 66) uint8 (``reference.quantize_int4_g128``: d as fp16, then 64 bytes of
    codes) split as ``Int4G128Repacked``: a load-time step on the host (a device array is copied to the host and the
    two arrays back)."""
    n, groups, _ = require_array("w", w, (None, None, INT4_G128_BLOCK_BYTES), np.uint8,
                                 dims=("rows", "groups", "int4_g128_block_bytes"))
    host = w.copy_to_host() if is_device_array(w) else w
    codes = np.ascontiguousarray(host[..., 2:]).view(np.uint32).reshape(n, groups * _GROUP_BLOCKS, CODE_WORDS)
    scales = np.ascontiguousarray(host[..., :2]).view(np.uint16).reshape(n, groups)
    if is_device_array(w):
        return Int4G128Repacked(cuda.to_device(codes), cuda.to_device(scales))
    return Int4G128Repacked(codes, scales)


def int4_g128_weights(w, x) -> tuple:
    """``(repacked w, N, blocks)``: ``Int4G128Repacked`` checked, or the int4_g128 bytes checked and repacked; either
    of x's kind (NumPy or device). What every launcher over int4_g128 weights starts with (this module's and
    ``kernels.quantized_gemv_prequantized``'s)."""
    if isinstance(w, Int4G128Repacked):
        n, blocks, _ = require_array("w.codes", w.codes, (None, None, CODE_WORDS), np.uint32,
                                     dims=("rows", "blocks", "code_words"))
        if blocks % _GROUP_BLOCKS:
            raise ValueError(f"w.codes must have a multiple of {_GROUP_BLOCKS} blocks of 32 (groups of {INT4_GROUP}),"
                             f" got {blocks}")
        require_array("w.scales", w.scales, (n, blocks // _GROUP_BLOCKS), np.uint16, dims=("rows", "groups"))
        require_same_kind(**{"w.codes": w.codes, "w.scales": w.scales, "x": x})
        return w, n, blocks
    if isinstance(w, tuple):
        raise TypeError(f"w must be int4_g128 bytes (rows, groups, {INT4_G128_BLOCK_BYTES}) or int4_g128_repack's "
                        f"Int4G128Repacked, got a {type(w).__name__} of {len(w)}")
    n, groups, _ = require_array("w", w, (None, None, INT4_G128_BLOCK_BYTES), np.uint8,
                                 dims=("rows", "groups", "int4_g128_block_bytes"))
    require_same_kind(w=w, x=x)
    return int4_g128_repack(w), n, groups * _GROUP_BLOCKS


def q4_0_repack(w) -> Q4_0Repacked:
    """The Q4_0 GGUF bytes w (N, blocks, 18) uint8 (d as fp16, then 16 bytes of codes) split as
    ``Q4_0Repacked``: a load-time step on the host (a device array is copied to the host and back)."""
    return split_half_scales(w, "q4_0", Q4_0Repacked)


def persistent_shared_bytes(k: int) -> int:
    """Bytes of dynamic shared memory the rungs ask for at K = ``k``: x's q8_1 blocks (codes, scale, sum)."""
    return _SHARED_PER_BLOCK * (k // QK)


def persistent_grid(like) -> int:
    """SMs of the GPU that runs the device arrays ``like`` (``kernels.paging.sm_count``, asked once per process);
    2 for NumPy arrays and on the simulator: the rungs launch ``PERSISTENT_BLOCKS_PER_SM`` blocks each."""
    return sm_count(like) or 2


def step_loader(fmt: str, rows: int, per_lane: int):
    """The device function ``load_step(codes, scales, w_codes, w_scales, first, start, lane, n, blocks)`` of the
    persistent rungs and their successors for ``fmt`` ("q4_1", "q4_0" or "int4_g128"): a lane's loads of one step
    into its registers ``w_codes`` (rows, per_lane, 4) and ``w_scales`` (rows, per_lane)."""
    grouped = fmt == "int4_g128"

    @cuda.jit(device=True, inline=True)
    def load_step(codes, scales, w_codes, w_scales, first, start, lane, n, blocks):
        """A lane's loads of one step: blocks start + u * 32 + lane (u < per_lane) of rows first ... first + rows - 1,
        16 bytes of codes and the scale word each, zeros past the matrix."""
        for u in range(per_lane):
            b = start + uint32(u * WARP) + lane
            for r in range(rows):
                row = first + uint32(r)
                if row < n and b < blocks:
                    (w_codes[r, u, 0], w_codes[r, u, 1], w_codes[r, u, 2],
                     w_codes[r, u, 3]) = load_u32x4(codes, row, uint32(CODE_WORDS) * b)
                    if not grouped:
                        w_scales[r, u] = uint32(scales[row, b])
                else:
                    for i in range(CODE_WORDS):
                        w_codes[r, u, i] = uint32(0)
                    w_scales[r, u] = uint32(0)
                if grouped:         # lanes 4 g ... 4 g + 3 hold one group's 4 blocks (blocks is a multiple of 4)
                    scale = int32(0)                  # shuffles move 32-bit signed words: the 16 bits fit
                    if row < n and b < blocks and lane % uint32(_GROUP_BLOCKS) == uint32(0):
                        scale = int32(scales[row, b // uint32(_GROUP_BLOCKS)])
                    w_scales[r, u] = uint32(cuda.shfl_sync(_FULL_MASK, scale,
                                                           int32(lane & uint32(32 - _GROUP_BLOCKS))))

    return load_step


def _build(fmt: str, rows: int = PERSISTENT_ROWS, per_lane: int = PERSISTENT_BLOCKS_PER_LANE,
           warps: int = PERSISTENT_WARPS, per_sm: int = PERSISTENT_BLOCKS_PER_SM, quantize: bool = True,
           walk: bool = True, prefetch: bool = False):
    """The rung's kernel for ``fmt``, "q4_1" (scales: uint32, d low and m high), "q4_0" (scales: uint16 d, and
    m = -8 d) or "int4_g128" (scales: uint16 d per group of 4 blocks, m = -8 d; the first lane of each 4 loads its
    group's d and shuffles it to the other 3, so each scale is read once): ``warps`` warps a block, ``per_sm`` blocks an SM, each warp ``rows`` rows at a time, a lane
    ``per_lane`` blocks of each per step. Two switches time the kernel's halves apart and give wrong answers:
    ``quantize=False`` skips x's quantization (the activations are whatever shared memory holds), ``walk=False``
    skips the rows (y is not written). ``prefetch=True`` issues the loads of each warp's first step before x's
    quantization, so that the prologue's latency hides behind them."""
    q4_1 = fmt == "q4_1"
    grouped = fmt == "int4_g128"
    step_blocks = per_lane * WARP

    load_step = step_loader(fmt, rows, per_lane)

    def kernel(codes, scales, x, y):
        x_words = cuda.shared.array(0, uint32)      # x's q8_1 codes, block-major: 8 words (4 uint64) a block ...
        x_wide = cuda.shared.array(0, uint64)       # ... the same bytes read 8 at a time
        x_floats = cuda.shared.array(0, float32)    # ... then the blocks' scales, then their sums
        lane = uint32(cuda.threadIdx.x % WARP)
        warp = uint32(cuda.threadIdx.x // WARP)
        n = uint32(scales.shape[0])
        blocks = uint32(scales.shape[1] * _GROUP_BLOCKS) if grouped else uint32(scales.shape[1])   # of 32 weights
        w_codes = cuda.local.array((rows, per_lane, CODE_WORDS), uint32)
        w_scales = cuda.local.array((rows, per_lane), uint32)
        acc = cuda.local.array(rows, float32)
        all_warps = uint32(cuda.gridDim.x * warps)
        tasks = (n + uint32(rows - 1)) // uint32(rows) if walk else uint32(0)
        primed = False                              # w_codes and w_scales hold the first step of the warp's first task
        if prefetch and uint32(cuda.blockIdx.x * warps) + warp < tasks:
            load_step(codes, scales, w_codes, w_scales, (uint32(cuda.blockIdx.x * warps) + warp) * uint32(rows),
                      uint32(0), lane, n, blocks)
            primed = True
        # x to q8_1, as quantized_gemv.q8_1_quantize_kernel: warp w takes blocks w, w + warps, ..., _X_BATCH at once
        values = cuda.local.array(_X_BATCH, float32)
        for base in range(warp, blocks if quantize else uint32(0), uint32(warps * _X_BATCH)):
            for j in range(_X_BATCH):
                b = base + uint32(j * warps)
                values[j] = x[b * uint32(QK) + lane] if b < blocks else float32(0.0)
            for j in range(_X_BATCH):
                b = base + uint32(j * warps)
                if b < blocks:                        # the same for the whole warp
                    d, total, word = q8_1_block(values[j], lane)
                    if lane % uint32(4) == uint32(0):
                        x_words[uint32(_X_WORDS) * b + lane // uint32(4)] = word
                    if lane == uint32(0):
                        x_floats[uint32(_X_WORDS) * blocks + b] = d
                        x_floats[uint32(_X_WORDS + 1) * blocks + b] = total
        cuda.syncthreads()
        for task in range(uint32(cuda.blockIdx.x * warps) + warp, tasks, all_warps):
            first = task * uint32(rows)
            for r in range(rows):
                acc[r] = float32(0.0)
            for start in range(uint32(0), blocks, uint32(step_blocks)):
                if primed:                                # loaded before the prologue
                    primed = False
                else:                                     # every load of the step first ...
                    load_step(codes, scales, w_codes, w_scales, first, start, lane, n, blocks)
                for u in range(per_lane):                 # ... then the arithmetic
                    b = start + uint32(u * WARP) + lane
                    if b < blocks:
                        a0 = x_wide[uint32(_X_WIDE) * b]
                        a1 = x_wide[uint32(_X_WIDE) * b + uint32(1)]
                        a2 = x_wide[uint32(_X_WIDE) * b + uint32(2)]
                        a3 = x_wide[uint32(_X_WIDE) * b + uint32(3)]
                        x_scale = x_floats[uint32(_X_WORDS) * blocks + b]
                        x_sum = x_floats[uint32(_X_WORDS + 1) * blocks + b]
                        for r in range(rows):
                            dot = int32(0)
                            for i in range(CODE_WORDS):
                                word = w_codes[r, u, i]
                                low = a0 if i < 2 else a1
                                high = a2 if i < 2 else a3
                                shift = uint64(32 * (i % 2))
                                dot = dp4a(uint32(word & uint32(_LOW_NIBBLES)),
                                           uint32((low >> shift) & uint64(0xFFFFFFFF)), dot)
                                dot = dp4a(uint32((word >> uint32(4)) & uint32(_LOW_NIBBLES)),
                                           uint32((high >> shift) & uint64(0xFFFFFFFF)), dot)
                            d, m = unpack_halves(w_scales[r, u])
                            if not q4_1:
                                m = float32(-8.0) * d
                            acc[r] += d * x_scale * float32(dot) + m * x_sum
            for r in range(rows):
                total = warp_sum(acc[r])
                if lane == uint32(0) and first + uint32(r) < n:
                    y[first + uint32(r)] = total

    kernel.__name__ = kernel.__qualname__ = f"{fmt}_gemv_q8_1_persistent_kernel"
    kernel.__doc__ = (f"{per_sm} blocks of {warps} warps per SM: x quantized to q8_1 into shared memory once a block, "
                      f"then each warp walks rows {rows} at a time (tasks warp, warp + all warps, ...), {step_blocks} "
                      f"blocks a step, every load of a step before its arithmetic. W {fmt} repacked (codes (N, blocks "
                      "* 4) uint32, scales (N, blocks), or (N, blocks / 4) for int4_g128); x (K,) float32.")
    return persistent_jit(kernel, warps, per_sm)


def persistent_jit(kernel, warps: int, per_sm: int):
    """``kernel`` compiled for ``per_sm`` blocks of ``warps`` warps an SM (``launch_bounds``: ptxas keeps the registers
    under 65,536 / (threads x blocks)), carrying both numbers for its launcher (``grid_per_sm``, ``threads``)."""
    threads = warps * WARP
    compiled = cuda.jit(kernel, launch_bounds=(threads, per_sm))
    compiled.grid_per_sm, compiled.threads = per_sm, threads
    return compiled


q4_1_gemv_q8_1_persistent_kernel = _build("q4_1")
q4_0_gemv_q8_1_persistent_kernel = _build("q4_0")
int4_g128_gemv_q8_1_persistent_kernel = _build("int4_g128")


def _launch(name, kernel, w, n, blocks, x, out, grid):
    k = blocks * QK
    if grid is not None:
        grid = require_positive_int("grid", grid)
    out = shared_x_output(name, x, n, blocks, out, max_k=PERSISTENT_MAX_K, any_k="q4_1_gemv_q8_1_repacked")
    if n:
        if grid is None:
            grid = persistent_grid(x) * getattr(kernel, "grid_per_sm", PERSISTENT_BLOCKS_PER_SM)
        kernel[grid, getattr(kernel, "threads", _THREADS), 0, persistent_shared_bytes(k)](
            w.codes.reshape(n, blocks * CODE_WORDS), w.scales, x, out)
    return out


def q4_1_gemv_q8_1_persistent(w, x, *, out=None, grid=None, kernel=q4_1_gemv_q8_1_persistent_kernel):
    """y = W x for Q4_1 weights ``w`` (the GGUF bytes (N, blocks, 20), repacked here, or ``q4_1_repack(w)``) and
    x (K,) float32, K a multiple of 32 up to ``PERSISTENT_MAX_K``: one launch of ``kernel`` on ``grid`` blocks of
    threads (by default ``PERSISTENT_BLOCKS_PER_SM`` per SM of the GPU), ``q4_1_gemv_q8_1_dp4a``'s product."""
    w, n, blocks = repacked_weights(w, x)
    return _launch("q4_1_gemv_q8_1_persistent", kernel, w, n, blocks, x, out, grid)


def q4_0_gemv_q8_1_persistent(w, x, *, out=None, grid=None, kernel=q4_0_gemv_q8_1_persistent_kernel):
    """y = W x for Q4_0 weights ``w`` (the GGUF bytes (N, blocks, 18), repacked here, or ``q4_0_repack(w)``) and
    x (K,) float32, K a multiple of 32 up to ``PERSISTENT_MAX_K``: as ``q4_1_gemv_q8_1_persistent``, with
    m = -8 d."""
    w, n, blocks = half_scale_weights(w, x, "q4_0", Q4_0Repacked, q4_0_repack)
    return _launch("q4_0_gemv_q8_1_persistent", kernel, w, n, blocks, x, out, grid)


def int4_g128_gemv_q8_1_persistent(w, x, *, out=None, grid=None, kernel=int4_g128_gemv_q8_1_persistent_kernel):
    """y = W x for int4_g128 weights ``w`` (the bytes (N, K / 128, 66) of ``reference.quantize_int4_g128``,
    repacked here, or ``int4_g128_repack(w)``) and x (K,) float32, K a multiple of 128 up to ``PERSISTENT_MAX_K``:
    as ``q4_0_gemv_q8_1_persistent``, each group's d for its 4 blocks."""
    w, n, blocks = int4_g128_weights(w, x)
    return _launch("int4_g128_gemv_q8_1_persistent", kernel, w, n, blocks, x, out, grid)


RUNGS = ladder(
    *quantized_gemv_wide.RUNGS.values(),
    Rung("q4_1_gemv_q8_1_persistent", q4_1_gemv_q8_1_persistent,
         "one block per SM: x quantized once a block, every load of a step before its arithmetic, unsigned indices"),
    Rung("q4_0_gemv_q8_1_persistent", q4_0_gemv_q8_1_persistent,
         "the same for Q4_0 (4.5 bits a weight): m = -8 d"),
    Rung("int4_g128_gemv_q8_1_persistent", int4_g128_gemv_q8_1_persistent,
         "the same for int4 with an fp16 scale per 128 (4.125 bits a weight), each scale loaded once and shuffled"),
)
