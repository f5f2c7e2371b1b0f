"""Check a kernel's output against a float64 reference and say, in words, what looks wrong.

One checking function for the whole course::

    rng, seed = random_inputs()                       # fresh inputs every check; the seed repeats them
    out = poison(np.empty(shape, np.float32))         # unwritten elements stay recognisable
    my_kernel[grid, block](x, out)
    check(out, ref, name="O", dims=("batch", "head", "row", "col"), tile={"row": 16}, seed=seed)

Policy (docs/design-notes.md section 5):

- ``precision="fp32"``: passes when the relative error ``‖out − ref‖ / ‖ref‖`` is at most ``rtol``
  (1e-4), no element is off by more than ``1e-3·|ref| + 1e-4·max|ref|``, and nothing is NaN/inf
  where the reference is finite. A row sum given with ``reduction=dict(op="sum", ...)`` also
  passes when every element is within float32's bound for summing its row in any order,
  ``gamma_(n-1)·Σ|x|``: a sum that cancels cannot be held to 1e-4 of itself. An output that is a sum
  of terms the caller knows (not a row of an input) gives that bound itself, ``rounding=``
  (``sum_rounding_bound(terms, extra_roundings)``), with the same effect.
- low precision (``"lowp"``, ``"fp16"``, ``"bf16"``, ``"fp8"``, ``"int8"``, ``"int4"``): passes when
  every element error is at most ``2 · max|same_precision_ref − ref| + atol``, where
  ``same_precision_ref`` is the same computation done in NumPy at the kernel's storage precision. An
  fp16 or bf16 output element may also be off by that element's own same-precision error plus one
  unit in the last place (of the format ``precision`` names, else of the output's): a float32 result
  near a rounding midpoint rounds to either neighbour.

On failure ``check`` raises :class:`CheckFailure` (an ``AssertionError``) whose message gives the
seed, how many elements are wrong, the first wrong element by named dimensions (and its tile), got
against expected, and the likely bugs that :mod:`course.diagnoses` finds. Context makes those
diagnoses specific (each keyword is optional):

- ``attention=dict(q=q, k=k, v=v, causal=True, kv_lens=lens)``: ``out`` is an attention output O;
  the asserts "row 0 sees only key 0" and "rows of an empty sequence are 0" run first, then the
  classic mistakes of the online softmax and of masking are tried against the output;
- ``reduction=dict(x=x, op="max", threads=64)``: ``out`` is a row reduction of ``x`` by blocks of
  ``threads`` threads;
- ``gemm=dict(a=a, b=b, tile_k=16)``: ``out`` is C = A B computed in steps of ``tile_k`` along K;
- ``kernel=my_kernel``: the kernel's source is read for barriers that not every thread reaches or
  that are missing; these are reported even when the output passes (the simulator runs threads in
  an order that hides most races), under the OK line and as a :class:`BarrierWarning`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from course.diagnoses import DETECTORS, Case, diagnose, kernel_findings

__all__ = ["random_inputs", "poison", "is_poison", "check", "sum_rounding_bound", "CheckResult", "CheckFailure",
           "BarrierWarning", "DETECTORS", "PRECISIONS", "FP32_RTOL"]

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


def _fresh_seed() -> int:
    """A seed from the operating system's entropy: what ``random_inputs()`` draws when given none. The course's
    tests replace it (``pytest --seed-base``) to run every check over seeds of their choosing."""
    return int(np.random.SeedSequence().entropy % (2**31))


def random_inputs(seed: int | None = None) -> tuple[np.random.Generator, int]:
    """Return a fresh NumPy Generator and the seed it was made from (a random seed when None).

    Pass the seed to :func:`check` so that a failure says how to repeat it.
    """
    if seed is None:
        seed = _fresh_seed()
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
    for unsigned). ``out`` is a NumPy array or a numba device array. A poisoned array is an output:
    the launch checks of grading (``course.gates``) let kernels write it.
    """
    from kernels.launching import note_output

    if not isinstance(out, np.ndarray):
        if hasattr(out, "copy_to_device"):  # a numba device array: poison a host copy and send it
            out.copy_to_device(poison(np.empty(out.shape, dtype=out.dtype)))
            return note_output(out)
        raise TypeError(f"out must be a NumPy array or a numba device array, got {type(out).__name__}")
    kind = _poison_value(out.dtype)
    if kind[0] == "bits":
        out.view(kind[1])[...] = kind[2]
    else:
        out[...] = kind[1]
    return note_output(out)


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
    label: str = ""                 # what was compared: the output's dtype under the fp32 rule, else precision
    warnings: list = field(default_factory=list)    # barrier mistakes found in the kernel's source

    def __str__(self) -> str:
        seed = f"seed {self.seed}" if self.seed is not None else "seed not given"
        label = self.label or self.precision
        if self.passed:
            text = (f"{self.name}: OK ({label}, rel_err {self.rel_err:.1e}, "
                    f"max abs err {self.max_abs_err:.1e}; {self.limit}; {seed})")
            if self.warnings:
                text += "\nbut the kernel's source has a bug the simulator hides:"
                text += "".join(f"\n  - {w}" for w in self.warnings)
            return text
        lines = [f"{self.name} does not match the reference ({label}, {seed})",
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


class BarrierWarning(UserWarning):
    """Issued by :func:`check` when the output passes but the kernel's source has a barrier mistake."""


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


_ATTENTION_KEYS = ("q", "k", "v", "causal", "kv_lens", "scale", "tile_q", "tile_kv")
_REDUCTION_KEYS = ("x", "op", "threads")


def _positive_int_or_none(value, arg: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{arg} must be a positive int or None, got {value!r}")
    return int(value)


def _attention_context(attention, out: np.ndarray) -> dict | None:
    """Validate ``attention=`` of :func:`check`; return it with float64 host arrays and defaults."""
    if attention is None:
        return None
    if not isinstance(attention, dict):
        raise TypeError(f"attention must be a dict such as dict(q=q, k=k, v=v, causal=True), "
                        f"got {type(attention).__name__}")
    unknown = set(attention) - set(_ATTENTION_KEYS)
    missing = {"q", "k", "v"} - set(attention)
    if unknown or missing:
        raise ValueError(f"attention takes the keys {_ATTENTION_KEYS} (q, k and v required); "
                         f"unknown {sorted(unknown)}, missing {sorted(missing)}")
    q, k, v = (_as_host_array(attention[key], f"attention['{key}']") for key in "qkv")
    for key, a in zip("qkv", (q, k, v)):
        _require_numeric(a, f"attention['{key}']")
        if a.ndim != 4:
            raise ValueError(f"attention['{key}'] must have 4 dimensions (batch, heads, seq, head_dim), "
                             f"got shape {a.shape}")
    if out.shape != q.shape:
        raise ValueError(f"attention['q'] must have the shape of out {out.shape} (O is shaped like Q), "
                         f"got {q.shape}")
    if k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
        raise ValueError(f"attention['k'] and attention['v'] must have shape (batch, heads, M, head_dim) "
                         f"= {q.shape[:2] + ('M', q.shape[3])}, got {k.shape} and {v.shape}")
    causal = attention.get("causal", False)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"attention['causal'] must be True or False, got {causal!r}")
    batch, n_keys = q.shape[0], k.shape[2]
    lens = attention.get("kv_lens")
    if lens is None:
        lens = np.full(batch, n_keys, dtype=np.int64)
    else:
        lens = _as_host_array(lens, "attention['kv_lens']")
        if lens.shape != (batch,) or not np.issubdtype(lens.dtype, np.integer):
            raise ValueError(f"attention['kv_lens'] must be ints of shape ({batch},), got "
                             f"{lens.dtype} of shape {lens.shape}")
        lens = np.clip(lens.astype(np.int64), 0, n_keys)
    scale = attention.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3]) if q.shape[3] else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not scale > 0:
        raise ValueError(f"attention['scale'] must be a positive number or None, got {scale!r}")
    return {"q": q.astype(np.float64), "k": k.astype(np.float64), "v": v.astype(np.float64),
            "causal": bool(causal), "kv_lens": lens, "scale": float(np.float32(scale)),
            "tile_q": _positive_int_or_none(attention.get("tile_q"), "attention['tile_q']"),
            "tile_kv": _positive_int_or_none(attention.get("tile_kv"), "attention['tile_kv']")}


def _reduction_context(reduction, out: np.ndarray) -> dict | None:
    """Validate ``reduction=`` of :func:`check`; return it with x as a float64 host array."""
    if reduction is None:
        return None
    if not isinstance(reduction, dict):
        raise TypeError(f"reduction must be a dict such as dict(x=x, op='max', threads=64), "
                        f"got {type(reduction).__name__}")
    if set(reduction) != set(_REDUCTION_KEYS):
        raise ValueError(f"reduction takes exactly the keys {_REDUCTION_KEYS}, got {sorted(reduction)}")
    x = _as_host_array(reduction["x"], "reduction['x']")
    _require_numeric(x, "reduction['x']")
    if x.ndim != 2 or out.shape != x.shape[:1]:
        raise ValueError(f"reduction['x'] must be (rows, cols) with rows = len(out) = {out.shape}, "
                         f"got shape {x.shape}")
    if reduction["op"] not in ("max", "sum"):
        raise ValueError(f"reduction['op'] must be 'max' or 'sum', got {reduction['op']!r}")
    threads = _positive_int_or_none(reduction["threads"], "reduction['threads']")
    if threads is None or threads & (threads - 1):
        raise ValueError(f"reduction['threads'] must be a power of two (a tree halves it), got {threads!r}")
    return {"x": x.astype(np.float64), "op": reduction["op"], "threads": threads}


def _storage_ulp(dtype: np.dtype, values: np.ndarray, precision: str = "lowp") -> np.ndarray | None:
    """One unit in the last place of ``values`` in the 2-byte float storage format (fp16, bf16) an output of
    ``dtype`` holds, else None. The format is the one ``precision`` names where it names one: a bf16 output
    judged as fp16 is allowed fp16's unit, not its own (8 times larger)."""
    if dtype.itemsize != 2 or dtype.kind not in "fV":     # fp16 is "f", ml_dtypes' bf16 "V"
        return None
    import ml_dtypes

    dtype = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}.get(precision, dtype)
    try:
        info = ml_dtypes.finfo(dtype)
    except (ValueError, TypeError):                         # another 2-byte record type
        return None
    magnitude = np.abs(np.where(np.isfinite(values), values, 0.0))
    exponent = np.floor(np.log2(np.maximum(magnitude, float(info.smallest_normal))))
    return np.exp2(exponent - info.nmant)


def sum_rounding_bound(terms, extra_roundings: int = 0) -> np.ndarray:
    """Per sum, the most a float32 sum of ``terms`` (the last axis holds one sum's n terms) can be off from the
    exact sum, in any order, when each term carries up to ``extra_roundings`` roundings of its own (a term made
    by multiplying float32 numbers): gamma_(n-1+extra) times the sum of the terms' magnitudes.

    Every float32 operation rounds by at most half a unit in the last place (2^-24 relative) of its
    result, and no partial sum exceeds the sum of magnitudes, so n elements added in any order (a
    loop, a tree, a warp's butterfly) stay within gamma_(n-1) * sum|x| of the exact sum
    (Higham, Accuracy and Stability of Numerical Algorithms, sections 3.1 and 4.2). Where a sum
    cancels, that bound is far above 1e-4 of the sum: correct float32 work must not fail there.
    """
    terms = np.asarray(terms, np.float64)
    if isinstance(extra_roundings, bool) or not isinstance(extra_roundings, int) or extra_roundings < 0:
        raise ValueError(f"extra_roundings must be an int >= 0, got {extra_roundings!r}")
    u = 2.0 ** -24
    n = max(terms.shape[-1] - 1, 0) + extra_roundings
    gamma = n * u / (1 - n * u)
    return gamma * np.abs(terms).sum(axis=-1)


def _sum_rounding_bound(reduction: dict | None) -> np.ndarray | None:
    """Per row, the most a float32 sum of the row's elements can be off, in any order, or None
    (``sum_rounding_bound`` of the rows of a sum reduction's x)."""
    if reduction is None or reduction["op"] != "sum":
        return None
    return sum_rounding_bound(reduction["x"])


def _gemm_context(gemm, out: np.ndarray) -> dict | None:
    """Validate ``gemm=`` of :func:`check`; return a and b as float64 host arrays."""
    if gemm is None:
        return None
    if not isinstance(gemm, dict) or not {"a", "b"} <= set(gemm) <= {"a", "b", "tile_k"}:
        raise ValueError("gemm must be a dict with the keys a, b and optionally tile_k, such as "
                         f"dict(a=a, b=b, tile_k=16), got {gemm!r:.80}")
    a = _as_host_array(gemm["a"], "gemm['a']")
    b = _as_host_array(gemm["b"], "gemm['b']")
    _require_numeric(a, "gemm['a']")
    _require_numeric(b, "gemm['b']")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"gemm['a'] (M, K) and gemm['b'] (K, N) must multiply to out's shape {out.shape}, "
                         f"got {a.shape} and {b.shape}")
    return {"a": a.astype(np.float64), "b": b.astype(np.float64),
            "tile_k": _positive_int_or_none(gemm.get("tile_k"), "gemm['tile_k']")}


def _kernel_source_notes(kernel) -> list:
    if kernel is None:
        return []
    if not callable(kernel):
        raise TypeError(f"kernel must be a @cuda.jit kernel or a function, got {type(kernel).__name__}")
    return kernel_findings(kernel)


# --------------------------------------------------------------------------- check


def check(out, ref, *, name: str = "out", dims=None, tile=None, seed: int | None = None,
          precision: str = "fp32", same_precision_ref=None, atol: float | None = None,
          rtol: float = FP32_RTOL, rows_sum_to_one: bool = False, hints: dict | None = None,
          dtype=None, attention: dict | None = None, reduction: dict | None = None,
          gemm: dict | None = None, kernel=None, rounding=None) -> CheckResult:
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
    attention: for an attention output O (batch, heads, N, head_dim), the inputs and the mask:
        ``dict(q=q, k=k, v=v, causal=False, kv_lens=None, scale=None, tile_q=None, tile_kv=None)``
        (scale defaults to 1/sqrt(head_dim); tile sizes let the diagnoses name tile mistakes).
        On failure the asserts "row 0 sees only key 0" (causal) and "rows of an empty sequence are
        0" come first, then the classic mistake whose NumPy model the output matches, if any.
    reduction: for a row reduction out (rows,) of x (rows, cols) by blocks of ``threads`` threads:
        ``dict(x=x, op="max" or "sum", threads=64)``.
    gemm: for C = A B (M, N) computed in steps of ``tile_k`` along K: ``dict(a=a, b=b, tile_k=16)``.
    rounding: for an output whose elements are float32 sums of terms the caller knows, the most each
        may be off by rounding alone (``sum_rounding_bound(terms, extra_roundings)``, out's shape); as
        ``reduction``'s sum, an output within it everywhere is not held to ``rtol``. Not with ``reduction``.
    kernel: the kernel that produced ``out``; its source is read for barrier mistakes, reported as
        a likely cause on failure and, when the output passes, under the OK line and as a
        :class:`BarrierWarning`.
    """
    out, ref, dims, tile, hints, same = _validate(out, ref, name, dims, tile, seed, precision,
                                                  same_precision_ref, atol, rtol,
                                                  rows_sum_to_one, hints, dtype)
    attention = _attention_context(attention, out)
    reduction = _reduction_context(reduction, out)
    if rounding is not None:
        if reduction is not None or precision != "fp32":
            raise ValueError("rounding is for fp32 outputs without a sum's reduction context (whose rows give the "
                             f"bound), got precision {precision!r} and reduction {'given' if reduction else None}")
        rounding = _as_host_array(rounding, "rounding").astype(np.float64)
        if rounding.shape != out.shape or not np.all(rounding >= 0):
            raise ValueError(f"rounding must be a bound >= 0 per element of out, shape {out.shape}, got shape "
                             f"{rounding.shape}")
    gemm = _gemm_context(gemm, out)
    kernel_notes = _kernel_source_notes(kernel)
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
        if rounding is None:
            rounding = _sum_rounding_bound(reduction)
        if rounding is not None:
            element_limit = np.maximum(element_limit, rounding)
            limit_words += (", or within float32's bound for a sum of the row in any order" if reduction is not None
                            else ", or within float32's bound for a sum of its terms")
        noise = 1e-5
    else:
        same64 = same.astype(np.float64)
        same_diff = np.abs(same64 - want)[finite_ref]
        same_err = float(same_diff.max()) if same_diff.size else 0.0
        atol = LOWP_DEFAULT_ATOL * scale if atol is None else float(atol)
        element_limit = LOWP_FACTOR * same_err + atol
        limit_words = (f"every |out - ref| <= {LOWP_FACTOR:g} x {same_err:.3g} (same-precision NumPy "
                       f"error) + atol {atol:.2g}")
        ulp = _storage_ulp(out.dtype, same64, precision)
        if ulp is not None:
            # A float32 result within a hair of a rounding midpoint may be stored as either neighbour: one
            # unit in the last place beyond the same-precision answer's own error is rounding, not a bug.
            own = np.where(finite_ref, np.abs(same64 - np.where(finite_ref, want, 0.0)), 0.0)
            element_limit = np.maximum(element_limit, own + ulp + atol)
            unit = precision if precision in ("fp16", "bf16") else out.dtype.name
            limit_words += f", or off by its own same-precision error plus one {unit} unit in the last place"
        noise = float(np.linalg.norm(same_diff)) / ref_norm if ref_norm > 0 else 1e-5
    wrong = bad_nonfinite | (diff > element_limit)
    n_wrong = int(wrong.sum())

    if bad_nonfinite.any():
        rel_err = max_abs = math.inf
    else:
        err_norm = float(np.linalg.norm(diff[finite_ref])) if finite_ref.any() else 0.0
        rel_err = err_norm / ref_norm if ref_norm > 0 else err_norm
        max_abs = float(diff.max()) if diff.size else 0.0
    # A sum that cancels can be far from the reference in relative terms and still be what float32
    # gives in any order; within that bound everywhere, rel_err is not held against it.
    within_rounding = rounding is not None and bool(np.all(diff <= rounding))
    passed = n_wrong == 0 and (precision != "fp32" or rel_err <= rtol or within_rounding)

    result = CheckResult(name=name, passed=passed, precision=precision, rel_err=rel_err,
                         max_abs_err=max_abs, n_wrong=n_wrong, n_total=n_total, limit=limit_words,
                         seed=None if seed is None else int(seed),
                         same_precision_max_abs_err=same_err,
                         label=out.dtype.name if precision == "fp32" else precision,
                         warnings=[message for _, message in kernel_notes])
    if passed:
        if result.warnings:
            # Also as a Python warning: a notebook shows it even when the result is not printed.
            warnings.warn(str(result), BarrierWarning, stacklevel=2)
        return result

    first = np.argmax(wrong) if n_wrong else np.argmax(diff)
    index = np.unravel_index(first, got.shape) if got.ndim else ()
    result.first_wrong = {d: int(i) for d, i in zip(dims, index)}
    result.where = _describe_index(index, dims, got.shape, tile)
    poisoned = is_poison(out)
    result.got = "poison (never written)" if poisoned[index] else float(got[index])
    result.expected = float(want[index])
    case = Case(poisoned=poisoned, got=got, want=want, wrong=wrong, dims=dims, tile=tile, name=name,
                rows_sum_to_one=rows_sum_to_one, tol=max(1e-3, 4 * noise), rel_err=rel_err,
                rtol=rtol, precision=precision, attention=attention, reduction=reduction,
                gemm=gemm, kernel_notes=kernel_notes)
    result.warnings = []
    result.causes, result.diagnoses = diagnose(case, hints)
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
