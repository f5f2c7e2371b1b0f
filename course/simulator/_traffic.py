"""What ``course.simulator`` does around every launch: count its traffic, and run the launch gates.

While a launch listener is registered (``course.simulator.add_launch_listener``; ``course.traffic`` is
the public face), each array argument reaches the kernel as a counted array, which counts its element
loads and stores in a :class:`_Slot` of the launch's :class:`_LaunchCounts`; shared arrays and atomics
are counted too. Besides indexing, the counted array intercepts every way NumPy and Python reach its
elements (its attributes and methods, ``__array_function__``, ``__array_ufunc__``, ``__array__``,
iteration, ``.flat``, in-place operators, index arrays): each counts what it touches or raises
:class:`UncountedAccessError`, and a launch in which one was refused fails even where NumPy swallowed the
error. The package's docstring states the counting model. Launch gates (:func:`add_launch_gate`)
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
        self.refusals = []    # messages of the operations refused (UncountedAccessError) in this launch

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


class UncountedAccessError(TypeError):
    """A kernel asked for an operation that reads or writes array elements in one call, which the traffic
    counter cannot count; refused while traffic is counted (the package's counting model says which)."""


_REFUSAL_ADVICE = ("reads or writes elements inside one call, which the traffic counter cannot count, so it is "
                   "refused while traffic is counted. Read and write elements one at a time (a[i], a[i, j], a "
                   "loop over range(...)); a.sum(), np.sum(a), a.fill(x) and `for x in a` are counted.")
_COPY_ADVICE = ("makes a copy of elements (on a GPU, memory allocated inside the kernel), which the traffic counter "
                "cannot count, so it is refused while traffic is counted. Use a view that shares the elements (a "
                "slice, .T, .reshape of a contiguous array) or read elements one at a time (a[i], a[i, j]).")

# What a kernel may do with a counted array besides indexing one element (the counting model):
# attributes that read no element,
_FREE_ATTRIBUTES = frozenset({"shape", "size", "ndim", "dtype", "strides", "itemsize", "nbytes", "flags",
                              "ctypes"})
# views, which are free and count against the argument they came from (a copy is refused),
_VIEW_ATTRIBUTES = frozenset({"T", "real", "imag"})
_VIEW_METHODS = frozenset({"reshape", "ravel", "transpose", "view", "squeeze", "swapaxes"})
_VIEW_FUNCTIONS = frozenset({"reshape", "ravel", "transpose", "squeeze", "swapaxes", "expand_dims",
                             "atleast_1d", "atleast_2d", "atleast_3d", "real", "imag"})
_SHAPE_FUNCTIONS = frozenset({"shape", "size", "ndim", "iscomplexobj", "isrealobj"})
# and methods and NumPy functions counted exactly: how many elements each reads of its array (C order,
# the order numba-cuda's loops take), given the array.
_READS_ALL = frozenset({"sum", "mean", "prod", "count_nonzero", "nansum", "nanmean", "nanprod"})
_READS_TO_NAN = frozenset({"max", "min", "amax", "amin"})     # numba-cuda's max and min stop at a NaN
_READS_TO_TRUE = frozenset({"any"})                              # any stops at the first nonzero
_READS_TO_FALSE = frozenset({"all"})                             # all stops at the first zero
_COUNTED_REDUCTIONS = _READS_ALL | _READS_TO_NAN | _READS_TO_TRUE | _READS_TO_FALSE
_REDUCTION_METHODS = frozenset({"sum", "mean", "prod", "max", "min", "any", "all"})
# In-place operators: the ufunc they apply, counted as every ufunc is.
_IN_PLACE = {"__iadd__": "add", "__isub__": "subtract", "__imul__": "multiply", "__itruediv__": "true_divide",
             "__ifloordiv__": "floor_divide", "__imod__": "remainder", "__ipow__": "power",
             "__iand__": "bitwise_and", "__ior__": "bitwise_or", "__ixor__": "bitwise_xor",
             "__ilshift__": "left_shift", "__irshift__": "right_shift"}

_CountedArray = None   # built by _build_counted_array from the simulator's array wrapper


def _is_element(index, ndim) -> bool:
    if type(index) is int or isinstance(index, np.integer):
        return ndim == 1
    if type(index) is tuple and len(index) == ndim:
        return all(type(i) is int or isinstance(i, np.integer) for i in index)
    return False


def _is_axis(value) -> bool:
    return value is None or type(value) in (int, tuple) or isinstance(value, np.integer)


def _as_dtype(value):
    try:
        return np.dtype(value)
    except TypeError:
        return np.dtype(str(value))      # a numba type: float32, int64, ...


def _elements_read(name, ary, args, kwargs) -> int | None:
    """How many elements the reduction ``name`` reads of ``ary``, or None when that is not known exactly."""
    if kwargs.get("out") is not None or "where" in kwargs or "initial" in kwargs:
        return None
    if name in _READS_ALL:
        return ary.size
    if args or kwargs:              # max, min, any, all over an axis stop early per slice: not counted
        return None
    flat = ary.reshape(-1)          # C order (a copy for a strided view; only looked at)
    if name in _READS_TO_NAN:
        stop = np.flatnonzero(np.isnan(flat)) if flat.dtype.kind in "fc" else ()
    elif name in _READS_TO_TRUE:
        stop = np.flatnonzero(flat)
    else:
        stop = np.flatnonzero(flat == 0)
    return int(stop[0]) + 1 if len(stop) else flat.size


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
        """A kernel's view of an array whose element loads and stores are counted.

        Indexing one element counts one load or store; every other operation that reads or writes
        elements (a method, a NumPy function or ufunc, iteration, ``.flat``, an in-place operator, an
        index array) is counted exactly or refused with :class:`UncountedAccessError`.
        """

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

        def _count(self, loads=0, stores=0):
            # Advance each counter n times in one C call (atomic under the GIL, as next() is).
            if loads > 0:
                next(itertools.islice(self._loads, loads - 1, None))
            if stores > 0:
                next(itertools.islice(self._stores, stores - 1, None))

        def _refuse(self, operation, why=_REFUSAL_ADVICE):
            slot = self._slot
            what = "shared memory" if slot.space == "shared" else f"kernel argument {slot.name!r}"
            message = f"{operation} on an array of {what} {why}"
            slot.launch.refusals.append(message)     # reported even where NumPy swallows the error
            raise UncountedAccessError(message)

        def _view(self, result, operation):
            """``result`` of a view operation: a counted view, or refused when NumPy made a copy."""
            if isinstance(result, fake_array):
                result = result._ary
            if not isinstance(result, np.ndarray):
                return result
            if result.size and not np.may_share_memory(result, self._ary):
                self._refuse(operation, _COPY_ADVICE)
            return self._derived(result)

        # Elements one at a time ------------------------------------------------------------

        def __getitem__(self, index):
            value = self._ary[index]
            if type(value) is np.ndarray:
                return self._derived(value)
            next(self._loads)
            if type(value) is np.void:
                return _CountedRecord(self, value)
            return value

        def __setitem__(self, index, value):
            ary = self._ary
            if type(value) is not CountedArray and _is_element(index, ary.ndim):
                ary[index] = value
                next(self._stores)
                return
            index = self._plain_index(index)
            source = value if type(value) is CountedArray else None
            ary[index] = value._ary if source is not None else value
            count = 1 if _is_element(index, ary.ndim) else np.size(ary[index])
            self._count(stores=count)
            if source is not None:
                source._count(loads=count)

        def _plain_index(self, index):
            """``index`` with its index arrays read: each counted element of one is a load of its own."""
            parts = index if type(index) is tuple else (index,)
            if not any(type(part) is CountedArray for part in parts):
                return index
            plain = []
            for part in parts:
                if type(part) is CountedArray:
                    part._count(loads=part._ary.size)
                    part = part._ary
                plain.append(part)
            return tuple(plain) if type(index) is tuple else plain[0]

        def __iter__(self):
            for i in range(len(self._ary)):
                yield self[i]               # one load per element, or a counted row view

        def __setattr__(self, name, value):
            self[name] = value              # a field of a structured array, counted as a store

        # Attributes and methods ------------------------------------------------------------

        def __getattr__(self, name):
            if name in _FREE_ATTRIBUTES:
                return getattr(self._item, name)
            if name in _VIEW_ATTRIBUTES:
                return self._view(getattr(self._item, name), f".{name}")
            if name in _VIEW_METHODS:
                method = getattr(self._item, name)

                def view_method(*args, **kwargs):
                    return self._view(method(*args, **kwargs), f".{name}()")
                return view_method
            if name in _REDUCTION_METHODS:
                return self._reduction(name, getattr(self._ary, name), f".{name}()")
            if name == "item":
                return self._item_method
            if name == "fill":
                return self._fill
            if name == "flat":
                return _CountedFlat(self)
            if name.startswith("__"):
                raise AttributeError(name)   # NumPy's protocols: a conversion goes through __array__ instead
            if hasattr(np.ndarray, name):
                self._refuse(f".{name}" + ("()" if callable(getattr(np.ndarray, name)) else ""))
            return self[name]                # a record field, as the simulator allows

        def _reduction(self, name, function, operation):
            def counted(*args, **kwargs):
                if args and name in ("sum", "mean", "prod") and not _is_axis(args[0]):
                    # a.sum(float32): numba-cuda reads a positional argument as the dtype, NumPy as the axis
                    args, kwargs = args[1:], {**kwargs, "dtype": _as_dtype(args[0])}
                reads = _elements_read(name, self._ary, args, kwargs)
                if reads is None:
                    self._refuse(operation + " with these arguments")
                result = function(*args, **kwargs)
                self._count(loads=reads)
                return result
            return counted

        def _item_method(self, *args):
            value = self._ary.item(*args)
            next(self._loads)
            return value

        def _fill(self, value):
            self._ary.fill(value)
            self._count(stores=self._ary.size)

        # NumPy: conversions, functions and ufuncs ------------------------------------------

        def __array__(self, dtype=None, copy=None):
            self._refuse("a conversion to a NumPy array (np.asarray, np.array, np.nditer, np.ndenumerate, "
                         "indexing with an array of indices, ...)")

        def __array_function__(self, function, types, args, kwargs):
            name = getattr(function, "__name__", repr(function))
            if function is not getattr(np, name, None):
                self._refuse(f"{getattr(function, '__module__', 'numpy')}.{name}()")
            if name in _SHAPE_FUNCTIONS:
                return function(*_plain(args), **_plain(kwargs))
            if name in _VIEW_FUNCTIONS:
                result = function(*_plain(args), **_plain(kwargs))
                return _views_of(result, _arrays_in((args, kwargs)) or [self], f"np.{name}()")
            if name in _COUNTED_REDUCTIONS and args and type(args[0]) is CountedArray:
                rest = (args[1:], kwargs)
                if not _arrays_in(rest):
                    array = args[0]
                    return array._reduction(name, lambda *a, **k: function(array._ary, *a, **k),
                                            f"np.{name}()")(*args[1:], **kwargs)
            arrays = _arrays_in((args, kwargs))
            (arrays[0] if arrays else self)._refuse(f"np.{name}()")

        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            operation = f"np.{ufunc.__name__}" + ("()" if method == "__call__" else f".{method}()")
            outputs = kwargs.pop("out", None) or ()
            outputs = tuple(outputs) + inputs[ufunc.nin:]
            inputs = inputs[:ufunc.nin]
            if method != "__call__" or ufunc.signature or "where" in kwargs or _arrays_in(kwargs):
                (_arrays_in((inputs, outputs)) or [self])[0]._refuse(operation)
            plain_inputs = _plain(inputs)
            plain_outputs = _plain(outputs)
            shape = np.broadcast_shapes(*(np.shape(x) for x in plain_inputs + plain_outputs))
            elements = int(np.prod(shape))
            if plain_outputs:
                kwargs["out"] = plain_outputs
            result = ufunc(*plain_inputs, **kwargs)
            for x in inputs:
                if type(x) is CountedArray:
                    x._count(loads=elements)       # each output element reads each input once
            for x in outputs:
                if type(x) is CountedArray:
                    x._count(stores=elements)
            if not outputs:
                return result
            return outputs[0] if len(outputs) == 1 else outputs

    def in_place(ufunc_name):
        def operator(self, other):
            return self.__array_ufunc__(getattr(np, ufunc_name), "__call__", self, other, out=(self,))
        return operator

    for dunder, ufunc_name in _IN_PLACE.items():
        setattr(CountedArray, dunder, in_place(ufunc_name))

    def _plain(value):
        if type(value) is CountedArray:
            return value._ary
        if type(value) in (tuple, list):
            return type(value)(_plain(v) for v in value)
        if type(value) is dict:
            return {k: _plain(v) for k, v in value.items()}
        return value

    def _arrays_in(value) -> list:
        if type(value) is CountedArray:
            return [value]
        if type(value) in (tuple, list):
            return [a for v in value for a in _arrays_in(v)]
        if type(value) is dict:
            return [a for v in value.values() for a in _arrays_in(v)]
        return []

    def _views_of(result, arrays, operation):
        if type(result) in (tuple, list):
            return type(result)(_views_of(r, arrays, operation) for r in result)
        if not isinstance(result, np.ndarray):
            return result
        for array in arrays:
            if np.may_share_memory(result, array._ary):
                return array._view(result, operation)
        return arrays[0]._view(result, operation)      # a copy: refused (or an empty array)

    return CountedArray


class _CountedRecord:
    """An element of a structured counted array (its load counted when it was indexed): a field written
    through it is one store."""

    __slots__ = ("_array", "_record")

    def __init__(self, array, record):
        object.__setattr__(self, "_array", array)
        object.__setattr__(self, "_record", record)

    def __getitem__(self, field):
        return self._record[field]

    def __setitem__(self, field, value):
        self._record[field] = value     # a view into the array's element
        next(self._array._stores)

    def __getattr__(self, field):
        if field.startswith("__"):
            raise AttributeError(field)
        return self._record[field]

    def __setattr__(self, field, value):
        self[field] = value


class _CountedFlat:
    """``a.flat`` of a counted array: one element read or written by a flat index is one load or store."""

    __slots__ = ("_array",)

    def __init__(self, array):
        self._array = array

    def __len__(self):
        return self._array._ary.size

    def _check(self, index, operation):
        if not (type(index) is int or isinstance(index, np.integer)):
            self._array._refuse(f"{operation} with index {index!r}")

    def __getitem__(self, index):
        self._check(index, ".flat[...]")
        value = self._array._ary.flat[index]
        next(self._array._loads)
        return value

    def __setitem__(self, index, value):
        self._check(index, ".flat[...] = ")
        if isinstance(value, _CountedArray):
            self._array._refuse(".flat[i] = an array")
        self._array._ary.flat[index] = value
        next(self._array._stores)

    def __iter__(self):
        for i in range(self._array._ary.size):
            yield self[i]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._array._refuse(f".flat.{name}")


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


class _Launch:
    """The globals whose ``cuda`` the simulator has swapped for its fake module while a kernel runs: the kernel's
    (numba swaps them for the whole launch) and those of each module whose device functions it has called (swapped
    at the first call and held to the launch's end), so a device function's later calls need no swap of their own.
    numba's simulator swaps on every call, a count up and down under two locks: most of a small device function's
    cost."""
    kernel_globals = None
    held: dict = {}             # id of a module's globals -> the swap held for it


def _call_device_function(function, original_call, kernel_module, args):
    globals_ = function.fn.__globals__
    if globals_ is _Launch.kernel_globals or id(globals_) in _Launch.held:
        return function.fn(*args)
    if _Launch.kernel_globals is None:           # called outside a launch
        return original_call(function, *args)
    swap = kernel_module.swapped_cuda_module(function.fn, kernel_module._get_kernel_context())
    swap.__enter__()
    _Launch.held[id(globals_)] = swap
    return function.fn(*args)


def _release_swaps() -> None:
    held, _Launch.held = _Launch.held, {}
    _Launch.kernel_globals = None
    for swap in reversed(held.values()):
        swap.__exit__(None, None, None)


def _wrap_kernel_call(original_call, kernel_module, devicearray):
    fake_array = devicearray.FakeCUDAArray

    def __call__(self, *args):
        if self._device:
            return _call_device_function(self, original_call, kernel_module, args)
        if kernel_module._kernel_context is not None:
            return original_call(self, *args)
        hooks = type(self)._course_hooks
        afterwards = [after for after in (gate(self, args) for gate in list(_GATES)) if after is not None]
        _Launch.kernel_globals = self.fn.__globals__
        try:
            if not hooks.listeners:
                result = original_call(self, *args)
            else:
                result = _counted_launch(self, original_call, args, hooks, kernel_module, fake_array)
        finally:
            _release_swaps()
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
    except Exception as exc:
        # A refusal NumPy turned into another error (np.nditer does) still says what was refused.
        if counts.refusals and not isinstance(exc, UncountedAccessError):
            raise UncountedAccessError(counts.refusals[0]) from exc
        raise
    finally:
        hooks.launch = None
        kernel.extensions = extensions
    if counts.refusals:     # refused, and the kernel went on (it caught the error): the launch still fails
        raise UncountedAccessError(counts.refusals[0])
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
