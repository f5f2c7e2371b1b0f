"""Exercise 1 writes nothing and its two test cells are deleted: the grader puts failing stand-ins back
(0 for exercise 1, 8/10) and reports the deletion (tampered)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {
    "status": "tampered",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 8,
    "details": ["deleted test cells", "axpb_reads_and_writes_each_element_once"],
}
DELETE = ["axpb_matches_reference_awkward_sizes", "axpb_reads_and_writes_each_element_once"]
CELLS = {
    "axpb_kernel": '''\
@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    pass
''',
}
