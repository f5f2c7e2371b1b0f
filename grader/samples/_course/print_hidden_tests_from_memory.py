"""Exercise 1 is a host function that prints the source of the cell calling it (IPython's input history
In[-1], i.e. the hidden test): it launches nothing, so 0 for exercise 1 (0/10, the other exercises left
blank), the use of the history is flagged for review, and the feedback shows none of the printed hidden
lines (the leak test checks it)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
OTHERS = "blank"     # the other exercises unanswered: only this one is graded at length
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 0,
    "flags": ["In (the kernel's input history"],
}
CELLS = {
    "axpb_kernel": '''\
class _Spy:
    def __getitem__(self, launch_config):
        def run(x, a, b, y):
            print(In[-1])
            y[:] = a * np.asarray(x) + b
        return run


axpb_v1_guarded_kernel = _Spy()
''',
}
