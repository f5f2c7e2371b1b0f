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
    assert {(label, n) for label, n, _ in cases} == {(r, n) for r in day05.NCU_RUNGS for n in day05.NCU_SIZES}
    assert all(callable(run) for _, _, run in cases)


def test_fraction_summary_reads_the_largest_size_of_each_flash_rung():
    summary = day05.flash_fraction_summary(fake_timing())
    lines = summary.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("v4_flash at N=4096: 0.28 of torch SDPA fp32")
    assert lines[1].startswith("v4_flash_causal at N=4096: 0.29 of torch SDPA fp32")
    assert lines[2].startswith("v5_flash_registers at N=4096: 0.60 of torch SDPA fp32")
    assert lines[3].startswith("v5_flash_registers_causal at N=4096: 0.62 of torch SDPA fp32")


def test_ladder_comes_from_the_registry():
    from kernels import flash_attention

    assert day05.NCU_RUNGS == ("v1_naive", "v2_fused_rows", "v3_tiled", "v4_flash", "v4_flash_causal",
                               "v5_flash_registers", "v5_flash_registers_causal", "v6_register_tiles",
                               "v6_register_tiles_causal")
    assert list(day05.own_rungs()) == [n for n in flash_attention.RUNGS if n not in ("attention_v1_naive",
                                                                                       "attention_v2_fused_rows")]


def test_full_size_checks_run_on_the_simulator_and_carry_their_shapes(monkeypatch):
    """The checks at a simulator-sized shape: every rung of the day, full and causal with lengths."""
    monkeypatch.setattr(day05, "SHAPE", {"B": 2, "H": 1, "d": 4})
    rows = day05.check_full_size(n=40)
    assert [(r["rung"], r["causal"]) for r in rows] == [
        ("v3_tiled", False), ("v4_flash", False), ("v5_flash_registers", False), ("v6_register_tiles", False),
        ("v4_flash", True), ("v5_flash_registers", True), ("v6_register_tiles", True)]
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
    assert [row["rung"] for row in rec.rows] == ["v1_naive", "v2_fused_rows", "v3_tiled", "v4_flash",
                                                 "v5_flash_registers", "v6_register_tiles", "torch_sdpa",
                                                 "v4_flash_causal", "v5_flash_registers_causal",
                                                 "v6_register_tiles_causal", "torch_sdpa_causal"]
    assert len(calls) == 11
    assert all((row["N"], row["B"], row["H"], row["d"]) == (8, 1, 1, 4) for row in rec.rows)
    assert [row["causal"] for row in rec.rows] == [False] * 7 + [True] * 4
    fractions = {row["rung"]: row["fraction_of_sdpa"] for row in rec.rows}
    assert fractions["v4_flash"] == fractions["v4_flash_causal"] == 0.25 and fractions["torch_sdpa"] == 1.0
    flops = {row["rung"]: row["tflops"] for row in rec.rows}
    assert flops["v4_flash"] == pytest.approx(2 * 2 * 8 * 8 * 4 / 8e-3 / 1e12)
    assert "v4_flash at N=8: 0.25 of torch SDPA fp32" in day05.flash_fraction_summary(rec)


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
    assert {(r["rung"], r["N"], r["d"]) for r in wide.rows} == {
        (rung, 9, 8) for rung in ("v6_register_tiles", "v6_register_tiles_causal", "torch_sdpa", "torch_sdpa_causal")}
    assert all(r["fraction_of_sdpa"] > 0 for r in wide.rows)


def _resources_stand_in():
    from course.records import new_recording

    rec = new_recording("day05_kernel_resources")
    rec.add(rung="v3_tiled", d=4, registers=1, local_bytes=0, shared_bytes=0, ptx_local_loads=0, ptx_local_stores=0)
    return rec


@pytest.mark.gpu
def test_record_quick_checks_and_times_every_rung(tmp_path):
    paths = {p.stem: p for p in day05.record(tmp_path, quick=True)}
    checks = load_recording(paths["day05_full_size_checks"])
    assert checks.rows and all(row["rel_err"] <= 1e-4 for row in checks.rows)
    assert {row["rung"] for row in checks.rows} == {"v3_tiled", "v4_flash", "v5_flash_registers",
                                                     "v6_register_tiles"}
    resources = {row["rung"]: row for row in load_recording(paths["day05_kernel_resources"]).rows}
    assert resources["v5_flash_registers"]["local_bytes"] == 0, resources
    assert resources["v6_register_tiles"]["local_bytes"] == 0, resources
    timing = load_recording(paths["day05_flash_timing"])
    rungs = {row["rung"] for row in timing.rows}
    assert {"v1_naive", "v2_fused_rows", "v3_tiled", "v4_flash", "v4_flash_causal", "v5_flash_registers",
            "v5_flash_registers_causal", "v6_register_tiles", "v6_register_tiles_causal", "torch_sdpa",
            "torch_sdpa_causal"} <= rungs
    assert all(row["fraction_of_sdpa"] > 0 for row in timing.rows)
    wide = load_recording(paths["day05_head_dim_128_timing"])
    assert {row["rung"] for row in wide.rows} == {"v6_register_tiles", "v6_register_tiles_causal", "torch_sdpa",
                                                  "torch_sdpa_causal"}
    assert {row["d"] for row in wide.rows} == {128}


@pytest.mark.gpu
def test_sanitize_and_the_smallest_ncu_cases_run():
    from numba import cuda

    day05.sanitize()
    for label, n, run in day05.ncu_cases():
        if n == min(day05.NCU_SIZES):
            run()
    cuda.synchronize()
