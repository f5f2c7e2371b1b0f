"""What the attention launchers share, from day 5's ``kv_lens`` to day 8's paged caches: host code, one home.

Days 5 to 8 each added a launcher that needed what an earlier day's launcher had written for itself;
they are kept here under public names, so that a later day imports them from one place instead of
reaching into an earlier day's module:

- ``prepare_kv_lens``: the ``kv_lens`` of a prefill (day 5's flash attention, days 7 and 8), checked
  and made an int32 array of the inputs' kind;
- ``check_block_tables``: the block tables and context lengths of a paged decode step, read to the
  last entry a context uses (day 6, and the decode launchers after it);
- ``partial_buffers``: the split-K partials ``(partial_max, partial_sum, partial_acc)`` in day 6's
  layout, new NumPy arrays or device buffers reused by shape (``private_workspaces``: a CUDA graph's own);
- ``sm_count``: the SM count of the GPU, asked once, which sizes the partitions;
- partition sizing: ``partitions_for`` and ``longest_context`` (the grid's third dimension), day 6's
  rule ``choose_partition_size`` and day 7's ``decode_partition_size`` with their constants.

Day 8's tensor-core decode sizes its partitions by a model of its own
(``kernels.low_precision_attention.tensor_partition_size``).
"""

from __future__ import annotations

import contextlib

import numpy as np
from numba import cuda

from kernels.launching import cdiv, is_device_array, note_output, output_array, require_int

__all__ = ["prepare_kv_lens", "check_block_tables", "partial_buffers", "ticket_buffer", "private_workspaces", "sm_count",
           "partitions_for", "longest_context", "PARTITION_SIZE", "MIN_PARTITION_SIZE", "BLOCKS_PER_SM", "choose_partition_size",
           "DECODE_PARTITION_MAX", "DECODE_BLOCKS_PER_SM", "decode_partition_size"]

# Day 6's tokens per partition of v2: 512 (as in vLLM) gives a 32K context 64 blocks per head.
PARTITION_SIZE = 512
MIN_PARTITION_SIZE = 64
# Blocks per SM that day 6's v2 grid should reach before its partitions are made shorter: 16 blocks of
# 128 threads are the 2048 threads an SM holds at most.
BLOCKS_PER_SM = 16
# Day 7's decode partitions (partition_size=None): the largest of DECODE_PARTITION_MAX, half of it, ... down
# to day 6's 64 whose grid still gives each SM DECODE_BLOCKS_PER_SM blocks (1.5 waves of the 4 blocks an
# SM holds). Longer than day 6's 512 where the grid allows: a block pays about one batch's latency
# before its first score and a merge at its end, and at 16 x 8,192 tokens the group of 4 took 0.497,
# 0.468 and 0.455 ms with partitions of 256, 512 and 1,024, the group of 8 0.359, 0.307 and 0.282 ms
# with 128, 256 and 512.
DECODE_PARTITION_MAX = 1024
DECODE_BLOCKS_PER_SM = 6


# ----------------------------------------------------------------------------------------------
# Prefill: which keys exist
# ----------------------------------------------------------------------------------------------

def prepare_kv_lens(kv_lens, batch: int, n_keys: int, like):
    """Return kv_lens as an int32 array (batch,) of the same kind as ``like`` (NumPy or device).

    ``None`` means every key exists (``n_keys`` for each batch element). The values of a NumPy
    array must lie in ``[0, n_keys]``; a device array must be int32 of shape (batch,), and its
    values are not copied back to be checked (the v4 kernel clamps them to ``[0, n_keys]``).
    Raises TypeError or ValueError naming ``kv_lens``.
    """
    if is_device_array(kv_lens):
        if not is_device_array(like):
            raise TypeError("kv_lens must be a NumPy array when q, k and v are NumPy arrays, got a device array")
        if np.dtype(kv_lens.dtype) != np.int32 or tuple(kv_lens.shape) != (batch,):
            raise ValueError(f"kv_lens must be int32 of shape ({batch},), got {np.dtype(kv_lens.dtype)} "
                             f"of shape {tuple(kv_lens.shape)}")
        return kv_lens
    if kv_lens is None:
        lens = np.full(batch, n_keys, dtype=np.int32)
    else:
        if not isinstance(kv_lens, np.ndarray):
            raise TypeError(f"kv_lens must be a NumPy or device array of ints, got {type(kv_lens).__name__}")
        if not np.issubdtype(kv_lens.dtype, np.integer):
            raise TypeError(f"kv_lens must hold integers (int32), got dtype {kv_lens.dtype}")
        if kv_lens.shape != (batch,):
            raise ValueError(f"kv_lens must have shape ({batch},) (one length per batch element), "
                             f"got {kv_lens.shape}")
        if batch and (kv_lens.min() < 0 or kv_lens.max() > n_keys):
            raise ValueError(f"kv_lens must lie in [0, {n_keys}] (the number of keys in k), got "
                             f"values from {kv_lens.min()} to {kv_lens.max()}")
        lens = np.ascontiguousarray(kv_lens, dtype=np.int32)
    return cuda.to_device(lens) if is_device_array(like) else lens


# ----------------------------------------------------------------------------------------------
# Decode: block tables, partials, the GPU's SM count
# ----------------------------------------------------------------------------------------------

def check_block_tables(block_tables, context_lens, block_size: int, max_blocks: int, num_blocks: int) -> None:
    """Check NumPy ``context_lens`` and ``block_tables`` against a cache of ``num_blocks`` blocks of
    ``block_size`` tokens and tables of ``max_blocks`` entries a row: every length is >= 0 and fits its
    row, and every entry a context uses names a block of the cache (entries past the pages in use are
    never read and may be padding such as -1). Raises ValueError naming the argument and the entry."""
    if context_lens.size and context_lens.min() < 0:
        raise ValueError(f"context_lens must be >= 0, got {context_lens.tolist()}")
    if context_lens.size and context_lens.max() > max_blocks * block_size:
        s = int(np.argmax(context_lens))
        raise ValueError(f"context_lens[{s}] is {int(context_lens[s])}, more tokens than the "
                         f"{max_blocks} blocks of {block_size} a row of block_tables holds")
    for s, length in enumerate(context_lens.tolist()):
        used = block_tables[s, :cdiv(length, block_size)]
        if used.size and (used.min() < 0 or used.max() >= num_blocks):
            bad = int(np.flatnonzero((used < 0) | (used >= num_blocks))[0])
            raise ValueError(f"block_tables[{s}, {bad}] is {int(used[bad])}, not a block of the cache "
                             f"(0 ... {num_blocks - 1}); it holds tokens of a context of {length}")


# Device buffers for the partials, kept by shape: allocating them on every call (cudaMalloc) costs more
# than a short decode step itself.
_WORKSPACES: dict = {}


@contextlib.contextmanager
def private_workspaces():
    """Within it, ``partial_buffers`` allocates new device buffers, shared with no launch outside it, and forgets
    them on leaving. For a CUDA graph's capture (``inference.graphs``): the graph keeps the addresses it recorded,
    so its partials must be its own, not buffers that a later call of another shape could evict and free."""
    global _WORKSPACES
    shared, _WORKSPACES = _WORKSPACES, {}
    try:
        yield
    finally:
        _WORKSPACES = shared


def partial_buffers(like, num_seqs: int, heads: int, partitions: int, head_dim: int) -> tuple:
    """``(partial_max, partial_sum, partial_acc)`` of shapes (num_seqs, heads, partitions) twice and
    (num_seqs, heads, partitions, head_dim), float32, for a split-K decode (day 6's layout): new NumPy
    arrays when ``like`` is one, else device buffers reused by shape (so two launches of one shape must
    not run at once on two streams; the course launches on the default stream only)."""
    shapes = ((num_seqs, heads, partitions), (num_seqs, heads, partitions), (num_seqs, heads, partitions, head_dim))
    if not is_device_array(like):
        return tuple(output_array(name, None, shape, like=like)
                     for name, shape in zip(("partial_max", "partial_sum", "partial_acc"), shapes))
    key = (num_seqs, heads, partitions, head_dim)
    if key not in _WORKSPACES:
        if len(_WORKSPACES) >= 8:
            _WORKSPACES.pop(next(iter(_WORKSPACES)))
        _WORKSPACES[key] = tuple(output_array("partial", None, shape, like=like) for shape in shapes)
    return tuple(note_output(buffer) for buffer in _WORKSPACES[key])


# The one-pass decode's tickets by shape, never freed: each launch leaves them zero, so every launch of a shape on
# the default stream (a CUDA graph's replays among them) can share one buffer, made at the shape's first launch.
_TICKETS: dict = {}


def ticket_buffer(like, num_seqs: int, blocks: int):
    """The tickets (num_seqs, blocks) int32 of a one-pass decode (``kernels.gqa_attention.gqa_decode_one_pass``),
    zero: a new NumPy array when ``like`` is one, else the device buffer of that shape, made at its first launch and
    kept (the kernel leaves it zero again, so graphs captured later share it: capture a shape after running it)."""
    if not is_device_array(like):
        return np.zeros((num_seqs, blocks), np.int32)
    key = (num_seqs, blocks)
    if key not in _TICKETS:
        _TICKETS[key] = cuda.to_device(np.zeros((num_seqs, blocks), np.int32))
    return _TICKETS[key]


def sm_count(like) -> int | None:
    """The SM count of the GPU that runs device arrays; None for NumPy inputs or on the simulator.

    Asked of the driver once per process, not at every decode step, whose launch is already host
    Python; it only sizes the partitions, so a second GPU of another size would get partitions sized
    for the first, never wrong results."""
    if not is_device_array(like):
        return None
    if not _SM_COUNT:
        try:
            _SM_COUNT.append(int(cuda.get_current_device().MULTIPROCESSOR_COUNT))
        except AttributeError:          # the simulator's device has no SM count
            return None
    return _SM_COUNT[0]


_SM_COUNT: list = []


# ----------------------------------------------------------------------------------------------
# Decode: partitions of the contexts
# ----------------------------------------------------------------------------------------------

def partitions_for(longest: int, partition_size: int) -> int:
    """Partitions per sequence in a split-K grid: enough for the ``longest`` context (at least 1)."""
    return max(1, cdiv(longest, partition_size))


def longest_context(context_lens, max_context) -> int:
    """The longest context, which sizes a split-K grid: read from NumPy ``context_lens`` (``max_context``,
    if given, at least that), or ``max_context``, required with device arrays (reading it back would
    add a copy to every timed launch)."""
    if is_device_array(context_lens):
        if max_context is None:
            raise ValueError("max_context must be given with device arrays: the longest context sizes "
                             "the grid, and its value is not copied back from the device")
        return require_int("max_context", max_context, minimum=0)
    longest = int(context_lens.max()) if context_lens.size else 0
    if max_context is not None:
        require_int("max_context", max_context, minimum=longest)
    return longest


def choose_partition_size(num_seqs: int, heads: int, longest: int, sm_count: int | None) -> int:
    """Day 6's rule: the largest of 512, 256, 128, 64 tokens whose grid fills the GPU: at least
    ``BLOCKS_PER_SM`` blocks per SM (a full wave of 128-thread blocks), else 64. Without an SM count (the
    simulator), ``PARTITION_SIZE``. Few long sequences get long partitions; few short ones get short
    partitions, so that their blocks still cover every SM."""
    if not sm_count:
        return PARTITION_SIZE
    size = PARTITION_SIZE
    while size > MIN_PARTITION_SIZE and num_seqs * heads * partitions_for(longest, size) < BLOCKS_PER_SM * sm_count:
        size //= 2
    return size


def decode_partition_size(num_seqs: int, blocks_per_partition: int, longest: int, sm_count: int | None) -> int:
    """Day 7's rule: tokens per partition when ``partition_size`` is None: the largest of
    ``DECODE_PARTITION_MAX``, half of it, ... (at least 64) whose grid of ``num_seqs * blocks_per_partition``
    blocks per partition gives each SM ``DECODE_BLOCKS_PER_SM`` blocks. Without an SM count (the
    simulator), day 6's ``PARTITION_SIZE``."""
    if not sm_count:
        return PARTITION_SIZE
    size = DECODE_PARTITION_MAX
    while (size > MIN_PARTITION_SIZE
           and num_seqs * blocks_per_partition * partitions_for(longest, size) < DECODE_BLOCKS_PER_SM * sm_count):
        size //= 2
    return size
