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
- ``attention_v6_register_tiles``: day 4's register blocking applied to both products. A block of 64
  threads owns 64 query rows and steps through the keys 64 at a time; each thread computes an 8 x 8
  tile of the scores (8 rows x 8 keys) and then of the output (the same 8 rows x 8 channels) in
  registers, from 16-byte loads of Q, K, P and V in shared memory, and the 8 threads that share a
  row exchange its running maximum by warp shuffles. One kernel per head_dim and ``Tiling``; head_dim
  up to 128.

Why v6 is fast, and where it stops. v5 spends one shared-memory load per multiply-add (each thread
owns a whole row); v6's thread tile spends 16 loads of 4 bytes, as four 16-byte instructions, per 64
multiply-adds. The 8 x 8 tile is the largest that fits: the scores and the output take 128 of a
thread's 255 registers, and Q, K (then P) and V take the 48 KiB of shared memory a block may
allocate statically, so an SM holds 4 blocks of 2 warps. On an H100 (B=4, H=16, N=4,096, fp32) v6
runs at 1.17 of torch SDPA fp32 at head_dim 64 and 1.11 causal (41.2 and 36.1 TFLOP/s; v5: 0.49;
recording ``course/data/day05_flash_timing.json``), where torch runs 3xTF32 on tensor cores: 0.80 of
cuBLAS's fp32 FFMA rate, the 51.7 TFLOP/s of ``torch.matmul`` in fp32 that the same recording holds as
its ``fp32_tflops`` ceiling. Its time goes mostly to FFMA instructions, and with 2 warps per scheduler
their latency shows. At head_dim 128 the 48 KiB allow only blocks of 32 x 32 and 4 x 4 score tiles: 0.72 of
torch, 0.71 causal (33.4 and 32.0 TFLOP/s; recording ``course/data/day05_head_dim_128_timing.json``),
whose 46.5 TFLOP/s there is 0.90 of cuBLAS's FFMA rate (that recording's ``fp32_tflops``), out of reach
of FFMA code. ``_build_v6_kernel`` lists what the speed took.

Launchers accept NumPy arrays or numba device arrays (see ``kernels.launching``), validate their
inputs, size the grid, launch the kernel given as ``kernel=`` (the rung's own by default) and return
the output. ``RUNGS`` registers the whole ladder, v1 to v6, in order.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import cuda, float32

from kernels.attention import RUNGS as attention_rungs
from kernels.attention import check_qkv
from kernels.launching import FULL_MASK, cdiv, default_scale, output_array, require_bool, require_same_kind
# kv_lens as the kernels read them: shared with the prefill launchers of days 7 and 8.
from kernels.paging import prepare_kv_lens
from kernels.registry import Rung, ladder

__all__ = ["TILE_Q", "TILE_KV", "HEAD_DIM_MAX", "attention_v3_tiled_kernel", "attention_v3_tiled",
           "attention_v4_flash_kernel", "attention_v4_flash", "check_attention_shapes",
           "attention_v5_flash_registers_kernel", "attention_v5_flash_registers",
           "Tiling", "V6_HEAD_DIM_MAX", "V6_TILING_64", "V6_TILING_128", "V6_TILING_SMALL", "SHARED_BYTES_MAX",
           "v6_tiling", "v6_shared_bytes", "v6_grid", "attention_v6_register_tiles_kernel",
           "attention_v6_register_tiles", "prepare_kv_lens", "flash_grid", "shared_bytes_per_block", "RUNGS"]

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


def check_attention_shapes(q, k, v, head_dim_max: int = HEAD_DIM_MAX) -> tuple[int, int, int, int, int]:
    """Validate float32 q (B, H, N, d) and k, v (B, H, M, d); return (B, H, N, M, d).

    K and V must have as many heads as Q (grouped-query attention comes on a later day) and
    ``1 <= d <= head_dim_max`` (``HEAD_DIM_MAX`` for v3 to v5, ``V6_HEAD_DIM_MAX`` for v6).
    """
    batch, heads, n_queries, n_keys, head_dim = check_qkv(q, k, v)
    if head_dim > head_dim_max:
        name = "HEAD_DIM_MAX" if head_dim_max == HEAD_DIM_MAX else "V6_HEAD_DIM_MAX"
        raise ValueError(f"q must have head_dim <= {head_dim_max} ({name}: the shared-memory tiles "
                         f"are sized for it), got head_dim {head_dim} in shape {tuple(q.shape)}")
    require_same_kind(q=q, k=k, v=v)
    return batch, heads, n_queries, n_keys, head_dim


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


def _flash_arguments(q, k, v, causal, kv_lens, scale, out, head_dim_max=HEAD_DIM_MAX):
    """What the v4 to v6 launchers validate: returns (causal as bool, kv_lens as int32, scale as float32, out)."""
    batch, heads, n_queries, n_keys, head_dim = check_attention_shapes(q, k, v, head_dim_max)
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


# ----------------------------------------------------------------------------------------------
# v6: register tiles. Each thread computes a tile of S = Q K^T and of O = P V in registers
# ----------------------------------------------------------------------------------------------

class Tiling(NamedTuple):
    """How a v6 block divides its work: ``row_groups * threads_per_row`` threads.

    The block owns ``block_q = rows_per_thread * row_groups`` query rows and steps through the keys
    ``block_kv = keys_per_thread * threads_per_row`` at a time. The ``threads_per_row`` threads of a
    row group are lanes of one warp (interleaved with the warp's other row groups, see
    ``_build_v6_kernel``) and share the group's ``rows_per_thread`` rows. Each of them computes the
    scores of those rows for ``keys_per_thread`` keys of the tile, and the output of those rows for
    ``channels_per_thread(head_dim)`` channels. Rows, keys and channels come in chunks of 4 (one
    16-byte load from shared memory), so both counts per thread are multiples of 4.
    """

    rows_per_thread: int
    keys_per_thread: int
    row_groups: int
    threads_per_row: int

    @property
    def block_q(self) -> int:
        return self.rows_per_thread * self.row_groups

    @property
    def block_kv(self) -> int:
        return self.keys_per_thread * self.threads_per_row

    @property
    def threads(self) -> int:
        return self.row_groups * self.threads_per_row

    def channels_per_thread(self, head_dim: int) -> int:
        """Output channels per thread: ``head_dim`` rounded up to chunks of 4 on every thread of a row."""
        return 4 * cdiv(head_dim, 4 * self.threads_per_row)


# v6 takes head_dim up to 128 (Llama's): its tiles are sized per head_dim, not for a fixed maximum.
V6_HEAD_DIM_MAX = 128
# Tilings chosen on an H100 (B=4, H=16, N=4096, an early version of the kernel): at head_dim 64,
# 8 x 8 tiles of 64 x 64 took 9.14 ms, 8 x 4 tiles with 32 keys per step (32 KiB, 6 blocks per SM)
# 9.69 ms, 4 x 8 tiles for 128 threads 10.86 ms. At 128 the 48 KiB fit 32 x 32 blocks: 4 x 4 tiles
# for 64 threads took 23.5 ms, 8 x 4 tiles for 32 threads 223 ms (their 256 staged loads spill).
V6_TILING_64 = Tiling(rows_per_thread=8, keys_per_thread=8, row_groups=8, threads_per_row=8)
V6_TILING_128 = Tiling(rows_per_thread=4, keys_per_thread=4, row_groups=8, threads_per_row=8)
# Heads of at most 16 channels (no model's; the simulator's test sizes) take blocks of 8 threads:
# a block of 64 would compute 64 keys x 32 padded channels per tile for a head of 4, and the
# simulator runs the small block several times faster.
V6_TILING_SMALL = Tiling(rows_per_thread=8, keys_per_thread=8, row_groups=4, threads_per_row=2)
# Static shared memory a block may allocate.
SHARED_BYTES_MAX = 48 * 1024
LOG2E = math.log2(math.e)


def v6_tiling(head_dim: int) -> Tiling:
    """The default tiling of v6 for a head_dim: ``V6_TILING_SMALL`` up to 16, ``V6_TILING_64`` up to
    64, ``V6_TILING_128`` above."""
    if head_dim <= 16:
        return V6_TILING_SMALL
    return V6_TILING_64 if head_dim <= 64 else V6_TILING_128


def v6_shared_bytes(head_dim: int, tiling: Tiling, itemsize: int = 4) -> int:
    """Static shared memory of a v6 block: Q transposed (head_dim x block_q), K transposed
    (head_dim x block_kv) whose space then holds P transposed (block_kv x block_q), and V with its
    channels padded to ``channels_per_thread * threads_per_row``."""
    padded = tiling.channels_per_thread(head_dim) * tiling.threads_per_row
    k_or_p = max(head_dim * tiling.block_kv, tiling.block_kv * tiling.block_q)
    return (head_dim * tiling.block_q + k_or_p + tiling.block_kv * padded) * itemsize


def v6_grid(batch: int, heads: int, n_queries: int, tiling: Tiling) -> tuple[int, int, int]:
    """The 3D grid of v6: (query tiles of ``tiling.block_q`` rows, heads, batch)."""
    return (cdiv(n_queries, tiling.block_q), heads, batch)


def _check_tiling(head_dim: int, tiling) -> Tiling:
    if not isinstance(tiling, Tiling):
        raise TypeError(f"tiling must be a Tiling, got {type(tiling).__name__}")
    rows, keys, groups, lanes = tiling
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in tiling):
        raise ValueError(f"tiling must hold positive ints, got {tiling}")
    if rows % 4 or keys % 4:
        raise ValueError(f"tiling must have rows_per_thread and keys_per_thread that are multiples of 4 "
                         f"(chunks of one 16-byte load), got {tiling}")
    if lanes & (lanes - 1) or lanes > 8 or groups & (groups - 1):
        raise ValueError(f"tiling must have threads_per_row a power of 2 up to 8 (the K tile's swizzle "
                         f"spans 8 channels) and row_groups a power of 2, got {tiling}")
    if not 8 <= tiling.threads <= 1024:
        raise ValueError(f"tiling must give 8 to 1024 threads (8 lanes load a K tile together), got {tiling.threads}")
    if v6_shared_bytes(head_dim, tiling) > SHARED_BYTES_MAX:
        raise ValueError(f"tiling {tiling} needs {v6_shared_bytes(head_dim, tiling)} B of shared memory at "
                         f"head_dim {head_dim}, more than the {SHARED_BYTES_MAX} B a block may allocate")
    return tiling


_V6_KERNELS: dict = {}


def attention_v6_register_tiles_kernel(head_dim: int, tiling: Tiling | None = None):
    """The v6 kernel for one ``head_dim`` (1 ... V6_HEAD_DIM_MAX) and tiling (``v6_tiling(head_dim)``
    unless given), compiled on first use and kept."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    if not 1 <= head_dim <= V6_HEAD_DIM_MAX:
        raise ValueError(f"head_dim must lie in [1, {V6_HEAD_DIM_MAX}], got {head_dim}")
    head_dim = int(head_dim)
    tiling = _check_tiling(head_dim, v6_tiling(head_dim) if tiling is None else tiling)
    key = (head_dim, tiling)
    if key not in _V6_KERNELS:
        _V6_KERNELS[key] = _build_v6_kernel(head_dim, tiling)
    return _V6_KERNELS[key]


def _build_v6_kernel(D: int, tiling: Tiling):
    """One kernel for head_dim D and a tiling; every size below is a constant when it compiles.

    What the speed took, beyond the register tiles: each step was found on an H100 at head_dim 64
    (B=4, H=16, N=4,096) by timing the kernel and counting its SASS instructions per thread and key
    tile with nvdisasm, measurements of the kernel's development that no recording keeps. With all of
    them it takes 6.68 ms there, 1.17 of torch SDPA (recording ``course/data/day05_flash_timing.json``):

    - flat arrays: the launcher passes q, k, v and o as flat views, so that with D a constant every
      load of a tile sits at a constant offset from one address (numba indexes a 4D array with its
      run-time shape: a multiplication per row). With the next two points they cut most of the
      instructions that load and store a tile;
    - every load of a tile in flight at once: flat loops that unroll, into registers, then the stores
      to shared memory; only a partial last tile tests each key (``load_tile(..., full)``);
    - unsigned indices into shared memory (``np.uint32`` constants, ``u(...)``): numba adds no
      negative-index wraparound to them, so four neighbouring float32 reads of a 16-byte aligned
      array merge into one 16-byte load (``ld.shared.v4.f32``);
    - eight channels (keys) per trip of the loops of multiply-adds, as eight calls of an inlined step:
      NVVM unrolls a loop of two such steps but not of four or eight, and each trip pays for its
      counter and addresses, which eight steps spread over four times the multiply-adds of two;
    - ``fastmath`` (NVVM's flush to zero): ``exp2`` is one ``MUFU.EX2`` instead of a sequence that
      handles denormal results, a large part of a tile's softmax. fastmath also lets the compiler
      assume there are no infinities, so a masked score is ``MASKED = -1e38``, not -inf:
      ``exp2(MASKED - max)`` is 0 all the same;
    - row groups interleaved within a warp (below): with consecutive threads in one row group, the
      16-byte stores of P had 8-way bank conflicts (8 passes per store instead of 2).
    """
    RM, KN, TR, TC = tiling
    T, BQ, BK = tiling.threads, tiling.block_q, tiling.block_kv
    CN = tiling.channels_per_thread(D)
    DP = CN * TC                          # channels of the V tile, D padded with zeros
    LOG_TC = TC.bit_length() - 1
    QT_SIZE, KP_SIZE, V_SIZE = D * BQ, max(D * BK, BK * BQ), BK * DP
    # Global loads of a tile: K with 8 lanes along the channels (a warp reads 4 keys x 32 bytes),
    # V with V_LANES lanes along the channels of a key (a warp reads up to 128 bytes of a row).
    K_ROWS, D_STEPS = T // 8, cdiv(D, 8)
    V_LANES = math.gcd(DP, T, 32)
    V_ROWS, DP_STEPS = T // V_LANES, DP // V_LANES
    if BK % K_ROWS or BK % V_ROWS or BQ % K_ROWS:
        raise ValueError(f"tiling {tiling}: block_kv must be a multiple of threads // 8 and of threads // "
                         f"{V_LANES}, and block_q of threads // 8, so that every thread loads the same "
                         "number of elements of a tile")
    K_LOADS, V_LOADS, Q_LOADS = (BK // K_ROWS) * D_STEPS, (BK // V_ROWS) * DP_STEPS, (BQ // K_ROWS) * D_STEPS
    u = np.uint32
    U1, U2, U3, U4, U8, UD, UBQ, UBK, UDP = u(1), u(2), u(3), u(4), u(8), u(D), u(BQ), u(BK), u(DP)
    ROW_CHUNKS, KEY_CHUNKS, CHANNEL_CHUNKS = u(RM // 4), u(KN // 4), u(CN // 4)
    ROW_STRIDE, KEY_STRIDE = u(4 * TR), u(4 * TC)   # from one chunk of a thread's rows (keys) to its next
    LANE_MASK = SWIZZLE = u(TC - 1)
    G = min(32, T) // TC                  # row groups per warp
    UG, UGTC = u(G), u(G * TC)
    MASKED = float32(-1e38)   # minus infinity, finite (fastmath)

    @cuda.jit(device=True, inline="always")
    def score_channel(c, qt, kp, s, rows_frag, keys_frag, row0, lane):
        """s += (column c of the block's Q) x (column c of the K tile), for the thread's rows and keys."""
        q_base = c * UBQ + row0
        k_base = c * UBK + ((lane ^ (c & SWIZZLE)) << U2)
        for i in range(ROW_CHUNKS):
            for w in range(U4):
                rows_frag[i * U4 + w] = qt[q_base + i * ROW_STRIDE + w]
        for e in range(KEY_CHUNKS):
            for w in range(U4):
                keys_frag[e * U4 + w] = kp[k_base + e * KEY_STRIDE + w]
        for a in range(RM):
            for e in range(KN):
                s[a, e] += rows_frag[a] * keys_frag[e]

    @cuda.jit(device=True, inline="always")
    def add_key(j, kp, vs, acc, rows_frag, chan_frag, row0, col0):
        """acc += (column j of P) x (row j of the V tile), for the thread's rows and channels."""
        p_base = j * UBQ + row0
        v_base = j * UDP + col0
        for i in range(ROW_CHUNKS):
            for w in range(U4):
                rows_frag[i * U4 + w] = kp[p_base + i * ROW_STRIDE + w]
        for g in range(CHANNEL_CHUNKS):
            for w in range(U4):
                chan_frag[g * U4 + w] = vs[v_base + g * KEY_STRIDE + w]
        for a in range(RM):
            for ci in range(CN):
                acc[a, ci] += rows_frag[a] * chan_frag[ci]

    @cuda.jit(device=True, inline="always")
    def load_tile(k, v, k_regs, v_regs, k_first, v_first, k_lane, k_row, v_lane, v_row, n_valid, full):
        """The thread's elements of a K and a V tile into registers; keys from n_valid on read as 0
        unless ``full`` (a constant: the tests vanish from the full tiles' code)."""
        for i in range(K_LOADS):
            j = (i // D_STEPS) * K_ROWS + k_row
            c = (i % D_STEPS) * 8 + k_lane
            x = float32(0.0)
            if (full or j < n_valid) and (D % 8 == 0 or c < D):
                x = k[k_first + u((i // D_STEPS) * K_ROWS * D + (i % D_STEPS) * 8)]
            k_regs[i] = x
        for i in range(V_LOADS):
            j = (i // DP_STEPS) * V_ROWS + v_row
            c = (i % DP_STEPS) * V_LANES + v_lane
            x = float32(0.0)
            if (full or j < n_valid) and (D == DP or c < D):
                x = v[v_first + u((i // DP_STEPS) * V_ROWS * D + (i % DP_STEPS) * V_LANES)]
            v_regs[i] = x

    @cuda.jit(fastmath=True)
    def kernel(q, k, v, kv_lens, o, scale, causal):
        # qt[c * BQ + r]: Q of the block's row r, channel c, times scale * log2(e) (exp2 below)
        qt = cuda.shared.array(QT_SIZE, float32, alignment=16)
        # kp: the K tile transposed, kp[c * BK + swizzled j]; after the scores, P transposed, kp[j * BQ + r]
        kp = cuda.shared.array(KP_SIZE, float32, alignment=16)
        # vs[j * DP + c]: the V tile, channels past D zero
        vs = cuda.shared.array(V_SIZE, float32, alignment=16)
        s = cuda.local.array((RM, KN), float32)        # the thread's scores, then probabilities
        acc = cuda.local.array((RM, CN), float32)      # the thread's output tile
        row_max = cuda.local.array(RM, float32)
        row_sum = cuda.local.array(RM, float32)        # over this thread's keys only: summed at the end
        rows_frag = cuda.local.array(RM, float32)      # a column of Q (or of P) for the thread's rows
        keys_frag = cuda.local.array(KN, float32)      # a column of K^T for the thread's keys
        chan_frag = cuda.local.array(CN, float32)      # a row of V for the thread's channels
        k_regs = cuda.local.array(K_LOADS, float32)
        v_regs = cuda.local.array(V_LOADS, float32)
        q_regs = cuda.local.array(Q_LOADS, float32)

        # A warp holds G row groups of TC lanes, the groups interleaved: thread t of the warp is lane
        # t // G of group t % G. So the 8 threads of a quarter warp, which a 16-byte store serves
        # together, hold G different rows and write P to different banks (consecutive threads of one
        # row group would write the same 4 banks: 8 passes instead of 2).
        t = u(cuda.threadIdx.x)
        lane = (t // UG) & LANE_MASK                  # among the TC threads of a row group
        group = (t // UGTC) * UG + t % UG
        # Chunk i of the thread's rows is rows i*4*TR + group*4 + (0..3), chunk e of its keys (and
        # channels) is e*4*TC + lane*4 + (0..3): the lanes of a row group read neighbouring 16 bytes.
        row0 = group << U2
        col0 = lane << U2
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        heads = cuda.gridDim.y
        n_queries = q.shape[0] // (cuda.gridDim.z * heads * D)
        n_keys = k.shape[0] // (cuda.gridDim.z * heads * D)
        q_head = u(b * heads + h) * u(n_queries) * UD   # where q[b, h] (and o[b, h]) starts
        k_head = u(b * heads + h) * u(n_keys) * UD
        tile_start = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * BQ   # under causal, the longest tiles first
        q_scale = float32(scale) * float32(LOG2E)

        # Once per block: Q, transposed and scaled, with the lanes of the K tile's loads (all in flight).
        k_lane = cuda.threadIdx.x & 7
        k_row = cuda.threadIdx.x >> 3
        q_first = q_head + u((tile_start + k_row) * D + k_lane)
        for i in range(Q_LOADS):
            r = (i // D_STEPS) * K_ROWS + k_row
            c = (i % D_STEPS) * 8 + k_lane
            x = float32(0.0)
            if tile_start + r < n_queries and (D % 8 == 0 or c < D):
                x = q[q_first + u((i // D_STEPS) * K_ROWS * D + (i % D_STEPS) * 8)]
            q_regs[i] = x
        for i in range(Q_LOADS):
            r = (i // D_STEPS) * K_ROWS + k_row
            c = (i % D_STEPS) * 8 + k_lane
            if D % 8 == 0 or c < D:
                qt[c * BQ + r] = q_regs[i] * q_scale
        for a in range(RM):
            row_max[a] = MASKED
            row_sum[a] = float32(0.0)
            for ci in range(CN):
                acc[a, ci] = float32(0.0)

        kv_end = min(kv_lens[b], n_keys)
        if causal:
            kv_end = min(kv_end, tile_start + BQ, n_queries)
        v_lane = cuda.threadIdx.x & (V_LANES - 1)
        v_row = cuda.threadIdx.x // V_LANES
        k_store = u(k_lane) * UBK            # where the thread's first channel row of Kt starts
        k_swizzle = u(k_lane) & SWIZZLE
        v_store = u(v_row) * UDP + u(v_lane)
        for kv_start in range(0, kv_end, BK):
            n_tile = min(BK, kv_end - kv_start)
            # Every load of the K and V tiles first, then the stores. Only a partial last tile tests
            # each key (and gives 0 past the end): the full tiles' loads are unconditional.
            k_first = k_head + u((kv_start + k_row) * D + k_lane)
            v_first = k_head + u((kv_start + v_row) * D + v_lane)
            if n_tile == BK:
                load_tile(k, v, k_regs, v_regs, k_first, v_first, k_lane, k_row, v_lane, v_row, BK, True)
            else:
                load_tile(k, v, k_regs, v_regs, k_first, v_first, k_lane, k_row, v_lane, v_row, n_tile, False)
            # K transposed, each chunk of 4 keys moved to chunk (j / 4) XOR (c mod TC): the 8 lanes
            # storing 8 channels of a key, and the TC lanes reading TC chunks of a channel, use
            # different banks (without the swizzle they would all use the same 4 banks).
            for i in range(K_LOADS):
                j = u((i // D_STEPS) * K_ROWS) + u(k_row)
                if D % 8 == 0 or (i % D_STEPS) * 8 + k_lane < D:
                    # row c = (i % D_STEPS) * 8 + k_lane of Kt; c mod TC is k_lane mod TC (TC <= 8)
                    column = (((j >> U2) ^ k_swizzle) << U2) + (j & U3)
                    kp[k_store + column + u((i % D_STEPS) * 8 * BK)] = k_regs[i]
            for i in range(V_LOADS):
                vs[v_store + u((i // DP_STEPS) * V_ROWS * DP + (i % DP_STEPS) * V_LANES)] = v_regs[i]
            cuda.syncthreads()

            # S = Q K^T: per channel, RM + KN loads from shared memory feed RM * KN multiply-adds.
            for a in range(RM):
                for e in range(KN):
                    s[a, e] = float32(0.0)
            c = u(0)
            while c < UD // U8 * U8:   # eight channels a trip, as eight calls (see the docstring)
                score_channel(c, qt, kp, s, rows_frag, keys_frag, row0, lane)
                score_channel(c + u(1), qt, kp, s, rows_frag, keys_frag, row0, lane)
                score_channel(c + u(2), qt, kp, s, rows_frag, keys_frag, row0, lane)
                score_channel(c + u(3), qt, kp, s, rows_frag, keys_frag, row0, lane)
                score_channel(c + u(4), qt, kp, s, rows_frag, keys_frag, row0, lane)
                score_channel(c + u(5), qt, kp, s, rows_frag, keys_frag, row0, lane)
                score_channel(c + u(6), qt, kp, s, rows_frag, keys_frag, row0, lane)
                score_channel(c + u(7), qt, kp, s, rows_frag, keys_frag, row0, lane)
                c += U8
            while c < UD:
                score_channel(c, qt, kp, s, rows_frag, keys_frag, row0, lane)
                c += U1

            # Masks, in the tiles that need them: keys past the end, and keys after the row (causal).
            if kv_start + BK > kv_end or (causal and kv_start + BK - 1 > tile_start):
                for a in range(RM):
                    row = tile_start + (a // 4) * 4 * TR + group * 4 + a % 4
                    for e in range(KN):
                        key = kv_start + (e // 4) * 4 * TC + lane * 4 + e % 4
                        if key >= kv_end or (causal and key > row):
                            s[a, e] = MASKED

            # Online softmax per row: the TC lanes of a row group exchange their maxima (shuffles);
            # the sums stay per lane until the end.
            for a in range(RM):
                m = s[a, 0]
                for e in range(1, KN):
                    m = max(m, s[a, e])
                for i in range(LOG_TC):
                    m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, G << i))
                new_max = max(row_max[a], m)
                base = new_max if new_max > MASKED else float32(0.0)   # a row with no key yet
                correction = math.exp2(row_max[a] - base)
                row_max[a] = new_max
                total = row_sum[a] * correction
                for e in range(KN):
                    p = math.exp2(s[a, e] - base)
                    total += p
                    s[a, e] = p
                row_sum[a] = total
                for ci in range(CN):
                    acc[a, ci] *= correction
            cuda.syncthreads()   # everyone is done with the K tile before P overwrites it

            # P, transposed, in the K tile's space: kp[key * BQ + row], four rows per 16-byte store.
            for e in range(KEY_CHUNKS):
                for we in range(U4):
                    p_base = (e * KEY_STRIDE + col0 + we) * UBQ + row0
                    for i in range(ROW_CHUNKS):
                        for w in range(U4):
                            kp[p_base + i * ROW_STRIDE + w] = s[i * U4 + w, e * U4 + we]
            cuda.syncthreads()

            # O += P V: per key, RM + CN loads from shared memory feed RM * CN multiply-adds.
            j = u(0)
            while j < UBK // U8 * U8:   # eight keys a trip
                add_key(j, kp, vs, acc, rows_frag, chan_frag, row0, col0)
                add_key(j + u(1), kp, vs, acc, rows_frag, chan_frag, row0, col0)
                add_key(j + u(2), kp, vs, acc, rows_frag, chan_frag, row0, col0)
                add_key(j + u(3), kp, vs, acc, rows_frag, chan_frag, row0, col0)
                add_key(j + u(4), kp, vs, acc, rows_frag, chan_frag, row0, col0)
                add_key(j + u(5), kp, vs, acc, rows_frag, chan_frag, row0, col0)
                add_key(j + u(6), kp, vs, acc, rows_frag, chan_frag, row0, col0)
                add_key(j + u(7), kp, vs, acc, rows_frag, chan_frag, row0, col0)
                j += U8
            while j < UBK:
                add_key(j, kp, vs, acc, rows_frag, chan_frag, row0, col0)
                j += U1
            cuda.syncthreads()   # everyone is done with P and V before the next tile overwrites them

        for a in range(RM):
            total = row_sum[a]
            for i in range(LOG_TC):
                total += cuda.shfl_xor_sync(FULL_MASK, total, G << i)
            inv_sum = float32(0.0)
            if total > 0:   # a row with no allowed key gives zeros
                inv_sum = float32(1.0) / total
            row = tile_start + (a // 4) * 4 * TR + group * 4 + a % 4
            if row < n_queries:
                for ci in range(CN):
                    c = (ci // 4) * 4 * TC + lane * 4 + ci % 4
                    if c < D:
                        o[q_head + u(row * D + c)] = acc[a, ci] * inv_sum

    return kernel


def attention_v6_register_tiles(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None, tiling=None,
                                kernel=attention_v6_register_tiles_kernel):
    """Flash attention with the v6 kernel for this head_dim; returns out (B, H, N, d).

    Same arguments and results as ``attention_v4_flash`` with ``d <= V6_HEAD_DIM_MAX``, plus
    ``tiling`` (a ``Tiling``; ``v6_tiling(d)`` unless given). ``kernel`` is a function of
    ``(head_dim, tiling)`` that returns the kernel to launch.
    """
    causal, lens, scale, out = _flash_arguments(q, k, v, causal, kv_lens, scale, out, V6_HEAD_DIM_MAX)
    batch, heads, n_queries, head_dim = out.shape
    if batch and heads and n_queries and head_dim:
        tiling = _check_tiling(head_dim, v6_tiling(head_dim) if tiling is None else tiling)
        # Flat views of the same memory (see _build_v6_kernel): the kernel indexes them itself.
        flat = [a.reshape(-1) for a in (q, k, v, out)]
        kernel(head_dim, tiling)[v6_grid(batch, heads, n_queries, tiling), tiling.threads](
            flat[0], flat[1], flat[2], lens, flat[3], scale, causal)
    return out


RUNGS = ladder(
    *attention_rungs.values(),
    Rung("attention_v3_tiled", attention_v3_tiled,
         "one block per query tile; K and V tiles staged in shared memory, read once per tile"),
    Rung("attention_v4_flash", attention_v4_flash,
         "causal tile skipping and masking, and variable-length batches (kv_lens)"),
    Rung("attention_v5_flash_registers", attention_v5_flash_registers,
         "head_dim fixed at compile time, so each thread's query row and accumulator live in registers"),
    Rung("attention_v6_register_tiles", attention_v6_register_tiles,
         "day 4's register blocking: each thread computes 8 x 8 tiles of S and of O from 16-byte shared loads"),
)
