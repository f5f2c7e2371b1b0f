"""Exercise 1 tries to read the solution notebook next to the course package and run its kernel. Top-level
code of an answer cell is not run when graded (and the sandbox has no solutions): nothing is read,
exercise 1 has no kernel and scores 0 (0/10, the other exercises left blank)."""

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
import json
import pathlib
import re

solutions = pathlib.Path(course.__file__).resolve().parent.parent / "solutions"
try:
    notebook = json.loads((solutions / "day01_gpu_model" / "day01_gpu_model.ipynb").read_text())
    cell = next("".join(c["source"]) for c in notebook["cells"] if "def axpb_v1_guarded_kernel" in "".join(c["source"]))
    exec(re.sub(r"### (BEGIN|END) SOLUTION", "", cell))
except PermissionError as refused:
    print("could not read the solution:", refused)

    @cuda.jit
    def axpb_v1_guarded_kernel(x, a, b, y):
        pass
''',
}
