"""Diagnoses of day 6: the classic mistakes of a paged KV cache, named from a wrong output.

``check`` explains a failure from the output and the context it is given; a paged kernel's context
is a cache, block tables and context lengths, which ``check`` does not know. These functions take
that context and return ``(key, message)`` pairs, most specific first; ``course.exercise_checks``
puts them ahead of ``check``'s own diagnoses.

- :func:`decode_findings`: an attention output ``out (num_seqs, heads, head_dim)`` of a decode step.
  Facts first (an empty context that is not 0; NaN in some channels of a row only, from memory never
  written; NaN or zeros in whole rows, from a slot holding no key: the tests fill every such slot with
  NaN, and a NaN sum fails a ``sum > 0`` test), then NumPy models of the mistakes (the KV head taken
  as ``h % kv_heads`` or with a wrong group size (``course.diagnoses.gqa``), the block table ignored, the last key or the last partial page left out, the
  scale missing or applied twice) and, when the context was split into partitions, the merges
  that leave out a rescale.
- :func:`cache_write_findings`: a KV cache after a write: which token landed where, and why.
- :func:`launch_error`: an exception raised inside a kernel on the simulator (an index past the end
  of an array, a division by zero, an overflowing exp), with the likely bug.

A model is named only when the output matches it within rounding and the right result does not.
"""

from __future__ import annotations

import math
import re
import traceback

import numpy as np

from course.diagnoses.gqa import mapping_candidates

__all__ = ["decode_findings", "merge_models", "partial_arrays", "cache_write_findings", "launch_error", "kernel_line",
           "close_to_model",
           "KEYS"]

# The keys of the findings, by function: decode_findings, cache_write_findings, launch_error.
KEYS = ("paged_empty_context", "paged_partial_nan", "paged_read_past_end", "paged_kv_head_interleaved",
        "paged_kv_head_wrong_group",
        "paged_table_ignored", "paged_last_key_dropped", "paged_partial_page_dropped", "paged_scale",
        "merge_not_rescaled", "merge_acc_not_rescaled", "merge_sum_not_rescaled",
        "slot_at_block_boundary", "slot_table_ignored", "slot_offset", "slot_wrong", "cache_write_extra",
        "cache_write_v_missed",
        "kv_head_out_of_range", "query_head_out_of_range", "key_past_end", "group_past_block", "page_past_table",
        "slot_past_block", "index_out_of_range", "zero_division",
        "exp_overflow")

_TOL = 1e-3


def close_to_model(got: np.ndarray, model: np.ndarray, tol: float = _TOL) -> bool:
    """``got`` matches ``model`` within the fit tolerance (and both are finite)."""
    if got.shape != model.shape or not np.isfinite(model).all() or not np.isfinite(got).all():
        return False
    norm = float(np.linalg.norm(model))
    scale = float(np.abs(model).max()) if model.size else 0.0
    return (float(np.linalg.norm(got - model)) <= tol * max(norm, 1e-30)
            and float(np.abs(got - model).max(initial=0.0)) <= 10 * tol * max(scale, 1e-30))


# --------------------------------------------------------------------------- decode step


def _rows(cache: np.ndarray, blocks, count: int) -> np.ndarray:
    """(kv_heads, count, d) float64: the first ``count`` rows of ``cache`` read through ``blocks``."""
    block_size = cache.shape[2]
    if count == 0:
        return np.zeros((cache.shape[1], 0, cache.shape[3]))
    pages = [cache[int(blocks[p])] for p in range(-(-count // block_size))]
    return np.concatenate(pages, axis=1)[:, :count].astype(np.float64)


def _attend(q, keys, values, scale) -> np.ndarray:
    """softmax(scale q k^T) v for one query (d,), keys and values (n, d); zeros when n == 0."""
    if keys.shape[0] == 0:
        return np.zeros(q.shape[0])
    s = keys @ q * scale
    p = np.exp(s - s.max())
    return p @ values / p.sum()


def _decode(ctx: dict, *, kv_of=None, blocks_of=None, keys_of=None, scale=None) -> np.ndarray | None:
    """The decode step with one thing changed: the KV head of a query head, the blocks of a sequence,
    or how many of its keys are used. None when the model reads outside the cache."""
    q, k_cache, v_cache = ctx["q"], ctx["k_cache"], ctx["v_cache"]
    tables, lens = ctx["block_tables"], ctx["context_lens"]
    num_seqs, heads, d = q.shape
    kv_heads, group = k_cache.shape[1], heads // k_cache.shape[1]
    scale = ctx["scale"] if scale is None else scale
    out = np.zeros((num_seqs, heads, d))
    for s in range(num_seqs):
        n = int(lens[s]) if keys_of is None else keys_of(s, int(lens[s]))
        blocks = tables[s] if blocks_of is None else blocks_of(s)
        if n and (n > len(blocks) * k_cache.shape[2] or min(blocks[:-(-n // k_cache.shape[2])]) < 0
                  or max(blocks[:-(-n // k_cache.shape[2])]) >= k_cache.shape[0]):
            return None
        keys, values = _rows(k_cache, blocks, n), _rows(v_cache, blocks, n)
        for h in range(heads):
            kv = h // group if kv_of is None else kv_of(h, kv_heads, group)
            out[s, h] = _attend(q[s, h].astype(np.float64), keys[kv], values[kv], scale)
    return out


def _partials(ctx: dict, partition_size: int):
    """Per (seq, head): a list of (max, sum, acc) of each partition, relative to its own max."""
    q, k_cache, v_cache = ctx["q"], ctx["k_cache"], ctx["v_cache"]
    tables, lens, scale = ctx["block_tables"], ctx["context_lens"], ctx["scale"]
    num_seqs, heads, d = q.shape
    group = heads // k_cache.shape[1]
    longest = int(max(lens, default=0))
    partitions = max(1, -(-longest // partition_size))
    result = {}
    for s in range(num_seqs):
        n = int(lens[s])
        keys, values = _rows(k_cache, tables[s], n), _rows(v_cache, tables[s], n)
        for h in range(heads):
            scores = keys[h // group] @ q[s, h].astype(np.float64) * scale
            parts = []
            for p in range(partitions):
                lo, hi = p * partition_size, min((p + 1) * partition_size, n)
                if hi <= lo:
                    parts.append((-math.inf, 0.0, np.zeros(d)))
                    continue
                m = scores[lo:hi].max()
                w = np.exp(scores[lo:hi] - m)
                parts.append((m, w.sum(), w @ values[h // group][lo:hi]))
            result[s, h] = parts
    return result, (num_seqs, heads, d)


def partial_arrays(ctx: dict, partition_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What v2's partition kernel writes, in float64: ``(partial_max, partial_sum, partial_acc)`` of shapes
    (num_seqs, heads, P), (num_seqs, heads, P) and (num_seqs, heads, P, head_dim); a partition that
    saw no key has maximum -inf, sum 0 and accumulator 0."""
    parts, (num_seqs, heads, d) = _partials(ctx, partition_size)
    partitions = len(next(iter(parts.values()))) if parts else 1
    maxima = np.full((num_seqs, heads, partitions), -math.inf)
    sums = np.zeros((num_seqs, heads, partitions))
    accs = np.zeros((num_seqs, heads, partitions, d))
    for (s, h), partials in parts.items():
        for p, (m, total, acc) in enumerate(partials):
            maxima[s, h, p], sums[s, h, p], accs[s, h, p] = m, total, acc
    return maxima, sums, accs


def merge_models(ctx: dict, partition_size: int) -> dict:
    """The merges of v2 that leave a rescale out: ``{key: out}``, from the partials in float64."""
    parts, shape = _partials(ctx, partition_size)
    models = {key: np.zeros(shape) for key in ("merge_not_rescaled", "merge_acc_not_rescaled",
                                                "merge_sum_not_rescaled")}
    for (s, h), partials in parts.items():
        m = max(p[0] for p in partials)
        if m == -math.inf:
            continue
        weights = [math.exp(p[0] - m) if p[0] > -math.inf else 0.0 for p in partials]
        sums = np.array([p[1] for p in partials])
        accs = np.array([p[2] for p in partials])
        w = np.array(weights)
        for key, acc, total in (("merge_not_rescaled", accs.sum(0), sums.sum()),
                                ("merge_acc_not_rescaled", accs.sum(0), sums @ w),
                                ("merge_sum_not_rescaled", w @ accs, sums.sum())):
            models[key][s, h] = acc / total if total > 0 else 0.0
    return models


def _sequence_words(ctx: dict, s: int) -> str:
    n, block_size = int(ctx["context_lens"][s]), ctx["k_cache"].shape[2]
    pages = -(-n // block_size)
    last = n - (pages - 1) * block_size if pages else 0
    return (f"context_lens[{s}] = {n}: {pages} page{'s' if pages != 1 else ''} of block_size {block_size}, "
            f"the last holding {last} token{'s' if last != 1 else ''}")


def decode_findings(got: np.ndarray, want: np.ndarray, ctx: dict, *, partition_size: int | None = None,
                    poisoned: np.ndarray | None = None):
    """``[(key, message)]`` for a wrong decode output ``got`` (float64 (num_seqs, heads, d)).

    ctx: ``q, k_cache, v_cache, block_tables, context_lens`` (NumPy) and ``scale`` (float), the
    cache holding NaN in every slot that holds no key. partition_size: v2's, for the merge models.
    poisoned: the elements never written (they hold ``course.checking.poison``), not the kernel's NaN.
    """
    found = []
    lens = np.asarray(ctx["context_lens"])
    block_size = ctx["k_cache"].shape[2]
    poisoned = np.zeros(got.shape, bool) if poisoned is None else poisoned
    for s in np.flatnonzero(lens == 0):
        if not (np.isfinite(got[s]).all() and (got[s] == 0).all()) and not poisoned[s].all():
            what = "NaN" if np.isnan(got[s]).any() else "values other than 0"
            found.append(("paged_empty_context", (
                f"sequence {s} has context_lens[{s}] = 0: it has no key, so out[{s}] must be 0 for every "
                f"head; it holds {what}. With no key the running sum stays 0: write zeros instead of dividing "
                "by it (and do not read a page: the sequence has none)")))
            break
    produced_nan = ~np.isfinite(got) & np.isfinite(want) & ~poisoned
    nan_rows = produced_nan.all(axis=-1)                                    # (num_seqs, heads)
    if produced_nan.any() and not (produced_nan.any(axis=-1) <= nan_rows).all():
        s, h, c = (int(i) for i in np.argwhere(produced_nan & ~nan_rows[..., None])[0])
        found.append(("paged_partial_nan", (
            f"NaN in some channels of out[{s}, {h}] only (channel {c} is one): a slot read past a context's end "
            "would spoil every channel of the row, since its score enters the sum; a value that was never "
            "written does not. Is every channel < head_dim computed (lane l holds channels l, l + 32, ...: "
            "CHANNELS of them), and every slot of a shared or local array written before it is read?")))
        return found
    zero_rows = (got == 0).all(axis=-1) & (want != 0).any(axis=-1)         # (num_seqs, heads)
    nan_seqs = [int(s) for s in range(len(lens)) if lens[s] > 0 and nan_rows[s].any()]
    zero_seqs = [int(s) for s in range(len(lens)) if lens[s] > 0 and zero_rows[s].any()]
    bad_seqs = nan_seqs or zero_seqs
    if bad_seqs:
        full = [s for s in bad_seqs if lens[s] % block_size == 0]
        partial = [s for s in bad_seqs if lens[s] % block_size]
        s = bad_seqs[0]
        if nan_seqs:
            message = f"NaN in out[{s}] where the reference is finite ({_sequence_words(ctx, s)}). "
        else:
            message = (f"out[{s}] is exactly 0 for a head although the sequence has keys ({_sequence_words(ctx, s)}). "
                       "If your kernel writes 0 when the sum is not > 0, its sum was NaN (a NaN fails `sum > 0`). ")
        message += ("Here every cache slot that holds no key of a sequence is NaN: the tail of a partial last page, "
                    "the blocks of other sequences, spare blocks; and block_tables rows are padded with -1 past "
                    "their pages (on the simulator -1 reads the last block, on a GPU memory before the cache). "
                    "So the kernel read a slot past the context's end or a padding table entry: ")
        if partial and not full:
            message += ("only sequences whose last page is partial are wrong, so the tail of the last page was "
                        "read: stop the token loop at context_lens[s], not at the end of the last page")
        elif full and not partial:
            message += ("only sequences whose last page is full are wrong, so one page past the end was read: "
                        "a context of n tokens uses pages 0 ... ceil(n / block_size) - 1, not n // block_size + 1")
        else:
            message += ("does the token loop stop at context_lens[s] (not at a whole number of pages), and is "
                        "block_tables[s, t // block_size] read only for t < context_lens[s]?")
        found.append(("paged_read_past_end", message))
    if found:
        return found
    heads, kv_heads = ctx["q"].shape[1], ctx["k_cache"].shape[1]
    models = []
    for name, kv_of, message in mapping_candidates(heads, kv_heads):
        models.append((f"paged_kv_head_{name}", lambda kv_of=kv_of: _decode(ctx, kv_of=kv_of), message))
    contiguous = np.arange(ctx["block_tables"].shape[1])
    models.append(("paged_table_ignored", lambda: _decode(ctx, blocks_of=lambda s: contiguous),
                   "the block table was not used: position t was read from block t // block_size, as if the "
                   "cache were contiguous; its page is t // block_size, and block_tables[s, page] names the "
                   "physical block that holds it"))
    models.append(("paged_last_key_dropped", lambda: _decode(ctx, keys_of=lambda s, n: max(n - 1, 0)),
                   "one key too few: the last key of each sequence (position context_lens[s] - 1) was left out; "
                   "use every t < context_lens[s]"))
    models.append(("paged_partial_page_dropped",
                   lambda: _decode(ctx, keys_of=lambda s, n: n // block_size * block_size),
                   "the last, partial page of each sequence was left out: only whole pages were read; a context "
                   "of n tokens has ceil(n / block_size) pages, the last one holding n - (pages - 1) * block_size "
                   "tokens"))
    scale = ctx["scale"]
    for factor, words in ((1.0 / scale, "is missing"), (scale, "is applied twice")):
        models.append(("paged_scale", lambda factor=factor: _decode(ctx, scale=scale * factor),
                       f"the scale {scale:.4g} of the scores {words}: the output is the attention of scores "
                       f"scaled by {scale * factor:.4g}"))
    for key, model_of, message in models:
        model = model_of()
        if model is not None and not close_to_model(want, model) and close_to_model(got, model):
            return [(key, message)]
    if partition_size:
        words = {
            "merge_not_rescaled": (
                "the partials were merged without rescaling them: each partition's sum and accumulator are "
                "relative to its own maximum partial_max[p], so before adding them up multiply both by "
                "exp(partial_max[p] - m), m the largest partial maximum of the (sequence, head)"),
            "merge_acc_not_rescaled": (
                "a row sums to more than 1: the partial sums were rescaled by exp(partial_max[p] - m) but the "
                "accumulators were not; rescale both"),
            "merge_sum_not_rescaled": (
                "the accumulators were rescaled by exp(partial_max[p] - m) but the partial sums were not, so the "
                "weights no longer sum to 1; rescale both"),
        }
        for key, model in merge_models(ctx, partition_size).items():
            if not close_to_model(want, model) and close_to_model(got, model):
                return [(key, words[key])]
    return []


# --------------------------------------------------------------------------- writing the cache


def _where(cache: np.ndarray, row: np.ndarray, head: int) -> list[tuple[int, int]]:
    """(block, slot) of every slot of ``cache[:, head]`` that holds exactly ``row``."""
    hits = np.all(cache[:, head] == row, axis=-1)
    return [(int(b), int(o)) for b, o in zip(*np.nonzero(hits))]


def cache_write_findings(got_k, got_v, want_k, want_v, before_k, before_v, ctx: dict):
    """``[(key, message)]`` for caches that differ from the expected ones after a write.

    ctx: ``k_new, v_new, token_seqs, token_positions, block_tables`` (NumPy).
    """
    k_new = ctx["k_new"]
    seqs, positions, tables = ctx["token_seqs"], ctx["token_positions"], ctx["block_tables"]
    block_size = got_k.shape[2]
    found = []
    misplaced = []     # (token, expected (block, slot), where its key row was found)
    for t in range(len(seqs)):
        s, pos = int(seqs[t]), int(positions[t])
        page, slot = pos // block_size, pos % block_size
        block = int(tables[s, page])
        if not np.array_equal(got_k[block, :, slot], k_new[t]):
            misplaced.append((t, s, pos, page, block, slot, _where(got_k, k_new[t, 0], 0)))
    if misplaced:
        # Lead with a misplaced token whose key is somewhere: two tokens written to one wrong slot leave only the
        # later one's key there (sequences whose table is ignored collide at the same page and offset).
        t, s, pos, page, block, slot, landed = next((m for m in misplaced if m[-1]), misplaced[0])
        where = (", ".join(f"block {b} slot {o}" for b, o in landed[:3]) if landed else "nowhere in k_cache")
        place = ("the last slot" if slot == block_size - 1 else "the first slot" if slot == 0 else f"slot {slot}")
        head = (f"token {t} (sequence {s}, position {pos}: {place} of page {page}) belongs in slot {slot} of block "
                f"{block} = block_tables[{s}, {page}], but its key was found in {where}")
        at_boundary = all(p % block_size in (0, block_size - 1) for _, _, p, *_ in misplaced)
        some_right = len(misplaced) < len(seqs)
        row_of = {int(b): i for i, b in enumerate(tables[s])}
        if block_size > 1 and at_boundary and some_right:
            found.append(("slot_at_block_boundary", (
                f"wrong slot at a block boundary: {head}. Only tokens in the first or last slot of a page are "
                f"misplaced ({len(misplaced)} of {len(seqs)}): is the page position // block_size and the offset "
                "position % block_size?")))
        elif landed and all(all(b == m[3] for b, _ in m[-1]) for m in misplaced) and block != page:
            found.append(("slot_table_ignored", (
                f"the block table was not used: {head}. Block {page} is the page number itself; the page of a "
                f"position is position // block_size, and block_tables[seq, page] names the physical block")))
        elif landed and all(b == block and o != slot for b, o in landed):
            found.append(("slot_offset", (
                f"wrong offset within the block: {head}. The offset of a position in its page is "
                "position % block_size")))
        else:
            hint = ""
            if landed and landed[0][0] in row_of and row_of[landed[0][0]] != page:
                hint = f" (block {landed[0][0]} is page {row_of[landed[0][0]]} of sequence {s})"
            found.append(("slot_wrong", (
                f"{head}{hint}: the slot of a token is slot position % block_size of block "
                "block_tables[seq, position // block_size]")))
    elif not np.array_equal(got_v, want_v, equal_nan=True) and np.array_equal(got_k, want_k, equal_nan=True):
        found.append(("cache_write_v_missed", (
            "k_cache is right but v_cache is not: is every value row copied too, from v_new into v_cache at the "
            "same slot as its key?")))
    targets = np.zeros(got_k.shape[:1] + got_k.shape[2:3], bool)
    for t in range(len(seqs)):
        targets[int(tables[int(seqs[t]), int(positions[t]) // block_size]), int(positions[t]) % block_size] = True
    for name, got, before in (("k_cache", got_k, before_k), ("v_cache", got_v, before_v)):
        changed = ~((got == before) | (np.isnan(got) & np.isnan(before)))
        extra = changed.any(axis=(1, 3)) & ~targets
        if extra.any():
            b, o = (int(i) for i in np.argwhere(extra)[0])
            many = int(extra.sum()) > 1
            found.append(("cache_write_extra", (
                f"{name}: {int(extra.sum())} slot{'s' if many else ''} that hold{'' if many else 's'} no new token "
                f"changed (the first: block {b} slot {o}). "
                "A write touches only the slots of the new tokens; the rest of the cache holds other sequences' "
                "keys and values")))
            break
    return found


# --------------------------------------------------------------------------- errors raised in a kernel

_BOUNDS = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")


def kernel_line(exc: BaseException) -> str:
    """The last line of the traceback that belongs to the kernel's own source (not numba's or the course's)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "numba" not in f.filename and "/course/" not in f.filename.replace("\\", "/")
              and "/kernels/launching" not in f.filename.replace("\\", "/")]
    return (frames[-1].line or "").strip() if frames else ""


def launch_error(exc: BaseException, sizes: dict) -> tuple[str, str] | None:
    """``(key, message)`` for an exception a kernel raised on the simulator, or None if it is not one of them.

    sizes: what the launch's arrays mean, any of ``kv_heads``, ``heads``, ``max_pages`` (columns of
    block_tables), ``block_size``, ``num_blocks``, ``keys`` and ``queries`` (axis 2 of k and of q, for
    attention over k and v of shape (B, heads, keys, d)), ``group_max`` (the query heads a block holds
    state for: a larger group must be split over blocks), and ``kv_line``: text that marks a kernel line
    reading K or V when their names hold no "cache" (days 5 and 7: ``("k[", "v[")``).
    """
    line = kernel_line(exc)
    at = f" (at `{line}`)" if line else ""
    if isinstance(exc, IndexError):
        text = str(exc)
        match = _BOUNDS.search(text)
        lead = (f"the kernel indexed past the end of an array{at}: {text.split(': ', 1)[-1]}. The simulator stops "
                "there; a GPU would read or write other memory without a word. ")
        if match:
            index, axis, size = (int(g) for g in match.groups())
            kv_heads, heads = sizes.get("kv_heads"), sizes.get("heads")
            kv_line = "cache" in line or not line or any(name in line for name in sizes.get("kv_line", ()))
            if axis == 1 and size == kv_heads and kv_line:
                group = heads // kv_heads if heads and kv_heads else None
                return "kv_head_out_of_range", lead + (
                    f"Axis 1 of K and V is the KV head, 0 ... {kv_heads - 1}: query head h reads KV head "
                    "h // (heads // kv_heads)" + (f" (here {group} query heads share each KV head)" if group else "")
                    + ": is the query head used as the KV head?")
            if axis == 1 and size == heads and sizes.get("kv_line") and ("q[" in line or "o[" in line or not line):
                group = heads // kv_heads if heads and kv_heads else None
                return "query_head_out_of_range", lead + (
                    f"Axis 1 of q and o is the query head, 0 ... {heads - 1}: the block of KV head kv_head serves "
                    "query heads kv_head * group ... kv_head * group + group - 1, with group = heads // kv_heads"
                    + (f" = {group} here" if group else "") + ": is the group a fixed number in the kernel?")
            if axis == 2 and size == sizes.get("keys") and kv_line:
                queries = sizes.get("queries")
                return "key_past_end", lead + (
                    f"Axis 2 of k and v is the key, 0 ... {size - 1}: the keys of a row end at kv_lens[b] (at "
                    "most k.shape[2]; causal: also at the row's own position)" + (
                        f". Here there are {queries} queries and only {size} keys: is the number of keys taken "
                        "from the queries (q.shape[2]) instead of from k and kv_lens?" if queries and queries > size
                        else ": does a loop run past the last key?"))
            group_max = sizes.get("group_max")
            if (group_max and size == group_max and index >= size and heads and kv_heads
                    and heads // kv_heads > group_max):
                group = heads // kv_heads
                return "group_past_block", lead + (
                    f"A block holds the state of at most GROUP_MAX = {group_max} query heads (axis {axis} of size "
                    f"{size}), and here group = heads // kv_heads = {group}: a group larger than GROUP_MAX is split "
                    "over subgroups = ceil(group / GROUP_MAX) blocks per KV head, as the grid has them, each serving "
                    "ceil(group / subgroups) of its heads. Is the group split into subgroups?")
            if axis == 1 and size == sizes.get("max_pages") and ("table" in line or not line):
                return "page_past_table", lead + (
                    f"Axis 1 of block_tables is the page ({size} per row): a context of n tokens uses pages "
                    "0 ... ceil(n / block_size) - 1; does a loop go past the last page of the context?")
            if axis == 2 and size == sizes.get("block_size"):
                return "slot_past_block", lead + (
                    f"Axis 2 of the cache is the slot within a block (block_size {size}): the offset of position t "
                    "is t % block_size")
        return "index_out_of_range", lead + "Check each index against the shape of the array it reads."
    if isinstance(exc, ZeroDivisionError):
        return "zero_division", (
            f"division by zero in the kernel{at}: a sequence with context_lens[s] = 0 (or a merge whose "
            "partitions all saw no key) has a sum of 0; write 0 instead of dividing. (On a GPU 0/0 gives NaN.)")
    if isinstance(exc, OverflowError):
        return "exp_overflow", (
            f"exp overflowed in the kernel{at}: subtract the running maximum from a score before exp, and rescale "
            "by exp(m_old - m_new) when the maximum grows. (On a GPU exp gives inf, then NaN.)")
    return None
