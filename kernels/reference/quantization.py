"""Integer quantization: symmetric int8, asymmetric uint8, int8 GEMM (W8A8 too), packed int4 with group scales."""

import numbers

import numpy as np

from ._checks import _float64, _int_array, _int_scalar

__all__ = ["quantize_int8", "dequantize_int8", "quantize_uint8_asymmetric", "dequantize_uint8_asymmetric",
           "gemm_int8", "w8a8_matmul", "pack_int4", "unpack_int4", "quantize_int4_groups", "dequantize_int4_groups"]

# A float32 scale is never below the smallest normal float32: no division by zero for an
# all-zero channel, and no subnormal scale whose rounding would break the error bound.
_SMALLEST_SCALE = float(np.finfo(np.float32).tiny)


def _reduce_all_but(x, axis, reduce):
    """Reduce over every axis except ``axis`` (all axes when axis is None), keeping dims."""
    if x.size == 0:
        raise ValueError(f"x must not be empty to choose a scale, got shape {x.shape}")
    if axis is None:
        return reduce(x, axis=None, keepdims=True).reshape(())
    if x.ndim == 0:
        raise ValueError("axis must be None for a scalar x")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"axis must be an integer or None, got {type(axis).__name__} {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be in [{-x.ndim}, {x.ndim}) for x of shape {x.shape}, got {axis}")
    others = tuple(i for i in range(x.ndim) if i != axis % x.ndim)
    return reduce(x, axis=others, keepdims=True)


def _float32_scale(value, round_up=False):
    """float64 scale(s) -> float32, at least the smallest normal float32, optionally rounded up."""
    with np.errstate(over="ignore"):     # an overflow becomes inf, reported just below
        scale = np.asarray(value).astype(np.float32)
    if round_up:
        scale = np.where(scale.astype(np.float64) < value, np.nextafter(scale, np.float32(np.inf)), scale)
    if not np.all(np.isfinite(scale)):
        raise ValueError("x is too large: its scale does not fit in float32")
    return np.maximum(scale, np.float32(_SMALLEST_SCALE))


def quantize_int8(x, axis=None):
    """Symmetric int8 quantization: x ~ q * scale with q in [-127, 127].

    x: any shape, finite reals. axis: None for one scale for the whole tensor (per tensor), or
    the axis that gets one scale per index (per channel, e.g. axis=0 for one scale per row).
    scale = amax / 127 in float32, amax the largest |x| of the tensor or channel (at least the
    smallest normal float32, so an all-zero channel gets a tiny positive scale, not 0).
    q = rint(x / scale): round half to even, like ``np.rint`` and the GPU's default rounding.
    The range is [-127, 127], not [-128, 127], so that -x quantizes to -q.
    Returns: (q int8 shape of x, scale float32) with scale of shape () per tensor, or the shape of
    x with 1 on every axis except ``axis`` per channel, so ``q * scale`` broadcasts.
    Error: |x - q * scale| <= scale / 2.
    """
    x = _float64(x, "x")
    scale = _float32_scale(_reduce_all_but(np.abs(x), axis, np.max) / 127)
    q = np.clip(np.rint(x / scale), -127, 127).astype(np.int8)
    return q, scale


def dequantize_int8(q, scale):
    """q * scale in float64. q: int8, any shape; scale: float, broadcastable to q."""
    q = _int_array(q, "q")
    return q.astype(np.float64) * _float64(scale, "scale")


def quantize_uint8_asymmetric(x, axis=None):
    """Asymmetric uint8 quantization: x ~ (q - zero_point) * scale with q in [0, 255].

    x: any shape, finite reals. axis: None (per tensor) or the per-channel axis, as in
    ``quantize_int8``. The range [lo, hi] = [min(x, 0), max(x, 0)] always contains 0, so zero
    is stored exactly (padding and ReLU outputs stay exact).
    scale = (hi - lo) / 255, rounded up to float32 so that the 256 levels cover [lo, hi];
    zero_point = rint(-lo / scale) in [0, 255]; q = clip(rint(x / scale) + zero_point, 0, 255).
    Returns: (q uint8 shape of x, scale float32, zero_point int32), scale and zero_point shaped as
    in ``quantize_int8``. zero_point is int32 so that q - zero_point cannot wrap around.
    Error: |x - (q - zero_point) * scale| <= scale / 2.
    """
    x = _float64(x, "x")
    lo = np.minimum(_reduce_all_but(x, axis, np.min), 0.0)
    hi = np.maximum(_reduce_all_but(x, axis, np.max), 0.0)
    scale = _float32_scale((hi - lo) / 255, round_up=True)
    zero_point = np.clip(np.rint(-lo / scale), 0, 255).astype(np.int32)
    q = np.clip(np.rint(x / scale) + zero_point, 0, 255).astype(np.uint8)
    return q, scale, zero_point


def dequantize_uint8_asymmetric(q, scale, zero_point):
    """(q - zero_point) * scale in float64. q: uint8; scale, zero_point broadcastable to q."""
    q = _int_array(q, "q")
    zero_point = _int_array(zero_point, "zero_point")
    return (q.astype(np.float64) - zero_point) * _float64(scale, "scale")


# int8 products are at most 128 * 128 = 2**14 in magnitude, so an int32 sum of K of them is safe
# while K <= 2**31 // 2**14.
_INT8_GEMM_MAX_K = (2**31 - 1) // 2**14


def gemm_int8(a_q, a_scale, b_q, b_scale):
    """Quantized GEMM: int8 products accumulated in int32, then scaled once, in float64.

    a_q: (M, K) int8; a_scale: float32 of shape () (per tensor) or (M, 1) (per row, from
    ``quantize_int8(a, axis=0)``). b_q: (K, N) int8; b_scale: shape () or (1, N) (per column,
    from ``quantize_int8(b, axis=1)``). A scale along K could not be taken out of the sum.
    K is at most 131071, so the int32 accumulator cannot overflow.
    Returns: float64 (M, N) = (a_q @ b_q computed in int32) * a_scale * b_scale.
    """
    a_q = _int_array(a_q, "a_q")
    b_q = _int_array(b_q, "b_q")
    for name, arr, dims in (("a_q", a_q, "(M, K)"), ("b_q", b_q, "(K, N)")):
        if arr.dtype != np.int8:
            raise TypeError(f"{name} must have dtype int8, got {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"{name} must have 2 dimensions {dims}, got shape {arr.shape}")
    (M, K), (K_b, N) = a_q.shape, b_q.shape
    if K != K_b:
        raise ValueError(f"inner dimensions differ: a_q is {a_q.shape}, b_q is {b_q.shape}")
    if K > _INT8_GEMM_MAX_K:
        raise ValueError(f"K must be at most {_INT8_GEMM_MAX_K} for an int32 accumulator, got {K}")
    a_scale = _float64(a_scale, "a_scale")
    b_scale = _float64(b_scale, "b_scale")
    if a_scale.shape not in ((), (1, 1), (M, 1)):
        raise ValueError(f"a_scale must have shape () or ({M}, 1), got {a_scale.shape}")
    if b_scale.shape not in ((), (1, 1), (1, N)):
        raise ValueError(f"b_scale must have shape () or (1, {N}), got {b_scale.shape}")
    # Reads A (M*K int8) N times and B (K*N int8) M times; writes C once. Integer products and
    # sums are exact, so the only rounding is in the final scaling.
    accumulator = a_q.astype(np.int32) @ b_q.astype(np.int32)
    return accumulator * a_scale * b_scale


def w8a8_matmul(a_q, sa, w_q, sw):
    """W8A8 linear layer: int8 activations with a scale per token times int8 weights with a scale per output
    channel, ``y = (A_q W_q^T) * sa[:, None] * sw[None, :]``, the integer sum exact in int64, then scaled once.

    a_q: (M, K) int8, row m the codes of token m (``quantize_int8(a, axis=0)``); sa: (M,) per-token scales.
    w_q: (N, K) int8, row n the codes of output channel n, stored as a linear layer stores its weight
    (``quantize_int8(w, axis=0)``); sw: (N,) per-channel scales. K is at most 131071, so the sum also fits the
    int32 accumulator a kernel keeps (each product is at most 128 * 128 = 2**14 in magnitude).
    Returns: float64 (M, N), y[m, n] = sa[m] sw[n] sum_k a_q[m, k] w_q[n, k].
    """
    a_q = _int_array(a_q, "a_q")
    w_q = _int_array(w_q, "w_q")
    for name, arr, dims in (("a_q", a_q, "(M, K)"), ("w_q", w_q, "(N, K)")):
        if arr.dtype != np.int8:
            raise TypeError(f"{name} must have dtype int8, got {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"{name} must have 2 dimensions {dims}, got shape {arr.shape}")
    (M, K), (N, K_w) = a_q.shape, w_q.shape
    if K != K_w:
        raise ValueError(f"a_q and w_q must share K (their last dimension): a_q is {a_q.shape}, w_q is {w_q.shape}")
    if K > _INT8_GEMM_MAX_K:
        raise ValueError(f"K must be at most {_INT8_GEMM_MAX_K} for an int32 accumulator, got {K}")
    sa = _float64(sa, "sa", 1, "(M,)")
    sw = _float64(sw, "sw", 1, "(N,)")
    if sa.shape != (M,):
        raise ValueError(f"sa must have shape ({M},), one scale per row of a_q, got {sa.shape}")
    if sw.shape != (N,):
        raise ValueError(f"sw must have shape ({N},), one scale per row of w_q, got {sw.shape}")
    # Reads a row of A and a row of W per element of y (2 M N K int8 loads); writes y once. The sum is exact.
    sums = a_q.astype(np.int64) @ w_q.astype(np.int64).T
    return sums * sa[:, None] * sw[None, :]


def pack_int4(q):
    """Pack signed 4-bit integers two per byte.

    q: (..., K) integers in [-8, 7], K even. Each value is stored as its 4-bit two's complement
    (-1 -> 0b1111). Byte i holds element 2i in its low nibble and element 2i + 1 in its high
    nibble. (GGUF's Q4_0 uses another layout; see ``quantize_q4_0``.)
    Returns: uint8 (..., K // 2).
    """
    q = _int_array(q, "q")
    if q.ndim == 0 or q.shape[-1] % 2:
        raise ValueError(f"q must have an even last dimension to pack two per byte, got shape {q.shape}")
    if q.size and (q.min() < -8 or q.max() > 7):
        raise ValueError(f"q must lie in [-8, 7] to fit in 4 bits, got values in [{q.min()}, {q.max()}]")
    nibbles = (q.astype(np.int16) & 0x0F).astype(np.uint8)
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)


def unpack_int4(packed):
    """Inverse of ``pack_int4``. packed: uint8 (..., K // 2). Returns: int8 (..., K) in [-8, 7]."""
    packed = _int_array(packed, "packed")
    if packed.dtype != np.uint8:
        raise TypeError(f"packed must have dtype uint8, got {packed.dtype}")
    if packed.ndim == 0:
        raise ValueError("packed must have at least one dimension, got a scalar")
    low, high = packed & 0x0F, packed >> 4
    nibbles = np.stack([low, high], axis=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    return np.where(nibbles >= 8, nibbles.astype(np.int16) - 16, nibbles).astype(np.int8)


def quantize_int4_groups(x, group_size):
    """Symmetric int4 quantization with one scale per group of ``group_size`` along the last axis.

    x: (..., K) finite reals, K a multiple of group_size and even.
    scale = amax / 7 per group (float32), q = rint(x / scale) (half to even). int4 holds
    [-8, 7]; this quantizer uses [-7, 7] so that -x quantizes to -q (Q4_0 uses -8 instead, with
    a signed scale). Error: |x - q * scale| <= scale / 2.
    Returns: (packed uint8 (..., K // 2) as in ``pack_int4``, scales float32 (..., K // group_size)).
    """
    x = _float64(x, "x")
    group_size = _int_scalar(group_size, "group_size", 1)
    if x.ndim == 0 or x.shape[-1] % group_size or x.shape[-1] % 2:
        raise ValueError(
            f"the last dimension of x must be even and a multiple of group_size = {group_size}, "
            f"got shape {x.shape}")
    groups = x.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    scales = _float32_scale(np.max(np.abs(groups), axis=-1, initial=0.0) / 7)
    q = np.clip(np.rint(groups / scales[..., None]), -8, 7).astype(np.int8)
    return pack_int4(q.reshape(x.shape)), scales


def dequantize_int4_groups(packed, scales):
    """Inverse of ``quantize_int4_groups``: float64 (..., K).

    packed: uint8 (..., K // 2); scales: (..., K // group_size), the group size being inferred.
    """
    q = unpack_int4(packed)
    scales = _float64(scales, "scales")
    if scales.shape[:-1] != q.shape[:-1] or scales.ndim == 0 or scales.shape[-1] == 0 \
            or q.shape[-1] % scales.shape[-1]:
        raise ValueError(
            f"scales must have shape (..., K // group_size) matching packed {packed.shape} "
            f"(K = {q.shape[-1]}), got {scales.shape}")
    group_size = q.shape[-1] // scales.shape[-1]
    return q.astype(np.float64) * np.repeat(scales, group_size, axis=-1)
