"""What lessons show: Markdown tables, the occupancy model, and live-else-recorded-else-missing in one call."""

import pytest

from course.occupancy import H100, GpuLimits, occupancy, resident_blocks
from course.present import format_cell, markdown_table
from course.records import live_else_recorded, load_recording, new_recording


# ----------------------------------------------------------------------------- markdown_table

def test_markdown_table_formats_numbers_and_aligns_columns():
    table = markdown_table(["N", "bytes", "ratio"], [[1024, 4_194_304, 1.23456], [4096, None, "**2x**"]],
                           caption="Recorded on a GPU.")
    assert table.data.splitlines() == [
        "Recorded on a GPU.", "",
        "| N | bytes | ratio |",
        "| --- | ---: | ---: |",
        "| 1,024 | 4,194,304 | 1.235 |",
        "| 4,096 | – | **2x** |"]


def test_markdown_table_escapes_pipes_and_names_bad_input():
    assert format_cell("a | b") == "a \\| b" and format_cell(True) == "yes"
    with pytest.raises(ValueError, match=r"rows\[1\] has 1 cells, expected 2"):
        markdown_table(["a", "b"], [[1, 2], [3]])
    with pytest.raises(ValueError, match="align must be one of"):
        markdown_table(["a", "b"], [[1, 2]], align="lx")
    with pytest.raises(ValueError, match="columns must name at least one column"):
        markdown_table([], [])


# ----------------------------------------------------------------------------- occupancy

def test_occupancy_of_the_flash_kernels_on_an_h100():
    assert resident_blocks(64, 16384, 50) == (13, "shared memory")      # 228 KiB // (16 KiB + 1 KiB)
    # 50 registers: 1,792 per warp (steps of 256), 3,584 per block of 2 warps: 18 blocks in 65,536.
    assert resident_blocks(64, 0, 50) == (18, "registers")
    assert resident_blocks(32, 0, 16) == (32, "blocks")                 # the SM's own cap
    assert resident_blocks(256, 0, 16) == (8, "threads")
    # 201 registers: 6,656 per warp, 9 warps fit, so 4 blocks of 2 warps.
    assert resident_blocks(64, 24576, 201) == (4, "registers")
    assert occupancy(64, 16384, 50) == pytest.approx(13 * 64 / 2048)
    assert resident_blocks(1024, 0, 255) == (0, "registers")            # such a block does not fit at all


def test_occupancy_names_bad_input():
    with pytest.raises(ValueError, match="threads_per_block must be a positive int"):
        resident_blocks(0, 0, 32)
    with pytest.raises(ValueError, match="registers_per_thread"):
        resident_blocks(64, 0, 32.5)
    with pytest.raises(TypeError, match="gpu must be a GpuLimits"):
        resident_blocks(64, 0, 32, gpu={"sms": 132})


def test_h100_limits_agree_with_what_the_driver_reported():
    properties = {r["name"]: r["value"] for r in load_recording("day01_memory_hierarchy").rows
                  if r["kind"] == "property"}
    assert isinstance(H100, GpuLimits)
    assert H100.sms == properties["MULTIPROCESSOR_COUNT"]
    assert H100.shared_bytes_per_sm == properties["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"]
    assert H100.registers_per_sm == properties["MAX_REGISTERS_PER_MULTIPROCESSOR"]


# ----------------------------------------------------------------------------- live_else_recorded

@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    import course.records

    monkeypatch.setattr(course.records, "DATA_DIR", tmp_path)
    return tmp_path


def test_live_else_recorded_loads_on_the_simulator_and_never_runs(data_dir):
    rec = new_recording("day99_demo", device="Fake GPU", driver="fake 1.0")
    rec.add(rung="v1_naive", N=64, median_ms=1.0)
    rec.save()

    def run():
        raise AssertionError("measured on the simulator")

    got = live_else_recorded("day99_demo", run=run)
    assert got.device == "Fake GPU" and not got.live and got.rows == rec.rows
    assert live_else_recorded("day99_demo").rows == rec.rows


def test_live_else_recorded_says_what_is_missing(data_dir, capsys):
    assert live_else_recorded("day98_missing_timing", run=lambda: None) is None
    said = capsys.readouterr().out
    assert "No recording 'day98_missing_timing' is installed yet" in said
    assert "python -m course.record day98 --out DIR" in said
    assert live_else_recorded("day98_missing_timing_other_gpu") is None
    said = capsys.readouterr().out
    assert "made on a second GPU with `python -m course.record day98 --other-gpu --out DIR`" in said
    for suffix, flag in (("dram_bytes", "--ncu"), ("stall_reasons", "--ncu-stalls"), ("shared_memory", "--ncu-shared")):
        assert live_else_recorded(f"day98_{suffix}") is None
        assert f"made on a GPU with `python -m course.record day98 {flag} --out DIR`" in capsys.readouterr().out


def test_live_else_recorded_names_bad_input():
    with pytest.raises(ValueError, match="name must be letters"):
        live_else_recorded("../etc")
    with pytest.raises(TypeError, match="run must be a function"):
        live_else_recorded("day99_demo", run=3)


# ----------------------------------------------------------------------------- series of a traffic plot

def test_counted_series_counts_on_the_simulator_up_to_a_size():
    import numpy as np

    from course.present import counted_series
    from kernels import elementwise

    def inputs(n):
        return [np.ones(n, np.float32)]

    counted = counted_series(elementwise.copy_v1_guarded, [8, 16, 32], inputs, upto=16)
    assert counted == [8 * 4 * 2, 16 * 4 * 2, None]           # each element read once and written once
    with pytest.raises(TypeError, match="launch and inputs must be functions"):
        counted_series(elementwise.copy_v1_guarded, [8], [1.0])


def test_recorded_series_picks_a_label_per_size():
    from course.present import recorded_series

    first = new_recording("day99_bytes", device="Fake GPU", driver="fake 1.0")
    first.add(label="attention_v1_naive", N=64, dram_bytes=6400.0)
    first.add(label="attention_v2_fused_rows", N=64, dram_bytes=1.0)
    second = new_recording("day98_bytes", device="Fake GPU", driver="fake 1.0")
    second.add(label="attention_v1_naive", N=128, dram_bytes=12800.0)
    assert recorded_series([first, second], "attention_v1_naive", [32, 64, 128], per=64) == [None, 100.0, 200.0]
    assert recorded_series(None, "attention_v1_naive", [64]) == [None]
    with pytest.raises(ValueError, match="per must be a positive number"):
        recorded_series(first, "attention_v1_naive", [64], per=0)
