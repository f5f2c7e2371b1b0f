"""Day 7, grouped-query attention: the prefill (each K and V tile loaded once per block, for every head of
its group) and the decode step's partition kernel over a paged cache, its partials merged in NumPy."""

from __future__ import annotations

import math

import numpy as np

from course.checking import is_poison, poison, random_inputs

from ._common import (
    ATTENTION_DIMS, _counted, _launch_explained, _loads, _paged_label, _paged_sizes, _passed, _raise_problems,
    _with_findings,
)
from .day06 import check_paged, paged_inputs

__all__ = [
    "gqa_prefill_matches_reference", "gqa_prefill_handles_every_group", "gqa_prefill_traffic_fits",
    "gqa_decode_matches_reference", "gqa_decode_handles_every_group", "gqa_decode_traffic_fits",
    "gqa_prefill_case", "gqa_prefill_run", "check_gqa_prefill", "gqa_prefill_traffic_problems",
    "gqa_decode_run", "merge_partials", "check_gqa_decode", "gqa_decode_traffic_problems",
]


def gqa_prefill_case(rng, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *, causal: bool,
                     kv_lens=None, large_logits: bool = False) -> dict:
    """A prefill over K and V of ``kv_heads`` heads, as a dict: q (B, heads, N, d), k and v (B, kv_heads,
    M, d), kv_lens (B,) int32, causal and the kernel's scale (float32 1/sqrt(d)). large_logits: integer q
    and k in [-50, 50], q·k of about 1e4 and exact in float32."""
    if large_logits:
        q = rng.integers(-50, 51, (B, heads, N, d)).astype(np.float32)
        k = rng.integers(-50, 51, (B, kv_heads, M, d)).astype(np.float32)
    else:
        q = rng.standard_normal((B, heads, N, d), dtype=np.float32)
        k = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    v = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    lens = np.full(B, M, dtype=np.int32) if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    return dict(q=q, k=k, v=v, kv_lens=lens, causal=causal, scale=np.float32(1.0 / math.sqrt(d)))


def _gqa_label(case: dict) -> str:
    B, heads, N, d = case["q"].shape
    kv_heads, M = case["k"].shape[1], case["k"].shape[2]
    return (f"B={B} heads={heads} kv_heads={kv_heads} (group {heads // kv_heads}) N={N} M={M} d={d} "
            f"causal={case['causal']} kv_lens={case['kv_lens'].tolist()}")


def gqa_prefill_run(kernel, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *, causal: bool,
                    kv_lens=None, large_logits: bool = False, rng=None, counted: bool = False):
    """Launch a GQA prefill kernel with the course's grid (``prefill_grid``, ``prefill_block`` threads)
    on a fresh case: ``(o, case, seed, traffic)``."""
    from kernels.gqa_attention import prefill_block, prefill_grid

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = gqa_prefill_case(rng, B, heads, kv_heads, N, M, d, causal=causal, kv_lens=kv_lens,
                            large_logits=large_logits)
    o = poison(np.empty_like(case["q"]))
    args = (case["q"], case["k"], case["v"], case["kv_lens"], o, case["scale"], causal)
    launch = lambda: kernel[prefill_grid(B, heads, kv_heads, N), prefill_block(heads, kv_heads)](*args)  # noqa: E731
    sizes = dict(kv_heads=kv_heads, heads=heads, keys=M, queries=N, kv_line=("k[", "v["))
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), sizes)
    return o, case, seed, traffic


def check_gqa_prefill(o, case: dict, *, seed=None, label: str = "", kernel=None):
    """Compare a GQA prefill output with the float64 reference; on failure name the head map, the
    unwritten heads, or (on K and V repeated to the query heads) day 5's attention mistakes."""
    from course.diagnoses.gqa import head_findings, tile_findings
    from course.diagnoses.paged import close_to_model
    from kernels import reference
    from kernels.gqa_attention import TILE_KV, prefill_block, prefill_tiling

    q, k, v, lens, causal = case["q"], case["k"], case["v"], case["kv_lens"], case["causal"]
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    want = reference.attention(q, k, v, causal=causal, kv_lens=lens)
    got = np.asarray(o)

    def attend(kv_of):
        index = [kv_of(h) for h in range(heads)]
        return reference.attention(q, k[:, index], v[:, index], causal=causal, kv_lens=lens)

    rows = prefill_block(heads, kv_heads)
    # the head maps first; else, where a block has fewer rows than its K tile has elements, whether the
    # whole tile is loaded (a weak finding: check's models of day 5's mistakes go before it)
    findings = lambda: (head_findings(got.astype(np.float64), want, heads=heads, kv_heads=kv_heads,  # noqa: E731
                                      poisoned=is_poison(got), attend=attend, close=close_to_model, prefix="gqa")
                        or tile_findings(rows, TILE_KV, q.shape[3]))
    repeated = dict(q=q, k=np.repeat(k, group, axis=1), v=np.repeat(v, group, axis=1), causal=causal,
                    kv_lens=lens, tile_q=prefill_tiling(group)[2], tile_kv=TILE_KV)
    hint = ("with causal=True row i sees keys 0 ... i, its own position included" if causal
            else "every key below kv_lens[b] counts") + "; a row that sees no key gives 0"
    tile = TILE_KV * q.shape[3]
    if rows < tile:
        hint += (f". Here a block has {rows} rows (threads) and a K tile {TILE_KV} x {q.shape[3]} = {tile} elements: "
                 "does every thread load elements t, t + rows, ... of the tile, until all of it is loaded?")
    return _with_findings(findings, o, want, name=f"O for {label or _gqa_label(case)}", dims=ATTENTION_DIMS,
                          seed=seed, hints={"any": hint}, attention=repeated, kernel=kernel)


def gqa_prefill_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one GQA prefill launch breaks of its budget: o written once, q read
    once, and each K and V element a block needs read once per block (``course.models.gqa``), not once
    per query head of the group."""
    from course.models import gqa as model

    q, k = case["q"], case["k"]
    B, heads, N, d = q.shape
    kv_heads, M = k.shape[1], k.shape[2]
    group = heads // kv_heads
    if traffic.launches != 1:
        return [f"expected one launch of your kernel, saw {traffic.kernel_names}"]
    problems = []
    stored = {name: count for name, count in traffic.global_stores.items() if count}
    if stored != {"o": q.size}:
        problems.append(f"the kernel may write only o, each element once ({q.size} stores); stores counted: {stored}")
    if not q.size <= _loads(traffic, "q") <= 1.1 * q.size:
        problems.append(f"each query row must be read once ({q.size} loads of q); {_loads(traffic, 'q')} counted")
    budget = model.requested_prefill(B, heads, kv_heads, N, d, M, causal=case["causal"],
                                     kv_lens=case["kv_lens"].tolist())
    # what every (position, head) row reading its keys from global memory would add: each row, its keys
    per_row = heads * d * sum(min(int(n), i + 1) if case["causal"] else int(n)
                              for n in case["kv_lens"].tolist() for i in range(N))
    # what the blocks would load if the causal key end forgot N (the last, partial tile of positions
    # ending at tile_start + positions - 1 instead of at its last existing position, N - 1)
    subgroups, _, positions = model.prefill_tiling(group)
    past_n = kv_heads * subgroups * d * sum(
        min(int(n), M, start + positions) for n in case["kv_lens"].tolist() for start in range(0, N, positions))
    for name in ("k", "v"):
        want, counted = budget[name][0], _loads(traffic, name)
        if want <= counted <= 1.1 * want:
            continue
        if counted > want:
            ratio = f" That is about {counted / max(want, 1):.3g} times the budget"
            if case["causal"] and past_n > want and counted == past_n:
                why = (f"{ratio}, exactly what the blocks load if the causal key end forgets N: the last tile of "
                       f"positions is partial (N = {N} is not a multiple of its {positions} positions), so its last "
                       f"query position is N - 1 = {N - 1}, not tile_start + positions - 1, and with M = {M} > N it "
                       "loaded keys no query sees. The end is min(kv_lens[b], tile_start + positions, N)")
            elif counted >= want + 0.9 * per_row and per_row > 1.5 * group * want:
                why = (f"{ratio}, about once per (position, head) row of the block: every row read {name} from "
                       "global memory instead of from the block's shared tile. Load each tile once per block into "
                       "shared memory, then let every row of the block read it there")
            elif group > 1 and counted >= 0.9 * group * want:
                why = (f"{ratio}, the group size {group}: the tile was loaded once per query head of the group. Load "
                       "each K and V tile once per block into shared memory, then let every (position, head) row "
                       "of the block read it there")
            else:
                why = (f"{ratio}: is a key loaded past the keys the block needs (past kv_lens[b], or under the causal "
                       "mask past the block's last query position), or twice?")
        else:
            why = " Fewer: every key a block needs must be loaded (up to kv_lens[b], causal: up to its last position)."
        problems.append(f"{name} was loaded {counted} times for {_gqa_label(case)}; the budget is {want}: each "
                        "element of the keys a block needs, once per block (a block holds positions x the heads of "
                        f"a group).{why}")
    return problems


def gqa_prefill_matches_reference(kernel) -> None:
    """Two query heads per KV head, two KV heads, causal, two key tiles."""
    o, case, seed, _ = gqa_prefill_run(kernel, 1, 4, 2, 20, 20, 4, causal=True)
    check_gqa_prefill(o, case, seed=seed, kernel=kernel)
    _passed("4 query heads over 2 KV heads, N = 20, causal")


def gqa_prefill_handles_every_group(kernel) -> None:
    """MHA (group 1, where a block's 64 rows load a tile of 16 keys x 8 channels), MQA with kv_lens, a
    sequence with no key, and a group above ROWS_MAX (two sub-groups of 129 and 128 heads, one position
    per block)."""
    for args, options in (((1, 2, 2, 18, 18, 8), dict(causal=False)),
                          ((2, 3, 1, 12, 14, 4), dict(causal=True, kv_lens=[14, 5])),
                          ((2, 2, 1, 3, 4, 4), dict(causal=False, kv_lens=[4, 0])),
                          ((1, 257, 1, 2, 2, 1), dict(causal=True))):
        o, case, seed, _ = gqa_prefill_run(kernel, *args, **options)
        check_gqa_prefill(o, case, seed=seed, kernel=kernel)
    _passed("group 1 (MHA) with head_dim 8, group 3 = heads (MQA) with kv_lens [14, 5], causal; kv_lens [4, 0]; "
            "group 257 (two blocks per KV head)")


def gqa_prefill_traffic_fits(kernel) -> None:
    """Only o written; q read once; K and V read once per block, for all the heads of its group; causal,
    a block loads the keys up to its last query position only (N = 100 over 128 keys: the first block
    needs 64 keys, the second, partial one 100)."""
    for args, causal in (((1, 4, 1, 10, 12, 4), False), ((1, 2, 1, 100, 128, 2), True)):
        o, case, seed, traffic = gqa_prefill_run(kernel, *args, causal=causal, counted=True)
        if traffic is not None:
            _raise_problems(gqa_prefill_traffic_problems(traffic, case))
        check_gqa_prefill(o, case, seed=seed, kernel=kernel)
    _passed("o written once, q read once, K and V once per block for its 4 heads; causal, each block's keys up "
            "to its last position")


def merge_partials(partial_max, partial_sum, partial_acc) -> np.ndarray:
    """Day 6's merge in NumPy (float64): ``out[s, h] = Σ_p e^(m_p - m) a_p / Σ_p e^(m_p - m) ℓ_p``, 0 where
    no partition saw a key. A NaN partial (one never written holds the poison) makes its row NaN."""
    maxima = np.asarray(partial_max, np.float64)
    sums = np.asarray(partial_sum, np.float64)
    accs = np.asarray(partial_acc, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = maxima.max(axis=2, keepdims=True)
        weight = np.where(np.isneginf(maxima), 0.0, np.exp(maxima - np.where(np.isfinite(m), m, 0.0)))
        weight = np.where(np.isnan(maxima), np.nan, weight)
        total = (weight * sums).sum(axis=2)
        out = (weight[..., None] * accs).sum(axis=2)
        return np.where(total[..., None] > 0, out / np.where(total > 0, total, 1.0)[..., None],
                        np.where(np.isnan(total)[..., None], np.nan, 0.0))


def gqa_decode_run(kernel, context_lens, *, heads: int, kv_heads: int, head_dim: int = 8, block_size: int = 4,
                   partition_size: int = 8, large_logits: bool = False, rng=None, counted: bool = False):
    """Your partition kernel with the course's grid (``decode_grid``, THREADS threads) on a fresh paged case,
    its partials poisoned first, then merged in NumPy (:func:`merge_partials`, day 6's algebra):
    ``(out, case, seed, traffic, partials)``; out is float32, traffic that of your kernel alone."""
    from kernels.gqa_attention import GROUP_MAX, THREADS, decode_grid
    from kernels.paged_attention import partitions_for

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    num_seqs = len(case["context_lens"])
    partitions = partitions_for(int(case["context_lens"].max(initial=0)), partition_size)
    partials = tuple(poison(np.empty(shape, np.float32)) for shape in
                     ((num_seqs, heads, partitions), (num_seqs, heads, partitions),
                      (num_seqs, heads, partitions, head_dim)))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens", "scale")]
    launch = lambda: kernel[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](  # noqa: E731
        *args, partition_size, *partials)
    sizes = dict(_paged_sizes(case), group_max=GROUP_MAX)
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), sizes)
    case["partition_size"] = partition_size
    return merge_partials(*partials).astype(np.float32), case, seed, traffic, partials


def check_gqa_decode(out, case: dict, partials, *, seed=None, label: str = "", kernel=None):
    """Compare the merged decode output with the float64 reference; on failure name the heads whose
    partials were never written, the head map, or day 6's paged mistakes."""
    from course.diagnoses.gqa import head_findings

    heads, kv_heads = case["q"].shape[1], case["k_cache"].shape[1]
    # A head whose partials were never written: they still hold the poison.
    unwritten = np.broadcast_to(is_poison(partials[2]).all(axis=(2, 3))[..., None], case["q"].shape)
    found = head_findings(np.asarray(out).astype(np.float64), None, heads=heads, kv_heads=kv_heads,
                          poisoned=unwritten, attend=lambda kv_of: None, close=None, prefix="gqa")
    if found:
        raise AssertionError(f"out for {label or _paged_label(case)}: {found[0][1]}")
    # The head maps and day 6's mistakes: course.diagnoses.paged, through check_paged.
    return check_paged(out, case, seed=seed, label=label, kernel=kernel)


def gqa_decode_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one launch of your partition kernel breaks of its budget: only the partials
    written, each once; each K and V element of a context read once per block of its group (once per KV head
    while the group fits a block), not once per query head."""
    from kernels.gqa_attention import subgroups_for

    num_seqs, heads, d = case["q"].shape
    kv_heads = case["k_cache"].shape[1]
    group = heads // kv_heads
    lens = case["context_lens"].tolist()
    if traffic.launches != 1:
        return [f"expected one launch of your kernel, saw {traffic.kernel_names}"]
    launch = traffic.per_launch[0]
    partitions = max(1, -(-max(lens, default=0) // case["partition_size"]))
    problems = []
    stored = {name: count for name, count in launch.global_stores.items() if count}
    want_stored = {"partial_max": num_seqs * heads * partitions, "partial_sum": num_seqs * heads * partitions,
                   "partial_acc": num_seqs * heads * partitions * d}
    if stored != want_stored:
        problems.append(f"the partition kernel may write only the partials, each element once ({want_stored}); "
                        f"stores counted: {stored}")
    readers = kv_heads * subgroups_for(group)
    want = readers * sum(lens) * d
    for name in ("k_cache", "v_cache"):
        counted = launch.global_loads.get(name, 0)
        if counted == want:
            continue
        if counted > want and group > 1 and counted >= 0.9 * group * want / subgroups_for(group):
            why = (f"about {counted / max(want, 1):.3g} times the budget: each token's K and V row was loaded once per "
                   "query head of the group. Load a token's rows once per warp and score them for every head of "
                   "the block")
        elif counted > want:
            why = "more: is a slot past a context's end, or a token twice, read? (warp w takes every WARPS-th token)"
        else:
            why = "fewer: is a key of the context skipped?"
        problems.append(f"{name} was loaded {counted} times for {_paged_label(case)}; the budget is each element of a "
                        f"context once per block of its group: {readers} block(s) per token x Σ context_lens "
                        f"{sum(lens)} x head_dim {d} = {want}; {why}")
    return problems


def gqa_decode_matches_reference(kernel) -> None:
    """Two KV heads with 2 query heads each, a shuffled table, a partial last page, two partitions; then
    pages of 3 slots (not a power of two) and a group of 4 with head_dim 40: 160 (head, channel) pairs,
    more than the block's THREADS."""
    for lens, heads, kv_heads, d, block_size, partition_size in (([11], 4, 2, 8, 4, 8), ([7], 4, 1, 40, 3, 4)):
        out, case, seed, _, partials = gqa_decode_run(kernel, lens, heads=heads, kv_heads=kv_heads, head_dim=d,
                                                      block_size=block_size, partition_size=partition_size)
        check_gqa_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("context_lens = [11] in partitions of 8, 4 query heads over 2 KV heads; [7] in pages of 3, "
            "head_dim 40 for 4 query heads")


def gqa_decode_handles_every_group(kernel) -> None:
    """MHA (group 1) with an empty context, and MQA with a group of GROUP_MAX + 1 (two blocks per KV head)."""
    from kernels.gqa_attention import GROUP_MAX

    for lens, heads, kv_heads in (([0, 5], 2, 2), ([6], GROUP_MAX + 1, 1)):
        out, case, seed, _, partials = gqa_decode_run(kernel, lens, heads=heads, kv_heads=kv_heads, head_dim=4,
                                                      block_size=4, partition_size=8)
        check_gqa_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed(f"group 1 with context_lens [0, 5]; group {GROUP_MAX + 1} (two blocks per KV head)")


def gqa_decode_traffic_fits(kernel) -> None:
    """Only the partials written; each K and V element read once per KV head, for its whole group."""
    out, case, seed, traffic, partials = gqa_decode_run(kernel, [5, 3], heads=4, kv_heads=1, head_dim=4,
                                                        block_size=4, partition_size=8, counted=True)
    if traffic is not None:
        _raise_problems(gqa_decode_traffic_problems(traffic, case))
    check_gqa_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("the partials written once; each page read once for the 4 query heads of its KV head")
