"""GPU recordings of day 9: quantized GEMV over GGUF blocks (``kernels.quantized_gemv`` and its continuations
``kernels.quantized_gemv_repacked``, ``kernels.quantized_gemv_wide``, ``kernels.quantized_gemv_persistent`` and
``kernels.quantized_gemv_prequantized``).

A declaration for ``course.record.harness`` over the registry ``kernels.quantized_gemv_prequantized.RUNGS`` (the
day's whole ladder, ``LADDER``): y = W x at batch 1, the decode step's matrix-vector product, with W stored in its
llama.cpp bytes (``RUNG_FORMATS``: Q8_0, Q4_0, Q4_1; and the course's int4 with an fp16 scale per group of 128,
``int4_g128``) at two shapes of Llama 3 70B's layers (``SHAPES``, (N, K): 8192 x 8192, the attention output
projection, and 28672 x 8192, the MLP's gate and up projections). W is Gaussian (standard deviation 0.02, as a
trained layer's weights), quantized by ``kernels.reference`` (``quantize_q8_0``, ``quantize_q4_0``,
``quantize_q4_1``, ``quantize_int4_g128``); x is Gaussian float32. Every row names its rung by its key in
``RUNGS`` (or torch's call, ``torch_...``), the shape it measured in ``N`` and ``K`` and the weights' format in
``fmt``. The rungs that read repacked weights (``REPACKED``) are given ``q4_1_repack(w)`` (``q8_0_repack``,
``q4_0_repack`` and ``int4_g128_repack`` for the other formats), made once on the device before any timing (the
repacking is a load-time step, never timed); the prequantized rungs (``model.PREQUANTIZED_RUNGS``) are timed on x's
q8_1 blocks, made once before any timing by ``quantize_activations`` as the kernel that makes x would write them (their
checks pass a float32 x, which their launchers quantize first). The checks run first, then ``record(out_dir)`` writes:

- ``day09_full_size_checks.json``: every rung at both shapes against the float64 reference: the
  dequantized W (``reference.dequantize_<fmt>``) times x; for the q8_1 rungs (``Q8_1_RUNGS``), W times x
  quantized to q8_1 (``reference.quantize_q8_1``) in the codes' product and times the exact block sums of x in
  the minimum's, as the rungs define it; ``q4_1_gemv_q8_1_small_batch`` on a batch of ``CHECK_TOKENS`` tokens
  (x (T, K), column ``T``; 1 for the other rungs). ``quantization_rel_err``: what the format costs, the relative
  error of that reference against the float64 product of the float32 W before quantization.
- ``day09_gemv_timing.json``: every rung at both shapes, L2 flushed before every repeat (``median_ms``,
  back-to-back calls from Python; ``kernel_ms``, the launch cost hidden), and again with L2 warm
  (``warm_kernel_ms``, launch cost hidden): a Q4 matrix of 8192 x 8192 (37.7 MB) fits in an H100's or
  H200's L2, its Q8_0 (71 MB) and fp16 (134 MB) twins do not, so only the flushed time is what a model's
  decode step sees. Beside them torch: ``torch_mv_fp16``, ``torch.mv`` on an fp16 W of the same shape
  (cuBLAS's GEMV), and ``torch_weight_int4pack_mm``, torch's own int4 weight-only kernel
  (``torch._weight_int4pack_mm``, tinygemm) on the same Q4_1 matrix (codes, scales and minimums, groups of
  32, bf16 scales and x), where this torch and GPU have it (the sweep's notes say why not otherwise).
  ``bytes``: the compulsory bytes of one call (``course.models.quantized.compulsory_bytes``: W in its format,
  x and y once, the dp4a rung's q8_1 blocks written and read, the prequantized rungs' read instead of x; torch's at
  its formats), ``gbps`` from
  ``median_ms``, ``kernel_gbps`` and ``warm_kernel_gbps`` from the GPU's time alone,
  ``kernel_speedup_over_fp16`` (and ``kernel_speedup_over_int4pack``) torch's ``kernel_ms`` over the row's.
- ``day09_batched_timing.json``: ``q4_1_gemv_q8_1_small_batch`` on a decode batch of T = 1, 2, 4, 8, 16 tokens
  (``TOKENS``; x (T, K) Gaussian) at both shapes, beside ``torch_matmul_fp16``, torch.matmul of the same
  (T, K) fp16 x and the (K, N) transpose of an fp16 W (cuBLAS, tensor cores), L2 flushed before every repeat:
  ``median_ms`` and ``kernel_ms`` as above, ``bytes`` the compulsory bytes (W once, x, its q8_1 blocks and y
  per token; torch's: 2 N K + 2 T K + 2 T N), ``flops`` 2 T N K, ``dp4a`` the rung's dp4a
  (``course.models.quantized.dp4a_count``; 0 for torch), ``kernel_speedup_over_fp16``: torch's ``kernel_ms``
  over the row's, so a lesson can draw where the batched GEMV leaves its memory floor and where the GEMM wins.

- ``day09_gemm_timing``: the prefill GEMM, ``kernels.quantized_gemm.RUNGS`` (W8A8: int8 codes of M tokens with a
  scale each, times int8 weights (N, K) with a scale per output channel, the int32 sum exact, then scaled) at
  M = N = K in ``GEMM_SIZES``, beside ``torch_int_mm`` (``torch._int_mm``, cuBLAS's int8 GEMM on a row-major W,
  which its transpose makes the column-major B of its fast path; int32 out, no scales) and ``torch_int_mm_scaled``
  (the same, then the scales in float32 by torch). ``int_ops`` 2 M N K and ``tops`` the integer rate, int_ops
  over ``kernel_ms``; ``bytes`` the compulsory ones (A, W, the scales and y once); ``kernel_speedup_over_int_mm``: torch_int_mm's
  ``kernel_ms`` over the row's. Their checks (in ``day09_full_size_checks``): every GEMM rung at M = N = K = 4096
  against the exact sums (float64 products of int8 codes, exact below 2**53) times the scales.

``record_other_gpu(out_dir)`` (``python -m course.record day09 --other-gpu``), on a second GPU: the checks, then
``day09_gemv_timing_other_gpu.json`` (both shapes) and ``day09_gemm_timing_other_gpu.json`` (4096).
``ncu_cases()``: each rung once at 8192 x 8192 (Nsight Compute flushes the caches before it measures);
``sanitize()`` launches every kernel once, small: N not a multiple of the warps of a block, a row of 33
blocks, a row of zeros, a block of zero activations (q8_1's d = 0); the GEMM rungs on 67 x 21 x 64 (a partial tile
each way, two k steps) and the per-token quantizer.
"""

from __future__ import annotations

import functools
import pathlib

import numpy as np

from course.models import quantized as model
from course.record import harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from course.models import quantized_gemm as gemm_model
from kernels import (quantized_gemm, quantized_gemv, quantized_gemv_persistent, quantized_gemv_prequantized,
                     quantized_gemv_repacked, quantized_gemv_wide, reference)

SHAPES = ((8192, 8192), (28672, 8192))         # (N, K): Llama 3 70B's o_proj, and its gate and up projections
QUICK_CHECK_SHAPES = ((1024, 4096),)
QUICK_POINTS = ((8192, 8192),)
NCU_N, NCU_K = 8192, 8192
SEED = 9
WEIGHT_STD = 0.02
CHUNK_ROWS = 1024          # rows of W made, quantized and multiplied at a time (the host's memory stays small)
QK = model.QK
DP4A = "q4_1_gemv_q8_1_dp4a"
BATCHED = "q4_1_gemv_q8_1_small_batch"
LADDER = quantized_gemv_prequantized.RUNGS      # the day's whole ladder: quantized_gemv's rungs and their successors
# The weight format of each rung, in ladder order (a test checks that these are the ladder's rungs).
FORMATS = {name: model.RUNG_FORMATS[name] for name in LADDER}
# The rungs whose reference is W times the q8_1 activations, and those timed on repacked weights.
Q8_1_RUNGS = (DP4A, "q4_1_gemv_q8_1_repacked", BATCHED, "q4_1_gemv_q8_1_wide", "q8_0_gemv_q8_1_wide",
              "q4_1_gemv_q8_1_persistent", "q4_0_gemv_q8_1_persistent", "int4_g128_gemv_q8_1_persistent",
              *model.PREQUANTIZED_RUNGS)
REPACKED = tuple(name for name in LADDER if name not in quantized_gemv.RUNGS)
TOKENS = (1, 2, 4, 8, 16)                      # the decode batches of the batched sweep
QUICK_BATCH_POINTS = ((8192, 8192, 1), (8192, 8192, 16))
CHECK_TOKENS = 16
BASELINES = {"torch_mv_fp16": "float16", "torch_weight_int4pack_mm": "int4"}
# How course.timing flushes L2, as the GEMV sweep's notes say it (recordings before 2026-12-06 flushed by a memset,
# and their notes do not say this: day 9's lesson tells the two apart by it).
FLUSH = "by reading a buffer twice L2's size"
BITS = {"float16": 16, "int4": 5}   # int4: 4 bits a code, a bf16 scale and zero per group of 32


# --------------------------------------------------------------------------- inputs (host)

def _weight_rows(n: int, k: int, start: int) -> np.ndarray:
    """Rows start ... start + CHUNK_ROWS of W (n, k), float32; each chunk seeded alone, so any can be made again."""
    rng = np.random.default_rng([SEED, n, k, start])
    return rng.standard_normal((min(CHUNK_ROWS, n - start), k), dtype=np.float32) * np.float32(WEIGHT_STD)


@functools.lru_cache(maxsize=None)
def activations(k: int) -> np.ndarray:
    """x (k,) float32, Gaussian."""
    return np.random.default_rng([SEED, k]).standard_normal(k, dtype=np.float32)


@functools.lru_cache(maxsize=8)
def gguf_weights(fmt: str, n: int, k: int) -> np.ndarray:
    """W (n, k) as the GGUF bytes of ``fmt``, (n, k / 32, block bytes) uint8 (``reference.quantize_<fmt>``;
    int4_g128: (n, k / 128, 66))."""
    quantize = getattr(reference, f"quantize_{fmt}")
    weights, size = model.FORMAT_BLOCKS[fmt]
    w = np.empty((n, k // weights, size), np.uint8)
    for start in range(0, n, CHUNK_ROWS):
        rows = _weight_rows(n, k, start)
        w[start:start + len(rows)] = np.asarray(quantize(rows)).reshape(len(rows), k // weights, -1)
    return w


@functools.lru_cache(maxsize=None)
def batch_activations(k: int, tokens: int) -> np.ndarray:
    """x (tokens, k) float32, Gaussian: a decode batch."""
    return np.random.default_rng([SEED, k, tokens]).standard_normal((tokens, k), dtype=np.float32)


@functools.lru_cache(maxsize=4)
def float_product(n: int, k: int, tokens: int = 0) -> np.ndarray:
    """W x in float64, W the float32 matrix before quantization; x = ``activations(k)``, or with ``tokens`` the
    batch ``batch_activations(k, tokens)``, giving (tokens, n)."""
    if tokens:
        x = batch_activations(k, tokens).astype(np.float64)
        return np.concatenate([_weight_rows(n, k, start) @ x.T for start in range(0, n, CHUNK_ROWS)]).T
    x = activations(k).astype(np.float64)
    return np.concatenate([_weight_rows(n, k, start) @ x for start in range(0, n, CHUNK_ROWS)])


def reference_gemv(rung: str, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The float64 y the rung must give for GGUF bytes w (N, blocks, block bytes) and x (K,): the dequantized
    W times x; for the q8_1 rungs (``Q8_1_RUNGS``), sum over blocks of d sum_j q_j x^_j + m sum_j x_j, x^ the q8_1
    values of x and its block sums exact (``reference.gemv_q8_1``: what the rungs compute, W times the quantized x
    but for the minimum's term); x (T, K) gives (T, N), token by token (W dequantized once per chunk of rows for
    all of them)."""
    fmt = FORMATS[rung]
    dequantize = getattr(reference, f"dequantize_{fmt}")
    tokens = np.atleast_2d(np.asarray(x, np.float32))
    y = np.empty((w.shape[0], len(tokens)))
    if rung not in Q8_1_RUNGS:
        xd = tokens.astype(np.float64).T
        for start in range(0, w.shape[0], CHUNK_ROWS):
            rows = w[start:start + CHUNK_ROWS]
            y[start:start + len(rows)] = dequantize(rows.reshape(len(rows), -1)) @ xd
        return y.T if np.ndim(x) == 2 else y[:, 0]
    for start in range(0, w.shape[0], CHUNK_ROWS):
        rows = w[start:start + CHUNK_ROWS]
        y[start:start + len(rows)] = reference.gemv_q8_1(rows, tokens, fmt).T
    return y.T if np.ndim(x) == 2 else y[:, 0]


def q4_1_parts(w: np.ndarray):
    """Q4_1 bytes (N, blocks, 20) -> codes (N, K) uint8 (0 ... 15), d and m (N, blocks) float32: weight = d q + m."""
    n, blocks, _ = w.shape
    packed = w[..., 4:]
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=2).reshape(n, blocks * QK)
    halves = np.ascontiguousarray(w[..., :4]).view("<f2").astype(np.float32)
    return codes, halves[..., 0], halves[..., 1]


def _rel_err(got, want) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


# --------------------------------------------------------------------------- checks

def device_weights(name: str, n: int, k: int, on_device: dict):
    """W (n, k) on the device as rung ``name`` takes it: the GGUF bytes of its format, or for the ``REPACKED``
    rungs ``q4_1_repack`` of them (made once per format into ``on_device``, before anything is timed)."""
    from numba import cuda

    fmt = FORMATS[name]
    if fmt not in on_device:
        on_device[fmt] = cuda.to_device(gguf_weights(fmt, n, k))
    if name not in REPACKED:
        return on_device[fmt]
    key = f"repacked {fmt}"
    if key not in on_device:
        repack = {"q4_1": quantized_gemv_repacked.q4_1_repack, "q4_0": quantized_gemv_persistent.q4_0_repack,
                  "q8_0": quantized_gemv_wide.q8_0_repack, "int4_g128": quantized_gemv_persistent.int4_g128_repack}[fmt]
        on_device[key] = repack(on_device[fmt])
        cuda.synchronize()
    return on_device[key]


GEMM_SIZES = (4096, 8192)                      # M = N = K of the W8A8 GEMM sweep
GEMM_CHECK_SIZE = 4096
QUICK_GEMM_SIZES = (2048,)


@functools.lru_cache(maxsize=2)
def gemm_inputs(size: int):
    """Seeded int8 codes and scales of a W8A8 product of M = N = K = ``size``: a_q, sa (per token), w_q, sw (per
    output channel), codes over the whole int8 range."""
    rng = np.random.default_rng(SEED * 7919 + size)
    a_q = rng.integers(-128, 128, (size, size), dtype=np.int8)
    w_q = rng.integers(-128, 128, (size, size), dtype=np.int8)
    sa = rng.uniform(0.5, 2.0, size).astype(np.float32) / 127
    sw = rng.uniform(0.5, 2.0, size).astype(np.float32) * WEIGHT_STD / 127
    return a_q, sa, w_q, sw


def gemm_reference(a_q, sa, w_q, sw) -> np.ndarray:
    """``reference.w8a8_matmul`` computed with float64 products (BLAS): every sum of int8 products is an integer
    below 2**53, so it is exact, and equal to the reference's int64 sums."""
    return (a_q.astype(np.float64) @ w_q.astype(np.float64).T) * sa.astype(np.float64)[:, None] * sw[None, :]


def gemm_checks(size: int = GEMM_CHECK_SIZE) -> list[Check]:
    from numba import cuda

    a_q, sa, w_q, sw = gemm_inputs(size)
    want = gemm_reference(a_q, sa, w_q, sw)
    device = [cuda.to_device(v) for v in (a_q, sa, w_q, sw)]
    found = []
    for name, rung in quantized_gemm.RUNGS.items():
        out = cuda.device_array((size, size), np.float32)
        found.append(Check(f"y of {name}, M=N=K={size}", lambda rung=rung, out=out: rung(*device, out=out),
                           out.copy_to_host, lambda: want, seed=SEED, poisoned=(out,),
                           columns=dict(rung=name, fmt="int8", M=size, N=size, K=size, T=size, against="int8 codes")))
    return found


@functools.lru_cache(maxsize=1)
def _gemm_cases(size) -> list[Timed]:
    from numba import cuda

    from course.record import baselines

    a_q, sa, w_q, sw = (cuda.to_device(v) for v in gemm_inputs(size))
    ops, moved = gemm_model.int_ops(size, size, size), gemm_model.compulsory_bytes(size, size, size)
    out = cuda.device_array((size, size), np.float32)
    columns = {"fmt": "int8", "int_ops": ops}
    cases = [Timed(name, lambda rung=rung: rung(a_q, sa, w_q, sw, out=out), moved, ops, columns)
             for name, rung in quantized_gemm.RUNGS.items()]
    baselines.cuda_torch()
    cases.append(Timed("torch_int_mm", baselines.torch_int_mm(a_q, w_q), moved, ops, columns))
    cases.append(Timed("torch_int_mm_scaled", baselines.torch_int_mm_scaled(a_q, sa, w_q, sw), moved, ops, columns))
    return cases


def _finish_gemm(rows: list[dict]) -> None:
    for row in rows:
        row["tops"] = row["int_ops"] / (row["kernel_ms"] * 1e-3) / 1e12
    harness.fraction_of({"rung": "torch_int_mm"}, "kernel_speedup_over_int_mm", time="kernel_ms")(rows)


def gemm_sweep() -> Sweep:
    return Sweep(
        name="day09_gemm_timing",
        notes=("y = (A_q W_q^T) sa sw at M = N = K: A_q (M, K) int8 codes of M tokens with scales sa (M,), W_q (N, K) "
               "int8 with scales sw (N,) (codes uniform over -128 ... 127, seeded), y (M, N) float32; rungs: "
               "kernels.quantized_gemm.RUNGS (the int32 sum exact, then sa[m] sw[n] once); torch_int_mm: "
               "torch._int_mm(A_q, W_q.t()) (cuBLAS int8, W row-major so its transpose is the column-major B of its "
               "fast path; int32 y, no scales); torch_int_mm_scaled: the same then .float() * sa * sw. L2 flushed "
               "before every repeat; kernel_ms the GPU's time alone; int_ops: the integer operations 2 M N K "
               "(tflops: them over median_ms); tops: int_ops over kernel_ms; bytes: the compulsory bytes "
               "(course.models.quantized_gemm.compulsory_bytes); kernel_speedup_over_int_mm: torch_int_mm's kernel_ms over the row's."),
        points=GEMM_SIZES, quick_points=QUICK_GEMM_SIZES,
        shape=lambda size: dict(M=size, N=size, K=size),
        cases=_gemm_cases, flush_l2=True, fraction_of_copy=False, kernel_time=True, finish=_finish_gemm)


def checks(shapes=SHAPES, tokens: int = CHECK_TOKENS) -> list[Check]:
    """Every rung at each (N, K) of ``shapes`` against ``reference_gemv``, into a NaN-poisoned y; the batched rung
    on ``tokens`` tokens."""
    from numba import cuda

    found = []
    for n, k in shapes:
        on_device = {}
        for name, rung in LADDER.items():
            fmt = FORMATS[name]
            t = tokens if name == BATCHED else 1
            x = batch_activations(k, t) if name == BATCHED else activations(k)
            exact = float_product(n, k, t if name == BATCHED else 0)
            out = cuda.device_array(exact.shape, np.float32)
            want = reference_gemv(name, gguf_weights(fmt, n, k), x)
            found.append(Check(
                f"y of {name} ({fmt}), N={n} K={k}" + (f" T={t}" if name == BATCHED else ""),
                lambda rung=rung, dw=device_weights(name, n, k, on_device), dx=cuda.to_device(x), out=out:
                    rung(dw, dx, out=out),
                out.copy_to_host, lambda want=want: want, seed=SEED, poisoned=(out,),
                columns=dict(rung=name, fmt=fmt, N=n, K=k, T=t, against="q8_1 x" if name in Q8_1_RUNGS else "x",
                             quantization_rel_err=_rel_err(want, exact))))
    return found


# --------------------------------------------------------------------------- timing

@functools.lru_cache(maxsize=1)
def int4pack_status() -> tuple[bool, str]:
    """(whether ``torch._weight_int4pack_mm`` runs here, a sentence for the notes): tried on a small Q4_1
    matrix, its output compared with the Q4_1 reference (bf16 scales and x: about 1e-2 apart)."""
    from course.record import baselines

    try:
        n, k = 64, 512
        rng = np.random.default_rng(SEED)
        w = np.asarray(reference.quantize_q4_1(rng.standard_normal((n, k), dtype=np.float32))).reshape(n, k // QK, -1)
        x = rng.standard_normal(k, dtype=np.float32)
        call = baselines.torch_weight_int4pack_mm(*q4_1_parts(w), x)
        got = call().float().cpu().numpy().reshape(n)
        err = _rel_err(got, reference_gemv("q4_1_gemv_warp_per_row", w, x))
    except Exception as why:          # no CUDA torch, no such op, an op that refuses the shapes: not recorded
        first = str(why).splitlines()[0][:400] if str(why) else type(why).__name__
        return False, f"torch_weight_int4pack_mm not recorded: {first}"
    if err > 0.05:
        return True, (f"torch_weight_int4pack_mm timed only: on a 64 x 512 Q4_1 matrix its y is {err:.2g} from the "
                      f"reference (rel. err.), so this torch packs the codes otherwise than assumed")
    return True, f"torch_weight_int4pack_mm checked on a 64 x 512 Q4_1 matrix: rel. err. {err:.2g} (bf16 x and scales)"


def _launch_deferring_frees(rung, dw, dx, out):
    """A timed launch of the rung: numba's frees deferred while it runs. The dp4a rung's launcher allocates its q8_1
    scratch at each call; every few calls numba would flush their frees with cuMemFree, which waits for the GPU
    and so would put a host round trip inside a timed repeat. Deferred, they are freed after the timing."""
    from numba import cuda

    def launch():
        with cuda.defer_cleanup():
            rung(dw, dx, out=out)

    return launch


def _columns(fmt: str, bits, moved: int, flops: int) -> dict:
    return {"fmt": fmt, "bits_per_weight": float(bits), "bytes": int(moved), "flops": int(flops)}


def _gemv_cases(point) -> list[Timed]:
    from numba import cuda

    from course.record import baselines

    n, k = point
    x = activations(k)
    dx = cuda.to_device(x)
    out = cuda.device_array(n, np.float32)
    flops = model.flops(n, k)
    on_device = {}
    cases = []
    dx_q = quantized_gemv_prequantized.quantize_activations(dx)      # what the kernel that makes x writes
    for name, rung in LADDER.items():
        fmt = FORMATS[name]
        moved = model.compulsory_bytes(name, n, k)
        given = dx_q if name in model.PREQUANTIZED_RUNGS else dx
        cases.append(Timed(name, _launch_deferring_frees(rung, device_weights(name, n, k, on_device), given, out),
                           moved, flops, _columns(fmt, model.bits_per_weight(fmt), moved, flops)))
    torch = baselines.cuda_torch()
    generator = torch.Generator(device="cuda").manual_seed(SEED * 100003 + n)
    w16 = (torch.randn((n, k), generator=generator, device="cuda") * WEIGHT_STD).half()
    x16 = torch.from_numpy(x).cuda().half()
    moved = 2 * n * k + 2 * k + 2 * n
    cases.append(Timed("torch_mv_fp16", baselines.torch_mv(w16, x16), moved, flops,
                       _columns("float16", BITS["float16"], moved, flops)))
    if int4pack_status()[0]:
        moved = n * k // 2 + 2 * 2 * n * (k // QK) + 2 * k + 2 * n      # codes, bf16 scale and zero per group, x, y
        cases.append(Timed("torch_weight_int4pack_mm",
                           baselines.torch_weight_int4pack_mm(*q4_1_parts(gguf_weights("q4_1", n, k)), x), moved,
                           flops, _columns("int4", BITS["int4"], moved, flops)))
    return cases


def finish_gemv(rows: list[dict]) -> None:
    """Rates from the GPU's time alone, and each row's kernel_ms against torch's (the baselines' own rows: 1)."""
    by_rung = {row["rung"]: row for row in rows}
    for row in rows:
        row["kernel_gbps"] = row["bytes"] / row["kernel_ms"] / 1e6
        row["warm_kernel_gbps"] = row["bytes"] / row["warm_kernel_ms"] / 1e6
        row["kernel_speedup_over_fp16"] = by_rung["torch_mv_fp16"]["kernel_ms"] / row["kernel_ms"]
        if "torch_weight_int4pack_mm" in by_rung:
            row["kernel_speedup_over_int4pack"] = by_rung["torch_weight_int4pack_mm"]["kernel_ms"] / row["kernel_ms"]


def gemv_sweep() -> Sweep:
    return Sweep(
        name="day09_gemv_timing",
        notes=("y = W x at batch 1, W (N, K) in GGUF blocks of 32 (fmt: q8_0, q4_0, q4_1) or in int4 groups of 128 with "
               "an fp16 scale (int4_g128); Gaussian W, std 0.02, quantized by kernels.reference, x (K,) and y (N,) float32; rung: the rung of "
               "kernels.quantized_gemv_prequantized.RUNGS ("
               + ", ".join(f"{name} on {fmt}" for name, fmt in FORMATS.items()) + "; " + ", ".join(REPACKED)
               + " on the weights repacked once by q4_1_repack, q4_0_repack, q8_0_repack or int4_g128_repack before "
               "timing, the "
               "batched rung at T=1); torch_mv_fp16: torch.mv on an fp16 W (N, K) and fp16 x (cuBLAS's GEMV); "
               "torch_weight_int4pack_mm: torch._weight_int4pack_mm (tinygemm) on the same Q4_1 matrix as "
               "q4_1_gemv_warp_per_row (4-bit codes, bf16 scale and zero = m + 8 d per group of 32, bf16 x, "
               f"y (1, N) bf16), inner k tiles 8. {int4pack_status()[1]}. "
               f"L2 flushed {FLUSH} before every repeat of median_ms (back-to-back calls from Python) and kernel_ms "
               "(the GPU's time alone, launch cost hidden); warm_kernel_ms: kernel_ms's timing with L2 left warm by "
               "the "
               "previous repeat (a matrix smaller than L2 is then read from it). bytes: the compulsory bytes of one "
               "call (course.models.quantized.compulsory_bytes; torch's: W at its format, x and y once); gbps from "
               "median_ms, kernel_gbps and warm_kernel_gbps from kernel_ms and warm_kernel_ms; fraction_of_copy: "
               "gbps over the copy bandwidth of this run; kernel_speedup_over_fp16 and kernel_speedup_over_int4pack: "
               "torch's kernel_ms over the row's."),
        points=SHAPES, quick_points=QUICK_POINTS,
        shape=lambda point: dict(N=point[0], K=point[1]),
        cases=_gemv_cases, flush_l2=True, finish=finish_gemv, fraction_of_copy=True, kernel_time=True,
        warm_time=True)


def _batched_cases(point) -> list[Timed]:
    from numba import cuda

    from course.record import baselines

    n, k, tokens = point
    x = batch_activations(k, tokens)
    out = cuda.device_array((tokens, n), np.float32)
    flops = model.flops(n, k, tokens)
    moved = model.compulsory_bytes(BATCHED, n, k, tokens)
    rung = LADDER[BATCHED]
    cases = [Timed(BATCHED, _launch_deferring_frees(rung, device_weights(BATCHED, n, k, {}), cuda.to_device(x), out),
                   moved, flops, {**_columns("q4_1", model.bits_per_weight("q4_1"), moved, flops),
                                  "dp4a": model.dp4a_count(n, k, tokens)})]
    torch = baselines.cuda_torch()
    generator = torch.Generator(device="cuda").manual_seed(SEED * 100003 + n)
    w16 = (torch.randn((n, k), generator=generator, device="cuda") * WEIGHT_STD).half()
    x16 = torch.from_numpy(x).cuda().half()
    moved = 2 * n * k + 2 * tokens * k + 2 * tokens * n
    cases.append(Timed("torch_matmul_fp16", baselines.torch_matmul(x16, w16.t()), moved, flops,
                       {**_columns("float16", BITS["float16"], moved, flops), "dp4a": 0}))
    return cases


def batched_sweep() -> Sweep:
    return Sweep(
        name="day09_batched_timing",
        notes=(f"y[t] = W x[t] for a decode batch of T tokens (T in {TOKENS}), W (N, K) Q4_1 (Gaussian W, std 0.02, "
               "quantized by kernels.reference, repacked once by kernels.quantized_gemv_repacked.q4_1_repack before "
               f"timing), x (T, K) Gaussian float32, y (T, N) float32; rung: {BATCHED} of "
               "kernels.quantized_gemv_repacked.RUNGS (each weight block loaded once for all T tokens, x quantized "
               "to q8_1 per token and block of 32 within the timed call); torch_matmul_fp16: torch.matmul of the "
               "(T, K) fp16 x and the (K, N) transpose of an fp16 W (cuBLAS on tensor cores), y (T, N) fp16. L2 "
               "flushed before every repeat of median_ms (back-to-back calls from Python) and kernel_ms (the GPU's "
               "time alone). bytes: the compulsory bytes of one call (course.models.quantized.compulsory_bytes: W "
               "once, x, its q8_1 blocks and y per token; torch's: 2 N K + 2 T K + 2 T N); flops: 2 T N K; dp4a: "
               "the rung's dp4a lane-instructions, T N K / 4 (course.models.quantized.dp4a_count; 0 for torch); "
               "fraction_of_copy: gbps over the copy bandwidth of this run; kernel_speedup_over_fp16: "
               "torch_matmul_fp16's kernel_ms over the row's."),
        points=tuple((n, k, t) for n, k in SHAPES for t in TOKENS), quick_points=QUICK_BATCH_POINTS,
        shape=lambda point: dict(N=point[0], K=point[1], T=point[2]),
        cases=_batched_cases, flush_l2=True, fraction_of_copy=True, kernel_time=True,
        finish=harness.fraction_of("torch_matmul_fp16", "kernel_speedup_over_fp16", time="kernel_ms"))


# --------------------------------------------------------------------------- Nsight, sanitizer

def _ncu_launch(name: str, n: int, k: int):
    from numba import cuda

    dw = device_weights(name, n, k, {})
    dx = cuda.to_device(activations(k))
    if name in model.PREQUANTIZED_RUNGS:
        dx = quantized_gemv_prequantized.quantize_activations(dx)
    out = cuda.device_array(n, np.float32)
    rung = LADDER[name]
    return lambda: rung(dw, dx, out=out)


def ncu_cases() -> list[NcuCase]:
    """Each rung once at NCU_N x NCU_K (the q8_1 rungs: their two kernels, the q8_1 quantizer and the GEMV; the
    batched rung at batch 1; the repacked rungs on weights repacked beforehand; the prequantized rungs on x's q8_1
    blocks made beforehand, their GEMV alone)."""
    return [NcuCase(name, NCU_N, harness.lazy(_ncu_launch, name, NCU_N, NCU_K)) for name in LADDER]


def ncu_shape(n: int) -> dict:
    """Every case is y = W x with W (n, NCU_K); the rung's name gives the format (``FORMATS``)."""
    return dict(K=NCU_K)


def sanitize() -> None:
    """Every kernel once, small: 7 rows (blocks of 4 warps, the second with 3) of 3 blocks, and 5 rows of 33 blocks
    (lane 0 takes two; int4_g128, whose K is a multiple of 128: 4 and 36 blocks); a row of zeros, x's first block
    zeros (q8_1: d = 0); the batched rung again on 3 tokens; then ``q8_0_quantize`` on both."""
    from numba import cuda

    rng = np.random.default_rng(SEED)
    for n, k in ((7, 3 * QK), (5, 33 * QK)):
        weights = rng.standard_normal((n, 36 * QK), dtype=np.float32)
        weights[1] = 0.0
        xs = rng.standard_normal(36 * QK, dtype=np.float32)
        xs[:QK] = 0.0
        for name, rung in LADDER.items():
            group = model.FORMAT_BLOCKS[FORMATS[name]][0]
            k_rung = -(-k // group) * group                 # K rounded up to the format's block
            x = xs[:k_rung]
            dx = cuda.to_device(x)
            quantize = getattr(reference, f"quantize_{FORMATS[name]}")
            dw = cuda.to_device(np.asarray(quantize(weights[:, :k_rung])).reshape(n, k_rung // group, -1))
            rung(dw, dx, out=cuda.device_array(n, np.float32))
            if name == BATCHED:
                rung(dw, cuda.to_device(np.stack([x, -x, 2 * x])), out=cuda.device_array((3, n), np.float32))
        quantized_gemv.q8_0_quantize(cuda.to_device(np.ascontiguousarray(weights[:, :k])))
    a_q, w_q = rng.integers(-128, 128, (67, 64), dtype=np.int8), rng.integers(-128, 128, (21, 64), dtype=np.int8)
    scales = [cuda.to_device(rng.uniform(0.5, 2.0, n).astype(np.float32)) for n in (67, 21)]
    for rung in quantized_gemm.RUNGS.values():     # the GEMM: a partial tile of rows and of columns, two k steps
        rung(cuda.to_device(a_q), scales[0], cuda.to_device(w_q), scales[1])
    quantized_gemm.quantize_per_token(cuda.to_device(rng.standard_normal((67, 64), dtype=np.float32)))
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(
        day="day09", checks=lambda quick: (checks(QUICK_CHECK_SHAPES if quick else SHAPES)
                                           + gemm_checks(QUICK_GEMM_SIZES[0] if quick else GEMM_CHECK_SIZE)),
        check_recording="day09_full_size_checks",
        check_notes=("every rung of kernels.quantized_gemv_prequantized.RUNGS (day 9's ladder) on Gaussian W (std 0.02) "
                     "quantized by kernels.reference (fmt), x Gaussian float32, against the float64 reference: the "
                     "dequantized W times x (against='x'); for the q8_1 rungs (" + ", ".join(Q8_1_RUNGS) + "), the "
                     "dequantized W times x quantized to q8_1 (reference.quantize_q8_1) in the codes' product and "
                     "times the exact block sums of x in the minimum's (against='q8_1 x'); "
                     f"{BATCHED} on T={CHECK_TOKENS} tokens, x (T, K), the others at T=1. quantization_rel_err: that "
                     "reference's relative error against the float64 product of the float32 W before quantization, "
                     "what the format costs."),
        sweeps=lambda: [gemv_sweep(), batched_sweep(), gemm_sweep()], ncu_cases=ncu_cases, sanitize=sanitize,
        ncu_shape=ncu_shape)


def record_other_gpu(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """On a second GPU: every GEMV rung and the W8A8 GEMM rungs checked at full size, then the GEMV sweep at both
    ``SHAPES`` saved as ``day09_gemv_timing_other_gpu`` and the GEMM sweep at 4096 as ``day09_gemm_timing_other_gpu``
    (only the first point of each with ``quick``): the goals of day 9 are stated for one GPU, its recordings made on
    another, and the lesson sets the two beside each other."""
    from course.timing import measure_ceilings

    ceilings = measure_ceilings()
    gemv = harness.record_other_gpu(checks(SHAPES[:1] if quick else SHAPES), gemv_sweep(), SHAPES, out_dir,
                                    checked="every GEMV rung's full-size check", quick=quick, ceilings=ceilings)
    gemm = harness.record_other_gpu(gemm_checks(QUICK_GEMM_SIZES[0] if quick else GEMM_CHECK_SIZE), gemm_sweep(),
                                    GEMM_SIZES[:1], out_dir, checked="every GEMM rung's full-size check", quick=quick,
                                    ceilings=ceilings)
    return [gemv, gemm]


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check every rung at full size, then time them and torch's GEMVs; save all; print a summary."""
    paths = harness.record(recorder(), out_dir, quick=quick)
    from course.records import load_recording

    for path in paths:
        rec = load_recording(path)
        if rec.name == "day09_gemv_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<26} {row['fmt']:<8} N={row['N']:>5} K={row['K']} kernel "
                      f"{row['kernel_ms'] * 1e3:8.1f} us ({row['kernel_gbps']:6.0f} GB/s), L2 warm "
                      f"{row['warm_kernel_ms'] * 1e3:8.1f} us  {row['kernel_speedup_over_fp16']:.2f}x fp16", flush=True)
        elif rec.name == "day09_gemm_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<26} M=N=K={row['M']:>5} kernel {row['kernel_ms']:8.3f} ms "
                      f"({row['tops']:6.1f} TOP/s)  {row['kernel_speedup_over_int_mm']:.3f}x torch._int_mm", flush=True)
        elif rec.name == "day09_batched_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<26} N={row['N']:>5} K={row['K']} T={row['T']:>2} kernel "
                      f"{row['kernel_ms'] * 1e3:8.1f} us ({row['bytes'] / row['kernel_ms'] / 1e6:6.0f} GB/s)  "
                      f"{row['kernel_speedup_over_fp16']:.2f}x fp16", flush=True)
        elif rec.name == "day09_full_size_checks":
            for row in rec.rows:
                what = (f"quantization {row['quantization_rel_err']:.1e}" if "quantization_rel_err" in row
                        else "against the exact integer sums")
                print(f"   {row['rung']:<26} N={row['N']:>5} rel_err {row['rel_err']:.1e}  {what}", flush=True)
    return paths
