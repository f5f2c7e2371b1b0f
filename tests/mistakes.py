"""The classic mistakes of days 1-6, each a small change of one of the course's kernels.

``mistaken(kernel, old, new)`` copies a kernel of ``kernels/`` with one piece of its source replaced
and compiles the copy as a new ``@cuda.jit`` kernel, in the globals of the kernel's module (so
``TILE``, ``float32``, ``math`` mean what they mean there). Each mistake is therefore written as the
few characters a student would get wrong, and cannot drift from the kernel it changes: when that
kernel no longer contains ``old``, building the mistake fails and says so.

The copies' source is registered with ``linecache``, so ``inspect.getsource`` (and through it the
barrier diagnoses of ``course.checking.check``) reads them like a kernel written in a notebook.
"""

from __future__ import annotations

import inspect
import linecache
import textwrap

from kernels import attention, elementwise, flash_attention, gemm, kv_cache, paged_attention, reduction, softmax

__all__ = ["mistaken", "MISTAKES"]


def mistaken(kernel, old: str, new: str, *, label: str):
    """A copy of ``kernel`` (a @cuda.jit kernel of ``kernels/``) with ``old`` replaced by ``new`` once."""
    function = kernel.py_func
    source = textwrap.dedent(inspect.getsource(function))
    if source.count(old) != 1:
        raise ValueError(f"{label}: {function.__name__} must contain {old!r} exactly once to build this "
                         f"mistake; it contains it {source.count(old)} times (has the kernel changed?)")
    source = source.replace(old, new)
    filename = f"<mistake {label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(function.__globals__)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[function.__name__]


# label -> (course kernel, old source, new source). Labels say what the student got wrong.
MISTAKES = {
    # day 1
    "axpb_guard_drops_last": (elementwise.axpb_v1_guarded_kernel, "if i < x.size:", "if i < x.size - 1:"),
    "normalize_rows_tile_height_from_blockdim_x": (
        elementwise.normalize_rows_v1_3d_grid_kernel,
        "row = cuda.blockIdx.x * cuda.blockDim.y", "row = cuda.blockIdx.x * cuda.blockDim.x"),
    "tree_max_starts_at_zero": (reduction.row_stats_v2_shared_tree_kernel,
                                "largest = float32(-math.inf)", "largest = float32(0.0)"),
    "tree_stops_one_level_early": (reduction.row_stats_v2_shared_tree_kernel,
                                   "while half > 0:", "while half > 1:"),
    "tree_without_barrier": (reduction.row_stats_v2_shared_tree_kernel,
                             "        cuda.syncthreads()      # every write of this level lands before the next level reads\n",
                             ""),
    "tree_without_column_loop": (reduction.row_stats_v2_shared_tree_kernel,
                                 "for col in range(tid, x.shape[1], TREE_THREADS):",
                                 "for col in range(tid, min(tid + 1, x.shape[1])):"),
    "shuffle_forgets_other_warps": (reduction.row_stats_v3_warp_shuffle_kernel,
                                    "total = warp_sum[lane] if lane < WARPS_PER_BLOCK",
                                    "total = warp_sum[lane] if lane < 1"),
    # day 2
    "scores_without_scale": (attention.scores_kernel, "s[b, h, i, j] = acc * scale", "s[b, h, i, j] = acc"),
    "scores_transposed": (attention.scores_kernel, "s[b, h, i, j] = acc * scale", "s[b, h, j, i] = acc * scale"),
    "softmax_sum_tree_starts_at_a_quarter": (softmax.softmax_rows_kernel,
                                             "partial[tid] = thread_sum\n    cuda.syncthreads()\n    stride = SOFTMAX_THREADS // 2",
                                             "partial[tid] = thread_sum\n    cuda.syncthreads()\n    stride = SOFTMAX_THREADS // 4"),
    "softmax_without_max_subtraction": (softmax.softmax_rows_kernel,
                                        "    row_max = partial[0]\n    cuda.syncthreads()  # every thread",
                                        "    row_max = float32(0.0)\n    cuda.syncthreads()  # every thread"),
    # day 3
    "online_sum_not_rescaled": (softmax.softmax_online_kernel,
                                "l = l * math.exp(m - m_new) + math.exp(x_j - m_new)",
                                "l = l + math.exp(x_j - m_new)"),
    "online_merge_of_empty_states": (
        softmax.softmax_online_kernel,
        "            if m_new != -math.inf:\n"
        "                run_sum[tid] = (run_sum[tid] * math.exp(m_a - m_new)\n"
        "                                + run_sum[tid + stride] * math.exp(m_b - m_new))\n",
        "            run_sum[tid] = (run_sum[tid] * math.exp(m_a - m_new)\n"
        "                            + run_sum[tid + stride] * math.exp(m_b - m_new))\n"),
    "fused_accumulator_not_rescaled": (attention.attention_v2_fused_rows_kernel,
                                       "acc[c] = acc[c] * rescale + p * v[b, h, j, c]",
                                       "acc[c] = acc[c] + p * v[b, h, j, c]"),
    "fused_causal_j_below_i": (attention.attention_v2_fused_rows_kernel,
                               "n_keys = min(i + 1, n_keys)", "n_keys = min(i, n_keys)"),
    # day 4
    "gemm_second_barrier_removed": (
        gemm.gemm_v3_shared_tiles_kernel,
        "        cuda.syncthreads()  # everyone has finished reading before the next step overwrites\n", ""),
    "gemm_threads_outside_c_return": (gemm.gemm_v3_shared_tiles_kernel,
                                      "    acc = float32(0.0)\n",
                                      "    acc = float32(0.0)\n    if row >= m or col >= n:\n        return\n"),
    "gemm_last_k_step_lost": (gemm.gemm_v3_shared_tiles_kernel,
                              "for k0 in range(0, k, TILE):", "for k0 in range(0, k // TILE * TILE, TILE):"),
    "gemm_a_tile_offset_missing": (gemm.gemm_v3_shared_tiles_kernel,
                                   "a_tile[ty, tx] = a[row, k0 + tx]", "a_tile[ty, tx] = a[row, tx]"),
    # day 5
    "flash_causal_bound_per_thread": (flash_attention.attention_v4_flash_kernel,
                                      "kv_end = min(kv_end, tile_start + TILE_Q, n_queries)", "kv_end = min(kv_end, row + 1)"),
    "flash_accumulator_not_rescaled": (flash_attention.attention_v4_flash_kernel,
                                       "            for c in range(d):\n                acc[c] *= correction\n", ""),
    "flash_causal_j_below_i": (flash_attention.attention_v4_flash_kernel,
                               "n_valid = min(n_tile, row - kv_start + 1)", "n_valid = min(n_tile, row - kv_start)"),
    "flash_diagonal_tile_unmasked": (flash_attention.attention_v4_flash_kernel,
                                     "n_valid = min(n_tile, row - kv_start + 1)", "n_valid = n_tile"),
    "flash_kv_lens_ignored": (flash_attention.attention_v4_flash_kernel,
                              "kv_end = min(kv_lens[b], k.shape[2])", "kv_end = k.shape[2]"),
    "flash_last_key_tile_dropped": (flash_attention.attention_v4_flash_kernel,
                                    "for kv_start in range(0, kv_end, TILE_KV):",
                                    "for kv_start in range(0, kv_end - TILE_KV + 1, TILE_KV):"),
    "flash_empty_sequence_divides_by_zero": (flash_attention.attention_v4_flash_kernel,
                                             "        if row_sum > 0:  # a row with no allowed key (kv_lens[b] == 0) gives zeros\n"
                                             "            inv_sum = float32(1.0) / row_sum\n",
                                             "        inv_sum = float32(1.0) / row_sum\n"),
    # day 6
    "cache_write_page_of_next_position": (kv_cache.kv_cache_write_kernel,
                                          "position // block_size]", "(position + 1) // block_size]"),
    "cache_write_block_table_ignored": (kv_cache.kv_cache_write_kernel,
                                        "block = block_tables[token_seqs[t], position // block_size]",
                                        "block = position // block_size"),
    "paged_reads_one_page_past_end": (paged_attention.paged_attention_v1_block_per_head_kernel,
                                      "warp, context_lens[s], WARPS, acc)",
                                      "warp, (context_lens[s] // k_cache.shape[2] + 1) * k_cache.shape[2], WARPS, acc)"),
    "paged_kv_head_interleaved": (paged_attention.paged_attention_v1_block_per_head_kernel,
                                  "kv_head = h // (q.shape[1] // k_cache.shape[1])", "kv_head = h % k_cache.shape[1]"),
    "paged_query_head_as_kv_head": (paged_attention.paged_attention_v1_block_per_head_kernel,
                                    "kv_head = h // (q.shape[1] // k_cache.shape[1])", "kv_head = h"),
    "merge_without_rescale": (paged_attention.paged_attention_v2_merge_kernel,
                              "total += partial_sum[s, h, p] * weight\n                channel += partial_acc[s, h, p, c] * weight",
                              "total += partial_sum[s, h, p]\n                channel += partial_acc[s, h, p, c]"),
    "merge_accumulator_not_rescaled": (paged_attention.paged_attention_v2_merge_kernel,
                                       "channel += partial_acc[s, h, p, c] * weight", "channel += partial_acc[s, h, p, c]"),
    "merge_empty_context_divides_by_zero": (paged_attention.paged_attention_v2_merge_kernel,
                                            "out[s, h, c] = channel / total if total > 0 else float32(0.0)",
                                            "out[s, h, c] = channel / total"),
}
