"""Cheating: the decode step imports the course's own step (``kernels.decode_step``), which works in the notebook.
When graded, the import is read as the course's code (course_kernel) and not run; and were it run, the step's process
holds nothing of the course but its operations. The four cells of the step score 0; the kernels are the
written-differently ones: 6/10."""

EXPECT = {
    "status": "course_kernel",
    "points": {
        "norm_matches_reference": 1,
        "norm_edge_rows": 1,
        "norm_scales_and_sums": 1,
        "rope_matches_reference": 1,
        "rope_pairs_and_positions": 1,
        "swiglu_matches_reference": 1,
        "decode_step_first_token": 0,
        "decode_step_sequence": 0,
        "decode_step_groups": 0,
        "decode_step_long": 0,
    },
    "details": ["uses the course's own kernels", "imports kernels.decode_step"],
}

BASE = "correct_alternative"

CELLS = {
    "decode_step": '''\
import kernels.decode_step


def decode_step(ops, token, position):
    """The course's step, already written and tested."""
    return kernels.decode_step.decode_step(ops, token, position)
''',
}
