"""The written-differently kernels with three mistakes the course's own model meets, the decode step left unanswered.
RoPE writes a pair's first value before it reads the second, so the second reads the turned first one where the
model's step passes x as out. SwiGLU gives each thread one element, no grid-stride loop: past 1,024 blocks of 256
the last elements are never written. The norm's every thread sums the squares of the whole row itself: the values
are right, x is read 129 times against the budget's twice. 3/10: the norm's edge rows and scales, and RoPE's unit
pairs (out apart from x, a grid that covers them) keep their points."""

EXPECT = {
    "status": "graded",
    "points": {
        "norm_matches_reference": 0,
        "norm_edge_rows": 1,
        "norm_scales_and_sums": 1,
        "rope_matches_reference": 0,
        "rope_pairs_and_positions": 1,
        "swiglu_matches_reference": 0,
        "decode_step_first_token": 0,
        "decode_step_sequence": 0,
        "decode_step_groups": 0,
        "decode_step_long": 0,
    },
}

BASE = "correct_alternative"
OTHERS = "blank"

EDITS = {
    "norm_kernel": [("    j = i\n", "    j = 0\n"), ("        j += NORM_THREADS\n", "        j += 1\n"),
                    ("    squares[i] = acc\n    cuda.syncthreads()\n    half = NORM_THREADS // 2\n    while half > 0:\n"
                     "        if i < half:\n            squares[i] += squares[i + half]\n        cuda.syncthreads()\n"
                     "        half //= 2\n    rms = math.sqrt(squares[0] / float32(k) + eps)\n",
                     "    rms = math.sqrt(acc / float32(k) + eps)\n")],
    "rope_kernel": [("""
        a = x[t, h, 2 * i]
        b = x[t, h, 2 * i + 1]
        out[t, h, 2 * i] = a * c - b * s
        out[t, h, 2 * i + 1] = b * c + a * s
        """, """
        out[t, h, 2 * i] = x[t, h, 2 * i] * c - x[t, h, 2 * i + 1] * s
        out[t, h, 2 * i + 1] = x[t, h, 2 * i + 1] * c + x[t, h, 2 * i] * s
        """)],
    "swiglu_kernel": [("while n < rows * cols:", "if n < rows * cols:"), ("        n += cuda.gridsize(1)\n", "")],
}
