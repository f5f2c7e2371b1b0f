"""Day 8's prefill: day 7's grouped-query flash attention on tensors stored in fp16 or bf16, computed in float32.

Every element is converted to float32 as it is loaded, all arithmetic (the scores, the running maximum and
sum, the accumulator) is float32, and o is rounded to its storage format once, when it is stored: the error
is the format's rounding, not an accumulation of it (``docs/design-notes.md`` §5). The rungs:

- ``gqa_prefill_mixed_tiles``: day 7's ``gqa_prefill_tiles`` (head_dim read at run time) with q, k,
  v and o stored in fp16 or bf16 (or float32): q converted to float32 and then scaled, K and V
  converted into float32 tiles as they are loaded, o rounded once when it is stored. The day's
  exercise. Its query row and accumulator are arrays of ``HEAD_DIM_MAX`` floats in local memory, as
  in day 7's rung: storing the tensors in half the bytes does not shorten a kernel whose time goes to
  its arithmetic and its local memory.
- ``gqa_prefill_mixed_precision``: day 7's ``gqa_prefill_flash`` (day 5's v5 extended to a block of
  ``positions`` query positions times the heads of a group, head_dim fixed at compile time, every
  group size) with q, k, v and o stored in fp16 or bf16 (or float32): each query row is converted
  into registers and scaled there, each K and V tile is converted into float32 shared memory as it
  is loaded, and o is rounded once when it is stored. Causal masking and ``kv_lens`` as day 7. On an
  H100 (B = 2, 32 query heads over 8, N = 4,096, head_dim 128, causal; recording
  ``course/data/day08_prefill_timing.json``) it takes 30.6 ms on fp16 tensors and 28.7 ms on bf16 and on
  float32 ones, what day 7's ``gqa_prefill_flash`` takes on float32 (28.7 ms): float32 arithmetic on
  CUDA cores sets the time, not the bytes (torch's SDPA, fp16 on tensor cores: 0.48 ms).

Storage formats and numba (``docs/design-notes.md`` §4). fp16 arrays are ``np.float16``: ``float32(x)`` of
an element is one ``cvt.f32.f16`` and a float32 stored into an fp16 array is rounded to nearest even.
bf16 arrays are ``ml_dtypes.bfloat16``: numba-cuda converts them by a call to a linked function (no
inline instruction without LTO), cheap here, where each element is converted once per block. NumPy bf16
arrays cannot cross to a GPU through numba (the buffer protocol has no bf16: "cannot include dtype 'E' in
a buffer"), so the launchers move them as uint16 and view them as bf16 on the device (``_bf16_to_device``).

Layout (``docs/design-notes.md`` §2): ``q, o: (batch, heads, n_queries, head_dim)``, ``k, v: (batch,
kv_heads, n_keys, head_dim)``, all of one dtype of ``PREFILL_DTYPES``; query head ``h`` reads KV head
``h // (heads // kv_heads)``. The launchers accept NumPy arrays or numba device arrays, validate every
argument (errors name it), size day 7's grid (``prefill_block``, ``prefill_grid``), launch the kernel
given as ``kernel=`` and return o.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from kernels.gqa_attention import (HEAD_DIM_MAX, ROWS_MAX, TILE_KV, TILE_POS, prefill_block, prefill_grid,
                                   prefill_tiling_on_device)
from kernels.launching import (default_scale, note_output, output_array, require_array, require_bool, require_dtype,
                               require_kv_heads, require_same_kind)
from kernels.paging import prepare_kv_lens

from .common import WIDE_HEAD_DIM_MAX

__all__ = ["PREFILL_DTYPES", "check_prefill_inputs", "gqa_prefill_mixed_tiles_kernel", "gqa_prefill_mixed_tiles",
           "gqa_prefill_mixed_precision_kernel", "gqa_prefill_mixed_precision"]

# Storage dtypes of the prefill (all four tensors share one).
PREFILL_DTYPES = ("float16", "bfloat16", "float32")


def check_prefill_inputs(q, k, v, *, wide: bool = False) -> tuple[int, int, int, int, int, int]:
    """Validate q (B, H, N, d), k and v (B, KVH, M, d) of one dtype of ``PREFILL_DTYPES``; return
    (B, H, KVH, N, M, d). ``H`` must be a multiple of ``KVH``, ``1 <= d <= HEAD_DIM_MAX`` (``wide``,
    ``gqa_prefill_wide_heads``: ``WIDE_HEAD_DIM_MAX``). Raises TypeError or ValueError naming the argument."""
    dtype = require_dtype("q", q, PREFILL_DTYPES)
    batch, heads, n_queries, head_dim = require_array("q", q, (None, None, None, None), dtype,
                                                      dims=("batch", "heads", "seq_q", "head_dim"))
    kv_dims = ("batch", "kv_heads", "seq_k", "head_dim")
    if np.dtype(k.dtype) != dtype or np.dtype(v.dtype) != dtype:
        name = "k" if np.dtype(k.dtype) != dtype else "v"
        raise TypeError(f"{name} must have the dtype of q ({dtype}), got {np.dtype((k if name == 'k' else v).dtype)}")
    _, kv_heads, n_keys, _ = require_array("k", k, (batch, None, None, head_dim), dtype, dims=kv_dims)
    require_array("v", v, (batch, kv_heads, n_keys, head_dim), dtype, dims=kv_dims)
    if wide and not 1 <= head_dim <= WIDE_HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {WIDE_HEAD_DIM_MAX} (WIDE_HEAD_DIM_MAX: a row's query and "
                         f"accumulator are shared by at most 2 threads of 128 channels), got head_dim {head_dim} in "
                         f"shape {tuple(q.shape)}")
    if not wide and not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"q must have 1 <= head_dim <= {HEAD_DIM_MAX} (HEAD_DIM_MAX: the shared-memory "
                         f"tiles are sized for it), got head_dim {head_dim} in shape {tuple(q.shape)} "
                         f"(gqa_prefill_wide_heads takes head_dim up to {WIDE_HEAD_DIM_MAX})")
    require_kv_heads(heads, kv_heads, q_name="q", kv_name="k")
    require_same_kind(q=q, k=k, v=v)
    return batch, heads, kv_heads, n_queries, n_keys, head_dim


@cuda.jit
def gqa_prefill_mixed_tiles_kernel(q, k, v, kv_lens, o, scale, causal):
    """Day 7's ``gqa_prefill_tiles_kernel`` (its blocks, rows and tiles) on q, k, v and o stored in fp16
    or bf16. Every element is converted to float32 as it is loaded (q scaled after the conversion, K
    and V into float32 tiles), everything computed from it is float32, and o is rounded to its format
    once, when it is stored."""
    group = q.shape[1] // k.shape[1]
    subgroups = (group + ROWS_MAX - 1) // ROWS_MAX
    heads_per_block = (group + subgroups - 1) // subgroups
    positions = min(TILE_POS, ROWS_MAX // heads_per_block)
    kv_head = cuda.blockIdx.y // subgroups
    first = (cuda.blockIdx.y - kv_head * subgroups) * heads_per_block
    b = cuda.blockIdx.z
    t = cuda.threadIdx.x
    rows = cuda.blockDim.x
    n_queries = q.shape[2]
    d = q.shape[3]
    tile_start = cuda.blockIdx.x * positions
    local_position = t // heads_per_block
    position = tile_start + local_position
    head_in_group = first + (t - local_position * heads_per_block)
    h = kv_head * group + head_in_group
    k_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((TILE_KV, HEAD_DIM_MAX), float32)
    scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)

    active = position < n_queries and head_in_group < group
    for c in range(d):
        # Converted first, then scaled: the product of two fp16 numbers may pass fp16's 65504, and
        # q . k even more so; in float32 neither comes near its range.
        q_row[c] = float32(q[b, h, position, c]) * scale if active else float32(0.0)
        acc[c] = float32(0.0)
    row_max = float32(-math.inf)
    row_sum = float32(0.0)

    kv_end = min(kv_lens[b], k.shape[2])
    if causal:
        kv_end = min(kv_end, tile_start + positions, n_queries)
    for kv_start in range(0, kv_end, TILE_KV):
        n_tile = min(TILE_KV, kv_end - kv_start)
        for idx in range(t, n_tile * d, rows):
            j = idx // d
            c = idx - j * d
            k_tile[j, c] = float32(k[b, kv_head, kv_start + j, c])
            v_tile[j, c] = float32(v[b, kv_head, kv_start + j, c])
        cuda.syncthreads()

        n_valid = n_tile
        if causal:
            n_valid = min(n_tile, position - kv_start + 1)
        if active and n_valid > 0:
            tile_max = float32(-math.inf)
            for j in range(n_valid):
                score = float32(0.0)
                for c in range(d):
                    score += q_row[c] * k_tile[j, c]
                scores[j, t] = score
                tile_max = max(tile_max, score)
            new_max = max(row_max, tile_max)
            correction = math.exp(row_max - new_max)
            row_sum *= correction
            for c in range(d):
                acc[c] *= correction
            # The sums of many keys stay float32: an fp16 accumulator would round at every key.
            for j in range(n_valid):
                p = math.exp(scores[j, t] - new_max)
                row_sum += p
                for c in range(d):
                    acc[c] += p * v_tile[j, c]
            row_max = new_max
        cuda.syncthreads()

    if active:
        inv_sum = float32(0.0)
        if row_sum > 0:
            inv_sum = float32(1.0) / row_sum
        for c in range(d):
            o[b, h, position, c] = acc[c] * inv_sum       # the one rounding to the format of o


_PREFILL_KERNELS: dict = {}


def gqa_prefill_mixed_precision_kernel(head_dim: int):
    """The prefill kernel for one ``head_dim`` (1 ... HEAD_DIM_MAX), compiled on first use and kept.

    numba compiles it once per storage dtype it is launched with (fp16, bf16, float32): the
    conversions ``float32(x)`` on load and the rounding on store follow the arrays' dtype."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)):
        raise TypeError(f"head_dim must be an int, got {type(head_dim).__name__}")
    if not 1 <= head_dim <= HEAD_DIM_MAX:
        raise ValueError(f"head_dim must lie in [1, {HEAD_DIM_MAX}], got {head_dim}")
    head_dim = int(head_dim)
    if head_dim not in _PREFILL_KERNELS:
        _PREFILL_KERNELS[head_dim] = _build_prefill_kernel(head_dim)
    return _PREFILL_KERNELS[head_dim]


def _build_prefill_kernel(D: int):
    """Day 7's prefill kernel with every load converted to float32 and the store rounded: thread t of
    block (x, y, b) owns position x * positions + t // heads_per_block of head t % heads_per_block
    of sub-group y % subgroups."""

    @cuda.jit
    def gqa_prefill_mixed_precision_kernel(q, k, v, kv_lens, o, scale, causal):
        group = q.shape[1] // k.shape[1]
        subgroups, heads_per_block, positions = prefill_tiling_on_device(group)
        kv_head = cuda.blockIdx.y // subgroups
        first = (cuda.blockIdx.y - kv_head * subgroups) * heads_per_block
        b = cuda.blockIdx.z
        t = cuda.threadIdx.x
        rows = cuda.blockDim.x
        n_queries = q.shape[2]
        tile_start = cuda.blockIdx.x * positions
        local_position = t // heads_per_block
        position = tile_start + local_position
        head_in_group = first + (t - local_position * heads_per_block)
        h = kv_head * group + head_in_group
        # K and V tiles are float32 in shared memory: converted once by the thread that loads them,
        # then read by every row of the block without another conversion.
        k_tile = cuda.shared.array((TILE_KV, D), float32)
        v_tile = cuda.shared.array((TILE_KV, D), float32)
        scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)
        q_row = cuda.local.array(D, float32)
        acc = cuda.local.array(D, float32)

        active = position < n_queries and head_in_group < group
        # The scale goes into q before any product: fp16 logits of 1e4 and more are fine in float32,
        # and so is every product of two fp16 numbers.
        for c in range(D):
            q_row[c] = float32(q[b, h, position, c]) * scale if active else float32(0.0)
            acc[c] = float32(0.0)
        row_max = float32(-math.inf)
        row_sum = float32(0.0)

        kv_end = min(kv_lens[b], k.shape[2])
        if causal:
            kv_end = min(kv_end, tile_start + positions, n_queries)
        for kv_start in range(0, kv_end, TILE_KV):
            n_tile = min(TILE_KV, kv_end - kv_start)
            for idx in range(t, n_tile * D, rows):
                j = idx // D
                c = idx - j * D
                k_tile[j, c] = float32(k[b, kv_head, kv_start + j, c])
                v_tile[j, c] = float32(v[b, kv_head, kv_start + j, c])
            cuda.syncthreads()

            n_valid = n_tile
            if causal:
                n_valid = min(n_tile, position - kv_start + 1)
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
                o[b, h, position, c] = acc[c] * inv_sum       # rounded once, to the dtype of o

    return gqa_prefill_mixed_precision_kernel


def _launch_prefill(q, k, v, causal, kv_lens, scale, out, kernel_for):
    """Validate, then launch ``kernel_for(head_dim)`` with day 7's prefill grid: both prefill rungs.
    NumPy bf16 arrays travel to a GPU as uint16 (``_bf16_to_device``)."""
    batch, heads, kv_heads, n_queries, n_keys, head_dim = check_prefill_inputs(q, k, v)
    causal = require_bool("causal", causal)
    lens = prepare_kv_lens(kv_lens, batch, n_keys, like=q)
    scale = default_scale(head_dim, scale)
    out = output_array("out", out, (batch, heads, n_queries, head_dim), like=q, dtype=np.dtype(q.dtype))
    if batch and heads and n_queries:
        launch = kernel_for(head_dim)[prefill_grid(batch, heads, kv_heads, n_queries), prefill_block(heads, kv_heads)]
        if _is_host_bf16(q):
            device_out = note_output(cuda.device_array(out.shape, np.uint16).view(out.dtype))
            launch(_bf16_to_device(q), _bf16_to_device(k), _bf16_to_device(v), lens, device_out, scale, causal)
            device_out.view(np.uint16).copy_to_host(out.view(np.uint16))
        else:
            launch(q, k, v, lens, out, scale, causal)
    return out


def gqa_prefill_mixed_tiles(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                            kernel=gqa_prefill_mixed_tiles_kernel):
    """Grouped-query flash attention on fp16, bf16 or float32 tensors with head_dim read at run time;
    returns out (B, H, N, d) in the dtype of q.

    The arguments and the grid of ``gqa_prefill_mixed_precision``; ``kernel`` is launched as it is
    (the day's exercise). Its query row and accumulator are arrays of ``HEAD_DIM_MAX`` floats, as in
    day 7's ``gqa_prefill_tiles``: the next rung fixes head_dim at compile time.
    """
    return _launch_prefill(q, k, v, causal, kv_lens, scale, out, lambda head_dim: kernel)


def gqa_prefill_mixed_precision(q, k, v, *, causal=False, kv_lens=None, scale=None, out=None,
                                kernel=gqa_prefill_mixed_precision_kernel):
    """Grouped-query flash attention on fp16, bf16 or float32 tensors; returns out (B, H, N, d) in
    the dtype of q.

    q (B, H, N, d), k and v (B, KVH, M, d) of one dtype of ``PREFILL_DTYPES`` (bf16:
    ``ml_dtypes.bfloat16``), NumPy or device arrays, ``H`` a multiple of ``KVH``, ``d <=
    HEAD_DIM_MAX``. ``causal``, ``kv_lens`` (B,) int32 and ``scale`` as for day 7's
    ``gqa_prefill_flash``; rows with no allowed key give 0. ``kernel`` is a function of head_dim
    that returns the kernel to launch; blocks and grid are day 7's (``prefill_block``,
    ``prefill_grid``).
    """
    return _launch_prefill(q, k, v, causal, kv_lens, scale, out, kernel)


def _is_host_bf16(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.name == "bfloat16"


def _bf16_to_device(a):
    """A NumPy bf16 array on the device. numba moves NumPy arrays through the buffer protocol, which has
    no bf16 (on a GPU the launch fails: "cannot include dtype 'E' in a buffer"), so the bits travel as
    uint16 and the device array is viewed as bf16 again."""
    return cuda.to_device(a.view(np.uint16)).view(a.dtype)
