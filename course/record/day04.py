"""GPU recordings of day 4: the GEMM ladder (``kernels.gemm``) and the shared-memory transpose (``kernels.transpose``).

A declaration for ``course.record.harness``: every rung of both registries is checked at full size
(and at an awkward size) against the references, then recorded:

- ``day04_gemm_timing``: every GEMM rung and ``torch.matmul`` in fp32 with TF32 off, square
  M = N = K for each N in ``GEMM_SIZES``, except the ``SLOW_RUNGS`` above ``SLOW_RUNGS_MAX_N`` (at
  N = 8192 v1 takes about 2 s a call and v2 0.8 s: a minute of repeats for two flat lines). Rows:
  rung, N, M, K, median_ms, p10_ms, p90_ms, repeat, gflops, tflops, gbps (the rung's modelled global
  bytes per second; compulsory bytes for torch), intensity (modelled FLOPs per byte); v8's and v9's
  rows also ``tile``, the block tile it chose (``"64x128"``), whose traffic the model then counts.
- ``day04_gemm_autotune``: what ``gemm_v8_autotuned`` and ``gemm_v9_warp_tiled`` measured when they
  chose their tile, for each square size timed. Rows: rung, gpu, N, M, K, tile, block_m, block_n, ms
  (per launch, the mean of a few back-to-back launches), chosen.
- ``day04_kernel_resources``: registers, local memory and shared memory of every GEMM kernel (v7's and
  v9's at each tile shape) and the local loads and stores of its PTX. Rows: rung, tile, registers, local_bytes,
  shared_bytes, ptx_local_loads, ptx_local_stores.
- ``day04_transpose_timing``: the transpose rungs and torch's ``out.copy_(x.t())`` for each N in
  ``TRANSPOSE_SIZES`` (square), L2 flushed. Rows: rung, N, median_ms, p10_ms, p90_ms, repeat, gbps
  (2·N²·4 bytes per second).
- ``day04_missing_barrier``: ``transpose_missing_barrier`` and the correct padded rung, each run
  ``BARRIER_TRIALS`` times on fresh random inputs of ``BARRIER_SHAPE``. Rows: kernel, trial,
  rows, cols, wrong (elements that differ from x.T), elements, seed.

``ncu_cases()`` lists the GEMM rungs and torch at ``NCU_SIZES`` for Nsight Compute's DRAM bytes
(recording ``day04_dram_bytes``, labels as the rungs); ``sanitize()`` launches every correct
kernel once at an awkward small size.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import gemm as model
from course.record import baselines, harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from course.record.inputs import gemm_inputs, to_device

GEMM_SIZES = (256, 512, 1024, 2048, 4096, 8192)
QUICK_GEMM_SIZES = (256, 1024)
SLOW_RUNGS = ("gemm_v1_naive", "gemm_v2_coalesced")
SLOW_RUNGS_MAX_N = 4096
TRANSPOSE_SIZES = (1024, 2048, 4096, 8192)
QUICK_TRANSPOSE_SIZES = (1024, 4096)
CHECK_SHAPES = ((2048, 2048, 2048), (1000, 1531, 777))   # (M, N, K): square, and awkward for every tile
QUICK_CHECK_SHAPES = ((1024, 1024, 1024), (1000, 1531, 777))
TRANSPOSE_CHECK_SHAPE = (4099, 2050)
BARRIER_SHAPE = (4096, 4096)
BARRIER_TRIALS = 20
QUICK_BARRIER_TRIALS = 5
NCU_SIZES = (1024, 2048)
TORCH_LABEL = "torch.matmul (fp32, TF32 off)"
TUNED_RUNGS = ("gemm_v8_autotuned", "gemm_v9_warp_tiled")   # they time each tile shape on first launch
TORCH_TRANSPOSE_LABEL = "torch out.copy_(x.t())"


def checks(shapes=CHECK_SHAPES, transpose_shape=TRANSPOSE_CHECK_SHAPE) -> list[Check]:
    """Every GEMM rung at each (M, N, K) of ``shapes``, every transpose rung at ``transpose_shape`` (exact)."""
    from course.checking import random_inputs
    from kernels import gemm, reference, transpose

    found = []
    for m, n, k in shapes:
        a, b, seed = gemm_inputs(m, n, k)
        a_d, b_d, out = to_device(a, b, np.empty((m, n), np.float32))
        want = reference.gemm(a, b)
        for rung, launch in gemm.RUNGS.items():
            found.append(Check(f"{rung} {m}x{n}x{k}",
                               lambda launch=launch, out=out, a_d=a_d, b_d=b_d: launch(a_d, b_d, out=out),
                               out.copy_to_host, lambda want=want: want, seed=seed, poisoned=(out,),
                               columns=dict(rung=rung, M=m, N=n, K=k), options=dict(dims=("row", "col"))))
    rng, seed = random_inputs()
    x = rng.standard_normal(transpose_shape, dtype=np.float32)
    x_d, x_t = to_device(x, np.empty(x.shape[::-1], np.float32))
    rows, cols = transpose_shape
    for rung, launch in transpose.RUNGS.items():
        found.append(Check(f"{rung} {rows}x{cols}", lambda launch=launch: launch(x_d, out=x_t),
                           x_t.copy_to_host, lambda: x.T, seed=seed, poisoned=(x_t,), exact=True,
                           columns=dict(rung=rung, rows=rows, cols=cols)))
    return found


def check_full_size(shapes=CHECK_SHAPES, transpose_shape=TRANSPOSE_CHECK_SHAPE) -> list[dict]:
    """Run :func:`checks`; one row of errors per check."""
    return harness.run_checks(checks(shapes, transpose_shape))


def rungs_at(n: int) -> list[str]:
    """The GEMM rungs timed at size N: all of them, less the slow ones above SLOW_RUNGS_MAX_N."""
    from kernels import gemm

    return [rung for rung in gemm.RUNGS if n <= SLOW_RUNGS_MAX_N or rung not in SLOW_RUNGS]


def _gemm_cases(n: int) -> list[Timed]:
    from kernels import gemm

    a, b, c = to_device(*gemm_inputs(n, n, n, seed=n)[:2], np.empty((n, n), np.float32))
    flops = model.flops_gemm(n, n, n)

    def timed(label, launch, moved, **columns):
        return Timed(label, launch, moved, flops, columns={"intensity": flops / moved, **columns})

    cases = []
    for rung in rungs_at(n):
        launch = gemm.RUNGS[rung]
        traffic, columns = model.traffic(rung, n, n, n), {}
        if rung in TUNED_RUNGS:
            launch(a, b, out=c)           # the first launch times the tiles and keeps the fastest
            tile = gemm.tile_shape(n, n, n, kernel=launch.kernels["kernel"])
            traffic, columns = model.traffic_v8_autotuned(n, n, n, tile), {"tile": "%dx%d" % tile}
        cases.append(timed(rung, lambda launch=launch: launch(a, b, out=c), traffic.bytes(4), **columns))
    return cases + [timed(TORCH_LABEL, baselines.torch_matmul(a, b, out=c), model.compulsory_bytes(n, n, n))]


def _add_gflops(rows) -> None:
    for row in rows:
        row["gflops"] = row["tflops"] * 1e3


def gemm_sweep() -> Sweep:
    return Sweep(
        name="day04_gemm_timing",
        notes=("C = A @ B, float32, square M = N = K. torch.matmul with TF32 off "
               "(torch.backends.cuda.matmul.allow_tf32 = False). gflops/tflops: 2·M·N·K per second; "
               "gbps: the rung's global traffic from course.models.gemm per second (compulsory bytes "
               "for torch); intensity: FLOPs per modelled byte; tile: the block tile gemm_v8_autotuned (gemm_v9_warp_tiled) chose. "
               "gemm_v1_naive and gemm_v2_coalesced are not timed above N = 4096 (seconds per call)."),
        points=GEMM_SIZES, quick_points=QUICK_GEMM_SIZES, shape=lambda n: {"N": n, "M": n, "K": n},
        cases=_gemm_cases, finish=_add_gflops)


def _transpose_cases(n: int) -> list[Timed]:
    from kernels import transpose

    x, out = to_device(np.random.default_rng(n).standard_normal((n, n), dtype=np.float32),
                       np.empty((n, n), np.float32))
    moved = 2 * n * n * 4
    cases = [Timed(rung, lambda launch=launch: launch(x, out=out), moved) for rung, launch in transpose.RUNGS.items()]
    return cases + [Timed(TORCH_TRANSPOSE_LABEL, baselines.torch_transpose(x, out), moved)]


def transpose_sweep() -> Sweep:
    return Sweep(
        name="day04_transpose_timing",
        notes=("out = x.T for square float32 x, L2 flushed before every run; gbps: 2·N²·4 bytes "
               "(read x, write out) per second. torch: out.copy_(x.t())."),
        points=TRANSPOSE_SIZES, quick_points=QUICK_TRANSPOSE_SIZES, shape=lambda n: {"N": n},
        cases=_transpose_cases, flush_l2=True)


def gemm_timing(quick: bool = False):
    """Time every GEMM rung and torch.matmul (fp32, TF32 off) at square sizes; return the Recording."""
    from course.timing import measure_ceilings

    return harness.record_sweep(gemm_sweep(), quick=quick, ceilings=measure_ceilings())


def transpose_timing(quick: bool = False):
    """Time the transpose rungs and torch's out.copy_(x.t()) with L2 flushed; return the Recording."""
    from course.timing import measure_ceilings

    return harness.record_sweep(transpose_sweep(), quick=quick, ceilings=measure_ceilings())


def autotune_choices(sizes=GEMM_SIZES):
    """The ``day04_gemm_autotune`` recording: v8's and v9's timings of each tile at each square size in ``sizes``.

    Sizes the sweep already tuned are read from ``kernels.gemm.tuned()``; others are tuned here.
    """
    from course.records import new_recording
    from kernels import gemm

    rec = new_recording("day04_gemm_autotune")
    rec.notes = ("gemm_v8_autotuned (v7's kernel) and gemm_v9_warp_tiled (its warp-tiled kernel): ms per launch "
                 "at each block tile (block_m x block_n), the mean of back-to-back launches between CUDA events "
                 "on random inputs; the fastest is chosen, per GPU, kernel and square size.")
    for rung in TUNED_RUNGS:
        kernel = gemm.RUNGS[rung].kernels["kernel"]
        for n in sizes:
            found = [t for t in gemm.tuned() if (t["kernel"], t["M"], t["N"], t["K"]) == (kernel.__name__, n, n, n)]
            if not found:
                a, b = to_device(*gemm_inputs(n, n, n, seed=n)[:2])
                found = [gemm.autotune(a, b, kernel=kernel)]
            tuned = found[-1]
            for (block_m, block_n), ms in tuned["ms"].items():
                rec.add(rung=rung, gpu=tuned["gpu"], N=n, M=n, K=n, tile=f"{block_m}x{block_n}", block_m=block_m,
                        block_n=block_n, ms=ms, chosen=(block_m, block_n) == tuple(tuned["choice"]))
            print(f"   autotune {rung} N={n}: chose {tuned['choice'][0]}x{tuned['choice'][1]}", flush=True)
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
            rec.add(kernel=name, trial=trial, rows=shape[0], cols=shape[1], wrong=int(np.sum(out != x.T)),
                    elements=int(x.size), seed=seed)
    return rec


def _gemm_launch(rung: str, n: int):
    from numba import cuda

    from kernels import gemm

    a, b = to_device(*gemm_inputs(n, n, n, seed=0)[:2])
    if rung == TORCH_LABEL:
        return baselines.torch_matmul(a, b)
    out = cuda.device_array((n, n), np.float32)
    return lambda: gemm.RUNGS[rung](a, b, out=out)


def ncu_cases() -> list[NcuCase]:
    """Each GEMM rung and torch.matmul at N = M = K in NCU_SIZES; inputs are made on the first call."""
    from kernels import gemm

    return [NcuCase(rung, n, harness.lazy(_gemm_launch, rung, n)) for n in NCU_SIZES for rung in (*gemm.RUNGS, TORCH_LABEL)]


def sanitize() -> None:
    """Launch every correct GEMM and transpose rung once at awkward small sizes (for compute-sanitizer)."""
    from numba import cuda

    from kernels import gemm, transpose

    a, b = to_device(*gemm_inputs(37, 45, 29, seed=0)[:2])
    for launch in gemm.RUNGS.values():
        launch(a, b)
    x = to_device(np.random.default_rng(0).standard_normal((70, 33), dtype=np.float32))[0]
    for launch in transpose.RUNGS.values():
        launch(x)
    cuda.synchronize()


RESOURCE_SIZE = 256      # the launch that compiles each GEMM kernel for the resource table


def kernel_resources() -> list[dict]:
    """Registers, local memory (bytes per thread) and static shared memory of every GEMM kernel, with the
    ``ld.local`` / ``st.local`` instructions of its PTX; v7's kernel once per tile shape (v8 launches it)."""
    from kernels import gemm

    a, b, _ = gemm_inputs(RESOURCE_SIZE, RESOURCE_SIZE, RESOURCE_SIZE)
    a_d, b_d, out = to_device(a, b, np.empty((RESOURCE_SIZE, RESOURCE_SIZE), np.float32))
    rows = []
    for name, rung in gemm.RUNGS.items():
        if name == "gemm_v8_autotuned":
            continue                       # v7's kernels, at each tile shape below (v9: its own)
        rung(a_d, b_d, out=out)
        kernel = rung.kernels["kernel"]
        if hasattr(kernel, "overloads"):
            rows += harness.compiled_resources({name: kernel}, key="rung", ptx_locals=True, tile="")
            continue
        for shape in gemm.TILE_SHAPES:     # a factory of one kernel per tile shape
            built = kernel(*shape)
            grid, block = gemm.wide_grid(RESOURCE_SIZE, RESOURCE_SIZE, *shape)
            gemm.launch_gemm(built, a_d, b_d, out=out, grid=grid, block=block)
            rows += harness.compiled_resources({name: built}, key="rung", ptx_locals=True,
                                               tile=f"{shape[0]}x{shape[1]}")
    return rows


def resources_recording(quick: bool = False):
    from course.records import new_recording

    rec = new_recording("day04_kernel_resources")
    rec.notes = ("registers, local memory (bytes per thread) and static shared memory per block that the compiler "
                 "gave each GEMM kernel (v7's at each tile shape), and the ld.local / st.local instructions in its PTX")
    for row in kernel_resources():
        rec.add(**row)
    return rec


def recorder() -> harness.Recorder:
    return harness.Recorder(
        day="day04", checks=lambda quick: checks(QUICK_CHECK_SHAPES if quick else CHECK_SHAPES),
        sweeps=lambda: [gemm_sweep(), transpose_sweep()],
        extras=lambda quick: [missing_barrier_trials(QUICK_BARRIER_TRIALS if quick else BARRIER_TRIALS),
                              autotune_choices(QUICK_GEMM_SIZES if quick else GEMM_SIZES),
                              resources_recording(quick)],
        ncu_cases=ncu_cases, sanitize=sanitize, ncu_shape=lambda n: {"M": n, "K": n})


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then record the missing-barrier trials and time the GEMM and transpose rungs."""
    return harness.record(recorder(), out_dir, quick=quick)
