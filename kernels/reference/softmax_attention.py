"""Softmax and scaled dot-product attention, with causal, variable-length, sliding-window and GQA masks.

Tensors are ``(batch, heads, seq, head_dim)``, like torch's SDPA; K and V may have fewer heads
(``kv_heads``) than Q, and query head ``h`` reads KV head ``h // (heads // kv_heads)``.
"""

import numpy as np

from ._checks import _check_bool, _check_heads, _check_kv_lens, _check_scale, _float64, _int_scalar, _real_array

__all__ = ["softmax", "repeat_kv_heads", "attention_scores", "attention_mask", "attention"]


def softmax(x, axis=-1):
    """Numerically stable softmax along ``axis``, in float64.

    x: any shape, real numbers or -inf (a masked logit). NaN and +inf are rejected.
    Returns: float64, the shape of x; each slice along ``axis`` sums to 1, except a slice that
    is entirely -inf (a query that sees no key), which gives zeros instead of 0/0 = NaN.

    Subtracting the row maximum first keeps every exponent <= 0, so exp never overflows:
    softmax(x) == softmax(x - c) for any constant c per row.
    """
    x = _real_array(x, "x").astype(np.float64)
    if np.any(np.isnan(x)) or np.any(x == np.inf):
        raise ValueError("x must not contain NaN or +inf (-inf marks a masked entry)")
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension, got a scalar")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be in [{-x.ndim}, {x.ndim}) for x of shape {x.shape}, got {axis}")
    if x.shape[axis] == 0:
        return np.zeros_like(x)
    # Naive traffic for R rows of length C: reads x twice and e twice, writes m, e, s and out.
    m = np.max(x, axis=axis, keepdims=True)                  # reads x (R*C); writes m (R)
    m = np.where(m == -np.inf, 0.0, m)                       # all -inf row: avoid -inf - -inf = NaN
    e = np.exp(x - m)                                        # reads x, m; writes e (R*C)
    s = np.sum(e, axis=axis, keepdims=True)                  # reads e; writes s (R)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)  # reads e, s; writes out (R*C)


def repeat_kv_heads(kv, heads):
    """Expand KV heads for grouped-query attention: output head h is input head h // group.

    kv: (batch, kv_heads, seq, head_dim); heads: a positive multiple of kv_heads.
    Returns: (batch, heads, seq, head_dim), float64, with group = heads // kv_heads copies of
    each KV head next to each other (like torch's ``repeat_interleave`` on dim 1).
    """
    kv = _float64(kv, "kv", 4, "(batch, kv_heads, seq, head_dim)")
    heads = _int_scalar(heads, "heads", 1)
    _check_heads(heads, kv.shape[1], "heads", "kv")
    return np.repeat(kv, heads // kv.shape[1], axis=1)


def _check_qk(q, k):
    q = _float64(q, "q", 4, "(batch, heads, seq_q, head_dim)")
    k = _float64(k, "k", 4, "(batch, kv_heads, seq_k, head_dim)")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(
            f"k must match q in batch and head_dim: q has shape {q.shape} (batch {q.shape[0]}, "
            f"head_dim {q.shape[3]}), k has shape {k.shape}")
    if q.shape[3] < 1:
        raise ValueError(f"head_dim must be at least 1, got q of shape {q.shape}")
    _check_heads(q.shape[1], k.shape[1])
    return q, k


def attention_scores(q, k, scale=None):
    """Attention scores S = scale * Q K^T, before any mask.

    q: (batch, heads, N, d); k: (batch, kv_heads, M, d) with heads a multiple of kv_heads.
    scale: default 1 / sqrt(d).
    Returns: S, float64 (batch, heads, N, M); S[b, h, i, j] = scale * q[b, h, i] . k[b, h // group, j].
    """
    q, k = _check_qk(q, k)
    scale = _check_scale(scale, q.shape[3])
    k = repeat_kv_heads(k, q.shape[1])
    # Naive traffic: reads every q row M times and every k row N times; writes S (N*M per head).
    return scale * (q @ np.swapaxes(k, -1, -2))


def attention_mask(N, M, causal=False, kv_len=None, window=None):
    """Which keys each query may attend to. True means visible.

    N: number of queries, M: number of keys (integers >= 0).
    causal: key j is visible to query i only if j <= i. This is top-left aligned, like
        ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, also when N != M:
        query 0 sees key 0 only, whatever M is. (flash-attn aligns bottom-right instead.)
    kv_len: keys at positions j >= kv_len do not exist (an integer in [0, M], or None for M).
    window: sliding-window attention of width w >= 1: key j is visible only if i - w < j <= i,
        so each query sees itself and the w - 1 keys before it. A window looks back only, so it
        implies the causal bound; ``causal`` may be left False.
    Returns: bool (N, M). A row with no True entry is a query that sees nothing; attention gives 0
    for it.
    """
    N = _int_scalar(N, "N", 0)
    M = _int_scalar(M, "M", 0)
    causal = _check_bool(causal, "causal")
    if kv_len is not None:
        kv_len = _int_scalar(kv_len, "kv_len", 0)
        if kv_len > M:
            raise ValueError(f"kv_len must be at most M = {M}, got {kv_len}")
    if window is not None:
        window = _int_scalar(window, "window", 1)
    i = np.arange(N)[:, None]   # query positions, down the rows
    j = np.arange(M)[None, :]   # key positions, across the columns
    visible = np.ones((N, M), dtype=bool)
    if kv_len is not None:
        visible &= j < kv_len
    if causal or window is not None:
        visible &= j <= i
    if window is not None:
        visible &= j > i - window
    return visible


def attention(q, k, v, *, causal=False, kv_lens=None, window=None, scale=None):
    """Scaled dot-product attention O = softmax(scale * Q K^T + mask) V, in float64.

    q: (batch, heads, N, d); k, v: (batch, kv_heads, M, d), heads a multiple of kv_heads;
    query head h reads KV head h // (heads // kv_heads) (grouped-query attention).
    causal, window: see ``attention_mask``. kv_lens: (batch,) integers in [0, M]; keys at
    positions >= kv_lens[b] do not exist for batch b. scale: default 1 / sqrt(d).
    Returns: O, float64 (batch, heads, N, d). A query row that sees no key (kv_lens[b] == 0, or
    a sliding window lying entirely at positions >= kv_lens[b]) is 0; torch's SDPA gives NaN or
    0 there, depending on its version and backend.
    """
    q, k = _check_qk(q, k)
    v = _float64(v, "v", 4, "(batch, kv_heads, seq_k, head_dim)")
    if v.shape != k.shape:
        raise ValueError(f"v must have the shape of k {k.shape}, got {v.shape}")
    batch, heads, N, _ = q.shape
    M = k.shape[2]
    kv_lens = _check_kv_lens(kv_lens, batch, M)
    # Naive traffic per (batch, head): reads Q (N*d), K and V (M*d each, once per query row);
    # writes S and P (N*M each) and reads them back; writes O (N*d).
    s = attention_scores(q, k, scale)                                   # writes S (N*M)
    visible = np.stack([attention_mask(N, M, causal, int(kv_lens[b]), window)
                        for b in range(batch)])                         # (batch, N, M)
    s = np.where(visible[:, None], s, -np.inf)                          # reads S; writes S
    p = softmax(s, axis=-1)                                             # reads S; writes P (N*M)
    return p @ repeat_kv_heads(v, heads)                                # reads P, V; writes O
