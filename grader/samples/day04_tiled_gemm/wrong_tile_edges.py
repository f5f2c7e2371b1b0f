"""Bugs at the tile edges deserve 0/10.

In exercise 1 threads outside C return before loading their tile slots, in exercise 2 the number of
steps along K rounds down and the partial last step is lost. Both give wrong values where a tile
hangs over the edge and load less than the budget: 0/10.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "shared_tiles_matches_reference": 0,
        "shared_tiles_edge_shapes": 0,
        "shared_tiles_reads_fall_by_tile": 0,
        "register_blocked_matches_reference": 0,
        "register_blocked_edge_shapes": 0,
        "register_blocked_reads_fall_by_block_tile": 0,
    },
}

CELLS = {
    "gemm_v3_shared_tiles_kernel": '''\
@cuda.jit
def gemm_v3_shared_tiles_kernel(a, b, c):
    """One block per TILE×TILE tile of C; thread (tx, ty) computes c[row, col] from shared tiles."""
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, k = a.shape
    n = b.shape[1]
    if row >= m or col >= n:
        return  # threads outside C leave early: their tile slots are never filled
    acc = float32(0.0)
    for k0 in range(0, k, TILE):
        if k0 + tx < k:
            a_tile[ty, tx] = a[row, k0 + tx]
        else:
            a_tile[ty, tx] = 0.0
        if k0 + ty < k:
            b_tile[ty, tx] = b[k0 + ty, col]
        else:
            b_tile[ty, tx] = 0.0
        cuda.syncthreads()
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        cuda.syncthreads()
    c[row, col] = acc
''',
    "gemm_v4_register_blocked_kernel": '''\
@cuda.jit
def gemm_v4_register_blocked_kernel(a, b, c):
    """Thread (tx, ty) owns rows ty + i*THREADS_Y and columns tx + j*THREADS_X of the block's C tile."""
    a_tile = cuda.shared.array((BLOCK_M, BLOCK_K), float32)
    b_tile = cuda.shared.array((BLOCK_K, BLOCK_N), float32)
    acc = cuda.local.array((THREAD_M, THREAD_N), float32)
    a_frag = cuda.local.array(THREAD_M, float32)
    b_frag = cuda.local.array(THREAD_N, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    thread = ty * THREADS_X + tx
    row0 = cuda.blockIdx.y * BLOCK_M
    col0 = cuda.blockIdx.x * BLOCK_N
    m, k = a.shape
    n = b.shape[1]
    for i in range(THREAD_M):
        for j in range(THREAD_N):
            acc[i, j] = 0.0
    for step in range(k // BLOCK_K):  # rounds down: the last, partial step along K is lost
        k0 = step * BLOCK_K
        for slot in range(thread, BLOCK_M * BLOCK_K, THREADS_X * THREADS_Y):
            r = slot // BLOCK_K
            kk = slot % BLOCK_K
            if row0 + r < m:
                a_tile[r, kk] = a[row0 + r, k0 + kk]
            else:
                a_tile[r, kk] = 0.0
        for slot in range(thread, BLOCK_K * BLOCK_N, THREADS_X * THREADS_Y):
            kk = slot // BLOCK_N
            cc = slot % BLOCK_N
            if col0 + cc < n:
                b_tile[kk, cc] = b[k0 + kk, col0 + cc]
            else:
                b_tile[kk, cc] = 0.0
        cuda.syncthreads()
        for kk in range(BLOCK_K):
            for i in range(THREAD_M):
                a_frag[i] = a_tile[ty + i * THREADS_Y, kk]
            for j in range(THREAD_N):
                b_frag[j] = b_tile[kk, tx + j * THREADS_X]
            for i in range(THREAD_M):
                for j in range(THREAD_N):
                    acc[i, j] += a_frag[i] * b_frag[j]
        cuda.syncthreads()
    for i in range(THREAD_M):
        row = row0 + ty + i * THREADS_Y
        for j in range(THREAD_N):
            col = col0 + tx + j * THREADS_X
            if row < m and col < n:
                c[row, col] = acc[i, j]
''',
}
