"""Bit casts, fp8 and bf16 conversions, packed words and dp4a: the number instructions of ``kernels.intrinsics``."""

from __future__ import annotations

import math
import struct

import numpy as np
from llvmlite import ir
from numba import float32, int32, types, uint16, uint32

from kernels.intrinsics._twins import _asm_call, _twin, _widened


# ----------------------------------------------------------------------------------------------
# Bit casts: a register's bits as fp16 or float32 numbers
# ----------------------------------------------------------------------------------------------

def _four_halves_simulated(word):
    """The 4 fp16 numbers packed in a uint64 word (channel 4 l + j in bits 16 j ... 16 j + 15), as float32."""
    h = np.array([word], np.uint64).view(np.float16)
    return float32(h[0]), float32(h[1]), float32(h[2]), float32(h[3])


@_twin(_four_halves_simulated)
def four_halves(typingctx, word):
    """The 4 fp16 numbers packed in a uint64 word (number j in bits 16 j ... 16 j + 15), as float32: a bit
    cast of the register to 4 halves (no instruction) and 4 ``cvt.f32.f16``."""
    if word != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        vec = builder.bitcast(args[0], ir.VectorType(ir.HalfType(), 4))
        return context.make_tuple(builder, signature.return_type, _widened(builder, vec, 4))
    return types.UniTuple(types.float32, 4)(types.uint64), codegen


def _two_floats_simulated(word):
    """The 2 float32 numbers packed in a uint64 word (the lower channel in the low 32 bits)."""
    f = np.array([word], np.uint64).view(np.float32)
    return f[0], f[1]


@_twin(_two_floats_simulated)
def two_floats(typingctx, word):
    """The 2 float32 numbers packed in a uint64 word (number 0 in the low 32 bits): a bit cast of the
    register to 2 floats (no instruction)."""
    if word != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        vec = builder.bitcast(args[0], ir.VectorType(ir.FloatType(), 2))
        return context.make_tuple(builder, signature.return_type, [
            builder.extract_element(vec, ir.Constant(ir.IntType(32), i)) for i in range(2)])
    return types.UniTuple(types.float32, 2)(types.uint64), codegen


def _unpack_halves_simulated(word):
    """The two fp16 numbers of a uint32 word, as float32 (the low half first)."""
    h = np.array([word], np.uint32).view(np.float16)
    return float32(h[0]), float32(h[1])


@_twin(_unpack_halves_simulated)
def unpack_halves(typingctx, word):
    """The two fp16 numbers of a uint32 word as float32, the low half first: a bit cast of the register to
    2 halves (no instruction) and 2 ``cvt.f32.f16``."""
    if word != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        vec = builder.bitcast(args[0], ir.VectorType(ir.HalfType(), 2))
        return context.make_tuple(builder, signature.return_type, _widened(builder, vec, 2))
    return types.UniTuple(types.float32, 2)(types.uint32), codegen


def _float_bits_simulated(x):
    """The 32 bits of a float32 number, as a uint32."""
    return uint32(np.array([x], np.float32).view(np.uint32)[0])


@_twin(_float_bits_simulated)
def float_bits(typingctx, x):
    """The 32 bits of a float32 number as a uint32 word: a bit cast of the register (no instruction), so a float
    can be kept in an array of words (``bits_float`` reads it back)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


def _bits_float_simulated(word):
    """The float32 number whose 32 bits are the uint32 ``word``."""
    return np.array([word], np.uint32).view(np.float32)[0]


@_twin(_bits_float_simulated)
def bits_float(typingctx, word):
    """The float32 number whose bits are the uint32 ``word`` (``float_bits`` undone): a bit cast, no instruction."""
    if word != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


# ----------------------------------------------------------------------------------------------
# fp8 e4m3 codes to fp16 numbers: cvt.rn.f16x2.e4m3x2 (sm_89 and later)
# ----------------------------------------------------------------------------------------------

# Both halves of a 32-bit word of 4 codes in one asm: ptxas reads each half in place (no shift, no move).
_E4M3X4 = "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }"


def _e4m3_number(code) -> float:
    """The number an e4m3 code (0 ... 255) stands for, as PTX's conversion gives it: ``s eeee mmm`` is
    ``(8 + m) 2**(e - 1) 2**-9`` (normal, e >= 1) or ``m 2**-9`` (subnormal), the codes 0x7f and 0xff NaN."""
    code = int(code)
    e, m = code >> 3 & 15, code & 7
    magnitude = math.nan if code & 0x7F == 0x7F else ((8 + m) << (e - 1) if e else m) * 2.0 ** -9
    return -magnitude if code & 0x80 else magnitude         # 0x80 is -0.0


def _eight_codes_simulated(word):
    """The 8 e4m3 codes packed in a uint64 word (channel j in byte j), as float32 numbers (not scaled), as
    PTX's cvt.rn.f16x2.e4m3x2 gives them: the codes 0x7f and 0xff are NaN (the table says +-480)."""
    return tuple(float32(_e4m3_number(code)) for code in np.array([word], np.uint64).view(np.uint8))


@_twin(_eight_codes_simulated)
def eight_codes(typingctx, word):
    """The 8 e4m3 codes packed in a uint64 word (code j in byte j) as float32 numbers, not scaled: two
    ``cvt.rn.f16x2.e4m3x2`` per 32-bit half (exact: every e4m3 number is an fp16 number), then
    ``cvt.f32.f16``. The codes 0x7f and 0xff are NaN."""
    if word != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        values = []
        for half in range(2):
            codes = builder.trunc(builder.lshr(args[0], ir.Constant(args[0].type, 32 * half)), i32)
            for pair in _asm_call(builder, _E4M3X4, "=r,=r,r", [i32, i32], [codes]):
                values += _widened(builder, builder.bitcast(pair, ir.VectorType(ir.HalfType(), 2)), 2)
        return context.make_tuple(builder, signature.return_type, values)
    return types.UniTuple(types.float32, 8)(types.uint64), codegen


def _e4m3_pairs_simulated(word):
    """The 4 e4m3 codes of a uint32 word (byte j: code j) as two uint32 words of 2 fp16 numbers each (codes
    0, 1 and 2, 3; the lower code in the low half), exactly as PTX's cvt.rn.f16x2.e4m3x2 gives them."""
    values = np.array([_e4m3_number(code) for code in np.array([word], np.uint32).view(np.uint8)], np.float16)
    pairs = values.view(np.uint32)
    return uint32(pairs[0]), uint32(pairs[1])


@_twin(_e4m3_pairs_simulated)
def e4m3_pairs(typingctx, word):
    """The 4 e4m3 codes of a uint32 word (code j in byte j) as two uint32 words of 2 fp16 numbers each
    (codes 0, 1 and 2, 3; the lower code in the low half): two ``cvt.rn.f16x2.e4m3x2``, packed as an
    mma's fragments want them."""
    if word != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        pairs = _asm_call(builder, _E4M3X4, "=r,=r,r", [i32, i32], [args[0]])
        return context.make_tuple(builder, signature.return_type, pairs)
    return types.UniTuple(types.uint32, 2)(types.uint32), codegen


# ----------------------------------------------------------------------------------------------
# Packed words: prmt.b32, cvt.rn.f16x2.f32
# ----------------------------------------------------------------------------------------------

def _byte_perm_simulated(a, b, selector):
    """PTX's prmt.b32: byte j of the result is byte ``selector >> 4 j & 7`` of b:a (a's bytes are 0-3)."""
    both = int(b) << 32 | int(a)
    out = 0
    for j in range(4):
        out |= (both >> 8 * (int(selector) >> 4 * j & 7) & 0xFF) << 8 * j
    return uint32(out)


@_twin(_byte_perm_simulated)
def byte_perm(typingctx, a, b, selector):
    """PTX's ``prmt.b32``: byte j of the result is byte ``selector >> 4 j & 7`` of the 8 bytes b:a (a's bytes
    are 0 to 3), all three uint32; e.g. ``0x5410`` takes the low halves of a and b."""
    if (a, b, selector) != (types.uint32,) * 3:
        return None

    def codegen(context, builder, signature, args):
        return _asm_call(builder, "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [ir.IntType(32)], list(args))[0]
    return types.uint32(types.uint32, types.uint32, types.uint32), codegen


def _pack_halves_simulated(low, high):
    """Two float32 numbers rounded to nearest fp16 and packed into a uint32 (``low`` in the low half)."""
    return uint32(np.array([low, high], np.float32).astype(np.float16).view(np.uint32)[0])


@_twin(_pack_halves_simulated)
def pack_halves(typingctx, low, high):
    """Two float32 numbers rounded to the nearest fp16 and packed into a uint32, ``low`` in the low half:
    PTX's ``cvt.rn.f16x2.f32``."""
    if (low, high) != (types.float32,) * 2:
        return None

    def codegen(context, builder, signature, args):
        return _asm_call(builder, "cvt.rn.f16x2.f32 $0, $2, $1;", "=r,f,f", [ir.IntType(32)], list(args))[0]
    return types.uint32(types.float32, types.float32), codegen


def _pack_bfloat16s_simulated(low, high):
    """Two float32 numbers rounded to the nearest bf16 (ties to even) and packed into a uint32 (``low`` in the low
    half)."""
    import ml_dtypes

    return uint32(np.array([low, high], np.float32).astype(ml_dtypes.bfloat16).view(np.uint32)[0])


@_twin(_pack_bfloat16s_simulated)
def pack_bfloat16s(typingctx, low, high):
    """Two float32 numbers rounded to the nearest bf16 (ties to even) and packed into a uint32, ``low`` in the low
    half: PTX's ``cvt.rn.bf16x2.f32`` (sm_80 and later), ``pack_halves`` for bf16: the words of a bf16 mma's
    A fragment, or of a bf16 output, from float32 numbers in one instruction."""
    if (low, high) != (types.float32,) * 2:
        return None

    def codegen(context, builder, signature, args):
        return _asm_call(builder, "cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,f,f", [ir.IntType(32)], list(args))[0]
    return types.uint32(types.float32, types.float32), codegen


def _bfloat16_bits_simulated(x):
    """A float32 number rounded to the nearest bf16 (ties to even), as its 16 bits."""
    import ml_dtypes

    return uint16(np.array([x], np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0])


@_twin(_bfloat16_bits_simulated)
def bfloat16_bits(typingctx, x):
    """A float32 number rounded to the nearest bf16 (ties to even), as its 16 bits (uint16): PTX's
    ``cvt.rn.bf16.f32`` (sm_80 and later), the instruction CUDA's ``__float2bfloat16`` holds."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return _asm_call(builder, "cvt.rn.bf16.f32 $0, $1;", "=h,f", [ir.IntType(16)], list(args))[0]
    return types.uint16(types.float32), codegen


def _bfloat16_value_simulated(bits):
    """The float32 of a bf16 number given as its 16 bits."""
    return np.array([int(bits) << 16], np.uint32).view(np.float32)[0]


@_twin(_bfloat16_value_simulated)
def bfloat16_value(typingctx, bits):
    """The float32 of a bf16 number given as its 16 bits (uint16): a bf16 number is the upper half of the float32
    of the same value, so its bits are widened, moved 16 places up and the register read as float32 (a shift and
    a bit cast: exact, no conversion call)."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        wide = builder.shl(builder.zext(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.bitcast(wide, ir.FloatType())
    return types.float32(types.uint16), codegen


# ----------------------------------------------------------------------------------------------
# Integer dot products: dp4a.s32.s32 (sm_61 and later)
# ----------------------------------------------------------------------------------------------

_WORD = struct.Struct("<I")
_SIGNED_BYTES = struct.Struct("<4b")


def _dp4a_simulated(a, b, c):
    """c plus the dot product of the 4 signed bytes of the uint32 words a and b (byte j with byte j), wrapped
    to int32 as the 32-bit register wraps."""
    a0, a1, a2, a3 = _SIGNED_BYTES.unpack(_WORD.pack(int(a)))
    b0, b1, b2, b3 = _SIGNED_BYTES.unpack(_WORD.pack(int(b)))
    total = int(c) + a0 * b0 + a1 * b1 + a2 * b2 + a3 * b3
    return int32(((total + 2 ** 31) & 0xFFFFFFFF) - 2 ** 31)


@_twin(_dp4a_simulated)
def dp4a(typingctx, a, b, c):
    """PTX's ``dp4a.s32.s32``: ``c`` (int32) plus the dot product of the 4 signed bytes of the uint32 words ``a``
    and ``b`` (byte j of a times byte j of b, each sign-extended), an int32: 4 multiply-adds of int8 pairs in
    one instruction."""
    if (a, b, c) != (types.uint32, types.uint32, types.int32):
        return None

    def codegen(context, builder, signature, args):
        return _asm_call(builder, "dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [ir.IntType(32)], list(args))[0]
    return types.int32(types.uint32, types.uint32, types.int32), codegen
