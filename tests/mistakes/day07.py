"""Day 7's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day07_grouped_query_attention"
_PREFILL = dict(cell="prefill_kernel", kernel="gqa_attention.gqa_prefill_tiles_kernel")
_DECODE = dict(cell="decode_kernel", kernel="gqa_attention.gqa_decode_group_kernel")

TABLE = (
    # the prefill
    Mistake("prefill_causal_key_end_without_n", **_PREFILL,
            edits=(("kv_end = min(kv_end, tile_start + positions, n_queries)",
                    "kv_end = min(kv_end, tile_start + positions)"),),
            why="the causal key end forgets N: the last, partial tile of positions loads keys past its last query",
            samples=("wrong_causal_key_end_without_n",),   # its hidden cell: tests/spec_terms/day07.py
            feedback=(("gqa_prefill_traffic_fits", ("if the causal key end forgets N", "N - 1")),)),
    Mistake("prefill_group_of_two", **_PREFILL,
            edits=(("    h = kv_head * group + head_in_group", "    h = kv_head * 2 + head_in_group"),),
            why="the query head of a row assumes a group of 2, whatever the shapes",
            hidden_fails="prefill_matches_reference", visible_misses=True,
            feedback=(("gqa_prefill_handles_every_group",
                       ("Axis 1 of q and o is the query head", "group = heads // kv_heads = 1")),),
            wrong_answer=True),
    Mistake("prefill_group_of_two_uncommented", **_PREFILL,
            edits=(("h = kv_head * group + head_in_group             # the query head of this row",
                    "h = kv_head * 2 + head_in_group"),),
            why="the query head of a row assumes a group of 2, the line's comment dropped (the sample's edit "
                "replaces whole lines)",
            samples=("wrong_head_map_for_groups_of_two",),
            feedback=(("gqa_prefill_handles_every_group",
                       ("Axis 1 of q and o is the query head", "group = heads // kv_heads = 1")),)),
    Mistake("prefill_tile_loaded_in_one_pass", **_PREFILL,
            edits=(("        for idx in range(t, n_tile * d, rows):",
                    "        for idx in range(t, min(n_tile * d, rows), rows):"),),
            why="one pass of the rows loads the tile: 64 rows miss half a 16 x 8 tile",
            hidden_fails="prefill_every_group",
            feedback=(("gqa_prefill_handles_every_group",
                       ("a block has 64 rows (threads) and a K tile 16 x 8 = 128 elements",)),)),
    Mistake("prefill_tile_loaded_one_element_per_row", **_PREFILL,
            edits=(("        for idx in range(t, n_tile * d, rows):\n"
                    "            j = idx // d\n"
                    "            c = idx - j * d\n"
                    "            k_tile[j, c] = k[b, kv_head, kv_start + j, c]\n"
                    "            v_tile[j, c] = v[b, kv_head, kv_start + j, c]",
                    "        if t < n_tile * d:          # one element per row: the rows cover the tile\n"
                    "            j = t // d\n"
                    "            c = t - j * d\n"
                    "            k_tile[j, c] = k[b, kv_head, kv_start + j, c]\n"
                    "            v_tile[j, c] = v[b, kv_head, kv_start + j, c]"),),
            why="the key tile is loaded one element per row, as if the rows always covered it",
            samples=("wrong_tile_loaded_one_element_per_row",),
            feedback=(("gqa_prefill_handles_every_group",
                       ("a block has 64 rows (threads) and a K tile 16 x 8 = 128 elements",
                        "does every thread load elements t, t + rows")),)),
    Mistake("prefill_keys_from_global_memory", **_PREFILL,
            edits=(("score += q_row[c] * k_tile[j, c]", "score += q_row[c] * k[b, kv_head, kv_start + j, c]"),),
            why="every row reads its keys from global memory",
            hidden_fails="prefill_traffic",
            feedback=(("gqa_prefill_traffic_fits", ("k was loaded", "the budget is")),)),
    Mistake("prefill_keys_and_values_from_global_memory", **_PREFILL,
            edits=(("score += q_row[c] * k_tile[j, c]", "score += q_row[c] * k[b, kv_head, kv_start + j, c]"),
                   ("acc[c] += p * v_tile[j, c]", "acc[c] += p * v[b, kv_head, kv_start + j, c]")),
            why="every row reads its keys and values from global memory instead of the block's shared tile",
            samples=("wrong_reads_kv_once_per_head",),
            feedback=(("gqa_prefill_traffic_fits",
                       ("every row read k from global memory instead of from the block's shared tile",
                        "every row read v from global memory")),)),
    Mistake("prefill_kv_head_interleaved", **_PREFILL,
            edits=(("    h = kv_head * group + head_in_group", "    h = head_in_group * k.shape[1] + kv_head"),),
            why="the query heads of a KV head taken interleaved: head h reads KV head h % kv_heads",
            feedback=(("gqa_prefill_matches_reference", ("read KV head h % kv_heads",)),)),
    # the decode
    Mistake("decode_group_of_two", **_DECODE,
            edits=(("first = kv_head * group + ", "first = kv_head * 2 + "),),
            why="the block's first head assumes a group of 2",
            hidden_fails="decode_matches_reference", visible_misses=True,
            feedback=(("gqa_decode_handles_every_group",
                       ("query head 1 of 2 was never written", "group = heads // kv_heads = 1")),),
            samples=("wrong_head_map_for_groups_of_two",)),
    Mistake("decode_group_not_split", **_DECODE,
            edits=(("subgroups = (group + GROUP_MAX - 1) // GROUP_MAX", "subgroups = 1"),),
            why="a group above GROUP_MAX is not split: heads past the first GROUP_MAX are never written",
            hidden_fails="decode_every_group",
            feedback=(("gqa_decode_handles_every_group",
                       ("at most GROUP_MAX = 8 query heads", "group = heads // kv_heads = 9",
                        "Is the group split into subgroups?")),)),
    Mistake("decode_kv_loaded_per_head", **_DECODE,
            edits=(("        for ch in range(CHANNELS):\n"
                    "            c = lane + ch * WARP\n"
                    "            if c < d:\n"
                    "                k_row[ch] = k_cache[page, kv_head, slot, c]\n"
                    "                v_row[ch] = v_cache[page, kv_head, slot, c]\n"
                    "        # The token's K and V, loaded once, serve every head of the block.\n"
                    "        for i in range(GROUP_MAX):\n"
                    "            if i < n_heads:\n",
                    "        for i in range(GROUP_MAX):\n"
                    "            if i < n_heads:\n"
                    "                for ch in range(CHANNELS):\n"
                    "                    c = lane + ch * WARP\n"
                    "                    if c < d:\n"
                    "                        k_row[ch] = k_cache[page, kv_head, slot, c]\n"
                    "                        v_row[ch] = v_cache[page, kv_head, slot, c]\n"),),
            why="the token's K and V rows are loaded again for every head of the group",
            hidden_fails="decode_traffic",
            feedback=(("gqa_decode_traffic_fits", ("k_cache was loaded", "once per query head of the group")),),
            wrong_answer=True, samples=("wrong_reads_kv_once_per_head",)),
)
