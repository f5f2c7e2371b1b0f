"""A right answer with lines a careful student adds (a seed, a warnings filter, a print, a timing): they
are left out when graded, reported as such, and change nothing: 10/10, graded, not tampered."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
EXPECT = {"status": "graded", "total": 10, "details": ["not run when graded"]}
EDITS = {
    "axpb_kernel": [("@cuda.jit", '''\
import time
import warnings

from numba.core.errors import NumbaPerformanceWarning

np.random.seed(0)
warnings.simplefilter("ignore", category=NumbaPerformanceWarning)
started = time.perf_counter()
print("defining the axpb kernel")


@cuda.jit''')],
}
