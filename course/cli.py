"""The ``course`` command: ``course doctor``, ``course release``, ``course grade``, ``course check``."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="report Python, numba, numpy, the GPU or simulator, and problems")
    doctor.add_argument("--short", action="store_true", help="one line")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        from course.doctor import run

        return run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
