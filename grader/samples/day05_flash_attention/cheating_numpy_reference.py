"""Cheating: a kernel whose single thread computes everything with the NumPy reference. Right
answers on the simulator, but the kernel reads no element of K or V: 0/10."""

EXPECT = {
    "status": "graded",
    "points": {
        "flash_matches_reference_full": 0,
        "flash_matches_reference_causal": 0,
        "flash_handles_kv_lens": 0,
        "flash_is_numerically_stable": 0,
        "flash_traffic_fits_tiling": 0,
        "flash_skips_masked_tiles": 0,
    },
}

CELLS = {
    "flash_kernel": '''\
@cuda.jit
def attention_v4_flash_kernel(q, k, v, kv_lens, o, scale, causal):
    """One thread hands the whole problem to the NumPy reference (runs only on the simulator)."""
    if cuda.threadIdx.x == 0 and cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.blockIdx.z == 0:
        from kernels import reference
        o[:, :, :, :] = reference.attention(np.asarray(q[:, :, :, :]), np.asarray(k[:, :, :, :]),
                                            np.asarray(v[:, :, :, :]), causal=bool(causal),
                                            kv_lens=np.asarray(kv_lens[:]), scale=float(scale))
''',
}
