"""An honest answer with a small helper class below its kernel: the helper keeps the kernel in
``self.kernel`` and is given an attribute named like one of the course's kernels. Nothing of the
course is used, so the row is ``graded`` with full marks (a rule that judged by names called it
``course_kernel``). The helper is not a kernel and is not run when graded; the kernel does not need it."""

from grader.sample_cases import SAMPLES_DIR, load_case

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 1, "axpb_reads_and_writes_each_element_once": 1},
    "total": 10,
}
_HELPER = '''

class Launch:
    """Keeps a kernel and its block size, so that trying it reads shorter."""

    def __init__(self, kernel, threads=256):
        self.kernel = kernel
        self.threads = threads

    def __call__(self, x, a, b, y):
        self.kernel[(x.size + self.threads - 1) // self.threads, self.threads](x, a, b, y)


launch = Launch(axpb_v1_guarded_kernel)
launch.row_stats_v3_warp_shuffle_kernel = axpb_v1_guarded_kernel
'''
CELLS = {"axpb_kernel": load_case(SAMPLES_DIR / ASSIGNMENT / f"{BASE}.py").cells["axpb_kernel"] + _HELPER}
