"""Exercise 1's "kernel" is a Python object that kills the process (os._exit) when launched. Only
@cuda.jit functions of an answer cell run when graded, so there is no kernel to launch: exercise 1 scores
0, nothing crashes, the rest is graded (8/10) and os._exit is flagged for review."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 8,
    "details": ["not run when graded"],
    "flags": ["os._exit"],
}
CELLS = {
    "axpb_kernel": '''\
import os


class _Exits:
    def __getitem__(self, launch_config):
        def run(*args):
            os._exit(3)
        return run


axpb_v1_guarded_kernel = _Exits()
''',
}
