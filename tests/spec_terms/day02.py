"""Day 2's bounds: the guard of the flat grid's last, partial block in the scores and PV kernels and the
dimension each flat index is split by; the block-stride loops of the row softmax, each pass's last
partial stride, and its tree. Day 2 has no ``min(...)``: every row is a hand row."""

from . import Term

ASSIGNMENT = "day02_naive_attention"

_SCORES = "scores_matches_reference"
_SOFTMAX = "softmax_rows_matches_reference"
_STABLE = "softmax_rows_large_logits"
_PV = "pv_matches_reference"

# The softmax's three passes walk the columns with the same loop; each pass is told apart by the line before.
_LOOP = "for j in range(tid, cols, SOFTMAX_THREADS):"
_PARTIAL = "for j in range(tid, max(cols - cols % SOFTMAX_THREADS, min(cols, SOFTMAX_THREADS)), SOFTMAX_THREADS):"
_PASSES = {"the max pass": "thread_max = float32(-math.inf)\n    ",
           "the sum pass": "thread_sum = float32(0.0)\n    ",
           "the write pass": "# Pass 3: normalise.\n    "}

TABLE = (
    # ------------------------------------------------------------------ exercise 1: the scores
    Term("scores_kernel", "the guard of the flat grid's last, partial block", "flat < N * M",
         edits=(("if flat >= q.shape[2] * n_keys:", "if False:"),), hidden=_SCORES, visible=_SCORES,
         why="N * M not a multiple of THREADS = 64: 6 x 9 = 54 (visible), 1, 13, 350, 99, 12 (hidden); the idle "
             "threads read past q"),
    Term("scores_kernel", "the guard's edge", "flat < N * M (flat = N * M excluded)",
         edits=(("if flat >= q.shape[2] * n_keys:", "if flat > q.shape[2] * n_keys:"),),
         hidden=_SCORES, visible=_SCORES, why="thread flat = N * M exists whenever 64 does not divide N * M"),
    Term("scores_kernel", "the row length of the flat index", "M (not N) scores per row",
         edits=(("n_keys = k.shape[2]", "n_keys = q.shape[2]"),), hidden=_SCORES, visible=_SCORES,
         why="M != N: N = 6, M = 9 (visible), 13 x 1 and 5 x 70 (hidden)"),

    # ------------------------------------------------------------------ exercise 2: the row softmax
    Term("softmax_rows_kernel", "the block-stride loops' last, partial stride", "j < cols in every pass",
         edits=((_LOOP, _PARTIAL),), hidden=_SOFTMAX, visible=_SOFTMAX,
         why="rows longer than the block of 32 and not a multiple of it: 45 columns (visible), 33 and 100 "
             "(hidden); their last columns stay poisoned"),
    *(Term("softmax_rows_kernel", "the last, partial stride of one pass", f"j < cols in {name}",
           edits=((before + _LOOP, before + _PARTIAL),),
           hidden=_STABLE if name == "the max pass" else _SOFTMAX,
           visible=_STABLE if name == "the max pass" else _SOFTMAX,
           why=("a row longer than 32 whose largest logit, 300 above the others, is in the last, partial stride: "
                "column 37 of 40 (visible), 34 of 37 (hidden); a max that skips it overflows exp (to inf in "
                "float32, then NaN)"
                if name == "the max pass" else
                "rows longer than 32 and not a multiple of it: 45 columns (visible), 33 and 100 (hidden)"))
      for name, before in _PASSES.items()),
    Term("softmax_rows_kernel", "the max a thread starts from", "-inf, not 0 (a row of negative logits)",
         edits=(("thread_max = float32(-math.inf)", "thread_max = float32(0.0)"),),
         hidden=_STABLE, visible=_STABLE,
         why="a row whose logits are all below -104, where exp(x - 0) underflows to 0 in float32: logits near "
             "-1e4, 20 columns (visible, threads without a column too) and 37 (hidden)"),
    Term("softmax_rows_kernel", "the trees' guard", "tid < stride",
         edits=(("if tid < stride:", "if tid <= stride:"),), hidden=_SOFTMAX, visible=_SOFTMAX,
         why="thread stride reads partial[2 * stride]: past the 32 entries at the first level, on every shape"),
    Term("softmax_rows_kernel", "the trees' last level", "stride > 0 (stride = 1 included)",
         edits=(("while stride > 0:", "while stride > 1:"),), hidden=_SOFTMAX, visible=_SOFTMAX,
         why="the partials of thread 1 count: any row of 2 columns or more"),

    # ------------------------------------------------------------------ exercise 3: P V
    Term("pv_kernel", "the guard of the flat grid's last, partial block", "flat < N * d",
         edits=(("if flat >= p.shape[2] * head_dim:", "if False:"),), hidden=_PV, visible=_PV,
         why="N * d not a multiple of THREADS = 64: 6 x 5 = 30 (visible), 1 x 3 and others (hidden); the idle "
             "threads read past p"),
    Term("pv_kernel", "the guard's edge", "flat < N * d (flat = N * d excluded)",
         edits=(("if flat >= p.shape[2] * head_dim:", "if flat > p.shape[2] * head_dim:"),),
         hidden=_PV, visible=_PV, why="thread flat = N * d exists whenever 64 does not divide N * d"),
    Term("pv_kernel", "the sum over the keys", "j < M (not N)",
         edits=(("for j in range(v.shape[2]):", "for j in range(p.shape[2]):"),), hidden=_PV, visible=_PV,
         why="M != N: N = 6, M = 9 (visible), 13 x 1 and 5 x 40 (hidden)"),
)
