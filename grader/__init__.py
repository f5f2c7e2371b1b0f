"""The instructor's grading pipeline for the course (see grader/README.md).

For hidden tests (imported inside grading kernels; nothing heavy):

- ``grader.hidden``: ``pristine(name)``, private copies of project modules a student cannot patch
- ``grader.guard``: the audit hook installed in every grading kernel

The commands:

- ``grader.release``: ``course release``, generate ``exercises/`` from ``solutions/`` and verify it
- ``grader.grade``: ``course grade``, parallel autograding with statuses, feedback, CSVs, a summary
- ``grader.distributed``: ``course grade --scheduler``, the same on the workers of a Dask cluster
- ``grader.check``: ``course check``, a student's visible tests, headless

Their parts:

- ``grader.collect``: submissions in the layouts instructors receive (folders, LMS names, zips)
- ``grader.autograde``: one submission in its own nbgrader course folder (one process each)
- ``grader.execute``: nbgrader's Execute step surviving timeouts and crashed kernels
- ``grader.restore``: deleted grade cells put back as failing cells
- ``grader.tamper``: structure checks against the release and a scan of the student's code
- ``grader.feedback``: feedback without hidden tests
- ``grader.merge``: the per-submission gradebooks merged into one
- ``grader.report``: the CSVs and the summary a run writes
- ``grader.markers``: what is secret in a solution notebook
- ``grader.nbgrader_api``: the course root, its nbgrader configuration, nbgrader's API

Testing the grader: ``grader.sample_cases`` (the catalog in ``grader/samples/`` and its harness) and
``grader.toy`` (a tiny course that grades in seconds).
"""
