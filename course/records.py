"""Results recorded on a real GPU, saved as JSON in ``course/data/`` and plotted where there is none.

A recording carries what is needed to trust it: the device, the driver, the versions of Python,
numba, numba-cuda, NumPy and torch, the date, and the ceilings (copy bandwidth, fp32 matmul rate)
measured in the same run, so that every figure can be read as a ratio::

    rec = new_recording("day05_flash_timing", ceilings=measure_ceilings())
    rec.add(rung="v4_flash", N=1024, median_ms=0.41, tflops=12.3)      # one free-form row per measurement
    rec.save()                                                        # course/data/day05_flash_timing.json
    rec = load_recording("day05_flash_timing")                        # anywhere, GPU or not

``live_or_recorded(name, run)`` runs ``run()`` on a GPU and loads the recording elsewhere.
Lessons call :func:`live_else_recorded`, which also says what is missing instead of raising::

    timing = live_else_recorded("day05_flash_timing", run=lambda: day05.timing_recording(quick=True))
    if timing is not None:
        plot_timing(timing)
"""

from __future__ import annotations

import datetime
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
           "live_or_recorded", "live_else_recorded", "DATA_DIR", "SCHEMA_VERSION"]

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

    ``rows`` is a list of flat dicts (one per measurement, e.g. ``{"rung": "v4_flash", "N": 1024,
    "median_ms": 0.41}``). ``live`` is True for a recording made in this process, False for one
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
                             "e.g. rec.add(rung='v1_naive', N=64, median_ms=1.2)")
        clean = {key: _json_scalar(value, f"row[{key!r}]") for key, value in row.items()}
        self.rows.append(clean)
        return clean

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


def live_else_recorded(name: str, run=None) -> Recording | None:
    """The numbers a lesson shows: measured live on a GPU, else recorded, else None with a note.

    run: a function of no arguments that measures and returns a Recording on a GPU; without it
        (a measurement that only the recorder makes) the recording is loaded everywhere.
    On a GPU where ``run`` cannot measure (torch missing for the baseline, a RuntimeError such as
    a driver that refuses) the recording is shown instead, and a line says why. Where there is no
    recording either, a line names the recording and the command that makes it, and the result
    is None: the cell skips its figure instead of failing.
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
        print(f"No recording {name!r} is installed yet, so what needs it is skipped. It is made on a GPU "
              f"with `python -m course.record {day} --out DIR` and copied into course/data/.")
        return None
