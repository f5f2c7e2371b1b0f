"""Every trick that makes numba's CUDA simulator serve this course, in one module.

numba-cuda's simulator runs each CUDA thread of a block as a Python thread and a ``syncthreads``
as a barrier between them. It lacks the warp-level intrinsics and says nothing about memory
traffic. :func:`install` adds both, by patching a few simulator classes once per process:

- **warp intrinsics** on ``cuda`` inside kernels (and on ``numba.cuda``), with the semantics of
  the PTX instructions numba compiles them to: ``shfl_sync``, ``shfl_up_sync``,
  ``shfl_down_sync``, ``shfl_xor_sync``, ``ballot_sync``, ``all_sync``, ``any_sync``,
  ``eq_sync``, ``match_any_sync``, ``match_all_sync``, ``syncwarp``, ``activemask``,
  ``lanemask_lt``. (``cuda.laneid`` and ``cuda.warpsize`` already exist.)
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
- **traffic hooks**: while a listener is registered (``course.traffic.count_traffic`` is the
  public face), every element load and store of a kernel argument or of shared memory is counted.

Left as numba's simulator has them: the atomics (``cuda.atomic.add`` ..., under a lock) and
``cuda.threadfence`` (a no-op, which is exact here: blocks run one after another, so every store of
a block is visible to the blocks after it, as a fence makes it on a GPU).

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
    store; ``a[i] += x`` is both. Shapes, sizes, slices and views are free: elements of a view
    count against the argument it came from. ``cuda.local.array`` is not counted. An atomic
    (``cuda.atomic.add`` ...) counts one load and one store. Element reads hidden inside NumPy
    array methods (``a.sum()``) are not counted: kernels read elements one at a time.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import threading
import time

import numpy as np

try:                    # cooperative threads: a block's threads take turns in one interpreter thread
    import greenlet as _greenlet
except ImportError:     # pragma: no cover - greenlet comes with the course's requirements
    _greenlet = None

from kernels.launching import cdiv

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF
# A warp that makes no progress this long (no lane arrives, leaves or exits) is reported as stuck.
WARP_TIMEOUT_S = 60.0
# Waiting lanes wake up this often to notice aborted launches and the timeout.
_POLL_S = 0.5

WARP_INTRINSICS = ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
                   "ballot_sync", "all_sync", "any_sync", "eq_sync", "match_any_sync",
                   "match_all_sync", "syncwarp", "activemask", "lanemask_lt")

_GPU_ONLY_JIT_OPTIONS = ("lineinfo", "launch_bounds", "lto", "forceinline", "max_registers")

_ATOMICS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min",
            "nanmax", "nanmin", "compare_and_swap", "cas")


class WarpSyncError(RuntimeError):
    """A warp intrinsic was used in a way that hangs or is undefined on a GPU."""


def simulator_in_use() -> bool:
    """True when numba runs kernels on its CUDA simulator.

    Imports numba, which fixes the choice: ``course.device`` chooses the device (and then calls
    :func:`install`); this module only follows the choice, so it never imports ``course.device``.
    """
    import numba

    return bool(numba.config.ENABLE_CUDASIM)


def install() -> bool:
    """Give the simulator warp intrinsics and traffic hooks; return True when it is in use.

    Safe to call any number of times, also after numba and kernels were created, and from
    fresh copies of this module: the patches are marked on the simulator's own classes. On a
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
    """State shared by every copy of this module: kept on the simulator's kernel class."""

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

    global _CountedArray
    _CountedArray = _make_counted_array_class(devicearray)

    thread_cls = kernel.BlockThread
    kernel.BlockManager.run = _run_block
    kernelapi.threading = _ThreadingForKernels()
    thread_cls.run = _wrap_thread_run(_signal_when_done(thread_cls.run))
    thread_cls.syncthreads = _wrap_syncthreads(_barrier_wait)

    module_cls = kernelapi.FakeCUDAModule
    for name in WARP_INTRINSICS + ("nanosleep",):
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


class _Barrier:
    """What a block's threads tell the thread that runs the block: who waits, who still runs."""

    __slots__ = ("cond", "live", "waiting")

    def __init__(self, n_threads):
        self.cond = threading.Condition()
        self.live = n_threads       # threads not yet finished
        self.waiting = []           # threads waiting in syncthreads, in arrival order


def cooperative() -> bool:
    """True when a block's threads are greenlets taking turns (the default), False when they are
    operating system threads (``COURSE_SIMULATOR_THREADS=os``, or no ``greenlet`` installed)."""
    return _greenlet is not None and os.environ.get("COURSE_SIMULATOR_THREADS", "") != "os"


class _Turns:
    """The greenlet of one simulated thread, and what it waits for while it is parked."""

    __slots__ = ("greenlet", "until")

    def __init__(self, greenlet):
        self.greenlet = greenlet
        self.until = None           # None: ready to run; else a callable, true once it may go on


def _current_thread():
    """The simulated thread running now: the greenlet's thread, else the operating system's."""
    if _greenlet is not None:
        thread = getattr(_greenlet.getcurrent(), "course_thread", None)
        if thread is not None:
            return thread
    return threading.current_thread()


class _ThreadingForKernels:
    """``threading`` as numba's simulator API sees it: ``current_thread`` knows the greenlets."""

    current_thread = staticmethod(_current_thread)

    def __getattr__(self, name):
        return getattr(threading, name)


def _park(thread, until=None) -> None:
    """Give the turn back to the block's scheduler until ``until()`` is true (None: at once)."""
    thread._course_turns.until = until
    _greenlet.getcurrent().parent.switch()


def _in_turns(thread) -> bool:
    return getattr(thread, "_course_turns", None) is not None


def _run_block(self, grid_point, *args):
    """``BlockManager.run``: run the block's threads, release each barrier once every live
    thread waits in it, re-raise the first thread's exception after aborting the others.

    Cooperative (greenlets, see the module's docstring) unless told otherwise. numba's version
    polls ``is_alive`` and the blocked flags of every thread in a busy loop; the operating system
    threads' version here sleeps on a condition between events.
    """
    from numba.cuda.simulator.kernel import BlockThread

    threads = []
    for block_point in np.ndindex(*self._block_dim):
        def target():
            self._f(*args)
        threads.append(BlockThread(target, self, grid_point, block_point, self._debug))
    barrier = self._course_barrier = _Barrier(len(threads))
    if cooperative():
        return _take_turns(self, threads, barrier)
    for thread in threads:
        thread.start()
    with barrier.cond:
        while True:
            failed = next((t for t in threads if t.exception), None)
            if failed is not None:
                for other in threads:          # as numba does: abort the rest, do not join
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
                raise failed.exception[0].with_traceback(failed.exception[1])
            if barrier.live == 0:
                return self
            if barrier.waiting and len(barrier.waiting) == barrier.live:
                for thread in barrier.waiting:
                    thread.syncthreads_blocked = False
                    thread.syncthreads_event.set()
                barrier.waiting = []
            barrier.cond.wait()


def _take_turns(manager, threads, barrier):
    """Run the threads as greenlets, each until it parks, in thread-id order, round after round."""
    scheduler = _greenlet.getcurrent()
    for thread in threads:
        runner = _greenlet.greenlet(thread.run, parent=scheduler)
        runner.course_thread = thread
        thread._course_turns = _Turns(runner)
    live = threads
    try:
        while live:
            moved = False
            for thread in live:
                turns = thread._course_turns
                if turns.until is not None and not turns.until():
                    continue
                turns.until = None
                turns.greenlet.switch()
                moved = True
                if thread.exception:            # the others are unwound below, as numba aborts them
                    for other in threads:
                        other.abort = True
                    raise thread.exception[0].with_traceback(thread.exception[1])
            live = [thread for thread in live if not thread._course_turns.greenlet.dead]
            if barrier.waiting and len(barrier.waiting) == barrier.live:
                for thread in barrier.waiting:
                    thread.syncthreads_blocked = False
                barrier.waiting = []
                moved = True
            if live and not moved:
                raise WarpSyncError(_describe_stuck_block(manager, live))
        return manager
    finally:
        for thread in threads:          # an aborted launch: unwind the threads that still wait
            runner = thread._course_turns.greenlet
            if not runner.dead:
                runner.throw()


def _describe_stuck_block(manager, live) -> str:
    lines = [f"block {tuple(live[0].blockIdx)} can never continue (on a GPU it would hang):"]
    at_sync = [t for t in live if t.syncthreads_blocked]
    if at_sync:
        lines.append(f"  {len(at_sync)} thread(s) wait in cuda.syncthreads(), e.g. threadIdx "
                     f"{tuple(at_sync[0].threadIdx)}")
    others = [t for t in live if not t.syncthreads_blocked]
    if others:
        lines.append(f"  {len(others)} thread(s) wait in a warp intrinsic, e.g. threadIdx "
                     f"{tuple(others[0].threadIdx)}")
    return "\n".join(lines)


def _signal_when_done(original_run):
    def run(self):
        try:
            original_run(self)          # numba's: records an exception in self.exception
        finally:
            barrier = self._manager._course_barrier
            with barrier.cond:
                barrier.live -= 1
                barrier.cond.notify()
    return run


def _barrier_wait(self):
    """``BlockThread.syncthreads``: wait until the block releases the barrier."""
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    barrier = self._manager._course_barrier
    with barrier.cond:
        self.syncthreads_blocked = True
        barrier.waiting.append(self)
        barrier.cond.notify()
    if _in_turns(self):
        _park(self, lambda: not self.syncthreads_blocked or self.abort)
    else:
        self.syncthreads_event.wait()
        self.syncthreads_event.clear()
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def _tolerant_jit(simulator_jit):
    def jit(func_or_sig=None, **options):
        for name in _GPU_ONLY_JIT_OPTIONS:
            options.pop(name, None)
        return simulator_jit(func_or_sig, **options)
    jit.__doc__ = simulator_jit.__doc__
    return jit


def nanosleep(ns):
    """Sleep about ``ns`` nanoseconds on a GPU; here it only lets the other threads run."""
    _integer("nanosleep", "ns", ns)
    thread = _current_thread()
    if _in_turns(thread):
        _park(thread)
    else:
        time.sleep(0)


# --------------------------------------------------------------------------------------------
# Warps: per-block bookkeeping
# --------------------------------------------------------------------------------------------

_ACTIVEMASK = "activemask"
_BLOCK_CREATION = threading.Lock()


class _Round:
    """One execution of a warp intrinsic by the lanes of one mask."""

    __slots__ = ("kind", "mask", "expected", "args", "arrived", "results", "done")

    def __init__(self, kind, mask, expected):
        self.kind = kind
        self.mask = mask
        self.expected = expected      # lanes of the mask that exist in this block
        self.args = {}                # lane -> what the lane brought
        self.arrived = 0              # bit per lane that has called
        self.results = None           # lane -> result, once done
        self.done = False


class _Warp:
    __slots__ = ("index", "present", "exited", "rounds", "waiting", "cond", "last_progress",
                 "error")

    def __init__(self, index, present, lock):
        self.index = index
        self.present = present        # bit per lane that exists (partial last warp)
        self.exited = 0               # bit per lane whose thread has finished
        self.rounds = {}              # open rounds by key (the mask, or the activemask site)
        self.waiting = {}             # lane -> round it waits in
        self.cond = threading.Condition(lock)
        self.last_progress = time.monotonic()
        self.error = None             # set once the warp is found stuck


class _Block:
    __slots__ = ("lock", "threads", "warps", "index")

    def __init__(self, n_threads, index):
        self.lock = threading.Lock()
        self.threads = [None] * n_threads    # by linear thread id, once started
        self.index = index
        self.warps = []
        for w in range(cdiv(n_threads, WARP_SIZE)):
            lanes = min(WARP_SIZE, n_threads - w * WARP_SIZE)
            self.warps.append(_Warp(w, (1 << lanes) - 1, self.lock))


def _block_of(thread) -> _Block:
    manager = thread._manager
    block = manager.__dict__.get("_course_block")
    if block is None:
        with _BLOCK_CREATION:
            block = manager.__dict__.get("_course_block")
            if block is None:
                n_threads = int(np.prod(manager._block_dim))
                block = _Block(n_threads, tuple(thread.blockIdx))
                manager._course_block = block
    return block


def _wrap_thread_run(original_run):
    def run(self):
        block = _block_of(self)
        self._course_block = block
        self._course_at_sync = False
        self._course_syncs = 0
        block.threads[self.thread_id] = self
        try:
            original_run(self)
        finally:
            warp = block.warps[self.thread_id // WARP_SIZE]
            with block.lock:
                warp.exited |= 1 << (self.thread_id % WARP_SIZE)
                warp.last_progress = time.monotonic()
                if warp.rounds:
                    _advance(block, warp)
    return run


def _wrap_syncthreads(original_syncthreads):
    def syncthreads(self):
        block = getattr(self, "_course_block", None)
        if block is None:
            return original_syncthreads(self)
        warp = block.warps[self.thread_id // WARP_SIZE]
        with block.lock:
            self._course_at_sync = True
            if warp.rounds:
                _advance(block, warp)
        try:
            original_syncthreads(self)
        finally:
            self._course_at_sync = False
        self._course_syncs += 1
    return syncthreads


def _syncs_done(block) -> int:
    return max(t._course_syncs for t in block.threads if t is not None)


def _parked_at_syncthreads(thread, syncs_done) -> bool:
    # A thread released from a barrier but not yet running again still carries the flag; it
    # is recognised by having passed fewer barriers than the threads already running on.
    return thread._course_at_sync and thread._course_syncs == syncs_done


def _quiescent(block, warp) -> bool:
    """True when no lane of the warp runs: each has exited or waits (warp op or syncthreads)."""
    base = warp.index * WARP_SIZE
    at_sync = []
    for lane in range(WARP_SIZE):
        bit = 1 << lane
        if not warp.present & bit or warp.exited & bit or lane in warp.waiting:
            continue
        thread = block.threads[base + lane]
        if thread is None or not thread._course_at_sync:
            return False
        at_sync.append(thread)
    syncs_done = _syncs_done(block) if at_sync else 0
    return all(_parked_at_syncthreads(thread, syncs_done) for thread in at_sync)


def _advance(block, warp) -> None:
    """Complete every round that can complete; detect a stuck warp. Holds ``block.lock``."""
    progressed = False
    for key, rnd in list(warp.rounds.items()):
        if rnd.kind != _ACTIVEMASK and (rnd.arrived | warp.exited) & rnd.expected == rnd.expected:
            _complete(warp, key, rnd)
            progressed = True
    if not progressed and warp.rounds and _quiescent(block, warp):
        converged = [(key, rnd) for key, rnd in warp.rounds.items() if rnd.kind == _ACTIVEMASK]
        for key, rnd in converged:
            _complete(warp, key, rnd)
        progressed = bool(converged)
        if not converged:
            warp.error = _describe_stuck_warp(block, warp)
    if progressed or warp.error:
        warp.last_progress = time.monotonic()
        warp.cond.notify_all()


def _complete(warp, key, rnd) -> None:
    del warp.rounds[key]
    rnd.results = _RESULTS[rnd.kind](rnd)
    rnd.done = True
    for lane in rnd.args:
        warp.waiting.pop(lane, None)


def _lanes(bits) -> str:
    lanes = [lane for lane in range(WARP_SIZE) if bits >> lane & 1]
    return ", ".join(map(str, lanes)) if lanes else "none"


def _describe_stuck_warp(block, warp) -> str:
    syncs_done = _syncs_done(block)
    at_sync = 0
    for lane in range(WARP_SIZE):
        thread = block.threads[warp.index * WARP_SIZE + lane] if warp.present >> lane & 1 else None
        if thread is not None and lane not in warp.waiting and _parked_at_syncthreads(
                thread, syncs_done):
            at_sync |= 1 << lane
    lines = [f"warp {warp.index} of block {block.index} can never continue (on a GPU it would "
             "hang or read garbage):"]
    for rnd in warp.rounds.values():
        missing = rnd.expected & ~rnd.arrived & ~warp.exited
        lines.append(f"  lanes {_lanes(rnd.arrived)} wait in cuda.{rnd.kind}(mask={rnd.mask:#010x})"
                     f" for lanes {_lanes(missing)}")
    if at_sync:
        lines.append(f"  lanes {_lanes(at_sync)} wait in cuda.syncthreads()")
    lines.append("Every lane named in a mask must make the same call; use cuda.activemask() or a "
                 "mask that names only the lanes that reach the call.")
    return "\n".join(lines)


def _exchange(kind, mask, arg, key=None):
    """Join the round of ``kind`` for ``mask``, wait for it, return this lane's result."""
    thread = _current_thread()
    block = getattr(thread, "_course_block", None)
    if block is None:
        raise RuntimeError(f"cuda.{kind}() can only be called inside a kernel running on the "
                           "CUDA simulator")
    lane = thread.thread_id % WARP_SIZE
    warp = block.warps[thread.thread_id // WARP_SIZE]
    bit = 1 << lane
    if kind != _ACTIVEMASK and not mask & bit:
        raise WarpSyncError(
            f"cuda.{kind}: lane {lane} of warp {warp.index} passed mask {mask:#010x}, which leaves "
            "out the calling lane itself; that is undefined on a GPU. Name every calling lane in "
            "the mask (cuda.activemask() gives the lanes that are here).")
    key = mask if key is None else key
    with block.lock:
        if warp.error:
            raise WarpSyncError(warp.error)
        rnd = warp.rounds.get(key)
        if rnd is None:
            rnd = warp.rounds[key] = _Round(kind, mask, mask & warp.present)
        elif rnd.kind != kind:
            warp.error = (f"lanes of warp {warp.index} of block {block.index} called different "
                          f"warp intrinsics with the same mask {mask:#010x} at the same time: "
                          f"lanes {_lanes(rnd.arrived)} called cuda.{rnd.kind}, lane {lane} "
                          f"called cuda.{kind}. On a GPU that is undefined; make every lane of "
                          "the mask execute the same call.")
            warp.cond.notify_all()
            raise WarpSyncError(warp.error)
        rnd.arrived |= bit
        rnd.args[lane] = arg
        warp.waiting[lane] = rnd
        warp.last_progress = time.monotonic()
        _advance(block, warp)
        while not rnd.done:
            if warp.error:
                raise WarpSyncError(warp.error)
            if thread.abort:
                raise RuntimeError(f"cuda.{kind}: the launch was aborted by another thread")
            if _in_turns(thread):
                block.lock.release()
                try:
                    _park(thread, lambda: rnd.done or warp.error is not None or thread.abort)
                finally:
                    block.lock.acquire()
                continue
            warp.cond.wait(_POLL_S)
            if rnd.done:
                break
            _advance(block, warp)
            if not rnd.done and time.monotonic() - warp.last_progress > WARP_TIMEOUT_S:
                missing = rnd.expected & ~rnd.arrived & ~warp.exited
                warp.error = (
                    f"cuda.{kind}(mask={mask:#010x}) in warp {warp.index} of block {block.index}: "
                    f"lanes {_lanes(rnd.arrived)} waited {WARP_TIMEOUT_S:g} s for lanes "
                    f"{_lanes(missing)}, which never arrived (an endless loop in those lanes?)")
                warp.cond.notify_all()
        return rnd.results[lane]


# --------------------------------------------------------------------------------------------
# Warps: what each intrinsic computes once its round is complete
# --------------------------------------------------------------------------------------------

def _shuffle(source_lane):
    """Results of a shuffle; ``source_lane(lane, b)`` is None when the source is out of range."""
    def results(rnd):
        args, arrived = rnd.args, rnd.arrived
        out = {}
        for lane, (value, b) in args.items():
            src = source_lane(lane, b)
            out[lane] = args[src][0] if src is not None and arrived >> src & 1 else value
        return out
    return results


def _same_result(compute):
    def results(rnd):
        value = compute(rnd)
        return dict.fromkeys(rnd.args, value)
    return results


def _ballot(rnd):
    bits = 0
    for lane, predicate in rnd.args.items():
        if predicate:
            bits |= 1 << lane
    return np.uint32(bits).view(np.int32)


def _match_any(rnd):
    groups = {}
    for lane, bits in rnd.args.items():
        groups[bits] = groups.get(bits, 0) | 1 << lane
    return {lane: np.uint32(groups[bits]).view(np.int32) for lane, bits in rnd.args.items()}


def _match_all(rnd):
    same = len(set(rnd.args.values())) == 1
    return (np.uint32(rnd.arrived if same else 0).view(np.int32), same)


_RESULTS = {
    "shfl_sync": _shuffle(lambda lane, b: b),
    "shfl_up_sync": _shuffle(lambda lane, b: lane - b if lane >= b else None),
    "shfl_down_sync": _shuffle(lambda lane, b: lane + b if lane + b < WARP_SIZE else None),
    "shfl_xor_sync": _shuffle(lambda lane, b: lane ^ b),
    "ballot_sync": _same_result(_ballot),
    "all_sync": _same_result(lambda rnd: all(rnd.args.values())),
    "any_sync": _same_result(lambda rnd: any(rnd.args.values())),
    "eq_sync": _same_result(lambda rnd: len(set(rnd.args.values())) == 1),
    "match_any_sync": _match_any,
    "match_all_sync": _same_result(_match_all),
    "syncwarp": _same_result(lambda rnd: None),
    _ACTIVEMASK: _same_result(lambda rnd: np.uint32(rnd.arrived)),
}


# --------------------------------------------------------------------------------------------
# Warps: the intrinsics, checking their arguments as numba's typing does on a GPU
# --------------------------------------------------------------------------------------------

_SHUFFLE_TYPES = (int, float, np.int32, np.int64, np.float32, np.float64)


def _integer(name, what, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"cuda.{name}: {what} must be an integer, got {type(value).__name__} "
                        f"{value!r}")
    return int(value)


def _mask(name, mask) -> int:
    # The hardware takes the low 32 bits, so -1 means all lanes.
    return _integer(name, "mask", mask) & FULL_MASK


def _word(name, value):
    if isinstance(value, bool) or not isinstance(value, _SHUFFLE_TYPES):
        raise TypeError(f"cuda.{name}: value must be a 32- or 64-bit int or float (int32, int64, "
                        f"float32, float64) as on a GPU, got {type(value).__name__} {value!r}")
    return value


def _predicate(name, predicate) -> bool:
    if not isinstance(predicate, (int, np.integer, np.bool_)):
        raise TypeError(f"cuda.{name}: predicate must be an integer or a boolean as on a GPU, "
                        f"got {type(predicate).__name__} {predicate!r}")
    return bool(predicate)


def _shuffle_call(name, mask, value, b, what):
    lane_bits = _integer(name, what, b) & (WARP_SIZE - 1)   # the hardware reads 5 bits
    return _exchange(name, _mask(name, mask), (_word(name, value), lane_bits))


def shfl_sync(mask, value, src_lane):
    """``value`` of lane ``src_lane % 32``, exchanged among the lanes of ``mask``."""
    return _shuffle_call("shfl_sync", mask, value, src_lane, "src_lane")


def shfl_up_sync(mask, value, delta):
    """``value`` of lane ``laneid - delta``; the caller's own value when that is below lane 0."""
    return _shuffle_call("shfl_up_sync", mask, value, delta, "delta")


def shfl_down_sync(mask, value, delta):
    """``value`` of lane ``laneid + delta``; the caller's own value when that is past lane 31."""
    return _shuffle_call("shfl_down_sync", mask, value, delta, "delta")


def shfl_xor_sync(mask, value, lane_mask):
    """``value`` of lane ``laneid ^ lane_mask`` (butterfly exchange)."""
    return _shuffle_call("shfl_xor_sync", mask, value, lane_mask, "lane_mask")


def ballot_sync(mask, predicate):
    """int32 with bit ``n`` set when lane ``n`` of ``mask`` has a true ``predicate``."""
    return _exchange("ballot_sync", _mask("ballot_sync", mask),
                     _predicate("ballot_sync", predicate))


def all_sync(mask, predicate):
    """True when ``predicate`` is true in every lane of ``mask``."""
    return _exchange("all_sync", _mask("all_sync", mask), _predicate("all_sync", predicate))


def any_sync(mask, predicate):
    """True when ``predicate`` is true in some lane of ``mask``."""
    return _exchange("any_sync", _mask("any_sync", mask), _predicate("any_sync", predicate))


def eq_sync(mask, predicate):
    """True when ``predicate`` has the same truth value in every lane of ``mask``."""
    return _exchange("eq_sync", _mask("eq_sync", mask), _predicate("eq_sync", predicate))


def match_any_sync(mask, value):
    """int32 mask of the lanes of ``mask`` whose ``value`` has the same bits as the caller's."""
    bits = np.asarray(_word("match_any_sync", value)).tobytes()
    return _exchange("match_any_sync", _mask("match_any_sync", mask), bits)


def match_all_sync(mask, value):
    """``(mask, True)`` when all lanes of ``mask`` hold the same ``value``, else ``(0, False)``."""
    bits = np.asarray(_word("match_all_sync", value)).tobytes()
    return _exchange("match_all_sync", _mask("match_all_sync", mask), bits)


def syncwarp(mask=FULL_MASK):
    """Wait until every lane of ``mask`` has reached a ``syncwarp`` with this mask."""
    _exchange("syncwarp", _mask("syncwarp", mask), None)


def activemask():
    """uint32 mask of the lanes of this warp that are here, converged at this call."""
    caller = sys._getframe(1)
    return _exchange(_ACTIVEMASK, FULL_MASK, None, key=(_ACTIVEMASK, caller.f_code, caller.f_lasti))


def mma_m16n8k16(a, b, c):
    """PTX's ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` for the calling lane: ``a`` (4), ``b`` (2)
    uint32 words of two fp16 numbers (the lower column or row in the low 16 bits) and ``c`` (4) float32,
    this lane's fragments of A (16 x 16, row-major), B (16 x 8, column-major) and C (16 x 8), as the
    PTX ISA lays them out (lane = 4 g + t: a = A[g, 2t:2t+2], A[g+8, 2t:2t+2], A[g, 2t+8:2t+10],
    A[g+8, 2t+8:2t+10]; b = B[2t:2t+2, g], B[2t+8:2t+10, g]; c = C[g, 2t:2t+2], C[g+8, 2t:2t+2]).
    Returns this lane's 4 float32 of D = A B + C. All 32 lanes of the warp must call it together,
    as ``.sync.aligned`` requires. numba has no such intrinsic: kernels reach the instruction as
    inline PTX and use this stand-in in the simulator. The products are exact in float64 and D is
    rounded once to float32 (a tensor core rounds its sums its own way, within float32's error)."""
    if len(a) != 4 or len(b) != 2 or len(c) != 4:
        raise TypeError(f"mma_m16n8k16: a, b and c must hold 4, 2 and 4 numbers, got {len(a)}, {len(b)}, {len(c)}")
    return _exchange("mma_m16n8k16", FULL_MASK, (tuple(int(w) & 0xFFFFFFFF for w in a),
                                                  tuple(int(w) & 0xFFFFFFFF for w in b),
                                                  tuple(float(x) for x in c)))


def _halves(words) -> np.ndarray:
    """uint32 words of two fp16 numbers each, as float64 pairs (low half first)."""
    return np.array(words, np.uint32).view(np.float16).astype(np.float64).reshape(-1, 2)


def _mma_m16n8k16(rnd):
    if rnd.arrived != FULL_MASK:
        raise WarpSyncError(f"mma_m16n8k16 needs all 32 lanes of the warp, got lanes {_lanes(rnd.arrived)}")
    A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane, (a, b, c) in rnd.args.items():
        g, t = lane >> 2, lane & 3
        pairs = _halves(a)
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = pairs[0], pairs[1]
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = pairs[2], pairs[3]
        pairs = _halves(b)
        B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = pairs[0], pairs[1]
        C[g, 2 * t:2 * t + 2], C[g + 8, 2 * t:2 * t + 2] = c[:2], c[2:]
    D = (A @ B + C).astype(np.float32)
    return {lane: (D[lane >> 2, 2 * (lane & 3)], D[lane >> 2, 2 * (lane & 3) + 1],
                   D[(lane >> 2) + 8, 2 * (lane & 3)], D[(lane >> 2) + 8, 2 * (lane & 3) + 1])
            for lane in rnd.args}


_RESULTS["mma_m16n8k16"] = _mma_m16n8k16


def lanemask_lt():
    """uint32 mask of the lanes below the calling lane."""
    thread = _current_thread()
    if getattr(thread, "_course_block", None) is None:
        raise RuntimeError("cuda.lanemask_lt() can only be called inside a kernel running on the "
                           "CUDA simulator")
    lane = thread.thread_id % WARP_SIZE
    return np.uint32((1 << lane) - 1)


# --------------------------------------------------------------------------------------------
# Traffic: counters and counted arrays
# --------------------------------------------------------------------------------------------

class _Slot:
    """Loads and stores of one argument (or of shared memory) at one element size.

    The counters are ``itertools.count`` objects: ``next()`` on them is atomic under the GIL,
    so the block's threads count exactly without a lock.
    """

    __slots__ = ("space", "name", "itemsize", "loads", "stores", "launch")

    def __init__(self, space, name, itemsize, launch):
        self.space, self.name, self.itemsize, self.launch = space, name, itemsize, launch
        self.loads = itertools.count()
        self.stores = itertools.count()

    def sibling(self, itemsize):
        return self.launch.slot(self.space, self.name, itemsize)


class _LaunchCounts:
    def __init__(self):
        self.slots = {}

    def slot(self, space, name, itemsize) -> _Slot:
        key = (space, name, itemsize)
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots.setdefault(key, _Slot(space, name, itemsize, self))
        return slot

    def totals(self) -> list:
        # next() returns how many times the counter was advanced before.
        return [(s.space, s.name, s.itemsize, next(s.loads), next(s.stores))
                for s in self.slots.values()]


_VIEW_METHODS = frozenset({"reshape", "ravel", "transpose", "view", "squeeze", "swapaxes"})
_CountedArray = None   # built by _patch_simulator from the simulator's array wrapper


def _is_element(index, ndim) -> bool:
    if type(index) is int or isinstance(index, np.integer):
        return ndim == 1
    if type(index) is tuple and len(index) == ndim:
        return all(type(i) is int or isinstance(i, np.integer) for i in index)
    return False


def _make_quick_array_class(devicearray):
    """The simulator's view of an array argument inside a kernel, with element loads and stores one
    Python call each instead of three (the simulator's wrapper calls the array wrapper it wraps, which
    calls NumPy); everything else is inherited unchanged. A launch spends much of its time here."""
    fake_array = devicearray.FakeCUDAArray
    within_kernel = devicearray.FakeWithinKernelCUDAArray

    class QuickArray(within_kernel):
        def __init__(self, item):
            attrs = self.__dict__
            attrs["_item"] = item
            attrs["_ary"] = item._ary

        def __getitem__(self, index):
            value = self._ary[index]
            kind = type(value)
            if kind is np.ndarray or kind is np.void:
                return QuickArray(fake_array(value, stream=self._item.stream))
            return value

        def __setitem__(self, index, value):
            self._ary[index] = value

    return QuickArray


def _quick_scalar_casts() -> None:
    """``float32(x)`` and the other casts of a plain number by a numba type, as a kernel writes them,
    without numba's import and abstract-class check on every call (same result: a NumPy scalar)."""
    from numba.core.types import abstract

    if getattr(abstract.Type.__call__, "_course_quick", False):
        return
    original = abstract.Type.__call__
    numbers = frozenset((bool, int, float, np.bool_, np.float16, np.float32, np.float64, np.int8, np.int16,
                         np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))

    def __call__(self, *args):
        if len(args) == 1 and type(args[0]) in numbers:
            return self.cast_python_value(args[0])
        return original(self, *args)

    __call__._course_quick = True
    abstract.Type.__call__ = __call__


def _make_counted_array_class(devicearray):
    fake_array = devicearray.FakeCUDAArray
    within_kernel = devicearray.FakeWithinKernelCUDAArray

    class CountedArray(within_kernel):
        """A kernel's view of an array whose element loads and stores are counted."""

        def __init__(self, ary, slot):
            attrs = self.__dict__
            attrs["_item"] = fake_array(ary)
            attrs["_ary"] = ary
            attrs["_slot"] = slot
            attrs["_loads"] = slot.loads
            attrs["_stores"] = slot.stores

        def _derived(self, ary):
            slot = self._slot
            if ary.itemsize != slot.itemsize:
                slot = slot.sibling(ary.itemsize)
            return CountedArray(ary, slot)

        def __getitem__(self, index):
            value = self._ary[index]
            if type(value) is np.ndarray:
                return self._derived(value)
            next(self._loads)
            if type(value) is np.void:
                return within_kernel(fake_array(value))
            return value

        def __setitem__(self, index, value):
            ary = self._ary
            source = value if isinstance(value, CountedArray) else None
            ary[index] = value._ary if source is not None else value
            count = 1 if _is_element(index, ary.ndim) else np.size(ary[index])
            stores = self._stores
            for _ in range(count):
                next(stores)
            if source is not None:
                loads = source._loads
                for _ in range(count):
                    next(loads)

        def __getattr__(self, name):
            value = getattr(self._item, name, None)
            if value is None:
                return self[name]            # a record field, as the simulator allows
            if isinstance(value, fake_array):
                return self._derived(value._ary)
            if name in _VIEW_METHODS and callable(value):
                def derived_view(*args, **kwargs):
                    result = value(*args, **kwargs)
                    if isinstance(result, fake_array):
                        result = result._ary
                    return self._derived(result) if isinstance(result, np.ndarray) else result
                return derived_view
            return value

    return CountedArray


# --------------------------------------------------------------------------------------------
# Traffic: hooks on launches, shared arrays and atomics
# --------------------------------------------------------------------------------------------

# Checks every kernel launch passes before the kernel runs (course.gpu_compile.install_gate).
_GATES: list = []


def add_launch_gate(gate) -> None:
    """Call ``gate(kernel, args)`` before every kernel launch on the simulator.

    The gate may raise (the kernel then does not run) or return a function that is called with no
    arguments once the launch has finished (and may raise in turn).
    """
    if not callable(gate):
        raise TypeError(f"gate must be callable, got {type(gate).__name__}")
    if gate not in _GATES:
        _GATES.append(gate)


def remove_launch_gate(gate) -> None:
    """Stop calling a gate added by ``add_launch_gate`` (no error if it is not there)."""
    if gate in _GATES:
        _GATES.remove(gate)


def _wrap_kernel_call(original_call, kernel_module, devicearray):
    fake_array = devicearray.FakeCUDAArray

    def __call__(self, *args):
        hooks = type(self)._course_hooks
        if self._device or kernel_module._kernel_context is not None:
            return original_call(self, *args)
        afterwards = [after for after in (gate(self, args) for gate in list(_GATES)) if after is not None]
        if not hooks.listeners:
            result = original_call(self, *args)
        else:
            result = _counted_launch(self, original_call, args, hooks, kernel_module, fake_array)
        for after in afterwards:
            after()
        return result
    return __call__


def _parameter_names(kernel) -> tuple:
    names = kernel.__dict__.get("_course_parameters")
    if names is None:
        names = tuple(inspect.signature(kernel.fn).parameters)
        kernel.__dict__["_course_parameters"] = names
    return names


def _counted_launch(kernel, original_call, args, hooks, kernel_module, fake_array):
    names = _parameter_names(kernel)
    counts = _LaunchCounts()
    writebacks = []
    converted = []
    for position, arg in enumerate(args):
        name = names[position] if position < len(names) else f"arg{position}"
        for extension in kernel.extensions:
            _, arg = extension.prepare_args(None, arg, stream=0, retr=writebacks)
        # Host arrays are copied in and back exactly as the simulator does it.
        if isinstance(arg, np.ndarray) and arg.ndim > 0:
            arg = kernel_module.InOut(arg).to_device(writebacks)
        elif isinstance(arg, kernel_module.ArgHint):
            arg = arg.to_device(writebacks)
        if isinstance(arg, fake_array) and isinstance(arg._ary, np.ndarray):
            arg = _CountedArray(arg._ary, counts.slot("global", name, arg._ary.itemsize))
        converted.append(arg)
    extensions, kernel.extensions = kernel.extensions, []
    hooks.launch = counts
    try:
        original_call(kernel, *converted)
    finally:
        hooks.launch = None
        kernel.extensions = extensions
    for writeback in writebacks:
        writeback()
    launch = {"kernel_name": kernel.fn.__name__, "grid": tuple(kernel.grid_dim),
              "block": tuple(kernel.block_dim), "counts": counts.totals()}
    for listener in list(hooks.listeners):
        listener(launch)


def _make_shared_array(kernelapi, kernel_cls):
    numpy_support, nb_types = kernelapi.numpy_support, kernelapi.types

    def array(self, shape, dtype, alignment=None):
        """The simulator's shared arrays, counted while a launch is counted.

        Allocations are keyed by the calling line, as in the simulator; ``setdefault`` makes
        the first thread's allocation the one every thread of the block gets.
        """
        del alignment   # GPU machine code only (see the module docstring)
        if isinstance(dtype, nb_types.Type):
            dtype = numpy_support.as_dtype(dtype)
        dtype = np.dtype(dtype)
        if shape == 0:
            count = self._dynshared_size // dtype.itemsize
            ary = np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
        else:
            caller = sys._getframe(1)
            key = (caller.f_code.co_filename, caller.f_lineno)
            ary = self._allocations.get(key)
            if ary is None:
                ary = self._allocations.setdefault(key, np.empty(shape, dtype))
        launch = kernel_cls._course_hooks.launch
        if launch is None:
            return ary
        return _CountedArray(ary, launch.slot("shared", "shared", ary.itemsize))

    return array


def _wrap_atomic(original):
    def atomic(self, array, *args):
        if isinstance(array, _CountedArray):
            result = original(self, array._ary, *args)
            next(array._loads)
            next(array._stores)
            return result
        return original(self, array, *args)
    atomic.__name__ = original.__name__
    atomic.__doc__ = "Atomic update; counts one load and one store of a counted array."
    return atomic
