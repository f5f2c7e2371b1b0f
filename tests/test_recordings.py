"""Every GPU recording in ``course/data/`` agrees with itself and with what the hardware allows.

The lessons teach from these numbers, so a recording whose numbers contradict each other teaches
something false: a cache slower than the memory behind it, a warm cache slower than a flushed one,
a copy probe far below the copy bandwidth measured in the same run. These tests read the JSON and
need no GPU. Each check is a function that raises ``AssertionError`` naming the recording, the rows
and the numbers; ``test_the_checks_catch_*`` plants each inversion in a correct recording and shows
that the check fails on it.
"""

import copy
import math

import pytest

from course.records import DATA_DIR, Recording, load_recording

RECORDINGS = sorted(path.stem for path in DATA_DIR.glob("*.json"))

NOISE = 0.05                 # run-to-run spread of a median, as a fraction: "beyond noise"
COPY_WITHIN_TORCH = 0.90     # a copy probe must reach 90% of torch's copy measured in the same run
L2_OVER_DRAM = 2.0           # L2 reads must come out at least this many times DRAM reads
# Keys that hold what was measured, not the conditions it was measured under.
MEASURED_KEYS = {"ms", "median_ms", "p10_ms", "p90_ms", "gbps", "tflops", "gflops", "useful_gbps",
                 "model_dram_gbps", "latency_ns", "cycles", "fraction_of_sdpa", "rel_err", "max_abs_err",
                 "wrong", "dram_bytes", "dram_read_bytes", "dram_write_bytes", "seed", "method", "level", "l2"}
TIME_KEYS = ("median_ms", "ms", "latency_ns")
# Keys that say how large the measured problem was; every timed row carries at least one.
SHAPE_KEYS = {"N", "bytes", "footprint_bytes", "elements", "rows", "cols", "M", "K", "context"}


def _where(rec: Recording, row: dict) -> str:
    label = {k: row[k] for k in ("kind", "level", "method", "rung", "label", "N", "stride") if k in row}
    return f"{rec.name}: row {label}"


def _time(row: dict):
    return next((row[k] for k in TIME_KEYS if k in row), None)


# ----------------------------------------------------------------------------------------------
# Checks for any recording
# ----------------------------------------------------------------------------------------------

def check_numbers(rec: Recording) -> None:
    """Rows exist; every number is finite; times are positive; rates and byte counts are not negative."""
    assert rec.rows, f"{rec.name}: no rows"
    for row in rec.rows:
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert math.isfinite(value), f"{_where(rec, row)}: {key} = {value}"
        for key in TIME_KEYS + ("p10_ms", "p90_ms"):
            if row.get(key) is not None:
                assert row[key] > 0, f"{_where(rec, row)}: {key} = {row[key]} is not a positive time"
        for key in ("gbps", "tflops", "gflops", "bytes", "dram_bytes", "useful_gbps"):
            if row.get(key) is not None:
                assert row[key] >= 0, f"{_where(rec, row)}: {key} = {row[key]} is negative"
    for name, value in rec.ceilings.items():
        assert value is None or value > 0, f"{rec.name}: ceiling {name} = {value}"


def check_percentiles(rec: Recording) -> None:
    """p10 <= median <= p90 wherever a row has them."""
    for row in rec.rows:
        median = row.get("median_ms", row.get("ms"))
        low, high = row.get("p10_ms"), row.get("p90_ms")
        if median is None or low is None or high is None:
            continue
        assert low <= median * (1 + 1e-9) and median <= high * (1 + 1e-9), \
            f"{_where(rec, row)}: p10 {low}, median {median}, p90 {high} out of order"


def check_rates(rec: Recording) -> None:
    """A rate is what the row's bytes or FLOPs give over the row's time (no stale or mixed-up column)."""
    for row in rec.rows:
        ms = row.get("median_ms", row.get("ms"))
        if ms is None:
            continue
        for amount, rate, scale in (("bytes", "gbps", 1e6), ("flops", "tflops", 1e9)):
            if row.get(amount) is not None and row.get(rate) is not None:
                expected = row[amount] / ms / scale
                assert math.isclose(row[rate], expected, rel_tol=1e-6, abs_tol=1e-12), \
                    f"{_where(rec, row)}: {rate} = {row[rate]:.6g}, but {amount} / time = {expected:.6g}"
        if {"dram_bytes", "dram_read_bytes", "dram_write_bytes"} <= row.keys():
            assert math.isclose(row["dram_bytes"], row["dram_read_bytes"] + row["dram_write_bytes"]), \
                f"{_where(rec, row)}: dram_bytes is not read + written"


def check_shapes(rec: Recording) -> None:
    """Every timed row says how large its problem was."""
    for row in rec.rows:
        if _time(row) is not None:
            assert SHAPE_KEYS & row.keys(), \
                f"{_where(rec, row)}: a timed row without its size (one of {sorted(SHAPE_KEYS)})"


def _l2_state(row: dict):
    """"warm" or "flushed" where the row controlled L2, else None (older rows say it in the method)."""
    if "l2" in row:
        return row["l2"]
    method = row.get("method", "")
    return "flushed" if "L2 flushed" in method else "warm" if "L2 warm" in method else None


# A kernel whose flushed time reads its bytes at under this fraction of the copy bandwidth does not wait on them, so
# where they come from cannot be what sets its time: its kernel_ms against warm_kernel_ms is not held to the check.
# Measured on an H100 (2026-12-07, two runs, the flushed and warm timings taken alternately): day 9's
# q4_1_gemv_warp_per_row at 8192 x 8192, at 0.05 of the copy bandwidth, ran 5.4% and 5.5% faster flushed than warm,
# where its Q8_0 and Q4_0 twins and its own 28672-row case came within 0.1%.
NOT_WAITING_ON_MEMORY = 0.1


def check_flushed_not_faster_than_warm(rec: Recording) -> None:
    """Of two rows measured alike except for L2, the flushed one is never faster beyond noise; nor is a row's
    ``kernel_ms`` (L2 flushed) faster than its ``warm_kernel_ms`` (the same timing, L2 warm), unless the row reads
    at under NOT_WAITING_ON_MEMORY of the copy bandwidth."""
    copy = rec.ceilings.get("copy_gbps")
    for row in rec.rows:
        if copy and row.get("kernel_gbps") is not None and row["kernel_gbps"] < NOT_WAITING_ON_MEMORY * copy:
            continue
        if row.get("kernel_ms") is not None and row.get("warm_kernel_ms") is not None:
            assert row["kernel_ms"] >= row["warm_kernel_ms"] * (1 - NOISE), (
                f"{_where(rec, row)}: kernel_ms with L2 flushed ({row['kernel_ms']:.4g} ms) is faster than "
                f"warm_kernel_ms ({row['warm_kernel_ms']:.4g} ms) by more than {NOISE:.0%}")
    groups = {}
    for row in rec.rows:
        state = _l2_state(row)
        if state not in ("warm", "flushed") or _time(row) is None:
            continue
        conditions = tuple(sorted((k, v) for k, v in row.items() if k not in MEASURED_KEYS))
        groups.setdefault(conditions, {}).setdefault(state, []).append(row)
    for pair in groups.values():
        for warm in pair.get("warm", []):
            for flushed in pair.get("flushed", []):
                assert _time(flushed) >= _time(warm) * (1 - NOISE), (
                    f"{rec.name}: L2 flushed ({_time(flushed):.4g} ms, {flushed.get('method', flushed.get('level'))}) "
                    f"is faster than L2 warm ({_time(warm):.4g} ms, {warm.get('method', warm.get('level'))}) "
                    f"by more than {NOISE:.0%}: something other than the cache differs between the two")


# ----------------------------------------------------------------------------------------------
# Checks for recordings of the memory hierarchy (rows of kind "bandwidth" and "latency")
# ----------------------------------------------------------------------------------------------

def _memory(row: dict) -> str:
    """shared, L1, L2 or DRAM (older rows say it at the start of ``level``)."""
    if "memory" in row:
        return row["memory"]
    level = row["level"]
    return "shared" if level.startswith("shared") else level.split()[0]


def _operation(row: dict) -> str:
    if "operation" in row:
        return row["operation"]
    return "copy" if "(copy" in row["level"] else "read"


def _bandwidths(rec: Recording) -> dict:
    """{(memory, operation, probe): row} of the bandwidth rows; probe is None for older rows."""
    return {(_memory(r), _operation(r), r.get("probe")): r for r in rec.rows if r.get("kind") == "bandwidth"}


def _read(rec: Recording, memory: str) -> dict:
    rows = [r for (m, op, _), r in _bandwidths(rec).items() if m == memory and op == "read"]
    assert len(rows) == 1, f"{rec.name}: expected one {memory} read bandwidth row, got {len(rows)}"
    return rows[0]


def _properties(rec: Recording) -> dict:
    return {r["name"]: r["value"] for r in rec.rows if r.get("kind") == "property"}


def check_bandwidth_order(rec: Recording) -> None:
    """shared > L2 > DRAM reads, L2 at least L2_OVER_DRAM times DRAM, and DRAM under its pin bandwidth."""
    shared, l2, dram = (_read(rec, m)["gbps"] for m in ("shared", "L2", "DRAM"))
    assert shared > l2 > dram, f"{rec.name}: read bandwidth shared {shared:,.0f} > L2 {l2:,.0f} > DRAM {dram:,.0f} GB/s fails"
    assert l2 >= L2_OVER_DRAM * dram, (
        f"{rec.name}: L2 reads at {l2:,.0f} GB/s are only {l2 / dram:.2f}x DRAM's {dram:,.0f} GB/s "
        f"(at least {L2_OVER_DRAM}x expected): does the L2 probe keep enough loads in flight on every SM?")
    props = _properties(rec)
    if {"MEMORY_CLOCK_RATE", "GLOBAL_MEMORY_BUS_WIDTH"} <= props.keys():
        # Double data rate: two transfers per memory clock (kHz) over the bus width (bits).
        pins = 2 * props["MEMORY_CLOCK_RATE"] * 1e3 * props["GLOBAL_MEMORY_BUS_WIDTH"] / 8 / 1e9
        for (memory, op, probe), row in _bandwidths(rec).items():
            if memory == "DRAM":
                assert row["gbps"] <= pins * (1 + NOISE), (
                    f"{_where(rec, row)}: {row['gbps']:,.0f} GB/s is above the DRAM pins' {pins:,.0f} GB/s: "
                    "were the bytes served from L2?")
    if {"MULTIPROCESSOR_COUNT", "CLOCK_RATE"} <= props.keys():
        # 32 banks of 4 bytes per SM per clock (CLOCK_RATE in kHz).
        banks = props["MULTIPROCESSOR_COUNT"] * 128 * props["CLOCK_RATE"] * 1e3 / 1e9
        assert shared <= banks * (1 + NOISE), f"{rec.name}: shared reads at {shared:,.0f} GB/s exceed the banks' {banks:,.0f}"


def check_copy_reaches_torch(rec: Recording) -> None:
    """The probe's DRAM copy is within 10% of torch's copy and of the copy ceiling, both from the same run."""
    copies = {probe: row for (memory, op, probe), row in _bandwidths(rec).items() if memory == "DRAM" and op == "copy"}
    torch_row = copies.pop("torch copy_", None)
    assert copies, f"{rec.name}: no DRAM copy probe row"
    yardsticks = {"the copy ceiling": rec.ceilings.get("copy_gbps"),
                  "torch copy_": torch_row["gbps"] if torch_row else None}
    for probe, row in copies.items():
        for name, reference in yardsticks.items():
            if reference:
                assert row["gbps"] >= COPY_WITHIN_TORCH * reference, (
                    f"{_where(rec, row)}: the copy probe moved {row['gbps']:,.0f} GB/s, "
                    f"{row['gbps'] / reference:.0%} of {name} ({reference:,.0f} GB/s) in the same run: "
                    "too few blocks or loads in flight")
    assert torch_row is not None, f"{rec.name}: no torch copy_ row measured in the same run as the copy probe"


def check_latency_order(rec: Recording) -> None:
    """Latency rises the other way: shared <= L1 < L2 < DRAM."""
    ns = {}
    for row in rec.rows:
        if row.get("kind") == "latency":
            ns[_memory(row)] = row["latency_ns"]
    assert {"shared", "L2", "DRAM"} <= ns.keys(), f"{rec.name}: latency rows {sorted(ns)}"
    order = [m for m in ("shared", "L1", "L2", "DRAM") if m in ns]
    for faster, slower in zip(order, order[1:]):
        assert ns[faster] < ns[slower] * (1 + NOISE if faster == "shared" else 1), (
            f"{rec.name}: latency of {faster} ({ns[faster]:.1f} ns) is not below {slower} ({ns[slower]:.1f} ns)")


def check_footprints(rec: Recording) -> None:
    """The L2 probe's footprint fits well inside L2, the DRAM probes' far outside it."""
    l2_size = _properties(rec).get("L2_CACHE_SIZE")
    if not l2_size:
        return
    for (memory, op, probe), row in _bandwidths(rec).items():
        footprint = row.get("footprint_bytes")
        assert footprint is not None, f"{_where(rec, row)}: no footprint_bytes"
        if memory == "L2":
            assert footprint <= l2_size / 4, f"{_where(rec, row)}: {footprint:,} bytes do not fit well in L2"
        if memory == "DRAM":
            assert footprint >= 4 * l2_size, f"{_where(rec, row)}: {footprint:,} bytes are not far beyond L2"


GENERAL_CHECKS = (check_numbers, check_percentiles, check_rates, check_shapes, check_flushed_not_faster_than_warm)
HIERARCHY_CHECKS = (check_bandwidth_order, check_copy_reaches_torch, check_latency_order, check_footprints)
HIERARCHY_RECORDINGS = [name for name in RECORDINGS
                        if any(r.get("kind") == "bandwidth" for r in load_recording(name).rows)]


# ----------------------------------------------------------------------------------------------
# The tests
# ----------------------------------------------------------------------------------------------

def test_there_are_recordings():
    assert "day01_memory_hierarchy" in RECORDINGS and "day01_memory_hierarchy" in HIERARCHY_RECORDINGS


@pytest.mark.parametrize("check", GENERAL_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", RECORDINGS)
def test_every_recording(name, check):
    check(load_recording(name))


@pytest.mark.parametrize("check", HIERARCHY_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", HIERARCHY_RECORDINGS)
def test_memory_hierarchy_recording(name, check):
    check(load_recording(name))


def _planted(rec: Recording, edit) -> Recording:
    wrong = copy.deepcopy(rec)
    edit(wrong)
    return wrong


def _set_gbps(rec: Recording, memory: str, operation: str, gbps: float, probe=None) -> None:
    for row in rec.rows:
        if row.get("kind") == "bandwidth" and _memory(row) == memory and _operation(row) == operation \
                and (probe is None or row.get("probe") == probe):
            row["gbps"] = gbps
            row["median_ms"] = row["bytes"] / gbps / 1e6
            row["p10_ms"], row["p90_ms"] = 0.99 * row["median_ms"], 1.01 * row["median_ms"]


def _copy_probe(rec: Recording) -> str:
    return next(r["probe"] for r in rec.rows if r.get("kind") == "bandwidth" and _memory(r) == "DRAM"
                and _operation(r) == "copy" and r.get("probe") != "torch copy_")


def _row(rec: Recording, kind: str, memory: str) -> dict:
    return next(row for row in rec.rows if row.get("kind") == kind and _memory(row) == memory)


# The inversions of the first H100 recording of day 1, and others, planted in the current one:
# {what: (check, edit, words of the message that must name it)}.
PLANTED = {
    "copy probe at 57% of torch's copy": (check_copy_reaches_torch,
                                          lambda r: _set_gbps(r, "DRAM", "copy", 1688.0, _copy_probe(r)), "57%"),
    "no torch copy in the same run": (check_copy_reaches_torch, lambda r: r.rows.remove(next(
        row for row in r.rows if row.get("probe") == "torch copy_")), "no torch copy_ row"),
    "L2 barely above DRAM": (check_bandwidth_order,
                             lambda r: _set_gbps(r, "L2", "read", 1.07 * _read(r, "DRAM")["gbps"]), "only 1.07x DRAM"),
    "L2 below DRAM": (check_bandwidth_order, lambda r: _set_gbps(r, "L2", "read", 0.9 * _read(r, "DRAM")["gbps"]),
                      "read bandwidth shared"),
    "shared below L2": (check_bandwidth_order, lambda r: _set_gbps(r, "shared", "read", 0.9 * _read(r, "L2")["gbps"]),
                        "read bandwidth shared"),
    "DRAM above its pins": (check_bandwidth_order, lambda r: _set_gbps(r, "DRAM", "read", 3600.0),
                            "above the DRAM pins"),
    "L2 latency below L1": (check_latency_order, lambda r: _row(r, "latency", "L2").update(latency_ns=10.0),
                            "latency of L1"),
    "DRAM latency below L2": (check_latency_order, lambda r: _row(r, "latency", "DRAM").update(latency_ns=100.0),
                              "latency of L2"),
    "L2 footprint larger than L2": (check_footprints,
                                    lambda r: _row(r, "bandwidth", "L2").update(footprint_bytes=64 << 20),
                                    "do not fit well in L2"),
    "gbps that does not match bytes / time": (check_rates, lambda r: _row(r, "bandwidth", "L2").update(gbps=1.0),
                                              "but bytes / time"),
    "a timed row without its size": (check_shapes, lambda r: [_row(r, "bandwidth", "L2").pop(key)
                                                              for key in ("footprint_bytes", "bytes")],
                                     "a timed row without its size"),
}


@pytest.mark.parametrize("inversion", PLANTED)
def test_the_checks_catch_hierarchy_inversions(inversion):
    check, edit, message = PLANTED[inversion]
    rec = load_recording("day01_memory_hierarchy")
    check(rec)                                   # passes as recorded
    with pytest.raises(AssertionError, match=message):
        check(_planted(rec, edit))


def test_the_checks_catch_a_warm_cache_slower_than_a_flushed_one():
    rec = load_recording("day01_timing_pitfalls")
    check_flushed_not_faster_than_warm(rec)
    flushed = [r for r in rec.rows if _l2_state(r) == "flushed"]
    assert flushed, "the pitfalls recording has no flushed row to compare"

    def slow_warm(r):
        # The first recording timed the warm run with the launch overhead inside, the flushed one without.
        for row in r.rows:
            partner = next((f for f in flushed if f["N"] == row["N"]), None)
            if _l2_state(row) == "warm" and partner and row.get("launch_overhead") == partner.get("launch_overhead") \
                    and row.get("repeats") == partner.get("repeats"):
                row["ms"] = 1.7 * partner["ms"]
    with pytest.raises(AssertionError, match="faster than L2 warm"):
        check_flushed_not_faster_than_warm(_planted(rec, slow_warm))


def test_the_checks_catch_a_warm_kernel_time_slower_than_the_flushed_one():
    """A row that times its kernel with L2 flushed and warm (``Sweep.warm_time``): warm is never the slower."""
    rec = Recording(name="day99_gemv_timing", device="a GPU", driver="", versions={}, date="",
                    rows=[{"rung": "v1", "N": 8, "kernel_ms": 1.0, "warm_kernel_ms": 0.5}])
    check_flushed_not_faster_than_warm(rec)
    rec.rows[0]["warm_kernel_ms"] = 1.5
    with pytest.raises(AssertionError, match="faster than warm_kernel_ms"):
        check_flushed_not_faster_than_warm(rec)
    # with a copy bandwidth and the row's rate: held to the check at a tenth of the copy bandwidth, not below it
    rec.ceilings = {"copy_gbps": 1000.0}
    rec.rows[0]["kernel_gbps"] = 100.0
    with pytest.raises(AssertionError, match="faster than warm_kernel_ms"):
        check_flushed_not_faster_than_warm(rec)
    rec.rows[0]["kernel_gbps"] = 99.0
    check_flushed_not_faster_than_warm(rec)


def test_the_checks_catch_percentiles_out_of_order():
    rec = load_recording("day01_elementwise_timing")
    with pytest.raises(AssertionError, match="out of order"):
        check_percentiles(_planted(rec, lambda r: r.rows[0].update(p10_ms=2 * r.rows[0]["median_ms"])))


# ----------------------------------------------------------------------------------------------
# One name per rung: the recordings of days 2, 3 and 5 to 9 name what they measured as the registries do
# ----------------------------------------------------------------------------------------------

DAYS_NAMED_BY_REGISTRY = ("day02", "day03", "day05", "day06", "day07", "day08", "day09")
# What the recorders measure that is no rung of a ladder: torch's calls, and helpers checked on their own.
NOT_RUNGS = {"kv_cache_write", "fp8_quantize"}


def _ladders() -> tuple:
    from kernels import (attention, flash_attention, gqa_attention, low_precision_attention, paged_attention,
                         quantized_gemm, quantized_gemv, quantized_gemv_persistent, quantized_gemv_prequantized,
                         quantized_gemv_repacked, quantized_gemv_wide, softmax,
                         tensor_core_gemm)

    return (attention, softmax, flash_attention, paged_attention, gqa_attention, low_precision_attention, quantized_gemv,
            quantized_gemv_repacked, quantized_gemv_wide, quantized_gemv_persistent, quantized_gemv_prequantized,
            quantized_gemm, tensor_core_gemm)


def _registry_names() -> set:
    return {name for module in _ladders() for name in module.RUNGS}


@pytest.mark.parametrize("name", [n for n in RECORDINGS if n[:5] in DAYS_NAMED_BY_REGISTRY])
def test_rows_name_each_rung_by_its_registry_name(name):
    """Each row's ``rung`` (``label`` for Nsight's rows) is a key of a kernel module's ``RUNGS``, or torch's; what
    tells two rows of a rung apart (mask, cache format, group) is a column, never part of the name. A row of no
    rung (one kernel of day 2's pipeline timed alone) names a kernel of those modules in ``kernel``."""
    known = _registry_names()
    for row in load_recording(name).rows:
        rung = row.get("rung", row.get("label"))
        if rung is None:
            kernel = row.get("kernel")
            assert isinstance(kernel, str) and any(hasattr(module, kernel) for module in _ladders()), (
                f"{name}: a row names neither a rung nor a kernel of kernels/: {row}")
            continue
        assert rung in known or rung in NOT_RUNGS or rung.startswith("torch_"), f"{name}: {rung!r} is no rung's name"
