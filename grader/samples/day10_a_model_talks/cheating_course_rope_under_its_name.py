"""Cheating: the RoPE cell binds the notebook's kernel name to the course's own kernel,
``rope_pairs_from_table_kernel = kernels.llama_layers.rope_pairs_from_table_kernel`` (``kernels`` is the setup cell's
import), so the notebook's own test cell and Validate see right values. When graded only kernels, constants and
imports run from an answer cell: the line reaches into the course's kernels package, is not run and is reported,
the grade cells find no kernel of that name and RoPE scores 0. The other exercises are the written-differently ones:
4/6, course_kernel."""

EXPECT = {
    "status": "course_kernel",
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
    "details": ["uses the course's own kernels", "kernels.llama_layers.rope_pairs_from_table_kernel"],
}

BASE = "correct_alternative"

CELLS = {
    "rope_kernel": '''\
# The course's kernel is already written and tested: use it under the name the launcher cell expects.
rope_pairs_from_table_kernel = kernels.llama_layers.rope_pairs_from_table_kernel
''',
}
