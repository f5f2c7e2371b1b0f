"""Day 5 recorder (course/record/day05.py): its checks and bookkeeping on the simulator, the recording on a GPU."""

import numpy as np
import pytest

from course.record import day05
from course.records import load_recording
from day05_fake_recordings import fake_timing


def test_full_size_lengths_cover_full_off_tile_one_and_empty():
    lens = day05.full_size_kv_lens(4096, 4)
    assert lens.dtype == np.int32 and lens.tolist() == [4096, 4059, 1, 0]
    assert day05.full_size_kv_lens(1024, 6).tolist() == [1024, 987, 1, 0, 1024, 987]


def test_ncu_cases_name_every_rung_and_size_and_build_nothing_yet():
    cases = day05.ncu_cases()
    assert {(c.label, c.columns["causal"], c.N) for c in cases} == {
        (r, causal, n) for r, causal in day05.NCU_CASES for n in day05.NCU_SIZES}
    assert all(callable(c.run) for c in cases)
    assert {c.name for c in cases if c.label == "attention_v4_flash"} == {
        "attention_v4_flash:causal=False", "attention_v4_flash:causal=True"}


def test_fraction_summary_reads_the_largest_size_of_each_flash_rung():
    summary = day05.flash_fraction_summary(fake_timing())
    lines = summary.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("attention_v4_flash at N=4096: 0.28 of torch SDPA fp32")
    assert lines[1].startswith("attention_v4_flash causal at N=4096: 0.29 of torch SDPA fp32")
    assert lines[2].startswith("attention_v5_flash_registers at N=4096: 0.60 of torch SDPA fp32")
    assert lines[3].startswith("attention_v5_flash_registers causal at N=4096: 0.62 of torch SDPA fp32")


def test_ladder_comes_from_the_registry():
    from kernels import flash_attention

    assert day05.NCU_CASES == (("attention_v1_naive", False), ("attention_v2_fused_rows", False),
                               ("attention_v3_tiled", False), ("attention_v4_flash", False),
                               ("attention_v4_flash", True), ("attention_v5_flash_registers", False),
                               ("attention_v5_flash_registers", True), ("attention_v6_register_tiles", False),
                               ("attention_v6_register_tiles", True))
    assert list(day05.own_rungs()) == [n for n in flash_attention.RUNGS if n not in ("attention_v1_naive",
                                                                                       "attention_v2_fused_rows")]


def test_full_size_checks_run_on_the_simulator_and_carry_their_shapes(monkeypatch):
    """The checks at a simulator-sized shape: every rung of the day, full and causal with lengths."""
    monkeypatch.setattr(day05, "SHAPE", {"B": 2, "H": 1, "d": 4})
    rows = day05.check_full_size(n=40)
    assert [(r["rung"], r["causal"]) for r in rows] == [
        ("attention_v3_tiled", False), ("attention_v4_flash", False), ("attention_v5_flash_registers", False),
        ("attention_v6_register_tiles", False), ("attention_v4_flash", True), ("attention_v5_flash_registers", True),
        ("attention_v6_register_tiles", True)]
    assert all(r["rel_err"] <= 1e-4 and (r["N"], r["B"], r["H"], r["d"]) == (40, 2, 1, 4) for r in rows)
    assert rows[-1]["kv_lens"] == "[40, 3]"


def test_full_size_checks_fail_on_a_wrong_rung(monkeypatch):
    """A rung that scales the scores wrongly (0.25, not 1/sqrt(4)) or writes nothing must stop the recorder."""
    from course.checking import CheckFailure
    from kernels import flash_attention
    from kernels.registry import Rung

    def wrong_scale(q, k, v, *, causal=False, kv_lens=None, out=None, kernel=flash_attention.attention_v4_flash_kernel):
        return flash_attention.attention_v4_flash(q, k, v, causal=causal, kv_lens=kv_lens, scale=0.25, out=out,
                                                  kernel=kernel)

    def writes_nothing(q, k, v, *, out=None, kernel=flash_attention.attention_v3_tiled_kernel):
        return out

    monkeypatch.setattr(day05, "SHAPE", {"B": 1, "H": 1, "d": 4})
    for launcher in (wrong_scale, writes_nothing):
        monkeypatch.setattr(day05, "own_rungs", lambda launcher=launcher: {"attention_v4_flash": Rung(
            "attention_v4_flash", launcher, "a deliberately wrong rung")})
        with pytest.raises(CheckFailure):
            day05.check_full_size(n=17)


def _fake_timer(calls):
    """A stand-in for course.timing.benchmark_within: runs the launch once; torch takes 2 ms, rungs 8 ms."""
    from course.timing import Timing

    def timer(fn, budget_s, *, flush_l2=False):
        fn()
        calls.append(fn)
        ms = 2.0 if getattr(fn, "is_torch", False) else 8.0
        return Timing(median_ms=ms, p10_ms=ms, p90_ms=ms, samples_ms=(ms,), warmup=0, flush_l2=flush_l2)

    return timer


def _fake_sdpa(q, k, v, *, causal):
    from kernels import reference

    def run():
        return reference.attention(q, k, v, causal=causal)

    run.is_torch = True
    return run


def test_timing_recording_launches_every_rung_and_relates_it_to_torch(monkeypatch):
    """The sweep's bookkeeping on the simulator: tiny shapes, stand-ins for the timer and torch."""
    from course.record import baselines

    calls = []
    monkeypatch.setattr(day05, "SHAPE", {"B": 1, "H": 1, "d": 4})
    monkeypatch.setattr(day05, "QUICK_SIZES", (8,))
    monkeypatch.setattr(day05, "WIDE_SHAPE", {"B": 1, "H": 1, "d": 8})
    monkeypatch.setattr(day05, "QUICK_WIDE_SIZES", (9,))
    monkeypatch.setattr(baselines, "torch_sdpa", _fake_sdpa)
    rec = day05.timing_recording(quick=True, timer=_fake_timer(calls))
    from kernels import flash_attention

    assert [row["rung"] for row in rec.rows] == [*flash_attention.RUNGS, "torch_sdpa", "attention_v4_flash",
                                                 "attention_v5_flash_registers", "attention_v6_register_tiles",
                                                 "torch_sdpa"]
    assert len(calls) == 11
    assert all((row["N"], row["B"], row["H"], row["d"]) == (8, 1, 1, 4) for row in rec.rows)
    assert [row["causal"] for row in rec.rows] == [False] * 7 + [True] * 4
    fractions = {(row["rung"], row["causal"]): row["fraction_of_sdpa"] for row in rec.rows}
    assert fractions["attention_v4_flash", False] == fractions["attention_v4_flash", True] == 0.25
    assert fractions["torch_sdpa", False] == fractions["torch_sdpa", True] == 1.0
    assert rec.one(rung="attention_v4_flash", causal=False)["tflops"] == pytest.approx(2 * 2 * 8 * 8 * 4 / 8e-3 / 1e12)
    assert "attention_v4_flash at N=8: 0.25 of torch SDPA fp32" in day05.flash_fraction_summary(rec)


def test_record_saves_checks_timing_and_resources_in_order(monkeypatch, tmp_path):
    """The whole recorder through the harness on the simulator, with stand-ins for what needs a GPU."""
    from course.record import baselines, harness

    monkeypatch.setattr(day05, "SHAPE", {"B": 1, "H": 1, "d": 4})
    monkeypatch.setattr(day05, "QUICK_CHECK_N", 17)
    monkeypatch.setattr(day05, "QUICK_SIZES", (8,))
    monkeypatch.setattr(day05, "WIDE_SHAPE", {"B": 1, "H": 1, "d": 8})
    monkeypatch.setattr(day05, "QUICK_WIDE_SIZES", (9,))
    monkeypatch.setattr(baselines, "torch_sdpa", _fake_sdpa)
    monkeypatch.setattr(day05, "resources_recording", lambda quick: _resources_stand_in())
    paths = harness.record(day05.recorder(), tmp_path, quick=True, timer=_fake_timer([]),
                           ceilings={"copy_gbps": 3000.0, "fp32_tflops": 50.0})
    assert [p.name for p in paths] == ["day05_full_size_checks.json", "day05_flash_timing.json",
                                       "day05_head_dim_128_timing.json", "day05_kernel_resources.json"]
    checks, timing, wide = load_recording(paths[0]), load_recording(paths[1]), load_recording(paths[2])
    assert len(checks.rows) == 7 and all(r["rel_err"] <= 1e-4 for r in checks.rows)
    assert timing.ceilings == {"copy_gbps": 3000.0, "fp32_tflops": 50.0}
    assert {r["N"] for r in timing.rows} == {8}
    assert {(r["rung"], r["causal"], r["N"], r["d"]) for r in wide.rows} == {
        (rung, causal, 9, 8) for rung in ("attention_v6_register_tiles", "torch_sdpa") for causal in (False, True)}
    assert all(r["fraction_of_sdpa"] > 0 for r in wide.rows)


def _resources_stand_in():
    from course.records import new_recording

    rec = new_recording("day05_kernel_resources")
    rec.add(rung="attention_v3_tiled", d=4, registers=1, local_bytes=0, shared_bytes=0, ptx_local_loads=0,
            ptx_local_stores=0)
    return rec


@pytest.mark.gpu
def test_record_quick_checks_and_times_every_rung(tmp_path):
    paths = {p.stem: p for p in day05.record(tmp_path, quick=True)}
    checks = load_recording(paths["day05_full_size_checks"])
    assert checks.rows and all(row["rel_err"] <= 1e-4 for row in checks.rows)
    assert {row["rung"] for row in checks.rows} == set(day05.own_rungs())
    resources = load_recording(paths["day05_kernel_resources"]).by("rung")
    assert resources["attention_v5_flash_registers"]["local_bytes"] == 0, resources
    assert resources["attention_v6_register_tiles"]["local_bytes"] == 0, resources
    timing = load_recording(paths["day05_flash_timing"])
    assert set(day05.NCU_CASES) | {("torch_sdpa", False), ("torch_sdpa", True)} <= {
        (row["rung"], row["causal"]) for row in timing.rows}
    assert all(row["fraction_of_sdpa"] > 0 for row in timing.rows)
    wide = load_recording(paths["day05_head_dim_128_timing"])
    assert {(row["rung"], row["causal"]) for row in wide.rows} == {
        (rung, causal) for rung in ("attention_v6_register_tiles", "torch_sdpa") for causal in (False, True)}
    assert {row["d"] for row in wide.rows} == {128}


@pytest.mark.gpu
def test_sanitize_and_the_smallest_ncu_cases_run():
    from numba import cuda

    day05.sanitize()
    for case in day05.ncu_cases():
        if case.N == min(day05.NCU_SIZES):
            case.run()
    cuda.synchronize()
