"""Day 5's bounds: the flash kernel's key loop, its partial tiles and its causal mask."""

from . import Term

ASSIGNMENT = "day05_flash_attention"
_KEYS = "min(kv_lens[b], k.shape[2])"
_END = "min(kv_end, tile_start + TILE_Q, n_queries)"
_TILE = "min(TILE_KV, kv_end - kv_start)"
_DIAGONAL = "min(n_tile, row - kv_start + 1)"

TABLE = (
    Term("flash_kernel", _KEYS, "kv_lens[b]", hidden="flash_handles_kv_lens", visible="flash_handles_kv_lens",
         why="a sequence shorter than M: kv_lens of 0, 1 and 37 of 40"),
    Term("flash_kernel", _KEYS, "k.shape[2]", exempt=True,
         why="kv_lens[b] <= M is the launcher's precondition (it refuses longer lengths), so this term never "
             "decides; it guards a direct launch of the kernel"),
    Term("flash_kernel", _END, "kv_end", hidden="flash_skips_masked_tiles", visible="flash_skips_masked_tiles",
         why="causal with kv_lens below the block's last row: kv_lens=[100] of N = 192 (hidden), and the "
             "masked rows read no keys past kv_len"),
    Term("flash_kernel", _END, "tile_start + TILE_Q", hidden="flash_skips_masked_tiles",
         visible="flash_skips_masked_tiles",
         why="causal with several query tiles: an early tile must not load the keys of later rows"),
    Term("flash_kernel", _END, "n_queries", hidden="flash_skips_masked_tiles", visible="flash_skips_masked_tiles",
         why="causal, the last query tile partial and M > N: N = 70, M = 110 (the block's last existing row is "
             "N - 1, not tile_start + TILE_Q - 1)"),
    Term("flash_kernel", _TILE, "TILE_KV", hidden="flash_matches_reference_full",
         visible="flash_matches_reference_full", why="more than one key tile: M = 45 and 75 keys"),
    Term("flash_kernel", _TILE, "kv_end - kv_start", hidden="flash_matches_reference_full",
         visible="flash_matches_reference_full", why="a last, partial key tile: M = 45 is not a multiple of TILE_KV"),
    Term("flash_kernel", _DIAGONAL, "n_tile", hidden="flash_matches_reference_causal",
         visible="flash_matches_reference_causal",
         why="causal rows past the end of a partial key tile: N = 70 rows over M = 80 keys"),
    Term("flash_kernel", _DIAGONAL, "row - kv_start + 1", hidden="flash_matches_reference_causal",
         visible="flash_matches_reference_causal", why="the diagonal tile: row i must not see key i + 1"),
    Term("flash_kernel", "the diagonal's edge", "row - kv_start + 1 (key j = i included)",
         edits=(("min(n_tile, row - kv_start + 1)", "min(n_tile, row - kv_start)"),),
         hidden="flash_matches_reference_causal", visible="flash_matches_reference_causal",
         why="row i sees key i: row 0 sees exactly key 0"),
    Term("flash_kernel", "the guard of the last, partial query tile", "row < n_queries",
         edits=(("active = row < n_queries", "active = True"),),
         hidden="flash_matches_reference_full", visible="flash_matches_reference_full",
         why="N = 70 rows are not a multiple of TILE_Q: the last tile's threads past N own no row"),
)
