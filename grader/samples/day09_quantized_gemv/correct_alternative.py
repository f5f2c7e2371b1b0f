"""Correct, written differently: the quantizer gives each thread of the grid one value (its warp one block),
finds amax with shfl_down and a broadcast from lane 0, returns early from a warp with no block, and rounds
halves away from zero from the floor of |y|; the GEMV decodes d and m with math.ldexp, rebuilds every weight as
d q + m before multiplying it by its activation (the minimum paid per weight, not per block: more work, the same
numbers to float32's rounding), and sums the lanes with shfl_down after the row's loop; the GEMM has no shared
memory: each thread reads the words of its 4 x 4 outputs' rows straight from global memory, takes each word's 4
codes apart itself (no dp4a) and multiplies sa by sw before their sum: 10/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "quantize_rounds_like_the_reference": 1,
        "quantize_edge_blocks": 1,
        "quantize_scales_per_block": 1,
        "gemv_matches_reference": 2,
        "gemv_position_coded": 1,
        "gemv_traffic": 1,
        "w8a8_exact_sums": 1,
        "w8a8_scaled_epilogue": 1,
        "w8a8_edges": 1,
    },
}

CELLS = {
    "quantize_kernel": '''\
@cuda.jit(device=True)
def lane_max(a):
    """The warp's largest a: a shfl_down tree into lane 0, then lane 0's value to every lane."""
    for step in (16, 8, 4, 2, 1):
        a = max(a, cuda.shfl_down_sync(FULL_MASK, a, step))
    return cuda.shfl_sync(FULL_MASK, a, 0)


@cuda.jit(device=True)
def roundf(r):
    """The integer nearest to r, halves away from zero (C's roundf): the floor of |r|, one more at a rest of
    one half or more, the sign of r put back."""
    m = abs(r)
    n = int32(math.floor(m))
    if m - float32(n) >= float32(0.5):
        n += 1
    return -n if r < float32(0.0) else n


@cuda.jit
def q8_0_quantize_kernel(x, codes, scales):
    """Thread t of the grid holds value t % 32 of block t // 32, the blocks counted row after row."""
    t = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    blk = t // 32
    per_row = x.shape[1] // 32
    if blk >= x.shape[0] * per_row:         # a whole warp past the last block
        return
    r = blk // per_row
    c = (blk % per_row) * 32 + t % 32
    value = x[r, c]
    scale = lane_max(abs(value)) / float32(127.0)
    inv = float32(0.0)
    if scale > float32(NO_INVERSE):
        inv = float32(1.0) / scale
    codes[r, c] = roundf(value * inv)
    if t % 32 == 0:
        scales[r, blk % per_row] = scale
''',
    "gemv_kernel": '''\
@cuda.jit(device=True)
def fp16_value(lo, hi):
    """The fp16 number of two little-endian bytes: sign bit, exponent field, fraction, rebuilt with ldexp."""
    e = (int32(hi) >> 2) & 31
    f = ((int32(hi) & 3) << 8) | int32(lo)
    if e == 0:
        v = math.ldexp(float32(f), -24)
    else:
        v = math.ldexp(float32(f + 1024), int(e) - 25)
    if int32(hi) & 128:
        v = -v
    return float32(v)


@cuda.jit
def q4_1_gemv_warp_per_row_kernel(w, x, y):
    """A warp per row; each weight rebuilt as d q + m and multiplied by its activation; shfl_down adds the lanes."""
    warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // 32
    lane = cuda.threadIdx.x & 31
    total = float32(0.0)
    if warp < w.shape[0]:
        for blk in range(lane, w.shape[1], 32):
            scale = fp16_value(w[warp, blk, 0], w[warp, blk, 1])
            low = fp16_value(w[warp, blk, 2], w[warp, blk, 3])
            base = blk * 32
            for i in range(16):
                packed = int32(w[warp, blk, 4 + i])
                total += (scale * float32(packed % 16) + low) * x[base + i]
                total += (scale * float32(packed // 16) + low) * x[base + 16 + i]
    for step in (16, 8, 4, 2, 1):
        total += cuda.shfl_down_sync(FULL_MASK, total, step)
    if warp < w.shape[0] and lane == 0:
        y[warp] = total
''',
    "gemm_kernel": '''\
@cuda.jit
def w8a8_gemm_v1_dp4a_kernel(a_q, sa, w_q, sw, y):
    """Without shared memory: thread (tx, ty) of block (bx, by) owns the 4 x 4 outputs at tokens 64 by + 4 ty + i
    and channels 64 bx + 4 tx + j, reads their rows of A and W word by word from global memory and takes each
    word's 4 codes apart itself."""
    first_m = cuda.blockIdx.y * BLOCK_M + THREAD_M * cuda.threadIdx.y
    first_n = cuda.blockIdx.x * BLOCK_N + THREAD_N * cuda.threadIdx.x
    rows = min(THREAD_M, a_q.shape[0] - first_m)
    cols = min(THREAD_N, w_q.shape[0] - first_n)
    sums = cuda.local.array((THREAD_M, THREAD_N), int32)
    for i in range(THREAD_M):
        for j in range(THREAD_N):
            sums[i, j] = 0
    for word in range(a_q.shape[1]):
        for i in range(rows):
            packed_a = a_q[first_m + i, word]
            for j in range(cols):
                packed_w = w_q[first_n + j, word]
                for byte in range(4):
                    code_a = int32((packed_a >> (8 * byte)) & 0xFF)
                    code_w = int32((packed_w >> (8 * byte)) & 0xFF)
                    if code_a >= 128:
                        code_a -= 256
                    if code_w >= 128:
                        code_w -= 256
                    sums[i, j] += code_a * code_w
    for i in range(rows):
        for j in range(cols):
            y[first_m + i, first_n + j] = float32(sums[i, j]) * (sa[first_m + i] * sw[first_n + j])
''',
}
