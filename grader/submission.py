"""What a submitted file is: a notebook (repaired where a repair cannot change a grade), its grading
cells that the release does not have, and whether it is this assignment's notebook at all.

``grader.autograde`` asks these before it grades anything: a file that is not a notebook is
``invalid_json``, another assignment's notebook is ``wrong_notebook``.
"""

from __future__ import annotations

import json
import pathlib
import re

CELL_TYPES = ("code", "markdown", "raw")


def _joined(source) -> str | None:
    """A cell source as one string (nbformat allows a list of strings; a null source is empty)."""
    if source is None:
        return ""
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    return None


def read_submission(path: pathlib.Path):
    """The submitted notebook as a dict, or None and a message saying why it is not one.

    What cannot change a grade is repaired instead of refused: a null source, outputs and
    execution counts (the grader clears them anyway), non-dict metadata, missing or repeated
    cell ids, metadata that breaks the format. Anything else that breaks the notebook format
    makes the file ``invalid_json``.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"not valid JSON: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return None, "valid JSON but not a notebook (no list of cells)"
    if not isinstance(data.get("metadata"), dict):
        data["metadata"] = {}
    if data.get("nbformat") != 4:
        if isinstance(data.get("nbformat"), int) and data["nbformat"] > 4:
            return None, f"a notebook of format {data['nbformat']}, newer than this grader reads (4)"
        data["nbformat"] = 4
    # Format 4.5 added cell ids and nothing else; every cell gets one below.
    data["nbformat_minor"] = 5
    seen_ids = set()
    for number, cell in enumerate(data["cells"], start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") not in CELL_TYPES:
            return None, f"cell {number} is not a notebook cell (no cell_type code, markdown or raw)"
        source = _joined(cell.get("source"))
        if source is None:
            return None, f"the source of cell {number} is neither text nor a list of lines"
        cell["source"] = source
        if not isinstance(cell.get("metadata"), dict):
            cell["metadata"] = {}
        if "nbgrader" in cell["metadata"] and not isinstance(cell["metadata"]["nbgrader"], dict):
            del cell["metadata"]["nbgrader"]
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            if cell["cell_type"] == "markdown" and not isinstance(cell.get("attachments", {}), dict):
                cell.pop("attachments")
        cell_id = cell.get("id")
        if not isinstance(cell_id, str) or not _VALID_CELL_ID.fullmatch(cell_id) or cell_id in seen_ids:
            cell["id"] = f"cell-{number}"
            while cell["id"] in seen_ids:
                cell["id"] += "x"
        seen_ids.add(cell["id"])
    problem = _format_problem(data)
    if problem:
        # Metadata never changes a grade (but the grading metadata, which is checked against the
        # release): what an editor or a hand wrote there is dropped rather than fail the notebook.
        data["metadata"] = {}
        for cell in data["cells"]:
            cell["metadata"] = {k: v for k, v in cell["metadata"].items() if k == "nbgrader"}
            cell.pop("attachments", None)
        if _format_problem(data):
            return None, f"not a valid notebook: {problem}"
    return data, ""


def _format_problem(data: dict) -> str:
    """Why ``data`` breaks the notebook format (nbformat 4's schema), or ''."""
    import nbformat

    try:
        nbformat.validate(nbformat.reads(json.dumps(data), as_version=4))
    except Exception as exc:  # nbformat raises many kinds for broken notebooks
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first_line}"
    return ""


_VALID_CELL_ID = re.compile(r"[a-zA-Z0-9-_]{1,64}")


def grade_ids(nb: dict) -> list[str]:
    ids = []
    for cell in nb.get("cells", []):
        gid = (cell.get("metadata") or {}).get("nbgrader", {}).get("grade_id")
        if isinstance(gid, str):
            ids.append(gid)
    return ids


def ignore_unknown_grading_cells(submitted: dict, release: dict) -> list[str]:
    """Make the nbgrader cells of ``submitted`` those of the release; return notes on what changed.

    A cell whose ``grade_id`` the release does not have (pasted from another notebook, added by
    hand) loses its nbgrader metadata and is run as an ordinary cell: nbgrader would delete its
    grade_id and then fail the whole notebook. Of several cells with one known ``grade_id`` the
    one whose source is the release's (or else the first) keeps it.
    """
    released = {}
    for cell in release.get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader", {})
        if meta.get("grade_id"):
            released[meta["grade_id"]] = cell
    keeper = {}
    for index, cell in enumerate(submitted["cells"]):
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in released and (gid not in keeper or (cell["source"].strip() == _joined(released[gid].get("source")).strip()
                                                     and submitted["cells"][keeper[gid]]["source"].strip()
                                                     != _joined(released[gid].get("source")).strip())):
            keeper[gid] = index
    unknown, repeated = [], []
    for index, cell in enumerate(submitted["cells"]):
        meta = cell["metadata"].get("nbgrader")
        if meta is None:
            continue
        gid = meta.get("grade_id")
        if gid not in released:
            unknown.append(str(gid) if gid else f"cell {index + 1}")
            del cell["metadata"]["nbgrader"]
        elif keeper[gid] != index:
            repeated.append(gid)
            del cell["metadata"]["nbgrader"]
    notes = []
    if unknown:
        notes.append("ran as ordinary cells (grading metadata this assignment does not have): " + ", ".join(unknown))
    if repeated:
        notes.append("copies of cells ran as ordinary cells (the original was graded): " + ", ".join(repeated))
    return notes


def _shared_grade_ids(submitted: dict, course_root: pathlib.Path) -> dict[str, int]:
    """``{assignment: how many of its grade_ids the submission has}`` for every assignment of the course."""
    from grader.nbgrader_api import assignments

    ids = set(grade_ids(submitted))
    shared = {}
    for name in assignments(course_root) if ids else []:
        try:
            solution = json.loads((course_root / "solutions" / name / f"{name}.ipynb").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        shared[name] = len(ids & set(grade_ids(solution)))
    return shared


def wrong_notebook(submitted: dict, release: dict, assignment: str, course_root: pathlib.Path) -> str | None:
    """Why ``submitted`` is not a notebook of ``assignment`` (whose released notebook is ``release``), or None.

    Days share grade_ids (``intro``, ``setup_device``; day 8 repeats most of day 7's), so sharing some is no
    proof: the submission is another assignment's notebook when that assignment's grade_ids it has outnumber
    this one's. A notebook of this assignment that lost cells never reads as another's (every grade_id it has
    is this assignment's), so this is decided before any tamper check."""
    own = len(set(grade_ids(submitted)) & set(grade_ids(release)))
    others = {name: n for name, n in _shared_grade_ids(submitted, course_root).items() if name != assignment}
    other = max(others, key=lambda name: (others[name], name), default=None)
    if other is not None and others[other] > own:
        return f"the notebook of {other}"
    if not own:
        return "a notebook without any cell of the released one (was it rebuilt in a new notebook?)"
    return None
