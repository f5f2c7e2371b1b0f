"""Day 3, online softmax: the one-pass row softmax and attention with one query row per thread.

A traffic check counts one launch on the simulator and hands the counts to its ``check_*_traffic``, which
the hidden tests of the same cell call too, on other sizes.
"""

from __future__ import annotations

import numpy as np

from course.checking import check, poison, random_inputs

from ._common import _counted, _passed

__all__ = ["online_softmax_matches_two_pass", "online_softmax_handles_masked_rows",
           "online_softmax_is_numerically_stable", "online_softmax_traffic_fits", "check_online_softmax_traffic",
           "fused_rows_matches_reference", "fused_rows_handles_causal", "fused_rows_is_numerically_stable",
           "fused_rows_traffic_fits", "check_fused_rows_traffic"]


# ------------------------------------------------------------------------------- exercise 1: online softmax

def online_softmax_matches_two_pass(softmax_online, *, kernel=None) -> None:
    """Rows of 40 columns match day 2's two-pass kernel (the course's ``softmax_rows``) and the reference."""
    from kernels import reference
    from kernels.softmax import softmax_rows

    rng, seed = random_inputs()
    x = rng.standard_normal((3, 40), dtype=np.float32)
    p = softmax_online(x, out=poison(np.empty_like(x)))
    check(p, softmax_rows(x).astype(np.float64), name="P against the two-pass softmax_rows", seed=seed,
          rows_sum_to_one=True, kernel=kernel)
    check(p, reference.softmax(x.astype(np.float64), axis=-1), name="P", seed=seed, rows_sum_to_one=True,
          kernel=kernel)
    _passed("3 rows of 40 columns, as the two-pass softmax_rows and the reference")


def online_softmax_handles_masked_rows(softmax_online, *, kernel=None) -> None:
    """A causally masked 4x4 matrix and a fully masked fifth row: the -inf entries get 0, row 0 keeps a single
    entry, the fully masked row gets zeros, and no NaN."""
    from kernels import reference

    rng, seed = random_inputs()
    x = rng.standard_normal((5, 4), dtype=np.float32)
    x[np.triu_indices(4, 1)] = -np.inf       # causal mask on rows 0 ... 3: row 0 keeps a single entry
    x[4] = -np.inf                           # a fully masked row: zeros
    p = softmax_online(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64), axis=-1), seed=seed, rows_sum_to_one=True, kernel=kernel,
          name="P of a causally masked matrix and a fully masked row",
          hints={"nonfinite": "a row with no finite entry gets zeros: its running sum stays 0"})
    _passed("a causally masked 4x4 matrix and a fully masked row")


def online_softmax_is_numerically_stable(softmax_online, *, kernel=None) -> None:
    """Logits of size 1e4 give finite, exact results."""
    from kernels import reference

    rng, seed = random_inputs()
    x = (1e4 * rng.standard_normal((2, 20))).astype(np.float32)
    p = softmax_online(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64), axis=-1), name="P for logits of size 1e4", seed=seed,
          rows_sum_to_one=True, kernel=kernel)
    _passed("logits of size 1e4")


def check_online_softmax_traffic(t, rows: int, cols: int) -> None:
    """Each element of out written once and nothing else; each element of x read once or twice."""
    stores, loads = t.global_stores, t.global_loads
    assert stores.get("out", 0) == rows * cols, (
        f"every element of out must be written exactly once: {rows * cols} stores expected, "
        f"{stores.get('out', 0)} counted")
    assert sum(stores.values()) == stores.get("out", 0), f"only out may be written; stores counted: {dict(stores)}"
    assert rows * cols <= loads.get("x", 0) <= 2 * rows * cols, (
        f"x: {loads.get('x', 0)} loads counted for {rows * cols} elements; the budget is 2 reads per element "
        f"({2 * rows * cols}): one pass for the running max and sum together, one to write")


def online_softmax_traffic_fits(softmax_online) -> None:
    """2 rows of 50 columns: out written once, x read at most twice (counted)."""
    rng, _ = random_inputs()
    x = rng.standard_normal((2, 50), dtype=np.float32)
    _, traffic = _counted(lambda: softmax_online(x))
    if traffic is not None:
        print(traffic.summary())
        check_online_softmax_traffic(traffic, 2, 50)
    _passed("2 rows of 50 columns: out written once, x read at most twice")


# ------------------------------------------------------------------------------- exercise 2: one query row per thread

def _fused_inputs(rng, *shapes):
    return [rng.standard_normal(shape, dtype=np.float32) for shape in shapes]


def fused_rows_matches_reference(attention_v2_fused_rows, *, kernel=None) -> None:
    """O for N = 5, M = 9 (M != N) and head_dim 3 (not a power of two), without a mask."""
    from kernels import reference

    rng, seed = random_inputs()
    q, k, v = _fused_inputs(rng, (1, 2, 5, 3), (1, 2, 9, 3), (1, 2, 9, 3))
    o = attention_v2_fused_rows(q, k, v, out=poison(np.empty_like(q)))
    check(o, reference.attention(q, k, v), name="O", seed=seed, attention=dict(q=q, k=k, v=v), kernel=kernel)
    _passed("N = 5, M = 9, head_dim 3")


def fused_rows_handles_causal(attention_v2_fused_rows, *, kernel=None) -> None:
    """With causal=True query i sees keys 0 ... i: N = M = 7, and the first row is exactly V[0]; N = 7 over
    M = 4, where the rows i >= M see the M keys and no more."""
    from kernels import reference

    rng, seed = random_inputs()
    q, k, v = _fused_inputs(rng, *[(1, 2, 7, 4)] * 3)
    o = attention_v2_fused_rows(q, k, v, causal=True, out=poison(np.empty_like(q)))
    check(o, reference.attention(q, k, v, causal=True), name="O, causal", seed=seed,
          attention=dict(q=q, k=k, v=v, causal=True), kernel=kernel)
    assert np.allclose(o[:, :, 0], v[:, :, 0], rtol=1e-6, atol=1e-6), "row 0 sees only key 0, so O[0] must equal V[0]"
    q, k, v = _fused_inputs(rng, (1, 1, 7, 4), (1, 1, 4, 4), (1, 1, 4, 4))
    o = attention_v2_fused_rows(q, k, v, causal=True, out=poison(np.empty_like(q)))
    check(o, reference.attention(q, k, v, causal=True), name="O, causal, N = 7 over M = 4", seed=seed,
          hints={"any": "with N > M the rows i >= M see all M keys, and none past them"},
          attention=dict(q=q, k=k, v=v, causal=True), kernel=kernel)
    _passed("N = M = 7 and N = 7 over M = 4, causal: row i sees keys 0 ... min(i, M - 1), row 0 is V[0]")


def fused_rows_is_numerically_stable(attention_v2_fused_rows, *, kernel=None) -> None:
    """Scores q·k of size 1e4 (whole numbers up to 100, exact in float32) give finite, exact results; an empty
    key sequence (M = 0) gives zeros."""
    from kernels import reference

    rng, seed = random_inputs()
    # Whole numbers up to 100 give scores q.k of size 1e4 that float32 holds exactly (and 1/sqrt(4) is exact):
    # rounding a score that large would move the softmax weights by more than the check allows, in any kernel.
    q, k = (rng.integers(-100, 101, (1, 1, 3, 4)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((1, 1, 3, 4), dtype=np.float32)
    o = attention_v2_fused_rows(q, k, v, out=poison(np.empty_like(q)))
    check(o, reference.attention(q, k, v), name="O for logits of size 1e4", seed=seed,
          attention=dict(q=q, k=k, v=v), kernel=kernel)
    q, k, v = _fused_inputs(rng, (1, 1, 2, 3), (1, 1, 0, 3), (1, 1, 0, 3))
    o = attention_v2_fused_rows(q, k, v, out=poison(np.empty_like(q)))
    check(o, reference.attention(q, k, v), name="O for an empty key sequence (M = 0)", seed=seed,
          hints={"any": "a row that sees no key gets zeros: its running sum stays 0"},
          attention=dict(q=q, k=k, v=v), kernel=kernel)
    _passed("logits of size 1e4, and zeros for an empty key sequence")


def check_fused_rows_traffic(t, B: int, H: int, N: int, M: int, d: int, causal: bool) -> None:
    """Only O written, each element once; K and V read at most once per query row and key it may see, and read."""
    stores, loads = t.global_stores, t.global_loads
    pairs = sum(min(i + 1, M) for i in range(N)) if causal else N * M
    assert stores.get("o", 0) == B * H * N * d and sum(stores.values()) == B * H * N * d, (
        f"only O may be written, each element once ({B * H * N * d} stores); counted: {dict(stores)}")
    for name in ("k", "v"):
        budget = B * H * pairs * d
        twice = (f": {name} was read twice over, two passes over the keys (one for the maximum, one for the sum "
                 "and the output)? The online softmax reads each key once: keep a running maximum, and rescale "
                 "the running sum and the accumulator by exp(m_old - m_new) when it grows"
                 if budget and loads.get(name, 0) == 2 * budget else "")
        assert loads.get(name, 0) <= budget, (
            f"{name}: {loads.get(name, 0)} loads counted; one pass per query row over the keys it may see "
            f"reads {budget}" + (" (with causal, the keys after the query are skipped, not read)"
                                 if causal else "") + twice)
        assert loads.get(name, 0) > 0 or not (N and M), f"{name} was never read"


def fused_rows_traffic_fits(attention_v2_fused_rows) -> None:
    """B, H, N, M, d = 1, 2, 6, 6, 4, without and with the causal mask: only O written, K and V read once per
    query row and key it may see (counted)."""
    rng, _ = random_inputs()
    q, k, v = _fused_inputs(rng, *[(1, 2, 6, 4)] * 3)
    for causal in (False, True):
        _, traffic = _counted(lambda: attention_v2_fused_rows(q, k, v, causal=causal))
        if traffic is None:
            break
        print(f"causal={causal}:", traffic.summary(), sep="\n")
        check_fused_rows_traffic(traffic, 1, 2, 6, 6, 4, causal)
    _passed("N = M = 6, head_dim 4, with and without causal: only O written, K and V once per row and key")
