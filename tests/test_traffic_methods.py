"""Whole-array operations in a kernel, through the traffic counter: each is counted exactly or refused.

numba-cuda compiles more than indexing on a kernel's arrays: ``v.sum()``, ``np.mean(v)``, ``for x in v``,
``v.flat[i]``, ``o /= u``, ``np.cos(v, o)``, ``out[idx] = 0`` and others. ``COMPILED`` lists every method,
attribute, NumPy function and built-in that numba-cuda 0.30 compiles on an array, in the forms it compiles
(found with ``compile_ptx`` over every method and attribute of ``np.ndarray``, every NumPy function
numba-cuda overloads, every ufunc, the Python built-ins and operators on an array, each under a few call
shapes; ufuncs by example, the ufunc test runs them all; ``test_every_listed_form_compiles_for_a_gpu``
keeps the list honest),
with what the counter must say of it: exact loads and stores per argument, or refused with
``UncountedAccessError``, whose message names the operation and says to index elements one at a time. The
tests over every name of ``np.ndarray``, of NumPy's namespace and every ufunc check that nothing else slips
through, and the last tests show that the check catches a counter that misses a read.
"""

import linecache
import math

import numpy as np
import pytest

import course

pytestmark = pytest.mark.skipif(not course.on_simulator(),
                                reason="counting needs the simulator; this run uses a GPU")

from numba import cuda, float32, int32  # noqa: E402  (after the device is chosen)

from course.simulator import _traffic  # noqa: E402
from course.traffic import count_traffic  # noqa: E402

REFUSED = "refused"
ARGS = ("a", "b", "m", "out", "idx")

# The kernel every form runs in: views of the arguments, and the form's lines after them.
#   a = 1, 2, ..., 8 (float32)        v = a[0:4], u = a[4:8]
#   b = 1, 2, ..., 12 as 3 x 4         w = b[0:2, :], w2 = b[1:3, :]
#   m = 2, 0, 3, nan, 0, 1             (a zero and a NaN: where any, all, max and min stop)
#   out = 8 zeros (float32)            o = out[0:4]
#   idx = 1, 2, 2, 0 (int32)
HEAD = """\
def kernel(a, b, m, out, idx):
    v = a[0:4]
    u = a[4:8]
    w = b[0:2, :]
    w2 = b[1:3, :]
    o = out[0:4]
    s = float32(0)
"""

# (lines of the kernel, separated by " | ", a line's own indentation kept), what the counter must say:
# {argument: (loads, stores)} (arguments left out: none), or REFUSED.
COMPILED = [
    # Reductions read every element once (C order), or up to where numba-cuda's loop stops.
    ("out[0] = v.sum()", {"a": (4, 0), "out": (0, 1)}),
    ("v.sum()", {"a": (4, 0)}),
    ("out[0] = w.sum()", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = v.sum(np.float32)", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = b.sum()", {"b": (12, 0), "out": (0, 1)}),
    ("out[0] = w[0].sum()", {"b": (4, 0), "out": (0, 1)}),
    ("out[0] = a[2:3].sum()", {"a": (1, 0), "out": (0, 1)}),
    ("out[0] = np.float32(v.sum())", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = v.mean()", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = w.mean()", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = v.prod()", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = w.prod()", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = v.any()", {"a": (1, 0), "out": (0, 1)}),         # a[0] is nonzero: any stops there
    ("out[0] = w.any()", {"b": (1, 0), "out": (0, 1)}),
    ("out[0] = m.any()", {"m": (1, 0), "out": (0, 1)}),
    ("out[0] = v.all()", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = w.all()", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = m.all()", {"m": (2, 0), "out": (0, 1)}),         # stops at the zero, m[1]
    ("out[0] = np.sum(v)", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = np.sum(w)", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = np.mean(v)", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = np.mean(w)", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = np.prod(w)", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = np.nansum(m)", {"m": (6, 0), "out": (0, 1)}),
    ("out[0] = np.nanmean(w)", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = np.nanprod(v)", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = np.count_nonzero(m)", {"m": (6, 0), "out": (0, 1)}),
    ("out[0] = np.count_nonzero(w)", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = np.any(m)", {"m": (1, 0), "out": (0, 1)}),
    ("out[0] = np.all(m)", {"m": (2, 0), "out": (0, 1)}),
    ("out[0] = np.all(w)", {"b": (8, 0), "out": (0, 1)}),
    ("out[0] = a[2:3].item()", {"a": (1, 0), "out": (0, 1)}),
    ("v.fill(1.0)", {"a": (0, 4)}),
    ("w.fill(1.0)", {"b": (0, 8)}),
    # Built-ins iterate: one load per element they take.
    ("out[0] = sum(v)", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = max(v)", {"a": (4, 0), "out": (0, 1)}),
    ("out[0] = min(v)", {"a": (4, 0), "out": (0, 1)}),
    ("for x in v: |     s += x | out[0] = s", {"a": (4, 0), "out": (0, 1)}),
    ("for x in w: |     s += x[0] | out[0] = s", {"b": (2, 0), "out": (0, 1)}),     # rows are views
    ("for j, x in enumerate(v): |     s += x | out[0] = s", {"a": (4, 0), "out": (0, 1)}),
    ("for x, y in zip(v, u): |     s += x * y | out[0] = s", {"a": (8, 0), "out": (0, 1)}),
    ("it = iter(v) | out[0] = next(it)", {"a": (1, 0), "out": (0, 1)}),
    ("out[0] = 1.0 in v", {"a": (1, 0), "out": (0, 1)}),        # found at a[0]
    ("out[0] = 3.0 in v", {"a": (3, 0), "out": (0, 1)}),
    ("if 9.0 in v: |     out[0] = 1", {"a": (4, 0)}),
    ("x0, x1, x2, x3 = v | out[0] = x0", {"a": (4, 0), "out": (0, 1)}),
    ("x0, x1 = w | out[0] = x0[0]", {"b": (1, 0), "out": (0, 1)}),
    ("r = (v,) | out[0] = r[0][1]", {"a": (1, 0), "out": (0, 1)}),
    # .flat: one load or store per element it reads or writes.
    ("out[0] = v.flat[1]", {"a": (1, 0), "out": (0, 1)}),
    ("r = v.flat | out[0] = r[0]", {"a": (1, 0), "out": (0, 1)}),
    ("r = w.flat | out[0] = r[5]", {"b": (1, 0), "out": (0, 1)}),
    ("for x in v.flat: |     s += x | out[0] = s", {"a": (4, 0), "out": (0, 1)}),
    ("for x in w.flat: |     s += x | out[0] = s", {"b": (8, 0), "out": (0, 1)}),
    ("v.flat[1] = 2.0", {"a": (0, 1)}),
    ("w.flat[1] = 2.0", {"b": (0, 1)}),
    # Views are free; their elements count against the argument they came from.
    ("out[0] = v.T[0]", {"a": (1, 0), "out": (0, 1)}),
    ("r = v.T | out[0] = r[0]", {"a": (1, 0), "out": (0, 1)}),
    ("for x in v.T: |     s += x | out[0] = s", {"a": (4, 0), "out": (0, 1)}),
    ("r = w.T | out[0] = r[1, 0]", {"b": (1, 0), "out": (0, 1)}),
    ("out[0] = v.real[1]", {"a": (1, 0), "out": (0, 1)}),
    ("for x in v.real: |     s += x | out[0] = s", {"a": (4, 0), "out": (0, 1)}),
    ("r = w.real | out[0] = r[0, 0]", {"b": (1, 0), "out": (0, 1)}),
    ("r = v.view(np.int32) | out[0] = r[0]", {"a": (1, 0), "out": (0, 1)}),
    ("r = v.view(np.float32) | out[0] = r[0]", {"a": (1, 0), "out": (0, 1)}),
    ("r = w.transpose() | out[0] = r[0, 1]", {"b": (1, 0), "out": (0, 1)}),
    ("for x in v.transpose(): |     s += x | out[0] = s", {"a": (4, 0), "out": (0, 1)}),
    ("r = a.reshape((2, -1)) | out[0] = r[0, 1]", {"a": (1, 0), "out": (0, 1)}),
    ("r = v[:, None] | out[0] = r[1, 0]", {"a": (1, 0), "out": (0, 1)}),
    ("out[0] = v[::2][1]", {"a": (1, 0), "out": (0, 1)}),
    ("out[0] = a[-1]", {"a": (1, 0), "out": (0, 1)}),
    ("np.atleast_1d(v, u)", {}),
    ("np.atleast_2d(v, o)", {}),
    ("np.atleast_3d(o, idx, v)", {}),
    # Attributes that read no element.
    ("out[0] = len(v)", {"out": (0, 1)}),
    ("out[0] = v.nbytes", {"out": (0, 1)}),
    ("out[0] = v.size + v.ndim + v.shape[0] + v.strides[0] + v.itemsize", {"out": (0, 1)}),
    ("r = w.shape | out[0] = r[0]", {"out": (0, 1)}),
    ("for x in w.strides: |     s += x | out[0] = s", {"out": (0, 1)}),
    ("out[0] = v.ctypes.data", {"out": (0, 1)}),
    ("out[0] = np.shape(w)[1]", {"out": (0, 1)}),
    ("out[0] = np.size(w)", {"out": (0, 1)}),
    ("out[0] = np.isrealobj(v)", {"out": (0, 1)}),
    ("out[0] = np.iscomplexobj(w)", {"out": (0, 1)}),
    ("out[0] = np.isscalar(v)", {"out": (0, 1)}),
    ("for t in np.ndindex(w.shape): |     s += w[t] | out[0] = s", {"b": (8, 0), "out": (0, 1)}),
    # Stores of a scalar into several elements, by a slice or by an array of indices (read whole).
    ("o[:] = 1.0", {"out": (0, 4)}),
    ("w[0, :] = 3.0", {"b": (0, 4)}),
    ("o[idx] = 1.0", {"out": (0, 4), "idx": (4, 0)}),
    ("out[idx] = 2.0", {"out": (0, 4), "idx": (4, 0)}),
    ("b[idx, 0] = 2.0", {"b": (0, 4), "idx": (4, 0)}),
    ("b[0, idx] = 2.0", {"b": (0, 4), "idx": (4, 0)}),
    ("o[idx] = v[0]", {"a": (1, 0), "out": (0, 4), "idx": (4, 0)}),
    ("out[0] = v[idx[0]]", {"a": (1, 0), "out": (0, 1), "idx": (1, 0)}),
    # In-place operators and ufuncs with an output: each output element reads each input once.
    ("o /= u", {"a": (4, 0), "out": (4, 4)}),
    ("o /= 2.0", {"out": (4, 4)}),
    ("np.cos(v, o)", {"a": (4, 0), "out": (0, 4)}),
    ("np.tanh(w, w2)", {"b": (8, 8)}),                          # rows of b overlap: NumPy buffers
    ("np.greater(v, u, o)", {"a": (8, 0), "out": (0, 4)}),
    ("np.maximum(v, u, o)", {"a": (8, 0), "out": (0, 4)}),
    ("np.logical_not(v, o)", {"a": (4, 0), "out": (0, 4)}),
    ("np.isnan(w, w2)", {"b": (8, 8)}),
    ("r = np.sin(v, u) | out[0] = r[0]", {"a": (5, 4), "out": (0, 1)}),
    ("np.arctan2(v, u, o)", {"a": (8, 0), "out": (0, 4)}),
    ("np.arctan2(o, u, v)", {"a": (4, 4), "out": (4, 0)}),
    ("l = cuda.local.array(4, float32) | out[0] = l.sum() + v[0]", {"a": (1, 0), "out": (0, 1)}),
    ("out[0] = np.hypot(v[0], u[0])", {"a": (2, 0), "out": (0, 1)}),
    ("out[0] = np.imag(v[0])", {"a": (1, 0), "out": (0, 1)}),
    ("out[0] = np.sinc(v[0])", {"a": (1, 0), "out": (0, 1)}),
    ("out[0] = np.real(v[0]) + np.angle(u[0])", {"a": (2, 0), "out": (0, 1)}),
    ("out[0] = np.array_equal(v[0], u[0])", {"a": (2, 0), "out": (0, 1)}),
    # Atomics: one load and one store.
    ("out[0] = cuda.atomic.add(o, 0, 1.0)", {"out": (1, 2)}),
    ("out[0] = cuda.atomic.max(o, 0, 1.0)", {"out": (1, 2)}),
    ("out[0] = cuda.atomic.cas(idx, 0, 1, 2)", {"out": (0, 1), "idx": (1, 1)}),
    # Refused: how many elements they read is numba-cuda's business (argmax reads one twice and stops at
    # a NaN; std and var read twice; searchsorted a few), or they go through a conversion of the whole array.
    ("out[0] = v.argmax()", REFUSED),
    ("out[0] = w.argmax()", REFUSED),
    ("out[0] = v.argmax(0)", REFUSED),
    ("out[0] = v.argmin()", REFUSED),
    ("out[0] = w.argmin()", REFUSED),
    ("out[0] = np.argmax(v)", REFUSED),
    ("out[0] = np.argmin(w)", REFUSED),
    ("out[0] = v.std()", REFUSED),
    ("out[0] = w.var()", REFUSED),
    ("out[0] = np.var(v)", REFUSED),
    ("out[0] = np.std(v)", REFUSED),
    ("out[0] = np.nanstd(v)", REFUSED),
    ("out[0] = np.nanvar(w)", REFUSED),
    ("out[0] = np.average(v)", REFUSED),
    ("out[0] = np.average(v, u)", REFUSED),
    ("np.average(o, idx, v)", REFUSED),
    ("out[0] = np.searchsorted(v, 1.0)", REFUSED),
    ("out[0] = np.trace(w)", REFUSED),
    ("np.dsplit(v, u)", REFUSED),
    ("np.vsplit(v, u)", REFUSED),
    ("v.clip()", REFUSED),
    ("v.clip(out=o)", REFUSED),
    ("r = np.asarray(v) | out[0] = r[0]", REFUSED),
    ("for x in np.asarray(w): |     s += x[1] | out[0] = s", REFUSED),
    ("np.asarray(v, u)", REFUSED),
    ("for t, x in np.ndenumerate(v): |     s += x | out[0] = s", REFUSED),
    ("for x in np.nditer(v): |     s += x.item() | out[0] = s", REFUSED),
    ("np.nditer(v)", REFUSED),
]

# Shared arrays are counted like arguments (the counter's "shared" space).
SHARED = [
    ("sh = cuda.shared.array(4, float32) | sh.fill(2.0) | out[0] = sh.sum()", (4, 4), {"out": (0, 1)}),
    ("sh = cuda.shared.array((2, 4), float32) | sh[:, :] = 1.0 | out[0] = sh[1].mean() + sh.flat[0]", (5, 8),
     {"out": (0, 1)}),
    ("sh = cuda.shared.array(4, float32) | sh[:] = 0.0 | out[0] = sh.argmax()", REFUSED, {}),
]


def _inputs():
    return {"a": np.arange(1, 9, dtype=np.float32),
            "b": np.arange(1, 13, dtype=np.float32).reshape(3, 4),
            "m": np.array([2, 0, 3, np.nan, 0, 1], np.float32),
            "out": np.zeros(8, np.float32),
            "idx": np.array([1, 2, 2, 0], np.int32)}


_KERNELS = {}


def _kernel(body):
    """The simulator kernel of ``body`` (its source registered, so course.gpu_compile can read it)."""
    if body not in _KERNELS:
        source = HEAD + "".join(f"    {line}\n" for line in body.split(" | "))
        filename = f"<traffic-methods-{len(_KERNELS)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {"np": np, "cuda": cuda, "float32": float32, "int32": int32, "math": math,
                     "RESULT": _RESULT}
        exec(compile(source, filename, "exec"), namespace)
        _KERNELS[body] = cuda.jit(namespace["kernel"])
    return _KERNELS[body]


def _counted(body):
    """``(counts, error)``: {argument or "shared": (loads, stores)} of one counted launch, or what it raised."""
    inputs = _inputs()
    try:
        with count_traffic() as t:
            _kernel(body)[1, 1](*(inputs[name] for name in ARGS))
    except Exception as exc:  # noqa: BLE001 - the caller judges what was raised
        return None, exc
    counts = {name: (t.global_loads[name], t.global_stores[name]) for name in ARGS}
    counts["shared"] = (t.shared_loads, t.shared_stores)
    return counts, None


def _problems(body, expected, shared=(0, 0)) -> list[str]:
    """What the counter gets wrong about ``body``: nothing when it counts exactly what ``expected`` says, or
    refuses it (expected == REFUSED) with an UncountedAccessError that says why."""
    counts, error = _counted(body)
    if expected == REFUSED:
        if error is None:
            return [f"{body!r} ran and was counted as {counts}: it should be refused"]
        if not isinstance(error, _traffic.UncountedAccessError):
            return [f"{body!r} raised {type(error).__name__}: {error}, not UncountedAccessError"]
        if "one at a time" not in str(error) or "refused" not in str(error):
            return [f"{body!r}: the refusal does not say why or what to do instead: {error}"]
        return []
    if error is not None:
        return [f"{body!r} raised {type(error).__name__}: {error}"]
    want = {name: expected.get(name, (0, 0)) for name in ARGS}
    want["shared"] = shared
    if counts != want:
        wrong = {k: f"counted {counts[k]}, want {want[k]}" for k in want if counts[k] != want[k]}
        return [f"{body!r}: (loads, stores) {wrong}"]
    return []


@pytest.mark.parametrize("body, expected", COMPILED, ids=[body for body, _ in COMPILED])
def test_every_form_numba_compiles_is_counted_exactly_or_refused(body, expected):
    assert not _problems(body, expected)


@pytest.mark.parametrize("body, shared, expected", SHARED, ids=[body for body, _, _ in SHARED])
def test_shared_arrays_are_counted_or_refused_too(body, shared, expected):
    if shared == REFUSED:
        assert not _problems(body, REFUSED)
    else:
        assert not _problems(body, expected, shared=shared)


def test_a_refusal_names_the_operation_and_the_array():
    _, error = _counted("out[0] = v.argmax()")
    assert isinstance(error, _traffic.UncountedAccessError) and isinstance(error, TypeError)
    message = str(error)
    assert ".argmax()" in message and "kernel argument 'a'" in message
    assert "Read and write elements one at a time" in message
    _, error = _counted("sh = cuda.shared.array(4, float32) | sh[:] = 0.0 | out[0] = np.argmax(sh)")
    assert "np.argmax()" in str(error) and "shared memory" in str(error)


def test_a_refusal_numpy_swallows_still_fails_the_launch():
    """np.nditer turns the refusal into its own TypeError; the launch reports the refusal all the same."""
    _, error = _counted("for x in np.nditer(v): |     s += x.item() | out[0] = s")
    assert isinstance(error, _traffic.UncountedAccessError)
    assert "np.nditer" in str(error) and isinstance(error.__cause__, TypeError)


def test_a_refusal_the_kernel_catches_still_fails_the_launch():
    """In the simulator a kernel body is Python: catching the error does not make the read counted."""
    _, error = _counted("try: |     out[0] = v.argmax() | except Exception: |     out[0] = 1")
    assert isinstance(error, _traffic.UncountedAccessError) and ".argmax()" in str(error)


def test_a_copy_is_refused_and_a_view_is_not():
    assert not _problems("r = b[:, 1:3].reshape(6) | out[0] = r[0]", REFUSED)      # a strided view: a copy
    assert not _problems("r = b.reshape(12) | out[0] = r[11]", {"b": (1, 0), "out": (0, 1)})


def test_without_counting_the_simulator_runs_them_as_before():
    """Refusals belong to counted launches: an uncounted launch is numba's simulator, unchanged."""
    inputs = _inputs()
    _kernel("out[0] = v.argmax() | out[1] = np.std(w)")[1, 1](*(inputs[name] for name in ARGS))
    assert inputs["out"][0] == 3 and inputs["out"][1] == pytest.approx(np.std(np.arange(1, 9)))


# ------------------------------------------------------------------------------------------------
# Nothing else slips through: every name of np.ndarray and of NumPy's namespace, every ufunc
# ------------------------------------------------------------------------------------------------

# What an attribute of a counted array may be without being refused: free, a view, or counted above.
_ALLOWED_ATTRIBUTES = (_traffic._FREE_ATTRIBUTES | _traffic._VIEW_ATTRIBUTES | _traffic._VIEW_METHODS
                       | _traffic._REDUCTION_METHODS | {"item", "fill", "flat"})


def test_every_attribute_of_an_array_is_free_counted_or_refused():
    names = sorted(n for n in dir(np.ndarray) if not n.startswith("_"))
    # getattr(v, NAME) for every public name of np.ndarray, one launch each.
    slipped = []
    for name in names:
        if name in _ALLOWED_ATTRIBUTES:       # each is in COMPILED, counted exactly
            continue
        counts, error = _counted(f"r = getattr(v, {name!r})")
        if error is None:
            slipped.append(f"v.{name}: not refused, counted {counts}")
        elif not isinstance(error, _traffic.UncountedAccessError):
            slipped.append(f"v.{name} raised {type(error).__name__}, not UncountedAccessError: {error}")
    assert not slipped, "attributes neither free, counted nor refused:\n  " + "\n  ".join(slipped)


# NumPy functions counted above, and what each reads of v (4 elements of 1, 2, 3, 4 or 11, 12, 13, 14).
_FUNCTIONS_READ = {name: 4 for name in _traffic._READS_ALL | _traffic._READS_TO_NAN | {"all"}}
_FUNCTIONS_READ.update({name: 0 for name in _traffic._VIEW_FUNCTIONS | _traffic._SHAPE_FUNCTIONS}, any=1)
# Not run: they change NumPy's global state or read and write files.
_NOT_RUN = {"info", "test", "show_config", "show_runtime", "set_printoptions", "seterr", "seterrcall",
            "setbufsize", "load", "save", "savez", "savez_compressed", "savetxt", "loadtxt", "genfromtxt",
            "fromfile", "fromregex", "lookfor", "source"}

_RESULT = []


def _numpy_functions():
    for name in sorted(dir(np)):
        value = getattr(np, name)
        if not (name.startswith("_") or isinstance(value, (type, np.ufunc)) or not callable(value)
                or name in _NOT_RUN):
            yield name


def _what_it_returned(value):
    """A result as data: a counted view stays a view (no element read), raw elements become values."""
    if isinstance(value, _traffic._CountedArray):
        return ("counted view", value.shape)
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, _what_it_returned(value.tolist()))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [_what_it_returned(v) for v in value])
    if isinstance(value, np.generic):
        return ("scalar", repr(value.item()))
    if isinstance(value, (int, float, bool, str, type(None), np.dtype, type)):
        return repr(value)
    return ("object", type(value).__name__)


def _call_on(values, call):
    """Run ``r = call`` in a counted kernel whose a holds ``values``: (loads and stores of a, error, what r is,
    a afterwards)."""
    inputs = _inputs()
    inputs["a"] = np.array(values, np.float32)
    del _RESULT[:]
    try:
        with count_traffic() as t:
            _kernel(f"RESULT.append({call})")[1, 1](*(inputs[name] for name in ARGS))
    except Exception as exc:  # noqa: BLE001 - NumPy rejecting the call is an answer too
        return None, exc, None, None
    return ((t.global_loads["a"], t.global_stores["a"]), None, _what_it_returned(_RESULT[0]),
            inputs["a"].tolist())


@pytest.mark.filterwarnings("ignore")   # NumPy on 1, 2, 3, ...: domain errors, deprecations
def test_every_numpy_function_on_a_counted_array_is_counted_or_refused():
    """np.NAME(v) and np.NAME(v, u) for every function of NumPy's namespace, on two arrays a of different
    values. Where it returns: a function of the table reads exactly what the table says; any other either
    counted what it read (it iterated or indexed: loads) or read nothing: then its result and a are the
    same for both arrays. A result that depends on elements no load was counted for is a read the counter
    missed."""
    slipped = []
    low, high = list(range(1, 9)), list(range(11, 19))
    for name in _numpy_functions():
        for call in (f"np.{name}(v)", f"np.{name}(v, u)"):
            counts, error, result, after = _call_on(low, call)
            counts_high, error_high, result_high, after_high = _call_on(high, call)
            if error is not None or error_high is not None:
                if name in _traffic._COUNTED_REDUCTIONS and call.endswith("(v)"):
                    slipped.append(f"{call} raised {type(error or error_high).__name__}: {error or error_high}")
                continue
            want = _FUNCTIONS_READ.get(name)
            if want is not None and counts != (want, 0):
                slipped.append(f"{call}: (loads, stores) of a {counts}, want {(want, 0)}")
            if counts == (0, 0) and (result != result_high or after != low or after_high != high):
                slipped.append(f"{call} read or wrote elements and counted nothing: {result} / {result_high}")
    assert not slipped, "NumPy functions that read elements uncounted:\n  " + "\n  ".join(slipped)


def _ufuncs():
    return sorted({getattr(np, n) for n in dir(np) if isinstance(getattr(np, n), np.ufunc)},
                  key=lambda f: f.__name__)


# A float32 or int32 view of 4 elements for each operand of a ufunc's loop, by the loop's type character:
# (expression, argument). NumPy casts float32 to a wider input and an output to float32 or int32.
_FLOATS, _INTEGERS = "?efdg", "bBhHiIlLqQ"
_OPERANDS = {"in": {"float": [("v", "a"), ("u", "a")], "int": [("idx[0:4]", "idx")] * 2},
             "out": {"float": [("o", "out"), ("w2[0]", "b")], "int": [("idx[0:4]", "idx")] * 2}}


def _ufunc_call(ufunc):
    """``np.NAME(inputs..., outputs...)`` over views of 4 elements, and the (loads, stores) it must count;
    None for a ufunc of datetimes only."""
    for types in ufunc.types:
        ins, outs = types.split("->")
        if set(ins) <= set(_FLOATS[1:] + _INTEGERS) and set(outs) <= set(_FLOATS + _INTEGERS):
            break                                   # no bool inputs: a float32 view is not one
    else:
        return None, None
    want = {}
    operands = []
    for role, chars in (("in", ins), ("out", outs)):
        for position, char in enumerate(chars):
            kind = "float" if char in _FLOATS else "int"
            expression, argument = _OPERANDS[role][kind][position]
            operands.append(expression)
            loads, stores = want.get(argument, (0, 0))
            want[argument] = (loads + 4, stores) if role == "in" else (loads, stores + 4)
    return f"np.{ufunc.__name__}({', '.join(operands)})", want


@pytest.mark.filterwarnings("ignore")   # NumPy on 1, 2, 3, ...: domain errors, deprecations
def test_every_ufunc_reads_each_input_and_writes_each_output_once_per_element():
    """np.UFUNC(inputs..., outputs...) on views of 4 elements: 4 loads per input, 4 stores per output (an
    in-place operator is the same ufunc). A generalized ufunc (matmul, vecdot, ...), and reduce,
    accumulate, reduceat, at and outer are refused, where NumPy does not reject them first."""
    slipped = []
    for ufunc in _ufuncs():
        call, want = _ufunc_call(ufunc)
        if call is None:
            assert ufunc.__name__ == "isnat", f"np.{ufunc.__name__}: no loop over floats or integers to try"
            continue
        if ufunc.signature:
            problems = _problems(call, REFUSED)
        else:
            problems = _problems(call, want)
        slipped.extend(problems)
        for method in ("reduce(v)", "accumulate(v)", "reduceat(v, idx[0:2])", "outer(v, u)", "at(v, 0)"):
            counts, error = _counted(f"r = np.{ufunc.__name__}.{method}")
            if error is None:
                slipped.append(f"np.{ufunc.__name__}.{method} ran, counted {counts}")
    assert not slipped, "ufuncs not counted exactly:\n  " + "\n  ".join(slipped)


def test_a_ufunc_method_is_refused_with_the_message():
    for body in ("out[0] = np.add.reduce(v)", "np.negative.at(v, 0)", "r = np.multiply.outer(v, u)",
                 "np.matmul(v, u, o[0:1])"):
        assert not _problems(body, REFUSED)


# ------------------------------------------------------------------------------------------------
# The check catches a counter that misses reads
# ------------------------------------------------------------------------------------------------

def _old_getattr(self, name):
    """The counted array's attribute access before this check existed: everything from the wrapped array."""
    value = getattr(self._item, name, None)
    return self[name] if value is None else value


def test_the_check_catches_reads_the_counter_does_not_see(monkeypatch):
    counted_array = _traffic._CountedArray
    monkeypatch.setattr(counted_array, "__getattr__", _old_getattr)
    monkeypatch.delattr(counted_array, "__array_function__")
    problems = _problems("out[0] = v.sum()", {"a": (4, 0), "out": (0, 1)})
    assert problems and "counted (0, 0), want (4, 0)" in problems[0]
    problems = _problems("out[0] = np.sum(w)", {"b": (8, 0), "out": (0, 1)})
    assert problems and "counted (0, 0), want (8, 0)" in problems[0]
    assert _problems("out[0] = v.argmax()", REFUSED)         # ran, uncounted: the check says so


def test_the_check_catches_an_uncounted_ufunc_or_flat(monkeypatch):
    counted_array = _traffic._CountedArray
    monkeypatch.setattr(counted_array, "__array_ufunc__", counted_array.__mro__[1].__array_ufunc__)
    assert _problems("np.cos(v, o)", {"a": (4, 0), "out": (0, 4)})
    monkeypatch.setattr(counted_array, "__getattr__", _old_getattr)
    assert _problems("for x in v.flat: |     s += x | out[0] = s", {"a": (4, 0), "out": (0, 1)})


@pytest.mark.slow
def test_every_listed_form_compiles_for_a_gpu():
    """The table holds forms a GPU runs: each compiles for sm_80 and sm_90 (course.gpu_compile's helper)."""
    from course.gpu_compile import CompilerUnavailable, compile_errors

    inputs = _inputs()
    failed = []
    for body, _ in COMPILED:
        try:
            errors = compile_errors(_kernel(body), *(inputs[name] for name in ARGS))
        except CompilerUnavailable as exc:
            pytest.skip(f"numba-cuda's GPU compiler is not installed: {exc}")
        if errors:
            failed.append(f"{body!r}: {errors[0]['message'].splitlines()[0]}")
    assert not failed, "forms that do not compile for a GPU:\n  " + "\n  ".join(failed)


def test_a_record_of_a_structured_array_counts_its_load_and_each_field_written():
    records = np.zeros(3, dtype=[("x", np.float32), ("y", np.int32)])
    records[1] = (1.5, 2)
    out = np.zeros(1, np.float32)

    @cuda.jit
    def fields(rec, out):
        r = rec[1]                  # one load: the record
        out[0] = r.x + r["y"]
        r.x = 7.0                   # one store each
        rec[2]["y"] = 3             # one load (rec[2]) and one store

    with count_traffic() as t:
        fields[1, 1](records, out)
    assert out[0] == 3.5 and records[1]["x"] == 7 and records[2]["y"] == 3
    assert (t.global_loads["rec"], t.global_stores["rec"]) == (2, 2)
