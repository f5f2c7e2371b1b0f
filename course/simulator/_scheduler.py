"""How ``course.simulator`` runs a block: its threads take turns, and its barriers.

numba's simulator starts an operating system thread per CUDA thread and releases a barrier from a loop
that polls every thread without pause. :func:`_run_block` takes the place of ``BlockManager.run``: a
block's threads are greenlets that run one at a time, in thread-id order, each until it parks
(:func:`_park`) in a barrier, a warp intrinsic (``_warps``), a ``nanosleep`` or at its end; or, with
``COURSE_SIMULATOR_THREADS=os`` (or no ``greenlet``), operating system threads again, woken by a
condition instead of a busy loop. :func:`_current_thread` is the simulated thread running now, under
either. The package's docstring says why.
"""

from __future__ import annotations

import os
import threading

import numpy as np

try:                    # cooperative threads: a block's threads take turns in one interpreter thread
    import greenlet as _greenlet
except ImportError:     # pragma: no cover - greenlet comes with the course's requirements
    _greenlet = None


class WarpSyncError(RuntimeError):
    """A warp intrinsic was used in a way that hangs or is undefined on a GPU."""

    # Named after the package, which re-exports it: ``course.simulator.WarpSyncError`` in a traceback.
    __module__ = __name__.rpartition(".")[0]


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

    Cooperative (greenlets, see the package's docstring) unless told otherwise. numba's version
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
