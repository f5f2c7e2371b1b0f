"""The tensor-core GEMM ladder (``kernels.tensor_core_gemm``) on the simulator, its new intrinsics, and its PTX.

- The intrinsics' twins on their own: ``ldmatrix_x4`` hands each lane the words the PTX ISA describes for
  ``ldmatrix.sync.aligned.m8n8.x4.b16`` (written out below element by element from the ISA's description, not
  from the twin), from rows named in any order; its fragments fed to ``mma_m16n8k16`` give A B, so ldmatrix's
  layout and the mma's agree; ``mma_m16n8k16_bf16`` is the exact product of bf16 fragments; misaligned rows and
  a partial warp are refused. ``cp_async_16`` lands its 16 bytes (or zeros) only when its thread's
  ``cp_async_wait_group`` lets its group land, oldest group first.
- Every rung, fp16 and bf16, against the float64 reference ``reference.gemm(a, w.T)`` at shapes the tiles do
  not divide, into NaN-poisoned outputs. The precision rule (``docs/design-notes.md`` §5) for numbers stored in
  fp16 or bf16 and summed in float32: the stored numbers are exact in float32 and in the reference, so no error
  comes from storage and the output is judged by the float32 rule (``check``'s default), as day 8's tests judge
  their kernels on the stored cache; on the simulator, where the mma's twin rounds once per 16-wide step, each
  element is also within ceil(K / 16) float32 roundings of the sum of |a| |w|.
- v2 to v6 equal v1 bit for bit (the same fragment words into the same mmas, k ascending; v5 and v6 also over
  two block rows and two block columns of their 128 x 128 tiles, and v6 built with v5's warp tiles or with its
  columns shifted fails); v4's to v6's swizzle is the model's, a permutation
  of each row's chunks that puts the 8 rows of every ldmatrix phase and every quarter warp's copies in 8 different
  groups of banks; on the simulator v3 to v6 fail when their wait lets one group too many travel or is left
  out; the traffic of every rung is ``course.models.tensor_core_gemm``'s, global and shared; the launchers' errors
  name the argument.
- A process without the simulator compiles every kernel, fp16 and bf16, for sm_80 and sm_90: no local memory,
  no float64, the expected ``mma.sync.aligned.m16n8k16``, ``ldmatrix``, ``cp.async`` and barrier counts and static
  shared memory (v5 and v6: 48 KB, the static limit); where ``ptxas`` is installed it assembles the PTX and reports no
  stack frame and no spills.
- Marked ``gpu`` (``make test-gpu``): the same checks at full size on a GPU, every rung = v1 there too, and
  the ldmatrix layout of the hardware against the ISA's.
"""

import math
import re
import shutil
import subprocess
import textwrap

import ml_dtypes
import numpy as np
import pytest

from ptx_in_background import compile_fixtures
from numba import cuda, float32, uint32

import course
from course.checking import check, poison, random_inputs
from course.models import tensor_core_gemm as model
from course.traffic import count_traffic
from kernels import reference
from kernels import tensor_core_gemm as tg
from kernels.intrinsics import (cp_async_16, cp_async_commit_group, cp_async_wait_group, ldmatrix_x4, mma_m16n8k16,
                                mma_m16n8k16_bf16, shared_view, store_f32x2)
from kernels.launching import launch_with_shared

BF16 = ml_dtypes.bfloat16
DTYPES = {"float16": np.float16, "bfloat16": BF16}
RUNGS = list(tg.RUNGS)
# The rungs that fill a ring of shared tiles with cp.async (K a multiple of 8).
RING_RUNGS = ["tc_gemm_v3_cp_async", "tc_gemm_v4_swizzled", "tc_gemm_v5_large_tiles", "tc_gemm_v6_wide_warps",
              "tc_gemm_v7_tuned", "tc_gemm_v8_deep_steps", "tc_gemm_v9_paired_stores"]
# The rungs whose ring is dynamic shared memory, 3 steps of 64 of K (96 KB).
DEEP_RUNGS = ["tc_gemm_v8_deep_steps", "tc_gemm_v9_paired_stores"]
# The rungs with 128 x 128 tiles of C, and each one's mma and ldmatrix instructions in its PTX (2 steps of 16).
# v8's (and v9's) steps of 64 hold 4 of 16, which NVVM leaves as a loop: one 16-wide step's mmas and ldmatrix.
LARGE_RUNGS = {"tc_gemm_v5_large_tiles": (32, 12), "tc_gemm_v6_wide_warps": (64, 16), "tc_gemm_v8_deep_steps": (32, 8),
               "tc_gemm_v9_paired_stores": (32, 8)}
# (M, N, K): partial tiles every way (one block, a step of 32 and one of 16); exactly one tile and one step; one
# row of one mma column of one 16-wide step; two block rows (the second with 6 rows) and a last step of 8 numbers.
SHAPES = [(37, 45, 48), (64, 64, 32), (1, 8, 16), (70, 9, 40)]
# K not a multiple of 8, for the rungs that take any K (v3-v5 copy 16 bytes at a time): odd, the last number alone
# in its word; and 12, one 16-wide step whose last 4 numbers are zeros.
ANY_K_RUNGS = ["tc_gemm_v1_mma_shared", "tc_gemm_v2_ldmatrix"]
ANY_K_SHAPES = [(70, 9, 33), (5, 20, 12)]


@pytest.fixture
def rng_seed():
    return random_inputs()


def numbers(rng, dtype, *shape):
    return rng.standard_normal(shape).astype(dtype)


def gemm_reference(a, w):
    return reference.gemm(a, w.T)


def run(rung, a, w):
    m, n = a.shape[0], w.shape[0]
    return tg.RUNGS[rung](a, w, out=poison(np.empty((m, n), np.float32)))


# ------------------------------------------------------------------------------------------------
# Compiling for a GPU, in a subprocess started with the first test of this file
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAM = textwrap.dedent(r"""
    import json, os, re
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numba
    from course.gpu_compile import COMPUTE_CAPABILITIES, ptx_for_targets
    from kernels import tensor_core_gemm as tg
    bits, c = numba.uint16[:, ::1], numba.float32[:, ::1]
    builds = [(rung.name, fmt, None, rung.kernels["kernel"](fmt)) for rung in tg.RUNGS.values()
              if rung.name != "tc_gemm_v7_tuned" for fmt in tg.FORMATS]
    builds += [("tc_gemm_v7_tuned", fmt, tile, tg.tc_gemm_v7_tuned_kernel(fmt, tile))
               for fmt in tg.FORMATS for tile in tg.TILES]
    for name, fmt, tile, kernel in builds:
            for (major, minor), ptx in ptx_for_targets(kernel.py_func, (bits, bits, c), COMPUTE_CAPABILITIES).items():
                body = ptx[ptx.index(".entry"):]
                print(json.dumps({"rung": name, "fmt": fmt, "tile": tile, "cc": f"sm_{major}{minor}", "ptx": ptx,
                                  "local": ".local" in body, "f64": ".f64" in body,
                                  "calls": len(re.findall(r"\bcall(\.uni)?\s", body)),
                                  "mma_f16": body.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
                                  "mma_bf16": body.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                                  "ldmatrix": body.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                                  "cp_async": body.count("cp.async.cg.shared.global"),
                                  "commits": body.count("cp.async.commit_group"),
                                  "waits": sorted(set(re.findall(r"cp\.async\.wait_group (\d+)", body))),
                                  "barriers": len(re.findall(r"\bbar\.sync\b", body)),
                                  "shared_bytes": sum(int(size) for size in re.findall(
                                      r"\.shared\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]", ptx)),
                                  "shared_loads": len(re.findall(r"\bld\.shared\.", body)),
                                  "paired_stores": body.count("st.global.v2.f32"),
                                  "float_stores": len(re.findall(r"\bst\.global\.f32\b", body))}), flush=True)
""")


compiled, _start_compiling = compile_fixtures(COMPILE_PROGRAM)


# ------------------------------------------------------------------------------------------------
# ldmatrix.x4: the PTX ISA's layout, written out number by number
# ------------------------------------------------------------------------------------------------

def ldmatrix_layout(matrices: np.ndarray) -> np.ndarray:
    """What each lane holds after ``ldmatrix.sync.aligned.m8n8.x4.b16`` of four 8 x 8 matrices of 16-bit numbers
    (``matrices`` (4, 8, 8) uint16, [matrix, row, column]), by the PTX ISA ("Warp-level matrix load instruction:
    ldmatrix", the fragment of an 8 x 8 matrix): destination register i of lane l holds two numbers of matrix i,
    row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1, the first in the lower 16 bits. Returns (32, 4) uint32."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        row, pair = lane // 4, lane % 4
        for i in range(4):
            low, high = int(matrices[i, row, 2 * pair]), int(matrices[i, row, 2 * pair + 1])
            out[lane, i] = low | high << 16
    return out


def ldmatrix_probe_of(load):
    """A kernel of one warp: the tile (16 rows of 8 words) goes to shared memory, then lane l names tile[rows[l],
    cols[l]] to ``load`` (``ldmatrix_x4``, or day 8's ``ldmatrix_x4_trans``) as the start of row l % 8 of matrix
    l // 8, and writes the 4 words it got."""
    @cuda.jit
    def probe(words, rows, cols, out):
        tile = cuda.shared.array((16, 8), uint32, alignment=16)
        lane = cuda.threadIdx.x
        for j in range(4):
            tile[lane // 2, 4 * (lane % 2) + j] = words[lane // 2, 4 * (lane % 2) + j]
        cuda.syncthreads()
        out[lane, 0], out[lane, 1], out[lane, 2], out[lane, 3] = load(tile, rows[lane], cols[lane])
    return probe


ldmatrix_probe = ldmatrix_probe_of(ldmatrix_x4)


def ldmatrix_case(rng, layout=ldmatrix_layout):
    """A tile of 16 x 16 random 16-bit numbers (as 16 x 8 words) and 32 row addresses: every row of the tile
    named at word 0 or 4, in a random order; and what ``layout`` of the 4 named matrices gives each lane."""
    halves = rng.integers(0, 2 ** 16, (16, 16), dtype=np.uint16)
    rows = rng.permutation(np.repeat(np.arange(16), 2)).astype(np.int32)
    cols = (4 * rng.integers(0, 2, 32)).astype(np.int32)
    named = np.stack([halves[r, 2 * c:2 * c + 8] for r, c in zip(rows, cols)])       # (32 lanes, 8 numbers)
    return halves.view(np.uint32), rows, cols, layout(named.reshape(4, 8, 8))


def run_ldmatrix(words, rows, cols, probe=ldmatrix_probe):
    out = np.zeros((32, 4), np.uint32)
    probe[1, 32](words, rows, cols, out)
    return out


def test_ldmatrix_x4_gives_each_lane_the_isa_fragment_of_the_rows_it_named(rng_seed):
    """Lanes 8 i ... 8 i + 7 name the 8 rows of matrix i anywhere in the tile; lane 4 r + c gets word c of row r of
    every matrix, as the ISA lays it out."""
    rng, seed = rng_seed
    for _ in range(3):
        words, rows, cols, want = ldmatrix_case(rng)
        np.testing.assert_array_equal(run_ldmatrix(words, rows, cols), want, err_msg=f"seed {seed}")


@cuda.jit
def ldmatrix_mma_probe(a_words, w_words, d, bf16):
    """A (16 x 16) and w (16 x 16: two mma columns of 8) in shared memory; A's fragments by one ldmatrix_x4 with
    tg's A addresses, w's by one with tg's w addresses, then 2 mmas: D (16 x 16) in the layout of C."""
    a_tile = cuda.shared.array((16, 8), uint32, alignment=16)
    w_tile = cuda.shared.array((16, 8), uint32, alignment=16)
    lane = cuda.threadIdx.x
    for j in range(4):
        a_tile[lane // 2, 4 * (lane % 2) + j] = a_words[lane // 2, 4 * (lane % 2) + j]
        w_tile[lane // 2, 4 * (lane % 2) + j] = w_words[lane // 2, 4 * (lane % 2) + j]
    cuda.syncthreads()
    a0, a1, a2, a3 = ldmatrix_x4(a_tile, lane % 16, 4 * (lane // 16))
    b00, b01, b10, b11 = ldmatrix_x4(w_tile, lane % 8 + 8 * (lane // 16), 4 * ((lane // 8) % 2))
    z = np.float32(0.0)
    if bf16[0]:
        d[lane, 0], d[lane, 1], d[lane, 2], d[lane, 3] = mma_m16n8k16_bf16(a0, a1, a2, a3, b00, b01, z, z, z, z)
        d[lane, 4], d[lane, 5], d[lane, 6], d[lane, 7] = mma_m16n8k16_bf16(a0, a1, a2, a3, b10, b11, z, z, z, z)
    else:
        d[lane, 0], d[lane, 1], d[lane, 2], d[lane, 3] = mma_m16n8k16(a0, a1, a2, a3, b00, b01, z, z, z, z)
        d[lane, 4], d[lane, 5], d[lane, 6], d[lane, 7] = mma_m16n8k16(a0, a1, a2, a3, b10, b11, z, z, z, z)


def c_layout(D):
    """D (16 x 16, two mma columns) as the 32 lanes hold it: lane 4 g + t, column block j: D[g, 8j + 2t : + 2] and
    D[g + 8, 8j + 2t : + 2]. Returns (32, 8)."""
    out = np.zeros((32, 8), np.float32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(2):
            out[lane, 4 * j:4 * j + 4] = [D[g, 8 * j + 2 * t], D[g, 8 * j + 2 * t + 1],
                                          D[g + 8, 8 * j + 2 * t], D[g + 8, 8 * j + 2 * t + 1]]
    return out


@pytest.mark.parametrize("fmt", tg.FORMATS)
def test_ldmatrix_fragments_fed_to_the_mma_give_the_product(fmt, rng_seed):
    """The addresses the v2 kernel's lanes name, an ldmatrix_x4 each for A and for w, and the mma gives A w^T:
    ldmatrix's layout is the mma's. Quarter integers keep every sum exact, so D is known bit for bit."""
    rng, seed = rng_seed
    A = (rng.integers(-32, 33, (16, 16)) / 4).astype(DTYPES[fmt])
    W = (rng.integers(-32, 33, (16, 16)) / 4).astype(DTYPES[fmt])
    d = np.full((32, 8), np.nan, np.float32)
    ldmatrix_mma_probe[1, 32](A.view(np.uint32), W.view(np.uint32), d, np.array([fmt == "bfloat16"]))
    want = c_layout((A.astype(np.float64) @ W.astype(np.float64).T).astype(np.float32))
    np.testing.assert_array_equal(d, want, err_msg=f"seed {seed}")


@cuda.jit
def mma_bf16_probe(a, b, c, d):
    lane = cuda.laneid
    d[lane, 0], d[lane, 1], d[lane, 2], d[lane, 3] = mma_m16n8k16_bf16(
        a[lane, 0], a[lane, 1], a[lane, 2], a[lane, 3], b[lane, 0], b[lane, 1], c[lane, 0], c[lane, 1], c[lane, 2],
        c[lane, 3])


def mma_fragments(A, B, C):
    """Each lane's fragments of A (16 x 16), B (16 x 8) and C (16 x 8) as mma.m16n8k16 lays them out, the
    16-bit numbers of A and B (any 2-byte dtype) packed two a word, the lower column or row in the low half."""
    def pair(two):
        return np.ascontiguousarray(two).view(np.uint32)[0]

    a, b, c = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a[lane] = [pair(A[g, 2 * t:2 * t + 2]), pair(A[g + 8, 2 * t:2 * t + 2]),
                   pair(A[g, 2 * t + 8:2 * t + 10]), pair(A[g + 8, 2 * t + 8:2 * t + 10])]
        b[lane] = [pair(B[2 * t:2 * t + 2, g]), pair(B[2 * t + 8:2 * t + 10, g])]
        c[lane] = [C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]]
    return a, b, c


def test_mma_bf16_twin_is_the_product_of_the_warps_fragments(rng_seed):
    """mma_m16n8k16_bf16: D = A B + C from the 32 lanes' bf16 fragments, each lane's D in the layout of its C.
    Quarter integers times 2**40 (A, past fp16's range) and 2**-30 (B) keep every sum exact, so D is known bit
    for bit, and a twin that read the words as fp16 would be far off."""
    rng, seed = rng_seed
    A = (rng.integers(-32, 33, (16, 16)) / 4 * 2.0 ** 40).astype(BF16)
    B = (rng.integers(-32, 33, (16, 8)) / 4 * 2.0 ** -30).astype(BF16)
    C = (rng.integers(-1000, 1001, (16, 8)) / 8 * 2.0 ** 10).astype(np.float32)
    a, b, c = mma_fragments(A, B, C)
    d = np.full((32, 4), np.nan, np.float32)
    mma_bf16_probe[1, 32](a, b, c, d)
    exact = A.astype(np.float64) @ B.astype(np.float64) + C
    _, _, want = mma_fragments(A, B, exact.astype(np.float32))
    np.testing.assert_array_equal(d, want, err_msg=f"seed {seed}")


@pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator twin's refusals")
def test_ldmatrix_twin_refuses_misaligned_rows_and_a_partial_warp():
    from course.simulator import WarpSyncError

    words, rows, cols, _ = ldmatrix_case(np.random.default_rng(0))
    cols[:] = 2                                   # 8 bytes into a row: not 16-byte aligned
    with pytest.raises(ValueError, match="col a multiple of 4, got rows of 8 words and col 2"):
        run_ldmatrix(words, rows, cols)

    @cuda.jit
    def half_warp(words, out):
        tile = cuda.shared.array((16, 8), uint32, alignment=16)
        lane = cuda.threadIdx.x
        if lane < 16:
            out[lane, 0], out[lane, 1], out[lane, 2], out[lane, 3] = ldmatrix_x4(tile, lane, 0)

    with pytest.raises(WarpSyncError, match=r"_ldmatrix_x4_of_warp\) needs every lane .* got lanes 0, 1, .* 15$"):
        half_warp[1, 32](words, np.zeros((32, 4), np.uint32))


# ------------------------------------------------------------------------------------------------
# cp.async: 16 bytes in flight until the thread waits for their group
# ------------------------------------------------------------------------------------------------

SENTINEL = 0xA5A5A5A5


@cuda.jit
def cp_async_probe(src, valid, before, middle, after):
    """One warp; lane l owns words 4 (l % 2) ... + 3 of row l // 2 of two shared tiles (16 x 8 words), first set to
    SENTINEL. Group 1 copies numbers 8 (l % 2) ... + 7 of src row l // 2 into the first tile, group 2 the same
    into the second (zeros where not valid[l]). The lane reads its own words: before any wait (first tile), after
    waiting for all but 1 group (both tiles), after waiting for all (second tile)."""
    first = cuda.shared.array((16, 8), uint32, alignment=16)
    second = cuda.shared.array((16, 8), uint32, alignment=16)
    lane = cuda.threadIdx.x
    r = lane // 2
    c = 4 * (lane % 2)
    for j in range(4):
        first[r, c + j] = uint32(SENTINEL)
        second[r, c + j] = uint32(SENTINEL)
    cp_async_16(first, r, c, src, r, 2 * c, True)
    cp_async_commit_group()
    cp_async_16(second, r, c, src, r, 2 * c, valid[lane])
    cp_async_commit_group()
    for j in range(4):
        before[lane, j] = first[r, c + j]
    cp_async_wait_group(1)
    for j in range(4):
        middle[lane, 0, j] = first[r, c + j]
        middle[lane, 1, j] = second[r, c + j]
    cp_async_wait_group(0)
    for j in range(4):
        after[lane, j] = second[r, c + j]


def test_cp_async_lands_each_group_when_its_thread_waits_for_it(rng_seed):
    """A group lands when cp_async_wait_group lets it (oldest first): the 16 bytes of its row of src, or 16 zero
    bytes where the copy is not valid. (Before its wait a copy has not landed in the simulator; on a GPU reading
    it then is a race, so that part is the simulator's.)"""
    rng, seed = rng_seed
    src = rng.integers(0, 2 ** 16, (16, 16), dtype=np.uint16)
    valid = rng.integers(0, 2, 32).astype(np.bool_)
    valid[:2] = True, False
    before, middle, after = np.zeros((32, 4), np.uint32), np.zeros((32, 2, 4), np.uint32), np.zeros((32, 4), np.uint32)
    cp_async_probe[1, 32](src, valid, before, middle, after)
    rows = np.stack([src[lane // 2, 8 * (lane % 2):8 * (lane % 2) + 8] for lane in range(32)]).view(np.uint32)
    np.testing.assert_array_equal(middle[:, 0], rows, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(after, np.where(valid[:, None], rows, 0), err_msg=f"seed {seed}")
    if course.on_simulator():
        assert (before == SENTINEL).all() and (middle[:, 1] == SENTINEL).all(), f"seed {seed}"


@pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator twin's refusals")
def test_cp_async_twin_refuses_misaligned_copies():
    @cuda.jit
    def misaligned(src):
        tile = cuda.shared.array((16, 8), uint32, alignment=16)
        cp_async_16(tile, 0, 0, src, 0, 4, True)          # 8 bytes into a row of src

    with pytest.raises(ValueError, match="both ends of a 16-byte copy must be 16-byte aligned.*src_col 4"):
        misaligned[1, 32](np.zeros((16, 16), np.uint16))


@cuda.jit
def paired_store_probe(c, rows, cols):
    """Thread t stores (t, t + 0.5) at row rows[t], column cols[t] of c with one 8-byte store."""
    t = cuda.threadIdx.x
    store_f32x2(c, rows[t], cols[t], float32(t), float32(t) + float32(0.5))


def test_store_f32x2_writes_both_floats_and_nothing_else():
    """Each thread's pair lands at its two columns; every other float of c keeps its poison."""
    c = np.full((3, 8), np.nan, np.float32)
    rows, cols = np.array([0, 2, 1, 2], np.int64), np.array([0, 6, 4, 2], np.int64)
    paired_store_probe[1, 4](c, rows, cols)
    expected = np.full((3, 8), np.nan, np.float32)
    for t, (r, col) in enumerate(zip(rows, cols)):
        expected[r, col:col + 2] = t, t + 0.5
    np.testing.assert_array_equal(c, expected)


@pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator twin's refusals")
@pytest.mark.parametrize("shape, dtype, row, col, error, words", [
    ((2, 8), np.float32, 0, 3, ValueError, "8-byte aligned address.*col a multiple of 2, got rows of 8 floats and col 3"),
    ((2, 7), np.float32, 1, 2, ValueError, "rows must be a multiple of 2 floats long.*got rows of 7 floats and col 2"),
    ((2, 8), np.float32, 2, 0, IndexError, "floats 0 ... 1 of row 2 lie outside array of shape \\(2, 8\\)"),
    ((2, 8), np.float32, 0, 8, IndexError, "floats 8 ... 9 of row 0 lie outside"),
    ((2, 8), np.float64, 0, 0, TypeError, "a 2-dimensional array of floats, got 2 dimensions of float64"),
])
def test_store_f32x2_twin_refuses_what_the_gpu_would_fault_on(shape, dtype, row, col, error, words):
    with pytest.raises(error, match=words):
        paired_store_probe[1, 1](np.zeros(shape, dtype), np.array([row]), np.array([col]))


@cuda.jit
def shared_view_probe(out):
    """Each thread writes its index into a (2, 4, 8) view of the dynamic shared memory at [t // 32, (t // 8) % 4,
    t % 8], then, after a barrier, reads word t of the flat array: the view's C order puts word t there."""
    flat = cuda.shared.array(0, uint32)
    view = shared_view(flat, (2, 4, 8))
    t = cuda.threadIdx.x
    view[t // 32, (t // 8) % 4, t % 8] = uint32(t + 1)
    cuda.syncthreads()
    out[t] = flat[t]


def test_shared_view_is_the_dynamic_shared_memory_in_c_order():
    out = np.zeros(64, np.uint32)
    launch_with_shared(shared_view_probe, 1, 64, 64 * 4, out)
    np.testing.assert_array_equal(out, np.arange(1, 65, dtype=np.uint32))


@pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator twin's refusal")
def test_shared_view_twin_refuses_a_view_larger_than_the_launch_gave():
    with pytest.raises(ValueError, match=r"a view of shape \(2, 4, 8\) needs 256 bytes of dynamic shared memory, "
                                         r"the launch gave 128"):
        launch_with_shared(shared_view_probe, 1, 64, 128, np.zeros(64, np.uint32))


# ------------------------------------------------------------------------------------------------
# The rungs against the float64 reference
# ------------------------------------------------------------------------------------------------

def check_gemm(out, a, w, name, seed):
    """The float32 rule against the exact product of the stored numbers; on the simulator also the bound of
    ceil(K / 16) float32 roundings (one per mma step of the twin) of the sum of |a| |w|."""
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    ref = gemm_reference(a, w)
    check(out, ref, name=name, dims=("M", "N"), tile={"M": tg.BLOCK_M, "N": tg.BLOCK_N}, seed=seed)
    if course.on_simulator():
        bound = math.ceil(a.shape[1] / tg.MMA_K) * 2.0 ** -24 * (np.abs(a64) @ np.abs(w64).T) * 1.0001
        excess = np.abs(out - ref) - bound
        assert excess.max(initial=0.0) <= 0, f"{name}: {np.count_nonzero(excess > 0)} elements past the bound " \
                                             f"of the float32 sums (seed {seed})"


@pytest.mark.parametrize("fmt", tg.FORMATS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rung", RUNGS)
def test_rung_matches_the_reference_at_awkward_shapes(rung, shape, fmt, rng_seed):
    rng, seed = rng_seed
    m, n, k = shape
    a, w = numbers(rng, DTYPES[fmt], m, k), numbers(rng, DTYPES[fmt], n, k)
    out = run(rung, a, w)
    check_gemm(out, a, w, f"{rung} {fmt} {m}x{n}x{k}", seed)


@pytest.mark.parametrize("shape", ANY_K_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rung", ANY_K_RUNGS)
def test_rungs_that_take_any_k_match_the_reference(rung, shape, rng_seed):
    rng, seed = rng_seed
    m, n, k = shape
    a, w = numbers(rng, np.float16, m, k), numbers(rng, np.float16, n, k)
    check_gemm(run(rung, a, w), a, w, f"{rung} {m}x{n}x{k}", seed)


def spread(rng, dtype, *shape):
    """Numbers with a wide spread of magnitudes (2**-8 to 2**8 times a normal number)."""
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(-8, 8, shape)).astype(dtype)


@pytest.mark.parametrize("fmt", tg.FORMATS)
def test_later_rungs_equal_v1_bit_for_bit(fmt, rng_seed):
    """The same fragment words into the same mmas in the same order: the same bits, over two block rows of v1-v4
    (one block of v5, its second warp row with 6 rows and its second warp column with 8 columns), 5 steps along K
    (the ring of 3 slots goes round; the last step holds 8 numbers), with a wide spread of magnitudes."""
    rng, seed = rng_seed
    a, w = spread(rng, DTYPES[fmt], 70, 136), spread(rng, DTYPES[fmt], 40, 136)
    v1, *others = (run(rung, a, w) for rung in RUNGS)
    for rung, out in zip(RUNGS[1:], others):
        np.testing.assert_array_equal(out.view(np.uint32), v1.view(np.uint32), err_msg=f"{rung}, seed {seed}")
    check_gemm(v1, a, w, f"tc_gemm_v1_mma_shared {fmt}", seed)


@pytest.mark.parametrize("fmt", tg.FORMATS)
@pytest.mark.parametrize("shape", [(130, 24, 40), (20, 136, 72)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rung", LARGE_RUNGS)
def test_large_tiles_over_two_blocks_equal_v1_bit_for_bit(rung, shape, fmt, rng_seed):
    """v5's and v6's 128 x 128 tiles of C two blocks at a time: two block rows (the second with 2 rows), then two
    block columns (the second with 8 columns), each the same bits as v1's."""
    rng, seed = rng_seed
    m, n, k = shape
    a, w = spread(rng, DTYPES[fmt], m, k), spread(rng, DTYPES[fmt], n, k)
    v1, large = run("tc_gemm_v1_mma_shared", a, w), run(rung, a, w)
    np.testing.assert_array_equal(large.view(np.uint32), v1.view(np.uint32), err_msg=f"{rung}, seed {seed}")


@pytest.mark.parametrize("wrong", ["warps of v5's 64 x 32", "a warp's columns shifted by a mma tile"])
def test_v6_with_wrong_warp_tiles_fails(wrong, rng_seed):
    """The test above can fail: v6's loop with v5's warp tiles but v6's 4 warps leaves half of C unwritten; storing
    each warp's columns one mma tile to the right puts every number in another place."""
    from course.checking import CheckFailure

    if wrong == "warps of v5's 64 x 32":
        kernel = tg._build_swizzled("float16", "tc_gemm_v6_wide_warps_kernel", tg.LARGE_BLOCK_M, tg.LARGE_WARPS_N,
                                    tg.LARGE_MMAS_M, tg.LARGE_MMAS_N, tg._clear_large, tg._store_large)
    else:
        clear, store = tg._accumulators(tg.WIDE_MMAS_M, tg.WIDE_MMAS_N)
        store_py = getattr(store, "py_func", None) or store.fn

        def shifted(c, acc, row, col, g, t):
            store_py(c, acc, row, col + tg.MMA_N, g, t)

        kernel = tg._build_swizzled("float16", "tc_gemm_v6_wide_warps_kernel", tg.LARGE_BLOCK_M, tg.WIDE_WARPS_N,
                                    tg.WIDE_MMAS_M, tg.WIDE_MMAS_N, clear, cuda.jit(device=True)(shifted))
    rng, seed = rng_seed
    a, w = numbers(rng, np.float16, 130, 40), numbers(rng, np.float16, 136, 40)
    out = tg.tc_gemm_v6_wide_warps(a, w, out=poison(np.empty((130, 136), np.float32)), kernel=lambda fmt: kernel)
    with pytest.raises(CheckFailure):
        check_gemm(out, a, w, f"v6, {wrong}", seed)


@pytest.mark.parametrize("fmt", tg.FORMATS)
@pytest.mark.parametrize("tile", tg.TILES, ids=lambda t: "x".join(map(str, t)))
def test_v7_at_every_tile_equals_v1_bit_for_bit_and_moves_the_models_bytes(tile, fmt, rng_seed):
    """v7 at each of its tiles, forced (``tile=``): two block rows of the 128 x 128 tiles (the second with 2 rows) and
    three block columns of the 64 x 64 ones, 5 steps along K: v1's bits, and the global bytes and shared words the
    model gives for that tile."""
    rng, seed = rng_seed
    m, n, k = 130, 136, 136
    a, w = spread(rng, DTYPES[fmt], m, k), spread(rng, DTYPES[fmt], n, k)
    with count_traffic() as t:
        out = tg.tc_gemm_v7_tuned(a, w, out=poison(np.empty((m, n), np.float32)), tile=tile)
    v1 = run("tc_gemm_v1_mma_shared", a, w)
    np.testing.assert_array_equal(out.view(np.uint32), v1.view(np.uint32), err_msg=f"v7 at {tile}, seed {seed}")
    if course.on_simulator():
        counted = {name: (t.load_bytes[name], t.store_bytes[name]) for name in t.load_bytes}
        assert counted == model.traffic("tc_gemm_v7_tuned", m, n, k, tile), tile
        assert (t.shared_loads, t.shared_stores) == model.shared_words(m, n, k, "tc_gemm_v7_tuned", tile), tile


def test_v7_untuned_tile_is_the_models_and_each_tile_repeats_a_fixed_rungs_counts():
    """The kernels' untuned rule is the model's (the first tile whose grid has 128 blocks); v7 at v4's, v5's and
    v6's tiles has their traffic, shared words, mmas and passes; its own 64 x 64 tile of 2 warps of 64 x 32 has v5's
    fragment loads per mma on v4's global traffic."""
    assert (model.TILES, model.BLOCKS_TO_FILL) == (tg.TILES, tg.BLOCKS_TO_FILL)
    for m, n in [(0, 0), (1, 1), (500, 700), (1024, 1024), (1408, 1536), (1536, 1536), (4096, 4096), (64, 8192)]:
        assert tg.untuned_tile(m, n) == model.untuned_tile(m, n), (m, n)
    assert model.untuned_tile(4096, 4096) == (128, 64, 64) and model.untuned_tile(1024, 1024) == (64, 64, 32)
    assert model.untuned_tile(1536, 1536) == (128, 64, 64) and model.untuned_tile(1408, 1408) == (64, 64, 32)
    assert model.untuned_tile(500, 700) == (64, 32, 32)                 # 88 blocks even of 64 x 64: the smallest
    for rung, tile in model.RUNG_TILES.items():
        if rung in ("tc_gemm_v4_swizzled", "tc_gemm_v5_large_tiles", "tc_gemm_v6_wide_warps"):
            v7 = "tc_gemm_v7_tuned"
            assert model.traffic(v7, 300, 200, 72, tile) == model.traffic(rung, 300, 200, 72)
            assert model.shared_words(300, 200, 72, v7, tile) == model.shared_words(300, 200, 72, rung)
            assert model.warp_mmas_per_step(v7, tile) == model.warp_mmas_per_step(rung)
            assert model.shared_passes_per_mma_step(v7, tile) == model.shared_passes_per_mma_step(rung)
    two_warps = (64, 64, 32)
    assert model.traffic("tc_gemm_v7_tuned", 256, 256, 64, two_warps) == model.traffic("tc_gemm_v4_swizzled", 256, 256,
                                                                                        64)
    assert (model.warp_mmas_per_step("tc_gemm_v7_tuned", two_warps), model.fragment_loads_per_step(
        "tc_gemm_v7_tuned", two_warps)) == (16, 6)
    with pytest.raises(ValueError, match="tile must be one of"):
        model.traffic("tc_gemm_v7_tuned", 1, 1, 1, (32, 32, 32))
    with pytest.raises(ValueError, match="tile is v7's choice; tc_gemm_v5_large_tiles always runs"):
        model.traffic("tc_gemm_v5_large_tiles", 1, 1, 1, (64, 32, 32))


def test_v7_refuses_a_tile_it_has_not_and_tunes_only_on_a_gpu(monkeypatch):
    """A tile outside TILES is refused by name; on the simulator v7 launches the untuned tile and tunes nothing, and
    timing refuses to run; a Tuner on a (stand-in) GPU keeps the fastest option per GPU, kernel and problem, and
    picks it only for device arrays."""
    from kernels import tuning

    a, w = np.zeros((4, 16), np.float16), np.zeros((8, 16), np.float16)
    with pytest.raises(ValueError, match=r"tile must be one of \(128, 64, 64\).*got \(128, 128, 128\)"):
        tg.tc_gemm_v7_tuned(a, w, tile=(128, 128, 128))
    with pytest.raises(ValueError, match="a must have K a multiple of 8 for tc_gemm_v7_tuned"):
        tg.tc_gemm_v7_tuned(np.zeros((4, 12), np.float16), np.zeros((8, 12), np.float16))
    if course.on_simulator():
        tg.tc_gemm_v7_tuned(a, w)
        assert tg.tuned() == [] and tg.tile_for("float16", 4, 8, 16) == tg.untuned_tile(4, 8)
        with pytest.raises(RuntimeError, match="needs a GPU"):
            tuning.time_each({"x": lambda: None})
    tuner = tuning.Tuner()
    monkeypatch.setattr(tuning.config, "ENABLE_CUDASIM", False)
    monkeypatch.setattr(tuning, "gpu_name", lambda: "Test GPU")
    monkeypatch.setattr(tuning, "time_each", lambda launches, repeat: {"big": 2.0, "small": 1.5, "mid": 3.0})
    found = tuner.tune("k", (1, 2, 3), {"big": None, "small": None, "mid": None})
    assert found["choice"] == "small" and tuner.choice("k", (1, 2, 3)) == "small"
    assert tuner.choice("k", (1, 2, 4)) is None and tuner.choice("other", (1, 2, 3)) is None
    assert tuner.entries() == [{"gpu": "Test GPU", "kernel": "k", "problem": (1, 2, 3), "choice": "small",
                                "ms": {"big": 2.0, "small": 1.5, "mid": 3.0}}]
    # pick: NumPy arrays take the untuned option; device arrays the tuned one, tuning a new problem first
    on_device = cuda.to_device(np.zeros(4, np.float32))
    assert tuner.pick("k", (1, 2, 3), (on_device, np.zeros(4)), dict, "untuned") == "untuned"
    assert tuner.pick("k", (1, 2, 3), (on_device,), dict, "untuned") == "small"
    assert tuner.pick("k", (4, 5, 6), (on_device,), lambda: {"big": None, "small": None, "mid": None},
                      "untuned") == "small" and tuner.choice("k", (4, 5, 6)) == "small"


def test_the_swizzle_is_the_models_and_spreads_each_phase_over_8_bank_groups():
    """The kernels' ``_swizzled`` is the model's ``swizzled_word``: for every row a permutation of its 4 chunks, and
    for any 8 rows from a multiple of 8 at one chunk (an ldmatrix phase) and for a quarter warp's 8 copies (2 rows,
    4 chunks each) 8 different groups of 4 banks, where v3's layout gives 2 groups to the 8 rows of a phase."""
    swizzled = getattr(tg._swizzled, "py_func", None) or tg._swizzled.fn
    rows = range(tg.LARGE_BLOCK_M)
    assert all(swizzled(r, q) == model.swizzled_word(r, q) for r in rows for q in range(tg.CHUNKS))
    assert all(sorted(swizzled(r, q) for q in range(tg.CHUNKS)) == [0, 4, 8, 12] for r in rows)

    def group(r, word):                         # 16-byte group of banks, 8 of them across 128 bytes
        return (r * tg.K_WORDS + word) // 4 % 8

    for first in range(0, tg.LARGE_BLOCK_M, 8):
        for q in range(tg.CHUNKS):
            assert len({group(r, swizzled(r, q)) for r in range(first, first + 8)}) == 8, (first, q)
            assert len({group(r, 4 * q) for r in range(first, first + 8)}) == 2          # v3: 4-way conflicts
    for first in range(0, tg.LARGE_BLOCK_M, 2):
        assert len({group(r, swizzled(r, q)) for r in (first, first + 1) for q in range(tg.CHUNKS)}) == 8


def test_v8s_swizzle_spreads_each_phase_and_each_quarter_warps_copies_over_8_bank_groups():
    """v8's rows are 32 words (128 bytes, all 8 groups of 4 banks): chunk q of row r at position q ^ (r & 7) puts
    the 8 rows of an ldmatrix phase (from a multiple of 8, one chunk) in 8 groups, and a quarter warp's 8 copies (one
    row's 8 chunks) too; unswizzled, a phase's 8 rows would share one group: 8-way conflicts."""
    deep = tg.ring_swizzle(8)
    swizzled = getattr(deep, "py_func", None) or deep.fn

    def group(r, word):
        return (r * 32 + word) // 4 % 8

    for r in range(tg.LARGE_BLOCK_M):
        assert sorted(swizzled(r, q) for q in range(8)) == list(range(0, 32, 4))
        assert len({group(r, swizzled(r, q)) for q in range(8)}) == 8
    for first in range(0, tg.LARGE_BLOCK_M, 8):
        for q in range(8):
            assert len({group(r, swizzled(r, q)) for r in range(first, first + 8)}) == 8, (first, q)
            assert len({group(r, 4 * q) for r in range(first, first + 8)}) == 1
    v4 = tg.ring_swizzle(4)
    v4_py = getattr(v4, "py_func", None) or v4.fn
    assert all(v4_py(r, q) == model.swizzled_word(r, q) for r in range(tg.LARGE_BLOCK_M) for q in range(4))


@pytest.mark.parametrize("rung", DEEP_RUNGS)
def test_v8_asks_for_its_96_kb_ring_and_fails_with_less(rung, monkeypatch, rng_seed):
    """v8's launcher (and v9's) gives its kernel ring_bytes of dynamic shared memory, 96 KB (more than a block may declare
    statically, so a GPU must allow it first: ``launch_with_shared``); on the simulator a launch that gives less is
    refused by ``shared_view``'s twin, naming both sizes."""
    from kernels import launching

    given = []

    def spy(kernel, grid, threads, shared_bytes, *args):
        given.append((grid, threads, shared_bytes))
        launching.launch_with_shared(kernel, grid, threads, shared_bytes, *args)

    monkeypatch.setattr(tg, "launch_with_shared", spy)
    rng, seed = rng_seed
    a, w = numbers(rng, np.float16, 130, 64), numbers(rng, np.float16, 20, 64)
    check_gemm(run(rung, a, w), a, w, rung, seed)
    assert given == [((1, 2), tg.WIDE_THREADS, 96 * 1024)] and tg.ring_bytes(128, 128, 64, 3) == 96 * 1024
    if course.on_simulator():
        def short(kernel, grid, threads, shared_bytes, *args):
            launching.launch_with_shared(kernel, grid, threads, shared_bytes // 2, *args)

        monkeypatch.setattr(tg, "launch_with_shared", short)
        with pytest.raises(ValueError, match="needs 49152 bytes of dynamic shared memory, the launch gave 0"):
            run(rung, a, w)


@pytest.mark.skipif(not course.on_simulator(), reason="a ring that computes on copies still in flight is a race")
@pytest.mark.parametrize("mistake", ["one group too many in flight", "no wait"])
@pytest.mark.parametrize("rung", RING_RUNGS)
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")     # tiles never written hold any bits
def test_a_ring_without_its_wait_fails_on_the_simulator(rung, mistake, monkeypatch, rng_seed):
    """The simulator's copies land only when their thread waits for them, so v3, v4 or v5 computing a step whose
    copies may still travel (``cp.async.wait_group 2`` with 3 slots, or no wait at all) reads the wrong tiles
    there too."""
    from course.checking import CheckFailure

    if mistake == "no wait":
        monkeypatch.setattr(tg, "cp_async_wait_group", lambda n: None)
    else:                                           # a ring of 3 computing with 2 groups still in flight
        monkeypatch.setattr(tg, "cp_async_wait_group", lambda n, wait=tg.cp_async_wait_group: wait(n + 1))
    rng, seed = rng_seed
    a, w = numbers(rng, np.float16, 20, 136), numbers(rng, np.float16, 24, 136)
    with pytest.raises(CheckFailure):
        check_gemm(run(rung, a, w), a, w, f"{rung}, {mistake}", seed)


@pytest.mark.skipif(not course.on_simulator(), reason="counts launches with course.traffic (the simulator's)")
@pytest.mark.parametrize("rung", RUNGS)
def test_empty_shapes_launch_nothing_and_k_zero_gives_zeros(rung):
    a, w = np.zeros((5, 0), np.float16), np.zeros((7, 0), np.float16)
    with count_traffic() as t:
        out = run(rung, a, w)
        assert run(rung, np.zeros((0, 16), np.float16), np.zeros((7, 16), np.float16)).shape == (0, 7)
        assert run(rung, np.zeros((5, 16), np.float16), np.zeros((0, 16), np.float16)).shape == (5, 0)
    np.testing.assert_array_equal(out, np.zeros((5, 7), np.float32))
    assert t.launches == 1


@pytest.mark.skipif(not course.on_simulator(), reason="course.traffic counts on the simulator")
@pytest.mark.parametrize("rung", RUNGS)
def test_traffic_is_the_model(rung, rng_seed):
    """Global bytes by argument and shared words, counted on the simulator, equal the model's, at a shape of 4
    blocks of v1-v4 (a partial block row and column; one block of v5) and K = 40 (a partial step of 32 and of
    16)."""
    rng, _ = rng_seed
    m, n, k = 70, 72, 40
    with count_traffic() as t:
        run(rung, numbers(rng, np.float16, m, k), numbers(rng, np.float16, n, k))
    assert t.kernel_names == [f"{rung}_kernel"]
    counted = {name: (t.load_bytes[name], t.store_bytes[name]) for name in t.load_bytes}
    assert counted == model.traffic(rung, m, n, k)
    assert (t.shared_loads, t.shared_stores) == model.shared_words(m, n, k, rung)


def test_the_model_keeps_the_kernels_tiles_and_predicts_the_bank_conflicts():
    assert (model.BLOCK_M, model.BLOCK_N, model.BLOCK_K, model.K_WORDS) == (tg.BLOCK_M, tg.BLOCK_N, tg.BLOCK_K,
                                                                            tg.K_WORDS)
    assert (model.LARGE_BLOCK_M, model.LARGE_BLOCK_N, model.LARGE_WARPS) == (
        tg.LARGE_BLOCK_M, tg.LARGE_BLOCK_N, tg.LARGE_WARPS_M * tg.LARGE_WARPS_N)
    assert model.RUNGS == tuple(RUNGS)
    assert model.flops(37, 45, 48) == 2 * 37 * 45 * 48
    assert model.compulsory_bytes(37, 45, 48) == 2 * (37 * 48 + 45 * 48) + 4 * 37 * 45
    # v5 reads A and w half as often as v4 where 128 divides M and N.
    assert model.bytes_tc_gemm_v5_large_tiles(256, 256, 64) == 2 * 2 * (256 * 64 * 2) + 4 * 256 * 256
    assert model.bytes_tc_gemm_v4_swizzled(256, 256, 64) == 2 * 4 * (256 * 64 * 2) + 4 * 256 * 256
    # 64-byte rows: the 8 rows a load reads share 2 groups of 4 banks, 4-way conflicts; v2 and v3 issue 4 loads
    # where v1 issues 16, for the same 64 shared passes per 16-wide step. v4's swizzle: 1 pass a phase, 16 for
    # its 4 ldmatrix; v5: 24 for its 6, which feed 16 mmas.
    # v7 untuned on no shape is v4's tile.
    # v8: v6's 8 ldmatrix on rows of 128 bytes, swizzled by their low 3 bits: 32 passes for 32 mmas too.
    assert [model.shared_passes_per_mma_step(rung) for rung in RUNGS] == [64, 64, 64, 16, 24, 32, 16, 32, 32]
    assert [model.warp_mmas_per_step(rung) for rung in RUNGS] == [8, 8, 8, 8, 16, 32, 8, 32, 32]
    # v6 moves v5's global bytes; its 4 warps of 64 x 64 load 32 words a lane per 16 of K for 32 mmas, where v5's 8
    # warps load 24 for 16: two thirds of v5's shared loads.
    assert model.traffic("tc_gemm_v6_wide_warps", 200, 300, 64) == model.traffic("tc_gemm_v5_large_tiles", 200, 300, 64)
    loads6, stores6 = model.shared_words(256, 256, 64, "tc_gemm_v6_wide_warps")
    loads5, stores5 = model.shared_words(256, 256, 64, "tc_gemm_v5_large_tiles")
    assert 3 * loads6 == 2 * loads5 and stores6 == stores5
    # v8 moves v6's global bytes and, where 64 divides K, loads and stores v6's shared words; past K it loads
    # fragments of zeros to the end of its step of 64, where v6 skips the 16-wide steps past K.
    assert model.traffic("tc_gemm_v8_deep_steps", 200, 300, 72) == model.traffic("tc_gemm_v6_wide_warps", 200, 300, 72)
    assert model.shared_words(256, 256, 128, "tc_gemm_v8_deep_steps") == model.shared_words(256, 256, 128,
                                                                                             "tc_gemm_v6_wide_warps")
    loads8, stores8 = model.shared_words(128, 128, 72, "tc_gemm_v8_deep_steps")
    assert (loads8, stores8) == (4 * 32 * 4 * 8 * 8, 2 * 128 * 32 * 2)
    # v9 is v8 with wider stores of C: the same bytes, the same shared words.
    assert model.traffic("tc_gemm_v9_paired_stores", 200, 300, 72) == model.traffic("tc_gemm_v8_deep_steps", 200,
                                                                                     300, 72)
    assert model.shared_words(128, 128, 72, "tc_gemm_v9_paired_stores") == (loads8, stores8)
    rows = range(tg.LARGE_BLOCK_M)
    deep = tg.ring_swizzle(8)
    deep_py = getattr(deep, "py_func", None) or deep.fn
    assert all(deep_py(r, q) == model.deep_swizzled_word(r, q) for r in rows for q in range(8))
    # A launch's shared-load wavefronts (Nsight's count) are its warps' passes over its 16-wide steps along K: v1-v3
    # four times the fewest their loads could take, v4 the fewest; the fewest are a wavefront per phase of each load
    # (16 32-bit loads a step for v1, 4 ldmatrix.x4 of 4 phases for v2-v4). v8 counts every 16 of each step of 64.
    counts = {rung: model.shared_load_wavefronts(rung, 256, 192, 80) for rung in RUNGS if rung != "tc_gemm_v7_tuned"}
    launch_warps = 4 * 3 * 4                    # 64 x 64 tiles of C: 4 x 3 blocks of 4 warps
    assert counts["tc_gemm_v1_mma_shared"] == (launch_warps * 5 * 64, launch_warps * 5 * 16)
    assert counts["tc_gemm_v2_ldmatrix"] == counts["tc_gemm_v3_cp_async"] == counts["tc_gemm_v1_mma_shared"]
    assert counts["tc_gemm_v4_swizzled"] == (launch_warps * 5 * 16,) * 2
    wide_warps = 2 * 2 * 4                      # 128 x 128 tiles: 2 x 2 blocks of 4 warps of 64 x 64
    assert counts["tc_gemm_v6_wide_warps"] == (wide_warps * 5 * 32,) * 2
    assert counts["tc_gemm_v8_deep_steps"] == counts["tc_gemm_v9_paired_stores"] == (wide_warps * 8 * 32,) * 2
    assert model.shared_load_wavefronts("tc_gemm_v7_tuned", 256, 192, 80, tile=(128, 64, 64)) == counts[
        "tc_gemm_v6_wide_warps"]
    with pytest.raises(ValueError, match="rung must be one of"):
        model.traffic("tc_gemm_v10", 1, 1, 1)


@pytest.mark.parametrize("call, error, words", [
    (lambda: tg.tc_gemm_v1_mma_shared(np.zeros((4, 16), np.float32), np.zeros((8, 16), np.float32)), TypeError,
     "a must have dtype one of float16, bfloat16, got float32"),
    (lambda: tg.tc_gemm_v1_mma_shared(np.zeros((4, 16), np.float16), np.zeros((8, 16), BF16)), TypeError,
     "w must have dtype float16, got bfloat16"),
    (lambda: tg.tc_gemm_v2_ldmatrix(np.zeros((4, 16), np.float16), np.zeros((8, 32), np.float16)), ValueError,
     r"w must have shape \(N=any, K=16\), got \(8, 32\) \(K is 32, not 16\)"),
    (lambda: tg.tc_gemm_v2_ldmatrix(np.zeros((4, 16), np.float16), np.zeros((16, 8), np.float16).T), ValueError,
     "w must be C-contiguous"),
    (lambda: tg.tc_gemm_v1_mma_shared(np.zeros(16, np.float16), np.zeros((8, 16), np.float16)), ValueError,
     r"a must have 2 dimensions \(M=any, K=any\), got shape \(16,\)"),
    (lambda: tg.tc_gemm_v1_mma_shared(np.zeros((4, 16), np.float16), np.zeros((8, 16), np.float16),
                                      out=np.zeros((8, 4), np.float32)), ValueError,
     r"out must have shape \(M=4, N=8\), got \(8, 4\)"),
    (lambda: tg.tc_gemm_v1_mma_shared(np.zeros((tg.MAX_M + 1, 0), np.float16), np.zeros((8, 0), np.float16)),
     ValueError, r"a must have M at most 4194240 \(65535 block rows of 64: the grid's y dimension\), got M = 4194241"),
    (lambda: tg.tc_gemm_v1_mma_shared(np.zeros((4, 16), np.float16), cuda.to_device(np.zeros((8, 16), np.float16))),
     TypeError, "a, w must all be NumPy arrays or all be device arrays"),
    (lambda: tg.tc_gemm_v1_mma_shared_kernel("float32"), ValueError, "fmt must be one of float16, bfloat16, got"),
    (lambda: tg.tc_gemm_v3_cp_async(np.zeros((4, 33), np.float16), np.zeros((8, 33), np.float16)), ValueError,
     "a must have K a multiple of 8 for tc_gemm_v3_cp_async .* got K = 33: tc_gemm_v2_ldmatrix takes any K"),
    (lambda: tg.tc_gemm_v4_swizzled(np.zeros((4, 12), BF16), np.zeros((8, 12), BF16)), ValueError,
     "a must have K a multiple of 8 for tc_gemm_v4_swizzled .* got K = 12: tc_gemm_v2_ldmatrix takes any K"),
    (lambda: tg.tc_gemm_v5_large_tiles(np.zeros((4, 33), np.float16), np.zeros((8, 33), np.float16)), ValueError,
     "a must have K a multiple of 8 for tc_gemm_v5_large_tiles .* got K = 33: tc_gemm_v2_ldmatrix takes any K"),
    (lambda: tg.tc_gemm_v5_large_tiles(np.zeros((4, 16), np.float16), np.zeros((8, 16), np.float32)), TypeError,
     "w must have dtype float16, got float32"),
    (lambda: tg.tc_gemm_v5_large_tiles(np.zeros((4, 16), np.float16), np.zeros((8, 16), np.float16),
                                       out=np.zeros((4, 8), np.float16)), TypeError,
     "out must have dtype float32, got float16"),
    (lambda: tg.tc_gemm_v5_large_tiles(np.zeros((tg.LARGE_MAX_M + 1, 0), np.float16), np.zeros((8, 0), np.float16)),
     ValueError, r"a must have M at most 8388480 \(65535 block rows of 128: the grid's y dimension\), got M = 8388481"),
    (lambda: tg.tc_gemm_v5_large_tiles_kernel("int8"), ValueError, "fmt must be one of float16, bfloat16, got"),
    (lambda: tg.tc_gemm_v6_wide_warps(np.zeros((4, 20), BF16), np.zeros((8, 20), BF16)), ValueError,
     "a must have K a multiple of 8 for tc_gemm_v6_wide_warps .* got K = 20: tc_gemm_v2_ldmatrix takes any K"),
    (lambda: tg.tc_gemm_v6_wide_warps(np.zeros((tg.LARGE_MAX_M + 1, 0), np.float16), np.zeros((8, 0), np.float16)),
     ValueError, r"a must have M at most 8388480 \(65535 block rows of 128"),
])
def test_launcher_errors_name_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------------
# PTX for sm_80 and sm_90 (compiled in the background process)
# ------------------------------------------------------------------------------------------------

def records_of(compiled):
    records = compiled()
    assert {(r["rung"], r["fmt"], r["cc"]) for r in records} == {
        (rung, fmt, cc) for rung in RUNGS for fmt in tg.FORMATS for cc in ("sm_80", "sm_90")}
    return records


# Static shared memory of each rung's kernel, bytes: v1's and v2's tiles, v3's and v4's ring of 3, v5's ring of 3
# steps of 128 rows, exactly the 48 KB a block may declare statically.
SHARED_BYTES = {"tc_gemm_v1_mma_shared": 8192, "tc_gemm_v2_ldmatrix": 8192, "tc_gemm_v3_cp_async": 24576,
                "tc_gemm_v4_swizzled": 24576, "tc_gemm_v5_large_tiles": 48 * 1024, "tc_gemm_v6_wide_warps": 48 * 1024,
                "tc_gemm_v8_deep_steps": 0,       # v8's ring is dynamic shared memory (test_v8_asks_for_its_ring)
                "tc_gemm_v9_paired_stores": 0}


def expected_instructions(record) -> tuple[int, int, int]:
    """(mmas, ldmatrix, shared bytes) a build's PTX holds: two 16-wide steps of its warp's mma tiles and their
    ldmatrix (v1 none), and its tiles' bytes; v7's from its tile (block, warp_tile_m, warp_tile_n): v6's, v5's, 64 x
    64 in 2 warps of 64 x 32, v4's."""
    if record["tile"] is None:
        mmas, ldmatrix = LARGE_RUNGS.get(record["rung"], (16, 8))
        return mmas, ldmatrix, SHARED_BYTES[record["rung"]]
    block, warp_tile_m, warp_tile_n = record["tile"]
    mmas_m, mmas_n = warp_tile_m // 16, warp_tile_n // 8
    return 2 * mmas_m * mmas_n, 2 * (mmas_m + mmas_n // 2), tg.STAGES * 2 * block * tg.K_WORDS * 4


def test_ptx_has_the_tensor_core_instructions_and_no_local_memory(compiled):
    """Every accumulator and fragment in registers (no ``.local``), no float64, no calls; 8 mmas per 16-wide step
    (2 steps of a 32-wide tile: 16) of the format's instruction, v5 16 (32); v2-v4 load their fragments with 4
    ldmatrix per step and no other shared load, v5 with 6, v1 with 32-bit shared loads and no ldmatrix; v3-v5 copy
    with cp.async (commits, wait for all but 1 group in their loop and for all at their end) and meet at one
    barrier a step, where v1 and v2 meet at two; static shared memory as SHARED_BYTES says, none past 48 KB."""
    for r in records_of(compiled):
        where = f"{r['rung']} {r['fmt']} {r['tile'] or ''} {r['cc']}"
        assert not r["local"] and not r["f64"] and r["calls"] == 0, where
        fp16 = r["fmt"] == "float16"
        mmas, ldmatrix, shared_bytes = expected_instructions(r)
        assert (r["mma_f16"], r["mma_bf16"]) == ((mmas, 0) if fp16 else (0, mmas)), where
        if r["rung"] == "tc_gemm_v1_mma_shared":
            assert r["ldmatrix"] == 0 and r["shared_loads"] == 32, where
        else:
            assert (r["ldmatrix"], r["shared_loads"]) == (ldmatrix, 0), where
        if r["rung"] in RING_RUNGS:
            assert r["cp_async"] > 0 and r["commits"] > 0 and r["waits"] == ["0", "1"], where
            assert r["barriers"] == 1, where
        else:
            assert (r["cp_async"], r["commits"], r["waits"], r["barriers"]) == (0, 0, [], 2), where
        assert r["shared_bytes"] == shared_bytes <= 48 * 1024, where
        # v9 stores each lane's pairs of C 8 bytes at a time (a float at a time where N is odd, or at C's last
        # column); every other rung a float at a time.
        if r["rung"] == "tc_gemm_v9_paired_stores":
            assert r["paired_stores"] > 0 and r["float_stores"] > 0, where
        else:
            assert r["paired_stores"] == 0 and r["float_stores"] > 0, where


def assemble(ptx: str, cc: str, folder) -> str:
    """``ptxas -v`` of the PTX for ``cc``, its report. NVVM may write a newer PTX version than this ptxas reads:
    then the version line is set to the newest ptxas names (every instruction here is older)."""
    source = folder / f"kernel_{cc}.ptx"
    source.write_text(ptx)
    command = ["ptxas", f"-arch={cc}", "-v", str(source), "-o", str(folder / f"kernel_{cc}.cubin")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    newest = re.search(r"Unsupported \.version \S+; current version is '([\d.]+)'", done.stderr)
    if done.returncode and newest:
        source.write_text(re.sub(r"^\.version \S+", f".version {newest.group(1)}", ptx, count=1, flags=re.MULTILINE))
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr + done.stdout


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA's PTX assembler) is not installed")
def test_ptx_assembles_without_stack_or_spills(compiled, tmp_path):
    """ptxas accepts the inline PTX for sm_80 and sm_90 and keeps everything in registers: no stack frame, no
    spill stores or loads, at most 255 registers a thread."""
    for r in records_of(compiled):
        report = assemble(r["ptx"], r["cc"], tmp_path)
        where = f"{r['rung']} {r['fmt']} {r['tile'] or ''} {r['cc']}"
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, f"{where}\n{report}"
        registers = int(re.search(r"Used (\d+) registers", report).group(1))
        assert registers <= 255, where


# ------------------------------------------------------------------------------------------------
# On a GPU (make test-gpu): full size, the same bits for every rung, the hardware's ldmatrix layout
# ------------------------------------------------------------------------------------------------

# A square size a GPU's cuBLAS is timed at, and one that no tile divides (K a multiple of 8, for v3-v5; N odd, so
# v9 stores its last column a float at a time and no row of C starts on an 8-byte boundary but every other one).
GPU_SHAPES = [(4096, 4096, 4096), (1000, 1031, 1000)]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", tg.FORMATS)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_rungs_match_the_reference_at_full_size_and_agree_bit_for_bit(shape, fmt, rng_seed):
    rng, seed = rng_seed
    m, n, k = shape
    a, w = numbers(rng, DTYPES[fmt], m, k), numbers(rng, DTYPES[fmt], n, k)
    v1, *others = (run(rung, a, w) for rung in RUNGS)
    check_gemm(v1, a, w, f"tc_gemm_v1_mma_shared {fmt} {m}x{n}x{k}", seed)
    for rung, out in zip(RUNGS[1:], others):
        np.testing.assert_array_equal(out.view(np.uint32), v1.view(np.uint32), err_msg=f"{rung}, seed {seed}")


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", tg.FORMATS)
def test_gpu_v7_tunes_on_device_arrays_and_keeps_v1s_bits(fmt, rng_seed):
    """On device arrays v7's first launch times every tile and keeps the fastest for this GPU and problem; the
    second launches it without timing again; both give v1's bits. On NumPy arrays it takes the untuned tile."""
    rng, seed = rng_seed
    m, n, k = 1000, 1030, 1000
    a, w = numbers(rng, DTYPES[fmt], m, k), numbers(rng, DTYPES[fmt], n, k)
    # NumPy's bf16 cannot cross the buffer protocol: its bits travel as uint16 and are viewed as bf16 there.
    da, dw = (cuda.to_device(x.view(np.uint16)).view(DTYPES[fmt]) for x in (a, w))
    before = len(tg.tuned())
    first = tg.tc_gemm_v7_tuned(da, dw).copy_to_host()
    found = [t for t in tg.tuned() if (t["fmt"], t["M"], t["N"], t["K"]) == (fmt, m, n, k)]
    assert len(found) == 1 and len(tg.tuned()) == before + 1
    assert set(found[0]["ms"]) == set(tg.TILES) and found[0]["choice"] == min(found[0]["ms"], key=found[0]["ms"].get)
    assert all(ms > 0 for ms in found[0]["ms"].values()), found[0]
    assert tg.tile_for(fmt, m, n, k) == found[0]["choice"]
    second = tg.tc_gemm_v7_tuned(da, dw).copy_to_host()
    assert len(tg.tuned()) == before + 1
    v1 = run("tc_gemm_v1_mma_shared", a, w)
    for out in (first, second):
        np.testing.assert_array_equal(out.view(np.uint32), v1.view(np.uint32), err_msg=f"v7 {fmt}, seed {seed}")


@pytest.mark.gpu
def test_gpu_ldmatrix_layout_is_the_isas(rng_seed):
    rng, seed = rng_seed
    for _ in range(3):
        words, rows, cols, want = ldmatrix_case(rng)
        np.testing.assert_array_equal(run_ldmatrix(words, rows, cols), want, err_msg=f"seed {seed}")
