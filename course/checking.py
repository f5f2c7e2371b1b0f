"""Check a kernel's output against a float64 reference and say, in words, what looks wrong.

One checking function for the whole course::

    rng, seed = random_inputs()                       # fresh inputs every check; the seed repeats them
    out = poison(np.empty(shape, np.float32))         # unwritten elements stay recognisable
    my_kernel[grid, block](x, out)
    check(out, ref, name="O", dims=("batch", "head", "row", "col"), tile={"row": 16}, seed=seed)

Policy (DESIGN.md section 6):

- ``precision="fp32"``: passes when the relative error ``‖out − ref‖ / ‖ref‖`` is at most ``rtol``
  (1e-4), no element is off by more than ``1e-3·|ref| + 1e-4·max|ref|``, and nothing is NaN/inf
  where the reference is finite.
- low precision (``"lowp"``, ``"fp16"``, ``"bf16"``, ``"fp8"``, ``"int8"``, ``"int4"``): passes when
  every element error is at most ``2 · max|same_precision_ref − ref| + atol``, where
  ``same_precision_ref`` is the same computation done in NumPy at the kernel's storage precision.

On failure ``check`` raises :class:`CheckFailure` (an ``AssertionError``) whose message gives the
seed, how many elements are wrong, the first wrong element by named dimensions (and its tile), got
against expected, and the likely bugs found by the detectors below (keys for ``hints=``):

``unwritten`` poison left (grid too small, guard too strict) · ``zeros`` the output is all zero ·
``nonfinite`` NaN/inf produced (exp overflow) · ``transposed`` · ``scale`` a constant factor off ·
``temperature`` softmax of wrongly scaled logits · ``row_sums`` rows not summing like the reference ·
``row_scale`` each row off by its own factor · ``slices`` only some (batch, head) slices wrong ·
``first`` / ``last`` only index 0 / the last index of a dimension wrong · ``tile_edge`` only the
partial last tile · ``last_tile`` · ``first_tile`` · ``tile_offset`` every tile but the first ·
``tile_boundary`` only the first/last element of each tile · ``spread`` small errors everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["random_inputs", "poison", "is_poison", "check", "CheckResult", "CheckFailure",
           "DETECTORS", "PRECISIONS", "FP32_RTOL"]

FP32_RTOL = 1e-4            # Frobenius relative error allowed in float32
FP32_ELEMENT_RTOL = 1e-3    # one element may be off by this much of its own size ...
FP32_ELEMENT_ATOL = 1e-4    # ... plus this much of the largest reference element
LOWP_FACTOR = 2.0           # low precision: at most twice the error of a same-precision NumPy result
LOWP_DEFAULT_ATOL = 1e-5    # default atol for low precision, times max|ref|
PRECISIONS = ("fp32", "lowp", "fp16", "bf16", "fp8", "int8", "int4")
DEFAULT_DIMS = {1: ("i",), 2: ("row", "col"), 3: ("batch", "row", "col"),
                4: ("batch", "head", "row", "col")}

# Poison is a NaN with a payload of its own, so an element the kernel never wrote can be told apart
# from a NaN the kernel computed (arithmetic on a GPU returns the canonical NaN 0x7fffffff).
_POISON_BITS = {"float16": 0x7EAD, "bfloat16": 0x7FCD, "float32": 0x7FCDEAD0,
                "float64": 0x7FF8DEADDEADDEAD}
_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# --------------------------------------------------------------------------- inputs and poison


def random_inputs(seed: int | None = None) -> tuple[np.random.Generator, int]:
    """Return a fresh NumPy Generator and the seed it was made from (a random seed when None).

    Pass the seed to :func:`check` so that a failure says how to repeat it.
    """
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**31))
    elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"seed must be a non-negative int or None, got {seed!r}")
    return np.random.default_rng(int(seed)), int(seed)


def _poison_value(dtype: np.dtype):
    """``("bits", uint dtype, pattern)`` for floats with a NaN payload, else ``("value", v)``."""
    if dtype.name in _POISON_BITS:
        return "bits", _UINT_OF_SIZE[dtype.itemsize], _POISON_BITS[dtype.name]
    if np.issubdtype(dtype, np.signedinteger):
        return "value", np.iinfo(dtype).min
    if np.issubdtype(dtype, np.unsignedinteger):
        return "value", np.iinfo(dtype).max
    try:  # the other ml_dtypes floats (fp8) and ints (int4)
        import ml_dtypes

        try:
            ml_dtypes.finfo(dtype)
            return "value", np.nan
        except ValueError:
            return "value", ml_dtypes.iinfo(dtype).min
    except (ImportError, ValueError):
        raise TypeError(f"poison needs a float or int array, got dtype {dtype}") from None


def poison(out):
    """Fill ``out`` in place with a value no kernel writes by accident, and return it.

    Floats get a NaN with a recognisable payload, integers their most negative value (the largest
    for unsigned). ``out`` is a NumPy array or a numba device array.
    """
    if not isinstance(out, np.ndarray):
        if hasattr(out, "copy_to_device"):  # a numba device array: poison a host copy and send it
            out.copy_to_device(poison(np.empty(out.shape, dtype=out.dtype)))
            return out
        raise TypeError(f"out must be a NumPy array or a numba device array, got {type(out).__name__}")
    kind = _poison_value(out.dtype)
    if kind[0] == "bits":
        out.view(kind[1])[...] = kind[2]
    else:
        out[...] = kind[1]
    return out


def is_poison(a: np.ndarray) -> np.ndarray:
    """Boolean mask of the elements of ``a`` that still hold the poison of :func:`poison`."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"a must be a NumPy array, got {type(a).__name__}")
    kind = _poison_value(a.dtype)
    if kind[0] == "bits":
        return a.view(kind[1]) == kind[2]
    if isinstance(kind[1], float):
        return np.isnan(a.astype(np.float64))
    return a == kind[1]


# --------------------------------------------------------------------------- result


@dataclass
class CheckResult:
    """What :func:`check` found. ``str(result)`` is the report; ``passed`` says whether it passed."""

    name: str
    passed: bool
    precision: str
    rel_err: float                  # ‖out − ref‖ / ‖ref‖ over finite reference elements
    max_abs_err: float              # largest |out − ref| (inf when NaN/inf was produced)
    n_wrong: int
    n_total: int
    limit: str                      # the pass rule, in words with numbers
    seed: int | None = None
    first_wrong: dict | None = None  # {dim: index} of the first wrong element (C order)
    where: str = ""                  # first_wrong in words, with its tile
    got: float | None = None
    expected: float | None = None
    diagnoses: list = field(default_factory=list)   # likely bugs, in words
    causes: list = field(default_factory=list)      # keys of the detectors that fired (DETECTORS)
    same_precision_max_abs_err: float | None = None

    def __str__(self) -> str:
        seed = f"seed {self.seed}" if self.seed is not None else "seed not given"
        if self.passed:
            return (f"{self.name}: OK ({self.precision}, rel_err {self.rel_err:.1e}, "
                    f"max abs err {self.max_abs_err:.1e}; {self.limit}; {seed})")
        lines = [f"{self.name} does not match the reference ({self.precision}, {seed})",
                 f"  wrong elements: {self.n_wrong} of {self.n_total}"
                 f" ({100.0 * self.n_wrong / max(self.n_total, 1):.3g}%); " + (
                     f"rel_err {self.rel_err:.2e}, max abs err {self.max_abs_err:.2e}"
                     if math.isfinite(self.rel_err) else "NaN or inf where the reference is finite"),
                 f"  pass rule: {self.limit}"]
        if self.where:
            lines.append(f"  first wrong: {self.where}: got {_fmt(self.got)}, expected {_fmt(self.expected)}")
        if self.diagnoses:
            lines.append("likely cause:")
            lines += [f"  - {d}" for d in self.diagnoses]
        if self.seed is not None:
            lines.append(f"Repeat it with random_inputs(seed={self.seed}).")
        return "\n".join(lines)


class CheckFailure(AssertionError):
    """Raised by :func:`check` when the output does not match; ``.result`` holds the details."""

    def __init__(self, result: CheckResult):
        super().__init__(str(result))
        self.result = result


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.6g}"


# --------------------------------------------------------------------------- validation


def _as_host_array(a, arg: str) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    hint = "; use .cpu().numpy()" if type(a).__module__.startswith("torch") else ""
    raise TypeError(f"{arg} must be a NumPy array or a numba device array, got {type(a).__name__}{hint}")


def _require_numeric(a: np.ndarray, arg: str) -> None:
    if a.dtype.kind in "biuf" and a.dtype.kind != "b":
        return
    if a.dtype.kind == "V":
        try:
            a.reshape(-1)[:1].astype(np.float64)
            return
        except (TypeError, ValueError):
            pass
    raise TypeError(f"{arg} must hold numbers (float or int), got dtype {a.dtype}")


def _validate(out, ref, name, dims, tile, seed, precision, same_precision_ref, atol, rtol,
              rows_sum_to_one, hints, dtype):
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    ref = _as_host_array(ref, "ref")
    _require_numeric(ref, "ref")
    out = _as_host_array(out, "out")
    _require_numeric(out, "out")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if dtype is None and precision == "fp32":
        dtype = np.float32
    if dtype is not None and out.dtype != np.dtype(dtype):
        raise TypeError(f"out ({name}) must have dtype {np.dtype(dtype)}, got {out.dtype}")
    if out.shape != ref.shape:
        msg = f"out ({name}) must have shape {ref.shape} like the reference, got {out.shape}"
        if out.ndim == ref.ndim and sorted(out.shape) == sorted(ref.shape):
            msg += ": the same sizes in another order; are two dimensions swapped (transposed)?"
        raise ValueError(msg)
    if dims is None:
        dims = DEFAULT_DIMS.get(out.ndim, tuple(f"dim{i}" for i in range(out.ndim)))
    if (not isinstance(dims, (tuple, list)) or len(dims) != out.ndim
            or not all(isinstance(d, str) and d for d in dims) or len(set(dims)) != len(dims)):
        raise ValueError(f"dims must be {out.ndim} distinct names, one per dimension of {name} "
                         f"{out.shape}, got {dims!r}")
    dims = tuple(dims)
    tile = {} if tile is None else tile
    if not isinstance(tile, dict):
        raise TypeError(f"tile must be a dict such as {{'row': 16}}, got {type(tile).__name__}")
    for key, size in tile.items():
        if key not in dims:
            raise ValueError(f"tile names dimension {key!r}, which is not in dims {dims}")
        if size is not None and (isinstance(size, bool) or not isinstance(size, (int, np.integer))
                                 or size < 1):
            raise ValueError(f"tile[{key!r}] must be a positive int or None, got {size!r}")
    tile = {k: int(v) for k, v in tile.items() if v is not None}
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed must be an int or None, got {seed!r}")
    if not isinstance(rows_sum_to_one, bool):
        raise TypeError(f"rows_sum_to_one must be True or False, got {rows_sum_to_one!r}")
    hints = {} if hints is None else hints
    if not isinstance(hints, dict) or not all(isinstance(v, str) for v in hints.values()):
        raise TypeError("hints must be a dict of detector name -> advice (str)")
    unknown = set(hints) - set(DETECTORS) - {"any"}
    if unknown:
        raise ValueError(f"hints has unknown keys {sorted(unknown)}; known: {DETECTORS + ('any',)}")
    if not (isinstance(rtol, (int, float)) and rtol > 0):
        raise ValueError(f"rtol must be a positive number, got {rtol!r}")
    if atol is not None and not (isinstance(atol, (int, float)) and atol >= 0):
        raise ValueError(f"atol must be a non-negative number or None, got {atol!r}")
    if precision == "fp32":
        if same_precision_ref is not None:
            raise ValueError("same_precision_ref is only for low precision; pass precision='lowp' "
                             "(or 'fp16', 'bf16', 'int8', ...)")
    else:
        if same_precision_ref is None:
            raise ValueError(f"precision={precision!r} needs same_precision_ref: the NumPy result "
                             "computed at the kernel's storage precision")
        same_precision_ref = _as_host_array(same_precision_ref, "same_precision_ref")
        _require_numeric(same_precision_ref, "same_precision_ref")
        if same_precision_ref.shape != ref.shape:
            raise ValueError(f"same_precision_ref must have shape {ref.shape} like ref, "
                             f"got {same_precision_ref.shape}")
    return out, ref, dims, tile, hints, same_precision_ref


# --------------------------------------------------------------------------- check


def check(out, ref, *, name: str = "out", dims=None, tile=None, seed: int | None = None,
          precision: str = "fp32", same_precision_ref=None, atol: float | None = None,
          rtol: float = FP32_RTOL, rows_sum_to_one: bool = False, hints: dict | None = None,
          dtype=None) -> CheckResult:
    """Compare ``out`` with the reference ``ref``: return a :class:`CheckResult` when it passes,
    raise :class:`CheckFailure` with a diagnosis when it does not.

    out: the kernel's output, any shape (NumPy or numba device array); float32 for ``fp32``
        unless ``dtype`` says otherwise.
    ref: the float64 reference, same shape.
    dims: a name per dimension, e.g. ``("batch", "head", "row", "col")``, used in the messages.
    tile: tile size per named dimension, e.g. ``{"row": 16, "col": None}``, to name tiles.
    seed: the seed of :func:`random_inputs`, quoted on failure.
    precision: ``"fp32"`` or a low precision (see module docstring); low precision needs
        ``same_precision_ref`` and uses ``atol`` (default ``1e-5 · max|ref|``).
    rtol: fp32 limit on the relative error.
    rows_sum_to_one: the last dimension holds probabilities (softmax-like) in the reference.
    hints: extra advice per detector name, shown when that detector fires (``"any"``: always).
    dtype: the dtype ``out`` must have (default float32 for ``fp32``, any number type otherwise).
    """
    out, ref, dims, tile, hints, same = _validate(out, ref, name, dims, tile, seed, precision,
                                                  same_precision_ref, atol, rtol,
                                                  rows_sum_to_one, hints, dtype)
    got = out.astype(np.float64)
    want = ref.astype(np.float64)
    n_total = got.size
    finite_ref = np.isfinite(want)
    diff = np.where(finite_ref, np.abs(got - np.where(finite_ref, want, 0.0)), 0.0)
    diff[np.isnan(diff)] = np.inf
    # Non-finite reference elements (a -inf mask, say) must be matched exactly.
    same_nonfinite = (np.isnan(want) & np.isnan(got)) | (np.isinf(want) & (got == want))
    bad_nonfinite = (finite_ref & ~np.isfinite(got)) | (~finite_ref & ~same_nonfinite)
    scale = float(np.max(np.abs(want[finite_ref]))) if finite_ref.any() else 0.0
    ref_norm = float(np.linalg.norm(want[finite_ref])) if finite_ref.any() else 0.0

    same_err = None
    if precision == "fp32":
        element_limit = (FP32_ELEMENT_RTOL * np.abs(np.where(finite_ref, want, 0.0))
                         + FP32_ELEMENT_ATOL * scale)
        limit_words = (f"rel_err <= {rtol:g} and every |out - ref| <= {FP32_ELEMENT_RTOL:g}|ref| + "
                       f"{FP32_ELEMENT_ATOL * scale:.2g}")
        noise = 1e-5
    else:
        same64 = same.astype(np.float64)
        same_diff = np.abs(same64 - want)[finite_ref]
        same_err = float(same_diff.max()) if same_diff.size else 0.0
        atol = LOWP_DEFAULT_ATOL * scale if atol is None else float(atol)
        element_limit = LOWP_FACTOR * same_err + atol
        limit_words = (f"every |out - ref| <= {LOWP_FACTOR:g} x {same_err:.3g} (same-precision NumPy "
                       f"error) + atol {atol:.2g}")
        noise = float(np.linalg.norm(same_diff)) / ref_norm if ref_norm > 0 else 1e-5
    wrong = bad_nonfinite | (diff > element_limit)
    n_wrong = int(wrong.sum())

    if bad_nonfinite.any():
        rel_err = max_abs = math.inf
    else:
        err_norm = float(np.linalg.norm(diff[finite_ref])) if finite_ref.any() else 0.0
        rel_err = err_norm / ref_norm if ref_norm > 0 else err_norm
        max_abs = float(diff.max()) if diff.size else 0.0
    passed = n_wrong == 0 and (precision != "fp32" or rel_err <= rtol)

    result = CheckResult(name=name, passed=passed, precision=precision, rel_err=rel_err,
                         max_abs_err=max_abs, n_wrong=n_wrong, n_total=n_total, limit=limit_words,
                         seed=None if seed is None else int(seed),
                         same_precision_max_abs_err=same_err)
    if passed:
        return result

    first = np.argmax(wrong) if n_wrong else np.argmax(diff)
    index = np.unravel_index(first, got.shape) if got.ndim else ()
    result.first_wrong = {d: int(i) for d, i in zip(dims, index)}
    result.where = _describe_index(index, dims, got.shape, tile)
    poisoned = is_poison(out)
    result.got = "poison (never written)" if poisoned[index] else float(got[index])
    result.expected = float(want[index])
    case = _Case(poisoned=poisoned, got=got, want=want, wrong=wrong, dims=dims, tile=tile, name=name,
                 rows_sum_to_one=rows_sum_to_one, tol=max(1e-3, 4 * noise), rel_err=rel_err,
                 rtol=rtol, precision=precision)
    result.causes, result.diagnoses = _diagnose(case, hints)
    raise CheckFailure(result)


def _describe_index(index, dims, shape, tile) -> str:
    parts = [f"{d} {i}" for d, i in zip(dims, index)]
    tiles = []
    for d, i, n in zip(dims, index, shape):
        if d in tile:
            t = tile[d]
            k = i // t
            tiles.append(f"{d} tile {k} = {d} {k * t}..{min(n, (k + 1) * t) - 1}")
    text = ", ".join(parts) if parts else "the single element"
    return text + (f" ({'; '.join(tiles)})" if tiles else "")


# --------------------------------------------------------------------------- detectors


@dataclass
class _Case:
    poisoned: np.ndarray  # bool mask of elements still holding the poison
    got: np.ndarray       # float64 copy of out
    want: np.ndarray      # float64 reference
    wrong: np.ndarray     # bool mask of wrong elements
    dims: tuple
    tile: dict
    name: str
    rows_sum_to_one: bool
    tol: float            # relative tolerance of the pattern fits (above rounding noise)
    rel_err: float
    rtol: float
    precision: str


def _diagnose(case: _Case, hints: dict) -> tuple[list[str], list[str]]:
    """Run every detector; return (keys of those that fired, messages in words)."""
    found, messages = [], []
    for key, detector in _DETECTOR_FUNCS:
        message = detector(case, found)
        if message:
            found.append(key)
            messages.append(f"{message} {hints[key]}" if key in hints else message)
    if not messages:
        messages.append("no simple pattern found: print a few wrong elements next to the reference "
                        "on a small case, and follow one of them through the kernel by hand")
    if "any" in hints:
        messages.append(hints["any"])
    return found, messages


def _unwritten(case: _Case, found) -> str | None:
    mask = case.poisoned & case.wrong
    k = int(mask.sum())
    if not k:
        return None
    message = (f"{k} elements were never written (they still hold the poison): is the grid large "
               "enough to cover every element, or is the bounds guard too strict?")
    for axis, dim in enumerate(case.dims):
        n = case.got.shape[axis]
        other = tuple(a for a in range(case.got.ndim) if a != axis)
        all_unwritten = mask.all(axis=other) if other else mask
        none_unwritten = ~mask.any(axis=other) if other else ~mask
        start = int(np.argmax(all_unwritten)) if all_unwritten.any() else n
        if 0 < start < n and all_unwritten[start:].all() and none_unwritten[:start].all():
            message += (f" Nothing was written at {dim} >= {start} (of {n}): the grid covers "
                        f"{dim} < {start} only; size it with a ceiling division, (n + tile - 1) // tile.")
            break
    return message


def _zeros(case: _Case, found) -> str | None:
    if "unwritten" in found or not (case.got == 0).all() or not (case.want != 0).any():
        return None
    return (f"{case.name} is all zeros: did the kernel run (kernel[grid, block](...)), and was the "
            "result copied back from the device (copy_to_host)?")


def _nonfinite(case: _Case, found) -> str | None:
    produced = ~np.isfinite(case.got) & np.isfinite(case.want) & ~case.poisoned
    if not produced.any():
        return None
    nans, infs = int(np.isnan(case.got[produced]).sum()), int(np.isinf(case.got[produced]).sum())
    return (f"the kernel produced {nans} NaN and {infs} inf where the reference is finite: exp of a "
            "large input overflows (exp(100) is 2.7e43, past float32's 3.4e38, and inf/inf is NaN), "
            "so subtract the row max before exp; a division by a zero sum (a row with every key "
            "masked) gives NaN too")


def _finite_pair(case: _Case):
    ok = np.isfinite(case.got) & np.isfinite(case.want)
    return case.got[ok], case.want[ok]


def _transposed(case: _Case, found) -> str | None:
    if case.got.ndim < 2 or case.got.shape[-1] != case.got.shape[-2] or case.got.shape[-1] < 2:
        return None
    if not (np.isfinite(case.want).all() and np.isfinite(case.got).all()):
        return None
    swapped = np.swapaxes(case.want, -1, -2)
    if np.array_equal(swapped, case.want):
        return None
    norm = np.linalg.norm(case.want)
    if norm == 0 or np.linalg.norm(case.got - swapped) > case.tol * norm:
        return None
    a, b = case.dims[-2], case.dims[-1]
    return (f"{case.name} is the transpose of the expected result ({a} and {b} swapped): somewhere "
            f"[{b}, {a}] is indexed instead of [{a}, {b}], or the x and y of the grid are exchanged")


_SIMPLE_K = tuple(range(2, 17)) + (24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256)


def _describe_factor(c: float) -> str:
    """``" (= 1/8 = 1/sqrt(64))"`` when c is a small integer, a head_dim's square root, or 1 over one."""
    for prefix, value in (("", c), ("1/", 1.0 / c)):
        for k in _SIMPLE_K:
            root = math.sqrt(k)
            if abs(value - root) <= 1e-3 * root:
                whole = math.isqrt(k) if math.isqrt(k) ** 2 == k else None
                return f" (= {prefix}{whole} = {prefix}sqrt({k}))" if whole else f" (= {prefix}sqrt({k}))"
        for k in _SIMPLE_K:
            if abs(value - k) <= 1e-3 * k:
                return f" (= {prefix}{k})"
    return ""


def _scale(case: _Case, found) -> str | None:
    g, r = _finite_pair(case)
    rr = float(r @ r)
    if rr == 0 or g.size < 2:
        return None
    c = float(g @ r) / rr
    if abs(c) < 1e-12 or abs(c - 1) <= case.tol:
        return None
    if np.linalg.norm(g - c * r) > case.tol * abs(c) * math.sqrt(rr):
        return None
    if abs(c + 1) <= case.tol:
        return f"{case.name} is the negative of the expected result: a sign is flipped"
    return (f"every element is off by the same factor {c:.4g}{_describe_factor(abs(c))}: a scale is "
            "missing, applied twice or inverted (e.g. the 1/sqrt(head_dim) of attention scores)")


def _rows(case: _Case):
    """The last dimension as rows: (got, want) reshaped to (rows, cols); None for 1-D or inf in ref."""
    if case.got.ndim < 2 or case.got.shape[-1] < 2 or not np.isfinite(case.want).all():
        return None
    cols = case.got.shape[-1]
    return case.got.reshape(-1, cols), case.want.reshape(-1, cols)


def _row_name(case: _Case, flat_row: int) -> str:
    index = np.unravel_index(flat_row, case.got.shape[:-1])
    return ", ".join(f"{d} {i}" for d, i in zip(case.dims[:-1], index))


def _temperature(case: _Case, found) -> str | None:
    rows = _rows(case)
    if not case.rows_sum_to_one or rows is None or "scale" in found:
        return None
    g, r = rows
    ok = (g > 0) & (r > 0) & np.isfinite(g)
    usable = ok.all(axis=1)
    if usable.sum() == 0:
        return None
    lg, lr = np.log(g[usable]), np.log(r[usable])
    x = lr - lr.mean(axis=1, keepdims=True)
    y = lg - lg.mean(axis=1, keepdims=True)
    xx = float((x * x).sum())
    if xx == 0:
        return None
    s = float((x * y).sum()) / xx
    if abs(s - 1) <= case.tol or np.linalg.norm(y - s * x) > case.tol * abs(s) * math.sqrt(xx):
        return None
    return (f"the rows are a softmax of logits multiplied by {s:.4g}{_describe_factor(abs(s))} too "
            "much: the scale applied before exp is missing or wrong (e.g. 1/sqrt(head_dim))")


def _row_sums(case: _Case, found) -> str | None:
    rows = _rows(case)
    if not case.rows_sum_to_one or rows is None:
        return None
    g, r = rows
    gs, rs = g.sum(axis=1), r.sum(axis=1)
    bad = ~(np.abs(gs - rs) <= max(1e-3, case.tol))
    if not bad.any():
        return None
    first = int(np.argmax(bad))
    message = (f"{int(bad.sum())} of {bad.size} rows do not sum like the reference (row at "
               f"{_row_name(case, first)} sums to {gs[first]:.6g}, expected {rs[first]:.6g}): "
               "is the running sum rescaled by exp(m_old - m_new) when the max changes, and is "
               "every key counted exactly once?")
    if rs[first] == 0:
        message += " A row with no allowed key must be all zeros."
    return message


def _row_scale(case: _Case, found) -> str | None:
    rows = _rows(case)
    if rows is None or {"scale", "row_sums", "temperature", "transposed"} & set(found):
        return None
    g, r = rows
    wrong_rows = case.wrong.reshape(g.shape).any(axis=1)
    if not wrong_rows.any() or not np.isfinite(g[wrong_rows]).all():
        return None
    gw, rw = g[wrong_rows], r[wrong_rows]
    rr = (rw * rw).sum(axis=1)
    if (rr == 0).any():
        return None
    c = (gw * rw).sum(axis=1) / rr
    resid = np.linalg.norm(gw - c[:, None] * rw, axis=1)
    if (np.abs(c) <= case.tol).any() or (resid > case.tol * np.abs(c) * np.sqrt(rr)).any():
        return None
    if c.size == 1:
        row = _row_name(case, int(np.flatnonzero(wrong_rows)[0]))
        which = f"the row at {row} is the right row times {c[0]:.4g}"
    else:
        which = (f"{c.size} rows are each the right row times a factor of their own "
                 f"(from {c.min():.4g} to {c.max():.4g})")
    return (f"{which}: the normalisation differs per row: is the running sum rescaled when the "
            "running max changes, and is each row divided by its own final sum?")


def _slices(case: _Case, found) -> str | None:
    if case.got.ndim < 3:
        return None
    lead = case.got.shape[:-2]
    per_slice = case.wrong.reshape(int(np.prod(lead)), -1).any(axis=1)
    k, m = int(per_slice.sum()), per_slice.size
    if k == 0 or k == m:
        return None
    names = case.dims[:-2]

    def label(flat):
        return "(" + ", ".join(f"{d} {i}" for d, i in zip(names, np.unravel_index(flat, lead))) + ")"

    wrong_ids = np.flatnonzero(per_slice)
    listed = ", ".join(label(i) for i in wrong_ids[:6]) + (", ..." if k > 6 else "")
    message = (f"only {k} of {m} ({', '.join(names)}) slices {'is' if k == 1 else 'are'} wrong: "
               f"{listed}; the others are "
               f"right. Check how the grid's y/z block indices map to {' and '.join(names)}"
               " (and, with grouped-query attention, the KV head h // group).")
    moved = _moved_slices(case, wrong_ids[:8], label)
    if moved:
        message += " " + moved
    return message


def _moved_slices(case: _Case, wrong_ids, label) -> str:
    """Name the reference slice that a wrong output slice holds instead, if any."""
    cols = case.got.shape[-2] * case.got.shape[-1]
    g = case.got.reshape(-1, cols)
    r = case.want.reshape(-1, cols)
    notes = []
    for i in wrong_ids:
        if not np.isfinite(g[i]).all():
            continue
        for j in range(r.shape[0]):
            if j != i and np.allclose(g[i], r[j], rtol=case.tol, atol=case.tol * np.abs(r[j]).max()):
                notes.append(f"{label(i)} holds what belongs at {label(j)}")
                break
    return ("; ".join(notes) + ".") if notes else ""


def _edge_dims(case: _Case):
    """Dimensions worth looking along: the last two, and any with a tile size."""
    for axis, dim in enumerate(case.dims):
        if (axis >= case.got.ndim - 2 or dim in case.tile) and case.got.shape[axis] > 1:
            yield axis, dim


def _wrong_indices(case: _Case, axis: int) -> np.ndarray:
    other = tuple(a for a in range(case.got.ndim) if a != axis)
    return np.flatnonzero(case.wrong.any(axis=other) if other else case.wrong)


def _localised(case: _Case) -> bool:
    return 0 < int(case.wrong.sum()) < case.wrong.size


def _first(case: _Case, found) -> str | None:
    if not _localised(case):
        return None
    for axis, dim in _edge_dims(case):
        idx = _wrong_indices(case, axis)
        if idx.size and (idx == 0).all():
            return (f"only {dim} 0 is wrong: the first {dim} is treated differently; a loop that "
                    "starts at 1, or an initial value (a running max of 0 instead of -inf, a sum "
                    "not reset) used in place of the first element?")
    return None


def _last(case: _Case, found) -> str | None:
    if not _localised(case):
        return None
    for axis, dim in _edge_dims(case):
        n = case.got.shape[axis]
        idx = _wrong_indices(case, axis)
        if idx.size and (idx == n - 1).all():
            return (f"only the last {dim} ({dim} {n - 1}) is wrong: an off-by-one at the end, "
                    f"like range(n - 1) or a guard `{dim} < n - 1` instead of `{dim} < n`")
    return None


def _tiles_of(case: _Case):
    for axis, dim in _edge_dims(case):
        if dim in case.tile:
            n, t = case.got.shape[axis], case.tile[dim]
            n_tiles = -(-n // t)
            if n_tiles > 1:
                yield dim, n, t, n_tiles, _wrong_indices(case, axis)


def _tile_edge(case: _Case, found) -> str | None:
    if not _localised(case):
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        start = (n_tiles - 1) * t
        if n % t and idx.size and (idx >= start).all():
            return (f"only the last {dim} tile is wrong ({dim} {start}..{n - 1}; {n} is not a multiple "
                    f"of the tile {t}, so that tile is partial): check the bounds at the tile edge: "
                    f"guard every load and store with `{dim} < n`, and load a neutral value (0, or "
                    "-inf for scores) where a tile runs past the end")
    return None


def _last_tile(case: _Case, found) -> str | None:
    if not _localised(case) or "tile_edge" in found:
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        if idx.size and (idx >= (n_tiles - 1) * t).all():
            return (f"only the last {dim} tile is wrong: does the loop over tiles stop one tile "
                    "early, or is the last tile's offset computed differently?")
    return None


def _first_tile(case: _Case, found) -> str | None:
    if not _localised(case) or "first" in found:
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        if idx.size and (idx < t).all():
            return (f"only the first {dim} tile ({dim} 0..{t - 1}) is wrong: the first pass through "
                    "the tile loop starts from a wrong state (running max 0 instead of -inf, an "
                    "accumulator not zeroed) or loads the first tile wrong")
    return None


def _tile_offset(case: _Case, found) -> str | None:
    if not _localised(case):
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        tiles_wrong = set((idx // t).tolist())
        if tiles_wrong == set(range(1, n_tiles)):
            return (f"every {dim} tile except the first is wrong: the tile offset (tile index x {t}) "
                    "is missing or wrong in one place, so later tiles read or write tile 0's elements")
    return None


def _tile_boundary(case: _Case, found) -> str | None:
    if not _localised(case):
        return None
    for dim, n, t, n_tiles, idx in _tiles_of(case):
        if t < 3 or not idx.size:
            continue
        position = idx % t
        for where, value in (("first", 0), ("last", t - 1)):
            if (position == value).all() and len(set((idx // t).tolist())) > 1:
                return (f"only the {where} {dim} of each tile is wrong: an off-by-one where tiles "
                        f"meet (a loop bound `< {t} - 1`, or a load index shifted by one)")
    return None


def _spread(case: _Case, found) -> str | None:
    if int(case.wrong.sum()) or case.precision != "fp32" or not math.isfinite(case.rel_err):
        return None
    return (f"no single element is far off, but the errors add up to rel_err {case.rel_err:.2e} "
            f"(limit {case.rtol:g}): is something computed in lower precision than float32 (a "
            "float16 accumulator, rounded inputs), or a term missing that is small everywhere?")


_DETECTOR_FUNCS = (
    ("unwritten", _unwritten), ("zeros", _zeros), ("nonfinite", _nonfinite),
    ("transposed", _transposed), ("scale", _scale), ("temperature", _temperature),
    ("row_sums", _row_sums), ("row_scale", _row_scale), ("slices", _slices),
    ("first", _first), ("last", _last), ("tile_edge", _tile_edge), ("last_tile", _last_tile),
    ("first_tile", _first_tile), ("tile_offset", _tile_offset), ("tile_boundary", _tile_boundary),
    ("spread", _spread),
)
DETECTORS = tuple(key for key, _ in _DETECTOR_FUNCS)
