"""Day 8's prefill on tensor cores: FlashAttention-2 on ``mma.sync`` m16n8k16, fp16 or bf16 tensors, float32 sums.

- ``gqa_prefill_tensor_cores``: ``gqa_prefill_mixed_precision``'s arguments and masks (causal, ``kv_lens``,
  groups of query heads on a KV head) on q, k, v and o stored in fp16 or bf16, with both products of attention,
  S = Q K^T and O = P V, as tensor-core instructions (``kernels.intrinsics.mma_m16n8k16`` or
  ``mma_m16n8k16_bf16``, float32 accumulators) in FlashAttention-2's order: a block of 4 warps takes 64 query
  positions of one query head, each warp 16 of them for the whole loop over the keys, and K and V stream
  through shared memory 64 keys at a time. head_dim a multiple of 16 up to 128; float32 tensors are refused
  (their numbers have no 16-bit form to multiply: ``gqa_prefill_mixed_precision`` takes them).

The kernel, block (x, h, b) for query head h of batch element b, positions 64 x ... 64 x + 63; warp w owns rows
64 x + 16 w ... + 15 and lane 4 g + t rows g and g + 8 of them (the C fragment's rows, ``mma_m16n8k16``):

- Q: each warp's 16 x d query rows are loaded once, from global memory straight into registers as the A
  fragments of every 16-channel step of Q K^T (2 d / 16 words a lane: 32 at d = 128), unscaled (the scale is
  applied to the float32 scores: a scaled q rounded to fp16 would carry a rounding the stored q does not).
- K and V tiles of 64 keys x d are copied into shared memory 16 bytes at a time by ``cp_async_16``, without
  passing through registers, as FlashAttention-2 does on sm_80 with two tiles, not a ring of stages: the copies
  of V's tile start as the block starts computing S from K's, and the copies of the next K tile as it starts
  P V on V's; one ``cp.async.wait_group 0`` and one barrier before each product (the barrier also tells the
  block that every warp is done with the tile about to be overwritten). Two tiles of 64 x 128 fp16 numbers are
  32 KiB; a ring of 2 stages of K and V (64 KiB) would not fit the 48 KiB a block may declare statically (more
  needs an opt-in attribute numba does not set), and a ring of 32-key tiles doubles the per-tile softmax work.
  Rows past the keys a block reads (``kv_lens``, the causal limit, M) are copied as zeros from nowhere.
- Shared rows are padded to d + 8 numbers (``tensor_prefill_shared_bytes``): ldmatrix serves 8 rows of 16 bytes
  at one place of a row in one pass when they lie in 8 different groups of 4 banks, and a row of (d / 8 + 1)
  16-byte chunks, an odd number, puts rows r ... r + 7 at chunk q in groups (r (d/8 + 1) + q) mod 8, all
  different, for every head_dim a multiple of 16 (``tc_gemm_v4_swizzled``'s XOR swizzle needs a power of two
  of chunks a row; padding costs 1/(d/8) more shared memory: 34 KiB at d = 128).
- S = Q K^T: the rows of a K tile, key by key, are exactly the ``.col`` B operand of the mma (a lane's b0 holds
  two neighbouring channels of one key), as w's rows in ``kernels.tensor_core_gemm``: one ``ldmatrix_x4`` gives
  b0, b1 of two 8-key tiles, ``d / 16 x 4`` of them and ``d / 16 x 8`` mmas a warp and tile (8 x 4 x 16 at
  d = 128, 64 mmas). Lane 4 g + t ends with S[g][8 j + 2 t + e] and S[g + 8][8 j + 2 t + e] (j < 8, e < 2).
- The online softmax on those fragments, float32: scores times the scale, masked to -inf past ``kv_lens``, past
  M and (causal) past the row's position, only in tiles that reach past one of those; each row's maximum is its
  lane's 16 scores, then two ``shfl_xor`` over the 4 lanes 4 g ... 4 g + 3 that hold the row; O's accumulators
  and the lane's share of the row sum are scaled by exp(m_old - m_new); p = exp(s - m_new). The row sums are
  summed over the 4 lanes once, at the end.
- The fragment mapping, C of Q K^T to A of P V (no shuffle, no shared memory): P V contracts over keys, its
  k-step kk takes keys 16 kk ... 16 kk + 15, and its A fragment of lane 4 g + t is a0 = P[g][16 kk + 2t, +1],
  a1 = P[g + 8][16 kk + 2t, +1], a2 = P[g][16 kk + 8 + 2t, +1], a3 = P[g + 8][16 kk + 8 + 2t, +1]: the lane's own
  C fragments of S's 8-key tiles 2 kk (c0, c1 -> a0; c2, c3 -> a1) and 2 kk + 1 (c0, c1 -> a2; c2, c3 -> a3),
  each pair of neighbouring keys rounded to fp16 (bf16 for bf16 tensors) and packed into one word
  (``pack_halves``, ``pack_bfloat16s``: one ``cvt.rn.f16x2.f32`` or ``cvt.rn.bf16x2.f32`` a word).
- O += P V: V is stored (keys, channels), row-major, and the B fragment of P V wants two neighbouring keys of
  one channel in a word (b0 = V[16 kk + 2t, +1][8 n + g]): ``ldmatrix_x4_trans`` (PTX's ``.trans``) hands each
  8 x 8 matrix of the V tile out transposed, so lanes naming 8 keys' rows of 16 bytes give each lane the two
  keys of its channel: matrices (keys 0-7, 8-15) x (channels 8 n ..., 8 (n + 1) ...) are b0, b1 of two 8-channel
  tiles. V is neither copied transposed nor touched by a thread: the same cp.async copies as K.
- O stays in registers, float32, d / 2 of them a lane; at the end each row is divided by its sum (rows with no
  key give 0), rounded to the tensors' format once, two neighbouring channels a 32-bit store.

Precision. Every product of Q K^T and P V is exact and summed in float32; q, k and v are used as stored. The one
rounding the float32 rungs do not have is P's: each weight is rounded to fp16 (11 significant bits, relative
error at most u = 2**-11; below 2**-14 fp16 is subnormal, an absolute error at most 2**-25) or bf16 (u = 2**-8)
before P V, while the row sum adds the float32 weights, as FlashAttention-2 does. So an output element is
``sum_j p~_j v_j / sum_j p_j`` where the float32 rungs give ``sum_j p_j v_j / sum_j p_j``: it differs from the
exact attention on the stored inputs by at most ``u sum_j p_j |v_j| / sum_j p_j`` (fp16: plus ``2**-25 sum_j
|v_j|`` over the allowed keys) beyond the output's own rounding and float32's. The course's rule for day 8
(``docs/design-notes.md`` §5: at most twice the error of the exact attention on the stored inputs rounded to the
format, against the float64 reference on the unrounded inputs) holds unchanged, and so does flash-attention's
own (at most twice the error of attention computed in the storage dtype). The day's second rule for the
float32 rungs, each element within one step of the format of the exact result on the stored inputs, does not
hold as it stands: the rounded weights move an element by up to u of the weighted |v|, more than a step of an
output near 0 (8 to 11 % of the elements of a case of 64 queries and 256 keys on the simulator, fp16 and bf16
alike, where ``gqa_prefill_mixed_precision`` has none). The tests hold this rung to that step plus the bound
above, stated and derived here.

Predictions, made before the rung ran on a GPU (measured since: below): B = 2, 32 query heads over 8, N = 4,096,
d = 128, causal, fp16. The work is 4 N**2 d FLOPs a head (two products of 2 N**2 d), halved by the mask: 2 x 32 x
2 x 4096**2 x 128 = 2.75e11 FLOPs. torch's SDPA in fp16 takes 0.48 ms on an H100 in that recording (568 TFLOP/s,
Hopper's wgmma); an H200 has the same chip and clocks, so it should take about the same, and this rung about
the same ratio of it. mma.sync is the Ampere instruction, which Hopper runs at a fraction of wgmma's rate
(FlashAttention-2's own sm_80 kernel, this design in CUDA C++ with 128 rows a block, is reported at about 350
TFLOP/s on an H100, some 0.6 of SDPA here). This rung should stay below that: 64 rows a block (each K and V
tile fetched and each ldmatrix of it used for half the rows FlashAttention-2 serves), numba's accurate
``expf`` for ``math.exp`` (about 8 instructions a score where ``ex2.approx`` with the scale and log2(e) folded
into one FFMA takes 2; the softmax is some 600 instructions a lane and tile, against 128 mmas and 64 ldmatrix a
warp at d = 128), the 32-bit loads of Q and stores of O in fragment order, no overlap of one tile's softmax with
the next tile's mmas inside a warp (only across the 4 warps of a block and the blocks an SM holds), and the
causal blocks launched in position order, the longest last (a tail on the SMs). Predicted: 120 to 250 TFLOP/s,
1.1 to 2.3 ms, 0.2 to 0.4 x SDPA fp16 on an H100 or H200: the goal of 0.25 x is within the range, not certain.
Against day 8's ``gqa_prefill_mixed_precision`` (30.6 ms in fp16, float32 arithmetic on CUDA cores) it should
be 13 to 28 times as fast. What should limit it, in order: the softmax's instructions on the CUDA cores, the
latency of each warp's chain of dependent mmas with 3 or 4 blocks of 4 warps an SM (ptxas's registers decide
how many), and 2 barriers a tile. The next rungs: 128 rows a block (4 warps of 32 rows: twice the mmas per
ldmatrix and per byte of K and V), ``ex2.approx`` with the scale folded in, the longest causal blocks first, O
staged through shared memory for 16-byte stores; then, on Hopper, wgmma and TMA, which SDPA uses.

Measured (L2 flushed, the calls' medians): on an H100, ``day08_prefill_timing`` (2026-12-05) 166 TFLOP/s in fp16
and 167 in bf16, 0.30 of SDPA fp16 in the same run, 18 times ``gqa_prefill_mixed_precision``; the other shapes
(``day08_tensor_prefill_shapes``, 2026-12-06): d = 128 not causal 195 TFLOP/s (0.30 of SDPA), d = 64 causal 137
(0.33) and not causal 163 (0.34). On an H200 (``day08_prefill_timing_other_gpu``, 2026-12-07): 155 and 153
TFLOP/s, 0.27 of SDPA fp16's 565 there. Inside the predicted band on both GPUs, and the goal of 0.25 met on both.

Arguments, layout and checks are ``gqa_prefill_mixed_precision``'s (``docs/design-notes.md`` §2): q, o (B, H, N,
d), k, v (B, KVH, M, d), one dtype, fp16 (``np.float16``) or bf16 (``ml_dtypes.bfloat16``), NumPy or device
arrays; query head h reads KV head h // (H / KVH). The kernel reads the tensors as their bits, q and o as
(B H N, d / 2) uint32 words of two numbers, k and v as (B KVH M, d) uint16 (views, no copy), so bf16 NumPy
arrays reach a GPU as any uint16 array. It is built per format and head_dim
(``gqa_prefill_tensor_cores_kernel(fmt, head_dim)``, compiled on first use and kept), as
``kernels.tensor_core_gemm`` builds its rungs per format; the grid is (ceil(N / 64), H, B) blocks of 128 threads
(``tensor_prefill_grid``). mma.sync with bf16 inputs and cp.async need compute capability 8.0.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, uint32

from kernels.gqa_attention import HEAD_DIM_MAX
from kernels.intrinsics import (cp_async_16, cp_async_commit_group, cp_async_wait_group, ldmatrix_x4,
                                ldmatrix_x4_trans, mma_m16n8k16, mma_m16n8k16_bf16, pack_bfloat16s, pack_halves)
from kernels.launching import (FULL_MASK, WARP, cdiv, default_scale, note_output, output_array, require_bool)
from kernels.paging import prepare_kv_lens

from .prefill import check_prefill_inputs

__all__ = ["TENSOR_PREFILL_FORMATS", "TENSOR_PREFILL_ROWS", "TENSOR_PREFILL_KEYS", "TENSOR_PREFILL_WARPS",
           "TENSOR_PREFILL_THREADS", "TENSOR_PREFILL_HEAD_DIM_STEP", "tensor_prefill_grid",
           "tensor_prefill_shared_bytes", "gqa_prefill_tensor_cores_kernel", "gqa_prefill_tensor_cores"]

# The storage formats the rung multiplies, by dtype name, and the mma and the packing of P for each.
TENSOR_PREFILL_FORMATS = ("float16", "bfloat16")
_MMA = {"float16": mma_m16n8k16, "bfloat16": mma_m16n8k16_bf16}
_PACK = {"float16": pack_halves, "bfloat16": pack_bfloat16s}
TENSOR_PREFILL_WARPS = 4
TENSOR_PREFILL_THREADS = TENSOR_PREFILL_WARPS * WARP
MMA_M = 16                                              # query rows of a warp: the m of an m16n8k16 mma
TENSOR_PREFILL_ROWS = TENSOR_PREFILL_WARPS * MMA_M      # query positions of a block
TENSOR_PREFILL_KEYS = 64                                # keys of a K or V tile
TENSOR_PREFILL_HEAD_DIM_STEP = 16                       # head_dim must be a multiple of this: the k of the mma
_CHUNK = 8                                              # 16-bit numbers of a 16-byte copy or ldmatrix row
_KERNELS: dict = {}


def tensor_prefill_grid(batch: int, heads: int, n_queries: int) -> tuple[int, int, int]:
    """The grid of ``gqa_prefill_tensor_cores``: (ceil(N / 64), H, B), one block per 64 positions of a query head."""
    return cdiv(n_queries, TENSOR_PREFILL_ROWS), heads, batch


def tensor_prefill_shared_bytes(head_dim: int) -> int:
    """Static shared memory of one block: a K tile and a V tile of 64 keys, rows padded to head_dim + 8 numbers of 2
    bytes (34 KiB at head_dim 128, 18 KiB at 64)."""
    return 2 * TENSOR_PREFILL_KEYS * (head_dim + _CHUNK) * 2


def _check_format_and_head_dim(fmt: str, head_dim: int) -> None:
    if fmt not in TENSOR_PREFILL_FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(TENSOR_PREFILL_FORMATS)}, got {fmt!r}")
    if (isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer))
            or head_dim % TENSOR_PREFILL_HEAD_DIM_STEP or not 0 < head_dim <= HEAD_DIM_MAX):
        raise ValueError(f"head_dim must be a multiple of {TENSOR_PREFILL_HEAD_DIM_STEP} in [16, {HEAD_DIM_MAX}], "
                         f"got {head_dim!r}")


def gqa_prefill_tensor_cores_kernel(fmt: str, head_dim: int):
    """The kernel for tensors stored in ``fmt`` ("float16" or "bfloat16") at ``head_dim`` (a multiple of 16 up to
    128), compiled on first use and kept."""
    _check_format_and_head_dim(fmt, head_dim)
    key = (fmt, int(head_dim))
    if key not in _KERNELS:
        _KERNELS[key] = _build_kernel(*key)
    return _KERNELS[key]


def _build_kernel(fmt: str, D: int):
    """FlashAttention-2's forward pass on mma.sync m16n8k16 for ``fmt`` and head_dim ``D`` (the module's
    docstring). q and o are (B H N, D / 2) uint32 words (channels 2 w, 2 w + 1 in word w, the lower in the low
    half), k and v (B KVH M, D) uint16: the numbers' bits."""
    mma = _MMA[fmt]
    pack = _PACK[fmt]
    KEYS = TENSOR_PREFILL_KEYS
    THREADS = TENSOR_PREFILL_THREADS
    ROWS = TENSOR_PREFILL_ROWS
    CHUNKS = D // _CHUNK                    # 16-byte chunks of a row of K or V
    ROW_WORDS = 4 * (CHUNKS + 1)            # a shared row, padded by one chunk (an odd number of chunks a row)
    COPIES = KEYS * CHUNKS // THREADS       # 16-byte copies of a thread per tile (CHUNKS is even: an integer)
    K_STEPS = D // 16                       # mma steps of Q K^T along head_dim
    S_TILES = KEYS // 8                     # 8-key tiles of S (C fragments)
    PV_STEPS = KEYS // 16                   # mma steps of P V along the keys
    O_TILES = D // 8                        # 8-channel tiles of O
    NEG_INF = float32(-math.inf)

    @cuda.jit(device=True, inline=True)
    def copy_tile(tile, x, first_row, start, end, thread):
        """Start the copies of keys start ... start + 63 of one KV head (rows first_row + key of x) into ``tile``,
        chunk q of tile row r at words 4 q ... 4 q + 3; keys at or past ``end`` become zeros, read from nowhere
        (the source named stays inside x: row first_row + start, a key that exists)."""
        for i in range(COPIES):
            chunk = thread + i * THREADS
            r = chunk // CHUNKS
            q = chunk - r * CHUNKS
            valid = start + r < end
            cp_async_16(tile, r, 4 * q, x, first_row + start + (r if valid else 0), _CHUNK * q, valid)

    @cuda.jit
    def gqa_prefill_tensor_cores_kernel(q, k, v, kv_lens, o, scale, causal, heads, kv_heads, n_queries, n_keys):
        k_tile = cuda.shared.array((KEYS, ROW_WORDS), uint32, alignment=16)
        v_tile = cuda.shared.array((KEYS, ROW_WORDS), uint32, alignment=16)
        qa = cuda.local.array((K_STEPS, 4), uint32)       # Q's A fragments, every step along head_dim
        s = cuda.local.array((S_TILES, 4), float32)       # S's C fragments, then P's weights
        pa = cuda.local.array((PV_STEPS, 4), uint32)      # P's A fragments, two weights a word
        acc = cuda.local.array((O_TILES, 4), float32)     # O's C fragments
        thread = cuda.threadIdx.x
        warp = thread // WARP
        lane = thread % WARP
        g = lane >> 2
        t = lane & 3
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        kv_head = h // (heads // kv_heads)
        block_first = cuda.blockIdx.x * ROWS
        warp_first = block_first + warp * MMA_M
        row0 = warp_first + g                             # this lane's rows: row0 and row0 + 8
        row1 = row0 + 8
        q_first = (b * heads + h) * n_queries             # q's and o's row of position 0 of this head
        kv_first = (b * kv_heads + kv_head) * n_keys      # k's and v's row of key 0 of this KV head
        # The ldmatrix rows this lane names: K's (key 16 j + k_row of the tile, chunk 2 step + k_chunk) and V's
        # (key 16 step + v_row, chunk 2 j + v_chunk).
        k_row = (lane & 7) + 8 * (lane >> 4)
        k_chunk = (lane >> 3) & 1
        v_row = (lane & 7) + 8 * ((lane >> 3) & 1)
        v_chunk = lane >> 4

        # Q's A fragments, once: a0 = Q[row0][16 ks + 2t, +1] (word 8 ks + t), a1 the same of row1, a2 and a3
        # channels 8 further (word 8 ks + t + 4). Rows past N are zeros.
        for ks in range(K_STEPS):
            for x in range(4):
                qa[ks, x] = uint32(0)
            if row0 < n_queries:
                qa[ks, 0] = q[q_first + row0, 8 * ks + t]
                qa[ks, 2] = q[q_first + row0, 8 * ks + t + 4]
            if row1 < n_queries:
                qa[ks, 1] = q[q_first + row1, 8 * ks + t]
                qa[ks, 3] = q[q_first + row1, 8 * ks + t + 4]
        for n in range(O_TILES):
            for x in range(4):
                acc[n, x] = float32(0.0)
        max0 = NEG_INF
        max1 = NEG_INF
        sum0 = float32(0.0)                               # this lane's share of each row's sum
        sum1 = float32(0.0)

        # Keys this block reads: kv_lens (clamped to M), and causal: none past its last position.
        limit = min(max(kv_lens[b], 0), n_keys)
        end = limit
        if causal:
            end = min(end, block_first + ROWS, n_queries)
        if end > 0:
            copy_tile(k_tile, k, kv_first, 0, end, thread)
        cp_async_commit_group()
        for start in range(0, end, KEYS):
            cp_async_wait_group(0)            # this thread's copies of K's tile have landed
            cuda.syncthreads()                # everyone's have, and every warp is done with V's previous tile
            copy_tile(v_tile, v, kv_first, start, end, thread)
            cp_async_commit_group()           # V's tile travels while S is computed

            # S = Q K^T, 16 channels a step, two 8-key tiles an ldmatrix.
            for j in range(S_TILES):
                for x in range(4):
                    s[j, x] = float32(0.0)
            for ks in range(K_STEPS):
                for j2 in range(S_TILES // 2):
                    b0, b1, b2, b3 = ldmatrix_x4(k_tile, 16 * j2 + k_row, 4 * (2 * ks + k_chunk))
                    s[2 * j2, 0], s[2 * j2, 1], s[2 * j2, 2], s[2 * j2, 3] = mma(
                        qa[ks, 0], qa[ks, 1], qa[ks, 2], qa[ks, 3], b0, b1,
                        s[2 * j2, 0], s[2 * j2, 1], s[2 * j2, 2], s[2 * j2, 3])
                    s[2 * j2 + 1, 0], s[2 * j2 + 1, 1], s[2 * j2 + 1, 2], s[2 * j2 + 1, 3] = mma(
                        qa[ks, 0], qa[ks, 1], qa[ks, 2], qa[ks, 3], b2, b3,
                        s[2 * j2 + 1, 0], s[2 * j2 + 1, 1], s[2 * j2 + 1, 2], s[2 * j2 + 1, 3])

            # The online softmax, float32. Masks only in a tile that reaches past the keys or (causal) past the
            # warp's first row: the same for the whole warp.
            masked = start + KEYS > limit or (causal and start + KEYS - 1 > warp_first)
            tile_max0 = NEG_INF
            tile_max1 = NEG_INF
            for j in range(S_TILES):
                for e in range(2):
                    key = start + 8 * j + 2 * t + e
                    x0 = s[j, e] * scale
                    x1 = s[j, 2 + e] * scale
                    if masked:
                        if key >= limit or (causal and key > row0):
                            x0 = NEG_INF
                        if key >= limit or (causal and key > row1):
                            x1 = NEG_INF
                    s[j, e] = x0
                    s[j, 2 + e] = x1
                    tile_max0 = max(tile_max0, x0)
                    tile_max1 = max(tile_max1, x1)
            tile_max0 = max(tile_max0, cuda.shfl_xor_sync(FULL_MASK, tile_max0, 1))
            tile_max0 = max(tile_max0, cuda.shfl_xor_sync(FULL_MASK, tile_max0, 2))
            tile_max1 = max(tile_max1, cuda.shfl_xor_sync(FULL_MASK, tile_max1, 1))
            tile_max1 = max(tile_max1, cuda.shfl_xor_sync(FULL_MASK, tile_max1, 2))
            new0 = max(max0, tile_max0)
            new1 = max(max1, tile_max1)
            # A row with no key yet keeps -inf: subtract 0 from its scores instead (every weight 0, no NaN).
            base0 = new0 if new0 > NEG_INF else float32(0.0)
            base1 = new1 if new1 > NEG_INF else float32(0.0)
            alpha0 = math.exp(max0 - base0)
            alpha1 = math.exp(max1 - base1)
            max0 = new0
            max1 = new1
            sum0 *= alpha0
            sum1 *= alpha1
            for n in range(O_TILES):
                acc[n, 0] *= alpha0
                acc[n, 1] *= alpha0
                acc[n, 2] *= alpha1
                acc[n, 3] *= alpha1
            for j in range(S_TILES):
                for e in range(2):
                    p0 = math.exp(s[j, e] - base0)
                    p1 = math.exp(s[j, 2 + e] - base1)
                    sum0 += p0
                    sum1 += p1
                    s[j, e] = p0
                    s[j, 2 + e] = p1
            # C of S's 8-key tiles 2 kk and 2 kk + 1 is P's A fragment of step kk: rounded and packed in pairs.
            for kk in range(PV_STEPS):
                pa[kk, 0] = pack(s[2 * kk, 0], s[2 * kk, 1])
                pa[kk, 1] = pack(s[2 * kk, 2], s[2 * kk, 3])
                pa[kk, 2] = pack(s[2 * kk + 1, 0], s[2 * kk + 1, 1])
                pa[kk, 3] = pack(s[2 * kk + 1, 2], s[2 * kk + 1, 3])

            cp_async_wait_group(0)            # this thread's copies of V's tile have landed
            cuda.syncthreads()                # everyone's have, and every warp is done with K's tile
            if start + KEYS < end:
                copy_tile(k_tile, k, kv_first, start + KEYS, end, thread)
            cp_async_commit_group()           # the next K tile travels while P V is computed

            # O += P V, 16 keys a step; V's rows transposed by ldmatrix into B fragments of two 8-channel tiles.
            for kk in range(PV_STEPS):
                for n2 in range(O_TILES // 2):
                    b0, b1, b2, b3 = ldmatrix_x4_trans(v_tile, 16 * kk + v_row, 4 * (2 * n2 + v_chunk))
                    acc[2 * n2, 0], acc[2 * n2, 1], acc[2 * n2, 2], acc[2 * n2, 3] = mma(
                        pa[kk, 0], pa[kk, 1], pa[kk, 2], pa[kk, 3], b0, b1,
                        acc[2 * n2, 0], acc[2 * n2, 1], acc[2 * n2, 2], acc[2 * n2, 3])
                    acc[2 * n2 + 1, 0], acc[2 * n2 + 1, 1], acc[2 * n2 + 1, 2], acc[2 * n2 + 1, 3] = mma(
                        pa[kk, 0], pa[kk, 1], pa[kk, 2], pa[kk, 3], b2, b3,
                        acc[2 * n2 + 1, 0], acc[2 * n2 + 1, 1], acc[2 * n2 + 1, 2], acc[2 * n2 + 1, 3])
        cp_async_wait_group(0)                # no copy left in flight when the block ends

        # Each row's sum over its 4 lanes, then O / sum rounded once, two channels a word: C[g][8 n + 2t, +1].
        sum0 += cuda.shfl_xor_sync(FULL_MASK, sum0, 1)
        sum0 += cuda.shfl_xor_sync(FULL_MASK, sum0, 2)
        sum1 += cuda.shfl_xor_sync(FULL_MASK, sum1, 1)
        sum1 += cuda.shfl_xor_sync(FULL_MASK, sum1, 2)
        inv0 = float32(1.0) / sum0 if sum0 > 0 else float32(0.0)
        inv1 = float32(1.0) / sum1 if sum1 > 0 else float32(0.0)
        if row0 < n_queries:
            for n in range(O_TILES):
                o[q_first + row0, 4 * n + t] = pack(acc[n, 0] * inv0, acc[n, 1] * inv0)
        if row1 < n_queries:
            for n in range(O_TILES):
                o[q_first + row1, 4 * n + t] = pack(acc[n, 2] * inv1, acc[n, 3] * inv1)

    return gqa_prefill_tensor_cores_kernel


def _words(a, head_dim: int):
    """The bits of a (…, head_dim) array of 16-bit numbers as (rows, head_dim / 2) uint32 words (a view)."""
    return a.view(np.uint32).reshape(-1, head_dim // 2)


def _numbers(a, head_dim: int):
    """The bits of a (…, head_dim) array of 16-bit numbers as (rows, head_dim) uint16 (a view)."""
    return a.view(np.uint16).reshape(-1, head_dim)


def gqa_prefill_tensor_cores(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                             kernel=gqa_prefill_tensor_cores_kernel):
    """Grouped-query flash attention on fp16 or bf16 tensors, both products on tensor cores (mma.sync, float32
    sums); returns out (B, H, N, d) in the dtype of q.

    The arguments of ``gqa_prefill_mixed_precision`` (q (B, H, N, d), k and v (B, KVH, M, d), causal, kv_lens (B,)
    int32, scale, out; rows with no allowed key give 0) for fp16 or bf16 tensors with d a multiple of 16 up to 128:
    float32 tensors and other head sizes are refused, naming the rung that takes them. ``kernel`` is a function of
    the format ("float16" or "bfloat16") and head_dim that returns the kernel (``gqa_prefill_tensor_cores_kernel``);
    the grid is ``tensor_prefill_grid`` of 128-thread blocks."""
    batch, heads, kv_heads, n_queries, n_keys, head_dim = check_prefill_inputs(q, k, v)
    fmt = np.dtype(q.dtype).name
    if fmt not in TENSOR_PREFILL_FORMATS:
        raise TypeError(f"q must be stored in fp16 or bf16 for gqa_prefill_tensor_cores (its numbers enter the "
                        f"mma as they are stored), got {fmt}: gqa_prefill_mixed_precision takes float32 tensors")
    if head_dim % TENSOR_PREFILL_HEAD_DIM_STEP:
        raise ValueError(f"q must have head_dim a multiple of {TENSOR_PREFILL_HEAD_DIM_STEP} (the k of an m16n8k16 "
                         f"mma) up to {HEAD_DIM_MAX} for gqa_prefill_tensor_cores, got head_dim {head_dim} in shape "
                         f"{tuple(q.shape)}: gqa_prefill_mixed_precision takes any head_dim up to {HEAD_DIM_MAX}")
    causal = require_bool("causal", causal)
    lens = prepare_kv_lens(kv_lens, batch, n_keys, like=q)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q, dtype=np.dtype(q.dtype))
    if batch and heads and n_queries:
        kernel(fmt, head_dim)[tensor_prefill_grid(batch, heads, n_queries), TENSOR_PREFILL_THREADS](
            _words(q, head_dim), _numbers(k, head_dim), _numbers(v, head_dim), lens,
            note_output(_words(out, head_dim)), scale, causal, heads, kv_heads, n_queries, n_keys)
    return out
