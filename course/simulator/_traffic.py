"""What ``course.simulator`` does around every launch: count its traffic, and run the launch gates.

While a launch listener is registered (``course.simulator.add_launch_listener``; ``course.traffic`` is
the public face), each array argument reaches the kernel as a counted array, which counts its element
loads and stores in a :class:`_Slot` of the launch's :class:`_LaunchCounts`; shared arrays and atomics
are counted too. The package's docstring states the counting model. Launch gates (:func:`add_launch_gate`)
run around every launch, counted or not. And two shortcuts make every launch faster: element access of
an uncounted array in one Python call (:func:`_make_quick_array_class`), and the cast of a plain number
by a numba type (:func:`_quick_scalar_casts`).
"""

from __future__ import annotations

import inspect
import itertools
import sys

import numpy as np

_ATOMICS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min",
            "nanmax", "nanmin", "compare_and_swap", "cas")


# --------------------------------------------------------------------------------------------
# Counters and counted arrays
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
_CountedArray = None   # built by _build_counted_array from the simulator's array wrapper


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


def _build_counted_array(devicearray) -> None:
    """Build ``_CountedArray`` from the simulator's array wrapper, once, as the package patches it."""
    global _CountedArray
    _CountedArray = _make_counted_array_class(devicearray)


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
# Hooks on launches, shared arrays and atomics
# --------------------------------------------------------------------------------------------

# Checks every kernel launch passes before the kernel runs (course.gates).
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


def launch_gates() -> tuple:
    """The gates registered by ``add_launch_gate`` (and not removed), in the order they run."""
    return tuple(_GATES)


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
        del alignment   # GPU machine code only (see the package's docstring)
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
