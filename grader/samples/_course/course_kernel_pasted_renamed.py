"""Exercise 2 (v4) pastes the course's register-blocked GEMM with every variable renamed and its docstring
and comments replaced: the syntax tree without names is the course's kernel, so v4 scores 0 and the row
says why (course_kernel); v3, written by the student, keeps its points."""

import re

from grader.sample_cases import kernel_cell
from kernels.gemm import gemm_v4_register_blocked_kernel

ASSIGNMENT = "day04_tiled_gemm"
BASE = "correct_alternative"
EXPECT = {
    "status": "course_kernel",
    "points": {"register_blocked_matches_reference": 0, "register_blocked_edge_shapes": 0,
               "register_blocked_reads_fall_by_block_tile": 0},
    "total": 5,
    "details": ["uses the course's own kernels", "gemm_v4_register_blocked_kernel"],
}


def _renamed(source: str) -> str:
    """Every local name of the kernel given a new one; the docstring and comments replaced."""
    import ast

    tree = ast.parse(source)
    function = tree.body[0]
    local = {a.arg for a in function.args.args}
    local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for name in sorted(local, key=len, reverse=True):
        source = re.sub(rf"\b{name}\b", f"my_{name}", source)
    source = re.sub(r'"""[\s\S]*?"""', '"""My own tiled GEMM."""', source, count=1)
    source = re.sub(r"#.*", "", source)
    return source.replace("def my_gemm_v4_register_blocked_kernel", "def gemm_v4_register_blocked_kernel")


CELLS = {"gemm_v4_register_blocked_kernel": _renamed(kernel_cell(gemm_v4_register_blocked_kernel))}
