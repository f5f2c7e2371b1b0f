"""Diagnoses of day 9: from wrong Q8_0 codes or scales, a wrong Q4_1 GEMV or a wrong W8A8 GEMM, to the likely bug,
in words.

All three computations are exact recipes over the GGUF bytes (``kernels.reference.gguf``), and each classic mistake
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
- :func:`w8a8_findings`: a W8A8 GEMM ``y = sa sw (A_q W_q^T)`` whose integer sums are exact, so every mistake but
  one has an exact model: sums wrapped to int16 or int8 (an accumulator too narrow), the scales swapped (sa
  indexed by the channel, sw by the token) or left out, words of K left out of the sum (the last step, or the last
  words of every step); the one without a model, the scales applied inside the sum (per product, per dp4a, per
  step), shows as more float32 rounding than one scaling of an exact sum can make, on sums whose products cancel.
  Outputs never written are read by where they lie (tokens or channels from an index on, the outer rows and
  columns of each 64 x 64 tile). :func:`w8a8_launch_findings` reads what the simulator raised in such a kernel:
  an accumulator past int16 or int8, an index past sa, sw, y, a_q or w_q.

Each returns ``[(key, message)]``; ``course.exercise_checks`` puts the findings first among the causes of a
failure. A mistake is named only when the output matches its model and the right computation does not.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["KEYS", "NO_INVERSE", "ZERO_BLOCK", "q8_0_model", "q8_0_code_findings", "q8_0_scale_findings", "q4_1_parts",
           "q4_1_model", "q4_1_findings", "launch_findings", "W8A8_RTOL", "w8a8_model", "w8a8_findings",
           "w8a8_launch_findings"]

QK = 32                      # weights per GGUF block
NO_INVERSE = 2.0 ** -128     # a float32 d at or below it has no finite inverse: its codes are 0

KEYS = ("q8_0_ties_to_even", "q8_0_truncated", "q8_0_divided", "q8_0_zero_block", "q8_0_scale_per_row",
        "q8_0_scale_signed_max", "q8_0_scale_divisor", "q4_1_nibbles_swapped", "q4_1_nibbles_interleaved",
        "q4_1_d_m_swapped", "q4_1_minimum_forgotten", "q4_1_minimum_once", "q4_1_scale_per_row",
        "q4_1_offset_8", "q4_1_minimum_without_x", "q4_1_row_guard", "q8_0_block_guard", "q8_0_code_out_of_range",
        "w8a8_accumulator_int16", "w8a8_accumulator_int8", "w8a8_scales_swapped", "w8a8_scale_missing",
        "w8a8_k_words", "w8a8_scale_inside_sum", "w8a8_unwritten", "w8a8_scale_index", "w8a8_store_guard",
        "w8a8_load_guard", "w8a8_k_past_end")


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
    overflows; ``rounding`` "away" (halves away from zero: the reference), "even" (halves to even), "truncate"
    (toward zero) or "add_half" (v + 0.5 in float32, then toward zero); a code past int8 keeps its low byte, as a GPU's store does."""
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
    elif rounding == "add_half":       # (int)(v + 0.5) in float32: v + 0.5 rounds before it is cut
        y32 = y.astype(np.float32)
        q = np.trunc((y32 + np.where(y32 >= 0, np.float32(0.5), np.float32(-0.5))).astype(np.float32))
    else:
        raise ValueError(f"rounding must be 'away', 'even', 'truncate' or 'add_half', got {rounding!r}")
    codes = (q.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    return codes.reshape(rows, k), d


_CODE_MODELS = (
    ("q8_0_ties_to_even", dict(rounding="even"),
     "values exactly halfway between two codes (x * (1 / d) = k + 0.5) went to the even code: Python's round() and "
     "rint round half to even. The reference is C's roundf, as llama.cpp's: halves away from zero, 2.5 to 3 and "
     "-2.5 to -3. Round by hand: t = int32(v) (toward zero), then one step away from zero when |v - t| >= 0.5"),
    ("q8_0_round_adding_half", dict(rounding="add_half"),
     "your codes add 0.5 (or -0.5) to x * (1 / d) and cut toward zero: in float32, 0.49999997 + 0.5 rounds to "
     "1.0 before the cut, so values just below a half go up (x = d / 2 at amax 3, where d (1 / d) is just below 1). "
     "C's roundf rounds v itself: t = int32(v), then one step away from zero when |v - t| >= 0.5"),
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


def _halves_as_normal(w) -> tuple[np.ndarray, np.ndarray]:
    """d and m of Q4_1 bytes w read with every exponent field taken as a normal number's, 0 included: fraction f
    and field e give (1024 + f) 2**(e - 25), so a subnormal (e = 0) gets an implicit leading 1 it does not have, and
    0 becomes 2**-15."""
    bits = np.ascontiguousarray(w, np.uint8)[..., :4].copy().view("<u2").astype(np.int64)
    field, fraction = (bits >> 10) & 31, bits & 1023
    value = np.ldexp((1024 + fraction).astype(np.float64), field - 25)
    value = np.where(field == 31, np.where(fraction, np.nan, np.inf), value)
    value = np.where(bits & 0x8000, -value, value)
    return value[..., 0], value[..., 1]


def q4_1_model(w, x, *, nibbles: str = "split", swap_dm: bool = False, minimum: str = "sum",
               per_row: bool = False, offset: int = 0, subnormals_as_normal: bool = False,
               first_blocks: int | None = None) -> np.ndarray:
    """y = W x (N,) float64 for Q4_1 bytes w (N, blocks, 20) and x (K,), read by a rule: ``nibbles`` "split" (byte
    j holds weights j and j + 16: the format), "swapped" (its low nibble taken as weight j + 16) or "interleaved"
    (weights 2j and 2j + 1); ``swap_dm``: bytes 0-1 read as m and 2-3 as d; ``minimum`` "sum" (m times the
    block's sum of x: the format), "none", "once" (m added once per block) or "weight" (m added once per weight,
    without its activation: 32 m a block); ``per_row``: every block of a row
    uses the d and m of the row's first block; ``offset``: subtracted from every code (Q4_0's 8);
    ``subnormals_as_normal``: d and m decoded with an implicit leading 1 at exponent field 0 too; ``first_blocks``:
    only the first so many blocks of each row summed (a lane that stops after two of its blocks: 64)."""
    d, m, codes = q4_1_parts(w)
    if subnormals_as_normal:
        d, m = _halves_as_normal(w)
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
    if first_blocks is not None:
        d, m, codes, xb = d[:, :first_blocks], m[:, :first_blocks], codes[:, :first_blocks], xb[:first_blocks]
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
    ("q4_1_two_blocks_a_lane", dict(first_blocks=64),
     "your y adds only the first 64 blocks of each row: each lane takes at most two of its blocks (lane and lane + "
     "32), so a row of more than 64 blocks (K > 2048) loses its tail. A lane takes blocks lane, lane + 32, lane + 64, "
     "... up to the row's end: a loop with step WARP over all of w.shape[1]"),
    ("q4_1_subnormal_as_normal", dict(subnormals_as_normal=True),
     "your y decodes an fp16 d or m whose exponent field is 0 as a normal number, with an implicit leading 1: those "
     "are the subnormals (and zero), whose value is fraction x 2**-24 with no leading 1; only a field of 1 to 30 "
     "means 2**(field - 15) x (1 + fraction / 1024)"),
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


# --------------------------------------------------------------------------------------------- the W8A8 GEMM

# y = float32(sum) * sa * sw rounds three times in float32 (each within 2**-24 of its value): a right y is within
# 2**-21 of the float64 reference, relative to each output, whatever the order of the two products.
W8A8_RTOL = 2.0 ** -21
W8A8_TILE = 64          # a block of threads computes a 64 x 64 tile of y
W8A8_THREADS = 16       # ... with 16 x 16 threads, 4 x 4 outputs each
W8A8_STEP_WORDS = 8     # a step of K is 32 codes, 8 uint32 words


def _wrapped(sums: np.ndarray, bits: int) -> np.ndarray:
    half = 2 ** (bits - 1)
    return (sums + half) % (2 * half) - half


def w8a8_model(a_q, sa, w_q, sw, *, accumulator: str = "int32", scales: str = "both", words=None) -> np.ndarray:
    """y (M, N) float64 of the W8A8 GEMM under a rule: ``accumulator`` "int32" (the sum exact: the recipe), "int16"
    or "int8" (the sum wrapped to that many bits, which is what an accumulator of that type holds at the end,
    whatever the order); ``scales`` "both" (sa[m] sw[n]: the recipe), "swapped" (sa[n] sw[m], M = N only),
    "token" (sa alone), "channel" (sw alone) or "none"; ``words``: a boolean mask of the K / 4 words of a row
    that enter the sum (None: all of them)."""
    a = np.asarray(a_q, np.int64)
    w = np.asarray(w_q, np.int64)
    if words is not None:
        keep = np.repeat(np.asarray(words, bool), 4)
        a, w = a[:, keep], w[:, keep]
    sums = a @ w.T
    if accumulator in ("int16", "int8"):
        sums = _wrapped(sums, int(accumulator[3:]))
    elif accumulator != "int32":
        raise ValueError(f"accumulator must be 'int32', 'int16' or 'int8', got {accumulator!r}")
    sa = np.asarray(sa, np.float64)
    sw = np.asarray(sw, np.float64)
    factors = {"both": sa[:, None] * sw[None, :], "token": sa[:, None] * np.ones(len(sw))[None, :],
               "channel": np.ones(len(sa))[:, None] * sw[None, :], "none": np.ones((len(sa), len(sw)))}
    if scales == "swapped":
        if len(sa) != len(sw):
            raise ValueError("scales='swapped' needs M = N")
        return sums * sw[:, None] * sa[None, :]
    if scales not in factors:
        raise ValueError(f"scales must be 'both', 'swapped', 'token', 'channel' or 'none', got {scales!r}")
    return sums * factors[scales]


def _matches(got, model, want) -> bool:
    """got matches the model to a right y's rounding, and the model is not the right y."""
    differs = np.abs(model - want) > W8A8_RTOL * np.abs(want)
    return bool(differs.any()) and bool(np.all(np.abs(got - model) <= W8A8_RTOL * np.abs(model)))


def _ranges(indices) -> str:
    """"0 ... 7, 16 ... 23" for a sorted list of integers."""
    runs, start = [], None
    for i, value in enumerate(indices):
        if start is None:
            start = value
        if i + 1 == len(indices) or indices[i + 1] != value + 1:
            runs.append(f"{start}" if start == value else f"{start} ... {value}")
            start = None
    return ", ".join(runs)


_NARROW = ("an int8 holds one code and an int16 one product (at most 128 x 128 = 2**14), not a sum of K products "
           "(K products of -128 x -128 reach 2**14 K): keep the accumulators in int32, as dp4a's c is; a sum of up "
           "to 131071 products fits")
_ACCUMULATOR = {"int16": "your sums wrapped around as an int16 does: y is sa[m] sw[n] times the exact sum cut to 16 "
                         "bits. " + _NARROW,
                "int8": "your sums wrapped around as an int8 does: y is sa[m] sw[n] times the exact sum cut to 8 "
                        "bits. " + _NARROW}
_REFUSED = {"int16": "past int16's range, which the simulator refuses to store in an int16",
            "int8": "past int8's range, which the simulator refuses to store in an int8"}
_SWAPPED = ("your y takes the scales the other way round, sa[n] sw[m] instead of sa[m] sw[n]: sa holds one scale "
            "per token (a row of a_q, a row m of y), sw one per output channel (a row of w_q, a column n of y): "
            "y[m, n] = sa[m] sw[n] sum_k a_q[m, k] w_q[n, k]")
_MISSING = {"token": "the channel's scale sw[n]", "channel": "the token's scale sa[m]", "none": "both scales"}
_INSIDE = ("your y carries more float32 rounding than one scaling of an exact sum can (within {bound:.2g} of each "
           "output it would be; here {worst:.2g} off, relative): the scales entered the sum before it was complete, "
           "per product, per dp4a or per step of 32 codes, and float32 rounded every partial sum. Where the "
           "products cancel, that rounding is a large part of y. Sum the products in an int32 to the end of K, exactly, then multiply by sa[m] and sw[n] "
           "once per output")


def _word_findings(got, a_q, sa, w_q, sw, want) -> list[tuple[str, str]]:
    """The words of K the sums left out: a missing tail (the last step, or more), or the last words of every
    step of 8."""
    words = np.asarray(a_q).shape[1] // 4
    if words == 0:
        return []
    k = 4 * words
    for used in range(words):                       # the first ``used`` words only
        mask = np.arange(words) < used
        if _matches(got, w8a8_model(a_q, sa, w_q, sw, words=mask), want):
            steps = (words - used) / W8A8_STEP_WORDS
            lost = "no code of a row entered the sum" if used == 0 else (
                f"only the first {4 * used} codes of each row entered the sum")
            last = "the last step of 32" if steps == 1 else f"the last {steps:g} steps of 32"
            return [("w8a8_k_words", (
                f"{lost}, of K = {k}: the last {k - 4 * used} codes ({last}) never entered the sum. "
                "a_q and w_q are (rows, K / 4) uint32 words of 4 codes each; the steps of K run k0 = 0, 8, 16, ... "
                "words up to a_q.shape[1], the last step included"))]
    for kept in range(1, W8A8_STEP_WORDS):        # the first ``kept`` words of every step
        mask = np.arange(words) % W8A8_STEP_WORDS < kept
        if mask.all():
            continue
        if _matches(got, w8a8_model(a_q, sa, w_q, sw, words=mask), want):
            return [("w8a8_k_words", (
                f"words {kept} ... 7 of every step of 8 words (codes {4 * kept} ... 31 of every 32) never entered "
                "the sum: a step is K_WORDS = 8 uint32 words, and the loop over a step's words must take all 8"))]
    return []


def w8a8_findings(got, a_q, sa, w_q, sw, *, unwritten=None) -> list[tuple[str, str]]:
    """got: a kernel's y (M, N) for a_q (M, K) int8, sa (M,), w_q (N, K) int8, sw (N,); ``unwritten``: the mask of
    the outputs that still hold the poison. The rule the output follows, or where the unwritten outputs lie."""
    got = np.asarray(got, np.float64)
    want = w8a8_model(a_q, sa, w_q, sw)
    if unwritten is not None and np.asarray(unwritten).any():
        return _unwritten_findings(np.asarray(unwritten, bool), np.asarray(a_q).shape[1] // 4)
    if not np.all(np.isfinite(got)) or np.all(np.abs(got - want) <= W8A8_RTOL * np.abs(want)):
        return []
    for accumulator in ("int16", "int8"):
        if _matches(got, w8a8_model(a_q, sa, w_q, sw, accumulator=accumulator), want):
            return [(f"w8a8_accumulator_{accumulator}", _ACCUMULATOR[accumulator])]
    if len(sa) == len(sw) and _matches(got, w8a8_model(a_q, sa, w_q, sw, scales="swapped"), want):
        return [("w8a8_scales_swapped", _SWAPPED)]
    for scales, which in _MISSING.items():
        if _matches(got, w8a8_model(a_q, sa, w_q, sw, scales=scales), want):
            return [("w8a8_scale_missing", (
                f"your y leaves out {which}: y[m, n] = sa[m] sw[n] times the exact sum, each scale once, the "
                "token's sa[m] (m a row of y) and the channel's sw[n] (n a column)"))]
    found = _word_findings(got, a_q, sa, w_q, sw, want)
    if found:
        return found
    magnitudes = np.abs(np.asarray(a_q, np.int64)) @ np.abs(np.asarray(w_q, np.int64)).T
    k = np.asarray(a_q).shape[1]
    bound = (k + 3) * 2.0 ** -23 * magnitudes * np.abs(np.asarray(sa, np.float64))[:, None] \
        * np.abs(np.asarray(sw, np.float64))[None, :]
    error = np.abs(got - want)
    if np.all(error <= bound + W8A8_RTOL * np.abs(want)):
        if np.all(np.asarray(sa) == 1) and np.all(np.asarray(sw) == 1):
            return [("w8a8_float_sum", (
                "your y is the exact sum rounded: with every scale 1 each output is an integer, the sum of K int8 "
                "products, which an int32 holds exactly; a float32 running sum keeps 24 bits and rounds every "
                "partial sum past 2**24 (here y reaches {:.0f}). Keep the sums in an int32 array to the end of "
                "K".format(float(np.abs(want).max()))))]
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = np.where(want != 0, error / np.abs(want), np.where(error > 0, np.inf, 0.0))
        return [("w8a8_scale_inside_sum", _INSIDE.format(bound=W8A8_RTOL, worst=float(relative.max())))]
    return []


def _unwritten_findings(unwritten: np.ndarray, words: int) -> list[tuple[str, str]]:
    """Where the never-written outputs of y lie: tokens or channels from an index on, or the outer rows and columns
    of every 64 x 64 tile; else how many, and the first."""
    M, N = unwritten.shape
    rows = np.flatnonzero(unwritten.all(axis=1))
    cols = np.flatnonzero(unwritten.all(axis=0))
    for axis, full, count, name, array in ((0, rows, M, "tokens", "a_q"), (1, cols, N, "channels", "w_q")):
        if full.size and full[0] > 0 and np.array_equal(full, np.arange(full[0], count)):
            only = np.zeros_like(unwritten)
            if axis == 0:
                only[full[0]:] = True
            else:
                only[:, full[0]:] = True
            if np.array_equal(only, unwritten):
                shape = (f": {full[0]} is K / 4 = {array}.shape[1], the words of a row; the number of {name} is "
                         f"{array}.shape[0]" if full[0] == words else
                         f": every one of the {count} {name} is written, under the guard row < M and col < N")
                where = "rows" if axis == 0 else "columns"
                return [("w8a8_unwritten", f"{name} {full[0]} ... {count - 1} ({where} of y) were never "
                                           f"written{shape}")]
    m, n = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    outer = (m % W8A8_TILE >= W8A8_THREADS) | (n % W8A8_TILE >= W8A8_THREADS)
    if outer.any() and np.array_equal(unwritten, outer):
        return [("w8a8_unwritten", (
            "only the first 16 rows and 16 columns of each 64 x 64 tile of y were written: a block of 16 x 16 "
            "threads covers its whole 64 x 64 tile, each thread 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j)"))]
    first_m, first_n = (int(i) for i in np.argwhere(unwritten)[0])
    return [("w8a8_unwritten", (
        f"{int(unwritten.sum())} outputs of y were never written, the first at token {first_m}, channel {first_n}: "
        "each of the 4 x 4 outputs of a thread that lies inside y (row < M, col < N) is written once"))]


# the simulator refuses to store an integer past a narrow integer type (a GPU keeps its low bits)
_NARROW_STORE = re.compile(r"integer (-?\d+) out of bounds for (int16|int8)")


def w8a8_launch_findings(exc, line: str) -> tuple[str, str] | None:
    """An exception of the simulator in a W8A8 GEMM kernel, read: a sum stored past int16 or int8 (an
    accumulator too narrow); an index past sa or sw (the scales swapped, or read without the guard), past y (the
    store without its guard), past the rows of a_q or w_q (a tile's load without its guard) or past their words
    (the loop over K). None for anything else."""
    at = f" (at `{line}`)" if line else ""
    stored = _NARROW_STORE.search(str(exc)) if isinstance(exc, (OverflowError, ValueError)) else None
    if stored:
        kind = stored.group(2)
        return (f"w8a8_accumulator_{kind}", (
            f"a sum of int8 products came out as {stored.group(1)}{at}, " + _REFUSED[kind] + " (a GPU keeps the low "
            "bits and carries on with another number): " + _ACCUMULATOR[kind]))
    match = _BOUNDS.search(str(exc)) if isinstance(exc, IndexError) else None
    if match is None:
        return None
    index, axis, size = match.group(1), int(match.group(2)), match.group(3)
    past = f"index {index} of {size} along axis {axis}"
    if re.search(r"\b(sa|sw)\s*\[", line):
        return ("w8a8_scale_index", (
            f"the kernel read a scale past the end of sa or sw{at} ({past}): sa has M scales, one per token (a row "
            "of y, m < M = a_q.shape[0]), sw has N, one per output channel (a column of y, n < N = w_q.shape[0]); "
            "sa takes the row index, sw the column index, each read only under its guard"))
    if re.search(r"\by\s*\[", line):
        return ("w8a8_store_guard", (
            f"a thread wrote y past its last token or channel{at} ({past}): the grid covers M and N in whole 64 x "
            "64 tiles, so the outputs of a tile past M or N must be left alone: guard the store with row < M and "
            "col < N (M = a_q.shape[0], N = w_q.shape[0])"))
    if re.search(r"\b(a_q|w_q)\s*\[", line):
        if axis == 1:
            return ("w8a8_k_past_end", (
                f"the kernel read a word past the end of a row of a_q or w_q{at} ({past}): they are (rows, K / 4) "
                "uint32 words of 4 codes each, so the loop over K runs over a_q.shape[1] words, 8 a step"))
        return ("w8a8_load_guard", (
            f"the kernel read a row of a_q or w_q past the last token or channel{at} ({past}): the rows of a tile "
            "past M = a_q.shape[0] or N = w_q.shape[0] hold zeros, without a load (shape[1] counts the words of a "
            "row, K / 4)"))
    return None
