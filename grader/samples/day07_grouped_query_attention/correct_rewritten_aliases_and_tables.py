"""Correct, written the way a student might (issue 25): ``jit`` imported as ``gpu_kernel`` and from
``numba.cuda``, ``cuda`` aliased (``import numba.cuda as nc``, ``from numba import cuda as gpu``), constants
derived from the given ones (``KEYS: int = 2 * (TILE_KV // 2)``, ``LANES: int = WARP``), the butterfly's offsets
in a table built by an expression (``tuple(LANES >> k for k in range(1, 6))``), a device function defined after
the kernel that calls it; the only lines not run when graded are a print and an assert: 10/10
(correct_alternative's kernels otherwise)."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 2,
        "prefill_every_group": 1,
        "prefill_traffic": 2,
        "decode_matches_reference": 2,
        "decode_every_group": 1,
        "decode_traffic": 2,
    },
    "details": ["not run when graded"],
}

CELLS = {
    "prefill_kernel": '''\
"""Exercise 1, my way."""
import numba.cuda as nc
from numba.cuda import jit as gpu_kernel

KEYS: int = 2 * (TILE_KV // 2)              # the given tile, derived
NEG_INF = float32(-math.inf)
POSITIONS_PER_HEAD = [TILE_POS // g for g in range(1, 9)]    # a table built once (for reading, not the kernel)
print("positions per block for groups 1 to 8:", POSITIONS_PER_HEAD)


@gpu_kernel
def gqa_prefill_tiles_kernel(q, k, v, kv_lens, o, scale, causal):
    """Rows head-major: thread t serves head t // positions of the block at position t % positions."""
    heads = q.shape[1]
    kv_heads = k.shape[1]
    group = heads // kv_heads
    parts = (group + ROWS_MAX - 1) // ROWS_MAX
    per_block = (group + parts - 1) // parts
    positions = min(TILE_POS, ROWS_MAX // per_block)
    kv_head = nc.blockIdx.y // parts
    head_index = (nc.blockIdx.y % parts) * per_block + nc.threadIdx.x // positions
    head = kv_head * group + head_index
    b = nc.blockIdx.z
    n = q.shape[2]
    d = q.shape[3]
    first_position = nc.blockIdx.x * positions
    i = first_position + nc.threadIdx.x % positions
    mine = i < n and head_index < group
    k_tile = nc.shared.array((KEYS, HEAD_DIM_MAX), float32)
    v_tile = nc.shared.array((KEYS, HEAD_DIM_MAX), float32)
    qs = nc.local.array(HEAD_DIM_MAX, float32)
    out = nc.local.array(HEAD_DIM_MAX, float32)
    for c in range(d):
        out[c] = float32(0.0)
        qs[c] = float32(0.0)
        if mine:
            qs[c] = q[b, head, i, c] * scale
    m = NEG_INF
    l = float32(0.0)
    last_key = min(kv_lens[b], k.shape[2])
    if causal and first_position + positions < last_key:
        last_key = first_position + positions
    if causal and n < last_key:
        last_key = n
    for start in range(0, last_key, TILE_KV):
        count = min(TILE_KV, last_key - start)
        for j in range(count):
            for c in range(nc.threadIdx.x, d, nc.blockDim.x):
                k_tile[j, c] = k[b, kv_head, start + j, c]
                v_tile[j, c] = v[b, kv_head, start + j, c]
        nc.syncthreads()
        usable = count
        if causal and i + 1 - start < usable:
            usable = i + 1 - start
        if mine and usable > 0:
            tile_max = m
            for j in range(usable):
                dot = row_dot(qs, k_tile, j, d)
                tile_max = max(tile_max, dot)
            shrink = math.exp(m - tile_max)
            l = l * shrink
            for c in range(d):
                out[c] = out[c] * shrink
            for j in range(usable):
                dot = row_dot(qs, k_tile, j, d)
                w = math.exp(dot - tile_max)
                l += w
                for c in range(d):
                    out[c] += w * v_tile[j, c]
            m = tile_max
        nc.syncthreads()
    if mine:
        for c in range(d):
            o[b, head, i, c] = out[c] / l if l > 0 else float32(0.0)


@gpu_kernel(device=True)
def row_dot(qs, k_tile, j, d):
    """q . k_tile[j] over the first d channels."""
    dot = float32(0.0)
    for c in range(d):
        dot += qs[c] * k_tile[j, c]
    return dot
''',
    "decode_kernel": '''\
"""Exercise 2, my way: the butterfly's offsets from a table."""
from numba import cuda as gpu
from numba.cuda import jit

LANES: int = WARP
OFFSETS = tuple(LANES >> k for k in range(1, 6))        # 16, 8, 4, 2, 1
assert OFFSETS[-1] == 1


@jit
def gqa_decode_group_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, partition_size,
                            partial_max, partial_sum, partial_acc):
    """Warp w scores a contiguous run of the partition's tokens for every head of the block."""
    group = q.shape[1] // k_cache.shape[1]
    blocks_per_kv = (group + GROUP_MAX - 1) // GROUP_MAX
    size = (group + blocks_per_kv - 1) // blocks_per_kv
    kv = gpu.blockIdx.x // blocks_per_kv
    h0 = kv * group + (gpu.blockIdx.x % blocks_per_kv) * size
    count = min(size, kv * group + group - h0)
    s = gpu.blockIdx.y
    p = gpu.blockIdx.z
    warp = gpu.threadIdx.x // LANES
    lane = gpu.threadIdx.x % LANES
    d = q.shape[2]
    bs = k_cache.shape[2]
    lo = p * partition_size
    hi = min(lo + partition_size, context_lens[s])
    per_warp = (max(hi - lo, 0) + WARPS - 1) // WARPS
    my_lo = lo + warp * per_warp
    my_hi = min(my_lo + per_warp, hi)
    qv = gpu.local.array((GROUP_MAX, CHANNELS), float32)
    av = gpu.local.array((GROUP_MAX, CHANNELS), float32)
    mv = gpu.local.array(GROUP_MAX, float32)
    lv = gpu.local.array(GROUP_MAX, float32)
    kr = gpu.local.array(CHANNELS, float32)
    vr = gpu.local.array(CHANNELS, float32)
    for i in range(GROUP_MAX):
        mv[i] = float32(-math.inf)
        lv[i] = float32(0.0)
        for j in range(CHANNELS):
            c = j * LANES + lane
            av[i, j] = float32(0.0)
            qv[i, j] = float32(0.0)
            if i < count and c < d:
                qv[i, j] = scale * q[s, h0 + i, c]
    for t in range(my_lo, my_hi):
        blk = block_tables[s, t // bs]
        for j in range(CHANNELS):
            c = j * LANES + lane
            kr[j] = float32(0.0)
            vr[j] = float32(0.0)
            if c < d:
                kr[j] = k_cache[blk, kv, t % bs, c]
                vr[j] = v_cache[blk, kv, t % bs, c]
        for i in range(GROUP_MAX):
            if i < count:
                x = float32(0.0)
                for j in range(CHANNELS):
                    x += qv[i, j] * kr[j]
                x += gpu.shfl_down_sync(FULL_MASK, x, OFFSETS[0])
                x += gpu.shfl_down_sync(FULL_MASK, x, OFFSETS[1])
                x += gpu.shfl_down_sync(FULL_MASK, x, OFFSETS[2])
                x += gpu.shfl_down_sync(FULL_MASK, x, OFFSETS[3])
                x += gpu.shfl_down_sync(FULL_MASK, x, OFFSETS[4])
                x = gpu.shfl_sync(FULL_MASK, x, 0)
                if x > mv[i]:
                    shrink = math.exp(mv[i] - x)
                    lv[i] = lv[i] * shrink + float32(1.0)
                    for j in range(CHANNELS):
                        av[i, j] = av[i, j] * shrink + vr[j]
                    mv[i] = x
                else:
                    w = math.exp(x - mv[i])
                    lv[i] += w
                    for j in range(CHANNELS):
                        av[i, j] += w * vr[j]
    sm = gpu.shared.array((GROUP_MAX, WARPS), float32)
    sl = gpu.shared.array((GROUP_MAX, WARPS), float32)
    sa = gpu.shared.array((GROUP_MAX, WARPS, HEAD_DIM_MAX), float32)
    for i in range(GROUP_MAX):
        if lane == 0:
            sm[i, warp] = mv[i]
            sl[i, warp] = lv[i]
        for j in range(CHANNELS):
            c = j * LANES + lane
            if c < d:
                sa[i, warp, c] = av[i, j]
    gpu.syncthreads()
    c = gpu.threadIdx.x
    if c < d:
        for i in range(count):
            top = float32(-math.inf)
            for w in range(WARPS):
                top = max(top, sm[i, w])
            total = float32(0.0)
            value = float32(0.0)
            for w in range(WARPS):
                if sm[i, w] > -math.inf:
                    f = math.exp(sm[i, w] - top)
                    total += f * sl[i, w]
                    value += f * sa[i, w, c]
            if c == 0:
                partial_max[s, h0 + i, p] = top
                partial_sum[s, h0 + i, p] = total
            partial_acc[s, h0 + i, p, c] = value
''',
}
