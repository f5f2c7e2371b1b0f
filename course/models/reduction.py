"""Bytes moved and FLOPs of the day-1 kernels: elementwise ops, row reductions, strided reads.

One function per kernel rung (``kernels.elementwise`` and ``kernels.reduction``). Global bytes
count each element read or written once, as the counted simulator traffic does; ``itemsize`` is 4
for float32. Shared-memory functions count element stores, all shared arrays together.

Elementwise (x, y vectors of n elements; scalars travel as kernel arguments, not memory):

- ``bytes_copy_v1_guarded(n)``, ``bytes_copy_v2_grid_stride(n)``: read x, write y.
- ``bytes_axpb_v1_guarded(n)``, ``flops_axpb_v1_guarded(n)``: read x, write y; a multiply and an add.
- ``bytes_normalize_rows_v1_3d_grid(batch, heads, rows, head_dim)``: read x and the row sums, write out.

Row reductions (x of shape (rows, cols), outputs row_max and row_sum of shape (rows,)):

- ``bytes_row_stats_v1_thread_per_row``, ``..._v2_shared_tree``, ``..._v3_warp_shuffle``: the same
  bytes (each element read once): the rungs differ in how the reads are spread, not in how many.
- ``shared_stores_row_stats_v2_shared_tree``, ``shared_stores_row_stats_v3_warp_shuffle``.
- ``flops_row_stats(rows, cols)``: a compare and an add per element.

Coalescing:

- ``dram_bytes_strided_read(n, stride)``: what DRAM really moves when each 32-byte sector serves
  only ``8 / stride`` of the floats it carries; ``useful_bytes_strided_read(n)``: what the kernel asks for.
"""

from __future__ import annotations

import numbers

SECTOR_BYTES = 32       # the unit a GPU's L2 cache moves to and from DRAM


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


def _itemsize(itemsize) -> int:
    if isinstance(itemsize, bool) or not isinstance(itemsize, numbers.Integral) or itemsize < 1:
        raise ValueError(f"itemsize must be an int >= 1, got {itemsize!r}")
    return int(itemsize)


# ----------------------------------------------------------------------------------------------
# Elementwise
# ----------------------------------------------------------------------------------------------

def bytes_copy_v1_guarded(n: int, itemsize: int = 4) -> int:
    """Read x (n) and write y (n)."""
    return 2 * _count("n", n) * _itemsize(itemsize)


def bytes_copy_v2_grid_stride(n: int, itemsize: int = 4) -> int:
    """The same bytes as v1: a grid-stride loop changes who copies an element, not how often."""
    return bytes_copy_v1_guarded(n, itemsize)


def bytes_axpb_v1_guarded(n: int, itemsize: int = 4) -> int:
    """Read x (n) and write y (n); a and b are kernel arguments, held in registers."""
    return 2 * _count("n", n) * _itemsize(itemsize)


def flops_axpb_v1_guarded(n: int) -> int:
    """One multiply and one add per element."""
    return 2 * _count("n", n)


def bytes_normalize_rows_v1_3d_grid(batch: int, heads: int, rows: int, head_dim: int,
                                    itemsize: int = 4) -> int:
    """Read x and write out (batch*heads*rows*head_dim each), read each row sum once."""
    row_count = _count("batch", batch) * _count("heads", heads) * _count("rows", rows)
    return (2 * row_count * _count("head_dim", head_dim) + row_count) * _itemsize(itemsize)


def flops_normalize_rows_v1_3d_grid(batch: int, heads: int, rows: int, head_dim: int) -> int:
    """One division per element of x."""
    return _count("batch", batch) * _count("heads", heads) * _count("rows", rows) * _count("head_dim", head_dim)


# ----------------------------------------------------------------------------------------------
# Row reductions
# ----------------------------------------------------------------------------------------------

def _bytes_row_stats(rows: int, cols: int, itemsize: int) -> int:
    rows, cols = _count("rows", rows), _count("cols", cols)
    return (rows * cols + 2 * rows) * _itemsize(itemsize)


def bytes_row_stats_v1_thread_per_row(rows: int, cols: int, itemsize: int = 4) -> int:
    """Read x (rows, cols) once, write row_max and row_sum (rows each)."""
    return _bytes_row_stats(rows, cols, itemsize)


def bytes_row_stats_v2_shared_tree(rows: int, cols: int, itemsize: int = 4) -> int:
    """The same global bytes as v1; the partials live in shared memory."""
    return _bytes_row_stats(rows, cols, itemsize)


def bytes_row_stats_v3_warp_shuffle(rows: int, cols: int, itemsize: int = 4) -> int:
    """The same global bytes as v1; the partials live in registers and one shared slot per warp."""
    return _bytes_row_stats(rows, cols, itemsize)


def flops_row_stats(rows: int, cols: int) -> int:
    """A compare (max) and an add (sum) per element."""
    return 2 * _count("rows", rows) * _count("cols", cols)


def shared_stores_row_stats_v2_shared_tree(rows: int, threads: int) -> int:
    """Every thread stores its max and sum partials (2 * threads), then each tree level stores
    half as many pairs: 2 * (threads/2 + threads/4 + ... + 1) = 2 * (threads - 1). Per row.
    """
    threads = _count("threads", threads)
    if threads < 1 or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two, got {threads}")
    return _count("rows", rows) * (2 * threads + 2 * (threads - 1))


def shared_stores_row_stats_v3_warp_shuffle(rows: int, warps: int) -> int:
    """Lane 0 of each warp stores its warp's max and sum: 2 * warps per row."""
    return _count("rows", rows) * 2 * _count("warps", warps)


# ----------------------------------------------------------------------------------------------
# Coalescing
# ----------------------------------------------------------------------------------------------

def useful_bytes_strided_read(n: int, itemsize: int = 4) -> int:
    """What ``strided_read`` asks for: n elements read and n written."""
    return 2 * _count("n", n) * _itemsize(itemsize)


def dram_bytes_strided_read(n: int, stride: int, itemsize: int = 4) -> int:
    """DRAM bytes of ``strided_read``: each read drags in the rest of its 32-byte sector.

    With ``stride`` s, consecutive reads are ``s * itemsize`` bytes apart, so a sector serves
    ``max(1, SECTOR_BYTES / (s * itemsize))`` of them: the reads cost ``n * itemsize * min(s, 8)``
    bytes for float32. The writes of y are contiguous and cost ``n * itemsize``.
    """
    n, stride, itemsize = _count("n", n), _count("stride", stride), _itemsize(itemsize)
    if stride < 1:
        raise ValueError(f"stride must be an int >= 1, got {stride}")
    per_sector = max(1, SECTOR_BYTES // itemsize)
    return n * itemsize * min(stride, per_sector) + n * itemsize


__all__ = [
    "SECTOR_BYTES",
    "bytes_copy_v1_guarded", "bytes_copy_v2_grid_stride",
    "bytes_axpb_v1_guarded", "flops_axpb_v1_guarded",
    "bytes_normalize_rows_v1_3d_grid", "flops_normalize_rows_v1_3d_grid",
    "bytes_row_stats_v1_thread_per_row", "bytes_row_stats_v2_shared_tree",
    "bytes_row_stats_v3_warp_shuffle", "flops_row_stats",
    "shared_stores_row_stats_v2_shared_tree", "shared_stores_row_stats_v3_warp_shuffle",
    "useful_bytes_strided_read", "dram_bytes_strided_read",
]
