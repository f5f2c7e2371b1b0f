"""The page of a position taken as (position + 1) // block_size: the token in the last slot of every page is
written into the next page's block (or, past the table's last page, into the block a -1 entry names), the
others land right. The write still moves each element once: 11/13, losing only the slot cell."""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 0,
        "cache_write_traffic": 1,
        "paged_v1_matches_reference": 1,
        "paged_v1_mixed_lengths": 1,
        "paged_v1_large_logits": 1,
        "paged_v1_traffic": 1,
        "merge_matches_reference": 1,
        "merge_handles_empty_partitions": 1,
        "merge_traffic": 1,
        "allocator_fork": 1,
        "allocator_copy_on_write": 1,
        "allocator_workload": 1,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "cache_write_kernel": [("block = block_tables[token_seqs[t], position // block_size]",
                            "block = block_tables[token_seqs[t], (position + 1) // block_size]")],
}
