"""Tiled (flash) attention: the attention ladder of ``kernels.attention``, continued.

``o[b, h] = softmax(q[b, h] @ k[b, h].T * scale) @ v[b, h]`` for float32 tensors
``q, o: (batch, heads, n_queries, head_dim)`` and ``k, v: (batch, heads, n_keys, head_dim)``,
``scale = 1/sqrt(head_dim)`` unless given. Rungs 1 and 2 live in ``kernels.attention``:

- ``attention_v1_naive``: scores, row softmax and P @ V as three kernels, S and P in global memory.
- ``attention_v2_fused_rows``: one thread per query row, online softmax, no N x N matrix; every row
  reads all of K and V from global memory.
- ``attention_v3_tiled``: one block per (query tile, head, batch), one thread per query row; the
  block stages tiles of ``TILE_KV`` keys of K and V in shared memory, so K and V are read from global
  memory once per query tile instead of once per query row; each row keeps a running maximum and
  sum and rescales its accumulator when the maximum grows.
- ``attention_v4_flash``: adds causal attention (key ``j`` is allowed for query ``i`` iff ``j <= i``),
  which skips the key tiles above the diagonal and masks inside the diagonal tiles, and variable-length
  batches: ``kv_lens[b]`` keys exist in batch element ``b``; a query row with no allowed key gives 0.
- ``attention_v5_flash_registers``: v4 with ``head_dim`` fixed when the kernel compiles (one kernel
  per head_dim) and the scores of a tile kept in shared memory, so every loop over the head
  dimension unrolls and each thread's query row and accumulator live in registers. v4 indexes its
  per-thread arrays with a loop bound known only at run time, so they sit in local memory, which
  is DRAM behind the caches.

Launchers accept NumPy arrays or numba device arrays (see ``kernels.launching``), validate their
inputs, size the grid, launch the kernel given as ``kernel=`` (the rung's own by default) and return
the output. ``RUNGS`` registers the whole ladder, v1 to v5, in order.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from kernels.attention import RUNGS as attention_rungs
from kernels.attention import check_qkv
from kernels.launching import cdiv, default_scale, is_device_array, output_array, require_bool, require_same_kind
from kernels.registry import Rung, ladder

__all__ = ["TILE_Q", "TILE_KV", "HEAD_DIM_MAX", "attention_v3_tiled_kernel", "attention_v3_tiled",
           "attention_v4_flash_kernel", "attention_v4_flash", "check_attention_shapes",
           "attention_v5_flash_registers_kernel", "attention_v5_flash_registers",
           "prepare_kv_lens", "flash_grid", "shared_bytes_per_block", "RUNGS"]

# Query rows per block, one thread each: 64 rows means K and V are read once per 64 queries.
TILE_Q = 64
# Keys per shared-memory tile: K and V tiles take 2 * 32 * 64 * 4 B = 16 KiB, a third of the 48 KiB
# a block may allocate statically, so several blocks share an SM (see the day-5 lesson's table).
TILE_KV = 32
# Shared and local arrays need sizes known when the kernel compiles; head_dim may be smaller.
HEAD_DIM_MAX = 64


def shared_bytes_per_block(tile_kv: int = TILE_KV, head_dim: int = HEAD_DIM_MAX, itemsize: int = 4) -> int:
    """Bytes of shared memory one block of the v3/v4 kernels allocates: a K tile and a V tile."""
    return 2 * tile_kv * head_dim * itemsize


def flash_grid(batch: int, heads: int, n_queries: int) -> tuple[int, int, int]:
    """The 3D grid of the tiled kernels: (query tiles, heads, batch)."""
    return (cdiv(n_queries, TILE_Q), heads, batch)


def check_attention_shapes(q, k, v) -> tuple[int, int, int, int, int]:
    """Validate float32 q (B, H, N, d) and k, v (B, H, M, d); return (B, H, N, M, d).

    K and V must have as many heads as Q (grouped-query attention comes on a later day) and
    ``1 <= d <= HEAD_DIM_MAX``.
    """
    batch, heads, n_queries, n_keys, head_dim = check_qkv(q, k, v)
    if head_dim > HEAD_DIM_MAX:
        raise ValueError(f"q must have head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX: the shared-memory tiles "
                         f"are sized for it), got head_dim {head_dim} in shape {tuple(q.shape)}")
    require_same_kind(q=q, k=k, v=v)
    return batch, heads, n_queries, n_keys, head_dim


def prepare_kv_lens(kv_lens, batch: int, n_keys: int, like):
    """Return kv_lens as an int32 array (batch,) of the same kind as ``like`` (NumPy or device).

    ``None`` means every key exists (``n_keys`` for each batch element). The values of a NumPy
    array must lie in ``[0, n_keys]``; a device array must be int32 of shape (batch,), and its
    values are not copied back to be checked (the v4 kernel clamps them to ``[0, n_keys]``).
    Raises TypeError or ValueError naming ``kv_lens``.
    """
    if is_device_array(kv_lens):
        if not is_device_array(like):
            raise TypeError("kv_lens must be a NumPy array when q, k and v are NumPy arrays, got a device array")
        if np.dtype(kv_lens.dtype) != np.int32 or tuple(kv_lens.shape) != (batch,):
            raise ValueError(f"kv_lens must be int32 of shape ({batch},), got {np.dtype(kv_lens.dtype)} "
                             f"of shape {tuple(kv_lens.shape)}")
        return kv_lens
    if kv_lens is None:
        lens = np.full(batch, n_keys, dtype=np.int32)
    else:
        if not isinstance(kv_lens, np.ndarray):
            raise TypeError(f"kv_lens must be a NumPy or device array of ints, got {type(kv_lens).__name__}")
        if not np.issubdtype(kv_lens.dtype, np.integer):
            raise TypeError(f"kv_lens must hold integers (int32), got dtype {kv_lens.dtype}")
        if kv_lens.shape != (batch,):
            raise ValueError(f"kv_lens must have shape ({batch},) (one length per batch element), "
                             f"got {kv_lens.shape}")
        if batch and (kv_lens.min() < 0 or kv_lens.max() > n_keys):
            raise ValueError(f"kv_lens must lie in [0, {n_keys}] (the number of keys in k), got "
                             f"values from {kv_lens.min()} to {kv_lens.max()}")
        lens = np.ascontiguousarray(kv_lens, dtype=np.int32)
    return cuda.to_device(lens) if is_device_array(like) else lens


# ----------------------------------------------------------------------------------------------
# v3: K and V tiles in shared memory, running statistics per query row
# ----------------------------------------------------------------------------------------------

@cuda.jit
def attention_v3_tiled_kernel(q, k, v, o, scale):
    """Block (tile, h, b) computes rows tile*TILE_Q ... of o[b, h]; one thread per query row."""
    tile_start = cuda.blockIdx.x * TILE_Q
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    t = cuda.threadIdx.x
    row = tile_start + t
    n_queries = q.shape[2]
    n_keys = k.shape[2]
    d = q.shape[3]
    k_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    scores = cuda.local.array(TILE_KV, float32)

    # Threads past the last query row load tiles and meet the barriers, but compute nothing.
    active = row < n_queries
    if active:
        for c in range(d):
            q_row[c] = q[b, h, row, c] * scale  # scaled once here, not once per key
            acc[c] = 0.0
    row_max = float32(-math.inf)
    row_sum = float32(0.0)

    for kv_start in range(0, n_keys, TILE_KV):
        n_tile = min(TILE_KV, n_keys - kv_start)
        # Neighbouring threads copy neighbouring floats of the tile: coalesced global reads.
        for idx in range(t, n_tile * d, TILE_Q):
            j = idx // d
            c = idx - j * d
            k_tile[j, c] = k[b, h, kv_start + j, c]
            v_tile[j, c] = v[b, h, kv_start + j, c]
        cuda.syncthreads()  # the tile is complete before anyone reads it

        if active:
            tile_max = float32(-math.inf)
            for j in range(n_tile):
                s = float32(0.0)
                for c in range(d):
                    s += q_row[c] * k_tile[j, c]
                scores[j] = s
                tile_max = max(tile_max, s)
            new_max = max(row_max, tile_max)
            # exp(old max - new max) rescales what was summed against the old maximum; it is 0 on
            # the first tile (row_max = -inf) and 1 when the maximum did not grow.
            correction = math.exp(row_max - new_max)
            row_sum *= correction
            for c in range(d):
                acc[c] *= correction
            for j in range(n_tile):
                p = math.exp(scores[j] - new_max)
                row_sum += p
                for c in range(d):
                    acc[c] += p * v_tile[j, c]
            row_max = new_max
        cuda.syncthreads()  # everyone is done with the tile before it is overwritten

    if active:
        inv_sum = float32(0.0)
        if row_sum > 0:  # no keys at all (n_keys == 0) gives a zero row
            inv_sum = float32(1.0) / row_sum
        for c in range(d):
            o[b, h, row, c] = acc[c] * inv_sum


def attention_v3_tiled(q, k, v, *, scale=None, out=None, kernel=attention_v3_tiled_kernel):
    """Attention with ``attention_v3_tiled_kernel``; returns out (B, H, N, d).

    q (B, H, N, d), k and v (B, H, M, d) float32, NumPy or device arrays; ``d <= HEAD_DIM_MAX``.
    """
    batch, heads, n_queries, _, head_dim = check_attention_shapes(q, k, v)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q)
    if batch and heads and n_queries:
        kernel[flash_grid(batch, heads, n_queries), TILE_Q](q, k, v, out, scale)
    return out


# ----------------------------------------------------------------------------------------------
# v4: causal tile skipping and masking, variable-length batches
# ----------------------------------------------------------------------------------------------

@cuda.jit
def attention_v4_flash_kernel(q, k, v, kv_lens, o, scale, causal):
    """Block (tile, h, b) computes rows tile*TILE_Q ... of o[b, h], causal or not, kv_lens[b] keys."""
    tile_start = cuda.blockIdx.x * TILE_Q
    h = cuda.blockIdx.y
    b = cuda.blockIdx.z
    t = cuda.threadIdx.x
    row = tile_start + t
    n_queries = q.shape[2]
    d = q.shape[3]
    k_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    scores = cuda.local.array(TILE_KV, float32)

    active = row < n_queries
    if active:
        for c in range(d):
            q_row[c] = q[b, h, row, c] * scale
            acc[c] = 0.0
    row_max = float32(-math.inf)
    row_sum = float32(0.0)

    # Keys this block needs: those that exist, and under the causal mask only those up to the
    # block's last query row that exists (the last tile may be partial, and M may exceed N).
    # Tiles past kv_end are never loaded: that is the causal tile skipping.
    kv_end = min(kv_lens[b], k.shape[2])
    if causal:
        kv_end = min(kv_end, tile_start + TILE_Q, n_queries)
    for kv_start in range(0, kv_end, TILE_KV):
        n_tile = min(TILE_KV, kv_end - kv_start)
        for idx in range(t, n_tile * d, TILE_Q):
            j = idx // d
            c = idx - j * d
            k_tile[j, c] = k[b, h, kv_start + j, c]
            v_tile[j, c] = v[b, h, kv_start + j, c]
        cuda.syncthreads()

        # In a tile on the diagonal, this row may use only keys kv_start ... row: a prefix of the tile.
        n_valid = n_tile
        if causal:
            n_valid = min(n_tile, row - kv_start + 1)
        if active and n_valid > 0:
            tile_max = float32(-math.inf)
            for j in range(n_valid):
                s = float32(0.0)
                for c in range(d):
                    s += q_row[c] * k_tile[j, c]
                scores[j] = s
                tile_max = max(tile_max, s)
            new_max = max(row_max, tile_max)
            correction = math.exp(row_max - new_max)
            row_sum *= correction
            for c in range(d):
                acc[c] *= correction
            for j in range(n_valid):
                p = math.exp(scores[j] - new_max)
                row_sum += p
                for c in range(d):
                    acc[c] += p * v_tile[j, c]
            row_max = new_max
        cuda.syncthreads()

    if active:
        inv_sum = float32(0.0)
        if row_sum > 0:  # a row with no allowed key (kv_lens[b] == 0) gives zeros
            inv_sum = float32(1.0) / row_sum
        for c in range(d):
            o[b, h, row, c] = acc[c] * inv_sum


def attention_v4_flash(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                       kernel=attention_v4_flash_kernel):
    """Flash attention with ``attention_v4_flash_kernel``; returns out (B, H, N, d).

    q (B, H, N, d), k and v (B, H, M, d) float32, NumPy or device arrays; ``d <= HEAD_DIM_MAX``.
    ``causal``: key j is allowed for query i iff j <= i. ``kv_lens`` (B,) int32: only the first
    ``kv_lens[b]`` keys exist (default: all M). Rows with no allowed key give 0.
    """
    causal, lens, scale, out = _flash_arguments(q, k, v, causal, kv_lens, scale, out)
    batch, heads, n_queries, _ = out.shape
    if batch and heads and n_queries:
        kernel[flash_grid(batch, heads, n_queries), TILE_Q](q, k, v, lens, out, scale, causal)
    return out


def _flash_arguments(q, k, v, causal, kv_lens, scale, out):
    """What the v4 and v5 launchers validate: returns (causal as bool, kv_lens as int32, scale as float32, out)."""
    batch, heads, n_queries, n_keys, head_dim = check_attention_shapes(q, k, v)
    causal = require_bool("causal", causal)
    lens = prepare_kv_lens(kv_lens, batch, n_keys, like=q)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q)
    return causal, lens, scale, out


# ----------------------------------------------------------------------------------------------
# v5: the same algorithm as v4, with head_dim a compile-time constant so arrays live in registers
# ----------------------------------------------------------------------------------------------

_V5_KERNELS: dict = {}


def attention_v5_flash_registers_kernel(head_dim: int):
    """The v5 kernel for one ``head_dim`` (1 ... HEAD_DIM_MAX), compiled on first use and kept.

    ``head_dim`` is a constant inside the kernel: loops over it have a trip count the compiler
    knows, it unrolls them, and the per-thread arrays ``q_row`` and ``acc`` become registers.
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"head_dim must lie in [1, {HEAD_DIM_MAX}], got {head_dim}")
    head_dim = int(head_dim)
    if head_dim not in _V5_KERNELS:
        _V5_KERNELS[head_dim] = _build_v5_kernel(head_dim)
    return _V5_KERNELS[head_dim]


def _build_v5_kernel(D: int):
    """Compile-time constants D, TILE_Q and TILE_KV size every array and bound every inner loop."""

    @cuda.jit
    def kernel(q, k, v, kv_lens, o, scale, causal):
        tile_start = cuda.blockIdx.x * TILE_Q
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        t = cuda.threadIdx.x
        row = tile_start + t
        n_queries = q.shape[2]
        k_tile = cuda.shared.array((TILE_KV, D), float32)
        v_tile = cuda.shared.array((TILE_KV, D), float32)
        # scores[j, t]: thread t's score for key j of the tile; a warp's 32 threads touch 32
        # consecutive words, one per bank. In shared memory, because j runs to a bound known only
        # at run time (the tile may be partial), which would push a per-thread array to local memory.
        scores = cuda.shared.array((TILE_KV, TILE_Q), float32)
        q_row = cuda.local.array(D, float32)
        acc = cuda.local.array(D, float32)

        active = row < n_queries
        for c in range(D):
            q_row[c] = q[b, h, row, c] * scale if active else float32(0.0)
            acc[c] = float32(0.0)
        row_max = float32(-math.inf)
        row_sum = float32(0.0)

        kv_end = min(kv_lens[b], k.shape[2])
        if causal:
            kv_end = min(kv_end, tile_start + TILE_Q, n_queries)
        for kv_start in range(0, kv_end, TILE_KV):
            n_tile = min(TILE_KV, kv_end - kv_start)
            for idx in range(t, n_tile * D, TILE_Q):
                j = idx // D
                c = idx - j * D
                k_tile[j, c] = k[b, h, kv_start + j, c]
                v_tile[j, c] = v[b, h, kv_start + j, c]
            cuda.syncthreads()

            n_valid = n_tile
            if causal:
                n_valid = min(n_tile, row - kv_start + 1)
            if active and n_valid > 0:
                tile_max = float32(-math.inf)
                for j in range(n_valid):
                    s = float32(0.0)
                    for c in range(D):
                        s += q_row[c] * k_tile[j, c]
                    scores[j, t] = s
                    tile_max = max(tile_max, s)
                new_max = max(row_max, tile_max)
                correction = math.exp(row_max - new_max)
                row_sum *= correction
                for c in range(D):
                    acc[c] *= correction
                for j in range(n_valid):
                    p = math.exp(scores[j, t] - new_max)
                    row_sum += p
                    for c in range(D):
                        acc[c] += p * v_tile[j, c]
                row_max = new_max
            cuda.syncthreads()

        if active:
            inv_sum = float32(0.0)
            if row_sum > 0:
                inv_sum = float32(1.0) / row_sum
            for c in range(D):
                o[b, h, row, c] = acc[c] * inv_sum

    return kernel


def attention_v5_flash_registers(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                                 kernel=attention_v5_flash_registers_kernel):
    """v4's flash attention with the v5 kernel for this head_dim; returns out (B, H, N, d).

    Same arguments and results as ``attention_v4_flash``, except that ``kernel`` is a function of
    ``head_dim`` that returns the kernel to launch (one compiled kernel per head_dim).
    """
    causal, lens, scale, out = _flash_arguments(q, k, v, causal, kv_lens, scale, out)
    batch, heads, n_queries, head_dim = out.shape
    if batch and heads and n_queries and head_dim:
        kernel(head_dim)[flash_grid(batch, heads, n_queries), TILE_Q](q, k, v, lens, out, scale, causal)
    return out


RUNGS = ladder(
    *attention_rungs.values(),
    Rung("attention_v3_tiled", attention_v3_tiled,
         "one block per query tile; K and V tiles staged in shared memory, read once per tile"),
    Rung("attention_v4_flash", attention_v4_flash,
         "causal tile skipping and masking, and variable-length batches (kv_lens)"),
    Rung("attention_v5_flash_registers", attention_v5_flash_registers,
         "head_dim fixed at compile time, so each thread's query row and accumulator live in registers"),
)
