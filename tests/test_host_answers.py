"""Host-Python answers (day 6's allocator): what the grader runs of them, and where.

The cleanroom turns a host answer cell into comments and a ``HostCode`` of its source; the checks hand it,
with the exercise's ``HostExercise`` (``day06_allocator.ALLOCATOR``), to ``course.hostcode.run``, which,
when graded, runs that source in a guarded process of its own (``grader/host_answers.py``) and judges only
the records it sends back (``course.exercise_checks.day06_allocator``). These tests run that process as the
grader does, with honest and hostile sources, and check the judge on allocators that are right in different
ways and wrong.
"""

from __future__ import annotations

import ast
import inspect
import re
import shutil
import sys
import textwrap

import pytest

from course import exercise_checks, hostcode
from course.exercise_checks import day06_allocator, day06_allocator_driver
from course.hostcode import HostCode
from grader import cleanroom, host_answers
from kernels.block_manager import BlockManager
from kernels.block_pool import BlockPool, Step

HONEST = '''
class CowBlockManager(BlockPool):
    def fork(self, seq):
        child = self._new_id()
        self._tables[child] = list(self._table(seq))
        self._tokens[child] = list(self._tokens_of(seq))
        for block in self._tables[child]:
            self._refs[block] += 1
        return child

    def append(self, seq, token):
        table, tokens = self._table(seq), self._tokens_of(seq)
        position, offset = len(tokens), len(tokens) % self.block_size
        step = Step()
        if offset == 0 or self.refcount(table[-1]) > 1:
            self._reserve(1)
            block = self._take()
            if offset:
                step.copies.append((table[-1], block))
                self._release(table[-1])
                table[-1] = block
            else:
                table.append(block)
        tokens.append(token)
        step.writes.append((position, table[-1] * self.block_size + offset))
        print("printed by the answer: never part of the record", file=__import__("sys").stderr)
        return step
'''


ALLOCATOR = day06_allocator.ALLOCATOR


@pytest.fixture
def runner():
    """What the grading kernel registers (there a runner process started before its guard; here, where
    starting processes is allowed, the guarded answer process itself), unregistered afterwards."""
    hostcode.set_runner(host_answers.run_process)
    yield
    hostcode.set_runner(None)


def _graded(source: str):
    """What the grading kernel holds for the cell: the HostCode its added line binds."""
    cleaned = cleanroom.clean_host_source(source)
    namespace: dict = {}
    exec(cleaned.source, namespace)
    return namespace.get("CowBlockManager"), cleaned


def test_the_cleanroom_runs_nothing_of_a_host_cell_and_binds_its_names_to_its_source():
    answer, cleaned = _graded(HONEST)
    lines = cleaned.source.splitlines()
    assert all(line.startswith(cleanroom.HOST_MARK) or not line.strip() for line in lines[:-1])
    assert len(lines) == len(HONEST.splitlines()) + 1          # the student's line numbers, then one line
    assert hostcode.is_host_code(answer) and answer.name == "CowBlockManager" and answer.source.strip() == HONEST.strip()
    with pytest.raises(RuntimeError, match="process of its own"):
        answer(4, 4)
    assert not cleaned.course_kernels


def test_a_host_cell_that_imports_or_pastes_the_course_allocator_is_reported():
    imported = "from kernels.block_manager import BlockManager\n\nclass CowBlockManager(BlockManager):\n    pass\n"
    answer, cleaned = _graded(imported)
    assert cleaned.course_kernels == ["line 1: imports kernels.block_manager"]
    assert "kernels.block_manager" not in answer.source            # the process never sees the import
    pasted = "class CowBlockManager(BlockPool):\n" + textwrap.indent(
        textwrap.dedent(inspect.getsource(BlockManager.append)), "    ")
    answer, cleaned = _graded(pasted)
    assert answer is None and "append is the course's own (kernels/block_manager.py: append)" in cleaned.course_kernels[0]
    # the given base may be imported
    _, cleaned = _graded("from kernels.block_pool import BlockPool, Step\nimport kernels.block_pool\n" + HONEST)
    assert not cleaned.course_kernels


def test_a_host_cell_with_a_syntax_error_fails_where_it_runs():
    cleaned = cleanroom.clean_host_source("class CowBlockManager(BlockPool:\n    pass\n")
    with pytest.raises(SyntaxError):
        exec(cleaned.source, {})


def test_an_honest_answer_passes_in_its_own_process_and_in_place(runner):
    answer, _ = _graded(HONEST)
    scenarios = exercise_checks.fork_cases() + exercise_checks.copy_on_write_cases()
    exercise_checks.check_allocator(answer, scenarios + exercise_checks.random_workload(11, scenarios=3))
    namespace = {"BlockPool": BlockPool, "Step": Step}
    exec(HONEST, namespace)
    in_place = hostcode.run(ALLOCATOR, namespace["CowBlockManager"], scenarios)
    in_process = hostcode.run(ALLOCATOR, answer, scenarios)
    assert in_place == in_process                            # the same record either way


BWRAP = shutil.which("bwrap") is not None
# Where the course is not: FileNotFoundError in the sandbox of the operating system; without bubblewrap
# (grading with --no-isolation) the Python guard refuses what it can see.
ABSENT = "FileNotFoundError" if BWRAP else "PermissionError: the grader does not allow reading"


@pytest.mark.parametrize("attack, refused", [
    ("open(__import__('pathlib').Path(BlockPool.__init__.__code__.co_filename).parent / 'block_manager.py').read()",
     "FileNotFoundError" if BWRAP else "PermissionError"),
    ("import kernels.block_manager", "ModuleNotFoundError"),
    ("import course.exercise_checks", "ModuleNotFoundError" if BWRAP else "PermissionError"),
    # the driver's source came in the request; its file, or any of the course, is not there to read
    (f"open({str(host_answers.module_file(ALLOCATOR.driver_module, ('course',)))!r}).read()", ABSENT),
    (f"open({str(host_answers.PROJECT_ROOT / 'kernels' / 'block_manager.py')!r}).read()", ABSENT),
    ("open('written-by-the-answer', 'w')", "PermissionError: the grader does not allow writing"),
    ("__import__('subprocess').run(['true'])", "PermissionError: the grader does not allow starting a process"),
    ("__import__('os').system('true')", "PermissionError: the grader does not allow starting a process"),
    ("__import__('socket').create_connection(('127.0.0.1', 9))", "PermissionError"),
])
def test_the_answer_process_refuses_what_a_kernel_could_not_do(attack, refused, tmp_path, monkeypatch, runner):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with pytest.raises(AssertionError, match="could not be run: the cell raised " + refused):
        exercise_checks.check_allocator(HostCode(attack + "\n" + HONEST, "CowBlockManager"),
                                        exercise_checks.fork_cases()[:1])
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap: the grader refuses to grade without it unless told")
def test_the_course_is_not_on_the_answer_process_file_system(runner):
    """However a path is spelt, by a name relative to a folder's descriptor too (which the Python guard
    cannot resolve: the audit event carries the name, not the folder), the course's files are not there."""
    root = host_answers.PROJECT_ROOT
    spy = (f"import os\n"
           f"seen = [os.path.exists(p) for p in ({str(root / 'kernels' / 'block_manager.py')!r}, "
           f"{str(root / 'solutions')!r}, {str(root / 'course' / 'exercise_checks')!r})]\n"
           f"folder = os.open({str(root.parent)!r}, os.O_RDONLY)\n"
           f"try:\n"
           f"    os.read(os.open({root.name + '/kernels/block_manager.py'!r}, os.O_RDONLY, dir_fd=folder), 99)\n"
           f"    seen.append('read')\n"
           f"except OSError as exc:\n"
           f"    seen.append(type(exc).__name__)\n"
           f"raise RuntimeError(seen)\n")
    with pytest.raises(AssertionError, match=re.escape("RuntimeError: [False, False, False, 'FileNotFoundError']")):
        hostcode.run(ALLOCATOR, HostCode(spy, "CowBlockManager"), exercise_checks.fork_cases()[:1])


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap")
def test_the_answer_sandbox_covers_the_course_inside_a_bound_folder(monkeypatch, tmp_path):
    """A course installed inside the Python installation (a non-editable install, a virtual environment made
    in the repository) is covered by an empty folder: the installation is bound, the course is not."""
    import subprocess

    from grader import guard

    root = str(host_answers.PROJECT_ROOT)
    installation = guard.python_folders()
    monkeypatch.setattr(guard, "python_folders", lambda: [*installation, root])
    probe = (f"import os; print(os.listdir({root + '/kernels'!r}), os.listdir({root + '/solutions'!r}), "
             f"os.listdir({root + '/grader'!r}), os.path.isfile({root + '/pyproject.toml'!r}))")
    command = guard.answer_sandbox_command([sys.executable, "-I", "-S", "-c", probe], files={})
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] [] [] True"     # the repository is there, its course is not


def test_the_answer_process_holds_only_the_given_module_of_the_course(runner):
    """The base's file, in a ``kernels`` package that holds nothing else; the driver and the guard under
    names of their own; nothing of ``course`` or ``grader``."""
    spy = ("raise RuntimeError(sorted(m for m in __import__('sys').modules\n"
           "                         if m.split('.')[0] in ('kernels', 'course', 'grader')))\n")
    with pytest.raises(AssertionError, match=re.escape("the cell raised RuntimeError: ['kernels', "
                                                       "'kernels.block_pool']")):
        hostcode.run(ALLOCATOR, HostCode(spy, "CowBlockManager"), exercise_checks.fork_cases()[:1])
    with pytest.raises(AssertionError, match="does not define the class CowBlockManager"):
        hostcode.run(ALLOCATOR, HostCode("CowBlockManager = 3\n", "CowBlockManager"), exercise_checks.fork_cases()[:1])


def test_an_answer_that_never_returns_is_stopped(runner):
    endless = HONEST.replace("        child = self._new_id()\n", "        while True:\n            pass\n", 1)
    with pytest.raises(AssertionError, match="did not finish its operations within 2 s"):
        hostcode.run(ALLOCATOR, HostCode(endless, "CowBlockManager"), exercise_checks.fork_cases()[:1], timeout=2)


def test_without_the_graders_runner_a_host_code_is_refused():
    """Outside grading nothing runs a HostCode: the course holds no process runner, the grader registers one."""
    hostcode.set_runner(None)
    with pytest.raises(RuntimeError, match="run in a process of their own only when graded"):
        exercise_checks.fork_shares_blocks(HostCode(HONEST, "CowBlockManager"))
    with pytest.raises(TypeError, match="the class your answer cell defines"):
        exercise_checks.fork_shares_blocks(object())


@pytest.mark.parametrize("exercise", ["allocator", "decode_step"])
def test_the_driver_and_the_base_import_only_the_standard_library(exercise):
    """The answer's process loads them by their files before the guard: they may need nothing of the project
    (day 6's allocator, day 10's decode step)."""
    from course.exercise_checks.day10_step import DECODE_STEP

    declared = {"allocator": ALLOCATOR, "decode_step": DECODE_STEP}[exercise]
    for name in (declared.driver_module, declared.base):
        path = host_answers.module_file(name, ("course", "kernels"))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
        roots |= {node.module.split(".")[0] if node.level == 0 else "." for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom)}
        assert roots <= set(sys.stdlib_module_names), (name, roots - set(sys.stdlib_module_names))


def test_the_host_answer_machinery_names_no_exercise():
    """What a process holds comes from the exercise's declaration: neither module names day 6's code."""
    for module in (hostcode, host_answers):
        source = inspect.getsource(module)
        for word in ("BlockPool", "OutOfBlocks", "Step(", "block_pool", "block_manager", "add_sequence"):
            assert word not in source, (module.__name__, word)


def test_the_grading_kernel_starts_the_runner_before_its_guard(monkeypatch):
    from grader.execute import GuardedExecute

    sent = []
    execute = GuardedExecute(launch_checks=True, guard_policy='{"deny_read": []}')
    monkeypatch.setattr(execute, "_quiet", lambda code: sent.append(code) or "ok")
    execute._prepare_kernel()
    code = sent[0]
    assert code.index("course.gates") < code.index("grader.host_answers") < code.index("start_runner()") \
        < code.index("grader.guard")


def test_the_runner_started_before_the_guard_runs_answers_after_it():
    """The grading kernel refuses starting processes; the runner was started before (grader/execute.py)."""
    import subprocess

    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(host_answers.PROJECT_ROOT)!r})
        from course import exercise_checks, hostcode
        from grader import host_answers
        host_answers.start_runner()
        from grader import guard
        guard.install({{"deny_read": [], "deny_write": []}})
        try:
            __import__("subprocess").run(["true"])
            print("started a process")
        except PermissionError:
            print("refused a process")
        exercise_checks.fork_shares_blocks(hostcode.HostCode({HONEST!r}, "CowBlockManager"))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused a process" in done.stdout and "visible check passed: fork shares" in done.stdout


# --- the judge ------------------------------------------------------------------------------------

def _variant(old: str, new: str) -> type:
    source = HONEST.replace(old, new)
    assert source != HONEST, old
    namespace = {"BlockPool": BlockPool, "Step": Step}
    exec(source, namespace)
    return namespace["CowBlockManager"]


ALL = exercise_checks.fork_cases() + exercise_checks.copy_on_write_cases() + exercise_checks.random_workload(7)


@pytest.mark.parametrize("old, new, named", [
    ("            self._refs[block] += 1\n", "            pass\n", "reference count 1 but 2 table(s) hold it"),
    ("self._tables[child] = list(self._table(seq))", "self._tables[child] = self._table(seq)",
     "holds"),
    ("if offset == 0 or self.refcount(table[-1]) > 1:", "if offset == 0:",
     "a shared block must never be written"),
    ("                self._release(table[-1])\n", "", "reference count 2 but 1 table(s) hold it"),
    ("            self._reserve(1)\n            block = self._take()\n            if offset:\n"
     "                step.copies.append((table[-1], block))\n                self._release(table[-1])\n",
     "            if offset:\n                self._release(table[-1])\n            self._reserve(1)\n"
     "            block = self._take()\n            if offset:\n                step.copies.append((table[-1], block))\n",
     "raised OutOfBlocks after changing"),
    ("if offset == 0 or self.refcount(table[-1]) > 1:", "if offset == 0 or self.refcount(table[-1]) >= 1:",
     "copy only a shared page"),
])
def test_the_judge_names_each_wrong_allocator(old, new, named):
    with pytest.raises(AssertionError, match=re.escape(named)):
        exercise_checks.check_allocator(_variant(old, new), ALL)


def test_the_judge_accepts_any_free_block_and_the_course_allocator():
    class LastFreeFirst(_variant("return step", "return step  # the same")):
        def _take(self):                                   # pick from the other end of the free list
            block = self._free.pop()
            self._refs[block] = 1
            return block

    for answer in (BlockManager, LastFreeFirst):
        exercise_checks.check_allocator(answer, ALL)


def test_the_workloads_exercise_every_case_of_append():
    """The random workloads reach copy-on-write, new pages, in-place writes and running out."""
    seen = set()
    for scenario, log in zip(ALL, hostcode.run(ALLOCATOR, BlockManager, ALL)):
        for (_, op), record in zip(day06_allocator_driver.enumerate_handles(scenario["ops"]), log):
            if op[0] == "append":
                result = record.get("result", {})
                seen.add("out" if "out_of_blocks" in record else "copy" if result.get("copies") else "write")
    assert seen == {"out", "copy", "write"}
    tree = ast.parse(inspect.getsource(day06_allocator))
    assert any(isinstance(n, ast.FunctionDef) and n.name == "random_workload" for n in tree.body)


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap")
def test_a_python_installation_inside_tmp_stays_visible_in_the_answer_sandbox(monkeypatch, tmp_path):
    """A course cloned into /tmp has its virtual environment there: the sandbox's private /tmp must not hide it."""
    import subprocess

    from grader import guard

    installed = tmp_path / "venv"
    installed.mkdir()
    (installed / "marker.txt").write_text("the installation")
    real = guard.python_folders()
    monkeypatch.setattr(guard, "python_folders", lambda: [*real, str(installed)])
    probe = f"print(open({str(installed / 'marker.txt')!r}).read())"
    done = subprocess.run(guard.answer_sandbox_command([sys.executable, "-I", "-S", "-c", probe], files={}),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "the installation", done.stderr
