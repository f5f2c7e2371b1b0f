"""GPU recordings of day 9: quantized GEMV over GGUF blocks (``kernels.quantized_gemv``).

A declaration for ``course.record.harness`` over the registry ``kernels.quantized_gemv.RUNGS``: y = W x at
batch 1, the decode step's matrix-vector product, with W stored in its llama.cpp bytes (``RUNG_FORMATS``:
Q8_0, Q4_0, Q4_1) at two shapes of Llama 3 70B's layers (``SHAPES``, (N, K): 8192 x 8192, the attention
output projection, and 28672 x 8192, the MLP's gate and up projections). W is Gaussian (standard deviation
0.02, as a trained layer's weights), quantized by ``kernels.reference`` (``quantize_q8_0``, ``quantize_q4_0``,
``quantize_q4_1``); x is Gaussian float32. Every row names its rung by its key in ``RUNGS`` (or torch's
call, ``torch_...``), the shape it measured in ``N`` and ``K`` and the weights' format in ``fmt``. The
checks run first, then ``record(out_dir)`` writes:

- ``day09_full_size_checks.json``: every rung at both shapes against the float64 reference: the
  dequantized W (``reference.dequantize_<fmt>``) times x; for ``q4_1_gemv_q8_1_dp4a``, W times x quantized
  to q8_1 (``reference.quantize_q8_1``) in the codes' product and times the exact block sums of x in the
  minimum's, as the rung defines it. ``quantization_rel_err``: what the format costs, the relative error of
  that reference against the float64 product of the float32 W before quantization.
- ``day09_gemv_timing.json``: every rung at both shapes, L2 flushed before every repeat (``median_ms``,
  back-to-back calls from Python; ``kernel_ms``, the launch cost hidden), and again with L2 warm
  (``warm_kernel_ms``, launch cost hidden): a Q4 matrix of 8192 x 8192 (37.7 MB) fits in an H100's or
  H200's L2, its Q8_0 (71 MB) and fp16 (134 MB) twins do not, so only the flushed time is what a model's
  decode step sees. Beside them torch: ``torch_mv_fp16``, ``torch.mv`` on an fp16 W of the same shape
  (cuBLAS's GEMV), and ``torch_weight_int4pack_mm``, torch's own int4 weight-only kernel
  (``torch._weight_int4pack_mm``, tinygemm) on the same Q4_1 matrix (codes, scales and minimums, groups of
  32, bf16 scales and x), where this torch and GPU have it (the sweep's notes say why not otherwise).
  ``bytes``: the compulsory bytes of one call (``course.models.quantized.compulsory_bytes``: W in its format,
  x and y once, the dp4a rung's q8_1 blocks written and read; torch's at its formats), ``gbps`` from
  ``median_ms``, ``kernel_gbps`` and ``warm_kernel_gbps`` from the GPU's time alone,
  ``kernel_speedup_over_fp16`` (and ``kernel_speedup_over_int4pack``) torch's ``kernel_ms`` over the row's.

``ncu_cases()``: each rung once at 8192 x 8192 (Nsight Compute flushes the caches before it measures);
``sanitize()`` launches every kernel once, small: N not a multiple of the warps of a block, a row of 33
blocks, a row of zeros, a block of zero activations (q8_1's d = 0).
"""

from __future__ import annotations

import functools
import pathlib

import numpy as np

from course.models import quantized as model
from course.record import harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from kernels import quantized_gemv, reference

SHAPES = ((8192, 8192), (28672, 8192))         # (N, K): Llama 3 70B's o_proj, and its gate and up projections
QUICK_CHECK_SHAPES = ((1024, 4096),)
QUICK_POINTS = ((8192, 8192),)
NCU_N, NCU_K = 8192, 8192
SEED = 9
WEIGHT_STD = 0.02
CHUNK_ROWS = 1024          # rows of W made, quantized and multiplied at a time (the host's memory stays small)
QK = model.QK
DP4A = "q4_1_gemv_q8_1_dp4a"
# The weight format of each rung, in ladder order (a test checks that these are the ladder's rungs).
FORMATS = {name: model.RUNG_FORMATS[name] for name in quantized_gemv.RUNGS}
BASELINES = {"torch_mv_fp16": "float16", "torch_weight_int4pack_mm": "int4"}
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
    """W (n, k) as the GGUF bytes of ``fmt``, (n, k / 32, block bytes) uint8 (``reference.quantize_<fmt>``)."""
    quantize = getattr(reference, f"quantize_{fmt}")
    w = np.empty((n, k // QK, model.BLOCK_BYTES[fmt]), np.uint8)
    for start in range(0, n, CHUNK_ROWS):
        rows = _weight_rows(n, k, start)
        w[start:start + len(rows)] = np.asarray(quantize(rows)).reshape(len(rows), k // QK, -1)
    return w


@functools.lru_cache(maxsize=4)
def float_product(n: int, k: int) -> np.ndarray:
    """W x in float64, W the float32 matrix before quantization."""
    x = activations(k).astype(np.float64)
    return np.concatenate([_weight_rows(n, k, start) @ x for start in range(0, n, CHUNK_ROWS)])


def reference_gemv(rung: str, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The float64 y the rung must give for GGUF bytes w (N, blocks, block bytes) and x (K,): the dequantized
    W times x; for ``q4_1_gemv_q8_1_dp4a``, sum over blocks of d sum_j q_j x^_j + m sum_j x_j, x^ the q8_1 values
    of x and its block sums exact (what the rung computes, W times the quantized x but for the minimum's term)."""
    fmt = FORMATS[rung]
    dequantize = getattr(reference, f"dequantize_{fmt}")
    y = np.empty(w.shape[0])
    if rung != DP4A:
        xd = np.asarray(x, np.float64)
        for start in range(0, w.shape[0], CHUNK_ROWS):
            rows = w[start:start + CHUNK_ROWS]
            y[start:start + len(rows)] = dequantize(rows.reshape(len(rows), -1)) @ xd
        return y
    codes, scales, sums = reference.quantize_q8_1(x)
    x_hat = (codes.reshape(-1, QK) * scales.astype(np.float64)[:, None]).reshape(-1)
    for start in range(0, w.shape[0], CHUNK_ROWS):
        rows = w[start:start + CHUNK_ROWS].copy()
        minimums = rows[..., 2:4].copy().view("<f2")[..., 0].astype(np.float64)
        rows[..., 2:4] = 0                             # m = 0: the values are d q exactly
        y[start:start + len(rows)] = dequantize(rows.reshape(len(rows), -1)) @ x_hat + minimums @ sums
    return y


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

def checks(shapes=SHAPES) -> list[Check]:
    """Every rung at each (N, K) of ``shapes`` against ``reference_gemv``, into a NaN-poisoned y."""
    from numba import cuda

    found = []
    for n, k in shapes:
        x = activations(k)
        dx = cuda.to_device(x)
        exact = float_product(n, k)
        out = cuda.device_array(n, np.float32)
        on_device = {}
        for name, rung in quantized_gemv.RUNGS.items():
            fmt = FORMATS[name]
            w = gguf_weights(fmt, n, k)
            if fmt not in on_device:
                on_device[fmt] = cuda.to_device(w)
            want = reference_gemv(name, w, x)
            found.append(Check(
                f"y of {name} ({fmt}), N={n} K={k}",
                lambda rung=rung, dw=on_device[fmt], dx=dx, out=out: rung(dw, dx, out=out),
                out.copy_to_host, lambda want=want: want, seed=SEED, poisoned=(out,),
                columns=dict(rung=name, fmt=fmt, N=n, K=k, against="q8_1 x" if name == DP4A else "x",
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
    for name, rung in quantized_gemv.RUNGS.items():
        fmt = FORMATS[name]
        if fmt not in on_device:
            on_device[fmt] = cuda.to_device(gguf_weights(fmt, n, k))
        moved = model.compulsory_bytes(name, n, k)
        cases.append(Timed(name, _launch_deferring_frees(rung, on_device[fmt], dx, out), moved, flops,
                           _columns(fmt, model.bits_per_weight(fmt), moved, flops)))
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
        notes=("y = W x at batch 1, W (N, K) in GGUF blocks of 32 (fmt: q8_0, q4_0, q4_1; Gaussian W, std 0.02, "
               "quantized by kernels.reference), x (K,) and y (N,) float32; rung: the rung of "
               "kernels.quantized_gemv.RUNGS (" + ", ".join(f"{name} on {fmt}" for name, fmt in FORMATS.items())
               + "); torch_mv_fp16: torch.mv on an fp16 W (N, K) and fp16 x (cuBLAS's GEMV); "
               "torch_weight_int4pack_mm: torch._weight_int4pack_mm (tinygemm) on the same Q4_1 matrix as "
               "q4_1_gemv_warp_per_row (4-bit codes, bf16 scale and zero = m + 8 d per group of 32, bf16 x, "
               f"y (1, N) bf16), inner k tiles 8. {int4pack_status()[1]}. "
               "L2 flushed before every repeat of median_ms (back-to-back calls from Python) and kernel_ms (the "
               "GPU's time alone, launch cost hidden); warm_kernel_ms: kernel_ms's timing with L2 left warm by the "
               "previous repeat (a matrix smaller than L2 is then read from it). bytes: the compulsory bytes of one "
               "call (course.models.quantized.compulsory_bytes; torch's: W at its format, x and y once); gbps from "
               "median_ms, kernel_gbps and warm_kernel_gbps from kernel_ms and warm_kernel_ms; fraction_of_copy: "
               "gbps over the copy bandwidth of this run; kernel_speedup_over_fp16 and kernel_speedup_over_int4pack: "
               "torch's kernel_ms over the row's."),
        points=SHAPES, quick_points=QUICK_POINTS,
        shape=lambda point: dict(N=point[0], K=point[1]),
        cases=_gemv_cases, flush_l2=True, finish=finish_gemv, fraction_of_copy=True, kernel_time=True,
        warm_time=True)


# --------------------------------------------------------------------------- Nsight, sanitizer

def _ncu_launch(name: str, n: int, k: int):
    from numba import cuda

    dw = cuda.to_device(gguf_weights(FORMATS[name], n, k))
    dx = cuda.to_device(activations(k))
    out = cuda.device_array(n, np.float32)
    rung = quantized_gemv.RUNGS[name]
    return lambda: rung(dw, dx, out=out)


def ncu_cases() -> list[NcuCase]:
    """Each rung once at NCU_N x NCU_K (the dp4a rung: its two kernels, the q8_1 quantizer and the GEMV)."""
    return [NcuCase(name, NCU_N, harness.lazy(_ncu_launch, name, NCU_N, NCU_K)) for name in quantized_gemv.RUNGS]


def ncu_shape(n: int) -> dict:
    """Every case is y = W x with W (n, NCU_K); the rung's name gives the format (``FORMATS``)."""
    return dict(K=NCU_K)


def sanitize() -> None:
    """Every kernel once, small: 7 rows (blocks of 4 warps, the second with 3) of 3 blocks, and 5 rows of 33 blocks
    (lane 0 takes two); a row of zeros, x's first block zeros (q8_1: d = 0); then ``q8_0_quantize`` on both."""
    from numba import cuda

    rng = np.random.default_rng(SEED)
    for n, k in ((7, 3 * QK), (5, 33 * QK)):
        weights = rng.standard_normal((n, k), dtype=np.float32)
        weights[1] = 0.0
        x = rng.standard_normal(k, dtype=np.float32)
        x[:QK] = 0.0
        dx = cuda.to_device(x)
        for name, rung in quantized_gemv.RUNGS.items():
            quantize = getattr(reference, f"quantize_{FORMATS[name]}")
            dw = cuda.to_device(np.asarray(quantize(weights)).reshape(n, k // QK, -1))
            rung(dw, dx, out=cuda.device_array(n, np.float32))
        quantized_gemv.q8_0_quantize(cuda.to_device(weights))
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(
        day="day09", checks=lambda quick: checks(QUICK_CHECK_SHAPES if quick else SHAPES),
        check_recording="day09_full_size_checks",
        check_notes=("every rung of kernels.quantized_gemv.RUNGS on Gaussian W (std 0.02) quantized by "
                     "kernels.reference (fmt), x Gaussian float32, against the float64 reference: the dequantized W "
                     "times x (against='x'); for q4_1_gemv_q8_1_dp4a, the dequantized W times x quantized to q8_1 "
                     "(reference.quantize_q8_1) in the codes' product and times the exact block sums of x in the "
                     "minimum's (against='q8_1 x'). quantization_rel_err: that reference's relative error "
                     "against the float64 product of the float32 W before quantization, what the format costs."),
        sweeps=lambda: [gemv_sweep()], ncu_cases=ncu_cases, sanitize=sanitize, ncu_shape=ncu_shape)


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
        elif rec.name == "day09_full_size_checks":
            for row in rec.rows:
                print(f"   {row['rung']:<26} N={row['N']:>5} rel_err {row['rel_err']:.1e}  quantization "
                      f"{row['quantization_rel_err']:.1e}", flush=True)
    return paths
