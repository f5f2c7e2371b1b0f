"""The GGUF (llama.cpp) block formats Q8_0, Q4_0 and Q4_1, bit for bit, q8_1 activations, and the course's int4
with an fp16 scale per group of 128 (``quantize_int4_g128``) in blocks laid out as Q4_0's."""

import numpy as np

from ._checks import _float64, _int_array

__all__ = ["GGUF_BLOCK_SIZE", "Q8_0_BLOCK_BYTES", "Q4_0_BLOCK_BYTES", "Q4_1_BLOCK_BYTES",
           "quantize_q8_0", "dequantize_q8_0", "quantize_q4_0", "dequantize_q4_0", "quantize_q4_1",
           "dequantize_q4_1", "quantize_q8_1", "gemv_q8_1", "INT4_GROUP", "INT4_G128_BLOCK_BYTES",
           "quantize_int4_g128", "dequantize_int4_g128"]

GGUF_BLOCK_SIZE = 32     # values per block, in Q8_0, Q4_0 and Q4_1
Q8_0_BLOCK_BYTES = 34    # fp16 scale d (2 bytes) + 32 int8 values
Q4_0_BLOCK_BYTES = 18    # fp16 scale d (2 bytes) + 32 4-bit values, two per byte
Q4_1_BLOCK_BYTES = 20    # fp16 scale d and fp16 minimum m (2 bytes each) + 32 4-bit values, two per byte
INT4_GROUP = 128         # values per block of int4_g128: a group of 128 with one scale
INT4_G128_BLOCK_BYTES = 66   # fp16 scale d (2 bytes) + 128 4-bit values, two per byte


def _gguf_blocks(x):
    """x (..., K) -> float32 blocks (n_blocks, 32), as llama.cpp quantizes float32 rows."""
    x = _float64(x, "x")
    if x.ndim == 0 or x.shape[-1] % GGUF_BLOCK_SIZE:
        raise ValueError(f"the last dimension of x must be a multiple of {GGUF_BLOCK_SIZE}, got shape {x.shape}")
    with np.errstate(over="ignore"):     # beyond float32: inf, then a scale that cannot be stored
        return x.astype(np.float32).reshape(-1, GGUF_BLOCK_SIZE)


def _inverse_or_zero(d):
    """1 / d in float32; 0 for an all-zero block, as llama.cpp does, and 0 for a block so small
    (|d| <= 2**-128) that 1 / d overflows, where llama.cpp's result is undefined (its fp16 d is 0)."""
    with np.errstate(divide="ignore", over="ignore"):
        inverse = np.float32(1) / d
    return np.where(np.isfinite(inverse), inverse, np.float32(0))


def _fp16_scale_bytes(d, what="scale"):
    """Block scales d (n_blocks, 1) float32 -> their little-endian fp16 bytes (n_blocks, 2); ``what`` names
    the number in the error (Q4_1 stores its blocks' minimums this way too)."""
    with np.errstate(over="ignore"):     # an overflow becomes inf, reported just below
        d16 = d.astype("<f2")
    if not np.all(np.isfinite(d16)):
        raise ValueError(f"x is too large: a block {what} does not fit in fp16 (max 65504)")
    return d16.view(np.uint8)


def _round_half_away_from_zero(v):
    """C's roundf on float32 values, computed in float64 where |v| + 0.5 is exact."""
    v = v.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _gguf_bytes(data, block_bytes, fmt):
    """Check a uint8 array (..., n_blocks * block_bytes); return each block's fp16 d as float64
    (n_blocks, 1), the rest of each block's bytes (n_blocks, block_bytes - 2) and the values' shape."""
    data = _int_array(data, "data")
    if data.dtype != np.uint8:
        raise TypeError(f"data must have dtype uint8 (the {fmt} bytes), got {data.dtype}")
    if data.ndim == 0 or data.shape[-1] % block_bytes:
        raise ValueError(f"the last dimension of data must be a multiple of {block_bytes} ({fmt} block size), "
                         f"got shape {data.shape}")
    blocks = np.ascontiguousarray(data).reshape(-1, block_bytes)
    d = blocks[:, :2].copy().view("<f2").astype(np.float64)      # (n_blocks, 1)
    out_shape = (*data.shape[:-1], data.shape[-1] // block_bytes * GGUF_BLOCK_SIZE)
    return d, blocks[:, 2:], out_shape


def quantize_q8_0(x):
    """GGUF Q8_0: blocks of 32 values, an fp16 scale and 32 int8 values, 34 bytes per block.

    x: (..., K) finite reals, K a multiple of 32; it is first rounded to float32, then per block,
    all in float32 like llama.cpp: d = amax / 127, q = round(x * (1 / d)) rounding halves away
    from zero (C's roundf; an all-zero block has d = 0 and q = 0). d is stored rounded to fp16.
    Returns: uint8 (..., K // 32 * 34); each block is [d as little-endian fp16][q0 .. q31].
    """
    blocks = _gguf_blocks(x)
    d = np.max(np.abs(blocks), axis=1, keepdims=True) / np.float32(127)
    d_bytes = _fp16_scale_bytes(d)
    q = _round_half_away_from_zero(blocks * _inverse_or_zero(d)).astype(np.int8)
    out = np.concatenate([d_bytes, q.view(np.uint8)], axis=1)
    x_shape = np.shape(x)
    return out.reshape(*x_shape[:-1], x_shape[-1] // GGUF_BLOCK_SIZE * Q8_0_BLOCK_BYTES)


def dequantize_q8_0(data):
    """Q8_0 bytes (..., n_blocks * 34) uint8 -> float64 (..., n_blocks * 32): d * q.

    The values equal llama.cpp's float32 results exactly (an fp16 times an int8 is exact).
    """
    d, qs, out_shape = _gguf_bytes(data, Q8_0_BLOCK_BYTES, "Q8_0")
    return (d * qs.view(np.int8)).reshape(out_shape)


def quantize_q4_0(x):
    """GGUF Q4_0: blocks of 32 values, an fp16 scale and 32 4-bit values, 18 bytes per block.

    x: (..., K) finite reals, K a multiple of 32, first rounded to float32. Per block, in float32
    like llama.cpp: m = the first value of largest magnitude, with its sign; d = m / -8, so m
    itself maps to code 0 (value -8 d) and the full range [-8, 7] is used;
    q = min(15, trunc(x * (1 / d) + 8.5)), an unsigned code for the value (q - 8) * d
    (adding 8.5 then truncating rounds halves up). d is stored rounded to fp16.
    Packing: byte j (0..15) holds element j in its low nibble and element j + 16 in its high
    nibble. Returns: uint8 (..., K // 32 * 18); each block is [d as little-endian fp16][16 bytes].
    """
    blocks = _gguf_blocks(x)
    # argmax returns the first index on ties, as llama.cpp's loop with its strict '<' does.
    first_largest = np.argmax(np.abs(blocks), axis=1)[:, None]
    d = np.take_along_axis(blocks, first_largest, axis=1) / np.float32(-8)
    d_bytes = _fp16_scale_bytes(d)
    shifted = blocks * _inverse_or_zero(d) + np.float32(8.5)   # float32, in [0.5, 16.5]
    q = np.clip(np.trunc(shifted), 0, 15).astype(np.uint8)
    out = np.concatenate([d_bytes, _pack_nibbles(q)], axis=1)
    x_shape = np.shape(x)
    return out.reshape(*x_shape[:-1], x_shape[-1] // GGUF_BLOCK_SIZE * Q4_0_BLOCK_BYTES)


def dequantize_q4_0(data):
    """Q4_0 bytes (..., n_blocks * 18) uint8 -> float64 (..., n_blocks * 32): d * (q - 8).

    The values equal llama.cpp's float32 results exactly.
    """
    d, packed, out_shape = _gguf_bytes(data, Q4_0_BLOCK_BYTES, "Q4_0")
    return (d * (_unpack_nibbles(packed) - 8)).reshape(out_shape)


def _pack_nibbles(q):
    """Codes (n_blocks, 32) in 0..15 -> (n_blocks, 16) bytes: byte j holds code j low, code j + 16 high."""
    half = GGUF_BLOCK_SIZE // 2
    return q[:, :half] | (q[:, half:] << 4)


def _unpack_nibbles(packed):
    """(n_blocks, 16) bytes -> the codes (n_blocks, 32) int64: elements 0..15 low nibbles, 16..31 high."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.int64)


def quantize_q4_1(x):
    """GGUF Q4_1: blocks of 32 values, an fp16 scale, an fp16 minimum and 32 4-bit codes, 20 bytes per block.

    x: (..., K) finite reals, K a multiple of 32, first rounded to float32. Per block, in float32
    like llama.cpp: m = the smallest value, d = (largest - m) / 15, so the codes 0 ... 15 span the
    block from its minimum to its maximum; q = min(15, trunc((x - m) * (1 / d) + 0.5)) (halves round up;
    a constant block has d = 0 and every q = 0), an unsigned code for the value d q + m. d and m are
    stored rounded to fp16 (the codes are computed with the float32 ones, as llama.cpp does).
    Packing as Q4_0: byte j (0..15) holds element j in its low nibble and element j + 16 in its high
    nibble. Returns: uint8 (..., K // 32 * 20); each block is [d as little-endian fp16][m as
    little-endian fp16][16 bytes].
    """
    blocks = _gguf_blocks(x)
    low = np.min(blocks, axis=1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):    # a range beyond float32: reported below
        d = (np.max(blocks, axis=1, keepdims=True) - low) / np.float32(15)
    d_bytes = _fp16_scale_bytes(d)
    m_bytes = _fp16_scale_bytes(low, "minimum")
    shifted = (blocks - low) * _inverse_or_zero(d) + np.float32(0.5)   # float32, in [0.5, 15.5]
    q = np.clip(np.trunc(shifted), 0, 15).astype(np.uint8)
    out = np.concatenate([d_bytes, m_bytes, _pack_nibbles(q)], axis=1)
    x_shape = np.shape(x)
    return out.reshape(*x_shape[:-1], x_shape[-1] // GGUF_BLOCK_SIZE * Q4_1_BLOCK_BYTES)


def dequantize_q4_1(data):
    """Q4_1 bytes (..., n_blocks * 20) uint8 -> float64 (..., n_blocks * 32): d * q + m, rounded to float32.

    The values equal llama.cpp's float32 results exactly: d q is exact in float32 (11 by 4 significant
    bits), and the sum with m is rounded once to float32, as llama.cpp's float32 arithmetic does (a fused
    multiply-add gives the same number). The exact d q + m differs from it by at most half a float32 step.
    """
    d, rest, out_shape = _gguf_bytes(data, Q4_1_BLOCK_BYTES, "Q4_1")
    m = rest[:, :2].copy().view("<f2").astype(np.float32)
    values = d.astype(np.float32) * _unpack_nibbles(rest[:, 2:]).astype(np.float32) + m
    return values.astype(np.float64).reshape(out_shape)


def quantize_int4_g128(x):
    """int4 in groups of 128 with an fp16 scale (GPTQ's and AWQ's kind of format, rounded to nearest), in blocks of
    66 bytes laid out for day 9's GEMV: 4.125 bits a weight.

    x: (..., K) finite reals, K a multiple of 128. Per group, as ``quantization.quantize_int4_groups`` (group 128):
    d = amax / 7 in float32, stored rounded to fp16; the codes q = rint(x / d) (halves to even, in float64, on the
    stored d; an all-zero group, or one whose d rounds to 0 in fp16, gets q = 0), clipped to [-8, 7]; the value of
    code q is d q. Layout: [d as little-endian fp16] then 4 runs of 16 bytes, run r holding values 32 r ... 32 r +
    31 as Q4_0 does, q + 8 (0 ... 15) with byte j holding value j in its low nibble and j + 16 in its high one.
    Returns: uint8 (..., K // 128 * 66).
    """
    x = _float64(x, "x")
    if x.ndim == 0 or x.shape[-1] % INT4_GROUP:
        raise ValueError(f"the last dimension of x must be a multiple of {INT4_GROUP}, got shape {x.shape}")
    with np.errstate(over="ignore"):
        groups = x.astype(np.float32).reshape(-1, INT4_GROUP)
    d = np.max(np.abs(groups), axis=1, keepdims=True) / np.float32(7)
    d_bytes = _fp16_scale_bytes(d)
    d16 = d_bytes.copy().view("<f2").astype(np.float64)                 # (groups, 1): the stored scale
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d16 > 0, np.rint(groups.astype(np.float64) / np.where(d16 > 0, d16, 1.0)), 0.0)
    codes = (np.clip(q, -8, 7) + 8).astype(np.uint8).reshape(-1, GGUF_BLOCK_SIZE)   # runs of 32, as Q4_0's blocks
    runs = _pack_nibbles(codes).reshape(len(groups), -1)                # (groups, 64)
    out = np.concatenate([d_bytes, runs], axis=1)
    x_shape = np.shape(x)
    return out.reshape(*x_shape[:-1], x_shape[-1] // INT4_GROUP * INT4_G128_BLOCK_BYTES)


def dequantize_int4_g128(data):
    """int4_g128 bytes (..., n_groups * 66) uint8 -> float64 (..., n_groups * 128): d (q - 8) for each stored code q
    (0 ... 15) and its group's fp16 d."""
    d, packed, _ = _gguf_bytes(data, INT4_G128_BLOCK_BYTES, "int4_g128")
    codes = _unpack_nibbles(packed.reshape(-1, GGUF_BLOCK_SIZE // 2)).reshape(len(d), INT4_GROUP)
    return (d * (codes - 8)).reshape(*data.shape[:-1], data.shape[-1] // INT4_G128_BLOCK_BYTES * INT4_GROUP)


def quantize_q8_1(x):
    """Activations quantized per block of 32 for integer dot products (llama.cpp's q8_1 idea): int8 codes,
    a scale, and the block's sum of x, so a Q4_1 block's minimum m costs one product, m times the sum.

    x: (..., K) finite reals, K a multiple of 32, first rounded to float32. The codes are Q8_0's, computed
    the same way in float32: d = amax / 127, q = round(x * (1 / d)), halves away from zero (an all-zero block:
    d = 0, q = 0); the value of code q is d q. Unlike a stored GGUF block, d is kept in float32 (llama.cpp
    keeps d and the sum as two fp16 numbers): these blocks are made for one product and never stored.
    Returns (q, d, s): q int8 (..., K), d float32 (..., K // 32), s float64 (..., K // 32) the exact sums
    of the float32 values of x, block by block.
    """
    blocks = _gguf_blocks(x)
    d = np.max(np.abs(blocks), axis=1, keepdims=True) / np.float32(127)
    q = _round_half_away_from_zero(blocks * _inverse_or_zero(d)).astype(np.int8)
    x_shape = np.shape(x)
    block_shape = (*x_shape[:-1], x_shape[-1] // GGUF_BLOCK_SIZE)
    sums = blocks.astype(np.float64).sum(axis=1)
    return q.reshape(x_shape), d.reshape(block_shape), sums.reshape(block_shape)


def dequantize_q8_1(q, d):
    """The values of ``quantize_q8_1``'s blocks, float64: code times its block's scale, d q, (..., K) for q int8
    (..., K) and d (..., K // 32)."""
    q = np.asarray(q)
    blocks = q.reshape(-1, GGUF_BLOCK_SIZE).astype(np.float64) * np.asarray(d, np.float64).reshape(-1, 1)
    return blocks.reshape(q.shape)


def gemv_q8_1(w, x, fmt):
    """W x as day 9's q8_1 GEMV rungs define it, float64: GGUF bytes ``w`` (N, blocks, block bytes) of ``fmt``
    ("q8_0", "q4_0", "q4_1", or "int4_g128", whose blocks are groups of 128) times x (K,) or a batch (T, K), x
    quantized to q8_1 (``quantize_q8_1``) in the codes' product and taken exactly in the minimum's: sum over blocks
    of 32 of d sum_j q_j x^_j + m s, x^ the q8_1 values, s the block's exact sum of x, m Q4_1's minimum, -8 d for
    Q4_0 and int4_g128 (a weight d (q - 8) is d q + m; int4_g128's d is its group's, for each of the group's 4
    blocks) and 0 for Q8_0. Returns (N,), or (T, N) for a batch."""
    dequantize = {"q8_0": dequantize_q8_0, "q4_0": dequantize_q4_0, "q4_1": dequantize_q4_1,
                  "int4_g128": dequantize_int4_g128}.get(fmt)
    if dequantize is None:
        raise ValueError(f"fmt must be one of 'q8_0', 'q4_0', 'q4_1', 'int4_g128', got {fmt!r}")
    tokens = np.atleast_2d(np.asarray(x, np.float32))
    codes, scales, sums = quantize_q8_1(tokens)
    x_hat = dequantize_q8_1(codes, scales)                                 # (T, K)
    w = np.asarray(w)
    y = dequantize(w.reshape(w.shape[0], -1)) @ x_hat.T                    # (N, T): the values d q + m times x^
    if fmt != "q8_0":                                                      # m times the exact sums, not x^'s
        d = w[..., :2].copy().view("<f2")[..., 0].astype(np.float64)
        if fmt == "int4_g128":                                             # a group's d for each of its 4 blocks
            d = np.repeat(d, INT4_GROUP // GGUF_BLOCK_SIZE, axis=-1)
        m = w[..., 2:4].copy().view("<f2")[..., 0].astype(np.float64) if fmt == "q4_1" else -8 * d
        x_hat_sums = x_hat.reshape(len(tokens), -1, GGUF_BLOCK_SIZE).sum(axis=2)
        y += m @ (np.asarray(sums, np.float64) - x_hat_sums).T
    return y.T if np.ndim(x) == 2 else y[:, 0]
