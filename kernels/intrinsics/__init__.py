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
- ``float_bits(x)`` and ``bits_float(word)``: a float32 number's 32 bits as a uint32 word and back (bit casts,
  no instruction), so floats can be kept in an array of words;
- ``eight_codes(word)`` (uint64): 8 fp8 e4m3 codes as float32 numbers, through PTX's
  ``cvt.rn.f16x2.e4m3x2`` (two codes to two fp16 numbers, exactly; sm_89 and later);
- ``e4m3_pairs(word)`` (uint32): 4 e4m3 codes as two words of two fp16 numbers each, the same
  instruction, its results kept packed (the A and B fragments of an mma);
- ``byte_perm(a, b, selector)``: PTX's ``prmt.b32``, any 4 of the 8 bytes of two words;
- ``pack_halves(low, high)``: two float32 numbers rounded to fp16 and packed, PTX's ``cvt.rn.f16x2.f32``;
- ``pack_bfloat16s(low, high)``: two float32 numbers rounded to bf16 and packed, PTX's ``cvt.rn.bf16x2.f32``
  (sm_80 and later): the A fragment of a bf16 mma from float32 numbers, one instruction a word;
- ``bfloat16_bits(x)``: a float32 number rounded to the nearest bf16, as its 16 bits (uint16), PTX's
  ``cvt.rn.bf16.f32`` (sm_80 and later): what numba-cuda does for a store into a bf16 array by a call to a
  linked function, one instruction;
- ``bfloat16_value(bits)``: the float32 of a bf16 number's 16 bits (uint16): the bits moved to the top of a
  32-bit register, read as float32 (a shift and a bit cast, exact);
- ``dp4a(a, b, c)``: PTX's ``dp4a.s32.s32``, c plus the dot product of the 4 signed bytes of two words
  (sm_61 and later);
- ``mma_m16n8k16(a0, ..., c3)``: PTX's ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``, a warp's
  16 x 8 x 16 product of fp16 matrices into float32 (sm_80 and later). The simulator runs it as one
  exchange among the warp's lanes, ``cuda.simulator_collective_sync`` (``course.simulator``): every lane
  brings its fragments, and the product is computed once, exact in float64 and rounded to float32;
- ``mma_m16n8k16_bf16(a0, ..., c3)``: the same instruction on bf16 inputs, PTX's
  ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` (sm_80 and later), the same fragments and twin;
- ``ldmatrix_x4(tile, row, col)``: PTX's ``ldmatrix.sync.aligned.m8n8.x4.shared.b16``, four 8 x 8 matrices of
  16-bit numbers read from shared memory by the warp, each lane getting the words of an mma fragment; lane l
  names row l % 8 of matrix l // 8 by its position in a shared uint32 array ``tile``. Its twin is one exchange
  among the warp's lanes, each bringing the 16 bytes of the row it names;
- ``ldmatrix_x4_trans(tile, row, col)``: the same with ``.trans``, PTX's
  ``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16``: each 8 x 8 matrix is handed out transposed, so a lane
  gets two numbers of one column (rows 2c and 2c + 1), the B fragment of an mma from a row-major (k, n) tile
  (V in attention's P V); the same rows named, the same twin's exchange;
- ``cp_async_16(tile, row, col, src, src_row, src_col, valid)``, ``cp_async_commit_group()``,
  ``cp_async_wait_group(n)``: PTX's ``cp.async.cg.shared.global`` (16 bytes of a global array of 16-bit
  numbers copied into a shared uint32 array without passing through registers, or 16 zero bytes when not
  ``valid``), ``cp.async.commit_group`` and ``cp.async.wait_group n`` (sm_80 and later). The twins keep each
  thread's copies pending, in the groups it committed, until its ``cp_async_wait_group`` lets them land: a
  kernel that reads a tile before waiting for it reads the old bytes in the simulator too;
- ``mma_m16n8k32_s8(a0, ..., c3)``: PTX's ``mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32``, a warp's
  16 x 8 x 32 product of int8 matrices into int32 (sm_80 and later); its twin is the same exchange, the
  product exact in int64 and wrapped to int32 as the register wraps it;
- ``load_u32x4(array, row, col)``: PTX's ``ld.global.nc.v4.u32``, 4 words of a 2-dimensional uint32 array in
  global memory in one 16-byte load (numba's own loads stop at 8 bytes); the address must be 16-byte aligned,
  which the twin checks as the GPU would fault.

- ``load_f32_l2(array, index)``: PTX's ``ld.global.cg.f32``, one float32 of a global array read from L2, past the
  SM's L1 (which is not coherent between SMs): how a block reads what other blocks of the same launch wrote and
  fenced (day 10's one-pass decode attention, whose last block merges the others' partials).

Day 9 adds the integer instructions of int8 kernels here: ``dp4a`` (above: a dot product of 4 int8 pairs
into an int32), the int8 mma ``m16n8k32`` and the 16-byte loads of ``load_u32x4``.

The warp's size and full mask are ``kernels.launching.WARP`` and ``FULL_MASK`` (NumPy only, so the
simulator can read them before numba is imported).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import config, cuda, float32, int32, types, uint16, uint32
from numba.cuda import cgutils
from numba.cuda.extending import intrinsic

from kernels.launching import FULL_MASK

__all__ = ["four_halves", "two_floats", "unpack_halves", "eight_codes", "e4m3_pairs", "byte_perm", "pack_halves",
           "bfloat16_bits", "bfloat16_value", "float_bits", "bits_float",
           "pack_bfloat16s", "dp4a", "mma_m16n8k16", "mma_m16n8k16_bf16", "ldmatrix_x4", "ldmatrix_x4_trans",
           "cp_async_16", "cp_async_commit_group",
           "cp_async_wait_group", "mma_m16n8k32_s8", "load_u32x4", "load_f32_l2"]


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


def _asm_call(builder, text, constraints, result_types, operands, *, side_effect=False):
    """The results of inline PTX ``text`` (LLVM wants one result as itself, several as a struct).
    ``side_effect``: the instruction reads memory, so LLVM keeps it where it is (after the barrier that
    makes the memory ready) and never drops or merges it."""
    single = len(result_types) == 1
    returns = result_types[0] if single else ir.LiteralStructType(result_types)
    function = ir.FunctionType(returns, [op.type for op in operands])
    result = builder.call(ir.InlineAsm(function, text, constraints, side_effect=side_effect), operands)
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
# 16-byte loads from global memory: ld.global.nc.v4.u32 (numba's own loads stop at 8 bytes)
# ----------------------------------------------------------------------------------------------

def _load_u32x4_simulated(array, row, col):
    """Words ``col ... col + 3`` of row ``row`` of the 2-dimensional uint32 ``array``, as a tuple; the 16 bytes must
    be 16-byte aligned (``col`` and the rows' length multiples of 4 words), as the GPU's instruction requires."""
    if array.dtype != np.uint32 or len(array.shape) != 2:
        raise TypeError(f"load_u32x4: array must be a 2-dimensional array of uint32 words, got "
                        f"{len(array.shape)} dimensions of {array.dtype}")
    row, col = int(row), int(col)
    if array.shape[1] % 4 or col % 4:
        raise ValueError(f"load_u32x4: 16 bytes at a 16-byte aligned address: the array's rows must be a multiple "
                         f"of 4 words long and col a multiple of 4, got rows of {array.shape[1]} words and col {col}")
    if not (0 <= row < array.shape[0] and 0 <= col and col + 4 <= array.shape[1]):
        raise IndexError(f"load_u32x4: words {col} ... {col + 3} of row {row} lie outside an array of shape "
                         f"{tuple(array.shape)}")
    return tuple(uint32(array[row, col + j]) for j in range(4))


@_twin(_load_u32x4_simulated)
def load_u32x4(typingctx, array, row, col):
    """Words ``col ... col + 3`` of row ``row`` of a 2-dimensional uint32 array in global memory, in one 16-byte
    load: PTX's ``ld.global.nc.v4.u32`` (the read-only path; the array must not be written while the kernel
    runs). The address must be 16-byte aligned: ``col`` a multiple of 4 and rows a multiple of 4 words long
    (device arrays start on 256-byte boundaries). numba's own loads of a uint64 stop at 8 bytes, so a warp of
    them moves 256 bytes an instruction; this moves 512."""
    if not (isinstance(array, types.Array) and array.dtype == types.uint32 and array.ndim == 2
            and isinstance(row, types.Integer) and isinstance(col, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        made = context.make_array(array_type)(context, builder, args[0])
        indices = [context.cast(builder, value, kind, types.intp) for value, kind in zip(args[1:], signature.args[1:])]
        element = cgutils.get_item_pointer(context, builder, array_type, made, indices, wraparound=False)
        address = builder.ptrtoint(builder.addrspacecast(element, ir.PointerType(ir.IntType(32), 1)), ir.IntType(64))
        words = _asm_call(builder, "ld.global.nc.v4.u32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,l",
                          [ir.IntType(32)] * 4, [address])
        return context.make_tuple(builder, signature.return_type, words)
    return types.UniTuple(types.uint32, 4)(array, row, col), codegen


def _load_f32_l2_simulated(array, index):
    """``array[index]`` of a float32 array (``index`` a tuple with one integer per dimension): the simulator has
    one memory and no caches, so reading past L1 is reading."""
    if array.dtype != np.float32 or not isinstance(index, tuple) or len(index) != len(array.shape):
        raise TypeError(f"load_f32_l2: a float32 array and a tuple of {len(array.shape)} indices, got "
                        f"{array.dtype} and {index!r}")
    for i, (value, size) in enumerate(zip(index, array.shape)):
        if not 0 <= int(value) < size:
            raise IndexError(f"load_f32_l2: index {int(value)} of dimension {i} lies outside an array of shape "
                             f"{tuple(array.shape)}")
    return float32(array[tuple(int(v) for v in index)])


@_twin(_load_f32_l2_simulated)
def load_f32_l2(typingctx, array, index):
    """``array[index]`` of a float32 array in global memory (``index``: a tuple of one integer per dimension,
    none negative), loaded by PTX's ``ld.global.cg.f32``: cached in L2 only, never in the SM's L1, so a block
    reads what another block of the same launch wrote before a ``cuda.threadfence()``, not an older copy its own
    L1 may hold. The load is kept in place (after the fence and the atomic that order it)."""
    if not (isinstance(array, types.Array) and array.dtype == types.float32 and isinstance(index, types.BaseTuple)
            and len(index) == array.ndim and all(isinstance(t, types.Integer) for t in index)):
        return None

    def codegen(context, builder, signature, args):
        array_type, index_type = signature.args
        made = context.make_array(array_type)(context, builder, args[0])
        values = cgutils.unpack_tuple(builder, args[1], len(index_type))
        indices = [context.cast(builder, value, kind, types.intp) for value, kind in zip(values, index_type)]
        element = cgutils.get_item_pointer(context, builder, array_type, made, indices, wraparound=False)
        address = builder.ptrtoint(builder.addrspacecast(element, ir.PointerType(ir.FloatType(), 1)), ir.IntType(64))
        return _asm_call(builder, "ld.global.cg.f32 $0, [$1];", "=f,l", [ir.FloatType()], [address],
                         side_effect=True)[0]
    return types.float32(array, index), codegen


# ----------------------------------------------------------------------------------------------
# Tensor cores: mma.sync.aligned.m16n8k16 with fp16 inputs and float32 accumulators
# ----------------------------------------------------------------------------------------------

def _halves_of(words) -> np.ndarray:
    """uint32 words of two fp16 numbers each, as float64 pairs (low half first)."""
    return np.array(words, np.uint32).view(np.float16).astype(np.float64).reshape(-1, 2)


def _mma_m16n8k16_of_warp(fragments, halves_of=_halves_of):
    """D = A B + C of the whole warp, from ``fragments[lane] = (a, b, c)`` of all 32 lanes, laid out as PTX's
    ``mma.m16n8k16`` lays them (lane 4 g + t: a = A[g, 2t:2t+2], A[g+8, 2t:2t+2], A[g, 2t+8:2t+10],
    A[g+8, 2t+8:2t+10]; b = B[2t:2t+2, g], B[2t+8:2t+10, g]; c = C[g, 2t:2t+2], C[g+8, 2t:2t+2]; a and b
    uint32 words of two fp16 numbers, the lower column or row in the low 16 bits; ``halves_of`` reads them, bf16
    words too). Returns each lane's 4 float32 of D, in the layout of c. The products are exact in float64 and D
    is rounded once to float32 (a tensor core rounds its sums its own way, within float32's error)."""
    A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane, (a, b, c) in enumerate(fragments):
        g, t = lane >> 2, lane & 3
        pairs = halves_of(a)
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = pairs[0], pairs[1]
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = pairs[2], pairs[3]
        pairs = halves_of(b)
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


def _bf16_halves_of(words) -> np.ndarray:
    """uint32 words of two bf16 numbers each, as float64 pairs (low half first): a bf16 number is the upper
    half of the float32 of the same value."""
    halves = np.array(words, np.uint32).view(np.uint16).astype(np.uint32) << np.uint32(16)
    return halves.view(np.float32).astype(np.float64).reshape(-1, 2)


def _mma_m16n8k16_bf16_of_warp(fragments):
    """``_mma_m16n8k16_of_warp`` with A and B bf16: the same fragments, each word two bf16 numbers."""
    return _mma_m16n8k16_of_warp(fragments, _bf16_halves_of)


def _mma_m16n8k16_bf16_simulated(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """D = A B + C for an m16n8k16 tile of bf16 numbers, this lane's fragments: one exchange among the warp's 32
    lanes (all must call, as ``.sync.aligned`` requires), whose product is computed once for the warp."""
    fragments = (tuple(int(w) & 0xFFFFFFFF for w in (a0, a1, a2, a3)), tuple(int(w) & 0xFFFFFFFF for w in (b0, b1)),
                 tuple(float(x) for x in (c0, c1, c2, c3)))
    return cuda.simulator_collective_sync(FULL_MASK, fragments, _mma_m16n8k16_bf16_of_warp)


@_twin(_mma_m16n8k16_bf16_simulated)
def mma_m16n8k16_bf16(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """D = A B + C on a warp's tensor cores with bf16 inputs: PTX's
    ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` (sm_80 and later). Everything as ``mma_m16n8k16``
    (shapes, fragments, float32 C and D), except that each word of ``a0 ... a3`` and ``b0, b1`` holds two bf16
    numbers (the lower column or row in the low 16 bits). All 32 lanes of the warp must call it together."""
    if (a0, a1, a2, a3, b0, b1) != (types.uint32,) * 6 or (c0, c1, c2, c3) != (types.float32,) * 4:
        return None

    def codegen(context, builder, signature, args):
        d = _asm_call(builder, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, "
                               "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                      "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", [ir.FloatType()] * 4, list(args))
        return context.make_tuple(builder, signature.return_type, d)
    return types.UniTuple(types.float32, 4)(*(types.uint32,) * 6, *(types.float32,) * 4), codegen


# ----------------------------------------------------------------------------------------------
# Fragments from shared memory: ldmatrix.sync.aligned.m8n8.x4.shared.b16 (sm_75 and later)
# ----------------------------------------------------------------------------------------------

_ROW_WORDS = 4          # a row of an 8 x 8 matrix of 16-bit numbers: 16 bytes, 4 uint32 words


def _ldmatrix_x4_of_warp(rows):
    """Each lane's 4 words from ``rows[lane]``, the 4 words of the row that lane named: lanes 8 i ... 8 i + 7
    name rows 0 ... 7 of matrix i, and lane 4 r + c gets, from each matrix i, word c of its row r (numbers 2c and
    2c + 1 of the row: the layout of an mma's A, B and C fragments)."""
    return [tuple(rows[8 * i + (lane >> 2)][lane & 3] for i in range(4)) for lane in range(32)]


def _ldmatrix_x4_trans_of_warp(rows):
    """``_ldmatrix_x4_of_warp`` with each matrix transposed (``.trans``): lanes 8 i ... 8 i + 7 name rows 0 ... 7
    of matrix i, and lane 4 r + c gets, from each matrix i, number r of row 2c in the low half of its word and
    number r of row 2c + 1 in the high half (column r of the matrix, rows 2c and 2c + 1: the layout of an mma's
    B fragment when the tile holds B row by row, k by k)."""
    numbers = [np.array(words, np.uint32).view(np.uint16) for words in rows]        # 8 numbers a named row
    return [tuple(int(numbers[8 * i + 2 * (lane & 3)][lane >> 2]) | int(numbers[8 * i + 2 * (lane & 3) + 1][lane >> 2])
                  << 16 for i in range(4)) for lane in range(32)]


def _named_row(name, tile, row, col):
    """The 4 words of the row a lane names for ldmatrix (``name`` is the helper, for the errors): words ``col``
    ... ``col + 3`` of row ``row`` of ``tile``, 16 bytes that must be 16-byte aligned (``col`` and the row's length
    multiples of 4 words)."""
    if tile.dtype != np.uint32 or len(tile.shape) != 2:
        raise TypeError(f"{name}: tile must be a 2-dimensional shared array of uint32 words, got "
                        f"{len(tile.shape)} dimensions of {tile.dtype}")
    row, col = int(row), int(col)
    if tile.shape[1] % _ROW_WORDS or col % _ROW_WORDS:
        raise ValueError(f"{name}: a row of a matrix is 16 bytes at a 16-byte aligned address: tile's rows "
                         f"must be a multiple of {_ROW_WORDS} words long and col a multiple of {_ROW_WORDS}, got "
                         f"rows of {tile.shape[1]} words and col {col}")
    if not (0 <= row < tile.shape[0] and 0 <= col and col + _ROW_WORDS <= tile.shape[1]):
        raise IndexError(f"{name}: words {col} ... {col + _ROW_WORDS - 1} of row {row} lie outside tile of "
                         f"shape {tuple(tile.shape)}")
    return tuple(int(tile[row, col + j]) for j in range(_ROW_WORDS))


def _ldmatrix_x4_simulated(tile, row, col):
    """Four 8 x 8 matrices of 16-bit numbers read by the warp: this lane reads the row it names, words ``col``
    ... ``col + 3`` of row ``row`` of ``tile`` (16 bytes, which must be 16-byte aligned: ``col`` and the row's
    length multiples of 4 words), then one exchange among the warp's 32 lanes (all must call, as
    ``.sync.aligned`` requires) hands each lane its words."""
    words = _named_row("ldmatrix_x4", tile, row, col)
    results = cuda.simulator_collective_sync(FULL_MASK, words, _ldmatrix_x4_of_warp)
    return tuple(uint32(w) for w in results)


def _ldmatrix_codegen(text):
    """The code generator of an ldmatrix.x4 whose PTX is ``text`` (its 4 results, then the shared address)."""
    def codegen(context, builder, signature, args):
        tile_type = signature.args[0]
        array = context.make_array(tile_type)(context, builder, args[0])
        indices = [context.cast(builder, value, kind, types.intp) for value, kind in zip(args[1:], signature.args[1:])]
        element = cgutils.get_item_pointer(context, builder, tile_type, array, indices, wraparound=False)
        shared = builder.addrspacecast(element, ir.PointerType(ir.IntType(32), 3))
        address = builder.ptrtoint(shared, ir.IntType(32))
        words = _asm_call(builder, text, "=r,=r,=r,=r,r", [ir.IntType(32)] * 4, [address], side_effect=True)
        return context.make_tuple(builder, signature.return_type, words)
    return codegen


def _ldmatrix_typed(tile, row, col):
    """The signature of an ldmatrix.x4 helper for these argument types, or None."""
    if not (isinstance(tile, types.Array) and tile.dtype == types.uint32 and tile.ndim == 2
            and isinstance(row, types.Integer) and isinstance(col, types.Integer)):
        return None
    return types.UniTuple(types.uint32, 4)(tile, row, col)


@_twin(_ldmatrix_x4_simulated)
def ldmatrix_x4(typingctx, tile, row, col):
    """Four 8 x 8 matrices of 16-bit numbers (fp16 or bf16) from shared memory, as mma fragments: PTX's
    ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` (sm_75 and later). ``tile`` is a 2-dimensional shared array of
    uint32 words (two 16-bit numbers each, the lower column in the low half) and lane l names, by its word
    ``tile[row, col]``, the start of row l % 8 of matrix l // 8: 16 bytes, 16-byte aligned (``col`` a multiple of
    4, rows a multiple of 4 words long, the array declared with ``alignment=16``). Each lane 4 r + c gets 4
    uint32 words, word i holding numbers 2c and 2c + 1 of row r of matrix i: four matrices laid out as
    ``mma_m16n8k16``'s ``a0 ... a3`` (or two B fragments, ``b0, b1`` of two n8 tiles). The address is the
    element's, converted to the shared window (NVVM folds the conversion when it sees the array's origin). All
    32 lanes of the warp must call it together."""
    signature = _ldmatrix_typed(tile, row, col)
    if signature is None:
        return None
    return signature, _ldmatrix_codegen("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0, $1, $2, $3}, [$4];")


def _ldmatrix_x4_trans_simulated(tile, row, col):
    """``_ldmatrix_x4_simulated`` with ``.trans``: this lane reads the row it names, then one exchange among the
    warp's 32 lanes hands each lane its words of the transposed matrices."""
    words = _named_row("ldmatrix_x4_trans", tile, row, col)
    results = cuda.simulator_collective_sync(FULL_MASK, words, _ldmatrix_x4_trans_of_warp)
    return tuple(uint32(w) for w in results)


@_twin(_ldmatrix_x4_trans_simulated)
def ldmatrix_x4_trans(typingctx, tile, row, col):
    """``ldmatrix_x4`` with each 8 x 8 matrix transposed on its way to the registers: PTX's
    ``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`` (sm_75 and later). The lanes name the same rows in the same
    way (lane l: row l % 8 of matrix l // 8, 16 bytes at ``tile[row, col]``, 16-byte aligned); lane 4 r + c gets 4
    uint32 words, word i holding number r of rows 2c (low half) and 2c + 1 (high half) of matrix i. With the
    matrix's rows the k of an mma and its columns the n, that is ``mma_m16n8k16``'s B fragment (``b = B[2t:2t+2,
    g]``, t = c, g = r): matrices of rows k 0-7 and 8-15 of one n8 tile give its b0 and b1, so a tile held row by
    row along k (V, keys by channels, in attention's P V) needs no transposing copy. All 32 lanes of the warp must
    call it together."""
    signature = _ldmatrix_typed(tile, row, col)
    if signature is None:
        return None
    return signature, _ldmatrix_codegen("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4];")


# ----------------------------------------------------------------------------------------------
# Copies from global to shared memory that skip the registers: cp.async (sm_80 and later)
# ----------------------------------------------------------------------------------------------

_CHUNK_NUMBERS = 8      # 16-bit numbers of a 16-byte copy


def _copy_queue():
    """This simulated thread's copies in flight: ``[committed groups, copies not yet committed]``, each copy
    ``(tile, row, col, words)``. Kept on the thread the simulator runs (numba's simulator finds it through its
    ``threading``), so it ends with the thread, as a block's threads end with their block."""
    from numba.cuda.simulator import kernelapi

    thread = kernelapi.threading.current_thread()
    queue = getattr(thread, "_cp_async_queue", None)
    if queue is None:
        queue = [[], []]
        thread._cp_async_queue = queue
    return queue


def _cp_async_16_simulated(tile, row, col, src, src_row, src_col, valid):
    """The 16 bytes of ``src[src_row, src_col:src_col + 8]`` (16-bit numbers), or 16 zero bytes when not ``valid``
    (nothing is read), become words ``col ... col + 3`` of ``tile[row]``, once this thread waits for them: read
    now, written by ``cp_async_wait_group``. Both addresses must be 16-byte aligned, as on a GPU."""
    if tile.dtype != np.uint32 or len(tile.shape) != 2 or len(src.shape) != 2 or src.dtype.itemsize != 2:
        raise TypeError(f"cp_async_16: tile must be a 2-dimensional shared array of uint32 words and src a "
                        f"2-dimensional array of 16-bit numbers, got {tile.dtype} and {src.dtype}")
    row, col, src_row, src_col = int(row), int(col), int(src_row), int(src_col)
    if tile.shape[1] % _ROW_WORDS or col % _ROW_WORDS or src.shape[1] % _CHUNK_NUMBERS or src_col % _CHUNK_NUMBERS:
        raise ValueError(f"cp_async_16: both ends of a 16-byte copy must be 16-byte aligned: tile's rows a multiple "
                         f"of {_ROW_WORDS} words and col of {_ROW_WORDS}, src's rows a multiple of {_CHUNK_NUMBERS} "
                         f"numbers and src_col of {_CHUNK_NUMBERS}; got rows of {tile.shape[1]} words, col {col}, "
                         f"rows of {src.shape[1]} numbers, src_col {src_col}")
    if not (0 <= row < tile.shape[0] and 0 <= col and col + _ROW_WORDS <= tile.shape[1]):
        raise IndexError(f"cp_async_16: words {col} ... {col + _ROW_WORDS - 1} of row {row} lie outside tile of shape "
                         f"{tuple(tile.shape)}")
    if not (0 <= src_row < src.shape[0] and 0 <= src_col and src_col + _CHUNK_NUMBERS <= src.shape[1]):
        raise IndexError(f"cp_async_16: numbers {src_col} ... {src_col + _CHUNK_NUMBERS - 1} of row {src_row} lie "
                         f"outside src of shape {tuple(src.shape)}")
    words = [0] * _ROW_WORDS
    if valid:
        for j in range(_ROW_WORDS):
            words[j] = int(src[src_row, src_col + 2 * j]) | int(src[src_row, src_col + 2 * j + 1]) << 16
    _copy_queue()[1].append((tile, row, col, words))


@_twin(_cp_async_16_simulated)
def cp_async_16(typingctx, tile, row, col, src, src_row, src_col, valid):
    """Copy 16 bytes from global to shared memory without passing through registers: PTX's
    ``cp.async.cg.shared.global [dst], [src], 16, size`` (sm_80 and later; ``.cg``: cached in L2 only). The
    destination is words ``col ... col + 3`` of ``tile[row]`` (a 2-dimensional shared array of uint32 words); the
    source, numbers ``src_col ... src_col + 7`` of ``src[src_row]`` (a 2-dimensional global array of 16-bit
    numbers, here the uint16 bits of fp16 or bf16 numbers); both 16-byte aligned. ``valid`` False copies no byte
    and fills the destination with zeros (size 0), so the source must still lie inside ``src``. The copy is in
    flight until the thread's ``cp_async_wait_group`` says its group has landed; another thread sees it after
    that wait and a barrier."""
    if not (isinstance(tile, types.Array) and tile.dtype == types.uint32 and tile.ndim == 2
            and isinstance(src, types.Array) and src.dtype in (types.uint16, types.int16) and src.ndim == 2
            and all(isinstance(i, types.Integer) for i in (row, col, src_row, src_col))
            and isinstance(valid, (types.Boolean, types.Integer))):
        return None

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)

        def element(array_type, value, index_values, index_types, space, width):
            array = context.make_array(array_type)(context, builder, value)
            indices = [context.cast(builder, v, t, types.intp) for v, t in zip(index_values, index_types)]
            pointer = cgutils.get_item_pointer(context, builder, array_type, array, indices, wraparound=False)
            moved = builder.addrspacecast(pointer, ir.PointerType(pointer.type.pointee, space))
            return builder.ptrtoint(moved, width)

        kinds = signature.args
        destination = element(kinds[0], args[0], args[1:3], kinds[1:3], 3, i32)
        source = element(kinds[3], args[3], args[4:6], kinds[4:6], 1, i64)
        present = context.cast(builder, args[6], kinds[6], types.boolean)        # an i1
        size = builder.select(present, ir.Constant(i32, 16), ir.Constant(i32, 0))
        function = ir.FunctionType(ir.VoidType(), [i32, i64, i32])
        builder.call(ir.InlineAsm(function, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}",
                                  side_effect=True), [destination, source, size])
        return context.get_dummy_value()
    return types.void(tile, row, col, src, src_row, src_col, valid), codegen


def _cp_async_commit_group_simulated():
    """This thread's copies not yet committed become one group."""
    queue = _copy_queue()
    queue[0].append(queue[1])
    queue[1] = []


@_twin(_cp_async_commit_group_simulated)
def cp_async_commit_group(typingctx):
    """PTX's ``cp.async.commit_group``: the thread's ``cp_async_16`` copies issued since its last commit become one
    group (possibly empty), which ``cp_async_wait_group`` counts."""
    def codegen(context, builder, signature, args):
        builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "cp.async.commit_group;", "~{memory}",
                                  side_effect=True), [])
        return context.get_dummy_value()
    return types.void(), codegen


def _cp_async_wait_group_simulated(n):
    """Land this thread's committed groups, oldest first, until at most ``n`` remain in flight."""
    groups = _copy_queue()[0]
    while len(groups) > int(n):
        for tile, row, col, words in groups.pop(0):
            for j in range(_ROW_WORDS):
                tile[row, col + j] = uint32(words[j])


@_twin(_cp_async_wait_group_simulated)
def cp_async_wait_group(typingctx, n):
    """PTX's ``cp.async.wait_group n``: wait until at most ``n`` of the thread's most recent committed groups are
    in flight, every older one landed in shared memory. ``n`` must be a constant known when compiling (a literal
    or a global int: it is part of the instruction). Other threads see the landed bytes after a barrier."""
    if not isinstance(n, types.IntegerLiteral) or n.literal_value < 0:
        return None
    count = n.literal_value

    def codegen(context, builder, signature, args):
        builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), f"cp.async.wait_group {count};", "~{memory}",
                                  side_effect=True), [])
        return context.get_dummy_value()
    return types.void(n), codegen


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
