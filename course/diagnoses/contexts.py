"""Diagnoses from context: NumPy models of the classic mistakes, compared with the output.

``check`` passes the context it was given (``attention=``, ``reduction=``, ``gemm=``), validated,
on the :class:`~course.diagnoses.patterns.Case`. For each context the specific asserts come first
(facts: "row 0 sees only key 0"), then the models: the output is computed the wrong way in NumPy,
and a mistake is named only when the output matches its model within rounding while the right
result does not.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CONTEXT_KEYS", "context_findings"]

CONTEXT_KEYS = ("row0_key0", "empty_sequence", "causal_strict", "causal_missing", "causal_reversed",
                "diagonal_unmasked", "kv_lens_ignored", "kv_lens_off_by_one", "keys_dropped",
                "acc_not_rescaled", "sum_not_rescaled", "attention_scale", "max_identity",
                "stride_loop", "tree_early", "tree_partial", "shuffle_partial", "k_steps_dropped",
                "tile_offset_k", "transposed_operand")


def context_findings(case):
    """(key, message) pairs from the attention, reduction and GEMM contexts: asserts first, then models."""
    if case.attention is not None:
        yield from _attention_asserts(case)
        yield from _attention_models(case)
    if case.reduction is not None:
        yield from _reduction_models(case)
    if case.gemm is not None:
        yield from _gemm_models(case)


def _close(got: np.ndarray, model: np.ndarray, tol: float) -> bool:
    """The output matches a model within the fit tolerance (and is finite where the model is)."""
    if got.shape != model.shape or not np.isfinite(model).all() or not np.isfinite(got).all():
        return False
    norm = float(np.linalg.norm(model))
    scale = float(np.abs(model).max()) if model.size else 0.0
    return (float(np.linalg.norm(got - model)) <= tol * max(norm, 1e-30)
            and float(np.abs(got - model).max(initial=0.0)) <= 10 * tol * max(scale, 1e-30))


def _attention_asserts(case):
    ctx = case.attention
    v, lens, got = ctx["v"], ctx["kv_lens"], case.got
    if ctx["causal"] and got.shape[2] and v.shape[2]:
        for b in np.flatnonzero(lens > 0):
            for h in range(got.shape[1]):
                row0, key0 = got[b, h, 0], v[b, h, 0]
                if _close(row0, key0, case.tol):
                    continue
                message = (f"row 0 sees only key 0 (causal), so O[batch {b}, head {h}, row 0] must equal "
                           f"V[batch {b}, head {h}, key 0]; it does not")
                if np.isfinite(row0).all() and (row0 == 0).all():
                    message += ": it is all zeros, so row 0 saw no key at all"
                elif not np.isfinite(row0).all():
                    message += ": it holds NaN or inf"
                yield "row0_key0", message
                break
            else:
                continue
            break
    for b in np.flatnonzero(lens == 0):
        if not (np.isfinite(got[b]).all() and (got[b] == 0).all()):
            what = "NaN" if np.isnan(got[b]).any() else "non-zero values"
            yield "empty_sequence", (f"batch {b} is an empty sequence (kv_lens[{b}] = 0): no key exists, "
                                     f"so every row of O there must be 0; it holds {what}")
            break


def _attend(ctx: dict, allowed: np.ndarray, scale: float) -> np.ndarray:
    """softmax(scale q kᵀ) v over the allowed keys (allowed: (batch, N, M) bool); rows with none: 0."""
    q, k, v = ctx["q"], ctx["k"], ctx["v"]
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    mask = allowed[:, None]
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.where(mask, np.exp(s - m), 0.0)
    total = p.sum(axis=-1, keepdims=True)
    o = p @ v
    return np.divide(o, total, out=np.zeros_like(o), where=total > 0)


def _attend_online(ctx: dict, allowed: np.ndarray, scale: float, block: int, rescale_acc: bool,
                   rescale_sum: bool) -> np.ndarray:
    """The online softmax over key blocks of ``block`` keys, with a rescale left out on purpose."""
    q, k, v = ctx["q"], ctx["k"], ctx["v"]
    s_all = np.einsum("bhid,bhjd->bhij", q, k) * scale
    mask_all = np.broadcast_to(allowed[:, None], s_all.shape)
    shape = s_all.shape[:-1]
    m = np.full(shape, -np.inf)
    total = np.zeros(shape)
    acc = np.zeros(shape + (v.shape[-1],))
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, s_all.shape[-1], block):
            s = np.where(mask_all[..., start:start + block], s_all[..., start:start + block], -np.inf)
            m_new = np.maximum(m, s.max(axis=-1, initial=-np.inf))
            correction = np.where(np.isfinite(m_new), np.exp(m - np.where(np.isfinite(m_new), m_new, 0.0)), 1.0)
            p = np.where(np.isfinite(s), np.exp(s - np.where(np.isfinite(m_new), m_new, 0.0)[..., None]), 0.0)
            total = (total * correction if rescale_sum else total) + p.sum(axis=-1)
            acc = (acc * correction[..., None] if rescale_acc else acc) + p @ v[:, :, start:start + block]
            m = m_new
        return np.divide(acc, total[..., None], out=np.zeros_like(acc), where=total[..., None] > 0)


def _attention_models(case):
    """Yield the classic mistake whose NumPy model the output matches (the first that fits)."""
    ctx = case.attention
    batch, _, n, _ = ctx["q"].shape
    m = ctx["k"].shape[2]
    lens, causal, scale = ctx["kv_lens"], ctx["causal"], ctx["scale"]
    i = np.arange(n)[:, None]
    j = np.arange(m)[None, :]
    exists = j[None] < lens[:, None, None]                    # (batch, 1, M)
    below = np.broadcast_to(j <= i, (n, m))[None]             # (1, N, M)
    right = exists & below if causal else np.broadcast_to(exists, (batch, n, m))
    models = []
    if causal:
        models.append(("causal_strict", exists & (j < i)[None],
                       "the causal mask is j < i instead of j <= i: every row must also use its own "
                       "key (row i sees keys 0 ... i), so row 0, which then sees nothing, comes out 0"))
        models.append(("causal_reversed", exists & (j >= i)[None],
                       "the causal mask is reversed: rows use keys j >= i instead of j <= i"))
        tile_q = ctx["tile_q"]
        if tile_q:
            block_end = (i // tile_q + 1) * tile_q
            models.append(("diagonal_unmasked", exists & (j < block_end)[None],
                           "inside the diagonal tile the keys after the row are not masked: tiles past "
                           "the query tile's last row are skipped, but row i of a tile must still stop "
                           "at key i (use only keys kv_start ... i of a tile that crosses the diagonal)"))
        models.append(("causal_missing", np.broadcast_to(exists, (batch, n, m)),
                       "the causal mask is not applied: rows use keys after their own position (j > i)"))
    if (lens < m).any():
        no_lens = below if causal else np.ones((1, n, m), bool)
        models.append(("kv_lens_ignored", np.broadcast_to(no_lens, (batch, n, m)),
                       "keys at positions >= kv_lens[b] were used: they do not exist; stop the key loop "
                       "at kv_lens[b], not at the number of keys in k"))
        models.append(("kv_lens_off_by_one", (j[None] <= lens[:, None, None]) & (below if causal else True),
                       "one key too many: keys j <= kv_lens[b] were used, but key kv_lens[b] does not "
                       "exist (use j < kv_lens[b])"))
    if (lens > 0).any():
        models.append(("kv_lens_off_by_one", (j[None] < lens[:, None, None] - 1) & (below if causal else True),
                       "one key too few: the last key of each sequence (j = kv_lens[b] - 1) was left out"))
    tile_kv = ctx["tile_kv"]
    if tile_kv:
        end = np.broadcast_to(lens[:, None, None], (batch, n, 1))
        if causal and ctx["tile_q"]:
            end = np.minimum(end, ((i // ctx["tile_q"] + 1) * ctx["tile_q"])[None])
        kept = (end // tile_kv) * tile_kv
        if (kept < end).any():
            models.append(("keys_dropped", right & (j[None] < kept),
                           f"the last, partial tile of keys is skipped (keys from the last multiple of "
                           f"{tile_kv} on were never used): loop over range(0, kv_end, TILE_KV) and let "
                           "the last tile hold kv_end - kv_start keys"))
    for key, allowed, message in models:
        model = _attend(ctx, allowed, scale)
        if not _close(case.want, model, case.tol) and _close(case.got, model, case.tol):
            yield key, message
            return
    blocks = sorted({1, ctx["tile_kv"] or 1})
    for block in blocks:
        for key, acc, total, message in (
                ("acc_not_rescaled", False, True,
                 "the accumulator is not rescaled when the running maximum grows: the running sum is "
                 "multiplied by exp(m_old - m_new) but the weighted sum of V is not; rescale both"),
                ("sum_not_rescaled", True, False,
                 "the running sum is not rescaled when the running maximum grows: the accumulator is "
                 "multiplied by exp(m_old - m_new) but the sum is not; rescale both")):
            model = _attend_online(ctx, right, scale, block, acc, total)
            if not _close(case.want, model, case.tol) and _close(case.got, model, case.tol):
                yield key, message + (f" (keys taken {block} at a time)" if block > 1 else "")
                return
    for factor, words in ((1.0 / scale, "is missing"), (scale, "is applied twice")):
        model = _attend(ctx, right, scale * factor)
        if not _close(case.want, model, case.tol) and _close(case.got, model, case.tol):
            yield "attention_scale", (f"the scale {scale:.4g} of the scores {words}: the output is the "
                                      f"attention of scores scaled by {scale * factor:.4g}")
            return


# --------------------------------------------------------------------------- context: reduction


def _reduction_models(case):
    ctx = case.reduction
    x, op, threads = ctx["x"], ctx["op"], ctx["threads"]
    rows, cols = x.shape
    reduce = np.max if op == "max" else np.sum
    identity = -np.inf if op == "max" else 0.0
    partials = np.full((rows, threads), identity)
    for t in range(min(threads, cols)):
        partials[:, t] = reduce(x[:, t::threads], axis=1)
    row_size = np.abs(x).max(axis=1) if op == "max" else np.abs(x).sum(axis=1)
    got, want = case.got, case.want

    def explains(model):
        limit = 1e-5 * row_size + 1e-30
        ok = np.isfinite(model) & np.isfinite(got) & (np.abs(got - model) <= limit)
        return ok.all() and (np.abs(model - want) > limit)[case.wrong].all()

    if op == "max" and explains(np.maximum(want, 0.0)):
        yield "max_identity", ("the running max starts at 0 instead of -inf: a row whose entries are all "
                               "negative comes out 0; start from float32(-math.inf)")
        return
    if cols > threads and explains(reduce(x[:, :threads], axis=1)):
        yield "stride_loop", (f"only the first {threads} columns were used: each thread must loop over "
                              f"its columns t, t + {threads}, t + {2 * threads}, ... (a block-stride loop)")
        return
    levels = int(math.log2(threads))
    for s in range(1, levels + 1):
        step = 2 ** s
        if explains(reduce(partials[:, ::step], axis=1)):
            if step == threads:
                yield "tree_early", ("only thread 0's own partial reached the output: the partials of the "
                                     "other threads were never combined")
            else:
                yield "tree_early", (f"the tree stopped {s} level{'s' if s > 1 else ''} early: only the "
                                     f"partials of threads 0, {step}, {2 * step}, ... reached thread 0; keep "
                                     "halving while the stride is > 0 (the last step has stride 1)")
            return
    for s in range(1, levels):
        first = threads // 2 ** s
        if explains(reduce(partials[:, :first], axis=1)):
            if first % 32 == 0:
                warps = "the first warp" if first == 32 else f"the first {first // 32} warps"
                yield "tree_partial", (f"only the partials of {warps} (threads 0 ... {first - 1}) were "
                                       "combined: the final step must also "
                                       "read the partials the other warps left in shared memory (in a "
                                       f"shared-memory tree: the tree must start at stride {threads // 2}, half "
                                       f"the block; starting at {first // 2} leaves partials {first} ... "
                                       f"{threads - 1} out)")
            else:
                yield "tree_partial", (f"only the partials of threads 0 ... {first - 1} were combined: the "
                                       f"tree must start at stride {threads // 2}, half the block")
            return
    if threads > 32 and threads % 32 == 0:
        lane = np.arange(threads) % 32
        for s in range(1, 5):
            lanes = 32 >> s
            if explains(reduce(partials[:, lane < lanes], axis=1)):
                yield "shuffle_partial", (
                    f"only lanes 0 ... {lanes - 1} of each warp were combined, in every warp: the shuffles within "
                    f"a warp must start at offset 16 (WARP_SIZE // 2), half the warp; starting at offset "
                    f"{lanes // 2} leaves lanes {lanes} ... 31 out")
                return


# --------------------------------------------------------------------------- context: GEMM


def _gemm_models(case):
    a, b, tile = case.gemm["a"], case.gemm["b"], case.gemm["tile_k"]
    k = a.shape[1]
    models = []
    if tile:
        whole = k // tile * tile
        if whole < k:
            models.append(("k_steps_dropped", a[:, :whole] @ b[:whole],
                           f"the last, partial step along K is lost (K = {k} is not a multiple of {tile}): "
                           f"loop over ceil(K / {tile}) steps, range(0, K, TILE), and load zeros where a "
                           "tile hangs over the edge"))
        wrapped = np.arange(k) % tile
        models.append(("tile_offset_k", a[:, wrapped] @ b,
                       "every step along K loads the first tile of A again: the step's offset (k0 + tx) is "
                       "missing from A's column index"))
        models.append(("tile_offset_k", a @ b[wrapped],
                       "every step along K loads the first tile of B again: the step's offset (k0 + ty) is "
                       "missing from B's row index"))
    models.append(("transposed_operand", a @ b.T if a.shape[1] == b.shape[1] else None,
                   "B is read transposed: b[col, k] instead of b[k, col]"))
    for key, model, message in models:
        if model is not None and not _close(case.want, model, case.tol) and _close(case.got, model, case.tol):
            yield key, message
            return
