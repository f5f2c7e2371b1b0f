"""Our solution, exactly ``attention_v4_flash_kernel`` of kernels/flash_attention.py: 10/10."""

from grader.sample_cases import kernel_cell
from kernels.flash_attention import attention_v4_flash_kernel


EXPECT = {
    "status": "graded",
    "points": {
        "flash_matches_reference_full": 2,
        "flash_matches_reference_causal": 2,
        "flash_handles_kv_lens": 2,
        "flash_is_numerically_stable": 1,
        "flash_traffic_fits_tiling": 2,
        "flash_skips_masked_tiles": 1,
    },
}

CELLS = {
    "flash_kernel": kernel_cell(attention_v4_flash_kernel),
}
