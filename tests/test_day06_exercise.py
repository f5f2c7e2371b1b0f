"""Day 6 exercise: every grade cell's hidden tests fail a wrong kernel.

``test_exercises.py`` runs the day's notebooks through nbgrader's Validate (visible checks only) and
the grader's sample catalog grades whole submissions; neither shows that the hidden part of each
grade cell, on its own, catches a mistake. Here the answer cells of the solution notebook are run
with one classic mistake written in, and then only the hidden tests of one grade cell: they must
fail. Where the visible check cannot see the mistake (a size it does not try), that is asserted too.
"""

from __future__ import annotations

import pytest

from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day06_paged_attention", (
    "setup_device", "cache_write_kernel", "cache_write_launcher", "paged_v1_constants", "paged_v1_kernel",
    "paged_v1_launcher", "merge_kernel", "merge_launcher", "allocator_class"))


# grade cell -> (answer cell, edits, the mistake, whether the visible check misses it)
WRONG = {
    "cache_write_slots": (
        "cache_write_kernel",
        [("range(cuda.threadIdx.x, kv_heads * d, cuda.blockDim.x)",
          "range(cuda.threadIdx.x, min(kv_heads * d, cuda.blockDim.x), cuda.blockDim.x)")],
        "one pass of the block's threads: a token of more floats than threads is cut short", True),
    "cache_write_traffic": (
        "cache_write_kernel",
        [("        k_cache[block, head, slot, c] = k_new[t, head, c]\n",
          "        if k_cache[block, head, slot, c] != k_new[t, head, c]:\n"
          "            k_cache[block, head, slot, c] = k_new[t, head, c]\n")],
        "the cache is read to skip slots that already hold the value", False),
    "paged_v1_matches_reference": (
        "paged_v1_kernel", [("range(CHANNELS)", "range(1)")],
        "each lane keeps one channel: head_dim above 32 loses channels", True),
    "paged_v1_mixed_lengths": (
        "paged_v1_kernel",
        [("out[s, h, tid] = channel / block_sum if block_sum > 0 else float32(0.0)",
          "out[s, h, tid] = channel / block_sum")],
        "an empty context divides 0 by 0", False),
    "paged_v1_large_logits": (
        "paged_v1_kernel", [("p = math.exp(scores[u] - new_max)", "p = math.exp(scores[u])")],
        "exp of a score without the running maximum subtracted", False),
    "paged_v1_traffic": (
        "paged_v1_kernel", [("warp, context_lens[s], WARPS, acc)", "warp % 2, context_lens[s], WARPS // 2, acc)")],
        "two warps walk the same tokens: right values, every key and value read twice", False),
    "merge_matches_reference": (
        "merge_kernel",
        [("total += partial_sum[s, h, p] * weight", "total += partial_sum[s, h, p]"),
         ("channel += partial_acc[s, h, p, c] * weight", "channel += partial_acc[s, h, p, c]")],
        "the partials are added up without rescaling", False),
    "merge_handles_empty_partitions": (
        "merge_kernel",
        [("out[s, h, c] = channel / total if total > 0 else float32(0.0)", "out[s, h, c] = channel / total")],
        "a context of 0 divides 0 by 0", False),
    "merge_traffic": (
        "merge_kernel",
        [("channel += partial_acc[s, h, p, c] * weight",
          "partial_acc[s, h, p, c] *= weight\n                channel += partial_acc[s, h, p, c]")],
        "the accumulators are rescaled in place: right values, the partials written", False),
    "allocator_fork": (
        "allocator_class", [("self._refs[block] += 1", "pass")],
        "fork shares the blocks without counting the new references", False),
    "allocator_copy_on_write": (
        "allocator_class", [("elif self._refs[table[-1]] > 1:", "elif False:")],
        "append writes into a shared last page (no copy-on-write)", False),
    "allocator_workload": (
        "allocator_class", [("list(table), list(self._tokens_of(seq))", "list(table), self._tokens_of(seq)")],
        "parent and child share one list of tokens: an append to one lengthens both", False),
}


def test_every_grade_cell_has_a_wrong_kernel():
    assert set(WRONG) == NOTEBOOK.graded


@pytest.mark.filterwarnings("ignore::RuntimeWarning")       # the 0/0 of two of the mistakes
@pytest.mark.parametrize("grade_id", list(WRONG))
def test_hidden_tests_fail_a_wrong_kernel(grade_id):
    cell, edits, _, visible_misses_it = WRONG[grade_id]
    NOTEBOOK.hidden_tests_fail(grade_id, cell, edits, visible_misses_it)
