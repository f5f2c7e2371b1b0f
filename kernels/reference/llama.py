"""The layers of a llama block other than attention and the matrix products, in float64 (day 10).

- ``rmsnorm(x, weight, eps)``: x / sqrt(mean(x^2) + eps) * weight, over the last axis;
- ``rope_pairs(x, positions, base)``: x (T, heads, d), each pair (2i, 2i + 1) of a head rotated by the angle
  position / base^(2i / d) (the pairs of a GGUF file, whose Q and K rows llama.cpp's converter permuted);
- ``rope_table(context, head_dim, base)``: the cosines and sines of every angle, (context, d / 2, 2) float32, what
  a kernel reads instead of computing them;
- ``swiglu(gate, up)``: silu(gate) * up, silu(z) = z / (1 + exp(-z)).
"""

import numpy as np

from ._checks import _float64

__all__ = ["rmsnorm", "rope_pairs", "rope_table", "swiglu"]


def rmsnorm(x, weight, eps):
    """x (..., K), weight (K,), eps > 0 -> float64 (..., K): each row divided by its root mean square (with eps
    added to the mean square), times weight."""
    x = _float64(x, "x", None, "(..., K)")
    weight = _float64(weight, "weight", 1, "(K,)")
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have shape ({x.shape[-1]},), one per column of x, got {weight.shape}")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _angles(positions, head_dim, base):
    return np.asarray(positions, np.float64)[:, None] * float(base) ** (-np.arange(0, head_dim, 2) / head_dim)


def rope_pairs(x, positions, base):
    """x (T, heads, d) with d even, positions (T,) integers -> float64 (T, heads, d): (x[2i], x[2i + 1]) of every
    head turned by position / base^(2i / d): (x0 cos - x1 sin, x0 sin + x1 cos)."""
    x = _float64(x, "x", 3, "(T, heads, d)")
    positions = np.asarray(positions)
    if positions.shape != (x.shape[0],):
        raise ValueError(f"positions must have shape ({x.shape[0]},), one per token of x, got {positions.shape}")
    if x.shape[2] % 2:
        raise ValueError(f"x must have an even head_dim (its last dimension), got {x.shape[2]}")
    angles = _angles(positions, x.shape[2], base)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angles) - odd * np.sin(angles)
    out[..., 1::2] = even * np.sin(angles) + odd * np.cos(angles)
    return out


def rope_table(context, head_dim, base):
    """float32 (context, head_dim / 2, 2): [p, i] = (cos, sin) of p / base^(2i / head_dim), computed in float64."""
    if head_dim % 2 or head_dim <= 0:
        raise ValueError(f"head_dim must be a positive even number, got {head_dim}")
    angles = _angles(np.arange(context), head_dim, base)
    return np.stack([np.cos(angles), np.sin(angles)], axis=-1).astype(np.float32)


def swiglu(gate, up):
    """silu(gate) * up elementwise, silu(z) = z / (1 + exp(-z)); float64 of the common shape."""
    gate = _float64(gate, "gate", None, "(..., F)")
    up = _float64(up, "up", None, "(..., F)")
    if gate.shape != up.shape:
        raise ValueError(f"gate and up must have one shape, got {gate.shape} and {up.shape}")
    with np.errstate(over="ignore"):
        return gate / (1.0 + np.exp(-gate)) * up
