"""Our solution pasted: exactly ``attention_v4_flash_kernel`` of kernels/flash_attention.py. A graded
submission may not use the course's own kernels: 0/10, course_kernel."""

from grader.sample_cases import kernel_cell
from kernels.flash_attention import attention_v4_flash_kernel


EXPECT = {
    "status": "course_kernel",
    "points": {
        "flash_matches_reference_full": 0,
        "flash_matches_reference_causal": 0,
        "flash_handles_kv_lens": 0,
        "flash_is_numerically_stable": 0,
        "flash_traffic_fits_tiling": 0,
        "flash_skips_masked_tiles": 0,
    },
    "details": ["uses the course's own kernels"],
}

CELLS = {
    "flash_kernel": kernel_cell(attention_v4_flash_kernel),
}
