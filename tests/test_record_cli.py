"""The recorders' harness (course/record/harness.py) and its command line, ``python -m course.record``.

What needs a GPU (timing, ceilings, Nsight) is replaced by stand-ins, so the harness's bookkeeping
runs here: checks before timing, rows that carry their shapes, rates from the model's bytes and FLOPs.
"""

import json
import types

import numpy as np
import pytest

import course.record
from course.checking import CheckFailure
from course.record import __main__ as record_main
from course.record import harness
from course.record.harness import Check, NcuCase, Recorder, Sweep, Timed
from course.records import load_recording
from course.timing import Timing

CEILINGS = {"copy_gbps": 3000.0, "fp32_tflops": 50.0}


def _fake_day(ran):
    def case(label, n, columns=None):
        return NcuCase(label, n, lambda: ran.append((label, n, columns)), columns)

    cases = [case("v1_naive", 256), case("v1_naive", 1024), case("v4_flash", 256, {"causal": False}),
             case("v4_flash", 256, {"causal": True})]
    return types.SimpleNamespace(ncu_cases=lambda: cases)


def test_ncu_case_is_chosen_by_label_and_size(monkeypatch):
    from numba import cuda

    ran = []
    monkeypatch.setattr(course.record, "day_module", lambda day: _fake_day(ran))
    # the simulator has no profiler switches; on a GPU these bracket the measured launch
    monkeypatch.setattr(cuda, "profile_start", lambda: ran.append("start"), raising=False)
    monkeypatch.setattr(cuda, "profile_stop", lambda: ran.append("stop"), raising=False)
    assert record_main.main(["--ncu-case", "day05", "v1_naive", "1024"]) == 0
    # a warm-up launch, then the profiled one, both of the case asked for
    assert ran == [("v1_naive", 1024, None), "start", ("v1_naive", 1024, None), "stop"]
    ran.clear()
    # two cases of one rung and size are told apart by their columns, in the case's name
    assert record_main.main(["--ncu-case", "day05", "v4_flash:causal=True", "256"]) == 0
    assert ran == [("v4_flash", 256, {"causal": True}), "start", ("v4_flash", 256, {"causal": True}), "stop"]


def test_ncu_list_prints_each_case_by_the_name_that_runs_it(monkeypatch, capsys):
    monkeypatch.setattr(course.record, "day_module", lambda day: _fake_day([]))
    assert record_main.main(["day05", "--ncu-list"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("day05 ")]
    assert listed == ["day05 v1_naive 256", "day05 v1_naive 1024",
                                                   "day05 v4_flash:causal=False 256", "day05 v4_flash:causal=True 256"]


def test_ncu_case_that_does_not_exist_names_the_cases(monkeypatch, capsys):
    monkeypatch.setattr(course.record, "day_module", lambda day: _fake_day([]))
    with pytest.raises(SystemExit):
        record_main.main(["--ncu-case", "day05", "v1_naive", "512"])
    assert "N=512" in capsys.readouterr().err


def test_other_gpu_records_only_the_days_that_compare_across_gpus(monkeypatch, tmp_path, capsys):
    """``--other-gpu`` runs a day's ``record_other_gpu`` (day 8: its decode sweep on a second GPU) and passes over
    a day without one; the day's own recorder is not run."""
    ran = []

    def other_gpu(out, quick=False):
        ran.append((out, quick))
        return [out / "day99_decode_timing_other_gpu.json"]

    days = {"day08": types.SimpleNamespace(record_other_gpu=other_gpu, record=lambda *a, **k: ran.append("record")),
            "day05": types.SimpleNamespace(record=lambda *a, **k: ran.append("record"))}
    monkeypatch.setattr(course.record, "day_module", days.__getitem__)
    assert record_main.main(["day05", "day08", "--other-gpu", "--quick", "--out", str(tmp_path)]) == 0
    assert ran == [(tmp_path, True)]
    assert "wrote " + str(tmp_path / "day99_decode_timing_other_gpu.json") in capsys.readouterr().out


@pytest.mark.parametrize("day", ["day06", "day07", "day08"])
def test_each_day_records_its_other_gpu_sweep_at_points_of_its_own_sweep(day):
    from course.record import day_module

    module = day_module(day)
    assert set(module.OTHER_GPU_POINTS) <= set(module.POINTS)
    assert sum(s * c >= 524288 for s, c in module.OTHER_GPU_POINTS) >= 2     # the steps the lessons' text speaks of


def test_record_other_gpu_checks_first_then_times_the_sweep_at_its_points_under_its_own_name(tmp_path, monkeypatch):
    """harness.record_other_gpu runs the checks (a failing one stops it before any timing), then the sweep at the
    given points only, as ``<name>_other_gpu``, its notes saying what was checked; quick: the first point."""
    from course.record import harness
    from course.records import load_recording

    timed = []

    def fake_record_sweep(sweep, *, quick=False, ceilings=None, timer=None):
        from course.records import new_recording

        timed.append((sweep.name, sweep.quick_points if quick else sweep.points))
        return new_recording(sweep.name, ceilings=ceilings, notes=sweep.notes)

    monkeypatch.setattr(harness, "record_sweep", fake_record_sweep)
    sweep = harness.Sweep(name="day99_timing", notes="the base notes", points=((1, 2), (3, 4), (5, 6)),
                          quick_points=((1, 2),), shape=lambda p: {}, cases=lambda p: [])
    checks = [harness.Check("a copy", lambda: None, lambda: np.ones(3), lambda: np.ones(3), seed=1, exact=True)]
    path = harness.record_other_gpu(checks, sweep, ((3, 4), (5, 6)), tmp_path, checked="its checks",
                                    ceilings={"copy_gbps": 1.0})
    rec = load_recording(path)
    assert path.name == "day99_timing_other_gpu.json" and timed == [("day99_timing_other_gpu", ((3, 4), (5, 6)))]
    assert rec.notes.startswith("day99_timing's sweep on another GPU, at 2 of its points, after its checks passed")
    harness.record_other_gpu(checks, sweep, ((3, 4), (5, 6)), tmp_path, checked="x", quick=True, ceilings={})
    assert timed[-1] == ("day99_timing_other_gpu", ((3, 4),))
    wrong = [harness.Check("a wrong copy", lambda: None, lambda: np.zeros(3), lambda: np.ones(3), seed=1, exact=True)]
    with pytest.raises(AssertionError, match="a wrong copy is wrong"):
        harness.record_other_gpu(wrong, sweep, ((3, 4),), tmp_path, checked="x", ceilings={})
    assert len(timed) == 2


# --------------------------------------------------------------------------- a day in miniature
# "Kernels" in NumPy: the harness only sees callables, so its bookkeeping is tested without launches.


def _timer(ms_by_label):
    """A stand-in for course.timing.benchmark_within that runs the launch once and returns set times."""
    seen = []

    def timer(fn, budget_s, *, flush_l2=False, launch_overhead="queued"):
        label = fn()
        seen.append((label, flush_l2))
        ms = ms_by_label[label] / (2 if launch_overhead == "hidden" else 1)   # the kernel alone: faster
        return Timing(median_ms=ms, p10_ms=ms, p90_ms=ms, samples_ms=(ms, ms, ms), warmup=0, flush_l2=flush_l2)

    timer.seen = seen
    return timer


def _doubling_recorder(double=lambda x: 2 * x, sizes=(4, 8)):
    """A day whose one rung doubles a vector, checked at N = 5 and timed at ``sizes`` against a baseline."""
    x = np.random.default_rng(0).standard_normal(5).astype(np.float32)
    out = np.empty_like(x)

    def launch():
        out[:] = double(x)

    def cases(n):
        return [Timed("v1_double", lambda: "v1_double", bytes_moved=8 * n, flops=n),
                Timed("torch_double", lambda: "torch_double", bytes_moved=8 * n, flops=n, columns={"library": True})]

    sweep = Sweep(name="day99_double_timing", notes="doubling", points=sizes, quick_points=sizes[:1],
                  shape=lambda n: {"N": n, "rows": 1}, cases=cases, flush_l2=True,
                  finish=harness.fraction_of("torch", "fraction_of_torch"))
    return Recorder(day="day99",
                    checks=lambda quick: [Check("v1_double", launch, lambda: out.copy(), lambda: 2.0 * x.astype(np.float64),
                                                seed=0, poisoned=(out,), columns={"rung": "v1_double", "N": 5})],
                    check_recording="day99_checks", sweeps=lambda: [sweep], ncu_cases=lambda: [],
                    sanitize=lambda: None)


def test_record_checks_then_times_and_every_row_carries_its_shape(tmp_path):
    timer = _timer({"v1_double": 4.0, "torch_double": 1.0})
    paths = harness.record(_doubling_recorder(), tmp_path, timer=timer, ceilings=CEILINGS)
    assert [p.name for p in paths] == ["day99_checks.json", "day99_double_timing.json"]
    checks, timing = load_recording(paths[0]), load_recording(paths[1])
    assert checks.rows[0]["rung"] == "v1_double" and checks.rows[0]["N"] == 5 and checks.rows[0]["rel_err"] == 0.0
    assert timing.ceilings == CEILINGS and timing.notes == "doubling"
    assert [(r["rung"], r["N"], r["rows"]) for r in timing.rows] == [
        ("v1_double", 4, 1), ("torch_double", 4, 1), ("v1_double", 8, 1), ("torch_double", 8, 1)]
    slow = timing.rows[2]
    assert slow["median_ms"] == 4.0 and slow["repeat"] == 3
    assert slow["gbps"] == pytest.approx(64 / 4e-3 / 1e9) and slow["tflops"] == pytest.approx(8 / 4e-3 / 1e12)
    assert slow["fraction_of_torch"] == 0.25 and timing.rows[3]["fraction_of_torch"] == 1.0
    assert timing.rows[1]["library"] is True and "library" not in slow
    assert all(flush for _, flush in timer.seen)


def test_a_kernel_timed_alone_is_no_rung_and_names_itself_in_its_columns():
    """Day 2 times each kernel of its pipeline alone: a Timed without a label writes a row without ``rung``."""
    timer = _timer({"v1_double": 4.0, "double_kernel": 2.0})
    rows = harness.time_cases([Timed("v1_double", lambda: "v1_double", bytes_moved=32),
                               Timed(None, lambda: "double_kernel", bytes_moved=32, columns={"kernel": "double_kernel"})],
                              {"N": 4}, timer=timer)
    assert rows[0]["rung"] == "v1_double" and "kernel" not in rows[0]
    assert "rung" not in rows[1] and rows[1]["kernel"] == "double_kernel" and rows[1]["median_ms"] == 2.0


def test_quick_record_times_the_quick_points_only(tmp_path):
    timer = _timer({"v1_double": 4.0, "torch_double": 1.0})
    paths = harness.record(_doubling_recorder(), tmp_path, quick=True, timer=timer, ceilings=CEILINGS)
    assert {r["N"] for r in load_recording(paths[1]).rows} == {4}


def test_a_sweep_asked_for_it_adds_each_rows_fraction_of_the_runs_copy_bandwidth():
    import dataclasses

    timer = _timer({"v1_double": 4.0, "torch_double": 1.0})
    sweep = dataclasses.replace(_doubling_recorder().sweeps()[0], fraction_of_copy=True)
    rows = harness.record_sweep(sweep, timer=timer, ceilings=CEILINGS).rows
    assert [r["fraction_of_copy"] for r in rows] == pytest.approx(
        [r["gbps"] / CEILINGS["copy_gbps"] for r in rows])
    plain = harness.record_sweep(_doubling_recorder().sweeps()[0], timer=timer, ceilings=CEILINGS).rows
    assert "fraction_of_copy" not in plain[0]


def test_a_sweep_asked_for_it_times_the_kernel_alone_too_and_compares_either_time():
    import dataclasses

    timer = _timer({"v1_double": 4.0, "torch_double": 1.0})
    sweep = dataclasses.replace(_doubling_recorder().sweeps()[0], kernel_time=True, finish=harness.finish_all(
        harness.fraction_of("torch", "fraction_of_torch"),
        harness.fraction_of("torch", "kernel_fraction_of_torch", time="kernel_ms")))
    rows = harness.record_sweep(sweep, timer=timer, ceilings=CEILINGS).rows
    assert [(r["median_ms"], r["kernel_ms"]) for r in rows[:2]] == [(4.0, 2.0), (1.0, 0.5)]
    assert rows[0]["fraction_of_torch"] == 0.25 and rows[0]["kernel_fraction_of_torch"] == 0.25
    assert len(timer.seen) == 2 * len(rows)
    plain = harness.record_sweep(_doubling_recorder().sweeps()[0], timer=timer, ceilings=CEILINGS).rows
    assert "kernel_ms" not in plain[0]
    with pytest.raises(KeyError):
        harness.fraction_of("torch", "x", time="kernel_ms")(plain)


def test_a_wrong_kernel_stops_the_recorder_before_anything_is_timed_or_saved(tmp_path):
    timer = _timer({"v1_double": 4.0, "torch_double": 1.0})
    with pytest.raises(CheckFailure):
        harness.record(_doubling_recorder(double=lambda x: np.where(np.arange(x.size) == 3, 0, 2 * x)), tmp_path,
                       timer=timer, ceilings=CEILINGS)
    assert timer.seen == [] and list(tmp_path.iterdir()) == []


def test_a_rung_that_writes_nothing_fails_its_check():
    """The output is poisoned before each launch: a rung that writes nothing leaves NaN, not an old answer."""
    x = np.ones(4)
    out = 2 * x.astype(np.float32)   # holds the right answer already, as after an earlier rung
    check = Check("lazy", lambda: None, lambda: out.copy(), lambda: 2 * x, poisoned=(out,))
    with pytest.raises(CheckFailure):
        harness.run_checks([check])


def test_exact_checks_count_the_elements_that_differ():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    good = Check("transpose", lambda: None, lambda: x.T.copy(), lambda: x.T, exact=True, columns={"rows": 2})
    assert harness.run_checks([good]) == [{"rows": 2, "rel_err": 0.0, "max_abs_err": 0.0, "seed": None}]
    swapped = x.T.copy()
    swapped[0, 1], swapped[1, 0] = swapped[1, 0], swapped[0, 1]
    bad = Check("transpose", lambda: None, lambda: swapped, lambda: x.T, exact=True)
    with pytest.raises(AssertionError, match="2 elements differ"):
        harness.run_checks([bad])


def test_fraction_needs_exactly_one_baseline_row():
    finish = harness.fraction_of("torch", "fraction_of_torch")
    with pytest.raises(ValueError, match="expected one 'torch' row"):
        finish([{"rung": "v1", "median_ms": 1.0}])


def test_fraction_of_a_baseline_named_by_its_columns():
    """Day 8's rows share a rung over several cache formats: the baseline is the rung on one format."""
    rows = [{"rung": "gqa_decode_page_runs", "fmt": fmt, "kernel_ms": ms}
            for fmt, ms in (("float32", 4.0), ("float16", 2.0), ("fp8_e4m3", 1.0))]
    harness.fraction_of({"rung": "gqa_decode_page_runs", "fmt": "float32"}, "speedup", time="kernel_ms")(rows)
    assert [r["speedup"] for r in rows] == [1.0, 2.0, 4.0]
    with pytest.raises(ValueError, match="expected one"):
        harness.fraction_of({"rung": "gqa_decode_page_runs"}, "speedup", time="kernel_ms")(rows)


def test_lazy_builds_its_launch_once():
    built, ran = [], []

    def make(n):
        built.append(n)
        return lambda: ran.append(n)

    run = harness.lazy(make, 7)
    assert built == []
    run()
    run()
    assert built == [7] and ran == [7, 7]


# --------------------------------------------------------------------------- Nsight Compute

NCU_CSV = """==PROF== Connected to process 1
"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"
"0","1","scores_kernel","dram__bytes_read.sum","Mbyte","1,234.5"
"0","1","scores_kernel","dram__bytes_write.sum","Kbyte","10"
"1","1","pv_kernel","dram__bytes_read.sum","byte","500"
"1","1","pv_kernel","dram__bytes_write.sum","Gbyte","0.002"
"""


def test_ncu_csv_is_summed_over_launches_in_bytes():
    read, written, launches = harness.parse_ncu_csv(NCU_CSV)
    assert read == pytest.approx(1234.5e6 + 500) and written == pytest.approx(10e3 + 2e6) and launches == 2
    with pytest.raises(ValueError, match="unknown unit 'furlong'"):
        harness.parse_ncu_csv(NCU_CSV.replace('"Kbyte"', '"furlong"'))


def test_dram_bytes_recording_carries_the_shape_of_each_case(tmp_path):
    cases = [NcuCase("v1_naive", 256, None), NcuCase("v1_naive", 1024, None),
             NcuCase("v4_flash", 1024, None, {"causal": True, "H": 8})]
    profiled = []

    def profile(day, name, n):
        profiled.append(name)
        return 3.0 * n, 1.0 * n, 3

    path = harness.measure_dram_bytes("day99", cases, tmp_path, shape=lambda n: {"B": 4, "H": 16, "d": 64},
                                      profile=profile)
    rows = json.loads(path.read_text())["rows"]
    assert path.name == "day99_dram_bytes.json"
    assert rows[1] == {"label": "v1_naive", "N": 1024, "B": 4, "H": 16, "d": 64, "dram_read_bytes": 3072.0,
                       "dram_write_bytes": 1024.0, "dram_bytes": 4096.0, "launches": 3}
    # a case's own columns go into its row, over the day's shape where they name the same column
    assert rows[2] == {**rows[1], "label": "v4_flash", "causal": True, "H": 8}
    assert profiled == ["v1_naive", "v1_naive", "v4_flash:causal=True,H=8"]


def _stall_csv(launches):
    """``ncu --csv`` text for ``launches``: (id, kernel name, {metric: value}), every stall and issue metric
    present unless the dict leaves it out."""
    lines = ["==PROF== Connected to process 1",
             '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    for launch_id, kernel, values in launches:
        for metric, value in values.items():
            lines.append(f'"{launch_id}","1","{kernel}","{metric}","","{value}"')
    return "\n".join(lines) + "\n"


def _stall_values(long_scoreboard, warp_instructions=1234567):
    values = {metric: 0.25 for metric in harness.STALL_METRICS}
    values["smsp__average_warps_issue_stalled_selected_per_issue_active.ratio"] = 1.0
    values["smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"] = long_scoreboard
    values.update({"smsp__issue_active.avg.per_cycle_active": 0.31, "smsp__warps_active.avg.per_cycle_active": 3.77,
                   "smsp__inst_executed.sum": f"{warp_instructions:,}"})
    return values


def test_ncu_stall_reasons_are_read_per_launch_with_their_sum():
    text = _stall_csv([("0", "quantized_gemv::q8_1_quantize_kernel[v1,cw51cXT](Array<float, 1, C, mutable>)",
                        _stall_values(4.5)),
                       ("1", "q4_1_gemv_q8_1_wide_kernel[v1,cw51cXT](Array<unsigned int, 2, C>)", _stall_values(9.0))])
    first, second = harness.parse_ncu_stalls(text)
    assert first["kernel"] == "quantized_gemv::q8_1_quantize_kernel" and second["kernel"] == "q4_1_gemv_q8_1_wide_kernel"
    assert second["stall_long_scoreboard"] == 9.0 and second["stall_selected"] == 1.0
    assert second["warp_instructions"] == 1234567 and second["issue_per_cycle"] == 0.31
    # 16 reasons at 0.25, selected 1, long scoreboard 9
    assert second["cycles_per_issue"] == pytest.approx(16 * 0.25 + 1.0 + 9.0)
    missing = _stall_values(1.0)
    del missing["smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"]
    with pytest.raises(ValueError, match="ncu reported no stall_mio_throttle for k"):
        harness.parse_ncu_stalls(_stall_csv([("0", "k(int)", missing)]))


def test_stall_reasons_recording_has_a_row_per_launch_with_the_shape_of_its_case(tmp_path):
    cases = [NcuCase("v1_naive", 256, None), NcuCase("v4_flash", 1024, None, {"causal": True})]
    launch = harness.parse_ncu_stalls(_stall_csv([("0", "k", _stall_values(2.0))]))[0]

    def profile(day, name, n):
        return [dict(launch, kernel=f"{name}_a"), dict(launch, kernel=f"{name}_b")] if n == 256 else [launch]

    path = harness.measure_stall_reasons("day99", cases, tmp_path, shape=lambda n: {"d": 64}, profile=profile)
    rec = load_recording(path)
    assert path.name == "day99_stall_reasons.json" and len(rec.rows) == 3
    assert [(r["label"], r["kernel"]) for r in rec.rows] == [("v1_naive", "v1_naive_a"), ("v1_naive", "v1_naive_b"),
                                                             ("v4_flash", "k")]
    assert rec.rows[2]["causal"] is True and rec.rows[2]["d"] == 64 and rec.rows[2]["stall_long_scoreboard"] == 2.0
    assert "smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio" in rec.notes


def test_ncu_stalls_flag_runs_the_stall_recorder_on_each_days_cases(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(course.record, "day_module", lambda day: _fake_day([]))
    monkeypatch.setattr(harness, "measure_stall_reasons",
                        lambda day, cases, out, shape: ran.append(("stalls", day, len(cases))) or out / "x.json")
    monkeypatch.setattr(harness, "measure_dram_bytes",
                        lambda day, cases, out, shape: ran.append(("dram", day, len(cases))) or out / "y.json")
    assert record_main.main(["day05", "--ncu-stalls", "--out", str(tmp_path)]) == 0
    assert record_main.main(["day05", "--ncu", "--out", str(tmp_path)]) == 0
    assert ran == [("stalls", "day05", 4), ("dram", "day05", 4)]


def test_ncu_shared_measures_a_days_shared_cases_which_ncu_case_also_runs(monkeypatch, tmp_path):
    from numba import cuda

    ran = []
    day = _fake_day(ran)
    day.ncu_shared_cases = lambda: [NcuCase("tc_v4", 4096, lambda: ran.append("tc_v4"), {"fmt": "float16"})]
    monkeypatch.setattr(course.record, "day_module", lambda name: day)
    monkeypatch.setattr(harness, "measure_shared_memory",
                        lambda name, cases, out: ran.append(("shared", name, [c.label for c in cases])) or out / "z")
    assert record_main.main(["day08", "--ncu-shared", "--out", str(tmp_path)]) == 0
    assert ran == [("shared", "day08", ["tc_v4"])]
    ran.clear()
    monkeypatch.setattr(cuda, "profile_start", lambda: ran.append("start"), raising=False)
    monkeypatch.setattr(cuda, "profile_stop", lambda: ran.append("stop"), raising=False)
    assert record_main.main(["--ncu-case", "day08", "tc_v4:fmt=float16", "4096"]) == 0
    assert ran == ["tc_v4", "start", "tc_v4", "stop"]


def test_shared_memory_recording_reads_wavefronts_conflicts_the_tensor_pipe_and_warp_states(tmp_path):
    shared = {"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 67_200_000.0,
              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 80_000.0,
              "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": 41.5,
              "gpu__time_duration.sum": 700_000.0}
    text = _stall_csv([("0", "tensor_core_gemm::tc_gemm_v4_swizzled_kernel[v1](Array<half, 2, C>)",
                        {**_stall_values(3.0), **shared})])
    launch, = harness.parse_ncu_stalls(text, harness.SHARED_METRICS)
    assert launch["kernel"] == "tensor_core_gemm::tc_gemm_v4_swizzled_kernel"
    assert (launch["shared_load_wavefronts"], launch["shared_load_conflicts"], launch["tensor_pipe_percent"],
            launch["duration_ns"]) == (67_200_000.0, 80_000.0, 41.5, 700_000.0)
    assert launch["stall_long_scoreboard"] == 3.0 and launch["cycles_per_issue"] > 3.0
    # a GPU whose ncu does not know the tensor-pipe metric: the error names what is missing
    del shared["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]
    with pytest.raises(ValueError, match="ncu reported no tensor_pipe_percent for k"):
        harness.parse_ncu_stalls(_stall_csv([("0", "k", {**_stall_values(1.0), **shared})]), harness.SHARED_METRICS)
    path = harness.measure_shared_memory("day99", [NcuCase("tc_v4", 4096, None, {"fmt": "float16"})], tmp_path,
                                         profile=lambda day, name, n: [launch])
    rec = load_recording(path)
    assert path.name == "day99_shared_memory.json" and rec.rows[0]["fmt"] == "float16"
    assert rec.rows[0]["shared_load_conflicts"] == 80_000.0 and "bank conflicts" in rec.notes


def test_day08_profiles_every_rung_of_the_tensor_core_gemm_ladder_but_the_tuned_one():
    from course.record import day08
    from kernels import tensor_core_gemm as tc

    cases = day08.ncu_shared_cases()
    assert [c.label for c in cases] == [rung for rung in tc.RUNGS if rung != "tc_gemm_v7_tuned"]
    assert {c.N for c in cases} == {day08.TC_NCU_N}
    assert len({c.name for c in cases}) == len(cases)


# Days whose unit of measure is a whole model's step, not a ladder of rungs: their module has record() and sanitize()
# but no Recorder of sweeps.
MODEL_DAYS = ("day10",)


def test_the_model_days_record_and_sanitize():
    for day in MODEL_DAYS:
        module = course.record.day_module(day)
        assert callable(module.record) and callable(module.sanitize) and not hasattr(module, "recorder")


@pytest.mark.parametrize("day", [d for d in course.record.DAYS if d not in MODEL_DAYS])
def test_every_day_declares_a_recorder_with_labelled_ncu_cases(day):
    module = course.record.day_module(day)
    recorder = module.recorder()
    assert recorder.day == day and recorder.sweeps()
    cases = recorder.ncu_cases()
    assert cases and all(isinstance(c, NcuCase) and callable(c.run) for c in cases)
    assert len({(c.name, c.N) for c in cases}) == len(cases)
    assert all(isinstance(recorder.ncu_shape(c.N), dict) for c in cases)


# --------------------------------------------------------------------------- compute-sanitizer


def test_sanitizer_runs_the_day_in_a_child_and_fails_on_reported_errors():
    commands = []

    def child(returncode, stdout):
        def run(cmd, **kwargs):
            commands.append(cmd)
            return types.SimpleNamespace(returncode=returncode, stdout=stdout, stderr="")
        return run

    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    assert harness.sanitize_in_child("day05", "racecheck", run=child(0, clean)) == "========= ERROR SUMMARY: 0 errors"
    assert commands[0][:7] == ["compute-sanitizer", "--tool", "racecheck", "--report-api-errors", "no",
                              "--error-exitcode", "1"]
    assert commands[0][-4:] == ["-m", "course.record", "--sanitize", "day05"]
    with pytest.raises(RuntimeError, match="Invalid __global__ read"):
        harness.sanitize_in_child("day05", run=child(1, "========= Invalid __global__ read of size 4\n"))
    with pytest.raises(ValueError, match="tool must be one of"):
        harness.sanitize_in_child("day05", "leakcheck")


# --------------------------------------------------------------------------- every rung of a ladder, by its name


def test_days_5_to_8_check_time_and_profile_every_rung_of_their_ladders():
    """What the recorders declare comes from the registries: each rung of the ladder is profiled (and so timed and
    checked, by the same lists), under its registry name."""
    from course.record import day05, day06, day07, day08
    from kernels import flash_attention, gqa_attention, paged_attention
    from kernels import low_precision_attention as lp

    assert {c.label for c in day05.ncu_cases()} == set(flash_attention.RUNGS)
    assert {c.label for c in day06.ncu_cases()} == set(paged_attention.RUNGS)
    assert set(day07.DECODE_RUNGS + day07.PREFILL_RUNGS) == set(gqa_attention.RUNGS)
    assert {c.label for c in day07.ncu_cases()} == set(gqa_attention.RUNGS) | {day07.DAY6_RUNG}
    assert list(day08.DECODE_FORMATS) == [name for name in lp.RUNGS if name.startswith("gqa_decode")]
    assert list(day08.PREFILL_RUNGS) == [name for name in lp.RUNGS if name.startswith("gqa_prefill")]
    assert {(c.label, c.columns["fmt"]) for c in day08.ncu_cases()} == set(day08.decode_cases())


def test_day08_tensor_prefill_shapes_compare_each_dtype_with_torch_in_that_dtype():
    """The second prefill sweep: each (head_dim, causal) once, d = 64 and non-causal among them, at the first sweep's
    B, heads and N; each row's fraction over torch SDPA in its own dtype (a bf16 row is not held to fp16's time)."""
    from course.record import day08

    assert sorted(day08.TENSOR_PREFILL_SHAPES) == sorted({(d, c) for d in (64, 128) for c in (True, False)})
    sweep = day08.tensor_prefill_shapes_sweep()
    assert sweep.name == "day08_tensor_prefill_shapes" and set(sweep.quick_points) <= set(sweep.points)
    assert sweep.shape((64, False)) == dict(B=2, heads=32, kv_heads=8, N=4096, d=64, causal=False)
    rows = [{"rung": "gqa_prefill_tensor_cores", "fmt": "float16", "median_ms": 4.0},
            {"rung": "torch_sdpa_fp16", "fmt": "float16", "median_ms": 1.0},
            {"rung": "gqa_prefill_tensor_cores", "fmt": "bfloat16", "median_ms": 5.0},
            {"rung": "torch_sdpa_bf16", "fmt": "bfloat16", "median_ms": 2.0}]
    sweep.finish(rows)
    assert [r["fraction_of_sdpa"] for r in rows] == [0.25, 1.0, 0.4, 1.0]


def test_day07_checks_every_rung_at_its_groups_on_the_simulator(monkeypatch):
    """Day 7's full-size checks at a simulator's size: both decode rungs over one paged cache, both prefill rungs at
    groups 4, 1 and 32, each row named by its rung (the cache made with NumPy here, by torch on a GPU)."""
    from numba import cuda

    from course.record import day07
    from kernels import reference

    def paged_inputs(num_seqs, context_lens, *, seed=0, **shape):
        shape = {**day07.SHAPE, **shape}
        rng = np.random.default_rng(seed)
        k, v = rng.standard_normal((2, len(context_lens), shape["kv_heads"], max(context_lens), shape["d"]),
                                   dtype=np.float32)
        k_cache, v_cache, tables, lens = reference.build_paged_cache(k, v, shape["block_size"], rng, context_lens)
        q = rng.standard_normal((len(context_lens), shape["heads"], shape["d"]), dtype=np.float32)
        arrays = {"q": q, "k_cache": np.nan_to_num(k_cache), "v_cache": np.nan_to_num(v_cache),
                  "block_tables": tables, "context_lens": lens}
        return {name: cuda.to_device(a) for name, a in arrays.items()}, {}

    monkeypatch.setattr(day07, "paged_inputs", paged_inputs)
    monkeypatch.setattr(day07, "SHAPE", {"heads": 32, "kv_heads": 8, "d": 8, "block_size": 16})
    rows = harness.run_checks(day07.checks(longest=40, n=104))
    assert [(r["rung"], r.get("kv_heads")) for r in rows] == [
        ("gqa_decode_group", 8), ("gqa_decode_split_k", 8)] + [
        (rung, kv_heads) for kv_heads in (8, 32, 1) for rung in ("gqa_prefill_tiles", "gqa_prefill_flash")]
    assert all(r["rel_err"] < 1e-6 for r in rows)


# --------------------------------------------------------------------------- day 9: warm L2, and its recorder


def test_a_sweep_asked_for_it_times_the_kernel_with_l2_warm_too():
    """``warm_time``: each case timed also with the launch cost hidden and L2 not flushed, into ``warm_kernel_ms``;
    it needs the flushed ``kernel_ms`` to be compared with. The two are timed alternately twice (flushed, warm,
    flushed, warm), and each keeps its lower median: a GPU slowed down while one timing ran (here the first warm
    one, 2.5 times) does not make the flushed time look faster than the warm one."""
    import dataclasses

    seen = []

    def timer(fn, budget_s, *, flush_l2=False, launch_overhead="queued"):
        seen.append((fn(), flush_l2, launch_overhead))
        drift = 2.5 if len(seen) % 5 == 3 else 1.0        # the third of each case's five timings
        ms = {"queued": 4.0, "hidden": 2.0}[launch_overhead] / (1 if flush_l2 else 2) * drift
        return Timing(median_ms=ms, p10_ms=ms, p90_ms=ms, samples_ms=(ms,), warmup=0, flush_l2=flush_l2)

    sweep = dataclasses.replace(_doubling_recorder().sweeps()[0], kernel_time=True, warm_time=True)
    rows = harness.record_sweep(sweep, timer=timer, ceilings=CEILINGS).rows
    assert [(r["median_ms"], r["kernel_ms"], r["warm_kernel_ms"]) for r in rows[:2]] == [(4.0, 2.0, 1.0)] * 2
    assert seen[:5] == [("v1_double", True, "queued"), ("v1_double", True, "hidden"), ("v1_double", False, "hidden"),
                        ("v1_double", True, "hidden"), ("v1_double", False, "hidden")]
    with pytest.raises(ValueError, match="warm_time"):
        dataclasses.replace(sweep, kernel_time=False)
    with pytest.raises(ValueError, match="warm_time"):
        dataclasses.replace(sweep, flush_l2=False)


def test_day09_declares_every_rung_of_its_ladder_at_llama_shapes():
    """The checks, the sweep and Nsight's cases come from ``kernels.quantized_gemv_prequantized.RUNGS`` (the day's
    ladder, ``kernels.quantized_gemv``'s rungs first), each rung with the format the byte model gives it; the sweep
    flushes L2 (a Q4 matrix of 8192 x 8192 fits in it) and times it warm too; the batched sweep times the batched
    rung at T = 1 ... 16 beside torch's fp16 matmul, at both shapes."""
    from course.models import quantized as model
    from course.record import day09
    from kernels import quantized_gemv, quantized_gemv_prequantized

    assert list(day09.FORMATS) == list(quantized_gemv_prequantized.RUNGS) and day09.FORMATS == model.RUNG_FORMATS
    assert list(day09.FORMATS)[:len(quantized_gemv.RUNGS)] == list(quantized_gemv.RUNGS)
    assert day09.REPACKED == ("q4_1_gemv_q8_1_repacked", "q4_1_gemv_q8_1_small_batch", "q4_1_gemv_q8_1_wide",
                              "q8_0_gemv_q8_1_wide", "q4_1_gemv_q8_1_persistent", "q4_0_gemv_q8_1_persistent",
                              "int4_g128_gemv_q8_1_persistent", "q4_1_gemv_q8_1_prequantized", "q4_0_gemv_q8_1_prequantized",
                              "int4_g128_gemv_q8_1_prequantized", "q8_0_gemv_q8_1_prequantized")
    assert [c.label for c in day09.ncu_cases()] == list(quantized_gemv_prequantized.RUNGS)
    assert {(c.N, day09.ncu_shape(c.N)["K"]) for c in day09.ncu_cases()} == {(8192, 8192)}
    sweep = day09.gemv_sweep()
    assert sweep.points == ((8192, 8192), (28672, 8192)) and set(sweep.quick_points) <= set(sweep.points)
    assert sweep.flush_l2 and sweep.kernel_time and sweep.warm_time
    assert sweep.shape((28672, 8192)) == {"N": 28672, "K": 8192}
    assert "torch_weight_int4pack_mm" in sweep.notes      # timed, or the reason it was not
    batched = day09.batched_sweep()
    assert batched.points == tuple((n, k, t) for n, k in sweep.points for t in (1, 2, 4, 8, 16))
    assert set(batched.quick_points) <= set(batched.points) and batched.flush_l2 and batched.kernel_time
    assert batched.shape((8192, 8192, 4)) == {"N": 8192, "K": 8192, "T": 4}
    assert "torch_matmul_fp16" in batched.notes and day09.BATCHED in batched.notes
    rows = [{"rung": day09.BATCHED, "kernel_ms": 1.0}, {"rung": "torch_matmul_fp16", "kernel_ms": 3.0}]
    batched.finish(rows)
    assert [r["kernel_speedup_over_fp16"] for r in rows] == [3.0, 1.0]
    assert [s.name for s in day09.recorder().sweeps()] == ["day09_gemv_timing", "day09_batched_timing",
                                                            "day09_gemm_timing"]
    gemm = day09.gemm_sweep()
    assert gemm.points == (4096, 8192) and set(gemm.quick_points).isdisjoint(gemm.points) and gemm.flush_l2
    assert gemm.shape(4096) == {"M": 4096, "N": 4096, "K": 4096} and "column-major B" in gemm.notes
    rows = [{"rung": "w8a8_gemm_v2_tensor_cores", "kernel_ms": 4.0, "int_ops": 8e12},
            {"rung": "torch_int_mm", "kernel_ms": 1.0, "int_ops": 8e12},
            {"rung": "torch_int_mm_scaled", "kernel_ms": 2.0, "int_ops": 8e12}]
    gemm.finish(rows)
    assert [(r["tops"], r["kernel_speedup_over_int_mm"]) for r in rows] == [(2000.0, 0.25), (8000.0, 1.0),
                                                                          (4000.0, 0.5)]


def test_day09_gemm_reference_equals_the_exact_int64_reference():
    """The recorder's float64 products give the int64 sums of reference.w8a8_matmul exactly (a small seeded case
    at the int8 extremes); the checks of the GEMM rungs run at a size where the int64 reference would be slow."""
    from course.record import day09
    from kernels import reference

    rng = np.random.default_rng(3)
    a_q, w_q = rng.integers(-128, 128, (33, 4096), dtype=np.int8), rng.integers(-128, 128, (17, 4096), dtype=np.int8)
    a_q[0], w_q[0] = -128, -128
    sa, sw = rng.uniform(0.5, 2, 33).astype(np.float32), rng.uniform(0.5, 2, 17).astype(np.float32)
    assert np.array_equal(day09.gemm_reference(a_q, sa, w_q, sw), reference.w8a8_matmul(a_q, sa, w_q, sw))


def test_day09_finish_compares_every_row_with_torch():
    from course.record import day09

    rows = [{"rung": rung, "bytes": 1e6 * ms, "kernel_ms": ms, "warm_kernel_ms": ms / 2}
            for rung, ms in (("q4_0_gemv_warp_per_row", 1.0), ("torch_mv_fp16", 4.0),
                             ("torch_weight_int4pack_mm", 2.0))]
    day09.finish_gemv(rows)
    assert [r["kernel_speedup_over_fp16"] for r in rows] == [4.0, 1.0, 2.0]
    assert [r["kernel_speedup_over_int4pack"] for r in rows] == [2.0, 0.5, 1.0]
    assert all(r["kernel_gbps"] == 1.0 and r["warm_kernel_gbps"] == 2.0 for r in rows)
    without = [{key: r[key] for key in ("rung", "bytes", "kernel_ms", "warm_kernel_ms")} for r in rows[:2]]
    day09.finish_gemv(without)      # a torch without the int4 kernel: no column for it
    assert [r["kernel_speedup_over_fp16"] for r in without] == [4.0, 1.0]
    assert not any("kernel_speedup_over_int4pack" in r for r in without)


def test_day09_checks_every_rung_on_the_simulator():
    """Day 9's full-size checks at a simulator's size (two shapes: 4 blocks a row, and 36 so lane 0 takes two; K a
    multiple of 128 for int4_g128; the batched rung on 3 tokens): every rung against its float64 reference, each
    row naming its rung, format, shape and tokens; the quantization's own error is Q8_0's smallest."""
    from course.record import day09

    rows = harness.run_checks(day09.checks(shapes=((9, 128), (6, 36 * 32)), tokens=3))
    assert [(r["rung"], r["N"], r["K"], r["T"]) for r in rows] == [
        (rung, n, k, 3 if rung == day09.BATCHED else 1) for n, k in ((9, 128), (6, 1152)) for rung in day09.FORMATS]
    assert all(r["rel_err"] < 1e-6 and r["fmt"] == day09.FORMATS[r["rung"]] for r in rows)
    for n in (9, 6):
        errors = {r["rung"]: r["quantization_rel_err"] for r in rows if r["N"] == n}
        assert errors["q8_0_gemv_warp_per_row"] < min(errors.values()) * 1.0001 < 0.5


def test_day09_reference_is_the_same_in_chunks_of_rows():
    """The recorder's reference works on CHUNK_ROWS rows at a time (28672 x 8192 in float64 would take 1.9 GB): the
    same as test_kernels_pattern's references of the rungs, over a matrix of more rows than a chunk."""
    from course.record import day09
    from test_kernels_pattern import operation_of

    n, k = day09.CHUNK_ROWS + 37, 128
    for rung, fmt in day09.FORMATS.items():
        w = day09.gguf_weights(fmt, n, k)
        weights, size = day09.model.FORMAT_BLOCKS[fmt]
        assert w.shape == (n, k // weights, size) and w.dtype == np.uint8
        x = day09.batch_activations(k, 2) if rung == day09.BATCHED else day09.activations(k)
        operation = operation_of(day09.LADDER[rung])
        np.testing.assert_allclose(day09.reference_gemv(rung, w, x), operation.reference(w, x), rtol=1e-12, atol=1e-12)
    w = day09.gguf_weights("q4_1", n, k)
    codes, d, m = day09.q4_1_parts(w)
    np.testing.assert_array_equal((codes.reshape(n, -1, 32) * d[..., None] + m[..., None]).reshape(n, k),
                                  day09.reference.dequantize_q4_1(w.reshape(n, -1)))


def test_day10_records_its_checks_decode_and_serving_on_any_engine(tmp_path):
    """Day 10's recorder measures the model's step, not a ladder: on the NumPy engine over the paged cache (the
    kernel engine's interface) and a tiny model, its three recordings have the rows and columns the module's
    docstring promises, the decode step's bytes are the file's, and the bytes limit is those bytes at the copy
    bandwidth given."""
    import json

    from course.record import day10
    from inference.numpy_model import NumpyPagedModel
    from inference.tiny import tiny_model

    model = tiny_model(0)

    def engine(model_file, num_blocks, context):
        return NumpyPagedModel(model_file, num_blocks=num_blocks, block_size=day10.BLOCK_SIZE, context=context)

    paths = day10.record(tmp_path, quick=True, model_file=model, engine=engine, ceilings={"copy_gbps": 1000.0})
    assert [p.name for p in paths] == ["day10_full_size_checks.json", "day10_decode_timing.json",
                                       "day10_serving.json"]
    checks, decode, serving = (json.loads(p.read_text()) for p in paths)
    assert [r["prompt"] for r in checks["rows"]] == list(day10.PROMPTS)
    assert all(r["tokens_equal"] and r["first_divergence"] == -1 and r["max_logit_err"] < 1e-5 for r in checks["rows"])
    step = next(r for r in decode["rows"] if r["what"] == "decode_step")
    assert step["bytes"] == sum(info.nbytes for info in model.tensors.values())
    assert step["bytes_limit_ms"] == pytest.approx(step["bytes"] / 1e12 * 1e3)
    assert step["tokens_per_s"] == pytest.approx(1e3 / step["median_ms"])
    assert "transformers not measured" in decode["notes"]          # no GPU here
    rows = serving["rows"]
    assert [r["concurrency"] for r in rows if r["what"] == "decode"] == list(day10.QUICK_CONCURRENCY)
    assert all(r["tokens"] == r["requests"] * 8 and r["max_ttft_ms"] >= r["mean_ttft_ms"] > 0
               for r in rows if r["what"] == "decode")
    assert [r["prompt_tokens"] for r in rows if r["what"] == "prefill"] == [32]


def test_day10_on_a_second_gpu_checks_the_tokens_then_records_the_decode_step_under_its_own_name(tmp_path):
    """``record_other_gpu``: the greedy checks first (an engine whose tokens leave NumPy's stops it before any timing,
    naming the prompts), then the decode recording as ``day10_decode_timing_other_gpu``, its notes saying what passed."""
    import json

    from course.record import day10
    from inference.numpy_model import NumpyPagedModel
    from inference.tiny import tiny_model

    model = tiny_model(0)

    def engine(model_file, num_blocks, context):
        return NumpyPagedModel(model_file, num_blocks=num_blocks, block_size=day10.BLOCK_SIZE, context=context)

    def wrong(model_file, num_blocks, context):
        inner = engine(model_file, num_blocks, context)
        decode = inner.decode

        def other_token(seq, token):
            logits = np.array(decode(seq, token))
            logits[..., (int(np.argmax(logits)) + 1) % logits.shape[-1]] = logits.max() + 1
            return logits

        inner.decode = other_token
        return inner

    paths = day10.record_other_gpu(tmp_path, quick=True, model_file=model, engine=engine,
                                   ceilings={"copy_gbps": 1000.0})
    assert [p.name for p in paths] == ["day10_decode_timing_other_gpu.json"]
    rec = json.loads(paths[0].read_text())
    assert rec["name"] == "day10_decode_timing_other_gpu" and "after the greedy checks of 3 prompts passed" in rec["notes"]
    assert [r["engine"] for r in rec["rows"] if r["what"] == "decode_step"] == ["plain"]
    with pytest.raises(AssertionError, match="differ from the NumPy model's after"):
        day10.record_other_gpu(tmp_path / "wrong", quick=True, model_file=model, engine=wrong,
                               ceilings={"copy_gbps": 1000.0})
    assert not (tmp_path / "wrong").exists()


def test_day10_gives_no_rate_to_an_engine_whose_tokens_differ(tmp_path):
    """A rate is a rate of this model only if the engine decodes its tokens: an engine whose greedy tokens part from
    the first engine's (here from the third timed step on) gets no rows, and the notes say from which step; one that
    agrees keeps its rows."""
    from course.record import day10
    from inference.numpy_model import NumpyPagedModel
    from inference.tiny import tiny_model

    model = tiny_model(0)

    def engine(model_file, num_blocks, context):
        return NumpyPagedModel(model_file, num_blocks=num_blocks, block_size=day10.BLOCK_SIZE, context=context)

    def drifting(model_file, num_blocks, context):
        inner, calls = engine(model_file, num_blocks, context), [0]
        decode = inner.decode

        def wrong_after_two(seq, token):
            logits = np.array(decode(seq, token))
            calls[0] += 1
            if calls[0] > 2:                       # the third timed step and after: another token wins
                logits[..., (int(np.argmax(logits)) + 1) % logits.shape[-1]] = logits.max() + 1
            return logits

        inner.decode = wrong_after_two
        return inner

    rec = day10.decode_recording(model, steps=6, ceilings={"copy_gbps": 1000.0},
                                 variants=(("plain", engine), ("same", engine), ("drifting", drifting)))
    engines = {row["engine"] for row in rec.rows if row["what"] == "decode_step"}
    assert engines == {"plain", "same"}
    assert "drifting not measured" in rec.notes and "from step 2 on" in rec.notes


def test_day10_launcher_rows_add_the_kernels_alone_where_the_gpu_can_time_them():
    """The launcher rows of an engine that times its calls: each launcher's calls a step and synchronized time, and
    from a second pass the same calls' kernels alone (kernel_ms_per_step); an engine whose second pass is refused
    (numba's simulator has no timing events) keeps its rows without that column, and the notes say why."""
    from course.record import day10
    from course.records import new_recording
    from inference.tiny import tiny_model

    class Engine:
        """Two launchers a step, a and b (b twice), 3 and 1 ms a call synchronized, 1 and 0.25 ms alone."""

        graphs = False

        def __init__(self, refuses):
            self.refuses, self.timings, self.kernel_timings = refuses, None, None

        def prefill(self, ids):
            return "seq", np.arange(8.0)

        def decode(self, seq, token):
            if self.kernel_timings is not None and self.refuses:
                raise ValueError("kernel_timings time the GPU with CUDA events, which numba's simulator has not")
            for name, calls, synced, alone in (("a", 1, 3e-3, 1e-3), ("b", 2, 1e-3, 0.25e-3)):
                for table, seconds in ((self.timings, synced), (self.kernel_timings, alone)):
                    if table is not None:
                        entry = table.setdefault(name, [0, 0.0])
                        entry[0] += calls
                        entry[1] += calls * seconds
            return np.arange(8.0)

    model = tiny_model(0)
    for refuses in (False, True):
        rec = new_recording("day10_decode_timing", ceilings={})
        day10._time_decode(rec, "plain", lambda *a, **k: Engine(refuses), model, steps=3, step_bytes=1,
                           copy_gbps=None)
        rows = {row["launcher"]: row for row in rec.rows if row["what"] == "launcher"}
        assert {name: (row["calls"], round(row["ms_per_step"], 9)) for name, row in rows.items()} == \
            {"a": (1, 3.0), "b": (2, 2.0)}
        if refuses:
            assert not any("kernel_ms_per_step" in row for row in rows.values())
            assert "plain's kernels alone not measured: ValueError" in rec.notes and "simulator" in rec.notes
        else:
            assert {name: round(row["kernel_ms_per_step"], 9) for name, row in rows.items()} == {"a": 1.0, "b": 0.5}
            assert "not measured" not in rec.notes
