"""Day 3's bounds: the online softmax's block-stride loops, its empty states (-inf, 0) and its fully masked
rows; the fused kernel's guarded query rows, its causal key end ``min(i + 1, n_keys)`` and the diagonal's
edge, and its empty key sequence."""

from . import Term

ASSIGNMENT = "day03_online_softmax"

_ONLINE = "online_softmax_matches_two_pass"
_MASKED = "online_softmax_masked_rows"
_FUSED = "fused_rows_matches_reference"
_CAUSAL = "fused_rows_causal"
_EDGES = "fused_rows_edge_cases"
_KEY_END = "min(i + 1, n_keys)"

_LOOP = "for j in range(tid, cols, SOFTMAX_THREADS):"
_PARTIAL = "for j in range(tid, max(cols - cols % SOFTMAX_THREADS, min(cols, SOFTMAX_THREADS)), SOFTMAX_THREADS):"

TABLE = (
    # ------------------------------------------------------------------ exercise 1: online softmax
    Term("softmax_online_kernel", "the block-stride loops' last, partial stride", "j < cols in both passes",
         edits=((_LOOP, _PARTIAL),), hidden=_ONLINE, visible=_ONLINE,
         why="rows longer than the block of 32 and not a multiple of it: 40 columns (visible), 33 and 100 "
             "(hidden)"),
    Term("softmax_online_kernel", "the last, partial stride of the first pass", "j < cols in the (m, l) pass",
         edits=(("l = float32(0.0)\n    " + _LOOP, "l = float32(0.0)\n    " + _PARTIAL),),
         hidden=_ONLINE, visible=_ONLINE,
         why="rows longer than 32 and not a multiple of it: the sum misses the last columns, 40 (visible), 33 and "
             "100 (hidden)"),
    Term("softmax_online_kernel", "the empty state of a thread's first pass", "m_new != -inf",
         edits=(("if m_new != -math.inf:  # while", "if True:  # while"),), hidden=_MASKED, visible=_MASKED,
         why="a thread whose columns are all -inf: the causal rows of a 4x4 (visible) and a 36x36 matrix (hidden)"),
    Term("softmax_online_kernel", "the empty state of the merge", "m_new != -inf (two empty states)",
         edits=(("            if m_new != -math.inf:\n                run_sum",
                 "            if True:\n                run_sum"),), hidden=_MASKED, visible=_MASKED,
         why="two threads with nothing but -inf or no column at all: rows of 4 (visible) and 36 (hidden) columns "
             "leave threads without a column"),
    Term("softmax_online_kernel", "the fully masked row", "row_sum > 0",
         edits=(("if row_sum > 0:", "if True:"),), hidden=_MASKED, visible=_MASKED,
         why="a row of nothing but -inf gets zeros: a fully masked row of the 36x36 matrix and rows of length 1 "
             "(hidden), a fully masked fifth row under the 4x4 causal matrix (visible)"),
    Term("softmax_online_kernel", "the merge's guard", "tid < stride",
         edits=(("if tid < stride:", "if tid <= stride:"),), hidden=_ONLINE, visible=_ONLINE,
         why="thread stride reads run_max[2 * stride]: past the 32 entries at the first level, on every shape"),
    Term("softmax_online_kernel", "the merge's last level", "stride > 0 (stride = 1 included)",
         edits=(("while stride > 0:", "while stride > 1:"),), hidden=_ONLINE, visible=_ONLINE,
         why="the state of thread 1 counts: any row of 2 columns or more"),

    # ------------------------------------------------------------------ exercise 2: one query row per thread
    Term("attention_v2_fused_rows_kernel", _KEY_END, "i + 1", hidden=_CAUSAL, visible=_CAUSAL,
         why="causal: row i must not see the keys after it, N = M = 7 (visible), 33, 9 x 4 and 4 x 11 (hidden)"),
    Term("attention_v2_fused_rows_kernel", _KEY_END, "n_keys", hidden=_CAUSAL, visible=_CAUSAL,
         why="causal with N > M: the rows i >= M see all M keys and no more, N = 7 over M = 4 (visible), 9 over 4 "
             "(hidden)"),
    Term("attention_v2_fused_rows_kernel", "the diagonal's edge", "i + 1 (key j = i included)",
         edits=((_KEY_END, "min(i, n_keys)"),), hidden=_CAUSAL, visible=_CAUSAL,
         why="row i sees key i: row 0 sees exactly key 0, so O[0] = V[0]"),
    Term("attention_v2_fused_rows_kernel", "the guard of the last, partial block of rows", "i < N",
         edits=(("if i >= q.shape[2]:", "if False:"),), hidden=_FUSED, visible=_FUSED,
         why="N not a multiple of THREADS = 64: N = 5 (visible), 1, 70, 5, 9, 3 (hidden); the idle threads read "
             "past q"),
    Term("attention_v2_fused_rows_kernel", "the guard's edge", "i < N (i = N excluded)",
         edits=(("if i >= q.shape[2]:", "if i > q.shape[2]:"),), hidden=_FUSED, visible=_FUSED,
         why="thread i = N exists whenever 64 does not divide N"),
    Term("attention_v2_fused_rows_kernel", "the key loop's end without the mask", "j < M (not N)",
         edits=(("n_keys = k.shape[2]", "n_keys = q.shape[2]"),), hidden=_FUSED, visible=_FUSED,
         why="M != N: N = 5, M = 9 (visible), 70 x 2 and 5 x 40 (hidden)"),
    Term("attention_v2_fused_rows_kernel", "the row that sees no key", "l > 0 (M = 0 gives zeros)",
         edits=(("if l > 0:", "if True:"),), hidden=_EDGES, visible=_EDGES,
         why="an empty key sequence: M = 0 under 2 queries (visible) and 4 (hidden)"),
)
