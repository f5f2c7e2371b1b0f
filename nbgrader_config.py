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
