"""The warp intrinsics of ``course.simulator``, and its own collective.

A call of a ``*_sync`` intrinsic is an exchange (:func:`_exchange`): the calling lane joins the round
(:class:`_Round`) of its mask in its warp (:class:`_Warp`), waits until every lane of the mask that exists
and has not exited has joined, and takes its result, computed once for all of them (:data:`_RESULTS`).
The package's docstring states the warp model, and what the simulator picks where a GPU is undefined.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

from kernels.launching import FULL_MASK, cdiv
from kernels.launching import WARP as WARP_SIZE

from ._scheduler import WarpSyncError, _current_thread, _in_turns, _park

# Waiting lanes wake up this often to notice aborted launches and the timeout.
_POLL_S = 0.5
# The package (``course.simulator``, or a fresh copy of it), which owns WARP_TIMEOUT_S: read there at
# each check, so that setting ``course.simulator.WARP_TIMEOUT_S`` takes effect.
_package = sys.modules[__package__]

WARP_INTRINSICS = ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
                   "ballot_sync", "all_sync", "any_sync", "eq_sync", "match_any_sync",
                   "match_all_sync", "syncwarp", "activemask", "lanemask_lt")
# Collectives of the simulator's own, for the twins of warp-wide instructions numba lacks (no GPU counterpart).
SIMULATOR_COLLECTIVES = ("simulator_collective_sync",)


# --------------------------------------------------------------------------------------------
# Per-block bookkeeping
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
    # From the last lane down: lanes arrive in the order they run, lowest first, so a lane still running is
    # found at once (the answer does not depend on the order; this is called at every lane's arrival).
    for lane in range(WARP_SIZE - 1, -1, -1):
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
            if not rnd.done and time.monotonic() - warp.last_progress > _package.WARP_TIMEOUT_S:
                missing = rnd.expected & ~rnd.arrived & ~warp.exited
                warp.error = (
                    f"cuda.{kind}(mask={mask:#010x}) in warp {warp.index} of block {block.index}: "
                    f"lanes {_lanes(rnd.arrived)} waited {_package.WARP_TIMEOUT_S:g} s for lanes "
                    f"{_lanes(missing)}, which never arrived (an endless loop in those lanes?)")
                warp.cond.notify_all()
        return rnd.results[lane]


# --------------------------------------------------------------------------------------------
# What each intrinsic computes once its round is complete
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


def _collective(rnd):
    """``simulator_collective_sync``: every lane of the mask brought ``(value, combine)``; ``combine`` runs
    once, on the 32 lanes' values (None outside the mask), and each lane gets its entry of the result."""
    combine = next(iter(rnd.args.values()))[1]
    if rnd.arrived != rnd.mask:
        raise WarpSyncError(f"cuda.simulator_collective_sync({combine.__name__}) needs every lane of its mask "
                            f"{rnd.mask:#010x} to call it together (as a .sync.aligned instruction does), got lanes "
                            f"{_lanes(rnd.arrived)}")
    values = tuple(rnd.args[lane][0] if lane in rnd.args else None for lane in range(WARP_SIZE))
    results = combine(values)
    return {lane: results[lane] for lane in rnd.args}


_RESULTS["simulator_collective_sync"] = _collective


# --------------------------------------------------------------------------------------------
# The intrinsics, checking their arguments as numba's typing does on a GPU
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


def simulator_collective_sync(mask, value, combine):
    """Simulator only, no GPU counterpart: an exchange among the lanes of ``mask`` that computes something
    of all of them at once. Each lane brings ``value``; once every lane of the mask has called (each must:
    an absent or exited lane is a :class:`WarpSyncError`, as for PTX's ``.sync.aligned`` instructions),
    ``combine(values)`` runs once, ``values`` the tuple of the 32 lanes' values (None for lanes outside the
    mask), and must return the 32 lanes' results; each lane gets its own. One round, whatever ``combine``
    computes.

    It serves the simulator twins of warp-wide instructions that numba reaches through inline PTX, whose
    result in one lane depends on the operands of all of them (``kernels.intrinsics.mma_m16n8k16``: each
    lane's fragments of A, B and C in, its fragment of D out). A kernel calls the instruction's helper,
    never this."""
    if not callable(combine):
        raise TypeError(f"cuda.simulator_collective_sync: combine must be a function of the 32 lanes' values, "
                        f"got {type(combine).__name__}")
    return _exchange("simulator_collective_sync", _mask("simulator_collective_sync", mask), (value, combine))


def lanemask_lt():
    """uint32 mask of the lanes below the calling lane."""
    thread = _current_thread()
    if getattr(thread, "_course_block", None) is None:
        raise RuntimeError("cuda.lanemask_lt() can only be called inside a kernel running on the "
                           "CUDA simulator")
    lane = thread.thread_id % WARP_SIZE
    return np.uint32((1 << lane) - 1)


def nanosleep(ns):
    """Sleep about ``ns`` nanoseconds on a GPU; here it only lets the other threads run."""
    _integer("nanosleep", "ns", ns)
    thread = _current_thread()
    if _in_turns(thread):
        _park(thread)
    else:
        time.sleep(0)
