"""The allocator's append never copies: a token appended to a shared, partly filled last page is written
into that page, which the other sequence reads too (its tokens change under it). fork is right and keeps
its point; the copy-on-write and workload cells are lost: 11/13."""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 2,
        "cache_write_traffic": 1,
        "paged_v1_matches_reference": 1,
        "paged_v1_mixed_lengths": 1,
        "paged_v1_large_logits": 1,
        "paged_v1_traffic": 1,
        "merge_matches_reference": 1,
        "merge_handles_empty_partitions": 1,
        "merge_traffic": 1,
        "allocator_fork": 1,
        "allocator_copy_on_write": 0,
        "allocator_workload": 0,
    },
}

BASE = "correct_alternative"

EDITS = {
    "allocator_class": [("shared = offset > 0 and self.refcount(table[-1]) > 1", "shared = False")],
}
