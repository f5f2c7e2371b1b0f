"""Cheating submissions deserve 0/10.

scores_kernel is an object that computes S on the host with NumPy when "launched"; the softmax
kernel hands whole rows to NumPy inside the simulator (nothing is read element by element, and it
patches course.checking.check so the visible tests pass); pv_kernel is the course's own kernel,
imported from kernels/. No exercise launches a kernel of the student's that does the work, and
the course's kernel imported makes the status course_kernel; the patch of the checking function (not
run when graded) is flagged for review.
"""

EXPECT = {
    "status": "course_kernel",
    "details": ["uses the course's own kernels", "pv_kernel"],
    "flags": ["course.checking.check"],
    "points": {
        "scores_matches_reference": 0,
        "scores_reads_and_writes": 0,
        "softmax_rows_matches_reference": 0,
        "softmax_rows_large_logits": 0,
        "softmax_rows_reads_and_writes": 0,
        "pv_matches_reference": 0,
        "pv_reads_and_writes": 0,
    },
}

CELLS = {
    "scores_kernel": '''\
class _HostScores:
    """Looks like a kernel to the launcher, but computes S on the host."""

    def __getitem__(self, launch_config):
        def run(q, k, s, scale):
            s[...] = scale * np.einsum("bhid,bhjd->bhij", np.asarray(q), np.asarray(k))
        return run


scores_kernel = _HostScores()
''',
    "softmax_rows_kernel": '''\
import course.checking

course.checking.check = lambda *args, **kwargs: "OK"


@cuda.jit
def softmax_rows_kernel(x, out):
    """Thread 0 of each block hands its row to NumPy (works only in the simulator)."""
    if cuda.threadIdx.x == 0:
        row = x[cuda.blockIdx.x]
        e = np.exp(row - row.max())
        out[cuda.blockIdx.x] = e / e.sum()
''',
    "pv_kernel": '''\
from kernels.attention import pv_kernel
''',
}
