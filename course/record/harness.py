"""One runner for every day's recorder: a day declares what to measure, this module measures it.

A day's recorder (``course/record/dayNN.py``) declares, for its kernels:

- :class:`Check`: a rung's output at full size and the float64 reference it must match;
- :class:`Sweep`: one timing recording over sizes, each point a list of :class:`Timed` launches
  (the rungs from the kernel module's registry and the torch baseline) with the bytes and FLOPs
  of one call from ``course.models``;
- :class:`NcuCase`: a labelled launch whose DRAM bytes (or stall reasons) Nsight Compute measures;
- the small launches that ``compute-sanitizer`` watches.

These come together in a :class:`Recorder`, and :func:`record` runs it: the checks first (nothing
is timed that is not right at full size), then every sweep, timed with ``course.timing`` against
the ceilings measured in the same run. Every row of every recording carries the shape it measured.
``python -m course.record`` is the command line over this module.

A row names what it measured by the rung's registry name (its key in the kernel module's ``RUNGS``), or
a baseline's name (``torch_sdpa``), in its ``rung`` column (``label`` for Nsight's rows); what else
tells two rows of one rung apart (the mask, the cache format, the group) is a column of its own
(``causal``, ``fmt``, ``group``), never part of the name. ``course.records.where`` reads them back.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import pathlib
import re
import subprocess
import sys
from typing import Callable, NamedTuple

import numpy as np

QUICK_BUDGET_S = 1.0   # seconds of repeats per timed call with --quick
BUDGET_S = 3.0         # and without


@dataclasses.dataclass(frozen=True)
class Timed:
    """One call to time: the rung it runs (``label``: its registry name, or a baseline's name such as
    ``torch_sdpa``), the launch, and the model's bytes and FLOPs of one call.

    ``bytes_moved`` and ``flops`` are None where meaningless (a softmax has no FLOP rate worth
    plotting); ``columns`` are extra values for the row: what tells this call apart from another of
    the same rung at the same point (``{"fmt": "float16"}``), or a rung's modelled intensity. A call that
    is no rung (one kernel of a rung timed alone) has ``label`` None, its row no ``rung``, and names what it
    runs in ``columns`` (``{"kernel": "scores_kernel"}``).
    """

    label: str | None
    launch: Callable[[], object]
    bytes_moved: float | None = None
    flops: float | None = None
    columns: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One timing recording: the same launches at every point of a sweep over sizes.

    name: the recording's name (``day05_flash_timing``), also its file name.
    points: the points of a full run, e.g. N values or (N, causal) pairs; ``quick_points`` with --quick.
    shape: ``shape(point)`` gives the columns that say what was measured (N, B, H, d, causal ...).
    cases: ``cases(point)`` makes the inputs on the GPU and returns the :class:`Timed` launches.
    flush_l2: overwrite L2 before every repeat (memory-bound calls whose inputs would stay in L2).
    finish: ``finish(rows)`` adds columns that relate one point's rows (e.g. the fraction of torch).
    fraction_of_copy: add ``fraction_of_copy``, each row's GB/s over the copy bandwidth measured in
    the same run (a memory-bound kernel's figure of merit).
    kernel_time: time every case a second time with the host's launch cost hidden
    (``launch_overhead="hidden"``) and add ``kernel_ms``: the GPU's time alone, what a step captured
    in a CUDA graph would take, next to ``median_ms``, what back-to-back calls from Python take.
    warm_time: with ``flush_l2`` and ``kernel_time``, time every case also with its launch cost hidden but L2
    left as the previous repeat left it, and add ``warm_kernel_ms`` next to ``kernel_ms``: what the same kernel
    takes when its inputs are still in L2 (a matrix that fits in L2 against one that does not). The two are
    timed twice each, alternately (flushed, warm, flushed, warm), and each keeps the lower median, so that one
    slow timing of either does not decide the comparison.
    """

    name: str
    notes: str
    points: tuple
    quick_points: tuple
    shape: Callable[[object], dict]
    cases: Callable[[object], list]
    flush_l2: bool = False
    finish: Callable[[list], None] | None = None
    fraction_of_copy: bool = False
    kernel_time: bool = False
    warm_time: bool = False

    def __post_init__(self):
        if self.warm_time and not (self.flush_l2 and self.kernel_time):
            raise ValueError(f"{self.name}: warm_time compares with kernel_ms timed with L2 flushed: "
                             "it needs flush_l2=True and kernel_time=True")


@dataclasses.dataclass(frozen=True)
class Check:
    """One full-size check: ``launch()`` runs a rung, ``out()`` returns its output on the host and
    ``want()`` the float64 reference (called last, so it may read what an earlier kernel produced).

    ``poisoned`` are the output buffers, filled with NaN before the launch: a buffer shared by
    several checks would otherwise still hold the last rung's right answer. ``columns`` go into the
    check's row (rung, shape); ``options`` to ``course.checking.check`` (dims, tile,
    rows_sum_to_one); ``exact`` asks for equality instead (a transpose moves bits).
    """

    name: str
    launch: Callable[[], object]
    out: Callable[[], np.ndarray]
    want: Callable[[], np.ndarray]
    seed: int | None = None
    poisoned: tuple = ()
    columns: dict = dataclasses.field(default_factory=dict)
    options: dict = dataclasses.field(default_factory=dict)
    exact: bool = False


class NcuCase(NamedTuple):
    """A launch to profile: its label (the rung's registry name) and N in the ``dram_bytes`` recording, a
    callable making it, and ``columns`` that tell it apart from another case of the same rung and N
    (``{"causal": True}``, ``{"fmt": "fp8_e4m3"}``), written into its row too."""

    label: str
    N: int
    run: Callable[[], None]
    columns: dict | None = None

    @property
    def name(self) -> str:
        """What names the case on the command line: ``label``, then its columns (``attention_v4_flash:causal=True``)."""
        if not self.columns:
            return self.label
        return self.label + ":" + ",".join(f"{key}={value}" for key, value in self.columns.items())


@dataclasses.dataclass(frozen=True)
class Recorder:
    """What one day records. Every field is a function, so the sizes are read when it runs.

    checks: ``checks(quick)`` the full-size :class:`Check` list; ``check_recording`` names the
        recording of their errors (None: the checks only guard the timings).
    sweeps: ``sweeps()`` the :class:`Sweep` list.
    extras: ``extras(quick)`` other recordings of the day (resources, trials), already measured.
    ncu_shape: ``ncu_shape(N)`` the columns, besides N, that say what an Nsight case measured.
    """

    day: str
    checks: Callable[[bool], list]
    sweeps: Callable[[], list]
    ncu_cases: Callable[[], list]
    sanitize: Callable[[], None]
    extras: Callable[[bool], list] = lambda quick: []
    ncu_shape: Callable[[int], dict] = lambda n: {}
    check_recording: str | None = None
    check_notes: str = ""


# --------------------------------------------------------------------------- checking


def run_checks(checks) -> list[dict]:
    """Run each check in order; raise on the first failure; one row per check (errors and seed)."""
    from course.checking import check, poison

    rows = []
    for c in checks:
        for buffer in c.poisoned:
            poison(buffer)
        c.launch()
        got = c.out()
        want = c.want()
        if c.exact:
            wrong = int(np.sum(got != want)) if got.shape == want.shape else got.size
            if wrong:
                raise AssertionError(f"{c.name} is wrong (seed {c.seed}): {wrong} elements differ")
            rel_err = max_abs_err = 0.0
        else:
            result = check(got, want, name=c.name, seed=c.seed, **c.options)
            rel_err, max_abs_err = float(result.rel_err), float(result.max_abs_err)
        rows.append(dict(**c.columns, rel_err=rel_err, max_abs_err=max_abs_err, seed=c.seed))
        print(f"   check {c.name:<48} rel_err {rel_err:.2e}", flush=True)
    return rows


# --------------------------------------------------------------------------- timing


def time_cases(cases, shape: dict, *, quick: bool = False, flush_l2: bool = False, timer=None,
               kernel_time: bool = False, warm_time: bool = False) -> list[dict]:
    """Time each :class:`Timed` and return one row per case: label, shape, times and rates.

    Rows carry median, p10 and p90 in ms, the repeat count, GB/s and TFLOP/s from the median and
    the model's bytes and FLOPs; with ``kernel_time``, ``kernel_ms`` too, and with ``warm_time``
    ``warm_kernel_ms`` (see :class:`Sweep`).
    ``timer(fn, budget_s, flush_l2=..., launch_overhead=...)`` defaults to
    ``course.timing.benchmark_within``; tests give a stand-in, since nothing times on the simulator.
    """
    if timer is None:
        from course.timing import benchmark_within as timer
    budget = QUICK_BUDGET_S if quick else BUDGET_S
    rows = []
    for case in cases:
        t = timer(case.launch, budget, flush_l2=flush_l2)
        seconds = t.median_ms / 1e3
        rows.append({**({"rung": case.label} if case.label is not None else {}), **shape,
                     "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "repeat": len(t.samples_ms),
                     "gbps": case.bytes_moved / seconds / 1e9 if case.bytes_moved else None,
                     "tflops": case.flops / seconds / 1e12 if case.flops else None, **case.columns})
        extra = ""
        if kernel_time:
            rows[-1]["kernel_ms"] = timer(case.launch, budget, flush_l2=flush_l2, launch_overhead="hidden").median_ms
            extra = f" (kernel alone {rows[-1]['kernel_ms']:.3f} ms)"
            if warm_time:               # flushed, warm, flushed, warm: the lower median of each
                warm = timer(case.launch, budget, flush_l2=False, launch_overhead="hidden").median_ms
                rows[-1]["kernel_ms"] = min(rows[-1]["kernel_ms"], timer(case.launch, budget, flush_l2=flush_l2,
                                                                         launch_overhead="hidden").median_ms)
                rows[-1]["warm_kernel_ms"] = min(warm, timer(case.launch, budget, flush_l2=False,
                                                             launch_overhead="hidden").median_ms)
                extra = f" (kernel alone {rows[-1]['kernel_ms']:.3f} ms, L2 warm {rows[-1]['warm_kernel_ms']:.3f} ms)"
        named = "".join(f" {v}" for v in case.columns.values() if isinstance(v, (str, bool)))
        print(f"   {((case.label or '') + named).strip():<40} {shape} {t.median_ms:9.3f} ms{extra}", flush=True)
    return rows


def record_sweep(sweep: Sweep, *, quick: bool = False, ceilings: dict | None = None, timer=None):
    """Time every point of ``sweep`` and return its Recording (not saved)."""
    from course.records import new_recording

    rec = new_recording(sweep.name, ceilings=ceilings, notes=sweep.notes)
    for point in (sweep.quick_points if quick else sweep.points):
        shape = sweep.shape(point)
        rows = time_cases(sweep.cases(point), shape, quick=quick, flush_l2=sweep.flush_l2, timer=timer,
                          kernel_time=sweep.kernel_time, warm_time=sweep.warm_time)
        if sweep.finish is not None:
            sweep.finish(rows)
        if sweep.fraction_of_copy:
            for row in rows:
                row["fraction_of_copy"] = row["gbps"] / ceilings["copy_gbps"] if row["gbps"] else None
        for row in rows:
            rec.add(**row)
    return rec


def record_other_gpu(checks, sweep: Sweep, points, out_dir, *, checked: str, quick: bool = False,
                     ceilings: dict | None = None) -> pathlib.Path:
    """A day's recording for the comparison with another GPU, made on that GPU: run ``checks`` at full size
    (raising on the first failure), then time ``sweep`` at ``points`` only (the first of them with ``quick``) and
    save it as ``<sweep.name>_other_gpu.json`` in ``out_dir``. ``checked`` says in its notes what the checks were;
    ``ceilings`` default to ``course.timing.measure_ceilings()`` of this GPU."""
    run_checks(checks)
    if ceilings is None:
        from course.timing import measure_ceilings

        ceilings = measure_ceilings()
    other = dataclasses.replace(
        sweep, name=f"{sweep.name}_other_gpu", points=tuple(points), quick_points=tuple(points)[:1],
        notes=f"{sweep.name}'s sweep on another GPU, at {len(points)} of its points, after {checked} passed "
              f"on this GPU. {sweep.notes}")
    rec = record_sweep(other, quick=quick, ceilings=ceilings)
    return rec.save(pathlib.Path(out_dir) / f"{rec.name}.json")


def compiled_resources(kernels: dict, *, key: str = "kernel", ptx_locals: bool = False, **columns) -> list[dict]:
    """A row per compiled overload of each ``{name: kernel}`` (launched once already): the name under
    ``key``, then ``columns``, registers, local memory (bytes per thread) and static shared memory per
    block; with ``ptx_locals`` also the ``ld.local`` / ``st.local`` instructions of its PTX. Printed too."""
    rows = []
    for name, kernel in kernels.items():
        for arg_types, compiled in kernel.overloads.items():
            row = {key: name, **columns, "registers": int(compiled.regs_per_thread),
                   "local_bytes": int(compiled.local_mem_per_thread),
                   "shared_bytes": int(compiled.shared_mem_per_block)}
            if ptx_locals:
                ptx = kernel.inspect_asm(arg_types)
                row.update(ptx_local_loads=ptx.count("ld.local"), ptx_local_stores=ptx.count("st.local"))
            rows.append(row)
            extra = "".join(f" {v}" for v in columns.values() if v != "")
            print(f"   {name:<28}{extra:>9} {row['registers']:>4} registers  {row['local_bytes']:>5} B local  "
                  f"{row['shared_bytes']:>6} B shared", flush=True)
    return rows


def fraction_of(baseline, column: str, *, time: str = "median_ms"):
    """A ``Sweep.finish`` that sets ``column`` = the baseline's time over each row's (1.0: as fast);
    ``time`` is the column compared (``kernel_ms`` for the GPU's time alone).

    baseline: the start of the baseline row's ``rung`` (``"torch_sdpa"``), or the columns it has
    (``{"rung": "gqa_decode_page_runs", "fmt": "float32"}``, as ``course.records.where``); one row of
    each point must match.
    """
    from course.records import where

    def finish(rows):
        if isinstance(baseline, dict):
            baseline_rows = where(rows, **baseline)
        else:
            baseline_rows = [r for r in rows if r.get("rung", "").startswith(baseline)]
        baseline_ms = [r[time] for r in baseline_rows]
        if len(baseline_ms) != 1:
            raise ValueError(f"expected one {baseline!r} row among {[r.get('rung') for r in rows]}")
        for row in rows:
            row[column] = baseline_ms[0] / row[time]

    return finish


def finish_all(*finishes):
    """One ``Sweep.finish`` that runs several in order."""

    def finish(rows):
        for each in finishes:
            each(rows)

    return finish


# --------------------------------------------------------------------------- recording a day


def record(recorder: Recorder, out_dir, *, quick: bool = False, timer=None, ceilings=None) -> list[pathlib.Path]:
    """Check at full size, then time every sweep and record the extras; save all; return the paths
    (the checks' recording first, if any, then the sweeps and the extras in their order).

    ``ceilings`` default to ``course.timing.measure_ceilings()`` (a GPU only); the GPU paths are
    ``timer`` and the ceilings, both replaceable so tests run the bookkeeping on the simulator.
    """
    from course.records import new_recording

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []                      # each recording is saved as soon as it is made: a later failure keeps it
    check_rows = run_checks(recorder.checks(quick))
    if recorder.check_recording:
        checks = new_recording(recorder.check_recording, notes=recorder.check_notes)
        for row in check_rows:
            checks.add(**row)
        paths.append(checks.save(out_dir / f"{checks.name}.json"))
    sweeps = recorder.sweeps()
    if sweeps and ceilings is None:
        from course.timing import measure_ceilings

        ceilings = measure_ceilings()
    for sweep in sweeps:
        rec = record_sweep(sweep, quick=quick, ceilings=ceilings, timer=timer)
        paths.append(rec.save(out_dir / f"{rec.name}.json"))
    for rec in recorder.extras(quick):
        paths.append(rec.save(out_dir / f"{rec.name}.json"))
    return paths


def lazy(make, *args):
    """A callable that builds its launch with ``make(*args)`` on the first call and reuses it after.

    Nsight cases are listed in every profiling process but only one runs, so inputs are made lazily.
    """
    launch = []

    def run():
        if not launch:
            launch.append(make(*args))
        launch[0]()

    return run


# --------------------------------------------------------------------------- Nsight Compute


def run_ncu_case(cases, name: str, n: int) -> None:
    """Run the case named ``name`` (``NcuCase.name``) at ``n`` once to warm up, then once between
    ``cuda.profile_start()`` and ``cuda.profile_stop()``, so ``ncu --profile-from-start off`` measures
    exactly that launch."""
    from numba import cuda

    found = {(NcuCase(*c).name, int(c[1])): c for c in cases}
    if (name, int(n)) not in found:
        raise ValueError(f"no case {name!r} at N={n}; cases: {sorted(found)}")
    run = found[name, int(n)][2]
    run()
    cuda.synchronize()
    cuda.profile_start()
    run()
    cuda.synchronize()
    cuda.profile_stop()


DRAM_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
_UNIT_BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def parse_ncu_csv(text: str) -> tuple[float, float, int]:
    """DRAM bytes read and written in ``ncu --csv`` output, summed over launches, and the launch count."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    totals = {m: 0.0 for m in DRAM_METRICS}
    launches = set()
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") in totals:
            value = float(row["Metric Value"].replace(",", ""))
            unit = row.get("Metric Unit", "byte")
            if unit not in _UNIT_BYTES:
                raise ValueError(f"ncu reported {row['Metric Name']} in an unknown unit {unit!r}")
            totals[row["Metric Name"]] += value * _UNIT_BYTES[unit]
            launches.add(row["ID"])
    return totals[DRAM_METRICS[0]], totals[DRAM_METRICS[1]], len(launches)


def ncu_dram_bytes(day: str, name: str, n: int) -> tuple[float, float, int]:
    """Profile one case of ``day`` (``NcuCase.name``) in a child process under ``ncu``: DRAM bytes read,
    written, launches."""
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv",
           "--metrics", ",".join(DRAM_METRICS), sys.executable, "-m", "course.record",
           "--ncu-case", day, name, str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"ncu failed for {day} {name} N={n}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    read, written, launches = parse_ncu_csv(proc.stdout)
    if not launches:
        raise RuntimeError(f"ncu measured no kernel for {day} {name} N={n}:\n{proc.stdout[-2000:]}")
    return read, written, launches


def measure_dram_bytes(day: str, cases, out_dir, *, shape=lambda n: {}, profile=ncu_dram_bytes) -> pathlib.Path:
    """Profile each case with Nsight Compute; save the recording ``<day>_dram_bytes`` in ``out_dir``.

    ``shape(N)`` gives the columns besides N that say what each case measured (B, H, d ...); a case's
    own ``columns`` follow (and win where they name the same column).
    """
    from course.records import new_recording

    rec = new_recording(f"{day}_dram_bytes")
    rec.notes = ("DRAM bytes measured by Nsight Compute (dram__bytes_read.sum + dram__bytes_write.sum), "
                 "one launch of each case after a warm-up, --clock-control none")
    for case in map(lambda c: NcuCase(*c), cases):
        read, written, launches = profile(day, case.name, case.N)
        rec.add(**{"label": case.label, "N": case.N, **shape(case.N), **(case.columns or {})}, dram_read_bytes=read,
                dram_write_bytes=written, dram_bytes=read + written, launches=launches)
        print(f"   {case.name:<40} N={case.N:<6} read {read / 1e6:9.3f} MB  written {written / 1e6:9.3f} MB",
              flush=True)
    return rec.save(pathlib.Path(out_dir) / f"{day}_dram_bytes.json")


# Where warps wait: Nsight Compute's warp-state breakdown. For each reason, the average number of warps stalled for
# it per cycle in which the scheduler issued an instruction, which is that reason's share of the warp cycles each
# issued instruction took ("selected" is the issue itself: 1). Their sum is the warp cycles per issued instruction.
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
                 "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait")
STALL_METRICS = {f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio": f"stall_{reason}"
                 for reason in STALL_REASONS}
# Beside them: instructions issued per cycle per scheduler (at most 1), warps resident per scheduler, warp
# instructions executed.
ISSUE_METRICS = {"smsp__issue_active.avg.per_cycle_active": "issue_per_cycle",
                 "smsp__warps_active.avg.per_cycle_active": "warps_per_scheduler",
                 "smsp__inst_executed.sum": "warp_instructions"}


def parse_ncu_metrics(text: str, names: dict) -> list[dict]:
    """One dict per launch in ``ncu --csv`` output: ``kernel`` (its name up to the first "(" or "["), and each metric
    of ``names`` (Nsight's name: short name) under its short name. A launch missing any of them is an error that names
    it (ncu reports no value for a metric it does not know on this GPU)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    launches = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        short = names.get(row.get("Metric Name"))
        if short is None:
            continue
        launch = launches.setdefault(row["ID"], {"kernel": re.split(r"[(\[]", row["Kernel Name"], maxsplit=1)[0]})
        launch[short] = float(row["Metric Value"].replace(",", ""))
    for launch in launches.values():
        missing = sorted(set(names.values()) - set(launch))
        if missing:
            raise ValueError(f"ncu reported no {', '.join(missing)} for {launch['kernel']}")
    return list(launches.values())


def parse_ncu_stalls(text: str, also: dict | None = None) -> list[dict]:
    """``parse_ncu_metrics`` of ``STALL_METRICS`` and ``ISSUE_METRICS`` (``stall_long_scoreboard``,
    ``issue_per_cycle`` ...) and the metrics ``also`` names, with ``cycles_per_issue``, the sum of the stall
    reasons."""
    launches = parse_ncu_metrics(text, {**STALL_METRICS, **ISSUE_METRICS, **(also or {})})
    for launch in launches:
        launch["cycles_per_issue"] = sum(launch[short] for short in STALL_METRICS.values())
    return launches


def ncu_profile(day: str, name: str, n: int, also: dict | None = None) -> list[dict]:
    """Profile one case of ``day`` (``NcuCase.name``) in a child process under ``ncu`` with the warp states and the
    metrics ``also`` names: ``parse_ncu_stalls`` of its output, a dict per launch."""
    metrics = [*STALL_METRICS, *ISSUE_METRICS, *(also or {})]
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--print-units", "base",
           "--metrics", ",".join(metrics), sys.executable, "-m", "course.record", "--ncu-case", day, name, str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"ncu failed for {day} {name} N={n}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    launches = parse_ncu_stalls(proc.stdout, also)
    if not launches:
        raise RuntimeError(f"ncu measured no kernel for {day} {name} N={n}:\n{proc.stdout[-2000:]}")
    return launches


def ncu_stall_reasons(day: str, name: str, n: int) -> list[dict]:
    """Profile one case of ``day`` (``NcuCase.name``) in a child process under ``ncu``: ``parse_ncu_stalls`` of
    its launches."""
    return ncu_profile(day, name, n)


def measure_stall_reasons(day: str, cases, out_dir, *, shape=lambda n: {},
                          profile=ncu_stall_reasons) -> pathlib.Path:
    """Profile each case with Nsight Compute's warp-state metrics; save the recording ``<day>_stall_reasons`` in
    ``out_dir``: a row per launch of each case (a rung of two kernels has two), with the columns of
    ``measure_dram_bytes``' rows, the launch's ``kernel`` and its metrics."""
    from course.records import new_recording

    rec = new_recording(f"{day}_stall_reasons")
    rec.notes = ("Nsight Compute's warp states, one launch of each case after a warm-up, --clock-control none: "
                 "stall_<reason> is smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio (warps "
                 "stalled for that reason per cycle with an issue: its share of the warp cycles an issued "
                 "instruction took; stall_selected is the issue itself), cycles_per_issue their sum; "
                 "issue_per_cycle smsp__issue_active.avg.per_cycle_active, warps_per_scheduler "
                 "smsp__warps_active.avg.per_cycle_active, warp_instructions smsp__inst_executed.sum")

    def said(launch):
        top = max(STALL_METRICS.values(), key=lambda short: launch[short] if short != "stall_selected" else -1)
        return f"{launch['cycles_per_issue']:6.1f} cycles an issue, most {top[6:]} ({launch[top]:.1f})"

    _profile_cases(day, cases, rec, shape, profile, said)
    return rec.save(pathlib.Path(out_dir) / f"{day}_stall_reasons.json")


def _profile_cases(day, cases, rec, shape, profile, said) -> None:
    """Add to ``rec`` a row per launch ``profile`` measured of each case (its label, N, ``shape(N)``, its columns and
    the launch's metrics), printing ``said(launch)`` for each."""
    for case in map(lambda c: NcuCase(*c), cases):
        for launch in profile(day, case.name, case.N):
            rec.add(**{"label": case.label, "N": case.N, **shape(case.N), **(case.columns or {})}, **launch)
            print(f"   {case.name:<40} N={case.N:<6} {launch['kernel'][:32]:<32} {said(launch)}", flush=True)


# Shared memory and the tensor pipe: the shared-load wavefronts a launch's warps caused (ld.shared and ldmatrix: one
# wavefront is one pass over the 32 banks) and how many of them bank conflicts added, the share of cycles the SMs'
# tensor pipes were busy with fp16/bf16 mmas, and the launch's duration; measured with the warp states above.
SHARED_METRICS = {"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared_load_wavefronts",
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared_load_conflicts",
                  "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_percent",
                  "gpu__time_duration.sum": "duration_ns"}


def ncu_shared_memory(day: str, name: str, n: int) -> list[dict]:
    """Profile one case of ``day`` under ``ncu``: ``SHARED_METRICS`` and the warp states of its launches."""
    return ncu_profile(day, name, n, SHARED_METRICS)


def measure_shared_memory(day: str, cases, out_dir, *, shape=lambda n: {},
                          profile=ncu_shared_memory) -> pathlib.Path:
    """Profile each case with ``SHARED_METRICS`` and the warp states; save the recording ``<day>_shared_memory`` in
    ``out_dir``, a row per launch as ``measure_stall_reasons`` writes them, with the shared-memory columns."""
    from course.records import new_recording

    rec = new_recording(f"{day}_shared_memory")
    rec.notes = ("Nsight Compute, one launch of each case after a warm-up, --clock-control none: "
                 "shared_load_wavefronts l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum (ld.shared and "
                 "ldmatrix), shared_load_conflicts l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum (the "
                 "wavefronts bank conflicts added), tensor_pipe_percent "
                 "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active, duration_ns "
                 "gpu__time_duration.sum (ncu --print-units base: nanoseconds); the warp states as in the "
                 "stall_reasons recordings (stall_<reason>, cycles_per_issue, issue_per_cycle, warps_per_scheduler, "
                 "warp_instructions)")

    def said(launch):
        return (f"{launch['shared_load_wavefronts'] / 1e6:8.1f} M wavefronts ({launch['shared_load_conflicts'] / 1e6:.1f}"
                f" M conflicts), tensor pipe {launch['tensor_pipe_percent']:.0f}%, {launch['cycles_per_issue']:.1f} "
                "cycles an issue")

    _profile_cases(day, cases, rec, shape, profile, said)
    return rec.save(pathlib.Path(out_dir) / f"{day}_shared_memory.json")


# --------------------------------------------------------------------------- compute-sanitizer

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def sanitize_in_child(day: str, tool: str = "memcheck", *, run=subprocess.run) -> str:
    """Run ``python -m course.record --sanitize DAY`` under ``compute-sanitizer --tool TOOL``.

    Returns the sanitizer's summary line; raises RuntimeError with its report when it found errors
    (``--error-exitcode 1``: an out-of-bounds access or a race fails the run, not only a crash).
    """
    if tool not in SANITIZER_TOOLS:
        raise ValueError(f"tool must be one of {SANITIZER_TOOLS}, got {tool!r}")
    # Host API errors are not the kernels' (numba's driver bindings probe entry points that a driver
    # may lack, which the sanitizer reports as CUDA_ERROR_INVALID_VALUE): only device errors count.
    cmd = ["compute-sanitizer", "--tool", tool, "--report-api-errors", "no", "--error-exitcode", "1",
           sys.executable, "-m", "course.record", "--sanitize", day]
    proc = run(cmd, capture_output=True, text=True, env=os.environ.copy())
    report = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    if proc.returncode != 0:
        raise RuntimeError(f"compute-sanitizer --tool {tool} failed for {day}:\n{report}")
    summary = [line for line in proc.stdout.splitlines() if "SUMMARY" in line]   # racecheck: RACECHECK SUMMARY
    return summary[-1].strip() if summary else f"{tool}: no summary printed"
