"""The simulator's warp intrinsics (course.simulator) against NumPy models of their GPU semantics.

Each probe kernel lets every lane call an intrinsic with its own random arguments and masks;
a NumPy model written from the PTX rules predicts every lane's result. Blocks of 32, 64 and 48
threads (a partial last warp), in 1, 2 and 3 dimensions.
"""

import math

import numpy as np
import pytest

import course

pytestmark = pytest.mark.skipif(not course.on_simulator(),
                                reason="tests the simulator; this run uses a GPU")

from numba import cuda  # noqa: E402  (after the device is chosen)

from course import simulator  # noqa: E402
from course.simulator import WarpSyncError  # noqa: E402
from kernels.intrinsics import mma_m16n8k16  # noqa: E402

FULL = 0xFFFFFFFF
BLOCK_SHAPES = [(32,), (64,), (48,), (16, 4), (8, 3, 2)]


def fresh_rng():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    return np.random.default_rng(seed), seed


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------

@cuda.jit
def shuffle_probe(values, lane_args, masks, out):
    """out[k, b, t]: shfl_sync / up / down / xor of values[b, t] with argument lane_args[b, t]."""
    b = cuda.blockIdx.x
    t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    mask = masks[b, t]
    if (mask >> cuda.laneid) & 1:
        v = values[b, t]
        k = lane_args[b, t]
        out[0, b, t] = cuda.shfl_sync(mask, v, k)
        out[1, b, t] = cuda.shfl_up_sync(mask, v, k)
        out[2, b, t] = cuda.shfl_down_sync(mask, v, k)
        out[3, b, t] = cuda.shfl_xor_sync(mask, v, k)


@cuda.jit
def vote_probe(predicates, keys, masks, words, flags):
    """words: ballot, match_any, match_all mask; flags: all, any, eq, match_all predicate."""
    b = cuda.blockIdx.x
    t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    mask = masks[b, t]
    if (mask >> cuda.laneid) & 1:
        p = predicates[b, t]
        words[0, b, t] = cuda.ballot_sync(mask, p)
        flags[0, b, t] = cuda.all_sync(mask, p)
        flags[1, b, t] = cuda.any_sync(mask, p)
        flags[2, b, t] = cuda.eq_sync(mask, p)
        cuda.syncwarp(mask)
        words[1, b, t] = cuda.match_any_sync(mask, keys[b, t])
        same_lanes, all_same = cuda.match_all_sync(mask, keys[b, t])
        words[2, b, t] = same_lanes
        flags[3, b, t] = all_same


@cuda.jit
def activemask_probe(n_alive, out):
    """Lanes t >= n_alive exit first; the others report activemask in converged and split code."""
    t = cuda.threadIdx.x + cuda.blockDim.x * cuda.threadIdx.y
    if t >= n_alive[0]:
        return
    out[0, t] = cuda.activemask()
    if cuda.laneid < 10:
        out[1, t] = cuda.activemask()
    else:
        out[2, t] = cuda.activemask()
    out[3, t] = cuda.lanemask_lt()


@cuda.jit
def row_sum_max(x, sums, maxes):
    """One warp per row of x (blockDim.x == 32): strided partial sums, then a butterfly."""
    row = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
    lane = cuda.threadIdx.x
    if row >= x.shape[0]:
        return
    total = np.float32(0.0)
    largest = np.float32(-np.inf)
    for col in range(lane, x.shape[1], 32):
        v = x[row, col]
        total += v
        largest = max(largest, v)
    offset = 16
    while offset > 0:
        total += cuda.shfl_xor_sync(FULL, total, offset)
        largest = max(largest, cuda.shfl_xor_sync(FULL, largest, offset))
        offset //= 2
    if lane == 0:
        sums[row] = total
        maxes[row] = largest


@cuda.jit
def rotate_and_pair(x, rounds, out):
    """Rounds of: rotate the block's values by one through shared memory, add the xor-1 lane."""
    tile = cuda.shared.array(96, np.float32)
    t = cuda.threadIdx.x
    v = x[t]
    for _ in range(rounds):
        tile[t] = v
        cuda.syncthreads()
        v = tile[(t + 1) % cuda.blockDim.x]
        cuda.syncthreads()
        v += cuda.shfl_xor_sync(cuda.activemask(), v, 1)
    out[t] = v


# ---------------------------------------------------------------------------------------------
# NumPy models of the GPU semantics (PTX shfl.sync / vote.sync / match.sync)
# ---------------------------------------------------------------------------------------------

def random_masks(rng, blocks, n_threads):
    """Per-thread masks: each warp is one full-mask group, or split into random lane groups.

    A lane's mask is the set of lanes of its group; lanes left out get mask 0 and do not call.
    """
    masks = np.zeros((blocks, n_threads), np.uint32)
    for b in range(blocks):
        for start in range(0, n_threads, 32):
            lanes = min(32, n_threads - start)
            style = rng.integers(3)
            if style == 0:
                masks[b, start:start + lanes] = FULL      # includes absent lanes of a partial warp
                continue
            groups = rng.integers(-1 if style == 2 else 0, 3, size=lanes)
            for g in set(groups.tolist()) - {-1}:
                members = np.flatnonzero(groups == g)
                masks[b, start + members] = sum(1 << int(lane) for lane in members)
    return masks


def participants(mask, warp, n_threads):
    """Lanes named in ``mask`` that exist in this warp of the block."""
    present = min(32, n_threads - 32 * warp)
    return {lane for lane in range(present) if mask >> lane & 1}


def model_shuffle(mode, values, lane_args, masks):
    """Expected result per lane, and which lanes call. Sources outside the group: own value."""
    blocks, n_threads = values.shape
    out = np.zeros_like(values)
    called = np.zeros(values.shape, bool)
    for b in range(blocks):
        for t in range(n_threads):
            warp, lane = divmod(t, 32)
            group = participants(int(masks[b, t]), warp, n_threads)
            if lane not in group:
                continue
            called[b, t] = True
            k = int(lane_args[b, t]) % 32             # the hardware reads the low 5 bits
            src = {"idx": k, "up": lane - k, "down": lane + k, "xor": lane ^ k}[mode]
            out[b, t] = values[b, 32 * warp + src] if src in group else values[b, t]
    return out, called


def model_votes(predicates, keys, masks):
    blocks, n_threads = predicates.shape
    words = np.zeros((3, blocks, n_threads), np.int32)
    flags = np.zeros((4, blocks, n_threads), bool)
    called = np.zeros(predicates.shape, bool)
    as_int32 = lambda bits: np.array(bits, np.uint32).view(np.int32)  # noqa: E731
    for b in range(blocks):
        for t in range(n_threads):
            warp, lane = divmod(t, 32)
            group = sorted(participants(int(masks[b, t]), warp, n_threads))
            if lane not in group:
                continue
            called[b, t] = True
            preds = [bool(predicates[b, 32 * warp + g]) for g in group]
            group_keys = [keys[b, 32 * warp + g] for g in group]
            same_key = [g for g, key in zip(group, group_keys) if key == keys[b, t]]
            all_same = len(set(group_keys)) == 1
            words[0, b, t] = as_int32(sum(1 << g for g, p in zip(group, preds) if p))
            words[1, b, t] = as_int32(sum(1 << g for g in same_key))
            words[2, b, t] = as_int32(sum(1 << g for g in group) if all_same else 0)
            flags[:, b, t] = [all(preds), any(preds), len(set(preds)) == 1, all_same]
    return words, flags, called


# ---------------------------------------------------------------------------------------------
# Intrinsics against the models
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", BLOCK_SHAPES, ids=lambda b: "x".join(map(str, b)))
def test_shuffles_match_model(block):
    rng, seed = fresh_rng()
    blocks, n_threads = 2, math.prod(block)
    values = rng.standard_normal((blocks, n_threads)).astype(np.float32)
    lane_args = rng.integers(-40, 72, size=(blocks, n_threads)).astype(np.int32)
    lane_args[0, :8] = [0, 1, 16, 31, 32, 33, -1, 64]          # the edges, always present
    masks = random_masks(rng, blocks, n_threads)
    out = np.full((4, blocks, n_threads), np.nan, np.float32)
    shuffle_probe[blocks, block](values, lane_args, masks, out)
    for k, mode in enumerate(["idx", "up", "down", "xor"]):
        expected, called = model_shuffle(mode, values, lane_args, masks)
        np.testing.assert_array_equal(out[k][called], expected[called],
                                      err_msg=f"shfl {mode}, block {block}, seed {seed}")
        assert np.isnan(out[k][~called]).all(), f"lanes outside every mask wrote (seed {seed})"


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_shuffles_keep_value_and_type(dtype):
    rng, seed = fresh_rng()
    values = (rng.standard_normal((1, 64)) * 1e6).astype(dtype)
    lane_args = rng.integers(0, 32, size=(1, 64)).astype(np.int64)
    masks = np.full((1, 64), FULL, np.uint32)
    out = np.zeros((4, 1, 64), dtype)
    shuffle_probe[1, 64](values, lane_args, masks, out)
    expected, _ = model_shuffle("xor", values, lane_args, masks)
    np.testing.assert_array_equal(out[3], expected, err_msg=f"seed {seed}")


@pytest.mark.parametrize("block", BLOCK_SHAPES, ids=lambda b: "x".join(map(str, b)))
def test_votes_and_matches_match_model(block):
    rng, seed = fresh_rng()
    blocks, n_threads = 2, math.prod(block)
    # Per warp a bias of 0, 1/2 or 1 so that all-true and all-false warps occur.
    bias = rng.choice([0.0, 0.5, 1.0], size=(blocks, -(-n_threads // 32)))
    predicates = (rng.random((blocks, n_threads)) < np.repeat(bias, 32, axis=1)[:, :n_threads])
    predicates = predicates.astype(np.int32)
    keys = rng.integers(0, 3, size=(blocks, n_threads)).astype(np.int32)
    keys[1, :32] = 7                                               # one warp where all match
    masks = random_masks(rng, blocks, n_threads)
    masks[1, :32] = FULL
    words = np.full((3, blocks, n_threads), -12345, np.int32)
    flags = np.zeros((4, blocks, n_threads), np.bool_)
    vote_probe[blocks, block](predicates, keys, masks, words, flags)
    expected_words, expected_flags, called = model_votes(predicates, keys, masks)
    for k, name in enumerate(["ballot_sync", "match_any_sync", "match_all_sync mask"]):
        np.testing.assert_array_equal(words[k][called], expected_words[k][called],
                                      err_msg=f"{name}, block {block}, seed {seed}")
    for k, name in enumerate(["all_sync", "any_sync", "eq_sync", "match_all_sync pred"]):
        np.testing.assert_array_equal(flags[k][called], expected_flags[k][called],
                                      err_msg=f"{name}, block {block}, seed {seed}")
    assert (words[:, ~called] == -12345).all()


def test_ballot_of_lane_31_is_negative_int32_like_on_a_gpu():
    predicates = np.zeros((1, 32), np.int32)
    predicates[0, 31] = 1
    words = np.zeros((3, 1, 32), np.int32)
    flags = np.zeros((4, 1, 32), np.bool_)
    vote_probe[1, 32](predicates, predicates, np.full((1, 32), FULL, np.uint32), words, flags)
    assert (words[0] == np.int32(-2**31)).all()


@pytest.mark.parametrize("block, n_alive", [((32,), 32), ((64,), 45), ((16, 3), 40), ((48,), 7)])
def test_activemask_reports_converged_lanes_that_have_not_exited(block, n_alive):
    n_threads = math.prod(block)
    out = np.zeros((4, n_threads), np.uint32)
    activemask_probe[1, block](np.array([n_alive]), out)
    for t in range(n_threads):
        warp, lane = divmod(t, 32)
        if t >= n_alive:
            assert not out[:, t].any()
            continue
        alive = sum(1 << g for g in range(32) if 32 * warp + g < min(n_alive, n_threads))
        low = alive & 0x3FF
        assert out[0, t] == alive, f"thread {t}"
        assert out[1 if lane < 10 else 2, t] == (low if lane < 10 else alive & ~low)
        assert out[3, t] == (1 << lane) - 1


def test_warp_row_reduction_sum_and_max():
    rng, seed = fresh_rng()
    x = rng.standard_normal((5, 70)).astype(np.float32)
    sums = np.full(5, np.nan, np.float32)
    maxes = np.full(5, np.nan, np.float32)
    row_sum_max[3, (32, 2)](x, sums, maxes)          # 6 warps for 5 rows: one warp has no row
    np.testing.assert_allclose(sums, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5,
                               err_msg=f"seed {seed}")
    np.testing.assert_array_equal(maxes, x.max(axis=1), err_msg=f"seed {seed}")


def test_warp_ops_between_syncthreads():
    """Lanes released from a barrier at different times must still meet in each exchange."""
    rng, seed = fresh_rng()
    x = rng.standard_normal(96).astype(np.float32)
    out = np.zeros_like(x)
    rotate_and_pair[1, 96](x, 4, out)
    expected = x.copy()
    for _ in range(4):
        expected = np.roll(expected, -1)
        expected = expected + expected[np.arange(96) ^ 1]
    np.testing.assert_array_equal(out, expected, err_msg=f"seed {seed}")


def test_blocks_start_with_fresh_warp_state():
    """A second block (and a second launch) must not see rounds of the first."""
    values = np.arange(2 * 32, dtype=np.float32).reshape(2, 32) + 0.5
    args = np.full((2, 32), 1, np.int32)
    masks = np.full((2, 32), FULL, np.uint32)
    for _ in range(2):
        out = np.zeros((4, 2, 32), np.float32)
        shuffle_probe[2, 32](values, args, masks, out)
        np.testing.assert_array_equal(out[2, :, :31], values[:, 1:])
        np.testing.assert_array_equal(out[2, :, 31], values[:, 31])


# ---------------------------------------------------------------------------------------------
# Misuse: clear errors, never a hang
# ---------------------------------------------------------------------------------------------

@cuda.jit
def half_warp_then_syncthreads(out):
    lane = cuda.laneid
    if lane < 16:
        out[lane] = cuda.shfl_sync(FULL, lane, 0)
    cuda.syncthreads()


@cuda.jit
def two_intrinsics_one_mask(out):
    lane = cuda.laneid
    if lane < 16:
        out[lane] = cuda.shfl_up_sync(FULL, lane, 1)
    else:
        out[lane] = cuda.shfl_down_sync(FULL, lane, 1)


@cuda.jit
def mask_without_caller(out):
    out[cuda.laneid] = cuda.shfl_sync(0x0000FFFF, cuda.laneid, 0)


@cuda.jit
def shuffle_of_float16(x, out):
    out[cuda.laneid] = cuda.shfl_sync(FULL, x[cuda.laneid], 0)


@cuda.jit
def vote_on_float(x, out):
    out[cuda.laneid] = cuda.all_sync(FULL, x[cuda.laneid])


@cuda.jit
def half_warp_exits(out):
    lane = cuda.laneid
    if lane >= 16:
        return
    out[lane] = cuda.shfl_down_sync(FULL, lane * 10, 8)


def test_exited_lanes_do_not_block_and_read_as_own_value():
    out = np.full(32, -1, np.int64)
    half_warp_exits[1, 32](out)
    np.testing.assert_array_equal(out[:8], (np.arange(8) + 8) * 10)
    np.testing.assert_array_equal(out[8:16], np.arange(8, 16) * 10)   # sources exited: own value
    assert (out[16:] == -1).all()


@pytest.mark.parametrize("kernel, message", [
    (half_warp_then_syncthreads, "can never continue"),
    (two_intrinsics_one_mask, "different warp intrinsics"),
    (mask_without_caller, "leaves out the calling lane"),
])
def test_misuse_raises_warp_sync_error_quickly(kernel, message):
    with pytest.raises(WarpSyncError, match=message):
        kernel[1, 32](np.zeros(32, np.int64))


@pytest.mark.parametrize("kernel, x, message", [
    (shuffle_of_float16, np.ones(32, np.float16), "32- or 64-bit int or float"),
    (vote_on_float, np.ones(32, np.float32), "integer or a boolean"),
])
def test_types_a_gpu_rejects_are_rejected(kernel, x, message):
    with pytest.raises(TypeError, match=message):
        kernel[1, 32](x, np.zeros(32, np.float32))


def test_stuck_lane_times_out_with_the_intrinsic_named(monkeypatch):
    """With operating system threads (greenlets take turns, so a lane that never yields hangs the
    launch as it would a GPU), a warp that waits WARP_TIMEOUT_S for a lane names the intrinsic."""
    import time

    monkeypatch.setenv("COURSE_SIMULATOR_THREADS", "os")

    @cuda.jit
    def one_lane_dawdles(out):
        if cuda.laneid == 5:
            time.sleep(1.5)          # a simulator-only stand-in for an endless loop
            return
        out[cuda.laneid] = cuda.ballot_sync(FULL, 1)

    monkeypatch.setattr(simulator, "WARP_TIMEOUT_S", 0.3)
    with pytest.raises(WarpSyncError, match=r"ballot_sync.*waited 0.3 s for lanes 5"):
        one_lane_dawdles[1, 32](np.zeros(32, np.int32))


def test_intrinsics_outside_a_kernel_raise():
    with pytest.raises(RuntimeError, match="inside a kernel"):
        cuda.shfl_sync(FULL, 1.0, 0)


def test_install_is_idempotent_and_reports_the_device(monkeypatch):
    first, jit = cuda.shfl_down_sync, cuda.jit
    assert simulator.install() is True
    assert simulator.install() is True
    assert cuda.shfl_down_sync is first and cuda.jit is jit       # patched once, not twice
    monkeypatch.setattr(simulator, "simulator_in_use", lambda: False)
    assert simulator.install() is False                            # a GPU needs nothing


def test_gpu_only_options_and_nanosleep_are_accepted():
    @cuda.jit(lineinfo=True, launch_bounds=(32,), lto=False, max_registers=32)
    def napping(out):
        cuda.nanosleep(100)
        out[cuda.laneid] = cuda.laneid

    out = np.zeros(32, np.int32)
    napping[1, 32](out)
    np.testing.assert_array_equal(out, np.arange(32))


def test_threads_take_turns_in_thread_id_order_between_barriers():
    """Cooperative by default: each thread runs until it parks (here at the barrier), in thread-id
    order, so the order of the atomics is the same on every run: before the barrier and after it."""
    assert simulator.cooperative()

    @cuda.jit
    def tickets(counter, before, after):
        t = cuda.threadIdx.x
        before[t] = cuda.atomic.add(counter, 0, 1)
        cuda.syncthreads()
        after[t] = cuda.atomic.add(counter, 0, 1)

    counter, before, after = np.zeros(1, np.int32), np.zeros(40, np.int32), np.zeros(40, np.int32)
    tickets[1, 40](counter, before, after)
    assert before.tolist() == list(range(40)) and after.tolist() == list(range(40, 80))


# ---------------------------------------------------------------------------------------------
# The simulator's own collective, and the twin of the tensor-core mma that runs on it
# ---------------------------------------------------------------------------------------------

COMBINED = []


def sum_plus_lane(values):
    """A combine of simulator_collective_sync: every lane gets the sum of the lanes' values plus its lane id."""
    COMBINED.append(values)
    total = sum(values)
    return [total + lane for lane in range(32)]


@cuda.jit
def collective_probe(values, out):
    t = cuda.threadIdx.x
    out[t] = cuda.simulator_collective_sync(FULL, values[t], sum_plus_lane)


@cuda.jit
def collective_half_warp(values, out):
    t = cuda.threadIdx.x
    if cuda.laneid >= 16:
        return
    out[t] = cuda.simulator_collective_sync(FULL, values[t], sum_plus_lane)


def test_collective_combines_once_per_warp_and_gives_each_lane_its_result():
    """One round per warp: combine sees the 32 lanes' values in lane order and runs once; lane l gets entry l."""
    rng, seed = fresh_rng()
    values = rng.integers(-1000, 1000, 64)
    out = np.zeros(64, np.int64)
    COMBINED.clear()
    collective_probe[1, 64](values, out)
    assert sorted(tuple(int(v) for v in warp) for warp in COMBINED) == sorted(
        tuple(int(v) for v in values[w * 32:w * 32 + 32]) for w in range(2)), f"seed {seed}"
    for w in range(2):
        np.testing.assert_array_equal(out[w * 32:w * 32 + 32], values[w * 32:w * 32 + 32].sum() + np.arange(32))


@pytest.mark.parametrize("kernel, block", [(collective_half_warp, 32), (collective_probe, 48)],
                         ids=["lanes-exit", "partial-warp"])
def test_collective_needs_every_lane_of_its_mask(kernel, block):
    """Lanes of the mask that exited, or that the block does not have, are an error (a .sync.aligned
    instruction needs every lane), not a round of fewer values."""
    with pytest.raises(WarpSyncError, match=r"simulator_collective_sync\(sum_plus_lane\) needs every lane"):
        kernel[1, block](np.ones(block, np.int64), np.zeros(block, np.int64))


def mma_fragments(A, B, C):
    """Each lane's fragments of A (16 x 16 fp16), B (16 x 8 fp16) and C (16 x 8 float32), laid out as PTX's
    mma.m16n8k16 lays them: (a: 4 uint32 words of fp16 pairs, b: 2 words, c: 4 float32) per lane."""
    def pair(x0, x1):
        return np.array([x0, x1], np.float16).view(np.uint32)[0]

    a, b, c = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a[lane] = [pair(*A[g, 2 * t:2 * t + 2]), pair(*A[g + 8, 2 * t:2 * t + 2]),
                   pair(*A[g, 2 * t + 8:2 * t + 10]), pair(*A[g + 8, 2 * t + 8:2 * t + 10])]
        b[lane] = [pair(*B[2 * t:2 * t + 2, g]), pair(*B[2 * t + 8:2 * t + 10, g])]
        c[lane] = [C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]]
    return a, b, c


@cuda.jit
def mma_probe(a, b, c, d, lanes):
    lane = cuda.laneid
    if lane >= lanes[0]:
        return
    d[lane, 0], d[lane, 1], d[lane, 2], d[lane, 3] = mma_m16n8k16(
        a[lane, 0], a[lane, 1], a[lane, 2], a[lane, 3], b[lane, 0], b[lane, 1], c[lane, 0], c[lane, 1], c[lane, 2],
        c[lane, 3])


def test_mma_twin_is_the_product_of_the_warps_fragments():
    """kernels.intrinsics.mma_m16n8k16 in the simulator: D = A B + C from the 32 lanes' fragments, each lane's
    D in the layout of its C. Quarter integers keep every sum exact, so D is known bit for bit."""
    rng, seed = fresh_rng()
    A = rng.integers(-32, 33, (16, 16)) / 4
    B = rng.integers(-32, 33, (16, 8)) / 4
    C = rng.integers(-1000, 1001, (16, 8)).astype(np.float32) / 8
    a, b, c = mma_fragments(A.astype(np.float16), B.astype(np.float16), C)
    d = np.full((32, 4), np.nan, np.float32)
    mma_probe[1, 32](a, b, c, d, np.array([32]))
    _, _, want = mma_fragments(A, B, (A @ B + C).astype(np.float32))
    np.testing.assert_array_equal(d, want, err_msg=f"seed {seed}")


def test_mma_twin_needs_the_whole_warp():
    a, b, c = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.float32)
    with pytest.raises(WarpSyncError, match=r"_mma_m16n8k16_of_warp\) needs every lane .* got lanes 0, 1, .* 15$"):
        mma_probe[1, 32](a, b, c, np.zeros((32, 4), np.float32), np.array([16]))
