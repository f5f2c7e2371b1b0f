"""Matrix multiplication, the reference of the GEMM ladder."""

from ._checks import _float64

__all__ = ["gemm"]


def gemm(a, b):
    """Matrix product C = A B in float64.

    a: (M, K); b: (K, N). Returns: float64 (M, N).
    """
    a = _float64(a, "a", 2, "(M, K)")
    b = _float64(b, "b", 2, "(K, N)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape} (K = {a.shape[1]}), "
                         f"b is {b.shape} (K = {b.shape[0]})")
    # Naive traffic: C[i, j] reads row i of A and column j of B, so A is read N times and
    # B M times (2*M*N*K loads); C is written once (M*N stores).
    return a @ b
