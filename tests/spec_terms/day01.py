"""Day 1's bounds: the guard of the last, partial block of axpb; the guarded row tile and the column loop of
normalize_rows; the block-stride loop, the tree and the warps of the two row reductions. Day 1 has no
``min(...)``: every row is a hand row."""

from . import Term

ASSIGNMENT = "day01_gpu_model"

_AXPB_CELL = "axpb_matches_reference_awkward_sizes"
_NORM_CELL = "normalize_rows_matches_reference_awkward_shapes"
_TREE_CELL = "row_stats_tree_matches_reference_awkward_shapes"
_WARP_CELL = "row_stats_warp_matches_reference_awkward_shapes"

# Both reductions walk the columns with the same block-stride loop; only the block size's name differs.
_COLUMNS = {"row_stats_tree_kernel": "range(tid, x.shape[1], TREE_THREADS)",
            "row_stats_warp_kernel": "range(tid, x.shape[1], SHUFFLE_THREADS)"}
_THREADS = {"row_stats_tree_kernel": "TREE_THREADS", "row_stats_warp_kernel": "SHUFFLE_THREADS"}
_GRADED = {"row_stats_tree_kernel": _TREE_CELL, "row_stats_warp_kernel": _WARP_CELL}


def _block_stride_rows(cell: str) -> tuple[Term, ...]:
    loop, threads, graded = _COLUMNS[cell], _THREADS[cell], _GRADED[cell]
    return (
        Term(cell, "the block-stride loop's last, partial block of columns", f"col < cols, cols % {threads} != 0",
             edits=((loop, f"range(tid, max(x.shape[1] - x.shape[1] % {threads}, min(x.shape[1], {threads})), "
                           f"{threads})"),),
             hidden=graded, visible=graded,
             why="cols not a multiple of the 64 threads: 70 columns (visible), 131 and 1 (hidden)"),
        Term(cell, "the block-stride loop's stride", f"cols > {threads} (more than one column per thread)",
             edits=((loop, f"range(tid, min(x.shape[1], {threads}), {threads})"),),
             hidden=graded, visible=graded,
             why="more columns than threads: 70 columns (visible), 131 (hidden)"),
        Term(cell, "the running max of a thread with no column", "-inf, not 0 (cols < blockDim.x)",
             edits=(("largest = float32(-math.inf)\n", "largest = float32(0.0)\n"),),
             hidden=graded, visible=graded,
             why="an all-negative row: row 2 of the (3, 70) case (visible), a (1, 40) row (hidden)"),
    )


TABLE = (
    # ------------------------------------------------------------------ exercise 1: axpb
    Term("axpb_kernel", "the guard of the last, partial block", "i < x.size",
         edits=(("if i < x.size:", "if True:"),), hidden=_AXPB_CELL, visible=_AXPB_CELL,
         why="n not a multiple of 128: n = 127, 129 and 1 (visible), 1, 127, 129 and 1000 + r (hidden); the idle "
             "threads read past x"),
    Term("axpb_kernel", "the guard's edge", "i < n (i = n excluded)",
         edits=(("if i < x.size:", "if i <= x.size:"),), hidden=_AXPB_CELL, visible=_AXPB_CELL,
         why="thread i = n exists whenever 128 does not divide n: n = 127 reads x[127]"),
    Term("axpb_kernel", "the guard's edge", "i < n (i = n - 1 included)",
         edits=(("if i < x.size:", "if i < x.size - 1:"),), hidden=_AXPB_CELL, visible=_AXPB_CELL,
         why="the last element is written: it stays poisoned for every n"),

    # ------------------------------------------------------------------ exercise 2: normalize_rows
    Term("normalize_rows_kernel", "the guard of the last, partial row tile", "row < rows",
         edits=(("if row < x.shape[2]:", "if True:"),), hidden=_NORM_CELL, visible=_NORM_CELL,
         why="rows not a multiple of ROWS_PER_BLOCK = 4: (2, 3, 7, 40) and (1, 1, 1, 1) (visible), also 9 rows "
             "(hidden); the tile's extra rows read past x"),
    Term("normalize_rows_kernel", "the row guard's edge", "row < rows (row = rows excluded)",
         edits=(("if row < x.shape[2]:", "if row <= x.shape[2]:"),), hidden=_NORM_CELL, visible=_NORM_CELL,
         why="a partial row tile has a thread row on row = rows: 1 row of a tile of 4"),
    Term("normalize_rows_kernel", "the column loop's end", "col < head_dim (head_dim < 32)",
         edits=(("range(cuda.threadIdx.x, x.shape[3], cuda.blockDim.x)",
                 "range(cuda.threadIdx.x, cuda.blockDim.x, cuda.blockDim.x)"),),
         hidden=_NORM_CELL, visible=_NORM_CELL,
         why="head_dim below the 32 threads of x: head_dim 1 (visible), 1 and 7 (hidden); the idle threads read "
             "past the row"),
    Term("normalize_rows_kernel", "the column loop's last, partial stride", "col < head_dim (head_dim > 32)",
         edits=(("range(cuda.threadIdx.x, x.shape[3], cuda.blockDim.x)",
                 "range(cuda.threadIdx.x, max(x.shape[3] - x.shape[3] % cuda.blockDim.x, "
                 "min(x.shape[3], cuda.blockDim.x)), cuda.blockDim.x)"),),
         hidden=_NORM_CELL, visible=_NORM_CELL,
         why="head_dim above 32 and not a multiple of it: 40 (visible), 40 and 70 (hidden)"),

    # ------------------------------------------------------------------ exercise 3a: the shared-memory tree
    *_block_stride_rows("row_stats_tree_kernel"),
    Term("row_stats_tree_kernel", "the tree's guard", "tid < half",
         edits=(("if tid < half:", "if tid <= half:"),), hidden=_TREE_CELL, visible=_TREE_CELL,
         why="thread half reads partial[2 * half]: past the 64 entries at the first level, on every shape"),
    Term("row_stats_tree_kernel", "the tree's first level", "half = TREE_THREADS // 2",
         edits=(("half = TREE_THREADS // 2", "half = TREE_THREADS // 4"),), hidden=_TREE_CELL, visible=_TREE_CELL,
         why="partials of threads 32 ... 63 count: more than 32 columns, 70 (visible), 131, 64, 40 (hidden)"),
    Term("row_stats_tree_kernel", "the tree's last level", "half > 0 (half = 1 included)",
         edits=(("while half > 0:", "while half > 1:"),), hidden=_TREE_CELL, visible=_TREE_CELL,
         why="the partial of thread 1 counts: any row of 2 columns or more"),

    # ------------------------------------------------------------------ exercise 3b: warp shuffles
    *_block_stride_rows("row_stats_warp_kernel"),
    Term("row_stats_warp_kernel", "the shuffles' last step", "offset > 0 (offset = 1 included)",
         edits=(("offset = WARP_SIZE // 2\n    while offset > 0:", "offset = WARP_SIZE // 2\n    while offset > 1:"),),
         hidden=_WARP_CELL, visible=_WARP_CELL, why="lane 1's value counts: any row of 2 columns or more"),
    Term("row_stats_warp_kernel", "the warps that warp 0 combines", "lane < WARPS_PER_BLOCK (warp 1 included)",
         edits=(("if lane < WARPS_PER_BLOCK else", "if lane < 1 else"),), hidden=_WARP_CELL, visible=_WARP_CELL,
         why="a row with columns in warp 1 (cols > 32): 70 columns (visible), 131, 64, 40 (hidden)"),
    Term("row_stats_warp_kernel", "the warps that warp 0 combines", "lane < WARPS_PER_BLOCK (lane 2 excluded)",
         edits=(("if lane < WARPS_PER_BLOCK else", "if lane <= WARPS_PER_BLOCK else"),),
         hidden=_WARP_CELL, visible=_WARP_CELL,
         why="lane WARPS_PER_BLOCK reads past the shared arrays of 2 warps, on every shape"),
    Term("row_stats_warp_kernel", "the max a lane past the warps brings", "-inf, not 0 (lanes >= WARPS_PER_BLOCK)",
         edits=(("if lane < WARPS_PER_BLOCK else float32(-math.inf)", "if lane < WARPS_PER_BLOCK else float32(0.0)"),),
         exempt=True,
         why="warp 0 combines its WARPS_PER_BLOCK = 2 partials with one shuffle (offset 1): only lanes 0 and 1 "
             "reach lane 0's result, so what a lane past the warps brings never counts on any input; it guards "
             "a combine that starts at offset WARP_SIZE // 2"),
)
