"""Time kernels on a real GPU with CUDA events, and measure the machine's own ceilings.

One timing function for the whole course::

    t = benchmark(lambda: my_kernel[grid, block](d_x, d_out), warmup=10, repeat=50, flush_l2=True)
    t.median_ms, t.p10_ms, t.p90_ms, t.samples_ms
    t = benchmark_within(fn, budget_s=3.0)   # as many repeats (5 to 50) as fit in about 3 s
    ceilings = measure_ceilings()      # {"copy_gbps": ..., "fp32_tflops": ...}, measured once per process

``fn`` should only launch work (kernels, torch calls) on the default stream and leave its inputs
on the device: a copy to or from the host inside ``fn`` is timed too. Each repeat is bracketed by
two events on the default stream, which torch's default stream also is. With ``flush_l2=True`` a
buffer at least twice the size of the L2 cache is read before every repeat, so a memory-bound
kernel reads its inputs from DRAM as it would in a model, not from a warm cache. Read, not written:
L2 is a write-back cache, so a flush that writes (a memset) leaves it full of dirty lines, and the
timed kernel's first reads would have to write them back to DRAM first, traffic that is not the
kernel's (up to L2's size of writes, about 50 to 60 MB on an H100 or H200: as much again as a
40 MB weight matrix reads).

In the CUDA simulator nothing can be timed: :func:`benchmark` raises :class:`SimulatorTimingError`
and lessons plot recorded curves (``course.records``) instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from course.records import live_or_recorded

__all__ = ["benchmark", "benchmark_within", "seconds_per_call", "flush_l2_cache", "flush_buffer_words",
           "LAUNCH_OVERHEADS", "Timing",
           "measure_ceilings", "SimulatorTimingError", "live_or_recorded",
           "gbps", "tflops"]

FALLBACK_L2_BYTES = 128 * 2**20   # when the device does not report its L2 size: flush 256 MiB
COPY_BYTES = 512 * 2**20          # source buffer of the copy-bandwidth measurement
MATMUL_SIZE = 8192                # square fp32 matmul for the compute ceiling

_flush_buffer = None
_ceilings: dict | None = None


LAUNCH_OVERHEADS = ("queued", "included", "hidden")


class SimulatorTimingError(RuntimeError):
    """Raised when timing is asked for on numba's CUDA simulator."""


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: median, 10th and 90th percentiles, and every sample."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    samples_ms: tuple
    warmup: int
    flush_l2: bool

    def __str__(self) -> str:
        return (f"{self.median_ms:.4g} ms (p10 {self.p10_ms:.4g}, p90 {self.p90_ms:.4g}; "
                f"{len(self.samples_ms)} runs{', L2 flushed' if self.flush_l2 else ''})")


def _refuse_on_simulator() -> None:
    from course.device import on_simulator

    if on_simulator():
        raise SimulatorTimingError(
            "timing needs a real GPU; the lessons plot recorded curves instead "
            "(the CUDA simulator runs one Python thread per CUDA thread, so its times say nothing "
            "about a GPU)")


def flush_buffer_words(l2_bytes: int) -> int:
    """uint64 words of the L2 flush's buffer for an L2 of ``l2_bytes`` (0: unknown, ``FALLBACK_L2_BYTES`` assumed):
    the smallest power of two (what ``kernels.probes.read_words`` reads) of at least twice L2's bytes."""
    nbytes = 2 * (l2_bytes if l2_bytes > 0 else FALLBACK_L2_BYTES)
    return 1 << math.ceil(math.log2(nbytes / 8))


def _l2_flush_buffer():
    """``(words, sums, blocks)``: a device buffer of uint64 words, a power of two and at least twice the size of
    L2, zeroed once, with the sums array and grid ``kernels.probes.read_words`` reads it with; made once per
    process."""
    global _flush_buffer
    if _flush_buffer is None:
        from numba import cuda
        from numba.cuda.cudadrv import driver

        from kernels import probes

        try:
            l2 = int(cuda.get_current_device().L2_CACHE_SIZE)
        except Exception:  # the attribute is missing on some drivers/versions
            l2 = 0
        words = cuda.device_array(flush_buffer_words(l2), dtype=np.uint64)
        driver.device_memset(words, 0, words.nbytes)
        blocks = probes.resident_blocks(probes.read_words_kernel,
                                        (words, np.int64(words.size), np.zeros(1, np.uint64)), probes.PROBE_THREADS)
        sums = cuda.device_array(blocks * probes.PROBE_THREADS, dtype=np.uint64)
        _flush_buffer = (words, sums, blocks)
    return _flush_buffer


def flush_l2_cache() -> None:
    """Read a buffer at least twice the size of L2 (bypassing L1), so the next kernel finds none of its data in
    L2, and L2 holds only clean lines: nothing the next kernel evicts has to be written back first."""
    from kernels import probes

    words, sums, blocks = _l2_flush_buffer()
    probes.read_words(words, words.size, sums=sums, blocks=blocks)


def benchmark(fn, warmup: int = 10, repeat: int = 50, flush_l2: bool = False, *,
              launch_overhead: str = "queued") -> Timing:
    """Time ``fn()`` on the GPU with CUDA events; return a :class:`Timing` in milliseconds.

    fn: a function of no arguments that launches the work to time (compiled by the warm-up).
    warmup: untimed calls first (JIT compilation, clocks ramping up).
    repeat: timed calls; the median and the 10th/90th percentiles are reported.
    flush_l2: overwrite a buffer larger than L2 before every timed call.
    launch_overhead: what the events bracket besides the kernel.
      ``"queued"``: every call is enqueued back to back, so the host's launch cost overlaps the GPU's
      work (what a model's forward pass sees);
      ``"included"``: the GPU is idle when each start event is recorded, so the host's launch cost
      is measured too (what a lone timed call sees);
      ``"hidden"``: a busy kernel is queued before each start event; by the time it ends the host has
      enqueued the start event, the call and the end event, which then run back to back: the kernel
      alone.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments, got {type(fn).__name__}")
    for arg, value, low in (("warmup", warmup, 0), ("repeat", repeat, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{arg} must be an int >= {low}, got {value!r}")
    if not isinstance(flush_l2, bool):
        raise TypeError(f"flush_l2 must be True or False, got {flush_l2!r}")
    if launch_overhead not in LAUNCH_OVERHEADS:
        raise ValueError(f"launch_overhead must be one of {', '.join(map(repr, LAUNCH_OVERHEADS))}, "
                         f"got {launch_overhead!r}")
    _refuse_on_simulator()
    from numba import cuda

    from kernels.probes import BUSY_MICROSECONDS, busy_wait_kernel

    for _ in range(warmup):
        fn()
    cuda.synchronize()
    starts = [cuda.event(timing=True) for _ in range(repeat)]
    ends = [cuda.event(timing=True) for _ in range(repeat)]
    for start, end in zip(starts, ends):
        if flush_l2:
            flush_l2_cache()
        if launch_overhead == "included":
            cuda.synchronize()
        elif launch_overhead == "hidden":
            busy_wait_kernel[1, 1](BUSY_MICROSECONDS)
        start.record()
        fn()
        end.record()
        if launch_overhead != "queued":
            end.synchronize()
    cuda.synchronize()
    samples = np.array([float(cuda.event_elapsed_time(s, e)) for s, e in zip(starts, ends)])
    if not np.all(samples >= 0):
        raise RuntimeError(f"CUDA events returned negative times {samples[samples < 0][:3]}: "
                           "did fn run on another stream than the default one?")
    p10, median, p90 = np.percentile(samples, [10, 50, 90])
    return Timing(median_ms=float(median), p10_ms=float(p10), p90_ms=float(p90),
                  samples_ms=tuple(float(s) for s in samples), warmup=warmup, flush_l2=flush_l2)


def seconds_per_call(fn) -> float:
    """Wall time of one synchronised call of ``fn()``, after a first call that compiles and warms up."""
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments, got {type(fn).__name__}")
    _refuse_on_simulator()
    from numba import cuda

    fn()
    cuda.synchronize()
    start = time.perf_counter()
    fn()
    cuda.synchronize()
    return time.perf_counter() - start


def benchmark_within(fn, budget_s: float = 3.0, *, min_repeat: int = 5, max_repeat: int = 50,
                     flush_l2: bool = False, launch_overhead: str = "queued") -> Timing:
    """:func:`benchmark` with as many repeats as fit in about ``budget_s`` seconds (``min_repeat`` to
    ``max_repeat``), so that a sweep over sizes times its largest sizes in seconds, not minutes.

    One untimed call measures the duration; the warm-up is a fifth of the repeats (at least 2).
    ``launch_overhead`` is :func:`benchmark`'s.
    """
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0:
        raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
    for arg, value in (("min_repeat", min_repeat), ("max_repeat", max_repeat)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg} must be an int >= 1, got {value!r}")
    if max_repeat < min_repeat:
        raise ValueError(f"max_repeat must be >= min_repeat, got {max_repeat} < {min_repeat}")
    once = seconds_per_call(fn)
    repeat = int(min(max_repeat, max(min_repeat, budget_s / max(once, 1e-6))))
    return benchmark(fn, warmup=max(2, repeat // 5), repeat=repeat, flush_l2=flush_l2,
                     launch_overhead=launch_overhead)


def gbps(nbytes: float, ms: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second) of moving ``nbytes`` in ``ms`` milliseconds."""
    if ms <= 0:
        raise ValueError(f"ms must be positive, got {ms}")
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops: float, ms: float) -> float:
    """Rate in TFLOP/s (1e12 floating-point operations per second) of ``flops`` in ``ms`` ms."""
    if ms <= 0:
        raise ValueError(f"ms must be positive, got {ms}")
    return flops / (ms * 1e-3) / 1e12


def _copy_gbps() -> float:
    """Device-to-device copy bandwidth, counting the bytes read plus the bytes written."""
    from numba import cuda

    src = cuda.device_array(COPY_BYTES, dtype=np.uint8)
    dst = cuda.device_array(COPY_BYTES, dtype=np.uint8)
    t = benchmark(lambda: dst.copy_to_device(src), warmup=3, repeat=20)
    return gbps(2 * COPY_BYTES, t.median_ms)


def _fp32_matmul_tflops() -> float | None:
    """torch.matmul in true fp32 (TF32 off); None when torch with CUDA is not installed."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # TF32 would measure a different (10-bit) format
    try:
        n = MATMUL_SIZE
        a = torch.randn(n, n, device="cuda", dtype=torch.float32)
        b = torch.randn(n, n, device="cuda", dtype=torch.float32)
        c = torch.empty(n, n, device="cuda", dtype=torch.float32)
        t = benchmark(lambda: torch.matmul(a, b, out=c), warmup=3, repeat=10)
        del a, b, c
        torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return tflops(2.0 * n**3, t.median_ms)


def measure_ceilings(refresh: bool = False) -> dict:
    """Measure the GPU's copy bandwidth (GB/s) and fp32 matmul rate (TFLOP/s), once per process.

    Returns ``{"copy_gbps": float, "fp32_tflops": float or None}``; ``fp32_tflops`` is None
    without a CUDA build of torch. ``refresh=True`` measures again.
    """
    global _ceilings
    if not isinstance(refresh, bool):
        raise TypeError(f"refresh must be True or False, got {refresh!r}")
    _refuse_on_simulator()
    if _ceilings is None or refresh:
        measured = {"copy_gbps": _copy_gbps(), "fp32_tflops": _fp32_matmul_tflops()}
        if not all(v is None or (math.isfinite(v) and v > 0) for v in measured.values()):
            raise RuntimeError(f"implausible ceilings measured: {measured}")
        _ceilings = measured
    return dict(_ceilings)
