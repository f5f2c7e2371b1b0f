"""Day 2, naive attention: the scores, the row softmax and the PV kernel, each through its launcher.

A traffic check counts one launch on the simulator and hands the counts to its ``check_*_traffic``, which
the hidden tests of the same cell call too, on other sizes.
"""

from __future__ import annotations

import re

import numpy as np

from course.checking import check, poison, random_inputs

from ._common import _counted, _launch_explained, _passed, _past_the_end, _stored_array, _with_findings

__all__ = ["scores_match_reference", "scores_traffic_fits", "check_scores_traffic",
           "softmax_rows_match_reference", "softmax_rows_is_numerically_stable", "softmax_rows_traffic_fits",
           "check_softmax_rows_traffic", "pv_matches_reference", "pv_traffic_fits", "check_pv_traffic"]


def _fits(got, model) -> bool:
    """``got`` is ``model`` within float32 rounding of a short sum (and finite)."""
    got = np.asarray(got, np.float64)
    if got.shape != model.shape or not np.isfinite(got).all():
        return False
    return bool(np.abs(got - model).max(initial=0.0) <= 1e-4 * max(float(np.abs(model).max(initial=0.0)), 1e-30))


def _reads(name: str, line: str) -> bool:
    return re.search(rf"(?<![\w.]){name}\s*\[", line) is not None


def _one_thread_per_output_likely(output: str, axes: str, inputs: tuple, total: str, past_keys: str = ""):
    """The reading of an index past an array for a kernel with one thread per element of ``output`` (its
    threads numbered flat over the ``total`` elements of a head) and ``inputs``: a write past the output
    (its indices swapped), a read of the first input's rows by a thread past the last element (no guard),
    or, with ``past_keys``, a read of the second input past its keys (axis 2)."""

    def likely(exc, line):
        found = _past_the_end(exc, line)
        if found is None:
            return None
        _, axis, _, lead = found
        stored = _stored_array(line)
        if stored is not None and stored not in inputs and axis in (2, 3):
            return "output_axes_swapped", lead + (
                f"The write to {output} is past its shape: {output} is {axes}; are its last two indices swapped "
                f"(the row and col of {output} written transposed)?")
        if axis == 2 and _reads(inputs[0], line):
            return "flat_guard", lead + (
                f"A thread past the last element read a row of {inputs[0]} that does not exist: the grid rounds "
                f"the {total} elements of a head up to whole blocks, so a thread with flat >= {total} must "
                "return before it reads (is the guard missing, or off by one?)")
        if axis == 2 and past_keys and _reads(inputs[1], line):
            return "key_loop_bound", lead + past_keys
        return None

    return likely


_scores_likely = _one_thread_per_output_likely("S", "(batch, head, N, M): query i on axis 2, key j on axis 3",
                                               ("q", "k"), "N * M")
_pv_likely = _one_thread_per_output_likely(
    "O", "(batch, head, N, head_dim): query i on axis 2, channel c on axis 3", ("p", "v"), "N * head_dim",
    past_keys="The loop over the keys j runs past the last key, M = v.shape[2]: does its bound come from "
              "p.shape[2], the number of queries?")


# ------------------------------------------------------------------------------- exercise 1: the scores

def scores_match_reference(attention_scores, *, kernel=None) -> None:
    """S = 0.3 Q Kᵀ for N = 6, M = 9 (M != N) and head_dim 5 (not a power of two)."""
    rng, seed = random_inputs()
    q = rng.standard_normal((1, 2, 6, 5), dtype=np.float32)
    k = rng.standard_normal((1, 2, 9, 5), dtype=np.float32)
    s = _launch_explained(lambda: attention_scores(q, k, scale=0.3, out=poison(np.empty((1, 2, 6, 9), np.float32))),
                          likely=_scores_likely)
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
    _, traffic = _counted(lambda: _launch_explained(lambda: attention_scores(q, k), likely=_scores_likely))
    if traffic is not None:
        print(traffic.summary())
        check_scores_traffic(traffic, 1, 2, 5, 6, 4)
    _passed("N = 5, M = 6, head_dim 4: each score written once, at most a row of Q and of K read per score")


# ------------------------------------------------------------------------------- exercise 2: the row softmax

def _softmax_likely(exc, line):
    """exp overflowed: the row max is not subtracted before exp (KernelFailed's cause)."""
    if not isinstance(exc, OverflowError):
        return None
    at = f" (at `{line}`)" if line else ""
    return "exp_overflow", (
        f"exp overflowed in the kernel{at}: exp(x) is past float32's range from x = 89 on (the simulator stops "
        "at exp(710)), so subtract the row max before exp: exp(x - max) is at most 1. If the line subtracts "
        "one already, does it hold the row's maximum when it is used (found by the reduction, from -inf)? "
        "(On a GPU exp gives inf, and inf / inf is NaN.)")


def _softmax_run(softmax_rows, x, out):
    launch = (lambda: softmax_rows(x)) if out is None else (lambda: softmax_rows(x, out=out))
    return _launch_explained(launch, likely=_softmax_likely)


def _softmax_findings(p, x):
    """``[(key, message)]`` for a softmax output that is a known mistake of the row softmax: rows never divided."""
    x = x.astype(np.float64)
    undivided = np.exp(x - x.max(axis=-1, keepdims=True))
    if _fits(p, undivided):
        return [("rows_not_divided", "each row is exp(x - row max), its largest entry exactly 1: the rows are never "
                 "divided by their sum; write exp(x - row max) / row sum")]
    return []


def _check_softmax(p, x, name, seed, kernel):
    from kernels import reference

    _with_findings(lambda: _softmax_findings(p, x), p, reference.softmax(x.astype(np.float64), axis=-1), name=name,
                   seed=seed, rows_sum_to_one=True, kernel=kernel)


def softmax_rows_match_reference(softmax_rows, *, kernel=None) -> None:
    """Rows of 45 columns, longer than the block of 32, sum to 1 and match the reference."""
    rng, seed = random_inputs()
    x = rng.standard_normal((3, 45), dtype=np.float32)
    p = _softmax_run(softmax_rows, x, poison(np.empty_like(x)))
    _check_softmax(p, x, "P", seed, kernel)
    _passed("softmax of 3 rows of 45 columns")


def softmax_rows_is_numerically_stable(softmax_rows, *, kernel=None) -> None:
    """Rows of logits near 1e4 (exp overflows without the row maximum), near -1e4 (exp underflows to 0 unless
    the maximum starts at -inf) and of size 1e4, and a row whose largest logit sits in the block's last,
    partial stride of columns (a maximum that skips it overflows exp)."""
    rng, seed = random_inputs()
    x = np.concatenate([1e4 + rng.standard_normal((1, 20)),         # exp(x) overflows without the max
                        -1e4 + rng.standard_normal((1, 20)),        # a max that starts at 0 gives exp(x - 0) = 0
                        1e4 * rng.standard_normal((2, 20))]).astype(np.float32)
    p = _softmax_run(softmax_rows, x, poison(np.empty_like(x)))
    _check_softmax(p, x, "P for logits near +1e4, -1e4 and of size 1e4", seed, kernel)
    x = rng.standard_normal((1, 40)).astype(np.float32)
    x[0, 37] += 300                                                 # columns 32 ... 39: the last, partial stride
    p = _softmax_run(softmax_rows, x, poison(np.empty_like(x)))
    _check_softmax(p, x, "P for a row of 40 columns whose largest logit, 300 above the others, is in column 37",
                   seed, kernel)
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
    _, traffic = _counted(lambda: _softmax_run(softmax_rows, x, None))
    if traffic is not None:
        print(traffic.summary())
        check_softmax_rows_traffic(traffic, 2, 50)
    _passed("2 rows of 50 columns: out written once, x read at most 3 times")


# ------------------------------------------------------------------------------- exercise 3: P V

def _pv_findings(o, p, v):
    """``[(key, message)]`` when O is P V summed over too few keys: the loop over the keys stops early."""
    keys = v.shape[2]
    p64, v64 = p.astype(np.float64), v.astype(np.float64)
    for used in range(1, keys):
        if _fits(o, p64[..., :used] @ v64[..., :used, :]):
            bound = (f"it stops at N = {used}, the number of queries (p.shape[2]); the keys are p.shape[3] = "
                     "v.shape[2]" if used == p.shape[2] else "does its bound come from the right dimension?")
            return [("key_loop_bound", f"O is P V summed over the first {used} of the M = {keys} keys only: the "
                     f"loop over the keys j must run over all M; {bound}")]
    return []


def pv_matches_reference(attention_pv, *, kernel=None) -> None:
    """O = P V for N = 6, M = 9 (M != N) and head_dim 5 (not a power of two), P a softmax."""
    from kernels import reference

    rng, seed = random_inputs()
    p = reference.softmax(rng.standard_normal((1, 2, 6, 9)), axis=-1).astype(np.float32)
    v = rng.standard_normal((1, 2, 9, 5), dtype=np.float32)
    o = _launch_explained(lambda: attention_pv(p, v, out=poison(np.empty((1, 2, 6, 5), np.float32))), likely=_pv_likely)
    _with_findings(lambda: _pv_findings(o, p, v), o, p.astype(np.float64) @ v.astype(np.float64), name="O",
                   seed=seed, kernel=kernel)
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
    _, traffic = _counted(lambda: _launch_explained(lambda: attention_pv(p, v), likely=_pv_likely))
    if traffic is not None:
        print(traffic.summary())
        check_pv_traffic(traffic, 1, 2, 5, 6, 4)
    _passed("N = 5, M = 6, head_dim 4: each output written once, at most a row of P and a column of V read per output")
