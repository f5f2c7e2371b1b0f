"""Input checks shared by every reference: each raises TypeError or ValueError naming the argument.

Private to ``kernels.reference``: the references import them relatively, so a private copy of the
package (the grader's ``pristine``) checks its inputs with its own private copy of this module.
"""

import math
import numbers

import numpy as np

# The low-precision float dtypes of ml_dtypes (bfloat16, float8_*) have numpy kind "V";
# they are accepted by name so that the references need nothing beyond numpy.
_ML_DTYPE_PREFIXES = ("bfloat16", "float8", "float6", "float4")


def _real_array(x, name, ndim=None, dims=None):
    """``x`` as an ndarray of real numbers (any int or float dtype), checked for ndim."""
    arr = np.asarray(x)
    kind_ok = arr.dtype.kind in "iuf" or arr.dtype.name.startswith(_ML_DTYPE_PREFIXES)
    if not kind_ok:
        raise TypeError(f"{name} must hold real numbers (an int or float dtype), got dtype {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        described = f" {dims}" if dims else ""
        raise ValueError(f"{name} must have {ndim} dimensions{described}, got shape {arr.shape}")
    return arr


def _float64(x, name, ndim=None, dims=None):
    """``x`` converted to float64, checked for ndim and for NaN or infinity."""
    arr = _real_array(x, name, ndim, dims).astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, but it contains NaN or infinity")
    return arr


def _int_array(x, name, shape=None, dims=None):
    """``x`` as an integer ndarray (any int dtype) of the given shape."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype (such as int32), got dtype {arr.dtype}")
    if shape is not None and arr.shape != tuple(shape):
        described = f" {dims}" if dims else ""
        raise ValueError(f"{name} must have shape {tuple(shape)}{described}, got shape {arr.shape}")
    return arr


def _int_scalar(value, name, minimum):
    """A Python or NumPy integer (not a bool) that is at least ``minimum``, as an int."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _check_bool(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _check_scale(scale, head_dim):
    """The softmax scale: 1/sqrt(head_dim) by default, else a finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__} {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _check_heads(heads, kv_heads, q_name="q", kv_name="k"):
    if kv_heads < 1 or heads < 1 or heads % kv_heads != 0:
        raise ValueError(
            f"the heads of {q_name} ({heads}) must be a positive multiple of the kv_heads of "
            f"{kv_name} ({kv_heads}), so that each KV head serves a whole group of query heads")


def _check_kv_lens(kv_lens, batch, M, name="kv_lens"):
    """How many keys exist per batch element (or tokens per sequence: ``name``), as int64 (batch,): all ``M``
    for None, else integers in [0, M]."""
    if kv_lens is None:
        return np.full(batch, M, dtype=np.int64)
    kv_lens = _int_array(kv_lens, name, (batch,), "(batch,)")
    if np.any(kv_lens < 0) or np.any(kv_lens > M):
        raise ValueError(f"{name} must lie in [0, M] = [0, {M}], got {kv_lens.tolist()}")
    return kv_lens.astype(np.int64)
