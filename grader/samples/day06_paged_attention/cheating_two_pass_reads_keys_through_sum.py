"""A two-pass decode kernel that hides its first pass from the traffic counter: thread 0 first scores every
key of the context to find the largest score, then the block folds the chunks against that maximum (no
rescale), and the first pass reads each key element through `.sum()` of a one-element slice,
k_cache[block, kv_head, slot, c:c + 1].sum(). numba-cuda compiles that for a GPU, and the counter once missed
such reads, so the kernel met the budget with every key read twice. The counter counts every element a
reduction reads now: k_cache is loaded twice the budget. The values are right. 3/13 (the other exercises
left unanswered): the decode kernel loses its traffic cell only."""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 0,
        "cache_write_traffic": 0,
        "paged_v1_matches_reference": 1,
        "paged_v1_mixed_lengths": 1,
        "paged_v1_large_logits": 1,
        "paged_v1_traffic": 0,
        "merge_matches_reference": 0,
        "merge_handles_empty_partitions": 0,
        "merge_traffic": 0,
        "allocator_fork": 0,
        "allocator_copy_on_write": 0,
        "allocator_workload": 0,
    },
}

BASE = "correct_alternative"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

EDITS = {
    "paged_v1_kernel": [
        ("""
         cuda.syncthreads()
         for start in range(0, n, THREADS):
         """, """
         cuda.syncthreads()
         if tid == 0:            # first pass: the context's largest score, its keys read through .sum()
             for t in range(n):
                 block = block_tables[s, t // block_size]
                 score = float32(0.0)
                 for c in range(d):
                     score += q_scaled[c] * k_cache[block, kv_head, t % block_size, c:c + 1].sum()
                 m = max(m, score)
             scores[0] = m
         cuda.syncthreads()
         m = scores[0]
         cuda.syncthreads()
         for start in range(0, n, THREADS):
         """),
        ("""
         chunk_max = m
         for j in range(count):
             chunk_max = max(chunk_max, scores[j])
         rescale = math.exp(m - chunk_max)
         total *= rescale
         acc *= rescale
         for j in range(count):
             p = math.exp(scores[j] - chunk_max)
         """, """
         for j in range(count):
             p = math.exp(scores[j] - m)         # m is the context's maximum already: nothing to rescale
         """),
        ("m = chunk_max", ""),
    ],
}
