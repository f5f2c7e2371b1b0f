"""The two forms of every helper, and the code generators' shared pieces (``kernels.intrinsics``)."""

from __future__ import annotations

from llvmlite import ir
from numba import config
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
