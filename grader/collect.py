"""Find submissions in the layouts instructors receive, as (student, assignment, notebook) triples.

Accepted layouts, mixed freely, in a folder or a ``.zip`` of one:

- one folder per student: ``<student>/<assignment>/<assignment>.ipynb`` (nbgrader's ``submitted/``
  layout, and what ``nbgrader collect`` produces) or ``<student>/<assignment>.ipynb``;
- LMS-style flat file names, as ``nbgrader zip_collect`` reads them:
  ``<assignment>_<student>_<anything>.ipynb`` or ``<assignment>_<student>.ipynb``, and the Canvas
  form ``<student>_<anything>_<assignment>.ipynb`` (the student is the first ``_``-separated part).

Assignment names are the known ones (``solutions/``), so ``day05_flash_attention_ada_late_2.ipynb``
is assignment ``day05_flash_attention``, student ``ada``. When a student has several files for one
assignment, the newest (modification time) is graded and the others are noted. Every student
who submitted anything is expected to submit every assignment found in the submissions (or the
ones asked for): an absent notebook becomes a ``missing`` row, never a silent gap.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import zipfile

IGNORED_PARTS = {".ipynb_checkpoints", "__MACOSX", ".git"}
_STUDENT_UNSAFE = re.compile(r"[^A-Za-z0-9.@-]+")


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


def extract_zip(zip_path: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """Extract a zip safely (no absolute paths, no ``..``) into ``dest``; return ``dest``."""
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
    return dest


def _match_flat(stem: str, assignments: list[str]) -> tuple[str, str] | None:
    """(assignment, raw student) from an LMS-style file stem, or None."""
    for name in sorted(assignments, key=len, reverse=True):
        if stem.startswith(name + "_"):
            rest = stem[len(name) + 1:]
            student = rest.split("_", 1)[0]
            if student:
                return name, student
        idx = stem.find("_" + name)
        if idx > 0:
            return name, stem.split("_", 1)[0]
    return None


def _assignment_of(stem: str, assignments: list[str]) -> str | None:
    """The assignment a notebook in a student's folder belongs to (``day05_flash_attention (1)`` too)."""
    for name in sorted(assignments, key=len, reverse=True):
        if stem == name or stem.startswith(name):
            return name
    return None


def find_submissions(root: pathlib.Path, assignments: list[str], *, expected: list[str] | None = None) -> list[Submission]:
    """All submissions under ``root`` (a folder), one per (student, assignment), sorted.

    assignments: the known assignment names. expected: the assignments every student should
    have submitted (default: those that appear anywhere in the submissions).
    """
    root = pathlib.Path(root)
    if not root.is_dir():
        raise ValueError(f"submissions must be a folder or a .zip, got {root}")
    found: dict[tuple[str, str], list[pathlib.Path]] = {}
    students: set[str] = set()
    unmatched: list[pathlib.Path] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if IGNORED_PARTS & set(rel.parts) or path.is_dir():
            if path.is_dir() and len(rel.parts) == 1 and not IGNORED_PARTS & set(rel.parts) \
                    and _assignment_of(rel.parts[0], assignments) is None:
                students.add(safe_student_id(rel.parts[0]))
            continue
        if path.suffix != ".ipynb":
            continue
        key = _classify(rel, assignments)
        if key is None:
            unmatched.append(rel)
            continue
        students.add(key[0])
        found.setdefault(key, []).append(path)
    wanted = list(expected) if expected else sorted({a for _, a in found})
    submissions = []
    for student in sorted(students):
        for assignment in wanted:
            paths = found.get((student, assignment), [])
            if not paths:
                submissions.append(Submission(student, assignment, None, ["no notebook for this assignment"]))
                continue
            paths.sort(key=lambda p: (p.stat().st_mtime, str(p)))
            notes = [f"{len(paths)} files found; graded the newest: {paths[-1].name}"] if len(paths) > 1 else []
            submissions.append(Submission(student, assignment, paths[-1], notes))
    if unmatched and submissions:
        submissions[0].notes.append(f"{len(unmatched)} notebook(s) matched no student/assignment: "
                                    + ", ".join(str(p) for p in unmatched[:5]))
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
