"""Unit tests of the grader's parts that need no kernel: markers, collection, tamper checks,
feedback sanitizing, deleted-cell stand-ins, the kernel guard and pristine modules."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import nbformat
import pytest

from grader import collect, feedback, markers, tamper
from grader.hidden import module_file, pristine
from grader.restore import restore_deleted_cells
from grader.toy import TOY, make_toy_course, toy_notebook


def _nb(*sources):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


# --- markers -------------------------------------------------------------------------------------

def test_secret_lines_skip_visible_and_trivial_lines():
    nb = _nb("import numpy as np\nout = compute(x)",
             "### BEGIN HIDDEN TESTS\nout = compute(x)\nassert secret_check(out, 77)\n)\n### END HIDDEN TESTS",
             "def f():\n    ### BEGIN SOLUTION\n    return the_answer_is_42()\n    ### END SOLUTION")
    assert markers.secret_lines(nb, "hidden") == ["assert secret_check(out, 77)"]
    assert markers.secret_lines(nb, "solution") == ["return the_answer_is_42()"]
    with pytest.raises(ValueError, match="kind"):
        markers.secret_lines(nb, "visible")


# --- collecting submissions ----------------------------------------------------------------------

ASSIGNMENTS = ["day01_gpu_model", "day05_flash_attention"]


def _touch(path: pathlib.Path, text="{}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_collect_folder_per_student_and_lms_names(tmp_path):
    _touch(tmp_path / "ada" / "day01_gpu_model" / "day01_gpu_model.ipynb")
    _touch(tmp_path / "bob" / "day05_flash_attention.ipynb")
    _touch(tmp_path / "day05_flash_attention_carol_attempt_2_20240101.ipynb")
    _touch(tmp_path / "dave_123_456_day01_gpu_model.ipynb")          # Canvas style
    _touch(tmp_path / "erin" / "notes.txt")                           # submitted nothing usable
    _touch(tmp_path / "ada" / ".ipynb_checkpoints" / "day05_flash_attention-checkpoint.ipynb")
    subs = {(s.student, s.assignment): s for s in collect.find_submissions(tmp_path, ASSIGNMENTS)}
    assert subs[("ada", "day01_gpu_model")].notebook.name == "day01_gpu_model.ipynb"
    assert subs[("bob", "day05_flash_attention")].notebook is not None
    assert subs[("carol", "day05_flash_attention")].notebook is not None
    assert subs[("dave", "day01_gpu_model")].notebook is not None
    # everyone is expected to hand in every assignment seen: gaps become missing rows
    assert subs[("ada", "day05_flash_attention")].notebook is None
    assert subs[("erin", "day01_gpu_model")].notebook is None
    assert len(subs) == 5 * 2


def test_collect_newest_of_several_files_and_expected(tmp_path):
    old = _touch(tmp_path / "day01_gpu_model_ada_1.ipynb")
    new = _touch(tmp_path / "day01_gpu_model_ada_2.ipynb")
    os.utime(old, (1, 1))
    subs = collect.find_submissions(tmp_path, ASSIGNMENTS, expected=["day01_gpu_model"])
    assert [(s.student, s.notebook) for s in subs] == [("ada", new)]
    assert "2 files found" in subs[0].notes[0]


def test_collect_keeps_students_apart_whose_ids_share_a_first_part(tmp_path):
    _touch(tmp_path / "day01_gpu_model_ada_l_attempt_1_2024-03-01-10-00-00.ipynb")
    _touch(tmp_path / "day01_gpu_model_ada_k_attempt_1.ipynb")
    _touch(tmp_path / "ada_m_12345_67890_day01_gpu_model.ipynb")          # Canvas style
    _touch(tmp_path / "ada_LATE_12345_67890_day01_gpu_model.ipynb")        # Canvas marks late ones so
    subs = collect.find_submissions(tmp_path, ASSIGNMENTS, expected=["day01_gpu_model"])
    assert sorted(s.student for s in subs) == ["ada", "ada-k", "ada-l", "ada-m"]
    assert all(s.notebook is not None and not s.notes for s in subs)


def test_collect_newest_attempt_in_a_zip_is_the_one_saved_last(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        # The newer attempt comes first in the zip, so it is extracted first: extraction order and
        # extraction time must not decide.
        z.writestr(zipfile.ZipInfo("day01_gpu_model_ada_attempt_b.ipynb", (2024, 3, 2, 9, 0, 0)), '{"new": 1}')
        z.writestr(zipfile.ZipInfo("day01_gpu_model_ada_attempt_a.ipynb", (2024, 3, 1, 9, 0, 0)), '{"old": 1}')
    folder = collect.extract_zip(archive, tmp_path / "x")
    not_graded = []
    (sub,) = collect.find_submissions(folder, ASSIGNMENTS, not_graded=not_graded)
    assert sub.student == "ada" and sub.notebook.read_text() == '{"new": 1}'
    assert [(str(n.path), n.student) for n in not_graded] == [("day01_gpu_model_ada_attempt_a.ipynb", "ada")]
    assert "older file of ada/day01_gpu_model" in not_graded[0].reason


def test_collect_lists_every_file_it_does_not_grade_and_never_on_another_row(tmp_path):
    graded = {_touch(tmp_path / "ada" / "day01_gpu_model" / "day01_gpu_model.ipynb"),
              _touch(tmp_path / "bob" / "day01_gpu_model.ipynb")}
    others = {_touch(tmp_path / "bob" / "helper.py"): ("bob", "not a notebook"),
              _touch(tmp_path / "mystery.ipynb"): (None, "matches no known assignment"),
              _touch(tmp_path / "carol" / "homework.ipynb"): ("carol", "matches no known assignment"),
              _touch(tmp_path / "ada" / ".ipynb_checkpoints" / "day01_gpu_model-checkpoint.ipynb"): ("ada", "automatic"),
              _touch(tmp_path / "day05_flash_attention_dan_1.ipynb"): ("dan", "not among the assignments")}
    _touch(tmp_path / "ada" / "day01_gpu_model" / "timestamp.txt")       # nbgrader's, used beside the notebook
    _touch(tmp_path / "__MACOSX" / "._day01_gpu_model.ipynb")            # written by the zip tool, not a student
    not_graded = []
    subs = collect.find_submissions(tmp_path, ASSIGNMENTS, expected=["day01_gpu_model"], not_graded=not_graded)
    assert {s.notebook for s in subs if s.notebook} == graded
    listed = {tmp_path / n.path: (n.student, n.reason) for n in not_graded}
    assert set(listed) == set(others)
    for path, (student, reason) in others.items():
        assert listed[path][0] == student and reason in listed[path][1], (path, listed[path])
    assert not any(s.notes for s in subs if s.notebook), "notes about other files land on no student's row"
    assert {s.student for s in subs if s.notebook is None} == {"carol", "dan"}


def test_summary_lists_files_not_graded(tmp_path):
    from grader.report import read_not_graded, summary_table, write_not_graded

    write_not_graded([collect.NotGraded(pathlib.PurePath("bob/helper.py"), "not a notebook (.ipynb)", "bob")],
                     tmp_path)
    table = summary_table([], read_not_graded(tmp_path))
    assert "files not graded (1" in table and "bob/helper.py [bob]: not a notebook" in table


def test_collect_rejects_unsafe_zip(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("../escape.ipynb", "{}")
    with pytest.raises(ValueError, match="unsafe path"):
        collect.extract_zip(bad, tmp_path / "x")
    assert collect.safe_student_id("Ada Lovelace/../x") == "Ada-Lovelace-..-x"


# --- tamper checks -------------------------------------------------------------------------------

def _released_toy():
    nb = toy_notebook()
    for cell in nb.cells:
        cell.source = cell.source.split("### BEGIN")[0]
    return json.loads(nbformat.writes(nb))


def test_compare_with_release_reports_edits_and_deletions():
    release = _released_toy()
    assert tamper.compare_with_release(release, release) == {k: [] for k in (
        "deleted_grade", "deleted_locked", "deleted_solution", "edited_locked", "metadata_changed")}
    sub = json.loads(json.dumps(release))
    sub["cells"] = [c for c in sub["cells"] if c["metadata"]["nbgrader"]["grade_id"] != "square_tests"]
    sub["cells"][3]["source"] = "pass"                                  # add_one_visible, locked
    sub["cells"][0]["metadata"]["nbgrader"]["locked"] = False           # setup
    report = tamper.compare_with_release(sub, release)
    assert report["deleted_grade"] == ["square_tests"]
    assert report["edited_locked"] == ["add_one_visible"]
    assert report["metadata_changed"] == ["setup"]


def test_scan_code_tells_tampering_from_review():
    cells = [("a", "import course.checking\ncourse.checking.check = lambda *a, **k: None"),
             ("b", "np.allclose = lambda *a: True\nsetattr(reference, 'softmax', f)\nx[0] = 1\nout.shape"),
             ("c", "import subprocess\nprint(In[-1])\n!ls\nf = sys._getframe(1)"),
             ("d", "def ok(x):\n    y = x * 2\n    y[0] = 3\n    return y")]
    findings = tamper.scan_code(cells, context_sources=["import numpy as np\nfrom kernels import reference"])
    tampered = {f.what for f in findings if f.kind == "tamper"}
    assert tampered == {"changes course.checking.check", "changes np.allclose", "setattr() on reference"}
    review = " ".join(f.what for f in findings if f.kind == "review")
    for needle in ("subprocess", "input history", "shell command", "frame inspection"):
        assert needle in review
    assert not [f for f in findings if f.cell == "d"]


# --- feedback ------------------------------------------------------------------------------------

def test_sanitize_scrubs_before_the_hidden_cell_and_drops_everything_from_it_on():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("y"), nbformat.v4.new_code_cell("x")])
    nb.cells[1].metadata["nbgrader"] = {"grade_id": "hidden_cell", "grade": True, "points": 2}
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                  text="before\n    assert secret_check(out, 77)\nafter\n")]
    nb.cells[1].outputs = [nbformat.v4.new_output(
        "error", ename="AssertionError", evalue="wrong for n=7",
        traceback=["\x1b[0;32m----> 3\x1b[0m \x1b[38;5;28massert\x1b[39m secret_check(out, 77)", "frame"])]
    feedback.sanitize_notebook(nb, ["assert secret_check(out, 77)"], ["hidden_cell"])
    assert nb.cells[0].outputs[0].text == f"before\n{feedback.REMOVED}\nafter\n"
    shown = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert [o.output_type for o in nb.cells[1].outputs] == ["stream"]
    assert shown.startswith("failed") and feedback.HIDDEN_OUTPUT_NOTE in shown
    assert "secret_check" not in shown and "wrong for n=7" not in shown


# --- deleted grade cells -------------------------------------------------------------------------

def test_restore_deleted_cells_puts_failing_stand_ins_in_place():
    release = _released_toy()
    sub = nbformat.from_dict(json.loads(json.dumps(release)))
    sub.cells = [c for c in sub.cells if c.metadata["nbgrader"]["grade_id"] not in ("add_one_hidden", "square_tests")]
    assert restore_deleted_cells(sub, release) == ["add_one_hidden", "square_tests"]
    ids = [c.metadata["nbgrader"]["grade_id"] for c in sub.cells]
    assert ids == [c["metadata"]["nbgrader"]["grade_id"] for c in release["cells"]]
    assert "raise AssertionError" in sub.cells[ids.index("square_tests")].source
    from nbgrader.nbgraderformat import MetadataValidator

    MetadataValidator().validate_nb(sub)


# --- the kernel guard (in a subprocess: an audit hook cannot be removed) -------------------------

def test_guard_refuses_secrets_processes_and_network_and_reports(tmp_path):
    secret, project, work = tmp_path / "secret", tmp_path / "project", tmp_path / "work"
    for folder in (secret, project, work, project / "__pycache__"):
        folder.mkdir()
    (secret / "solution.ipynb").write_text("the answer")
    (project / "checking.py").write_text("x = 1")
    report = work / "report.jsonl"
    script = textwrap.dedent(f"""
        import ctypes, ctypes.util, os, socket, sqlite3, subprocess, sys
        from grader import guard
        guard.install({{"deny_read": [{str(secret)!r}], "deny_write": [{str(project)!r}],
                        "allow": [{str(work)!r}], "report": {str(report)!r}}})
        attempts = {{
            "read": lambda: open({str(secret / 'solution.ipynb')!r}).read(),
            "list": lambda: os.listdir({str(secret)!r}),
            "symlink": lambda: os.symlink({str(secret / 'solution.ipynb')!r}, "link"),
            "write project": lambda: open({str(project / 'checking.py')!r}, "w"),
            "gradebook": lambda: open("/nonexistent/gradebook.db"),
            "process": lambda: subprocess.run(["true"]),
            "sqlite": lambda: sqlite3.connect(":memory:"),
            "network": lambda: socket.create_connection(("127.0.0.1", 9)),
            "ctypes": lambda: ctypes.CDLL(None).system,
            "forged bytecode": lambda: open({str(project / '__pycache__' / 'checking.cpython-311.pyc')!r}, "wb"),
            "borrowed file name": lambda: exec(compile("import subprocess; subprocess.run(['true'])",
                                                       ctypes.util.__file__, "exec"), {{}}),
        }}
        for name, attempt in attempts.items():
            try:
                attempt()
                print(name, "ALLOWED")
            except PermissionError:
                print(name, "refused")
        open({str(work / 'mine.txt')!r}, "w").write("fine")
        print("project read", open({str(project / 'checking.py')!r}).read())
        ctypes.util.find_library("m")   # runs ldconfig: allowed, numba needs it
        print("done")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=work, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ALLOWED" not in out.stdout, out.stdout
    assert "project read x = 1" in out.stdout and "done" in out.stdout
    # every refusal is reported, except bytecode caching (the import system tries it on its own)
    assert len(report.read_text().splitlines()) == 10


# --- pristine modules ----------------------------------------------------------------------------

def test_pristine_ignores_monkeypatches_and_sys_modules():
    import course.device

    original = course.device.use_device
    try:
        course.device.use_device = lambda *a, **k: "patched"
        saved, sys.modules["course.device"] = sys.modules["course.device"], None
        fresh = pristine("course.device")
        assert fresh.use_device is not original and fresh.use_device.__name__ == "use_device"
        assert fresh.__name__.startswith("course._pristine_")
    finally:
        sys.modules["course.device"] = saved
        course.device.use_device = original


def test_pristine_rejects_other_modules_and_is_read_only():
    import grader.hidden

    with pytest.raises(ValueError, match="module_name"):
        pristine("numpy")
    with pytest.raises(FileNotFoundError):
        pristine("course.no_such_module")
    with pytest.raises(TypeError):
        module_file(3)
    with pytest.raises(AttributeError, match="read-only"):
        grader.hidden.pristine = None


def test_toy_course_is_a_valid_nbgrader_source(tmp_path):
    root = make_toy_course(tmp_path)
    nb = nbformat.read(str(root / "solutions" / TOY / f"{TOY}.ipynb"), as_version=4)
    nbformat.validate(nb)
    from nbgrader.nbgraderformat import MetadataValidator

    MetadataValidator().validate_nb(nb)


def test_a_wrapping_folder_is_looked_into_but_a_single_student_is_not(tmp_path):
    from grader.grade import _submissions_folder

    wrapped = tmp_path / "wrapped"
    _touch(wrapped / "export" / "ada" / "day01_gpu_model" / "day01_gpu_model.ipynb")
    assert _submissions_folder(wrapped, tmp_path / "out", ASSIGNMENTS) == wrapped / "export"
    single = tmp_path / "single"
    _touch(single / "ada" / "day01_gpu_model" / "day01_gpu_model.ipynb")
    assert _submissions_folder(single, tmp_path / "out", ASSIGNMENTS) == single
    flat = tmp_path / "flat"
    _touch(flat / "export" / "day01_gpu_model_ada_1.ipynb")
    assert _submissions_folder(flat, tmp_path / "out", ASSIGNMENTS) == flat / "export"


def test_a_grading_process_forked_from_the_warm_process_reports_how_it_ended(tmp_path):
    """``course grade`` forks grading processes from a process that imported the grader once; a fork
    that fails, or runs past its time, is reported as a process of its own would be."""
    import os

    from grader.grade import _Forks, _run_process, _worker_env

    env = _worker_env("simulator")
    forks = _Forks(env)
    try:
        broken = tmp_path / "broken.json"
        broken.write_text("not a task")
        assert _run_process(broken, tmp_path / "broken.log", env=env, limit_s=60, forks=forks) \
            == "the grading process exited with code 1"
        assert "JSONDecodeError" in (tmp_path / "broken.log").read_text()
        stuck = tmp_path / "stuck.json"
        os.mkfifo(stuck)                      # reading it waits for ever
        assert _run_process(stuck, tmp_path / "stuck.log", env=env, limit_s=2, forks=forks) \
            == "the whole submission took longer than 2 s and was stopped"
    finally:
        forks.close()


def test_a_grading_kernel_that_never_started_is_graded_again_a_few_times():
    from grader.autograde import KERNEL_START_ATTEMPTS, autograde_once_started, kernel_did_not_start

    died = {"success": False, "log": "Traceback ...\nRuntimeError: Kernel died before replying to kernel_info\n"}
    silent = {"success": False, "error": "RuntimeError: Kernel didn't respond in 60 seconds"}
    crashed = {"success": False, "log": "DeadKernelError: Kernel died"}       # the submission's own doing
    assert kernel_did_not_start(died) and kernel_did_not_start(silent)
    assert not kernel_did_not_start(crashed) and not kernel_did_not_start({"success": True, "log": died["log"]})

    class Api:
        def __init__(self, outcomes):
            self.outcomes, self.calls = list(outcomes), 0

        def autograde(self, assignment, student, *, force, create):
            assert (assignment, student, force, create) == ("day01", "ada", True, True)
            self.calls += 1
            return self.outcomes.pop(0)

    details = []
    api = Api([died, silent, {"success": True}])
    assert autograde_once_started(api, "day01", "ada", details) == {"success": True} and api.calls == 3
    assert len(details) == 2 and all("did not start" in d and "graded again" in d for d in details)
    api, details = Api([died] * KERNEL_START_ATTEMPTS), []
    assert autograde_once_started(api, "day01", "ada", details) == died and api.calls == KERNEL_START_ATTEMPTS
    api, details = Api([crashed]), []
    assert autograde_once_started(api, "day01", "ada", details) == crashed and api.calls == 1 and not details


# --- issue 25: another day's notebook is the wrong notebook, even when days share grade ids ---------------

def _course_notebooks(day: str) -> tuple[dict, dict]:
    from grader.hidden import PROJECT_ROOT

    release = json.loads((PROJECT_ROOT / "exercises" / day / f"{day}.ipynb").read_text(encoding="utf-8"))
    return release, json.loads(json.dumps(release))


@pytest.mark.parametrize("submitted_day, assignment", [
    ("day06_paged_attention", "day07_grouped_query_attention"),           # 5 grade ids in common
    ("day07_grouped_query_attention", "day06_paged_attention"),
    ("day08_mixed_precision", "day07_grouped_query_attention"),           # 18 in common
    ("day07_grouped_query_attention", "day08_mixed_precision"),
    ("day02_naive_attention", "day03_online_softmax"),
])
def test_another_day_s_notebook_sharing_grade_ids_is_the_wrong_notebook(submitted_day, assignment):
    from grader.submission import grade_ids, wrong_notebook
    from grader.hidden import PROJECT_ROOT

    release, _ = _course_notebooks(assignment)
    _, submitted = _course_notebooks(submitted_day)
    assert set(grade_ids(submitted)) & set(grade_ids(release)), "the case needs grade ids in common"
    assert wrong_notebook(submitted, release, assignment, PROJECT_ROOT) == f"the notebook of {submitted_day}"


def test_this_day_s_notebook_even_with_cells_deleted_is_not_the_wrong_notebook():
    from grader.autograde import wrong_notebook
    from grader.hidden import PROJECT_ROOT

    day = "day07_grouped_query_attention"
    release, submitted = _course_notebooks(day)
    assert wrong_notebook(submitted, release, day, PROJECT_ROOT) is None
    # only the cells day 8 shares with day 7 left: still day 7's (every grade id it has is day 7's)
    day8 = {(c.get("metadata") or {}).get("nbgrader", {}).get("grade_id")
            for c in _course_notebooks("day08_mixed_precision")[0]["cells"]}
    submitted["cells"] = [c for c in submitted["cells"]
                          if (c.get("metadata") or {}).get("nbgrader", {}).get("grade_id") in day8]
    assert wrong_notebook(submitted, release, day, PROJECT_ROOT) is None
    submitted["cells"] = []
    assert "without any cell of the released one" in wrong_notebook(submitted, release, day, PROJECT_ROOT)
