"""The pattern every kernel module follows, checked over every registry at once.

- ``kernels.launching``: one ``cdiv`` and the ``require_*`` family, each error naming the argument,
  what was expected and what was received;
- every kernel module has a ``RUNGS`` registry whose order is the order of its docstring;
- every rung, launched through its registry entry with its kernels given as ``kernel=``, matches the
  float64 reference at small awkward shapes on the simulator, and launches every kernel it names;
- every kernel of every rung compiles for a GPU (sm_80 and sm_90, ``course.gpu_compile.ptx_for_targets``),
  in a separate process without the simulator, started early so it overlaps the simulator tests;
- ``course.simulator`` does not import ``course.device`` (the import circle stays broken).

Adding a rung to an existing ladder needs no change here; a new operation adds one entry to
``OPERATIONS``. Run as a script (``python tests/test_kernels_pattern.py``, without the simulator)
it compiles every kernel and prints one JSON line per kernel and compute capability.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import pathlib
import pkgutil
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from numba import cuda

import kernels
from course.gpu_compile import COMPUTE_CAPABILITIES, ptx_for_targets
from kernels import launching, registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Kernel modules without a ladder, and why.
NOT_LADDERS = {"probes": "day-1 measurement probes, not rungs to learn from"}
# Helpers of the kernel modules, not kernel modules: block_manager, block_pool and paging are host Python,
# intrinsics the device helpers that numba cannot write.
# host Python: the block manager and its pool (day 6), the operations of day 10's decode step and the step itself,
# and tuning, which times a rung's builds to choose one (day 4's v8, the tensor-core GEMM's v7)
NOT_KERNEL_MODULES = ("launching", "registry", "reference", "block_manager", "block_pool", "paging", "intrinsics",
                      "step_ops", "decode_step", "tuning")


# ---------------------------------------------------------------------------------------------
# The registries
# ---------------------------------------------------------------------------------------------

def kernel_modules() -> list[str]:
    """Every module of the kernels package that holds kernels (the probes included)."""
    return sorted(info.name for info in pkgutil.iter_modules(kernels.__path__)
                  if info.name not in NOT_KERNEL_MODULES)


def ladder_modules():
    return [importlib.import_module(f"kernels.{name}") for name in kernel_modules() if name not in NOT_LADDERS]


def every_rung() -> list[tuple[str, registry.Rung]]:
    """``(module name, rung)`` for each distinct rung of every registry (a ladder may span modules)."""
    seen, rungs = set(), []
    for module in ladder_modules():
        for rung in module.RUNGS.values():
            if rung.launcher not in seen:
                seen.add(rung.launcher)
                rungs.append((module.__name__, rung))
    return rungs


def rung_id(entry) -> str:
    return entry[1].launcher.__name__


# ---------------------------------------------------------------------------------------------
# One case per operation: inputs at small awkward shapes and the float64 reference
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Operation:
    """How to try every rung whose launcher name starts with an operation's name."""

    inputs: Callable       # (rng, rung) -> (args, kwargs) for the launcher, outputs poisoned with NaN
    reference: Callable    # (*args, **kwargs) -> the float64 result, or a tuple of them
    # (result, args, kwargs, seed) -> None, raising on a wrong result: for an output that no single reference
    # pins down (a quantizer's code at a tie); None compares with ``reference`` by ``check``
    judge: Callable | None = None


def _floats(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _nan(*shape):
    return np.full(shape, np.nan, np.float32)


def _attention_inputs(rng, rung):
    # 33 keys: two key tiles of the tiled kernels, the second holding one key. Their 65 queries make
    # two query tiles, the second holding one row; the per-row rungs have no query tiles, and 17 rows
    # spare the naive rung a softmax block (a dozen barriers) per row.
    n_queries = 65 if rung.launcher.__module__ == "kernels.flash_attention" else 17
    q, k, v = _floats(rng, 1, 2, n_queries, 3), _floats(rng, 1, 2, 33, 3), _floats(rng, 1, 2, 33, 3)
    return (q, k, v), {"out": _nan(1, 2, n_queries, 3)}


def _attention_reference(q, k, v, **_):
    from kernels import reference

    return reference.attention(q, k, v)


def _row_stats_reference(x, **_):
    x64 = x.astype(np.float64)
    return x64.max(axis=1), x64.sum(axis=1)


def _softmax_reference(x, **_):
    from kernels import reference

    return reference.softmax(x)


def _gemm_reference(a, b, **_):
    from kernels import reference

    return reference.gemm(a, b)


def _tc_gemm_inputs(rng, rung):
    """fp16 a (37, 48) and w (45, 48): one 64 x 64 tile of C, partial both ways, a step of 32 and one of 16 along K
    (``kernels.tensor_core_gemm``: C = a w^T)."""
    return (_floats(rng, 37, 48).astype(np.float16), _floats(rng, 45, 48).astype(np.float16)), {"out": _nan(37, 45)}


def _tc_gemm_reference(a, w, **_):
    from kernels import reference

    return reference.gemm(a, w.T)


def _paged_inputs(rng, rung):
    """Two query heads per KV head, blocks of 4 in a shuffled table, contexts of 13 (a partial last
    page), 0 and 4 (exactly one page); v2 cuts them into partitions of 5 tokens."""
    num_blocks, block_size, d = 9, 4, 3
    tables = np.full((3, 4), -1, np.int32)
    order = rng.permutation(num_blocks).astype(np.int32)
    tables[0], tables[2, 0] = order[:4], order[4]
    lens = np.array([13, 0, 4], np.int32)
    cache = lambda: _floats(rng, num_blocks, 1, block_size, d)
    kwargs = {"out": _nan(3, 2, d)}
    if "partition_size" in inspect.signature(rung.launcher).parameters:
        kwargs["partition_size"] = 5
    return (_floats(rng, 3, 2, d), cache(), cache(), tables, lens), kwargs


def _gqa_prefill_inputs(rng, rung):
    """Groups of 3 query heads on 2 KV heads: 67 positions make two blocks of 64 positions x 3 heads
    per KV head, the second with 3 positions; 33 keys make three key tiles of 16, the last partial."""
    q, k, v = _floats(rng, 1, 6, 67, 3), _floats(rng, 1, 2, 33, 3), _floats(rng, 1, 2, 33, 3)
    return (q, k, v), {"out": _nan(1, 6, 67, 3)}


def _gqa_decode_inputs(rng, rung):
    """``_paged_inputs`` with 3 query heads on its one KV head."""
    (q, *cache_and_tables), kwargs = _paged_inputs(rng, rung)
    q = _floats(rng, q.shape[0], 3, q.shape[2])
    return (q, *cache_and_tables), {**kwargs, "out": _nan(*q.shape)}


def _page_runs_inputs(rng, rung):
    """``_gqa_decode_inputs`` at head_dim 4 (a lane reads 4 channels as words) in partitions of 4 tokens
    (a multiple of the run, 2 tokens for a float32 cache at group 3 in pages of 4)."""
    (_, k_cache, _, tables, lens), kwargs = _paged_inputs(rng, rung)
    shape = (*k_cache.shape[:3], 4)
    q = _floats(rng, len(lens), 3, 4)
    return (q, _floats(rng, *shape), _floats(rng, *shape), tables, lens), {**kwargs, "out": _nan(*q.shape),
                                                                             "partition_size": 4}


def _half_warps_inputs(rng, rung):
    """``_page_runs_inputs`` at head_dim 8 (a lane reads 8 channels) in partitions of 4 tokens (a multiple
    of the run, 4 tokens for a float32 cache at group 3 in pages of 4)."""
    (_, k_cache, _, tables, lens), kwargs = _paged_inputs(rng, rung)
    shape = (*k_cache.shape[:3], 8)
    q = _floats(rng, len(lens), 3, 8)
    return (q, _floats(rng, *shape), _floats(rng, *shape), tables, lens), {**kwargs, "out": _nan(*q.shape),
                                                                             "partition_size": 4}


def _tensor_cores_inputs(rng, rung):
    """``_half_warps_inputs`` with the cache stored in fp16 (the tensor-core decode multiplies fp16 numbers) in
    partitions of 16 tokens (a warp's tile)."""
    (q, k_cache, v_cache, tables, lens), kwargs = _half_warps_inputs(rng, rung)
    return (q, k_cache.astype(np.float16), v_cache.astype(np.float16), tables, lens), {**kwargs, "partition_size": 16}


def _fp8_ring_inputs(rng, rung):
    """``_half_warps_inputs``' layout at head_dim 16 (the rings' 16-byte copies hold 16 codes) or, for the deep rung,
    64 (four lanes share a K row, 16 codes a load), K and V quantized to fp8 e4m3 codes with a scale per page and KV
    head (``kernels.reference.quantize_fp8``), in partitions of 16 tokens (a warp's tile); pages of 4, so a tile's
    rows lie on several pages."""
    from kernels import reference

    d = 64 if rung.name == "gqa_decode_fp8_deep" else 16
    (_, k_cache, _, tables, lens), kwargs = _paged_inputs(rng, rung)
    shape = (*k_cache.shape[:3], d)
    q = _floats(rng, len(lens), 3, d)
    (k_codes, k_scales), (v_codes, v_scales) = (reference.quantize_fp8(_floats(rng, *shape)) for _ in range(2))
    return (q, k_codes, v_codes, tables, lens), {**kwargs, "k_scales": k_scales, "v_scales": v_scales,
                                                 "out": _nan(*q.shape), "partition_size": 16}


def _fp8_reference(q, k_codes, v_codes, block_tables, context_lens, *, k_scales, v_scales, **_):
    from kernels import reference

    return reference.paged_attention(q, reference.dequantize_fp8(k_codes, k_scales),
                                     reference.dequantize_fp8(v_codes, v_scales), block_tables, context_lens)


def _wide_prefill_inputs(rng, rung):
    """``_gqa_prefill_inputs`` at head_dim 131, past 128 and odd: rows of two threads (66 and 65 channels), blocks of
    42 positions x 3 heads (45 positions: two blocks, the second with 3) and K and V tiles of 8 keys (17: three
    tiles, the last with one key)."""
    q, k, v = _floats(rng, 1, 6, 45, 131), _floats(rng, 1, 2, 17, 131), _floats(rng, 1, 2, 17, 131)
    return (q, k, v), {"out": _nan(1, 6, 45, 131)}


def _tensor_prefill_inputs(rng, rung):
    """``_gqa_prefill_inputs``'s groups of 3 query heads on 2 KV heads stored in fp16 (the tensor-core prefill
    multiplies the numbers as stored; it refuses float32) at head_dim 16 (a multiple of the mma's k): 67 positions
    make two blocks of 64, the second with 3; 70 keys two tiles of 64, the second with 6."""
    q, k, v = (_floats(rng, 1, heads, n, 16).astype(np.float16) for heads, n in ((6, 67), (2, 70), (2, 70)))
    return (q, k, v), {"out": np.full((1, 6, 67, 16), np.nan, np.float16)}


def _judge_tensor_prefill(result, args, kwargs, seed):
    """fp16 output, judged by day 8's storage-precision rule (``docs/design-notes.md`` §5) against the float64
    reference on the stored inputs, whose same-precision reference is that reference rounded to fp16."""
    from course.checking import check
    from kernels import reference

    q, k, v = args
    check(result.astype(np.float64), reference.attention(q, k, v), name="gqa_prefill_tensor_cores", seed=seed,
          precision="fp16", same_precision_ref=reference.attention_at_precision(q, k, v, "fp16"))


def _wide_decode_inputs(rng, rung):
    """``_paged_inputs`` with 3 query heads on its one KV head at head_dim 136, past 128: a whole warp a token, its
    lanes 17 to 31 without channels; partitions of 4 tokens (a multiple of a run, 2 tokens of a float32 cache)."""
    (_, k_cache, _, tables, lens), kwargs = _paged_inputs(rng, rung)
    shape = (*k_cache.shape[:3], 136)
    q = _floats(rng, len(lens), 3, 136)
    return (q, _floats(rng, *shape), _floats(rng, *shape), tables, lens), {**kwargs, "out": _nan(*q.shape),
                                                                             "partition_size": 4}


def _paged_reference(q, k_cache, v_cache, block_tables, context_lens, **_):
    from kernels import reference

    return reference.paged_attention(q, k_cache, v_cache, block_tables, context_lens)


# The caches before kv_cache_write wrote into them (it writes in place), by id of the array.
_CACHES_BEFORE: dict = {}


def _kv_cache_inputs(rng, rung):
    """Two sequences in a shuffled table, blocks of 4: six prompt tokens crossing a block boundary,
    then one token at the first slot of a block and one at the last."""
    num_blocks, block_size, kv_heads, d = 8, 4, 2, 3
    tables = rng.permutation(num_blocks).astype(np.int32).reshape(2, 4)
    seqs = np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int32)
    positions = np.array([2, 3, 4, 5, 6, 7, 8, 15], np.int32)
    k_cache, v_cache = _floats(rng, num_blocks, kv_heads, block_size, d), _floats(rng, num_blocks, kv_heads, block_size, d)
    _CACHES_BEFORE[id(k_cache)] = (k_cache.copy(), v_cache.copy())
    args = (_floats(rng, 8, kv_heads, d), _floats(rng, 8, kv_heads, d), seqs, positions, tables,
            k_cache, v_cache)
    return args, {}


def _kv_cache_reference(k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache, **_):
    k_before, v_before = _CACHES_BEFORE.pop(id(k_cache))
    k_want, v_want = k_before.astype(np.float64), v_before.astype(np.float64)
    block_size = k_cache.shape[2]
    for t, (s, position) in enumerate(zip(token_seqs, token_positions)):
        block = block_tables[s, position // block_size]
        k_want[block, :, position % block_size] = k_new[t]
        v_want[block, :, position % block_size] = v_new[t]
    return k_want, v_want


def _quantized_gemv_inputs(rng, rung):
    """7 rows (two blocks of 4 warps, the second with 3) of K = 96 (3 GGUF blocks), the second row all zeros,
    stored in the format the rung's name begins with."""
    from kernels import reference

    fmt = rung.launcher.__name__.split("_gemv")[0]
    weights = _floats(rng, 7, 96)
    weights[1] = 0.0
    w = getattr(reference, f"quantize_{fmt}")(weights).reshape(7, 3, -1)
    return (w, _floats(rng, 96)), {"out": _nan(7)}


def _int4_g128_gemv_inputs(rng, rung):
    """7 rows (two blocks of 4 warps, the second with 3) of K = 256 (two groups of 128), the second row all zeros."""
    from kernels import reference

    weights = _floats(rng, 7, 256)
    weights[1] = 0.0
    return (reference.quantize_int4_g128(weights).reshape(7, 2, -1), _floats(rng, 256)), {"out": _nan(7)}


def _quantized_gemv_reference(fmt):
    """W x in float64, W the GGUF bytes w (N, blocks, block_bytes) of format ``fmt`` dequantized."""
    def reference_of(w, x, **_):
        from kernels import reference

        return getattr(reference, f"dequantize_{fmt}")(w.reshape(w.shape[0], -1)) @ x.astype(np.float64)
    return reference_of


def _tokens_gemm_inputs(rng, rung):
    """11 tokens (a pass of 8 and one of 3) times 7 rows of K = 96 in the rung's format (``kernels.token_gemv``)."""
    from kernels import reference

    fmt = rung.launcher.__name__.split("_gemm")[0]
    weights = _floats(rng, 7, 96)
    weights[1] = 0.0
    w = getattr(reference, f"quantize_{fmt}")(weights).reshape(7, 3, -1)
    return (w, _floats(rng, 11, 96)), {"out": _nan(11, 7)}


def _tokens_gemm_reference(fmt):
    """x W^T in float64 for x (T, K) and the GGUF bytes w of format ``fmt``."""
    def reference_of(w, x, **_):
        return np.stack([_quantized_gemv_reference(fmt)(w, token) for token in x])
    return reference_of


def _q4_1(rng, rows, k=96):
    from kernels import reference

    return reference.quantize_q4_1(_floats(rng, rows, k)).reshape(rows, k // 32, 20)


def _dequantized(w):
    from kernels import reference

    return reference.dequantize_q4_1(w.reshape(w.shape[0], -1))


def _norm_qkv_inputs(rng, rung):
    """11 tokens (two passes) of K = 96 through the concatenated rows 5 + 3 + 2 (``kernels.fused_llama``)."""
    return ((_q4_1(rng, 10), _floats(rng, 11, 96), 1 + _floats(rng, 96) / 10),
            {"eps": 1e-5, "rows": (5, 3, 2), "out": (_nan(11, 5), _nan(11, 3), _nan(11, 2))})


def _norm_qkv_reference(w, x, norm_weight, *, eps, rows, **_):
    from kernels import reference

    y = reference.rmsnorm(x, norm_weight, eps) @ _dequantized(w).T
    return y[:, :rows[0]], y[:, rows[0]:rows[0] + rows[1]], y[:, rows[0] + rows[1]:]


def _norm_qkv_rope_inputs(rng, rung):
    """11 tokens (two passes) of K = 96 through Wq (3 heads of d = 4), Wk and Wv (2 KV heads each), turned at their
    positions and written to ``_kv_cache_inputs``'s slots (``kernels.fused_llama.q4_1_norm_qkv_rope_cache``)."""
    from kernels import reference

    (_, _, seqs, positions, tables, k_cache, _), _ = _kv_cache_inputs(rng, rung)
    _CACHES_BEFORE.pop(id(k_cache))
    seqs, positions = np.concatenate([seqs, [1, 1, 1]]).astype(np.int32), np.concatenate([positions, [9, 10, 11]])
    k_cache, v_cache = _floats(rng, 8, 2, 4, 4), _floats(rng, 8, 2, 4, 4)
    return ((_q4_1(rng, 28), _floats(rng, 11, 96), 1 + _floats(rng, 96) / 10, seqs, positions.astype(np.int32),
             reference.rope_table(16, 4, 1e4), tables, k_cache, v_cache), {"eps": 1e-5, "out": _nan(11, 12)})


def _norm_qkv_rope_reference(w, x, norm_weight, token_seqs, positions, table, block_tables, k_cache, v_cache, *, eps,
                             **_):
    from kernels import reference

    q = reference.rmsnorm(x, norm_weight, eps) @ _dequantized(w[:12]).T
    return reference.rope_pairs(q.reshape(len(x), 3, 4), positions, 1e4).reshape(len(x), 12)


def _norm_swiglu_reference(w_gate, w_up, x, norm_weight, *, eps, **_):
    from kernels import reference

    h = reference.rmsnorm(x, norm_weight, eps)
    return reference.swiglu(h @ _dequantized(w_gate).T, h @ _dequantized(w_up).T)


def _times_q8_1_reference(fmt):
    """W x with x quantized to q8_1, as day 9's q8_1 rungs define it (``reference.gemv_q8_1``; a batch x (T, K)
    gives y (T, N), token by token)."""
    def reference_of(w, x, **_):
        from kernels import reference

        return reference.gemv_q8_1(w, x, fmt)
    return reference_of


def _w8a8_gemm_inputs(rng, rung):
    """67 tokens (two block rows of 64, the second with 3) by 21 channels, K = 32 (one k step): random codes with
    -128 and 127 among them, a scale per token and per channel."""
    a_q, w_q = rng.integers(-128, 128, (67, 32)).astype(np.int8), rng.integers(-128, 128, (21, 32)).astype(np.int8)
    a_q[0, 0], w_q[0, 0] = -128, 127
    sa, sw = rng.uniform(0.5, 2.0, 67).astype(np.float32), rng.uniform(1e-3, 2e-3, 21).astype(np.float32)
    return (a_q, sa, w_q, sw), {"out": _nan(67, 21)}


def _w8a8_gemm_reference(a_q, sa, w_q, sw, **_):
    from kernels import reference

    return reference.w8a8_matmul(a_q, sa, w_q, sw)


def _small_batch_inputs(rng, rung):
    """7 rows of 3 Q4_1 blocks (two warps of 4 rows, the second with 3), the second row all zeros, for a batch of
    3 tokens, x (3, 96)."""
    from kernels import reference

    weights = _floats(rng, 7, 96)
    weights[1] = 0.0
    return (reference.quantize_q4_1(weights).reshape(7, 3, -1), _floats(rng, 3, 96)), {"out": _nan(3, 7)}


def _embedding_inputs(rng, rung):
    """7 rows of a Q8_0 table of K = 96, 5 ids with a repeat and both ends."""
    from kernels import reference

    table = reference.quantize_q8_0(rng.standard_normal((7, 96))).reshape(7, 3, 34)
    return (table, np.array([6, 0, 3, 3, 1], np.int32)), {"out": _nan(5, 96)}


def _embedding_reference(table, ids, **_):
    from kernels import reference

    return reference.dequantize_q8_0(table[ids].reshape(len(ids), -1))


def _rope_inputs(rng, rung):
    """5 tokens of 3 heads of d = 18 at scattered positions of a 300-position table."""
    from kernels import reference

    return ((_floats(rng, 5, 3, 18), np.array([0, 7, 299, 7, 150], np.int32), reference.rope_table(300, 18, 1e4)),
            {"out": _nan(5, 3, 18)})


def _rope_reference(x, positions, table, **_):
    from kernels import reference

    return reference.rope_pairs(x, positions, 1e4)


def _rope_cache_inputs(rng, rung):
    """``_kv_cache_inputs``'s two sequences and slots, the tokens' q (3 heads) and k, v (2 KV heads) of d = 4 at
    their positions of a 16-position table (``kernels.fused_llama.rope_qk_cache_write``)."""
    from kernels import reference

    (k_new, v_new, seqs, positions, tables, k_cache, v_cache), _ = _kv_cache_inputs(rng, rung)
    _CACHES_BEFORE.pop(id(k_cache))
    k_new, v_new = _floats(rng, 8, 2, 4), _floats(rng, 8, 2, 4)
    k_cache, v_cache = _floats(rng, 8, 2, 4, 4), _floats(rng, 8, 2, 4, 4)
    q = _floats(rng, 8, 3, 4)
    _CACHES_BEFORE[id(q)] = q.copy()                     # q is turned in place: the reference reads it as it was
    return (q, k_new, v_new, seqs, positions, reference.rope_table(16, 4, 1e4), tables, k_cache, v_cache), {}


def _rope_cache_reference(q, k, v, token_seqs, positions, table, block_tables, k_cache, v_cache, **_):
    from kernels import reference

    return reference.rope_pairs(_CACHES_BEFORE.pop(id(q)), positions, 1e4)


def _rmsnorm_reference(x, weight, *, eps, **_):
    from kernels import reference

    return reference.rmsnorm(x, weight, eps)


def _judge_rmsnorm_q8_1(result, args, kwargs, seed):
    """The fused norm's q8_1 blocks, judged as day 10's exercise judges them (a code may be either side of a tie)."""
    from course.exercise_checks import check_rmsnorm_q8_1

    x, weight = args
    check_rmsnorm_q8_1(result, x, weight, kwargs["eps"], seed=seed)


def _swiglu_reference(gate, up, **_):
    from kernels import reference

    return reference.swiglu(gate, up)


OPERATIONS = {
    "copy": Operation(lambda rng, _: ((_floats(rng, 1000),), {"out": _nan(1000)}),
                      lambda x, **_: x.astype(np.float64)),
    "axpb": Operation(lambda rng, _: ((_floats(rng, 1000), 1.5, -0.25), {"out": _nan(1000)}),
                      lambda x, a, b, **_: a * x.astype(np.float64) + b),
    "normalize_rows": Operation(
        lambda rng, _: ((_floats(rng, 2, 3, 7, 37), rng.uniform(0.5, 2.0, (2, 3, 7)).astype(np.float32)),
                        {"out": _nan(2, 3, 7, 37)}),
        lambda x, row_sums, **_: x.astype(np.float64) / row_sums.astype(np.float64)[..., None]),
    "row_stats": Operation(lambda rng, _: ((_floats(rng, 5, 77),), {"out": (_nan(5), _nan(5))}),
                           _row_stats_reference),
    "softmax": Operation(lambda rng, _: ((_floats(rng, 5, 45) * 4,), {"out": _nan(5, 45)}), _softmax_reference),
    "attention": Operation(_attention_inputs, _attention_reference),
    "transpose": Operation(lambda rng, _: ((_floats(rng, 37, 45),), {"out": _nan(45, 37)}),
                           lambda x, **_: x.astype(np.float64).T),
    "gemm": Operation(lambda rng, _: ((_floats(rng, 37, 19), _floats(rng, 19, 21)), {"out": _nan(37, 21)}),
                      _gemm_reference),
    "tc_gemm": Operation(_tc_gemm_inputs, _tc_gemm_reference),         # kernels.tensor_core_gemm
    "paged_attention": Operation(_paged_inputs, _paged_reference),
    "kv_cache": Operation(_kv_cache_inputs, _kv_cache_reference),
    "gqa_prefill": Operation(_gqa_prefill_inputs, _attention_reference),
    "gqa_decode": Operation(_gqa_decode_inputs, _paged_reference),
    "gqa_decode_page": Operation(_page_runs_inputs, _paged_reference),       # gqa_decode_page_runs
    "gqa_decode_half": Operation(_half_warps_inputs, _paged_reference),      # gqa_decode_half_warps
    "gqa_decode_tensor": Operation(_tensor_cores_inputs, _paged_reference),  # gqa_decode_tensor_cores
    "gqa_prefill_wide": Operation(_wide_prefill_inputs, _attention_reference),   # gqa_prefill_wide_heads
    "gqa_prefill_tensor": Operation(_tensor_prefill_inputs, None, judge=_judge_tensor_prefill),  # ..._tensor_cores
    "gqa_decode_wide": Operation(_wide_decode_inputs, _paged_reference),         # gqa_decode_wide_heads
    "gqa_decode_fp8": Operation(_fp8_ring_inputs, _fp8_reference),      # gqa_decode_fp8_ring, _lean_ring, _deep
    **{f"{fmt}_gemv": Operation(_quantized_gemv_inputs, _quantized_gemv_reference(fmt))
       for fmt in ("q8_0", "q4_0", "q4_1")},
    **{f"{fmt}_gemm": Operation(_tokens_gemm_inputs, _tokens_gemm_reference(fmt)) for fmt in ("q8_0", "q4_1")},
    "q4_1_norm_qkv": Operation(_norm_qkv_inputs, _norm_qkv_reference),
    "q4_1_norm_qkv_rope": Operation(_norm_qkv_rope_inputs, _norm_qkv_rope_reference),   # ..._rope_cache: q turned
    "q4_1_residual": Operation(lambda rng, _: ((_q4_1(rng, 7), _floats(rng, 11, 96), _floats(rng, 11, 7)),
                                               {"out": _nan(11, 7)}),
                               lambda w, x, residual, **_: x.astype(np.float64) @ _dequantized(w).T + residual),
    "q4_1_norm_swiglu": Operation(lambda rng, _: ((_q4_1(rng, 7), _q4_1(rng, 7), _floats(rng, 11, 96),
                                                   1 + _floats(rng, 96) / 10), {"eps": 1e-5, "out": _nan(11, 7)}),
                                  _norm_swiglu_reference),
    "q4_1_gemv_q8_1": Operation(_quantized_gemv_inputs, _times_q8_1_reference("q4_1")),   # dp4a, repacked, wide
    "q8_0_gemv_q8_1": Operation(_quantized_gemv_inputs, _times_q8_1_reference("q8_0")),   # q8_0_gemv_q8_1_wide
    "q4_0_gemv_q8_1": Operation(_quantized_gemv_inputs, _times_q8_1_reference("q4_0")),   # q4_0_gemv_q8_1_persistent
    "int4_g128_gemv_q8_1": Operation(_int4_g128_gemv_inputs, _times_q8_1_reference("int4_g128")),
    "q4_1_gemv_q8_1_small": Operation(_small_batch_inputs, _times_q8_1_reference("q4_1")),    # the batched rung
    "w8a8_gemm": Operation(_w8a8_gemm_inputs, _w8a8_gemm_reference),
    "embedding_q8_0": Operation(_embedding_inputs, _embedding_reference),
    "rmsnorm": Operation(lambda rng, _: ((_floats(rng, 3, 300), _floats(rng, 300)), {"eps": 1e-5, "out": _nan(3, 300)}),
                         _rmsnorm_reference),
    "rmsnorm_q8_1": Operation(lambda rng, _: ((_floats(rng, 3, 288), _floats(rng, 288)),
                                              {"eps": 1e-5, "out": np.full((3, 288), -128, np.int8),
                                               "out_scales": _nan(3, 9), "out_sums": _nan(3, 9)}),
                              None, judge=_judge_rmsnorm_q8_1),
    "rope_pairs": Operation(_rope_inputs, _rope_reference),
    "rope_qk_cache": Operation(_rope_cache_inputs, _rope_cache_reference),       # rope_qk_cache_write: q turned
    "swiglu": Operation(lambda rng, _: ((5 * _floats(rng, 4, 333), _floats(rng, 4, 333)), {"out": _nan(4, 333)}),
                        _swiglu_reference),
    "add": Operation(lambda rng, _: ((_floats(rng, 4, 333), _floats(rng, 4, 333)), {"out": _nan(4, 333)}),
                     lambda x, y, **_: x.astype(np.float64) + y),
}


def operation_of(rung: registry.Rung) -> Operation:
    name = rung.launcher.__name__
    matches = [op for op in OPERATIONS if name.startswith(op + "_")]
    if not matches:
        raise LookupError(f"no entry of OPERATIONS names the operation of {name}: add one")
    return OPERATIONS[max(matches, key=len)]


# ---------------------------------------------------------------------------------------------
# Kernels given through kernel=: launches are seen (and, for compiling, replaced)
# ---------------------------------------------------------------------------------------------

class SeenKernel:
    """Stands for a kernel: ``seen[config](*args)`` records the launch, then ``on_launch`` handles it."""

    def __init__(self, kernel, keyword: str, launches: list, on_launch):
        self.kernel, self.keyword, self.launches, self.on_launch = kernel, keyword, launches, on_launch

    def __getitem__(self, config):
        def launch(*args):
            self.launches.append((self.keyword, self.kernel, args))
            self.on_launch(self.kernel, config, args)
        return launch


def seen_kernels(rung: registry.Rung, launches: list, on_launch) -> dict:
    """``{keyword: stand-in}`` for each kernel of the rung; a kernel factory (v5) gets a factory of stand-ins."""
    def factory_of_stand_ins(factory, keyword):
        return lambda *args: SeenKernel(factory(*args), keyword, launches, on_launch)

    stand_ins = {}
    for keyword, kernel in rung.kernels.items():
        if hasattr(kernel, "py_func") or hasattr(kernel, "fn"):   # a kernel, on a GPU or the simulator
            stand_ins[keyword] = SeenKernel(kernel, keyword, launches, on_launch)
        else:
            stand_ins[keyword] = factory_of_stand_ins(kernel, keyword)
    return stand_ins


def _run_on_simulator(kernel, config, args):
    kernel[config](*args)


@cuda.jit
def copy_skips_last_kernel(x, y):
    """WRONG on purpose: the copy of copy_v1_guarded without the last element."""
    i = cuda.grid(1)
    if i < x.size - 1:
        y[i] = x[i]


# ---------------------------------------------------------------------------------------------
# kernels.launching: cdiv and the require_* family
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, d, tiles", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (64, 64, 1), (65, 64, 2)])
def test_cdiv_counts_the_tiles_that_cover_n(n, d, tiles):
    assert launching.cdiv(n, d) == tiles


def test_there_is_one_cdiv():
    """Every ceiling-division helper of the kernels is launching.cdiv itself."""
    from kernels import elementwise, gemm

    assert gemm.cdiv is launching.cdiv and elementwise.blocks_for is launching.cdiv
    defined = [f"{path.relative_to(ROOT)}:{node.name}" for path in (ROOT / "kernels").rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.FunctionDef) and ("cdiv" in node.name or "ceil" in node.name)]
    assert defined == ["kernels/launching.py:cdiv"]


F32 = np.zeros((2, 3), np.float32)


@pytest.mark.parametrize("call, error, words", [
    (lambda: launching.require_float32("q", [1.0], (None,)), TypeError, r"q must be a NumPy array .* got list"),
    (lambda: launching.require_float32("q", F32.astype(np.float64), (2, 3)), TypeError,
     r"q must have dtype float32, got float64"),
    (lambda: launching.require_float32("x", F32, (None,)), ValueError, r"x must have 1 dimension \(any,\), got shape"),
    (lambda: launching.require_float32("x", np.zeros(3, np.float32), (4,)), ValueError,
     r"x must have shape \(4,\), got \(3,\) \(dimension 0 is 3, not 4\)"),
    (lambda: launching.require_float32("q", F32, (2, 3, 1)), ValueError,
     r"q must have 3 dimensions \(2, 3, 1\), got shape \(2, 3\)"),
    (lambda: launching.require_float32("q", F32, (2, 4), dims=("seq", "head_dim")), ValueError,
     r"q must have shape \(seq=2, head_dim=4\), got \(2, 3\) \(head_dim is 3, not 4\)"),
    (lambda: launching.require_float32("q", F32, (3, None)), ValueError, r"q must have shape \(3, any\), got \(2, 3\)"),
    (lambda: launching.require_float32("q", np.zeros((4, 3), np.float32)[::2], (2, 3)), ValueError,
     "q must be C-contiguous"),
    (lambda: launching.require_float32("q", F32, (2, 3), dims=("seq",)), ValueError, "dims must name each"),
    (lambda: launching.require_int32("context_lens", np.zeros(3, np.int64), (3,)), TypeError,
     "context_lens must have dtype int32, got int64"),
    (lambda: launching.require_int32("block_tables", np.zeros((2, 5), np.int32), (2, 4),
                                     dims=("num_seqs", "max_blocks_per_seq")), ValueError,
     r"block_tables must have shape \(num_seqs=2, max_blocks_per_seq=4\), got \(2, 5\)"),
    (lambda: launching.require_dtype("k_cache", np.zeros(2, np.float64), launching.FLOAT_DTYPES), TypeError,
     "k_cache must have dtype one of float16, bfloat16, float32, got float64"),
    (lambda: launching.require_values_in("context_lens", np.array([0, 9], np.int32), 0, 8), ValueError,
     r"context_lens must lie in \[0, 8\], got values from 0 to 9"),
    (lambda: launching.require_bool("causal", 1), TypeError, "causal must be True or False, got int 1"),
    (lambda: launching.require_int("block_size", 2.0), TypeError, "block_size must be an int, got float 2.0"),
    (lambda: launching.require_int("block_size", True), TypeError, "block_size must be an int, got bool"),
    (lambda: launching.require_int("tile", 9, maximum=8), ValueError, "tile must be an int <= 8, got 9"),
    (lambda: launching.require_positive_int("block_size", 0), ValueError, "block_size must be an int >= 1, got 0"),
    (lambda: launching.require_non_negative_int("n", -1), ValueError, "n must be an int >= 0, got -1"),
    (lambda: launching.require_scalar("a", "2"), TypeError, "a must be a real number, got str '2'"),
    (lambda: launching.require_kv_heads(9, 2, q_name="q", kv_name="k_cache"), ValueError,
     r"k_cache must have kv_heads dividing the heads of q \(9\).*got kv_heads 2"),
    (lambda: launching.require_kv_heads(4, 0), ValueError, "got kv_heads 0"),
    (lambda: launching.output_array("out", np.zeros(3, np.float16), (3,), F32, dtype=np.float32), TypeError,
     "out must have dtype float32, got float16"),
])
def test_require_errors_name_the_argument_the_expected_and_the_received(call, error, words):
    with pytest.raises(error, match=words):
        call()


class _DeviceView:
    """What numba makes of ``cuda.to_device(a)[None, :]`` on a GPU: a 0 stride on the axis of length 1,
    and is_c_contiguous() False, though the elements lie in C order."""

    dtype = np.dtype(np.float32)

    def __init__(self, shape, strides):
        self.shape, self.strides = shape, strides

    def is_c_contiguous(self):
        return False

    def copy_to_host(self):
        raise NotImplementedError


def test_a_device_array_with_a_length_one_axis_is_contiguous_whatever_its_stride():
    assert launching.require_float32("q", _DeviceView((1, 4), (0, 4)), (1, 4)) == (1, 4)
    with pytest.raises(ValueError, match="q must be C-contiguous"):
        launching.require_float32("q", _DeviceView((2, 4), (4, 8)), (2, 4))


def test_require_accepts_what_it_promises():
    import ml_dtypes

    assert launching.require_float32("q", F32, (2, None), dims=("seq", "head_dim")) == (2, 3)
    assert launching.require_int32("lens", np.arange(3, dtype=np.int32), (3,)) == (3,)
    bf16 = np.zeros(4, ml_dtypes.bfloat16)
    assert launching.require_dtype("x", bf16, launching.FLOAT_DTYPES) == np.dtype(ml_dtypes.bfloat16)
    assert launching.require_array("x", np.zeros(4, np.float16), (4,), launching.FLOAT_DTYPES) == (4,)
    launching.require_values_in("lens", np.array([0, 8], np.int32), 0, 8)
    assert launching.require_bool("causal", np.True_) is True
    assert launching.require_int("n", np.int64(5), minimum=0, maximum=5) == 5
    assert launching.require_scalar("a", 2) == np.float32(2.0)
    assert launching.require_kv_heads(9, 3) == 3 and launching.require_kv_heads(4, 4) == 1
    assert launching.output_array("out", None, (2, 2), F32, dtype="bfloat16").dtype == np.dtype(ml_dtypes.bfloat16)


def test_require_same_kind_names_each_array():
    from numba import cuda

    launching.require_same_kind(q=F32, k=F32)
    with pytest.raises(TypeError, match="q, k must all be NumPy arrays or all be device arrays, got: "
                                        "q is a NumPy array, k is a device array"):
        launching.require_same_kind(q=F32, k=cuda.to_device(F32))


# ---------------------------------------------------------------------------------------------
# Registries
# ---------------------------------------------------------------------------------------------

def test_every_kernel_module_has_a_registry():
    for name in kernel_modules():
        module = importlib.import_module(f"kernels.{name}")
        if name in NOT_LADDERS:
            continue
        assert isinstance(getattr(module, "RUNGS", None), type(registry.ladder())), (
            f"kernels.{name} must end with RUNGS = ladder(Rung(...), ...)")
        assert module.RUNGS and all(isinstance(r, registry.Rung) for r in module.RUNGS.values())


@pytest.mark.parametrize("module", ladder_modules(), ids=lambda m: m.__name__)
def test_docstring_lists_the_registered_rungs_in_order(module):
    bullets = re.findall(r"^\s*- ``(\w+)``", module.__doc__, flags=re.MULTILINE)
    registered = [rung.launcher.__name__ for rung in module.RUNGS.values()]
    listed = [name for name in bullets if name in registered]
    assert listed == registered, (f"{module.__name__}: the docstring lists the rungs as {listed}, "
                                  f"RUNGS holds {registered}")
    unregistered = [name for name in bullets if re.search(r"_v\d+_", name) and name not in registered]
    assert not unregistered, f"{module.__name__}: rungs in the docstring missing from RUNGS: {unregistered}"
    for rung in module.RUNGS.values():   # a ladder that spans modules holds the launchers of both
        home = sys.modules[rung.launcher.__module__]
        assert home.__name__.startswith("kernels.") and getattr(home, rung.launcher.__name__) is rung.launcher


def test_registry_entries_refuse_what_breaks_the_pattern():
    from kernels import gemm

    def no_kernel_keyword(a, b):
        return a

    with pytest.raises(TypeError, match="must take the kernel it launches as a keyword-only parameter"):
        registry.Rung("gemm_v9_nothing", no_kernel_keyword, "nothing")
    with pytest.raises(ValueError, match="adds of rung 'x' must be one line"):
        registry.Rung("x", gemm.gemm_v1_naive, "two\nlines")
    with pytest.raises(ValueError, match="name must be an identifier"):
        registry.Rung("v1 naive", gemm.gemm_v1_naive, "x")
    rung = gemm.RUNGS["gemm_v1_naive"]
    with pytest.raises(ValueError, match="'gemm_v1_naive' appears twice"):
        registry.ladder(rung, rung)
    with pytest.raises(TypeError):
        gemm.RUNGS["gemm_v0"] = rung                      # read-only
    assert rung.kernels == {"kernel": gemm.gemm_v1_naive_kernel}


@pytest.mark.parametrize("entry", every_rung(), ids=rung_id)
def test_every_rung_matches_the_reference_through_kernel_keywords(entry):
    """Launched with its kernels passed as kernel=, a rung launches each of them and matches the reference."""
    from course.checking import check, random_inputs

    _, rung = entry
    operation = operation_of(rung)
    rng, seed = random_inputs()
    args, kwargs = operation.inputs(rng, rung)
    launches = []
    result = rung(*args, **kwargs, **seen_kernels(rung, launches, _run_on_simulator))
    assert {keyword for keyword, _, _ in launches} == set(rung.kernels), (
        f"{rung.launcher.__name__} must launch every kernel it takes: launched {launches}")
    if operation.judge is not None:
        operation.judge(result, args, kwargs, seed)
        return
    want = operation.reference(*args, **kwargs)
    if isinstance(want, tuple):
        for i, (got, ref) in enumerate(zip(result, want)):
            check(got, ref, name=f"{rung.name} output {i}", seed=seed)
    else:
        check(result, want, name=rung.name, seed=seed)


def test_a_wrong_kernel_given_through_kernel_fails_the_check():
    """The registry test above can fail: a copy kernel that skips the last element is caught."""
    from course.checking import CheckFailure, check, random_inputs
    from kernels import elementwise

    rng, seed = random_inputs()
    rung = elementwise.RUNGS["copy_v1_guarded"]
    args, kwargs = OPERATIONS["copy"].inputs(rng, rung)
    out = rung(*args, **kwargs, kernel=copy_skips_last_kernel)
    with pytest.raises(CheckFailure):
        check(out, OPERATIONS["copy"].reference(*args), name="copy", seed=seed)


# ---------------------------------------------------------------------------------------------
# Compilation for a GPU target
# ---------------------------------------------------------------------------------------------

def compile_every_rung(emit=print) -> None:
    """Without the simulator: call each launcher with stand-ins that compile instead of launching."""
    import numba

    def compile_launch(kernel, config, args):
        signature = tuple(numba.typeof(a) for a in args)
        names = [f"sm_{cc[0]}{cc[1]}" for cc in COMPUTE_CAPABILITIES]
        try:
            ptx_for_targets(kernel.py_func, signature, COMPUTE_CAPABILITIES)
            errors = {}
        except Exception as exc:  # report every kernel, not only the first failure
            failed = getattr(exc, "cc", "any")
            errors = {name: f"{type(exc).__name__}: {exc}"[:2000] for name in names if failed in (name, "any")}
        for name in names:
            record = {"kernel": kernel.py_func.__qualname__, "cc": name}
            if name in errors:
                record["error"] = errors[name]
            emit(json.dumps({"rung": current["rung"], **record}))

    current = {}
    for _, rung in every_rung():
        current["rung"] = rung.launcher.__name__
        args, kwargs = operation_of(rung).inputs(np.random.default_rng(0), rung)
        if rung.launcher.__name__ == "copy_v2_grid_stride":
            kwargs["blocks"] = 2                  # the default asks the (absent) GPU for its SM count
        if rung.launcher.__name__.endswith(("_persistent", "_prequantized")):
            kwargs["grid"] = 2                    # the same
        launches = []
        rung(*args, **kwargs, **seen_kernels(rung, launches, compile_launch))


@pytest.fixture(scope="module")
def compiled():
    """Start compiling every kernel in a fresh process at once; the results are read when needed."""
    # The project's own code, whatever copy the environment's editable install points at.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "COURSE_DEVICE": "gpu", "PYTHONPATH": path}
    process = subprocess.Popen([sys.executable, __file__], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = {}

    def wait():
        if not results:
            stdout, stderr = process.communicate(timeout=600)
            if process.returncode:
                pytest.fail(f"compiling the kernels for a GPU failed (compile_ptx needs NVRTC and NVVM from the "
                            f"CUDA pip packages, nvidia-cuda-nvrtc and nvidia-nvvm):\n{stderr[-3000:]}")
            for line in stdout.splitlines():
                record = json.loads(line)
                results.setdefault(record["rung"], []).append(record)
        return results

    yield wait
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.fixture(scope="module", autouse=True)
def _start_compiling_early(request):
    """When compile tests are selected, start the compiler process before the simulator tests run beside it."""
    if any(item.name.startswith("test_every_kernel_compiles") for item in request.session.items):
        request.getfixturevalue("compiled")


@pytest.mark.parametrize("entry", every_rung(), ids=rung_id)
def test_every_kernel_compiles_for_sm80_and_sm90(entry, compiled):
    _, rung = entry
    records = compiled().get(rung.launcher.__name__, [])
    compiled_for = {(r["kernel"], r["cc"]) for r in records}
    assert len(compiled_for) >= len(rung.kernels) * len(COMPUTE_CAPABILITIES), (
        f"{rung.launcher.__name__}: expected each of its kernels {sorted(rung.kernels)} compiled for sm_80 and "
        f"sm_90, got {sorted(compiled_for)}")
    failures = [f"{r['kernel']} for {r['cc']}: {r['error']}" for r in records if "error" in r]
    assert not failures, f"{rung.launcher.__name__} does not compile for a GPU:\n" + "\n".join(failures)


# ---------------------------------------------------------------------------------------------
# The simulator follows the device choice; it does not make it
# ---------------------------------------------------------------------------------------------

def _imported_modules(path: pathlib.Path) -> set[str]:
    """Absolute names of what a module imports; ``from course import x`` gives ``course.x``, and a
    relative import is resolved against the module's package."""
    package = path.parent.relative_to(ROOT).parts
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ((base,) if base else ()))
            names.update(f"{base}.{alias.name}" if base == "course" else base for alias in node.names)
    return names


def test_the_simulator_does_not_import_the_device_module():
    modules = sorted((ROOT / "course" / "simulator").glob("*.py"))
    assert modules, "course/simulator/ has no modules"
    for path in modules:
        imported = _imported_modules(path)
        assert not {"course.device", "course"} & imported, f"course/simulator/{path.name} imports {sorted(imported)}"


def test_install_follows_numba_not_the_device_module(monkeypatch):
    from course import simulator

    assert simulator.install() is True
    monkeypatch.setattr(simulator, "simulator_in_use", lambda: False)
    assert simulator.install() is False


if __name__ == "__main__":
    compile_every_rung()
