"""Device functions on the simulator (course.simulator): a device function sees the simulator's ``cuda`` during a
launch whether it lives in the kernel's module or in another one, sees the launch it is called from (not the one
before), and every module's ``cuda`` is numba's again after the launch, also when the kernel raises or its traffic
is counted.

numba's simulator swaps a device function's ``cuda`` on every call; the course swaps each module once a launch and
holds it to the launch's end, which makes small device functions several times cheaper. These tests hold the two to
the same results.
"""

import textwrap
import types

import numpy as np
import pytest

import course

pytestmark = pytest.mark.skipif(not course.on_simulator(), reason="tests the simulator; this run uses a GPU")

import numba  # noqa: E402  (after the device is chosen)
from numba import cuda  # noqa: E402

from course import simulator  # noqa: E402

ELSEWHERE = textwrap.dedent('''
    from numba import cuda

    @cuda.jit(device=True)
    def lane_plus(x):
        return cuda.threadIdx.x + x
''')


def module_elsewhere():
    """A module of its own (its own globals), holding a device function that reads ``cuda``."""
    module = types.ModuleType("device_functions_elsewhere")
    exec(ELSEWHERE, module.__dict__)
    return module


@cuda.jit(device=True)
def block_plus(x):
    return cuda.blockIdx.x * 100 + x


def kernel_calling(lane_plus):
    @cuda.jit
    def kernel(out):
        i = cuda.grid(1)
        if i < out.size:
            # each device function called twice a thread: the second call of each finds its module's swap held
            out[i] = block_plus(lane_plus(0) * 10) + lane_plus(1) + block_plus(0) - cuda.blockIdx.x * 100
    return kernel


def expected(blocks, threads):
    block, lane = np.divmod(np.arange(blocks * threads), threads)
    return block * 100 + lane * 10 + lane + 1


def assert_every_cuda_is_numbas(*modules):
    for module in modules:
        assert module.cuda is numba.cuda, f"{module.__name__}'s cuda is still the simulator's after the launch"


def test_device_functions_in_the_kernels_module_and_in_another_see_their_launch():
    elsewhere = module_elsewhere()
    kernel = kernel_calling(elsewhere.lane_plus)
    for blocks, threads in ((2, 32), (3, 5)):       # the second launch's blocks and threads, not the first's
        out = np.zeros(blocks * threads, np.int64)
        kernel[blocks, threads](out)
        np.testing.assert_array_equal(out, expected(blocks, threads))
        assert_every_cuda_is_numbas(elsewhere, __import__(__name__))


def test_a_counted_launch_gives_the_same_results_and_counts():
    elsewhere = module_elsewhere()
    kernel = kernel_calling(elsewhere.lane_plus)
    launches = []
    simulator.add_launch_listener(launches.append)
    try:
        out = np.zeros(64, np.int64)
        kernel[2, 32](out)
    finally:
        simulator.remove_launch_listener(launches.append)
    np.testing.assert_array_equal(out, expected(2, 32))
    assert [(space, name, stores) for space, name, _, _, stores in launches[0]["counts"]] == [("global", "out", 64)]
    assert_every_cuda_is_numbas(elsewhere, __import__(__name__))


def test_a_kernel_that_raises_leaves_every_cuda_as_numbas():
    elsewhere = module_elsewhere()
    lane_plus = elsewhere.lane_plus

    @cuda.jit
    def reads_past_the_end(out):
        out[lane_plus(0)] = block_plus(1)
        out[out.size + lane_plus(0)] = 1

    with pytest.raises(IndexError):
        reads_past_the_end[1, 4](np.zeros(4, np.int64))
    assert_every_cuda_is_numbas(elsewhere, __import__(__name__))
    out = np.zeros(10, np.int64)                     # and the next launch runs as it should
    kernel_calling(lane_plus)[2, 5](out)
    np.testing.assert_array_equal(out, expected(2, 5))
