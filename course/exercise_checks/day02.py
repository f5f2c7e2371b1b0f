"""Day 2, naive attention: the scores, the row softmax and the PV kernel, each through its launcher.

A traffic check counts one launch on the simulator and hands the counts to its ``check_*_traffic``, which
the hidden tests of the same cell call too, on other sizes.
"""

from __future__ import annotations

import numpy as np

from course.checking import check, poison, random_inputs

from ._common import _counted, _passed

__all__ = ["scores_match_reference", "scores_traffic_fits", "check_scores_traffic",
           "softmax_rows_match_reference", "softmax_rows_is_numerically_stable", "softmax_rows_traffic_fits",
           "check_softmax_rows_traffic", "pv_matches_reference", "pv_traffic_fits", "check_pv_traffic"]


# ------------------------------------------------------------------------------- exercise 1: the scores

def scores_match_reference(attention_scores, *, kernel=None) -> None:
    """S = 0.3 Q Kᵀ for N = 6, M = 9 (M != N) and head_dim 5 (not a power of two)."""
    rng, seed = random_inputs()
    q = rng.standard_normal((1, 2, 6, 5), dtype=np.float32)
    k = rng.standard_normal((1, 2, 9, 5), dtype=np.float32)
    s = attention_scores(q, k, scale=0.3, out=poison(np.empty((1, 2, 6, 9), np.float32)))
    check(s, 0.3 * np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)), name="S", seed=seed,
          kernel=kernel)
    _passed("S = 0.3 Q Kᵀ for N = 6, M = 9, head_dim 5")


def check_scores_traffic(t, B: int, H: int, N: int, M: int, d: int) -> None:
    """Each score written once and nothing else; at most a row of Q and a row of K read per score, and every
    element of both read at least once."""
    stores, loads = t.global_stores, t.global_loads
    assert stores.get("s", 0) == B * H * N * M, (
        f"every score must be written exactly once: {B * H * N * M} stores expected, {stores.get('s', 0)} counted")
    assert sum(stores.values()) == stores.get("s", 0), f"only s may be written; stores counted: {dict(stores)}"
    for name, rows in (("q", N), ("k", M)):
        assert B * H * rows * d <= loads.get(name, 0) <= B * H * N * M * d, (
            f"{name}: {loads.get(name, 0)} loads counted; the budget is one row of {name} per score, at most "
            f"{B * H * N * M * d}, and every element of {name} has to be read at least once ({B * H * rows * d})")


def scores_traffic_fits(attention_scores) -> None:
    """B, H, N, M, d = 1, 2, 5, 6, 4: S written once, Q and K read within a row per score (counted)."""
    rng, _ = random_inputs()
    q = rng.standard_normal((1, 2, 5, 4), dtype=np.float32)
    k = rng.standard_normal((1, 2, 6, 4), dtype=np.float32)
    _, traffic = _counted(lambda: attention_scores(q, k))
    if traffic is not None:
        print(traffic.summary())
        check_scores_traffic(traffic, 1, 2, 5, 6, 4)
    _passed("N = 5, M = 6, head_dim 4: each score written once, at most a row of Q and of K read per score")


# ------------------------------------------------------------------------------- exercise 2: the row softmax

def softmax_rows_match_reference(softmax_rows, *, kernel=None) -> None:
    """Rows of 45 columns, longer than the block of 32, sum to 1 and match the reference."""
    from kernels import reference

    rng, seed = random_inputs()
    x = rng.standard_normal((3, 45), dtype=np.float32)
    p = softmax_rows(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64), axis=-1), name="P", seed=seed, rows_sum_to_one=True,
          kernel=kernel)
    _passed("softmax of 3 rows of 45 columns")


def softmax_rows_is_numerically_stable(softmax_rows, *, kernel=None) -> None:
    """Rows of logits near 1e4 (exp overflows without the row maximum), near -1e4 (exp underflows to 0 unless
    the maximum starts at -inf) and of size 1e4, and a row whose largest logit sits in the block's last,
    partial stride of columns (a maximum that skips it overflows exp)."""
    from kernels import reference

    rng, seed = random_inputs()
    x = np.concatenate([1e4 + rng.standard_normal((1, 20)),         # exp(x) overflows without the max
                        -1e4 + rng.standard_normal((1, 20)),        # a max that starts at 0 gives exp(x - 0) = 0
                        1e4 * rng.standard_normal((2, 20))]).astype(np.float32)
    p = softmax_rows(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64), axis=-1), name="P for logits near +1e4, -1e4 and of size 1e4",
          seed=seed, rows_sum_to_one=True, kernel=kernel)
    x = rng.standard_normal((1, 40)).astype(np.float32)
    x[0, 37] += 300                                                 # columns 32 ... 39: the last, partial stride
    p = softmax_rows(x, out=poison(np.empty_like(x)))
    check(p, reference.softmax(x.astype(np.float64), axis=-1), seed=seed, rows_sum_to_one=True, kernel=kernel,
          name="P for a row of 40 columns whose largest logit, 300 above the others, is in column 37")
    _passed("logits near +1e4, -1e4 and of size 1e4, and the largest logit in the last columns")


def check_softmax_rows_traffic(t, rows: int, cols: int) -> None:
    """Each element of out written once and nothing else; each element of x read once to 3 times."""
    stores, loads = t.global_stores, t.global_loads
    assert stores.get("out", 0) == rows * cols, (
        f"every element of out must be written exactly once: {rows * cols} stores expected, "
        f"{stores.get('out', 0)} counted")
    assert sum(stores.values()) == stores.get("out", 0), f"only out may be written; stores counted: {dict(stores)}"
    assert rows * cols <= loads.get("x", 0) <= 3 * rows * cols, (
        f"x: {loads.get('x', 0)} loads counted for {rows * cols} elements; the budget is 3 reads per element "
        f"({3 * rows * cols}), and every element has to be read at least once")


def softmax_rows_traffic_fits(softmax_rows) -> None:
    """2 rows of 50 columns: out written once, x read at most 3 times (counted)."""
    rng, _ = random_inputs()
    x = rng.standard_normal((2, 50), dtype=np.float32)
    _, traffic = _counted(lambda: softmax_rows(x))
    if traffic is not None:
        print(traffic.summary())
        check_softmax_rows_traffic(traffic, 2, 50)
    _passed("2 rows of 50 columns: out written once, x read at most 3 times")


# ------------------------------------------------------------------------------- exercise 3: P V

def pv_matches_reference(attention_pv, *, kernel=None) -> None:
    """O = P V for N = 6, M = 9 (M != N) and head_dim 5 (not a power of two), P a softmax."""
    from kernels import reference

    rng, seed = random_inputs()
    p = reference.softmax(rng.standard_normal((1, 2, 6, 9)), axis=-1).astype(np.float32)
    v = rng.standard_normal((1, 2, 9, 5), dtype=np.float32)
    o = attention_pv(p, v, out=poison(np.empty((1, 2, 6, 5), np.float32)))
    check(o, p.astype(np.float64) @ v.astype(np.float64), name="O", seed=seed, kernel=kernel)
    _passed("O = P V for N = 6, M = 9, head_dim 5")


def check_pv_traffic(t, B: int, H: int, N: int, M: int, d: int) -> None:
    """Each output written once and nothing else; at most a row of P and a column of V read per output, and
    every element of both read at least once."""
    stores, loads = t.global_stores, t.global_loads
    assert stores.get("o", 0) == B * H * N * d, (
        f"every element of O must be written exactly once: {B * H * N * d} stores expected, "
        f"{stores.get('o', 0)} counted")
    assert sum(stores.values()) == stores.get("o", 0), f"only o may be written; stores counted: {dict(stores)}"
    for name, size in (("p", B * H * N * M), ("v", B * H * M * d)):
        assert size <= loads.get(name, 0) <= B * H * N * M * d, (
            f"{name}: {loads.get(name, 0)} loads counted; the budget is one row of P and one column of V per "
            f"output, at most {B * H * N * M * d}, and every element of {name} has to be read at least once ({size})")


def pv_traffic_fits(attention_pv) -> None:
    """B, H, N, M, d = 1, 2, 5, 6, 4: O written once, P and V read within a row and a column per output (counted)."""
    rng, _ = random_inputs()
    p = rng.random((1, 2, 5, 6), dtype=np.float32)
    v = rng.standard_normal((1, 2, 6, 4), dtype=np.float32)
    _, traffic = _counted(lambda: attention_pv(p, v))
    if traffic is not None:
        print(traffic.summary())
        check_pv_traffic(traffic, 1, 2, 5, 6, 4)
    _passed("N = 5, M = 6, head_dim 4: each output written once, at most a row of P and a column of V read per output")
