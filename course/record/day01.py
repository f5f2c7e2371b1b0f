"""Record day 1 on a GPU: the memory hierarchy, coalescing, honest timing, and every rung's timing.

``record(out_dir)`` first checks every day-1 kernel at full size against a float64 NumPy
reference, then writes these recordings (``course.records``), one JSON file each:

- ``day01_memory_hierarchy``: bandwidth of DRAM (copy and read), of reads that hit L2 and of
  shared-memory reads; latency of shared memory, L1, L2 and DRAM by pointer chasing.
  Rows ``{"kind": "bandwidth", "level", "gbps", "bytes", "median_ms"}`` and
  ``{"kind": "latency", "level", "latency_ns", "cycles", "footprint_bytes"}``.
- ``day01_coalescing``: ``strided_read`` for strides 1..32 at a fixed number of useful reads.
  Rows ``{"rung": "strided_read", "stride", "N", "median_ms", "useful_gbps", "model_dram_gbps"}``.
- ``day01_timing_pitfalls``: one copy timed seven ways, at an L2-sized and a DRAM-sized array.
  Rows ``{"method", "mbytes", "ms", "gbps"}``.
- ``day01_elementwise_timing``: copy and axpb rungs and torch, across n (column ``op``: copy or axpb).
- ``day01_reduction_timing``: the three row-stats rungs and torch, rows fixed, across cols.
- ``day01_normalize_rows_timing``: the 3D-grid kernel and torch, across the sequence length.
  Timing rows ``{"rung", "N", "median_ms", "p10_ms", "p90_ms", "gbps", "tflops", ...}``.

The probe kernels below exist only for these measurements. The bandwidth and latency probes
that target L2 and DRAM load with ``cuda.ldcg`` (PTX ``ld.global.cg``: cached in L2, not in L1),
so a probe measures the level it names. ``sanitize()`` launches every kernel once at a small,
awkward size for compute-sanitizer; ``ncu_cases()`` lists launches for Nsight Compute.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np
from numba import cuda, float32, int32

from course.models import reduction as model
from kernels import elementwise, reduction

MIB = 1 << 20
# Sizes of every measurement; ``quick=True`` takes QUICK instead of FULL.
FULL = {
    "check_n": (1 << 26) + 3, "check_shape": (4, 16, 4093, 64), "check_matrix": (8191, 4099),
    "dram_n": 1 << 27,                 # floats per array: 512 MiB, far beyond L2
    "l2_n": 1 << 21, "l2_laps": 64,    # 8 MiB, read 64 times in one launch
    "shared_laps": 1 << 13, "repeat": 30,
    "chase_steps": {"shared": 100_000, "l1": 100_000, "l2": 50_000, "dram": 10_000},
    "coalescing_n": 1 << 24, "strides": tuple(range(1, 33)),
    "pitfall_n": (1 << 22, 1 << 26),   # 16 MiB per array (fits in L2) and 256 MiB
    "elementwise_n": tuple(1 << k for k in (16, 18, 20, 22, 24, 26, 28)),
    "reduction_rows": 4096, "reduction_cols": (32, 128, 512, 2048, 8192, 32768),
    "normalize_shape": (4, 16, 64), "normalize_seq": (256, 1024, 4096, 16384),
}
QUICK = {
    **FULL, "check_n": (1 << 22) + 3, "check_shape": (2, 4, 1027, 64), "check_matrix": (1021, 1000),
    "dram_n": 1 << 25, "repeat": 10, "coalescing_n": 1 << 22, "strides": (1, 2, 4, 8, 16, 32),
    "pitfall_n": (1 << 22, 1 << 24), "elementwise_n": (1 << 16, 1 << 20, 1 << 24),
    "reduction_cols": (64, 1024, 8192), "normalize_seq": (256, 4096),
}
PROBE_THREADS = 256            # threads per block of the bandwidth probes
SHARED_TILE = 4 * PROBE_THREADS  # floats a shared-memory probe block keeps and re-reads
CHASE_SHARED_SLOTS = 1024      # int32 entries of the shared-memory pointer chase
LINE_INTS = 32                 # 128-byte lines: chase steps land on distinct cache lines


# ----------------------------------------------------------------------------------------------
# Probe kernels
# ----------------------------------------------------------------------------------------------

@cuda.jit
def read_through_l2_kernel(x, repeats, out):
    """Sum x (n,) ``repeats`` times with loads cached only in L2; one partial sum per thread."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    total = float32(0.0)
    for _ in range(repeats):
        for i in range(start, x.size, stride):
            total += cuda.ldcg(x, i)
    out[start] = total   # a store keeps the loads alive


@cuda.jit
def shared_read_kernel(x, repeats, out):
    """Each block copies x (SHARED_TILE,) into shared memory and reads it ``repeats`` times.

    Lane i of a warp reads word (i XOR r) of its warp's 32 words: 32 distinct banks, no conflict.
    Launch with PROBE_THREADS threads per block.
    """
    tile = cuda.shared.array(SHARED_TILE, float32)
    tid = cuda.threadIdx.x
    for i in range(tid, SHARED_TILE, PROBE_THREADS):
        tile[i] = x[i]
    cuda.syncthreads()
    acc0 = float32(0.0)
    acc1 = float32(0.0)
    acc2 = float32(0.0)
    acc3 = float32(0.0)
    for r in range(repeats):
        j = tid ^ (r & 31)
        acc0 += tile[j]
        acc1 += tile[j + PROBE_THREADS]
        acc2 += tile[j + 2 * PROBE_THREADS]
        acc3 += tile[j + 3 * PROBE_THREADS]
    out[cuda.grid(1)] = acc0 + acc1 + acc2 + acc3


@cuda.jit
def chase_cached_kernel(chain, steps, out):
    """One thread follows j = chain[j] ``steps`` times with ordinary (L1-cached) loads."""
    j = 0
    for _ in range(steps):
        j = chain[j]
    out[0] = j


@cuda.jit
def chase_l2_kernel(chain, steps, out):
    """One thread follows j = chain[j] ``steps`` times with L2-only loads (ld.global.cg)."""
    j = 0
    for _ in range(steps):
        j = cuda.ldcg(chain, j)
    out[0] = j


@cuda.jit
def chase_shared_kernel(chain, steps, out):
    """The block copies chain (CHASE_SHARED_SLOTS,) to shared memory; thread 0 follows it ``steps`` times."""
    tile = cuda.shared.array(CHASE_SHARED_SLOTS, int32)
    for i in range(cuda.threadIdx.x, CHASE_SHARED_SLOTS, cuda.blockDim.x):
        tile[i] = chain[i]
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        j = 0
        for _ in range(steps):
            j = tile[j]
        out[0] = j


def random_cycle(slots: int, spacing: int, rng: np.random.Generator) -> np.ndarray:
    """An int32 chain of ``slots * spacing`` entries whose slots form one random cycle.

    Following ``j = chain[j]`` from 0 visits every slot (entries ``k * spacing``) once per lap, in
    random order, so caches and prefetchers cannot guess the next address.
    """
    order = rng.permutation(slots)
    order = np.concatenate([[0], order[order != 0]])        # the walk starts at slot 0
    chain = np.zeros(slots * spacing, dtype=np.int32)
    chain[order * spacing] = np.roll(order, -1) * spacing
    return chain


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------

def _sm_count() -> int:
    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)


def _clock_ghz() -> float:
    return cuda.get_current_device().CLOCK_RATE / 1e6     # CLOCK_RATE is the boost clock in kHz


DEVICE_PROPERTIES = ("MULTIPROCESSOR_COUNT", "CLOCK_RATE", "MEMORY_CLOCK_RATE", "GLOBAL_MEMORY_BUS_WIDTH",
                     "L2_CACHE_SIZE", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
                     "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MAX_REGISTERS_PER_MULTIPROCESSOR",
                     "MAX_THREADS_PER_MULTIPROCESSOR", "MAX_THREADS_PER_BLOCK", "WARP_SIZE")


def _device_properties() -> dict:
    """The sizes of the hierarchy as the driver reports them (attributes it lacks are left out)."""
    device = cuda.get_current_device()
    found = {}
    for name in DEVICE_PROPERTIES:
        try:
            found[name] = int(getattr(device, name))
        except (AttributeError, TypeError, ValueError):
            continue
    found["TOTAL_MEMORY_BYTES"] = int(cuda.current_context().get_memory_info().total)
    return found


_flush_buffer = []


def _flush_l2() -> None:
    """Overwrite a buffer twice the size of L2 (as ``course.timing.benchmark(flush_l2=True)`` does)."""
    from numba.cuda.cudadrv import driver

    if not _flush_buffer:
        l2 = int(cuda.get_current_device().L2_CACHE_SIZE) or 128 * MIB
        _flush_buffer.append(cuda.device_array(2 * l2, np.uint8))
    driver.device_memset(_flush_buffer[0], 0, _flush_buffer[0].nbytes)


def _event_ms(launch) -> float:
    start, stop = cuda.event(timing=True), cuda.event(timing=True)
    start.record()
    launch()
    stop.record()
    stop.synchronize()
    return cuda.event_elapsed_time(start, stop)


def _timing_row(rec, rung, t, *, bytes_moved, flops=0, **extra):
    seconds = t.median_ms / 1e3
    rec.add(rung=rung, median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms,
            gbps=bytes_moved / seconds / 1e9, tflops=flops / seconds / 1e12, bytes=bytes_moved,
            flops=flops, **extra)


def _zeros(n: int):
    """A float32 device array of n zeros, set on the device (no host copy of a large array)."""
    from numba.cuda.cudadrv import driver

    array = cuda.device_array(n, np.float32)
    driver.device_memset(array, 0, array.nbytes)
    return array


def _rng(seed: int = 1):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------------------------
# Full-size checks
# ----------------------------------------------------------------------------------------------

def check_full_size(quick: bool = False) -> None:
    """Every day-1 kernel against a float64 NumPy reference at full size (awkward sizes on purpose)."""
    from course.checking import check, poison, random_inputs

    sizes = QUICK if quick else FULL
    rng, seed = random_inputs()
    n = sizes["check_n"]
    x = rng.standard_normal(n).astype(np.float32)
    x_d = cuda.to_device(x)
    for name, launch in (("copy_v1_guarded", elementwise.copy_v1_guarded),
                         ("copy_v2_grid_stride", elementwise.copy_v2_grid_stride)):
        out = cuda.to_device(poison(np.empty(n, np.float32)))
        launch(x_d, out=out)
        check(out.copy_to_host(), x.astype(np.float64), name=name, dims=("i",), seed=seed)
    a, b = 1.75, -0.5
    out = cuda.to_device(poison(np.empty(n, np.float32)))
    elementwise.axpb_v1_guarded(x_d, a, b, out=out)
    check(out.copy_to_host(), a * x.astype(np.float64) + b, name="axpb_v1_guarded", dims=("i",), seed=seed)

    stride, reads = 7, n // 7
    out = cuda.to_device(poison(np.empty(reads, np.float32)))
    elementwise.strided_read(x_d, stride, reads, out=out)
    check(out.copy_to_host(), x[: reads * stride: stride].astype(np.float64), name="strided_read",
          dims=("i",), seed=seed)

    shape = sizes["check_shape"]
    xs = rng.standard_normal(shape).astype(np.float32)
    sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
    out = cuda.to_device(poison(np.empty(shape, np.float32)))
    elementwise.normalize_rows_v1_3d_grid(cuda.to_device(xs), cuda.to_device(sums), out=out)
    check(out.copy_to_host(), xs.astype(np.float64) / sums[..., None], name="normalize_rows_v1_3d_grid",
          dims=("batch", "head", "row", "col"), tile={"row": elementwise.ROWS_PER_BLOCK}, seed=seed)

    rows, cols = sizes["check_matrix"]
    m = (rng.uniform(-1e4, 1e4, (rows, cols))).astype(np.float32)
    m_d = cuda.to_device(m)
    for rung, launch in reduction.RUNGS.items():
        outs = (cuda.to_device(poison(np.empty(rows, np.float32))),
                cuda.to_device(poison(np.empty(rows, np.float32))))
        launch(m_d, out=outs)
        check(outs[0].copy_to_host(), m.astype(np.float64).max(axis=1), name=f"row_max {rung}",
              dims=("row",), seed=seed)
        check(outs[1].copy_to_host(), m.astype(np.float64).sum(axis=1), name=f"row_sum {rung}",
              dims=("row",), seed=seed)
    print(f"   checked every day-1 kernel at full size (seed {seed})", flush=True)


# ----------------------------------------------------------------------------------------------
# Recordings
# ----------------------------------------------------------------------------------------------

def record_memory_hierarchy(ceilings, quick: bool = False):
    """Bandwidths (DRAM, L2, shared) and latencies (shared, L1, L2, DRAM) on this GPU."""
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_memory_hierarchy", ceilings=ceilings)
    for name, value in _device_properties().items():
        rec.add(kind="property", name=name, value=value)
    blocks = 8 * _sm_count()            # 8 blocks of 256 threads: 2048 threads, a full SM
    partials = cuda.device_array(blocks * PROBE_THREADS, np.float32)
    repeat = sizes["repeat"]

    n = sizes["dram_n"]
    x, y = _zeros(n), _zeros(n)
    t = benchmark(lambda: elementwise.copy_v1_guarded(x, out=y), repeat=repeat, flush_l2=True)
    rec.add(kind="bandwidth", level="DRAM (copy: read + write)", bytes=2 * n * 4,
            median_ms=t.median_ms, gbps=2 * n * 4 / t.median_ms / 1e6)
    t = benchmark(lambda: read_through_l2_kernel[blocks, PROBE_THREADS](x, 1, partials),
                  repeat=repeat, flush_l2=True)
    rec.add(kind="bandwidth", level="DRAM (read)", bytes=n * 4, median_ms=t.median_ms,
            gbps=n * 4 / t.median_ms / 1e6)
    del x, y

    n_l2, laps = sizes["l2_n"], sizes["l2_laps"]
    x = _zeros(n_l2)
    t = benchmark(lambda: read_through_l2_kernel[blocks, PROBE_THREADS](x, laps, partials),
                  repeat=repeat, flush_l2=False)
    rec.add(kind="bandwidth", level=f"L2 (read, {n_l2 * 4 // MIB} MiB resident)", bytes=laps * n_l2 * 4,
            median_ms=t.median_ms, gbps=laps * n_l2 * 4 / t.median_ms / 1e6)

    laps = sizes["shared_laps"]
    tile_source = _zeros(SHARED_TILE)
    t = benchmark(lambda: shared_read_kernel[blocks, PROBE_THREADS](tile_source, laps, partials),
                  repeat=repeat, flush_l2=False)
    shared_bytes = blocks * PROBE_THREADS * 4 * laps * 4
    rec.add(kind="bandwidth", level="shared memory (read)", bytes=shared_bytes,
            median_ms=t.median_ms, gbps=shared_bytes / t.median_ms / 1e6)
    del x, tile_source

    rng = _rng()
    ghz = _clock_ghz()
    chase_steps = sizes["chase_steps"]
    out = cuda.device_array(1, np.int32)
    # (level, kernel, threads, chain, steps, flush L2 before each run). The DRAM chain is walked for
    # fewer steps than L2 holds lines, so L2 is flushed before every run: no step hits a line that
    # an earlier run brought in.
    chases = [
        ("shared memory", chase_shared_kernel, PROBE_THREADS, random_cycle(CHASE_SHARED_SLOTS, 1, rng),
         chase_steps["shared"], False),
        ("L1 (16 KiB chain)", chase_cached_kernel, 1, random_cycle(128, LINE_INTS, rng), chase_steps["l1"], False),
        ("L2 (4 MiB chain)", chase_l2_kernel, 1, random_cycle(1 << 15, LINE_INTS, rng), chase_steps["l2"], False),
        ("DRAM (512 MiB chain)", chase_l2_kernel, 1, random_cycle(1 << 22, LINE_INTS, rng), chase_steps["dram"],
         True),
    ]
    for level, kernel, threads, chain, steps, flush in chases:
        chain_d = cuda.to_device(chain)
        kernel[1, threads](chain_d, steps, out)      # compile, and bring the chain into L2
        cuda.synchronize()
        samples = []
        for _ in range(5):
            if flush:
                _flush_l2()
            samples.append(_event_ms(lambda: kernel[1, threads](chain_d, steps, out)))
        ns = float(np.median(samples)) * 1e6 / steps
        footprint = 4 * CHASE_SHARED_SLOTS if kernel is chase_shared_kernel else chain.nbytes
        rec.add(kind="latency", level=level, latency_ns=ns, cycles=ns * ghz, footprint_bytes=footprint,
                steps=steps)
        del chain_d
    rec.notes = (f"bandwidth probes: {blocks} blocks of {PROBE_THREADS} threads; latency: one thread "
                 f"chasing a random cycle, cycles at the {ghz:.2f} GHz boost clock")
    return rec


def record_coalescing(ceilings, quick: bool = False):
    """strided_read at strides 1..32 with the same number of useful reads."""
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_coalescing", ceilings=ceilings)
    n, strides = sizes["coalescing_n"], sizes["strides"]
    x, y = _zeros((n - 1) * max(strides) + 1), _zeros(n)
    for stride in strides:
        t = benchmark(lambda: elementwise.strided_read(x, stride, n, out=y), repeat=sizes["repeat"],
                      flush_l2=True)
        seconds = t.median_ms / 1e3
        rec.add(rung="strided_read", stride=stride, N=n, median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms,
                useful_gbps=model.useful_bytes_strided_read(n) / seconds / 1e9,
                model_dram_gbps=model.dram_bytes_strided_read(n, stride) / seconds / 1e9)
    return rec


@cuda.jit
def busy_wait_kernel(microseconds):
    """One thread sleeps about ``microseconds``: keeps the GPU busy while the host prepares a launch."""
    for _ in range(microseconds):
        cuda.nanosleep(1000)


def _events_behind_busy_gpu(launch, repeat: int, flush_l2: bool) -> float:
    """Median ms of ``launch`` timed with events while a busy kernel hides the Python launch overhead.

    The busy kernel is queued first, so by the time it ends the host has enqueued the start event,
    the launch and the end event: they run back to back and the events bracket the kernel alone.
    """
    launch()                                        # compiled and warm
    samples = []
    for _ in range(repeat):
        if flush_l2:
            _flush_l2()
        start, stop = cuda.event(timing=True), cuda.event(timing=True)
        busy_wait_kernel[1, 1](200)
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        samples.append(cuda.event_elapsed_time(start, stop))
    return float(np.median(samples))


def record_timing_pitfalls(ceilings, quick: bool = False):
    """One copy kernel timed seven ways, so the lesson can show what each mistake costs."""
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_timing_pitfalls", ceilings=ceilings)
    for n in sizes["pitfall_n"]:
        x, y = _zeros(n), _zeros(n)
        threads = elementwise.THREADS_PER_BLOCK
        grid = elementwise.blocks_for(n, threads)
        fresh = cuda.jit(elementwise.copy_v1_guarded_kernel.py_func)   # never compiled before
        mbytes = 2 * n * 4 / MIB

        def add(method, ms):
            rec.add(method=method, mbytes=mbytes, ms=ms, gbps=2 * n * 4 / ms / 1e6)

        def launch():
            fresh[grid, threads](x, y)

        t0 = time.perf_counter()
        launch()
        cuda.synchronize()
        add("host clock, first call (compiles the kernel)", (time.perf_counter() - t0) * 1e3)

        samples = []
        for _ in range(20):
            t0 = time.perf_counter()
            launch()
            samples.append((time.perf_counter() - t0) * 1e3)
            cuda.synchronize()
        add("host clock, no synchronize (times the launch only)", float(np.median(samples)))

        samples = []
        for _ in range(20):
            cuda.synchronize()
            t0 = time.perf_counter()
            launch()
            cuda.synchronize()
            samples.append((time.perf_counter() - t0) * 1e3)
        add("host clock with synchronize, median of 20", float(np.median(samples)))

        add("CUDA events, a single run", _event_ms(launch))
        add("CUDA events, warm-up, median of 50, L2 warm",
            benchmark(launch, warmup=10, repeat=50, flush_l2=False).median_ms)
        add("CUDA events, warm-up, median of 50, L2 flushed",
            benchmark(launch, warmup=10, repeat=50, flush_l2=True).median_ms)
        add("as above, queued behind a busy kernel (no launch overhead)",
            _events_behind_busy_gpu(launch, repeat=50, flush_l2=True))
        del x, y
    return rec


def record_elementwise_timing(ceilings, quick: bool = False):
    """copy v1/v2, axpb v1, torch copy_ and torch a*x+b across n (L2 flushed between runs)."""
    import torch
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_elementwise_timing", ceilings=ceilings)
    a, b = 1.75, -0.5
    for n in sizes["elementwise_n"]:
        xt = torch.randn(n, device="cuda")
        yt = torch.empty_like(xt)
        x, y = cuda.as_cuda_array(xt), cuda.as_cuda_array(yt)
        repeat = sizes["repeat"]
        cases = [
            ("copy", "copy_v1_guarded", lambda: elementwise.copy_v1_guarded(x, out=y), 0),
            ("copy", "copy_v2_grid_stride", lambda: elementwise.copy_v2_grid_stride(x, out=y), 0),
            ("copy", "torch copy_", lambda: yt.copy_(xt), 0),
            ("axpb", "axpb_v1_guarded", lambda: elementwise.axpb_v1_guarded(x, a, b, out=y), 2 * n),
            ("axpb", "torch a*x+b (two kernels)", lambda: torch.add(torch.mul(xt, a), b, out=yt), 2 * n),
        ]
        for op, rung, fn, flops in cases:
            t = benchmark(fn, repeat=repeat, flush_l2=True)
            # Bytes of the one-pass model for every row, so GB/s compares useful work.
            _timing_row(rec, rung, t, bytes_moved=model.bytes_axpb_v1_guarded(n), flops=flops, N=n, op=op)
        del xt, yt
    return rec


def record_reduction_timing(ceilings, quick: bool = False):
    """The three row-stats rungs and torch amax + sum, 4096 rows, across cols."""
    import torch
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_reduction_timing", ceilings=ceilings)
    rows = sizes["reduction_rows"]
    for cols in sizes["reduction_cols"]:
        xt = torch.randn(rows, cols, device="cuda")
        mt, st = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
        x, outs = cuda.as_cuda_array(xt), (cuda.as_cuda_array(mt), cuda.as_cuda_array(st))
        repeat = sizes["repeat"]
        cases = [(f"row_stats_{rung}", (lambda launch=launch: launch(x, out=outs)))
                 for rung, launch in reduction.RUNGS.items()]
        cases.append(("torch amax + sum (two passes)",
                      lambda: (torch.amax(xt, dim=1, out=mt), torch.sum(xt, dim=1, out=st))))
        for rung, fn in cases:
            t = benchmark(fn, repeat=repeat, flush_l2=True)
            _timing_row(rec, rung, t, bytes_moved=model.bytes_row_stats_v2_shared_tree(rows, cols),
                        flops=model.flops_row_stats(rows, cols), N=cols, rows=rows, cols=cols)
        del xt, mt, st
    return rec


def record_normalize_rows_timing(ceilings, quick: bool = False):
    """normalize_rows_v1_3d_grid and torch x / l[..., None] for batch 4, 16 heads, head_dim 64."""
    import torch
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_normalize_rows_timing", ceilings=ceilings)
    batch, heads, head_dim = sizes["normalize_shape"]
    for seq in sizes["normalize_seq"]:
        xt = torch.randn(batch, heads, seq, head_dim, device="cuda")
        lt = torch.rand(batch, heads, seq, device="cuda") + 0.5
        ot = torch.empty_like(xt)
        x, l, o = cuda.as_cuda_array(xt), cuda.as_cuda_array(lt), cuda.as_cuda_array(ot)
        moved = model.bytes_normalize_rows_v1_3d_grid(batch, heads, seq, head_dim)
        flops = model.flops_normalize_rows_v1_3d_grid(batch, heads, seq, head_dim)
        for rung, fn in (("normalize_rows_v1_3d_grid", lambda: elementwise.normalize_rows_v1_3d_grid(x, l, out=o)),
                         ("torch x / l[..., None]", lambda: torch.div(xt, lt[..., None], out=ot))):
            t = benchmark(fn, repeat=sizes["repeat"], flush_l2=True)
            _timing_row(rec, rung, t, bytes_moved=moved, flops=flops, N=seq, batch=batch, heads=heads,
                        head_dim=head_dim)
        del xt, lt, ot
    return rec


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check every day-1 kernel at full size, then measure and save the day's recordings in ``out_dir``."""
    from course.timing import measure_ceilings

    out_dir = pathlib.Path(out_dir)
    check_full_size(quick)
    ceilings = measure_ceilings()
    paths = []
    for make in (record_memory_hierarchy, record_coalescing, record_timing_pitfalls,
                 record_elementwise_timing, record_reduction_timing, record_normalize_rows_timing):
        rec = make(ceilings, quick)
        paths.append(rec.save(out_dir / f"{rec.name}.json"))
        print(f"   {rec.name}: {len(rec.rows)} rows", flush=True)
    return paths


# ----------------------------------------------------------------------------------------------
# compute-sanitizer and Nsight Compute
# ----------------------------------------------------------------------------------------------

def sanitize() -> None:
    """Launch every day-1 kernel once at a small, awkward size (for memcheck and racecheck)."""
    rng = _rng(2)
    x = rng.standard_normal(1000).astype(np.float32)
    elementwise.copy_v1_guarded(x)
    elementwise.copy_v2_grid_stride(x, blocks=3)
    elementwise.axpb_v1_guarded(x, 2.0, 1.0)
    elementwise.strided_read(x, 3, 333)
    elementwise.normalize_rows_v1_3d_grid(rng.standard_normal((2, 3, 7, 40)).astype(np.float32),
                                          rng.uniform(0.5, 2.0, (2, 3, 7)).astype(np.float32))
    m = rng.standard_normal((5, 77)).astype(np.float32)
    for launch in reduction.RUNGS.values():
        launch(m)
    partials = np.zeros(2 * PROBE_THREADS, np.float32)
    read_through_l2_kernel[2, PROBE_THREADS](x, 2, partials)
    shared_read_kernel[2, PROBE_THREADS](np.ones(SHARED_TILE, np.float32), 40, partials)
    out = np.zeros(1, np.int32)
    chase = random_cycle(64, LINE_INTS, rng)
    chase_cached_kernel[1, 1](chase, 100, out)
    chase_l2_kernel[1, 1](chase, 100, out)
    chase_shared_kernel[1, PROBE_THREADS](random_cycle(CHASE_SHARED_SLOTS, 1, rng), 100, out)
    busy_wait_kernel[1, 1](2)
    cuda.synchronize()


def ncu_cases():
    """``(label, N, run)`` for Nsight Compute: strided reads (DRAM bytes against stride) and a copy."""
    n = 1 << 22
    arrays = {}

    def buffers():
        if not arrays:
            arrays.update(x=_zeros((n - 1) * 32 + 1), y=_zeros(n))
        return arrays["x"], arrays["y"]

    def strided(stride):
        def run():
            x, y = buffers()
            elementwise.strided_read(x, stride, n, out=y)
        return run

    def copy():
        x, y = buffers()
        elementwise.copy_v1_guarded(x[:n], out=y)

    cases = [(f"strided_read_s{s}", n, strided(s)) for s in (1, 2, 4, 8, 16, 32)]
    cases.append(("copy_v1_guarded", n, copy))
    return cases


__all__ = ["record", "sanitize", "ncu_cases", "check_full_size", "random_cycle",
           "read_through_l2_kernel", "shared_read_kernel", "chase_cached_kernel", "chase_l2_kernel",
           "chase_shared_kernel", "busy_wait_kernel"]
