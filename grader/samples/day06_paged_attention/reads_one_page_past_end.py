"""The decode kernel counts a context's pages as context_lens // block_size + 1 and walks them whole: it
reads the tail of a partial last page, or one page past the end (a -1 table entry) when the last page is
full. Those slots hold NaN in the tests, and the reads exceed the budget: 0/13 (the other exercises left unanswered), losing every cell of the
decode kernel. (Its device functions read the lane with cuda.laneid, a line apart from ours, so the cell
is the student's own.)"""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 0,
        "cache_write_traffic": 0,
        "paged_v1_matches_reference": 0,
        "paged_v1_mixed_lengths": 0,
        "paged_v1_large_logits": 0,
        "paged_v1_traffic": 0,
        "merge_matches_reference": 0,
        "merge_handles_empty_partitions": 0,
        "merge_traffic": 0,
        "allocator_fork": 0,
        "allocator_copy_on_write": 0,
        "allocator_workload": 0,
    },
}

BASE = "correct_ours"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

EDITS = {
    "paged_v1_kernel": [
        ("lane = cuda.threadIdx.x % WARP", "lane = cuda.laneid"),
        ("lane = tid % WARP", "lane = cuda.laneid"),
        ("""
         running_max, running_sum = _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale,
                                                 warp, context_lens[s], WARPS, acc)
         """, """
         pages = context_lens[s] // k_cache.shape[2] + 1        # a page too many when the last one is full
         running_max, running_sum = _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale,
                                                 warp, pages * k_cache.shape[2], WARPS, acc)
         """),
    ],
}
