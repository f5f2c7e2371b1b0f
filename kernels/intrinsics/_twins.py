"""The two forms of every helper, and the code generators' shared pieces (``kernels.intrinsics``)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import config, types
from numba.cuda import cgutils
from numba.cuda.extending import intrinsic


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


GLOBAL, SHARED = 1, 3           # NVVM's address spaces of global and shared memory


def _element_address(context, builder, array_type, array, index_values, index_types, space: int):
    """The address of ``array[indices]`` in address ``space`` (``GLOBAL``: a 64-bit integer, ``SHARED``: 32 bits), the
    operand of an inline PTX load, store or copy. No wrap-around of a negative index: the helpers' indices lie
    inside their arrays (their twins refuse any other), so the address is the element's and nothing more."""
    made = context.make_array(array_type)(context, builder, array)
    indices = [context.cast(builder, value, kind, types.intp) for value, kind in zip(index_values, index_types)]
    pointer = cgutils.get_item_pointer(context, builder, array_type, made, indices, wraparound=False)
    moved = builder.addrspacecast(pointer, ir.PointerType(pointer.type.pointee, space))
    return builder.ptrtoint(moved, ir.IntType(64 if space == GLOBAL else 32))


def _aligned_run(name: str, arg: str, array, dtype, unit: str, row, col, count: int, what: str = "") -> tuple[int, int]:
    """The twins' check of ``count`` neighbouring elements ``array[row, col ... col + count - 1]`` that one instruction
    moves: ``array`` 2-dimensional of ``dtype``, the run aligned to its own size (``col`` and the rows' length
    multiples of ``count``, as the GPU requires, else it faults) and inside the array; returns (row, col) as ints.
    Errors name the instruction's helper (``name``), the argument (``arg``) and the limit; ``what`` says what the
    run is, where that helps (ldmatrix: "a row of a matrix is ")."""
    if array.dtype != dtype or len(array.shape) != 2:
        raise TypeError(f"{name}: {arg} must be a 2-dimensional array of {unit}, got {len(array.shape)} dimensions of "
                        f"{array.dtype}")
    row, col = int(row), int(col)
    size = count * np.dtype(dtype).itemsize
    if array.shape[1] % count or col % count:
        raise ValueError(f"{name}: {what}{size} bytes at a {size}-byte aligned address: {arg}'s rows must be a "
                         f"multiple of {count} {unit} long and col a multiple of {count}, got rows of "
                         f"{array.shape[1]} {unit} and col {col}")
    if not (0 <= row < array.shape[0] and 0 <= col and col + count <= array.shape[1]):
        raise IndexError(f"{name}: {unit} {col} ... {col + count - 1} of row {row} lie outside {arg} of shape "
                         f"{tuple(array.shape)}")
    return row, col
