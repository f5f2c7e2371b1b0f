"""The warp intrinsics and the tensor-core mma give the same bits on a GPU as on the simulator
(run with `make test-gpu`).

The kernels are the probes of test_simulator_warp.py. This test runs them on the GPU, runs the
same script in a subprocess on the simulator (``python tests/test_warp_gpu.py OUT.npz`` with
``COURSE_DEVICE=simulator``) on the same seeded inputs, and compares every lane whose result a
GPU defines, bit for bit. Lanes whose shuffle source is absent, exited or outside the mask are
left out: a GPU returns garbage there, the simulator the caller's own value.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SEED = 20240611
BLOCK_SHAPES = [(32,), (64,), (48,), (16, 4), (8, 3, 2)]


def shuffle_defined(mode, lane_args, masks):
    """Lanes whose shuffle result the GPU defines: called, and the source is in the group or
    out of range (then the caller keeps its own value)."""
    from test_simulator_warp import participants

    blocks, n_threads = masks.shape
    defined = np.zeros(masks.shape, bool)
    for b in range(blocks):
        for t in range(n_threads):
            warp, lane = divmod(t, 32)
            group = participants(int(masks[b, t]), warp, n_threads)
            if lane not in group:
                continue
            k = int(lane_args[b, t]) % 32
            src = {"idx": k, "up": lane - k, "down": lane + k, "xor": lane ^ k}[mode]
            defined[b, t] = src in group or not 0 <= src < 32
    return defined


def run_probes(seed=SEED):
    """Run every probe on the current device; return ``{name: (result, lanes to compare)}``."""
    import test_simulator_warp as probes

    rng = np.random.default_rng(seed)
    results = {}
    for block in BLOCK_SHAPES:
        tag = "x".join(map(str, block))
        blocks, n_threads = 2, math.prod(block)
        masks = probes.random_masks(rng, blocks, n_threads)

        values = rng.standard_normal((blocks, n_threads)).astype(np.float32)
        lane_args = rng.integers(-40, 72, size=(blocks, n_threads)).astype(np.int32)
        out = np.full((4, blocks, n_threads), np.nan, np.float32)
        probes.shuffle_probe[blocks, block](values, lane_args, masks, out)
        for k, mode in enumerate(["idx", "up", "down", "xor"]):
            results[f"shfl_{mode}_{tag}"] = (out[k], shuffle_defined(mode, lane_args, masks))

        predicates = (rng.random((blocks, n_threads)) < 0.5).astype(np.int32)
        predicates[0, :32] = 1                              # one warp where all agree
        keys = rng.integers(0, 3, size=(blocks, n_threads)).astype(np.int32)
        words = np.zeros((3, blocks, n_threads), np.int32)
        flags = np.zeros((4, blocks, n_threads), np.bool_)
        probes.vote_probe[blocks, block](predicates, keys, masks, words, flags)
        called = np.array([[masks[b, t] >> (t % 32) & 1 for t in range(n_threads)]
                           for b in range(blocks)], bool)
        for k, name in enumerate(["ballot", "match_any", "match_all_mask"]):
            results[f"{name}_{tag}"] = (words[k], called)
        for k, name in enumerate(["all", "any", "eq", "match_all_pred"]):
            results[f"{name}_{tag}"] = (flags[k], called)

    for block, n_alive in [((64,), 45), ((16, 3), 40)]:
        tag = "x".join(map(str, block))
        out = np.zeros((4, math.prod(block)), np.uint32)
        probes.activemask_probe[1, block](np.array([n_alive]), out)
        alive = np.arange(out.shape[1]) < n_alive
        results[f"activemask_after_exit_{tag}"] = (out[0], alive)
        results[f"lanemask_lt_{tag}"] = (out[3], alive)

    x = rng.standard_normal(96).astype(np.float32)
    rotated = np.full_like(x, np.nan)
    probes.rotate_and_pair[1, 96](x, 4, rotated)
    results["rotate_and_pair"] = (rotated, np.ones(96, bool))

    x = rng.standard_normal((37, 100)).astype(np.float32)
    sums = np.full(37, np.nan, np.float32)
    maxes = np.full(37, np.nan, np.float32)
    probes.row_sum_max[10, (32, 4)](x, sums, maxes)
    results["row_sum"] = (sums, np.ones(37, bool))
    results["row_max"] = (maxes, np.ones(37, bool))

    # The tensor-core mma (kernels.intrinsics.mma_m16n8k16): quarter integers keep every sum exact, so
    # the instruction and its simulator twin must agree bit for bit, fragment layout included.
    A = (rng.integers(-32, 33, (16, 16)) / 4).astype(np.float16)
    B = (rng.integers(-32, 33, (16, 8)) / 4).astype(np.float16)
    C = (rng.integers(-1000, 1001, (16, 8)) / 8).astype(np.float32)
    a, b, c = probes.mma_fragments(A, B, C)
    d = np.full((32, 4), np.nan, np.float32)
    probes.mma_probe[1, 32](a, b, c, d, np.array([32]))
    results["mma_m16n8k16"] = (d, np.ones((32, 4), bool))
    return results


def save(results, path):
    arrays = {}
    for name, (value, defined) in results.items():
        arrays[f"{name}.value"] = value
        arrays[f"{name}.defined"] = defined
    np.savez(path, **arrays)


def bits(a):
    """The raw bits, so that -0.0 differs from 0.0 and NaN payloads count."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


def test_gpu_and_simulator_agree_bit_for_bit(tmp_path):
    import course

    if course.on_simulator():
        pytest.skip("needs a GPU")
    path = tmp_path / "simulator.npz"
    env = dict(os.environ, COURSE_DEVICE="simulator", NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run([sys.executable, str(Path(__file__)), str(path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"simulator half failed:\n{done.stdout}\n{done.stderr}"
    simulated = np.load(path)
    on_gpu = run_probes()
    assert {f"{n}.value" for n in on_gpu} == {k for k in simulated.files if k.endswith(".value")}
    mismatches = []
    for name, (value, defined) in on_gpu.items():
        np.testing.assert_array_equal(defined, simulated[f"{name}.defined"])
        gpu_bits, sim_bits = bits(value[defined]), bits(simulated[f"{name}.value"][defined])
        if not np.array_equal(gpu_bits, sim_bits):
            wrong = int(np.any(gpu_bits != sim_bits, axis=-1).sum())
            mismatches.append(f"{name}: {wrong} of {int(defined.sum())} lanes differ")
    assert not mismatches, "GPU and simulator differ:\n" + "\n".join(mismatches)


if __name__ == "__main__":
    # The simulator half: python tests/test_warp_gpu.py OUT.npz
    import course

    course.use_device("simulator", quiet=True)
    save(run_probes(), sys.argv[1])
