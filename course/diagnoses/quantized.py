"""Diagnoses of day 9: from wrong Q8_0 codes or scales, or a wrong Q4_1 GEMV, to the likely bug, in words.

Both computations are exact recipes over the GGUF bytes (``kernels.reference.gguf``), and each classic mistake
changes one step of them, so a NumPy model of the mistake reproduces its output:

- :func:`q8_0_code_findings`: Q8_0 codes are ``round(x * (1 / d))`` in float32 with d = amax / 127 per block of
  32 and halves rounded away from zero (C's ``roundf``). Models: ties to even (Python's ``round``, ``rint``),
  truncation toward zero, x divided by d instead of multiplied by the rounded 1 / d, d taken over the whole row
  or from the largest x instead of the largest |x|, 128 for 127; and codes wrong only in blocks whose 1 / d
  overflows (a block of zeros), the guard missing.
- :func:`q8_0_scale_findings`: the scales d against the same choices (per row, signed maximum, another divisor).
- :func:`q4_1_findings`: a Q4_1 GEMV ``y = W x`` whose W is read wrong: the nibbles of a byte swapped (the low
  one is weight j, the high one weight j + 16) or taken as neighbours (weights 2j and 2j + 1), d and m swapped,
  the minimum forgotten, or added once per block or once per weight instead of times the block's sum of x (or
  each weight's activation), the scale and minimum
  of a row's first block used for every block, Q4_0's offset of 8 subtracted.
- :func:`launch_findings`: what the simulator raised: an index past an array (a warp past the last row or block),
  a code past int8 (a d too small for its block), a NaN code (a block of zeros without its guard).

Each returns ``[(key, message)]``; ``course.exercise_checks`` puts the findings first among the causes of a
failure. A mistake is named only when the output matches its model and the right computation does not.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["KEYS", "NO_INVERSE", "ZERO_BLOCK", "q8_0_model", "q8_0_code_findings", "q8_0_scale_findings", "q4_1_parts",
           "q4_1_model", "q4_1_findings", "launch_findings"]

QK = 32                      # weights per GGUF block
NO_INVERSE = 2.0 ** -128     # a float32 d at or below it has no finite inverse: its codes are 0

KEYS = ("q8_0_ties_to_even", "q8_0_truncated", "q8_0_divided", "q8_0_zero_block", "q8_0_scale_per_row",
        "q8_0_scale_signed_max", "q8_0_scale_divisor", "q4_1_nibbles_swapped", "q4_1_nibbles_interleaved",
        "q4_1_d_m_swapped", "q4_1_minimum_forgotten", "q4_1_minimum_once", "q4_1_scale_per_row",
        "q4_1_offset_8", "q4_1_minimum_without_x", "q4_1_row_guard", "q8_0_block_guard", "q8_0_code_out_of_range")


# --------------------------------------------------------------------------------------------- Q8_0

def _amax(blocks: np.ndarray, amax: str) -> np.ndarray:
    """(rows, blocks) float32: the largest |x| of each block ("block"), of its row ("row"), or its largest x
    ("signed")."""
    if amax == "block":
        return np.abs(blocks).max(axis=2, initial=np.float32(0))
    if amax == "row":
        row = np.abs(blocks).max(axis=(1, 2), initial=np.float32(0))
        return np.broadcast_to(row[:, None], blocks.shape[:2]).astype(np.float32)
    if amax == "signed":
        return blocks.max(axis=2, initial=np.float32(-np.inf))
    raise ValueError(f"amax must be 'block', 'row' or 'signed', got {amax!r}")


def q8_0_model(x, *, rounding: str = "away", divide: bool = False, amax: str = "block",
               divisor: float = 127.0) -> tuple[np.ndarray, np.ndarray]:
    """Codes (rows, K) int8 and scales (rows, K // 32) float32 of x (rows, K) under a quantization rule, in
    float32 as a kernel computes them: d = amax / divisor, y = x * (1 / d) (``divide``: x / d), 0 where 1 / d
    overflows; ``rounding`` "away" (halves away from zero: the reference), "even" (halves to even) or
    "truncate" (toward zero); a code past int8 keeps its low byte, as a GPU's store does."""
    x = np.asarray(x, np.float32)
    rows, k = x.shape
    blocks = x.reshape(rows, k // QK, QK)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d = (_amax(blocks, amax) / np.float32(divisor)).astype(np.float32)
        invertible = d > np.float32(NO_INVERSE)
        safe = np.where(invertible, d, np.float32(1))
        if divide:
            y = (blocks / safe[..., None]).astype(np.float32)
        else:
            y = (blocks * (np.float32(1) / safe)[..., None]).astype(np.float32)
    y = np.where(invertible[..., None], y, np.float32(0)).astype(np.float64)
    if rounding == "away":
        q = np.sign(y) * np.floor(np.abs(y) + 0.5)
    elif rounding == "even":
        q = np.rint(y)
    elif rounding == "truncate":
        q = np.trunc(y)
    else:
        raise ValueError(f"rounding must be 'away', 'even' or 'truncate', got {rounding!r}")
    codes = (q.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    return codes.reshape(rows, k), d


_CODE_MODELS = (
    ("q8_0_ties_to_even", dict(rounding="even"),
     "values exactly halfway between two codes (x * (1 / d) = k + 0.5) went to the even code: Python's round() and "
     "rint round half to even. The reference is C's roundf, as llama.cpp's: halves away from zero, 2.5 to 3 and "
     "-2.5 to -3. Round by hand: t = int32(v) (toward zero), then one step away from zero when |v - t| >= 0.5"),
    ("q8_0_truncated", dict(rounding="truncate"),
     "your codes are x * (1 / d) cut toward zero (int32(v) alone): round to the nearest integer, halves away "
     "from zero, as C's roundf does"),
    ("q8_0_divided", dict(divide=True),
     "your codes round x / d: the reference rounds x * (1 / d), 1 / d computed once per block and rounded to "
     "float32 (llama.cpp's id = 1/d). Where x / d is a tie, or next to one, the two land on different sides of it; "
     "multiply by the block's inverse"),
    ("q8_0_scale_per_row", dict(amax="row"),
     "your codes use one scale per row: d is the largest |x| of each block of 32 over 127, a scale per block"),
    ("q8_0_scale_signed_max", dict(amax="signed"),
     "your codes use the largest x of each block, not the largest |x|: a block whose most negative value is "
     "further from 0 than its largest gets codes past -127, which wrap around in int8. Take max(amax, abs(x))"),
    ("q8_0_scale_divisor", dict(divisor=128.0),
     "your codes use d = amax / 128: Q8_0 maps the largest |x| of a block to 127 (codes -127 ... 127, so that -x "
     "gives -q): d = amax / 127"),
)


def q8_0_code_findings(got, x) -> list[tuple[str, str]]:
    """got: a kernel's codes (rows, K) int8 for x (rows, K) float32. The rule the codes follow, or the blocks
    whose 1 / d overflows (a block of zeros) where every other block is right."""
    got = np.asarray(got)
    want, d = q8_0_model(x)
    wrong = got != want
    if not wrong.any():
        return []
    for key, options, message in _CODE_MODELS:
        model, _ = q8_0_model(x, **options)
        if (model != want).any() and np.array_equal(got, model):
            return [(key, message)]
    rows, k = got.shape
    wrong_blocks = wrong.reshape(rows, k // QK, QK).any(axis=2)
    small = d <= np.float32(NO_INVERSE)
    if small.any() and not (wrong_blocks & ~small).any():
        blocks = int(wrong_blocks.sum())
        return [("q8_0_zero_block", f"only the codes of blocks whose 1 / d overflows are wrong ({blocks} blocks): "
                                    f"{ZERO_BLOCK}")]
    return []


def q8_0_scale_findings(got, x) -> list[tuple[str, str]]:
    """got: a kernel's scales (rows, K // 32) float32 for x (rows, K). The choice of d they follow."""
    got = np.asarray(got)
    _, want = q8_0_model(x)
    if np.array_equal(got, want):
        return []
    per_row = q8_0_model(x, amax="row")[1]
    if not np.array_equal(per_row, want) and np.array_equal(got, per_row):
        return [("q8_0_scale_per_row", "every block of a row got the row's scale: d is one per block of 32, the "
                                       "largest |x| of that block over 127 (a row of K values has K / 32 scales)")]
    signed = q8_0_model(x, amax="signed")[1]
    if not np.array_equal(signed, want) and np.array_equal(got, signed):
        return [("q8_0_scale_signed_max", "the scales come from the largest x of each block, not the largest |x|: "
                                          "take the maximum of abs(x)")]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = got / want
    ratio = ratio[want > 0]
    if ratio.size and np.all(np.isfinite(ratio)) and np.allclose(ratio, ratio[0], rtol=1e-6) and ratio[0] != 1:
        return [("q8_0_scale_divisor", f"every scale is {float(ratio[0]):.4g} times amax / 127: d = amax / 127, "
                                       "amax the largest |x| of the block (a block of zeros: d = 0)")]
    return []


# --------------------------------------------------------------------------------------------- Q4_1

def q4_1_parts(w) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, m, codes) of Q4_1 bytes w (N, blocks, 20): d and m (N, blocks) float64 from their fp16 bytes, codes
    (N, blocks, 32) int64, code j in the low nibble of byte j and code j + 16 in its high nibble."""
    w = np.ascontiguousarray(w, np.uint8)
    halves = w[..., :4].copy().view("<f2").astype(np.float64)
    packed = w[..., 4:].astype(np.int64)
    return halves[..., 0], halves[..., 1], np.concatenate([packed & 0x0F, packed >> 4], axis=-1)


def q4_1_model(w, x, *, nibbles: str = "split", swap_dm: bool = False, minimum: str = "sum",
               per_row: bool = False, offset: int = 0) -> np.ndarray:
    """y = W x (N,) float64 for Q4_1 bytes w (N, blocks, 20) and x (K,), read by a rule: ``nibbles`` "split" (byte
    j holds weights j and j + 16: the format), "swapped" (its low nibble taken as weight j + 16) or "interleaved"
    (weights 2j and 2j + 1); ``swap_dm``: bytes 0-1 read as m and 2-3 as d; ``minimum`` "sum" (m times the
    block's sum of x: the format), "none", "once" (m added once per block) or "weight" (m added once per weight,
    without its activation: 32 m a block); ``per_row``: every block of a row
    uses the d and m of the row's first block; ``offset``: subtracted from every code (Q4_0's 8)."""
    d, m, codes = q4_1_parts(w)
    if swap_dm:
        d, m = m, d
    if per_row:
        d, m = np.broadcast_to(d[:, :1], d.shape), np.broadcast_to(m[:, :1], m.shape)
    half = QK // 2
    if nibbles == "swapped":
        codes = np.concatenate([codes[..., half:], codes[..., :half]], axis=-1)
    elif nibbles == "interleaved":
        codes = np.stack([codes[..., :half], codes[..., half:]], axis=-1).reshape(codes.shape)
    elif nibbles != "split":
        raise ValueError(f"nibbles must be 'split', 'swapped' or 'interleaved', got {nibbles!r}")
    xb = np.asarray(x, np.float64).reshape(-1, QK)
    y = np.einsum("nb,nbj,bj->n", d, codes - offset, xb)
    if minimum == "sum":
        y = y + m @ xb.sum(axis=1)
    elif minimum == "once":
        y = y + m.sum(axis=1)
    elif minimum == "weight":
        y = y + QK * m.sum(axis=1)
    elif minimum != "none":
        raise ValueError(f"minimum must be 'sum', 'none', 'once' or 'weight', got {minimum!r}")
    return y


_GEMV_MODELS = (
    ("q4_1_nibbles_swapped", dict(nibbles="swapped"),
     "your y reads the nibbles the other way round: in a Q4 block byte j holds weight j in its LOW nibble (byte & "
     "0x0F) and weight j + 16 in its HIGH nibble (byte >> 4), so the low nibble multiplies x[32 b + j] and the high "
     "one x[32 b + 16 + j]"),
    ("q4_1_nibbles_interleaved", dict(nibbles="interleaved"),
     "your y takes the two nibbles of byte j as neighbouring weights 2j and 2j + 1: GGUF's Q4 blocks split the 32 "
     "weights in halves, byte j holding weight j (low nibble) and weight j + 16 (high nibble)"),
    ("q4_1_d_m_swapped", dict(swap_dm=True),
     "your y swaps d and m: a Q4_1 block starts with d (bytes 0-1, fp16), then m (bytes 2-3), then the codes; "
     "weight j is d q_j + m"),
    ("q4_1_minimum_forgotten", dict(minimum="none"),
     "your y leaves out the block minimum m: weight j is d q_j + m, so a block adds d sum_j q_j x_j + m sum_j x_j "
     "(the minimum times the block's sum of x)"),
    ("q4_1_minimum_once", dict(minimum="once"),
     "your y adds each block's minimum m once, not m times the block's sum of x: every weight of the block carries "
     "m, so the block adds m (x_0 + ... + x_31)"),
    ("q4_1_minimum_without_x", dict(minimum="weight"),
     "your y adds the minimum m once for every weight, without its activation (32 m a block): weight j is "
     "d q_j + m, and like d q_j it multiplies x_j: the block adds m (x_0 + ... + x_31)"),
    ("q4_1_scale_per_row", dict(per_row=True),
     "your y uses the d and m of a row's first block for every block of the row: each block of 32 weights has its "
     "own d and m, in its own first 4 bytes"),
    ("q4_1_offset_8", dict(offset=8),
     "your y subtracts 8 from every code, as Q4_0 does: Q4_1's codes are unsigned, 0 ... 15, and its minimum m "
     "does the offset's work: weight j is d q_j + m"),
)


def q4_1_findings(got, w, x) -> list[tuple[str, str]]:
    """got: a kernel's y (N,) for Q4_1 bytes w (N, blocks, 20) and x (K,). The reading of W it matches."""
    got = np.asarray(got, np.float64)
    want = q4_1_model(w, x)
    if not np.all(np.isfinite(got)):
        return []
    for key, options, message in _GEMV_MODELS:
        model = q4_1_model(w, x, **options)
        scale = max(float(np.abs(want).max(initial=0.0)), float(np.abs(model).max(initial=0.0)), 1e-30)
        tolerance = 1e-4 * scale
        if np.abs(model - want).max(initial=0.0) > 10 * tolerance and np.abs(got - model).max(initial=0.0) <= tolerance:
            return [(key, message)]
    return []


# --------------------------------------------------------------------------------------------- launches

_BOUNDS = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")
# numpy's refusal to store an integer past int8 (the simulator converts NaN and inf to -2**31 first)
_INT8_STORE = re.compile(r"integer (-?\d+) out of bounds for int8")


ZERO_BLOCK = ("a block of zeros has d = 0 (and a block of values near 1e-38 a d so small), where 1 / d is inf and "
              "0 * inf is NaN; the reference's codes are 0 there: take inverse = 1 / d only when d > 2**-128 "
              "(NO_INVERSE), else 0")


def launch_findings(exc, line: str) -> tuple[str, str] | None:
    """An exception of the simulator in a day-9 kernel, read: an IndexError past axis 0 as a warp past the last
    row (the GEMV: ``w``, ``y``) or block (the quantizer: ``x``, ``codes``, ``scales``); on the quantizer's codes, an
    integer past int8 as a d too small for its block, and NaN or inf (stored as -2**31) or a division by zero as the
    block of zeros without its guard. None for anything else."""
    at = f" (at `{line}`)" if line else ""
    if isinstance(exc, (OverflowError, ZeroDivisionError, ValueError)) and re.search(r"codes|inverse|round|/ *d\b",
                                                                                     line):
        stored = _INT8_STORE.search(str(exc))
        if stored and int(stored.group(1)) != -2 ** 31:
            return ("q8_0_code_out_of_range", (
                f"a code came out as {stored.group(1)}{at}, past int8's -128 ... 127, which the simulator refuses to "
                "store (a GPU would keep its low byte, another number): the block's d is too small for its values. "
                "d = amax / 127, amax the largest |x| of the block (the maximum of abs(x), not of x; over 127, not "
                "128), so that every |x| * (1 / d) is at most 127"))
        return ("q8_0_zero_block", f"the quantizer failed on a code{at} ({exc}): {ZERO_BLOCK}")
    match = _BOUNDS.search(str(exc)) if isinstance(exc, IndexError) else None
    if match is None or int(match.group(2)) != 0:
        return None
    if re.search(r"\b(w|y)\s*\[", line):
        return ("q4_1_row_guard", (
            f"a warp past the last row read or wrote row {match.group(1)} of {match.group(3)}{at}: the grid has "
            "ceil(N / GEMV_WARPS) blocks of GEMV_WARPS warps, so when N is not a multiple of GEMV_WARPS the last "
            "block's last warps have no row. Guard the warp's whole work with row < w.shape[0] (the same for all 32 "
            "lanes, so its shuffles still see the whole warp)"))
    if re.search(r"\b(x|codes|scales)\s*\[", line):
        return ("q8_0_block_guard", (
            f"a warp past the last block indexed row {match.group(1)} of {match.group(3)}{at}: the grid has "
            "ceil(rows * blocks / GEMV_WARPS) blocks of GEMV_WARPS warps, so the last one may hold warps with no "
            "block of 32 to quantize. Guard the warp's whole work with warp < rows * blocks"))
    return None
