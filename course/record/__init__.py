"""Record GPU results for the lessons: one module per day, ``python -m course.record dayNN --out DIR``.

Each day module defines ``record(out_dir, quick=False)``, which checks every kernel of the day at
full size against the reference, times every rung and the torch baseline, and saves Recordings
(``course.records``) that lessons plot on machines without a GPU. It may also define
``sanitize()`` (one small launch of each kernel, for ``compute-sanitizer``) and ``ncu_cases()``
(labelled launches whose DRAM bytes Nsight Compute measures).
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
