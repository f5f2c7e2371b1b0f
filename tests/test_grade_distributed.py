"""``course grade --scheduler``: a class graded on a local Dask cluster of worker processes
(grader/distributed.py) gets what ``--jobs`` gives it; a worker killed mid-run loses nothing; a run
interrupted on the client resumes; a worker whose course differs is refused before any grading.

One cluster of two worker processes serves the module; the class is two of day 3's sample
submissions (the quickest day to grade; one with nbgrader's timestamp.txt beside it), an unreadable
notebook and a missing one.
"""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import distributed
import pytest

from grader import distributed as cluster_grading
from grader.grade import grade
from grader.hidden import PROJECT_ROOT
from grader.markers import read_notebook, secret_lines
from grader.report import summary_table
from grader.sample_cases import find_cases, mismatches, write_submissions

DAY = "day03_online_softmax"
SAMPLES = ("correct_alternative", "wrong_masking")
CASES = [c for c in find_cases(DAY, course_wide=False) if c.name in SAMPLES]
TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster():
    """A scheduler and two worker processes of one thread each, on this machine."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as local:
        with distributed.Client(local) as client:
            client.wait_for_workers(2, timeout=60)
            yield local


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """The class's submissions, graded once here with ``--jobs 2`` as the reference."""
    base = tmp_path_factory.mktemp("class")
    subs = base / "submissions"
    write_submissions(CASES, subs, PROJECT_ROOT / "exercises")
    (subs / CASES[0].student / DAY / "timestamp.txt").write_text("2026-12-01 10:00:00.000000 UTC")
    broken = subs / "broken" / DAY / f"{DAY}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [')
    (subs / "nobody").mkdir()
    local = base / "local"
    rows = grade(subs, local, jobs=2, timeout=TIMEOUT, root=PROJECT_ROOT, progress=False)
    return {"subs": subs, "local": local, "rows": {r["student"]: r for r in rows}, "base": base}


# A grading kernel that did not start in time is started again and the row says so (grader/autograde.py); on a
# loaded 2-core machine that can happen in either run. Its points and status are the ones compared; the note is not.
_KERNEL_RETRY = re.compile(r"(; )?the grading kernel did not start \(.*?\); graded again")


def _csv(path, drop=("seconds",)):
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: (_KERNEL_RETRY.sub("", v).removeprefix("; ") if k == "details" else v) for k, v in row.items()
                 if k not in drop}
                for row in csv.DictReader(f)]


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _gradebook(path):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{path}") as gb:
        return {(s.student.id, s.assignment.name): (s.score, any(n.flagged for n in s.notebooks))
                for s in gb.assignment_submissions(DAY)}


def _same_as_local(classroom, out, rows):
    """The run in ``out`` wrote what the ``--jobs`` run wrote: rows (but for the seconds they took),
    per-cell rows, the LMS file, every feedback file byte for byte, the merged gradebook, the summary."""
    local = classroom["local"]
    for name in ("grades.csv", "grades_by_cell.csv", "lms.csv", "not_graded.csv"):
        assert _csv(out / name) == _csv(local / name), name
    assert _files(out / "feedback") == _files(local / "feedback")
    assert _gradebook(out / "gradebook.db") == _gradebook(local / "gradebook.db")
    plain = [{k: v for k, v in r.items() if k != "regraded"} for r in rows]
    assert summary_table(plain) == summary_table(list(classroom["rows"].values()))
    for case in CASES:
        assert mismatches(case, {r["student"]: r for r in rows}.get(case.student)) == []


def test_a_cluster_grades_as_jobs_does(cluster, classroom, tmp_path):
    out = tmp_path / "out"
    rows = grade(classroom["subs"], out, timeout=TIMEOUT, root=PROJECT_ROOT, progress=False,
                 scheduler=cluster.scheduler_address)
    assert {r["student"]: r["status"] for r in rows} == {s: r["status"] for s, r in classroom["rows"].items()}
    assert {r["student"]: r["status"] for r in rows}.keys() >= {"broken", "nobody"}
    _same_as_local(classroom, out, rows)
    assert (out / "feedback" / CASES[0].student / DAY / "timestamp.txt").is_file()
    workers = {r.get("worker") for r in rows if r["status"] != "missing"}
    assert len(workers) == 2, f"both workers grade: {workers}"
    # The feedback that came back passes the leak search: no hidden-test line of the solution shows.
    hidden = secret_lines(read_notebook(PROJECT_ROOT / "solutions" / DAY / f"{DAY}.ipynb"), "hidden")
    assert hidden
    for case in CASES:
        files = _files(out / "feedback" / case.student / DAY)
        submitted = (classroom["subs"] / case.student / DAY / f"{DAY}.ipynb").read_bytes()
        assert files and cluster_grading.hidden_lines_in_feedback(
            files, hidden, cluster_grading._submitted_lines(submitted)) == []
    planted = {f"{DAY}.html": f"<pre>{hidden[0]}</pre>".encode()}
    assert cluster_grading.hidden_lines_in_feedback(planted, hidden, set()) == [hidden[0]]


def test_a_worker_killed_mid_run_loses_nothing(cluster, classroom, tmp_path):
    """The first worker to start grading is killed (SIGKILL) at once; its submission is graded again
    on another worker, every row is there and as the ``--jobs`` run graded it, and the summary says so."""
    killed = []
    students = {c.student for c in CASES}

    def kill_first(event):
        _, msg = event
        if msg.get("event") == "started" and msg["key"].split("/")[0] in students and not killed:
            killed.append(msg)
            os.kill(msg["pid"], signal.SIGKILL)

    with distributed.Client(cluster.scheduler_address) as watcher:
        watcher.subscribe_topic(cluster_grading.TOPIC, kill_first)
        out = tmp_path / "out"
        rows = grade(classroom["subs"], out, timeout=TIMEOUT, root=PROJECT_ROOT, progress=False,
                     scheduler=cluster.scheduler_address)
    assert killed, "no worker was killed"
    regraded = {f"{r['student']}/{r['assignment']}": r for r in rows if r.get("regraded")}
    assert killed[0]["key"] in regraded, "the submission the killed worker was grading is graded again"
    lost = killed[0]["worker"].split("://")[-1]
    for row in regraded.values():         # and any other it held, queued behind it
        [note] = row["regraded"]
        assert row["worker"] != killed[0]["worker"]
        assert note.startswith("worker ") and f"({lost}) was lost while it held it; graded again on " in note
        assert note.endswith(f"({row['worker'].split('://')[-1]})")
    _same_as_local(classroom, out, rows)
    summary = summary_table(rows)
    assert f"graded again ({len(regraded)})" in summary and f"  {killed[0]['key']}: worker " in summary
    with distributed.Client(cluster.scheduler_address) as client:
        client.wait_for_workers(2, timeout=60)          # the nanny restarted the killed worker


def test_an_interrupted_run_resumes_without_regrading(cluster, classroom, tmp_path, monkeypatch, capsys):
    from course.cli import main

    out = tmp_path / "out"
    real = cluster_grading._write_back
    written = []

    def interrupt_after_the_first(*args, **kwargs):
        if written:
            raise KeyboardInterrupt
        written.append(real(*args, **kwargs))
        return written[-1]

    monkeypatch.setattr(cluster_grading, "_write_back", interrupt_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        grade(classroom["subs"], out, timeout=TIMEOUT, root=PROJECT_ROOT, progress=False,
              scheduler=cluster.scheduler_address)
    monkeypatch.setattr(cluster_grading, "_write_back", real)
    first = written[0]
    monkeypatch.chdir(PROJECT_ROOT)
    assert main(["grade", str(classroom["subs"]), "--out", str(out), "--timeout", str(TIMEOUT),
                 "--scheduler", cluster.scheduler_address]) == 0
    printed = capsys.readouterr()
    assert "already graded" in printed.err
    assert "broken/day03_online_softmax: invalid_json" in printed.out
    again = json.loads((out / "results" / first["student"] / f"{DAY}.json").read_text())
    assert again["seconds"] == first["seconds"], "a submission graded before the interruption is not graded again"
    with open(out / "grades.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(classroom["rows"])
    assert _csv(out / "grades.csv") == _csv(classroom["local"] / "grades.csv")


def test_a_worker_with_another_course_is_refused_before_grading(classroom, tmp_path):
    """A worker started (``dask worker``) in a copy of the course whose day 3 hidden tests differ."""
    course = tmp_path / "course"
    for part in ("solutions", "exercises"):
        shutil.copytree(PROJECT_ROOT / part, course / part)
    shutil.copyfile(PROJECT_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    solution = course / "solutions" / DAY / f"{DAY}.ipynb"
    solution.write_text(solution.read_text().replace("### END HIDDEN TESTS", "assert True\\n### END HIDDEN TESTS", 1))
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0") as empty:
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", empty.scheduler_address,
                                   "--nthreads", "1", "--no-dashboard", "--name", "other-course"],
                                  cwd=course, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            out = tmp_path / "out"
            with pytest.raises(cluster_grading.CourseMismatch) as refused:
                grade(classroom["subs"], out, timeout=TIMEOUT, root=PROJECT_ROOT, progress=False,
                      scheduler=empty.scheduler_address)
        finally:
            worker.terminate()
            worker.wait(30)
    message = str(refused.value)
    assert "refused" in message and f"solutions/{DAY} (other files)" in message
    assert "package grader" not in message and "commit" not in message
    assert not (out / "results").exists() and not (out / "feedback").exists(), "nothing was graded"


def test_the_identity_names_what_differs():
    here = cluster_grading.course_identity(PROJECT_ROOT)
    assert {"python", "nbgrader", "package grader", f"solutions/{DAY}", f"exercises/{DAY}"} <= set(here)
    there = {**here, "numpy": "1.0", f"exercises/{DAY}": "0" * 16, "commit": "f" * 40}
    there.pop(f"solutions/{DAY}")
    found = cluster_grading.differences(here, there)
    assert f"numpy ({here['numpy']} here, 1.0 on the worker)" in found
    assert f"exercises/{DAY} (other files)" in found and f"solutions/{DAY} (missing on the worker)" in found
    assert any(f.startswith("commit") for f in found) == ("commit" in here)
    without_commit = {k: v for k, v in here.items() if k != "commit"}
    assert cluster_grading.differences(here, without_commit) == []
