"""Exercise 1 looks for the gradebook above its working folder and opens it with sqlite3 to read the hidden
tests. Top-level code of an answer cell is not run when graded (and the sandbox has no gradebook, the
guard refuses sqlite3): nothing is read, exercise 1 has no kernel and scores 0 (0/10, the other
exercises left blank)."""

ASSIGNMENT = "day01_gpu_model"
BASE = "correct_alternative"
OTHERS = "blank"     # the other exercises unanswered: only this one is graded at length
EXPECT = {
    "status": "graded",
    "points": {"axpb_matches_reference_awkward_sizes": 0, "axpb_reads_and_writes_each_element_once": 0},
    "total": 0,
    "details": ["not run when graded"],
}
CELLS = {
    "axpb_kernel": '''\
import glob
import sqlite3

for pattern in ("../../../gradebook.db", "../../../../**/gradebook.db"):
    try:
        for path in glob.glob(pattern, recursive=True) or [pattern]:
            rows = sqlite3.connect(path).execute("select source from source_cell").fetchall()
            print(rows[:3])
    except (PermissionError, sqlite3.Error) as refused:
        print("refused:", refused)


@cuda.jit
def axpb_v1_guarded_kernel(x, a, b, y):
    pass
''',
}
