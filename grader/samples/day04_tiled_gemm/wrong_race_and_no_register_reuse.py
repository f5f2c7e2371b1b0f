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

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    # the second barrier of the loop is gone: the next step may overwrite a slot another thread still reads
    "gemm_v3_shared_tiles_kernel": [("""
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        cuda.syncthreads()
        """, """
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        """)],
    "gemm_v4_register_blocked_kernel": [
        ("a_frag = cuda.local.array(THREAD_M, float32)", ""),
        ("b_frag = cuda.local.array(THREAD_N, float32)", ""),
        ("""
        # THREAD_M + THREAD_N shared reads feed THREAD_M * THREAD_N multiply-adds.
        for i in range(THREAD_M):
            a_frag[i] = a_tile[ty + i * THREADS_Y, kk]
        for j in range(THREAD_N):
            b_frag[j] = b_tile[kk, tx + j * THREADS_X]
        """, ""),
        ("acc[i, j] += a_frag[i] * b_frag[j]", """
        # both operands re-read from shared memory for every product: no register reuse
        acc[i, j] += a_tile[ty + i * THREADS_Y, kk] * b_tile[kk, tx + j * THREADS_X]
        """),
    ],
}
