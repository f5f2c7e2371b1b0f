"""Probes of day 1: kernels that measure the memory hierarchy of a GPU, not kernels to learn from.

Bandwidth probes fill the machine: a grid of exactly as many blocks as the GPU keeps resident at
once (the driver's occupancy for the probe), and in every thread ``LOADS_IN_FLIGHT`` independent
8-byte loads issued before any of them is used. Too few bytes in flight, not the memory, is what
usually limits a simple kernel: on an H100 a float32 copy with one load per thread (day 1's
``copy_v1_guarded``, 2^28 elements) reaches 1,693 GB/s, 57 % of the 2,979 GB/s copy ceiling of the same
recording (``course/data/day01_elementwise_timing.json``).

- ``copy_words``: ``dst = src`` for uint64 vectors; the DRAM copy bandwidth (bytes read + written).
- ``read_words``: sums ``reads`` words of a power-of-two vector, wrapping around it, with loads that
  bypass L1 (``cuda.ldcg``, PTX ``ld.global.cg``): a vector far larger than L2 measures DRAM reads,
  a vector of a few MiB read many times from every SM measures L2 reads.
- ``read_shared``: every block keeps ``SHARED_WORDS`` words in shared memory and reads them
  ``repeats`` times, 32 lanes on 32 consecutive words: no bank conflict.

Latency probes (pointer chasing: one thread follows ``j = chain[j]`` through a random cycle built
by ``random_cycle``, so every load waits for the one before and no prefetcher can guess it):

- ``chase(chain, steps, level="shared")``: the chain copied into shared memory first.
- ``chase(chain, steps, level="l1")``: ordinary loads, cached in L1 once the chain fits there.
- ``chase(chain, steps, level="l2")``: loads that bypass L1, so a hit is an L2 hit; with L2
  flushed and a chain far larger than L2, every step goes to DRAM.

A kernel that only waits, for timing:

- ``busy_wait_kernel``: one thread sleeps about the given number of microseconds; queued before a
  timed launch, it keeps the GPU busy while the host enqueues the launch, so CUDA events time the
  kernel and not the host's launch overhead.

The launchers validate their arguments and return what the kernel wrote: the sums of the bandwidth
probes (one per thread, so the loads cannot be optimised away), the end of the chase.
"""

from __future__ import annotations


import numpy as np
from numba import config, cuda, int32, uint64

from kernels.launching import is_device_array, require_array, require_int, require_int32

__all__ = ["copy_words", "read_words", "read_shared", "chase", "random_cycle", "resident_blocks",
           "copy_words_kernel", "read_words_kernel", "read_shared_kernel", "chase_shared_kernel",
           "chase_cached_kernel", "chase_l2_kernel", "busy_wait_kernel", "BUSY_MICROSECONDS", "CHASE_KERNELS",
           "PROBE_THREADS", "LOADS_IN_FLIGHT", "SHARED_WORDS", "CHASE_SHARED_SLOTS", "LINE_INTS", "WORD_BYTES"]

PROBE_THREADS = 256              # threads per block of the bandwidth probes
LOADS_IN_FLIGHT = 4              # independent loads per thread before the first one is used
WORD_BYTES = 8                   # uint64: the widest load a plain numba kernel issues
SHARED_WORDS = LOADS_IN_FLIGHT * PROBE_THREADS   # 8 KiB of shared memory per block
CHASE_SHARED_SLOTS = 1024        # int32 entries of the shared-memory pointer chase
LINE_INTS = 32                   # 128-byte lines: chase steps on a spacing of LINE_INTS land on distinct lines


# ----------------------------------------------------------------------------------------------
# Bandwidth probes
# ----------------------------------------------------------------------------------------------

@cuda.jit
def copy_words_kernel(src, dst):
    """dst[i] = src[i] for uint64 vectors (n,).

    Each block owns chunks of LOADS_IN_FLIGHT * blockDim consecutive words, one chunk per trip of a
    grid-stride loop; a thread loads its LOADS_IN_FLIGHT words of the chunk, then stores them.
    """
    step = cuda.blockDim.x
    chunk = LOADS_IN_FLIGHT * step
    i = cuda.blockIdx.x * chunk + cuda.threadIdx.x
    trip = cuda.gridDim.x * chunk
    n = src.size
    while i + 3 * step < n:
        a = src[i]
        b = src[i + step]
        c = src[i + 2 * step]
        d = src[i + 3 * step]
        dst[i] = a
        dst[i + step] = b
        dst[i + 2 * step] = c
        dst[i + 3 * step] = d
        i += trip
    for k in range(LOADS_IN_FLIGHT):      # the last, partial chunk
        j = i + k * step
        if j < n:
            dst[j] = src[j]


@cuda.jit
def read_words_kernel(words, reads, sums):
    """sums[thread] = the wrapping uint64 sum of this thread's share of ``reads`` loads of words.

    Load number r reads words[r % n] (n a power of two, so r % n is r & (n - 1)), bypassing L1; the
    loads are dealt out in chunks as in ``copy_words_kernel``. sums has one entry per thread.
    """
    mask = words.size - 1
    step = cuda.blockDim.x
    chunk = LOADS_IN_FLIGHT * step
    i = cuda.blockIdx.x * chunk + cuda.threadIdx.x
    trip = cuda.gridDim.x * chunk
    total0 = uint64(0)
    total1 = uint64(0)
    total2 = uint64(0)
    total3 = uint64(0)
    while i + 3 * step < reads:
        total0 += cuda.ldcg(words, i & mask)
        total1 += cuda.ldcg(words, (i + step) & mask)
        total2 += cuda.ldcg(words, (i + 2 * step) & mask)
        total3 += cuda.ldcg(words, (i + 3 * step) & mask)
        i += trip
    for k in range(LOADS_IN_FLIGHT):
        j = i + k * step
        if j < reads:
            total0 += cuda.ldcg(words, j & mask)
    sums[cuda.grid(1)] = total0 + total1 + total2 + total3


@cuda.jit
def read_shared_kernel(source, repeats, sums):
    """Each block copies source (SHARED_WORDS,) uint64 into shared memory and reads all of it ``repeats`` times.

    In round r thread t reads words (t + r + k * blockDim) % SHARED_WORDS for k < LOADS_IN_FLIGHT:
    a warp's 32 lanes read 32 consecutive words, which no two lanes share a bank for.
    sums[thread] = the wrapping sum of what the thread read. Launch with PROBE_THREADS threads.
    """
    tile = cuda.shared.array(SHARED_WORDS, uint64)
    t = cuda.threadIdx.x
    for i in range(t, SHARED_WORDS, PROBE_THREADS):
        tile[i] = source[i]
    cuda.syncthreads()
    total0 = uint64(0)
    total1 = uint64(0)
    total2 = uint64(0)
    total3 = uint64(0)
    for r in range(repeats):
        j = t + r
        total0 += tile[j & (SHARED_WORDS - 1)]
        total1 += tile[(j + PROBE_THREADS) & (SHARED_WORDS - 1)]
        total2 += tile[(j + 2 * PROBE_THREADS) & (SHARED_WORDS - 1)]
        total3 += tile[(j + 3 * PROBE_THREADS) & (SHARED_WORDS - 1)]
    sums[cuda.grid(1)] = total0 + total1 + total2 + total3


# ----------------------------------------------------------------------------------------------
# Latency probes
# ----------------------------------------------------------------------------------------------

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


# level -> (kernel, threads per block)
CHASE_KERNELS = {"shared": (chase_shared_kernel, PROBE_THREADS), "l1": (chase_cached_kernel, 1),
                 "l2": (chase_l2_kernel, 1)}


def random_cycle(slots: int, spacing: int, rng: np.random.Generator) -> np.ndarray:
    """An int32 chain of ``slots * spacing`` entries whose slots form one random cycle.

    Following ``j = chain[j]`` from 0 visits every slot (entries ``k * spacing``) once per lap, in
    random order, so caches and prefetchers cannot guess the next address.
    """
    slots = require_int("slots", slots, minimum=1)
    spacing = require_int("spacing", spacing, minimum=1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if slots * spacing > np.iinfo(np.int32).max:
        raise ValueError(f"slots * spacing must fit in int32, got {slots} * {spacing}")
    order = rng.permutation(slots)
    order = np.concatenate([[0], order[order != 0]])        # the walk starts at slot 0
    chain = np.zeros(slots * spacing, dtype=np.int32)
    chain[order * spacing] = np.roll(order, -1) * spacing
    return chain


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------

# How long busy_wait_kernel keeps the GPU busy before a timed call whose launch is to be hidden: far longer than
# the host needs to enqueue the start event, the call and the end event (a call of two numba launches with ten
# arguments takes about 0.25 ms of Python on the H100's host). course.timing and inference.engine both use it.
BUSY_MICROSECONDS = 1000


@cuda.jit
def busy_wait_kernel(microseconds):
    """One thread sleeps about ``microseconds``: keeps the GPU busy while the host prepares a launch."""
    for _ in range(microseconds):
        cuda.nanosleep(1000)


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------

def resident_blocks(kernel, args, threads_per_block: int) -> int:
    """Blocks of ``kernel`` that the whole GPU keeps resident at once (2 on the simulator).

    A grid-stride probe launched with exactly this many blocks fills every SM and ends in one
    wave: a grid slightly larger would leave most SMs idle while the last blocks run.
    """
    if config.ENABLE_CUDASIM:
        return 2
    compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    return int(compiled.max_cooperative_grid_blocks(threads_per_block))


def _sums_array(sums, threads: int, like):
    if sums is None:
        return cuda.device_array(threads, np.uint64) if is_device_array(like) else np.zeros(threads, np.uint64)
    require_array("sums", sums, (threads,), np.uint64)
    return sums


def _grid(kernel, args, blocks) -> int:
    return resident_blocks(kernel, args, PROBE_THREADS) if blocks is None else require_int("blocks", blocks, minimum=1)


def copy_words(src, dst, *, blocks=None):
    """``dst = src`` for uint64 vectors (n,) of equal size; ``blocks`` defaults to a full GPU. Returns dst."""
    (n,) = require_array("src", src, (None,), np.uint64)
    require_array("dst", dst, (n,), np.uint64)
    if is_device_array(src) != is_device_array(dst):
        raise TypeError("src and dst must both be NumPy arrays or both device arrays")
    blocks = _grid(copy_words_kernel, (src, dst), blocks)
    if n:
        copy_words_kernel[blocks, PROBE_THREADS](src, dst)
    return dst


def read_words(words, reads, *, sums=None, blocks=None):
    """Read ``reads`` uint64 words of ``words`` (n,), n a power of two, wrapping around; L1 bypassed.

    Returns ``sums`` (blocks * PROBE_THREADS,) uint64: what each thread read, summed with wrap-around,
    so ``sums.sum()`` equals the wrapping sum of every word read.
    """
    (n,) = require_array("words", words, (None,), np.uint64)
    if n & (n - 1) or n == 0:
        raise ValueError(f"words must have a power-of-two length, got {n}")
    reads = require_int("reads", reads, minimum=0)
    blocks = _grid(read_words_kernel, (words, np.int64(reads), np.zeros(1, np.uint64)), blocks)
    sums = _sums_array(sums, blocks * PROBE_THREADS, words)
    read_words_kernel[blocks, PROBE_THREADS](words, reads, sums)
    return sums


def read_shared(source, repeats, *, sums=None, blocks=None):
    """Every block reads ``source`` (SHARED_WORDS,) uint64 from shared memory ``repeats`` times.

    Returns ``sums`` (blocks * PROBE_THREADS,) uint64: each thread's wrapping sum of what it read.
    """
    require_array("source", source, (SHARED_WORDS,), np.uint64)
    repeats = require_int("repeats", repeats, minimum=0)
    blocks = _grid(read_shared_kernel, (source, np.int64(repeats), np.zeros(1, np.uint64)), blocks)
    sums = _sums_array(sums, blocks * PROBE_THREADS, source)
    read_shared_kernel[blocks, PROBE_THREADS](source, repeats, sums)
    return sums


def chase(chain, steps, *, level: str, out=None):
    """Follow ``j = chain[j]`` from 0 for ``steps`` steps at ``level`` ("shared", "l1" or "l2").

    chain: int32 (m,) whose entries are indices into chain, as ``random_cycle`` builds; for
    "shared" m must be CHASE_SHARED_SLOTS. Returns ``out`` (1,) int32 holding the last index.
    """
    if level not in CHASE_KERNELS:
        raise ValueError(f"level must be one of {sorted(CHASE_KERNELS)}, got {level!r}")
    kernel, threads = CHASE_KERNELS[level]
    (m,) = require_int32("chain", chain, (CHASE_SHARED_SLOTS if level == "shared" else None,))
    if m == 0:
        raise ValueError("chain must not be empty")
    if isinstance(chain, np.ndarray) and (chain.min() < 0 or chain.max() >= m):
        raise ValueError(f"chain entries must be indices in 0..{m - 1}, got {chain.min()}..{chain.max()}")
    steps = require_int("steps", steps, minimum=0)
    if out is None:
        out = cuda.device_array(1, np.int32) if is_device_array(chain) else np.zeros(1, np.int32)
    else:
        require_int32("out", out, (1,))
    kernel[1, threads](chain, steps, out)
    return out
