"""``course release``: generate ``exercises/`` from ``solutions/`` with nbgrader, then verify it.

Verification of one released assignment (``verify_release``):

- no nbgrader marker text (``BEGIN SOLUTION``, ``HIDDEN TESTS``, ...) anywhere;
- no secret line of a solution block or a hidden-test block (see ``grader.markers``);
- every grade cell locked (``locked`` and not ``editable``) and not a solution cell;
- every nbgrader cell carries a checksum, and the checksum of each locked cell is right;
- no gradebook or other database under ``exercises/``, and no file the source folder lacks.

The gradebook nbgrader needs while generating goes to a temporary folder, never the repository.
``assert_release_matches(assignment)`` regenerates into a temporary folder and compares with the
committed ``exercises/``; every day's test calls it.
"""

from __future__ import annotations

import atexit
import json
import pathlib
import shutil
import tempfile

from grader import markers
from grader.nbgrader_api import assignments as list_assignments, course_root, load_config, make_api, run_api

MARKER_TEXT = ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS")
# Notebook-level metadata that differs between machines without meaning anything.
VOLATILE_NOTEBOOK_KEYS = ("widgets", "language_info")

_scratch: pathlib.Path | None = None


def _scratch_dir() -> pathlib.Path:
    """One temporary folder per process for gradebooks of releases (removed at exit)."""
    global _scratch
    if _scratch is None:
        _scratch = pathlib.Path(tempfile.mkdtemp(prefix="course-release-"))
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def generate(names: list[str], *, root: pathlib.Path, release_dir: pathlib.Path | None = None,
             db_path: pathlib.Path | None = None) -> list[pathlib.Path]:
    """Run nbgrader ``generate_assignment`` for each name; return the released notebooks' paths.

    release_dir: where the student versions go (default ``root/exercises``). db_path: the
    gradebook to record the assignments in (default: a temporary one, outside the repository).
    """
    root = pathlib.Path(root)
    release_dir = pathlib.Path(release_dir) if release_dir else root / "exercises"
    db_path = pathlib.Path(db_path) if db_path else _scratch_dir() / "release-gradebook.db"
    config = load_config(root, **{
        "CourseDirectory.release_directory": str(release_dir.resolve()),
        "CourseDirectory.db_url": f"sqlite:///{db_path.resolve()}",
    })
    api = make_api(config)
    paths = []
    for name in names:
        _require_assignment(root, name)
        run_api(api.generate_assignment, name)
        paths.append(release_dir / name / f"{name}.ipynb")
    return paths


def _require_assignment(root: pathlib.Path, name: str) -> None:
    if not isinstance(name, str) or not (root / "solutions" / name / f"{name}.ipynb").is_file():
        known = ", ".join(list_assignments(root)) or "none"
        raise ValueError(f"assignment must name a folder solutions/<name>/<name>.ipynb; got {name!r} "
                         f"(known: {known})")


def verify_release(name: str, *, root: pathlib.Path, release_dir: pathlib.Path | None = None) -> list[str]:
    """Return the problems of one released assignment (an empty list when it is safe to hand out)."""
    root = pathlib.Path(root)
    release_dir = pathlib.Path(release_dir) if release_dir else root / "exercises"
    source_nb = markers.read_notebook(root / "solutions" / name / f"{name}.ipynb")
    released_path = release_dir / name / f"{name}.ipynb"
    if not released_path.is_file():
        return [f"{released_path} is missing: run `course release {name}`"]
    released = markers.read_notebook(released_path)
    problems = []
    text = released_path.read_text(encoding="utf-8")
    for marker in MARKER_TEXT:
        if marker in text:
            problems.append(f"{name}: the release contains the marker text {marker!r}")
    released_lines = {line.strip() for cell in released.cells for line in _source(cell).splitlines()}
    for kind, what in (("solution", "solution code"), ("hidden", "a hidden test line")):
        for line in markers.secret_lines(source_nb, kind):
            if line in released_lines:
                problems.append(f"{name}: the release shows {what}: {line!r}")
    problems += _check_cells(name, released)
    problems += _check_examples(name, released)
    problems += _check_files(name, root, release_dir)
    return problems


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _check_cells(name: str, nb) -> list[str]:
    from nbgrader.utils import compute_checksum

    problems = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if not meta:
            continue
        gid = meta.get("grade_id", "?")
        if meta.get("grade") and meta.get("solution"):
            problems.append(f"{name}: grade cell {gid} is also a solution cell (it would need manual grading)")
        elif meta.get("grade") and not (meta.get("locked") and cell.metadata.get("editable") is False):
            problems.append(f"{name}: grade cell {gid} is not locked")
        if "checksum" not in meta:
            problems.append(f"{name}: cell {gid} has no checksum")
        elif meta.get("locked") and meta["checksum"] != compute_checksum(cell):
            problems.append(f"{name}: the checksum of locked cell {gid} does not match its content")
    return problems


def _check_examples(name: str, nb) -> list[str]:
    """Example cells are not run when graded: no later cell may read a name that only an example binds."""
    from grader.execute import cell_names
    from grader.markers import example_cells

    examples = set(example_cells(nb))
    problems, only_examples = [], {}       # name -> the example that bound it last
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "a cell"
        parsed = cell_names(_source(cell))
        if parsed is None:
            continue
        bound, read = parsed
        if gid in examples:
            only_examples.update(dict.fromkeys(bound, gid))
            continue
        for used in sorted((read - bound) & set(only_examples)):     # (a cell that binds a name reads its own)
            problems.append(f"{name}: cell {gid} reads {used!r}, which only the example cell {only_examples[used]} "
                            "binds; examples are not run when graded (name the cell *_launcher, *_constants or "
                            "setup*, or bind the name where it is used)")
        for defined in bound:
            only_examples.pop(defined, None)
    return problems


def _check_files(name: str, root: pathlib.Path, release_dir: pathlib.Path) -> list[str]:
    problems = []
    for path in release_dir.rglob("*"):
        lowered = path.name.lower()
        if path.is_file() and (lowered.endswith((".db", ".db-journal", ".sqlite")) or "gradebook" in lowered):
            problems.append(f"a gradebook or database is in the release folder: {path}")
    source = root / "solutions" / name
    expected = {str(pathlib.Path(name) / p.relative_to(source)) for p in source.rglob("*")
                if p.is_file() and ".ipynb_checkpoints" not in p.parts}
    for path in _release_files(release_dir, name):
        if path not in expected:
            problems.append(f"{name}: {path} is in the release but not in solutions/{name}/")
    return problems


def normalized(path: pathlib.Path) -> dict:
    """A released notebook as JSON, without notebook metadata that varies between machines."""
    nb = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    for key in VOLATILE_NOTEBOOK_KEYS:
        nb.get("metadata", {}).pop(key, None)
    for cell in nb.get("cells", []):
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
    return nb


def _release_files(folder: pathlib.Path, name: str) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in (folder / name).rglob("*")
                  if p.is_file() and ".ipynb_checkpoints" not in p.relative_to(folder).parts)


def release_differences(name: str, *, root: pathlib.Path | None = None) -> list[str]:
    """Regenerate ``name`` into a temporary folder and list how the committed release differs."""
    root = pathlib.Path(root) if root else course_root()
    with tempfile.TemporaryDirectory(prefix="course-rerelease-") as tmp:
        fresh_path = generate([name], root=root, release_dir=pathlib.Path(tmp))[0]
        committed_path = root / "exercises" / name / f"{name}.ipynb"
        if not committed_path.is_file():
            return [f"{committed_path.relative_to(root)} is not there: run `course release {name}` and commit it"]
        fresh, committed = normalized(fresh_path), normalized(committed_path)
        fresh_files = _release_files(pathlib.Path(tmp), name)
    # JupyterLab's checkpoints of an opened notebook are the editor's copies, never part of a release.
    committed_files = _release_files(root / "exercises", name)
    differences = []
    if fresh_files != committed_files:
        differences.append(f"files differ: regenerated {fresh_files}, committed {committed_files}")
    if fresh == committed:
        return differences
    fresh_cells, committed_cells = fresh.get("cells", []), committed.get("cells", [])
    if len(fresh_cells) != len(committed_cells):
        differences.append(f"{len(committed_cells)} cells committed, {len(fresh_cells)} regenerated")
    for i, (a, b) in enumerate(zip(committed_cells, fresh_cells)):
        if a != b:
            gid = b.get("metadata", {}).get("nbgrader", {}).get("grade_id", b.get("id"))
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            differences.append(f"cell {i} ({gid}) differs in {keys}")
    if fresh.get("metadata") != committed.get("metadata"):
        differences.append("notebook metadata differs")
    return differences or ["the notebooks differ (top-level fields)"]


def assert_release_matches(name: str, *, root: pathlib.Path | None = None) -> None:
    """Fail (AssertionError) unless ``exercises/<name>`` is what ``course release <name>`` makes
    from ``solutions/<name>``, and that release passes ``verify_release``."""
    root = pathlib.Path(root) if root else course_root()
    differences = release_differences(name, root=root)
    assert not differences, (f"exercises/{name} is out of date with solutions/{name}; run "
                             f"`course release {name}` and commit the result:\n  " + "\n  ".join(differences))
    problems = verify_release(name, root=root)
    assert not problems, "the release is not safe to hand out:\n  " + "\n  ".join(problems)


def main_release(args) -> int:
    """``course release [dayNN ...] [--check]``: generate (or with --check only compare) and verify."""
    root = course_root()
    known = list_assignments(root)
    names = expand_names(args.assignments, known)
    if not names:
        print(f"course release: no assignments in {root / 'solutions'}")
        return 1
    failed = False
    if not args.check:
        try:
            generate(names, root=root)
        except RuntimeError as exc:
            print(f"course release: nbgrader could not generate the release:\n{exc}")
            return 1
    for name in names:
        problems = release_differences(name, root=root) if args.check else []
        problems += verify_release(name, root=root)
        status = "ok" if not problems else f"{len(problems)} problem(s)"
        print(f"{name:32s} {status}")
        for problem in problems:
            print(f"    - {problem}")
        failed |= bool(problems)
    if not failed and not args.check:
        print(f"released into {root / 'exercises'}; the gradebook stayed out of the repository")
    return 1 if failed else 0


def expand_names(requested: list[str], known: list[str]) -> list[str]:
    """Accept full names (day05_flash_attention) or prefixes (day05); default: every assignment."""
    if not requested:
        return known
    names = []
    for item in requested:
        matches = [k for k in known if k == item or k.startswith(item + "_")]
        if not matches:
            raise SystemExit(f"course: no assignment matches {item!r}; known: {', '.join(known) or 'none'}")
        names.extend(m for m in matches if m not in names)
    return names
