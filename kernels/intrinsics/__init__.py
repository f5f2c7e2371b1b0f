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
and ``_twins._twin`` picks one, once, when the module is imported. The helpers live in three modules of this
package, by what they reach, and every one is imported from here (``from kernels.intrinsics import dp4a``):
``numbers`` (bit casts, fp8 and bf16 conversions, packed words, dp4a), ``tensor_cores`` (the mma instructions
and ldmatrix) and ``memory`` (the 16-byte and L2 loads, the 8-byte store, cp.async); ``_twins`` holds what they
share. The helpers:

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
  which the twin checks as the GPU would fault;
- ``load_f32_l2(array, index)``: PTX's ``ld.global.cg.f32``, one float32 of a global array read from L2, past the
  SM's L1 (which is not coherent between SMs): how a block reads what other blocks of the same launch wrote and
  fenced (day 10's one-pass decode attention, whose last block merges the others' partials);
- ``load_shared_u32x2(tile, row, col)``: PTX's ``ld.shared.v2.u32``, two neighbouring words of a row of a
  2-dimensional uint32 array in shared memory in one 8-byte load, its address computed without numba's
  wrap-around of a signed index; 8-byte aligned, which the twin checks;
- ``store_f32x2(array, row, col, low, high)``: PTX's ``st.global.v2.f32``, two neighbouring float32 numbers of a
  row of a 2-dimensional global array in one 8-byte store (numba's stores of a float32 write 4 bytes); the address
  must be 8-byte aligned, which the twin checks as the GPU would fault;
- ``shared_view(flat, shape)``: dynamic shared memory (numba's ``cuda.shared.array(0, dtype)``, 1-dimensional)
  seen as a C-contiguous array of ``shape``, built in place (no instruction, and none of the run-time size check
  numba's ``reshape`` calls a helper for): the rings of more than the 48 KB a block may declare statically, which
  ``kernels.launching.launch_with_shared`` lets a kernel launch with.

Day 9 adds the integer instructions of int8 kernels here: ``dp4a`` (above: a dot product of 4 int8 pairs
into an int32), the int8 mma ``m16n8k32`` and the 16-byte loads of ``load_u32x4``.

The warp's size and full mask are ``kernels.launching.WARP`` and ``FULL_MASK`` (NumPy only, so the
simulator can read them before numba is imported).
"""

from __future__ import annotations

from kernels.intrinsics.memory import (cp_async_16, cp_async_commit_group, cp_async_wait_group, load_f32_l2,
                                       load_shared_u32x2, load_u32x4, shared_view, store_f32x2)
from kernels.intrinsics.numbers import (bfloat16_bits, bfloat16_value, bits_float, byte_perm, dp4a, e4m3_pairs,
                                        eight_codes, float_bits, four_halves, pack_bfloat16s, pack_halves,
                                        two_floats, unpack_halves)
from kernels.intrinsics.tensor_cores import (ldmatrix_x4, ldmatrix_x4_trans, mma_m16n8k16, mma_m16n8k16_bf16,
                                             mma_m16n8k32_s8)

__all__ = ["four_halves", "two_floats", "unpack_halves", "eight_codes", "e4m3_pairs", "byte_perm", "pack_halves",
           "bfloat16_bits", "bfloat16_value", "float_bits", "bits_float", "pack_bfloat16s", "dp4a", "mma_m16n8k16",
           "mma_m16n8k16_bf16", "ldmatrix_x4", "ldmatrix_x4_trans", "cp_async_16", "cp_async_commit_group",
           "cp_async_wait_group", "mma_m16n8k32_s8", "load_u32x4", "load_f32_l2", "shared_view", "store_f32x2",
           "load_shared_u32x2"]
