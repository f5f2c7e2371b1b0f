"""Day 9's bounds: the Q8_0 quantizer (the warps past the last block, the blocks whose 1 / d overflows, the ties of
its rounding), the Q4_1 GEMV (the warps past the last row, lanes with two blocks, fp16's subnormals and sign) and
the W8A8 GEMM (the last step of K, the rows and columns of a tile past M and N, in its loads, its scales and its
store). No answer cell has a ``min(...)``: every row is written by hand."""

from . import Term

ASSIGNMENT = "day09_quantized_gemv"

_QUANTIZE = (
    Term("quantize_kernel", "the guard of the last, partial thread block of warps", "warp < rows * blocks",
         edits=(("if warp < scales.shape[0] * blocks:", "if True:"),),
         hidden="quantize_rounds_like_the_reference", visible="quantize_rounds_like_the_reference",
         why="a number of blocks that is not a multiple of GEMV_WARPS: 5 rows of one block and 2 rows of 5 (hidden), "
             "2 rows of 3 (visible): the last thread block's last warps have no block"),
    Term("quantize_kernel", "the blocks without an inverse", "d > NO_INVERSE (not d > 0)",
         edits=(("if d > float32(NO_INVERSE) else", "if d > float32(0.0) else"),),
         hidden="quantize_edge_blocks", visible="quantize_edge_blocks",
         why="a block of values near 1e-38: d is about 2e-40, above 0, and 1 / d overflows to inf"),
    Term("quantize_kernel", "halfway between two codes", "halves away from zero (|v - t| >= 0.5)",
         edits=(("if abs(v - float32(t)) >= float32(0.5):", "if abs(v - float32(t)) > float32(0.5):"),),
         hidden="quantize_rounds_like_the_reference", visible="quantize_rounds_like_the_reference",
         why="the ties (k + 0.5) d of a block whose d is 1 (amax 127): x * (1 / d) is exactly k + 0.5"),
)

_GEMV = (
    Term("gemv_kernel", "the guard of the last, partial thread block of rows", "row < w.shape[0]",
         edits=(("if row < w.shape[0]:", "if True:"),),
         hidden="gemv_matches_reference", visible="gemv_matches_reference",
         why="N not a multiple of GEMV_WARPS: 5 and 9 rows (hidden), 5 (visible)"),
    Term("gemv_kernel", "lanes with more than one block", "blocks l, l + 32, ... (a row of more than 32 blocks)",
         edits=(("for b in range(lane, w.shape[1], WARP):", "for b in range(lane, min(w.shape[1], WARP), WARP):"),),
         hidden="gemv_matches_reference", visible="gemv_matches_reference",
         why="K = 1056, 33 blocks a row: lane 0 takes blocks 0 and 32"),
    Term("gemv_kernel", "fp16's subnormal scales", "exponent field 0: no leading 1",
         edits=(("    if exponent > 0:\n        significand += 0x400", "    if True:\n        significand += 0x400"),),
         hidden="gemv_matches_reference", visible="gemv_matches_reference",
         why="weights below 5e-5: every d and m below 2**-14, an fp16 subnormal (6 rows of 3 blocks hidden, 3 rows "
             "of 2 visible)"),
    Term("gemv_kernel", "fp16's sign bit", "bit 15 of d and m",
         edits=(("return -value if bits & 0x8000 else value", "return value"),),
         hidden="gemv_matches_reference", visible="gemv_matches_reference",
         why="a block of negative values (m < 0) and a row of raw bytes under random signs"),
)

_GEMM = (
    Term("gemm_kernel", "the steps of K", "the last step (k0 up to a_q.shape[1], in words)",
         edits=(("for k0 in range(0, a_q.shape[1], K_WORDS):", "for k0 in range(0, a_q.shape[1] - K_WORDS, K_WORDS):"),),
         hidden="w8a8_exact_sums", visible="w8a8_exact_sums",
         why="K of 32 (one step: nothing summed), 160 and 256 (hidden), 96 (visible)"),
    Term("gemm_kernel", "the guard of a tile's store", "col < N",
         edits=(("if row < m and col < n:", "if row < m:"),),
         hidden="w8a8_edges", visible="w8a8_edges",
         why="N not a multiple of 64: 5, 1 and 66 channels (hidden), 3 and 70 (visible)"),
    Term("gemm_kernel", "the guard of a tile's store", "row < M",
         edits=(("if row < m and col < n:", "if col < n:"),),
         hidden="w8a8_edges", visible="w8a8_edges",
         why="M not a multiple of 64: 70, 1 and 17 tokens (hidden), 20 and 2 (visible)"),
    Term("gemm_kernel", "the load of a step's rows of A", "row0 + r < M (zeros past it)",
         edits=(("if row0 + r < m:", "if True:"),),
         hidden="w8a8_edges", visible="w8a8_edges",
         why="fewer than 64 tokens in a tile: every case; 70 tokens give a second, partial row of tiles"),
    Term("gemm_kernel", "the load of a step's rows of W", "col0 + r < N (zeros past it)",
         edits=(("if col0 + r < n:", "if True:"),),
         hidden="w8a8_edges", visible="w8a8_edges",
         why="fewer than 64 channels in a tile: every case; 66 and 70 channels give a second, partial column"),
    Term("gemm_kernel", "the token scales a thread loads", "row < M",
         edits=(("if row0 + ty + i * THREADS_Y < m:", "if True:"),),
         hidden="w8a8_edges", visible="w8a8_edges",
         why="a thread's rows ty + 16 i past M: M of 70, 1, 17 (hidden), 20 and 2 (visible)"),
    Term("gemm_kernel", "the channel scales a thread loads", "col < N",
         edits=(("if col0 + tx + j * THREADS_X < n:", "if True:"),),
         hidden="w8a8_edges", visible="w8a8_edges",
         why="a thread's columns tx + 16 j past N: N of 5, 1, 66 (hidden), 3 and 70 (visible)"),
)

TABLE = _QUANTIZE + _GEMV + _GEMM
