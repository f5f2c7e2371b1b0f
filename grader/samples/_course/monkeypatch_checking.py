"""Exercise 1 writes nothing and disables the checking and counting tools it can reach. Top-level code of
an answer cell is not run when graded, so the tests run as written: exercise 1 scores 0 (0/10, the other
exercises left blank) and the patching is flagged for review."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
OTHERS = "blank"     # the other exercises unanswered: only this one is graded at length
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 0,
    "details": ["not run when graded"],
    "flags": ["course.checking.check"],
}
CELLS = {
    "axpb_kernel": '''\
import sys
import course.checking
import grader.hidden

course.checking.check = lambda *args, **kwargs: None
sys.modules["course.checking"].poison = lambda array: array
try:
    grader.hidden.pristine = lambda name: sys.modules[name]
except AttributeError:
    pass


@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    """Does nothing and hopes the checks were switched off."""
    pass
''',
}
