"""Our solution pasted: exactly the kernels of kernels/kv_cache.py and kernels/paged_attention.py (the decode
kernel with its two device functions), and the allocator's class, kernels/block_manager.py's
BlockManager. A graded submission may not use the course's own code: 0/13, course_kernel."""

import inspect

from grader.sample_cases import kernel_cell
from kernels.block_manager import BlockManager
from kernels.kv_cache import kv_cache_write_kernel
from kernels.paged_attention import (_merge_warps, _warp_attend, paged_attention_v1_block_per_head_kernel,
                                     paged_attention_v2_merge_kernel)

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
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "cache_write_kernel": kernel_cell(kv_cache_write_kernel),
    "paged_v1_kernel": "\n\n".join(kernel_cell(f) for f in (_warp_attend, _merge_warps,
                                                              paged_attention_v1_block_per_head_kernel)),
    "merge_kernel": kernel_cell(paged_attention_v2_merge_kernel),
    "allocator_class": inspect.getsource(BlockManager),
}
