"""fp8 e4m3: the codes of an fp8 cache, decoded and encoded with integer and float arithmetic only, and the tools
that build and read such a cache.

An fp8 cache is stored as ``uint8`` codes with one float32 scale per group (a page of a KV head) and decoded in
the kernel: numba has no fp8 conversion the simulator runs, and no bit cast either (the simulator's libdevice
``int_as_float`` returns None), so nothing here reinterprets bits (``docs/design-notes.md`` §4; the rungs from
``gqa_decode_half_warps`` on also reach PTX's own conversion, ``kernels.intrinsics.eight_codes``):

- decoding a code ``s eeee mmm``: ``value * 2**9`` is the integer ``(8 + m) << (e - 1)`` (normal)
  or ``m`` (subnormal), below 2**24, so one integer-to-float conversion is exact (``e4m3_integer``).
  The decode kernels read it from a 256-entry table in shared memory that each block fills
  (``common.fill_e4m3_table``); the factor ``2**-9`` (``TWO_TO_MINUS_9``) joins the page's scale.
- encoding (``_e4m3_code``): ``y = x / scale`` in float32 (IEEE division), then ``frexp`` gives the
  binade and the significand ``16 f`` in [8, 16), rounded to nearest even by hand (floor and the
  parity of the floor, ``_round_half_even``): bit for bit ``reference.quantize_fp8`` on the simulator and
  on a GPU.

The tools (kernels with launchers of the ladders' pattern, not rungs: their outputs are bits, checked bit for
bit, where the registry's check compares floats):

- ``fp8_quantize``: float32 to e4m3 codes (uint8) with one scale per group (a page of a KV head):
  the given scales, or ``amax / 448`` per group (one block per group reduces its amax); round to
  nearest even, subnormals included, saturating to +-448 (as ``cvt.rn.satfinite``). The day's
  exercise.
- ``fp8_dequantize``: codes and scales back to float32, ``code value * scale``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32

from kernels.launching import (FULL_MASK, WARP, cdiv, is_device_array, note_output, output_array, require_array,
                               require_dtype, require_int, require_same_kind)

__all__ = ["E4M3_MAX", "E4M3_MIN_NORMAL", "TWO_TO_MINUS_9", "FP8_THREADS", "FP8_WARPS", "e4m3_integer",
           "fp8_quantize_kernel", "fp8_quantize", "fp8_dequantize_kernel", "fp8_dequantize"]

E4M3_MAX = 448.0
E4M3_MIN_NORMAL = 2.0 ** -6     # e4m3's smallest normal number: below it the codes step by 2**-9
TWO_TO_MINUS_9 = 2.0 ** -9      # an e4m3 value is its integer e4m3_integer times 2**-9
FP8_THREADS = 128       # threads of a quantize block (one block per group) and of a dequantize block
FP8_WARPS = FP8_THREADS // WARP    # warps of a quantize block


# ----------------------------------------------------------------------------------------------
# fp8 e4m3 codes: decode and encode with integer and float arithmetic only
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def e4m3_integer(code):
    """``value * 2**9`` of an e4m3 code (0 ... 255) as an int32, exactly.

    Normal (exponent field e >= 1): ``(8 + m) << (e - 1)``; subnormal: ``m``. The NaN codes 0x7f
    and 0xff give +-480 * 2**9 (no cache the quantizer writes holds them). The int32(...) around
    each step keeps numba's arithmetic in 32 bits (it widens integer operations to 64)."""
    c = int32(code)
    e = int32((c >> 3) & 15)
    m = int32(c & 7)
    magnitude = int32((m | 8) << (e - 1)) if e > 0 else m
    return int32(-magnitude) if c & 0x80 else magnitude


@cuda.jit(device=True, inline=True)
def _round_half_even(r):
    """The integer nearest to r >= 0 (ties to the even one), as an int32: floor, then the parity."""
    q = int32(math.floor(r))
    rest = r - float32(q)                       # exact: r < 2**24
    if rest > 0.5 or (rest == 0.5 and q & 1):
        q += 1
    return q


@cuda.jit(device=True, inline=True)
def _e4m3_code(y):
    """The e4m3 code (0 ... 255) of the e4m3 number nearest to float32 ``y``: ties to even,
    subnormals included, |y| > 448 and infinities saturate to +-448 (0x7e, 0xfe), NaN is 0x7f."""
    a = abs(y)
    if a != a:
        code = int32(0x7F)
    elif a >= E4M3_MAX:
        code = int32(0x7E)
    elif a < E4M3_MIN_NORMAL:
        code = _round_half_even(a * float32(512.0))        # multiples of 2**-9; 8 is the smallest normal
    else:
        f, e = math.frexp(a)                                # a = f * 2**e, f in [0.5, 1), e in [-5, 9]
        # exponent field e - 1 + 7, mantissa 16 f - 8; a significand that rounds up to 16 carries into
        # the exponent field by itself ((e + 6) * 8 + 8 = (e + 7) * 8)
        code = int32((int32(e) + 6) * 8 + _round_half_even(f * float32(16.0)) - 8)
    if math.copysign(float32(1.0), y) < 0:
        code = int32(code | 0x80)
    return code


# ----------------------------------------------------------------------------------------------
# Tools: quantize to fp8 e4m3 codes with per-group scales, and back
# ----------------------------------------------------------------------------------------------

@cuda.jit
def fp8_quantize_kernel(x, scales, codes, compute_scales):
    """Block g quantizes group g (row g of x, (groups, group_size) float32) into row g of codes.

    With ``compute_scales`` the block first finds the group's amax (each thread over its elements,
    then a butterfly per warp and the warps' maxima in shared memory) and thread 0 writes
    ``scales[g] = amax / 448`` (1 for a group of zeros); else it reads ``scales[g]``."""
    g = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    n = x.shape[1]
    warp_amax = cuda.shared.array(FP8_WARPS, float32)
    if compute_scales:
        amax = float32(0.0)
        for i in range(tid, n, FP8_THREADS):
            amax = max(amax, abs(x[g, i]))
        for offset in (16, 8, 4, 2, 1):
            amax = max(amax, cuda.shfl_xor_sync(FULL_MASK, amax, offset))
        if tid % WARP == 0:
            warp_amax[tid // WARP] = amax
        cuda.syncthreads()
        for w in range(FP8_WARPS):
            amax = max(amax, warp_amax[w])
        scale = amax / float32(E4M3_MAX) if amax > 0 else float32(1.0)
        if tid == 0:
            scales[g] = scale
    else:
        scale = scales[g]
    for i in range(tid, n, FP8_THREADS):
        codes[g, i] = _e4m3_code(x[g, i] / scale)


def _grouped(name, a, group_ndim):
    """(groups, group_size) of ``a`` whose last ``group_ndim`` dimensions form a group, and the leading shape."""
    if a.ndim < group_ndim:
        raise ValueError(f"{name} must have at least group_ndim = {group_ndim} dimensions (its last group_ndim "
                         f"dimensions form a group), got shape {tuple(a.shape)}")
    lead = tuple(a.shape[:a.ndim - group_ndim])
    groups = math.prod(lead)
    return groups, (math.prod(a.shape) // groups if groups else 0), lead


def fp8_quantize(x, *, scales=None, group_ndim=2, out=None, out_scales=None, kernel=fp8_quantize_kernel):
    """Quantize float32 ``x`` to fp8 e4m3 codes with one float32 scale per group; returns (codes, scales).

    x: float32, any shape with at least ``group_ndim`` dimensions; its last ``group_ndim`` dimensions
    form a group (2, the default: a page of one KV head of a cache (num_blocks, kv_heads, block_size,
    head_dim), one scale per (block, kv_head)). scales: float32 of the leading shape
    ``x.shape[:-group_ndim]``, positive and finite (checked for NumPy arrays); None computes
    ``amax / 448`` per group (then x must be finite). Returns codes (uint8, the shape of x; ``out``)
    and the scales (the given array, or a new one: ``out_scales``). Bit for bit
    ``reference.quantize_fp8``. One block of ``FP8_THREADS`` threads per group.
    """
    require_dtype("x", x, np.float32)
    group_ndim = require_int("group_ndim", group_ndim, minimum=1)
    shape = tuple(x.shape)
    require_array("x", x, (None,) * len(shape), np.float32)
    groups, group_size, lead = _grouped("x", x, group_ndim)
    compute = scales is None
    if compute:
        if not is_device_array(x) and x.size and not np.all(np.isfinite(x)):
            raise ValueError("x must be finite when the scales are computed from it (amax / 448); give scales")
        scales = output_array("out_scales", out_scales, lead, like=x)
    else:
        if out_scales is not None:
            raise ValueError("out_scales must be None when scales are given (the given scales are returned)")
        require_array("scales", scales, lead, np.float32)
        require_same_kind(x=x, scales=scales)
        if not is_device_array(scales) and scales.size and not np.all(np.isfinite(scales) & (scales > 0)):
            raise ValueError("scales must be positive and finite")
    codes = output_array("out", out, shape, like=x, dtype=np.uint8)
    if groups and group_size:
        # The kernel sees (groups, group_size) views; those of the outputs are outputs too.
        group_scales = scales.reshape(groups)
        kernel[groups, FP8_THREADS](x.reshape(groups, group_size),
                                    note_output(group_scales) if compute else group_scales,
                                    note_output(codes.reshape(groups, group_size)), compute)
    return codes, scales


@cuda.jit
def fp8_dequantize_kernel(codes, scales, out):
    """Thread i writes out[g, c] = value(codes[g, c]) * scales[g] for element i = g * group_size + c."""
    i = cuda.grid(1)
    n = codes.shape[1]
    if i < codes.shape[0] * n:
        g = i // n
        c = i - g * n
        out[g, c] = float32(e4m3_integer(codes[g, c])) * (scales[g] * float32(TWO_TO_MINUS_9))


def fp8_dequantize(codes, scales, *, group_ndim=2, out=None, kernel=fp8_dequantize_kernel):
    """float32 values ``value(code) * scale`` of fp8 e4m3 codes (uint8) with one scale per group of
    their last ``group_ndim`` dimensions (scales: float32 of the leading shape); returns out, the
    shape of codes. Each is ``reference.dequantize_fp8`` rounded once to float32."""
    require_dtype("codes", codes, np.uint8)
    group_ndim = require_int("group_ndim", group_ndim, minimum=1)
    shape = tuple(codes.shape)
    require_array("codes", codes, (None,) * len(shape), np.uint8)
    groups, group_size, lead = _grouped("codes", codes, group_ndim)
    require_array("scales", scales, lead, np.float32)
    require_same_kind(codes=codes, scales=scales)
    out = output_array("out", out, shape, like=codes)
    total = groups * group_size
    if total:
        kernel[cdiv(total, FP8_THREADS), FP8_THREADS](codes.reshape(groups, group_size), scales.reshape(groups),
                                                      note_output(out.reshape(groups, group_size)))
    return out
