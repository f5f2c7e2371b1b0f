"""Day 5 kernels (kernels/flash_attention.py): correctness on awkward shapes, counted traffic, bad input.

Sizes are small for the simulator: head_dim 4 to 16, one or two query tiles per head. v6 runs with its
default tiling for these head dims (blocks of 8 threads), and once with each tiling the GPU uses.
"""

import math
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from course.checking import check, poison, random_inputs
from course.models import attention as model
from course.traffic import count_traffic
from kernels import reference
from kernels.flash_attention import (HEAD_DIM_MAX, SHARED_BYTES_MAX, TILE_KV, TILE_Q, V6_HEAD_DIM_MAX, V6_TILING_64,
                                     V6_TILING_128, Tiling, attention_v3_tiled, attention_v4_flash,
                                     attention_v5_flash_registers, attention_v5_flash_registers_kernel,
                                     attention_v6_register_tiles, attention_v6_register_tiles_kernel, flash_grid,
                                     shared_bytes_per_block, v6_grid, v6_shared_bytes, v6_tiling)

# v5 is v4 with head_dim fixed at compile time, v6 the same algorithm in register tiles: every v4
# check holds for them too.
FLASH_RUNGS = pytest.mark.parametrize("flash", [attention_v4_flash, attention_v5_flash_registers,
                                                attention_v6_register_tiles], ids=["v4", "v5", "v6"])


def tile_q(flash, head_dim):
    """Query rows per block of a flash rung: TILE_Q, or v6's block_q for this head_dim."""
    return v6_tiling(head_dim).block_q if flash is attention_v6_register_tiles else TILE_Q

DIMS = ("batch", "head", "row", "col")


def qkv(B, H, N, M, d, seed=None, large_logits=False):
    """Random q (B, H, N, d), k, v (B, H, M, d) float32 and the seed.

    large_logits: integer q and k of up to 50, so q·k reaches about 1e4 and is exact in float32.
    """
    rng, seed = random_inputs(seed)
    if large_logits:
        q, k = (rng.integers(-50, 51, (B, H, n, d)).astype(np.float32) for n in (N, M))
    else:
        q, k = (rng.standard_normal((B, H, n, d), dtype=np.float32) for n in (N, M))
    v = rng.standard_normal((B, H, M, d), dtype=np.float32)
    return q, k, v, seed


def keys_loaded_per_head(N, M, kv_len, causal, tile=TILE_Q):
    """Key rows a (batch, head) of the tiled kernels loads: each query tile loads its key range once.

    Causal: up to the tile's last query row that exists, so the last, partial tile of N rows stops
    at key N - 1 even when M > N.
    """
    total = 0
    for tile_start in range(0, N, tile):
        end = min(kv_len, M)
        if causal:
            end = min(end, tile_start + tile, N)
        total += max(end, 0)
    return total


def test_v3_matches_reference_on_awkward_shapes():
    q, k, v, seed = qkv(2, 1, 70, 50, 12)
    out = attention_v3_tiled(q, k, v, out=poison(np.empty_like(q)))
    check(out, reference.attention(q, k, v), name="O of v3", dims=DIMS, tile={"row": TILE_Q}, seed=seed)


SHAPES = [
    (2, 1, 70, 50, 8, False, None),            # more queries than keys, neither a multiple of a tile
    (1, 2, 100, 100, 8, True, None),           # the diagonal crosses two key tiles per query tile
    (3, 1, 70, 70, 5, True, [0, 1, 45]),       # empty, length-1 and off-tile sequences, causal
    (3, 1, 40, 90, 6, False, [0, 33, 90]),     # kv_lens with more keys than queries
    (1, 1, 40, 70, 4, True, None),             # causal with N != M is top-left aligned
    (1, 1, 1, 1, 4, True, None),               # a single query and key
]
# v6 skips the two largest shapes (its simulated blocks are the slowest): with its default tiling here
# (32 rows, 16 keys) the third already crosses two key tiles per query tile, and the registry's test
# (tests/test_kernels_pattern.py) runs it with more queries than keys.
V6_SHAPES = SHAPES[2:]


@pytest.mark.parametrize("flash, B, H, N, M, d, causal, kv_lens", [
    pytest.param(flash, *shape, id=f"{rung}-{i}")
    for rung, flash, shapes in (("v4", attention_v4_flash, SHAPES), ("v5", attention_v5_flash_registers, SHAPES),
                                ("v6", attention_v6_register_tiles, V6_SHAPES))
    for i, shape in enumerate(shapes, start=len(SHAPES) - len(shapes))])
def test_flash_matches_reference(flash, B, H, N, M, d, causal, kv_lens):
    q, k, v, seed = qkv(B, H, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    out = flash(q, k, v, causal=causal, kv_lens=lens, out=poison(np.empty_like(q)))
    ref = reference.attention(q, k, v, causal=causal, kv_lens=lens)
    check(out, ref, name=f"O of {flash.__name__} causal={causal} kv_lens={kv_lens}", dims=DIMS,
          tile={"row": tile_q(flash, d)}, seed=seed)
    if lens is not None:
        assert np.all(out[lens == 0] == 0.0), "rows of an empty sequence must be exactly 0"


@FLASH_RUNGS
def test_flash_large_logits_do_not_overflow(flash):
    # Logits of about 1e4 before scaling: without subtracting the running max, exp overflows.
    q, k, v, seed = qkv(1, 1, 70, 70, 16, large_logits=True)
    assert np.abs(np.einsum("bhid,bhjd->bhij", q, k)).max() > 5e3
    out = flash(q, k, v, causal=True, out=poison(np.empty_like(q)))
    check(out, reference.attention(q, k, v, causal=True), name="O, logits ~1e4", dims=DIMS, seed=seed)


def test_v4_accepts_device_arrays_and_gives_one_back():
    from numba import cuda

    q, k, v, seed = qkv(1, 1, 20, 20, 4)
    lens = cuda.to_device(np.array([13], dtype=np.int32))
    out = attention_v4_flash(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), kv_lens=lens)
    assert hasattr(out, "copy_to_host")
    ref = reference.attention(q, k, v, kv_lens=np.array([13]))
    check(out.copy_to_host(), ref, name="O from device arrays", dims=DIMS, seed=seed)


def test_v3_traffic_equals_the_flash_model():
    B, H, N, d = 1, 2, 130, 4
    q, k, v, _ = qkv(B, H, N, N, d)
    with count_traffic() as t:
        attention_v3_tiled(q, k, v)
    assert t.launches == 1
    assert t.global_bytes == model.bytes_flash(B, H, N, d, TILE_Q)
    assert t.global_stores["o"] == B * H * N * d  # the output once, nothing of size N x N
    assert t.global_loads["k"] == B * H * math.ceil(N / TILE_Q) * N * d


@pytest.mark.parametrize("causal, kv_lens, M", [(False, None, 130), (True, None, 130), (True, [97], 130),
                                                (False, [0], 130), (True, None, 170)])
@pytest.mark.parametrize("flash", [attention_v4_flash, attention_v5_flash_registers], ids=["v4", "v5"])
def test_flash_loads_only_the_key_tiles_it_needs(flash, causal, kv_lens, M):
    B, H, N, d = 1, 2, 130, 4
    q, k, v, _ = qkv(B, H, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    with count_traffic() as t:
        flash(q, k, v, causal=causal, kv_lens=lens)
    check_key_tiles_loaded(t, B, H, N, M, d, TILE_Q, causal, lens)


def check_key_tiles_loaded(t, B, H, N, M, d, tile, causal, lens):
    """The loads counted in ``t`` are those of a flash kernel with query tiles of ``tile`` rows."""
    kv_len = M if lens is None else lens[0]
    expected = B * H * keys_loaded_per_head(N, M, kv_len, causal, tile) * d
    assert t.global_loads["k"] == t.global_loads["v"] == expected
    assert t.global_loads["q"] == B * H * N * d
    assert t.global_stores["o"] == B * H * N * d
    moved = sum(t.global_loads[a] for a in "qkv") + t.global_stores["o"]
    assert moved * 4 == model.bytes_flash_tiles(B, H, N, d, tile, M, causal=causal, kv_lens=lens)
    if causal:  # tile skipping: fewer keys than every query tile reading all N (half, for large N)
        assert expected < B * H * math.ceil(N / tile) * N * d


@pytest.mark.parametrize("causal, kv_lens, M", [(True, [61], 90), (False, None, 45)])
def test_v6_loads_only_the_key_tiles_it_needs(causal, kv_lens, M):
    """v6's counted traffic, on fewer and smaller cases than v4's (the simulator counts every access)."""
    B, H, N, d = 1, 1, 70, 4
    q, k, v, _ = qkv(B, H, N, M, d)
    lens = None if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    with count_traffic() as t:
        attention_v6_register_tiles(q, k, v, causal=causal, kv_lens=lens)
    check_key_tiles_loaded(t, B, H, N, M, d, v6_tiling(d).block_q, causal, lens)


def test_grid_and_shared_memory_sizes():
    assert flash_grid(4, 16, 4096) == (4096 // TILE_Q, 16, 4)
    assert flash_grid(1, 1, TILE_Q + 1) == (2, 1, 1)
    assert shared_bytes_per_block() == 2 * TILE_KV * HEAD_DIM_MAX * 4
    assert shared_bytes_per_block() <= 48 * 1024  # static shared memory limit of a block


@pytest.mark.parametrize("change, error, words", [
    (dict(q=np.zeros((1, 1, 8, 4), np.float64)), TypeError, "float32"),
    (dict(k=np.zeros((1, 2, 8, 4), np.float32)), ValueError, "k must have shape"),
    (dict(v=np.zeros((1, 1, 7, 4), np.float32)), ValueError, "v must have shape"),
    (dict(q=np.zeros((1, 1, 8, HEAD_DIM_MAX + 1), np.float32),
          k=np.zeros((1, 1, 8, HEAD_DIM_MAX + 1), np.float32),
          v=np.zeros((1, 1, 8, HEAD_DIM_MAX + 1), np.float32)), ValueError, "head_dim"),
    (dict(kv_lens=np.array([3, 4], np.int32)), ValueError, "kv_lens must have shape"),
    (dict(kv_lens=np.array([9], np.int32)), ValueError, "kv_lens must lie in"),
    (dict(kv_lens=np.array([-1], np.int32)), ValueError, "kv_lens must lie in"),
    (dict(kv_lens=np.array([2.0], np.float32)), TypeError, "kv_lens must hold integers"),
    (dict(kv_lens=[3]), TypeError, "kv_lens must be"),
    (dict(causal="yes"), TypeError, "causal"),
    (dict(out=np.zeros((1, 1, 8, 3), np.float32)), ValueError, "out must have shape"),
])
def test_v4_rejects_bad_input(change, error, words):
    args = dict(q=np.zeros((1, 1, 8, 4), np.float32), k=np.zeros((1, 1, 8, 4), np.float32),
                v=np.zeros((1, 1, 8, 4), np.float32))
    args.update(change)
    with pytest.raises(error, match=words):
        attention_v4_flash(**args)


def test_v4_rejects_mixed_host_and_device_arrays():
    from numba import cuda

    host = np.zeros((1, 1, 8, 4), np.float32)
    with pytest.raises(TypeError, match="all be NumPy arrays or all be device arrays"):
        attention_v4_flash(host, cuda.to_device(host), host)
    with pytest.raises(TypeError, match="kv_lens must be a NumPy array"):
        attention_v4_flash(host, host, host, kv_lens=cuda.to_device(np.array([3], np.int32)))
    device = cuda.to_device(host)
    with pytest.raises(ValueError, match="kv_lens must be int32 of shape"):
        attention_v4_flash(device, device, device, kv_lens=cuda.to_device(np.array([3], np.int64)))


def test_v4_clamps_device_kv_lens_to_the_keys_there_are():
    # Device lengths are not copied back to be validated; the kernel must still stay in bounds.
    from numba import cuda

    q, k, v, seed = qkv(2, 1, 20, 12, 4)
    lens = cuda.to_device(np.array([50, 5], dtype=np.int32))
    out = attention_v4_flash(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), kv_lens=lens)
    check(out.copy_to_host(), reference.attention(q, k, v, kv_lens=np.array([12, 5])), name="O", dims=DIMS,
          seed=seed)


def test_empty_shapes_launch_nothing():
    q = np.zeros((2, 1, 0, 4), np.float32)
    k = np.zeros((2, 1, 5, 4), np.float32)
    with count_traffic() as t:
        out = attention_v4_flash(q, k, k.copy())
    assert out.shape == (2, 1, 0, 4) and t.launches == 0


def test_v5_compiles_one_kernel_per_head_dim_and_rejects_others():
    assert attention_v5_flash_registers_kernel(8) is attention_v5_flash_registers_kernel(8)
    assert attention_v5_flash_registers_kernel(8) is not attention_v5_flash_registers_kernel(12)
    for bad, error in ((0, ValueError), (HEAD_DIM_MAX + 1, ValueError), (8.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="head_dim"):
            attention_v5_flash_registers_kernel(bad)
    q, k, v, _ = qkv(1, 1, 4, 4, HEAD_DIM_MAX + 1)
    with pytest.raises(ValueError, match="head_dim"):
        attention_v5_flash_registers(q, k, v)


def test_v5_types_and_lowers_for_the_gpu():
    """The closure's head_dim sizes shared and local arrays: check numba accepts that for a real GPU."""
    program = textwrap.dedent("""
        import os
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
        from numba import types
        from numba.cuda.compiler import compile_cuda
        from kernels.flash_attention import attention_v5_flash_registers_kernel
        a4, lens = types.Array(types.float32, 4, "C"), types.Array(types.int32, 1, "C")
        for d in (64, 24, 1):
            compile_cuda(attention_v5_flash_registers_kernel(d).py_func, types.void,
                         (a4, a4, a4, lens, a4, types.float32, types.boolean), cc=(9, 0))
            print(d)
    """)
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", program], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["64", "24", "1"]


@pytest.mark.parametrize("tiling, d, B, N, M, causal, kv_lens", [
    # 2 chunks of 4 rows and of 4 keys per thread, 8 lanes per row group (3 shuffles), swizzle over 8
    # channels; partial query and key tiles, the causal mask, an empty sequence
    (V6_TILING_64, 8, 2, 60, 60, True, [57, 0]),
    # d=128's tiling: blocks of 32 x 32, channels padded to 32 (8 lanes x 4), two key tiles
    (V6_TILING_128, 12, 1, 30, 40, False, [35]),
], ids=["tiling_64", "tiling_128"])
def test_v6_gpu_tilings_match_reference(tiling, d, B, N, M, causal, kv_lens):
    """The tilings the GPU runs (``v6_tiling(64)`` and ``v6_tiling(128)``), at a head_dim the simulator affords."""
    q, k, v, seed = qkv(B, 1, N, M, d)
    lens = np.array(kv_lens, dtype=np.int32)
    out = attention_v6_register_tiles(q, k, v, causal=causal, kv_lens=lens, tiling=tiling,
                                      out=poison(np.empty_like(q)))
    check(out, reference.attention(q, k, v, causal=causal, kv_lens=lens), name=f"O of v6 {tiling}", dims=DIMS,
          tile={"row": tiling.block_q}, seed=seed)


def test_v6_compiles_one_kernel_per_head_dim_and_tiling_and_rejects_others():
    small = Tiling(4, 4, 4, 4)
    assert attention_v6_register_tiles_kernel(8) is attention_v6_register_tiles_kernel(8, v6_tiling(8))
    assert attention_v6_register_tiles_kernel(8) is not attention_v6_register_tiles_kernel(8, small)
    assert attention_v6_register_tiles_kernel(8) is not attention_v6_register_tiles_kernel(12)
    for bad, error in ((0, ValueError), (V6_HEAD_DIM_MAX + 1, ValueError), (8.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="head_dim"):
            attention_v6_register_tiles_kernel(bad)
    for bad, error, words in (((8, 8, 8, 8), TypeError, "must be a Tiling"),
                              (Tiling(6, 8, 8, 8), ValueError, "multiples of 4"),
                              (Tiling(8, 8, 4, 16), ValueError, "power of 2 up to 8"),
                              (Tiling(4, 4, 1, 4), ValueError, "8 to 1024 threads"),
                              (V6_TILING_64, ValueError, "shared memory")):
        with pytest.raises(error, match=words):
            attention_v6_register_tiles_kernel(128 if bad == V6_TILING_64 else 8, bad)
    q, k, v, _ = qkv(1, 1, 4, 4, V6_HEAD_DIM_MAX + 1)
    with pytest.raises(ValueError, match="V6_HEAD_DIM_MAX"):
        attention_v6_register_tiles(q, k, v)


def test_v6_tiles_fit_the_shared_memory_and_the_grid_covers_the_queries():
    for d in (1, 16, 17, 64, 65, 128):
        assert v6_shared_bytes(d, v6_tiling(d)) <= SHARED_BYTES_MAX
    assert v6_shared_bytes(64, V6_TILING_64) == 3 * 64 * 64 * 4   # Q, K (then P) and V: 48 KiB
    assert v6_grid(4, 16, 4096, V6_TILING_64) == (64, 16, 4)
    assert v6_grid(1, 1, 33, V6_TILING_128) == (2, 1, 1)
