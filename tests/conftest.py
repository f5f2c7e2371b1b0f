"""Test configuration: the simulator by default, the GPU with COURSE_DEVICE=gpu (`make test-gpu`).

The device is chosen here, before any test module imports numba.

Every test belongs to one day of the course or to the course as a whole, and carries that as a
marker (``day05``, ``course_wide``):

- a test in ``test_dayNN_*.py`` belongs to day NN;
- a test elsewhere belongs to the day of its ``@pytest.mark.dayNN`` marker, or to the day it is
  parametrised with: a ``case`` of the grader's sample submissions (its assignment; the
  course-wide cases of ``grader/samples/_course`` belong to the course), an ``assignment``
  (``day05_flash_attention``) or a ``day`` (``day05``);
- any other test belongs to the course as a whole.

``pytest -m day05`` or ``pytest --day 05`` runs one day (``--day`` may be repeated). At the end of
every run the test time of each day (setup, call and teardown of its tests, summed; with
pytest-xdist, over the workers) is printed next to its budget: the suite must stay under 20 minutes
on 2 cores for ten days, which `make test` runs on two workers, so each day gets ``day_budget_s``
and the course-wide tests ``course_budget_s`` (``[tool.pytest.ini_options]``), 2400 s of test time
in all. A day over its budget is reported as a warning, and so is a lesson that runs longer than
``test_lesson_figures.BUDGET_S`` on the simulator; ``--day-budget-strict`` makes either fail the run.

Checks draw their inputs from ``course.checking.random_inputs()``, a fresh seed each call, so every run tries
new ones, and a failure prints the seed that repeats it. ``--seed-base B`` makes the seeds of this process's
calls a fixed sequence of B instead, so that a run can be repeated, and a loop over B runs every check of a test
file (grade checks, visible feedback, kernels) over as many draws as wanted: how a check that a rare draw lets a
wrong kernel through is found before a student meets it. Hidden tests that draw through the course's checks
(``pristine("course.exercise_checks")``, whose modules import ``course.checking`` itself) follow B too; those that
call ``random_inputs`` of their own copy of ``course.checking`` (``pristine("course.checking")``, days 1 to 5 and
``grader.hidden_helpers``) keep drawing fresh seeds.
"""

import collections
import os
import re

import pytest

os.environ.setdefault("COURSE_DEVICE", "simulator")
os.environ.setdefault("MPLBACKEND", "Agg")
if "COURSE_COMPILE_CACHE" not in os.environ:
    # The notebooks a run executes share one folder of remembered GPU compiles (course.gpu_compile),
    # fresh for the run, so a run never starts with what an earlier run (or the student) compiled. The
    # pytest-xdist workers inherit it from the process that starts them.
    import atexit
    import shutil
    import tempfile

    os.environ["COURSE_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="course-compile-cache-")
    atexit.register(shutil.rmtree, os.environ["COURSE_COMPILE_CACHE"], True)

import course  # noqa: E402

course.use_device(quiet=True)

pytest_plugins = ["pytester"]   # the tests of this file's per-day report run small suites in-process

COURSE_DAYS = 10
COURSE_WIDE = "course_wide"
_DAY_FILE = re.compile(r"^test_(day\d\d)_")
_DAY_MARK = re.compile(r"^day\d\d$")


class DayClock:
    """Which day each test belongs to, and the seconds and tests each day took in this run."""

    def __init__(self):
        self.day_of_test = {}
        self.seconds = collections.Counter()
        self.tests = collections.defaultdict(set)
        self.selected = set()     # the days of --day; empty: every day

    def add(self, report) -> None:
        day = self.day_of_test.get(report.nodeid)
        if day is None:   # collected in a pytest-xdist worker: the report carries the test's markers
            day = next((k for k in getattr(report, "keywords", {}) if _DAY_MARK.match(k) or k == COURSE_WIDE),
                       COURSE_WIDE)
        self.seconds[day] += report.duration
        self.tests[day].add(report.nodeid)


_clock = DayClock()   # one pytest run per process; pytest_configure starts it afresh
# The words that start the warning of a lesson over its time budget (test_lesson_figures.lesson_over_budget).
LESSON_OVER_BUDGET = "lesson .* took .* s on the simulator, over its"


def pytest_addoption(parser):
    group = parser.getgroup("course days")
    group.addoption("--day", action="append", default=[], metavar="NN",
                    help="run only the tests of this day (05, day05 or day05_flash_attention); repeatable")
    group.addoption("--day-budget-strict", action="store_true",
                    help="fail the run when a day's tests take longer than its budget (default: warn)")
    group.addoption("--seed-base", type=int, default=None, metavar="B",
                    help="random_inputs() without a seed draws a fixed sequence of seeds made from B (a repeatable "
                         "run; loop over B to try every check over many draws)")
    parser.addini("day_budget_s", "budget of one day's tests, in seconds of test time", default="150")
    parser.addini("course_budget_s", "budget of the course-wide tests, in seconds of test time", default="900")


def pytest_configure(config):
    for n in range(1, COURSE_DAYS + 1):
        config.addinivalue_line("markers", f"day{n:02d}: a test of day {n} (select with -m day{n:02d} or --day {n:02d})")
    config.addinivalue_line("markers", f"{COURSE_WIDE}: a test of the course as a whole, not of one day")
    if config.getoption("day_budget_strict"):      # a lesson over its budget (test_lesson_figures) fails too
        config.addinivalue_line("filterwarnings", f"error:{LESSON_OVER_BUDGET}:UserWarning")
    base = config.getoption("seed_base")
    if base is not None:
        if base < 0:
            raise pytest.UsageError(f"--seed-base must be >= 0, got {base}")
        import itertools

        from course import checking

        calls, fresh = itertools.count(), checking._fresh_seed
        checking._fresh_seed = lambda: (base * 1_000_003 + next(calls) * 7_919) % 2 ** 31
        config.add_cleanup(lambda: setattr(checking, "_fresh_seed", fresh))
    global _clock
    _clock = DayClock()
    try:
        _clock.selected = {normalise_day(day) for arg in config.getoption("day") for day in arg.split(",")}
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config):
    return course.device_summary()


def normalise_day(text: str) -> str:
    """``5``, ``05``, ``day05`` or ``day05_flash_attention`` as ``day05``; ValueError otherwise."""
    match = re.fullmatch(r"(?:day)?(\d{1,2})(?:_\w*)?", str(text).strip())
    if not match or not 1 <= int(match.group(1)) <= COURSE_DAYS:
        raise ValueError(f"--day must name a day from 01 to {COURSE_DAYS:02d} (like 05 or day05), got {text!r}")
    return f"day{int(match.group(1)):02d}"


def day_of(item) -> str:
    """The day a collected test belongs to (``day05``), or ``course_wide``."""
    found = _DAY_FILE.match(item.path.name)
    if found:
        return found.group(1)
    marked = [m.name for m in item.iter_markers() if _DAY_MARK.match(m.name)]
    if marked:
        return marked[0]
    params = getattr(getattr(item, "callspec", None), "params", {})
    case = params.get("case")
    if case is not None and getattr(getattr(case, "path", None), "parent", None) is not None \
            and case.path.parent.name == "_course":
        return COURSE_WIDE            # a course-wide sample submission, whatever day it is graded on
    for value in (getattr(case, "assignment", None), params.get("assignment"), params.get("day")):
        if isinstance(value, str) and re.match(r"day\d\d", value):
            return value[:5]
    return COURSE_WIDE


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark each test with its day before ``-m`` selects, keep only ``--day``'s, skip GPU tests here."""
    days = _clock.selected
    kept, dropped = [], []
    for item in items:
        day = day_of(item)
        _clock.day_of_test[item.nodeid] = day
        item.add_marker(getattr(pytest.mark, day))
        (kept if not days or day in days else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if course.on_simulator():
        skip = pytest.mark.skip(reason="needs a real NVIDIA GPU: run `make test-gpu` on one")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def pytest_runtest_logreport(report):
    _clock.add(report)


def budget_of(config, day: str) -> float:
    key = "course_budget_s" if day == COURSE_WIDE else "day_budget_s"
    return float(config.getini(key))


def over_budget(config) -> dict:
    """``{day: seconds}`` of each day whose tests took longer than its budget in this run."""
    return {day: seconds for day, seconds in _clock.seconds.items() if seconds > budget_of(config, day)}


def pytest_sessionfinish(session, exitstatus):
    if session.config.getoption("day_budget_strict") and over_budget(session.config) \
            and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    seconds = _clock.seconds
    if not seconds:
        return
    tests = {day: len(nodeids) for day, nodeids in _clock.tests.items()}
    terminalreporter.section("test time per day")
    over = over_budget(config)
    for day in sorted(seconds, key=lambda d: (d == COURSE_WIDE, d)):
        budget = budget_of(config, day)
        line = f"{day:<12} {tests[day]:>4} tests {seconds[day]:8.1f} s of {budget:.0f} s"
        if day in over:
            terminalreporter.write_line(f"{line}   OVER BUDGET by {seconds[day] - budget:.0f} s", yellow=True, bold=True)
        else:
            terminalreporter.write_line(line)
    terminalreporter.write_line(f"{'total':<12} {sum(tests.values()):>4} tests {sum(seconds.values()):8.1f} s")
    if over:
        verdict = "fails the run (--day-budget-strict)" if config.getoption("day_budget_strict") else "a warning"
        terminalreporter.write_line(f"over budget: {', '.join(sorted(over))}; {verdict}", yellow=True, bold=True)
