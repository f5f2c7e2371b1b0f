"""Results recorded on a real GPU, saved as JSON in ``course/data/`` and plotted where there is none.

A recording carries what is needed to trust it: the device, the driver, the versions of Python,
numba, numba-cuda, NumPy and torch, the date, and the ceilings (copy bandwidth, fp32 matmul rate)
measured in the same run, so that every figure can be read as a ratio::

    rec = new_recording("day05_flash_timing", ceilings=measure_ceilings())
    rec.add(rung="attention_v4_flash", N=1024, causal=False, median_ms=0.41)   # one free-form row per measurement
    rec.save()                                                        # course/data/day05_flash_timing.json
    rec = load_recording("day05_flash_timing")                        # anywhere, GPU or not

A lesson reads rows as queries: :func:`where` keeps the rows whose columns have the given values (a
tuple or set of values: any of them), :func:`one` the single row that matches, :func:`by` indexes rows
by columns and :func:`group_by` groups them; each is also a method of a Recording::

    rec.one(rung="attention_v4_flash", N=4096, causal=True)["median_ms"]
    ms = rec.by("rung", N=4096, causal=False)                         # {rung: row}
    [row["tflops"] for row in rec.where(rung=("attention_v4_flash", "torch_sdpa"), causal=True)]

A name asked of ``rung`` or ``label`` that no row has is fine when it names a rung of a registry or a row of a
shipped recording (that rung was simply not measured here: no rows); any other name (an old short label,
``v4_flash``, a typo) raises LookupError naming what the rows have, rather than match nothing in silence.

``live_or_recorded(name, run)`` runs ``run()`` on a GPU and loads the recording elsewhere.
Lessons call :func:`live_else_recorded`, which also says what is missing instead of raising::

    timing = live_else_recorded("day05_flash_timing", run=lambda: day05.timing_recording(quick=True))
    if timing is not None:
        plot_timing(timing)
"""

from __future__ import annotations

import datetime
import functools
import importlib
import json
import math
import pathlib
import platform
import re
import subprocess
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

__all__ = ["Recording", "new_recording", "load_recording", "recording_path", "recorded_names",
           "live_or_recorded", "live_else_recorded", "where", "one", "by", "group_by", "distinct", "known_names",
           "check_names",
           "fraction_of_copy_on_gpu", "across_gpus", "DATA_DIR", "SCHEMA_VERSION"]

DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"
SCHEMA_VERSION = 1
VERSION_KEYS = ("python", "numba", "numba_cuda", "numpy", "torch")
_METADATA_KEYS = ("name", "device", "driver", "versions", "date", "ceilings", "rows")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HOW_TO_RECORD = ("Recordings are made on a GPU with `python -m course.record dayNN --out DIR` and "
                  "copied into course/data/.")


@dataclass
class Recording:
    """Measurements of one experiment on one GPU, with the metadata to trust them.

    ``rows`` is a list of flat dicts (one per measurement, e.g. ``{"rung": "attention_v4_flash", "N": 1024,
    "causal": False, "median_ms": 0.41}``: the rung by its registry name, what else tells rows apart in
    columns of their own). ``live`` is True for a recording made in this process, False for one
    loaded from disk; it is not saved.
    """

    name: str
    device: str
    driver: str
    versions: dict
    date: str
    ceilings: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    notes: str = ""
    live: bool = field(default=False, compare=False)

    def add(self, **row) -> dict:
        """Append one row of measurements (numbers, strings, booleans or None) and return it."""
        if not row:
            raise ValueError("add() needs at least one keyword, "
                             "e.g. rec.add(rung='attention_v1_naive', N=64, median_ms=1.2)")
        clean = {key: _json_scalar(value, f"row[{key!r}]") for key, value in row.items()}
        self.rows.append(clean)
        return clean

    def where(self, /, **match) -> list[dict]:
        """The rows whose columns have these values (see :func:`where`)."""
        return where(self, **match)

    def one(self, /, **match) -> dict:
        """The one row whose columns have these values (see :func:`one`)."""
        return one(self, **match)

    def by(self, /, *keys: str, **match) -> dict:
        """The matching rows indexed by the values of ``keys`` (see :func:`by`)."""
        return by(self, *keys, **match)

    def group_by(self, /, *keys: str, **match) -> dict:
        """The matching rows grouped by the values of ``keys`` (see :func:`group_by`)."""
        return group_by(self, *keys, **match)

    def distinct(self, /, key: str, **match) -> list:
        """The sorted values of column ``key`` among the matching rows (see :func:`distinct`)."""
        return distinct(self, key, **match)

    @property
    def day(self) -> str:
        """The date part of ``date`` (YYYY-MM-DD)."""
        return self.date[:10]

    @property
    def stamp(self) -> str:
        """Where the numbers come from, for plot legends: ``recorded on H100 (2025-11-22)``."""
        if self.live:
            return f"live on {self.device}"
        return f"recorded on {self.device} ({self.day})"

    def to_dict(self) -> dict:
        return {"schema": SCHEMA_VERSION, "name": self.name, "device": self.device,
                "driver": self.driver, "versions": dict(self.versions), "date": self.date,
                "ceilings": dict(self.ceilings), "notes": self.notes, "rows": list(self.rows)}

    @classmethod
    def from_dict(cls, data: dict, source: str = "recording") -> "Recording":
        """Build a Recording from saved JSON, or raise ValueError naming what is missing or wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
        missing = [key for key in _METADATA_KEYS if key not in data]
        if missing:
            raise ValueError(f"{source}: missing metadata {missing}; a recording must say "
                             f"{list(_METADATA_KEYS)}. {_HOW_TO_RECORD}")
        if data.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(f"{source}: schema {data.get('schema')!r}, "
                             f"this course reads schema {SCHEMA_VERSION}")
        for key in ("name", "device", "driver", "date"):
            if not isinstance(data[key], str) or not data[key]:
                raise ValueError(f"{source}: {key} must be a non-empty string, got {data[key]!r}")
        try:
            datetime.datetime.fromisoformat(data["date"])
        except ValueError:
            raise ValueError(f"{source}: date must be ISO 8601 (2025-11-22T10:00:00+00:00), "
                             f"got {data['date']!r}") from None
        versions = data["versions"]
        if not isinstance(versions, dict) or [k for k in VERSION_KEYS if k not in versions]:
            raise ValueError(f"{source}: versions must name {list(VERSION_KEYS)}, got {versions!r}")
        ceilings = data["ceilings"]
        if not isinstance(ceilings, dict) or not all(
                v is None or (isinstance(v, (int, float)) and v > 0) for v in ceilings.values()):
            raise ValueError(f"{source}: ceilings must map names to positive numbers, got {ceilings!r}")
        rows = data["rows"]
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{source}: rows must be a list of objects")
        notes = data.get("notes", "")
        if not isinstance(notes, str):
            raise ValueError(f"{source}: notes must be a string, got {type(notes).__name__}")
        return cls(name=data["name"], device=data["device"], driver=data["driver"],
                   versions=dict(versions), date=data["date"], ceilings=dict(ceilings),
                   rows=[dict(r) for r in rows], notes=notes, live=False)

    def save(self, path: str | pathlib.Path | None = None) -> pathlib.Path:
        """Write the JSON to ``path`` (default ``course/data/<name>.json``) and return the path."""
        path = recording_path(self.name) if path is None else pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False)
        path.write_text(text + "\n", encoding="utf-8")
        return path


# --------------------------------------------------------------------------- reading rows

def _rows_of(rows) -> list:
    """The rows of a Recording, or the given rows (an iterable of dicts) as a list."""
    if isinstance(rows, Recording):
        return rows.rows
    if isinstance(rows, (str, bytes, dict)) or not hasattr(rows, "__iter__"):
        raise TypeError(f"rows must be a Recording or a list of row dicts, got {type(rows).__name__}")
    rows = list(rows)
    if not all(isinstance(row, dict) for row in rows):
        raise TypeError("rows must be a Recording or a list of row dicts")
    return rows


def _matches(row: dict, match: dict) -> bool:
    for key, wanted in match.items():
        value = row.get(key)
        if isinstance(wanted, (tuple, list, set, frozenset)):
            if value not in wanted:
                return False
        elif callable(wanted):
            if value is None or not wanted(value):
                return False
        elif value != wanted:
            return False
    return True


def _describe(rows, match: dict) -> str:
    name = f" of {rows.name!r}" if isinstance(rows, Recording) else ""
    return f"rows{name} matching {match}" if match else f"rows{name}"


# The columns that name what a row measured: a rung by its registry name (``label`` in Nsight's rows), or torch's call.
NAME_COLUMNS = ("rung", "label")


@functools.lru_cache(maxsize=1)
def known_names() -> frozenset:
    """Every name a row may give in ``rung`` or ``label``: the key of each rung in the ``RUNGS`` of every kernel
    module, and every name in the recordings shipped in ``course/data`` (torch's calls, day 1's probes)."""
    import pkgutil

    import kernels

    names = set()
    for module in pkgutil.iter_modules(kernels.__path__):
        try:
            ladder = getattr(importlib.import_module(f"kernels.{module.name}"), "RUNGS", {})
        except Exception:         # a module that does not import names nothing; its own tests say why
            continue
        names.update(name for name in ladder if isinstance(name, str))
    for path in DATA_DIR.glob("*.json"):
        try:
            rows = json.loads(path.read_text(encoding="utf-8")).get("rows", [])
        except (OSError, ValueError, AttributeError):
            continue
        names.update(row[key] for row in rows if isinstance(row, dict)
                     for key in NAME_COLUMNS if isinstance(row.get(key), str))
    return frozenset(names)


def check_names(rows: list, match: dict, source: str) -> None:
    """Raise LookupError for a name asked of ``rung`` or ``label`` that no row has and nothing names.

    rows: the rows asked of; match: the columns asked for (only ``rung`` and ``label`` are looked at);
    source: how the error names the rows (a recording's name). A lookup that finds nothing because a
    name is misspelt or out of date fails here, with the names the rows do have, instead of drawing
    nothing; a name of a rung or recording that exists elsewhere (a rung not yet recorded) passes."""
    for key in NAME_COLUMNS:
        if key not in match:
            continue
        wanted = match[key]
        asked = wanted if isinstance(wanted, (tuple, list, set, frozenset)) else (wanted,)
        present = {row.get(key) for row in rows}
        missing = [name for name in asked if isinstance(name, str) and name not in present]
        unknown = [name for name in missing if name not in known_names()]
        if unknown:
            recorded = sorted({value for value in present if isinstance(value, str)})
            raise LookupError(
                f"no row of {source} has {key} = {unknown[0]!r}, and no rung in kernels/ nor any recording in "
                f"course/data is named so; the {key}s of {source}: {recorded}. A row names its rung by its key in "
                f"the kernel module's RUNGS (attention_v4_flash, not v4_flash), and says what tells rows of one "
                f"rung apart in columns of their own (causal=True, fmt='float16').")


def where(rows, /, **match) -> list[dict]:
    """The rows whose columns have the given values, in their recorded order.

    rows: a Recording or a list of row dicts. Each keyword names a column and what it must hold: a value
    (``rung="attention_v4_flash"``), a tuple, list or set of values, any of which will do
    (``fmt=("float16", "fp8_e4m3")``), or a function of the value that says yes (``N=lambda n: n >= 1024``;
    a row without the column does not match it). A row without a column matches the value None. No
    keyword: every row.

    Raises LookupError for a name asked of ``rung`` or ``label`` that no row has, unless a registry or a shipped
    recording knows it (:func:`known_names`; then it was not measured here, and no row matches).
    """
    all_rows = _rows_of(rows)
    check_names(all_rows, match, repr(rows.name) if isinstance(rows, Recording) else "these rows")
    return [row for row in all_rows if _matches(row, match)]


def one(rows, /, **match) -> dict:
    """The single row whose columns have the given values (as :func:`where`).

    Raises LookupError when no row or more than one row matches, naming the values each column takes.
    """
    found = where(rows, **match)
    if len(found) == 1:
        return found[0]
    all_rows = _rows_of(rows)
    seen = {key: sorted({repr(row.get(key)) for row in all_rows}) for key in match}
    raise LookupError(f"{'no' if not found else len(found)} {_describe(rows, match)}, expected one; "
                      f"values recorded: {seen}")


def _key(row: dict, keys: tuple):
    return row.get(keys[0]) if len(keys) == 1 else tuple(row.get(key) for key in keys)


def _check_keys(keys) -> None:
    if not keys or not all(isinstance(key, str) for key in keys):
        raise TypeError(f"name the columns to index by, e.g. by(rows, 'rung', 'N'), got {keys!r}")


def by(rows, /, *keys: str, **match) -> dict:
    """The rows that match (as :func:`where`) indexed by the values of the columns ``keys``: one column
    gives ``{value: row}``, several ``{(value, value, ...): row}``, in the rows' order.

    Raises ValueError when two matching rows share a key (index by more columns, or match fewer rows).
    """
    _check_keys(keys)
    indexed = {}
    for row in where(rows, **match):
        key = _key(row, keys)
        if key in indexed:
            raise ValueError(f"two {_describe(rows, match)} have {keys} = {key!r}; index by more columns "
                             f"(columns: {sorted({k for r in _rows_of(rows) for k in r})})")
        indexed[key] = row
    return indexed


def group_by(rows, /, *keys: str, **match) -> dict:
    """The rows that match (as :func:`where`) grouped by the values of the columns ``keys``: ``{value:
    [rows]}`` for one column, ``{(value, ...): [rows]}`` for several, groups and rows in recorded order."""
    _check_keys(keys)
    groups = {}
    for row in where(rows, **match):
        groups.setdefault(_key(row, keys), []).append(row)
    return groups


def distinct(rows, /, key: str, **match) -> list:
    """The values column ``key`` takes among the rows that match (as :func:`where`), sorted, None left out."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a column name, got {key!r}")
    return sorted({row[key] for row in where(rows, **match) if row.get(key) is not None})


def _json_scalar(value, where: str):
    """A number, string, bool or None as plain Python; NumPy scalars are unwrapped."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be finite (use None for a missing value), got {value}")
        return value
    raise TypeError(f"{where} must be a number, string, bool or None, got {type(value).__name__}")


def _check_name(name) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError("name must be letters, digits, '_', '-' or '.' (like 'day05_flash_timing'), "
                         f"got {name!r}")
    return name


def recording_path(name: str) -> pathlib.Path:
    """The packaged JSON file of a recording: ``course/data/<name>.json``."""
    return DATA_DIR / f"{_check_name(name)}.json"


def recorded_names() -> list[str]:
    """Names of the recordings shipped in ``course/data/``."""
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


def load_recording(name_or_path: str | pathlib.Path) -> Recording:
    """Load a recording by name (from ``course/data/``) or from a path to a JSON file.

    Raises FileNotFoundError when it was never recorded, ValueError when it is incomplete.
    """
    if isinstance(name_or_path, pathlib.Path):
        path = name_or_path
    elif isinstance(name_or_path, str):
        path = recording_path(name_or_path)
    else:
        raise TypeError("name_or_path must be a recording name or a pathlib.Path, "
                        f"got {type(name_or_path).__name__}")
    if not path.is_file():
        known = ", ".join(recorded_names()) or "none yet"
        raise FileNotFoundError(f"no recording {path.stem!r} (looked for {path}). Recorded: {known}. "
                                + _HOW_TO_RECORD)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    return Recording.from_dict(data, source=str(path))


def _versions() -> dict:
    versions = {"python": platform.python_version()}
    for key, dist in (("numba", "numba"), ("numba_cuda", "numba-cuda"), ("numpy", "numpy"),
                      ("torch", "torch")):
        try:
            versions[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[key] = None
    return versions


def _gpu_name_and_driver() -> tuple[str, str]:
    from numba import cuda

    name = cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else str(name)
    major, minor = cuda.cudadrv.driver.driver.get_version()
    driver = f"CUDA {major}.{minor}"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if smi.returncode == 0 and smi.stdout.strip():
            driver = f"{smi.stdout.splitlines()[0].strip()} ({driver})"
    except (OSError, subprocess.SubprocessError):
        pass  # the CUDA version alone still identifies the driver API
    return name, driver


def new_recording(name: str, ceilings: dict | None = None, notes: str = "", *,
                  device: str | None = None, driver: str | None = None) -> Recording:
    """Start a live recording: device name, driver, versions and date are filled in.

    On the simulator the device is ``"CUDA simulator"`` unless ``device``/``driver`` are given.
    """
    _check_name(name)
    if ceilings is None:
        ceilings = {}
    if not isinstance(ceilings, dict):
        raise TypeError("ceilings must be a dict such as measure_ceilings() returns, "
                        f"got {type(ceilings).__name__}")
    ceilings = {k: _json_scalar(v, f"ceilings[{k!r}]") for k, v in ceilings.items()}
    if not isinstance(notes, str):
        raise TypeError(f"notes must be a str, got {type(notes).__name__}")
    if device is None or driver is None:
        from course.device import on_simulator

        found = ("CUDA simulator", "none") if on_simulator() else _gpu_name_and_driver()
        device = found[0] if device is None else device
        driver = found[1] if driver is None else driver
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return Recording(name=name, device=device, driver=driver, versions=_versions(), date=date,
                     ceilings=ceilings, rows=[], notes=notes, live=True)


def live_or_recorded(name: str, run) -> tuple[Recording, bool]:
    """On a GPU return ``(run(), True)``; elsewhere ``(load_recording(name), False)``.

    run: a function of no arguments that measures and returns a Recording.
    """
    _check_name(name)
    if not callable(run):
        raise TypeError(f"run must be a function returning a Recording, got {type(run).__name__}")
    from course.device import on_simulator

    if on_simulator():
        return load_recording(name), False
    rec = run()
    if not isinstance(rec, Recording):
        raise TypeError(f"run() must return a Recording, got {type(rec).__name__}")
    rec.live = True
    return rec, True


def fraction_of_copy_on_gpu(row: dict) -> float:
    """A timing row's ``fraction_of_copy`` (taken on its median) moved onto its ``kernel_ms``, the GPU's time alone:
    a step shorter than the host's cost to launch it is timed by the host when calls queue one after another."""
    return row["fraction_of_copy"] * row["median_ms"] / row["kernel_ms"]


def across_gpus(first: Recording, second: Recording, steps, *, time: str = "kernel_ms"):
    """The same steps recorded on two GPUs, for a table: ``(points, rows)``.

    first, second: timing recordings whose rows are at (``num_seqs``, ``context``), the second made on another
    GPU (``<name>_other_gpu``). steps: ``(name, selector)`` pairs, a selector the columns that pick one step's
    rows (``{"rung": "gqa_decode_split_k"}``, with ``"fmt"`` where a recording has cache formats). points: the
    (num_seqs, context) both recordings hold for every step, fewest tokens first. rows: one per step, ``(name,
    fraction of copy on the first GPU, on the second, how many times faster the second ran it)``, each a list over
    the points: fractions from ``fraction_of_copy_on_gpu``, the speed-up as ``time`` on the first over ``time``
    on the second.
    """
    tables = []
    for name, selector in steps:
        found = [{(r["num_seqs"], r["context"]): r for r in rec.where(**selector)} for rec in (first, second)]
        tables.append((name, *found))
    common = set.intersection(*(set(a) & set(b) for _, a, b in tables)) if tables else set()
    points = sorted(common, key=lambda p: (p[0] * p[1], p))
    rows = [(name, [fraction_of_copy_on_gpu(a[p]) for p in points], [fraction_of_copy_on_gpu(b[p]) for p in points],
             [a[p][time] / b[p][time] for p in points]) for name, a, b in tables]
    return points, rows


# The recordings a flag of ``python -m course.record`` makes, by the end of their name: (suffix, where, flag).
MADE_BY = (("_other_gpu", "on a second GPU", " --other-gpu"), ("_dram_bytes", "on a GPU", " --ncu"),
           ("_stall_reasons", "on a GPU", " --ncu-stalls"), ("_shared_memory", "on a GPU", " --ncu-shared"))


def live_else_recorded(name: str, run=None) -> Recording | None:
    """The numbers a lesson shows: measured live on a GPU, else recorded, else None with a note.

    run: a function of no arguments that measures and returns a Recording on a GPU; without it
        (a measurement that only the recorder makes) the recording is loaded everywhere.
    On a GPU where ``run`` cannot measure (torch missing for the baseline, a RuntimeError such as
    a driver that refuses) the recording is shown instead, and a line says why. Where there is no
    recording either, a line names the recording and the command that makes it (``MADE_BY``: ``--other-gpu``
    for a name ending in ``_other_gpu``, ``--ncu-stalls`` for ``_stall_reasons`` ...), and the result is None:
    the cell skips its figure instead of failing.
    """
    _check_name(name)
    if run is not None and not callable(run):
        raise TypeError(f"run must be a function returning a Recording, got {type(run).__name__}")
    from course.device import on_simulator

    if run is not None and not on_simulator():
        try:
            return live_or_recorded(name, run)[0]
        except (ImportError, RuntimeError) as why:
            print(f"Live measurement of {name!r} is not possible here ({why}); showing the recording.")
    try:
        return load_recording(name)
    except FileNotFoundError:
        day = name.split("_", 1)[0]
        where, flag = next(((where, flag) for suffix, where, flag in MADE_BY if name.endswith(suffix)),
                           ("on a GPU", ""))
        print(f"No recording {name!r} is installed yet, so what needs it is skipped. It is made {where} "
              f"with `python -m course.record {day}{flag} --out DIR` and copied into course/data/.")
        return None
