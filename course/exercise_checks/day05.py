"""Day 5, flash attention: the student's kernel launched with the course's grid, against the reference,
and the key tiles it loads (once per query tile; none above the diagonal or past kv_lens)."""

from __future__ import annotations

import math

import numpy as np

from course.checking import check, poison, random_inputs

from ._common import ATTENTION_DIMS, _counted, _launch_explained, _loads, _passed

__all__ = ["flash_matches_reference", "flash_handles_kv_lens", "flash_is_numerically_stable",
           "flash_traffic_fits_tiling", "flash_skips_masked_tiles", "flash_causal_key_end"]


def flash_causal_key_end(tile_start: int, n_queries: int, kv_len: int, *, causal: bool, tile_q: int) -> int:
    """How many keys the query block starting at row ``tile_start`` needs: keys 0 ... end - 1.

    Every key below ``kv_len``; under the causal mask only those up to the block's last *existing*
    query row, ``min(tile_start + tile_q, n_queries) - 1``: in the last, partial query tile that is
    row N - 1, not ``tile_start + tile_q - 1``.
    """
    if not causal:
        return kv_len
    return min(kv_len, tile_start + tile_q, n_queries)


def _flash_run(kernel, B, H, N, M, d, *, causal, kv_lens=None, rng=None, large_logits=False, counted=False):
    """Launch ``kernel`` with the course's grid on fresh inputs: ``(o, reference, seed, traffic, attention)``,
    attention being the inputs and the mask as :func:`course.checking.check` takes them."""
    from kernels import reference
    from kernels.flash_attention import TILE_KV, TILE_Q, default_scale, flash_grid

    if rng is None:
        rng, seed = random_inputs()
    else:
        seed = None
    if large_logits:  # integers: q·k of about 1e4, exact in float32
        q = rng.integers(-50, 51, (B, H, N, d)).astype(np.float32)
        k = rng.integers(-50, 51, (B, H, M, d)).astype(np.float32)
    else:
        q = rng.standard_normal((B, H, N, d), dtype=np.float32)
        k = rng.standard_normal((B, H, M, d), dtype=np.float32)
    v = rng.standard_normal((B, H, M, d), dtype=np.float32)
    lens = np.full(B, M, dtype=np.int32) if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    o = poison(np.empty_like(q))
    launch = lambda: kernel[flash_grid(B, H, N), TILE_Q](q, k, v, lens, o, default_scale(d, None), causal)  # noqa: E731
    # An index past k or v, an overflowing exp, 0/0: a KernelFailed that names the likely bug.
    sizes = dict(keys=M, queries=N, kv_line=("k[", "v["))
    _, traffic = _launch_explained(lambda: _counted(launch) if counted else (launch(), None), sizes)
    attention = dict(q=q, k=k, v=v, causal=causal, kv_lens=lens, tile_q=TILE_Q, tile_kv=TILE_KV)
    return o, reference.attention(q, k, v, causal=causal, kv_lens=lens), seed, traffic, attention


def _check_flash(o, want, seed, label, attention, kernel):
    from kernels.flash_attention import TILE_Q

    hint = ("with causal=True row i sees keys 0 ... i, its own position included" if attention["causal"]
            else "every key below kv_lens[b] counts") + "; a row that sees no key gives 0"
    check(o, want, name=f"O for {label}", dims=ATTENTION_DIMS, tile={"row": TILE_Q}, seed=seed,
          hints={"any": hint}, attention=attention, kernel=kernel)


def flash_matches_reference(kernel, *, causal: bool) -> None:
    """O matches the reference over two query tiles and two key tiles, N != M."""
    B, H, N, M, d = 1, 1, 70, 45, 4
    if causal:
        M = 80
    rng, seed = random_inputs()
    o, want, _, _, attention = _flash_run(kernel, B, H, N, M, d, causal=causal, rng=rng)
    _check_flash(o, want, seed, f"B={B} H={H} N={N} M={M} d={d} causal={causal}", attention, kernel)
    _passed(f"N={N}, M={M}, causal={causal}")


def flash_handles_kv_lens(kernel) -> None:
    """kv_lens of 0 (rows of exactly 0), 1 and an off-tile 37, causal."""
    kv_lens = [0, 1, 37]
    rng, seed = random_inputs()
    o, want, _, _, attention = _flash_run(kernel, 3, 1, 40, 40, 4, causal=True, kv_lens=kv_lens, rng=rng)
    # check first: it names what the empty sequence's rows hold (NaN from 0/0, keys past kv_lens[b] used);
    # then exactly 0, which its tolerance would let pass
    _check_flash(o, want, seed, f"N=40 kv_lens={kv_lens} causal=True", attention, kernel)
    assert np.all(o[0] == 0.0), "the rows of an empty sequence (kv_lens[b] == 0) must be exactly 0"
    _passed(f"kv_lens = {kv_lens}, causal")


def flash_is_numerically_stable(kernel) -> None:
    """Logits of about 1e4 before scaling give finite, exact results."""
    rng, seed = random_inputs()
    o, want, _, _, attention = _flash_run(kernel, 1, 1, 40, 40, 16, causal=False, rng=rng, large_logits=True)
    _check_flash(o, want, seed, "logits of size 1e4", attention, kernel)
    _passed("logits of size 1e4")


def flash_traffic_fits_tiling(kernel) -> None:
    """Only O written; Q read once; K and V loaded once per query tile, not once per query row."""
    from kernels.flash_attention import TILE_Q

    B, H, N, d = 1, 1, 70, 4
    rng, seed = random_inputs()
    o, want, _, traffic, attention = _flash_run(kernel, B, H, N, N, d, causal=False, rng=rng, counted=True)
    if traffic is not None:
        assert traffic.launches == 1, f"one kernel launch expected; launches seen: {traffic.kernel_names}"
        stored = {name: count for name, count in traffic.global_stores.items() if count}
        assert stored == {"o": B * H * N * d}, (
            f"the kernel may write only o, each element once ({B * H * N * d} stores); stores counted: {stored}")
        assert B * H * N * d <= _loads(traffic, "q") <= 1.1 * B * H * N * d, (
            f"each query row must be read once ({B * H * N * d} loads of q); {_loads(traffic, 'q')} counted")
        tiles = math.ceil(N / TILE_Q)
        per_tile = B * H * tiles * N * d
        for name in ("k", "v"):
            counted = _loads(traffic, name)
            per_row = " (about once per query row: read the keys from the shared tile, not from global memory)"
            assert per_tile <= counted <= 1.1 * per_tile, (
                f"{name}: {counted} loads counted; a tiled kernel loads each key once per query tile, "
                f"{per_tile} loads here ({tiles} tiles of {TILE_Q} rows), where one load per query row would be "
                f"{B * H * N * N * d}" + (per_row if counted >= 0.5 * B * H * N * N * d else ""))
    _check_flash(o, want, seed, f"N={N} d={d}", attention, kernel)
    _passed(f"N={N}: only O written, Q read once, K and V once per query tile")


def flash_skips_masked_tiles(kernel) -> None:
    """Causal blocks load no key past their last existing row; no block loads keys past kv_lens."""
    from kernels.flash_attention import TILE_Q

    d = 4
    for N, M, causal, kv_len in ((128, 128, True, 128), (70, 100, True, 100), (70, 70, True, 40),
                                 (40, 70, False, 70), (70, 70, False, 40)):
        _, _, _, traffic, _ = _flash_run(kernel, 1, 1, N, M, d, causal=causal, kv_lens=[kv_len], counted=True)
        if traffic is None:
            return
        starts = range(0, N, TILE_Q)
        keys = sum(flash_causal_key_end(start, N, kv_len, causal=causal, tile_q=TILE_Q) for start in starts)
        for name in ("k", "v"):
            counted = _loads(traffic, name)
            assert keys * d <= counted <= 1.1 * keys * d, (
                f"causal={causal}, N={N}, M={M}, kv_lens=[{kv_len}]: {counted} loads of {name} counted, "
                f"{keys * d} expected. The block of query rows r0..r1 needs keys 0 ... min(kv_len, r1 + 1) - 1 "
                f"(causal; r1 is the last row that exists, N - 1 in the last tile) or 0 ... kv_len - 1: "
                + _skipped_keys_why(counted // d, keys, N, M, kv_len, starts, causal=causal))
    _passed("no key tile above the diagonal, past the last query row or past kv_lens is loaded")


def _skipped_keys_why(loaded: int, keys: int, N: int, M: int, kv_len: int, starts, *, causal: bool) -> str:
    """Why the blocks loaded ``loaded`` keys (summed over the query tiles) instead of ``keys``: the count
    of a classic mistake it equals, else what more or fewer keys mean."""
    from kernels.flash_attention import TILE_Q

    unskipped = len(starts) * kv_len                 # every key below kv_len, in every causal block
    past_lens = sum(flash_causal_key_end(start, N, M, causal=causal, tile_q=TILE_Q) for start in starts)
    as_queries = len(starts) * N                     # without the mask, N keys per block
    if causal and loaded == unskipped != keys:
        return "masking the key tiles above the diagonal is not enough: skip them, do not load them"
    if loaded == past_lens != keys:
        return ("keys at or past kv_lens[b] do not exist: do not load them (the key loop ends at kv_lens[b], "
                "not at k.shape[2])")
    if not causal and loaded == as_queries != keys:
        return (f"each block loaded {N} keys, as many as there are queries: without the causal mask a block needs "
                f"every key below kv_lens[b] = {kv_len}, whatever the number of queries N (is the key count taken "
                "from q's shape instead of k's and kv_lens?)")
    if loaded > keys:
        return ("masking the key tiles above the diagonal is not enough: skip them, do not load them" if causal
                else "keys at or past kv_lens[b] do not exist: do not load them")
    return "every key a block needs must be loaded"
