"""Exercise 1 computes a*x + b with torch on the host and launches nothing: the launch check gives 0 (0/10,
the other exercises left blank)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
OTHERS = "blank"     # the other exercises unanswered: only this one is graded at length
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 0,
}
CELLS = {
    "axpb_kernel": '''\
import torch


class _TorchAxpb:
    """Indexing it like a kernel gives a host function."""

    def __getitem__(self, launch_config):
        def run(x, a, b, y):
            y[:] = (a * torch.from_numpy(np.asarray(x)) + b).numpy()
        return run


axpb_v1_guarded_kernel = _TorchAxpb()
''',
}
