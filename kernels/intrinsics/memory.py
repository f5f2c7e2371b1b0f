"""Loads and a store numba does not write, and cp.async: the memory instructions of ``kernels.intrinsics``."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import float32, types, uint32
from numba.cuda import cgutils

from kernels.intrinsics._twins import GLOBAL, SHARED, _aligned_run, _asm_call, _element_address, _twin


# ----------------------------------------------------------------------------------------------
# 16-byte loads from global memory: ld.global.nc.v4.u32 (numba's own loads stop at 8 bytes)
# ----------------------------------------------------------------------------------------------

def _load_u32x4_simulated(array, row, col):
    """Words ``col ... col + 3`` of row ``row`` of the 2-dimensional uint32 ``array``, as a tuple; the 16 bytes must
    be 16-byte aligned (``col`` and the rows' length multiples of 4 words), as the GPU's instruction requires."""
    row, col = _aligned_run("load_u32x4", "array", array, np.uint32, "words", row, col, 4)
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
        address = _element_address(context, builder, signature.args[0], args[0], args[1:], signature.args[1:], GLOBAL)
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
        values = cgutils.unpack_tuple(builder, args[1], len(index_type))
        address = _element_address(context, builder, array_type, args[0], values, index_type, GLOBAL)
        return _asm_call(builder, "ld.global.cg.f32 $0, [$1];", "=f,l", [ir.FloatType()], [address],
                         side_effect=True)[0]
    return types.float32(array, index), codegen


# ----------------------------------------------------------------------------------------------
# 8-byte stores of two float32 numbers: st.global.v2.f32 (numba writes one float32 a store)
# ----------------------------------------------------------------------------------------------

def _store_f32x2_simulated(array, row, col, low, high):
    """``array[row, col], array[row, col + 1] = low, high`` for a 2-dimensional float32 array, refusing what the
    GPU's instruction would fault on: an address not 8-byte aligned (``col`` odd, or rows of an odd number of
    floats) or a pair outside the array."""
    row, col = _aligned_run("store_f32x2", "array", array, np.float32, "floats", row, col, 2)
    array[row, col] = float32(low)
    array[row, col + 1] = float32(high)


@_twin(_store_f32x2_simulated)
def store_f32x2(typingctx, array, row, col, low, high):
    """``array[row, col] = low`` and ``array[row, col + 1] = high`` for a 2-dimensional float32 array in global
    memory, in one 8-byte store: PTX's ``st.global.v2.f32``. numba stores one float32 an instruction, so a warp
    whose lanes each hold two neighbouring numbers of a row (an mma's accumulators) writes each 32-byte sector of
    the row in two halves, by two instructions; this writes it whole, once. The address must be 8-byte aligned:
    ``col`` even and rows of an even number of floats (device arrays start on 256-byte boundaries)."""
    if not (isinstance(array, types.Array) and array.dtype == types.float32 and array.ndim == 2
            and isinstance(row, types.Integer) and isinstance(col, types.Integer)
            and isinstance(low, (types.Float, types.Integer)) and isinstance(high, (types.Float, types.Integer))):
        return None

    def codegen(context, builder, signature, args):
        kinds = signature.args
        address = _element_address(context, builder, kinds[0], args[0], args[1:3], kinds[1:3], GLOBAL)
        values = [context.cast(builder, value, kind, types.float32) for value, kind in zip(args[3:], kinds[3:])]
        function = ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.FloatType(), ir.FloatType()])
        builder.call(ir.InlineAsm(function, "st.global.v2.f32 [$0], {$1, $2};", "l,f,f", side_effect=True),
                     [address] + values)
        return context.get_dummy_value()
    return types.void(array, row, col, low, high), codegen


# ----------------------------------------------------------------------------------------------
# 8-byte loads of two words from shared memory: ld.shared.v2.u32, without numba's index arithmetic
# ----------------------------------------------------------------------------------------------

def _load_shared_u32x2_simulated(tile, row, col):
    """Words ``col`` and ``col + 1`` of row ``row`` of the 2-dimensional uint32 ``tile``, refusing what the GPU's
    instruction would fault on: an address not 8-byte aligned (``col`` odd, or rows of an odd number of words) or
    words outside the tile."""
    row, col = _aligned_run("load_shared_u32x2", "tile", tile, np.uint32, "words", row, col, 2)
    return uint32(tile[row, col]), uint32(tile[row, col + 1])


@_twin(_load_shared_u32x2_simulated)
def load_shared_u32x2(typingctx, tile, row, col):
    """Words ``col`` and ``col + 1`` of row ``row`` of a 2-dimensional uint32 array in shared memory, in one 8-byte
    load: PTX's ``ld.shared.v2.u32``. Its address is the element's, computed without the wrap-around numba adds to
    an index it cannot prove non-negative (a compare and a select per index, before every load), and the two words
    come in one instruction instead of two. The address must be 8-byte aligned: ``col`` even and rows of an even
    number of words. The load is kept in place (after the barrier or the wait that makes the words ready)."""
    if not (isinstance(tile, types.Array) and tile.dtype == types.uint32 and tile.ndim == 2
            and isinstance(row, types.Integer) and isinstance(col, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        address = _element_address(context, builder, signature.args[0], args[0], args[1:], signature.args[1:], SHARED)
        words = _asm_call(builder, "ld.shared.v2.u32 {$0, $1}, [$2];", "=r,=r,r", [ir.IntType(32)] * 2, [address],
                          side_effect=True)
        return context.make_tuple(builder, signature.return_type, words)
    return types.UniTuple(types.uint32, 2)(tile, row, col), codegen


# ----------------------------------------------------------------------------------------------
# Copies from global to shared memory that skip the registers: cp.async (sm_80 and later)
# ----------------------------------------------------------------------------------------------

_CHUNK_NUMBERS = 8      # 16-bit numbers of a 16-byte copy
_CHUNK_WORDS = 4        # uint32 words of a 16-byte copy


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
    if tile.shape[1] % _CHUNK_WORDS or col % _CHUNK_WORDS or src.shape[1] % _CHUNK_NUMBERS or src_col % _CHUNK_NUMBERS:
        raise ValueError(f"cp_async_16: both ends of a 16-byte copy must be 16-byte aligned: tile's rows a multiple "
                         f"of {_CHUNK_WORDS} words and col of {_CHUNK_WORDS}, src's rows a multiple of {_CHUNK_NUMBERS} "
                         f"numbers and src_col of {_CHUNK_NUMBERS}; got rows of {tile.shape[1]} words, col {col}, "
                         f"rows of {src.shape[1]} numbers, src_col {src_col}")
    if not (0 <= row < tile.shape[0] and 0 <= col and col + _CHUNK_WORDS <= tile.shape[1]):
        raise IndexError(f"cp_async_16: words {col} ... {col + _CHUNK_WORDS - 1} of row {row} lie outside tile of shape "
                         f"{tuple(tile.shape)}")
    if not (0 <= src_row < src.shape[0] and 0 <= src_col and src_col + _CHUNK_NUMBERS <= src.shape[1]):
        raise IndexError(f"cp_async_16: numbers {src_col} ... {src_col + _CHUNK_NUMBERS - 1} of row {src_row} lie "
                         f"outside src of shape {tuple(src.shape)}")
    words = [0] * _CHUNK_WORDS
    if valid:
        for j in range(_CHUNK_WORDS):
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
        kinds = signature.args
        destination = _element_address(context, builder, kinds[0], args[0], args[1:3], kinds[1:3], SHARED)
        source = _element_address(context, builder, kinds[3], args[3], args[4:6], kinds[4:6], GLOBAL)
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
            for j in range(_CHUNK_WORDS):
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
# Dynamic shared memory seen as an array of any shape (numba's dynamic shared arrays are 1-dimensional)
# ----------------------------------------------------------------------------------------------

def _shared_view_simulated(flat, shape):
    """The first ``prod(shape)`` elements of the 1-dimensional array ``flat``, as a C-contiguous array of ``shape``
    sharing its memory; the launch must have given at least that many."""
    shape = tuple(int(n) for n in shape)
    count = int(np.prod(shape))
    if len(flat.shape) != 1:
        raise TypeError(f"shared_view: flat must be 1-dimensional (cuda.shared.array(0, dtype)), got "
                        f"{len(flat.shape)} dimensions")
    if count > flat.shape[0]:
        raise ValueError(f"shared_view: a view of shape {shape} needs {count * flat.dtype.itemsize} bytes of dynamic "
                         f"shared memory, the launch gave {flat.shape[0] * flat.dtype.itemsize}")
    return flat[:count].reshape(shape)


@_twin(_shared_view_simulated)
def shared_view(typingctx, flat, shape):
    """The dynamic shared memory ``flat`` (``cuda.shared.array(0, dtype)``, 1-dimensional) seen as a C-contiguous
    array of ``shape`` (a tuple of integers, constants of the kernel), starting at its first byte: no instruction
    but the address arithmetic of its indices. numba's ``reshape`` would do the same at the cost of a call to a
    helper of numba's, which checks at run time that the sizes agree exactly; here the launch must give at least
    the view's bytes (``kernels.launching.launch_with_shared``), which the simulator's twin checks."""
    if not (isinstance(flat, types.Array) and flat.ndim == 1 and isinstance(shape, types.BaseTuple)
            and len(shape) >= 1 and all(isinstance(n, types.Integer) for n in shape)):
        return None
    view_type = types.Array(flat.dtype, len(shape), "C")

    def codegen(context, builder, signature, args):
        source = context.make_array(signature.args[0])(context, builder, args[0])
        view = context.make_array(view_type)(context, builder)
        dims = [context.cast(builder, builder.extract_value(args[1], i), kind, types.intp)
                for i, kind in enumerate(signature.args[1])]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(flat.dtype)))
        strides = [itemsize]
        for n in reversed(dims[1:]):
            strides.insert(0, builder.mul(strides[0], n))
        context.populate_array(view, data=source.data, shape=dims, strides=strides, itemsize=itemsize, meminfo=None)
        return view._getvalue()
    return view_type(flat, shape), codegen
