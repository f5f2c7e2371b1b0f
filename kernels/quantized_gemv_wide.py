"""Quantized GEMV at the memory's speed: one launch, 16-byte loads (day 9's ladder, continued).

Shapes as in ``kernels.quantized_gemv_repacked``: W (N, K) as Q4_1 (the GGUF bytes, or ``q4_1_repack``'s
``Q4_1Repacked``), x (K,) float32, y (N,) float32, K = 32 blocks. The rung computes what
``q4_1_gemv_q8_1_dp4a`` computes, bit for bit: x quantized to q8_1 per block of 32 as
``quantized_gemv.q8_1_quantize_kernel`` quantizes it, each lane summing its blocks in the same order, the warp
summed by the same butterfly.

The rungs of day 9's whole ladder, ``RUNGS``, in order, one line each (the first six live in
``kernels.quantized_gemv`` and ``kernels.quantized_gemv_repacked``):

- ``q8_0_gemv_warp_per_row``: a warp per row, a lane per block, each byte read once, a shuffle sum.
- ``q4_0_gemv_warp_per_row``: Q4_0, two weights per byte: one load, both nibbles unpacked in registers.
- ``q4_1_gemv_warp_per_row``: Q4_1, the block minimum paid once per block through the block's sum of x.
- ``q4_1_gemv_q8_1_dp4a``: x quantized to int8 blocks (q8_1) first, then 4 int8 products per ``dp4a``.
- ``q4_1_gemv_q8_1_repacked``: weights repacked at load time, 8-byte loads, 8 blocks in flight per lane.
- ``q4_1_gemv_q8_1_small_batch``: each block of W loaded once for the T <= 16 tokens of a decode batch.
- ``q4_1_gemv_q8_1_wide``: one launch and 16-byte loads. Each block of threads quantizes x to q8_1 into its
  shared memory itself (no second kernel, no scratch array in global memory, no allocation per call), while
  the first weights it needs are already on their way; then each lane reads a whole Q4_1 block's 16 bytes of
  codes with one ``ld.global.nc.v4.u32`` (``kernels.intrinsics.load_u32x4``), so a warp's load instruction
  covers 512 consecutive bytes of a row, and ``WIDE_ROWS_PER_WARP`` rows x ``WIDE_BLOCKS_PER_LANE`` blocks are
  loaded before the first is used.
- ``q8_0_gemv_q8_1_wide``: the same for Q8_0, repacked once by ``q8_0_repack`` into 32 bytes of codes (two
  16-byte loads) and a uint16 scale per block: 8 dp4a of the int8 codes against x's, y += d d_x dot, one block
  a lane per step (its 8 words of codes take the registers two Q4_1 blocks take).

Why (Little's law, and what the recording of ``q4_1_gemv_q8_1_repacked`` showed): that rung reached 0.65 of
the copy bandwidth at 28672 x 8192 on an H200 (kernel time of its two launches) and 0.37 at 8192 x 8192. Its
lanes read 8 bytes 16 bytes apart (codes) and 32 bytes apart (activation codes, from L1), so each of its load
instructions moves half or a quarter of the bytes it touches: per 32 blocks of a row about 26 L1 wavefronts
for 640 bytes from DRAM, a load of L1 close to what 4.8 TB/s asks of it. Here a row's 32 blocks take one
code load (4 wavefronts) and one scale load (1); the activations come from shared memory, laid out word-major
(word i of every block, then word i + 1, ...) so that the 32 lanes of a warp read 32 consecutive words,
without bank conflicts, and each is shared by ``WIDE_ROWS_PER_WARP`` = 4 rows: about 8 wavefronts per row's 32
blocks, a third of the repacked rung's. The second launch and its gap (a few microseconds, a quarter of the
whole at 8192 x 8192, where W streams in about 10 us) are gone.

The price: every block of threads reads all of x (4 K bytes, from L2) and quantizes it, a lane per block of
32 (amax, the butterfly's sum in the same order as ``quantized_gemv.warp_sum``, the codes packed 4 to a word):
about 350 instructions a block of x, 2,800 a thread block at K = 8192 with 8 warps, some 4 us of the GPU's
issue slots at 28672 x 8192 (1,792 blocks of threads), spread over a kernel whose DRAM time is about 35 us,
and hidden behind the weight loads each warp issues before it. x's q8_1 blocks need 40 bytes of shared memory
per 32 values: K up to ``WIDE_MAX_K`` (48 KiB, the most a block gets without opting in); larger K is refused
with a message naming ``q4_1_gemv_q8_1_repacked``, which takes any K.

Prediction: the DRAM bytes are W's once, as in every rung since the repacked one, so the rung should stream W
at 0.85 to 0.9 of the copy bandwidth at 28672 x 8192 (about 38 us on an H200) and gain most at 8192 x 8192,
where the second launch weighed most. Measured (an H200, 2026-12-05, L2 flushed by a memset, the
GPU's time): the prediction failed. The Q4_1 rung took 74 us at 28672 x 8192 (0.47 of the copy bandwidth),
slower than the repacked rung's 54 us, and 27 us at 8192 x 8192, the repacked rung's time. The price above was
counted in issue slots, as if it overlapped the weight loads; the recording says the rung loses time somewhere.
Not mainly in the waves of blocks that each quantize x again: a probe on an H100 (not a course recording) ran this
kernel on a persistent grid (two blocks per SM, each quantizing x once, then looping over groups of 32 rows with
the next group's first weights loaded during the last step) and took 74 us at 28672 x 8192, against 82 us for
this rung and 64 us for the repacked rung's GEMV kernel alone. The rest is most likely in the main loop, which
issues a step's loads only after the step before has been multiplied, with 96 registers a thread limiting the
warps that could cover that wait; this module's rungs stay as they were measured.

Launcher ``q4_1_gemv_q8_1_wide(w, x, *, out=None, kernel=q4_1_gemv_q8_1_wide_kernel)``: grid ceil(N / 32)
blocks of ``WIDE_WARPS`` x 32 threads and (8 + 2) x 4 x K / 32 bytes of dynamic shared memory. NumPy arrays or
numba device arrays (``kernels.launching``); any N, K any multiple of 32 up to ``WIDE_MAX_K`` (K = 0 gives
zeros).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, uint32

from kernels.intrinsics import dp4a, load_u32x4, unpack_halves
from kernels.launching import (WARP, cdiv, is_device_array, output_array, require_array, require_float32,
                               require_same_kind)
from kernels.quantized_gemv import BLOCK_BYTES, NO_INVERSE, QK, round_half_away, warp_sum
from kernels import quantized_gemv_repacked
from kernels.quantized_gemv_repacked import CODE_WORDS, repacked_weights
from kernels.registry import Rung, ladder

__all__ = ["WIDE_WARPS", "WIDE_ROWS_PER_WARP", "WIDE_BLOCKS_PER_LANE", "WIDE_MAX_K", "activation_shared_bytes",
           "q4_1_gemv_q8_1_wide_kernel", "q4_1_gemv_q8_1_wide", "Q8_0Repacked", "q8_0_repack",
           "q8_0_gemv_q8_1_wide_kernel", "q8_0_gemv_q8_1_wide", "split_half_scales",
           "half_scale_weights", "shared_x_output", "RUNGS"]

WIDE_WARPS = 8                   # warps per block of threads: 32 rows share one quantization of x
WIDE_ROWS_PER_WARP = 4           # rows of W per warp, sharing each activation load
WIDE_BLOCKS_PER_LANE = 2         # blocks of each row a lane loads before it uses the first
_THREADS = WIDE_WARPS * WARP
_ROWS_PER_BLOCK = WIDE_WARPS * WIDE_ROWS_PER_WARP
_CHUNK = WIDE_BLOCKS_PER_LANE * WARP        # blocks of a row a warp takes per step
_ACT_WORDS = QK // 4                        # uint32 words of a block's 32 activation codes
_SHARED_WORDS_PER_BLOCK = _ACT_WORDS + 2    # 8 words of codes, a scale and a sum
_SHARED_LIMIT = 48 * 1024
WIDE_MAX_K = _SHARED_LIMIT // (4 * _SHARED_WORDS_PER_BLOCK) * QK
_LOW_NIBBLES = 0x0F0F0F0F
_HALF_BLOCK = QK // 2


def activation_shared_bytes(k: int) -> int:
    """Bytes of dynamic shared memory the rung asks for at K = ``k``: x's q8_1 blocks."""
    return 4 * _SHARED_WORDS_PER_BLOCK * (k // QK)


@cuda.jit(device=True, inline=True)
def _quantize_block(x, b, blocks, codes, floats):
    """x[32 b : 32 b + 32] as q8_1, by one thread, into shared memory: codes[i * blocks + b] holds codes 4 i to
    4 i + 3 (the first in the low byte), floats[8 blocks + b] the scale amax / 127 and floats[9 blocks + b] the sum
    of x, added in the order of ``quantized_gemv.warp_sum``'s butterfly (so the bits equal the warp's)."""
    v = cuda.local.array(QK, float32)
    s = cuda.local.array(_HALF_BLOCK, float32)
    amax = float32(0.0)
    for j in range(QK):
        v[j] = x[b * QK + j]
        amax = max(amax, abs(v[j]))
    # the butterfly: offset 16 pairs j with j + 16, then 8, 4, 2, 1, every lane ending with the same bits
    for j in range(16):
        s[j] = v[j] + v[j + 16]
    for j in range(8):
        s[j] = s[j] + s[j + 8]
    for j in range(4):
        s[j] = s[j] + s[j + 4]
    for j in range(2):
        s[j] = s[j] + s[j + 2]
    total = s[0] + s[1]
    d = amax / float32(127.0)
    inverse = float32(1.0) / d if d > float32(NO_INVERSE) else float32(0.0)
    for i in range(_ACT_WORDS):
        word = uint32(0)
        for k in range(4):
            word |= uint32(round_half_away(v[4 * i + k] * inverse) & 0xFF) << uint32(8 * k)
        codes[i * blocks + b] = word
    floats[_ACT_WORDS * blocks + b] = d
    floats[(_ACT_WORDS + 1) * blocks + b] = total


def _build(fmt: str):
    """The rung's kernel for ``fmt``: "q4_1" (a block's 16 bytes of codes in one load, its d and m in one word,
    2 blocks a lane per step) or "q8_0" (32 bytes of int8 codes in two loads, d as a uint16, 1 block a lane)."""
    q4 = fmt == "q4_1"
    code_words = CODE_WORDS if q4 else _ACT_WORDS
    per_lane = WIDE_BLOCKS_PER_LANE if q4 else 1
    chunk = per_lane * WARP

    def kernel(codes, scales, x, y):
        shared_codes = cuda.shared.array(0, uint32)
        shared_floats = cuda.shared.array(0, float32)      # the same bytes: scales and sums after the codes
        lane = cuda.threadIdx.x % WARP
        warp = cuda.threadIdx.x // WARP
        n = scales.shape[0]
        blocks = scales.shape[1]
        first = cuda.blockIdx.x * _ROWS_PER_BLOCK + warp * WIDE_ROWS_PER_WARP
        w_codes = cuda.local.array((WIDE_ROWS_PER_WARP, per_lane, code_words), uint32)
        w_scales = cuda.local.array((WIDE_ROWS_PER_WARP, per_lane), uint32)
        acc = cuda.local.array(WIDE_ROWS_PER_WARP, float32)
        a = cuda.local.array(_ACT_WORDS, uint32)
        for r in range(WIDE_ROWS_PER_WARP):
            acc[r] = float32(0.0)
        # the first chunk's weights, on their way while x is quantized
        for u in range(per_lane):
            b = u * WARP + lane
            for r in range(WIDE_ROWS_PER_WARP):
                if first + r < n and b < blocks:
                    for i in range(0, code_words, 4):
                        (w_codes[r, u, i], w_codes[r, u, i + 1], w_codes[r, u, i + 2],
                         w_codes[r, u, i + 3]) = load_u32x4(codes, first + r, code_words * b + i)
                    w_scales[r, u] = uint32(scales[first + r, b])
                else:
                    for i in range(code_words):
                        w_codes[r, u, i] = uint32(0)
                    w_scales[r, u] = uint32(0)
        for b in range(cuda.threadIdx.x, blocks, _THREADS):
            _quantize_block(x, b, blocks, shared_codes, shared_floats)
        cuda.syncthreads()
        if first < n:                        # the same for the whole warp: its shuffles see all 32 lanes
            for start in range(0, blocks, chunk):
                for u in range(per_lane):
                    b = start + u * WARP + lane
                    if b < blocks:
                        a_scale = shared_floats[_ACT_WORDS * blocks + b]
                        a_sum = shared_floats[(_ACT_WORDS + 1) * blocks + b]
                        for i in range(_ACT_WORDS):
                            a[i] = shared_codes[i * blocks + b]
                        for r in range(WIDE_ROWS_PER_WARP):
                            dot = int32(0)
                            d, m = unpack_halves(w_scales[r, u])
                            if q4:
                                for i in range(CODE_WORDS):
                                    word = w_codes[r, u, i]
                                    dot = dp4a(uint32(word & _LOW_NIBBLES), a[i], dot)
                                    dot = dp4a(uint32((word >> uint32(4)) & _LOW_NIBBLES), a[CODE_WORDS + i], dot)
                                acc[r] += d * a_scale * float32(dot) + m * a_sum
                            else:
                                for i in range(_ACT_WORDS):
                                    dot = dp4a(w_codes[r, u, i], a[i], dot)
                                acc[r] += d * a_scale * float32(dot)
                following = start + chunk
                if following < blocks:
                    for u in range(per_lane):
                        b = following + u * WARP + lane
                        for r in range(WIDE_ROWS_PER_WARP):
                            if first + r < n and b < blocks:
                                for i in range(0, code_words, 4):
                                    (w_codes[r, u, i], w_codes[r, u, i + 1], w_codes[r, u, i + 2],
                                     w_codes[r, u, i + 3]) = load_u32x4(codes, first + r, code_words * b + i)
                                w_scales[r, u] = uint32(scales[first + r, b])
            for r in range(WIDE_ROWS_PER_WARP):
                total = warp_sum(acc[r])
                if lane == 0 and first + r < n:
                    y[first + r] = total

    kernel.__name__ = kernel.__qualname__ = f"{fmt}_gemv_q8_1_wide_kernel"
    kernel.__doc__ = (f"Block of threads j computes rows 32 j ... 32 j + 31 of y = W x, warp w of it rows 4 w ... 4 w + 3 "
                      f"of those; W {fmt} repacked (codes (N, blocks * {code_words}) uint32, scales (N, blocks)); x (K,) "
                      "float32. Each warp loads its first chunk of weights, the block quantizes x into shared memory, "
                      f"a barrier, then per chunk of {chunk} blocks: the arithmetic in registers, then the next loads.")
    return cuda.jit(kernel)


q4_1_gemv_q8_1_wide_kernel = _build("q4_1")
q8_0_gemv_q8_1_wide_kernel = _build("q8_0")


class Q8_0Repacked(NamedTuple):
    """Q8_0 weights laid out for ``q8_0_gemv_q8_1_wide``: ``codes`` (N, blocks, 8) uint32, each block's 32 int8
    codes (4 a word, the first in the low byte) starting on a 16-byte boundary, and ``scales`` (N, blocks) uint16,
    the bits of each block's fp16 d."""

    codes: object
    scales: object


def split_half_scales(w, fmt: str, kind):
    """GGUF blocks of ``fmt`` ("q8_0" or "q4_0": an fp16 d, then the codes) w (N, blocks, block bytes) uint8 split
    as ``kind(codes, scales)``: codes (N, blocks, words) uint32 starting on 16-byte boundaries, scales (N, blocks)
    uint16, the bits of each d. A load-time step on the host: a device array is copied to the host and the two
    arrays back (NumPy in, NumPy out)."""
    n, blocks, _ = require_array("w", w, (None, None, BLOCK_BYTES[fmt]), np.uint8,
                                 dims=("rows", "blocks", f"{fmt}_block_bytes"))
    host = w.copy_to_host() if is_device_array(w) else w
    codes = np.ascontiguousarray(host[..., 2:]).view(np.uint32).reshape(n, blocks, (BLOCK_BYTES[fmt] - 2) // 4)
    scales = np.ascontiguousarray(host[..., :2]).view(np.uint16).reshape(n, blocks)
    if is_device_array(w):
        return kind(cuda.to_device(codes), cuda.to_device(scales))
    return kind(codes, scales)


def half_scale_weights(w, x, fmt: str, kind, repack) -> tuple:
    """``(repacked w, N, blocks)`` for a launcher over ``kind`` (``split_half_scales``' layout of ``fmt``): w
    already repacked is checked, the GGUF bytes are checked and repacked by ``repack``; either must be of x's kind
    (NumPy or device)."""
    words = (BLOCK_BYTES[fmt] - 2) // 4
    if isinstance(w, kind):
        n, blocks, _ = require_array("w.codes", w.codes, (None, None, words), np.uint32,
                                     dims=("rows", "blocks", "code_words"))
        require_array("w.scales", w.scales, (n, blocks), np.uint16, dims=("rows", "blocks"))
        require_same_kind(**{"w.codes": w.codes, "w.scales": w.scales, "x": x})
        return w, n, blocks
    if isinstance(w, tuple):
        raise TypeError(f"w must be {fmt.upper()} GGUF bytes (rows, blocks, {BLOCK_BYTES[fmt]}) or {repack.__name__}'s "
                        f"{kind.__name__}, got a {type(w).__name__} of {len(w)}")
    n, blocks, _ = require_array("w", w, (None, None, BLOCK_BYTES[fmt]), np.uint8,
                                 dims=("rows", "blocks", f"{fmt}_block_bytes"))
    require_same_kind(w=w, x=x)
    return repack(w), n, blocks


def q8_0_repack(w) -> Q8_0Repacked:
    """The Q8_0 GGUF bytes w (N, blocks, 34) uint8 (d as fp16, then 32 int8 codes) split as ``Q8_0Repacked``: a
    load-time step on the host, a device array copied to the host and the two arrays back (NumPy in, NumPy out)."""
    return split_half_scales(w, "q8_0", Q8_0Repacked)


def shared_x_output(name: str, x, n: int, blocks: int, out, *, max_k: int, any_k: str):
    """The checks of a launcher whose blocks of threads keep x's q8_1 blocks in shared memory: x (K,) float32 with
    K = 32 ``blocks`` at most ``max_k`` (a larger K is refused, naming ``any_k``, a rung that takes it), ``out``
    (n,) float32 if given; returns the output array (``out``, or a new one of x's kind)."""
    k = blocks * QK
    require_float32("x", x, (k,), dims=("K",))
    if k > max_k:
        raise ValueError(f"x must have K at most {max_k} for {name} (its q8_1 blocks live in 48 KiB of shared "
                         f"memory), got K = {k}: {any_k} takes any K")
    if out is not None:
        require_float32("out", out, (n,), dims=("rows",))
    return output_array("out", out, (n,), like=x)


def _launch(name, kernel, w, n, blocks, x, out):
    k = blocks * QK
    out = shared_x_output(name, x, n, blocks, out, max_k=WIDE_MAX_K, any_k=_ANY_K[name])
    if n:
        words = w.codes.shape[2]
        kernel[cdiv(n, _ROWS_PER_BLOCK), _THREADS, 0, activation_shared_bytes(k)](
            w.codes.reshape(n, blocks * words), w.scales, x, out)
    return out


_ANY_K = {"q4_1_gemv_q8_1_wide": "q4_1_gemv_q8_1_repacked", "q8_0_gemv_q8_1_wide": "q8_0_gemv_warp_per_row"}


def q4_1_gemv_q8_1_wide(w, x, *, out=None, kernel=q4_1_gemv_q8_1_wide_kernel):
    """y = W x for Q4_1 weights ``w`` (the GGUF bytes (N, blocks, 20), repacked here, or ``q4_1_repack(w)``) and
    x (K,) float32, K a multiple of 32 up to ``WIDE_MAX_K``: one launch of ``kernel``, which quantizes x to q8_1
    in each block's shared memory and reads the codes 16 bytes at a time."""
    w, n, blocks = repacked_weights(w, x)
    return _launch("q4_1_gemv_q8_1_wide", kernel, w, n, blocks, x, out)


def q8_0_gemv_q8_1_wide(w, x, *, out=None, kernel=q8_0_gemv_q8_1_wide_kernel):
    """y = W x for Q8_0 weights ``w`` (the GGUF bytes (N, blocks, 34), repacked here, or ``q8_0_repack(w)``) and
    x (K,) float32, K a multiple of 32 up to ``WIDE_MAX_K``: as ``q4_1_gemv_q8_1_wide``, each block's 32 int8
    codes in two 16-byte loads and 8 dp4a against x's q8_1 codes, y += d d_x dot."""
    w, n, blocks = half_scale_weights(w, x, "q8_0", Q8_0Repacked, q8_0_repack)
    return _launch("q8_0_gemv_q8_1_wide", kernel, w, n, blocks, x, out)


RUNGS = ladder(
    *quantized_gemv_repacked.RUNGS.values(),
    Rung("q4_1_gemv_q8_1_wide", q4_1_gemv_q8_1_wide,
         "one launch (x quantized to q8_1 in each block's shared memory) and a whole block's codes per 16-byte load"),
    Rung("q8_0_gemv_q8_1_wide", q8_0_gemv_q8_1_wide,
         "the same for Q8_0: 32 int8 codes in two 16-byte loads, 8 dp4a against x's q8_1 codes"),
)
