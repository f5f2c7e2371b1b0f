"""Day 1's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day01_gpu_model"

TABLE = (
    # axpb
    Mistake("axpb_guard_drops_last", cell="axpb_kernel", kernel="elementwise.axpb_v1_guarded_kernel",
            edits=(("if i < x.size:", "if i < x.size - 1:"),),
            why="the bounds guard stops one short: the last element is never written",
            names="unwritten", words=("bounds guard stops too early", "only the last i"),
            samples=("subtly_wrong",),
            feedback=(("axpb_matches_reference", ("never written", "the bounds guard stops too early")),)),
    Mistake("axpb_guard_one_past_end", cell="axpb_kernel", kernel="elementwise.axpb_v1_guarded_kernel",
            edits=(("    if i < x.size:", "    if i <= x.size:"),),
            why="an off-by-one guard: a thread past the end reads x[n]",
            wrong_answer=True,
            feedback=(("axpb_matches_reference", ("got through the bounds guard", "`i <= n` instead of `i < n`")),)),
    # normalize_rows
    Mistake("normalize_rows_tile_height_from_blockdim_x", cell="normalize_rows_kernel",
            kernel="elementwise.normalize_rows_v1_3d_grid_kernel",
            edits=(("row = cuda.blockIdx.x * cuda.blockDim.y", "row = cuda.blockIdx.x * cuda.blockDim.x"),),
            why="the block's first row is counted in blocks of blockDim.x rows, not blockDim.y",
            names="unwritten", words=("row >= 4", "block offset multiplied by the wrong size"),
            feedback=(("normalize_rows_matches_reference",
                       ("Nothing was written at row >= 4", "a block offset multiplied by the wrong size")),)),
    Mistake("normalize_rows_last_row_dropped", cell="normalize_rows_kernel",
            kernel="elementwise.normalize_rows_v1_3d_grid_kernel",
            edits=(("    if row < x.shape[2]:", "    if row < x.shape[2] - 1:"),),
            why="the last row is never written",
            wrong_answer=True,
            feedback=(("normalize_rows_matches_reference",
                       ("Nothing was written at row >= 6", "the bounds guard stops too early")),)),
    Mistake("normalize_rows_without_column_loop", cell="normalize_rows_kernel",
            kernel="elementwise.normalize_rows_v1_3d_grid_kernel",
            edits=(("    if row < x.shape[2]:\n"
                    "        denominator = row_sums[batch, head, row]\n"
                    "        for col in range(cuda.threadIdx.x, x.shape[3], cuda.blockDim.x):\n"
                    "            out[batch, head, row, col] = x[batch, head, row, col] / denominator",
                    "    col = cuda.threadIdx.x\n"
                    "    if row < x.shape[2] and col < x.shape[3]:\n"
                    "        out[batch, head, row, col] = x[batch, head, row, col] / row_sums[batch, head, row]"),),
            why="one thread per column and no loop over the columns: head_dim above blockDim.x stays unwritten",
            samples=("subtly_wrong",),
            feedback=(("normalize_rows_matches_reference",
                       ("one thread per column leaves the rest out", "Loop over the columns")),)),
    # row_stats, shared-memory tree
    Mistake("tree_max_starts_at_zero", cell="row_stats_tree_kernel", kernel="reduction.row_stats_v2_shared_tree_kernel",
            edits=(("largest = float32(-math.inf)", "largest = float32(0.0)"),),
            why="the running max starts at 0 instead of -inf: wrong for all-negative rows",
            names="max_identity", words=("starts at 0 instead of -inf", "all negative"),
            samples=("subtly_wrong",),
            feedback=(("row_stats_match_reference", ("starts at 0 instead of -inf", "all negative")),)),
    Mistake("tree_stops_one_level_early", cell="row_stats_tree_kernel", kernel="reduction.row_stats_v2_shared_tree_kernel",
            edits=(("while half > 0:", "while half > 1:"),),
            why="the tree stops a level early: two partials are left uncombined",
            names="tree_early", words=("stopped 1 level early", "threads 0, 2, 4"),
            feedback=(("row_stats_match_reference", ("stopped 1 level early", "threads 0, 2, 4")),)),
    Mistake("tree_without_barrier", cell="row_stats_tree_kernel", kernel="reduction.row_stats_v2_shared_tree_kernel",
            edits=(("        cuda.syncthreads()      # every write of this level lands before the next level reads\n",
                    ""),),
            why="no barrier between the levels of the tree: a level reads partials not yet written",
            names="missing_barrier", words=("no barrier between one pass and the next", "partial_max"),
            feedback=(("row_stats_match_reference", ("no barrier between one pass and the next", "partial_max")),)),
    Mistake("tree_without_column_loop", cell="row_stats_tree_kernel", kernel="reduction.row_stats_v2_shared_tree_kernel",
            edits=(("for col in range(tid, x.shape[1], TREE_THREADS):",
                    "for col in range(tid, min(tid + 1, x.shape[1])):"),),
            why="each thread reads one column: rows longer than the block lose their other columns",
            names="stride_loop", words=("only the first 64 columns", "block-stride loop"),
            feedback=(("row_stats_match_reference", ("only the first 64 columns", "block-stride loop")),)),
    Mistake("tree_starts_a_level_too_low", cell="row_stats_tree_kernel",
            kernel="reduction.row_stats_v2_shared_tree_kernel",
            edits=(("    half = TREE_THREADS // 2", "    half = TREE_THREADS // 4"),),
            why="the tree starts a level too low: partials 32..63 are never combined",
            wrong_answer=True,
            feedback=(("row_stats_match_reference",
                       ("only the partials of the first warp", "the tree must start at stride 32")),)),
    # row_stats, warp shuffles
    Mistake("shuffle_forgets_other_warps", cell="row_stats_warp_kernel",
            kernel="reduction.row_stats_v3_warp_shuffle_kernel",
            edits=(("total = warp_sum[lane] if lane < WARPS_PER_BLOCK", "total = warp_sum[lane] if lane < 1"),),
            why="warp 0 sums only its own partial, not the other warps'",
            names="tree_partial", words=("only the partials of the first warp", "other warps"),
            feedback=(("row_stats_match_reference", ("only the partials of the first warp", "other warps")),)),
    Mistake("shuffle_starts_at_offset_8", cell="row_stats_warp_kernel",
            kernel="reduction.row_stats_v3_warp_shuffle_kernel",
            edits=(("    offset = WARP_SIZE // 2", "    offset = WARP_SIZE // 4"),),
            why="the shuffles start at offset 8: lanes 16..31 are never combined",
            names="shuffle_partial", words=("only lanes 0 ... 15 of each warp", "start at offset 16"),
            wrong_answer=True,
            feedback=(("row_stats_match_reference", ("only lanes 0 ... 15 of each warp", "start at offset 16")),)),
    Mistake("shuffle_thread_0_writes_warp_0", cell="row_stats_warp_kernel",
            kernel="reduction.row_stats_v3_warp_shuffle_kernel",
            edits=(("    if warp == 0:               # the whole warp 0 takes part, so the full mask is right\n"
                    "        largest = warp_max[lane] if lane < WARPS_PER_BLOCK else float32(-math.inf)\n"
                    "        total = warp_sum[lane] if lane < WARPS_PER_BLOCK else float32(0.0)\n"
                    "        offset = WARPS_PER_BLOCK // 2\n"
                    "        while offset > 0:\n"
                    "            largest = max(largest, cuda.shfl_down_sync(FULL_MASK, largest, offset))\n"
                    "            total += cuda.shfl_down_sync(FULL_MASK, total, offset)\n"
                    "            offset //= 2\n"
                    "        if lane == 0:\n"
                    "            row_max[row] = largest\n"
                    "            row_sum[row] = total",
                    "    if tid == 0:\n"
                    "        row_max[row] = warp_max[0]\n"
                    "        row_sum[row] = warp_sum[0]"),),
            why="thread 0 writes warp 0's partial and forgets the other warps'",
            samples=("subtly_wrong",),
            feedback=(("row_stats_match_reference", ("only the partials of the first warp", "other warps")),)),
)
