"""nbgrader configuration: the repository is the course root.

solutions/ is nbgrader's source directory and exercises/ its release directory. Submissions,
autograded notebooks, feedback and the gradebook live outside the repository (see the grader's README).
"""

c = get_config()  # noqa: F821  (nbgrader injects get_config)

import os

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.course_id = "llm-kernels"
# Hidden tests must not leak into the student's release; the grader adds its own safety checks.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ExecutePreprocessor.timeout = 120

# Plain nbgrader (the formgrader's buttons, `nbgrader autograde`, `nbgrader generate_feedback`) gets
# the grader's safety too; `course grade` (grader/README.md) adds the kernel guard and parallelism.
# Feedback without hidden tests, in the cells' source or in tracebacks:
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "grader.feedback.SanitizeFeedback",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# A timeout or a crashed kernel costs the cell, not the rest of the notebook:
c.Autograde.autograde_preprocessors = [
    "grader.execute.GuardedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Validate on a lesson (no graded cell) says so and names the day's exercise, instead of "Success!"
# (grader/validate.py). nbgrader 0.9 does not mark Validator.preprocessors configurable; this does.
from grader.validate import ValidateExecute  # noqa: E402
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput  # noqa: E402
from nbgrader.validator import Validator  # noqa: E402

Validator.class_traits()["preprocessors"].tag(config=True)
c.Validator.preprocessors = [CheckCellMetadata, ClearOutput, ValidateExecute]
