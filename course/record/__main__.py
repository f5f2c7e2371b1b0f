"""Run the GPU recorders: ``python -m course.record [dayNN ...] --out DIR``.

Modes:

- default: ``record(out_dir)`` of each day (checks at full size, then times every rung);
- ``--sanitize``: one small launch of each kernel, to run under ``compute-sanitizer``;
- ``--ncu-list``: print the Nsight Compute cases of each day, one ``day label`` per line;
- ``--ncu-case DAY LABEL N``: run one case once after a warm-up, between ``cuda.profile_start()`` and
  ``cuda.profile_stop()``, so ``ncu --profile-from-start off`` measures exactly that launch;
- ``--ncu``: run every case of the days under Nsight Compute and save the DRAM bytes it measured as
  the recording ``dayNN_dram_bytes``.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import pathlib
import subprocess
import sys
import traceback

import course


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.record", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("days", nargs="*", help="days to record (default: all), e.g. day05")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("recorded"),
                        help="folder for the recorded JSON files")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--sanitize", action="store_true", help="small launches for compute-sanitizer")
    parser.add_argument("--ncu-list", action="store_true", help="list the Nsight Compute cases")
    parser.add_argument("--ncu-case", nargs=3, metavar=("DAY", "LABEL", "N"), help="run one Nsight case")
    parser.add_argument("--ncu", action="store_true", help="measure DRAM bytes of every case with ncu")
    args = parser.parse_args(argv)

    course.use_device()
    from course.record import DAYS, day_module

    if args.ncu_case:
        day, label, n = args.ncu_case
        cases = {(c[0], str(c[1])): c for c in day_module(day).ncu_cases()}
        if (label, n) not in cases:
            parser.error(f"no case {label!r} at N={n} in {day}; cases: {sorted(cases)}")
        from numba import cuda

        run = cases[label, n][-1]
        run()
        cuda.synchronize()
        cuda.profile_start()
        run()
        cuda.synchronize()
        cuda.profile_stop()
        return 0

    days = args.days or DAYS
    failures = []
    for day in days:
        module = day_module(day)
        try:
            if args.ncu:
                cases = getattr(module, "ncu_cases", lambda: [])()
                if cases:
                    args.out.mkdir(parents=True, exist_ok=True)
                    print(f"== {day}: Nsight Compute, {len(cases)} cases", flush=True)
                    print(f"   wrote {measure_dram_bytes(day, cases, args.out)}", flush=True)
            elif args.ncu_list:
                for case in getattr(module, "ncu_cases", lambda: [])():
                    print(day, repr(case[0]), case[1])
            elif args.sanitize:
                if hasattr(module, "sanitize"):
                    print(f"== {day}: sanitize", flush=True)
                    module.sanitize()
            else:
                args.out.mkdir(parents=True, exist_ok=True)
                print(f"== {day}: record", flush=True)
                for path in module.record(args.out, quick=args.quick):
                    print(f"   wrote {path}", flush=True)
        except Exception:
            failures.append(day)
            traceback.print_exc()
    if failures:
        print(f"failed: {' '.join(failures)}", file=sys.stderr)
        return 1
    return 0


DRAM_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")


def _ncu_bytes(day: str, label: str, n: int) -> tuple[float, float, int]:
    """DRAM bytes read and written by one case, summed over its kernel launches, and the launch count."""
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv",
           "--metrics", ",".join(DRAM_METRICS), sys.executable, "-m", "course.record",
           "--ncu-case", day, label, str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"ncu failed for {day} {label} N={n}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    totals = {m: 0.0 for m in DRAM_METRICS}
    launches = set()
    scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") in totals:
            value = float(row["Metric Value"].replace(",", ""))
            totals[row["Metric Name"]] += value * scale.get(row.get("Metric Unit", "byte"), 1)
            launches.add(row["ID"])
    if not launches:
        raise RuntimeError(f"ncu measured no kernel for {day} {label} N={n}:\n{proc.stdout[-2000:]}")
    return totals[DRAM_METRICS[0]], totals[DRAM_METRICS[1]], len(launches)


def measure_dram_bytes(day: str, cases, out_dir: pathlib.Path) -> pathlib.Path:
    """Profile each (label, N, run) case with Nsight Compute; save ``<day>_dram_bytes``."""
    from course.records import new_recording

    rec = new_recording(f"{day}_dram_bytes")
    rec.notes = ("DRAM bytes measured by Nsight Compute (dram__bytes_read.sum + dram__bytes_write.sum), "
                 "one launch of each case after a warm-up, --clock-control none")
    for label, n, _ in cases:
        read, written, launches = _ncu_bytes(day, label, n)
        rec.add(label=label, N=n, dram_read_bytes=read, dram_write_bytes=written,
                dram_bytes=read + written, launches=launches)
        print(f"   {label:<28} N={n:<6} read {read / 1e6:9.3f} MB  written {written / 1e6:9.3f} MB", flush=True)
    return rec.save(out_dir / f"{day}_dram_bytes.json")


if __name__ == "__main__":
    sys.exit(main())
