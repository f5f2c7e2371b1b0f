"""GPU recordings of day 8: mixed precision (``kernels.low_precision_attention``).

A declaration for ``course.record.harness`` over the registry ``kernels.low_precision_attention.RUNGS``,
at day 7's shapes (Llama 3 8B's heads: 32 query heads over 8 KV heads, head_dim 128; pages of 16
tokens in a shuffled block table). Every row names its rung by its key in ``RUNGS`` (day 7's rungs by
theirs) and the format its cache or tensors are stored in by ``fmt`` (``float32``, ``float16``,
``bfloat16``, ``fp8_e4m3``): ``rung="gqa_decode_tensor_cores", fmt="fp8_e4m3"``. The checks run first, then
``record(out_dir)`` writes:

- ``day08_full_size_checks.json``: the fp8 codes that ``fp8_quantize`` writes for a whole cache, bit for
  bit against ``reference.quantize_fp8``; every decode rung over each cache it takes (``DECODE_FORMATS``:
  float32, fp16, fp8; 8 sequences of mixed lengths) against the float64 reference twice: on the stored
  values (float32's tolerance: the arithmetic is float32) and on the float32 cache the stored one came
  from (``docs/design-notes.md`` §5: at most twice the error of the same computation on the stored
  values); every prefill rung in fp16 and bf16 (N = 1024, causal, ``kv_lens``) by the same rule.
  ``storage_rel_err``: what the storage format alone costs, the relative error of the float64
  computation on the stored values.
- ``day08_decode_timing.json``: one decode step of every decode rung over each cache it takes, day 7's
  ``gqa_decode_split_k`` on the float32 cache, and torch's ``scaled_dot_product_attention(...,
  enable_gqa=True)`` in fp16 on the same fp16 keys and values gathered into contiguous tensors
  (``torch_sdpa_fp16``; the gather not timed), against (num_seqs, context). gbps and ``fraction_of_copy``
  count the compulsory bytes at each row's format (``course.models.low_precision.compulsory_bytes_decode``);
  ``speedup_over_fp32`` compares each row's GPU time with ``gqa_decode_mixed_precision``'s on the float32
  cache, ``speedup_over_runs_fp32`` with ``gqa_decode_page_runs``'s there, ``kernel_speedup_over_torch``
  with torch's.
- ``day08_prefill_timing.json``: causal prefill at N = 4096, B = 2: the prefill rungs
  (``gqa_prefill_mixed_tiles``, ``gqa_prefill_mixed_precision``) on fp16, bf16 and float32 tensors, day
  7's ``gqa_prefill_flash`` (float32), torch SDPA with
  ``enable_gqa`` in fp16 and bf16 (fused kernels on tensor cores), and torch SDPA in float32 on K
  and V repeated to every query head (in float32 ``enable_gqa`` has no fused kernel; repeated, torch
  runs its fused float32 kernel); ``fraction_of_sdpa_fp16`` compares each row with torch in fp16.
- ``day08_matmul_roofs.json``: torch matrix products at 8192^3 in float32 (TF32 off: CUDA cores), fp16
  and bf16 (tensor cores, float32 accumulation), and fp8 e4m3 (``torch._scaled_mm``, where this torch
  has it): the compute roofs the lesson draws.
- ``day08_tensor_prefill_shapes.json``: the tensor-core prefill (``TENSOR_PREFILL``) in fp16 and bf16 beside torch
  SDPA in the same dtype, at N = 4096, B = 2, 32 query over 8 KV heads, for head_dim 128 and 64, causal and not
  (``TENSOR_PREFILL_SHAPES``): ``tflops`` from each shape's FLOPs, ``fraction_of_sdpa`` over torch in the row's dtype.
- ``day08_tc_gemm_timing.json``: the tensor-core GEMM ladder (``kernels.tensor_core_gemm``, fp16 in, float32
  out) at N = ``TC_GEMM_N`` (M = N = K) beside torch's fp16 matmul (cuBLAS): ``tflops`` and
  ``fraction_of_cublas``; ``tile``: the tile ``tc_gemm_v7_tuned`` chose.
- ``day08_tc_gemm_tiles.json``: ``tc_gemm_v7_tuned``'s timing of each of its tiles at each size, the chosen one
  marked (``tc_gemm_tiles``).
- ``day08_tc_gemm_resources.json``: registers, local and shared memory of every tensor-core GEMM kernel for fp16
  (v7's at each tile), and its threads a block (``tc_gemm_resources``).

The matrix products (``day08_matmul_roofs`` and the three ``day08_tc_gemm_*``) and the Nsight cases of
``--ncu-shared`` are declared in ``course.record.tensor_core_gemm``.

``record_other_gpu(out_dir)`` (``python -m course.record day08 --other-gpu``), on a second GPU: the decode
checks at full size, then ``day08_decode_timing_other_gpu.json``, the decode sweep at
``OTHER_GPU_POINTS`` (steps of ``day08_decode_timing``'s points), for the lesson to set beside it; then the
prefill checks and ``day08_prefill_timing_other_gpu.json`` (the prefill's point), and every GEMM rung checked at
``GEMM_CHECK_N``^3 and ``day08_tc_gemm_timing_other_gpu.json`` (the ladder and cuBLAS at ``OTHER_GPU_N``).

``ncu_cases()``: one decode step per cache format at 8 sequences of 8,192 tokens; ``sanitize()``
launches every kernel once, small, at a group that does not divide the tiles.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import low_precision as model
from course.record import harness
from course.record.day06 import paged_inputs
from course.record.harness import Check, NcuCase, Sweep, Timed
from course.record.tensor_core_gemm import (GEMM_CHECK_N, OTHER_GPU_N, TC_GEMM_N, TC_NCU_N,  # noqa: F401 (the recorder's names)
                                            TUNED_TC_GEMM, gemm_checks, matmul_sweep, ncu_shared_cases,
                                            tc_gemm_resources, tc_gemm_sweep, tc_gemm_tiles)

SHAPE = {"heads": 32, "kv_heads": 8, "d": 128, "block_size": 16}
FORMATS = ("float32", "float16", "fp8_e4m3")
# The decode rungs of kernels.low_precision_attention.RUNGS in ladder order, with the cache formats each takes
# (a test checks that these are the ladder's decode rungs).
DECODE_FORMATS = {"gqa_decode_mixed_group": ("float32", "float16"), "gqa_decode_mixed_precision": FORMATS,
                  "gqa_decode_page_runs": FORMATS, "gqa_decode_half_warps": FORMATS,
                  "gqa_decode_tensor_cores": ("float16", "fp8_e4m3"),          # narrow caches only
                  # head sizes to 256 and a bf16 cache; timed here at the day's head_dim of 128, bf16 among its caches
                  "gqa_decode_wide_heads": (*FORMATS, "bfloat16"),
                  "gqa_decode_fp8_ring": ("fp8_e4m3",), "gqa_decode_fp8_lean_ring": ("fp8_e4m3",),   # fp8 only
                  "gqa_decode_fp8_deep": ("fp8_e4m3",)}
# The decode rungs that take a head_dim a multiple of 16 only (16-byte copies of fp8 codes), and of 64 only (four
# lanes share a K row in 16-byte loads): the sanitizer's small launches give them head_dim 32 and 64.
HEAD_DIM_BY_16 = ("gqa_decode_fp8_ring", "gqa_decode_fp8_lean_ring")
HEAD_DIM_BY_64 = ("gqa_decode_fp8_deep",)
PREFILL_RUNGS = ("gqa_prefill_mixed_tiles", "gqa_prefill_mixed_precision", "gqa_prefill_wide_heads",
                 "gqa_prefill_tensor_cores")
# The prefill rungs that multiply the numbers as stored, on tensor cores: fp16 and bf16 only, head_dim a multiple of 16.
TENSOR_PREFILL = ("gqa_prefill_tensor_cores",)
# The rows the speedups are taken over: the first rung that takes every cache, and the page-runs rung, on float32.
FIRST_FP32 = {"rung": "gqa_decode_mixed_precision", "fmt": "float32"}
RUNS_FP32 = {"rung": "gqa_decode_page_runs", "fmt": "float32"}
DAY7_DECODE, DAY7_PREFILL = "gqa_decode_split_k", "gqa_prefill_flash"     # day 7's float32 rungs
SEQS = (8, 16, 64)
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
MAX_TOKENS = 1024 * 1024       # num_seqs * context at most: a float32 cache of 2 x 4 GiB, and its narrow copies
POINTS = tuple((s, c) for s in SEQS for c in CONTEXTS if s * c <= MAX_TOKENS)
QUICK_POINTS = ((8, 1024), (16, 8192))
PREFILL = {"B": 2, "heads": 32, "kv_heads": 8, "N": 4096, "d": 128}
PREFILL_DTYPES = ("float16", "bfloat16")
# (head_dim, causal) of the tensor-core prefill's second sweep, at PREFILL's B, heads and N.
TENSOR_PREFILL_SHAPES = ((128, True), (128, False), (64, True), (64, False))
NCU_SEQS, NCU_CONTEXT = 8, 8192
CHECK_SEQS, CHECK_CONTEXT, CHECK_N = 8, 4096, 1024
# gqa_decode_fp8_deep with each of its choices undone alone (kernels.low_precision_attention.deep_kernel_choosing's
# arguments), against the register rung, at the long steps its goal is stated for (day08_fp8_deep_choices).
DEEP_CHOICES = {"all four": {}, "two tiles deep": {"depth": 2}, "8-byte loads": {"wide": False},
                "one chain of score mma": {"chains": 1}, "two weight mma": {"pack": False}}
DEEP_POINTS = ((16, 32768), (64, 16384))
# The steps recorded on a second GPU, to compare with the same steps of day08_decode_timing (one of
# 131,072 tokens, two of 524,288 or more).
OTHER_GPU_POINTS = ((16, 8192), (16, 32768), (64, 16384))


def _decode_args(device: dict) -> tuple:
    return (device["q"], device["k_cache"], device["v_cache"], device["block_tables"], device["context_lens"])


def _decode_flops(lens) -> int:
    return 4 * sum(lens) * SHAPE["heads"] * SHAPE["d"]


def narrow_caches(device: dict, t: dict) -> dict:
    """The float32 cache of ``paged_inputs`` stored as each format: {fmt: (k_cache, v_cache, extra)} of
    device arrays, ``extra`` the fp8 scales (one per page and KV head, computed by ``fp8_quantize``). The bf16 cache
    is torch's rounding of the float32 one, its bits viewed as ``ml_dtypes.bfloat16`` (numba has no bf16 of its own)."""
    import ml_dtypes
    import torch
    from numba import cuda

    from kernels.low_precision_attention import fp8_quantize

    caches = {"float32": (device["k_cache"], device["v_cache"], {})}
    halves = [t[name].half() for name in ("k_cache", "v_cache")]
    t["k_cache16"], t["v_cache16"] = halves                    # kept alive with the numba views
    caches["float16"] = (*(cuda.as_cuda_array(h) for h in halves), {})
    bf16_bits = [t[name].bfloat16().view(torch.int16) for name in ("k_cache", "v_cache")]
    t["k_cache_bf16"], t["v_cache_bf16"] = bf16_bits
    caches["bfloat16"] = (*(cuda.as_cuda_array(b).view(np.uint16).view(ml_dtypes.bfloat16) for b in bf16_bits), {})
    (k_codes, k_scales), (v_codes, v_scales) = (fp8_quantize(device[name]) for name in ("k_cache", "v_cache"))
    caches["fp8_e4m3"] = (k_codes, v_codes, {"k_scales": k_scales, "v_scales": v_scales})
    return caches


def decode_cases() -> list[tuple[str, str]]:
    """(rung, cache format) of every decode step the day checks, times and profiles, in ladder order."""
    return [(rung, fmt) for rung, formats in DECODE_FORMATS.items() for fmt in formats]


def _decode_launch(rung: str, fmt: str, device: dict, caches: dict, out, context: int, **options):
    """One decode step of the rung ``rung`` of ``kernels.low_precision_attention.RUNGS`` over the cache in ``fmt``;
    ``options`` go to its launcher (``kernel=``)."""
    from kernels import low_precision_attention as lp

    decode = lp.RUNGS[rung]
    k_cache, v_cache, extra = caches[fmt]
    return lambda: decode(device["q"], k_cache, v_cache, device["block_tables"], device["context_lens"], out=out,
                          max_context=context, **extra, **options)


# --------------------------------------------------------------------------- checks

def check_lens(longest: int) -> list[int]:
    """Mixed lengths: full, off the page grid, one page exactly, one token, none, and a few between."""
    return [longest, longest - 37, 16, 1, 0, longest // 2 + 5, 3 * longest // 4, 17]


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _prefill_inputs(B: int, heads: int, kv_heads: int, n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, h, n, d)).astype(np.float32) for h in (heads, kv_heads, kv_heads))


def to_device_as(a: np.ndarray, dtype: str):
    """A float32 host array rounded to ``dtype`` ("float16", "bfloat16", "float32") on the device. NumPy
    bf16 cannot cross through the buffer protocol, so its bits travel as uint16 and are viewed as bf16."""
    import ml_dtypes
    from numba import cuda

    if dtype == "bfloat16":
        return cuda.to_device(a.astype(ml_dtypes.bfloat16).view(np.uint16)).view(ml_dtypes.bfloat16)
    return cuda.to_device(a.astype(dtype))


def device_output(shape, dtype: str):
    """An output array of ``dtype`` on the device, and the view of it that ``poison`` fills (bf16: its
    bits as uint16, whose poison 0xffff is a bf16 NaN) and that comes back to the host."""
    import ml_dtypes
    from numba import cuda

    if dtype == "bfloat16":
        bits = cuda.device_array(shape, np.uint16)
        return bits.view(ml_dtypes.bfloat16), bits
    out = cuda.device_array(shape, dtype)
    return out, out


def _host_float(bits, dtype: str) -> np.ndarray:
    import ml_dtypes

    host = bits.copy_to_host()
    return (host.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else host).astype(np.float64)


def decode_checks(longest: int) -> list[Check]:
    from numba import cuda

    from kernels import reference
    from kernels.low_precision_attention import fp8_quantize

    lens = check_lens(longest)
    device, t = paged_inputs(CHECK_SEQS, lens, seed=8, **SHAPE)
    caches = narrow_caches(device, t)
    host = {name: a.copy_to_host() for name, a in device.items()}
    args = (host["block_tables"], host["context_lens"])
    k_codes, v_codes, scales = caches["fp8_e4m3"]
    codes = cuda.device_array(k_codes.shape, np.uint8)
    found = [Check("fp8_quantize codes of the K cache, scales amax / 448 per page",
                   lambda: fp8_quantize(device["k_cache"], out=codes), codes.copy_to_host,
                   lambda: reference.quantize_fp8(host["k_cache"])[0], seed=8, exact=True, poisoned=(codes,),
                   columns=dict(rung="fp8_quantize", fmt="fp8_e4m3", num_seqs=CHECK_SEQS, context=longest, **SHAPE))]
    exact = reference.paged_attention(host["q"], host["k_cache"], host["v_cache"], *args)
    stored = {"float32": (host["k_cache"], host["v_cache"]),
              "float16": tuple(caches["float16"][i].copy_to_host() for i in (0, 1)),
              "bfloat16": tuple(caches["bfloat16"][i].copy_to_host().astype(np.float32) for i in (0, 1)),
              "fp8_e4m3": (reference.dequantize_fp8(k_codes.copy_to_host(), scales["k_scales"].copy_to_host()),
                           reference.dequantize_fp8(v_codes.copy_to_host(), scales["v_scales"].copy_to_host()))}
    on_stored_of = {"float32": exact}
    for rung, fmt in decode_cases():     # every decode rung at every cache format it runs
        out = cuda.device_array(tuple(device["q"].shape), np.float32)
        launch = _decode_launch(rung, fmt, device, caches, out, longest)
        if fmt not in on_stored_of:
            on_stored_of[fmt] = reference.paged_attention(host["q"], *stored[fmt], *args)
        on_stored = on_stored_of[fmt]
        columns = dict(rung=rung, fmt=fmt, num_seqs=CHECK_SEQS, context=longest,
                       **SHAPE, storage_rel_err=_rel_err(on_stored, exact))
        found.append(Check(f"out of {rung} ({fmt} cache) against the reference on the stored cache, contexts {lens}",
                           launch, out.copy_to_host, lambda on_stored=on_stored: on_stored, seed=8, poisoned=(out,),
                           columns=dict(columns, against="stored values")))
        if fmt != "float32":
            precision = {"float16": "fp16", "bfloat16": "bf16"}.get(fmt, "fp8")
            found.append(Check(f"out of {rung} ({fmt} cache) against the float32 cache it was stored from", launch,
                               out.copy_to_host, lambda: exact, seed=8, poisoned=(out,),
                               options=dict(precision=precision, same_precision_ref=on_stored),
                               columns=dict(columns, against="float32 values")))
    return found


def prefill_checks(n: int) -> list[Check]:
    from numba import cuda

    from kernels import low_precision_attention as lp
    from kernels import reference

    heads, kv_heads, d = PREFILL["heads"], PREFILL["kv_heads"], PREFILL["d"]
    q, k, v = _prefill_inputs(1, heads, kv_heads, n, d, seed=n)
    kv_lens = np.array([n - 101], np.int32)
    exact = reference.attention(q, k, v, causal=True, kv_lens=kv_lens)
    found = []
    for dtype in PREFILL_DTYPES:
        fmt = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
        on_stored = reference.attention_at_precision(q, k, v, fmt, causal=True, kv_lens=kv_lens)
        dq, dk, dv = (to_device_as(a, dtype) for a in (q, k, v))
        lens = cuda.to_device(kv_lens)
        out, bits = device_output(q.shape, dtype)
        for rung in PREFILL_RUNGS:
            found.append(Check(
                f"out of {rung} ({dtype}), causal, kv_lens {kv_lens.tolist()}",
                lambda prefill=lp.RUNGS[rung], dq=dq, dk=dk, dv=dv, lens=lens, out=out: prefill(
                    dq, dk, dv, causal=True, kv_lens=lens, out=out),
                lambda bits=bits, dtype=dtype: _host_float(bits, dtype), lambda: exact, seed=n, poisoned=(bits,),
                options=dict(precision=fmt, same_precision_ref=on_stored),
                columns=dict(rung=rung, fmt=dtype, N=n, heads=heads, kv_heads=kv_heads, d=d,
                             against="float32 values", storage_rel_err=_rel_err(on_stored, exact))))
    return found


def checks(longest: int = CHECK_CONTEXT, n: int = CHECK_N) -> list[Check]:
    return decode_checks(longest) + prefill_checks(n)


# --------------------------------------------------------------------------- timing

def _decode_cases(point) -> list[Timed]:
    from numba import cuda

    from course.record import baselines
    from course.record.day06 import gathered_kv
    from kernels import gqa_attention

    num_seqs, context = point
    lens = [context] * num_seqs
    heads, kv_heads, d = SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"]
    device, t = paged_inputs(num_seqs, lens, seed=num_seqs * 100003 + context, **SHAPE)
    caches = narrow_caches(device, t)
    out = cuda.device_array(tuple(device["q"].shape), np.float32)
    flops = _decode_flops(lens)

    def moved(fmt):
        return model.compulsory_bytes_decode(lens, heads, kv_heads, d, fmt, SHAPE["block_size"])

    cases = [Timed(rung, _decode_launch(rung, fmt, device, caches, out, context), moved(fmt), flops, {"fmt": fmt})
             for rung, fmt in decode_cases()]
    cases.append(Timed(DAY7_DECODE,
                       lambda: gqa_attention.RUNGS[DAY7_DECODE](*_decode_args(device), out=out, max_context=context),
                       moved("float32"), flops, {"fmt": "float32"}))
    keys, values = gathered_kv({"k_cache": t["k_cache16"], "v_cache": t["v_cache16"],
                                "block_tables": t["block_tables"]}, context)
    q = t["q"].half()[:, :, None, :]
    cases.append(Timed("torch_sdpa_fp16", baselines.torch_sdpa_gqa_on_device(q, keys, values), moved("float16"), flops,
                       {"fmt": "float16"}))
    return cases


def decode_sweep() -> Sweep:
    return Sweep(
        name="day08_decode_timing",
        notes=(f"one paged GQA decode step, heads={SHAPE['heads']} kv_heads={SHAPE['kv_heads']} d={SHAPE['d']} "
               f"block_size={SHAPE['block_size']}, shuffled block tables, every sequence of the point at the same "
               f"context; rung: the rung of kernels.low_precision_attention.RUNGS (day 7's for {DAY7_DECODE}), fmt: "
               f"the cache's format, float32, float16, fp8_e4m3 (codes with a float32 scale per page and KV head) or "
               f"bfloat16 (gqa_decode_wide_heads only). "
               f"Every decode rung over each cache it takes: "
               + "; ".join(f"{rung} ({', '.join(formats)})" for rung, formats in DECODE_FORMATS.items())
               + f" (gqa_decode_half_warps decodes fp8 by PTX's cvt.rn.f16x2.e4m3x2 on this GPU if its compute "
               f"capability is 8.9 or more, else by a table; gqa_decode_tensor_cores computes scores and weighted "
               f"sums as mma.sync m16n8k16 instructions, fp16 inputs, float32 accumulators); "
               f"day 7's {DAY7_DECODE} on the float32 cache; "
               f"torch.nn.functional.scaled_dot_product_attention(enable_gqa=True) in fp16 on the same fp16 K and V "
               f"gathered into contiguous tensors (torch_sdpa_fp16, gather not timed). q and out are float32 for "
               f"ours, fp16 for torch. gbps: the compulsory bytes at the row's format (K and V once per KV head, "
               f"q, out, and fp8's page scales) per second of the median; fraction_of_copy: over the copy "
               f"bandwidth of this run; kernel_ms: the GPU's time alone (launch cost hidden); speedup_over_fp32, "
               f"speedup_over_runs_fp32 and kernel_speedup_over_torch: the kernel_ms of gqa_decode_mixed_precision "
               f"on the float32 cache, of gqa_decode_page_runs on it, and of torch, over the row's."),
        points=POINTS, quick_points=QUICK_POINTS,
        shape=lambda point: dict(num_seqs=point[0], context=point[1], **SHAPE),
        cases=_decode_cases,
        finish=harness.finish_all(harness.fraction_of(FIRST_FP32, "speedup_over_fp32", time="kernel_ms"),
                                  harness.fraction_of(RUNS_FP32, "speedup_over_runs_fp32", time="kernel_ms"),
                                  harness.fraction_of("torch_sdpa", "kernel_speedup_over_torch", time="kernel_ms")),
        fraction_of_copy=True, kernel_time=True)


def _deep_choice_cases(point) -> list[Timed]:
    from numba import cuda

    from kernels import low_precision_attention as lp

    num_seqs, context = point
    lens = [context] * num_seqs
    device, t = paged_inputs(num_seqs, lens, seed=num_seqs * 100003 + context, **SHAPE)
    caches = narrow_caches(device, t)
    out = cuda.device_array(tuple(device["q"].shape), np.float32)
    moved = model.compulsory_bytes_decode(lens, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"], "fp8_e4m3",
                                          SHAPE["block_size"])
    flops = _decode_flops(lens)
    cases = [Timed("gqa_decode_tensor_cores", _decode_launch("gqa_decode_tensor_cores", "fp8_e4m3", device, caches,
                                                             out, context), moved, flops,
                   {"fmt": "fp8_e4m3", "choice": "the register rung"})]
    for choice, undone in DEEP_CHOICES.items():
        launch = _decode_launch("gqa_decode_fp8_deep", "fp8_e4m3", device, caches, out, context,
                                kernel=lp.deep_kernel_choosing(**undone))
        cases.append(Timed("gqa_decode_fp8_deep", launch, moved, flops, {"fmt": "fp8_e4m3", "choice": choice}))
    return cases


def fp8_deep_sweep() -> Sweep:
    return Sweep(
        name="day08_fp8_deep_choices",
        notes=(f"one paged GQA decode step over the fp8 cache, heads={SHAPE['heads']} kv_heads={SHAPE['kv_heads']} "
               f"d={SHAPE['d']} block_size={SHAPE['block_size']}, shuffled block tables, every sequence at the point's "
               f"context: gqa_decode_tensor_cores (choice 'the register rung') and gqa_decode_fp8_deep with all four "
               f"of its choices ('all four': the rung) or with one undone (kernels.low_precision_attention."
               f"deep_kernel_choosing): 'two tiles deep' (depth=2), '8-byte loads' (wide=False), 'one chain of score "
               f"mma' (chains=1), 'two weight mma' (pack=False); partitions as each launcher picks them. L2 flushed "
               f"before every repeat; kernel_ms: the GPU's time alone; speedup_over_registers: the register rung's "
               f"kernel_ms over the row's; fraction_of_copy as day08_decode_timing's."),
        points=DEEP_POINTS, quick_points=DEEP_POINTS[:1],
        shape=lambda point: dict(num_seqs=point[0], context=point[1], **SHAPE),
        cases=_deep_choice_cases, flush_l2=True,
        finish=harness.fraction_of({"rung": "gqa_decode_tensor_cores"}, "speedup_over_registers", time="kernel_ms"),
        fraction_of_copy=True, kernel_time=True)


def _prefill_cases(point) -> list[Timed]:
    from course.models import attention as attention_model
    from course.record import baselines
    from kernels import gqa_attention
    from kernels import low_precision_attention as lp

    n, d = point
    B, heads, kv_heads = PREFILL["B"], PREFILL["heads"], PREFILL["kv_heads"]
    group = heads // kv_heads
    q, k, v = _prefill_inputs(B, heads, kv_heads, n, d, seed=n + 8)
    flops = attention_model.flops_attention(B, heads, n, d, causal=True)
    cases = []
    for dtype in ("float16", "bfloat16", "float32"):
        fmt = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[dtype]
        dq, dk, dv = (to_device_as(a, dtype) for a in (q, k, v))
        out, _ = device_output(q.shape, dtype)
        moved = model.compulsory_bytes_prefill(B, heads, kv_heads, n, d, dtype=dtype)
        cases += [Timed(rung, lambda prefill=lp.RUNGS[rung], dq=dq, dk=dk, dv=dv, out=out: prefill(
            dq, dk, dv, causal=True, out=out), moved, flops, {"fmt": dtype, "group": group}) for rung in PREFILL_RUNGS
            if not (dtype == "float32" and rung in TENSOR_PREFILL)]
        if dtype == "float32":
            cases.append(Timed(DAY7_PREFILL, lambda dq=dq, dk=dk, dv=dv, out=out: gqa_attention.RUNGS[DAY7_PREFILL](
                dq, dk, dv, causal=True, out=out), moved, flops, {"fmt": dtype, "group": group}))
    torch = baselines.cuda_torch()
    tq, tk, tv = (torch.from_numpy(a).cuda() for a in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        hq, hk, hv = (x.to(dtype) for x in (tq, tk, tv))
        cases.append(Timed(f"torch_sdpa_{'fp16' if name == 'float16' else 'bf16'}",
                           lambda hq=hq, hk=hk, hv=hv: sdpa(hq, hk, hv, is_causal=True, enable_gqa=True),
                           model.compulsory_bytes_prefill(B, heads, kv_heads, n, d, dtype=name), flops,
                           {"fmt": name, "group": group}))
    rk, rv = (x.repeat_interleave(group, dim=1) for x in (tk, tv))
    cases.append(Timed("torch_sdpa_fp32_repeated_kv", lambda: sdpa(tq, rk, rv, is_causal=True),
                       model.compulsory_bytes_prefill(B, heads, kv_heads, n, d, dtype="float32"), flops,
                       {"fmt": "float32", "group": group}))
    return cases


def prefill_sweep() -> Sweep:
    return Sweep(
        name="day08_prefill_timing",
        notes=(f"causal GQA prefill, B={PREFILL['B']}, heads={PREFILL['heads']}, kv_heads={PREFILL['kv_heads']}, "
               f"d={PREFILL['d']}: {' and '.join(PREFILL_RUNGS)} on fp16, bf16 and float32 tensors (fmt float16, "
               f"bfloat16, float32; {' and '.join(TENSOR_PREFILL)} fp16 and bf16 only), day 7's {DAY7_PREFILL} "
               f"(float32), "
               f"torch.nn.functional.scaled_dot_product_attention(is_causal=True, enable_gqa=True) in fp16 and bf16 "
               f"(torch_sdpa_fp16, torch_sdpa_bf16), and torch SDPA in float32 on K and V repeated to every query "
               f"head (torch_sdpa_fp32_repeated_kv); tflops from the causal FLOPs; gbps from the compulsory bytes "
               f"at the row's format; fraction_of_sdpa_fp16: torch_sdpa_fp16's median over the row's."),
        points=((PREFILL["N"], PREFILL["d"]),), quick_points=((1024, PREFILL["d"]),),
        shape=lambda point: dict(B=PREFILL["B"], heads=PREFILL["heads"], kv_heads=PREFILL["kv_heads"], N=point[0],
                                 d=point[1], causal=True),
        cases=_prefill_cases, finish=harness.fraction_of("torch_sdpa_fp16", "fraction_of_sdpa_fp16"))


def _tensor_prefill_shape_cases(point) -> list[Timed]:
    from course.models import attention as attention_model
    from course.record import baselines
    from kernels import low_precision_attention as lp

    d, causal = point
    B, heads, kv_heads, n = PREFILL["B"], PREFILL["heads"], PREFILL["kv_heads"], PREFILL["N"]
    group = heads // kv_heads
    q, k, v = _prefill_inputs(B, heads, kv_heads, n, d, seed=n + d + causal)
    flops = attention_model.flops_attention(B, heads, n, d, causal=causal)
    torch = baselines.cuda_torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    cases = []
    for dtype, short, torch_dtype in (("float16", "fp16", torch.float16), ("bfloat16", "bf16", torch.bfloat16)):
        moved = model.compulsory_bytes_prefill(B, heads, kv_heads, n, d, dtype=dtype)
        extra = {"fmt": dtype, "group": group}
        dq, dk, dv = (to_device_as(a, dtype) for a in (q, k, v))
        out, _ = device_output(q.shape, dtype)
        cases += [Timed(rung, lambda prefill=lp.RUNGS[rung], dq=dq, dk=dk, dv=dv, out=out: prefill(
            dq, dk, dv, causal=causal, out=out), moved, flops, extra) for rung in TENSOR_PREFILL]
        hq, hk, hv = (torch.from_numpy(a).cuda().to(torch_dtype) for a in (q, k, v))
        cases.append(Timed(f"torch_sdpa_{short}", lambda hq=hq, hk=hk, hv=hv: sdpa(
            hq, hk, hv, is_causal=causal, enable_gqa=True), moved, flops, extra))
    return cases


def _fraction_of_sdpa_in_dtype(rows: list[dict]) -> None:
    """``fraction_of_sdpa``: torch SDPA's median in the row's dtype (fmt) over the row's, per point."""
    for fmt, short in (("float16", "fp16"), ("bfloat16", "bf16")):
        harness.fraction_of(f"torch_sdpa_{short}", "fraction_of_sdpa")([r for r in rows if r["fmt"] == fmt])


def tensor_prefill_shapes_sweep() -> Sweep:
    return Sweep(
        name="day08_tensor_prefill_shapes",
        notes=(f"GQA prefill at N={PREFILL['N']}, B={PREFILL['B']}, heads={PREFILL['heads']}, "
               f"kv_heads={PREFILL['kv_heads']}, for head_dim d and causal as the point says: "
               f"{' and '.join(TENSOR_PREFILL)} on fp16 and bf16 tensors (fmt), and "
               f"torch.nn.functional.scaled_dot_product_attention(is_causal=causal, enable_gqa=True) in the same "
               f"dtype (torch_sdpa_fp16, torch_sdpa_bf16); tflops from the FLOPs of the shape (causal: about half); "
               f"fraction_of_sdpa: torch SDPA's median in the row's dtype over the row's."),
        points=TENSOR_PREFILL_SHAPES, quick_points=TENSOR_PREFILL_SHAPES[1:3],
        shape=lambda point: dict(B=PREFILL["B"], heads=PREFILL["heads"], kv_heads=PREFILL["kv_heads"],
                                 N=PREFILL["N"], d=point[0], causal=point[1]),
        cases=_tensor_prefill_shape_cases, finish=_fraction_of_sdpa_in_dtype)


# --------------------------------------------------------------------------- Nsight, sanitizer

def _ncu_launch(rung: str, fmt: str, context: int):
    from numba import cuda

    device, t = paged_inputs(NCU_SEQS, [context] * NCU_SEQS, seed=context, **SHAPE)
    caches = narrow_caches(device, t)
    out = cuda.device_array(tuple(device["q"].shape), np.float32)
    launch = _decode_launch(rung, fmt, device, caches, out, context)
    launch.keep = (device, t, caches)
    return launch


def ncu_cases() -> list[NcuCase]:
    return [NcuCase(rung, NCU_CONTEXT, harness.lazy(_ncu_launch, rung, fmt, NCU_CONTEXT), {"fmt": fmt})
            for rung, fmt in decode_cases()]


def ncu_shape(n: int) -> dict:
    """Every case is one decode step of NCU_SEQS sequences of n tokens; its ``fmt`` names the cache format."""
    return dict(num_seqs=NCU_SEQS, context=n, **SHAPE)


def sanitize() -> None:
    """Every kernel once, small: partial pages, an empty context, groups of 3 (tiles not divided), each cache
    format and each prefill storage dtype; the tensor-core GEMM ladder on partial tiles in fp16 and bf16."""
    from numba import cuda

    from kernels import low_precision_attention as lp
    from kernels import tensor_core_gemm as tc

    inputs = {}
    for d in (24, 32, 64):      # 24: lanes without channels; 32 and 64 for the rungs that take multiples of 16 or 64
        device, t = paged_inputs(3, [37, 0, 16], seed=2, heads=9, kv_heads=3, d=d, block_size=16)
        inputs[d] = device, narrow_caches(device, t), t
    for rung, fmt in decode_cases():
        device, caches, _ = inputs[64 if rung in HEAD_DIM_BY_64 else 32 if rung in HEAD_DIM_BY_16 else 24]
        _decode_launch(rung, fmt, device, caches, cuda.device_array(tuple(device["q"].shape), np.float32), 37)()
    # a group of 9 on one KV head (blocks of 5 and 4 heads): the deep rung's blocks of more than 4 heads
    device, t = paged_inputs(3, [37, 0, 16], seed=2, heads=9, kv_heads=1, d=64, block_size=16)
    caches = narrow_caches(device, t)
    for rung in HEAD_DIM_BY_64:
        _decode_launch(rung, "fp8_e4m3", device, caches, cuda.device_array(tuple(device["q"].shape), np.float32), 37)()
    lens = cuda.to_device(np.array([40], np.int32))
    for dtype in PREFILL_DTYPES:
        for rung in PREFILL_RUNGS:
            d = 32 if rung in TENSOR_PREFILL else 24           # the tensor-core rung takes multiples of 16
            q, k, v = (to_device_as(a, dtype) for a in _prefill_inputs(1, 9, 3, 45, d, seed=3))
            lp.RUNGS[rung](q, k, v, causal=True, kv_lens=lens, out=device_output(q.shape, dtype)[0])
        # the tensor-core GEMM ladder: partial tiles of every rung (v1-v4 64 x 64, v5 128 x 128), K past a step of 32
        a, w = (to_device_as(x, dtype) for x in _prefill_inputs(1, 1, 1, 136, 72, seed=4)[:2])
        a, w = a.reshape(136, 72), w.reshape(136, 72)[:130]
        for rung in tc.RUNGS.values():
            rung(a, w, out=cuda.device_array((136, 130), np.float32))
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(
        day="day08", checks=lambda quick: checks(1024 if quick else CHECK_CONTEXT, 256 if quick else CHECK_N),
        check_recording="day08_full_size_checks",
        check_notes=("fp8_quantize against reference.quantize_fp8, bit for bit; "
                     + ", ".join(DECODE_FORMATS) + " (8 sequences of mixed lengths, shuffled block table; each over "
                     "the caches it takes, fmt) against kernels.reference.paged_attention "
                     "(float64) on the stored cache (float32's tolerance) and on the float32 cache it was stored "
                     "from (at most twice the error of the same float64 computation on the stored values, "
                     "docs/design-notes.md section 5); " + " and ".join(PREFILL_RUNGS) + " (causal, kv_lens) against "
                     "kernels.reference.attention by the same rule. storage_rel_err: the relative error of the float64 "
                     "computation on the stored values, what the format alone costs."),
        sweeps=lambda: [decode_sweep(), fp8_deep_sweep(), prefill_sweep(), tensor_prefill_shapes_sweep(),
                        matmul_sweep(), tc_gemm_sweep()],
        extras=lambda quick: [tc_gemm_tiles(), tc_gemm_resources()], ncu_cases=ncu_cases, sanitize=sanitize,
        ncu_shape=ncu_shape)


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time decode, prefill and the matrix products; save all; print a summary."""
    paths = harness.record(recorder(), out_dir, quick=quick)
    from course.records import load_recording

    for path in paths:
        rec = load_recording(path)
        if rec.name == "day08_decode_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<28} {row['fmt']:<9} S={row['num_seqs']:>3} context={row['context']:>6} kernel "
                      f"{row['kernel_ms']:8.3f} ms  {row['fraction_of_copy']:.2f} of copy  "
                      f"{row['speedup_over_fp32']:.2f}x fp32  {row['kernel_speedup_over_torch']:.2f}x torch",
                      flush=True)
        elif rec.name == "day08_prefill_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<28} {row['fmt']:<9} N={row['N']} {row['median_ms']:8.3f} ms "
                      f"{row['tflops']:7.2f} TFLOP/s  "
                      f"{row['fraction_of_sdpa_fp16']:.3f} of torch fp16", flush=True)
        elif rec.name == "day08_tc_gemm_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<24} N={row['N']:>5} {row['tflops']:8.1f} TFLOP/s  "
                      f"{row['fraction_of_cublas']:.3f} of cuBLAS", flush=True)
        elif rec.name == "day08_matmul_roofs":
            for row in rec.rows:
                print(f"   {row['rung']:<24} {row['tflops']:8.1f} TFLOP/s", flush=True)
    return paths


def record_other_gpu(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """On a second GPU: check every decode rung at full size (raises on a failure), then time the decode sweep
    at ``OTHER_GPU_POINTS`` (only the first with ``quick``) and save it as ``day08_decode_timing_other_gpu``; the
    same for the choices of the deep fp8 rung (``day08_fp8_deep_choices_other_gpu``, after the decode checks), for
    the prefill rungs at the prefill's point (``day08_prefill_timing_other_gpu``) and for the tensor-core GEMM ladder
    at ``OTHER_GPU_N`` (``day08_tc_gemm_timing_other_gpu``), whose goals are stated for that GPU."""
    from course.timing import measure_ceilings

    ceilings = measure_ceilings()
    decode = harness.record_other_gpu(decode_checks(CHECK_CONTEXT), decode_sweep(), OTHER_GPU_POINTS, out_dir,
                                      checked="every decode rung's full-size checks", quick=quick, ceilings=ceilings)
    sweep = prefill_sweep()
    prefill = harness.record_other_gpu(prefill_checks(1024 if quick else CHECK_N), sweep,
                                       sweep.quick_points if quick else sweep.points, out_dir,
                                       checked="every prefill rung's full-size checks", quick=quick, ceilings=ceilings)
    gemm = harness.record_other_gpu(gemm_checks(1024 if quick else GEMM_CHECK_N), tc_gemm_sweep(), OTHER_GPU_N,
                                    out_dir, checked="every GEMM rung's full-size check", quick=quick,
                                    ceilings=ceilings)
    deep = harness.record_other_gpu([], fp8_deep_sweep(), DEEP_POINTS, out_dir,
                                    checked="every decode rung's full-size checks (above)", quick=quick,
                                    ceilings=ceilings)
    return [decode, deep, prefill, gemm]
