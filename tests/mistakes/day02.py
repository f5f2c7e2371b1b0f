"""Day 2's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day02_naive_attention"

TABLE = (
    # scores
    Mistake("scores_without_scale", cell="scores_kernel", kernel="attention.scores_kernel",
            edits=(("s[b, h, i, j] = acc * scale", "s[b, h, i, j] = acc"),),
            why="the scale is forgotten: S is off by the constant factor 1/scale",
            names="scale", words=("sqrt(8)", "scale is missing"),
            samples=("wrong_subtle",)),
    Mistake("scores_transposed", cell="scores_kernel", kernel="attention.scores_kernel",
            edits=(("s[b, h, i, j] = acc * scale", "s[b, h, j, i] = acc * scale"),),
            why="S written transposed: row and col swapped",
            names="transposed", words=("transpose", "row and col swapped")),
    Mistake("scores_without_guard", cell="scores_kernel", kernel="attention.scores_kernel",
            edits=(("    if flat >= q.shape[2] * n_keys:\n        return\n", ""),),
            why="no guard: the threads of the last block past N*M read past the end of q",
            wrong_answer=True),
    # softmax_rows
    Mistake("softmax_sum_tree_starts_at_a_quarter", cell="softmax_rows_kernel", kernel="softmax.softmax_rows_kernel",
            edits=(("partial[tid] = thread_sum\n    cuda.syncthreads()\n    stride = SOFTMAX_THREADS // 2",
                    "partial[tid] = thread_sum\n    cuda.syncthreads()\n    stride = SOFTMAX_THREADS // 4"),),
            why="the tree of the row sum starts at a quarter of the block: some threads' partials are dropped",
            names="row_sums", words=("sum above 1", "drops some threads' partials")),
    Mistake("softmax_without_max_subtraction", cell="softmax_rows_kernel", kernel="softmax.softmax_rows_kernel",
            edits=(("    row_max = partial[0]\n    cuda.syncthreads()  # every thread",
                    "    row_max = float32(0.0)\n    cuda.syncthreads()  # every thread"),),
            why="the row max is taken as 0: exp overflows on large logits",
            names="nonfinite", words=("NaN", "subtract the row max before exp")),
    Mistake("softmax_rows_not_divided", cell="softmax_rows_kernel", kernel="softmax.softmax_rows_kernel",
            edits=(("out[row, j] = math.exp(x[row, j] - row_max) / row_sum", "out[row, j] = math.exp(x[row, j] - row_max)"),),
            why="the rows are never divided by their sum",
            wrong_answer=True),
    Mistake("softmax_exp_without_row_max", cell="softmax_rows_kernel", kernel="softmax.softmax_rows_kernel",
            edits=(("thread_sum += math.exp(x[row, j] - row_max)", "thread_sum += math.exp(x[row, j])"),
                   ("out[row, j] = math.exp(x[row, j] - row_max) / row_sum",
                    "out[row, j] = math.exp(x[row, j]) / row_sum")),
            why="the row maximum is not subtracted: right on moderate logits, overflows on logits of size 1e4",
            samples=("wrong_subtle",)),
    # pv
    Mistake("pv_without_guard", cell="pv_kernel", kernel="attention.pv_kernel",
            edits=(("    if flat >= p.shape[2] * head_dim:\n        return\n", ""),),
            why="no guard: the threads of the last block past N*d read past the end of p",
            wrong_answer=True),
    Mistake("pv_sums_over_queries", cell="pv_kernel", kernel="attention.pv_kernel",
            edits=(("for j in range(v.shape[2]):", "for j in range(p.shape[2]):"),),
            why="the sum runs over N keys instead of M (the loop bound uses the wrong dimension)",
            samples=("wrong_subtle",)),
)
