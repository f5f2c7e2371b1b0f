"""mma.sync and ldmatrix: the tensor-core instructions of ``kernels.intrinsics``."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import cuda, types, uint32

from kernels.intrinsics._twins import SHARED, _aligned_run, _asm_call, _element_address, _twin
from kernels.launching import FULL_MASK


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
    row, col = _aligned_run(name, "tile", tile, np.uint32, "words", row, col, _ROW_WORDS, what="a row of a matrix is ")
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
        address = _element_address(context, builder, signature.args[0], args[0], args[1:], signature.args[1:], SHARED)
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
