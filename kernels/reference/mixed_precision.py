"""Mixed precision: fp8 (e4m3) codes with a float32 scale per group, and attention at a storage precision.

An fp8 cache stores each value as one byte, the bits of the float8 e4m3fn number nearest to
``value / scale`` (1 sign bit, 4 exponent bits of bias 7, 3 mantissa bits; no infinity; codes 0x7f
and 0xff are NaN; the largest finite value is 448), and one float32 ``scale`` per group of values
(one page of one KV head, say). ``value ~ code * scale``.

- ``E4M3_MAX``: 448.0, the largest finite e4m3 value
- ``fp8_e4m3_values()``: the value of each of the 256 codes, float64 (NaN for 0x7f and 0xff)
- ``quantize_fp8(x, scales=None, *, group_ndim=2)``: codes (uint8) and scales (float32), bit for bit
  as the course's quantize kernel computes them
- ``dequantize_fp8(codes, scales, *, group_ndim=2)``: ``code value * scale`` in float64
- ``attention_at_precision(q, k, v, fmt, ...)``: attention whose inputs and output are stored at a
  low precision (``round_to``) and whose arithmetic is exact (float64): the "same computation done
  in NumPy at the same storage precision" that a mixed-precision kernel is judged against
"""

import numpy as np

from ._checks import _int_scalar, _real_array
from .low_precision import FLOAT_FORMATS, round_to
from .softmax_attention import attention

__all__ = ["E4M3_MAX", "fp8_e4m3_values", "quantize_fp8", "dequantize_fp8", "attention_at_precision"]

E4M3_MAX = 448.0
_E4M3 = FLOAT_FORMATS["fp8_e4m3"]
_SMALLEST_NORMAL = 2.0 ** _E4M3["min_exponent"]        # 2**-6; below it codes step by 2**-9
_SUBNORMAL_STEP = 2.0 ** (_E4M3["min_exponent"] - 3)    # 2**-9


def fp8_e4m3_values():
    """The value of each code 0 ... 255 of float8 e4m3fn, float64 (256,).

    Code ``s eeee mmm``: ``(-1)**s * 2**(e - 7) * (1 + m / 8)`` for e >= 1 (normal), ``(-1)**s *
    2**-6 * m / 8`` for e = 0 (subnormal, 0 and -0 included); 0x7f and 0xff are NaN (e4m3fn has no
    infinity, so its largest value is ``0x7e`` = 448).
    """
    codes = np.arange(256)
    e, m = (codes >> 3) & 0xF, codes & 0x7
    magnitude = np.where(e == 0, m * _SUBNORMAL_STEP, (8 + m) * 2.0 ** (e - 10))
    values = np.where(codes & 0x80, -magnitude, magnitude)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values


def _e4m3_codes(y):
    """Codes of values ``y`` that are already e4m3 numbers (finite and at most 448 in magnitude, or NaN)."""
    nan = np.isnan(y)
    a = np.where(nan, 0.0, np.abs(y))
    normal = a >= _SMALLEST_NORMAL
    _, exponent = np.frexp(np.where(normal, a, 1.0))        # a = f * 2**exponent, f in [0.5, 1)
    # normal: exponent field e - 1 + 7, mantissa 16 f - 8; subnormal: the multiple of 2**-9
    codes = np.where(normal, ((exponent + 6) << 3) + np.rint(a * 2.0 ** (4 - exponent)).astype(np.int64) - 8,
                     np.rint(a / _SUBNORMAL_STEP).astype(np.int64))
    codes = np.where(nan, 0x7F, codes)
    return (codes | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def _groups(x, name, group_ndim):
    """``x`` as (groups, group_size) and the shape of one scale per group (the leading dimensions)."""
    if x.ndim < group_ndim:
        raise ValueError(f"{name} must have at least group_ndim = {group_ndim} dimensions (the trailing ones "
                         f"form a group), got shape {x.shape}")
    lead = x.shape[:x.ndim - group_ndim]
    return x.reshape(int(np.prod(lead, dtype=np.int64)), -1), lead


def quantize_fp8(x, scales=None, *, group_ndim=2):
    """Quantize to fp8 e4m3 codes with one float32 scale per group; returns ``(codes, scales)``.

    x: float array of any shape with at least ``group_ndim`` dimensions, used as float32; its last
    ``group_ndim`` dimensions form a group (2: a page of one KV head of a cache
    ``(num_blocks, kv_heads, block_size, head_dim)``, one scale per (block, kv_head)).
    scales: float32-convertible array of the leading shape ``x.shape[:-group_ndim]``, positive and
    finite; None computes ``scale = amax / 448`` per group in float32 (1 for a group of zeros), which
    needs a finite x.
    Returns: codes uint8 of the shape of x; scales float32 of the leading shape.

    Each code is the e4m3 number nearest to ``y = x / scale``, with ``y`` computed in float32 (one
    correctly rounded division, as the kernel does), rounded once, to nearest with ties to even,
    subnormals included; ``|y| > 448`` saturates to the code of +-448 (``cvt.rn.satfinite``; ml_dtypes
    would give NaN); NaN gives 0x7f (0xff for a negative NaN); -0.0 gives 0x80.
    """
    x = _real_array(x, "x").astype(np.float32)
    group_ndim = _int_scalar(group_ndim, "group_ndim", 1)
    flat, lead = _groups(x, "x", group_ndim)
    if scales is None:
        if not np.all(np.isfinite(x)):
            raise ValueError("x must be finite when the scales are computed from it (amax / 448)")
        amax = np.max(np.abs(flat), axis=1, initial=np.float32(0.0))
        scales = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1.0)).astype(np.float32)
    else:
        scales = _real_array(scales, "scales").astype(np.float32)
        if scales.shape != lead:
            raise ValueError(f"scales must have the leading shape {lead} of x (one scale per group of its last "
                             f"{group_ndim} dimensions), got {scales.shape}")
        if not np.all(np.isfinite(scales) & (scales > 0)):
            raise ValueError("scales must be positive and finite")
        scales = scales.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        y = flat / scales[:, None]                              # float32 / float32: rounded once
    codes = _e4m3_codes(round_to(y, "fp8_e4m3"))
    return codes.reshape(x.shape), scales.reshape(lead)


def dequantize_fp8(codes, scales, *, group_ndim=2):
    """The values ``code value * scale`` of fp8 e4m3 codes, float64 (exact: no rounding).

    codes: uint8 of any shape with at least ``group_ndim`` dimensions; scales: the leading shape
    ``codes.shape[:-group_ndim]`` (one scale per group of the last ``group_ndim`` dimensions).
    Codes 0x7f and 0xff give NaN.
    """
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"codes must have dtype uint8 (the bits of e4m3 numbers), got {codes.dtype}")
    group_ndim = _int_scalar(group_ndim, "group_ndim", 1)
    flat, lead = _groups(codes, "codes", group_ndim)
    scales = _real_array(scales, "scales").astype(np.float64)
    if scales.shape != lead:
        raise ValueError(f"scales must have the leading shape {lead} of codes, got {scales.shape}")
    values = fp8_e4m3_values()[flat] * scales.reshape(-1, 1)
    return values.reshape(codes.shape)


def attention_at_precision(q, k, v, fmt, *, causal=False, kv_lens=None, scale=None):
    """Attention computed exactly on inputs stored in ``fmt``, its output stored in ``fmt``; float64.

    q (batch, heads, N, d), k and v (batch, kv_heads, M, d), causal, kv_lens and scale as in
    ``attention``; fmt: "fp16", "bf16" or "fp8_e4m3" (``round_to``). Returns ``round_to(attention(
    round_to(q), round_to(k), round_to(v)), fmt)``: what a mixed-precision kernel would give if its
    float32 arithmetic were exact. Its distance from ``attention(q, k, v)`` is the error that storage
    alone costs; a kernel may be at most twice as far (``docs/design-notes.md`` §5).
    """
    rounded = [round_to(_real_array(a, name), fmt) for a, name in ((q, "q"), (k, "k"), (v, "v"))]
    return round_to(attention(*rounded, causal=causal, kv_lens=kv_lens, scale=scale), fmt)
