"""Merge the per-submission gradebooks of a grading run into one nbgrader gradebook.

Each submission is autograded in a course folder of its own (nbgrader cannot share one gradebook
between processes). The merged gradebook is rebuilt from scratch on every run from the template
(the assignments and their cells) and the submissions' own gradebooks, so merging is idempotent.
Submissions whose status is not ``graded`` are *flagged* in it, so nbgrader's formgrader lists
them for review. ``nbgrader export --db <out>/gradebook.db`` then works as usual.
"""

from __future__ import annotations

import pathlib
import shutil
import warnings

# Statuses of submissions that never reached nbgrader: a work folder left by an earlier grading of
# the same student and assignment must not be merged in their place.
NOT_RUN_STATUSES = ("missing", "invalid_json", "wrong_notebook")


def merge_gradebooks(template_db: pathlib.Path, results: list[dict], target_db: pathlib.Path) -> int:
    """Build ``target_db`` from ``template_db`` plus every result's task gradebook; return how many merged.

    results: result dicts of ``grader.autograde`` with an extra key ``work_dir`` (the task folder).
    """
    from nbgrader.api import Gradebook, MissingEntry

    # nbgrader's SQLAlchemy models warn about autoflush on lookups; the warnings mean nothing here.
    warnings.filterwarnings("ignore", module="sqlalchemy")
    warnings.filterwarnings("ignore", message=".*not in session.*")
    tmp = target_db.with_suffix(".db.tmp")
    shutil.copyfile(template_db, tmp)
    merged = 0
    with Gradebook(f"sqlite:///{tmp}") as target:
        for result in results:
            source_db = pathlib.Path(result.get("work_dir", "")) / "gradebook.db"
            if result["status"] in NOT_RUN_STATUSES or not source_db.is_file():
                continue
            student, assignment = result["student"], result["assignment"]
            with Gradebook(f"sqlite:///{source_db}") as source:
                try:
                    submission = source.find_submission(assignment, student)
                except MissingEntry:
                    continue
                target.update_or_create_student(student)
                target.update_or_create_submission(assignment, student, timestamp=submission.timestamp)
                for notebook in submission.notebooks:
                    copy = target.find_submission_notebook(notebook.name, assignment, student)
                    copy.flagged = notebook.flagged or result["status"] != "graded"
                    for grade in notebook.grades:
                        into = target.find_grade(grade.name, notebook.name, assignment, student)
                        into.auto_score = grade.auto_score
                        into.manual_score = grade.manual_score
                        into.extra_credit = grade.extra_credit
                        into.needs_manual_grade = grade.needs_manual_grade
                    for comment in notebook.comments:
                        into = target.find_comment(comment.name, notebook.name, assignment, student)
                        into.auto_comment = comment.auto_comment
                        into.manual_comment = comment.manual_comment
                target.db.commit()
                merged += 1
    tmp.replace(target_db)
    return merged
