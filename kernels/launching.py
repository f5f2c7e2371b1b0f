"""What every launcher does before it launches: validate the inputs, size the grid, allocate the output.

A launcher of this course is given the kernel it launches (keyword ``kernel=``, defaulting to the
course's own rung), validates its inputs with the ``require_*`` functions below, sizes the grid
with ``cdiv`` and launches. Exercises bind a student's kernel to the same launcher, so the course
and the student run under the same checks and the same grid.

Launchers accept NumPy arrays (the simulator and quick checks) or numba device arrays (timing on a
GPU, where implicit host-device copies would be measured too); the output is of the same kind as
the first input. Shapes are checked against what the kernel indexes, so a kernel never reads or
writes out of bounds.

Every ``require_*`` raises ``TypeError`` (wrong kind of value or dtype) or ``ValueError`` (wrong
shape or value) with a message that names the argument, what was expected and what was received.

Two numbers of the hardware live here too, once for the whole project: ``WARP``, the 32 lanes of a
warp, and ``FULL_MASK``, the mask of all of them that the ``*_sync`` warp intrinsics take. Every kernel
module imports them from here, and so does ``course.simulator``, which must not import numba before
the device is chosen: this module imports NumPy only.
"""

from __future__ import annotations

import math
import numbers
import weakref

import numpy as np

__all__ = [
    "WARP", "FULL_MASK", "cdiv", "is_device_array", "require_array", "require_float32", "require_int32",
    "require_dtype", "require_values_in", "require_bool", "require_int", "require_positive_int",
    "require_non_negative_int", "require_scalar", "require_kv_heads", "require_same_kind", "output_array",
    "default_scale", "FLOAT_DTYPES", "largest_filling", "STATIC_SHARED_LIMIT", "launch_with_shared",
]

# The storage dtypes of the mixed-precision kernels, by name: bfloat16 comes from ml_dtypes, which
# is imported only when a dtype check needs it.
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
# Lanes of a warp, on every NVIDIA GPU so far, and the mask naming all of them (the *_sync intrinsics).
WARP = 32
FULL_MASK = 0xFFFFFFFF


def cdiv(n: int, d: int) -> int:
    """Ceiling division: how many tiles (or blocks) of size ``d`` cover ``n`` elements."""
    return -(-n // d)


def largest_filling(options, m: int, n: int, blocks: int, tile=lambda option: option):
    """The first of ``options`` (largest tile first) whose grid over an m x n output has at least ``blocks`` blocks,
    else the last (the smallest); ``tile(option)`` is the option's (block_m, block_n). The tile a tuned launcher
    takes where nothing can be timed (day 4's v8, the tensor-core GEMM's v7), and its byte model's too."""
    for option in options:
        block_m, block_n = tile(option)
        if cdiv(m, block_m) * cdiv(n, block_n) >= blocks:
            return option
    return options[-1]


def is_device_array(a) -> bool:
    """True for a numba device array (real or simulated), False for a NumPy array."""
    return not isinstance(a, np.ndarray) and hasattr(a, "copy_to_host")


def _is_c_contiguous(a) -> bool:
    """C order in memory. The stride of an axis of length 1 never moves a pointer, so it may be anything
    (numba's device arrays made from ``a[None, :]`` keep a 0 there and call themselves not contiguous)."""
    if isinstance(a, np.ndarray):
        return a.flags.c_contiguous
    if a.is_c_contiguous():
        return True
    expected = a.dtype.itemsize
    for size, stride in zip(reversed(a.shape), reversed(a.strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _as_dtype(dtype) -> np.dtype:
    if isinstance(dtype, str) and dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def _dtype_list(dtypes) -> tuple[np.dtype, ...]:
    if isinstance(dtypes, (tuple, list, set, frozenset)):
        return tuple(_as_dtype(d) for d in dtypes)
    return (_as_dtype(dtypes),)


def _describe_shape(shape: tuple, dims) -> str:
    sizes = ["any" if s is None else str(s) for s in shape]
    if dims is not None:
        sizes = [f"{dim}={size}" for dim, size in zip(dims, sizes)]
    return "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"


def require_dtype(name: str, a, dtypes) -> np.dtype:
    """Check that array ``a`` has one of ``dtypes`` (a dtype, a name, or a tuple of them); return its dtype.

    ``"bfloat16"`` stands for ``ml_dtypes.bfloat16``; ``FLOAT_DTYPES`` lists the storage dtypes
    of the mixed-precision kernels. Raises TypeError naming ``name``.
    """
    allowed = _dtype_list(dtypes)
    got = np.dtype(a.dtype)
    if got not in allowed:
        wanted = allowed[0].name if len(allowed) == 1 else "one of " + ", ".join(d.name for d in allowed)
        raise TypeError(f"{name} must have dtype {wanted}, got {got}")
    return got


def require_array(name: str, a, shape: tuple, dtypes, *, dims: tuple | None = None) -> tuple:
    """Check that ``a`` is a C-contiguous NumPy or device array of ``shape`` and dtype; return its shape.

    ``shape`` holds an int for each dimension that must match and ``None`` for a free one, e.g.
    ``(batch, heads, None, head_dim)``. ``dims`` names the dimensions for the error message
    (``("batch", "heads", "seq", "head_dim")``). ``dtypes`` is as in ``require_dtype``.
    Raises TypeError or ValueError naming ``name``.
    """
    if dims is not None and len(dims) != len(shape):
        raise ValueError(f"dims must name each of the {len(shape)} dimensions of shape {shape}, got {dims}")
    if not (isinstance(a, np.ndarray) or is_device_array(a)):
        raise TypeError(f"{name} must be a NumPy array or a numba device array, got {type(a).__name__}")
    require_dtype(name, a, dtypes)
    got = tuple(a.shape)
    if len(got) == len(shape) and all(w is None or w == g for w, g in zip(shape, got)) and _is_c_contiguous(a):
        return got                      # valid: skip building the messages (launchers run this per call)
    expected = _describe_shape(shape, dims)
    if len(got) != len(shape):
        raise ValueError(f"{name} must have {len(shape)} dimension{'' if len(shape) == 1 else 's'} {expected}, "
                         f"got shape {got}")
    for axis, (want, size) in enumerate(zip(shape, got)):
        if want is not None and want != size:
            where = dims[axis] if dims is not None else f"dimension {axis}"
            raise ValueError(f"{name} must have shape {expected}, got {got} ({where} is {size}, not {want})")
    if not _is_c_contiguous(a):
        raise ValueError(f"{name} must be C-contiguous (use np.ascontiguousarray), got a strided view")
    return got


def require_float32(name: str, a, shape: tuple, *, dims: tuple | None = None) -> tuple:
    """``require_array`` for float32: check a C-contiguous float32 array of ``shape``; return its shape."""
    return require_array(name, a, shape, np.float32, dims=dims)


def require_int32(name: str, a, shape: tuple, *, dims: tuple | None = None) -> tuple:
    """``require_array`` for int32 (context lengths, block tables, kv_lens); return its shape."""
    return require_array(name, a, shape, np.int32, dims=dims)


def require_values_in(name: str, a, low: int, high: int) -> None:
    """Check that every value of the NumPy array ``a`` lies in ``[low, high]``.

    A device array is not copied back to be checked (that would add a transfer to every timed
    launch); kernels that take indices from one must clamp them or trust their caller.
    """
    if is_device_array(a) or a.size == 0:
        return
    smallest, largest = a.min(), a.max()
    if smallest < low or largest > high:
        raise ValueError(f"{name} must lie in [{low}, {high}], got values from {smallest} to {largest}")


def require_bool(name: str, value) -> bool:
    """Check that ``value`` is True or False (a NumPy bool too, not 0 or 1) and return it as a bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def require_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Check that ``value`` is an integer (not a bool) in ``[minimum, maximum]`` and return it as an int."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an int <= {maximum}, got {value!r}")
    return int(value)


def require_positive_int(name: str, value) -> int:
    """Check that ``value`` is an int >= 1 and return it."""
    return require_int(name, value, minimum=1)


def require_non_negative_int(name: str, value) -> int:
    """Check that ``value`` is an int >= 0 and return it."""
    return require_int(name, value, minimum=0)


def require_scalar(name: str, value) -> np.float32:
    """Check that ``value`` is a real number (not a bool) and return it as float32 (kernels then stay in fp32)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    return np.float32(value)


def require_kv_heads(heads: int, kv_heads: int, *, q_name: str = "q", kv_name: str = "k") -> int:
    """Check that the ``kv_heads`` of ``kv_name`` divide the ``heads`` of ``q_name``; return the group size.

    In grouped-query attention query head ``h`` reads KV head ``h // (heads // kv_heads)``, so
    every KV head must serve a whole group of query heads.
    """
    if kv_heads < 1 or heads < 1 or heads % kv_heads:
        raise ValueError(f"{kv_name} must have kv_heads dividing the heads of {q_name} ({heads}), "
                         f"so that each KV head serves a whole group of query heads; got kv_heads {kv_heads}")
    return heads // kv_heads


def require_same_kind(**arrays) -> None:
    """Check that the named arrays are all NumPy arrays or all device arrays (never a mix)."""
    kinds = {name: is_device_array(a) for name, a in arrays.items()}
    if len(set(kinds.values())) > 1:
        described = ", ".join(f"{name} is {'a device' if device else 'a NumPy'} array"
                              for name, device in kinds.items())
        raise TypeError(f"{', '.join(kinds)} must all be NumPy arrays or all be device arrays, got: {described}")


# The arrays output_array handed out, by id (a weak reference tells a reused id apart), so a check
# around a launch can tell a kernel's outputs from its inputs (course.gates).
_OUTPUTS: dict[int, weakref.ref] = {}


def is_output_array(a) -> bool:
    """True for an array that ``output_array`` returned or ``note_output`` marked (an output, a scratch)."""
    ref = _OUTPUTS.get(id(a))
    return ref is not None and ref() is a


def note_output(a):
    """Mark ``a`` as an output a kernel may write (see ``is_output_array``); return it."""
    if len(_OUTPUTS) > 4096:
        for key in [k for k, ref in _OUTPUTS.items() if ref() is None]:
            del _OUTPUTS[key]
    try:
        _OUTPUTS[id(a)] = weakref.ref(a)
    except TypeError:
        pass
    return a


def output_array(name: str, out, shape: tuple, like, *, dtype=np.float32):
    """Return ``out`` after checking it, or a new array of ``shape`` and ``dtype`` of the same kind as ``like``."""
    if out is None:
        if is_device_array(like):
            from numba import cuda

            return note_output(cuda.device_array(shape, dtype=_as_dtype(dtype)))
        return note_output(np.empty(shape, dtype=_as_dtype(dtype)))
    require_array(name, out, shape, dtype)
    if is_device_array(out) != is_device_array(like):
        raise TypeError(f"{name} must be a {'device' if is_device_array(like) else 'NumPy'} array "
                        f"like the inputs, got {type(out).__name__}")
    return note_output(out)


def default_scale(head_dim: int, scale) -> np.float32:
    """The softmax scale as float32: ``1/sqrt(head_dim)`` unless given (float32 keeps GPU math in float32)."""
    if scale is None:
        return np.float32(1.0 / math.sqrt(head_dim)) if head_dim else np.float32(1.0)
    if not isinstance(scale, (int, float, np.floating)) or isinstance(scale, bool):
        raise TypeError(f"scale must be a number or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return np.float32(scale)


# Shared memory a block may take without asking: static arrays in all, and dynamic up to this unless the kernel
# was allowed more (``launch_with_shared``).
STATIC_SHARED_LIMIT = 48 * 1024
_SHARED_ALLOWED: dict = {}


def launch_with_shared(kernel, grid, threads, shared_bytes: int, *args) -> None:
    """Launch ``kernel[grid, threads, 0, shared_bytes](*args)``: ``shared_bytes`` of dynamic shared memory (the
    kernel's ``cuda.shared.array(0, dtype)``). Above ``STATIC_SHARED_LIMIT`` a GPU launches a kernel only after it
    was allowed that much (the driver's ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``, which ``cuda.jit``
    does not set): the first launch of each compiled kernel on a device sets it, once. The simulator has no such
    limit, and a stand-in for a kernel (a test's, which records or compiles a launch) is launched as it is.

    Only ``shared_bytes`` is compared with the limit. A GPU counts a kernel's static shared arrays too: a kernel
    with 16 KB of them asking for 40 KB here fails to launch (``CUDA_ERROR_INVALID_VALUE``, seen on an H100), since
    the dynamic bytes it may take without asking are 48 KB less its static ones. Every kernel of the course that
    launches through here keeps within that."""
    from numba import config

    if not config.ENABLE_CUDASIM and shared_bytes > STATIC_SHARED_LIMIT and _is_dispatcher(kernel):
        compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
        function = compiled._codelibrary.get_cufunc()
        key = (id(compiled), function.device.id)
        if _SHARED_ALLOWED.get(key, 0) < shared_bytes:
            from numba.cuda.cudadrv.driver import binding, driver

            attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            driver.cuKernelSetAttribute(attribute, shared_bytes, function.handle, function.device.id)
            _SHARED_ALLOWED[key] = shared_bytes
    kernel[grid, threads, 0, shared_bytes](*args)


def _is_dispatcher(kernel) -> bool:
    """A kernel numba-cuda compiled (``cuda.jit``), not a stand-in that records or compiles launches for a test."""
    from numba.cuda.dispatcher import CUDADispatcher

    return isinstance(kernel, CUDADispatcher)
