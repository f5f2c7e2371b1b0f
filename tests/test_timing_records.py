"""course.timing refuses on the simulator; course.records saves, loads and validates recordings."""

import datetime
import json

import numpy as np
import pytest

import course.records as records
from course.records import (Recording, live_or_recorded, load_recording, new_recording,
                            recorded_names, recording_path)
from course.timing import (SimulatorTimingError, benchmark, benchmark_within, gbps, measure_ceilings,
                           seconds_per_call, tflops)

# --------------------------------------------------------------------------- timing


def test_benchmark_refuses_on_the_simulator():
    calls = []
    words = "timing needs a real GPU; the lessons plot recorded curves instead"
    with pytest.raises(SimulatorTimingError, match=words):
        benchmark(lambda: calls.append(1))
    assert calls == []                      # nothing was run and pretended to be timed
    assert issubclass(SimulatorTimingError, RuntimeError)


def test_measure_ceilings_refuses_on_the_simulator():
    with pytest.raises(SimulatorTimingError):
        measure_ceilings()


@pytest.mark.parametrize("l2_bytes,words", [
    (50 * 2**20, 2**24),          # an H100's 50 MiB: 100 MiB rounds up to 128 MiB of words
    (60 * 2**20, 2**24),          # an H200's 60 MiB
    (64 * 2**20, 2**24),          # exactly twice is a power of two already
    (0, 2**25),                   # unknown: FALLBACK_L2_BYTES, 256 MiB
])
def test_flush_buffer_is_a_power_of_two_of_at_least_twice_l2(l2_bytes, words):
    from course.timing import FALLBACK_L2_BYTES, flush_buffer_words

    assert flush_buffer_words(l2_bytes) == words
    assert 8 * words >= 2 * (l2_bytes or FALLBACK_L2_BYTES) > 4 * words


def test_flush_reads_its_buffer_and_writes_nothing(monkeypatch):
    """The flush is a read of the whole buffer (L2 left holding clean lines), never a write such as a memset,
    which would leave L2 dirty and put its write-back into the next timed kernel."""
    import course.timing as timing
    from kernels import probes

    words, sums = np.zeros(16, np.uint64), np.zeros(4, np.uint64)
    calls = []
    monkeypatch.setattr(timing, "_flush_buffer", (words, sums, 3))
    monkeypatch.setattr(probes, "read_words", lambda *args, **kwargs: calls.append((args, kwargs)))
    from numba.cuda.cudadrv import driver

    monkeypatch.setattr(driver, "device_memset", lambda *args: calls.append(("memset", args)), raising=False)
    timing.flush_l2_cache()
    assert len(calls) == 1
    (args, kwargs), = calls
    assert args[0] is words and args[1] == words.size and kwargs == {"sums": sums, "blocks": 3}


@pytest.mark.parametrize("kwargs,error,words", [
    ({"fn": 3}, TypeError, "fn must be a function"),
    ({"repeat": 0}, ValueError, "repeat must be an int >= 1"),
    ({"warmup": -1}, ValueError, "warmup must be an int >= 0"),
    ({"repeat": 2.5}, ValueError, "repeat"),
    ({"flush_l2": "yes"}, TypeError, "flush_l2"),
    ({"launch_overhead": "none"}, ValueError, "launch_overhead must be one of 'queued', 'included', 'hidden'"),
])
def test_benchmark_validates_before_refusing(kwargs, error, words):
    kwargs = {"fn": lambda: None, **kwargs}
    with pytest.raises(error, match=words):
        benchmark(**kwargs)


def test_benchmark_within_refuses_on_the_simulator_without_running_fn():
    calls = []
    for timed in (lambda: benchmark_within(lambda: calls.append(1)), lambda: seconds_per_call(lambda: calls.append(1))):
        with pytest.raises(SimulatorTimingError):
            timed()
    assert calls == []


@pytest.mark.parametrize("kwargs,error,words", [
    ({"budget_s": 0}, ValueError, "budget_s must be a positive number"),
    ({"budget_s": True}, ValueError, "budget_s"),
    ({"min_repeat": 0}, ValueError, "min_repeat must be an int >= 1"),
    ({"min_repeat": 10, "max_repeat": 5}, ValueError, "max_repeat must be >= min_repeat"),
])
def test_benchmark_within_validates_before_refusing(kwargs, error, words):
    with pytest.raises(error, match=words):
        benchmark_within(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="fn must be a function"):
        seconds_per_call(3)


def test_rates():
    assert gbps(2e9, 1.0) == pytest.approx(2000.0)
    assert tflops(2 * 1024**3, 0.5) == pytest.approx(2 * 1024**3 / 5e-4 / 1e12)
    with pytest.raises(ValueError, match="ms must be positive"):
        gbps(1.0, 0.0)


# --------------------------------------------------------------------------- records


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """Recordings go to a temporary course/data for the test (nothing fake lands in the package)."""
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    return tmp_path


def sample(name="day99_demo") -> Recording:
    rec = new_recording(name, ceilings={"copy_gbps": 2900.0, "fp32_tflops": 51.2}, notes="demo")
    rec.add(rung="v1_naive", N=np.int64(256), median_ms=np.float32(0.5), p10_ms=0.45, p90_ms=0.6,
            causal=False, tflops=None)
    rec.add(rung="torch_sdpa", N=256, median_ms=0.1)
    return rec


def test_fraction_of_copy_on_gpu_moves_the_fraction_onto_kernel_ms():
    """A row read at half the copy bandwidth over a median twice its kernel time read at all of it on the GPU."""
    row = {"fraction_of_copy": 0.5, "median_ms": 0.4, "kernel_ms": 0.2}
    assert records.fraction_of_copy_on_gpu(row) == pytest.approx(1.0)
    assert records.fraction_of_copy_on_gpu(dict(row, median_ms=0.2)) == pytest.approx(0.5)


def test_new_recording_fills_metadata():
    rec = sample()
    assert rec.live and rec.device == "CUDA simulator" and rec.driver == "none"
    assert set(rec.versions) == {"python", "numba", "numba_cuda", "numpy", "torch"}
    assert rec.versions["numba"].startswith("0.")
    assert datetime.datetime.fromisoformat(rec.date).tzinfo is not None
    assert rec.stamp == "live on CUDA simulator"
    assert rec.rows[0] == {"rung": "v1_naive", "N": 256, "median_ms": 0.5, "p10_ms": 0.45,
                           "p90_ms": 0.6, "causal": False, "tflops": None}
    assert type(rec.rows[0]["N"]) is int


def test_round_trip_through_package_data(data_dir):
    rec = sample()
    path = rec.save()
    assert path == data_dir / "day99_demo.json" == records.recording_path("day99_demo")
    loaded = load_recording("day99_demo")
    assert loaded == rec and not loaded.live
    assert loaded.stamp == f"recorded on CUDA simulator ({rec.date[:10]})"
    assert recorded_names() == ["day99_demo"]
    assert json.loads(path.read_text())["schema"] == 1


def test_save_to_a_chosen_path_and_load_it(tmp_path):
    rec = sample()
    path = rec.save(tmp_path / "out" / "x.json")
    assert load_recording(path).rows == rec.rows


def test_recording_path_is_in_the_package():
    assert recording_path("day05_flash_timing").parts[-3:] == ("course", "data", "day05_flash_timing.json")
    for bad in ("../etc/passwd", "a/b", "", 5):
        with pytest.raises(ValueError, match="name must be"):
            recording_path(bad)


def test_missing_recording_says_how_to_record(data_dir):
    with pytest.raises(FileNotFoundError, match=r"no recording 'day42_nothing'.*python -m course.record"):
        load_recording("day42_nothing")


@pytest.mark.parametrize("change,words", [
    (lambda d: d.pop("device"), r"missing metadata \['device'\]"),
    (lambda d: d.pop("versions"), "missing metadata"),
    (lambda d: d.update(date="last tuesday"), "ISO 8601"),
    (lambda d: d.update(driver=""), "driver must be a non-empty string"),
    (lambda d: d["versions"].pop("torch"), "versions must name"),
    (lambda d: d.update(ceilings={"copy_gbps": -1}), "ceilings must map"),
    (lambda d: d.update(rows={"a": 1}), "rows must be a list"),
    (lambda d: d.update(schema=2), "schema 2"),
])
def test_incomplete_recordings_are_rejected_on_load(tmp_path, change, words):
    data = sample().to_dict()
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=words):
        load_recording(path)


def test_invalid_json_is_rejected(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_recording(path)


def test_rows_must_be_plain_values():
    rec = sample()
    with pytest.raises(ValueError, match="must be finite"):
        rec.add(median_ms=float("nan"))
    with pytest.raises(TypeError, match=r"row\['samples'\] must be a number"):
        rec.add(samples=[1.0, 2.0])
    with pytest.raises(ValueError, match="at least one keyword"):
        rec.add()


def test_new_recording_validates():
    with pytest.raises(TypeError, match="ceilings must be a dict"):
        new_recording("x", ceilings=[1.0])
    with pytest.raises(ValueError, match="name must be"):
        new_recording("bad name")


def test_live_or_recorded_loads_on_the_simulator(data_dir):
    sample().save()

    def run():
        raise AssertionError("run() must not be called without a GPU")

    rec, live = live_or_recorded("day99_demo", run)
    assert not live and not rec.live and rec.name == "day99_demo"
    with pytest.raises(FileNotFoundError):
        live_or_recorded("day98_missing", run)
    with pytest.raises(TypeError, match="run must be a function"):
        live_or_recorded("day99_demo", None)


def test_timing_exports_the_same_live_or_recorded():
    import course.timing

    assert course.timing.live_or_recorded is live_or_recorded


def test_shipped_recordings_are_complete():
    for name in recorded_names():
        rec = load_recording(name)
        assert rec.rows and rec.device != "CUDA simulator", name


# --------------------------------------------------------------------------- the suite's time per day


def _run_suite(pytester, *args):
    """Run pytest in this process on the small suite, with this project's conftest; (exit code, output)."""
    import pathlib

    pytester.makeconftest(pathlib.Path(__file__).with_name("conftest.py").read_text(encoding="utf-8"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    return int(result.ret), "\n".join(result.outlines + result.errlines)


@pytest.fixture
def small_suite(pytester):
    pytester.makeini("[pytest]\naddopts = --strict-markers\nday_budget_s = 0.2\ncourse_budget_s = 100\n")
    pytester.makepyfile(
        test_day03_softmax="import time\n\ndef test_slow():\n    time.sleep(0.3)\n\ndef test_fast():\n    pass\n",
        test_grading="import pytest\n\n@pytest.mark.day05\ndef test_marked():\n    pass\n\n"
                     "@pytest.mark.parametrize('assignment', ['day01_gpu_model'])\n"
                     "def test_by_assignment(assignment):\n    pass\n\ndef test_course():\n    pass\n")
    return pytester


def test_time_per_day_is_reported_and_a_day_over_budget_warns(small_suite):
    code, out = _run_suite(small_suite)
    assert code == 0, out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("day", "course_wide", "total"))}
    assert "2 tests" in lines["day03"] and "OVER BUDGET" in lines["day03"], out
    assert "1 tests" in lines["day05"] and "OVER BUDGET" not in lines["day05"], out
    assert "1 tests" in lines["day01"] and "1 tests" in lines["course_wide"], out
    assert "5 tests" in lines["total"] and "over budget: day03; a warning" in out, out


def test_one_day_runs_alone_and_strict_budgets_fail_the_run(small_suite):
    code, out = _run_suite(small_suite, "--day", "05", "--day-budget-strict")
    assert code == 0 and "1 passed, 4 deselected" in out, out
    code, out = _run_suite(small_suite, "-m", "day03", "--day-budget-strict")
    assert code == 1 and "2 passed" in out and "fails the run" in out, out
    code, out = _run_suite(small_suite, "--day", "11")
    assert code == 4 and "--day must name a day from 01 to 10" in out, out


def test_a_lesson_over_its_budget_warns_and_fails_a_strict_run(pytester):
    """test_lesson_figures' warning for a lesson over BUDGET_S is a warning by default and, with
    --day-budget-strict, an error: conftest's filter matches the words the warning is made of."""
    from test_lesson_figures import lesson_over_budget

    message = lesson_over_budget("day99_lesson", 200.0)
    pytester.makepyfile(test_lesson_budget_probe=f"import warnings\n\ndef test_lesson():\n    warnings.warn({message!r})\n")
    code, out = _run_suite(pytester)
    assert code == 0 and "1 passed, 1 warning" in out and message in out, out
    code, out = _run_suite(pytester, "--day-budget-strict")
    assert code == 1 and "1 failed" in out and message in out, out
    other = "lesson day99 is fine"
    pytester.makepyfile(test_lesson_budget_probe=f"import warnings\n\ndef test_lesson():\n    warnings.warn({other!r})\n")
    code, out = _run_suite(pytester, "--day-budget-strict")
    assert code == 0, out


def test_days_are_counted_the_same_on_two_xdist_workers(small_suite):
    """`make test` runs two workers; the test time per day still lands on the right day."""
    code, out = _run_suite(small_suite, "-n", "2", "-p", "xdist")
    assert code == 0, out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("day", "course_wide", "total"))}
    assert "2 tests" in lines["day03"] and "1 tests" in lines["day05"] and "1 tests" in lines["course_wide"], out


def test_seed_base_makes_the_draws_of_random_inputs_repeatable(pytester):
    """``--seed-base B``: the same B draws the same seeds, another B others; the entropy source is back after the run;
    a negative B is refused."""
    import re

    from course import checking

    fresh = checking._fresh_seed
    pytester.makepyfile(test_seeds="from course.checking import random_inputs\n\n"
                                   "def test_seeds():\n    print('SEEDS', [random_inputs()[1] for _ in range(3)])\n")
    seeds = []
    for base in ("7", "7", "8"):
        code, out = _run_suite(pytester, "-s", "--seed-base", base)
        assert code == 0, out
        seeds.append(re.search(r"SEEDS (\[[\d, ]+\])", out).group(1))
    assert seeds[0] == seeds[1] != seeds[2] and len(set(eval(seeds[0]))) == 3
    assert checking._fresh_seed is fresh
    code, out = _run_suite(pytester, "--seed-base", "-1")
    assert code == 4 and "--seed-base must be >= 0" in out, out
