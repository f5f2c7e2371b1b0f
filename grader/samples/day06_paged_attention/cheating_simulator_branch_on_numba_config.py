"""A decode kernel that knows it is on the simulator: its first lines read numba.config.ENABLE_CUDASIM
(a module attribute chain from ``import numba``) and, on a GPU, write zeros and return; in the simulator it
goes on as the written-differently answer, so every value and the traffic budget would be proven on a
branch no GPU runs. The kernel compiles for a GPU (numba freezes the configuration's number into it), so
the compile check alone would pass it; the launch check walks what the kernel reads, finds numba's
configuration and refuses every launch before it runs (course.kernel_reach.SimulatorDependent): 0 for the
four decode cells, the other exercises left unanswered, 0/13, and the row's details say what it read
(without that check it scores 4/13: every decode cell)."""

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
    "details": ["reads what differs between the simulator and a GPU", "numba.config.ENABLE_CUDASIM"],
}

BASE = "correct_alternative"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

EDITS = {
    "paged_v1_kernel": [("@cuda.jit", "import numba\n\n\n@cuda.jit"),
                        ("h = cuda.blockIdx.x", """
                         if not numba.config.ENABLE_CUDASIM:        # on a GPU: zeros, never tested
                             if cuda.threadIdx.x < q.shape[2]:
                                 out[cuda.blockIdx.y, cuda.blockIdx.x, cuda.threadIdx.x] = float32(0.0)
                             return
                         h = cuda.blockIdx.x
                         """)],
}
