"""The allocator's append never copies: a token appended to a shared, partly filled last page is written
into that page, which the other sequence reads too (its tokens change under it). fork is right and keeps
its point; the copy-on-write and workload cells are lost; the kernels are left unanswered: 1/13."""

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
        "allocator_fork": 1,
        "allocator_copy_on_write": 0,
        "allocator_workload": 0,
    },
}

BASE = "correct_alternative"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

EDITS = {
    "allocator_class": [("shared = offset > 0 and self.refcount(table[-1]) > 1", "shared = False")],
}
