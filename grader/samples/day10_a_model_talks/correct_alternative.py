"""Correct, written differently: the norm sums its squares with a tree in shared memory (no shuffles), divides by
the root instead of multiplying by its inverse, and each warp finds a block's max and sum with shfl_down and a
broadcast from lane 0, rounding halves away from zero from the floor of |y|; RoPE takes a pair's token, head and
index apart from its flat number with a while loop over the grid's stride; SwiGLU indexes rows and columns and
writes silu as z times its sigmoid; the decode step is written as one function per sublayer with keyword arguments,
the layers' weights fetched first: 10/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "norm_matches_reference": 1,
        "norm_edge_rows": 1,
        "norm_scales_and_sums": 1,
        "rope_matches_reference": 1,
        "rope_pairs_and_positions": 1,
        "swiglu_matches_reference": 1,
        "decode_step_first_token": 1,
        "decode_step_sequence": 1,
        "decode_step_groups": 1,
        "decode_step_long": 1,
    },
}

CELLS = {
    "norm_kernel": '''\
@cuda.jit(device=True)
def lane_max(a):
    """The warp's largest a: a shfl_down tree into lane 0, then lane 0's value to every lane."""
    for step in (16, 8, 4, 2, 1):
        a = max(a, cuda.shfl_down_sync(FULL_MASK, a, step))
    return cuda.shfl_sync(FULL_MASK, a, 0)


@cuda.jit(device=True)
def lane_total(a):
    """The warp's sum of a: a shfl_down tree into lane 0, then lane 0's value to every lane."""
    for step in (16, 8, 4, 2, 1):
        a += cuda.shfl_down_sync(FULL_MASK, a, step)
    return cuda.shfl_sync(FULL_MASK, a, 0)


@cuda.jit(device=True)
def roundf(r):
    """The integer nearest to r, halves away from zero: the floor of |r|, one more at a rest of one half or more."""
    m = abs(r)
    n = int32(math.floor(m))
    if m - float32(n) >= float32(0.5):
        n += 1
    return -n if r < float32(0.0) else n


@cuda.jit
def rmsnorm_q8_1_block_per_row_kernel(x, weight, eps, x_q, x_scale, x_sum):
    """A tree in shared memory for the row's sum of squares; then warp w quantizes the blocks w, w + 4, ..."""
    squares = cuda.shared.array(NORM_THREADS, float32)
    row = cuda.blockIdx.x
    i = cuda.threadIdx.x
    k = x.shape[1]
    acc = float32(0.0)
    j = i
    while j < k:
        v = x[row, j]
        acc += v * v
        j += NORM_THREADS
    squares[i] = acc
    cuda.syncthreads()
    half = NORM_THREADS // 2
    while half > 0:
        if i < half:
            squares[i] += squares[i + half]
        cuda.syncthreads()
        half //= 2
    rms = math.sqrt(squares[0] / float32(k) + eps)
    lane = i % WARP
    for b in range(i // WARP, k // QK, NORM_WARPS):
        y = x[row, b * QK + lane] / rms * weight[b * QK + lane]
        d = lane_max(abs(y)) / float32(127.0)
        total = lane_total(y)
        code = int32(0)
        if d > float32(NO_INVERSE):
            code = roundf(y * (float32(1.0) / d))
        x_q[row, b * QK + lane] = code
        if lane == 0:
            x_scale[row, b] = d
            x_sum[row, b] = total
''',
    "rope_kernel": '''\
@cuda.jit
def rope_pairs_from_table_kernel(x, positions, table, out):
    """A thread per pair: its token, head and index taken apart from the pair's flat number."""
    tokens, heads, d = x.shape
    pairs_per_head = d // 2
    n = cuda.grid(1)
    while n < tokens * heads * pairs_per_head:
        t = n // (heads * pairs_per_head)
        h = (n // pairs_per_head) % heads
        i = n % pairs_per_head
        p = positions[t]
        c = table[p, i, 0]
        s = table[p, i, 1]
        a = x[t, h, 2 * i]
        b = x[t, h, 2 * i + 1]
        out[t, h, 2 * i] = a * c - b * s
        out[t, h, 2 * i + 1] = b * c + a * s
        n += cuda.gridsize(1)
''',
    "swiglu_kernel": '''\
@cuda.jit
def swiglu_elementwise_kernel(gate, up, out):
    """Row and column of each element from its flat number; silu(g) = g * sigmoid(g)."""
    rows, cols = out.shape
    n = cuda.grid(1)
    while n < rows * cols:
        r = n // cols
        c = n % cols
        g = gate[r, c]
        sigmoid = float32(1.0) / (float32(1.0) + math.exp(-g))
        out[r, c] = g * sigmoid * up[r, c]
        n += cuda.gridsize(1)
''',
    "decode_step": '''\
def attention_block(ops, i, w, x, position):
    h = ops.rmsnorm(x=x, weight=w.attn_norm)
    v = ops.gemv(matrix=w.attn_v, x=h)
    k = ops.rope(x=ops.gemv(matrix=w.attn_k, x=h), position=position)
    q = ops.rope(x=ops.gemv(matrix=w.attn_q, x=h), position=position)
    ops.write_cache(layer=i, k=k, v=v, position=position)
    return ops.add(x=ops.gemv(w.attn_output, ops.attention(layer=i, q=q, context=position + 1)), y=x)


def mlp_block(ops, w, x):
    h = ops.rmsnorm(x, w.ffn_norm)
    up = ops.gemv(w.ffn_up, h)
    gate = ops.gemv(w.ffn_gate, h)
    return ops.add(ops.gemv(w.ffn_down, ops.swiglu(gate=gate, up=up)), x)


def decode_step(ops, token, position):
    """The logits of the token after ``token``, at ``position``: attention, then the MLP, block by block."""
    weights = [ops.layer(i) for i in range(ops.layers)]
    x = ops.embed(token=token)
    for i, w in enumerate(weights):
        x = mlp_block(ops, w, attention_block(ops, i, w, x, position))
    return ops.gemv(ops.embedding, ops.rmsnorm(x, ops.output_norm))
''',
}
