"""Run the GPU recorders: ``python -m course.record [dayNN ...] --out DIR``.

Modes:

- default: ``record(out_dir)`` of each day (checks at full size, then times every rung);
- ``--sanitize``: one small launch of each kernel, to run under ``compute-sanitizer``;
- ``--compute-sanitizer TOOL ...``: run ``--sanitize`` of each day under ``compute-sanitizer`` with
  each tool (memcheck, racecheck, synccheck, initcheck) and fail on any error it reports;
- ``--ncu-list``: print the Nsight Compute cases of each day, one ``day name N`` per line (the name:
  the rung's registry name, then what tells the case apart, ``attention_v4_flash:causal=True``);
- ``--ncu-case DAY NAME N``: run one case once after a warm-up, between ``cuda.profile_start()`` and
  ``cuda.profile_stop()``, so ``ncu --profile-from-start off`` measures exactly that launch;
- ``--other-gpu``: the recordings a lesson compares across two GPUs, made on the second one (day 8: its
  decode sweep at a few points, ``record_other_gpu``);
- ``--ncu``: run every case of the days under Nsight Compute and save the DRAM bytes it measured as
  the recording ``dayNN_dram_bytes``;
- ``--ncu-stalls``: the same cases under Nsight Compute's warp-state metrics (where warps wait, per issued
  instruction, and how often a scheduler issues), saved as ``dayNN_stall_reasons``;
- ``--ncu-shared``: the cases of a day's ``ncu_shared_cases()`` (day 8: the tensor-core GEMM ladder) under
  Nsight Compute's shared-memory wavefronts and bank conflicts, the tensor pipe's busy cycles and the warp
  states, saved as ``dayNN_shared_memory``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import traceback

import course


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.record", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    from course.record import DAYS as KNOWN     # the package's names only: nothing is launched or compiled yet

    parser.add_argument("days", nargs="*", help=f"days to record (default: all): {', '.join(KNOWN)}")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("recorded"),
                        help="folder for the recorded JSON files")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--sanitize", action="store_true", help="small launches for compute-sanitizer")
    parser.add_argument("--compute-sanitizer", nargs="+", metavar="TOOL",
                        help="run --sanitize under compute-sanitizer with these tools (memcheck racecheck ...)")
    parser.add_argument("--ncu-list", action="store_true", help="list the Nsight Compute cases")
    parser.add_argument("--ncu-case", nargs=3, metavar=("DAY", "NAME", "N"), help="run one Nsight case")
    parser.add_argument("--ncu", action="store_true", help="measure DRAM bytes of every case with ncu")
    parser.add_argument("--ncu-stalls", action="store_true", help="measure the stall reasons of every case with ncu")
    parser.add_argument("--ncu-shared", action="store_true",
                        help="measure shared-memory wavefronts, bank conflicts and the tensor pipe with ncu")
    parser.add_argument("--other-gpu", action="store_true",
                        help="record what a lesson compares across GPUs, on the second GPU (days that have it)")
    args = parser.parse_args(argv)

    course.use_device()
    from course.record import DAYS, day_module, harness

    if args.ncu_case:
        day, name, n = args.ncu_case
        try:
            module = day_module(day)
            harness.run_ncu_case([*module.ncu_cases(), *getattr(module, "ncu_shared_cases", list)()], name, int(n))
        except ValueError as exc:
            parser.error(f"{day}: {exc}")
        return 0

    days = args.days or DAYS
    failures = []
    for day in days:
        module = day_module(day)
        try:
            if args.ncu_shared:
                cases = getattr(module, "ncu_shared_cases", list)()
                if cases:
                    args.out.mkdir(parents=True, exist_ok=True)
                    print(f"== {day}: Nsight Compute, shared memory, {len(cases)} cases", flush=True)
                    print(f"   wrote {harness.measure_shared_memory(day, cases, args.out)}", flush=True)
            elif args.ncu or args.ncu_stalls:
                cases = getattr(module, "ncu_cases", lambda: [])()
                if cases:
                    args.out.mkdir(parents=True, exist_ok=True)
                    print(f"== {day}: Nsight Compute, {len(cases)} cases", flush=True)
                    shape = module.recorder().ncu_shape if hasattr(module, "recorder") else (lambda n: {})
                    measure = harness.measure_stall_reasons if args.ncu_stalls else harness.measure_dram_bytes
                    print(f"   wrote {measure(day, cases, args.out, shape=shape)}", flush=True)
            elif args.compute_sanitizer:
                for tool in args.compute_sanitizer:
                    print(f"== {day}: compute-sanitizer --tool {tool}", flush=True)
                    print(f"   {harness.sanitize_in_child(day, tool)}", flush=True)
            elif args.ncu_list:
                for case in getattr(module, "ncu_cases", lambda: [])():
                    print(day, harness.NcuCase(*case).name, case[1])
            elif args.other_gpu:
                if hasattr(module, "record_other_gpu"):
                    args.out.mkdir(parents=True, exist_ok=True)
                    print(f"== {day}: record for the comparison with another GPU", flush=True)
                    for path in module.record_other_gpu(args.out, quick=args.quick):
                        print(f"   wrote {path}", flush=True)
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


if __name__ == "__main__":
    sys.exit(main())
