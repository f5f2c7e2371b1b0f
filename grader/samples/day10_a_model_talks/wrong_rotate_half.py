"""The written-differently kernels, but RoPE pairs channel i with channel i + d / 2, Hugging Face's rotate-half
convention, on the GGUF file's weights whose pairs are adjacent (2i, 2i + 1). Random vectors and unit pairs both
show it: 4/6, both RoPE cells lost."""

EXPECT = {
    "status": "graded",
    "points": {
        "norm_matches_reference": 1,
        "norm_edge_rows": 1,
        "norm_scales_and_sums": 1,
        "rope_matches_reference": 0,
        "rope_pairs_and_positions": 0,
        "swiglu_matches_reference": 1,
        "decode_step_first_token": 1,
        "decode_step_sequence": 1,
        "decode_step_groups": 1,
        "decode_step_long": 1,
    },
}

BASE = "correct_alternative"

EDITS = {
    "rope_kernel": [("a = x[t, h, 2 * i]", "a = x[t, h, i]"),
                    ("b = x[t, h, 2 * i + 1]", "b = x[t, h, i + pairs_per_head]"),
                    ("out[t, h, 2 * i] = a * c - b * s", "out[t, h, i] = a * c - b * s"),
                    ("out[t, h, 2 * i + 1] = b * c + a * s", "out[t, h, i + pairs_per_head] = b * c + a * s")],
}
