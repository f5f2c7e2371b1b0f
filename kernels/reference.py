"""NumPy references for every kernel of the course, computed in float64.

Each function is written to be read, not to be fast: it is the definition a kernel is checked
against. Shapes are in every docstring; the naive references say in comments what they read and
write, so the traffic of a kernel can be compared with the traffic of the plain algorithm.

Attention (tensors are ``(batch, heads, seq, head_dim)``, like torch's SDPA):

- ``softmax(x, axis=-1)``: stable softmax; a row that is entirely ``-inf`` gives zeros
- ``repeat_kv_heads(kv, heads)``: grouped-query attention, query head h reads KV head h // group
- ``attention_scores(q, k, scale=None)``: S = scale * Q K^T, before masking
- ``attention_mask(N, M, causal=False, kv_len=None, window=None)``: which keys each query sees
- ``attention(q, k, v, *, causal=False, kv_lens=None, window=None, scale=None)``
- ``gather_kv``, ``paged_attention``, ``build_paged_cache``: a paged KV cache and its decode step
- ``gemm(a, b)``

Quantization and number formats:

- ``quantize_int8`` / ``dequantize_int8``: symmetric int8, per tensor or per channel
- ``quantize_uint8_asymmetric`` / ``dequantize_uint8_asymmetric``: uint8 with a zero point
- ``gemm_int8``: int8 x int8 products accumulated in int32, then scaled
- ``pack_int4`` / ``unpack_int4``, ``quantize_int4_groups`` / ``dequantize_int4_groups``
- ``quantize_q8_0`` / ``dequantize_q8_0``, ``quantize_q4_0`` / ``dequantize_q4_0``: the GGUF
  (llama.cpp) block formats, bit for bit
- ``round_to(x, fmt)``: the nearest fp16, bf16 or fp8 (e4m3) value

Every public function checks its input and raises ``TypeError`` (wrong kind of value or dtype) or
``ValueError`` (wrong shape or value) naming the argument, what it expected and what it received.
"""

import math
import numbers

import numpy as np

__all__ = [
    "softmax", "repeat_kv_heads", "attention_scores", "attention_mask", "attention",
    "gather_kv", "paged_attention", "build_paged_cache", "gemm",
    "quantize_int8", "dequantize_int8", "quantize_uint8_asymmetric", "dequantize_uint8_asymmetric",
    "gemm_int8", "pack_int4", "unpack_int4", "quantize_int4_groups", "dequantize_int4_groups",
    "GGUF_BLOCK_SIZE", "Q8_0_BLOCK_BYTES", "Q4_0_BLOCK_BYTES",
    "quantize_q8_0", "dequantize_q8_0", "quantize_q4_0", "dequantize_q4_0",
    "FLOAT_FORMATS", "round_to",
]

# The low-precision float dtypes of ml_dtypes (bfloat16, float8_*) have numpy kind "V";
# they are accepted by name so that this module needs nothing beyond numpy.
_ML_DTYPE_PREFIXES = ("bfloat16", "float8", "float6", "float4")
# A float32 scale is never below the smallest normal float32: no division by zero for an
# all-zero channel, and no subnormal scale whose rounding would break the error bound.
_SMALLEST_SCALE = float(np.finfo(np.float32).tiny)


# ------------------------------------------------------------------------------------------
# Input checks shared by every function
# ------------------------------------------------------------------------------------------

def _real_array(x, name, ndim=None, dims=None):
    """``x`` as an ndarray of real numbers (any int or float dtype), checked for ndim."""
    arr = np.asarray(x)
    kind_ok = arr.dtype.kind in "iuf" or arr.dtype.name.startswith(_ML_DTYPE_PREFIXES)
    if not kind_ok:
        raise TypeError(f"{name} must hold real numbers (an int or float dtype), got dtype {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        described = f" {dims}" if dims else ""
        raise ValueError(f"{name} must have {ndim} dimensions{described}, got shape {arr.shape}")
    return arr


def _float64(x, name, ndim=None, dims=None):
    """``x`` converted to float64, checked for ndim and for NaN or infinity."""
    arr = _real_array(x, name, ndim, dims).astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, but it contains NaN or infinity")
    return arr


def _int_array(x, name, shape=None, dims=None):
    """``x`` as an integer ndarray (any int dtype) of the given shape."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype (such as int32), got dtype {arr.dtype}")
    if shape is not None and arr.shape != tuple(shape):
        described = f" {dims}" if dims else ""
        raise ValueError(f"{name} must have shape {tuple(shape)}{described}, got shape {arr.shape}")
    return arr


def _int_scalar(value, name, minimum):
    """A Python or NumPy integer (not a bool) that is at least ``minimum``, as an int."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _check_bool(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _check_scale(scale, head_dim):
    """The softmax scale: 1/sqrt(head_dim) by default, else a finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__} {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _check_heads(heads, kv_heads, q_name="q", kv_name="k"):
    if kv_heads < 1 or heads < 1 or heads % kv_heads != 0:
        raise ValueError(
            f"the heads of {q_name} ({heads}) must be a positive multiple of the kv_heads of "
            f"{kv_name} ({kv_heads}), so that each KV head serves a whole group of query heads")


# ------------------------------------------------------------------------------------------
# Softmax and attention
# ------------------------------------------------------------------------------------------

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


def _check_kv_lens(kv_lens, batch, M, name="kv_lens"):
    if kv_lens is None:
        return np.full(batch, M, dtype=np.int64)
    kv_lens = _int_array(kv_lens, name, (batch,), "(batch,)")
    if np.any(kv_lens < 0) or np.any(kv_lens > M):
        raise ValueError(f"{name} must lie in [0, M] = [0, {M}], got {kv_lens.tolist()}")
    return kv_lens.astype(np.int64)


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


# ------------------------------------------------------------------------------------------
# Paged KV cache
# ------------------------------------------------------------------------------------------

def _check_block_table_entries(block_table, context_len, block_size, num_blocks, name):
    """The pages a sequence uses must index the block pool; the unused tail may hold anything."""
    pages = -(-context_len // block_size)
    if pages > block_table.shape[-1]:
        raise ValueError(
            f"{name} has {block_table.shape[-1]} entries per sequence, but a context of "
            f"{context_len} keys in blocks of {block_size} needs {pages}")
    used = block_table[:pages]
    if np.any(used < 0) or np.any(used >= num_blocks):
        raise ValueError(
            f"{name} entries in use must lie in [0, num_blocks) = [0, {num_blocks}), got {used.tolist()}")
    return pages


def gather_kv(cache, block_table, context_len):
    """The contiguous keys (or values) of one sequence, read through its block table.

    cache: (num_blocks, kv_heads, block_size, head_dim); block_table: (max_blocks_per_seq,)
    integers; context_len: integer >= 0. Position t of the sequence lives in slot
    t % block_size of block ``block_table[t // block_size]``. Entries past the pages in use are
    never read (they may be padding such as -1).
    Returns: float64 (kv_heads, context_len, head_dim).
    """
    cache = _real_array(cache, "cache", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    block_table = _int_array(block_table, "block_table")
    if block_table.ndim != 1:
        raise ValueError(f"block_table must have 1 dimension (max_blocks_per_seq,), got shape {block_table.shape}")
    context_len = _int_scalar(context_len, "context_len", 0)
    num_blocks, kv_heads, block_size, head_dim = cache.shape
    pages = _check_block_table_entries(block_table, context_len, block_size, num_blocks, "block_table")
    # Reads one table entry and one page (kv_heads * block_size * head_dim) per page in use.
    chunks = [cache[block_table[p]].astype(np.float64) for p in range(pages)]
    gathered = np.concatenate(chunks, axis=1) if chunks else np.zeros((kv_heads, 0, head_dim))
    return gathered[:, :context_len]


def paged_attention(q, k_cache, v_cache, block_tables, context_lens, *, scale=None):
    """Decode-step attention over a paged KV cache, in float64.

    q: (num_seqs, heads, d), one query per sequence (the newest token), which sees all of its
    sequence's keys (no causal mask is needed for the last position).
    k_cache, v_cache: (num_blocks, kv_heads, block_size, d), heads a multiple of kv_heads.
    block_tables: (num_seqs, max_blocks_per_seq) integers; context_lens: (num_seqs,) integers.
    Only the first ceil(context_lens[s] / block_size) entries of row s are read.
    scale: default 1 / sqrt(d).
    Returns: float64 (num_seqs, heads, d); a sequence with context length 0 gives zeros.
    """
    q = _float64(q, "q", 3, "(num_seqs, heads, head_dim)")
    k_cache = _real_array(k_cache, "k_cache", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    v_cache = _real_array(v_cache, "v_cache", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache must have the shape of k_cache {k_cache.shape}, got {v_cache.shape}")
    num_seqs, heads, head_dim = q.shape
    num_blocks, kv_heads, block_size, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(f"k_cache head_dim ({cache_head_dim}) must equal q head_dim ({head_dim})")
    _check_heads(heads, kv_heads, "q", "k_cache")
    block_tables = _int_array(block_tables, "block_tables")
    if block_tables.ndim != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(
            f"block_tables must have shape (num_seqs, max_blocks_per_seq) with num_seqs = {num_seqs}, "
            f"got shape {block_tables.shape}")
    context_lens = _int_array(context_lens, "context_lens", (num_seqs,), "(num_seqs,)")
    if np.any(context_lens < 0):
        raise ValueError(f"context_lens must be >= 0, got {context_lens.tolist()}")
    for s in range(num_seqs):
        _check_block_table_entries(block_tables[s], int(context_lens[s]), block_size, num_blocks,
                                   f"block_tables[{s}]")
    out = np.zeros((num_seqs, heads, head_dim))
    for s in range(num_seqs):
        # Reads the pages in use of k_cache and v_cache once; writes one output row per head.
        keys = gather_kv(k_cache, block_tables[s], int(context_lens[s]))
        values = gather_kv(v_cache, block_tables[s], int(context_lens[s]))
        if not (np.all(np.isfinite(keys)) and np.all(np.isfinite(values))):
            raise ValueError(f"k_cache and v_cache must be finite in the slots of sequence {s}, "
                             "but they hold NaN or infinity there")
        out[s] = attention(q[s][None, :, None, :], keys[None], values[None], scale=scale)[0, :, 0, :]
    return out


def build_paged_cache(k, v, block_size, rng, context_lens=None, *, spare_blocks=1, fill_value=np.nan):
    """Scatter contiguous K/V into a shuffled pool of blocks, as a serving engine would.

    k, v: (num_seqs, kv_heads, M, head_dim) float arrays, sequence s holding its keys at
    positions 0 .. context_lens[s] - 1. block_size: integer >= 1. rng: a numpy Generator that
    shuffles the pool. context_lens: (num_seqs,) integers in [0, M], default M for all.
    spare_blocks: extra blocks that belong to no sequence. fill_value: what every slot that holds
    no key contains (the tail of each partial last page and the spare blocks); NaN by default,
    so a kernel that reads past a context length shows it.
    Returns: (k_cache, v_cache, block_tables, context_lens):
    k_cache, v_cache (num_blocks, kv_heads, block_size, head_dim) in the dtype of k;
    block_tables (num_seqs, max_blocks_per_seq) int32, padded with -1 past each sequence's pages;
    context_lens (num_seqs,) int32.
    """
    k = _real_array(k, "k", 4, "(num_seqs, kv_heads, seq, head_dim)")
    v = _real_array(v, "v", 4, "(num_seqs, kv_heads, seq, head_dim)")
    if v.shape != k.shape or v.dtype != k.dtype:
        raise ValueError(f"v must match k in shape and dtype: k is {k.shape} {k.dtype}, v is {v.shape} {v.dtype}")
    if k.dtype.kind in "iu":
        raise TypeError(f"k and v must have a float dtype, got {k.dtype}")
    block_size = _int_scalar(block_size, "block_size", 1)
    spare_blocks = _int_scalar(spare_blocks, "spare_blocks", 0)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    num_seqs, kv_heads, M, head_dim = k.shape
    context_lens = _check_kv_lens(context_lens, num_seqs, M, "context_lens")
    pages = [-(-int(n) // block_size) for n in context_lens]
    num_blocks = sum(pages) + spare_blocks
    pool_order = rng.permutation(num_blocks)      # physical block of the i-th page handed out
    k_cache = np.full((num_blocks, kv_heads, block_size, head_dim), fill_value, dtype=k.dtype)
    v_cache = np.full_like(k_cache, fill_value)
    block_tables = np.full((num_seqs, max(1, max(pages, default=0))), -1, dtype=np.int32)
    handed_out = 0
    for s in range(num_seqs):
        for p in range(pages[s]):
            block = pool_order[handed_out]
            handed_out += 1
            block_tables[s, p] = block
            start, stop = p * block_size, min((p + 1) * block_size, int(context_lens[s]))
            k_cache[block, :, : stop - start] = k[s, :, start:stop]
            v_cache[block, :, : stop - start] = v[s, :, start:stop]
    return k_cache, v_cache, block_tables, context_lens.astype(np.int32)


def gemm(a, b):
    """Matrix product C = A B in float64.

    a: (M, K); b: (K, N). Returns: float64 (M, N).
    """
    a = _float64(a, "a", 2, "(M, K)")
    b = _float64(b, "b", 2, "(K, N)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape} (K = {a.shape[1]}), "
                         f"b is {b.shape} (K = {b.shape[0]})")
    # Naive traffic: C[i, j] reads row i of A and column j of B, so A is read N times and
    # B M times (2*M*N*K loads); C is written once (M*N stores).
    return a @ b


# ------------------------------------------------------------------------------------------
# Integer quantization
# ------------------------------------------------------------------------------------------

def _reduce_all_but(x, axis, reduce):
    """Reduce over every axis except ``axis`` (all axes when axis is None), keeping dims."""
    if x.size == 0:
        raise ValueError(f"x must not be empty to choose a scale, got shape {x.shape}")
    if axis is None:
        return reduce(x, axis=None, keepdims=True).reshape(())
    if x.ndim == 0:
        raise ValueError("axis must be None for a scalar x")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"axis must be an integer or None, got {type(axis).__name__} {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be in [{-x.ndim}, {x.ndim}) for x of shape {x.shape}, got {axis}")
    others = tuple(i for i in range(x.ndim) if i != axis % x.ndim)
    return reduce(x, axis=others, keepdims=True)


def _float32_scale(value, round_up=False):
    """float64 scale(s) -> float32, at least the smallest normal float32, optionally rounded up."""
    with np.errstate(over="ignore"):     # an overflow becomes inf, reported just below
        scale = np.asarray(value).astype(np.float32)
    if round_up:
        scale = np.where(scale.astype(np.float64) < value, np.nextafter(scale, np.float32(np.inf)), scale)
    if not np.all(np.isfinite(scale)):
        raise ValueError("x is too large: its scale does not fit in float32")
    return np.maximum(scale, np.float32(_SMALLEST_SCALE))


def quantize_int8(x, axis=None):
    """Symmetric int8 quantization: x ~ q * scale with q in [-127, 127].

    x: any shape, finite reals. axis: None for one scale for the whole tensor (per tensor), or
    the axis that gets one scale per index (per channel, e.g. axis=0 for one scale per row).
    scale = amax / 127 in float32, amax the largest |x| of the tensor or channel (at least the
    smallest normal float32, so an all-zero channel gets a tiny positive scale, not 0).
    q = rint(x / scale): round half to even, like ``np.rint`` and the GPU's default rounding.
    The range is [-127, 127], not [-128, 127], so that -x quantizes to -q.
    Returns: (q int8 shape of x, scale float32) with scale of shape () per tensor, or the shape of
    x with 1 on every axis except ``axis`` per channel, so ``q * scale`` broadcasts.
    Error: |x - q * scale| <= scale / 2.
    """
    x = _float64(x, "x")
    scale = _float32_scale(_reduce_all_but(np.abs(x), axis, np.max) / 127)
    q = np.clip(np.rint(x / scale), -127, 127).astype(np.int8)
    return q, scale


def dequantize_int8(q, scale):
    """q * scale in float64. q: int8, any shape; scale: float, broadcastable to q."""
    q = _int_array(q, "q")
    return q.astype(np.float64) * _float64(scale, "scale")


def quantize_uint8_asymmetric(x, axis=None):
    """Asymmetric uint8 quantization: x ~ (q - zero_point) * scale with q in [0, 255].

    x: any shape, finite reals. axis: None (per tensor) or the per-channel axis, as in
    ``quantize_int8``. The range [lo, hi] = [min(x, 0), max(x, 0)] always contains 0, so zero
    is stored exactly (padding and ReLU outputs stay exact).
    scale = (hi - lo) / 255, rounded up to float32 so that the 256 levels cover [lo, hi];
    zero_point = rint(-lo / scale) in [0, 255]; q = clip(rint(x / scale) + zero_point, 0, 255).
    Returns: (q uint8 shape of x, scale float32, zero_point int32), scale and zero_point shaped as
    in ``quantize_int8``. zero_point is int32 so that q - zero_point cannot wrap around.
    Error: |x - (q - zero_point) * scale| <= scale / 2.
    """
    x = _float64(x, "x")
    lo = np.minimum(_reduce_all_but(x, axis, np.min), 0.0)
    hi = np.maximum(_reduce_all_but(x, axis, np.max), 0.0)
    scale = _float32_scale((hi - lo) / 255, round_up=True)
    zero_point = np.clip(np.rint(-lo / scale), 0, 255).astype(np.int32)
    q = np.clip(np.rint(x / scale) + zero_point, 0, 255).astype(np.uint8)
    return q, scale, zero_point


def dequantize_uint8_asymmetric(q, scale, zero_point):
    """(q - zero_point) * scale in float64. q: uint8; scale, zero_point broadcastable to q."""
    q = _int_array(q, "q")
    zero_point = _int_array(zero_point, "zero_point")
    return (q.astype(np.float64) - zero_point) * _float64(scale, "scale")


# int8 products are at most 128 * 128 = 2**14 in magnitude, so an int32 sum of K of them is safe
# while K <= 2**31 // 2**14.
_INT8_GEMM_MAX_K = (2**31 - 1) // 2**14


def gemm_int8(a_q, a_scale, b_q, b_scale):
    """Quantized GEMM: int8 products accumulated in int32, then scaled once, in float64.

    a_q: (M, K) int8; a_scale: float32 of shape () (per tensor) or (M, 1) (per row, from
    ``quantize_int8(a, axis=0)``). b_q: (K, N) int8; b_scale: shape () or (1, N) (per column,
    from ``quantize_int8(b, axis=1)``). A scale along K could not be taken out of the sum.
    K is at most 131071, so the int32 accumulator cannot overflow.
    Returns: float64 (M, N) = (a_q @ b_q computed in int32) * a_scale * b_scale.
    """
    a_q = _int_array(a_q, "a_q")
    b_q = _int_array(b_q, "b_q")
    for name, arr, dims in (("a_q", a_q, "(M, K)"), ("b_q", b_q, "(K, N)")):
        if arr.dtype != np.int8:
            raise TypeError(f"{name} must have dtype int8, got {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"{name} must have 2 dimensions {dims}, got shape {arr.shape}")
    (M, K), (K_b, N) = a_q.shape, b_q.shape
    if K != K_b:
        raise ValueError(f"inner dimensions differ: a_q is {a_q.shape}, b_q is {b_q.shape}")
    if K > _INT8_GEMM_MAX_K:
        raise ValueError(f"K must be at most {_INT8_GEMM_MAX_K} for an int32 accumulator, got {K}")
    a_scale = _float64(a_scale, "a_scale")
    b_scale = _float64(b_scale, "b_scale")
    if a_scale.shape not in ((), (1, 1), (M, 1)):
        raise ValueError(f"a_scale must have shape () or ({M}, 1), got {a_scale.shape}")
    if b_scale.shape not in ((), (1, 1), (1, N)):
        raise ValueError(f"b_scale must have shape () or (1, {N}), got {b_scale.shape}")
    # Reads A (M*K int8) N times and B (K*N int8) M times; writes C once. Integer products and
    # sums are exact, so the only rounding is in the final scaling.
    accumulator = a_q.astype(np.int32) @ b_q.astype(np.int32)
    return accumulator * a_scale * b_scale


def pack_int4(q):
    """Pack signed 4-bit integers two per byte.

    q: (..., K) integers in [-8, 7], K even. Each value is stored as its 4-bit two's complement
    (-1 -> 0b1111). Byte i holds element 2i in its low nibble and element 2i + 1 in its high
    nibble. (GGUF's Q4_0 uses another layout; see ``quantize_q4_0``.)
    Returns: uint8 (..., K // 2).
    """
    q = _int_array(q, "q")
    if q.ndim == 0 or q.shape[-1] % 2:
        raise ValueError(f"q must have an even last dimension to pack two per byte, got shape {q.shape}")
    if q.size and (q.min() < -8 or q.max() > 7):
        raise ValueError(f"q must lie in [-8, 7] to fit in 4 bits, got values in [{q.min()}, {q.max()}]")
    nibbles = (q.astype(np.int16) & 0x0F).astype(np.uint8)
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)


def unpack_int4(packed):
    """Inverse of ``pack_int4``. packed: uint8 (..., K // 2). Returns: int8 (..., K) in [-8, 7]."""
    packed = _int_array(packed, "packed")
    if packed.dtype != np.uint8:
        raise TypeError(f"packed must have dtype uint8, got {packed.dtype}")
    if packed.ndim == 0:
        raise ValueError("packed must have at least one dimension, got a scalar")
    low, high = packed & 0x0F, packed >> 4
    nibbles = np.stack([low, high], axis=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    return np.where(nibbles >= 8, nibbles.astype(np.int16) - 16, nibbles).astype(np.int8)


def quantize_int4_groups(x, group_size):
    """Symmetric int4 quantization with one scale per group of ``group_size`` along the last axis.

    x: (..., K) finite reals, K a multiple of group_size and even.
    scale = amax / 7 per group (float32), q = rint(x / scale) (half to even). int4 holds
    [-8, 7]; this quantizer uses [-7, 7] so that -x quantizes to -q (Q4_0 uses -8 instead, with
    a signed scale). Error: |x - q * scale| <= scale / 2.
    Returns: (packed uint8 (..., K // 2) as in ``pack_int4``, scales float32 (..., K // group_size)).
    """
    x = _float64(x, "x")
    group_size = _int_scalar(group_size, "group_size", 1)
    if x.ndim == 0 or x.shape[-1] % group_size or x.shape[-1] % 2:
        raise ValueError(
            f"the last dimension of x must be even and a multiple of group_size = {group_size}, "
            f"got shape {x.shape}")
    groups = x.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    scales = _float32_scale(np.max(np.abs(groups), axis=-1, initial=0.0) / 7)
    q = np.clip(np.rint(groups / scales[..., None]), -8, 7).astype(np.int8)
    return pack_int4(q.reshape(x.shape)), scales


def dequantize_int4_groups(packed, scales):
    """Inverse of ``quantize_int4_groups``: float64 (..., K).

    packed: uint8 (..., K // 2); scales: (..., K // group_size), the group size being inferred.
    """
    q = unpack_int4(packed)
    scales = _float64(scales, "scales")
    if scales.shape[:-1] != q.shape[:-1] or scales.ndim == 0 or scales.shape[-1] == 0 \
            or q.shape[-1] % scales.shape[-1]:
        raise ValueError(
            f"scales must have shape (..., K // group_size) matching packed {packed.shape} "
            f"(K = {q.shape[-1]}), got {scales.shape}")
    group_size = q.shape[-1] // scales.shape[-1]
    return q.astype(np.float64) * np.repeat(scales, group_size, axis=-1)


# ------------------------------------------------------------------------------------------
# GGUF block formats (llama.cpp), bit for bit
# ------------------------------------------------------------------------------------------

GGUF_BLOCK_SIZE = 32     # values per block, in Q8_0 and Q4_0
Q8_0_BLOCK_BYTES = 34    # fp16 scale d (2 bytes) + 32 int8 values
Q4_0_BLOCK_BYTES = 18    # fp16 scale d (2 bytes) + 32 4-bit values, two per byte


def _gguf_blocks(x):
    """x (..., K) -> float32 blocks (n_blocks, 32), as llama.cpp quantizes float32 rows."""
    x = _float64(x, "x")
    if x.ndim == 0 or x.shape[-1] % GGUF_BLOCK_SIZE:
        raise ValueError(f"the last dimension of x must be a multiple of {GGUF_BLOCK_SIZE}, got shape {x.shape}")
    with np.errstate(over="ignore"):     # beyond float32: inf, then a scale that cannot be stored
        return x.astype(np.float32).reshape(-1, GGUF_BLOCK_SIZE)


def _inverse_or_zero(d):
    """1 / d in float32; 0 for an all-zero block, as llama.cpp does, and 0 for a block so small
    (|d| <= 2**-128) that 1 / d overflows, where llama.cpp's result is undefined (its fp16 d is 0)."""
    with np.errstate(divide="ignore", over="ignore"):
        inverse = np.float32(1) / d
    return np.where(np.isfinite(inverse), inverse, np.float32(0))


def _fp16_scale_bytes(d):
    """Block scales d (n_blocks, 1) float32 -> their little-endian fp16 bytes (n_blocks, 2)."""
    with np.errstate(over="ignore"):     # an overflow becomes inf, reported just below
        d16 = d.astype("<f2")
    if not np.all(np.isfinite(d16)):
        raise ValueError("x is too large: a block scale does not fit in fp16 (max 65504)")
    return d16.view(np.uint8)


def _round_half_away_from_zero(v):
    """C's roundf on float32 values, computed in float64 where |v| + 0.5 is exact."""
    v = v.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _gguf_bytes(data, block_bytes, fmt):
    """Check a uint8 array (..., n_blocks * block_bytes) and split it into (n_blocks, block_bytes)."""
    data = _int_array(data, "data")
    if data.dtype != np.uint8:
        raise TypeError(f"data must have dtype uint8 (the {fmt} bytes), got {data.dtype}")
    if data.ndim == 0 or data.shape[-1] % block_bytes:
        raise ValueError(f"the last dimension of data must be a multiple of {block_bytes} ({fmt} block size), "
                         f"got shape {data.shape}")
    blocks = np.ascontiguousarray(data).reshape(-1, block_bytes)
    d = blocks[:, :2].copy().view("<f2").astype(np.float64)      # (n_blocks, 1)
    out_shape = (*data.shape[:-1], data.shape[-1] // block_bytes * GGUF_BLOCK_SIZE)
    return d, blocks[:, 2:], out_shape


def quantize_q8_0(x):
    """GGUF Q8_0: blocks of 32 values, an fp16 scale and 32 int8 values, 34 bytes per block.

    x: (..., K) finite reals, K a multiple of 32; it is first rounded to float32, then per block,
    all in float32 like llama.cpp: d = amax / 127, q = round(x * (1 / d)) rounding halves away
    from zero (C's roundf; an all-zero block has d = 0 and q = 0). d is stored rounded to fp16.
    Returns: uint8 (..., K // 32 * 34); each block is [d as little-endian fp16][q0 .. q31].
    """
    blocks = _gguf_blocks(x)
    d = np.max(np.abs(blocks), axis=1, keepdims=True) / np.float32(127)
    d_bytes = _fp16_scale_bytes(d)
    q = _round_half_away_from_zero(blocks * _inverse_or_zero(d)).astype(np.int8)
    out = np.concatenate([d_bytes, q.view(np.uint8)], axis=1)
    x_shape = np.shape(x)
    return out.reshape(*x_shape[:-1], x_shape[-1] // GGUF_BLOCK_SIZE * Q8_0_BLOCK_BYTES)


def dequantize_q8_0(data):
    """Q8_0 bytes (..., n_blocks * 34) uint8 -> float64 (..., n_blocks * 32): d * q.

    The values equal llama.cpp's float32 results exactly (an fp16 times an int8 is exact).
    """
    d, qs, out_shape = _gguf_bytes(data, Q8_0_BLOCK_BYTES, "Q8_0")
    return (d * qs.view(np.int8)).reshape(out_shape)


def quantize_q4_0(x):
    """GGUF Q4_0: blocks of 32 values, an fp16 scale and 32 4-bit values, 18 bytes per block.

    x: (..., K) finite reals, K a multiple of 32, first rounded to float32. Per block, in float32
    like llama.cpp: m = the first value of largest magnitude, with its sign; d = m / -8, so m
    itself maps to code 0 (value -8 d) and the full range [-8, 7] is used;
    q = min(15, trunc(x * (1 / d) + 8.5)), an unsigned code for the value (q - 8) * d
    (adding 8.5 then truncating rounds halves up). d is stored rounded to fp16.
    Packing: byte j (0..15) holds element j in its low nibble and element j + 16 in its high
    nibble. Returns: uint8 (..., K // 32 * 18); each block is [d as little-endian fp16][16 bytes].
    """
    blocks = _gguf_blocks(x)
    # argmax returns the first index on ties, as llama.cpp's loop with its strict '<' does.
    first_largest = np.argmax(np.abs(blocks), axis=1)[:, None]
    d = np.take_along_axis(blocks, first_largest, axis=1) / np.float32(-8)
    d_bytes = _fp16_scale_bytes(d)
    shifted = blocks * _inverse_or_zero(d) + np.float32(8.5)   # float32, in [0.5, 16.5]
    q = np.clip(np.trunc(shifted), 0, 15).astype(np.uint8)
    half = GGUF_BLOCK_SIZE // 2
    packed = q[:, :half] | (q[:, half:] << 4)
    out = np.concatenate([d_bytes, packed], axis=1)
    x_shape = np.shape(x)
    return out.reshape(*x_shape[:-1], x_shape[-1] // GGUF_BLOCK_SIZE * Q4_0_BLOCK_BYTES)


def dequantize_q4_0(data):
    """Q4_0 bytes (..., n_blocks * 18) uint8 -> float64 (..., n_blocks * 32): d * (q - 8).

    The values equal llama.cpp's float32 results exactly.
    """
    d, packed, out_shape = _gguf_bytes(data, Q4_0_BLOCK_BYTES, "Q4_0")
    first_half = (packed & 0x0F).astype(np.int64) - 8     # elements 0..15
    second_half = (packed >> 4).astype(np.int64) - 8      # elements 16..31
    return (d * np.concatenate([first_half, second_half], axis=1)).reshape(out_shape)


# ------------------------------------------------------------------------------------------
# Low-precision floats
# ------------------------------------------------------------------------------------------

# significand bits (with the implicit leading 1), smallest normal exponent, largest finite value
FLOAT_FORMATS = {
    "fp16": {"significand_bits": 11, "min_exponent": -14, "max": 65504.0, "has_inf": True},
    "bf16": {"significand_bits": 8, "min_exponent": -126, "max": float.fromhex("0x1.fep127"), "has_inf": True},
    "fp8_e4m3": {"significand_bits": 4, "min_exponent": -6, "max": 448.0, "has_inf": False},
}


def round_to(x, fmt):
    """Round to the nearest value of a low-precision float format, ties to even, in float64.

    x: any shape, real numbers. fmt: "fp16" (IEEE half), "bf16" (bfloat16) or "fp8_e4m3"
    (float8 e4m3fn: no infinity, max 448).
    Returns: float64, the shape of x, every value exactly representable in ``fmt``.
    Rounding is done once, from the float64 input (round to nearest, ties to even; subnormals
    included). Casting a float64 array through float32 first, as ``astype(ml_dtypes.bfloat16)``
    and torch's ``.to(torch.bfloat16)`` do, rounds twice and can differ in the last bit.
    Overflow: fp16 and bf16 give +-inf like IEEE; fp8_e4m3 has no infinity and saturates to
    +-448, like the GPU's ``cvt.rn.satfinite`` instruction (ml_dtypes gives NaN instead).
    NaN stays NaN.
    """
    if not isinstance(fmt, str) or fmt not in FLOAT_FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FLOAT_FORMATS)}, got {fmt!r}")
    spec = FLOAT_FORMATS[fmt]
    x = _real_array(x, "x").astype(np.float64)
    magnitude = np.where(np.isfinite(x), np.abs(x), 0.0)
    _, exponent = np.frexp(magnitude)          # magnitude = m * 2**exponent, m in [0.5, 1)
    # Spacing of representable values near x; subnormals share the spacing of the smallest binade.
    leading_bit = np.maximum(exponent - 1, spec["min_exponent"])
    spacing = np.ldexp(1.0, leading_bit - (spec["significand_bits"] - 1))
    rounded = np.rint(x / spacing) * spacing   # exact scaling by a power of two, then ties to even
    # Overflow includes infinite inputs; NaN compares False and stays NaN.
    overflow_value = np.inf if spec["has_inf"] else spec["max"]
    return np.where(np.abs(rounded) > spec["max"], np.copysign(overflow_value, x), rounded)
