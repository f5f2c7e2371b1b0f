"""A step's launches captured once as a CUDA graph and replayed: the launch cost of hundreds of kernels paid once.

At SmolLM2-135M's size a decode step's bytes take tens of microseconds at the memory's speed, while each of its
hundreds of launches costs the host some microseconds of Python and driver work: the launches, not the bytes,
set the rate. A CUDA graph records a stream's kernels with their grids and arguments once; replaying it is one
call, and the GPU starts each kernel as the one before ends.

``capture(fn)`` runs ``fn()`` while a ``cuda.core`` graph builder records it, and returns ``(graph, result)``.
numba-cuda (0.29 and later) launches into such a builder when it is given as a launch's stream; the course's
launchers launch on the default stream, so while ``fn`` runs, two things are routed, in this module only:

- every launch on the default stream goes to the builder's stream (numba's ``_to_core_stream``, which turns a
  launch's stream argument into a ``cuda.core`` stream, is wrapped for the duration);
- every device array allocated meanwhile (a launcher's output, split-K attention's partial results) is kept: the
  graph reads and writes those addresses at every replay, so they must outlive the capture. The graph holds
  them (``StepGraph.keep``) and they are freed with it. Split-K attention's partials, which launchers share by
  shape, are allocated afresh for the graph (``kernels.paging.private_workspaces``): a shared buffer could be
  evicted and freed by a later call of another shape while the graph still writes to it.

numba remembers a launch configuration (``kernel[grid, block]``, its stream included) per grid, block and stream
argument (``CUDADispatcher.configure`` is an ``lru_cache``): a configuration made before the capture would
launch on the default stream, outside the graph (in relaxed mode the driver allows it), and one made during the
capture would launch into the finished builder afterwards. That cache is emptied when the capture starts and
when it ends.

The build mode is ``relaxed`` (allocating memory is allowed while recording), and numba's frees wait until the
recording ends (``cuda.defer_cleanup``): freeing memory synchronizes the device, which a recording cannot hold. Nothing of ``fn`` may copy
between the host and the device or synchronize: a graph holds kernels only, and a copy would run once, at
capture, instead of at every replay. Scalars a launcher passes (a grid, ``eps``, a partition size) are
recorded as they were: the caller captures one graph per set of them (``inference.engine`` keys its graphs by
the number of tokens and a bucket of the longest context) and writes the values that change from step to
step (token ids, positions, block tables) into the device arrays the graph reads, before each replay.

Graphs need a GPU: ``available()`` says whether this process has one (the simulator has none).
"""

from __future__ import annotations

import contextlib

from numba import config, cuda

__all__ = ["available", "StepGraph", "capture"]


def available() -> bool:
    """Whether CUDA graphs can be captured here: a GPU (not numba's simulator) and ``cuda.core``'s graph builder."""
    if config.ENABLE_CUDASIM:
        return False
    try:
        from numba.cuda.cudadrv import driver

        return hasattr(driver, "_to_core_stream") and hasattr(driver, "GraphBuilder")
    except ImportError:
        return False


class StepGraph:
    """A captured graph and the device arrays its kernels use (``keep``). It replays on the default stream, where
    numba copies: it starts after the copies of its inputs made before it, and a copy of its outputs after it waits
    for it."""

    def __init__(self, graph, keep: list):
        self.graph, self.keep = graph, keep

    def replay(self) -> None:
        """Launch the graph on the default stream (the host reads its outputs next, which waits for it)."""
        from numba.cuda.cudadrv import driver

        self.graph.launch(driver._to_core_stream(0))


@contextlib.contextmanager
def _routed_to(builder, kept: list):
    from numba.cuda.cudadrv import driver
    from numba.cuda.dispatcher import CUDADispatcher

    from kernels.paging import private_workspaces

    to_core_stream, device_array = driver._to_core_stream, cuda.device_array
    configurations = CUDADispatcher.configure         # an lru_cache: each configuration holds its stream

    def routed(stream):
        return builder.stream if not stream else to_core_stream(stream)

    def kept_array(*args, **kwargs):
        array = device_array(*args, **kwargs)
        kept.append(array)
        return array

    driver._to_core_stream, cuda.device_array = routed, kept_array
    configurations.cache_clear()
    try:
        with private_workspaces():
            yield
    finally:
        driver._to_core_stream, cuda.device_array = to_core_stream, device_array
        configurations.cache_clear()


def capture(fn):
    """``(StepGraph, fn())``: ``fn``'s launches recorded as a graph (not run: replay it to run them). Run ``fn`` once
    outside a capture first, so that every kernel it launches is compiled before the recording starts."""
    if not available():
        raise RuntimeError("CUDA graphs need a GPU: this process runs numba's simulator")
    from cuda.core import Device

    device = Device()
    device.set_current()
    builder = device.create_graph_builder()
    kept: list = []
    cuda.synchronize()
    with cuda.defer_cleanup():               # no memory freed (and no device synchronized) while recording
        builder.begin_building("relaxed")
        try:
            with _routed_to(builder, kept):
                result = fn()
        finally:
            builder.end_building()
        graph = builder.complete()
    return StepGraph(graph, kept), result
