"""The memory-hierarchy probes of day 1 (``kernels.probes``) on the simulator, and compiled for GPUs.

A probe that skips part of its work would report a bandwidth it never reached: every probe is
checked against what it must have read or copied, and each check is shown to fail on a probe
with a classic slip (the last partial chunk forgotten, one lane reading another's word).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda, uint64

import course
from kernels import probes

WRAP = 1 << 64
# Module constants, so that the test kernels below compile on a GPU (shared array sizes must be constants).
THREADS, LOADS, SHARED_WORDS = probes.PROBE_THREADS, probes.LOADS_IN_FLIGHT, probes.SHARED_WORDS


@pytest.fixture(autouse=True)
def simulated_cache_hints(monkeypatch):
    """The simulator has no ``cuda.ldcg``; a plain read returns the same value (a GPU only skips L1)."""
    from numba.cuda.simulator import kernelapi

    if not hasattr(kernelapi.FakeCUDAModule, "ldcg"):
        monkeypatch.setattr(kernelapi.FakeCUDAModule, "ldcg", staticmethod(lambda array, i: array[i]),
                            raising=False)


def random_words(n, seed):
    return np.random.default_rng(seed).integers(0, 1 << 40, n, dtype=np.uint64)   # sums stay below 2**64 on the simulator too


def expected_read_sum(words, reads):
    """The wrapping sum of words[r % n] for r < reads, in Python integers."""
    n = words.size
    laps, rest = divmod(reads, n)
    values = [int(w) for w in words]
    return (laps * sum(values) + sum(values[:rest])) % WRAP


def total(sums):
    return sum(int(s) for s in sums) % WRAP


@pytest.mark.parametrize("n", [1, 999, 2 * probes.LOADS_IN_FLIGHT * probes.PROBE_THREADS + 77])
def test_copy_words_copies_every_word(n):
    """Sizes below one chunk, and past a full trip of the grid-stride loop with a partial chunk."""
    src = random_words(n, seed=n)
    dst = np.full(n, 7, np.uint64)
    probes.copy_words(src, dst, blocks=1)
    mismatched = np.flatnonzero(dst != src)
    assert mismatched.size == 0, f"copy_words left words {mismatched[:5]} unwritten or wrong (n={n})"


@pytest.mark.parametrize("n, reads", [(1024, 3 * 1024 + 5), (64, 1), (2048, 2048)])
def test_read_words_reads_each_word_as_often_as_asked(n, reads):
    words = random_words(n, seed=reads)
    sums = probes.read_words(words, reads, blocks=2)
    assert sums.shape == (2 * probes.PROBE_THREADS,)
    assert total(sums) == expected_read_sum(words, reads), f"n={n}, reads={reads}"


def test_read_shared_sums_what_each_thread_reads():
    source = random_words(probes.SHARED_WORDS, seed=5)
    repeats = 3
    sums = probes.read_shared(source, repeats, blocks=1)
    t = np.arange(probes.PROBE_THREADS)
    expected = [sum(int(source[(t_ + r + k * probes.PROBE_THREADS) % probes.SHARED_WORDS])
                    for r in range(repeats) for k in range(probes.LOADS_IN_FLIGHT)) % WRAP for t_ in t]
    assert [int(s) for s in sums] == expected


@pytest.mark.parametrize("level, slots, spacing", [("l1", 50, probes.LINE_INTS), ("l2", 37, 3),
                                                    ("shared", probes.CHASE_SHARED_SLOTS, 1)])
def test_chase_follows_the_cycle(level, slots, spacing):
    chain = probes.random_cycle(slots, spacing, np.random.default_rng(slots))
    assert probes.chase(chain, slots, level=level)[0] == 0, "a full lap must come back to slot 0"
    walk = [0]
    for _ in range(5):
        walk.append(int(chain[walk[-1]]))
    assert probes.chase(chain, 5, level=level)[0] == walk[-1]


def test_random_cycle_visits_every_slot_once():
    chain = probes.random_cycle(50, 4, np.random.default_rng(0))
    seen, j = [], 0
    for _ in range(50):
        seen.append(j)
        j = int(chain[j])
    assert j == 0 and sorted(seen) == [4 * k for k in range(50)]


# ----------------------------------------------------------------------------------------------
# The checks above fail on probes with a classic slip
# ----------------------------------------------------------------------------------------------

@cuda.jit
def copy_without_tail_kernel(src, dst):
    """copy_words_kernel without its last, partial chunk."""
    step = cuda.blockDim.x
    chunk = LOADS * step
    i = cuda.blockIdx.x * chunk + cuda.threadIdx.x
    while i + 3 * step < src.size:
        for k in range(LOADS):
            dst[i + k * step] = src[i + k * step]
        i += cuda.gridDim.x * chunk


@cuda.jit
def read_shared_conflicting_kernel(source, repeats, sums):
    """read_shared_kernel where every lane reads the word of lane 0: fast on a GPU, and wrong."""
    tile = cuda.shared.array(SHARED_WORDS, uint64)
    t = cuda.threadIdx.x
    for i in range(t, SHARED_WORDS, THREADS):
        tile[i] = source[i]
    cuda.syncthreads()
    total = uint64(0)
    for r in range(repeats):
        for k in range(LOADS):
            total += tile[(t - t % 32 + r + k * THREADS) % SHARED_WORDS]
    sums[cuda.grid(1)] = total


def test_the_checks_fail_on_wrong_probes():
    n = 2 * LOADS * THREADS + 77
    src, dst = random_words(n, seed=1), np.zeros(n, np.uint64)
    copy_without_tail_kernel[1, THREADS](src, dst)
    assert np.flatnonzero(dst != src).size > 0

    source = random_words(probes.SHARED_WORDS, seed=5)
    right = probes.read_shared(source, 2, blocks=1)
    wrong = np.zeros_like(right)
    read_shared_conflicting_kernel[1, THREADS](source, 2, wrong)
    assert [int(s) for s in wrong] != [int(s) for s in right]


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda: probes.copy_words(np.zeros(4, np.float32), np.zeros(4, np.uint64)), TypeError, "src must have dtype uint64"),
    (lambda: probes.copy_words(np.zeros(4, np.uint64), np.zeros(5, np.uint64)), ValueError, r"dst must have shape \(4,\)"),
    (lambda: probes.copy_words(np.zeros((2, 2), np.uint64), np.zeros(4, np.uint64)), ValueError, "src must have 1 dimension"),
    (lambda: probes.read_words(np.zeros(1000, np.uint64), 10), ValueError, "power-of-two length, got 1000"),
    (lambda: probes.read_words(np.zeros(8, np.uint64), -1), ValueError, "reads must be an int >= 0"),
    (lambda: probes.read_words(np.zeros(8, np.uint64), 8, blocks=0), ValueError, "blocks must be an int >= 1"),
    (lambda: probes.read_shared(np.zeros(8, np.uint64), 2), ValueError, "source must have shape"),
    (lambda: probes.chase(np.zeros(4, np.int32), 2, level="L3"), ValueError, "level must be one of"),
    (lambda: probes.chase(np.array([5, 0], np.int32), 2, level="l1"), ValueError, "chain entries must be indices"),
    (lambda: probes.chase(np.zeros(4, np.int64), 2, level="l2"), TypeError, "chain must have dtype int32"),
    (lambda: probes.random_cycle(0, 1, np.random.default_rng()), ValueError, "slots must be an int >= 1"),
    (lambda: probes.random_cycle(4, 1, 3), TypeError, "rng must be a numpy.random.Generator"),
])
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ----------------------------------------------------------------------------------------------
# Every probe compiles for a real GPU
# ----------------------------------------------------------------------------------------------

COMPILE_SCRIPT = textwrap.dedent("""
    import types as pytypes
    import numba.cuda.dispatcher as dispatcher
    from numba import types
    from course.gpu_compile import ptx_for_targets
    # cuda.ldcg is an overload: numba compiles it for the current device's compute capability, and
    # this machine may have none. The target asked for below is what counts.
    dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=(8, 0))
    from kernels import probes
    words, ints = types.Array(types.uint64, 1, "C"), types.Array(types.int32, 1, "C")
    signatures = {
        probes.copy_words_kernel: (words, words),
        probes.read_words_kernel: (words, types.int64, words),
        probes.read_shared_kernel: (words, types.int64, words),
        probes.chase_shared_kernel: (ints, types.int64, ints),
        probes.chase_cached_kernel: (ints, types.int64, ints),
        probes.chase_l2_kernel: (ints, types.int64, ints),
        probes.busy_wait_kernel: (types.int64,),
    }
    for kernel, signature in signatures.items():
        for cc, ptx in ptx_for_targets(kernel.py_func, signature).items():
            print(kernel.py_func.__name__, cc, ptx.count("ld.global.u64"), ptx.count("ld.global.cg"),
                  ptx.count("ld.shared.u64"))
""")


def test_every_probe_compiles_for_sm80_and_sm90():
    """PTX for both targets; the bandwidth probes issue their four 8-byte loads, the L2 ones with .cg."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], capture_output=True, text=True, env=env,
                          cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line.split() for line in proc.stdout.splitlines()]
    compiled = {(line[0], line[1] + line[2]) for line in lines}     # ("copy_words_kernel", "(8,0)")
    assert len(compiled) == 14, proc.stdout
    counts = {line[0]: tuple(int(c) for c in line[3:]) for line in lines}
    assert counts["copy_words_kernel"][0] >= probes.LOADS_IN_FLIGHT
    assert counts["read_words_kernel"][1] >= probes.LOADS_IN_FLIGHT
    assert counts["read_shared_kernel"][2] >= probes.LOADS_IN_FLIGHT
    assert counts["chase_l2_kernel"][1] >= 1


@pytest.mark.skipif(not course.on_simulator(), reason="counts launches with the simulator's hooks")
def test_recorder_sanitize_launches_every_day1_kernel():
    """``course.record.day01.sanitize()``, the small launches compute-sanitizer watches, launches every
    day-1 kernel and every probe on the simulator."""
    from course import simulator
    from course.record import day01
    from kernels import elementwise, reduction

    launched = []
    listener = lambda launch: launched.append(launch["kernel_name"])  # noqa: E731
    simulator.add_launch_listener(listener)
    try:
        day01.sanitize()
    finally:
        simulator.remove_launch_listener(listener)
    expected = {k.py_func.__name__ for k in (probes.copy_words_kernel, probes.read_words_kernel,
                                             probes.read_shared_kernel, probes.chase_shared_kernel,
                                             probes.chase_cached_kernel, probes.chase_l2_kernel,
                                             probes.busy_wait_kernel, elementwise.strided_read_kernel)}
    expected |= {kernel.py_func.__name__ for module in (elementwise, reduction)
                 for rung in module.RUNGS.values() for kernel in rung.kernels.values()}
    assert expected <= set(launched), f"never launched: {sorted(expected - set(launched))}"
