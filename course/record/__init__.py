"""Record GPU results for the lessons: one module per day, ``python -m course.record dayNN --out DIR``.

A day's module is a declaration over one harness (``course.record.harness``): its sizes, its rungs
from the kernel module's registry, the bytes and FLOPs of each from ``course.models``, and the torch
baseline (``course.record.baselines``). ``recorder()`` returns that declaration; the module's
``record(out_dir, quick=False)`` runs it (checks at full size, then timing with ``course.timing``)
and saves Recordings (``course.records``) that carry the shapes they measured and that lessons plot
on machines without a GPU. ``sanitize()`` launches each kernel once, small, for
``compute-sanitizer``; ``ncu_cases()`` lists labelled launches whose DRAM bytes Nsight Compute
measures.
"""

import importlib
import pkgutil

DAYS = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("day"))


def day_module(day: str):
    """Import the recorder of one day (``day05`` or ``day05_flash_attention``)."""
    key = day.split("_")[0]
    if key not in DAYS:
        raise ValueError(f"day must be one of {DAYS}, got {day!r}")
    return importlib.import_module(f"course.record.{key}")
