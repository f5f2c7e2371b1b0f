"""The operating system keeps a grading kernel away from the grader's files (bubblewrap sandbox).

The sandbox is tested on its own first, with no Python guard in the process: a script tries to read
a solution notebook, a gradebook, the repository's .git, another submission and the grading output,
and to write outside its scratch folder, through open(), os.open, a `cat` subprocess and the C
library through ctypes. The same script run without the sandbox reads everything, which shows
that it would notice a leak. Then a toy submission does the same from inside ``course grade``.
"""

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from grader import guard
from grader.hidden import PROJECT_ROOT

ISOLATION = guard.isolation_problem()
needs_isolation = pytest.mark.skipif(ISOLATION is not None,
                                     reason=f"no OS isolation on this machine ({ISOLATION}); {guard.ISOLATION_HELP}")

PROBE = textwrap.dedent('''
    import ctypes, json, os, subprocess, sys

    targets = json.loads(sys.argv[1])
    # Folders on the way to the scratch folder exist in the sandbox (empty but for that way).
    on_the_way = set(os.getcwd().split(os.sep))
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    found = {}
    for name, path in targets["read"].items():
        got = []
        try:
            got.append(open(path, "rb").read(64))
        except OSError:
            pass
        try:
            fd = os.open(path, os.O_RDONLY)
            got.append(os.read(fd, 64))
        except OSError:
            pass
        try:
            got.append(subprocess.run(["cat", path], capture_output=True).stdout[:64])
        except OSError:
            pass
        if libc.fopen(path.encode(), b"r"):
            got.append(b"fopen")
        try:
            got.append(" ".join(n for n in os.listdir(os.path.dirname(path)) if n not in on_the_way).encode())
        except OSError:
            pass
        found[name] = [g.decode(errors="replace") for g in got if g]
    for name, path in targets["write"].items():
        wrote = []
        try:
            with open(path, "w") as f:
                f.write("x")
            wrote.append("open")
        except OSError:
            pass
        try:
            if subprocess.run(["touch", path + ".touched"], capture_output=True).returncode == 0:
                wrote.append("touch")
        except OSError:
            pass
        if libc.fopen((path + ".c").encode(), b"w"):
            wrote.append("fopen")
        found[name] = wrote
    print(json.dumps(found))
''')


@pytest.fixture
def secrets(tmp_path):
    """Files a grading kernel must not reach, beside a scratch folder it may write."""
    course = tmp_path / "course"
    files = {
        "solution": course / "solutions" / "day00_toy" / "day00_toy.ipynb",
        "gradebook": tmp_path / "grading" / "gradebook.db",
        "other_submission": tmp_path / "submissions" / "bob" / "day00_toy" / "day00_toy.ipynb",
        "autograded": tmp_path / "grading" / "autograded" / "carol" / "day00_toy" / "day00_toy.ipynb",
        "course_gradebook": course / "gradebook.db",
    }
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"SECRET {name}")
    read = {name: str(path) for name, path in files.items()}
    git_head = PROJECT_ROOT / ".git" / "HEAD"
    if git_head.is_file():
        read["git"] = str(git_head)
    samples = sorted((PROJECT_ROOT / "grader" / "samples").rglob("*.py"))
    if samples:
        read["samples"] = str(samples[0])
    scratch = tmp_path / "grading" / "work" / "ada" / "day00_toy" / "autograded" / "ada" / "day00_toy"
    scratch.mkdir(parents=True)
    write = {"outside_scratch": str(tmp_path / "grading" / "planted.txt"),
             "project": str(PROJECT_ROOT / "course" / "planted_by_test.py"), "home": str(pathlib.Path.home() / "x")}
    return {"read": read, "write": write, "scratch": scratch, "tmp": tmp_path}


def _probe(command_prefix, secrets, scratch):
    targets = {"read": secrets["read"], "write": secrets["write"]}
    done = subprocess.run(command_prefix + [sys.executable, "-c", PROBE, json.dumps(targets)], capture_output=True,
                          text=True, cwd=scratch, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_isolation
def test_the_sandbox_hides_every_secret_and_allows_only_the_scratch_folder(secrets):
    scratch = secrets["scratch"]
    command = guard.sandbox_command(["true"], scratch=str(scratch))[:-1]
    found = _probe(command, secrets, scratch)
    assert {name: found[name] for name in secrets["read"]} == {name: [] for name in secrets["read"]}, found
    # A write may land in the sandbox's private /tmp, which vanishes with it: what counts is that
    # nothing appears outside.
    for path in secrets["write"].values():
        for suffix in ("", ".touched", ".c"):
            assert not pathlib.Path(path + suffix).exists(), path + suffix
    assert found["project"] == [] and found["home"] == [], "the sandbox's own root is read-only"
    inside = subprocess.run(command + [sys.executable, "-c", "open('mine.txt', 'w').write('ok');"
                                       "import course.checking; print(open(course.checking.__file__).read(9))"],
                            capture_output=True, text=True, cwd=scratch, timeout=120)
    assert inside.returncode == 0, inside.stderr
    assert (scratch / "mine.txt").read_text() == "ok", "the scratch folder must stay writable"


@needs_isolation
def test_the_probe_sees_everything_without_the_sandbox(secrets, tmp_path):
    """The probe is able to leak: without the sandbox it reads every secret and writes outside."""
    secrets["write"] = {"outside_scratch": secrets["write"]["outside_scratch"]}
    found = _probe([], secrets, secrets["scratch"])
    for name in secrets["read"]:
        assert found[name], name
    assert set(found["outside_scratch"]) == {"open", "touch", "fopen"}
    assert pathlib.Path(secrets["write"]["outside_scratch"]).exists()


def test_sandbox_command_refuses_without_bwrap(monkeypatch, tmp_path):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match="bubblewrap .* not installed"):
        guard.sandbox_command(["true"], scratch=str(tmp_path))


def test_course_grade_refuses_without_isolation_unless_told(monkeypatch, tmp_path, capsys):
    from types import SimpleNamespace

    from grader import grade as grade_module

    monkeypatch.setattr(guard, "isolation_problem", lambda: "bubblewrap (bwrap) is not installed")
    with pytest.raises(grade_module.IsolationUnavailable, match="apt-get install bubblewrap"):
        grade_module.grade(tmp_path, tmp_path / "out")
    args = SimpleNamespace(submissions=str(tmp_path), out=str(tmp_path / "out"), jobs=1, gpu=False, timeout=10,
                           force=False, assignments=None)
    assert grade_module.main_grade(args) == 2
    err = capsys.readouterr().err
    assert "not installed" in err and "--no-isolation" in err


SNOOP = '''import json, os, subprocess
def square(x):
    return x * x

targets = json.loads({targets!r})
def fopen(path, mode):
    import ctypes
    libc = ctypes.CDLL(None)
    function = getattr(libc, "fopen")
    function.restype = ctypes.c_void_p
    return function(path.encode(), mode)

seen = {{}}
for name, path in targets.items():
    got = []
    for attempt in (lambda: open(path).read(), lambda: os.read(os.open(path, os.O_RDONLY), 64).decode(),
                    lambda: subprocess.run(["cat", path], capture_output=True, text=True).stdout,
                    lambda: "fopen" if fopen(path, b"r") else ""):
        try:
            got.append(attempt())
        except Exception:
            pass
    for attempt in (lambda: open(path + ".planted", "w").write("x"), lambda: fopen(path + ".planted", b"w")):
        try:
            attempt()
        except Exception:
            pass
    seen[name] = [g for g in got if g]
open("snoop.json", "w").write(json.dumps(seen))
'''


@needs_isolation
def test_a_graded_submission_gets_nothing(secrets, tmp_path):
    """Graded through ``course grade``: whatever the Python guard lets through, the sandbox stops."""
    from grader import release
    from grader.grade import grade
    from grader.sample_cases import Case, build_submission
    from grader.toy import ADD_ONE_SOLUTION, TOY, make_toy_course

    root = make_toy_course(tmp_path / "toy")
    release.generate([TOY], root=root)
    released = json.loads((root / "exercises" / TOY / f"{TOY}.ipynb").read_text())
    subs, out = tmp_path / "subs", tmp_path / "out"
    targets = {**secrets["read"], "toy_solution": str(root / "solutions" / TOY / f"{TOY}.ipynb"),
               "this_run_gradebook": str(out / "gradebook.db"), "template_gradebook": str(out / "template" / "gradebook.db"),
               "bob": str(subs / "bob" / TOY / f"{TOY}.ipynb")}
    add_one = "\n".join(line for line in ADD_ONE_SOLUTION.splitlines() if "###" not in line)
    for student, cells in {"ada": {"add_one_solution": add_one, "square_solution": SNOOP.format(
            targets=json.dumps(targets))}, "bob": {"add_one_solution": add_one}}.items():
        path = subs / student / TOY / f"{TOY}.ipynb"
        path.parent.mkdir(parents=True)
        case = Case(student, TOY, path, "", {"status": "graded"}, cells)
        path.write_text(json.dumps(build_submission(case, released)))
    rows = {r["student"]: r for r in grade(subs, out, jobs=1, timeout=30, root=root, progress=False)}
    snoop = json.loads((out / "work" / "ada" / TOY / "autograded" / "ada" / TOY / "snoop.json").read_text())
    assert snoop == {name: [] for name in targets}, snoop
    assert not any(pathlib.Path(p + ".planted").exists() for p in targets.values())
    assert rows["ada"]["points"] == 4 and rows["ada"]["isolation"] is True


@needs_isolation
def test_a_plot_in_the_sandbox_starts_no_process(tmp_path):
    """Matplotlib finds its font list ready: a notebook that plots never runs ``fc-list``, which the
    guard would refuse, so plotting is not mistaken for tampering."""
    script = ("import subprocess\n"
              "def refuse(*args, **kwargs):\n"
              "    raise SystemExit(f'started a process: {args!r}')\n"
              "subprocess.Popen = refuse\n"
              "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
              "plt.plot([1, 2], [3, 4]); plt.title('fonts'); plt.gcf().canvas.draw(); print('drawn')\n")
    command = guard.sandbox_command([sys.executable, "-c", script], scratch=str(tmp_path))
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "drawn" in done.stdout, done.stderr
