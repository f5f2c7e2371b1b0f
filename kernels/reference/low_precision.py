"""Rounding to the low-precision float formats fp16, bf16 and fp8 (e4m3), once and exactly."""

import numpy as np

from ._checks import _real_array

__all__ = ["FLOAT_FORMATS", "round_to"]

# significand bits (with the implicit leading 1), smallest normal exponent, largest finite value
FLOAT_FORMATS = {
    "fp16": {"significand_bits": 11, "min_exponent": -14, "max": 65504.0, "has_inf": True},
    "bf16": {"significand_bits": 8, "min_exponent": -126, "max": float.fromhex("0x1.fep127"), "has_inf": True},
    "fp8_e4m3": {"significand_bits": 4, "min_exponent": -6, "max": 448.0, "has_inf": False},
}


def round_to(x, fmt):
    """Round to the nearest value of a low-precision float format, ties to even, in float64.

    x: any shape, real numbers. fmt: "fp16" (IEEE half), "bf16" (bfloat16) or "fp8_e4m3"
    (float8 e4m3fn: no infinity, max 448).
    Returns: float64, the shape of x, every value exactly representable in ``fmt``.
    Rounding is done once, from the float64 input (round to nearest, ties to even; subnormals
    included). Casting a float64 array through float32 first, as ``astype(ml_dtypes.bfloat16)``
    and torch's ``.to(torch.bfloat16)`` do, rounds twice and can differ in the last bit.
    Overflow: fp16 and bf16 give +-inf like IEEE; fp8_e4m3 has no infinity and saturates to
    +-448, like the GPU's ``cvt.rn.satfinite`` instruction (ml_dtypes gives NaN instead).
    NaN stays NaN.
    """
    if not isinstance(fmt, str) or fmt not in FLOAT_FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FLOAT_FORMATS)}, got {fmt!r}")
    spec = FLOAT_FORMATS[fmt]
    x = _real_array(x, "x").astype(np.float64)
    magnitude = np.where(np.isfinite(x), np.abs(x), 0.0)
    _, exponent = np.frexp(magnitude)          # magnitude = m * 2**exponent, m in [0.5, 1)
    # Spacing of representable values near x; subnormals share the spacing of the smallest binade.
    leading_bit = np.maximum(exponent - 1, spec["min_exponent"])
    spacing = np.ldexp(1.0, leading_bit - (spec["significand_bits"] - 1))
    rounded = np.rint(x / spacing) * spacing   # exact scaling by a power of two, then ties to even
    # Overflow includes infinite inputs; NaN compares False and stays NaN.
    overflow_value = np.inf if spec["has_inf"] else spec["max"]
    return np.where(np.abs(rounded) > spec["max"], np.copysign(overflow_value, x), rounded)
