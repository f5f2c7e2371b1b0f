"""Day 5 recorder (course/record/day05.py): what runs without a GPU here, the recording itself on one."""

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


@pytest.mark.gpu
def test_record_quick_checks_and_times_every_rung(tmp_path):
    paths = day05.record(tmp_path, quick=True)
    checks = load_recording(paths[0])
    assert checks.rows and all(row["rel_err"] <= 1e-4 for row in checks.rows)
    assert {row["rung"] for row in checks.rows} == {"v3_tiled", "v4_flash", "v5_flash_registers"}
    resources = {row["rung"]: row for row in load_recording(paths[1]).rows}
    assert resources["v5_flash_registers"]["local_bytes"] == 0, resources
    timing = load_recording(paths[2])
    rungs = {row["rung"] for row in timing.rows}
    assert {"v1_naive", "v2_fused_rows", "v3_tiled", "v4_flash", "v4_flash_causal", "v5_flash_registers",
            "v5_flash_registers_causal", "torch_sdpa", "torch_sdpa_causal"} <= rungs
    assert all(row["fraction_of_sdpa"] > 0 for row in timing.rows)


@pytest.mark.gpu
def test_sanitize_and_the_smallest_ncu_cases_run():
    from numba import cuda

    day05.sanitize()
    for label, n, run in day05.ncu_cases():
        if n == min(day05.NCU_SIZES):
            run()
    cuda.synchronize()


def test_timing_recording_launches_every_rung_and_relates_it_to_torch(monkeypatch):
    """The recorder's bookkeeping on the simulator: tiny shapes, a stand-in for benchmark and torch."""
    from kernels import reference

    timed = []

    def run_once(runs, sizes, quick=False):  # what time_rows returns, with every run called once
        rows = []
        for label, (fn, bytes_moved, flops) in runs.items():
            fn()
            timed.append((label, sizes["N"], sizes["causal"]))
            ms = 2.0 if label.startswith("torch") else 8.0
            rows.append({"rung": label, **sizes, "median_ms": ms, "p10_ms": ms, "p90_ms": ms, "repeat": 1,
                         "gbps": bytes_moved / ms / 1e6, "tflops": flops / ms / 1e9})
        return rows

    def fake_sdpa(q, k, v, *, causal):
        return lambda: reference.attention(q, k, v, causal=causal)

    monkeypatch.setattr(day05, "SHAPE", {"B": 1, "H": 1, "d": 4})
    monkeypatch.setattr(day05, "QUICK_SIZES", (16,))
    monkeypatch.setattr(day05, "time_rows", run_once)
    monkeypatch.setattr(day05, "torch_sdpa", fake_sdpa)
    rec = day05.timing_recording(quick=True)
    assert {row["rung"] for row in rec.rows} == {"v1_naive", "v2_fused_rows", "v3_tiled", "v4_flash",
                                                 "v5_flash_registers", "torch_sdpa", "v4_flash_causal",
                                                 "v5_flash_registers_causal", "torch_sdpa_causal"}
    assert len(timed) == 9 and all(n == 16 for _, n, _ in timed)
    fractions = {row["rung"]: row["fraction_of_sdpa"] for row in rec.rows}
    assert fractions["v4_flash"] == fractions["v4_flash_causal"] == 0.25 and fractions["torch_sdpa"] == 1.0
    assert "v4_flash at N=16: 0.25 of torch SDPA fp32" in day05.flash_fraction_summary(rec)
