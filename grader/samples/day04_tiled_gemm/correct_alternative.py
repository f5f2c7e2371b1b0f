"""Correct kernels written differently deserve 10/10.

Exercise 1 uses cuda.grid and conditional loads; exercise 2 keeps the A tile k-major and gives each
thread a contiguous 4×4 patch. Both load exactly the budget.
"""

EXPECT = {
    "status": "graded",
    "points": {
        "shared_tiles_matches_reference": 2,
        "shared_tiles_edge_shapes": 1,
        "shared_tiles_reads_fall_by_tile": 2,
        "register_blocked_matches_reference": 2,
        "register_blocked_edge_shapes": 1,
        "register_blocked_reads_fall_by_block_tile": 2,
    },
}

CELLS = {
    "gemm_v3_shared_tiles_kernel": '''\
@cuda.jit
def gemm_v3_shared_tiles_kernel(a, b, c):
    """One block per TILE×TILE tile of C; thread (tx, ty) computes c[row, col] from shared tiles."""
    sa = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    sb = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    col, row = cuda.grid(2)
    lx = cuda.threadIdx.x
    ly = cuda.threadIdx.y
    rows, depth = a.shape
    cols = b.shape[1]
    total = float32(0.0)
    for step in range((depth + TILE - 1) // TILE):
        ka = step * TILE + lx
        kb = step * TILE + ly
        sa[ly, lx] = a[row, ka] if (row < rows and ka < depth) else float32(0.0)
        sb[ly, lx] = b[kb, col] if (kb < depth and col < cols) else float32(0.0)
        cuda.syncthreads()
        for q in range(TILE):
            total += sa[ly, q] * sb[q, lx]
        cuda.syncthreads()
    if row < rows and col < cols:
        c[row, col] = total
''',
    "gemm_v4_register_blocked_kernel": '''\
@cuda.jit
def gemm_v4_register_blocked_kernel(a, b, c):
    """Thread (tx, ty) owns rows ty + i*THREADS_Y and columns tx + j*THREADS_X of the block's C tile."""
    # A different layout: each thread owns a contiguous 4×4 patch, and the A tile is stored
    # transposed (k-major) so a thread's four A values sit side by side.
    a_t = cuda.shared.array((BLOCK_K, BLOCK_M), float32)
    b_s = cuda.shared.array((BLOCK_K, BLOCK_N), float32)
    acc = cuda.local.array((THREAD_M, THREAD_N), float32)
    reg_a = cuda.local.array(THREAD_M, float32)
    reg_b = cuda.local.array(THREAD_N, float32)
    m = a.shape[0]
    k = a.shape[1]
    n = b.shape[1]
    block_row = cuda.blockIdx.y * BLOCK_M
    block_col = cuda.blockIdx.x * BLOCK_N
    first_row = block_row + cuda.threadIdx.y * THREAD_M
    first_col = block_col + cuda.threadIdx.x * THREAD_N
    me = cuda.threadIdx.y * THREADS_X + cuda.threadIdx.x
    everyone = THREADS_X * THREADS_Y
    for i in range(THREAD_M):
        for j in range(THREAD_N):
            acc[i, j] = 0.0
    k0 = 0
    while k0 < k:
        s = me
        while s < BLOCK_M * BLOCK_K:
            r = s % BLOCK_M
            q = s // BLOCK_M
            if block_row + r < m and k0 + q < k:
                a_t[q, r] = a[block_row + r, k0 + q]
            else:
                a_t[q, r] = 0.0
            s += everyone
        s = me
        while s < BLOCK_K * BLOCK_N:
            q = s // BLOCK_N
            cc = s % BLOCK_N
            if k0 + q < k and block_col + cc < n:
                b_s[q, cc] = b[k0 + q, block_col + cc]
            else:
                b_s[q, cc] = 0.0
            s += everyone
        cuda.syncthreads()
        for q in range(BLOCK_K):
            for i in range(THREAD_M):
                reg_a[i] = a_t[q, cuda.threadIdx.y * THREAD_M + i]
            for j in range(THREAD_N):
                reg_b[j] = b_s[q, cuda.threadIdx.x * THREAD_N + j]
            for i in range(THREAD_M):
                for j in range(THREAD_N):
                    acc[i, j] += reg_a[i] * reg_b[j]
        cuda.syncthreads()
        k0 += BLOCK_K
    for i in range(THREAD_M):
        for j in range(THREAD_N):
            if first_row + i < m and first_col + j < n:
                c[first_row + i, first_col + j] = acc[i, j]
''',
}
