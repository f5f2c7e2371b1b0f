"""A race in exercise 1 and no register reuse in exercise 2 deserve 5/10.

Exercise 1 drops the barrier after the inner loop (a race: the next step overwrites tiles others
still read), so its values are wrong but its loads are on budget: 2/5. Exercise 2 is right but
re-reads shared memory for every product instead of keeping fragments in registers: it loses only
the budget check, 3/5.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "shared_tiles_matches_reference": 0,
        "shared_tiles_edge_shapes": 0,
        "shared_tiles_reads_fall_by_tile": 2,
        "register_blocked_matches_reference": 2,
        "register_blocked_edge_shapes": 1,
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
    acc = float32(0.0)
    for k0 in range(0, k, TILE):
        if row < m and k0 + tx < k:
            a_tile[ty, tx] = a[row, k0 + tx]
        else:
            a_tile[ty, tx] = 0.0
        if k0 + ty < k and col < n:
            b_tile[ty, tx] = b[k0 + ty, col]
        else:
            b_tile[ty, tx] = 0.0
        cuda.syncthreads()
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        # no barrier here: the next step may overwrite a slot another thread still has to read
    if row < m and col < n:
        c[row, col] = acc
''',
    "gemm_v4_register_blocked_kernel": '''\
@cuda.jit
def gemm_v4_register_blocked_kernel(a, b, c):
    """Thread (tx, ty) owns rows ty + i*THREADS_Y and columns tx + j*THREADS_X of the block's C tile."""
    a_tile = cuda.shared.array((BLOCK_M, BLOCK_K), float32)
    b_tile = cuda.shared.array((BLOCK_K, BLOCK_N), float32)
    acc = cuda.local.array((THREAD_M, THREAD_N), float32)
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
    for k0 in range(0, k, BLOCK_K):
        for slot in range(thread, BLOCK_M * BLOCK_K, THREADS_X * THREADS_Y):
            r = slot // BLOCK_K
            kk = slot % BLOCK_K
            if row0 + r < m and k0 + kk < k:
                a_tile[r, kk] = a[row0 + r, k0 + kk]
            else:
                a_tile[r, kk] = 0.0
        for slot in range(thread, BLOCK_K * BLOCK_N, THREADS_X * THREADS_Y):
            kk = slot // BLOCK_N
            cc = slot % BLOCK_N
            if k0 + kk < k and col0 + cc < n:
                b_tile[kk, cc] = b[k0 + kk, col0 + cc]
            else:
                b_tile[kk, cc] = 0.0
        cuda.syncthreads()
        for kk in range(BLOCK_K):
            for i in range(THREAD_M):
                for j in range(THREAD_N):
                    # both operands re-read from shared memory for every product: no register reuse
                    acc[i, j] += a_tile[ty + i * THREADS_Y, kk] * b_tile[kk, tx + j * THREADS_X]
        cuda.syncthreads()
    for i in range(THREAD_M):
        row = row0 + ty + i * THREADS_Y
        for j in range(THREAD_N):
            col = col0 + tx + j * THREADS_X
            if row < m and col < n:
                c[row, col] = acc[i, j]
''',
}
