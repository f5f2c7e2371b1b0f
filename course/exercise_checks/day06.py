"""Day 6, paged attention: the cache write, the decode step (v1, and v2's merge) over a paged cache.

The checks add the paged diagnoses (``course.diagnoses.paged``) in front of ``check``'s own, and turn an
exception raised inside a kernel on the simulator into a :class:`~course.exercise_checks.KernelFailed`
that names the likely bug. Their runners (``cache_write_run``, ``paged_v1_run``, ``paged_v2_run`` for the
course's partition kernel and the student's merge, ``merge_run`` for the merge alone on partials computed in
NumPy) and budgets (``*_traffic_problems``) are what the hidden tests call too, on more cases. The
allocator of exercise 4 is checked by ``day06_allocator``.
"""

from __future__ import annotations

import math

import numpy as np

from course.checking import is_poison, poison, random_inputs

from ._common import (
    PAGED_DIMS, _counted, _launch_explained, _loads, _paged_label, _paged_sizes, _passed, _raise_problems,
    _with_findings,
)

__all__ = [
    "cache_write_matches_reference", "cache_write_traffic_fits",
    "paged_v1_matches_reference", "paged_v1_handles_mixed_lengths", "paged_v1_is_numerically_stable",
    "paged_v1_traffic_fits", "merge_matches_reference", "merge_handles_empty_partitions", "merge_traffic_fits",
    "paged_inputs", "check_paged", "paged_v1_run", "paged_v2_run", "merge_run", "paged_v1_traffic_problems",
    "merge_traffic_problems", "cache_write_case", "cache_write_expected", "cache_write_run", "check_cache_write",
    "cache_write_traffic_problems",
]

CACHE_DIMS = ("block", "kv_head", "slot", "channel")


def paged_inputs(rng, context_lens, *, heads: int, kv_heads: int, head_dim: int, block_size: int,
                 large_logits: bool = False, spare_blocks: int = 2) -> dict:
    """A decode step over a shuffled paged cache (``kernels.reference.build_paged_cache``), as a
    dict: q, k_cache, v_cache, block_tables, context_lens and the kernel's scale (float32
    1/sqrt(head_dim)).

    Every slot that holds no key is NaN: the tail of each partial last page and ``spare_blocks``
    blocks that belong to no sequence, at the end of the pool (the last one is what a -1 entry
    reads on the simulator). Each row of block_tables is padded with -1 past its pages, with at
    least one column of padding. large_logits: integer q and k in [-50, 50], so q·k reaches about
    1e4 and is exact in float32 (use a head_dim of 16 or 64, whose scale 1/4 or 1/8 keeps the scores
    exact too: a rounded score of size 1e3 would carry an error the softmax magnifies).
    """
    from kernels import reference

    lens = np.array([int(n) for n in context_lens], dtype=np.int32)
    shape = (len(lens), kv_heads, int(lens.max(initial=0)), head_dim)
    if large_logits:
        k = rng.integers(-50, 51, shape).astype(np.float32)
    else:
        k = rng.standard_normal(shape, dtype=np.float32)
    v = rng.standard_normal(shape, dtype=np.float32)
    k_cache, v_cache, tables, lens = reference.build_paged_cache(
        k, v, block_size, rng, lens, spare_blocks=max(1, spare_blocks), padding_pages=1)
    if large_logits:
        q = rng.integers(-50, 51, (len(lens), heads, head_dim)).astype(np.float32)
    else:
        q = rng.standard_normal((len(lens), heads, head_dim), dtype=np.float32)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=tables,
                context_lens=lens, scale=np.float32(1.0 / math.sqrt(head_dim)))


def check_paged(out, case: dict, *, seed=None, label: str = "", kernel=None, partition_size: int | None = None):
    """Compare a decode output (num_seqs, heads, head_dim) with the float64 reference; on failure name
    the paged mistake it shows (``course.diagnoses.paged``). Returns the CheckResult."""
    from course.diagnoses.paged import decode_findings
    from kernels import reference

    keys = ("q", "k_cache", "v_cache", "block_tables", "context_lens")
    want = reference.paged_attention(*(case[k] for k in keys), scale=float(case["scale"]))
    got = np.asarray(out)
    findings = lambda: decode_findings(got.astype(np.float64), want, case, partition_size=partition_size,  # noqa: E731
                                       poisoned=is_poison(got))
    result = _with_findings(findings, out, want, name=f"out for {label or _paged_label(case)}", dims=PAGED_DIMS,
                            seed=seed, kernel=kernel)
    empty = np.flatnonzero(case["context_lens"] == 0)
    if empty.size and not (got[empty] == 0).all():
        raise AssertionError(f"sequence {int(empty[0])} has context_lens = 0, no key: out[{int(empty[0])}] must be "
                             "exactly 0 for every head (write zeros when the sum is 0)")
    return result


def paged_v1_run(kernel, context_lens, *, heads: int = 2, kv_heads: int = 1, head_dim: int = 8,
                 block_size: int = 4, large_logits: bool = False, rng=None, counted: bool = False):
    """Launch a v1 kernel with the course's grid, (heads, num_seqs) blocks of THREADS threads, on a fresh
    case: ``(out, case, seed, traffic)`` (traffic None unless counted on the simulator)."""
    from kernels.paged_attention import THREADS

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    out = poison(np.empty(case["q"].shape, np.float32))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens", "scale")]
    launch = lambda: kernel[(heads, len(case["context_lens"])), THREADS](*args, out)  # noqa: E731
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    return out, case, seed, traffic


def paged_v2_run(merge_kernel, context_lens, *, partition_size: int, heads: int = 2, kv_heads: int = 1,
                 head_dim: int = 8, block_size: int = 4, large_logits: bool = False, rng=None, counted: bool = False):
    """v2 (the course's partition kernel, then ``merge_kernel``) on a fresh case: ``(out, case, seed, traffic)``."""
    from kernels.paged_attention import paged_attention_v2_split_k

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    out = poison(np.empty(case["q"].shape, np.float32))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens")]
    launch = lambda: paged_attention_v2_split_k(*args, scale=case["scale"], out=out,  # noqa: E731
                                                partition_size=partition_size, merge_kernel=merge_kernel)
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    return out, case, seed, traffic


def merge_run(merge_kernel, context_lens, *, partition_size: int, heads: int = 1, kv_heads: int = 1,
              head_dim: int = 8, block_size: int = 4, large_logits: bool = False, rng=None, counted: bool = False):
    """The merge alone, launched with v2's grid on the partials of a fresh case computed in NumPy (what the
    course's partition kernel writes, rounded to float32): ``(out, case, seed, traffic)``. The partials
    are inputs: the merge may not write them."""
    from course.diagnoses.paged import partial_arrays
    from kernels.paged_attention import HEAD_DIM_MAX

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                        block_size=block_size, large_logits=large_logits)
    partials = [a.astype(np.float32) for a in partial_arrays(case, partition_size)]
    out = poison(np.empty(case["q"].shape, np.float32))
    launch = lambda: merge_kernel[(heads, len(case["context_lens"])), HEAD_DIM_MAX](*partials, out)  # noqa: E731
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    return out, case, seed, traffic


def paged_v1_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one v1 launch breaks of its budget (an empty list: nothing)."""
    num_seqs, heads, d = case["q"].shape
    tokens = int(case["context_lens"].sum())
    problems = []
    if traffic.kernel_names != ["paged_attention_v1_block_per_head_kernel"]:
        return [f"expected one launch of paged_attention_v1_block_per_head_kernel, saw {traffic.kernel_names}"]
    stored = {name: count for name, count in traffic.global_stores.items() if count}
    if stored != {"out": num_seqs * heads * d}:
        problems.append(f"the kernel may write only out, each element once ({num_seqs * heads * d} stores); "
                        f"stores counted: {stored}")
    want = heads * tokens * d
    lane_channels = heads * tokens * min(d, 32)     # one channel per lane: the first 32 of each row only
    for name in ("k_cache", "v_cache"):
        counted = _loads(traffic, name)
        if counted != want:
            if counted > want and want and counted % want == 0:
                why = (f"more: {counted // want} times the budget, every element read {counted // want} times: do "
                       "several warps walk the same tokens? Warp w takes tokens w, w + WARPS, w + 2 WARPS, ..., so "
                       "that each token is read by one warp")
            elif counted > want:
                why = ("more: is a slot past a context's end, or a token twice, read? (each warp takes every "
                       "WARPS-th token)")
            elif d > 32 and counted == lane_channels:
                why = (f"fewer: only 32 of the {d} channels of each row were read, one per lane. With head_dim above "
                       "32 a lane holds channels lane, lane + 32, ... (CHANNELS of them): does every loop over a "
                       "lane's channels cover all of them, and the scores use every channel?")
            else:
                why = "fewer: is a key of the context skipped, or are the scores computed from something else?"
            problems.append(f"{name} was loaded {counted} times for {_paged_label(case)}; the budget is each "
                            f"element of a context once per query head: heads · Σ context_lens · head_dim = "
                            f"{heads} · {tokens} · {d} = {want}; {why}")
    return problems


def merge_traffic_problems(traffic, case: dict, partition_size: int) -> list[str]:
    """What the counted traffic of the merge launch (the last one: v2's second, or ``merge_run``'s) breaks
    of its budget."""
    from kernels.launching import cdiv
    from kernels.paged_attention import HEAD_DIM_MAX

    num_seqs, heads, d = case["q"].shape
    lens = case["context_lens"].tolist()
    partitions = max(1, cdiv(max(lens, default=0), partition_size))
    names = traffic.kernel_names
    if names not in (["paged_attention_v2_merge_kernel"],
                     ["paged_attention_v2_partition_kernel", "paged_attention_v2_merge_kernel"]):
        return [f"expected one launch of paged_attention_v2_merge_kernel (after the partition kernel); saw {names}"]
    merge = traffic.per_launch[-1]
    problems = []
    stored = {name: count for name, count in merge.global_stores.items() if count}
    if stored != {"out": num_seqs * heads * d}:
        written = [name for name in ("partial_max", "partial_sum", "partial_acc") if name in stored]
        problems.append(f"the merge may write only out, each element once ({num_seqs * heads * d} stores); stores "
                        f"counted: {stored} (the partials are its inputs)" + (
                            f": {' and '.join(written)} {'was' if len(written) == 1 else 'were'} written. Rescale "
                            "each partial as you read it into a value of your own (a register), not the partial in "
                            "place" if written else ""))
    used = heads * d * sum(cdiv(n, partition_size) for n in lens)   # accumulators of partitions that saw a key
    every = num_seqs * heads * partitions * d
    acc = merge.global_loads.get("partial_acc", 0)
    if not used <= acc <= every:
        problems.append(f"partial_acc was loaded {acc} times; every accumulator of a partition that saw a key must "
                        f"be read ({used}), and none more than once ({every} in all): a thread reads its own "
                        "channel of each partition once")
    bound = 2 * HEAD_DIM_MAX * num_seqs * heads * partitions
    for name in ("partial_max", "partial_sum"):
        counted = merge.global_loads.get(name, 0)
        if counted > bound:
            problems.append(f"{name} was loaded {counted} times, more than twice per thread and partition ({bound}): "
                            "read each partition's maximum and sum at most twice")
    return problems




def paged_v1_matches_reference(kernel) -> None:
    """A shuffled block table, a partial last page, two query heads per KV head; then pages of 3 slots (a
    block size that is not a power of two)."""
    for context_lens, heads, kv_heads, block_size in (([13], 4, 2, 4), ([7], 1, 1, 3)):
        out, case, seed, _ = paged_v1_run(kernel, context_lens, heads=heads, kv_heads=kv_heads, head_dim=8,
                                          block_size=block_size)
        check_paged(out, case, seed=seed, kernel=kernel)
    _passed("context_lens = [13], block_size 4, 4 query heads over 2 KV heads; [7] in pages of 3")


def paged_v1_handles_mixed_lengths(kernel) -> None:
    """Sequences of 0, a whole page and a page and a bit in one launch; out is 0 for the empty one."""
    context_lens = [0, 4, 6]
    out, case, seed, _ = paged_v1_run(kernel, context_lens, heads=1, kv_heads=1, head_dim=4, block_size=4)
    check_paged(out, case, seed=seed, kernel=kernel)
    _passed(f"context_lens = {context_lens} in one launch")


def paged_v1_is_numerically_stable(kernel) -> None:
    """Logits of about 1e4 before scaling give finite, exact results."""
    out, case, seed, _ = paged_v1_run(kernel, [9, 17], heads=1, kv_heads=1, head_dim=16, block_size=4,
                                      large_logits=True)
    check_paged(out, case, seed=seed, label="logits of size 1e4", kernel=kernel)
    _passed("logits of size 1e4")


def paged_v1_traffic_fits(kernel) -> None:
    """Only out written; each K and V element of a context read once per query head, also with head_dim 40
    (more channels than a warp's lanes)."""
    for context_lens, head_dim in (([3, 8], 4), ([5], 40)):
        out, case, seed, traffic = paged_v1_run(kernel, context_lens, heads=1, kv_heads=1, head_dim=head_dim,
                                                block_size=4, counted=True)
        if traffic is None:
            break
        _raise_problems(paged_v1_traffic_problems(traffic, case))
    _passed("out written once; K and V of each context read once per query head")


def merge_matches_reference(kernel) -> None:
    """v2 with 5-token partitions (2 per sequence) merged by your kernel, logits of about 1e4."""
    out, case, seed, _ = paged_v2_run(kernel, [6, 9], partition_size=5, heads=1, kv_heads=1, head_dim=16,
                                      block_size=4, large_logits=True)
    check_paged(out, case, seed=seed, kernel=kernel, partition_size=5,
                label="context_lens=[6, 9], partition_size=5, logits of size 1e4")
    _passed("context_lens = [6, 9] in partitions of 5, logits of size 1e4")


def merge_handles_empty_partitions(kernel) -> None:
    """Partitions that saw no key: an empty context next to a short and a long one (the merge alone)."""
    context_lens = [0, 2, 29]
    out, case, seed, _ = merge_run(kernel, context_lens, partition_size=5, heads=1, kv_heads=1, head_dim=4,
                                   block_size=4)
    check_paged(out, case, seed=seed, kernel=kernel, partition_size=5)
    _passed(f"context_lens = {context_lens} in partitions of 5")


def merge_traffic_fits(kernel) -> None:
    """The merge writes only out and reads each partial a bounded number of times (the merge alone)."""
    out, case, seed, traffic = merge_run(kernel, [2, 9], partition_size=5, heads=2, kv_heads=1, head_dim=4,
                                         block_size=4, counted=True)
    if traffic is not None:
        _raise_problems(merge_traffic_problems(traffic, case, 5))
    _passed("the merge writes out only and reads each partial a bounded number of times")


def cache_write_case(rng, spans, *, kv_heads: int, head_dim: int, block_size: int, shuffle_tokens: bool = False,
                     spare_blocks: int = 2) -> dict:
    """A step that writes new tokens into a cache of random content, as a dict.

    spans: ``(start, count)`` per sequence: its new tokens take positions start ... start + count - 1
    (a prefill starts at 0 with many, a decode step adds 1 after the context). Each sequence owns
    the pages up to its last new position, shuffled in the pool; rows of block_tables are padded with
    -1. shuffle_tokens: the tokens come in random order instead of sequence by sequence.
    Keys: k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache (the cache before).
    """
    from kernels.launching import cdiv

    pages = [cdiv(start + count, block_size) for start, count in spans]
    num_blocks = sum(pages) + spare_blocks
    order = rng.permutation(num_blocks)
    tables = np.full((len(spans), max(pages, default=0) + 1), -1, np.int32)
    handed_out = 0
    for s, n in enumerate(pages):
        tables[s, :n] = order[handed_out:handed_out + n]
        handed_out += n
    seqs = np.array([s for s, (_, count) in enumerate(spans) for _ in range(count)], dtype=np.int32)
    positions = np.array([start + i for start, count in spans for i in range(count)], dtype=np.int32)
    if shuffle_tokens:
        perm = rng.permutation(len(seqs))
        seqs, positions = seqs[perm], positions[perm]
    shape = (num_blocks, kv_heads, block_size, head_dim)
    return dict(k_new=rng.standard_normal((len(seqs), kv_heads, head_dim), dtype=np.float32),
                v_new=rng.standard_normal((len(seqs), kv_heads, head_dim), dtype=np.float32),
                token_seqs=seqs, token_positions=positions, block_tables=tables,
                k_cache=rng.standard_normal(shape, dtype=np.float32),
                v_cache=rng.standard_normal(shape, dtype=np.float32))


def cache_write_expected(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """The caches after the write, in NumPy: each token's rows at its slot, every other slot as it was."""
    k, v = case["k_cache"].copy(), case["v_cache"].copy()
    block_size = k.shape[2]
    for t, (s, pos) in enumerate(zip(case["token_seqs"].tolist(), case["token_positions"].tolist())):
        block = case["block_tables"][s, pos // block_size]
        k[block, :, pos % block_size] = case["k_new"][t]
        v[block, :, pos % block_size] = case["v_new"][t]
    return k, v


def cache_write_run(kernel, spans, *, kv_heads: int = 2, head_dim: int = 4, block_size: int = 4,
                    shuffle_tokens: bool = False, rng=None, counted: bool = False):
    """Launch a cache-write kernel with the course's grid (one block per token) on a fresh case:
    ``(k_cache, v_cache, case, seed, traffic)``; ``case`` keeps the caches as they were before."""
    from kernels.kv_cache import THREADS
    from kernels.launching import cdiv, note_output

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = cache_write_case(rng, spans, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size,
                            shuffle_tokens=shuffle_tokens)
    k_cache, v_cache = note_output(case["k_cache"].copy()), note_output(case["v_cache"].copy())
    args = [case[k] for k in ("k_new", "v_new", "token_seqs", "token_positions", "block_tables")]
    threads = min(THREADS, 32 * cdiv(kv_heads * head_dim, 32))
    launch = lambda: kernel[len(case["token_seqs"]), threads](*args, k_cache, v_cache)  # noqa: E731
    sizes = dict(kv_heads=kv_heads, block_size=block_size, max_pages=case["block_tables"].shape[1],
                 num_blocks=k_cache.shape[0])
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), sizes)
    return k_cache, v_cache, case, seed, traffic


def check_cache_write(k_cache, v_cache, case: dict, *, seed=None, label: str = ""):
    """Both caches equal the expected ones, bit for bit; on failure name the token and the slot.
    Returns the CheckResult of v_cache (both passed)."""
    from course.diagnoses.paged import cache_write_findings

    want_k, want_v = cache_write_expected(case)
    label = label or (f"{len(case['token_seqs'])} tokens, block_size {k_cache.shape[2]}, "
                      f"kv_heads {k_cache.shape[1]}, head_dim {k_cache.shape[3]}")
    findings = lambda: cache_write_findings(k_cache, v_cache, want_k, want_v, case["k_cache"],  # noqa: E731
                                            case["v_cache"], case)
    for name, got, want in (("k_cache", k_cache, want_k), ("v_cache", v_cache, want_v)):
        result = _with_findings(findings, got, want, name=f"{name} after writing {label}", dims=CACHE_DIMS,
                                tile={"slot": k_cache.shape[2]}, seed=seed)
        if not np.array_equal(got, want):
            raise AssertionError(f"{name} after writing {label}: close to the expected values but not equal; a "
                                 "copy must move each value unchanged")
    return result


def cache_write_traffic_problems(traffic, case: dict) -> list[str]:
    """What the counted traffic of one cache-write launch breaks of its budget."""
    if traffic.kernel_names != ["kv_cache_write_kernel"]:
        return [f"expected one launch of kv_cache_write_kernel, saw {traffic.kernel_names}"]
    from kernels.kv_cache import THREADS
    from kernels.launching import cdiv

    rows = case["k_new"].size
    tokens, per_token = case["k_new"].shape[0], case["k_new"][0].size     # a token's kv_heads x head_dim floats
    threads = min(THREADS, 32 * cdiv(per_token, 32))                       # the block cache_write_run launches
    problems = []
    stored = {name: count for name, count in traffic.global_stores.items() if count}
    if stored != {"k_cache": rows, "v_cache": rows}:
        one_pass = per_token > threads and stored.get("k_cache") == tokens * threads
        problems.append(f"a write stores each new key and value once ({rows} stores into each cache) and nothing "
                        f"else; stores counted: {stored}" + (
                            f". Each token stored only {threads} of its kv_heads x head_dim = {per_token} floats, one "
                            f"per thread of the block: one pass of the {threads} threads does not cover a token of "
                            "more floats than threads; loop i = t, t + blockDim.x, ... while i < kv_heads * head_dim"
                            if one_pass else ""))
    for name in ("k_new", "v_new"):
        if _loads(traffic, name) != rows:
            problems.append(f"{name} was loaded {_loads(traffic, name)} times; it has {rows} elements: read each once")
    for name in ("k_cache", "v_cache"):
        if _loads(traffic, name):
            problems.append(f"{name} was loaded {_loads(traffic, name)} times: a write does not need to read the cache")
    return problems


def cache_write_matches_reference(kernel) -> None:
    """A prefill that crosses two block boundaries, a decode step into a partial page and one into a new page;
    then the same in pages of 3 slots (a block size that is not a power of two)."""
    for spans, block_size in (([(0, 9), (6, 1), (8, 1)], 4), ([(0, 5), (2, 1)], 3)):
        k_cache, v_cache, case, seed, _ = cache_write_run(kernel, spans, kv_heads=2, head_dim=4,
                                                          block_size=block_size)
        check_cache_write(k_cache, v_cache, case, seed=seed)
    _passed("new tokens at positions (start, count) = [(0, 9), (6, 1), (8, 1)] per sequence, block_size 4; "
            "[(0, 5), (2, 1)], block_size 3")


def cache_write_traffic_fits(kernel) -> None:
    """Each new key and value read once and stored once; the cache is not read. Also a token of 2 x 80 floats,
    more than the block's 128 threads."""
    for spans, head_dim in (([(0, 5), (3, 1)], 4), ([(1, 1)], 80)):
        k_cache, v_cache, case, seed, traffic = cache_write_run(kernel, spans, kv_heads=2, head_dim=head_dim,
                                                                block_size=4, counted=True)
        if traffic is None:
            break
        _raise_problems(cache_write_traffic_problems(traffic, case))
    _passed("each new key and value read once and stored once")
