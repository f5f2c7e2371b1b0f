"""Choosing the next token from a step's logits: greedy, or sampled with a temperature and nucleus (top-p).

- greedy (``temperature == 0``): the token of the largest logit (the first of equal ones);
- sampling: softmax(logits / temperature) in float64, then, with ``top_p < 1``, only the smallest set of the
  most probable tokens whose probabilities add up to ``top_p`` or more (ties at the edge kept in id order),
  renormalized; one draw from ``rng`` (a ``numpy.random.Generator``: a seed gives the same text again).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sample"]


def sample(logits, rng: np.random.Generator | None = None, *, temperature: float = 0.0, top_p: float = 1.0) -> int:
    """The next token's id from ``logits`` (vocab,); see the module's docstring. Bad arguments are named."""
    logits = np.asarray(logits, np.float64)
    if logits.ndim != 1 or not logits.size:
        raise ValueError(f"logits must be one non-empty row (vocab,), got shape {logits.shape}")
    if not np.isfinite(logits).all():
        raise ValueError("logits must be finite: the forward pass produced NaN or infinity")
    if not temperature >= 0:
        raise ValueError(f"temperature must be 0 (greedy) or positive, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0:
        return int(np.argmax(logits))
    if rng is None:
        raise ValueError("rng (a numpy.random.Generator) is needed to sample with a temperature")
    z = logits / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1:
        order = np.argsort(-p, kind="stable")
        cumulative = np.cumsum(p[order])
        keep = order[:int(np.searchsorted(cumulative, top_p)) + 1]
        kept = np.zeros_like(p)
        kept[keep] = p[keep]
        p = kept / kept.sum()
    return int(rng.choice(p.size, p=p))
