"""The graded days as data: what ``test_exercises.py`` checks of each day's exercise notebooks.

Adding a day adds one ``Day`` to ``DAYS``: its solution cells and the ``kernels/`` code they must
equal, its launcher cells and the ``kernels/`` launchers they bind the student's kernels to, and a
wrong answer (small changes of the solution) with the grade cells that must catch it in Validate.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Launcher:
    """A launcher cell: ``def name(*args, **options)`` forwarding to ``kernels.<module>.<launcher>``
    with ``keyword=<the notebook's kernel>`` for each item of ``kernels``."""

    cell: str
    name: str
    module: str
    launcher: str
    kernels: dict[str, str]


@dataclass(frozen=True)
class Mutation:
    """``old`` replaced by ``new`` in solution cell ``cell``: one classic mistake, said in ``why``."""

    cell: str
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class Day:
    assignment: str
    points: int
    # solution cell -> "module.kernel" in kernels/, or a tuple of them (device functions first) when the
    # cell holds several functions, in the order of the cell, two blank lines apart
    solution_code: dict[str, str | tuple[str, ...]]
    launchers: tuple[Launcher, ...]
    wrong: tuple[Mutation, ...]
    wrong_fails: frozenset[str] | None     # grade cells the wrong answer fails in Validate; None: all
    constants: dict[str, str] = field(default_factory=dict)   # given cell -> kernels module with its names
    every_hidden_test_uses_pristine: bool = True


DAYS = (
    Day(
        assignment="day01_gpu_model",
        points=10,
        solution_code={
            "axpb_kernel": "elementwise.axpb_v1_guarded_kernel",
            "normalize_rows_kernel": "elementwise.normalize_rows_v1_3d_grid_kernel",
            "row_stats_tree_kernel": "reduction.row_stats_v2_shared_tree_kernel",
            "row_stats_warp_kernel": "reduction.row_stats_v3_warp_shuffle_kernel",
        },
        launchers=(
            Launcher("axpb_launcher", "axpb_v1_guarded", "elementwise", "axpb_v1_guarded",
                     {"kernel": "axpb_v1_guarded_kernel"}),
            Launcher("normalize_rows_launcher", "normalize_rows_v1_3d_grid", "elementwise",
                     "normalize_rows_v1_3d_grid", {"kernel": "normalize_rows_v1_3d_grid_kernel"}),
            Launcher("row_stats_tree_launcher", "row_stats_v2_shared_tree", "reduction", "row_stats_v2_shared_tree",
                     {"kernel": "row_stats_v2_shared_tree_kernel"}),
            Launcher("row_stats_warp_launcher", "row_stats_v3_warp_shuffle", "reduction",
                     "row_stats_v3_warp_shuffle", {"kernel": "row_stats_v3_warp_shuffle_kernel"}),
        ),
        wrong=(
            Mutation("axpb_kernel", "    if i < x.size:", "    if i <= x.size:",
                     "an off-by-one guard: a thread past the end reads x[n]"),
            Mutation("normalize_rows_kernel", "    if row < x.shape[2]:", "    if row < x.shape[2] - 1:",
                     "the last row is never written"),
            Mutation("row_stats_tree_kernel", "    half = TREE_THREADS // 2", "    half = TREE_THREADS // 4",
                     "the tree starts a level too low: partials 32..63 are never combined"),
            Mutation("row_stats_warp_kernel", "    offset = WARP_SIZE // 2", "    offset = WARP_SIZE // 4",
                     "the shuffles start at offset 8: lanes 16..31 are never combined"),
        ),
        wrong_fails=None,
    ),
    Day(
        assignment="day02_naive_attention",
        points=10,
        solution_code={
            "scores_kernel": "attention.scores_kernel",
            "softmax_rows_kernel": "softmax.softmax_rows_kernel",
            "pv_kernel": "attention.pv_kernel",
        },
        launchers=(
            Launcher("scores_launcher", "attention_scores", "attention", "attention_scores", {"kernel": "scores_kernel"}),
            Launcher("softmax_launcher", "softmax_rows", "softmax", "softmax_rows", {"kernel": "softmax_rows_kernel"}),
            Launcher("pv_launcher", "attention_pv", "attention", "attention_pv", {"kernel": "pv_kernel"}),
            Launcher("pipeline_launcher", "attention_v1_naive", "attention", "attention_v1_naive",
                     {"scores_kernel": "scores_kernel", "softmax_kernel": "softmax_rows_kernel",
                      "pv_kernel": "pv_kernel"}),
        ),
        wrong=(
            Mutation("scores_kernel", "    if flat >= q.shape[2] * n_keys:\n        return\n", "",
                     "no guard: the threads of the last block past N*M read past the end of q"),
            Mutation("softmax_rows_kernel", "out[row, j] = math.exp(x[row, j] - row_max) / row_sum",
                     "out[row, j] = math.exp(x[row, j] - row_max)", "the rows are never divided by their sum"),
            Mutation("pv_kernel", "    if flat >= p.shape[2] * head_dim:\n        return\n", "",
                     "no guard: the threads of the last block past N*d read past the end of p"),
        ),
        # An unnormalised softmax moves the right number of elements: the budget cell passes it. The large-logit
        # cell fails it on its row of logits near 1e4, whatever the draw (its rows of size 1e4 are one-hot, or
        # nearly, so those rows alone caught it in only about 1 draw in 300).
        wrong_fails=frozenset({"scores_matches_reference", "scores_reads_and_writes", "softmax_rows_matches_reference",
                               "softmax_rows_large_logits", "pv_matches_reference", "pv_reads_and_writes"}),
    ),
    Day(
        assignment="day03_online_softmax",
        points=10,
        solution_code={
            "softmax_online_kernel": "softmax.softmax_online_kernel",
            "attention_v2_fused_rows_kernel": "attention.attention_v2_fused_rows_kernel",
        },
        launchers=(
            Launcher("online_launcher", "softmax_online", "softmax", "softmax_online", {"kernel": "softmax_online_kernel"}),
            Launcher("fused_launcher", "attention_v2_fused_rows", "attention", "attention_v2_fused_rows",
                     {"kernel": "attention_v2_fused_rows_kernel"}),
        ),
        wrong=(
            Mutation("softmax_online_kernel",
                     "        if m_new != -math.inf:  # while everything seen is -inf, exp(-inf - -inf) would be NaN\n"
                     "            l = l * math.exp(m - m_new) + math.exp(x_j - m_new)\n",
                     "        l = l * math.exp(m - m_new) + math.exp(x_j - m_new)\n",
                     "the empty state is not guarded: a thread that saw only -inf computes exp(-inf - -inf) = NaN"),
            Mutation("attention_v2_fused_rows_kernel", "n_keys = min(i + 1, n_keys)", "n_keys = min(i, n_keys)",
                     "the causal mask j < i: row 0 sees no key"),
        ),
        # Both mistakes only show on masked rows: the cells without -inf entries or causal rows pass them.
        wrong_fails=frozenset({"online_softmax_masked_rows", "fused_rows_causal"}),
    ),
    Day(
        assignment="day04_tiled_gemm",
        points=10,
        solution_code={
            "gemm_v3_shared_tiles_kernel": "gemm.gemm_v3_shared_tiles_kernel",
            "gemm_v4_register_blocked_kernel": "gemm.gemm_v4_register_blocked_kernel",
        },
        launchers=(
            Launcher("gemm_v3_shared_tiles_launcher", "gemm_v3_shared_tiles", "gemm", "gemm_v3_shared_tiles",
                     {"kernel": "gemm_v3_shared_tiles_kernel"}),
            Launcher("gemm_v4_register_blocked_launcher", "gemm_v4_register_blocked", "gemm",
                     "gemm_v4_register_blocked", {"kernel": "gemm_v4_register_blocked_kernel"}),
        ),
        wrong=(
            Mutation("gemm_v3_shared_tiles_kernel", "        if row < m and k0 + tx < k:", "        if k0 + tx < k:",
                     "the A tile is loaded without its row guard: a block over the edge reads past row M - 1"),
            Mutation("gemm_v4_register_blocked_kernel", "            if row0 + r < m and k0 + kk < k:",
                     "            if k0 + kk < k:",
                     "the A tile is loaded without its row guard: a block over the edge reads past row M - 1"),
        ),
        wrong_fails=None,
        constants={"shared_tiles_constants": "gemm", "register_blocked_constants": "gemm"},
    ),
    Day(
        assignment="day05_flash_attention",
        points=10,
        solution_code={"flash_kernel": "flash_attention.attention_v4_flash_kernel"},
        launchers=(
            Launcher("flash_launcher", "flash_attention", "flash_attention", "attention_v4_flash",
                     {"kernel": "attention_v4_flash_kernel"}),
        ),
        wrong=(
            Mutation("flash_kernel", "            q_row[c] = q[b, h, row, c] * scale", "            q_row[c] = q[b, h, row, c]",
                     "the scale is forgotten"),
            Mutation("flash_kernel", "    if causal:\n        kv_end = min(kv_end, tile_start + TILE_Q, n_queries)\n", "",
                     "the key tiles above the diagonal are loaded and masked instead of skipped"),
            Mutation("flash_kernel", "p = math.exp(scores[j] - new_max)", "p = math.exp(scores[j])",
                     "the running maximum is not subtracted: exp overflows on large logits"),
        ),
        wrong_fails=None,
        # The later grade cells call run_flash and check_flash, defined by the first one's hidden tests.
        every_hidden_test_uses_pristine=False,
    ),
    Day(
        assignment="day06_paged_attention",
        points=13,
        solution_code={
            "cache_write_kernel": "kv_cache.kv_cache_write_kernel",
            "paged_v1_kernel": ("paged_attention._warp_attend", "paged_attention._merge_warps",
                                "paged_attention.paged_attention_v1_block_per_head_kernel"),
            "merge_kernel": "paged_attention.paged_attention_v2_merge_kernel",
            "allocator_class": "block_manager.BlockManager",
        },
        launchers=(
            Launcher("cache_write_launcher", "kv_cache_write", "kv_cache", "kv_cache_write",
                     {"kernel": "kv_cache_write_kernel"}),
            Launcher("paged_v1_launcher", "paged_attention_v1", "paged_attention", "paged_attention_v1_block_per_head",
                     {"kernel": "paged_attention_v1_block_per_head_kernel"}),
            Launcher("merge_launcher", "paged_attention_v2", "paged_attention", "paged_attention_v2_split_k",
                     {"merge_kernel": "paged_attention_v2_merge_kernel"}),
        ),
        wrong=(
            Mutation("cache_write_kernel", "position // block_size]", "(position + 1) // block_size]",
                     "the last token of each page is written into the next page: a wrong slot at a block boundary"),
            Mutation("paged_v1_kernel", "warp, context_lens[s], WARPS, acc)",
                     "warp, (context_lens[s] // k_cache.shape[2] + 1) * k_cache.shape[2], WARPS, acc)",
                     "the warps walk context_lens // block_size + 1 whole pages: past the end of every context"),
            Mutation("merge_kernel",
                     "total += partial_sum[s, h, p] * weight\n                channel += partial_acc[s, h, p, c] * weight",
                     "total += partial_sum[s, h, p]\n                channel += partial_acc[s, h, p, c]",
                     "the partials are added up without rescaling them to the largest maximum"),
            Mutation("allocator_class", "elif self._refs[table[-1]] > 1:", "elif False:",
                     "append writes into a shared last page: no copy-on-write"),
        ),
        # The cache-write and merge mistakes move the right number of elements: their traffic cells pass;
        # the allocator without copy-on-write forks right.
        wrong_fails=frozenset({"cache_write_slots", "paged_v1_matches_reference", "paged_v1_mixed_lengths",
                               "paged_v1_large_logits", "paged_v1_traffic", "merge_matches_reference",
                               "merge_handles_empty_partitions", "allocator_copy_on_write", "allocator_workload"}),
        constants={"paged_v1_constants": "paged_attention"},
    ),
    Day(
        assignment="day07_grouped_query_attention",
        points=10,
        solution_code={"prefill_kernel": "gqa_attention.gqa_prefill_tiles_kernel",
                       "decode_kernel": "gqa_attention.gqa_decode_group_kernel"},
        launchers=(
            Launcher("prefill_launcher", "gqa_prefill", "gqa_attention", "gqa_prefill_tiles",
                     {"kernel": "gqa_prefill_tiles_kernel"}),
            Launcher("decode_launcher", "gqa_decode", "gqa_attention", "gqa_decode_group",
                     {"kernel": "gqa_decode_group_kernel"}),
        ),
        wrong=(
            Mutation("prefill_kernel", "    h = kv_head * group + head_in_group", "    h = kv_head * 2 + head_in_group",
                     "the query head of a row assumes a group of 2, whatever the shapes"),
            Mutation("decode_kernel",
                     """        for ch in range(CHANNELS):
            c = lane + ch * WARP
            if c < d:
                k_row[ch] = k_cache[page, kv_head, slot, c]
                v_row[ch] = v_cache[page, kv_head, slot, c]
        # The token's K and V, loaded once, serve every head of the block.
        for i in range(GROUP_MAX):
            if i < n_heads:
""",
                     """        for i in range(GROUP_MAX):
            if i < n_heads:
                for ch in range(CHANNELS):
                    c = lane + ch * WARP
                    if c < d:
                        k_row[ch] = k_cache[page, kv_head, slot, c]
                        v_row[ch] = v_cache[page, kv_head, slot, c]
""",
                     "the token's K and V rows are loaded again for every head of the group"),
        ),
        # A group of 2 is right for the 2-head groups and for one KV head; loading K and V per head gives
        # the right values.
        wrong_fails=frozenset({"prefill_every_group", "decode_traffic"}),
        constants={"prefill_constants": "gqa_attention", "decode_constants": "gqa_attention"},
    ),
    Day(
        assignment="day08_mixed_precision",
        points=10,
        solution_code={"prefill_kernel": "low_precision_attention.gqa_prefill_mixed_tiles_kernel",
                       "decode_kernel": "low_precision_attention.gqa_decode_mixed_group_kernel",
                       "quantize_kernel": ("low_precision_attention._round_half_even",
                                           "low_precision_attention._e4m3_code",
                                           "low_precision_attention.fp8_quantize_kernel")},
        launchers=(
            Launcher("prefill_launcher", "gqa_prefill", "low_precision_attention", "gqa_prefill_mixed_tiles",
                     {"kernel": "gqa_prefill_mixed_tiles_kernel"}),
            Launcher("decode_launcher", "gqa_decode", "low_precision_attention", "gqa_decode_mixed_group",
                     {"kernel": "gqa_decode_mixed_group_kernel"}),
            Launcher("quantize_launcher", "fp8_quantize", "low_precision_attention", "fp8_quantize",
                     {"kernel": "fp8_quantize_kernel"}),
        ),
        wrong=(
            # q·k stored in fp16 shared memory before the scale is applied: five lines of one mistake
            Mutation("prefill_kernel", "@cuda.jit\ndef gqa_prefill_mixed_tiles_kernel",
                     "from numba.types import float16\n\n\n@cuda.jit\ndef gqa_prefill_mixed_tiles_kernel",
                     "the scores are kept in fp16 and scaled when they are read: q·k rounded to fp16, unscaled"),
            Mutation("prefill_kernel", "q_row[c] = float32(q[b, h, position, c]) * scale if active",
                     "q_row[c] = float32(q[b, h, position, c]) if active", "q is not scaled as it is loaded"),
            Mutation("prefill_kernel", "scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)",
                     "scores = cuda.shared.array((TILE_KV, ROWS_MAX), float16)",
                     "the unscaled scores are stored in fp16"),
            Mutation("prefill_kernel", "tile_max = max(tile_max, score)", "tile_max = max(tile_max, score * scale)",
                     "the scale is applied to the score afterwards"),
            Mutation("prefill_kernel", "p = math.exp(scores[j, t] - new_max)",
                     "p = math.exp(scores[j, t] * scale - new_max)",
                     "the scale is applied to the fp16 score when it is read"),
            Mutation("decode_kernel",
                     """        for ch in range(CHANNELS):
            c = lane + ch * WARP
            if c < d:
                k_row[ch] = float32(k_cache[page, kv_head, slot, c])
                v_row[ch] = float32(v_cache[page, kv_head, slot, c])
        for i in range(GROUP_MAX):
            if i < n_heads:
""",
                     """        for i in range(GROUP_MAX):
            if i < n_heads:
                for ch in range(CHANNELS):
                    c = lane + ch * WARP
                    if c < d:
                        k_row[ch] = float32(k_cache[page, kv_head, slot, c])
                        v_row[ch] = float32(v_cache[page, kv_head, slot, c])
""",
                     "the token's fp16 K and V rows are loaded again for every head of the group"),
            Mutation("quantize_kernel", "    if rest > 0.5 or (rest == 0.5 and q & 1):\n        q += 1\n", "",
                     "the e4m3 mantissa is truncated instead of rounded to nearest even"),
        ),
        # fp16 scores lose precision only where the logits are large or sharp (long rows of small logits pass);
        # K and V loaded per head give the right values; truncated codes come with the right scales.
        wrong_fails=frozenset({"prefill_matches_reference", "prefill_large_logits", "decode_traffic",
                               "quantize_rounds_to_nearest_even"}),
        constants={"prefill_constants": "low_precision_attention", "decode_constants": "low_precision_attention",
                   "quantize_constants": "low_precision_attention"},
    ),
)

BY_NAME = {day.assignment: day for day in DAYS}
