"""Day 4's bounds: the partial tiles of both GEMMs in each of M, N and K (each term of the guards that load
A and B and store C), the last, partial step along K, and the slots of v4's cooperative loads. Day 4 has
no ``min(...)``: every row is a hand row."""

from . import Term

ASSIGNMENT = "day04_tiled_gemm"

_V3, _V3_EDGES = "shared_tiles_matches_reference", "shared_tiles_edge_shapes"
_V4, _V4_EDGES = "register_blocked_matches_reference", "register_blocked_edge_shapes"

_V3_A, _V3_B = "if row < m and k0 + tx < k:", "if k0 + ty < k and col < n:"
_V4_A, _V4_B = "if row0 + r < m and k0 + kk < k:", "if k0 + kk < k and col0 + cc < n:"
_C = "if row < m and col < n:"


def _guard_rows(cell: str, graded: str, guards: dict) -> tuple[Term, ...]:
    """One row per term of each bounds guard: the guard without that term."""
    return tuple(Term(cell, name, term, edits=((guard, without),), hidden=graded, visible=graded, why=why)
                 for name, (guard, cases) in guards.items()
                 for term, without, why in cases)


def _k_steps(cell: str, step: str, graded: str, edges: str, *, after: str, only: str) -> tuple[Term, ...]:
    """The last, partial step along K: after full steps, and as the only step (K below the step)."""
    loop = f"for k0 in range(0, k, {step}):"
    return (
        Term(cell, "the steps along K", f"the last, partial step after full ones (K > {step})",
             edits=((loop, f"for k0 in range(0, max(k - {step} + 1, 1), {step}):"),),
             hidden=graded, visible=graded, why=after),
        Term(cell, "the steps along K", f"the only, partial step (K < {step})",
             edits=((loop, f"for k0 in range(0, k if k >= {step} else 0, {step}):"),),
             hidden=edges, visible=edges, why=only),
    )


_V3_GUARDS = {
    "the guard of A's slot": (_V3_A, (
        ("row < m (partial tile in M)", "if k0 + tx < k:",
         "M not a multiple of TILE = 16: M = 17 (visible), 33 and 17 (hidden); the tile's extra rows read past A"),
        ("k0 + tx < k (partial tile in K)", "if row < m:",
         "K not a multiple of 16: K = 9 (visible), 40 and 23 (hidden); the tile's extra columns read past A"))),
    "the guard of B's slot": (_V3_B, (
        ("k0 + ty < k (partial tile in K)", "if col < n:",
         "K not a multiple of 16: K = 9 (visible), 40 and 23 (hidden); the tile's extra rows read past B"),
        ("col < n (partial tile in N)", "if k0 + ty < k:",
         "N not a multiple of 16: N = 5 (visible), 18 and 45 (hidden); the tile's extra columns read past B"))),
    "the guard of C's store": (_C, (
        ("row < m (partial tile in M)", "if col < n:", "M = 17 (visible), 33 and 17 (hidden): rows past C"),
        ("col < n (partial tile in N)", "if row < m:", "N = 5 (visible), 18 and 45 (hidden): columns past C"))),
}

_V4_GUARDS = {
    "the guard of A's slot": (_V4_A, (
        ("row0 + r < m (partial tile in M)", "if k0 + kk < k:",
         "M not a multiple of BLOCK_M = 64: M = 65 (visible), 70 and 20 (hidden)"),
        ("k0 + kk < k (partial step in K)", "if row0 + r < m:",
         "K not a multiple of BLOCK_K = 8: K = 9 (visible), 19 and 44 (hidden)"))),
    "the guard of B's slot": (_V4_B, (
        ("k0 + kk < k (partial step in K)", "if col0 + cc < n:",
         "K not a multiple of BLOCK_K = 8: K = 9 (visible), 19 and 44 (hidden)"),
        ("col0 + cc < n (partial tile in N)", "if k0 + kk < k:",
         "N not a multiple of BLOCK_N = 64: N = 5 (visible), 67 and 21 (hidden)"))),
    "the guard of C's store": (_C, (
        ("row < m (partial tile in M)", "if col < n:", "M = 65 (visible), 70 and 20 (hidden): rows past C"),
        ("col < n (partial tile in N)", "if row < m:", "N = 5 (visible), 67 and 21 (hidden): columns past C"))),
}

TABLE = (
    # ------------------------------------------------------------------ exercise 1: shared tiles
    *_k_steps("gemm_v3_shared_tiles_kernel", "TILE", _V3, _V3_EDGES,
              after="K above 16 and not a multiple of it: 2 x 16 + 3 = 35 (visible), 40 and 23 (hidden)",
              only="K below 16: K = 1 in the edge shapes (visible and hidden); K = 9 decides it too"),
    *_guard_rows("gemm_v3_shared_tiles_kernel", _V3, _V3_GUARDS),

    # ------------------------------------------------------------------ exercise 2: register blocking
    *_k_steps("gemm_v4_register_blocked_kernel", "BLOCK_K", _V4, _V4_EDGES,
              after="K above BLOCK_K = 8 and not a multiple of it: K = 9 (visible), 19 and 44 (hidden)",
              only="K below 8: K = 1 in the edge shapes (visible and hidden)"),
    *_guard_rows("gemm_v4_register_blocked_kernel", _V4, _V4_GUARDS),
    Term("gemm_v4_register_blocked_kernel", "the slots of a_tile the block fills", "s < BLOCK_M * BLOCK_K",
         edits=(("range(thread, BLOCK_M * BLOCK_K, THREADS_X * THREADS_Y)",
                 "range(thread, THREADS_X * THREADS_Y, THREADS_X * THREADS_Y)"),),
         hidden=_V4, visible=_V4,
         why="512 slots for 256 threads: the second round fills rows 32 ... 63 of the tile, so M > 32 decides: "
             "M = 65 (visible), 70 (hidden)"),
    Term("gemm_v4_register_blocked_kernel", "the slots of b_tile the block fills", "s < BLOCK_K * BLOCK_N",
         edits=(("range(thread, BLOCK_K * BLOCK_N, THREADS_X * THREADS_Y)",
                 "range(thread, THREADS_X * THREADS_Y, THREADS_X * THREADS_Y)"),),
         hidden=_V4, visible=_V4,
         why="512 slots for 256 threads: the second round fills rows kk = 4 ... 7 of the tile, so K > 4 "
             "decides: K = 9 (visible), 19 and 44 (hidden)"),
)
