"""The ``course`` command: ``course doctor``, ``course release``, ``course grade``, ``course check``.

- ``course doctor [--short]``: what this machine runs the course on, and what is wrong
- ``course check [dayNN ...] [--path DIR]``: a student's visible tests, headless, as a table (it looks
  in the current folder first, then in the course's ``exercises/``)
- ``course release [dayNN ...] [--check]``: instructors: generate ``exercises/`` and verify it
- ``course chat [--path auto|numpy|kernels] [--temperature T] [--top-p P] [--seed S] [--max-tokens N]``: talk to
  SmolLM2-135M, the model of days 9 and 10, streamed token by token (on a GPU through the course's kernels)
- ``course grade SUBMISSIONS [--out DIR] [--jobs N] [--scheduler ADDRESS] [--gpu] [--timeout S] [--force] [--no-isolation]``: instructors:
  autograde a class, write feedback, a grades CSV and a summary
"""

from __future__ import annotations

import argparse
import sys


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="report Python, numba, numpy, the GPU or simulator, and problems")
    doctor.add_argument("--short", action="store_true", help="one line")

    check = sub.add_parser("check", help="run the visible tests of your exercise notebooks and show a table")
    check.add_argument("assignments", nargs="*", metavar="dayNN",
                       help="days to check (day05 or day05_flash_attention); default: every exercise found")
    check.add_argument("--path", default=None,
                       help="folder holding your exercise notebooks (default: the current folder and its "
                            "dayNN_* subfolders, then exercises/ of the course)")
    check.add_argument("--timeout", type=_positive_int, default=300, help="seconds allowed per cell (default 300)")

    release = sub.add_parser("release", help="instructors: generate exercises/ from solutions/ and verify it")
    release.add_argument("assignments", nargs="*", metavar="dayNN", help="default: every assignment")
    release.add_argument("--check", action="store_true",
                         help="do not write exercises/; fail if it differs from a fresh release")

    grade = sub.add_parser("grade", help="instructors: autograde submissions, write feedback and grades")
    grade.add_argument("submissions", help="a folder or a .zip: one folder per student, or LMS-style "
                                           "files dayNN_slug_<student>_<anything>.ipynb")
    grade.add_argument("--out", default="grading", help="output folder (default: ./grading); it holds "
                                                        "secrets (gradebook, autograded notebooks)")
    grade.add_argument("--jobs", type=int, default=1, help="parallel grading processes (default 1); with "
                                                           "--scheduler local, the cluster's worker processes")
    grade.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="grade on the workers of a Dask cluster: its scheduler's address (tcp://host:8786), "
                            "its scheduler file, or 'local' for a cluster of --jobs processes on this machine "
                            "(see grader/README.md)")
    grade.add_argument("--gpu", action="store_true", help="run the kernels on the GPU (default: the simulator)")
    grade.add_argument("--timeout", type=_positive_int, default=120, help="seconds allowed per cell (default 120)")
    grade.add_argument("--no-isolation", action="store_true",
                       help="grade without the bubblewrap sandbox: student code can then read every file you "
                            "can; only on a machine that holds nothing secret")
    grade.add_argument("--force", action="store_true", help="grade again what a previous run already graded")
    grade.add_argument("--assignments", nargs="*", metavar="dayNN", default=None,
                       help="grade only these assignments (default: every assignment found)")
    chat = sub.add_parser("chat", help="talk to SmolLM2-135M, on the course's kernels on a GPU, else in NumPy")
    chat.add_argument("--path", choices=("auto", "numpy", "kernels"), default="auto",
                      help="auto (default): the kernels on a GPU, the NumPy forward pass without one")
    chat.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; above 0: sampled")
    chat.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling's probability mass (default 1)")
    chat.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0)")
    chat.add_argument("--max-tokens", type=int, default=256, help="the longest answer in tokens (default 256)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        from course.doctor import run as doctor_run

        return doctor_run(args)
    if args.command == "check":
        from grader.check import main_check

        return main_check(args)
    if args.command == "release":
        from grader.release import main_release

        return main_release(args)
    if args.command == "chat":
        import course
        from inference.chat import main as chat_main

        on_gpu = course.use_device() == "gpu"
        if args.path == "kernels" and not on_gpu:
            print("course chat: --path kernels needs a GPU (on the simulator a token takes minutes); "
                  "use --path numpy", file=sys.stderr)
            return 2
        return chat_main(args, "kernels" if args.path == "kernels" or (args.path == "auto" and on_gpu) else "numpy")
    if args.command == "grade":
        from grader.grade import main_grade

        return main_grade(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
