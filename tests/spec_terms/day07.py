"""Day 7's bounds: the GQA prefill's tiling, key loop, partial tiles and causal mask; the decode partition
kernel's heads of a block, its partition of tokens and its (head, channel) pairs."""

from . import Term

ASSIGNMENT = "day07_grouped_query_attention"
_PREFILL, _DECODE = "prefill_kernel", "decode_kernel"
_POSITIONS = "min(TILE_POS, ROWS_MAX // heads_per_block)"
_KEYS = "min(kv_lens[b], k.shape[2])"
_END = "min(kv_end, tile_start + positions, n_queries)"
_TILE = "min(TILE_KV, kv_end - kv_start)"
_DIAGONAL = "min(n_tile, position - kv_start + 1)"
_HEADS = "min(heads_per_block, (kv_head + 1) * group - first)"
_PARTITION = "min(start + partition_size, context_lens[s])"

TABLE = (
    # the prefill
    Term(_PREFILL, _POSITIONS, "TILE_POS", hidden="prefill_matches_reference", visible="prefill_traffic",
         why="at most 4 heads per block (ROWS_MAX // heads_per_block >= TILE_POS) and N > TILE_POS: group 2 "
             "with N = 66 (hidden), group 2 with N = 100 (visible)"),
    Term(_PREFILL, _POSITIONS, "ROWS_MAX // heads_per_block", hidden="prefill_matches_reference",
         visible="prefill_every_group",
         why="more than 4 heads per block, N past the block's positions: group 8 with N = 35 (32 positions) "
             "hidden, group 257 (129 heads per block, 1 position) with N = 2 visible"),
    Term(_PREFILL, _KEYS, "kv_lens[b]", hidden="prefill_matches_reference", visible="prefill_every_group",
         why="kv_lens below M: [19] of 20 (hidden), [14, 5] of 14 (visible)"),
    Term(_PREFILL, _KEYS, "k.shape[2]", exempt=True,
         why="kv_lens[b] <= M is the launcher's precondition (it refuses longer lengths), so this term never "
             "decides; it guards a direct launch of the kernel"),
    Term(_PREFILL, _END, "kv_end", hidden="prefill_every_group", visible="prefill_every_group",
         why="causal with kv_lens below N: kv_lens [0, 11] with N = 66 (hidden), [14, 5] with N = 12 (visible)"),
    Term(_PREFILL, _END, "tile_start + positions", hidden="prefill_traffic", visible="prefill_traffic",
         why="causal, several query tiles, keys past the first tile's end: the first block must not load the "
             "keys of later positions (counted traffic only): group 4, N = 90, M = 120 (hidden), group 2, "
             "N = 100, M = 128 (visible); 17 % and 22 % over the budget, past its 10 % slack"),
    Term(_PREFILL, _END, "n_queries", hidden="prefill_traffic", visible="prefill_traffic",
         why="causal, the last query tile partial and M > N: the last block's last position is N - 1, not "
             "tile_start + positions - 1 (counted traffic only): N = 90 of M = 120 (hidden), 100 of 128 "
             "(visible); 19 % and 17 % over the budget"),
    Term(_PREFILL, _TILE, "TILE_KV", hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="more than TILE_KV keys: M = 20"),
    Term(_PREFILL, _TILE, "kv_end - kv_start", hidden="prefill_matches_reference",
         visible="prefill_matches_reference", why="a last, partial key tile: M = 20 is not a multiple of TILE_KV"),
    Term(_PREFILL, _DIAGONAL, "n_tile", hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="causal rows past the end of the key tile: N = 20 positions over 20 keys (row 19 of tile 0)"),
    Term(_PREFILL, _DIAGONAL, "position - kv_start + 1", hidden="prefill_matches_reference",
         visible="prefill_matches_reference", why="causal: row i must not see key i + 1"),
    Term(_PREFILL, "the diagonal's edge", "position - kv_start + 1 (key j = i included)",
         edits=((_DIAGONAL, "min(n_tile, position - kv_start)"),),
         hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="row i sees key i: row 0 sees exactly key 0"),
    Term(_PREFILL, "the guard of the last, partial query tile", "position < n_queries",
         edits=(("active = position < n_queries and head_in_group < group", "active = head_in_group < group"),),
         hidden="prefill_matches_reference", visible="prefill_matches_reference",
         why="N is not a multiple of the block's positions (N = 20 of 64): the rows past N own no position"),
    Term(_PREFILL, "the guard of the last, smaller sub-group", "head_in_group < group",
         edits=(("active = position < n_queries and head_in_group < group", "active = position < n_queries"),),
         hidden="prefill_matches_reference", visible="prefill_every_group",
         why="a group above ROWS_MAX split into sub-groups of 129 and 128 heads: group 257 (hidden and "
             "visible); the last row of the second block owns no head"),
    Term(_PREFILL, "the tile's load: rows fewer than its elements", "idx in range(t, n_tile * d, rows)",
         edits=(("range(t, n_tile * d, rows)", "range(t, min(n_tile * d, rows), rows)"),),
         hidden="prefill_every_group", visible="prefill_every_group",
         why="group 1 with head_dim 8: 64 rows load a tile of 16 x 8 = 128 elements"),
    Term(_PREFILL, "a row with no key", "row_sum > 0",
         edits=(("if row_sum > 0:", "if True:"),),
         hidden="prefill_every_group", visible="prefill_every_group",
         why="kv_lens of 0: the row's sum is 0 and its output 0: kv_lens [0, 11] (hidden), [4, 0] (visible)"),
    Term(_PREFILL, "a key tile past a row's position", "n_valid > 0",
         edits=(("if active and n_valid > 0:", "if active:"),), exempt=True,
         why="a row meets a tile past its position only after tile 0, where it saw key 0 (key 0 <= its "
             "position): its running maximum is finite, so a tile with no key rescales by exp(0) = 1 and adds "
             "nothing; the values and the traffic are the same"),
    # the decode
    Term(_DECODE, _HEADS, "heads_per_block", hidden="decode_every_group", visible="decode_every_group",
         why="a group above GROUP_MAX (two blocks per KV head): group 10 (hidden), 9 (visible); the first "
             "block must serve only its heads_per_block heads"),
    Term(_DECODE, _HEADS, "(kv_head + 1) * group - first", hidden="decode_traffic", visible="decode_every_group",
         why="a group above GROUP_MAX that does not split evenly: group 9 in blocks of 5 and 4 heads"),
    Term(_DECODE, _PARTITION, "start + partition_size", hidden="decode_matches_reference",
         visible="decode_matches_reference", why="a context of several partitions: 11 tokens in partitions of 8"),
    Term(_DECODE, _PARTITION, "context_lens[s]", hidden="decode_matches_reference",
         visible="decode_matches_reference",
         why="a context that is not a multiple of partition_size: 11 tokens in partitions of 8"),
    Term(_DECODE, "a partition with no token", "block_max > -inf",
         edits=(("if block_max > -math.inf:", "if True:"),),
         hidden="decode_matches_reference", visible="decode_every_group",
         why="a partition past its context's end (3 tokens in partitions of 4 next to 6), or a context of 0: "
             "its partials are -inf, 0 and 0, not exp(-inf - -inf) = NaN"),
    Term(_DECODE, "the heads of the block", "i < n_heads (the query loaded)",
         edits=(("if i < n_heads and c < d", "if c < d"),),
         hidden="decode_matches_reference", visible="decode_matches_reference",
         why="a group below GROUP_MAX: the last KV head's block has no query head past n_heads"),
    Term(_DECODE, "the heads of the block", "i < n_heads (the token scored)",
         edits=(("            if i < n_heads:\n                partial",
                 "            if True:\n                partial"),),
         exempt=True,
         why="a head past n_heads has a zero query and its state is never written (the last loop runs over "
             "n_heads * d pairs): scoring it changes no output and no counted traffic"),
    Term(_DECODE, "the channels of a lane", "c < d",
         edits=(("c < d", "True"),),
         hidden="decode_matches_reference", visible="decode_matches_reference",
         why="head_dim below HEAD_DIM_MAX: lane l's channels l + 32 k past head_dim do not exist"),
    Term(_DECODE, "the (head, channel) pairs: more than THREADS", "idx in range(tid, n_heads * d, THREADS)",
         edits=(("range(tid, n_heads * d, THREADS)", "range(tid, min(n_heads * d, THREADS), THREADS)"),),
         hidden="decode_matches_reference", visible="decode_matches_reference",
         why="n_heads * head_dim above THREADS: a group of 4 with head_dim 48 (hidden: 192 pairs) and 40 "
             "(visible: 160 pairs)"),
    Term(_DECODE, "the slot of a token in its page", "t % block_size",
         edits=(("slot = t % block_size", "slot = t & (block_size - 1)"),),
         hidden="decode_matches_reference", visible="decode_matches_reference",
         why="a block size that is not a power of two (5 hidden, 3 visible): only then do t % block_size and "
             "t & (block_size - 1) differ"),
)
