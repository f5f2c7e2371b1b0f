"""Diagnoses of day 8: where a mixed-precision result lost its precision, named from the result.

A kernel that stores its tensors in fp16, bf16 or fp8 and computes in float32 is off from the float64
reference by the rounding of its storage, no more (``docs/design-notes.md`` §5). Three classic mistakes make it
further off, each with a signature of its own in the output:

- :func:`overflow_findings`: q·k computed in fp16 and scaled afterwards. fp16's largest number is
  65504; the logits of rows whose unscaled q·k passes it overflow (inf, then NaN from inf - inf) or,
  with the products rounded at fp16's spacing of 32 near 65504, come out far off, while rows of small
  logits are right. Scaled first and computed in float32, nothing comes near a limit.
- :func:`accumulation_findings`: a sum over keys (the accumulator, the running sum) kept at the storage
  precision. Every addition rounds to fp16's 11 or bf16's 8 significant bits, so the error grows with
  the number of keys a row sums, where the storage error does not: rows that sum many keys are off
  by several times what rows of few keys are.
- :func:`fp8_findings`: fp8 e4m3 codes that differ from the reference's, compared with NumPy models
  of the encoding mistakes: truncation instead of rounding to nearest, ties rounded away from zero
  instead of to even, NaN instead of saturating to 448, subnormals flushed to zero, the scale
  multiplied instead of divided; and, for computed scales, one scale for the whole tensor, or the
  maximum of x instead of the maximum of |x|.

Each returns ``[(key, message)]``; ``course.exercise_checks`` puts the findings first among the
causes of a failure. A mistake is named only when the output shows its signature and the right
computation does not.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FP16_MAX", "FP16_EXACT", "overflow_findings", "accumulation_findings", "rounding_findings",
           "e4m3_encode", "fp8_findings", "fp8_scale_findings", "KEYS"]

KEYS = ("lowp_unscaled_logits", "lowp_accumulation", "lowp_rounding", "fp8_truncated", "fp8_ties_away",
        "fp8_nan_not_saturated", "fp8_subnormals_flushed", "fp8_scale_multiplied", "fp8_scale_reciprocal",
        "fp8_scale_global",
        "fp8_scale_signed_max", "fp8_scale_other")

FP16_MAX = 65504.0
FP16_EXACT = 2048.0  # past it fp16 numbers are 2 or more apart: an fp16 logit is off by units
_FAR = 0.1          # an error above this fraction of max|ref| is a wrong result, not a lost digit
_NEAR = 100.0       # an error below this many times the rule's limit is lost precision, not a wrong result


def _row_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The largest error of each row (the last axis), inf where got is not finite and ref is."""
    with np.errstate(invalid="ignore"):
        err = np.abs(got - ref)
    err[~np.isfinite(got) & np.isfinite(ref)] = np.inf
    return err.max(axis=-1, initial=0.0)


def overflow_findings(got: np.ndarray, ref: np.ndarray, row_logits: np.ndarray, *, fmt: str) -> list[tuple[str, str]]:
    """got, ref: the output and the float64 reference, rows on the last axis. row_logits: the largest
    |q·k| of each row before the scale (the shape of got without its last axis), from the stored q
    and k. Named when the rows far off (or not finite) are all rows of large unscaled logits (past
    ``FP16_EXACT``, where fp16's numbers are 2 or more apart) and some row of small logits is right."""
    if fmt != "fp16" or got.size == 0:
        return []
    scale = float(np.abs(ref[np.isfinite(ref)]).max(initial=0.0)) or 1.0
    far = _row_errors(got, ref) > _FAR * scale
    big = row_logits > FP16_EXACT
    if not far.any() or (far & ~big).any() or big.all():
        return []
    nonfinite = int((~np.isfinite(got)).any(axis=-1)[far].sum())
    what = f"{nonfinite} of them NaN or inf" if nonfinite else "all of them finite but far off"
    return [("lowp_unscaled_logits", (
        f"{int(far.sum())} rows are wrong ({what}), each a row whose q·k before the scale is large (up to "
        f"{float(row_logits[far].max()):.3g}), while rows of small logits are right. In fp16, numbers past 2048 "
        "are 2 or more apart, past 16384 16 apart, and none passes 65504: is q·k computed in fp16 (the product of "
        "two fp16 numbers is rounded to fp16) and scaled afterwards? Convert each element to float32 as it is loaded "
        "and scale q there, float32(q[...]) * scale, before any product: then every score is a float32 of its "
        "scaled size"))]


def accumulation_findings(got: np.ndarray, ref: np.ndarray, same: np.ndarray, lengths: np.ndarray, *,
                          fmt: str, limit: float) -> list[tuple[str, str]]:
    """got, ref, same: the output, the float64 reference and the same computation at the storage
    precision, rows on the last axis. lengths: the number of keys each row sums (the shape of got
    without its last axis). limit: the largest error the precision rule allows. Named when every
    element is finite and close to the reference, some are off by more than the limit, and rows of
    many keys are off by several times what rows of few keys are, while storage alone is not."""
    if got.size == 0 or not np.isfinite(got).all():
        return []
    scale = float(np.abs(ref).max(initial=0.0)) or 1.0
    err = _row_errors(got, ref)
    if err.max() <= limit or err.max() > _FAR * scale:
        return []
    summed = lengths > 0
    if not summed.any():
        return []
    short_len, long_len = int(lengths[summed].min()), int(lengths[summed].max())
    if long_len < 4 * short_len:
        return []
    long_rows, short_rows = lengths >= long_len / 2, summed & (lengths <= 2 * short_len)
    storage = _row_errors(same, ref)
    got_ratio = err[long_rows].mean() / max(err[short_rows].mean(), 1e-30)
    storage_ratio = storage[long_rows].mean() / max(storage[short_rows].mean(), 1e-30)
    if got_ratio < 2.0 or got_ratio < 2.0 * storage_ratio:
        return []
    return [("lowp_accumulation", (
        f"the error grows with the number of keys a row sums: rows of {long_len} keys are off by up to "
        f"{float(err[long_rows].max()):.2g}, rows of {short_len} keys by up to {float(err[short_rows].max()):.2g}, "
        f"where storing in {fmt} costs at most {float(storage.max()):.2g} whatever the length. A sum over the keys "
        f"is kept in {fmt}: every addition rounds to {fmt}'s precision. Keep the accumulator, the running sum, the "
        f"running maximum and the scores in float32 (float32 local and shared arrays and variables); only the loads "
        f"convert from {fmt}, and only the store to the output rounds to it"))]


def rounding_findings(got: np.ndarray, ref: np.ndarray, same: np.ndarray, *, fmt: str,
                      limit: float) -> list[tuple[str, str]]:
    """Named when every element is finite and within ``_NEAR`` times the rule's limit of the reference, but
    some are off by more than the limit: the computation is right, its precision is not."""
    if got.size == 0 or not np.isfinite(got).all():
        return []
    err = float(_row_errors(got, ref).max(initial=0.0))
    if not limit < err <= _NEAR * limit:
        return []
    return [("lowp_rounding", (
        f"the output is close to the reference (off by at most {err:.2g}) but further than storing in {fmt} costs "
        f"(at most {float(_row_errors(same, ref).max(initial=0.0)):.2g}): a value between the loads and the store "
        f"is rounded to {fmt}. An accumulator, a running sum or maximum, or a score kept in {fmt}, or q·k computed "
        f"from {fmt} numbers without converting them (the product of two {fmt} numbers is rounded to {fmt})? Convert "
        f"each element to float32 as it is loaded, keep everything in float32, and round once, at the store"))]


# --------------------------------------------------------------------------- fp8 e4m3 codes

def _e4m3_magnitudes() -> np.ndarray:
    """The 127 finite non-negative e4m3 values in code order (code c has value _e4m3_magnitudes()[c])."""
    from kernels.reference import fp8_e4m3_values

    return fp8_e4m3_values()[:0x7F]


def e4m3_encode(y, *, rounding: str = "even", saturate: bool = True, subnormals: bool = True) -> np.ndarray:
    """Codes (uint8) of float values ``y`` under an encoding rule: ``rounding`` "even" (to nearest, ties
    to the even code), "away" (to nearest, ties away from zero) or "truncate" (toward zero);
    ``saturate``: beyond 448 gives 448, else NaN (0x7f); ``subnormals``: False flushes |y| < 2**-6 to 0.
    NaN gives 0x7f, the sign of y (of -0.0 too) goes into bit 7."""
    y = np.asarray(y, np.float64)
    values = _e4m3_magnitudes()
    a = np.abs(np.where(np.isnan(y), 0.0, y))
    below = np.clip(np.searchsorted(values, a, side="right") - 1, 0, 0x7E)     # largest value <= a
    above = np.minimum(below + 1, 0x7E)
    gap_low, gap_high = a - values[below], values[above] - a
    if rounding == "truncate":
        code = below
    else:
        tie = gap_low == gap_high
        up = (gap_high < gap_low) | (tie & ((below & 1) == 1 if rounding == "even" else True))
        code = np.where(up & (above > below), above, below)
    code = np.where(a > 448.0, 0x7E if saturate else 0x7F, code)
    if not subnormals:
        code = np.where(a < 2.0 ** -6, 0, code)
    code = np.where(np.isnan(y), 0x7F, code)
    return (code | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


_CODE_MODELS = (
    ("fp8_truncated", dict(rounding="truncate"),
     "your codes round toward zero (the e4m3 number just below |x / scale|): round to the nearest one "
     "instead; a value halfway between two goes to the one with an even code (mantissa bit 0 clear)"),
    ("fp8_ties_away", dict(rounding="away"),
     "values exactly halfway between two e4m3 numbers go away from zero in your codes: ties go to the even "
     "code (the one whose last mantissa bit is 0), as IEEE rounding and the GPU's cvt.rn do"),
    ("fp8_nan_not_saturated", dict(saturate=False),
     "values beyond 448 (and infinities) became NaN (0x7f): e4m3fn has no infinity, and a KV cache "
     "saturates: anything past 448 is stored as 448 (0x7e, or 0xfe when negative)"),
    ("fp8_subnormals_flushed", dict(subnormals=False),
     "values below 2**-6, e4m3's smallest normal number, became 0: below it e4m3 keeps subnormals, steps of "
     "2**-9 (codes 1 ... 7), and rounds to the nearest of them"),
)


def fp8_findings(got: np.ndarray, y: np.ndarray, x: np.ndarray, scales: np.ndarray) -> list[tuple[str, str]]:
    """got: the kernel's codes; y: x / scale in float32 (what the codes encode), both (groups, size);
    x: the values, scales: (groups,). The encoding rule or the use of the scale the codes follow."""
    want = e4m3_encode(y)
    wrong = got != want
    if not wrong.any():
        return []
    for key, options, message in _CODE_MODELS:
        model = e4m3_encode(y, **options)
        if (model != want).any() and np.array_equal(got, model):
            return [(key, message)]
    with np.errstate(over="ignore", invalid="ignore"):
        multiplied = e4m3_encode((x * scales[:, None]).astype(np.float32))
    if (multiplied != want).any() and np.array_equal(got, multiplied):
        return [("fp8_scale_multiplied", "your codes encode x * scale: a code stores x / scale (the scale "
                                         "brings a page's largest |x| to 448), and x = value(code) * scale")]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        inverse = (np.float32(1.0) / scales.astype(np.float32)).astype(np.float32)
        reciprocal = e4m3_encode((x.astype(np.float32) * inverse[:, None]).astype(np.float32))
    if (reciprocal != want).any() and np.array_equal(got, reciprocal):
        return [("fp8_scale_reciprocal", "your codes encode x * (1 / scale): 1 / scale is rounded to float32, "
                                         "so where x / scale is a tie between two codes the product lands "
                                         "beside it and rounds the other way. Divide: y = x / scale is one "
                                         "correctly rounded division")]
    return []


def fp8_scale_findings(got_scales: np.ndarray, x: np.ndarray) -> list[tuple[str, str]]:
    """got_scales (groups,) computed by the kernel from x (groups, size): the mistake the scales follow."""
    amax = np.abs(x).max(axis=1, initial=0.0)
    want = np.where(amax > 0, amax / np.float32(448.0), np.float32(1.0)).astype(np.float32)
    if np.array_equal(got_scales, want):
        return []
    whole = np.float32(np.abs(x).max(initial=0.0) / np.float32(448.0))
    if got_scales.size > 1 and np.all(got_scales == whole) and not np.all(want == whole):
        return [("fp8_scale_global", "every page got the same scale, that of the whole cache: the scale is one "
                                     "per group (a page of one KV head): the block of each group finds the "
                                     "largest |x| of its own group")]
    signed = x.max(axis=1, initial=-np.inf)
    signed_scales = np.where(signed > 0, signed / np.float32(448.0), np.float32(1.0)).astype(np.float32)
    if np.array_equal(got_scales, signed_scales) and not np.array_equal(signed_scales, want):
        return [("fp8_scale_signed_max", "the scales come from the largest x, not the largest |x|: a page whose "
                                         "most negative value is further from 0 than its largest saturates at "
                                         "-448. Take max(amax, abs(x))")]
    ratio = got_scales / np.where(want > 0, want, 1)
    if np.all(np.isfinite(ratio)) and np.allclose(ratio, ratio.flat[0], rtol=1e-6) and ratio.flat[0] != 1:
        return [("fp8_scale_other", f"every scale is {ratio.flat[0]:.4g} times amax / 448: scale = amax / 448, "
                                    "where amax is the largest |x| of the group and 448 e4m3's largest value "
                                    "(a group of zeros gets 1)")]
    return []
