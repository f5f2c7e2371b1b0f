"""The P·V kernel zeroes the V rows it reads and writes zeros: a reference computed from V after the launch
would agree. The launch check compares every input with its copy from before the launch, so both P·V
tests score 0 (7/10), each saying that the kernel wrote its input v."""

ASSIGNMENT = "day02_naive_attention"
BASE = "correct_ours"
OTHERS = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"pv_matches_reference": 0, "pv_reads_and_writes": 0},
    "total": 7,
}
EDITS = {"pv_kernel": [("""
    acc = float32(0.0)
    for j in range(v.shape[2]):
        acc += p[b, h, i, j] * v[b, h, j, c]
    o[b, h, i, c] = acc
    """, """
    for j in range(v.shape[2]):
        v[b, h, j, c] = 0.0
    o[b, h, i, c] = 0.0
    """)]}
