"""Tensor-core GEMM ``C = A B`` on fp16 or bf16 numbers with float32 sums: the ladder after day 4's, from numba.

Shapes: a (M, K) and w (N, K), both fp16 (``np.float16``) or both bf16 (``ml_dtypes.bfloat16``), C-contiguous;
c (M, N) float32 with c[m, n] = sum_k a[m, k] w[n, k], that is C = A B with B = w^T. w holds B column by column,
one row of w per column of C: the ``.col`` operand of ``mma.sync ... .row.col`` takes B in exactly that order (a
lane's B fragment is two numbers neighbouring along K), and it is the layout in which torch stores the weight
of a linear layer (out_features, in_features), so ``y = x W^T`` is ``rung(x, W)``. Any M, N and K: rows and
columns outside C and numbers past K enter the tiles as zeros and are stored nowhere (v3 to v6 copy 16
bytes at a time and need K to be a multiple of 8); M = 0 or N = 0 launches nothing, K = 0 gives zeros. The float64
reference is ``kernels.reference.gemm(a, w.T)``; the byte and FLOP models of each rung are in
``course.models.tensor_core_gemm``. fp16 and bf16 are one format argument of the same rungs: the kernels read
the numbers as their 16 bits (a uint16 view, no copy) and only the mma instruction differs
(``kernels.intrinsics.mma_m16n8k16`` or ``mma_m16n8k16_bf16``); both need compute capability 8.0.

The rungs, in ladder order, one line each (how each works follows):

- ``tc_gemm_v1_mma_shared``: 64 x 64 tiles of C, a warp's 32 x 32 as 8 mma.sync m16n8k16 on fragments from shared words.
- ``tc_gemm_v2_ldmatrix``: the same tiles, each warp loading its fragments with ldmatrix.x4, not 32-bit loads.
- ``tc_gemm_v3_cp_async``: v2's fragments, the tiles filled by 16-byte cp.async copies into a ring of 3 steps.
- ``tc_gemm_v4_swizzled``: v3 with the 16-byte chunks of each shared row XOR-swizzled: ldmatrix without bank conflicts.
- ``tc_gemm_v5_large_tiles``: 128 x 128 tiles of C, 8 warps of 64 x 32 (16 mmas per 16 of K), v4's swizzled ring.
- ``tc_gemm_v6_wide_warps``: v5's tiles and ring, 4 warps of 64 x 64 (32 mmas per 8 ldmatrix, v5: 16 per 6).
- ``tc_gemm_v7_tuned``: v4's loop at the tile and warp shape (``TILES``) that its first launch timed fastest.
- ``tc_gemm_v8_deep_steps``: v6's tiles and warps on steps of 64 of K in 96 KB of dynamic shared memory.
- ``tc_gemm_v9_paired_stores``: v8, each lane's two neighbouring sums of C written by one 8-byte store, not two.

v1 and v2 stage the same bytes: a block of 4 warps takes a 64 x 64 tile of C and steps through K 32 numbers at a
time; its threads copy the step's 64 rows of A and 64 rows of w into shared memory (``a_tile``, ``w_tile``: 64
rows of 16 uint32 words, two numbers a word, the lower column in the low half, as the fragments want them) with
plain 2-byte loads, a barrier, the mmas, a barrier. Each number of A is read from global memory once per block
column of C, each of w once per block row. Warp (wm, wn) = divmod(warp, 2) owns rows 32 wm ... + 31 and columns
32 wn ... + 31 of the tile, as 2 x 4 mma tiles of 16 x 8 whose float32 accumulators (32 per lane) stay in
registers from the first step to the last; lane 4 g + t stores rows g, g + 8 and columns 2t, 2t + 1 of each.

- v1: each fragment word is one 32-bit shared load at the place ``mma_m16n8k16``'s layout gives it: per 16 of K
  a lane loads a = rows g, g + 8 of each of its 2 mma rows, words t and t + 4, and b = row g of w of each of its 4
  mma columns, words t and t + 4: 16 loads for 8 mmas.
- v2: ``kernels.intrinsics.ldmatrix_x4`` (PTX's ``ldmatrix.sync.aligned.m8n8.x4.shared.b16``) loads four 8 x 8
  matrices of 16-bit numbers at once, each lane naming one 16-byte row: lane l names row l % 16 and words 4 (l //
  16) ... of an mma row's 16 x 16 A (its a0 ... a3), and row (l % 8) + 8 (l // 16), words 4 ((l // 8) % 2) ... of
  the w rows of two mma columns (b0, b1 of each). The words each lane gets are those v1 loads, so the two rungs
  compute the same bits: 4 load instructions for 8 mmas instead of 16.
- v3: the shared tiles form a ring of ``STAGES`` = 3 steps, filled by ``kernels.intrinsics.cp_async_16`` (PTX's
  ``cp.async.cg.shared.global``): 16 bytes of a row of a or w go straight from global to shared memory, without
  a register or a packing instruction, 2 copies a thread per operand and step instead of 16 2-byte loads, 8
  shifts, 8 ors and 8 stores. Copies past K or past a matrix's rows write zeros and read nothing. Each thread
  commits its copies of a step as one group; before computing step s it waits until at most ``IN_FLIGHT`` = 1
  of its groups is in flight (``cp.async.wait_group 1``: step s has landed, step s + 1 may still travel), then
  one barrier (every thread's copies of step s landed, and every warp is done with step s - 1), then it starts
  the copies of step s + 2 into the slot step s - 1 held and computes step s while they travel: one barrier a
  step instead of two. Fragments and mmas are v2's, in the same order, so v3 computes v1's bits too. Rows of a
  and w must start on 16-byte boundaries: K a multiple of 8 (device arrays start on 256-byte boundaries).
- v4: v3's ring, copies, fragments and mmas, with each row's four 16-byte chunks stored in another order. Shared
  memory has 32 banks of 4 bytes, byte b in bank (b / 4) mod 32, so a 16-byte chunk covers 4 banks and the banks
  form 8 groups of 4: byte b lies in group (b / 16) mod 8. ldmatrix serves each of its 4 matrices, 8 rows of 16
  bytes named by 8 lanes, in one pass (wavefront) when the 8 rows lie in 8 different groups. Chunk q (numbers 8 q
  ... 8 q + 7 of the step) of tile row r starts at byte 64 r + 16 q, in group (4 r + q) mod 8 = 4 (r mod 2) + q; a
  matrix is 8 rows r0 ... r0 + 7 (r0 a multiple of 8) at one chunk q, so v3's rows fall in 2 groups, 4 rows each:
  4 passes a matrix, 16 an ldmatrix.x4. v4 stores chunk q of row r at chunk position q ^ s(r), s(r) = (r >> 1) & 3
  (``_swizzled(row, chunk)``, the word where the chunk starts), so it lies in group 4 (r mod 2) + (q ^ s(r)). Over
  the 8 rows r = r0 + 2 j + p (j < 4, p < 2) of a matrix, p = r mod 2 and s(r) = j take each of the 8 pairs once
  and, q fixed, q ^ j takes each of 0 ... 3 once as j does: 8 different groups, 1 pass a matrix, 4 an ldmatrix.x4
  (A's and w's matrices alike: every one starts on a row that is a multiple of 8). The copies keep v3's order,
  the 8 copies of a quarter warp covering rows 2 j, 2 j + 1 whole: they land in groups 4 p + (q ^ j) for p < 2 and
  q < 4, 8 different groups too, as v3's did. The XOR permutes a row's own 4 chunks, so the tile keeps its size
  and every chunk its 16-byte alignment; the copy of chunk q of row r writes words ``_swizzled(r, q)`` ... + 3 and
  the lane of ldmatrix that wants chunk q of row r names the same word, so each lane gets v3's words into v3's
  mmas in v3's order: v1's bits. (A K step of 64 numbers, 8 chunks a row and q ^ (r mod 8), would do the same
  with 128-byte rows; v4 keeps v3's step and ring so the swizzle is its only change of layout.) Each thread makes
  v3's copies in v3's order, written as a loop of a constant 2 copies (chunks thread and thread + 128) where
  v3's ``range(thread, 256, THREADS)`` leaves the count to the compiler, which then keeps a general loop and its
  addresses: ptxas gives v4 fewer registers than v3 for that reason, not for the swizzle.
- v5: a block of 8 warps (256 threads) takes a 128 x 128 tile of C; warp (wm, wn) = divmod(warp, 4) owns rows 64
  wm ... + 63 and columns 32 wn ... + 31 as 4 x 4 mma tiles of 16 x 8, 64 float32 accumulators a lane. Per 16 of K
  a warp issues 2 ldmatrix.x4 for w (4 mma columns) and 4 for A (one per mma row) for 16 mmas: 3 KB of shared
  loads for 16 mmas where v4 loads 2 KB for 8 (21 FLOPs a byte loaded, not 16). Per step of 32 along K the block
  stages 16 KB (128 rows of A and of w, 64 bytes each) for 128 x 128 x 32 products, twice v4's FLOPs per staged
  byte, and each number of A is read from global memory once per 128-wide block column, each of w once per block
  row: half v1-v4's global (L2) traffic. The ring is v4's, 3 steps of 16 KB: 48 KB, exactly the most a block may
  declare statically (more needs dynamic shared memory and an opt-in attribute numba does not set), with v4's
  swizzle (the rows are v4's 64 bytes, the matrices start on multiples of 8 rows), v4's wait, one barrier a step
  and 2 copies per thread, operand and step. Each element of C still gets one mma per 16 of K, k ascending, on the
  same fragment words: v1's bits.
- v6: v5's 128 x 128 tiles, ring, copies and swizzle for a block of 4 warps (128 threads), warp (wm, wn) =
  divmod(warp, 2) owning rows 64 wm ... + 63 and columns 64 wn ... + 63 as 4 x 8 mma tiles, 128 float32 accumulators
  a lane. Per 16 of K a warp issues 4 ldmatrix.x4 for w (8 mma columns) and 4 for A for 32 mmas: 4 KB of shared
  loads for 32 mmas, 32 FLOPs a byte loaded where v5 has 21, a third fewer fragment loads per mma (the tile of a
  warp is CUTLASS's classic Ampere choice). Each thread makes 4 copies per operand and step, the block's copies
  being v5's. ptxas of CUDA 13.0 gives it 225 registers a thread for sm_90 and no spills: two blocks an SM (8 warps,
  58 K of the 64 K registers once each warp's are rounded up to a multiple of 256, 96 KB of shared memory), where v5
  runs 16 warps. Predicted before it ran on a GPU: if fragment loads and their wavefronts are what v5's warps wait
  on, v6 is faster on large matrices (by up to the third its fewer loads save); if v5 needs its 16 warps an SM to
  keep the tensor cores fed across each step's barrier, v6's 8 lose, and v6 is slower. Its bits are v1's.
  Measured since on an H100 (day 8's recording as made with v6 and v7): 1.06 and 1.08 times v5's rate at N = 4,096
  and 8,192 (265 and 255 TFLOP/s, 0.36 and 0.35 of cuBLAS's; 1.09 and 1.14 in the recording remade with v8), so the
  fragment loads were holding v5 back. Nsight Compute on that GPU
  (one launch at 4,096^3 after a warm-up) counted 33.6 M shared-load wavefronts for v6 and 50.4 M for v5, the
  model's two thirds (``course.models.tensor_core_gemm.shared_words``), and the tensor pipe busy 43.5% of v6's
  active cycles against 40.5% of v5's; v6's warps issue on 44% of cycles, and the reason they most often wait is a
  fixed-latency dependency (Nsight's "wait": an mma's or an ldmatrix's result), not memory, bank conflicts or the
  barrier. Eight warps an SM leave too few independent mmas in flight to cover that latency: the next step is more
  work between waits (a longer K step per barrier, fragments of step k + 1 loaded while step k's mmas run), not
  fewer loads.
- v7: ``swizzled_mainloop`` at each of ``TILES`` (block, warp_tile_m, warp_tile_n): v6's (128, 64, 64), v5's (128,
  64, 32), a 64 x 64 tile in 2 warps of v5's 64 x 32 (64, 64, 32: 64 threads, 24 KB, 153 registers for sm_90 with
  CUDA 13.0's ptxas) and v4's (64, 32, 32). No tile wins everywhere: 128 x 128 tiles halve the global traffic but
  make ceil(N / 128)^2 blocks, 64 at N = 1,024, fewer than an H100's 132 SMs, and the warp shapes trade fragment
  loads against warps an SM. So the launcher, on its first launch on device arrays of a new (fmt, M, N, K), times
  every tile on this GPU (``kernels.tuning``: one warm-up, then 5 launches between CUDA events), keeps the fastest
  for the process and launches it from then on (``tile_for``, ``tuned``), as day 4's ``gemm_v8_autotuned`` does
  for its tiles; NumPy arrays and the simulator take ``untuned_tile``, the first tile whose grid has
  ``BLOCKS_TO_FILL`` = 128 blocks; ``tile=`` forces one. Predicted before it ran on a GPU: about as fast as the
  fastest of v4 to v6 at every size (its tiles run their loops), faster than all three only where the 2-warp
  tile wins, around N = 1,024 to 2,048. Its bits are v1's at every tile. Measured since on an H100: it chose
  v6's tile at 4,096 and 8,192 (the fastest there), v5's at 2,048, and below that v4's or the 2-warp tile, where
  each tile's time is mostly the launch's (0.03 to 0.05 ms a launch back to back from Python, the kernels 0.01 to
  0.03 ms), so the choice there is noise. The 2-warp tile won nowhere it mattered: at 4,096 it ran 0.68 ms to v6's
  tile's 0.51 (Nsight: 12 warps an SM, tensor pipe busy 33% of cycles). The first half of the prediction held,
  the second did not.
- v8: v6's 128 x 128 tiles and 4 warps of 64 x 64, stepping through K 64 numbers at a time instead of 32: each
  barrier and wait is followed by 128 mmas a warp (4 slices of 16 of K) instead of 64, and half as many meet the
  block along K. A step's tiles are rows of 128 bytes (8 chunks of 16), swizzled as chunk q ^ (row & 7)
  (``ring_swizzle(8)``: a 128-byte row spans all 32 banks, so the 8 rows of an ldmatrix phase at one chunk fall in
  8 different groups of 4 banks). Three such steps are 3 x (128 + 128) x 128 bytes = 96 KB, twice what a block may
  declare statically: the ring lives in dynamic shared memory (``cuda.shared.array(0, uint32)`` seen as A's and
  w's tiles through ``kernels.intrinsics.shared_view``), and the launcher asks the driver once per compiled kernel
  to allow that much (``kernels.launching.launch_with_shared``). Two blocks still fit an SM (192 KB of the H100's
  228 KB; 240 registers a thread for sm_90 with CUDA 13.0's ptxas, no spills), 8 warps as v6. Its loop is
  ``ring_mainloop``, v4-v6's ring written for any tile and step; it runs every mma of a step, past K too (zeros,
  which add nothing), where v3-v7 skip the slices of 16 past K, so v8 computes v1's bits. Before it became a rung,
  a probe on an H100 (each kernel alone between CUDA events, the median of 20 launches, v6 and torch in the same
  run) measured it at 1.08 and 1.05 times v6's rate at N = 4,096 and 8,192; variants in the same probe that also
  loaded the next slice's fragments while the current slice's mmas ran were slower (ptxas then needs more than
  255 registers and spills), and a ring of 4 steps (128 KB, one block an SM) was the slowest. Predicted for the
  recording: about 1.05 times v6, short of 0.4 of cuBLAS. The recording (H100) measured 1.08 and 1.11 times v6
  (calls' medians): 0.39 of cuBLAS at N = 4,096 by either witness, and at 8,192 0.42 by the GPU's time alone
  (0.50 by the calls' medians, where cuBLAS's calls ran slower than its kernel alone). The first half held; the
  goal is met at 8,192 and missed at 4,096 (in that recording, of 2026-12-06; in the one remade with v9, v8 ran at
  0.41 at 4,096). Nsight Compute (``day08_shared_memory``, 4,096^3): its tensor pipes
  busy in 47% of cycles (v6's 43%), its warps, 2 a scheduler, waiting most on fixed latencies (``wait``: an mma
  on the fragments an ldmatrix just loaded, or on the mma before it), as v6's.
- v9: v8's kernel with another epilogue. Lane 4 g + t holds, for each of its mma tiles, columns 2t and 2t + 1 of rows
  g and g + 8; v1 to v8 write them one float32 a store (numba's stores of a float32 are 4 bytes), so each store
  instruction of a warp writes 8 rows x 16 bytes, half of each row's 32-byte sector, and the next one the other half.
  v9 writes each pair with one 8-byte store (``kernels.intrinsics.store_f32x2``, PTX's ``st.global.v2.f32``,
  ``_accumulators(paired=True)``): whole sectors, 64 store instructions a lane instead of 128, the same sums, so v1's
  bits. C is not small: at 4,096^3 its 64 MB are as many bytes as A and w together, all written in each block's last
  moments, when its warps have no mma left to issue. Found by a probe on an H100 (2026-12-07, each kernel alone, 8
  launches between CUDA events, the median of 7, the two kernels alternated three times): v8 with paired stores ran at
  296, 310 and 312 TFLOP/s at N = 4,096 where v8 ran at 280, 287 and 284 (1.06 to 1.09 times), and 1.01 to 1.03 times
  v8's rate at 8,192, where each tile takes twice the steps along K for the same stores. The same probe found nothing
  else worth a rung: blocks ordered in groups of 8 or 16 rows of tiles (for L2), the next A fragment loaded before the
  current mmas, and steps of 32 in a ring of 4 all within 1% of v8 at 4,096; tiles of 256 x 128 and 128 x 256 (8
  warps, one block an SM) 0.96 and 0.94 times v8 there; a persistent grid of 2 blocks an SM starting the next tile's
  copies before its stores 0.97 times v8 at 8,192. Predicted for the recording: about 1.06 times v8 at 4,096, at or
  just above 0.4 of cuBLAS, and about 1.02 times at 8,192. The recording remade with v9 (``day08_tc_gemm_timing``,
  H100, 2026-12-07) measured v9 at 319 TFLOP/s at 4,096, 0.435 of cuBLAS's by the calls' medians and 0.424 by the
  GPU's time alone, 1.07 times v8 in the same run, and 1.01 times v8 at 8,192 (0.44 of cuBLAS by the GPU's time).
  Nsight Compute (``day08_shared_memory``, 4,096^3): v9's kernel 443 us to v8's 468, the tensor pipes busy in 50% of
  cycles (v8's 48%), the same shared-load wavefronts, its warps still waiting most on ``wait``. On that GPU at full
  size (4,096^3 and 1,000 x 1,031 x 1,000, fp16 and bf16) it gave v1's bits, and compute-sanitizer's memcheck and
  racecheck found no error. The prediction held, and with it the goal of 0.4 of cuBLAS at 4,096, by both witnesses, on
  the H100. On an H200 (``day08_tc_gemm_timing_other_gpu``, 2026-12-07, after v9's full-size check passed there): 320
  TFLOP/s at 4,096 (0.424 of cuBLAS by the calls' medians, 0.420 by the GPU's time) and 292 at 8,192 (0.459 and
  0.435): the same rates as the H100's, as a compute-bound kernel on the same chip should, and the goal met there too.

Predictions made before the first GPU run (the recording ``course/data/day08_tc_gemm_timing.json`` measured
v1 to v5 on an H100 since; day 8's lesson shows it): v1 and v2 spend more
instructions staging (two 2-byte global loads, a shift and an or per shared word, 32 loads a thread per step) than
the tensor cores spend computing (8 mmas a warp per 16 of K), and the warps wait at both barriers of every step
with nothing to overlap, so v1 should run far below the tensor cores' peak; v2 cuts the shared load instructions
of the mmas 4-fold but not the staging, so it should be faster than v1 by a modest factor at most; v3 removes most
of the staging's instructions and hides the global loads behind two steps of mmas, so it should be the largest
step of the three. The rows of the shared tiles are 64 bytes long, so the 8 rows a fragment load reads fall in 2
groups of banks: 4-way bank conflicts in v1, v2 and v3 (the same number of shared wavefronts for v1's 16 loads and
v2's and v3's 4), which Nsight Compute should show; with v3's loads off the critical path they may become what
limits it. v4 should show a quarter of v3's shared wavefronts for the fragments (16 a warp per 16 of K, not 64)
and no bank conflicts of ldmatrix; it is faster than v3 only as far as those loads limited v3. v5 should be the
next large step on large matrices: half the global (L2) traffic per FLOP, fewer fragment loads per mma, and 64
independent accumulators a lane to keep the tensor cores busy, at the cost of 256-thread blocks with 48 KB of
shared memory and more registers each (fewer blocks an SM: ptxas of CUDA 13.0 gives v5 124 registers a thread for
sm_90, so two of its blocks, 16 warps, fit an SM's 64 K registers, where v4's 88 let five of its blocks in, 20
warps); with 128 x 128 tiles a matrix of about 1000 x 1000 makes 64 blocks, fewer than an H100 has SMs, so there
v5 may lose to v4. On that H100 (fp16, M = N = K, the recording as remade with v6 and v7): v1 17 TFLOP/s, v2 18 to
21, v3 94 to 98, v4 199 and 135, v5 249 and 237 at N = 4,096 and 8,192, 0.34 and 0.32 of cuBLAS's 744 and 737: v3's
copies the largest step, as predicted, and v5 the fastest of v1-v5 on large matrices. Nsight Compute on that GPU
(one launch at 4,096^3 after a warm-up) counted 268.5 M shared-load wavefronts for v3 (201.4 M of them bank
conflicts) and 67.2 M for v4 (0.08 M), a quarter, as predicted; the model's ``shared_words`` and
``shared_passes_per_mma_step`` give 268.4 M, 67.1 M, 50.3 M (v5) and 33.6 M (v6) for those launches.

v4's and v5's loop over K (the ring, its copies and waits, the fragments and the mmas) is one device function,
``swizzled_mainloop(mma, block_m, warps_n, mmas_m, mmas_n)``, into a warp's accumulators; day 9's
``w8a8_gemm_v3_large_tiles`` (``kernels.quantized_gemm``) runs v5's on int8 codes with the int8 mma, whose
fragments hold the same bytes of the same rows.

Each rung is a kernel built per format, ``<rung>_kernel(fmt)`` (``fmt`` "float16" or "bfloat16", compiled on
first use and kept), plus the launcher ``<rung>(a, w, *, out=None, kernel=<rung>_kernel)``, which validates the
arguments, launches a grid of ceil(N / 64) x ceil(M / 64) blocks of 128 threads (v5: ceil(N / 128) x ceil(M /
128) blocks of 256, v6 and v8 of 128; v7 its tile's grid and warps) and returns c (v3's and v4's shared rings are
24 KB a block, v5's and v6's 48 KB, v8's 96 KB, v1's and v2's tiles 8 KB). Launchers accept NumPy arrays or numba
device arrays (``kernels.launching``).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32

from kernels.intrinsics import (cp_async_16, cp_async_commit_group, cp_async_wait_group, ldmatrix_x4, mma_m16n8k16,
                                mma_m16n8k16_bf16, shared_view, store_f32x2)
from kernels.launching import (WARP, cdiv, largest_filling, launch_with_shared, output_array, require_array,
                               require_dtype, require_float32, require_same_kind)
from kernels.registry import Rung, ladder
from kernels.tuning import Tuner

__all__ = ["FORMATS", "BLOCK_M", "BLOCK_N", "BLOCK_K", "K_WORDS", "WARPS_M", "WARPS_N", "WARP_TILE_M",
           "WARP_TILE_N", "MMA_M", "MMA_N", "MMA_K", "THREADS", "MAX_M", "RUNGS", "gemm_shape",
           "STAGES", "CHUNK", "IN_FLIGHT", "LARGE_BLOCK_M", "LARGE_BLOCK_N", "LARGE_WARPS_M", "LARGE_WARPS_N",
           "LARGE_WARP_TILE_M", "LARGE_WARP_TILE_N", "LARGE_THREADS", "LARGE_MAX_M", "tc_gemm_v1_mma_shared_kernel",
           "tc_gemm_v1_mma_shared", "tc_gemm_v2_ldmatrix_kernel", "tc_gemm_v2_ldmatrix", "tc_gemm_v3_cp_async_kernel",
           "tc_gemm_v3_cp_async", "tc_gemm_v4_swizzled_kernel", "tc_gemm_v4_swizzled", "tc_gemm_v5_large_tiles_kernel",
           "tc_gemm_v5_large_tiles", "WIDE_WARPS_M", "WIDE_WARPS_N", "WIDE_WARP_TILE_M", "WIDE_WARP_TILE_N",
           "WIDE_THREADS", "tc_gemm_v6_wide_warps_kernel", "tc_gemm_v6_wide_warps", "TILES", "BLOCKS_TO_FILL",
           "tile_threads", "tc_gemm_v7_tuned_kernel", "untuned_tile", "tile_for", "tuned", "tc_gemm_v7_tuned",
           "swizzled_mainloop", "DEEP_K", "DEEP_STAGES", "ring_swizzle", "ring_mainloop", "ring_bytes",
           "tc_gemm_v8_deep_steps_kernel", "tc_gemm_v8_deep_steps", "tc_gemm_v9_paired_stores_kernel",
           "tc_gemm_v9_paired_stores"]

# The storage formats of a and w, by dtype name (bfloat16: ml_dtypes'), and the mma that multiplies each.
FORMATS = ("float16", "bfloat16")
_MMA = {"float16": mma_m16n8k16, "bfloat16": mma_m16n8k16_bf16}
# A 64 x 64 tile of C per block, K in steps of 32 numbers (16 uint32 words of two numbers).
BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
K_WORDS = BLOCK_K // 2
# 2 x 2 warps, each a 32 x 32 patch of 2 x 4 mma tiles of 16 x 8 (k 16).
WARPS_M = 2
WARPS_N = 2
WARP_TILE_M = BLOCK_M // WARPS_M
WARP_TILE_N = BLOCK_N // WARPS_N
MMA_M, MMA_N, MMA_K = 16, 8, 16
MMAS_M = WARP_TILE_M // MMA_M
MMAS_N = WARP_TILE_N // MMA_N
K_STEPS = BLOCK_K // MMA_K
MMA_WORDS = MMA_K // 2              # words of K an mma takes from a row
THREADS = WARPS_M * WARPS_N * WARP
# v3: a ring of STAGES steps in shared memory, filled by 16-byte copies of CHUNK numbers.
STAGES = 3
CHUNK = 8
CHUNKS = BLOCK_K // CHUNK           # copies of a row per step
MMA_CHUNKS = MMA_K // CHUNK         # chunks of a row an mma's 16 of K take (v4, v5: its ldmatrix rows)
IN_FLIGHT = STAGES - 2              # groups of copies a thread may leave in flight when it computes a step
# v5: a 128 x 128 tile of C per block of 2 x 4 warps, each a 64 x 32 patch of 4 x 4 mma tiles; v4's ring of STAGES
# steps of BLOCK_K, 16 KB a step: 48 KB of shared memory, the most a block may declare statically.
LARGE_BLOCK_M = 128
LARGE_BLOCK_N = 128
LARGE_WARPS_M = 2
LARGE_WARPS_N = 4
LARGE_WARP_TILE_M = LARGE_BLOCK_M // LARGE_WARPS_M
LARGE_WARP_TILE_N = LARGE_BLOCK_N // LARGE_WARPS_N
LARGE_MMAS_M = LARGE_WARP_TILE_M // MMA_M
LARGE_MMAS_N = LARGE_WARP_TILE_N // MMA_N
LARGE_THREADS = LARGE_WARPS_M * LARGE_WARPS_N * WARP
# v6: the same 128 x 128 tile of C and ring, 2 x 2 warps, each a 64 x 64 patch of 4 x 8 mma tiles.
WIDE_WARPS_M = 2
WIDE_WARPS_N = 2
WIDE_WARP_TILE_M = LARGE_BLOCK_M // WIDE_WARPS_M
WIDE_WARP_TILE_N = LARGE_BLOCK_N // WIDE_WARPS_N
WIDE_MMAS_M = WIDE_WARP_TILE_M // MMA_M
WIDE_MMAS_N = WIDE_WARP_TILE_N // MMA_N
WIDE_THREADS = WIDE_WARPS_M * WIDE_WARPS_N * WARP
# The grid's y dimension counts block rows, at most 65535 of them.
MAX_M = 65535 * BLOCK_M
LARGE_MAX_M = 65535 * LARGE_BLOCK_M
_KERNELS: dict = {}


def gemm_shape(a, w, out=None, *, block_m: int = BLOCK_M) -> tuple[int, int, int, str]:
    """Validate a (M, K) and w (N, K), both fp16 or both bf16 (and out (M, N) float32 if given), M at most 65535
    block rows of ``block_m`` (MAX_M for v1-v4, LARGE_MAX_M for v5); return (M, N, K, fmt), fmt the dtype's name
    ("float16" or "bfloat16")."""
    fmt = require_dtype("a", a, FORMATS).name
    m, k = require_array("a", a, (None, None), fmt, dims=("M", "K"))
    n = require_array("w", w, (None, k), fmt, dims=("N", "K"))[0]
    require_same_kind(a=a, w=w)
    if m > 65535 * block_m:
        raise ValueError(f"a must have M at most {65535 * block_m} (65535 block rows of {block_m}: the grid's y "
                         f"dimension), got M = {m}")
    if out is not None:
        require_float32("out", out, (m, n), dims=("M", "N"))
    return m, n, k, fmt


def _launch(kernel, a, w, out, *, chunked=None, block=(BLOCK_M, BLOCK_N), threads=THREADS):
    """Validate, then launch ceil(N / block[1]) x ceil(M / block[0]) blocks of ``threads``. ``chunked``: the rung's
    name, for a rung that copies 16 bytes at a time (K must be a multiple of CHUNK)."""
    block_m, block_n = block
    m, n, k, fmt = gemm_shape(a, w, out, block_m=block_m)
    if chunked:
        _require_chunked(k, chunked)
    out = output_array("out", out, (m, n), like=a)
    if m and n:
        kernel(fmt)[(cdiv(n, block_n), cdiv(m, block_m)), threads](a.view(np.uint16), w.view(np.uint16), out)
    return out


def _require_chunked(k: int, rung: str) -> None:
    if k % CHUNK:
        raise ValueError(f"a must have K a multiple of {CHUNK} for {rung} (rows of a and w are copied "
                         f"16 bytes, {CHUNK} numbers, at a time), got K = {k}: tc_gemm_v2_ldmatrix takes any K")


def _kernel_for(builder, name: str, fmt: str):
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    key = (name, fmt)
    if key not in _KERNELS:
        _KERNELS[key] = builder(fmt)
    return _KERNELS[key]


@cuda.jit(device=True, inline=True)
def _stage(tile, x, first, k0, thread):
    """The block's threads copy rows first ... first + 63 of x (the 16-bit numbers of a or w, (rows, K)), numbers k0
    ... k0 + 31, into ``tile`` (64 rows of 16 words, numbers 2j and 2j + 1 in word j, the lower in the low half):
    consecutive threads on consecutive words of a row, a warp on 2 rows of 64 bytes. Rows past x and numbers past
    K are zeros, loaded from nowhere."""
    rows = x.shape[0]
    k = x.shape[1]
    for slot in range(thread, BLOCK_M * K_WORDS, THREADS):
        r = slot // K_WORDS
        kw = slot - r * K_WORDS
        row = first + r
        col = k0 + 2 * kw
        low = uint32(0)
        high = uint32(0)
        if row < rows:
            if col < k:
                low = uint32(x[row, col])
            if col + 1 < k:
                high = uint32(x[row, col + 1])
        tile[r, kw] = low | (high << uint32(16))


def _accumulators(mmas_m: int, mmas_n: int, paired: bool = False):
    """``clear(acc)`` and ``store(c, acc, row, col, g, t)`` for a warp's mmas_m x mmas_n mma tiles (constants of
    the device functions, so their loops unroll and acc stays in registers). ``paired`` (v9): each lane's two
    neighbouring sums of a row (columns 2t and 2t + 1 of an mma tile) written by one 8-byte ``store_f32x2`` where c's
    rows hold an even number of floats (every pair then starts on an 8-byte boundary); an odd N, or C's last
    column, one float a store, as without it."""

    @cuda.jit(device=True, inline=True)
    def clear(acc):
        for mi in range(mmas_m):
            for ni in range(mmas_n):
                for e in range(4):
                    acc[mi, ni, e] = float32(0.0)

    @cuda.jit(device=True, inline=True)
    def store(c, acc, row, col, g, t):
        """Lane 4 g + t's accumulators into c: rows row + 16 mi + g (+ 8), columns col + 8 ni + 2t (+ 1), inside
        c."""
        m = c.shape[0]
        n = c.shape[1]
        for mi in range(mmas_m):
            for h in range(2):
                r = row + mi * MMA_M + g + 8 * h
                if r < m:
                    for ni in range(mmas_n):
                        if not paired:      # v1-v8, as they were frozen
                            for e in range(2):
                                cc = col + ni * MMA_N + 2 * t + e
                                if cc < n:
                                    c[r, cc] = acc[mi, ni, 2 * h + e]
                            continue
                        cc = col + ni * MMA_N + 2 * t
                        if n % 2 == 0 and cc + 1 < n:
                            store_f32x2(c, r, cc, acc[mi, ni, 2 * h], acc[mi, ni, 2 * h + 1])
                        else:               # written out, not a loop: every index of acc stays a constant
                            if cc < n:
                                c[r, cc] = acc[mi, ni, 2 * h]
                            if cc + 1 < n:
                                c[r, cc + 1] = acc[mi, ni, 2 * h + 1]

    return clear, store


_clear, _store = _accumulators(MMAS_M, MMAS_N)                          # v1-v4: 2 x 4 mma tiles a warp
_clear_large, _store_large = _accumulators(LARGE_MMAS_M, LARGE_MMAS_N)  # v5: 4 x 4
_clear_wide, _store_wide = _accumulators(WIDE_MMAS_M, WIDE_MMAS_N)      # v6: 4 x 8


# ----------------------------------------------------------------------------------------------
# v1: mma.sync m16n8k16 on fragments read from shared memory, one 32-bit load a word
# ----------------------------------------------------------------------------------------------

def _build_v1(fmt: str):
    mma = _MMA[fmt]

    @cuda.jit
    def tc_gemm_v1_mma_shared_kernel(a, w, c):
        """Block (bx, by) computes c[64 by:, 64 bx:]; warp (wm, wn) = divmod(warp, 2) its rows 32 wm + 16 mi + ...
        and columns 32 wn + 8 ni + ... (mi < 2, ni < 4). a (M, K) and w (N, K) are the numbers' 16 bits."""
        a_tile = cuda.shared.array((BLOCK_M, K_WORDS), uint32, alignment=16)
        w_tile = cuda.shared.array((BLOCK_N, K_WORDS), uint32, alignment=16)
        acc = cuda.local.array((MMAS_M, MMAS_N, 4), float32)
        b_frag = cuda.local.array((MMAS_N, 2), uint32)
        thread = cuda.threadIdx.x
        warp = thread // WARP
        lane = thread % WARP
        g = lane // 4
        t = lane % 4
        warp_row = (warp // WARPS_N) * WARP_TILE_M
        warp_col = (warp % WARPS_N) * WARP_TILE_N
        row0 = cuda.blockIdx.y * BLOCK_M
        col0 = cuda.blockIdx.x * BLOCK_N
        k = a.shape[1]
        _clear(acc)
        for k0 in range(0, k, BLOCK_K):
            _stage(a_tile, a, row0, k0, thread)
            _stage(w_tile, w, col0, k0, thread)
            cuda.syncthreads()
            for ks in range(K_STEPS):
                if k0 + ks * MMA_K < k:             # the same in the whole block: no mma on a step past K
                    kw = ks * MMA_WORDS
                    for ni in range(MMAS_N):
                        n = warp_col + ni * MMA_N + g
                        b_frag[ni, 0] = w_tile[n, kw + t]
                        b_frag[ni, 1] = w_tile[n, kw + t + 4]
                    for mi in range(MMAS_M):
                        r = warp_row + mi * MMA_M + g
                        a0 = a_tile[r, kw + t]
                        a1 = a_tile[r + 8, kw + t]
                        a2 = a_tile[r, kw + t + 4]
                        a3 = a_tile[r + 8, kw + t + 4]
                        for ni in range(MMAS_N):
                            acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3] = mma(
                                a0, a1, a2, a3, b_frag[ni, 0], b_frag[ni, 1],
                                acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3])
            cuda.syncthreads()
        _store(c, acc, row0 + warp_row, col0 + warp_col, g, t)

    return tc_gemm_v1_mma_shared_kernel


def tc_gemm_v1_mma_shared_kernel(fmt: str = "float16"):
    """v1's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v1, "v1", fmt)


def tc_gemm_v1_mma_shared(a, w, *, out=None, kernel=tc_gemm_v1_mma_shared_kernel):
    """c = a w^T (M, N) float32 on tensor cores, fragments read from shared memory with 32-bit loads; grid
    (ceil(N/64), ceil(M/64)) of 128 threads. ``kernel`` is a function of the format that returns the kernel."""
    return _launch(kernel, a, w, out)


# ----------------------------------------------------------------------------------------------
# v2: the same, fragments loaded by ldmatrix.sync.aligned.m8n8.x4.shared.b16
# ----------------------------------------------------------------------------------------------

def _build_v2(fmt: str):
    mma = _MMA[fmt]

    @cuda.jit
    def tc_gemm_v2_ldmatrix_kernel(a, w, c):
        """v1's tiles and mmas; per 16 of K a warp loads each mma row's A (16 x 16) with one ldmatrix_x4 and the w
        rows of each pair of mma columns (16 x 16) with one more. a (M, K) and w (N, K) are the numbers' 16 bits."""
        a_tile = cuda.shared.array((BLOCK_M, K_WORDS), uint32, alignment=16)
        w_tile = cuda.shared.array((BLOCK_N, K_WORDS), uint32, alignment=16)
        acc = cuda.local.array((MMAS_M, MMAS_N, 4), float32)
        b_frag = cuda.local.array((MMAS_N, 2), uint32)
        thread = cuda.threadIdx.x
        warp = thread // WARP
        lane = thread % WARP
        g = lane // 4
        t = lane % 4
        warp_row = (warp // WARPS_N) * WARP_TILE_M
        warp_col = (warp % WARPS_N) * WARP_TILE_N
        # The row this lane names for ldmatrix: A's matrices are rows 0-7 / 8-15 by words 0-3 / 4-7 of the mma's
        # 16 x 16 (a0, a1, a2, a3), w's are words 0-3 / 4-7 of mma column 0, then of mma column 1 (b0, b1 twice).
        a_row = lane % 16
        a_word = 4 * (lane // 16)
        w_row = lane % 8 + 8 * (lane // 16)
        w_word = 4 * ((lane // 8) % 2)
        row0 = cuda.blockIdx.y * BLOCK_M
        col0 = cuda.blockIdx.x * BLOCK_N
        k = a.shape[1]
        _clear(acc)
        for k0 in range(0, k, BLOCK_K):
            _stage(a_tile, a, row0, k0, thread)
            _stage(w_tile, w, col0, k0, thread)
            cuda.syncthreads()
            for ks in range(K_STEPS):
                if k0 + ks * MMA_K < k:             # the same in the whole block: no mma on a step past K
                    kw = ks * MMA_WORDS
                    for nj in range(MMAS_N // 2):
                        b_frag[2 * nj, 0], b_frag[2 * nj, 1], b_frag[2 * nj + 1, 0], b_frag[2 * nj + 1, 1] = \
                            ldmatrix_x4(w_tile, warp_col + 2 * nj * MMA_N + w_row, kw + w_word)
                    for mi in range(MMAS_M):
                        a0, a1, a2, a3 = ldmatrix_x4(a_tile, warp_row + mi * MMA_M + a_row, kw + a_word)
                        for ni in range(MMAS_N):
                            acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3] = mma(
                                a0, a1, a2, a3, b_frag[ni, 0], b_frag[ni, 1],
                                acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3])
            cuda.syncthreads()
        _store(c, acc, row0 + warp_row, col0 + warp_col, g, t)

    return tc_gemm_v2_ldmatrix_kernel


def tc_gemm_v2_ldmatrix_kernel(fmt: str = "float16"):
    """v2's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v2, "v2", fmt)


def tc_gemm_v2_ldmatrix(a, w, *, out=None, kernel=tc_gemm_v2_ldmatrix_kernel):
    """c = a w^T (M, N) float32 on tensor cores, fragments loaded with ldmatrix.x4; v1's grid and blocks.
    ``kernel`` is a function of the format that returns the kernel."""
    return _launch(kernel, a, w, out)


# ----------------------------------------------------------------------------------------------
# v3: v2's fragments and mmas, the tiles filled by 16-byte cp.async copies into a ring of 3 steps
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _copy_step(tile, x, first, k0, thread):
    """The block's threads start the copies of rows first ... first + 63 of x (the 16-bit numbers of a or w, (rows,
    K), K a multiple of 8), numbers k0 ... k0 + 31, into ``tile`` (64 rows of 16 words): 4 copies of 16 bytes a
    row, consecutive threads on consecutive copies (a warp on 8 rows of 64 bytes). A copy of a row past x or of
    numbers past K reads nothing and writes zeros (its source address stays inside x)."""
    rows = x.shape[0]
    k = x.shape[1]
    for chunk in range(thread, BLOCK_M * CHUNKS, THREADS):
        r = chunk // CHUNKS
        q = chunk - r * CHUNKS
        row = first + r
        col = k0 + CHUNK * q
        valid = row < rows and col < k
        cp_async_16(tile, r, 4 * q, x, row if valid else 0, col if valid else 0, valid)


def _build_v3(fmt: str):
    mma = _MMA[fmt]

    @cuda.jit
    def tc_gemm_v3_cp_async_kernel(a, w, c):
        """v2's fragments and mmas on a ring of STAGES steps: before computing step s, the block waits for its own
        copies of step s (``cp_async_wait_group``), meets at one barrier (everyone's copies of step s landed, and
        everyone done with step s - 1, whose slot is refilled next), starts the copies of step s + STAGES - 1 and
        computes step s while they travel. a (M, K) and w (N, K) are the numbers' 16 bits, K a multiple of 8."""
        a_tiles = cuda.shared.array((STAGES, BLOCK_M, K_WORDS), uint32, alignment=16)
        w_tiles = cuda.shared.array((STAGES, BLOCK_N, K_WORDS), uint32, alignment=16)
        acc = cuda.local.array((MMAS_M, MMAS_N, 4), float32)
        b_frag = cuda.local.array((MMAS_N, 2), uint32)
        thread = cuda.threadIdx.x
        warp = thread // WARP
        lane = thread % WARP
        g = lane // 4
        t = lane % 4
        warp_row = (warp // WARPS_N) * WARP_TILE_M
        warp_col = (warp % WARPS_N) * WARP_TILE_N
        a_row = lane % 16
        a_word = 4 * (lane // 16)
        w_row = lane % 8 + 8 * (lane // 16)
        w_word = 4 * ((lane // 8) % 2)
        row0 = cuda.blockIdx.y * BLOCK_M
        col0 = cuda.blockIdx.x * BLOCK_N
        k = a.shape[1]
        steps = (k + BLOCK_K - 1) // BLOCK_K
        _clear(acc)
        for s in range(STAGES - 1):                 # the first steps in flight, a group each (empty past K)
            if s < steps:
                _copy_step(a_tiles[s], a, row0, s * BLOCK_K, thread)
                _copy_step(w_tiles[s], w, col0, s * BLOCK_K, thread)
            cp_async_commit_group()
        for step in range(steps):
            cp_async_wait_group(IN_FLIGHT)          # this thread's copies of this step have landed
            cuda.syncthreads()                      # everyone's have, and nobody still reads step - 1's slot
            ahead = step + STAGES - 1
            if ahead < steps:
                _copy_step(a_tiles[ahead % STAGES], a, row0, ahead * BLOCK_K, thread)
                _copy_step(w_tiles[ahead % STAGES], w, col0, ahead * BLOCK_K, thread)
            cp_async_commit_group()
            a_tile = a_tiles[step % STAGES]
            w_tile = w_tiles[step % STAGES]
            k0 = step * BLOCK_K
            for ks in range(K_STEPS):
                if k0 + ks * MMA_K < k:             # the same in the whole block: no mma on a step past K
                    kw = ks * MMA_WORDS
                    for nj in range(MMAS_N // 2):
                        b_frag[2 * nj, 0], b_frag[2 * nj, 1], b_frag[2 * nj + 1, 0], b_frag[2 * nj + 1, 1] = \
                            ldmatrix_x4(w_tile, warp_col + 2 * nj * MMA_N + w_row, kw + w_word)
                    for mi in range(MMAS_M):
                        a0, a1, a2, a3 = ldmatrix_x4(a_tile, warp_row + mi * MMA_M + a_row, kw + a_word)
                        for ni in range(MMAS_N):
                            acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3] = mma(
                                a0, a1, a2, a3, b_frag[ni, 0], b_frag[ni, 1],
                                acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3])
        cp_async_wait_group(0)                      # no copy left in flight when the block ends
        _store(c, acc, row0 + warp_row, col0 + warp_col, g, t)

    return tc_gemm_v3_cp_async_kernel


def tc_gemm_v3_cp_async_kernel(fmt: str = "float16"):
    """v3's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v3, "v3", fmt)


def tc_gemm_v3_cp_async(a, w, *, out=None, kernel=tc_gemm_v3_cp_async_kernel):
    """c = a w^T (M, N) float32 on tensor cores, tiles filled by 16-byte cp.async copies into a ring of 3 steps,
    fragments loaded with ldmatrix.x4; K must be a multiple of 8. v1's grid and blocks. ``kernel`` is a function of
    the format that returns the kernel."""
    return _launch(kernel, a, w, out, chunked="tc_gemm_v3_cp_async")


# ----------------------------------------------------------------------------------------------
# v4: v3 with each shared row's 16-byte chunks XOR-swizzled, so ldmatrix meets no bank conflict
# ----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def _swizzled(row, chunk):
    """The word of a swizzled tile (rows of 16 words, 4 chunks of 16 bytes) where chunk ``chunk`` of row ``row``
    starts: chunk position chunk ^ ((row >> 1) & 3), a permutation of the row's own 4 chunks. The 8 rows of any 8
    consecutive rows, the first a multiple of 8, at one chunk lie in 8 different groups of 4 banks (the module's
    docstring, v4). The copies and the ldmatrix rows of v4 and v5 both take their words from here."""
    return 4 * (chunk ^ ((row >> 1) & 3))


def _swizzled_copier(tile_rows: int, threads: int):
    """``copy_step(tile, x, first, k0, thread)`` for a block of ``threads``: v3's ``_copy_step`` into a swizzled
    tile of ``tile_rows`` rows. The block's threads start the copies of rows first ... first + tile_rows - 1 of x
    (16-bit numbers, (rows, K), K a multiple of 8), numbers k0 ... k0 + 31, 4 copies of 16 bytes a row,
    consecutive threads on consecutive chunks (a warp on 8 rows), thread i on chunks i, i + threads, ... (a
    constant count, 2 for v4 and v5, so the loop unrolls); chunk q of row r lands at words ``_swizzled(r, q)`` ...
    + 3. A copy of a row past x or of numbers past K reads nothing and writes zeros."""

    copies = tile_rows * CHUNKS // threads          # a thread's copies per operand and step, a constant

    @cuda.jit(device=True, inline=True)
    def copy_step(tile, x, first, k0, thread):
        rows = x.shape[0]
        k = x.shape[1]
        for i in range(copies):
            chunk = thread + i * threads
            r = chunk // CHUNKS
            q = chunk - r * CHUNKS
            row = first + r
            col = k0 + CHUNK * q
            valid = row < rows and col < k
            cp_async_16(tile, r, _swizzled(r, q), x, row if valid else 0, col if valid else 0, valid)

    return copy_step


def swizzled_mainloop(mma, block_m: int, warps_n: int, mmas_m: int, mmas_n: int):
    """``mainloop(a, w, acc)``, the whole loop over K of v4 (64 x 64 tiles of C, 2 x 2 warps of 2 x 4 mma tiles)
    or v5 (128 x 128, 2 x 4 warps of 4 x 4): v3's ring, waits, barrier and mmas on swizzled tiles, into the calling
    warp's accumulators ``acc`` (mmas_m, mmas_n, 4), which it adds to. The copies (``_swizzled_copier``'s) write
    chunk q of tile row r at words ``_swizzled(r, q)``, and the lane of ldmatrix that wants chunk q of row r names
    that word. Tiles are square (block_m x block_m, block_m // (16 mmas_m) x warps_n warps). Block (bx, by) covers
    c[block_m by:, block_m bx:]; warp (wm, wn) = divmod(warp, warps_n) its rows warp_tile_m
    wm + 16 mi + ... and columns warp_tile_n wn + 8 ni + ... a (M, K) and w (N, K) are 16-bit words, K a multiple
    of 8: fp16 or bf16 numbers, or pairs of int8 codes for ``mma_m16n8k32_s8``, whose fragments hold the same
    bytes of the same rows as ``mma_m16n8k16``'s (day 9's W8A8 rung on this loop)."""
    warp_tile_m, warp_tile_n = mmas_m * MMA_M, mmas_n * MMA_N
    block_n = warps_n * warp_tile_n
    if block_n != block_m:
        raise ValueError(f"the tiles must be square, got {block_m} x {block_n}")
    copy_step = _swizzled_copier(block_m, (block_m // warp_tile_m) * warps_n * WARP)

    @cuda.jit(device=True, inline=True)
    def mainloop(a, w, acc):
        a_tiles = cuda.shared.array((STAGES, block_m, K_WORDS), uint32, alignment=16)
        w_tiles = cuda.shared.array((STAGES, block_n, K_WORDS), uint32, alignment=16)
        b_frag = cuda.local.array((mmas_n, 2), uint32)
        thread = cuda.threadIdx.x
        warp = thread // WARP
        lane = thread % WARP
        warp_row = (warp // warps_n) * warp_tile_m
        warp_col = (warp % warps_n) * warp_tile_n
        # v3's ldmatrix rows, their 16-byte chunk of the mma's 16 of K (0 or 1) in place of the word (0 or 4).
        a_row = lane % 16
        a_chunk = lane // 16
        w_row = lane % 8 + 8 * (lane // 16)
        w_chunk = (lane // 8) % 2
        row0 = cuda.blockIdx.y * block_m
        col0 = cuda.blockIdx.x * block_n
        k = a.shape[1]
        steps = (k + BLOCK_K - 1) // BLOCK_K
        for s in range(STAGES - 1):                 # the first steps in flight, a group each (empty past K)
            if s < steps:
                copy_step(a_tiles[s], a, row0, s * BLOCK_K, thread)
                copy_step(w_tiles[s], w, col0, s * BLOCK_K, thread)
            cp_async_commit_group()
        for step in range(steps):
            cp_async_wait_group(IN_FLIGHT)          # this thread's copies of this step have landed
            cuda.syncthreads()                      # everyone's have, and nobody still reads step - 1's slot
            ahead = step + STAGES - 1
            if ahead < steps:
                copy_step(a_tiles[ahead % STAGES], a, row0, ahead * BLOCK_K, thread)
                copy_step(w_tiles[ahead % STAGES], w, col0, ahead * BLOCK_K, thread)
            cp_async_commit_group()
            a_tile = a_tiles[step % STAGES]
            w_tile = w_tiles[step % STAGES]
            k0 = step * BLOCK_K
            for ks in range(K_STEPS):
                if k0 + ks * MMA_K < k:             # the same in the whole block: no mma on a step past K
                    q = ks * MMA_CHUNKS
                    for nj in range(mmas_n // 2):
                        r = warp_col + 2 * nj * MMA_N + w_row
                        b_frag[2 * nj, 0], b_frag[2 * nj, 1], b_frag[2 * nj + 1, 0], b_frag[2 * nj + 1, 1] = \
                            ldmatrix_x4(w_tile, r, _swizzled(r, q + w_chunk))
                    for mi in range(mmas_m):
                        r = warp_row + mi * MMA_M + a_row
                        a0, a1, a2, a3 = ldmatrix_x4(a_tile, r, _swizzled(r, q + a_chunk))
                        for ni in range(mmas_n):
                            acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3] = mma(
                                a0, a1, a2, a3, b_frag[ni, 0], b_frag[ni, 1],
                                acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3])
        cp_async_wait_group(0)                      # no copy left in flight when the block ends

    return mainloop


def _build_swizzled(fmt: str, name: str, block_m: int, warps_n: int, mmas_m: int, mmas_n: int, clear, store):
    """The kernel of v4 or v5 (``swizzled_mainloop``'s shapes): float32 accumulators cleared, the main loop, each
    lane's accumulators stored into c (rows warp_tile_m wm + 16 mi + g (+ 8), columns warp_tile_n wn + 8 ni + 2t
    (+ 1), inside c)."""
    mainloop = swizzled_mainloop(_MMA[fmt], block_m, warps_n, mmas_m, mmas_n)
    warp_tile_m, warp_tile_n = mmas_m * MMA_M, mmas_n * MMA_N

    def kernel(a, w, c):
        acc = cuda.local.array((mmas_m, mmas_n, 4), float32)
        clear(acc)
        mainloop(a, w, acc)
        warp = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        store(c, acc, cuda.blockIdx.y * block_m + (warp // warps_n) * warp_tile_m,
              cuda.blockIdx.x * block_m + (warp % warps_n) * warp_tile_n, lane // 4, lane % 4)

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = swizzled_mainloop.__doc__
    return cuda.jit(kernel)


def _build_v4(fmt: str):
    return _build_swizzled(fmt, "tc_gemm_v4_swizzled_kernel", BLOCK_M, WARPS_N, MMAS_M, MMAS_N, _clear, _store)


def tc_gemm_v4_swizzled_kernel(fmt: str = "float16"):
    """v4's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v4, "v4", fmt)


def tc_gemm_v4_swizzled(a, w, *, out=None, kernel=tc_gemm_v4_swizzled_kernel):
    """c = a w^T (M, N) float32 on tensor cores, v3 with the shared rows' 16-byte chunks XOR-swizzled (ldmatrix
    without bank conflicts); K must be a multiple of 8. v1's grid and blocks. ``kernel`` is a function of the
    format that returns the kernel."""
    return _launch(kernel, a, w, out, chunked="tc_gemm_v4_swizzled")


# ----------------------------------------------------------------------------------------------
# v5: 128 x 128 tiles of C, 8 warps of 64 x 32, on v4's swizzled ring of 3 steps (48 KB)
# ----------------------------------------------------------------------------------------------

def _build_v5(fmt: str):
    return _build_swizzled(fmt, "tc_gemm_v5_large_tiles_kernel", LARGE_BLOCK_M, LARGE_WARPS_N, LARGE_MMAS_M,
                           LARGE_MMAS_N, _clear_large, _store_large)


def tc_gemm_v5_large_tiles_kernel(fmt: str = "float16"):
    """v5's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v5, "v5", fmt)


def tc_gemm_v5_large_tiles(a, w, *, out=None, kernel=tc_gemm_v5_large_tiles_kernel):
    """c = a w^T (M, N) float32 on tensor cores, 128 x 128 tiles of C a block of 8 warps (64 x 32 each), on v4's
    swizzled cp.async ring; K must be a multiple of 8, M at most LARGE_MAX_M. Grid (ceil(N/128), ceil(M/128)) of
    256 threads. ``kernel`` is a function of the format that returns the kernel."""
    return _launch(kernel, a, w, out, chunked="tc_gemm_v5_large_tiles", block=(LARGE_BLOCK_M, LARGE_BLOCK_N),
                   threads=LARGE_THREADS)


# ----------------------------------------------------------------------------------------------
# v6: v5's 128 x 128 tiles and ring, 4 warps of 64 x 64: 32 mmas per 8 ldmatrix, not 16 per 6
# ----------------------------------------------------------------------------------------------

def _build_v6(fmt: str):
    return _build_swizzled(fmt, "tc_gemm_v6_wide_warps_kernel", LARGE_BLOCK_M, WIDE_WARPS_N, WIDE_MMAS_M,
                           WIDE_MMAS_N, _clear_wide, _store_wide)


def tc_gemm_v6_wide_warps_kernel(fmt: str = "float16"):
    """v6's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v6, "v6", fmt)


def tc_gemm_v6_wide_warps(a, w, *, out=None, kernel=tc_gemm_v6_wide_warps_kernel):
    """c = a w^T (M, N) float32 on tensor cores, v5's 128 x 128 tiles of C and swizzled cp.async ring with a block
    of 4 warps, 64 x 64 each (4 x 8 mma tiles, 128 accumulators a lane); K must be a multiple of 8, M at most
    LARGE_MAX_M. Grid (ceil(N/128), ceil(M/128)) of 128 threads. ``kernel`` is a function of the format that
    returns the kernel."""
    return _launch(kernel, a, w, out, chunked="tc_gemm_v6_wide_warps", block=(LARGE_BLOCK_M, LARGE_BLOCK_N),
                   threads=WIDE_THREADS)


# ----------------------------------------------------------------------------------------------
# v7: the tile of C and the warps' shape chosen per GPU and problem, by timing each once (day 4's v8)
# ----------------------------------------------------------------------------------------------

# (block, warp_tile_m, warp_tile_n): a block x block tile of C in warps of warp_tile_m x warp_tile_n, largest tile
# first. v6's, v5's, a 64 x 64 tile in 2 warps of v5's 64 x 32 (more blocks than v5 on mid-size matrices, v5's
# fragment reuse), and v4's.
TILES = ((128, 64, 64), (128, 64, 32), (64, 64, 32), (64, 32, 32))
# The untuned choice (simulator, NumPy arrays): the largest tile whose grid has this many blocks (day 4's rule).
BLOCKS_TO_FILL = 128
# The choices of v7's first launches in this process, per GPU, kernel and (fmt, M, N, K) (kernels.tuning).
_TUNER = Tuner()


def _require_tile(tile) -> tuple[int, int, int]:
    if tuple(tile) not in TILES:
        raise ValueError(f"tile must be one of {', '.join(map(str, TILES))}, got {tile!r}")
    return tuple(tile)


def tile_threads(tile) -> int:
    """The threads of a block of ``tile`` (block, warp_tile_m, warp_tile_n): 32 per warp of its block x block."""
    block, warp_tile_m, warp_tile_n = _require_tile(tile)
    return (block // warp_tile_m) * (block // warp_tile_n) * WARP


def _build_v7(fmt: str, tile):
    block, warp_tile_m, warp_tile_n = tile
    mmas_m, mmas_n = warp_tile_m // MMA_M, warp_tile_n // MMA_N
    clear, store = _accumulators(mmas_m, mmas_n)
    return _build_swizzled(fmt, "tc_gemm_v7_tuned_kernel", block, block // warp_tile_n, mmas_m, mmas_n, clear, store)


def tc_gemm_v7_tuned_kernel(fmt: str = "float16", tile=TILES[0]):
    """v7's kernel for a and w stored in ``fmt`` at ``tile`` (one of ``TILES``), compiled on first use and kept."""
    tile = _require_tile(tile)
    return _kernel_for(lambda f: _build_v7(f, tile), ("v7",) + tile, fmt)


def untuned_tile(m: int, n: int) -> tuple[int, int, int]:
    """The first of ``TILES`` whose grid over C (M x N) has at least BLOCKS_TO_FILL blocks, else the smallest."""
    return largest_filling(TILES, m, n, BLOCKS_TO_FILL, tile=lambda t: (t[0], t[0]))


def tile_for(fmt: str, m: int, n: int, k: int, kernel=tc_gemm_v7_tuned_kernel) -> tuple[int, int, int]:
    """The tile v7 launches for (fmt, M, N, K): the one its first launch on this GPU chose, else ``untuned_tile``."""
    return _TUNER.choice(kernel.__name__, (fmt, m, n, k)) or untuned_tile(m, n)


def tuned() -> list[dict]:
    """Every choice v7 made in this process: ``{"gpu", "kernel", "fmt", "M", "N", "K", "choice", "ms": {tile:
    ms per launch}}`` per GPU, kernel and problem."""
    return [{"gpu": e["gpu"], "kernel": e["kernel"], **dict(zip(("fmt", "M", "N", "K"), e["problem"])),
             "choice": e["choice"], "ms": e["ms"]} for e in _TUNER.entries()]


def tc_gemm_v7_tuned(a, w, *, out=None, tile=None, kernel=tc_gemm_v7_tuned_kernel):
    """c = a w^T (M, N) float32 on v4's swizzled cp.async ring, at the tile of ``TILES`` that ran fastest for
    this GPU and (fmt, M, N, K): the first launch on device arrays of a new problem times each tile
    (``kernels.tuning``, 5 launches each after a warm-up, into ``out``) and keeps the fastest; NumPy arrays and the
    simulator take ``untuned_tile``. ``tile``: one of ``TILES`` to launch instead, without tuning. K must be a
    multiple of 8. ``kernel`` is a function of the format and the tile that returns the kernel."""
    if tile is not None:
        tile = _require_tile(tile)
    m, n, k, fmt = gemm_shape(a, w, out, block_m=tile[0] if tile else min(t[0] for t in TILES))
    _require_chunked(k, "tc_gemm_v7_tuned")
    out = output_array("out", out, (m, n), like=a)
    if not (m and n):
        return out
    a16, w16 = a.view(np.uint16), w.view(np.uint16)        # validated once: a launch adds no check of its own

    def launch(t):
        kernel(fmt, t)[(cdiv(n, t[0]), cdiv(m, t[0])), tile_threads(t)](a16, w16, out)

    if tile is None:
        tile = _TUNER.pick(kernel.__name__, (fmt, m, n, k), (a, w),
                           lambda: {t: (lambda t=t: launch(t)) for t in TILES}, untuned_tile(m, n))
    launch(tile)
    return out


# ----------------------------------------------------------------------------------------------
# v8: larger steps of K per barrier in dynamic shared memory (more than the 48 KB a block may declare statically)
# ----------------------------------------------------------------------------------------------

# v8: steps of 64 numbers of K (rows of 128 bytes, 8 chunks), a ring of 3 of them: 3 x (128 + 128) rows x 128 bytes
# = 96 KB, in dynamic shared memory.
DEEP_K = 64
DEEP_STAGES = 3


def ring_swizzle(chunks: int):
    """``swizzled(row, chunk)``: the word where chunk ``chunk`` (16 bytes) of row ``row`` of a tile with rows of
    ``chunks`` chunks starts, at chunk position chunk ^ ((row // (8 // chunks)) % chunks): 4 chunks a row is v4's
    ``_swizzled``, 8 (rows of 128 bytes) XORs by the row's low 3 bits. Either way the 8 rows of an ldmatrix phase
    (8 consecutive rows from a multiple of 8, one chunk) lie in 8 different groups of 4 banks."""
    per_line = 8 // chunks
    mask = chunks - 1

    @cuda.jit(device=True, inline=True)
    def swizzled(row, chunk):
        return 4 * (chunk ^ ((row // per_line) & mask))

    return swizzled


def ring_mainloop(mma, block_m: int, block_n: int, warps_n: int, mmas_m: int, mmas_n: int, block_k: int,
                  stages: int):
    """``mainloop(a, w, acc)``: v4-v6's swizzled cp.async ring for any tile (block_m x block_n of C in warps of 16
    mmas_m x 8 mmas_n, warps_n of them across), steps of ``block_k`` numbers of K (32 or 64) and a ring of
    ``stages`` steps, in dynamic shared memory (the launch gives ``ring_bytes(block_m, block_n, block_k, stages)``):
    A's slots first, then w's, each a (block rows, block_k / 2 words) tile seen through ``shared_view``. Per step
    one wait (``cp.async.wait_group stages - 2``) and one barrier, then the copies of step + stages - 1 start and the
    step's block_k / 16 slices of 16 are computed: per slice a warp loads w's fragments (one ldmatrix.x4 per pair of
    mma columns), then per mma row A's (one ldmatrix.x4) and its mmas. Unlike v3-v7 it runs every mma, past K too:
    the copies write zeros there, and products of zeros add nothing to a sum."""
    warp_tile_m, warp_tile_n = mmas_m * MMA_M, mmas_n * MMA_N
    if warps_n * warp_tile_n != block_n:
        raise ValueError(f"{warps_n} warps of {warp_tile_n} columns do not make a tile of {block_n}")
    threads = (block_m // warp_tile_m) * warps_n * WARP
    words = block_k // 2
    chunks = block_k // CHUNK
    k_steps = block_k // MMA_K
    a_copies = block_m * chunks // threads
    w_copies = block_n * chunks // threads
    swizzled = ring_swizzle(chunks)
    in_flight = stages - 2

    @cuda.jit(device=True, inline=True)
    def copy_step(tile, x, first, k0, thread, copies):
        """Rows first ... of x, numbers k0 ... k0 + block_k - 1, into ``tile``: consecutive threads on consecutive
        16-byte chunks, ``copies`` a thread; past x's rows or past K the copy reads nothing and writes zeros."""
        rows = x.shape[0]
        k = x.shape[1]
        for i in range(copies):
            chunk = thread + i * threads
            r = chunk // chunks
            q = chunk - r * chunks
            row = first + r
            col = k0 + CHUNK * q
            valid = row < rows and col < k
            cp_async_16(tile, r, swizzled(r, q), x, row if valid else 0, col if valid else 0, valid)

    @cuda.jit(device=True, inline=True)
    def mainloop(a, w, acc):
        flat = cuda.shared.array(0, uint32)
        a_tiles = shared_view(flat, (stages, block_m, words))
        w_tiles = shared_view(flat[stages * block_m * words:], (stages, block_n, words))
        b_frag = cuda.local.array((mmas_n, 2), uint32)
        thread = cuda.threadIdx.x
        warp = thread // WARP
        lane = thread % WARP
        warp_row = (warp // warps_n) * warp_tile_m
        warp_col = (warp % warps_n) * warp_tile_n
        a_row = lane % 16
        a_chunk = lane // 16
        w_row = lane % 8 + 8 * (lane // 16)
        w_chunk = (lane // 8) % 2
        row0 = cuda.blockIdx.y * block_m
        col0 = cuda.blockIdx.x * block_n
        k = a.shape[1]
        steps = (k + block_k - 1) // block_k
        for s in range(stages - 1):                 # the first steps in flight, a group each (empty past K)
            if s < steps:
                copy_step(a_tiles[s], a, row0, s * block_k, thread, a_copies)
                copy_step(w_tiles[s], w, col0, s * block_k, thread, w_copies)
            cp_async_commit_group()
        for step in range(steps):
            cp_async_wait_group(in_flight)          # this thread's copies of this step have landed
            cuda.syncthreads()                      # everyone's have, and nobody still reads step - 1's slot
            ahead = step + stages - 1
            if ahead < steps:
                copy_step(a_tiles[ahead % stages], a, row0, ahead * block_k, thread, a_copies)
                copy_step(w_tiles[ahead % stages], w, col0, ahead * block_k, thread, w_copies)
            cp_async_commit_group()
            a_tile = a_tiles[step % stages]
            w_tile = w_tiles[step % stages]
            for ks in range(k_steps):
                q = ks * MMA_CHUNKS
                for nj in range(mmas_n // 2):
                    r = warp_col + 2 * nj * MMA_N + w_row
                    b_frag[2 * nj, 0], b_frag[2 * nj, 1], b_frag[2 * nj + 1, 0], b_frag[2 * nj + 1, 1] = \
                        ldmatrix_x4(w_tile, r, swizzled(r, q + w_chunk))
                for mi in range(mmas_m):
                    r = warp_row + mi * MMA_M + a_row
                    a0, a1, a2, a3 = ldmatrix_x4(a_tile, r, swizzled(r, q + a_chunk))
                    for ni in range(mmas_n):
                        acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3] = mma(
                            a0, a1, a2, a3, b_frag[ni, 0], b_frag[ni, 1],
                            acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3])
        cp_async_wait_group(0)                      # no copy left in flight when the block ends

    return mainloop


def ring_bytes(block_m: int, block_n: int, block_k: int, stages: int) -> int:
    """The dynamic shared memory of ``ring_mainloop``: ``stages`` steps of block_m + block_n rows of block_k
    16-bit numbers."""
    return stages * (block_m + block_n) * block_k * 2


def _build_ring(fmt: str, block_m: int, block_n: int, warps_n: int, mmas_m: int, mmas_n: int, block_k: int,
                stages: int, name: str, paired: bool = False):
    """The kernel of ``ring_mainloop``'s shapes: accumulators cleared, the loop, each lane's accumulators stored
    into c (as ``_build_swizzled``'s; ``paired``: two sums a store, ``_accumulators``'), named ``name``."""
    mainloop = ring_mainloop(_MMA[fmt], block_m, block_n, warps_n, mmas_m, mmas_n, block_k, stages)
    clear, store = _accumulators(mmas_m, mmas_n, paired)
    warp_tile_m, warp_tile_n = mmas_m * MMA_M, mmas_n * MMA_N

    def tc_gemm_ring_kernel(a, w, c):
        acc = cuda.local.array((mmas_m, mmas_n, 4), float32)
        clear(acc)
        mainloop(a, w, acc)
        warp = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        store(c, acc, cuda.blockIdx.y * block_m + (warp // warps_n) * warp_tile_m,
              cuda.blockIdx.x * block_n + (warp % warps_n) * warp_tile_n, lane // 4, lane % 4)

    tc_gemm_ring_kernel.__name__ = tc_gemm_ring_kernel.__qualname__ = name
    tc_gemm_ring_kernel.__doc__ = ring_mainloop.__doc__
    return cuda.jit(tc_gemm_ring_kernel)


def _launch_ring(kernel, a, w, out, *, block_m: int, block_n: int, threads: int, block_k: int, stages: int,
                 rung: str):
    """Validate, then launch ceil(N / block_n) x ceil(M / block_m) blocks of ``threads`` with the ring's dynamic
    shared memory (``ring_bytes``; ``launch_with_shared`` allows a kernel more than 48 KB on its first launch)."""
    m, n, k, fmt = gemm_shape(a, w, out, block_m=block_m)
    _require_chunked(k, rung)
    out = output_array("out", out, (m, n), like=a)
    if m and n:
        launch_with_shared(kernel(fmt), (cdiv(n, block_n), cdiv(m, block_m)), threads,
                           ring_bytes(block_m, block_n, block_k, stages), a.view(np.uint16), w.view(np.uint16), out)
    return out


def _build_v8(fmt: str):
    return _build_ring(fmt, LARGE_BLOCK_M, LARGE_BLOCK_N, WIDE_WARPS_N, WIDE_MMAS_M, WIDE_MMAS_N, DEEP_K,
                       DEEP_STAGES, name="tc_gemm_v8_deep_steps_kernel")


def tc_gemm_v8_deep_steps_kernel(fmt: str = "float16"):
    """v8's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v8, "v8", fmt)


def tc_gemm_v8_deep_steps(a, w, *, out=None, kernel=tc_gemm_v8_deep_steps_kernel):
    """c = a w^T (M, N) float32 on tensor cores, v6's 128 x 128 tiles and 4 warps of 64 x 64 on a ring of 3 steps of
    64 numbers of K (96 KB of dynamic shared memory): one barrier per 64 of K, 128 mmas a warp between barriers; K
    must be a multiple of 8, M at most LARGE_MAX_M. Grid (ceil(N/128), ceil(M/128)) of 128 threads. ``kernel`` is a
    function of the format that returns the kernel."""
    return _launch_ring(kernel, a, w, out, block_m=LARGE_BLOCK_M, block_n=LARGE_BLOCK_N, threads=WIDE_THREADS,
                        block_k=DEEP_K, stages=DEEP_STAGES, rung="tc_gemm_v8_deep_steps")

def _build_v9(fmt: str):
    return _build_ring(fmt, LARGE_BLOCK_M, LARGE_BLOCK_N, WIDE_WARPS_N, WIDE_MMAS_M, WIDE_MMAS_N, DEEP_K,
                       DEEP_STAGES, name="tc_gemm_v9_paired_stores_kernel", paired=True)


def tc_gemm_v9_paired_stores_kernel(fmt: str = "float16"):
    """v9's kernel for a and w stored in ``fmt`` ("float16" or "bfloat16"), compiled on first use and kept."""
    return _kernel_for(_build_v9, "v9", fmt)


def tc_gemm_v9_paired_stores(a, w, *, out=None, kernel=tc_gemm_v9_paired_stores_kernel):
    """c = a w^T (M, N) float32 on tensor cores: v8's tiles, warps and ring, each lane's two neighbouring sums of C
    written by one 8-byte store (one float a store where N is odd); K must be a multiple of 8, M at most
    LARGE_MAX_M. Grid (ceil(N/128), ceil(M/128)) of 128 threads. ``kernel`` is a function of the format that returns
    the kernel."""
    return _launch_ring(kernel, a, w, out, block_m=LARGE_BLOCK_M, block_n=LARGE_BLOCK_N, threads=WIDE_THREADS,
                        block_k=DEEP_K, stages=DEEP_STAGES, rung="tc_gemm_v9_paired_stores")


RUNGS = ladder(
    Rung("tc_gemm_v1_mma_shared", tc_gemm_v1_mma_shared,
         "64 x 64 tiles of C staged in shared memory, a warp's 32 x 32 as 8 mma.sync m16n8k16 on 32-bit loads"),
    Rung("tc_gemm_v2_ldmatrix", tc_gemm_v2_ldmatrix,
         "the same tiles and mmas, each warp's fragments loaded by ldmatrix.x4: 4 loads per 8 mmas, not 16"),
    Rung("tc_gemm_v3_cp_async", tc_gemm_v3_cp_async,
         "16-byte cp.async copies into a ring of 3 steps: loads skip registers and overlap mmas, 1 barrier a step"),
    Rung("tc_gemm_v4_swizzled", tc_gemm_v4_swizzled,
         "v3 with each shared row's 16-byte chunks XOR-swizzled (q ^ (r >> 1 & 3)): ldmatrix without bank conflicts"),
    Rung("tc_gemm_v5_large_tiles", tc_gemm_v5_large_tiles,
         "128 x 128 tiles of C, 8 warps of 64 x 32 (16 mmas per 6 ldmatrix), v4's swizzled ring in 48 KB"),
    Rung("tc_gemm_v6_wide_warps", tc_gemm_v6_wide_warps,
         "v5's tiles and ring with 4 warps of 64 x 64: 32 mmas per 8 ldmatrix, 128 accumulators a lane"),
    Rung("tc_gemm_v7_tuned", tc_gemm_v7_tuned,
         "the tile and warp shape (v6's, v5's, 64 x 64 in 2 warps, v4's) timed per GPU and problem; the fastest kept"),
    Rung("tc_gemm_v8_deep_steps", tc_gemm_v8_deep_steps,
         "v6's tiles and warps on steps of 64 of K in 96 KB of dynamic shared memory: 1 barrier per 128 mmas a warp"),
    Rung("tc_gemm_v9_paired_stores", tc_gemm_v9_paired_stores,
         "v8, each lane's two neighbouring sums of C written by one 8-byte store: whole sectors, half the stores"),
)
