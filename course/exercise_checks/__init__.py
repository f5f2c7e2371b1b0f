"""Visible checks of the graded exercises: the first call of a grade cell, after its docstring.

Validate (nbgrader's button and ``nbgrader validate``) judges a notebook by its grade cells, and a
student's copy of a grade cell holds only what is visible of it: without a visible check, a blank
notebook would pass. So each grade cell of every day opens with one call from this package::

    exercise_checks.axpb_traffic_fits(axpb_v1_guarded, kernel=axpb_v1_guarded_kernel)

Each check runs the student's launcher (or, from day 5 on, mostly the kernel with the course's grid) on
one small case, fast on the simulator, checks the property its grade cell grades and raises an
``AssertionError`` that says what is wrong and what the likely bug is. A check is never stricter
than the hidden tests of its cell, so it cannot cost a right answer its points. Checks return None:
nbgrader would read a value left at the end of a grade cell as partial credit. Traffic is counted
on the simulator only; on a GPU the traffic checks say so and pass (the grader counts on the
simulator).

Each check that compares values passes :func:`course.checking.check` the context its diagnoses
need: the student's kernel (``kernel=``, for the barrier mistakes of its source) and the inputs of
the computation (``reduction=``, ``gemm=``, ``attention=``), so that a classic mistake is named.
From day 6 on, the checks add the paged and precision diagnoses (``course.diagnoses``) in front of
``check``'s own. The checks of days 1, 2 and 4, and from day 6 on, turn an exception raised inside a kernel
on the simulator (an index past an array, 0/0, an overflowing exp) into a :class:`KernelFailed` that names
the likely bug (days 1 to 4 read it with the exercise's own words: the guard, the output's axes, the tile's
load that reached past the matrix). Their runners
(``*_run``) and budgets (``*_traffic_problems``, and days 2 and 3's ``check_*_traffic``) are what the
hidden tests call too, on more cases. Mixed precision (day 8) is judged by the precision rule of
``docs/design-notes.md`` §5; day 9's quantizer bit for bit, its GEMV against the dequantized weights, its
W8A8 GEMM within the rounding of one scaling of an exact integer sum; day 10's fused norm by what any q8_1 quantizer
of the float64 norm gives (its codes may move at a tie), its RoPE and SwiGLU against the float64 references.

One module per day, ``day01`` ... ``day10`` (day 6's allocator in ``day06_allocator``, day 10's decode step in
``day10_step``, its replay on the kernels in ``day10_step_kernels``), over ``_common``;
this package holds every name of theirs. Hidden tests load a private copy of it,
``grader.hidden.pristine("course.exercise_checks")``, which executes this file again: so the day modules
are imported here, and import each other, relatively, and the copy gets private copies of them too,
which a student's patch of ``course.exercise_checks.day06`` does not reach.
"""

from __future__ import annotations

# The day-8 hidden tests draw their inputs through the private copy (``xc.random_inputs()``).
from course.checking import random_inputs  # noqa: F401

from ._common import KernelFailed
from .day01 import (
    axpb_matches_reference, axpb_traffic_fits, normalize_rows_matches_reference, normalize_rows_traffic_fits,
    row_stats_match_reference, row_stats_tree_traffic_fits, row_stats_warp_traffic_fits,
)
from .day02 import (
    check_pv_traffic, check_scores_traffic, check_softmax_rows_traffic, pv_matches_reference, pv_traffic_fits,
    scores_match_reference, scores_traffic_fits, softmax_rows_is_numerically_stable, softmax_rows_match_reference,
    softmax_rows_traffic_fits,
)
from .day03 import (
    check_fused_rows_traffic, check_online_softmax_traffic, fused_rows_handles_causal, fused_rows_is_numerically_stable,
    fused_rows_matches_reference, fused_rows_traffic_fits, online_softmax_handles_masked_rows,
    online_softmax_is_numerically_stable, online_softmax_matches_two_pass, online_softmax_traffic_fits,
)
from .day04 import gemm_edge_shapes, gemm_matches_reference, gemm_v3_traffic_fits, gemm_v4_traffic_fits
from .day05 import (
    flash_causal_key_end, flash_handles_kv_lens, flash_is_numerically_stable, flash_matches_reference,
    flash_skips_masked_tiles, flash_traffic_fits_tiling,
)
from .day06 import (
    cache_write_case, cache_write_expected, cache_write_matches_reference, cache_write_run, cache_write_traffic_fits,
    cache_write_traffic_problems, check_cache_write, check_paged, merge_handles_empty_partitions,
    merge_matches_reference, merge_run, merge_traffic_fits, merge_traffic_problems, paged_inputs,
    paged_v1_handles_mixed_lengths, paged_v1_is_numerically_stable, paged_v1_matches_reference, paged_v1_run,
    paged_v1_traffic_fits, paged_v1_traffic_problems, paged_v2_run,
)
from .day06_allocator import (
    allocator_problems, allocator_survives_a_workload, append_copies_on_write, check_allocator, copy_on_write_cases,
    fork_cases, fork_shares_blocks, random_workload,
)
from .day07 import (
    check_gqa_decode, check_gqa_prefill, gqa_decode_handles_every_group, gqa_decode_matches_reference, gqa_decode_run,
    gqa_decode_traffic_fits, gqa_decode_traffic_problems, gqa_prefill_case, gqa_prefill_handles_every_group,
    gqa_prefill_matches_reference, gqa_prefill_run, gqa_prefill_traffic_fits, gqa_prefill_traffic_problems,
    merge_partials,
)
from .day08 import (
    FP8_RECIPROCAL_SCALES, check_fp8_codes, check_fp8_scales, check_mixed_decode, check_mixed_prefill,
    fp8_cache_case, fp8_corner_values, fp8_quantize_case, fp8_quantize_computes_scales, fp8_round_trip_error,
    fp8_quantize_matches_reference, fp8_quantize_run, mixed_decode_case, mixed_decode_long_context,
    mixed_decode_matches_reference, mixed_decode_run, mixed_decode_traffic_fits, mixed_prefill_case,
    mixed_prefill_large_logits, mixed_prefill_long_rows, mixed_prefill_matches_reference, mixed_prefill_run,
)
from .day09 import (
    Q8_0_TIE_AMAXES, check_q4_1_gemv, check_q8_0_codes, check_q8_0_scales, q4_1_gemv_case, q4_1_gemv_matches_reference,
    q4_1_gemv_position_coded, q4_1_gemv_run, q4_1_gemv_traffic_fits, q4_1_gemv_traffic_problems, q8_0_quantize_case,
    q8_0_quantize_edge_blocks, q8_0_quantize_matches_reference, q8_0_quantize_run, q8_0_quantize_scales_per_block,
    check_w8a8_gemm, w8a8_gemm_case, w8a8_gemm_edges, w8a8_gemm_exact_sums, w8a8_gemm_run, w8a8_gemm_scaled_epilogue,
)
from .day10 import (
    RMSNORM_EPS, check_rmsnorm_q8_1, check_rope, check_swiglu, rmsnorm_q8_1_case, rmsnorm_q8_1_edge_rows,
    rmsnorm_q8_1_matches_reference, rmsnorm_q8_1_run, rmsnorm_q8_1_scales_and_sums, rmsnorm_q8_1_traffic_problems,
    rope_case, rope_matches_reference,
    rope_pairs_and_positions, rope_run, swiglu_case, swiglu_matches_reference, swiglu_run,
)
from .day10_step import (
    check_decode_step, decode_step_case, decode_step_cases, decode_step_every_group, decode_step_first_token,
    decode_step_generates_greedy_tokens, decode_step_matches_reference, decode_step_problems, replay_logits, step_data,
)
from .day10_step_kernels import decode_step_on_kernels

__all__ = [
    "axpb_matches_reference", "axpb_traffic_fits",
    "normalize_rows_matches_reference", "normalize_rows_traffic_fits",
    "row_stats_match_reference", "row_stats_tree_traffic_fits", "row_stats_warp_traffic_fits",
    "scores_match_reference", "scores_traffic_fits", "check_scores_traffic",
    "softmax_rows_match_reference", "softmax_rows_is_numerically_stable", "softmax_rows_traffic_fits",
    "check_softmax_rows_traffic", "pv_matches_reference", "pv_traffic_fits", "check_pv_traffic",
    "online_softmax_matches_two_pass", "online_softmax_handles_masked_rows", "online_softmax_is_numerically_stable",
    "online_softmax_traffic_fits", "check_online_softmax_traffic",
    "fused_rows_matches_reference", "fused_rows_handles_causal", "fused_rows_is_numerically_stable",
    "fused_rows_traffic_fits", "check_fused_rows_traffic",
    "gemm_matches_reference", "gemm_edge_shapes", "gemm_v3_traffic_fits", "gemm_v4_traffic_fits",
    "flash_matches_reference", "flash_handles_kv_lens", "flash_is_numerically_stable",
    "flash_traffic_fits_tiling", "flash_skips_masked_tiles", "flash_causal_key_end",
    "cache_write_matches_reference", "cache_write_traffic_fits",
    "paged_v1_matches_reference", "paged_v1_handles_mixed_lengths", "paged_v1_is_numerically_stable",
    "paged_v1_traffic_fits", "merge_matches_reference", "merge_handles_empty_partitions", "merge_traffic_fits",
    "KernelFailed", "paged_inputs", "check_paged", "paged_v1_run", "paged_v2_run", "merge_run",
    "paged_v1_traffic_problems",
    "merge_traffic_problems", "cache_write_case", "cache_write_expected", "cache_write_run", "check_cache_write",
    "cache_write_traffic_problems",
    "fork_shares_blocks", "append_copies_on_write", "allocator_survives_a_workload",
    "fork_cases", "copy_on_write_cases", "random_workload", "allocator_problems", "check_allocator",
    "gqa_prefill_matches_reference", "gqa_prefill_handles_every_group", "gqa_prefill_traffic_fits",
    "gqa_decode_matches_reference", "gqa_decode_handles_every_group", "gqa_decode_traffic_fits",
    "gqa_prefill_case", "gqa_prefill_run", "check_gqa_prefill", "gqa_prefill_traffic_problems",
    "gqa_decode_run", "merge_partials", "check_gqa_decode", "gqa_decode_traffic_problems",
    "mixed_prefill_matches_reference", "mixed_prefill_long_rows", "mixed_prefill_large_logits",
    "mixed_decode_matches_reference", "mixed_decode_long_context", "mixed_decode_traffic_fits",
    "fp8_quantize_matches_reference", "fp8_quantize_computes_scales",
    "mixed_prefill_case", "mixed_prefill_run", "check_mixed_prefill", "mixed_decode_case", "mixed_decode_run",
    "check_mixed_decode", "fp8_corner_values", "fp8_quantize_case", "fp8_cache_case", "fp8_quantize_run",
    "fp8_round_trip_error",
    "check_fp8_codes", "check_fp8_scales", "FP8_RECIPROCAL_SCALES",
    "q8_0_quantize_matches_reference", "q8_0_quantize_edge_blocks", "q8_0_quantize_scales_per_block",
    "q4_1_gemv_matches_reference", "q4_1_gemv_position_coded", "q4_1_gemv_traffic_fits",
    "Q8_0_TIE_AMAXES", "q8_0_quantize_case", "q8_0_quantize_run", "check_q8_0_codes", "check_q8_0_scales",
    "q4_1_gemv_case", "q4_1_gemv_run", "check_q4_1_gemv", "q4_1_gemv_traffic_problems",
    "w8a8_gemm_exact_sums", "w8a8_gemm_scaled_epilogue", "w8a8_gemm_edges", "w8a8_gemm_case", "w8a8_gemm_run",
    "check_w8a8_gemm",
    "rmsnorm_q8_1_matches_reference", "rmsnorm_q8_1_edge_rows", "rmsnorm_q8_1_scales_and_sums",
    "RMSNORM_EPS", "rmsnorm_q8_1_case", "rmsnorm_q8_1_run", "rmsnorm_q8_1_traffic_problems", "check_rmsnorm_q8_1",
    "rope_matches_reference", "rope_pairs_and_positions", "rope_case", "rope_run", "check_rope",
    "swiglu_matches_reference", "swiglu_case", "swiglu_run", "check_swiglu",
    "decode_step_first_token", "decode_step_matches_reference", "decode_step_every_group",
    "decode_step_generates_greedy_tokens", "decode_step_case", "decode_step_cases", "check_decode_step",
    "decode_step_problems", "replay_logits", "step_data", "decode_step_on_kernels",
]
