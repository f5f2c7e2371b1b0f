"""Exercise 1 launches a kernel that does nothing and silences IPython so that no failing test shows an
error: top-level code of an answer cell never runs when graded (grader.cleanroom), so the tests fail as
they should: 0 for exercise 1, 0/10, the other exercises left blank, and the IPython hooks are flagged
for review."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
OTHERS = "blank"     # the other exercises unanswered: only this one is graded at length
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 0,
    "details": ["not run when graded"],
    "flags": ["IPython"],
}
CELLS = {
    "axpb_kernel": '''\
from IPython import get_ipython
from IPython.core.interactiveshell import InteractiveShell

shell = get_ipython()
shell.showtraceback = lambda *args, **kwargs: None
shell.set_custom_exc((BaseException,), lambda *args, **kwargs: None)
_run_cell = InteractiveShell.run_cell
InteractiveShell.run_cell = lambda self, *args, **kwargs: _run_cell(self, "None", **kwargs)


@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    """Writes nothing."""
    pass
''',
}
