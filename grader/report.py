"""What a grading run writes besides the notebooks: ``grades.csv``, ``grades_by_cell.csv``, ``lms.csv``,
``not_graded.csv`` and the summary printed at the end (``grader.grade`` writes them for a local run and for a run on a
cluster alike)."""

from __future__ import annotations

import csv
import pathlib

from grader.autograde import STATUSES
from grader.collect import NotGraded

__all__ = ["NOT_GRADED_CSV", "write_not_graded", "read_not_graded", "write_csvs", "summary_table"]

NOT_GRADED_CSV = "not_graded.csv"


def write_not_graded(files: list[NotGraded], out: pathlib.Path) -> None:
    """``not_graded.csv``: a row per submitted file that was not graded (file, student, reason)."""
    with open(out / NOT_GRADED_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "student", "reason"])
        for item in files:
            writer.writerow([str(item.path), item.student or "", item.reason])


def read_not_graded(out) -> list[dict]:
    """The rows of ``not_graded.csv`` written by the last run into ``out`` (none if absent)."""
    path = pathlib.Path(out) / NOT_GRADED_CSV
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_csvs(rows: list[dict], out: pathlib.Path) -> None:
    """grades.csv (a row per submission), grades_by_cell.csv (per grade cell), lms.csv (per student)."""
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "assignment", "status", "points", "max_points", "details", "flags", "seconds"])
        for r in rows:
            writer.writerow([r["student"], r["assignment"], r["status"], _fmt(r["points"]), _fmt(r["max_points"]),
                             " | ".join(r["details"]), " | ".join(r["flags"]), r.get("seconds", "")])
    with open(out / "grades_by_cell.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "assignment", "grade_id", "points", "max_points", "status"])
        for r in rows:
            for gid, cell in r["cells"].items():
                writer.writerow([r["student"], r["assignment"], gid, _fmt(cell["points"]), _fmt(cell["max_points"]),
                                 r["status"]])
    assignments = sorted({r["assignment"] for r in rows})
    students = sorted({r["student"] for r in rows})
    by_key = {(r["student"], r["assignment"]): r for r in rows}
    with open(out / "lms.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *assignments, "total"])
        for s in students:
            points = [by_key[(s, a)]["points"] if (s, a) in by_key else 0.0 for a in assignments]
            writer.writerow([s, *map(_fmt, points), _fmt(sum(points))])


def _fmt(x: float) -> str:
    return f"{x:g}"


def summary_table(rows: list[dict], not_graded: list[dict] | None = None) -> str:
    """Text table: per assignment, submissions by status and the mean score; then every problem row,
    every submission graded again because a worker of a cluster was lost while it held it (a row's
    ``regraded``, ``grader.distributed``) and every submitted file that was not graded
    (``read_not_graded``), with the reason."""
    lines = []
    assignments = sorted({r["assignment"] for r in rows})
    header = f"{'assignment':28s} {'n':>4s} " + " ".join(f"{s[:12]:>12s}" for s in STATUSES) + f" {'mean':>7s} {'max':>5s}"
    lines.append(header)
    lines.append("-" * len(header))
    for a in assignments:
        mine = [r for r in rows if r["assignment"] == a]
        counts = " ".join(f"{sum(r['status'] == s for r in mine):12d}" for s in STATUSES)
        max_points = max((r["max_points"] for r in mine), default=0.0)
        mean = sum(r["points"] for r in mine) / len(mine) if mine else 0.0
        lines.append(f"{a:28s} {len(mine):4d} {counts} {mean:7.2f} {max_points:5g}")
    problems = [r for r in rows if r["status"] != "graded" or r["flags"]]
    regraded = [r for r in rows if r.get("regraded")]
    if problems:
        lines.append("")
        lines.append("needs a look:")
        for r in problems:
            what = "; ".join(r["details"] + [f"review: {f}" for f in r["flags"]])
            lines.append(f"  {r['student']}/{r['assignment']}: {r['status']} ({_fmt(r['points'])}/"
                         f"{_fmt(r['max_points'])}) {what[:300]}")
    if regraded:
        lines.append("")
        lines.append(f"graded again ({len(regraded)}): a worker of the cluster was lost while it held them:")
        for r in regraded:
            lines.append(f"  {r['student']}/{r['assignment']}: {'; '.join(r['regraded'])}")
    if not_graded:
        lines.append("")
        lines.append(f"files not graded ({len(not_graded)}, also in {NOT_GRADED_CSV}):")
        for item in not_graded:
            owner = f" [{item['student']}]" if item.get("student") else ""
            lines.append(f"  {item['file']}{owner}: {item['reason']}")
    return "\n".join(lines)
