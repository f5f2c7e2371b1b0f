"""Put deleted grade cells back, as cells that fail: a deleted test scores 0, visibly.

nbgrader leaves a deleted grade cell out (no score, nothing said), and its
``OverwriteCells.add_missing_cells`` option puts the original back and runs it, so deleting a
test cell would cost nothing (and with every cell carrying a ``grade_id``, as ours do, that
option raises ``KeyError`` when the cell before the deleted one is not a grade or solution cell).
``RestoreDeletedCells`` runs after ``OverwriteCells`` and inserts, where the release had it, a
locked grade cell with the original metadata whose code raises an error saying the cell was
deleted; the grader reports the submission as tampered.
"""

from __future__ import annotations

import json

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

DELETED_SOURCE = ('"""This test cell was deleted from the submission."""\n'
                  'raise AssertionError("this test cell was deleted from your notebook, so it scores 0")')


def _gid(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def restore_deleted_cells(nb, release: dict) -> list[str]:
    """Insert failing stand-ins for the release's grade cells missing from ``nb``; return their ids."""
    present = {_gid(c) for c in nb.cells}
    release_cells = release.get("cells", [])
    restored = []
    for position, cell in enumerate(release_cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or meta.get("grade_id") in present:
            continue
        # After the nearest earlier release cell that the submission still has.
        anchor = next((_gid(c) for c in reversed(release_cells[:position]) if _gid(c) in present), None)
        index = 0 if anchor is None else next(i for i, c in enumerate(nb.cells) if _gid(c) == anchor) + 1
        stand_in = nbformat.v4.new_code_cell(DELETED_SOURCE)
        stand_in.metadata = nbformat.from_dict(json.loads(json.dumps(cell.get("metadata", {}))))
        stand_in.metadata["nbgrader"].pop("checksum", None)
        stand_in.id = cell.get("id") or f"restored-{meta['grade_id']}"
        nb.cells.insert(index, stand_in)
        present.add(meta["grade_id"])
        restored.append(meta["grade_id"])
    return restored


class RestoreDeletedCells(NbGraderPreprocessor):
    """nbgrader preprocessor: ``restore_deleted_cells`` against the released notebook."""

    release_notebook = Unicode("", help="path of the released notebook of this assignment").tag(config=True)

    def preprocess(self, nb, resources):
        if self.release_notebook:
            with open(self.release_notebook, encoding="utf-8") as f:
                restore_deleted_cells(nb, json.load(f))
        return nb, resources
