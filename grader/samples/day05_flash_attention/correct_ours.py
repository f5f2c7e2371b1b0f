"""Our solution, exactly ``attention_v4_flash_kernel`` of kernels/flash_attention.py: 10/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "flash_matches_reference_full": 2,
        "flash_matches_reference_causal": 2,
        "flash_handles_kv_lens": 2,
        "flash_is_numerically_stable": 1,
        "flash_traffic_fits_tiling": 2,
        "flash_skips_masked_tiles": 1,
    },
}

CELLS = {
    "flash_kernel": '''\
@cuda.jit
def attention_v4_flash_kernel(q, k, v, kv_lens, o, scale, causal):
    """Block (tile, h, b) computes rows tile*TILE_Q ... of o[b, h], causal or not, kv_lens[b] keys."""
    tile_start = cuda.blockIdx.x * TILE_Q
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    t = cuda.threadIdx.x
    row = tile_start + t
    n_queries = q.shape[2]
    d = q.shape[3]
    k_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    scores = cuda.local.array(TILE_KV, float32)

    active = row < n_queries
    if active:
        for c in range(d):
            q_row[c] = q[b, h, row, c] * scale
            acc[c] = 0.0
    row_max = float32(-math.inf)
    row_sum = float32(0.0)

    # Keys this block needs: those that exist, and under the causal mask only those up to the
    # block's last query row. Tiles past kv_end are never loaded: that is the causal tile skipping.
    kv_end = min(kv_lens[b], k.shape[2])
    if causal:
        kv_end = min(kv_end, tile_start + TILE_Q)
    for kv_start in range(0, kv_end, TILE_KV):
        n_tile = min(TILE_KV, kv_end - kv_start)
        for idx in range(t, n_tile * d, TILE_Q):
            j = idx // d
            c = idx - j * d
            k_tile[j, c] = k[b, h, kv_start + j, c]
            v_tile[j, c] = v[b, h, kv_start + j, c]
        cuda.syncthreads()

        # In a tile on the diagonal, this row may use only keys kv_start ... row: a prefix of the tile.
        n_valid = n_tile
        if causal:
            n_valid = min(n_tile, row - kv_start + 1)
        if active and n_valid > 0:
            tile_max = float32(-math.inf)
            for j in range(n_valid):
                s = float32(0.0)
                for c in range(d):
                    s += q_row[c] * k_tile[j, c]
                scores[j] = s
                tile_max = max(tile_max, s)
            new_max = max(row_max, tile_max)
            correction = math.exp(row_max - new_max)
            row_sum *= correction
            for c in range(d):
                acc[c] *= correction
            for j in range(n_valid):
                p = math.exp(scores[j] - new_max)
                row_sum += p
                for c in range(d):
                    acc[c] += p * v_tile[j, c]
            row_max = new_max
        cuda.syncthreads()

    if active:
        inv_sum = float32(0.0)
        if row_sum > 0:  # a row with no allowed key (kv_lens[b] == 0) gives zeros
            inv_sum = float32(1.0) / row_sum
        for c in range(d):
            o[b, h, row, c] = acc[c] * inv_sum
''',
}
