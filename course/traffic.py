"""Global and shared memory traffic of kernels, counted exactly on the CUDA simulator.

::

    from course.traffic import count_traffic

    with count_traffic() as t:
        copy_kernel[blocks, threads](a, out)      # or a launcher that launches several kernels
    t.global_loads["a"], t.global_stores["out"]   # element counts, by kernel parameter name
    t.global_bytes                                # loads + stores in bytes
    print(t.summary())

What counts (see ``course.simulator`` for the details): one element read through indexing is
one load, one element written is one store, an atomic is one of each. ``a.shape`` and ``a.size``
are free, views count against the argument they came from, ``cuda.local.array`` is not counted.
Every other operation on an array counts the elements it reads and writes (``a.sum()``, ``np.sum(a)``,
``for x in a``, ``a.flat[i]``, ``a.fill(x)``, ``np.cos(a, out)``), or is refused with a TypeError
(``UncountedAccessError``) that names it, when the counter cannot count it exactly (``a.argmax()``,
``np.asarray(a)``, ``np.nditer(a)``, ``a.copy()``).
These are the accesses the kernel asks for; the DRAM bytes a GPU moves are fewer when caches hit
and more when accesses are scattered (Nsight Compute measures those; the course records them).

Counting needs the simulator: on a real GPU ``count_traffic()`` raises ``RuntimeError``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from course import simulator
from course.device import on_simulator


class ArgumentCounts(dict):
    """``{parameter name: count}``; a name that no kernel had gives a KeyError that says so."""

    def __missing__(self, name):
        known = ", ".join(self) or "none"
        raise KeyError(f"no kernel argument named {name!r} was counted; counted array "
                       f"arguments: {known}")


@dataclass(frozen=True)
class LaunchTraffic:
    """The traffic of one kernel launch.

    ``global_loads`` / ``global_stores``: element counts per array argument (every array
    argument appears, untouched ones with 0); ``load_bytes`` / ``store_bytes``: the same in
    bytes; ``shared_loads`` / ``shared_stores``: element counts over all shared arrays.
    """

    kernel_name: str
    grid: tuple
    block: tuple
    global_loads: ArgumentCounts = field(default_factory=ArgumentCounts)
    global_stores: ArgumentCounts = field(default_factory=ArgumentCounts)
    load_bytes: ArgumentCounts = field(default_factory=ArgumentCounts)
    store_bytes: ArgumentCounts = field(default_factory=ArgumentCounts)
    shared_loads: int = 0
    shared_stores: int = 0

    @property
    def global_load_bytes(self) -> int:
        return sum(self.load_bytes.values())

    @property
    def global_store_bytes(self) -> int:
        return sum(self.store_bytes.values())

    @property
    def global_bytes(self) -> int:
        return self.global_load_bytes + self.global_store_bytes

    @classmethod
    def from_counts(cls, launch: dict) -> "LaunchTraffic":
        """Build from the dict that ``course.simulator`` hands its launch listeners."""
        loads, stores = ArgumentCounts(), ArgumentCounts()
        load_bytes, store_bytes = ArgumentCounts(), ArgumentCounts()
        shared_loads = shared_stores = 0
        for space, name, itemsize, n_loads, n_stores in launch["counts"]:
            if space == "shared":
                shared_loads += n_loads
                shared_stores += n_stores
                continue
            # One argument viewed at two element sizes comes as two entries: add them up.
            for counts, value in ((loads, n_loads), (stores, n_stores),
                                  (load_bytes, n_loads * itemsize),
                                  (store_bytes, n_stores * itemsize)):
                counts[name] = counts.get(name, 0) + value
        return cls(launch["kernel_name"], tuple(launch["grid"]), tuple(launch["block"]),
                   loads, stores, load_bytes, store_bytes, shared_loads, shared_stores)


class Traffic:
    """Traffic of every launch made inside one ``count_traffic()`` block, summed by name."""

    def __init__(self):
        self.per_launch: list[LaunchTraffic] = []

    def _record(self, launch: dict) -> None:
        self.per_launch.append(LaunchTraffic.from_counts(launch))

    @property
    def launches(self) -> int:
        """Number of kernel launches seen."""
        return len(self.per_launch)

    @property
    def kernel_names(self) -> list[str]:
        """Name of the kernel of each launch, in launch order."""
        return [launch.kernel_name for launch in self.per_launch]

    def _summed(self, attribute) -> ArgumentCounts:
        total = ArgumentCounts()
        for launch in self.per_launch:
            for name, value in getattr(launch, attribute).items():
                total[name] = total.get(name, 0) + value
        return total

    @property
    def global_loads(self) -> ArgumentCounts:
        """Element loads per kernel parameter name, summed over launches."""
        return self._summed("global_loads")

    @property
    def global_stores(self) -> ArgumentCounts:
        """Element stores per kernel parameter name, summed over launches."""
        return self._summed("global_stores")

    @property
    def load_bytes(self) -> ArgumentCounts:
        """Bytes loaded per kernel parameter name, summed over launches."""
        return self._summed("load_bytes")

    @property
    def store_bytes(self) -> ArgumentCounts:
        """Bytes stored per kernel parameter name, summed over launches."""
        return self._summed("store_bytes")

    @property
    def global_load_bytes(self) -> int:
        return sum(launch.global_load_bytes for launch in self.per_launch)

    @property
    def global_store_bytes(self) -> int:
        return sum(launch.global_store_bytes for launch in self.per_launch)

    @property
    def global_bytes(self) -> int:
        return self.global_load_bytes + self.global_store_bytes

    @property
    def shared_loads(self) -> int:
        return sum(launch.shared_loads for launch in self.per_launch)

    @property
    def shared_stores(self) -> int:
        return sum(launch.shared_stores for launch in self.per_launch)

    def summary(self) -> str:
        """A small text table: loads, stores and bytes per argument, then the totals."""
        names = self.kernel_names
        listed = ", ".join(dict.fromkeys(names))
        lines = [f"{self.launches} kernel launch{'es' if self.launches != 1 else ''}"
                 + (f": {listed}" if names else "")]
        rows = [(name, self.global_loads[name], self.global_stores[name],
                 self.load_bytes[name] + self.store_bytes[name]) for name in self.global_loads]
        rows.append(("global total", sum(self.global_loads.values()),
                     sum(self.global_stores.values()), self.global_bytes))
        rows.append(("shared (elements)", self.shared_loads, self.shared_stores, None))
        width = max(len(row[0]) for row in rows)
        lines.append(f"{'argument':<{width}}  {'loads':>12}  {'stores':>12}  {'bytes':>14}")
        for name, loads, stores, nbytes in rows:
            shown = f"{nbytes:>14,}" if nbytes is not None else f"{'-':>14}"
            lines.append(f"{name:<{width}}  {loads:>12,}  {stores:>12,}  {shown}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Traffic(launches={self.launches}, global_bytes={self.global_bytes}, "
                f"shared_loads={self.shared_loads}, shared_stores={self.shared_stores})")


@contextlib.contextmanager
def count_traffic():
    """Count the memory traffic of every kernel launched inside the ``with`` block.

    Yields a :class:`Traffic` that fills in as kernels finish. Blocks may nest; each counts the
    launches made inside it. Raises ``RuntimeError`` on a real GPU, where counting is impossible.
    """
    if not on_simulator():
        raise RuntimeError(
            "count_traffic() counts loads and stores on numba's CUDA simulator, but kernels run "
            "on a GPU here. Run with COURSE_DEVICE=simulator to count, or see the recorded "
            "Nsight Compute numbers for the GPU.")
    traffic = Traffic()
    simulator.add_launch_listener(traffic._record)
    try:
        yield traffic
    finally:
        simulator.remove_launch_listener(traffic._record)
