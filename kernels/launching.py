"""What every launcher does before it launches: validate inputs, allocate or validate the output.

Launchers accept NumPy arrays (the simulator and quick checks) or numba device arrays (timing on a
GPU, where implicit host-device copies would be measured too); the output is of the same kind as
the first input. Shapes are checked against what the kernel indexes, so a kernel never reads or
writes out of bounds.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["require_float32", "output_array", "default_scale", "is_device_array"]


def is_device_array(a) -> bool:
    """True for a numba device array (real or simulated), False for a NumPy array."""
    return not isinstance(a, np.ndarray) and hasattr(a, "copy_to_host")


def _is_c_contiguous(a) -> bool:
    if isinstance(a, np.ndarray):
        return a.flags.c_contiguous
    return a.is_c_contiguous()


def require_float32(name: str, a, shape: tuple) -> tuple:
    """Check that ``a`` is a C-contiguous float32 array of ``shape``; return its actual shape.

    ``shape`` holds an int for each dimension that must match and ``None`` for a free one, e.g.
    ``(batch, heads, None, head_dim)``. Raises TypeError or ValueError naming ``name``.
    """
    if not (isinstance(a, np.ndarray) or is_device_array(a)):
        raise TypeError(f"{name} must be a NumPy array or a numba device array, got {type(a).__name__}")
    if np.dtype(a.dtype) != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {np.dtype(a.dtype)}")
    expected = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
    if len(a.shape) != len(shape):
        raise ValueError(f"{name} must have {len(shape)} dimensions {expected}, got shape {tuple(a.shape)}")
    for want, got in zip(shape, a.shape):
        if want is not None and want != got:
            raise ValueError(f"{name} must have shape {expected}, got {tuple(a.shape)}")
    if not _is_c_contiguous(a):
        raise ValueError(f"{name} must be C-contiguous (use np.ascontiguousarray), got a strided view")
    return tuple(a.shape)


def output_array(name: str, out, shape: tuple, like):
    """Return ``out`` after checking it, or a new float32 array of ``shape`` of the same kind as ``like``."""
    if out is None:
        if is_device_array(like):
            from numba import cuda

            return cuda.device_array(shape, dtype=np.float32)
        return np.empty(shape, dtype=np.float32)
    require_float32(name, out, shape)
    if is_device_array(out) != is_device_array(like):
        raise TypeError(f"{name} must be a {'device' if is_device_array(like) else 'NumPy'} array "
                        f"like the inputs, got {type(out).__name__}")
    return out


def default_scale(head_dim: int, scale) -> np.float32:
    """The softmax scale as float32: ``1/sqrt(head_dim)`` unless given (float32 keeps GPU math in float32)."""
    if scale is None:
        return np.float32(1.0 / math.sqrt(head_dim)) if head_dim else np.float32(1.0)
    if not isinstance(scale, (int, float, np.floating)) or isinstance(scale, bool):
        raise TypeError(f"scale must be a number or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return np.float32(scale)
