"""Cheating beside the kernels. The prefill cell replaces the traffic budget of the checks with one
that finds nothing, then defines a kernel that reads every key from global memory in every row; the
decode cell hides a shell command in a default argument of its kernel. When graded only a kernel
(whose defaults are constants) runs from an answer cell: the patch never runs and the hidden tests
load the checks afresh, and the decode kernel, whose default would run code, is left out with its
command. 3/10: the prefill's values are right, its traffic and the whole decode exercise are not."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 2,
        "prefill_every_group": 1,
        "prefill_traffic": 0,
        "decode_matches_reference": 0,
        "decode_every_group": 0,
        "decode_traffic": 0,
    },
}

BASE = "correct_alternative"

CELLS = {
    "prefill_kernel": '''\
exercise_checks.gqa_prefill_traffic_problems = lambda *args, **kwargs: []
exercise_checks.gqa_prefill_traffic_fits = lambda *args, **kwargs: None


@cuda.jit
def gqa_prefill_tiles_kernel(q, k, v, kv_lens, o, scale, causal):
    """Every row reads its keys and values straight from global memory."""
    group = q.shape[1] // k.shape[1]
    parts = (group + ROWS_MAX - 1) // ROWS_MAX
    per_block = (group + parts - 1) // parts
    positions = min(TILE_POS, ROWS_MAX // per_block)
    kv_head = cuda.blockIdx.y // parts
    head_index = (cuda.blockIdx.y % parts) * per_block + cuda.threadIdx.x % per_block
    i = cuda.blockIdx.x * positions + cuda.threadIdx.x // per_block
    b = cuda.blockIdx.z
    if i >= q.shape[2] or head_index >= group:
        return
    h = kv_head * group + head_index
    d = q.shape[3]
    end = min(kv_lens[b], k.shape[2])
    if causal:
        end = min(end, i + 1)
    m = float32(-math.inf)
    total = float32(0.0)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    for c in range(d):
        acc[c] = float32(0.0)
    for j in range(end):
        x = float32(0.0)
        for c in range(d):
            x += q[b, h, i, c] * scale * k[b, kv_head, j, c]
        new = max(m, x)
        shrink = math.exp(m - new)
        w = math.exp(x - new)
        total = total * shrink + w
        for c in range(d):
            acc[c] = acc[c] * shrink + w * v[b, kv_head, j, c]
        m = new
    for c in range(d):
        o[b, h, i, c] = acc[c] / total if total > 0 else float32(0.0)
''',
    "decode_kernel": '''\
@cuda.jit
def gqa_decode_group_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                            partial_max, partial_sum, partial_acc, _=__import__("os").system("touch decode-was-here")):
    """A kernel whose default argument runs a shell command when it is defined."""
    pass
''',
}
