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


def torch_int_mm(a, w):
    """``torch._int_mm`` (cuBLAS's int8 GEMM, int32 out) of device arrays a (M, K) and w (N, K) int8 (numba or
    torch): a times w's transpose, which a row-major w makes column-major, the layout its fast path wants."""
    torch = cuda_torch()
    ta, tw = torch.as_tensor(a, device="cuda"), torch.as_tensor(w, device="cuda")
    return lambda: torch._int_mm(ta, tw.t())


def torch_int_mm_scaled(a, sa, w, sw):
    """``torch._int_mm`` as above, then its int32 sums scaled per token and per channel in float32 (the
    epilogue a W8A8 layer needs, as separate torch operations)."""
    torch = cuda_torch()
    ta, tw = torch.as_tensor(a, device="cuda"), torch.as_tensor(w, device="cuda")
    tsa, tsw = torch.as_tensor(sa, device="cuda")[:, None], torch.as_tensor(sw, device="cuda")[None, :]
    return lambda: torch._int_mm(ta, tw.t()).float() * tsa * tsw


def torch_transpose(x, out):
    """``out.copy_(x.t())`` on device arrays x (N, M) and out (M, N) (numba or torch)."""
    torch = cuda_torch()
    tx, tout = torch.as_tensor(x, device="cuda"), torch.as_tensor(out, device="cuda")
    return lambda: tout.copy_(tx.t())


def torch_mv(w, x, out=None):
    """torch.mv of device arrays w (N, K) and x (K,) (numba or torch, any one float dtype: fp16 for the GEMV
    a quantized one is compared with), into ``out`` (N,) when given."""
    torch = cuda_torch()
    tw, tx = torch.as_tensor(w, device="cuda"), torch.as_tensor(x, device="cuda")
    if out is None:
        return lambda: torch.mv(tw, tx)
    tout = torch.as_tensor(out, device="cuda")
    return lambda: torch.mv(tw, tx, out=tout)


INT4PACK_INNER_K_TILES = 8     # torch's tinygemm layout: 2, 4 or 8 tiles of 16 along K per packed row


def torch_weight_int4pack_mm(codes, scales, minimums, x, *, group_size: int = 32):
    """torch's own int4 weight-only kernel, ``torch._weight_int4pack_mm`` (tinygemm), for y = W x at batch 1.

    W (N, K) is given as Q4_1 gives it: ``codes`` (N, K) integers 0 ... 15, ``scales`` and ``minimums``
    (N, K // group_size), weight = scale code + minimum. tinygemm's weight is (code - 8) scale + zero, so
    zero = minimum + 8 scale; its scales and zeros are bf16 (K // group_size, N, 2) and x a bf16 (1, K). The
    codes are packed by ``torch._convert_weight_to_int4pack`` (uint8 (N, K / 2), two codes a byte, the even
    one high, as torch 2.5 on takes them; an int32 (N, K) for older torch). Host arrays (NumPy).

    Returns a callable of no arguments giving y (1, N) bf16; raises RuntimeError saying why where this torch
    or this GPU has no such kernel (the op missing, or refusing these shapes).
    """
    import numpy as np

    torch = cuda_torch()
    op = getattr(torch, "_weight_int4pack_mm", None)
    convert = getattr(torch, "_convert_weight_to_int4pack", None)
    if op is None or convert is None:
        raise RuntimeError(f"torch {torch.__version__} has no torch._weight_int4pack_mm or "
                           "torch._convert_weight_to_int4pack")
    codes = np.asarray(codes, np.uint8)
    n, k = codes.shape
    scales, minimums = np.asarray(scales, np.float32), np.asarray(minimums, np.float32)
    zeros = minimums + 8 * scales
    scales_and_zeros = (torch.from_numpy(np.stack([scales, zeros], axis=2)).to(torch.bfloat16)
                        .transpose(0, 1).contiguous().cuda())
    tx = torch.from_numpy(np.asarray(x, np.float32).reshape(1, k)).to(torch.bfloat16).cuda()
    errors = []
    packed = None
    for layout in ("uint8", "int32"):
        try:
            if layout == "uint8":
                pairs = (codes[:, ::2] << 4 | codes[:, 1::2]).astype(np.uint8)
                packed = convert(torch.from_numpy(pairs).cuda(), INT4PACK_INNER_K_TILES)
            else:
                packed = convert(torch.from_numpy(codes.astype(np.int32)).cuda(), INT4PACK_INNER_K_TILES)
            op(tx, packed, group_size, scales_and_zeros)
            torch.cuda.synchronize()
            break
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as why:
            said = str(why).splitlines()[0][:200] if str(why) else type(why).__name__
            errors.append(f"{layout} codes: {said}")
            packed = None
    if packed is None:
        raise RuntimeError(f"torch {torch.__version__}: torch._weight_int4pack_mm refused N={n}, K={k}, "
                           f"group {group_size}: " + "; ".join(errors))
    return lambda: op(tx, packed, group_size, scales_and_zeros)
