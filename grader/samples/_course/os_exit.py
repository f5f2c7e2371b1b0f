"""Exercise 1's "kernel" kills the Python process (os._exit) whenever it is launched: each such cell is
reported as a crash, the kernel is restarted, exercise 1 scores 0 and the rest is graded (8/10)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_ours"
EXPECT = {
    "status": "kernel_crashed",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 8,
    "details": ["kernel crashed in axpb_matches_reference_awkward_sizes"],
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
