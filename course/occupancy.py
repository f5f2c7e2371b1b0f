"""How many blocks of a kernel an SM holds at once, and which budget stops it: the occupancy model.

An SM keeps a block resident only if it has room for all of it at once: its threads, its shared
memory (plus 1 KiB that CUDA reserves per block) and its registers (handed out per warp, in steps
of 256). The fewest blocks any budget allows is what the SM holds::

    blocks, limiter = resident_blocks(threads_per_block=64, shared_bytes=16384, registers_per_thread=50)
    occupancy(64, 16384, 50)          # fraction of the SM's thread slots those blocks fill

The limits of an H100 (SXM, compute capability 9.0) are in :data:`H100`; they agree with what the
driver reports (the properties in the ``day01_memory_hierarchy`` recording).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GpuLimits", "H100", "resident_blocks", "occupancy"]


@dataclass(frozen=True)
class GpuLimits:
    """What one SM of a GPU can hold at once, and the few numbers of the whole GPU a lesson needs."""

    name: str
    sms: int
    shared_bytes_per_sm: int
    reserved_shared_bytes_per_block: int
    static_shared_bytes_per_block: int
    threads_per_sm: int
    blocks_per_sm: int
    registers_per_sm: int
    register_allocation_unit: int = 256   # registers are granted per warp, in these steps
    warp_size: int = 32


H100 = GpuLimits(name="H100 SXM", sms=132, shared_bytes_per_sm=228 * 1024, reserved_shared_bytes_per_block=1024,
                 static_shared_bytes_per_block=48 * 1024, threads_per_sm=2048, blocks_per_sm=32,
                 registers_per_sm=65536)


def _positive_int(value, name: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        raise ValueError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} int, got {value!r}")
    return value


def resident_blocks(threads_per_block: int, shared_bytes: int, registers_per_thread: int,
                    gpu: GpuLimits = H100) -> tuple[int, str]:
    """``(blocks, limiter)``: the blocks one SM holds at once, and the budget that allows no more.

    threads_per_block: threads of one block; shared_bytes: static plus dynamic shared memory of
    one block; registers_per_thread: what the compiler reports (``ptxas -v``, numba's
    ``kernel.get_regs_per_thread()``). limiter is "threads", "shared memory", "registers" or
    "blocks" (the SM's own cap on resident blocks). 0 blocks means the block does not fit at all.
    """
    _positive_int(threads_per_block, "threads_per_block")
    _positive_int(shared_bytes, "shared_bytes", allow_zero=True)
    _positive_int(registers_per_thread, "registers_per_thread")
    if not isinstance(gpu, GpuLimits):
        raise TypeError(f"gpu must be a GpuLimits such as H100, got {type(gpu).__name__}")
    warps = math.ceil(threads_per_block / gpu.warp_size)
    unit = gpu.register_allocation_unit
    registers_per_warp = math.ceil(registers_per_thread * gpu.warp_size / unit) * unit
    limits = {"threads": gpu.threads_per_sm // (warps * gpu.warp_size),
              "shared memory": gpu.shared_bytes_per_sm // (shared_bytes + gpu.reserved_shared_bytes_per_block),
              "registers": gpu.registers_per_sm // (registers_per_warp * warps),
              "blocks": gpu.blocks_per_sm}
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter


def occupancy(threads_per_block: int, shared_bytes: int, registers_per_thread: int, gpu: GpuLimits = H100) -> float:
    """The fraction of an SM's thread slots that resident blocks fill (what Nsight calls theoretical occupancy)."""
    blocks, _ = resident_blocks(threads_per_block, shared_bytes, registers_per_thread, gpu)
    return blocks * threads_per_block / gpu.threads_per_sm
