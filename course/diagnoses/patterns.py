"""Diagnoses from the output alone: where the wrong elements are, and what shape the error has.

Each detector takes the :class:`Case` of a failing check and the keys of the detectors that fired
before it, and returns a message in words or None. ``PATTERN_DETECTORS`` runs them in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kernels.launching import cdiv

__all__ = ["Case", "PATTERN_DETECTORS"]


@dataclass
class Case:
    """Everything the detectors may look at; ``check`` builds it for a failing output."""

    poisoned: np.ndarray  # bool mask of elements still holding the poison
    got: np.ndarray       # float64 copy of out
    want: np.ndarray      # float64 reference
    wrong: np.ndarray     # bool mask of wrong elements
    dims: tuple
    tile: dict
    name: str
    rows_sum_to_one: bool
    tol: float            # relative tolerance of the pattern fits (above rounding noise)
    rel_err: float
    rtol: float
    precision: str
    attention: dict | None = None   # validated attention context (float64 arrays), or None
    reduction: dict | None = None   # validated reduction context, or None
    gemm: dict | None = None        # validated GEMM context, or None
    kernel_notes: list = field(default_factory=list)  # (key, message) found in the kernel's source


def _unwritten(case: Case, found) -> str | None:
    mask = case.poisoned & case.wrong
    k = int(mask.sum())
    if not k:
        return None
    message = (f"{k} elements were never written (they still hold the poison): is the grid large "
               "enough to cover every element, or is the bounds guard too strict?")
    for axis, dim in enumerate(case.dims):
        n = case.got.shape[axis]
        other = tuple(a for a in range(case.got.ndim) if a != axis)
        all_unwritten = mask.all(axis=other) if other else mask
        none_unwritten = ~mask.any(axis=other) if other else ~mask
        start = int(np.argmax(all_unwritten)) if all_unwritten.any() else n
        if 0 < start < n and all_unwritten[start:].all() and none_unwritten[:start].all():
            block = case.tile.get(dim, 32)
            if start % block:
                # A grid covers whole blocks; stopping inside one is the work of a guard.
                message += (f" Nothing was written at {dim} >= {start} (of {n}), and {start} is not a "
                            f"multiple of a block ({block}): the bounds guard stops too early "
                            f"(`{dim} < n - 1`, or a length minus one).")
            else:
                message += (f" Nothing was written at {dim} >= {start} (of {n}): either the grid covers "
                            f"{dim} < {start} only (size it with a ceiling division, (n + tile - 1) // tile), "
                            "or the later blocks compute indices past the end (a block offset multiplied "
                            "by the wrong size).")
            break
    return message


def _zeros(case: Case, found) -> str | None:
    if "unwritten" in found or not (case.got == 0).all() or not (case.want != 0).any():
        return None
    if _masked_nan(case, found):
        return None     # zeros where a NaN sum failed a `sum > 0` test: the masked_nan detector names it
    return (f"{case.name} is all zeros: did the kernel run (kernel[grid, block](...)), and was the "
            "result copied back from the device (copy_to_host)?")


def _nonfinite_rows(case: Case):
    """(produced mask, rows with a produced NaN/inf, reference rows) or None; rows = last dimension."""
    produced = ~np.isfinite(case.got) & np.isfinite(case.want) & ~case.poisoned
    if not produced.any():
        return None
    cols = case.got.shape[-1] if case.got.ndim else 1
    bad_rows = produced.reshape(-1, cols).any(axis=1)
    return produced, bad_rows, case.want.reshape(-1, cols)


def _empty_row_nan(case: Case, found) -> str | None:
    rows = _nonfinite_rows(case)
    if rows is None or case.got.ndim < 2:
        return None
    _, bad_rows, want = rows
    empty = (want == 0).all(axis=1)
    if not (bad_rows & empty).any():
        return None
    first = int(np.flatnonzero(bad_rows & empty)[0])
    return (f"NaN in a row whose reference is all zeros ({_row_name(case, first)}): a row with no "
            "allowed key (every entry masked, or an empty sequence) has a running sum of 0, and "
            "0/0 is NaN: when the sum is 0, write zeros instead of dividing")


def _masked_nan(case: Case, found) -> str | None:
    """NaN (or zeros, when a NaN sum failed a `sum > 0` test) exactly in the rows that have masked entries."""
    if case.got.ndim < 2 or not case.rows_sum_to_one or not np.isfinite(case.want).all():
        return None
    cols = case.got.shape[-1]
    got, want = case.got.reshape(-1, cols), case.want.reshape(-1, cols)
    wrong_rows = case.wrong.reshape(-1, cols).any(axis=1)
    broken = (np.isnan(got).any(axis=1) | (got == 0).all(axis=1)) & ~(want == 0).all(axis=1)
    partly_masked = (want == 0).any(axis=1)
    if not wrong_rows.any() or not (wrong_rows == broken).all() or not partly_masked[broken].any():
        return None
    first = int(np.flatnonzero(broken)[0])
    message = (f"the rows that have masked entries (probability 0, from a -inf logit) came out NaN or all "
               f"zero, e.g. {_row_name(case, first)}: exp(-inf - (-inf)) is exp(NaN). A thread, or a state, "
               "that has seen only masked entries has max -inf and sum 0; when both maxima of a rescale or "
               "a merge are -inf, skip the exp and keep the empty state (max -inf, sum 0). (A NaN sum also "
               "fails a `sum > 0` test, which turns the row into zeros.)")
    if partly_masked[broken].all():
        return message
    if not broken[~(want == 0).all(axis=1)].all():
        return None
    # Rows without a masked entry broke too: every row that has a value did, so the empty states come from
    # the threads themselves.
    return message + (f" Here every row came out so, those with no masked entry too: a row of {cols} "
                      "columns leaves the threads past its end with no entry at all, in the empty state as "
                      "well, and merging two empty states is the same exp(-inf - (-inf)).")


def _nonfinite(case: Case, found) -> str | None:
    if {"empty_row_nan", "masked_nan"} & set(found):
        return None
    rows = _nonfinite_rows(case)
    if rows is None:
        return None
    produced = rows[0]
    nans, infs = int(np.isnan(case.got[produced]).sum()), int(np.isinf(case.got[produced]).sum())
    return (f"the kernel produced {nans} NaN and {infs} inf where the reference is finite: exp of a "
            "large input overflows (exp(100) is 2.7e43, past float32's 3.4e38, and inf/inf is NaN), "
            "so subtract the row max before exp; a division by a zero sum (a row with every key "
            "masked) gives NaN too")


def _finite_pair(case: Case):
    ok = np.isfinite(case.got) & np.isfinite(case.want)
    return case.got[ok], case.want[ok]


def _transposed(case: Case, found) -> str | None:
    if case.got.ndim < 2 or case.got.shape[-1] != case.got.shape[-2] or case.got.shape[-1] < 2:
        return None
    if not (np.isfinite(case.want).all() and np.isfinite(case.got).all()):
        return None
    swapped = np.swapaxes(case.want, -1, -2)
    if np.array_equal(swapped, case.want):
        return None
    norm = np.linalg.norm(case.want)
    if norm == 0 or np.linalg.norm(case.got - swapped) > case.tol * norm:
        return None
    a, b = case.dims[-2], case.dims[-1]
    return (f"{case.name} is the transpose of the expected result ({a} and {b} swapped): somewhere "
            f"[{b}, {a}] is indexed instead of [{a}, {b}], or the x and y of the grid are exchanged")


_SIMPLE_K = tuple(range(2, 17)) + (24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256)


def _describe_factor(c: float) -> str:
    """``" (= 1/8 = 1/sqrt(64))"`` when c is a small integer, a head_dim's square root, or 1 over one."""
    for prefix, value in (("", c), ("1/", 1.0 / c)):
        for k in _SIMPLE_K:
            root = math.sqrt(k)
            if abs(value - root) <= 1e-3 * root:
                whole = math.isqrt(k) if math.isqrt(k) ** 2 == k else None
                return f" (= {prefix}{whole} = {prefix}sqrt({k}))" if whole else f" (= {prefix}sqrt({k}))"
        for k in _SIMPLE_K:
            if abs(value - k) <= 1e-3 * k:
                return f" (= {prefix}{k})"
    return ""


def _scale(case: Case, found) -> str | None:
    g, r = _finite_pair(case)
    rr = float(r @ r)
    if rr == 0 or g.size < 2:
        return None
    c = float(g @ r) / rr
    if abs(c) < 1e-12 or abs(c - 1) <= case.tol:
        return None
    if np.linalg.norm(g - c * r) > case.tol * abs(c) * math.sqrt(rr):
        return None
    if abs(c + 1) <= case.tol:
        return f"{case.name} is the negative of the expected result: a sign is flipped"
    return (f"every element is off by the same factor {c:.4g}{_describe_factor(abs(c))}: a scale is "
            "missing, applied twice or inverted (e.g. the 1/sqrt(head_dim) of attention scores)")


def _rows(case: Case):
    """The last dimension as rows: (got, want) reshaped to (rows, cols); None for 1-D or inf in ref."""
    if case.got.ndim < 2 or case.got.shape[-1] < 2 or not np.isfinite(case.want).all():
        return None
    cols = case.got.shape[-1]
    return case.got.reshape(-1, cols), case.want.reshape(-1, cols)


def _row_name(case: Case, flat_row: int) -> str:
    index = np.unravel_index(flat_row, case.got.shape[:-1])
    return ", ".join(f"{d} {i}" for d, i in zip(case.dims[:-1], index))


def _temperature(case: Case, found) -> str | None:
    rows = _rows(case)
    if not case.rows_sum_to_one or rows is None or "scale" in found:
        return None
    g, r = rows
    ok = (g > 0) & (r > 0) & np.isfinite(g)
    usable = ok.all(axis=1)
    if usable.sum() == 0:
        return None
    lg, lr = np.log(g[usable]), np.log(r[usable])
    x = lr - lr.mean(axis=1, keepdims=True)
    y = lg - lg.mean(axis=1, keepdims=True)
    xx = float((x * x).sum())
    if xx == 0:
        return None
    s = float((x * y).sum()) / xx
    if abs(s - 1) <= case.tol or np.linalg.norm(y - s * x) > case.tol * abs(s) * math.sqrt(xx):
        return None
    return (f"the rows are a softmax of logits multiplied by {s:.4g}{_describe_factor(abs(s))} too "
            "much: the scale applied before exp is missing or wrong (e.g. 1/sqrt(head_dim))")


def _row_sums(case: Case, found) -> str | None:
    rows = _rows(case)
    if not case.rows_sum_to_one or rows is None or {"masked_nan", "empty_row_nan"} & set(found):
        return None
    g, r = rows
    gs, rs = g.sum(axis=1), r.sum(axis=1)
    # Rows holding NaN or inf are the business of the non-finite detectors.
    bad = np.isfinite(gs) & ~(np.abs(gs - rs) <= max(1e-3, case.tol))
    if not bad.any():
        return None
    first = int(np.argmax(bad))
    message = (f"{int(bad.sum())} of {bad.size} rows do not sum like the reference (row at "
               f"{_row_name(case, first)} sums to {gs[first]:.6g}, expected {rs[first]:.6g})")
    if rs[first] == 0:
        return message + ": a row with no allowed key must be all zeros"
    low, high = (gs[bad] < rs[bad]).all(), (gs[bad] > rs[bad]).all()
    if low:
        message += (": the rows sum below 1, so the divisor is too large: is the running sum rescaled by "
                    "exp(m_old - m_new) when the max grows (terms added against an older, smaller max "
                    "stay too large), and is every entry added only once?")
    elif high:
        message += (": the rows sum above 1, so the divisor is too small: some entries' exp never reached "
                    "the sum (a reduction that drops some threads' partials, a loop that stops early)")
    else:
        message += ": is every entry added to the sum exactly once, against the same max as the numerator?"
    return message


def _row_scale(case: Case, found) -> str | None:
    rows = _rows(case)
    if rows is None or {"scale", "row_sums", "temperature", "transposed"} & set(found):
        return None
    g, r = rows
    wrong_rows = case.wrong.reshape(g.shape).any(axis=1)
    if not wrong_rows.any() or not np.isfinite(g[wrong_rows]).all():
        return None
    gw, rw = g[wrong_rows], r[wrong_rows]
    rr = (rw * rw).sum(axis=1)
    if (rr == 0).any():
        return None
    c = (gw * rw).sum(axis=1) / rr
    resid = np.linalg.norm(gw - c[:, None] * rw, axis=1)
    if (np.abs(c) <= case.tol).any() or (resid > case.tol * np.abs(c) * np.sqrt(rr)).any():
        return None
    if c.size == 1:
        row = _row_name(case, int(np.flatnonzero(wrong_rows)[0]))
        which = f"the row at {row} is the right row times {c[0]:.4g}"
    else:
        which = (f"{c.size} rows are each the right row times a factor of their own "
                 f"(from {c.min():.4g} to {c.max():.4g})")
    return (f"{which}: the normalisation differs per row: is the running sum rescaled when the "
            "running max changes, and is each row divided by its own final sum?")


def _slices(case: Case, found) -> str | None:
    if case.got.ndim < 3:
        return None
    lead = case.got.shape[:-2]
    per_slice = case.wrong.reshape(int(np.prod(lead)), -1).any(axis=1)
    k, m = int(per_slice.sum()), per_slice.size
    if k == 0 or k == m:
        return None
    names = case.dims[:-2]

    def label(flat):
        return "(" + ", ".join(f"{d} {i}" for d, i in zip(names, np.unravel_index(flat, lead))) + ")"

    wrong_ids = np.flatnonzero(per_slice)
    listed = ", ".join(label(i) for i in wrong_ids[:6]) + (", ..." if k > 6 else "")
    message = (f"only {k} of {m} ({', '.join(names)}) slices {'is' if k == 1 else 'are'} wrong: "
               f"{listed}; the others are "
               f"right. Check how the grid's y/z block indices map to {' and '.join(names)}"
               " (and, with grouped-query attention, the KV head h // group).")
    moved = _moved_slices(case, wrong_ids[:8], label)
    if moved:
        message += " " + moved
    return message


def _moved_slices(case: Case, wrong_ids, label) -> str:
    """Name the reference slice that a wrong output slice holds instead, if any."""
    cols = case.got.shape[-2] * case.got.shape[-1]
    g = case.got.reshape(-1, cols)
    r = case.want.reshape(-1, cols)
    notes = []
    for i in wrong_ids:
        if not np.isfinite(g[i]).all():
            continue
        for j in range(r.shape[0]):
            if j != i and np.allclose(g[i], r[j], rtol=case.tol, atol=case.tol * np.abs(r[j]).max()):
                notes.append(f"{label(i)} holds what belongs at {label(j)}")
                break
    return ("; ".join(notes) + ".") if notes else ""


def _edge_dims(case: Case):
    """Dimensions worth looking along: the last two, and any with a tile size."""
    for axis, dim in enumerate(case.dims):
        if (axis >= case.got.ndim - 2 or dim in case.tile) and case.got.shape[axis] > 1:
            yield axis, dim


def _wrong_indices(case: Case, axis: int) -> np.ndarray:
    other = tuple(a for a in range(case.got.ndim) if a != axis)
    return np.flatnonzero(case.wrong.any(axis=other) if other else case.wrong)


def _localised(case: Case) -> bool:
    return 0 < int(case.wrong.sum()) < case.wrong.size


def _first(case: Case, found) -> str | None:
    if not _localised(case):
        return None
    for axis, dim in _edge_dims(case):
        idx = _wrong_indices(case, axis)
        if idx.size and (idx == 0).all():
            return (f"only {dim} 0 is wrong: the first {dim} is treated differently; a loop that "
                    "starts at 1, or an initial value (a running max of 0 instead of -inf, a sum "
                    "not reset) used in place of the first element?")
    return None


def _last(case: Case, found) -> str | None:
    if not _localised(case):
        return None
    for axis, dim in _edge_dims(case):
        n = case.got.shape[axis]
        idx = _wrong_indices(case, axis)
        if idx.size and (idx == n - 1).all():
            return (f"only the last {dim} ({dim} {n - 1}) is wrong: an off-by-one at the end, "
                    f"like range(n - 1) or a guard `{dim} < n - 1` instead of `{dim} < n`")
    return None


def _tiles_of(case: Case):
    for axis, dim in _edge_dims(case):
        if dim in case.tile:
            n, t = case.got.shape[axis], case.tile[dim]
            n_tiles = cdiv(n, t)
            if n_tiles > 1:
                yield dim, n, t, n_tiles, _wrong_indices(case, axis)


def _tile_edge(case: Case, found) -> str | None:
    if not _localised(case) or _whole_tiles_unwritten(case, found):
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        start = (n_tiles - 1) * t
        if n % t and idx.size and (idx >= start).all():
            return (f"only the last {dim} tile is wrong ({dim} {start}..{n - 1}; {n} is not a multiple "
                    f"of the tile {t}, so that tile is partial): check the bounds at the tile edge: "
                    f"guard every load and store with `{dim} < n`, and load a neutral value (0, or "
                    "-inf for scores) where a tile runs past the end")
    return None


def _whole_tiles_unwritten(case: Case, found) -> bool:
    """Every wrong element is unwritten: the unwritten message explains it (grid or offsets), and a
    guard at the tile edge, which would leave part of a tile written, is not the cause."""
    return "unwritten" in found and not (case.wrong & ~case.poisoned).any()


def _last_tile(case: Case, found) -> str | None:
    if not _localised(case) or "tile_edge" in found or _whole_tiles_unwritten(case, found):
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        if idx.size and (idx >= (n_tiles - 1) * t).all():
            return (f"only the last {dim} tile is wrong: does the loop over tiles stop one tile "
                    "early, or is the last tile's offset computed differently?")
    return None


def _first_tile(case: Case, found) -> str | None:
    if not _localised(case) or "first" in found:
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        if idx.size and (idx < t).all():
            return (f"only the first {dim} tile ({dim} 0..{t - 1}) is wrong: the first pass through "
                    "the tile loop starts from a wrong state (running max 0 instead of -inf, an "
                    "accumulator not zeroed) or loads the first tile wrong")
    return None


def _tile_offset(case: Case, found) -> str | None:
    if not _localised(case):
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        tiles_wrong = set((idx // t).tolist())
        if tiles_wrong == set(range(1, n_tiles)):
            return (f"every {dim} tile except the first is wrong: the tile offset (tile index x {t}) "
                    "is missing or wrong in one place, so later tiles read or write tile 0's elements")
    return None


def _tile_boundary(case: Case, found) -> str | None:
    if not _localised(case):
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        if t < 3 or not idx.size:
            continue
        position = idx % t
        for where, value in (("first", 0), ("last", t - 1)):
            if (position == value).all() and len(set((idx // t).tolist())) > 1:
                return (f"only the {where} {dim} of each tile is wrong: an off-by-one where tiles "
                        f"meet (a loop bound `< {t} - 1`, or a load index shifted by one)")
    return None


def _spread(case: Case, found) -> str | None:
    if int(case.wrong.sum()) or case.precision != "fp32" or not math.isfinite(case.rel_err):
        return None
    return (f"no single element is far off, but the errors add up to rel_err {case.rel_err:.2e} "
            f"(limit {case.rtol:g}): is something computed in lower precision than float32 (a "
            "float16 accumulator, rounded inputs), or a term missing that is small everywhere?")


PATTERN_DETECTORS = (
    ("unwritten", _unwritten), ("zeros", _zeros), ("empty_row_nan", _empty_row_nan),
    ("masked_nan", _masked_nan), ("nonfinite", _nonfinite),
    ("transposed", _transposed), ("scale", _scale), ("temperature", _temperature),
    ("row_sums", _row_sums), ("row_scale", _row_scale), ("slices", _slices),
    ("first", _first), ("last", _last), ("tile_edge", _tile_edge), ("last_tile", _last_tile),
    ("first_tile", _first_tile), ("tile_offset", _tile_offset), ("tile_boundary", _tile_boundary),
    ("spread", _spread),
)
# Keys of what the contexts and the kernel's source can name (see the module docstring).
