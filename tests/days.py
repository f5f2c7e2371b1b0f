"""The graded days as data: what ``test_exercises.py`` checks of each day's exercise notebooks.

Adding a day adds one ``Day`` to ``DAYS``: its solution cells and the ``kernels/`` code they must
equal, its launcher cells and the ``kernels/`` launchers they bind the student's kernels to, and a
wrong answer (small changes of the solution) with the grade cells that must catch it in Validate. The
wrong answer's changes are the mistakes of the day's table of classic mistakes
(``tests/mistakes/dayNN.py``) marked ``wrong_answer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mistakes import of_day


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
    """``old`` replaced by ``new`` in solution cell ``cell``: an edit of one classic mistake, said in ``why``."""

    cell: str
    old: str
    new: str
    why: str


def wrong_answer(assignment: str) -> tuple[Mutation, ...]:
    """The edits of the mistakes of the day's table (``tests/mistakes/``) marked ``wrong_answer``, in order."""
    return tuple(Mutation(m.cell, old, new, m.why) for m in of_day(assignment) if m.wrong_answer
                 for old, new in m.edits)


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
        wrong=wrong_answer("day01_gpu_model"),
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
        wrong=wrong_answer("day02_naive_attention"),
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
        wrong=wrong_answer("day03_online_softmax"),
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
        wrong=wrong_answer("day04_tiled_gemm"),
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
        wrong=wrong_answer("day05_flash_attention"),
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
        wrong=wrong_answer("day06_paged_attention"),
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
        wrong=wrong_answer("day07_grouped_query_attention"),
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
                       "quantize_kernel": ("low_precision_attention.fp8._round_half_even",
                                           "low_precision_attention.fp8._e4m3_code",
                                           "low_precision_attention.fp8_quantize_kernel")},
        launchers=(
            Launcher("prefill_launcher", "gqa_prefill", "low_precision_attention", "gqa_prefill_mixed_tiles",
                     {"kernel": "gqa_prefill_mixed_tiles_kernel"}),
            Launcher("decode_launcher", "gqa_decode", "low_precision_attention", "gqa_decode_mixed_group",
                     {"kernel": "gqa_decode_mixed_group_kernel"}),
            Launcher("quantize_launcher", "fp8_quantize", "low_precision_attention", "fp8_quantize",
                     {"kernel": "fp8_quantize_kernel"}),
        ),
        wrong=wrong_answer("day08_mixed_precision"),
        # fp16 scores lose precision only where the logits are large or sharp (long rows of small logits pass);
        # K and V loaded per head give the right values; truncated codes come with the right scales.
        wrong_fails=frozenset({"prefill_matches_reference", "prefill_large_logits", "decode_traffic",
                               "quantize_rounds_to_nearest_even"}),
        constants={"prefill_constants": "low_precision_attention", "decode_constants": "low_precision_attention",
                   "quantize_constants": "low_precision_attention"},
    ),
    Day(
        assignment="day09_quantized_gemv",
        points=10,
        solution_code={"quantize_kernel": ("quantized_gemv.warp_max", "quantized_gemv.round_half_away",
                                           "quantized_gemv.q8_0_quantize_kernel"),
                       "gemv_kernel": ("quantized_gemv.half_from_bytes", "quantized_gemv.warp_sum",
                                       "quantized_gemv.q4_1_gemv_warp_per_row_kernel"),
                       # the course's rung itself: dp4a is the notebook's given device function
                       "gemm_kernel": ("quantized_gemm._load_step", "quantized_gemm.w8a8_gemm_v1_dp4a_kernel")},
        launchers=(
            Launcher("quantize_launcher", "q8_0_quantize", "quantized_gemv", "q8_0_quantize",
                     {"kernel": "q8_0_quantize_kernel"}),
            Launcher("gemv_launcher", "q4_1_gemv", "quantized_gemv", "q4_1_gemv_warp_per_row",
                     {"kernel": "q4_1_gemv_warp_per_row_kernel"}),
            Launcher("gemm_launcher", "w8a8_gemm", "quantized_gemm", "w8a8_gemm_v1_dp4a",
                     {"kernel": "w8a8_gemm_v1_dp4a_kernel"}),
        ),
        wrong=wrong_answer("day09_quantized_gemv"),
        # Ties rounded to even leave the edge blocks (no tie there) and the scales right; d and m swapped move no
        # byte more; an int16 accumulator fails the extreme codes only (the other GEMM cells' sums fit an int16).
        wrong_fails=frozenset({"quantize_rounds_like_the_reference", "gemv_matches_reference", "gemv_position_coded",
                               "w8a8_exact_sums"}),
        constants={"quantize_constants": "quantized_gemv", "gemv_constants": "quantized_gemv",
                   "gemm_constants": "quantized_gemm"},
    ),
    Day(
        assignment="day10_a_model_talks",
        points=10,
        solution_code={"norm_kernel": ("quantized_gemv.warp_sum", "quantized_gemv.warp_max",
                                       "quantized_gemv.round_half_away",
                                       "llama_layers.rmsnorm_q8_1_block_per_row_kernel"),
                       "rope_kernel": "llama_layers.rope_pairs_from_table_kernel",
                       "swiglu_kernel": "llama_layers.swiglu_elementwise_kernel",
                       # the course's step itself: a host answer, over kernels.step_ops's operations
                       "decode_step": "decode_step.decode_step"},
        launchers=(
            Launcher("norm_launcher", "rmsnorm_q8_1", "llama_layers", "rmsnorm_q8_1_block_per_row",
                     {"kernel": "rmsnorm_q8_1_block_per_row_kernel"}),
            Launcher("rope_launcher", "rope_pairs", "llama_layers", "rope_pairs_from_table",
                     {"kernel": "rope_pairs_from_table_kernel"}),
            Launcher("swiglu_launcher", "swiglu", "llama_layers", "swiglu_elementwise",
                     {"kernel": "swiglu_elementwise_kernel"}),
        ),
        wrong=wrong_answer("day10_a_model_talks"),
        wrong_fails=None,
        constants={"norm_constants": "llama_layers"},
    ),
)

BY_NAME = {day.assignment: day for day in DAYS}
