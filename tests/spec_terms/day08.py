"""Day 8's bounds: the mixed-precision prefill (day 7's blocks of positions and heads, its key loop, its
partial tiles and causal mask), the paged decode over an fp16 cache (sub-groups of heads, partitions,
pages, channels) and the fp8 quantizer (its rounding, saturation and subnormal edges, groups longer than a
block, the scale of a group of zeros)."""

from . import Term

ASSIGNMENT = "day08_mixed_precision"

# prefill_kernel
_POSITIONS = "min(TILE_POS, ROWS_MAX // heads_per_block)"
_KEYS = "min(kv_lens[b], k.shape[2])"
_END = "min(kv_end, tile_start + positions, n_queries)"
_TILE = "min(TILE_KV, kv_end - kv_start)"
_DIAGONAL = "min(n_tile, position - kv_start + 1)"
# decode_kernel
_HEADS = "min(heads_per_block, (kv_head + 1) * group - first)"
_PARTITION = "min(start + partition_size, context_lens[s])"

_PREFILL = (
    Term("prefill_kernel", _POSITIONS, "TILE_POS", hidden="prefill_matches_reference",
         visible="prefill_matches_reference",
         why="a group of at most 3 heads (ROWS_MAX // heads_per_block > TILE_POS) over more than TILE_POS "
             "positions: group 2 with N = 66 (hidden), group 1 with N = 65 (visible); a block of 256 "
             "positions leaves rows 64 ... unwritten"),
    Term("prefill_kernel", _POSITIONS, "ROWS_MAX // heads_per_block", hidden="prefill_matches_reference",
         visible="prefill_matches_reference",
         why="a group of 5 or more heads per block over more than ROWS_MAX // heads_per_block positions: group "
             "8 with N = 35 and group 257 with N = 2 (hidden), group 257 with N = 2 (visible)"),
    Term("prefill_kernel", _KEYS, "kv_lens[b]", hidden="prefill_matches_reference",
         visible="prefill_matches_reference", why="a sequence shorter than M: kv_lens [19] of 20, [30, 0] of 30 "
                                                  "(hidden), [17, 0] of 17 (visible)"),
    Term("prefill_kernel", _KEYS, "k.shape[2]", exempt=True,
         why="kv_lens[b] <= M is the launcher's precondition (it refuses longer lengths), so this term never "
             "decides; it guards a direct launch of the kernel"),
    Term("prefill_kernel", _END, "kv_end", hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="causal with kv_lens below a row's position: kv_lens [19] of M = 20 under N = 66 (hidden), [30] of "
             "M = 40 under N = 65 and [1] of M = 3 under N = 2 (visible): rows past kv_len must not see the keys "
             "past it, nor read past M"),
    Term("prefill_kernel", _END, "tile_start + positions", exempt=True,
         why="values cannot change: each row's keys stop at min(n_tile, position - kv_start + 1), so the tiles "
             "past the block's last row are loaded and used by no row; it saves loads only, and day 8 grades "
             "no prefill traffic (its spec's budget is the precision rule)"),
    Term("prefill_kernel", _END, "n_queries", exempt=True,
         why="values cannot change: a short last query tile with more keys than queries loads keys past row N - "
             "1 that no row uses (each row stops at its position); it saves loads only, and day 8 grades no "
             "prefill traffic (its spec's budget is the precision rule)"),
    Term("prefill_kernel", _TILE, "TILE_KV", hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="more than one key tile: M = 20 and more"),
    Term("prefill_kernel", _TILE, "kv_end - kv_start", hidden="prefill_matches_reference",
         visible="prefill_matches_reference", why="a last, partial key tile: M = 20 is not a multiple of TILE_KV"),
    Term("prefill_kernel", _DIAGONAL, "n_tile", hidden="prefill_matches_reference",
         visible="prefill_matches_reference",
         why="causal rows past the end of a key tile: rows 16 ... of N = 20 over full tiles of 16 keys"),
    Term("prefill_kernel", _DIAGONAL, "position - kv_start + 1", hidden="prefill_matches_reference",
         visible="prefill_matches_reference", why="the diagonal tile: row i must not see key i + 1"),
    Term("prefill_kernel", "the diagonal's edge", "position - kv_start + 1 (key j = i included)",
         edits=(("min(n_tile, position - kv_start + 1)", "min(n_tile, position - kv_start)"),),
         hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="row i sees key i: row 0 sees exactly key 0"),
    Term("prefill_kernel", "the guard of the last, partial tile of positions", "position < n_queries",
         edits=(("active = position < n_queries and head_in_group < group", "active = head_in_group < group"),),
         hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="N not a multiple of the block's positions: N = 20 rows in a block of 32 positions"),
    Term("prefill_kernel", "the guard of the last, partial sub-group of heads", "head_in_group < group",
         edits=(("active = position < n_queries and head_in_group < group", "active = position < n_queries"),),
         hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="a group above ROWS_MAX split unevenly: 257 heads in sub-groups of 129 and 128, so the second "
             "block's last thread owns no head"),
    Term("prefill_kernel", "a row with no key gives 0", "row_sum > 0",
         edits=(("if row_sum > 0:", "if True:"),), hidden="prefill_matches_reference",
         visible="prefill_matches_reference", why="kv_lens of 0: [30, 0] (hidden), [17, 0] (visible)"),
)

_DECODE = (
    Term("decode_kernel", _HEADS, "heads_per_block", hidden="decode_matches_reference",
         visible="decode_matches_reference",
         why="a group above GROUP_MAX in sub-groups: group 9 (5 and 4 heads), whose first block must not take 9"),
    Term("decode_kernel", _HEADS, "(kv_head + 1) * group - first", hidden="decode_matches_reference",
         visible="decode_matches_reference",
         why="a last sub-group with fewer heads than heads_per_block: group 9's second block serves 4, not 5"),
    Term("decode_kernel", _PARTITION, "start + partition_size", hidden="decode_matches_reference",
         visible="decode_matches_reference", why="two partitions or more: 11 tokens in partitions of 8"),
    Term("decode_kernel", _PARTITION, "context_lens[s]", hidden="decode_matches_reference",
         visible="decode_matches_reference",
         why="a last, partial partition: 11 tokens in partitions of 8 (the slots past the context hold NaN)"),
    Term("decode_kernel", "the last, partial page", "tokens end at context_lens[s], not at the end of its page",
         edits=(("min(start + partition_size, context_lens[s])",
                 "min(start + partition_size, (context_lens[s] + block_size - 1) // block_size * block_size)"),),
         hidden="decode_matches_reference", visible="decode_matches_reference",
         why="a context that ends inside a page: 11 tokens in pages of 4 (its last page's free slot holds NaN)"),
    Term("decode_kernel", "the guard of the lanes' channels", "c < d (head_dim below WARP * CHANNELS)",
         edits=(("            if c < d:\n                k_row[ch]",
                 "            if True:\n                k_row[ch]"),),
         hidden="decode_matches_reference", visible="decode_matches_reference",
         why="head_dim below HEAD_DIM_MAX: d = 8 reads no channel 8"),
    Term("decode_kernel", "a partition with no token writes -inf, 0 and 0", "block_max > -math.inf",
         edits=(("if block_max > -math.inf:", "if True:"),), hidden="decode_matches_reference",
         visible="decode_matches_reference",
         why="a partition past a context's end: context_lens [6, 0, 3] in partitions of 4 (hidden), [3, 0] "
             "(visible)"),
)

_QUANTIZE = (
    Term("quantize_kernel", "halfway between two codes", "ties to the even code",
         edits=(("rest > 0.5 or (rest == 0.5 and q & 1)", "rest >= 0.5"),),
         hidden="quantize_rounds_to_nearest_even", visible="quantize_rounds_to_nearest_even",
         why="every midpoint between neighbouring e4m3 values (the visible check: those up to 2)"),
    Term("quantize_kernel", "the top of a binade", "a mantissa rounding up to 8 carries into the exponent",
         edits=(("_round_half_even(f * float32(16.0)) - 8)", "min(_round_half_even(f * float32(16.0)), 15) - 8)"),),
         hidden="quantize_rounds_to_nearest_even", visible="quantize_rounds_to_nearest_even",
         why="values above the largest mantissa of a binade, nearer the next power of two: 1.9375 + and the "
             "tie 1.9375 between 1.875 and 2"),
    Term("quantize_kernel", "saturation at the largest finite value", "|y| >= 448 gives +-448",
         edits=(("elif a >= E4M3_MAX:", "elif a == math.inf:"),),
         hidden="quantize_rounds_to_nearest_even", visible="quantize_rounds_to_nearest_even",
         why="finite values past 448's rounding range: 480 and 1e30 (hidden), 500 and -1e30 (visible)"),
    Term("quantize_kernel", "the subnormal range", "|y| < 2**-6 in steps of 2**-9",
         edits=(("code = _round_half_even(a * float32(512.0))", "code = int32(0)"),),
         hidden="quantize_rounds_to_nearest_even", visible="quantize_rounds_to_nearest_even",
         why="the e4m3 subnormals and their midpoints, and 2**-10"),
    Term("quantize_kernel", "a group longer than the block: its codes", "elements t + FP8_THREADS, ...",
         edits=(("for i in range(tid, n, FP8_THREADS):\n        codes",
                 "for i in range(tid, min(n, FP8_THREADS), FP8_THREADS):\n        codes"),),
         hidden="quantize_rounds_to_nearest_even", visible="quantize_rounds_to_nearest_even",
         why="pages of more than FP8_THREADS elements, the last round of threads partial: 160 = 4 x 40"),
    Term("quantize_kernel", "a group longer than the block: its amax", "elements t + FP8_THREADS, ...",
         edits=(("for i in range(tid, n, FP8_THREADS):\n            amax",
                 "for i in range(tid, min(n, FP8_THREADS), FP8_THREADS):\n            amax"),),
         hidden="quantize_computes_scales", visible="quantize_computes_scales",
         why="pages of 160 elements whose largest |x| is the last one"),
    Term("quantize_kernel", "the scale of a group of zeros", "amax > 0 (else 1)",
         edits=(("if amax > 0 else float32(1.0)", "if amax >= 0 else float32(1.0)"),),
         hidden="quantize_computes_scales", visible="quantize_computes_scales",
         why="a page of zeros: its scale is 1, not 0"),
)

TABLE = _PREFILL + _DECODE + _QUANTIZE
