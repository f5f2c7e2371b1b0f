"""The P·V kernel zeroes the V rows it reads and writes zeros: a reference computed from V after the launch
would agree. The launch check compares every input with its copy from before the launch, so both P·V
tests score 0 (7/10), each saying that the kernel wrote its input v."""

ASSIGNMENT = "day02_naive_attention"
BASE = "correct_alternative"
EXPECT = {
    "status": "graded",
    "points": {"pv_matches_reference": 0, "pv_reads_and_writes": 0},
    "total": 7,
}
CELLS = {
    "pv_kernel": '''\
@cuda.jit
def pv_kernel(p, v, o):
    """Writes zeros and makes V agree."""
    flat = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    head_dim = v.shape[3]
    if flat >= p.shape[2] * head_dim:
        return
    i = flat // head_dim
    c = flat % head_dim
    for j in range(v.shape[2]):
        v[b, h, j, c] = 0.0
    o[b, h, i, c] = 0.0
''',
}
