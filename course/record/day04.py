"""GPU recordings of day 4: the GEMM ladder (``kernels.gemm``) and the shared-memory transpose (``kernels.transpose``).

``record(out_dir)`` checks every GEMM rung and every transpose rung at full size (and at an
awkward size) against the references, then writes:

- ``day04_gemm_timing``: every GEMM rung and ``torch.matmul`` in fp32 with TF32 off, square
  M = N = K for each N in ``GEMM_SIZES``. Rows: rung, N, M, K, median_ms, p10_ms, p90_ms, repeat,
  gflops, tflops, gbps (the rung's modelled global bytes per second; compulsory bytes for torch),
  intensity (modelled FLOPs per byte).
- ``day04_transpose_timing``: the transpose rungs and torch's ``out.copy_(x.t())`` for each N in
  ``TRANSPOSE_SIZES`` (square), L2 flushed. Rows: rung, N, median_ms, p10_ms, p90_ms, repeat, gbps
  (2·N²·4 bytes per second).
- ``day04_missing_barrier``: ``transpose_missing_barrier`` and the correct padded rung, each run
  ``BARRIER_TRIALS`` times on fresh random inputs of ``BARRIER_SHAPE``. Rows: kernel, trial,
  wrong (elements that differ from x.T), elements.

``ncu_cases()`` lists the GEMM rungs and torch at ``NCU_SIZES`` for Nsight Compute's DRAM bytes
(recording ``day04_dram_bytes``, labels as the rungs); ``sanitize()`` launches every correct
kernel once at an awkward small size.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import gemm as model
from course.record._attention import lazy_case, time_rows

GEMM_SIZES = (256, 512, 1024, 2048, 4096)
QUICK_GEMM_SIZES = (256, 1024)
TRANSPOSE_SIZES = (1024, 2048, 4096, 8192)
QUICK_TRANSPOSE_SIZES = (1024, 4096)
CHECK_SHAPES = ((2048, 2048, 2048), (1000, 1531, 777))   # (M, N, K): square, and awkward for every tile
QUICK_CHECK_SHAPES = ((1024, 1024, 1024), (1000, 1531, 777))
TRANSPOSE_CHECK_SHAPE = (4099, 2050)
BARRIER_SHAPE = (4096, 4096)
BARRIER_TRIALS = 20
NCU_SIZES = (1024, 2048)
TORCH_LABEL = "torch.matmul (fp32, TF32 off)"


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError("recording needs PyTorch with CUDA for the baseline: pip install torch") from exc
    if not torch.cuda.is_available():
        raise RuntimeError("recording needs PyTorch built with CUDA for the baseline; this torch has none")
    torch.backends.cuda.matmul.allow_tf32 = False   # true fp32, like our kernels
    return torch


def _gemm_inputs(m: int, n: int, k: int, seed: int | None = None):
    """Random a (m, k), b (k, n) float32 on the host and on the device, and the seed."""
    from numba import cuda

    from course.checking import random_inputs

    rng, seed = random_inputs(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    return a, b, cuda.to_device(a), cuda.to_device(b), seed


def check_full_size(shapes=CHECK_SHAPES, transpose_shape=TRANSPOSE_CHECK_SHAPE) -> None:
    """Every GEMM rung at each (M, N, K) of ``shapes`` and every transpose rung at ``transpose_shape``."""
    from numba import cuda

    from course.checking import check, poison, random_inputs
    from kernels import gemm, reference, transpose

    for m, n, k in shapes:
        a, b, a_d, b_d, seed = _gemm_inputs(m, n, k)
        want = reference.gemm(a, b)
        for rung, launch in gemm.RUNGS.items():
            out = cuda.to_device(poison(np.empty((m, n), np.float32)))
            launch(a_d, b_d, out=out)
            check(out.copy_to_host(), want, name=f"{rung} {m}x{n}x{k}", dims=("row", "col"), seed=seed)
        print(f"   checked every GEMM rung at {m}x{n}x{k} (seed {seed})", flush=True)
    rng, seed = random_inputs()
    x = rng.standard_normal(transpose_shape, dtype=np.float32)
    where = "x".join(map(str, transpose_shape))
    for rung, launch in transpose.RUNGS.items():
        out = launch(cuda.to_device(x)).copy_to_host()
        if not np.array_equal(out, x.T):
            raise AssertionError(f"{rung} is wrong at {where} (seed {seed}): {np.sum(out != x.T)} elements differ")
    print(f"   checked every transpose rung at {where}", flush=True)


def gemm_timing(quick: bool = False):
    """Time every GEMM rung and torch.matmul (fp32, TF32 off) at square sizes; return the Recording."""
    from numba import cuda

    from course.records import new_recording
    from course.timing import measure_ceilings
    from kernels import gemm

    torch = _torch()
    rec = new_recording("day04_gemm_timing", ceilings=measure_ceilings())
    rec.notes = ("C = A @ B, float32, square M = N = K. torch.matmul with TF32 off "
                 "(torch.backends.cuda.matmul.allow_tf32 = False). gflops/tflops: 2·M·N·K per second; "
                 "gbps: the rung's global traffic from course.models.gemm per second (compulsory bytes "
                 "for torch); intensity: FLOPs per modelled byte.")
    for n in (QUICK_GEMM_SIZES if quick else GEMM_SIZES):
        at = torch.randn(n, n, device="cuda", dtype=torch.float32)
        bt = torch.randn(n, n, device="cuda", dtype=torch.float32)
        ct = torch.empty(n, n, device="cuda", dtype=torch.float32)
        a, b, c = (cuda.as_cuda_array(t) for t in (at, bt, ct))
        flops = model.flops_gemm(n, n, n)
        runs = {rung: ((lambda launch=launch: launch(a, b, out=c)), model.traffic(rung, n, n, n).bytes(4), flops)
                for rung, launch in gemm.RUNGS.items()}
        runs[TORCH_LABEL] = (lambda: torch.matmul(at, bt, out=ct), model.compulsory_bytes(n, n, n), flops)
        for row in time_rows(runs, {"N": n, "M": n, "K": n}, quick=quick):
            rung = row["rung"]
            moved = model.compulsory_bytes(n, n, n) if rung == TORCH_LABEL else model.traffic(rung, n, n, n).bytes(4)
            rec.add(**row, gflops=row["tflops"] * 1e3, intensity=flops / moved)
        del at, bt, ct, a, b, c, runs
    return rec


def transpose_timing(quick: bool = False):
    """Time the transpose rungs and torch's out.copy_(x.t()) with L2 flushed; return the Recording."""
    from numba import cuda

    from course.records import new_recording
    from course.timing import measure_ceilings
    from kernels import transpose

    torch = _torch()
    rec = new_recording("day04_transpose_timing", ceilings=measure_ceilings())
    rec.notes = ("out = x.T for square float32 x, L2 flushed before every run; gbps: 2·N²·4 bytes "
                 "(read x, write out) per second. torch: out.copy_(x.t()).")
    for n in (QUICK_TRANSPOSE_SIZES if quick else TRANSPOSE_SIZES):
        xt = torch.randn(n, n, device="cuda", dtype=torch.float32)
        ot = torch.empty(n, n, device="cuda", dtype=torch.float32)
        x, out = cuda.as_cuda_array(xt), cuda.as_cuda_array(ot)
        moved = 2 * n * n * 4
        runs = {rung: ((lambda launch=launch: launch(x, out=out)), moved, None)
                for rung, launch in transpose.RUNGS.items()}
        runs["torch out.copy_(x.t())"] = (lambda: ot.copy_(xt.t()), moved, None)
        for row in time_rows(runs, {"N": n}, quick=quick, flush_l2=True):
            rec.add(**row)
        del xt, ot, x, out, runs
    return rec


def missing_barrier_trials(trials: int = BARRIER_TRIALS, shape: tuple = BARRIER_SHAPE):
    """Run the transpose without its barrier (and the correct one) on fresh inputs; count wrong elements.

    Fresh inputs every trial: otherwise a block could find last trial's identical tile still in
    shared memory and hide the race.
    """
    from numba import cuda

    from course.checking import random_inputs
    from course.records import new_recording
    from kernels import transpose

    rec = new_recording("day04_missing_barrier")
    rec.notes = (f"transpose of a {shape[0]}x{shape[1]} float32 matrix, fresh random input "
                 "each trial; wrong = elements of the result that differ from x.T.")
    rng, seed = random_inputs()
    for trial in range(trials):
        x = rng.standard_normal(shape, dtype=np.float32)
        x_d = cuda.to_device(x)
        for name, launch in (("transpose_missing_barrier", transpose.transpose_missing_barrier),
                             ("transpose_v3_shared_padded", transpose.transpose_v3_shared_padded)):
            out = launch(x_d).copy_to_host()
            rec.add(kernel=name, trial=trial, wrong=int(np.sum(out != x.T)), elements=int(x.size), seed=seed)
    return rec


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then record GEMM timing, transpose timing and the missing-barrier trials."""
    out_dir = pathlib.Path(out_dir)
    check_full_size(QUICK_CHECK_SHAPES if quick else CHECK_SHAPES)
    return [gemm_timing(quick).save(out_dir / "day04_gemm_timing.json"),
            transpose_timing(quick).save(out_dir / "day04_transpose_timing.json"),
            missing_barrier_trials(5 if quick else BARRIER_TRIALS).save(out_dir / "day04_missing_barrier.json")]


def _gemm_launch(rung: str, n: int):
    from kernels import gemm

    _, _, a_d, b_d, _ = _gemm_inputs(n, n, n, seed=0)
    if rung == TORCH_LABEL:
        torch = _torch()
        at, bt = torch.as_tensor(a_d, device="cuda"), torch.as_tensor(b_d, device="cuda")
        return lambda: torch.matmul(at, bt)
    from numba import cuda

    out = cuda.device_array((n, n), np.float32)
    return lambda: gemm.RUNGS[rung](a_d, b_d, out=out)


def ncu_cases() -> list:
    """(label, N, run): each GEMM rung and torch.matmul at N = M = K in NCU_SIZES; inputs made lazily."""
    return [(rung, n, lazy_case(_gemm_launch, rung, n))
            for n in NCU_SIZES for rung in (*model.RUNGS, TORCH_LABEL)]


def sanitize() -> None:
    """Launch every correct GEMM and transpose rung once at awkward small sizes (for compute-sanitizer)."""
    from numba import cuda

    from kernels import gemm, transpose

    _, _, a_d, b_d, _ = _gemm_inputs(37, 45, 29, seed=0)
    for launch in gemm.RUNGS.values():
        launch(a_d, b_d)
    x_d = cuda.to_device(np.arange(70 * 33, dtype=np.float32).reshape(70, 33))
    for launch in transpose.RUNGS.values():
        launch(x_d)
    cuda.synchronize()
