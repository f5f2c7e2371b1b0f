"""Find submissions in the layouts instructors receive, as (student, assignment, notebook) triples.

Accepted layouts, mixed freely, in a folder or a ``.zip`` of one:

- one folder per student: ``<student>/<assignment>/<assignment>.ipynb`` (nbgrader's ``submitted/``
  layout, and what ``nbgrader collect`` produces) or ``<student>/<assignment>.ipynb``;
- LMS-style flat file names, as ``nbgrader zip_collect`` reads them:
  ``<assignment>_<student>_<anything>.ipynb`` or ``<assignment>_<student>.ipynb``, and the Canvas
  form ``<student>_<anything>_<assignment>.ipynb`` (the student is the first ``_``-separated part).

Assignment names are the known ones (``solutions/``), so ``day05_flash_attention_ada_late_2.ipynb``
is assignment ``day05_flash_attention``, student ``ada``. In a flat name the student id is every
``_``-separated part up to the first one that reads as an attempt, a date, a number or a word such
as ``late`` (``ada_lovelace_attempt_2`` is student ``ada_lovelace``, not ``ada``), so two students
whose ids share a first part stay two students. When a student has several files for one
assignment, the newest is graded and the others are listed; in a zip "newest" is the date the zip
stores for each file, kept as the extracted file's modification time. Every student who submitted
anything is expected to submit every assignment found in the submissions (or the ones asked for):
an absent notebook becomes a ``missing`` row, never a silent gap. Every file that is not graded is
listed, with the reason, in ``not_graded`` (``find_submissions(..., not_graded=[])``), never on
another student's row.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import re
import zipfile

IGNORED_PARTS = {".ipynb_checkpoints", "__MACOSX", ".git"}
# Files an operating system or nbgrader leaves, which nobody submitted as work.
SYSTEM_FILES = {".DS_Store", "Thumbs.db", "desktop.ini", "timestamp.txt", "submission_secret.txt"}
_STUDENT_UNSAFE = re.compile(r"[^A-Za-z0-9.@-]+")
# Parts of an LMS file name after the student id: attempts, dates, numbers, LMS words.
_NOT_STUDENT = re.compile(r"(attempt|try|submission|version|v|late|original|resubmit|final|copy|graded|file|"
                          r"assignsubmission|onlinetext)?\d*([-.:T]\d+)*|\d{4}-\d\d-\d\d.*|LATE", re.IGNORECASE)


@dataclasses.dataclass
class Submission:
    """One (student, assignment): the notebook to grade, or None when it is missing."""

    student: str
    assignment: str
    notebook: pathlib.Path | None
    notes: list[str] = dataclasses.field(default_factory=list)


def safe_student_id(raw: str) -> str:
    """A student id usable as a folder name: letters, digits, ``.@-``; other runs become ``-``."""
    cleaned = _STUDENT_UNSAFE.sub("-", raw).strip("-.")
    return cleaned or "unknown"


@dataclasses.dataclass
class NotGraded:
    """A submitted file that is not graded, and why: the summary lists it as needing a look."""

    path: pathlib.PurePath
    reason: str
    student: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def extract_zip(zip_path: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """Extract a zip safely (no absolute paths, no ``..``) into ``dest``; return ``dest``.

    Each file's modification time is the date the zip stores for it (``ZipInfo.date_time``), so
    the newest attempt is the one the student saved last, not the one extracted last.
    """
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with zipfile.ZipFile(zip_path) as archive:
        for member in archive.infolist():
            target = (dest / member.filename).resolve()
            if not (target == root or root in target.parents):
                raise ValueError(f"{zip_path} contains an unsafe path {member.filename!r}; not extracting it")
            if member.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, open(target, "wb") as out:
                out.write(src.read())
            stamp = _zip_time(member)
            os.utime(target, (stamp, stamp))
    return dest


def _zip_time(member: zipfile.ZipInfo) -> float:
    """The modification time a zip stores for a member (local time, as zip tools write it)."""
    try:
        return datetime.datetime(*member.date_time).timestamp()
    except (ValueError, OverflowError):
        return 0.0


def _student_part(parts: list[str]) -> str:
    """The student id in the ``_``-separated parts of a flat name: the parts before the first that
    reads as an attempt, a date or a number (at least the first part)."""
    kept = [parts[0]]
    for part in parts[1:]:
        if not part or _NOT_STUDENT.fullmatch(part):
            break
        kept.append(part)
    return "_".join(kept)


def _match_flat(stem: str, assignments: list[str]) -> tuple[str, str] | None:
    """(assignment, raw student) from an LMS-style file stem, or None."""
    for name in sorted(assignments, key=len, reverse=True):
        if stem.startswith(name + "_"):
            rest = stem[len(name) + 1:]
            if rest and rest.split("_", 1)[0]:
                return name, _student_part(rest.split("_"))
        idx = stem.find("_" + name)
        if idx > 0:
            return name, _student_part(stem[:idx].split("_"))
    return None


def _assignment_of(stem: str, assignments: list[str]) -> str | None:
    """The assignment a notebook in a student's folder belongs to (``day05_flash_attention (1)`` too)."""
    for name in sorted(assignments, key=len, reverse=True):
        if stem == name or stem.startswith(name):
            return name
    return None


def find_submissions(root: pathlib.Path, assignments: list[str], *, expected: list[str] | None = None,
                     not_graded: list[NotGraded] | None = None) -> list[Submission]:
    """All submissions under ``root`` (a folder), one per (student, assignment), sorted.

    assignments: the known assignment names. expected: the assignments every student should
    have submitted (default: those that appear anywhere in the submissions). not_graded: a list
    that receives every file found but not graded (older attempts, files that match no student
    or assignment, files that are not notebooks), each with its reason.
    """
    root = pathlib.Path(root)
    if not root.is_dir():
        raise ValueError(f"submissions must be a folder or a .zip, got {root}")
    skipped = not_graded if not_graded is not None else []
    found: dict[tuple[str, str], list[pathlib.Path]] = {}
    students: set[str] = set()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_dir():
            if len(rel.parts) == 1 and not IGNORED_PARTS & set(rel.parts) \
                    and _assignment_of(rel.parts[0], assignments) is None:
                students.add(safe_student_id(rel.parts[0]))
            continue
        if "__MACOSX" in rel.parts or rel.name in SYSTEM_FILES:
            continue
        owner = safe_student_id(rel.parts[0]) if len(rel.parts) > 1 \
            and _assignment_of(rel.parts[0], assignments) is None else None
        if IGNORED_PARTS & set(rel.parts):
            skipped.append(NotGraded(rel, "an automatic copy (checkpoint or version control), not the "
                                          "submitted notebook", owner))
            continue
        if path.suffix != ".ipynb":
            skipped.append(NotGraded(rel, "not a notebook (.ipynb)", owner))
            continue
        key = _classify(rel, assignments)
        if key is None:
            skipped.append(NotGraded(rel, "matches no known assignment or student: " + ", ".join(assignments), owner))
            continue
        students.add(key[0])
        found.setdefault(key, []).append(path)
    wanted = list(expected) if expected else sorted({a for _, a in found})
    submissions = []
    for (student, assignment), paths in sorted(found.items()):
        if assignment not in wanted:
            for path in paths:
                skipped.append(NotGraded(path.relative_to(root), f"{assignment} is not among the assignments "
                                                                  "graded in this run", student))
    for student in sorted(students):
        for assignment in wanted:
            paths = found.get((student, assignment), [])
            if not paths:
                submissions.append(Submission(student, assignment, None, ["no notebook for this assignment"]))
                continue
            paths.sort(key=lambda p: (p.stat().st_mtime, str(p)))
            newest = paths[-1]
            notes = []
            if len(paths) > 1:
                notes.append(f"{len(paths)} files found; graded the newest: {newest.relative_to(root)}")
                for path in paths[:-1]:
                    skipped.append(NotGraded(path.relative_to(root), f"an older file of {student}/{assignment}; "
                                                                      f"graded {newest.relative_to(root)}", student))
            submissions.append(Submission(student, assignment, newest, notes))
    return submissions


def _classify(rel: pathlib.PurePath, assignments: list[str]) -> tuple[str, str] | None:
    """(student, assignment) of a notebook at ``rel`` inside the submissions folder."""
    parts = rel.parts
    stem = rel.stem
    if len(parts) >= 2:
        # <student>/<assignment>/<nb>.ipynb or <student>/<nb>.ipynb (deeper folders: first is the student)
        folder_assignment = next((a for a in assignments if a in parts[1:-1]), None)
        assignment = folder_assignment or _assignment_of(stem, assignments)
        if assignment is not None and _assignment_of(parts[0], assignments) is None:
            return safe_student_id(parts[0]), assignment
        # <assignment>/<LMS-style or student-named file>
        flat = _match_flat(stem, assignments)
        if flat:
            return safe_student_id(flat[1]), flat[0]
        if _assignment_of(parts[0], assignments) and len(parts) == 2:
            return safe_student_id(stem), _assignment_of(parts[0], assignments)
        return None
    flat = _match_flat(stem, assignments)
    return (safe_student_id(flat[1]), flat[0]) if flat else None
