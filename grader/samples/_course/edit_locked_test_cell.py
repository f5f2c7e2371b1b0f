"""Exercise 1 writes nothing and its two test cells are edited to `pass`: the grader grades the original
cells (0 for exercise 1, 8/10) and reports the edit (tampered)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {
    "status": "tampered",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 8,
    "details": ["edited locked cells", "axpb_matches_reference_awkward_sizes"],
}
CELLS = {
    "axpb_kernel": '''\
@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    pass
''',
    "axpb_matches_reference_awkward_sizes": '"""Edited by the student."""\npass\n',
    "axpb_reads_and_writes_each_element_once": '"""Edited by the student."""\npass\n',
}
