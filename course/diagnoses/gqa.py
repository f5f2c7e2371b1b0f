"""Diagnoses of day 7: which KV head each query head read, named from a wrong output.

Grouped-query attention adds one classic mistake to those of days 5 and 6: the map from a query
head ``h`` to its KV head, ``h // group`` with ``group = heads // kv_heads`` (``docs/design-notes.md`` §2). A
kernel that takes ``h % kv_heads``, or a group size fixed in the code (``h // 2``, right only when
``group`` is 2), reads the wrong K and V for some heads; so does a block that folds the group into
its rows with the wrong stride. These functions take the attention the heads would get under each
such map (``attend(kv_of)``, computed by the caller: prefill and decode read K and V differently)
and name the map the output matches.

- :func:`mapping_candidates`: the wrong maps that stay inside ``0 ... kv_heads - 1`` (a map past the
  last KV head makes the simulator stop with an IndexError, explained by ``paged.launch_error``).
- :func:`head_findings`: whole query heads never written, then the wrong map the output matches.
- :func:`tile_findings`: a prefill block with fewer rows (threads) than its K tile has elements, whose
  output no model explains: is the whole tile loaded?

A model is named only when the output matches it within rounding and the right result does not.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["mapping_candidates", "head_findings", "tile_findings", "KEYS"]

KEYS = ("gqa_heads_unwritten", "gqa_kv_head_interleaved", "gqa_kv_head_wrong_group", "gqa_tile_partly_loaded")


def _kv_of_group(size: int) -> Callable[[int, int, int], int]:
    return lambda h, kv_heads, group: h // size


def mapping_candidates(heads: int, kv_heads: int) -> list[tuple[str, Callable[[int, int, int], int], str]]:
    """``[(name, kv_of(h, kv_heads, group), what the kernel did)]``: the wrong head maps worth testing."""
    group = heads // kv_heads
    found = []
    if group > 1 and kv_heads > 1:
        found.append(("interleaved", lambda h, kv, g: h % kv,
                      f"query head h read KV head h % kv_heads instead of h // (heads // kv_heads): the "
                      f"{group} query heads that share a KV head are neighbours (heads 0 ... {group - 1} read "
                      "KV head 0), not one in every kv_heads"))
    right = [h // group for h in range(heads)]
    for size in range(1, heads + 1):
        if (heads - 1) // size < kv_heads and [h // size for h in range(heads)] != right:
            found.append(("wrong_group", _kv_of_group(size),
                          f"query head h read KV head h // {size}, but here heads // kv_heads = {heads} // "
                          f"{kv_heads} = {group} query heads share each KV head: compute the group from the "
                          "shapes, group = q.shape[1] // k.shape[1], never a fixed number"))
    return found


def head_findings(got: np.ndarray, want: np.ndarray, *, heads: int, kv_heads: int, poisoned: np.ndarray,
                  attend: Callable, close: Callable, prefix: str) -> list[tuple[str, str]]:
    """``[(key, message)]`` for an attention output with the head on axis ``1`` (prefill (B, H, N, d),
    decode (S, H, d)).

    poisoned: the elements never written. attend(kv_of): the output every head would get if query
    head h read KV head ``kv_of(h, kv_heads, group)``, or None where that cannot be computed.
    close(got, model): the fit test. prefix: the key prefix of the day's findings ("gqa" or "paged").
    """
    group = heads // kv_heads
    unwritten = [h for h in range(heads) if poisoned[:, h].all() and got[:, h].size]
    if unwritten and len(unwritten) < heads:
        shown = ", ".join(str(h) for h in unwritten[:8]) + (" ..." if len(unwritten) > 8 else "")
        return [(f"{prefix}_heads_unwritten", (
            f"query head{'s' if len(unwritten) > 1 else ''} {shown} of {heads} {'were' if len(unwritten) > 1 else 'was'} "
            f"never written, while others were: a block of KV head kv_head serves query heads kv_head * group ... "
            f"kv_head * group + group - 1, with group = heads // kv_heads = {group} here. Does the block compute its "
            "heads from the group of the shapes, and does every (position, head) row of the block map to a "
            "different query head?"))]
    for name, kv_of, message in mapping_candidates(heads, kv_heads):
        model = attend(lambda h: kv_of(h, kv_heads, group))
        if model is not None and not close(want, model) and close(got, model):
            return [(f"{prefix}_kv_head_{name}", message)]
    return []


def tile_findings(rows: int, tile_keys: int, head_dim: int) -> list[tuple[str, str]]:
    """``[(key, message)]`` for a wrong prefill output whose block has ``rows`` rows (threads) and a K tile of
    ``tile_keys`` x ``head_dim`` elements, when no model names the mistake: with fewer rows than elements, a
    tile loaded one element per row (or in one pass of the rows) is partly what shared memory held before.
    A question, not a model: the caller puts it after the models of the output (a weak finding)."""
    tile = tile_keys * head_dim
    if rows >= tile:
        return []
    return [("gqa_tile_partly_loaded", (
        f"a block has {rows} rows (threads) and a K tile {tile_keys} x {head_dim} = {tile} elements, more than one "
        "per row, and the output fits no model of another mistake: does every thread load elements t, t + rows, "
        f"... of the tile, until all of it is loaded? One element per row, or one pass of the rows, leaves "
        f"{tile - rows} elements of each tile holding whatever shared memory held before"))]
