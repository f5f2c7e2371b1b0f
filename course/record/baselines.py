"""The library baselines that recordings compare the course's kernels with: PyTorch on the GPU, in fp32.

Each function returns a callable of no arguments that launches torch's work on copies of the inputs
already on the GPU, ready for ``course.timing``. TF32 is turned off: the course's kernels compute in
true fp32, and so must the baseline they are measured against.
"""

from __future__ import annotations


def cuda_torch():
    """The torch module, built with CUDA and with TF32 off; a clear error otherwise."""
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError("recording needs PyTorch with CUDA for the baseline: pip install torch") from exc
    if not torch.cuda.is_available():
        raise RuntimeError("recording needs PyTorch built with CUDA for the baseline; this torch has none")
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def torch_sdpa(q, k, v, *, causal: bool, enable_gqa: bool = False):
    """torch's scaled_dot_product_attention on copies of host q, k, v (B, H, N, d) on the GPU;
    ``enable_gqa``: k and v have fewer heads than q, each serving a group of query heads."""
    torch = cuda_torch()
    tq, tk, tv = (torch.from_numpy(a).cuda() for a in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if enable_gqa:
        return lambda: sdpa(tq, tk, tv, is_causal=causal, enable_gqa=True)
    return lambda: sdpa(tq, tk, tv, is_causal=causal)


def torch_sdpa_on_device(q, k, v):
    """torch's scaled_dot_product_attention on tensors already on the GPU (q (B, H, 1, d) for a decode
    step, k and v (B, H, M, d)); the caller made them, e.g. gathered from a paged cache."""
    torch = cuda_torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(q, k, v)


def torch_sdpa_gqa_on_device(q, k, v):
    """``torch_sdpa_on_device`` with k and v of fewer heads than q (``enable_gqa=True``)."""
    torch = cuda_torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(q, k, v, enable_gqa=True)


def torch_softmax(x):
    """torch.softmax over the last axis of a copy of host x (rows, cols) on the GPU."""
    torch = cuda_torch()
    tx = torch.from_numpy(x).cuda()
    return lambda: torch.softmax(tx, dim=-1)


def torch_matmul(a, b, out=None):
    """torch.matmul of device arrays a (M, K) and b (K, N) (numba or torch), into ``out`` when given."""
    torch = cuda_torch()
    ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
    if out is None:
        return lambda: torch.matmul(ta, tb)
    tout = torch.as_tensor(out, device="cuda")
    return lambda: torch.matmul(ta, tb, out=tout)


def torch_transpose(x, out):
    """``out.copy_(x.t())`` on device arrays x (N, M) and out (M, N) (numba or torch)."""
    torch = cuda_torch()
    tx, tout = torch.as_tensor(x, device="cuda"), torch.as_tensor(out, device="cuda")
    return lambda: tout.copy_(tx.t())
