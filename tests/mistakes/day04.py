"""Day 4's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day04_tiled_gemm"

TABLE = (
    # gemm_v3_shared_tiles
    Mistake("gemm_second_barrier_removed", cell="gemm_v3_shared_tiles_kernel", kernel="gemm.gemm_v3_shared_tiles_kernel",
            edits=(("        cuda.syncthreads()  # everyone has finished reading before the next step overwrites\n", ""),),
            why="the barrier after the inner loop is gone: the next step overwrites a tile others still read",
            names="missing_barrier", words=("a_tile is read", "overwritten in the next pass", "after the last read"),
            samples=("wrong_race_and_no_register_reuse",),
            feedback=(("gemm_matches_reference", ("a_tile is read", "overwritten in the next pass")),)),
    Mistake("gemm_threads_outside_c_return", cell="gemm_v3_shared_tiles_kernel", kernel="gemm.gemm_v3_shared_tiles_kernel",
            edits=(("    acc = float32(0.0)\n", "    acc = float32(0.0)\n    if row >= m or col >= n:\n        return\n"),),
            why="threads outside C return before the barriers of the loop",
            names="early_return_barrier", words=("return", "never arrive at the barrier", "guard the loads"),
            feedback=(("gemm_matches_reference", ("never arrive at the barrier", "guard the loads")),)),
    Mistake("gemm_last_k_step_lost", cell="gemm_v3_shared_tiles_kernel", kernel="gemm.gemm_v3_shared_tiles_kernel",
            edits=(("for k0 in range(0, k, TILE):", "for k0 in range(0, k // TILE * TILE, TILE):"),),
            why="the number of steps along K rounds down: the last, partial step is lost",
            names="k_steps_dropped", words=("last, partial step along K is lost", "K = 19"),
            feedback=(("gemm_matches_reference", ("last, partial step along K is lost",)),)),
    Mistake("gemm_a_tile_offset_missing", cell="gemm_v3_shared_tiles_kernel", kernel="gemm.gemm_v3_shared_tiles_kernel",
            edits=(("a_tile[ty, tx] = a[row, k0 + tx]", "a_tile[ty, tx] = a[row, tx]"),),
            why="the A tile is loaded without its offset along K: the first tile of A every step",
            names="tile_offset_k", words=("first tile of A again", "k0 + tx"),
            feedback=(("gemm_matches_reference", ("first tile of A again", "k0 + tx")),)),
    Mistake("gemm_a_tile_row_guard_missing", cell="gemm_v3_shared_tiles_kernel",
            kernel="gemm.gemm_v3_shared_tiles_kernel",
            edits=(("        if row < m and k0 + tx < k:", "        if k0 + tx < k:"),),
            why="the A tile is loaded without its row guard: a block over the edge reads past row M - 1",
            wrong_answer=True,
            feedback=(("gemm_matches_reference", ("A is read at a row past M - 1", "row guard")),)),
    Mistake("gemm_threads_outside_c_return_unguarded", cell="gemm_v3_shared_tiles_kernel",
            kernel="gemm.gemm_v3_shared_tiles_kernel",
            edits=(("    acc = float32(0.0)",
                    "    acc = float32(0.0)\n"
                    "    if row >= m or col >= n:\n"
                    "        return  # threads outside C leave early: their tile slots are never filled"),
                   ("if row < m and k0 + tx < k:", "if k0 + tx < k:"),
                   ("if k0 + ty < k and col < n:", "if k0 + ty < k:"),
                   ("    if row < m and col < n:\n        c[row, col] = acc", "    c[row, col] = acc")),
            why="threads outside C return before loading their tile slots, and the loads and the store drop "
                "the guards they no longer need",
            samples=("wrong_tile_edges",),
            feedback=(("gemm_matches_reference", ("never arrive at the barrier", "guard the loads")),)),
    # gemm_v4_register_blocked
    Mistake("gemm_v4_a_tile_row_guard_missing", cell="gemm_v4_register_blocked_kernel",
            kernel="gemm.gemm_v4_register_blocked_kernel",
            edits=(("            if row0 + r < m and k0 + kk < k:", "            if k0 + kk < k:"),),
            why="the A tile is loaded without its row guard: a block over the edge reads past row M - 1",
            wrong_answer=True,
            feedback=(("gemm_matches_reference", ("A is read at a row past M - 1", "row guard")),)),
    Mistake("gemm_v4_no_register_reuse", cell="gemm_v4_register_blocked_kernel",
            kernel="gemm.gemm_v4_register_blocked_kernel",
            edits=(("    a_frag = cuda.local.array(THREAD_M, float32)\n", ""),
                   ("    b_frag = cuda.local.array(THREAD_N, float32)\n", ""),
                   ("            # THREAD_M + THREAD_N shared reads feed THREAD_M * THREAD_N multiply-adds.\n"
                    "            for i in range(THREAD_M):\n"
                    "                a_frag[i] = a_tile[ty + i * THREADS_Y, kk]\n"
                    "            for j in range(THREAD_N):\n"
                    "                b_frag[j] = b_tile[kk, tx + j * THREADS_X]\n", ""),
                   ("                    acc[i, j] += a_frag[i] * b_frag[j]",
                    "                    # both operands re-read from shared memory for every product: no register reuse\n"
                    "                    acc[i, j] += a_tile[ty + i * THREADS_Y, kk] * b_tile[kk, tx + j * THREADS_X]")),
            why="right, but shared memory is re-read for every product instead of keeping fragments in registers",
            samples=("wrong_race_and_no_register_reuse",),
            feedback=(("gemm_v4_traffic_fits", ("shared loads, budget", "a_frag and b_frag loaded once per kk")),)),
    Mistake("gemm_v4_last_k_step_lost", cell="gemm_v4_register_blocked_kernel",
            kernel="gemm.gemm_v4_register_blocked_kernel",
            edits=(("    for k0 in range(0, k, BLOCK_K):",
                    "    for step in range(k // BLOCK_K):  # rounds down: the last, partial step along K is lost\n"
                    "        k0 = step * BLOCK_K"),
                   ("if row0 + r < m and k0 + kk < k:", "if row0 + r < m:"),
                   ("if k0 + kk < k and col0 + cc < n:", "if col0 + cc < n:")),
            why="the number of steps along K rounds down: the partial last step is lost (its guards along K dropped)",
            samples=("wrong_tile_edges",),
            feedback=(("gemm_matches_reference", ("last, partial step along K is lost",)),)),
)
