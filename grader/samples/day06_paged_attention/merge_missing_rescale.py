"""The merge adds up the partial sums and accumulators as they are, without rescaling each by
exp(partial_max[p] - m): right for a context of one partition, wrong as soon as two partitions saw keys.
It reads and writes what it should: 1/13 (the other exercises left unanswered), losing both value cells of the merge."""

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
        "merge_traffic": 1,
        "allocator_fork": 0,
        "allocator_copy_on_write": 0,
        "allocator_workload": 0,
    },
}

BASE = "correct_ours"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

EDITS = {
    "merge_kernel": [("""
        weight = math.exp(partial_max[s, h, p] - m)
        total += partial_sum[s, h, p] * weight
        channel += partial_acc[s, h, p, c] * weight
        """, """
        total += partial_sum[s, h, p]
        channel += partial_acc[s, h, p, c]
        """)],
}
