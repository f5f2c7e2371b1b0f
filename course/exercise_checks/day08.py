"""Day 8, mixed precision: prefill and decode over fp16 and bf16 storage, judged by the precision rule
(``docs/design-notes.md`` §5), and the fp8 (e4m3) quantization of a cache, bit for bit."""

from __future__ import annotations

import math

import numpy as np

from course.checking import is_poison, poison, random_inputs

from ._common import (
    ATTENTION_DIMS, PAGED_DIMS, KernelFailed, _counted, _launch_explained, _paged_label, _paged_sizes, _passed,
    _raise_problems, _with_findings,
)
from .day06 import paged_inputs
from .day07 import gqa_decode_traffic_problems, merge_partials

__all__ = [
    "mixed_prefill_matches_reference", "mixed_prefill_long_rows", "mixed_prefill_large_logits",
    "mixed_decode_matches_reference", "mixed_decode_long_context", "mixed_decode_traffic_fits",
    "fp8_quantize_matches_reference", "fp8_quantize_computes_scales",
    "mixed_prefill_case", "mixed_prefill_run", "check_mixed_prefill", "mixed_decode_case", "mixed_decode_run",
    "check_mixed_decode", "fp8_corner_values", "fp8_quantize_case", "fp8_cache_case", "fp8_quantize_run",
    "check_fp8_codes", "check_fp8_scales", "FP8_RECIPROCAL_SCALES", "fp8_round_trip_error",
]


def _storage_dtype(fmt: str):
    """The NumPy dtype of a storage format: "fp16" is np.float16, "bf16" ml_dtypes' bfloat16."""
    import ml_dtypes

    formats = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
    if fmt not in formats:
        raise ValueError(f"fmt must be one of {tuple(formats)}, got {fmt!r}")
    return formats[fmt]


# Integers in [-n, n] for large logits, by format: exact in it (fp16 up to 2048, bf16 up to 256). fp16's are
# large enough that their products pass 65504 (q·k of 16 of them reaches about 2e6); bf16 has float32's range.
_BIG_LOGIT_INT = {"fp16": 600, "bf16": 200}


def mixed_prefill_case(rng, fmt: str, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *, causal: bool,
                       kv_lens=None, values: str = "normal", large_logits: bool = False) -> dict:
    """A prefill stored in ``fmt`` ("fp16" or "bf16"), as a dict: q (B, heads, N, d), k and v (B, kv_heads,
    M, d) float32 as drawn, ``stored``: the three rounded to ``fmt``, kv_lens, causal, fmt and the scale
    (float32 1/sqrt(d)).

    values: "normal" (standard normal v), "offset" (v uniform in [1, 2): every output near 1.5, so the
    rounding of a long sum shows), "flat" (that and q / 256: every weight within about 2% of 1, so a row's sum
    grows with its keys, and an fp16 sum past 32 rounds each weight up the same way: its error adds up instead of
    averaging out) or "sharp" (q and k multiples of 1/16 below 4 in size, exact in both
    formats, sharing a common direction: every scaled logit near 4 sqrt(d) give or take 1, so a logit
    rounded to 11 bits moves every weight, where storage moves none). large_logits: KV head 0 and its
    query heads hold integers, exact in ``fmt`` (fp16: in [-600, 600], whose products pass 65504, fp16's
    largest; bf16: in [-200, 200]), and in each sequence key 0 of KV head 0 equals query 0 of head 0, so
    q·k before the scale reaches about 2e6 (fp16) or 2e5 (bf16) there; the other KV heads stay standard
    normal."""
    dtype = _storage_dtype(fmt)
    q = rng.standard_normal((B, heads, N, d), dtype=np.float32)
    k = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    if values in ("offset", "flat"):
        v = rng.uniform(1.0, 2.0, (B, kv_heads, M, d)).astype(np.float32)
    elif values in ("normal", "sharp"):
        v = rng.standard_normal((B, kv_heads, M, d), dtype=np.float32)
    else:
        raise ValueError(f"values must be 'normal', 'offset', 'flat' or 'sharp', got {values!r}")
    if values == "flat":
        q = (q / 256).astype(np.float32)
    if values == "sharp":
        common = rng.choice(np.array([-2.0, 2.0], np.float32), (B, kv_heads, 1, d))
        sixteenths = lambda a: (np.round(a * 16) / 16).astype(np.float32)  # noqa: E731
        q = sixteenths(np.repeat(common, heads // kv_heads, axis=1) + rng.normal(0.0, 0.5, q.shape))
        k = sixteenths(common + rng.normal(0.0, 0.5, k.shape))
    if large_logits:
        group, n = heads // kv_heads, _BIG_LOGIT_INT[fmt]
        q[:, :group] = rng.integers(-n, n + 1, (B, group, N, d))
        k[:, 0] = rng.integers(-n, n + 1, (B, M, d))
        if N and M:
            k[:, 0, 0] = q[:, 0, 0]
    lens = np.full(B, M, dtype=np.int32) if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    return dict(q=q, k=k, v=v, stored=tuple(a.astype(dtype) for a in (q, k, v)), kv_lens=lens, causal=causal,
                fmt=fmt, scale=np.float32(1.0 / math.sqrt(d)))


def _mixed_label(case: dict) -> str:
    B, heads, N, d = case["q"].shape
    kv_heads, M = case["k"].shape[1], case["k"].shape[2]
    return (f"{case['fmt']}, B={B} heads={heads} kv_heads={kv_heads} N={N} M={M} d={d} causal={case['causal']} "
            f"kv_lens={case['kv_lens'].tolist()}")


def mixed_prefill_run(kernel, fmt: str, B: int, heads: int, kv_heads: int, N: int, M: int, d: int, *,
                      causal: bool, kv_lens=None, values: str = "normal", large_logits: bool = False, rng=None):
    """Your prefill kernel through the course's launcher (``gqa_prefill_mixed_tiles``: day 7's grid) on a
    fresh case stored in ``fmt``, its output poisoned first: ``(o, case, seed)``, o in ``fmt``."""
    from kernels.low_precision_attention import gqa_prefill_mixed_tiles

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = mixed_prefill_case(rng, fmt, B, heads, kv_heads, N, M, d, causal=causal, kv_lens=kv_lens, values=values,
                              large_logits=large_logits)
    o = poison(np.empty(case["q"].shape, _storage_dtype(fmt)))
    launch = lambda: gqa_prefill_mixed_tiles(*case["stored"], causal=causal, kv_lens=case["kv_lens"],  # noqa: E731
                                             scale=case["scale"], out=o, kernel=kernel)
    _launch_explained(launch, dict(kv_heads=kv_heads, heads=heads, kv_line=("k[", "v[")))
    return o, case, seed


def _prefill_rows(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """(keys each row sums, the largest |q·k| of each row before the scale), both (B, heads, N), from the
    stored q and k."""
    q, k = (a.astype(np.float64) for a in case["stored"][:2])
    B, heads, N, _ = q.shape
    group = heads // k.shape[1]
    lens = np.minimum(case["kv_lens"].astype(np.int64), k.shape[2])
    ends = np.broadcast_to(lens[:, None, None], (B, heads, N)).copy()
    if case["causal"]:
        ends = np.minimum(ends, np.arange(1, N + 1)[None, None, :])
    logits = np.einsum("bhid,bhjd->bhij", q, np.repeat(k, group, axis=1))
    allowed = np.arange(k.shape[2])[None, None, None, :] < ends[..., None]
    return ends, np.abs(np.where(allowed, logits, 0.0)).max(axis=-1, initial=0.0)


def _rule_limit(ref: np.ndarray, same: np.ndarray) -> float:
    """The largest error the precision rule (``docs/design-notes.md`` §5) allows: twice storage's, plus the
    atol."""
    from course.checking import LOWP_DEFAULT_ATOL, LOWP_FACTOR

    finite = np.isfinite(ref)
    scale = float(np.abs(ref[finite]).max(initial=0.0))
    return LOWP_FACTOR * float(np.abs(same - ref)[finite].max(initial=0.0)) + LOWP_DEFAULT_ATOL * scale


def check_mixed_prefill(o, case: dict, *, seed=None, label: str = "", kernel=None):
    """Compare a mixed-precision prefill output with the float64 reference on the inputs as drawn, under
    the precision rule of ``docs/design-notes.md`` §5: at most twice the error of the same attention done
    exactly on the stored inputs and stored once (``reference.attention_at_precision``). On failure name
    unscaled logits past fp16's range, a sum kept at the storage precision, the head map, or day 5's mistakes."""
    from course.diagnoses.gqa import head_findings
    from course.diagnoses.paged import close_to_model
    from course.diagnoses.precision import accumulation_findings, overflow_findings, rounding_findings
    from kernels import reference
    from kernels.gqa_attention import TILE_KV, prefill_tiling

    q, k, v = case["q"], case["k"], case["v"]
    lens, causal, fmt = case["kv_lens"], case["causal"], case["fmt"]
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    o_host = np.asarray(o)
    if o_host.dtype != _storage_dtype(fmt):
        raise AssertionError(f"O for {label or _mixed_label(case)} must be stored in {fmt} "
                             f"({_storage_dtype(fmt)}), got {o_host.dtype}")
    ref = reference.attention(q, k, v, causal=causal, kv_lens=lens)
    same = reference.attention_at_precision(q, k, v, fmt, causal=causal, kv_lens=lens)
    stored = [a.astype(np.float64) for a in case["stored"]]
    got = o_host.astype(np.float64)
    noise = float(np.linalg.norm((same - ref)[np.isfinite(ref)])) / max(float(np.linalg.norm(ref)), 1e-30)
    close = lambda a, b: close_to_model(a, b, max(1e-3, 4 * noise))  # noqa: E731

    def attend(kv_of):
        index = [kv_of(h) for h in range(heads)]
        return reference.attention(stored[0], stored[1][:, index], stored[2][:, index], causal=causal, kv_lens=lens)

    def findings():
        found = head_findings(got, reference.attention(*stored, causal=causal, kv_lens=lens), heads=heads,
                              kv_heads=kv_heads, poisoned=is_poison(o_host), attend=attend, close=close, prefix="gqa")
        if found:
            return found
        lengths, logits = _prefill_rows(case)
        limit = _rule_limit(ref, same)
        return (overflow_findings(got, ref, logits, fmt=fmt)
                or accumulation_findings(got, ref, same, lengths, fmt=fmt, limit=limit)
                or rounding_findings(got, ref, same, fmt=fmt, limit=limit))

    repeated = dict(q=stored[0], k=np.repeat(stored[1], group, axis=1), v=np.repeat(stored[2], group, axis=1),
                    causal=causal, kv_lens=lens, scale=float(case["scale"]), tile_q=prefill_tiling(group)[2],
                    tile_kv=TILE_KV)
    hint = (f"q, k, v and o are stored in {fmt}: convert each element to float32 as it is loaded "
            "(float32(x)), scale q in float32, compute and accumulate in float32, and round once, when o is stored")
    return _with_findings(findings, o_host, ref, name=f"O for {label or _mixed_label(case)}", dims=ATTENTION_DIMS,
                          seed=seed, precision=fmt, same_precision_ref=same, hints={"any": hint},
                          attention=repeated, kernel=kernel)


def mixed_prefill_matches_reference(kernel) -> None:
    """fp16: two query heads per KV head, causal, two key tiles; bf16: a group of 3 with kv_lens [17, 0];
    fp16 with sharp logits (all near 16 after the scale); then the edges of day 7's blocks: one head over 65
    positions (two blocks of TILE_POS), causal with kv_lens [30] below most rows, and 257 heads over one KV
    head (two sub-groups, 129 and 128 heads, of one position each), causal with kv_lens [1]."""
    for fmt, args, options in (("fp16", (1, 4, 2, 20, 20, 8), dict(causal=True)),
                               ("bf16", (2, 3, 1, 9, 17, 4), dict(causal=False, kv_lens=[17, 0])),
                               ("fp16", (1, 2, 1, 4, 12, 16), dict(causal=False, values="sharp")),
                               ("fp16", (1, 1, 1, 65, 40, 2), dict(causal=True, kv_lens=[30])),
                               ("bf16", (1, 257, 1, 2, 3, 1), dict(causal=True, kv_lens=[1]))):
        o, case, seed = mixed_prefill_run(kernel, fmt, *args, **options)
        check_mixed_prefill(o, case, seed=seed, kernel=kernel)
    _passed("fp16, 4 query heads over 2 KV heads, causal; bf16, group 3 with kv_lens [17, 0]; fp16, sharp logits; "
            "fp16, 65 positions causal with kv_lens [30]; bf16, 257 heads on one KV head, causal with kv_lens [1]")


def mixed_prefill_long_rows(kernel) -> None:
    """fp16, rows of 16 and of 256 keys, every weight near 1 ("flat"): the error may not grow with the keys a row
    sums."""
    o, case, seed = mixed_prefill_run(kernel, "fp16", 2, 1, 1, 3, 256, 4, causal=False, kv_lens=[16, 256],
                                      values="flat")
    check_mixed_prefill(o, case, seed=seed, kernel=kernel)
    _passed("fp16, rows of 16 and 256 keys, within twice the error of storage")


def mixed_prefill_large_logits(kernel) -> None:
    """fp16, KV head 0 with q·k past 65504 before the scale (products of its numbers too), KV head 1 with
    small logits."""
    o, case, seed = mixed_prefill_run(kernel, "fp16", 1, 2, 2, 6, 7, 16, causal=False, large_logits=True)
    check_mixed_prefill(o, case, seed=seed, label="fp16, q·k up to 2e6 before the scale", kernel=kernel)
    _passed("fp16 with q·k up to 2e6 before the scale")


def mixed_decode_case(rng, context_lens, *, heads: int, kv_heads: int, head_dim: int, block_size: int,
                      values: str = "normal", large_logits: bool = False) -> dict:
    """``paged_inputs`` with the cache stored in fp16: ``k_cache`` and ``v_cache`` float16 (NaN in every slot
    that holds no key), ``k_cache32`` and ``v_cache32`` the float32 caches they round. values "offset": V
    uniform in [1, 2); "flat": that and q / 256, so every weight is within about 2% of 1 and a sum over
    the tokens grows with their number (an fp16 sum past 64 then rounds each weight the same way, and the
    error adds up instead of averaging out); large_logits: integer q and K in [-600, 600] (exact in fp16, their products past
    65504) and the first key of sequence 0 on KV head 0 equal to query 0 of that sequence, so q·k reaches
    about 2e6 before the scale."""
    case = paged_inputs(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
    unused = np.isnan(case["k_cache"])
    if values in ("offset", "flat"):
        case["v_cache"] = np.where(unused, np.nan, rng.uniform(1.0, 2.0, unused.shape)).astype(np.float32)
    elif values != "normal":
        raise ValueError(f"values must be 'normal', 'offset' or 'flat', got {values!r}")
    if values == "flat":
        case["q"] = (case["q"] / 256).astype(np.float32)
    if large_logits:
        big = lambda shape: rng.integers(-_BIG_LOGIT_INT["fp16"], _BIG_LOGIT_INT["fp16"] + 1, shape)  # noqa: E731
        case["k_cache"] = np.where(unused, np.nan, big(unused.shape)).astype(np.float32)
        case["q"] = big(case["q"].shape).astype(np.float32)
        if case["context_lens"].size and case["context_lens"][0] > 0:
            case["k_cache"][case["block_tables"][0, 0], 0, 0] = case["q"][0, 0]
    case["k_cache32"], case["v_cache32"] = case["k_cache"], case["v_cache"]
    case["k_cache"], case["v_cache"] = case["k_cache32"].astype(np.float16), case["v_cache32"].astype(np.float16)
    return case


def mixed_decode_run(kernel, context_lens, *, heads: int, kv_heads: int, head_dim: int = 8, block_size: int = 4,
                     partition_size: int = 8, values: str = "normal", large_logits: bool = False, rng=None,
                     counted: bool = False):
    """Your partition kernel with the course's grid (``decode_grid``, THREADS threads) on a fresh case whose
    cache is stored in fp16 (:func:`mixed_decode_case`), its partials poisoned first, then merged in NumPy
    (:func:`merge_partials`): ``(out, case, seed, traffic, partials)``; traffic that of your kernel alone."""
    from kernels.gqa_attention import THREADS, decode_grid
    from kernels.paged_attention import partitions_for

    rng, seed = (rng, None) if rng is not None else random_inputs()
    case = mixed_decode_case(rng, context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                             block_size=block_size, values=values, large_logits=large_logits)
    num_seqs = len(case["context_lens"])
    partitions = partitions_for(int(case["context_lens"].max(initial=0)), partition_size)
    partials = tuple(poison(np.empty(shape, np.float32)) for shape in
                     ((num_seqs, heads, partitions), (num_seqs, heads, partitions),
                      (num_seqs, heads, partitions, head_dim)))
    args = [case[k] for k in ("q", "k_cache", "v_cache", "block_tables", "context_lens", "scale")]
    launch = lambda: kernel[decode_grid(num_seqs, heads, kv_heads, partitions), THREADS](  # noqa: E731
        *args, partition_size, *partials)
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), _paged_sizes(case))
    case["partition_size"] = partition_size
    return merge_partials(*partials).astype(np.float32), case, seed, traffic, partials


def check_mixed_decode(out, case: dict, partials=None, *, seed=None, label: str = "", kernel=None):
    """Compare the merged decode output with the float64 reference on the float32 cache the fp16 one
    rounds, under the precision rule (at most twice the error of the same decode done exactly on the fp16
    cache); on failure name the heads never written (from the partials, when given), a sum kept in fp16,
    logits past fp16's range, or day 6 and 7's paged mistakes."""
    from course.diagnoses.gqa import head_findings
    from course.diagnoses.paged import decode_findings
    from course.diagnoses.precision import accumulation_findings, overflow_findings, rounding_findings
    from kernels import reference

    heads, kv_heads = case["q"].shape[1], case["k_cache"].shape[1]
    label = label or _paged_label(case) + ", fp16 cache"
    if partials is not None:
        unwritten = np.broadcast_to(is_poison(partials[2]).all(axis=(2, 3))[..., None], case["q"].shape)
        found = head_findings(np.asarray(out).astype(np.float64), None, heads=heads, kv_heads=kv_heads,
                              poisoned=unwritten, attend=lambda kv_of: None, close=None, prefix="gqa")
        if found:
            raise AssertionError(f"out for {label}: {found[0][1]}")
    tables, lens = case["block_tables"], case["context_lens"]
    stored = dict(case, k_cache=case["k_cache"].astype(np.float64), v_cache=case["v_cache"].astype(np.float64),
                  scale=float(case["scale"]))
    same = reference.paged_attention(case["q"], stored["k_cache"], stored["v_cache"], tables, lens,
                                     scale=float(case["scale"]))
    ref = reference.paged_attention(case["q"], case["k_cache32"], case["v_cache32"], tables, lens,
                                    scale=float(case["scale"]))
    got = np.asarray(out).astype(np.float64)

    def findings():
        found = decode_findings(got, same, stored, poisoned=is_poison(np.asarray(out)))
        if found:
            return found
        group = heads // kv_heads
        logits = np.zeros(case["q"].shape[:2])
        for s, n in enumerate(lens.tolist()):
            if n:
                pages = [stored["k_cache"][tables[s, p]] for p in range(-(-n // stored["k_cache"].shape[2]))]
                keys = np.concatenate(pages, axis=1)[:, :n]                       # (kv_heads, n, d)
                for h in range(heads):
                    logits[s, h] = np.abs(keys[h // group] @ case["q"][s, h].astype(np.float64)).max()
        rows = np.broadcast_to(lens[:, None], logits.shape)
        limit = _rule_limit(ref, same)
        return (overflow_findings(got, ref, logits, fmt="fp16")
                or accumulation_findings(got, ref, same, rows, fmt="fp16", limit=limit)
                or rounding_findings(got, ref, same, fmt="fp16", limit=limit))

    result = _with_findings(findings, out, ref, name=f"out for {label}", dims=PAGED_DIMS, seed=seed,
                            precision="fp16", same_precision_ref=same, kernel=kernel,
                            hints={"any": "the cache is stored in fp16: convert each element to float32 as it is "
                                          "loaded (float32(x)) and keep every score, maximum, sum and accumulator "
                                          "in float32"})
    empty = np.flatnonzero(lens == 0)
    if empty.size and not (np.asarray(out)[empty] == 0).all():
        raise AssertionError(f"sequence {int(empty[0])} has context_lens = 0, no key: out[{int(empty[0])}] must be "
                             "exactly 0 for every head (write zeros when the sum is 0)")
    return result


def mixed_decode_matches_reference(kernel) -> None:
    """An fp16 cache: 2 query heads on one KV head, a shuffled table, a partial last page, two partitions;
    then 9 query heads on one KV head (two blocks, of 5 and 4 heads) and an empty context, whose partition
    holds no token."""
    for lens, heads in (([11], 2), ([3, 0], 9)):
        out, case, seed, _, partials = mixed_decode_run(kernel, lens, heads=heads, kv_heads=1, head_dim=8,
                                                        block_size=4, partition_size=8)
        check_mixed_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("fp16 cache, context_lens = [11] in partitions of 8, 2 query heads over 1 KV head; context_lens = "
            "[3, 0], 9 query heads over 1 KV head")


def mixed_decode_long_context(kernel) -> None:
    """An fp16 cache, a context of 256 tokens in one partition with every weight near 1, so the sums grow."""
    out, case, seed, _, partials = mixed_decode_run(kernel, [256], heads=1, kv_heads=1, head_dim=32,
                                                    block_size=16, partition_size=256, values="flat")
    check_mixed_decode(out, case, partials, seed=seed, kernel=kernel)
    _passed("fp16 cache, a context of 256 tokens summed with weights near 1, within twice the error of storage")


def mixed_decode_traffic_fits(kernel) -> None:
    """Only the partials written; each fp16 element of the cache read once per KV head, for its whole group
    (the values are graded by the other cells)."""
    _, case, _, traffic, _ = mixed_decode_run(kernel, [5, 3], heads=4, kv_heads=1, head_dim=4, block_size=4,
                                              partition_size=8, counted=True)
    if traffic is not None:
        _raise_problems(gqa_decode_traffic_problems(traffic, case))
        cache_bytes = traffic.load_bytes["k_cache"] + traffic.load_bytes["v_cache"]
        print(f"{cache_bytes} bytes of cache read for {2 * sum(case['context_lens'].tolist()) * 4} elements of K and V")
    _passed("the partials written once; each fp16 page read once for the 4 query heads of its KV head")


def fp8_corner_values() -> np.ndarray:
    """float32 values that decide an e4m3 encoding, both signs: every finite e4m3 value, every midpoint
    between neighbours (a tie), a quarter of the way between neighbours on either side, values past 448
    and infinities (saturation), float32 subnormals and the smallest e4m3 subnormals' midpoints, -0.0 and NaN."""
    from kernels import reference

    values = reference.fp8_e4m3_values()
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    gaps = np.diff(finite)
    middles = np.concatenate([finite[:-1] + gaps / 2, finite[:-1] + gaps / 4, finite[:-1] + 3 * gaps / 4])
    beyond = [449.0, 464.0, 464.5, 479.0, 480.0, 1e30, np.inf, 1e-40, 2.0 ** -10, 3 * 2.0 ** -11]
    magnitudes = np.concatenate([finite, middles, beyond]).astype(np.float32)
    return np.concatenate([magnitudes, -magnitudes, [np.float32(np.nan)]]).astype(np.float32)


# Scales whose float32 reciprocal is off by nearly half a unit in the last place: with x = tie * scale (exact),
# x / scale is the tie exactly, and x * (1 / scale) lands on one side of it, so about half of e4m3's ties come
# out as the other code when a kernel multiplies by the reciprocal instead of dividing.
FP8_RECIPROCAL_SCALES = (61.0, 63.0, 0.953125, 15.0)


def fp8_quantize_case(rng, values, *, block_size: int = 4, head_dim: int = 16, kv_heads: int = 2,
                      power_of_two_scales: bool = True, scale_choices=None) -> dict:
    """``values`` (float32, shuffled) laid out as a cache (num_blocks, kv_heads, block_size, head_dim), the
    last page padded with random normal numbers, and a scale per (block, kv_head): powers of two (x / scale
    is then each value exactly, x = value * scale), random in [1e-3, 1e3] (x = value * scale rounded), or
    drawn from ``scale_choices`` (such as ``FP8_RECIPROCAL_SCALES``)."""
    values = rng.permutation(np.asarray(values, np.float32))
    page = block_size * head_dim
    pages = -(-values.size // page)
    num_blocks = -(-pages // kv_heads)
    flat = rng.standard_normal(num_blocks * kv_heads * page).astype(np.float32)
    flat[:values.size] = values
    y = flat.reshape(num_blocks, kv_heads, block_size, head_dim)
    if scale_choices is not None:
        scales = rng.choice(np.asarray(scale_choices, np.float32), (num_blocks, kv_heads)).astype(np.float32)
    elif power_of_two_scales:
        scales = (2.0 ** rng.integers(-8, 9, (num_blocks, kv_heads))).astype(np.float32)
    else:
        scales = (10.0 ** rng.uniform(-3, 3, (num_blocks, kv_heads))).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        x = (y * scales[..., None, None]).astype(np.float32)
    return dict(x=x, scales=scales)


def fp8_cache_case(rng, num_blocks: int, kv_heads: int, block_size: int, head_dim: int, *,
                   amax_last: bool = False) -> dict:
    """A float32 cache whose pages have magnitudes from 1e-3 to 1e3, one page of zeros and one page whose
    largest |x| is negative (so its largest x is not its largest |x|). amax_last: each page's largest |x|
    is its last element, negative (in a page of more than FP8_THREADS elements, one a thread reaches on its
    second step)."""
    shape = (num_blocks, kv_heads, block_size, head_dim)
    x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, (num_blocks, kv_heads, 1, 1))
    x = x.astype(np.float32)
    if x.shape[0] * x.shape[1] >= 3:
        x[0, 0] = 0.0
        x[-1, -1] = -np.abs(x[-1, -1])
        x[-1, -1, 0, 0] *= 3.0
    if amax_last:
        x[..., -1, -1] = -2 * np.abs(x).max(axis=(2, 3))
    return dict(x=x, scales=None)


def fp8_quantize_run(kernel, case: dict):
    """Your quantize kernel through the course's launcher (``fp8_quantize``: one block of FP8_THREADS per
    (block, kv_head)) on ``case``, codes (and computed scales) poisoned first: ``(codes, scales)``."""
    from kernels.low_precision_attention import fp8_quantize

    x, scales = case["x"], case["scales"]
    codes = poison(np.empty(x.shape, np.uint8))
    out_scales = None if scales is not None else poison(np.empty(x.shape[:2], np.float32))
    try:
        return fp8_quantize(x, scales=scales, out=codes, out_scales=out_scales, kernel=kernel)
    except ZeroDivisionError as exc:
        raise KernelFailed("division by zero in the kernel: a page of zeros has amax 0; its scale is 1 (then every "
                           "code is 0), not amax / 448 = 0", "fp8_zero_scale") from exc


def _fp8_where(index, shape) -> str:
    names = ("block", "kv_head", "slot", "channel")[-len(shape):] if len(shape) <= 4 else None
    if names is None:
        return f"element {tuple(int(i) for i in index)}"
    return ", ".join(f"{n} {int(i)}" for n, i in zip(names, index))


def check_fp8_codes(codes, case: dict, scales=None, *, seed=None, label: str = "") -> None:
    """The codes equal ``reference.quantize_fp8``'s bit for bit (with ``scales``, the scales used: the
    case's given ones by default); on failure name the first code that differs and the encoding mistake."""
    from course.diagnoses.precision import fp8_findings
    from kernels import reference

    x = case["x"]
    scales = case["scales"] if scales is None else np.asarray(scales)
    want, _ = reference.quantize_fp8(x, scales)
    got = np.asarray(codes)
    wrong = got != want
    if not wrong.any():
        return
    index = np.unravel_index(int(np.argmax(wrong)), got.shape)
    groups = int(np.prod(x.shape[:2]))
    with np.errstate(over="ignore", invalid="ignore"):
        y = (x.reshape(groups, -1) / scales.reshape(groups, 1)).astype(np.float32)
    values = reference.fp8_e4m3_values()
    g, w = int(got[index]), int(want[index])
    got_words = "the poison 0xff, never written" if is_poison(got)[index] else f"0x{g:02x} ({values[g]:.6g})"
    lines = [f"fp8 codes for {label or f'a cache of shape {x.shape}'} differ from the reference (seed {seed})",
             f"  wrong codes: {int(wrong.sum())} of {got.size}",
             f"  first wrong: {_fp8_where(index, got.shape)}: x = {float(x[index]):.9g}, scale = "
             f"{float(scales[index[:2]]):.9g}, x / scale = {float(x[index] / scales[index[:2]]):.9g}: got "
             f"{got_words}, expected 0x{w:02x} ({values[w]:.6g})"]
    found = fp8_findings(got.reshape(groups, -1), y, x.reshape(groups, -1).astype(np.float64),
                         scales.reshape(groups).astype(np.float64))
    if found:
        lines += ["likely cause:"] + [f"  - {message}" for _, message in found]
    else:
        lines.append("  the code of y = x / scale is the e4m3 number nearest to y (ties to the even code), "
                     "subnormals included, +-448 past 448, 0x7f for NaN, the sign in bit 7")
    if seed is not None:
        lines.append(f"Repeat it with random_inputs(seed={seed}).")
    raise AssertionError("\n".join(lines))


def check_fp8_scales(got_scales, case: dict, *, seed=None, label: str = "") -> None:
    """The computed scales equal ``reference.quantize_fp8``'s bit for bit: amax / 448 per group, 1 for a
    group of zeros; on failure name the first that differs and the mistake the scales follow."""
    from course.diagnoses.precision import fp8_scale_findings
    from kernels import reference

    x = case["x"]
    _, want = reference.quantize_fp8(x)
    got = np.asarray(got_scales)
    wrong = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if not wrong.any():
        return
    b, h = (int(i) for i in np.argwhere(wrong)[0])
    groups = int(np.prod(x.shape[:2]))
    unwritten = " (the poison: never written)" if is_poison(got)[b, h] else ""
    lines = [f"fp8 scales for {label or f'a cache of shape {x.shape}'} differ from the reference (seed {seed})",
             f"  wrong scales: {int(wrong.sum())} of {got.size}",
             f"  first wrong: block {b}, kv_head {h}: the page's largest |x| is {float(np.abs(x[b, h]).max()):.9g}; "
             f"got scale {float(got[b, h]):.9g}{unwritten}, expected {float(want[b, h]):.9g} (amax / 448, 1 for a "
             "page of zeros)"]
    found = fp8_scale_findings(got.reshape(groups), x.reshape(groups, -1))
    if found:
        lines += ["likely cause:"] + [f"  - {message}" for _, message in found]
    if seed is not None:
        lines.append(f"Repeat it with random_inputs(seed={seed}).")
    raise AssertionError("\n".join(lines))


def fp8_round_trip_error(x, codes, scales) -> str:
    """The error of a cache read back from its fp8 codes, |value(code) * scale - x|, said against what it is measured
    by: the largest error, where it is, the scale of its page (the page's largest |x| over 448) and the gap between
    the two e4m3 numbers around x / scale there, times the scale; then the largest error in gaps of its own place.
    Rounding to the nearest code keeps every error within half its gap, so that last number is at most 0.5 for
    correct codes. x (num_blocks, kv_heads, block_size, head_dim) float32, codes uint8 of its shape, scales
    (num_blocks, kv_heads)."""
    from kernels import reference

    x = np.asarray(x, np.float32)
    scale = np.asarray(scales, np.float32)[..., None, None].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        err = np.abs(reference.dequantize_fp8(np.asarray(codes), scales).astype(np.float64) - x.astype(np.float64))
        y = np.minimum(np.abs(x) / scale, 448.0)
        # e4m3 has 3 mantissa bits: 8 numbers a binade, and steps of 2**-9 below 2**-6 (the subnormals)
        gap = np.where(y < 2.0 ** -6, 2.0 ** -9, 2.0 ** (np.floor(np.log2(np.maximum(y, 2.0 ** -6))) - 3)) * scale
    lost = int(np.count_nonzero(~np.isfinite(err)))
    if lost == err.size:
        return f"largest error of value(code) * scale: every one of the {lost} codes reads back as NaN (0x7f, 0xff)"
    err = np.where(np.isfinite(err), err, -1.0)
    at = np.unravel_index(int(np.argmax(err)), err.shape)
    page = at[:2]
    step, amax = gap[at] / scale[page][0, 0], float(np.abs(x[page]).max())
    lines = [f"largest error of value(code) * scale: {err[at]:.3g}, at {_fp8_where(at, x.shape)} (x = {x[at]:.6g}), "
             f"on a page whose scale is {float(scales[page]):.4g} (its largest |x|, {amax:.6g}, over 448): there "
             f"e4m3's numbers are {step:g} apart, {gap[at]:.3g} once scaled, and the error is {err[at] / gap[at]:.2f} "
             f"of that gap"]
    units = err / gap
    worst = np.unravel_index(int(np.argmax(units)), units.shape)
    lines.append(f"largest error in gaps of its own place: {units[worst]:.2f}, at {_fp8_where(worst, x.shape)} "
                 f"(rounding to the nearest code keeps every one within 0.5)")
    if lost:
        lines.append(f"{lost} codes read back as NaN (0x7f, 0xff)")
    return "\n".join(lines)


def fp8_quantize_matches_reference(kernel) -> None:
    """Given power-of-two scales: ties, values between codes, subnormals, past 448, -0.0; then the ties again
    with scales whose reciprocal is not exact (x / scale is one division, not x times 1 / scale); bit for bit."""
    rng, seed = random_inputs()
    picks = fp8_corner_values()
    wanted = np.concatenate([picks[np.abs(picks) <= 2.0], [500.0, -1e30, 2.0 ** -10, -0.0]]).astype(np.float32)
    case = fp8_quantize_case(rng, wanted, block_size=4, head_dim=16, kv_heads=2)
    codes, _ = fp8_quantize_run(kernel, case)
    check_fp8_codes(codes, case, seed=seed)
    case = fp8_quantize_case(rng, wanted, block_size=4, head_dim=16, kv_heads=2, scale_choices=FP8_RECIPROCAL_SCALES)
    codes, _ = fp8_quantize_run(kernel, case)
    check_fp8_codes(codes, case, seed=seed, label="ties with scales 61, 63, 0.953125 and 15")
    count = 2 * case["x"].size
    case = fp8_quantize_case(rng, rng.standard_normal(160).astype(np.float32) * 100, block_size=4, head_dim=40,
                             kv_heads=1, power_of_two_scales=False)
    codes, _ = fp8_quantize_run(kernel, case)
    check_fp8_codes(codes, case, seed=seed, label="a page of 160 elements (threads 0 to 31 take two)")
    _passed(f"{count + case['x'].size} codes bit for bit: ties (with power-of-two and other scales), subnormals, "
            f"saturation, -0.0, a page longer than the block")


def fp8_quantize_computes_scales(kernel) -> None:
    """Scales computed per (block, kv_head): amax / 448, 1 for a page of zeros, bit for bit (the codes are
    graded by the other cell)."""
    rng, seed = random_inputs()
    case = fp8_cache_case(rng, 3, 2, 4, 8)
    _, scales = fp8_quantize_run(kernel, case)
    check_fp8_scales(scales, case, seed=seed)
    case = fp8_cache_case(rng, 1, 1, 4, 40, amax_last=True)
    _, scales = fp8_quantize_run(kernel, case)
    check_fp8_scales(scales, case, seed=seed, label="a page of 160 elements whose largest |x| is the last")
    _passed("a scale per page (a page of zeros among them, a page of 160 elements), bit for bit")
