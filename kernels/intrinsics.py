"""The instructions numba.cuda cannot write, as device functions: one home for every intrinsic of the kernels.

numba compiles Python to PTX through LLVM, and its CUDA target offers what NVVM's libdevice and its own
typing offer: arithmetic, conversions between its number types, atomics, the warp intrinsics. It has no
bit cast (a register's 64 bits seen as four fp16 numbers: numba has no packed half2 type either), no
instruction of the fp8 formats, no byte permute and no tensor-core instruction. The kernels reach them
here in two ways (``docs/design-notes.md`` §4):

- an **llvmlite intrinsic**: ``numba.cuda.extending.intrinsic`` gives a typing function and a code
  generator that writes LLVM IR itself, here a ``bitcast`` of the register to a vector of halves or
  floats (no instruction: the register is read in place) and an ``fpext`` per number (``cvt.f32.f16``);
- **inline PTX**: the code generator calls an ``llvmlite.ir.InlineAsm`` holding the instruction's text
  and its operand constraints, which NVVM passes through to the PTX untouched (ptxas checks it for the
  target, so an instruction of a newer GPU than the one compiled for fails when the PTX is assembled).

Each helper has a simulator twin, a Python function with the instruction's semantics (NumPy on the
bits), which the simulator runs instead (``config.ENABLE_CUDASIM``): both are written beside each other
and ``_twin`` picks one, once, when this module is imported. The helpers, by what they reach:

- ``four_halves(word)`` (uint64): the 4 fp16 numbers of a word as float32 (bit cast, ``cvt.f32.f16``);
- ``two_floats(word)`` (uint64): the 2 float32 numbers of a word (bit cast);
- ``unpack_halves(word)`` (uint32): the 2 fp16 numbers of a word as float32 (bit cast, ``cvt.f32.f16``);
- ``eight_codes(word)`` (uint64): 8 fp8 e4m3 codes as float32 numbers, through PTX's
  ``cvt.rn.f16x2.e4m3x2`` (two codes to two fp16 numbers, exactly; sm_89 and later);
- ``e4m3_pairs(word)`` (uint32): 4 e4m3 codes as two words of two fp16 numbers each, the same
  instruction, its results kept packed (the A and B fragments of an mma);
- ``byte_perm(a, b, selector)``: PTX's ``prmt.b32``, any 4 of the 8 bytes of two words;
- ``pack_halves(low, high)``: two float32 numbers rounded to fp16 and packed, PTX's ``cvt.rn.f16x2.f32``;
- ``dp4a(a, b, c)``: PTX's ``dp4a.s32.s32``, c plus the dot product of the 4 signed bytes of two words
  (sm_61 and later);
- ``mma_m16n8k16(a0, ..., c3)``: PTX's ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``, a warp's
  16 x 8 x 16 product of fp16 matrices into float32 (sm_80 and later). The simulator runs it as one
  exchange among the warp's lanes, ``cuda.simulator_collective_sync`` (``course.simulator``): every lane
  brings its fragments, and the product is computed once, exact in float64 and rounded to float32;
- ``mma_m16n8k32_s8(a0, ..., c3)``: PTX's ``mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32``, a warp's
  16 x 8 x 32 product of int8 matrices into int32 (sm_80 and later); its twin is the same exchange, the
  product exact in int64 and wrapped to int32 as the register wraps it.

Day 9 adds the integer instructions of int8 kernels here: ``dp4a`` (above: a dot product of 4 int8 pairs
into an int32), then ``lop3`` on packed bytes, 16-byte loads (``ld.global.v4``), and the int8 mma ``m16n8k32``.

The warp's size and full mask are ``kernels.launching.WARP`` and ``FULL_MASK`` (NumPy only, so the
simulator can read them before numba is imported).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import config, cuda, float32, int32, types, uint32
from numba.cuda.extending import intrinsic

from kernels.launching import FULL_MASK

__all__ = ["four_halves", "two_floats", "unpack_halves", "eight_codes", "e4m3_pairs", "byte_perm", "pack_halves",
           "dp4a", "mma_m16n8k16", "mma_m16n8k32_s8"]


def _twin(simulated):
    """The one choice between a helper's two forms, for the helper defined below it (its GPU form: the
    typing function of an intrinsic): the intrinsic on a GPU; ``simulated`` itself when the simulator runs
    the kernels. The simulator runs a kernel as Python, so the twin is called as the plain function it is:
    wrapped as a device function, every call would first swap this module's ``cuda`` for the simulator's
    kernel API and back, which costs more than most twins themselves. (The mma's twin reaches
    ``simulator_collective_sync`` on ``numba.cuda``, where ``course.simulator`` installs it too.)"""
    def choose(typing):
        if config.ENABLE_CUDASIM:
            return simulated
        return intrinsic(typing)
    return choose


def _asm_call(builder, text, constraints, result_types, operands):
    """The results of inline PTX ``text`` (LLVM wants one result as itself, several as a struct)."""
    single = len(result_types) == 1
    returns = result_types[0] if single else ir.LiteralStructType(result_types)
    function = ir.FunctionType(returns, [op.type for op in operands])
    result = builder.call(ir.InlineAsm(function, text, constraints), operands)
    return [result] if single else [builder.extract_value(result, i) for i in range(len(result_types))]


def _widened(builder, vector, count):
    """The ``count`` elements of an LLVM vector of halves, each extended to float32 (``cvt.f32.f16``)."""
    return [builder.fpext(builder.extract_element(vector, ir.Constant(ir.IntType(32), i)), ir.FloatType())
            for i in range(count)]


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


# ----------------------------------------------------------------------------------------------
# Integer dot products: dp4a.s32.s32 (sm_61 and later)
# ----------------------------------------------------------------------------------------------

def _dp4a_simulated(a, b, c):
    """c plus the dot product of the 4 signed bytes of the uint32 words a and b (byte j with byte j), wrapped
    to int32 as the 32-bit register wraps."""
    bytes_a = np.array([a], np.uint32).view(np.int8).astype(np.int64)
    bytes_b = np.array([b], np.uint32).view(np.int8).astype(np.int64)
    total = int(c) + int(bytes_a @ bytes_b)
    return int32((total + 2 ** 31) % 2 ** 32 - 2 ** 31)


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


# ----------------------------------------------------------------------------------------------
# Tensor cores: mma.sync.aligned.m16n8k16 with fp16 inputs and float32 accumulators
# ----------------------------------------------------------------------------------------------

def _halves_of(words) -> np.ndarray:
    """uint32 words of two fp16 numbers each, as float64 pairs (low half first)."""
    return np.array(words, np.uint32).view(np.float16).astype(np.float64).reshape(-1, 2)


def _mma_m16n8k16_of_warp(fragments):
    """D = A B + C of the whole warp, from ``fragments[lane] = (a, b, c)`` of all 32 lanes, laid out as PTX's
    ``mma.m16n8k16`` lays them (lane 4 g + t: a = A[g, 2t:2t+2], A[g+8, 2t:2t+2], A[g, 2t+8:2t+10],
    A[g+8, 2t+8:2t+10]; b = B[2t:2t+2, g], B[2t+8:2t+10, g]; c = C[g, 2t:2t+2], C[g+8, 2t:2t+2]; a and b
    uint32 words of two fp16 numbers, the lower column or row in the low 16 bits). Returns each lane's 4
    float32 of D, in the layout of c. The products are exact in float64 and D is rounded once to float32
    (a tensor core rounds its sums its own way, within float32's error)."""
    A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane, (a, b, c) in enumerate(fragments):
        g, t = lane >> 2, lane & 3
        pairs = _halves_of(a)
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = pairs[0], pairs[1]
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = pairs[2], pairs[3]
        pairs = _halves_of(b)
        B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = pairs[0], pairs[1]
        C[g, 2 * t:2 * t + 2], C[g + 8, 2 * t:2 * t + 2] = c[:2], c[2:]
    D = (A @ B + C).astype(np.float32)
    return [(D[lane >> 2, 2 * (lane & 3)], D[lane >> 2, 2 * (lane & 3) + 1],
             D[(lane >> 2) + 8, 2 * (lane & 3)], D[(lane >> 2) + 8, 2 * (lane & 3) + 1]) for lane in range(32)]


def _mma_m16n8k16_simulated(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """D = A B + C for an m16n8k16 tile, this lane's fragments: one exchange among the warp's 32 lanes (all
    must call, as ``.sync.aligned`` requires), whose product is computed once for the warp."""
    fragments = (tuple(int(w) & 0xFFFFFFFF for w in (a0, a1, a2, a3)), tuple(int(w) & 0xFFFFFFFF for w in (b0, b1)),
                 tuple(float(x) for x in (c0, c1, c2, c3)))
    return cuda.simulator_collective_sync(FULL_MASK, fragments, _mma_m16n8k16_of_warp)


@_twin(_mma_m16n8k16_simulated)
def mma_m16n8k16(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """D = A B + C on a warp's tensor cores: PTX's ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``. A is
    16 x 16 fp16 (row-major), B 16 x 8 fp16 (column-major), C and D 16 x 8 float32; the lane's fragments are
    ``a0 ... a3`` and ``b0, b1`` (uint32 words of two fp16 numbers, the lower column or row in the low 16
    bits) and ``c0 ... c3`` (float32), and it returns its 4 float32 of D. Lane 4 g + t holds a = A[g, 2t:2t+2],
    A[g+8, 2t:2t+2], A[g, 2t+8:2t+10], A[g+8, 2t+8:2t+10]; b = B[2t:2t+2, g], B[2t+8:2t+10, g]; c and d =
    C[g, 2t:2t+2], C[g+8, 2t:2t+2]. All 32 lanes of the warp must call it together."""
    if (a0, a1, a2, a3, b0, b1) != (types.uint32,) * 6 or (c0, c1, c2, c3) != (types.float32,) * 4:
        return None

    def codegen(context, builder, signature, args):
        d = _asm_call(builder, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, "
                               "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                      "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", [ir.FloatType()] * 4, list(args))
        return context.make_tuple(builder, signature.return_type, d)
    return types.UniTuple(types.float32, 4)(*(types.uint32,) * 6, *(types.float32,) * 4), codegen


# ----------------------------------------------------------------------------------------------
# Tensor cores on int8: mma.sync.aligned.m16n8k32 with s8 inputs and s32 accumulators (sm_80 and later)
# ----------------------------------------------------------------------------------------------

def _signed_bytes_of(words) -> np.ndarray:
    """uint32 words of 4 int8 numbers each, as int64 runs of 4 (byte 0, the lowest, first)."""
    return np.array(words, np.uint32).view(np.int8).astype(np.int64).reshape(-1, 4)


def _mma_m16n8k32_s8_of_warp(fragments):
    """D = A B + C of the whole warp, from ``fragments[lane] = (a, b, c)`` of all 32 lanes, laid out as PTX's
    ``mma.m16n8k32`` lays its s8 operands (lane 4 g + t: a = A[g, 4t:4t+4], A[g+8, 4t:4t+4], A[g, 4t+16:4t+20],
    A[g+8, 4t+16:4t+20]; b = B[4t:4t+4, g], B[4t+16:4t+20, g]; c = C[g, 2t:2t+2], C[g+8, 2t:2t+2]; a and b
    uint32 words of four int8 numbers, the lowest column or row in the low byte). Returns each lane's 4 int32
    of D, in the layout of c. The sums are exact in int64, then wrapped to int32 as the register wraps them
    (the instruction without ``.satfinite``)."""
    A, B, C = np.zeros((16, 32), np.int64), np.zeros((32, 8), np.int64), np.zeros((16, 8), np.int64)
    for lane, (a, b, c) in enumerate(fragments):
        g, t = lane >> 2, lane & 3
        runs = _signed_bytes_of(a)
        A[g, 4 * t:4 * t + 4], A[g + 8, 4 * t:4 * t + 4] = runs[0], runs[1]
        A[g, 4 * t + 16:4 * t + 20], A[g + 8, 4 * t + 16:4 * t + 20] = runs[2], runs[3]
        runs = _signed_bytes_of(b)
        B[4 * t:4 * t + 4, g], B[4 * t + 16:4 * t + 20, g] = runs[0], runs[1]
        C[g, 2 * t:2 * t + 2], C[g + 8, 2 * t:2 * t + 2] = c[:2], c[2:]
    D = ((A @ B + C + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    return [(D[lane >> 2, 2 * (lane & 3)], D[lane >> 2, 2 * (lane & 3) + 1],
             D[(lane >> 2) + 8, 2 * (lane & 3)], D[(lane >> 2) + 8, 2 * (lane & 3) + 1]) for lane in range(32)]


def _mma_m16n8k32_s8_simulated(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """D = A B + C for an m16n8k32 tile of int8 numbers, this lane's fragments: one exchange among the warp's 32
    lanes (all must call, as ``.sync.aligned`` requires), whose product is computed once for the warp."""
    fragments = (tuple(int(w) & 0xFFFFFFFF for w in (a0, a1, a2, a3)), tuple(int(w) & 0xFFFFFFFF for w in (b0, b1)),
                 tuple(int(x) for x in (c0, c1, c2, c3)))
    return cuda.simulator_collective_sync(FULL_MASK, fragments, _mma_m16n8k32_s8_of_warp)


@_twin(_mma_m16n8k32_s8_simulated)
def mma_m16n8k32_s8(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """D = A B + C on a warp's tensor cores: PTX's ``mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32``. A is
    16 x 32 int8 (row-major), B 32 x 8 int8 (column-major), C and D 16 x 8 int32; the lane's fragments are
    ``a0 ... a3`` and ``b0, b1`` (uint32 words of four int8 numbers, the lowest column or row in the low byte)
    and ``c0 ... c3`` (int32), and it returns its 4 int32 of D. Lane 4 g + t holds a = A[g, 4t:4t+4],
    A[g+8, 4t:4t+4], A[g, 4t+16:4t+20], A[g+8, 4t+16:4t+20]; b = B[4t:4t+4, g], B[4t+16:4t+20, g]; c and d =
    C[g, 2t:2t+2], C[g+8, 2t:2t+2] (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8). The products and sums
    are exact; past int32 the sum wraps (no ``.satfinite``). All 32 lanes of the warp must call it together."""
    if (a0, a1, a2, a3, b0, b1) != (types.uint32,) * 6 or (c0, c1, c2, c3) != (types.int32,) * 4:
        return None

    def codegen(context, builder, signature, args):
        d = _asm_call(builder, "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {$0, $1, $2, $3}, "
                               "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                      "=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r", [ir.IntType(32)] * 4, list(args))
        return context.make_tuple(builder, signature.return_type, d)
    return types.UniTuple(types.int32, 4)(*(types.uint32,) * 6, *(types.int32,) * 4), codegen
