"""Day 5's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day05_flash_attention"
_FLASH = dict(cell="flash_kernel", kernel="flash_attention.attention_v4_flash_kernel")

TABLE = (
    Mistake("flash_causal_bound_per_thread", **_FLASH,
            edits=(("kv_end = min(kv_end, tile_start + TILE_Q, n_queries)", "kv_end = min(kv_end, row + 1)"),),
            why="the causal bound of the key loop is each thread's own row: the block's barriers diverge",
            names="divergent_barrier", words=("depends on the thread", "for kv_start in range(0, kv_end, TILE_KV)",
                                              "the simulator does not notice")),
    Mistake("flash_accumulator_not_rescaled", **_FLASH,
            edits=(("            for c in range(d):\n                acc[c] *= correction\n", ""),),
            why="the accumulator is not rescaled when the running maximum grows",
            names="acc_not_rescaled", words=("accumulator is not rescaled", "32 at a time")),
    Mistake("flash_causal_j_below_i", **_FLASH,
            edits=(("n_valid = min(n_tile, row - kv_start + 1)", "n_valid = min(n_tile, row - kv_start)"),),
            why="off by one on the diagonal: a causal row sees keys j < i instead of j <= i",
            names="row0_key0", words=("row 0 sees only key 0", "all zeros", "j < i instead of j <= i"),
            samples=("wrong_diagonal_mask",)),
    Mistake("flash_diagonal_tile_unmasked", **_FLASH,
            edits=(("n_valid = min(n_tile, row - kv_start + 1)", "n_valid = n_tile"),),
            why="the diagonal tile is not masked: a row sees the keys after it in that tile",
            names="row0_key0", words=("row 0 sees only key 0", "inside the diagonal tile")),
    Mistake("flash_kv_lens_ignored", **_FLASH,
            edits=(("kv_end = min(kv_lens[b], k.shape[2])", "kv_end = k.shape[2]"),),
            why="kv_lens is ignored: every key of the padded batch is attended",
            names="kv_lens_ignored", words=("positions >= kv_lens[b]",)),
    Mistake("flash_last_key_tile_dropped", **_FLASH,
            edits=(("for kv_start in range(0, kv_end, TILE_KV):",
                    "for kv_start in range(0, kv_end - TILE_KV + 1, TILE_KV):"),),
            why="the last, partial tile of keys is skipped",
            names="keys_dropped", words=("last, partial tile of keys is skipped",)),
    Mistake("flash_empty_sequence_divides_by_zero", **_FLASH,
            edits=(("        if row_sum > 0:  # a row with no allowed key (kv_lens[b] == 0) gives zeros\n"
                    "            inv_sum = float32(1.0) / row_sum\n",
                    "        inv_sum = float32(1.0) / row_sum\n"),),
            why="an empty sequence (kv_lens[b] == 0) divides 0 by 0",
            names="empty_sequence", words=("empty sequence (kv_lens[1] = 0)", "0/0 is NaN")),
    Mistake("flash_scale_forgotten", **_FLASH,
            edits=(("            q_row[c] = q[b, h, row, c] * scale", "            q_row[c] = q[b, h, row, c]"),),
            why="the scale is forgotten",
            wrong_answer=True),
    Mistake("flash_tiles_above_diagonal_masked_not_skipped", **_FLASH,
            edits=(("    if causal:\n        kv_end = min(kv_end, tile_start + TILE_Q, n_queries)\n", ""),),
            why="the key tiles above the diagonal are loaded and masked instead of skipped",
            wrong_answer=True, samples=("wrong_no_tile_skip",)),
    Mistake("flash_running_max_not_subtracted", **_FLASH,
            edits=(("p = math.exp(scores[j] - new_max)", "p = math.exp(scores[j])"),),
            why="the running maximum is not subtracted: exp overflows on large logits",
            wrong_answer=True),
)
