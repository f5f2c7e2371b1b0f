"""The page of a position taken as (position + 1) // block_size: the token in the last slot of every page is
written into the next page's block (or, past the table's last page, into the block a -1 entry names), the
others land right. The write still moves each element once: 1/13 (the other exercises left unanswered), losing only the slot cell."""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 0,
        "cache_write_traffic": 1,
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
    "cache_write_kernel": [("block = block_tables[token_seqs[t], position // block_size]",
                            "block = block_tables[token_seqs[t], (position + 1) // block_size]")],
}
