"""Record day 1 on a GPU: the memory hierarchy, coalescing, honest timing, and every rung's timing.

A declaration for ``course.record.harness``: ``checks()`` compares every day-1 kernel at full size
with a float64 NumPy reference; three sweeps time the rungs and torch (``Timed`` rows: rung, the
shape, median_ms, p10_ms, p90_ms, repeat, gbps, tflops, bytes, flops), L2 flushed before every run:

- ``day01_elementwise_timing``: copy and axpb rungs and torch across N (column ``op``: copy or axpb);
- ``day01_reduction_timing``: the three row-stats rungs and torch, REDUCTION_ROWS rows, across cols;
- ``day01_normalize_rows_timing``: the 3D-grid kernel and torch across the sequence length N.

Three more recordings are measurements of their own (the recorder's extras):

- ``day01_memory_hierarchy``: bandwidth of DRAM (copy, torch's copy of the same vectors, read), of
  reads that hit L2 and of shared-memory reads, with the probes of ``kernels.probes``; latency of
  shared memory, L1, L2 and DRAM by pointer chasing. Rows ``{"kind": "bandwidth", "level", "memory",
  "operation", "probe", "footprint_bytes", "bytes", "blocks", "threads", "loads_in_flight", "l2",
  "median_ms", "p10_ms", "p90_ms", "gbps"}`` and ``{"kind": "latency", "level", "memory",
  "footprint_bytes", "steps", "l2", "latency_ns", "cycles"}``, after the device's properties
  (``{"kind": "property", "name", "value"}``); ``memory`` is shared, L1, L2 or DRAM, ``bytes`` what
  one launch moves.
- ``day01_coalescing``: ``strided_read`` for strides 1..32 at a fixed number of useful reads.
  Rows ``{"rung": "strided_read", "stride", "N", "median_ms", "useful_gbps", "model_dram_gbps"}``.
- ``day01_timing_pitfalls``: one copy timed seven ways, at an array that stays in L2 and one far
  beyond it. Rows ``{"method", "N", "bytes", "mbytes", "timer", "repeats", "l2",
  "launch_overhead", "ms", "p10_ms", "p90_ms", "gbps"}``.

``sanitize()`` launches every kernel once at a small, awkward size for compute-sanitizer;
``ncu_cases()`` lists launches for Nsight Compute.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np
from numba import cuda

from course.models import reduction as model
from course.record import baselines, harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from course.record.inputs import to_device
from kernels import elementwise, probes, reduction

MIB = 1 << 20
# Sizes of every measurement; ``quick=True`` takes QUICK instead of FULL.
FULL = {
    "check_n": (1 << 26) + 3, "check_shape": (4, 16, 4093, 64), "check_matrix": (8191, 4099),
    "dram_bytes": 1 << 29,                  # per vector: 512 MiB, far beyond L2
    "l2_bytes": 4 * MIB, "l2_laps": 128,    # 4 MiB, read 128 times in one launch
    "shared_laps": 1 << 12, "repeat": 30,
    "chase_steps": {"shared": 100_000, "L1": 100_000, "L2": 50_000, "DRAM": 10_000},
    "coalescing_n": 1 << 24, "strides": tuple(range(1, 33)),
    # 8 MiB per array: a copy of 16 MiB stays in L2 between runs (data that every SM reads may be
    # held in both halves of an H100's L2, so 25 MB is what fits); and 256 MiB per array, far beyond.
    "pitfall_n": (1 << 21, 1 << 26),
    "elementwise_n": tuple(1 << k for k in (16, 18, 20, 22, 24, 26, 28)),
    "reduction_cols": (32, 128, 512, 2048, 8192, 32768), "normalize_seq": (256, 1024, 4096, 16384),
}
QUICK = {
    **FULL, "check_n": (1 << 22) + 3, "check_shape": (2, 4, 1027, 64), "check_matrix": (1021, 1000),
    "dram_bytes": 1 << 27, "l2_laps": 32, "shared_laps": 1 << 10, "repeat": 10, "coalescing_n": 1 << 22,
    "strides": (1, 2, 4, 8, 16, 32), "pitfall_n": (1 << 21, 1 << 24), "elementwise_n": (1 << 16, 1 << 20, 1 << 24),
    "reduction_cols": (64, 1024, 8192), "normalize_seq": (256, 4096),
}
REDUCTION_ROWS = 4096
NORMALIZE_SHAPE = (4, 16, 64)  # (batch, heads, head_dim); the sequence length varies


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------

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

def checks(quick: bool = False) -> list[Check]:
    """Every day-1 kernel against a float64 NumPy reference at full size (awkward sizes on purpose)."""
    from course.checking import random_inputs

    sizes = QUICK if quick else FULL
    rng, seed = random_inputs()
    n = sizes["check_n"]
    x = rng.standard_normal(n).astype(np.float32)
    x_d, out = to_device(x, np.empty(n, np.float32))
    vector = dict(dims=("i",))
    found = [Check(rung, lambda rung=rung: elementwise.RUNGS[rung](x_d, out=out), out.copy_to_host,
                   lambda: x.astype(np.float64), seed=seed, poisoned=(out,), columns=dict(rung=rung, N=n),
                   options=vector)
             for rung in ("copy_v1_guarded", "copy_v2_grid_stride")]
    a, b = 1.75, -0.5
    found.append(Check("axpb_v1_guarded", lambda: elementwise.axpb_v1_guarded(x_d, a, b, out=out), out.copy_to_host,
                       lambda: a * x.astype(np.float64) + b, seed=seed, poisoned=(out,),
                       columns=dict(rung="axpb_v1_guarded", N=n), options=vector))
    stride, reads = 7, n // 7
    strided = cuda.device_array(reads, np.float32)
    found.append(Check("strided_read", lambda: elementwise.strided_read(x_d, stride, reads, out=strided),
                       strided.copy_to_host, lambda: x[: reads * stride: stride].astype(np.float64), seed=seed,
                       poisoned=(strided,), columns=dict(rung="strided_read", N=reads, stride=stride),
                       options=vector))

    shape = sizes["check_shape"]
    xs = rng.standard_normal(shape).astype(np.float32)
    row_sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
    xs_d, sums_d, normalized = to_device(xs, row_sums, np.empty(shape, np.float32))
    found.append(Check("normalize_rows_v1_3d_grid",
                       lambda: elementwise.normalize_rows_v1_3d_grid(xs_d, sums_d, out=normalized),
                       normalized.copy_to_host, lambda: xs.astype(np.float64) / row_sums[..., None], seed=seed,
                       poisoned=(normalized,),
                       columns=dict(rung="normalize_rows_v1_3d_grid", batch=shape[0], heads=shape[1], rows=shape[2],
                                    head_dim=shape[3]),
                       options=dict(dims=("batch", "head", "row", "col"), tile={"row": elementwise.ROWS_PER_BLOCK})))

    rows, cols = sizes["check_matrix"]
    m = rng.uniform(-1e4, 1e4, (rows, cols)).astype(np.float32)
    m_d, row_max, row_sum = to_device(m, np.empty(rows, np.float32), np.empty(rows, np.float32))
    for rung, launch in reduction.RUNGS.items():
        for what, output, want in (("row_max", row_max, lambda: m.astype(np.float64).max(axis=1)),
                                   ("row_sum", row_sum, lambda: m.astype(np.float64).sum(axis=1))):
            found.append(Check(f"{what} {rung}", lambda launch=launch: launch(m_d, out=(row_max, row_sum)),
                               output.copy_to_host, want, seed=seed, poisoned=(output,),
                               columns=dict(rung=f"row_stats_{rung}", output=what, rows=rows, cols=cols),
                               options=dict(dims=("row",))))
    return found


def check_full_size(quick: bool = False) -> list[dict]:
    """Run :func:`checks`; one row of errors per check."""
    return harness.run_checks(checks(quick))


# ----------------------------------------------------------------------------------------------
# Recordings
# ----------------------------------------------------------------------------------------------

def _random_words(n: int):
    """A uint64 device vector of n random words and the torch tensor that owns it (never time zeros)."""
    import torch

    owner = torch.empty(n, dtype=torch.int64, device="cuda").random_()
    return cuda.as_cuda_array(owner).view(np.uint64), owner


def _wrapping_sum(words) -> int:
    """The sum of uint64 words modulo 2**64, as the probes compute it."""
    return int(np.asarray(words, dtype=np.uint64).sum(dtype=np.uint64))


def record_memory_hierarchy(ceilings, quick: bool = False):
    """Bandwidths (DRAM copy and read, L2 read, shared read) and latencies (shared, L1, L2, DRAM).

    Every bandwidth probe fills the GPU (``kernels.probes``) and is timed with its launch overhead
    hidden; torch's copy of the same vectors is timed in the same run, as the yardstick of the copy.
    """
    import torch
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_memory_hierarchy", ceilings=ceilings)
    for name, value in _device_properties().items():
        rec.add(kind="property", name=name, value=value)
    repeat, threads = sizes["repeat"], probes.PROBE_THREADS
    word = probes.WORD_BYTES

    def bandwidth(level, memory, operation, probe, launch, *, moved, footprint, flush_l2, blocks=None):
        t = benchmark(launch, warmup=3, repeat=repeat, flush_l2=flush_l2, launch_overhead="hidden")
        rec.add(kind="bandwidth", level=level, memory=memory, operation=operation, probe=probe,
                footprint_bytes=footprint, bytes=moved, blocks=blocks,
                threads=threads if blocks else None,
                loads_in_flight=probes.LOADS_IN_FLIGHT if blocks else None,
                l2="flushed" if flush_l2 else "warm", median_ms=t.median_ms, p10_ms=t.p10_ms,
                p90_ms=t.p90_ms, gbps=moved / t.median_ms / 1e6)

    # DRAM: vectors far larger than L2, flushed before every run.
    n = sizes["dram_bytes"] // word
    src, src_owner = _random_words(n)
    dst = cuda.device_array(n, np.uint64)
    blocks = probes.resident_blocks(probes.copy_words_kernel, (src, dst), threads)
    probes.copy_words(src, dst, blocks=blocks)
    if not np.array_equal(src[:1 << 20].copy_to_host(), dst[:1 << 20].copy_to_host()) or \
            not np.array_equal(src[-(1 << 20):].copy_to_host(), dst[-(1 << 20):].copy_to_host()):
        raise RuntimeError("copy_words did not copy the vector: the copy bandwidth would be meaningless")
    bandwidth("DRAM (copy: read + write)", "DRAM", "copy", "copy_words",
              lambda: probes.copy_words_kernel[blocks, threads](src, dst),
              moved=2 * n * word, footprint=2 * n * word, flush_l2=True, blocks=blocks)
    dst_owner = torch.empty_like(src_owner)
    bandwidth("DRAM (torch copy_: read + write)", "DRAM", "copy", "torch copy_",
              lambda: dst_owner.copy_(src_owner), moved=2 * n * word, footprint=2 * n * word, flush_l2=True)
    del dst, dst_owner

    sums = probes.read_words(src, n)             # one sum per thread of a full GPU
    blocks = sums.size // threads
    bandwidth("DRAM (read)", "DRAM", "read", "read_words",
              lambda: probes.read_words_kernel[blocks, threads](src, n, sums),
              moved=n * word, footprint=n * word, flush_l2=True, blocks=blocks)
    del src, src_owner

    # L2: a few MiB, read many times from every SM with loads that bypass L1.
    n, laps = sizes["l2_bytes"] // word, sizes["l2_laps"]
    words, owner = _random_words(n)
    probes.read_words(words, n * laps, sums=sums, blocks=blocks)
    if _wrapping_sum(sums.copy_to_host()) != laps * _wrapping_sum(words.copy_to_host()) % (1 << 64):
        raise RuntimeError("read_words did not read every word of the L2 footprint once per lap")
    bandwidth(f"L2 (read, {n * word // MIB} MiB resident)", "L2", "read", "read_words",
              lambda: probes.read_words_kernel[blocks, threads](words, n * laps, sums),
              moved=n * laps * word, footprint=n * word, flush_l2=False, blocks=blocks)
    del words, owner

    # Shared memory: every block reads its 8 KiB tile over and over.
    laps = sizes["shared_laps"]
    source, owner = _random_words(probes.SHARED_WORDS)
    shared_sums = probes.read_shared(source, laps)
    shared_blocks = shared_sums.size // threads
    bandwidth("shared memory (read)", "shared", "read", "read_shared",
              lambda: probes.read_shared_kernel[shared_blocks, threads](source, laps, shared_sums),
              moved=shared_blocks * threads * probes.LOADS_IN_FLIGHT * word * laps,
              footprint=probes.SHARED_WORDS * word, flush_l2=False, blocks=shared_blocks)
    del source, owner, sums, shared_sums

    rng = _rng()
    ghz = _clock_ghz()
    chase_steps = sizes["chase_steps"]
    out = cuda.device_array(1, np.int32)
    # (level, memory, probe level, chain, flush L2 before each run). The DRAM chain is walked for
    # fewer steps than L2 holds lines, and L2 is flushed before every run: no step hits a line that
    # an earlier run brought in.
    chases = [
        ("shared memory", "shared", "shared", probes.random_cycle(probes.CHASE_SHARED_SLOTS, 1, rng), False),
        ("L1 (16 KiB chain)", "L1", "l1", probes.random_cycle(128, probes.LINE_INTS, rng), False),
        ("L2 (4 MiB chain)", "L2", "l2", probes.random_cycle(1 << 15, probes.LINE_INTS, rng), False),
        ("DRAM (512 MiB chain)", "DRAM", "l2", probes.random_cycle(1 << 22, probes.LINE_INTS, rng), True),
    ]
    for level, memory, probe_level, chain, flush in chases:
        chain_d = cuda.to_device(chain)
        steps = chase_steps[memory]
        t = benchmark(lambda: probes.chase(chain_d, steps, level=probe_level, out=out), warmup=1,
                      repeat=5, flush_l2=flush)
        ns = t.median_ms * 1e6 / steps
        rec.add(kind="latency", level=level, memory=memory, footprint_bytes=chain.nbytes, steps=steps,
                l2="flushed" if flush else "warm", latency_ns=ns, cycles=ns * ghz)
        del chain_d
    rec.notes = (f"bandwidth probes (kernels.probes): grids of as many blocks of {threads} threads as the GPU "
                 f"keeps resident, {probes.LOADS_IN_FLIGHT} loads of 8 bytes in flight per thread, launch "
                 f"overhead hidden behind a busy kernel; DRAM rows flush L2 before every run, torch copy_ is "
                 f"timed on the same vectors; latency: one thread chasing a random cycle, cycles at the "
                 f"{ghz:.2f} GHz boost clock")
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


def record_timing_pitfalls(ceilings, quick: bool = False):
    """One copy kernel timed seven ways, so the lesson can show what each mistake costs.

    The methods form a ladder: each of the last three changes one condition of the one before (many
    repeats after a warm-up; the launch overhead hidden; L2 flushed). Each row names the conditions
    it ran under: ``timer``, ``repeats``, ``l2`` (warm, flushed, or None where the row does not
    control it) and ``launch_overhead`` (included, hidden, or only: the host clock without a
    synchronize times the launch alone). The last two rows differ only in ``l2``: what a warm cache
    gives, nothing else. On a kernel shorter than its launch, events that include the launch time
    the host, whatever the cache holds.
    """
    from course.records import new_recording
    from course.timing import benchmark

    sizes = QUICK if quick else FULL
    rec = new_recording("day01_timing_pitfalls", ceilings=ceilings)
    for n in sizes["pitfall_n"]:
        x, y = _zeros(n), _zeros(n)
        threads = elementwise.THREADS_PER_BLOCK
        grid = elementwise.blocks_for(n, threads)
        fresh = cuda.jit(elementwise.copy_v1_guarded_kernel.py_func)   # never compiled before
        moved = 2 * n * 4

        def add(method, ms, *, timer, repeats, l2, launch_overhead, p10_ms=None, p90_ms=None):
            rec.add(method=method, N=n, bytes=moved, mbytes=moved / MIB, timer=timer, repeats=repeats, l2=l2,
                    launch_overhead=launch_overhead, ms=ms, p10_ms=p10_ms, p90_ms=p90_ms, gbps=moved / ms / 1e6)

        def launch():
            fresh[grid, threads](x, y)

        t0 = time.perf_counter()
        launch()
        cuda.synchronize()
        add("host clock, first call (compiles the kernel)", (time.perf_counter() - t0) * 1e3,
            timer="host clock", repeats=1, l2=None, launch_overhead="included")

        samples = []
        for _ in range(20):
            t0 = time.perf_counter()
            launch()
            samples.append((time.perf_counter() - t0) * 1e3)
            cuda.synchronize()
        add("host clock, no synchronize (times the launch only)", float(np.median(samples)),
            timer="host clock", repeats=20, l2=None, launch_overhead="only")

        samples = []
        for _ in range(20):
            cuda.synchronize()
            t0 = time.perf_counter()
            launch()
            cuda.synchronize()
            samples.append((time.perf_counter() - t0) * 1e3)
        add("host clock with synchronize, median of 20", float(np.median(samples)),
            timer="host clock", repeats=20, l2="warm", launch_overhead="included")

        median = benchmark(launch, warmup=0, repeat=1, launch_overhead="included").median_ms
        add("CUDA events, a single run", median, timer="CUDA events", repeats=1, l2="warm",
            launch_overhead="included")
        for method, flush, hide in (("CUDA events, warm-up, median of 50, L2 warm", False, False),
                                    ("as above, launch overhead hidden behind a busy kernel", False, True),
                                    ("as above, L2 flushed before every run", True, True)):
            t = benchmark(launch, repeat=50, flush_l2=flush, launch_overhead="hidden" if hide else "included")
            median, p10, p90 = t.median_ms, t.p10_ms, t.p90_ms
            add(method, median, timer="CUDA events", repeats=50, l2="flushed" if flush else "warm",
                launch_overhead="hidden" if hide else "included", p10_ms=p10, p90_ms=p90)
        del x, y
    return rec


def _torch():
    return baselines.cuda_torch()


def _elementwise_cases(n: int) -> list[Timed]:
    """copy v1/v2, axpb v1, torch copy_ and torch a*x+b on random vectors of n floats."""
    torch = _torch()
    a, b = 1.75, -0.5
    xt = torch.randn(n, device="cuda")
    yt = torch.empty_like(xt)
    x, y = cuda.as_cuda_array(xt), cuda.as_cuda_array(yt)
    moved = model.bytes_axpb_v1_guarded(n)   # the one-pass model for every row, so GB/s compares useful work

    def timed(op, rung, launch, flops):
        return Timed(rung, launch, moved, flops or None, columns=dict(op=op, bytes=moved, flops=flops))

    return [timed("copy", "copy_v1_guarded", lambda: elementwise.copy_v1_guarded(x, out=y), 0),
            timed("copy", "copy_v2_grid_stride", lambda: elementwise.copy_v2_grid_stride(x, out=y), 0),
            timed("copy", "torch copy_", lambda: yt.copy_(xt), 0),
            timed("axpb", "axpb_v1_guarded", lambda: elementwise.axpb_v1_guarded(x, a, b, out=y), 2 * n),
            timed("axpb", "torch a*x+b (two kernels)", lambda: torch.add(torch.mul(xt, a), b, out=yt), 2 * n)]


def elementwise_sweep() -> Sweep:
    return Sweep(
        name="day01_elementwise_timing",
        notes=("copy v1/v2, axpb v1, torch copy_ and torch a*x+b (two kernels) on float32 vectors of N elements, "
               "L2 flushed before every run; gbps: the one-pass model's 8 bytes per element per second "
               "(column op: copy or axpb)."),
        points=FULL["elementwise_n"], quick_points=QUICK["elementwise_n"], shape=lambda n: dict(N=n),
        cases=_elementwise_cases, flush_l2=True)


def _reduction_cases(cols: int) -> list[Timed]:
    """The three row-stats rungs and torch amax + sum on a random (REDUCTION_ROWS, cols) matrix."""
    torch = _torch()
    rows = REDUCTION_ROWS
    xt = torch.randn(rows, cols, device="cuda")
    mt, st = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
    x, outs = cuda.as_cuda_array(xt), (cuda.as_cuda_array(mt), cuda.as_cuda_array(st))
    moved, flops = model.bytes_row_stats_v2_shared_tree(rows, cols), model.flops_row_stats(rows, cols)
    columns = dict(bytes=moved, flops=flops)
    cases = [Timed(f"row_stats_{rung}", lambda launch=launch: launch(x, out=outs), moved, flops, columns)
             for rung, launch in reduction.RUNGS.items()]
    cases.append(Timed("torch amax + sum (two passes)",
                       lambda: (torch.amax(xt, dim=1, out=mt), torch.sum(xt, dim=1, out=st)), moved, flops, columns))
    return cases


def reduction_sweep() -> Sweep:
    return Sweep(
        name="day01_reduction_timing",
        notes=(f"row max and row sum of a random ({REDUCTION_ROWS}, cols) float32 matrix: the three row-stats "
               "rungs and torch amax + sum, L2 flushed before every run; gbps: the matrix read once and two "
               "vectors written, per second."),
        points=FULL["reduction_cols"], quick_points=QUICK["reduction_cols"],
        shape=lambda cols: dict(N=cols, rows=REDUCTION_ROWS, cols=cols), cases=_reduction_cases, flush_l2=True)


def _normalize_cases(seq: int) -> list[Timed]:
    """normalize_rows_v1_3d_grid and torch x / l[..., None] on (batch, heads, seq, head_dim)."""
    torch = _torch()
    batch, heads, head_dim = NORMALIZE_SHAPE
    xt = torch.randn(batch, heads, seq, head_dim, device="cuda")
    lt = torch.rand(batch, heads, seq, device="cuda") + 0.5
    ot = torch.empty_like(xt)
    x, l, o = cuda.as_cuda_array(xt), cuda.as_cuda_array(lt), cuda.as_cuda_array(ot)
    moved = model.bytes_normalize_rows_v1_3d_grid(batch, heads, seq, head_dim)
    flops = model.flops_normalize_rows_v1_3d_grid(batch, heads, seq, head_dim)
    columns = dict(bytes=moved, flops=flops)
    return [Timed("normalize_rows_v1_3d_grid", lambda: elementwise.normalize_rows_v1_3d_grid(x, l, out=o),
                  moved, flops, columns),
            Timed("torch x / l[..., None]", lambda: torch.div(xt, lt[..., None], out=ot), moved, flops, columns)]


def normalize_rows_sweep() -> Sweep:
    batch, heads, head_dim = NORMALIZE_SHAPE
    return Sweep(
        name="day01_normalize_rows_timing",
        notes=(f"out = x / row_sums[..., None] for x ({batch}, {heads}, N, {head_dim}) float32: the 3D-grid "
               "kernel and torch, L2 flushed before every run; gbps: x read, row_sums read, out written, per second."),
        points=FULL["normalize_seq"], quick_points=QUICK["normalize_seq"],
        shape=lambda seq: dict(N=seq, batch=batch, heads=heads, head_dim=head_dim), cases=_normalize_cases,
        flush_l2=True)


def record_elementwise_timing(ceilings, quick: bool = False):
    """Time the copy and axpb rungs and torch across n (L2 flushed between runs); return the Recording."""
    return harness.record_sweep(elementwise_sweep(), quick=quick, ceilings=ceilings)


def record_reduction_timing(ceilings, quick: bool = False):
    """Time the three row-stats rungs and torch amax + sum across cols; return the Recording."""
    return harness.record_sweep(reduction_sweep(), quick=quick, ceilings=ceilings)


def record_normalize_rows_timing(ceilings, quick: bool = False):
    """Time normalize_rows_v1_3d_grid and torch across the sequence length; return the Recording."""
    return harness.record_sweep(normalize_rows_sweep(), quick=quick, ceilings=ceilings)


def _measurements(quick: bool) -> list:
    """The recordings that are not sweeps: the memory hierarchy, coalescing and the timing pitfalls."""
    from course.timing import measure_ceilings

    ceilings = measure_ceilings()
    return [make(ceilings, quick) for make in (record_memory_hierarchy, record_coalescing, record_timing_pitfalls)]


def recorder() -> harness.Recorder:
    return harness.Recorder(day="day01", checks=checks,
                            sweeps=lambda: [elementwise_sweep(), reduction_sweep(), normalize_rows_sweep()],
                            ncu_cases=ncu_cases, sanitize=sanitize, extras=_measurements)


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check every day-1 kernel at full size, then measure and save the day's recordings in ``out_dir``."""
    return harness.record(recorder(), out_dir, quick=quick)


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
    words = rng.integers(0, 1 << 40, 1024, dtype=np.uint64)   # sums stay below 2**64 on the simulator too
    probes.copy_words(words[:999], np.zeros(999, np.uint64), blocks=2)
    probes.read_words(words, 3 * 1024 + 5, blocks=2)
    probes.read_shared(words[:probes.SHARED_WORDS], 40, blocks=2)
    chase = probes.random_cycle(64, probes.LINE_INTS, rng)
    probes.chase(chase, 100, level="l1")
    probes.chase(chase, 100, level="l2")
    probes.chase(probes.random_cycle(probes.CHASE_SHARED_SLOTS, 1, rng), 100, level="shared")
    probes.busy_wait_kernel[1, 1](2)
    cuda.synchronize()


def ncu_cases():
    """``NcuCase(label, N, run)`` for Nsight Compute: strided reads (DRAM bytes against stride) and a copy."""
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

    cases = [NcuCase(f"strided_read_s{s}", n, strided(s)) for s in (1, 2, 4, 8, 16, 32)]
    cases.append(NcuCase("copy_v1_guarded", n, copy))
    return cases


__all__ = ["record", "recorder", "sanitize", "ncu_cases", "checks", "check_full_size", "record_memory_hierarchy",
           "record_coalescing", "record_timing_pitfalls", "record_elementwise_timing",
           "record_reduction_timing", "record_normalize_rows_timing"]
