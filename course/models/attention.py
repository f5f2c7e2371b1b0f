"""Bytes moved and FLOPs of the attention rungs (kernels/attention.py, kernels/flash_attention.py).

Two kinds of byte counts:

- ``bytes_*``: the global-memory traffic a rung *requests* as written: every load and store its
  threads issue, times ``itemsize``. The simulator's counter (``course.traffic``) measures exactly
  this for a kernel, so tests compare the two for equality.
- ``compulsory_bytes_*``: what must cross DRAM at least once even with perfect caching: every
  input read once, every output written once, and for the naive pipeline the N×M intermediates
  S and P written and read back once. Nsight Compute's DRAM bytes land between the two: caches
  absorb re-reads of small operands but not N×M matrices larger than the L2 cache.

Arguments: ``B`` batch, ``H`` heads, ``N`` queries, ``d`` head_dim, ``M`` keys (defaults to N),
``itemsize`` bytes per element (4 for float32). All counts are Python ints.
"""

from __future__ import annotations

from kernels.launching import cdiv

__all__ = ["bytes_scores", "bytes_softmax_rows", "bytes_softmax_online", "bytes_pv", "bytes_naive",
           "bytes_fused_rows", "bytes_flash", "bytes_flash_tiles", "compulsory_bytes_naive", "compulsory_bytes_fused",
           "footprint_naive", "causal_pairs", "flops_attention"]


def _check(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _keys(N: int, M: int | None) -> int:
    return N if M is None else M


def causal_pairs(N: int, M: int | None = None) -> int:
    """Number of (query i, key j) pairs with j <= i: what a causal row-by-row pass visits."""
    M = _keys(N, M)
    _check(N=N, M=M)
    full = min(N, M)  # rows 0..full-1 see i + 1 keys, later rows see all M keys
    return full * (full + 1) // 2 + (N - full) * M


def bytes_scores(B: int, H: int, N: int, d: int, M: int | None = None, itemsize: int = 4) -> int:
    """``scores_kernel``: each of the B·H·N·M threads loads a query row and a key row (2d) and stores 1."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, d=d, M=M, itemsize=itemsize)
    scores = B * H * N * M
    return (scores * 2 * d + scores) * itemsize


def bytes_softmax_rows(rows: int, cols: int, itemsize: int = 4) -> int:
    """``softmax_rows_kernel``: three reads of every element (max, sum, normalise) and one write."""
    _check(rows=rows, cols=cols, itemsize=itemsize)
    return 4 * rows * cols * itemsize


def bytes_softmax_online(rows: int, cols: int, itemsize: int = 4) -> int:
    """``softmax_online_kernel``: two reads of every element (running stats, normalise) and one write."""
    _check(rows=rows, cols=cols, itemsize=itemsize)
    return 3 * rows * cols * itemsize


def bytes_pv(B: int, H: int, N: int, d: int, M: int | None = None, itemsize: int = 4) -> int:
    """``pv_kernel``: each of the B·H·N·d threads loads a row of P and a column of V (2M) and stores 1."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, d=d, M=M, itemsize=itemsize)
    outputs = B * H * N * d
    return (outputs * 2 * M + outputs) * itemsize


def bytes_naive(B: int, H: int, N: int, d: int, M: int | None = None, itemsize: int = 4) -> int:
    """``attention_v1_naive``: the three kernels together; S and P are written and read in global memory."""
    M = _keys(N, M)
    return (bytes_scores(B, H, N, d, M, itemsize) + bytes_softmax_rows(B * H * N, M, itemsize)
            + bytes_pv(B, H, N, d, M, itemsize))


def bytes_fused_rows(B: int, H: int, N: int, d: int, M: int | None = None, *, causal: bool = False,
                     itemsize: int = 4) -> int:
    """``attention_v2_fused_rows``: Q read once, K and V read once per query row (only keys j <= i
    when causal), O written once; nothing of size N×M."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, d=d, M=M, itemsize=itemsize)
    pairs = causal_pairs(N, M) if causal else N * M
    return B * H * (N * d + 2 * pairs * d + N * d) * itemsize


def bytes_flash(B: int, H: int, N: int, d: int, block_q: int, itemsize: int = 4) -> int:
    """Flash attention with query tiles of ``block_q`` rows (M = N, not causal): Q read once, K and V
    read once per query tile (ceil(N / block_q) times), O written once."""
    _check(B=B, H=H, N=N, d=d, block_q=block_q, itemsize=itemsize)
    if block_q == 0:
        raise ValueError("block_q must be >= 1, got 0")
    query_tiles = cdiv(N, block_q)
    return B * H * (N * d + 2 * query_tiles * N * d + N * d) * itemsize


def bytes_flash_tiles(B: int, H: int, N: int, d: int, block_q: int, M: int | None = None, *, causal: bool = False,
                      kv_lens=None, itemsize: int = 4) -> int:
    """The flash rungs with masks (``attention_v4_flash`` to ``attention_v6_register_tiles``) with query
    tiles of ``block_q`` rows: Q read once, O written once, and each query tile reads once the K and V
    rows it needs: the first ``kv_lens[b]`` keys (all M when ``kv_lens`` is None) and, when causal,
    only keys up to the tile's last query row that exists (so the last, partial tile stops at key
    N - 1 even when M > N). Equals ``bytes_flash`` when not causal, M = N and kv_lens is None."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, d=d, M=M, block_q=block_q, itemsize=itemsize)
    if block_q == 0:
        raise ValueError("block_q must be >= 1, got 0")
    lens = [M] * B if kv_lens is None else [int(n) for n in kv_lens]
    if len(lens) != B or any(not 0 <= n <= M for n in lens):
        raise ValueError(f"kv_lens must hold B={B} lengths in [0, {M}], got {lens}")
    keys = 0   # key rows read, summed over query tiles and batch elements (each head reads as many)
    for kv_len in lens:
        for tile_start in range(0, N, block_q):
            keys += min(kv_len, tile_start + block_q, N) if causal else kv_len
    return (B * H * 2 * N * d + H * 2 * keys * d) * itemsize


def compulsory_bytes_naive(B: int, H: int, N: int, d: int, M: int | None = None, itemsize: int = 4) -> int:
    """At least: Q, K, V read once, S written then read, P written then read, O written once."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, d=d, M=M, itemsize=itemsize)
    return B * H * (N * d + 2 * M * d + 4 * N * M + N * d) * itemsize


def compulsory_bytes_fused(B: int, H: int, N: int, d: int, M: int | None = None, itemsize: int = 4) -> int:
    """At least: Q, K, V read once and O written once; linear in N and M."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, d=d, M=M, itemsize=itemsize)
    return B * H * (N * d + 2 * M * d + N * d) * itemsize


def footprint_naive(B: int, H: int, N: int, M: int | None = None, itemsize: int = 4) -> int:
    """Extra global memory the naive pipeline allocates: S and P, two B·H·N·M arrays."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, M=M, itemsize=itemsize)
    return 2 * B * H * N * M * itemsize


def flops_attention(B: int, H: int, N: int, d: int, M: int | None = None, *, causal: bool = False) -> int:
    """Multiply-adds of QKᵀ and PV counted as 2 FLOPs each: 4·B·H·(query, key pairs)·d."""
    M = _keys(N, M)
    _check(B=B, H=H, N=N, d=d, M=M)
    pairs = causal_pairs(N, M) if causal else N * M
    return 4 * B * H * pairs * d
