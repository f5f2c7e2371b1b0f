"""course.traffic: exact element loads and stores of small kernels with counts known by hand."""

import numpy as np
import pytest

import course

pytestmark = pytest.mark.skipif(not course.on_simulator(),
                                reason="counting needs the simulator; this run uses a GPU")

from numba import cuda  # noqa: E402  (after the device is chosen)

import course.traffic  # noqa: E402
from course.traffic import count_traffic  # noqa: E402


@cuda.jit
def copy(a, out):
    i = cuda.grid(1)
    if i < a.shape[0] and i < a.size:         # shape and size are free
        out[i] = a[i]


@cuda.jit
def add_twice(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] + a[i]                  # two loads of the same element


@cuda.jit
def increment(values):
    i = cuda.grid(1)
    if i < values.shape[0]:
        values[i] += 1                        # one load and one store


@cuda.jit
def stencil5(x, y):
    """Interior: y = 4-neighbour mean minus centre (5 loads); border: copy (1 load)."""
    i, j = cuda.grid(2)
    h, w = x.shape
    if i >= h or j >= w:
        return
    if i == 0 or j == 0 or i == h - 1 or j == w - 1:
        y[i, j] = x[i, j]
    else:
        y[i, j] = (x[i - 1, j] + x[i + 1, j] + x[i, j - 1] + x[i, j + 1]) * 0.25 - x[i, j]


@cuda.jit
def reverse_in_blocks(a, out):
    """Stage a block's slice of ``a`` in shared memory, write it back reversed."""
    tile = cuda.shared.array(32, np.float32)
    kept = cuda.local.array(1, np.float32)    # local memory is not counted
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    kept[0] = 0
    if i < a.size:
        tile[t] = a[i]                        # 1 global load, 1 shared store
        kept[0] = tile[t]                     # 1 shared load
    cuda.syncthreads()
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.blockDim.x - 1 - t
    if i < a.size and j < a.size:
        out[i] = tile[cuda.blockDim.x - 1 - t] + kept[0] * 0   # 1 shared load, 1 global store


@cuda.jit
def row_sums(m, out):
    r = cuda.grid(1)
    if r < m.shape[0]:
        row = m[r]                            # a view: free, its elements count against m
        total = 0.0
        for c in range(row.shape[0]):
            total += row[c]
        out[r] = total


@cuda.jit
def column_sums(m, out):
    c = cuda.grid(1)
    if c < m.shape[1]:
        columns = m.T                         # a transposed view counts against m too
        total = 0.0
        for r in range(columns.shape[1]):
            total += columns[c, r]
        out[c] = total


@cuda.jit
def low_words(a, out):
    i = cuda.grid(1)
    if i < out.size:
        words = a.view(np.uint32)             # 4-byte elements of an 8-byte array
        out[i] = words[2 * i]


@cuda.jit
def copy_rows(m, out):
    r = cuda.grid(1)
    if r < m.shape[0]:
        out[r, :] = m[r, :]                   # a whole row: one load and one store per element


@cuda.jit
def histogram(bins, counts):
    i = cuda.grid(1)
    if i < bins.size:
        cuda.atomic.add(counts, bins[i], 1)   # the atomic: one load and one store of counts


@cuda.jit
def read_many(a, out):
    i = cuda.grid(1)
    total = 0.0
    for k in range(16):
        total += a[(i + k) % a.size]
    out[i] = total


@cuda.jit(device=True)
def load_pair(v, i):
    return v[i] + v[i + 1]


@cuda.jit
def pair_sums(v, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = load_pair(v, i)              # loads inside a device function count too


@cuda.jit
def scale_into_dynamic_shared(a, out):
    buf = cuda.shared.array(0, np.float32)
    t = cuda.threadIdx.x
    buf[t] = a[t] * 2
    cuda.syncthreads()
    out[t] = buf[t]


def copy_then_double(a, out, tmp):
    """A launcher with two launches, as the kernel modules of the course have them."""
    copy[(a.size + 31) // 32, 32](a, tmp)
    add_twice[(a.size + 31) // 32, 32](tmp, out)
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))


def test_copy_counts_one_load_and_one_store_per_element(rng):
    a = rng.standard_normal(100).astype(np.float32)
    out = np.zeros_like(a)
    with count_traffic() as t:
        copy[4, 32](a, out)                   # 128 threads, 100 in bounds
    np.testing.assert_array_equal(out, a)
    assert t.launches == 1 and t.kernel_names == ["copy"]
    assert t.global_loads == {"a": 100, "out": 0}
    assert t.global_stores == {"a": 0, "out": 100}
    assert (t.global_load_bytes, t.global_store_bytes, t.global_bytes) == (400, 400, 800)
    assert (t.shared_loads, t.shared_stores) == (0, 0)


def test_bytes_follow_each_arguments_itemsize(rng):
    a = rng.standard_normal(50)                # float64
    out = np.zeros(50, np.float32)
    with count_traffic() as t:
        copy[2, 32](a, out)
    assert t.load_bytes == {"a": 8 * 50, "out": 0}
    assert t.store_bytes == {"a": 0, "out": 4 * 50}
    assert t.global_bytes == 8 * 50 + 4 * 50


def test_a_view_with_another_dtype_counts_its_own_element_size(rng):
    a = rng.standard_normal(20)
    out = np.zeros(20, np.uint32)
    with count_traffic() as t:
        copy[1, 32](a, np.zeros(20))
        low_words[1, 32](a, out)
    np.testing.assert_array_equal(out, a.view(np.uint32)[::2])
    assert t.global_loads["a"] == 40
    assert t.load_bytes["a"] == 20 * 8 + 20 * 4


def test_every_read_counts_and_read_modify_write_counts_both(rng):
    a = rng.standard_normal(40).astype(np.float32)
    out = np.zeros_like(a)
    with count_traffic() as t:
        add_twice[2, 32](a, out)
        increment[2, 32](out)
    np.testing.assert_array_equal(out, 2 * a + 1)
    assert t.global_loads == {"a": 80, "out": 0, "values": 40}
    assert t.global_stores == {"a": 0, "out": 40, "values": 40}


def test_2d_stencil(rng):
    h, w = 7, 9
    x = rng.standard_normal((h, w)).astype(np.float32)
    y = np.full_like(x, np.nan)
    with count_traffic() as t:
        stencil5[(2, 3), (4, 4)](x, y)
    interior = (h - 2) * (w - 2)
    assert t.global_loads["x"] == 5 * interior + (h * w - interior)
    assert t.global_stores == {"x": 0, "y": h * w}
    assert t.per_launch[0].grid == (2, 3, 1) and t.per_launch[0].block == (4, 4, 1)


def test_shared_memory_staging(rng):
    a = rng.standard_normal(80).astype(np.float32)
    out = np.full_like(a, np.nan)
    with count_traffic() as t:
        reverse_in_blocks[3, 32](a, out)
    # Blocks 0 and 1 are full; block 2 holds a[64:80] and its mirror indices are all >= 80.
    np.testing.assert_array_equal(out[:64], np.concatenate([a[31::-1], a[63:31:-1]]))
    assert t.global_loads == {"a": 80, "out": 0}
    assert t.global_stores == {"a": 0, "out": 64}
    assert t.shared_stores == 80
    assert t.shared_loads == 80 + 64


def test_views_count_against_their_argument(rng):
    m = rng.standard_normal((6, 5)).astype(np.float32)
    out = np.zeros(6, np.float32)
    with count_traffic() as t:
        row_sums[1, 8](m, out)
        np.testing.assert_allclose(out, m.sum(axis=1), rtol=1e-5)
        column_sums[1, 8](m, out)
    np.testing.assert_allclose(out[:5], m.sum(axis=0), rtol=1e-5)
    assert t.global_loads == {"m": 60, "out": 0}
    assert [launch.global_loads["m"] for launch in t.per_launch] == [30, 30]


def test_slice_assignment_counts_every_element(rng):
    m = rng.standard_normal((3, 7)).astype(np.float32)
    out = np.zeros_like(m)
    with count_traffic() as t:
        copy_rows[1, 4](m, out)
    np.testing.assert_array_equal(out, m)
    assert t.global_loads == {"m": 21, "out": 0}
    assert t.global_stores == {"m": 0, "out": 21}


def test_atomics_count_one_load_and_one_store(rng):
    bins = rng.integers(0, 5, size=60).astype(np.int32)
    counts = np.zeros(5, np.int32)
    with count_traffic() as t:
        histogram[2, 32](bins, counts)
    np.testing.assert_array_equal(counts, np.bincount(bins, minlength=5))
    assert t.global_loads == {"bins": 60, "counts": 60}
    assert t.global_stores == {"bins": 0, "counts": 60}


def test_device_arrays_and_device_functions_count(rng):
    v = cuda.to_device(rng.standard_normal(33).astype(np.float32))
    out = cuda.device_array(32, np.float32)
    with count_traffic() as t:
        pair_sums[1, 32](v, out)
    host_v = v.copy_to_host()
    np.testing.assert_allclose(out.copy_to_host(), host_v[:-1] + host_v[1:], rtol=1e-6)
    assert t.global_loads == {"v": 64, "out": 0}
    assert t.global_stores == {"v": 0, "out": 32}


def test_dynamic_shared_memory_counts(rng):
    a = rng.standard_normal(32).astype(np.float32)
    out = np.zeros_like(a)
    with count_traffic() as t:
        scale_into_dynamic_shared[1, 32, 0, 32 * 4](a, out)
    np.testing.assert_array_equal(out, a * 2)
    assert (t.shared_loads, t.shared_stores) == (32, 32)


def test_counts_are_exact_with_many_threads_racing(rng):
    a = rng.standard_normal(512).astype(np.float32)
    out = np.zeros_like(a)
    with count_traffic() as t:
        read_many[4, 128](a, out)
    assert t.global_loads["a"] == 16 * 512


def test_a_launcher_with_two_launches(rng):
    a = rng.standard_normal(70).astype(np.float32)
    out, tmp = np.zeros_like(a), np.zeros_like(a)
    with count_traffic() as t:
        copy_then_double(a, out, tmp)
    np.testing.assert_array_equal(out, 2 * a)
    assert t.launches == 2
    assert t.kernel_names == ["copy", "add_twice"]
    first, second = t.per_launch
    assert first.global_loads == {"a": 70, "out": 0} and first.global_stores["out"] == 70
    assert second.global_loads == {"a": 140, "out": 0} and second.global_stores["out"] == 70
    # Summed by parameter name over launches: "a" is `a` in the first, `tmp` in the second.
    assert t.global_loads == {"a": 210, "out": 0}
    assert t.global_stores == {"a": 0, "out": 140}


def test_nested_blocks_both_count_and_nothing_counts_outside(rng):
    a = rng.standard_normal(32).astype(np.float32)
    out = np.zeros_like(a)
    with count_traffic() as outer:
        copy[1, 32](a, out)
        with count_traffic() as inner:
            copy[1, 32](a, out)
    copy[1, 32](a, out)
    assert outer.launches == 2 and inner.launches == 1
    assert outer.global_loads["a"] == 64 and inner.global_loads["a"] == 32


def test_a_failing_launch_leaves_counting_usable(rng):
    a = rng.standard_normal(8).astype(np.float32)
    out = np.zeros(4, np.float32)
    with count_traffic() as t:
        with pytest.raises(IndexError):
            copy[1, 8](a, out)                # out is too short: the simulator raises
        copy[1, 4](a[:4].copy(), out)
    assert t.launches == 1 and t.global_loads["a"] == 4


def test_unknown_argument_name_says_which_exist(rng):
    with count_traffic() as t:
        copy[1, 4](np.ones(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(KeyError, match="no kernel argument named 'b'.*a, out"):
        t.global_loads["b"]


def test_summary_lists_arguments_and_totals(rng):
    a = rng.standard_normal(80).astype(np.float32)
    with count_traffic() as t:
        reverse_in_blocks[3, 32](a, np.zeros_like(a))
    text = t.summary()
    assert text.splitlines()[0] == "1 kernel launch: reverse_in_blocks"
    assert any(line.split() == ["a", "80", "0", "320"] for line in text.splitlines())
    assert any(line.split() == ["out", "0", "64", "256"] for line in text.splitlines())
    assert any(line.split()[:2] == ["shared", "(elements)"] and line.split()[2:4] == ["144", "80"]
               for line in text.splitlines())


def test_refuses_on_a_gpu(monkeypatch):
    monkeypatch.setattr(course.traffic, "on_simulator", lambda: False)
    with pytest.raises(RuntimeError, match="simulator.*Nsight"):
        with count_traffic():
            pass


def test_fresh_copies_of_the_modules_count_too(rng, monkeypatch):
    """The grader loads private copies of course.simulator and course.traffic: they must work."""
    import importlib.util
    import sys

    def fresh(name, alias):
        spec = importlib.util.spec_from_file_location(alias, sys.modules[name].__file__)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, alias, module)
        spec.loader.exec_module(module)
        return module

    private_simulator = fresh("course.simulator", "private_simulator")
    assert private_simulator.install() is True                 # already patched: no double hooks
    private_traffic = fresh("course.traffic", "private_traffic")
    private_traffic.simulator = private_simulator
    a = rng.standard_normal(32).astype(np.float32)
    with private_traffic.count_traffic() as t, count_traffic() as shared:
        copy[1, 32](a, np.zeros_like(a))
    assert t.global_loads == shared.global_loads == {"a": 32, "out": 0}
