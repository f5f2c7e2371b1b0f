"""A merge kernel that calls the course's own device function, kernels.paged_attention._merge_partitions,
under a name of its own: the body binds ``merge = kernels.paged_attention._merge_partitions`` (``kernels``
is the setup cell's import) and calls ``merge(...)``, where no scan of the cell's top-level statements
looks. The launch check follows what the kernel reads by value, reaches a device function whose code is in
kernels/ and refuses every launch before it runs (course.kernel_reach.CourseKernelUsed): the row is
``course_kernel``, 0 for the three merge cells, the other exercises left unanswered, 0/13. (Without that
check the GPU compile would decide, and its answer would depend on whether the compiler's helper happened
to have imported kernels.paged_attention, and the simulator would then run the course's merge.)"""

EXPECT = {
    "status": "course_kernel",
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
    "details": ["uses the course's own kernels", "kernels.paged_attention._merge_partitions"],
}

CELLS = {
    "merge_kernel": '''\
@cuda.jit
def paged_attention_v2_merge_kernel(partial_max, partial_sum, partial_acc, out):
    """Block (h, s): thread c asks the course's merge for channel c of out[s, h]."""
    merge = kernels.paged_attention._merge_partitions     # the setup cell's import, under a name of my own
    h = cuda.blockIdx.x
    s = cuda.blockIdx.y
    c = cuda.threadIdx.x
    if c < out.shape[2]:
        out[s, h, c] = merge(partial_max, partial_sum, partial_acc, s, h, c)
''',
}
