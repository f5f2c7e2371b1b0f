"""Every trick that makes numba's CUDA simulator serve this course, in one package.

numba-cuda's simulator runs each CUDA thread of a block as a Python thread and a ``syncthreads``
as a barrier between them. It lacks the warp-level intrinsics and says nothing about memory
traffic. :func:`install` adds both, by patching a few simulator classes once per process:

- **warp intrinsics** on ``cuda`` inside kernels (and on ``numba.cuda``), with the semantics of
  the PTX instructions numba compiles them to: ``shfl_sync``, ``shfl_up_sync``,
  ``shfl_down_sync``, ``shfl_xor_sync``, ``ballot_sync``, ``all_sync``, ``any_sync``,
  ``eq_sync``, ``match_any_sync``, ``match_all_sync``, ``syncwarp``, ``activemask``,
  ``lanemask_lt``. (``cuda.laneid`` and ``cuda.warpsize`` already exist.)
- **a warp collective of the simulator's own**, ``cuda.simulator_collective_sync(mask, value,
  combine)``, with no GPU counterpart: the lanes of ``mask`` bring a value each, ``combine`` maps the
  32 values to the 32 results once, and each lane gets its own. A kernel never calls it: the
  simulator twin of a warp-wide instruction that numba reaches through inline PTX does
  (``kernels.intrinsics.mma_m16n8k16``, whose twin states the tensor-core product in ``combine``).
- **GPU-only odds and ends** that would otherwise stop a kernel written for a GPU:
  ``cuda.nanosleep`` (yields to the other threads) and the code-generation options
  ``lineinfo``, ``launch_bounds``, ``lto``, ``forceinline`` and ``max_registers`` of
  ``cuda.jit``, and the ``alignment`` of ``cuda.shared.array`` (accepted and ignored: they only
  shape machine code; an alignment of 16 bytes lets NVVM merge four adjacent float32 loads).
- **a block scheduler that takes turns instead of racing**: numba's simulator starts an operating
  system thread per CUDA thread and releases a barrier from a loop that asks every thread "are
  you blocked or done?" without pause. Here a block's threads are greenlets (coroutines) that run
  one at a time, in thread-id order, each until it reaches a barrier, a warp intrinsic, a
  ``nanosleep`` or its end; the block releases a barrier once every live thread waits in it.
  Same semantics, no thread to start and no lock to hand over, so launches are many times
  faster; and an order that is the same on every run. ``COURSE_SIMULATOR_THREADS=os`` (or a
  Python without ``greenlet``) goes back to one operating system thread per CUDA thread, which
  also gives up on a warp stuck for ``WARP_TIMEOUT_S``; with greenlets a lane in an endless
  loop hangs the launch, as it would hang a GPU (interrupt the cell).
- **device functions without a swap on every call**: numba's simulator replaces a function's
  ``cuda`` global by its fake module on each call of a device function and puts it back after
  (a count up and down under two locks, most of what a small device function costs). Here a
  launch holds that swap once for each module whose device functions it calls, from the first
  call to the launch's end (also when it raises): the same globals during the launch, numba's
  ``cuda`` after it.
- **traffic hooks**: while a listener is registered (``course.traffic.count_traffic`` is the
  public face), every element load and store of a kernel argument or of shared memory is counted,
  however the kernel asks for it; an operation that cannot be counted exactly is refused.

Left as numba's simulator has them: the atomics (``cuda.atomic.add`` ..., under a lock) and
``cuda.threadfence`` (a no-op, which is exact here: blocks run one after another, so every store of
a block is visible to the blocks after it, as a fence makes it on a GPU).

Modules
    ``__init__`` installs the patches (:func:`install`) and registers launch listeners;
    ``_scheduler`` runs a block's threads (greenlet turns, barriers); ``_warps`` holds the warp
    intrinsics, the collective and the bookkeeping of each warp; ``_traffic`` counts a launch's loads
    and stores and runs the launch gates. Import every public name from ``course.simulator``. The
    submodules import each other relatively, so a fresh copy of the package uses fresh copies of them.

Warp model
    A warp is 32 consecutive linear thread ids of a block (x fastest, then y, then z); the last
    warp of a block whose size is not a multiple of 32 simply lacks its upper lanes. A call of a
    ``*_sync`` intrinsic is an exchange among the lanes named in its ``mask``: each lane waits
    until every lane of the mask that exists and has not exited has made a call with the same
    mask, then all of them get their results, computed from the values at that same point.
    As on a GPU, lanes that exited the kernel do not hold the others up.

Where a GPU is undefined, the simulator picks one behaviour and sticks to it:

- a shuffle whose source lane is absent, exited or outside the mask returns the caller's own
  value (on a GPU the value is garbage); lane indices and deltas use their low 5 bits, as the
  hardware does, so ``shfl_sync`` wraps modulo 32 and a delta of 32 moves nothing;
- a lane that calls with a mask leaving itself out, lanes of one mask calling different
  intrinsics, and a warp that can no longer progress (lanes of the mask wait in
  ``syncthreads`` or elsewhere) raise :class:`WarpSyncError` instead of hanging;
- a warp that makes no progress for ``WARP_TIMEOUT_S`` seconds raises :class:`WarpSyncError`
  (an infinite loop in one lane would otherwise hang the others forever);
- ``activemask()`` returns the lanes that call the same ``activemask()`` while the rest of the
  warp has exited or waits elsewhere: the converged lanes, as a GPU reports them.

Counting model
    One element read through indexing (``a[i, j]``) is one load, one element written is one
    store; ``a[i] += x`` is both. Shapes, sizes, slices and views (``.T``, ``.reshape``, ``.view``,
    ``.real``, ``np.transpose`` ...) are free: elements of a view count against the argument it came
    from. ``cuda.local.array`` is not counted. An atomic (``cuda.atomic.add`` ...) counts one load and
    one store. Every other operation numba-cuda compiles on an array counts exactly the elements it
    touches: iteration (``for x in a``, ``sum(a)``, ``max(a)``, ``x in a``, unpacking) and ``a.flat[i]``
    one load per element taken; ``a.sum()``, ``a.mean()``, ``a.prod()`` and ``np.sum``, ``np.mean``,
    ``np.prod``, ``np.nansum``, ``np.nanmean``, ``np.nanprod``, ``np.count_nonzero`` one load per element;
    ``a.any()``, ``a.all()``, ``a.max()``, ``a.min()`` the elements up to where numba-cuda's loop stops (the
    first nonzero, zero or NaN); ``a.item()`` one load; ``a.fill(x)`` one store per element; a ufunc with an
    output (``np.cos(a, out)``, and the in-place operators ``o /= u``) one load per input and one store
    per output, for every output element; an array of indices (``out[idx] = 0``) one load per index.
    Anything else that reads or writes elements in one call (``a.argmax()``, ``a.std()``, ``a.copy()``,
    ``np.average``, ``np.dot``, ``np.asarray``, ``np.nditer``, a view that NumPy makes as a copy, a
    generalized ufunc, a ufunc's ``reduce`` ...) raises ``UncountedAccessError`` (a TypeError, in
    ``_traffic``) in a counted launch, naming the operation: how many elements it reads is numba-cuda's
    own business. An uncounted launch runs all of these as numba's simulator does.
    ``tests/test_traffic_methods.py`` runs every such form numba-cuda compiles through the counter.
"""

from __future__ import annotations

from kernels.launching import FULL_MASK
from kernels.launching import WARP as WARP_SIZE

from ._scheduler import WarpSyncError, cooperative
from ._scheduler import _barrier_wait, _run_block, _signal_when_done, _ThreadingForKernels
from ._traffic import add_launch_gate, launch_gates, remove_launch_gate
from ._traffic import (_ATOMICS, _build_counted_array, _make_quick_array_class, _make_shared_array,
                       _quick_scalar_casts, _wrap_atomic, _wrap_kernel_call)
from ._warps import (SIMULATOR_COLLECTIVES, WARP_INTRINSICS, activemask, all_sync, any_sync, ballot_sync,
                     eq_sync, lanemask_lt, match_all_sync, match_any_sync, nanosleep, shfl_down_sync,
                     shfl_sync, shfl_up_sync, shfl_xor_sync, simulator_collective_sync, syncwarp)
from ._warps import _wrap_syncthreads, _wrap_thread_run

__all__ = [
    "WARP_TIMEOUT_S", "WARP_INTRINSICS", "SIMULATOR_COLLECTIVES", "WARP_SIZE", "FULL_MASK", "WarpSyncError",
    "simulator_in_use", "install", "cooperative", "add_launch_listener", "remove_launch_listener",
    "add_launch_gate", "remove_launch_gate", "launch_gates",
    "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "ballot_sync", "all_sync", "any_sync",
    "eq_sync", "match_any_sync", "match_all_sync", "syncwarp", "activemask", "lanemask_lt",
    "simulator_collective_sync", "nanosleep",
]

# A warp that makes no progress this long (no lane arrives, leaves or exits) is reported as stuck.
# Read from here at each check (``_warps``), so setting ``course.simulator.WARP_TIMEOUT_S`` takes effect.
WARP_TIMEOUT_S = 60.0

_GPU_ONLY_JIT_OPTIONS = ("lineinfo", "launch_bounds", "lto", "forceinline", "max_registers")


def simulator_in_use() -> bool:
    """True when numba runs kernels on its CUDA simulator.

    Imports numba, which fixes the choice: ``course.device`` chooses the device (and then calls
    :func:`install`); this package only follows the choice, so it never imports ``course.device``.
    """
    import numba

    return bool(numba.config.ENABLE_CUDASIM)


def install() -> bool:
    """Give the simulator warp intrinsics and traffic hooks; return True when it is in use.

    Safe to call any number of times, also after numba and kernels were created, and from
    fresh copies of this package: the patches are marked on the simulator's own classes. On a
    real GPU nothing is needed and ``False`` is returned. Call it after the device is chosen
    (``course.use_device()`` does).
    """
    if not simulator_in_use():
        return False
    from numba.cuda.simulator import kernel

    if getattr(kernel.FakeCUDAKernel, "_course_hooks", None) is None:
        _patch_simulator()
    return True


def add_launch_listener(listener) -> None:
    """Call ``listener(launch)`` after every kernel launch, with the launch's counted traffic.

    ``launch`` is a dict: ``kernel_name`` (str), ``grid`` and ``block`` (3-tuples of int) and
    ``counts``, a list of ``(space, name, itemsize, loads, stores)`` where ``space`` is
    ``"global"`` (``name`` is the kernel parameter) or ``"shared"`` (``name`` is ``"shared"``).
    Counting runs only while at least one listener is registered.
    """
    if not callable(listener):
        raise TypeError(f"listener must be callable, got {type(listener).__name__}")
    if not install():
        raise RuntimeError("traffic hooks need numba's CUDA simulator")
    _hooks().listeners.append(listener)


def remove_launch_listener(listener) -> None:
    """Stop calling ``listener``; a listener that is not registered is ignored."""
    hooks = _hooks()
    if hooks is not None and listener in hooks.listeners:
        hooks.listeners.remove(listener)


def _hooks():
    from numba.cuda.simulator import kernel

    return getattr(kernel.FakeCUDAKernel, "_course_hooks", None)


class _Hooks:
    """State shared by every copy of this package: kept on the simulator's kernel class."""

    def __init__(self):
        self.listeners = []
        self.launch = None        # the _LaunchCounts of the launch being counted


# --------------------------------------------------------------------------------------------
# Patching the simulator
# --------------------------------------------------------------------------------------------

def _patch_simulator() -> None:
    import numba.cuda
    from numba.cuda.simulator import kernel, kernelapi
    from numba.cuda.simulator.cudadrv import devicearray

    _build_counted_array(devicearray)

    thread_cls = kernel.BlockThread
    kernel.BlockManager.run = _run_block
    kernelapi.threading = _ThreadingForKernels()
    thread_cls.run = _wrap_thread_run(_signal_when_done(thread_cls.run))
    thread_cls.syncthreads = _wrap_syncthreads(_barrier_wait)

    module_cls = kernelapi.FakeCUDAModule
    for name in WARP_INTRINSICS + SIMULATOR_COLLECTIVES + ("nanosleep",):
        function = globals()[name]
        setattr(module_cls, name, staticmethod(function))
        setattr(numba.cuda, name, function)
    numba.cuda.jit = _tolerant_jit(numba.cuda.jit)

    kernelapi.FakeCUDAShared.array = _make_shared_array(kernelapi, kernel.FakeCUDAKernel)
    for name in _ATOMICS:
        setattr(kernelapi.FakeCUDAAtomic, name,
                _wrap_atomic(getattr(kernelapi.FakeCUDAAtomic, name)))

    kernel.FakeWithinKernelCUDAArray = _make_quick_array_class(devicearray)
    _quick_scalar_casts()

    kernel_cls = kernel.FakeCUDAKernel
    kernel_cls.__call__ = _wrap_kernel_call(kernel_cls.__call__, kernel, devicearray)
    # Set last: its presence tells install() that everything above is in place.
    kernel_cls._course_hooks = _Hooks()


def _tolerant_jit(simulator_jit):
    def jit(func_or_sig=None, **options):
        for name in _GPU_ONLY_JIT_OPTIONS:
            options.pop(name, None)
        return simulator_jit(func_or_sig, **options)
    jit.__doc__ = simulator_jit.__doc__
    return jit
