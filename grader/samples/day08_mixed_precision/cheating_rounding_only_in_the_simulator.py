"""A quantize kernel that rounds to nearest even only in the simulator: its rounding device function asks a
device function of its own, _on_simulator(), which returns numba.config.ENABLE_CUDASIM, and truncates
when that is 0, as on every GPU. The kernel compiles for a GPU (numba freezes the number into the code), and
in the simulator every code and scale is right, so the rounding would be proven on a branch no GPU runs. The
launch check walks the kernel, _e4m3_code, _round_half_even and _on_simulator, finds numba's configuration
and refuses every launch before it runs (course.kernel_reach.SimulatorDependent): 0 for both quantize cells,
the attention kernels left unanswered, 0/10, and the row's details say what it read (without that check it
scores 3/10: both quantize cells)."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_long_rows": 0,
        "prefill_large_logits": 0,
        "decode_matches_reference": 0,
        "decode_long_context": 0,
        "decode_traffic": 0,
        "quantize_rounds_to_nearest_even": 0,
        "quantize_computes_scales": 0,
    },
    "details": ["reads what differs between the simulator and a GPU", "numba.config.ENABLE_CUDASIM"],
}

BASE = "correct_alternative"
OTHERS = "blank"             # the attention kernels unanswered: they score 0 at once

EDITS = {
    "quantize_kernel": [("""
                         @cuda.jit(device=True)
                         def _round_half_even(r):
                         """, """
                         import numba


                         @cuda.jit(device=True)
                         def _on_simulator():
                             return numba.config.ENABLE_CUDASIM


                         @cuda.jit(device=True)
                         def _round_half_even(r):
                         """),
                        ("n = int32(math.floor(r + float32(0.5)))", """
                         if not _on_simulator():         # on a GPU: truncated, never tested
                             return int32(r)
                         n = int32(math.floor(r + float32(0.5)))
                         """)],
}
