"""course.records' lookups: the queries a lesson writes instead of list comprehensions over ``rec.rows``."""

import pytest

from course.records import Recording, by, distinct, group_by, load_recording, new_recording, one, where


def _recording() -> Recording:
    rec = Recording(name="day99_demo", device="Fake GPU", driver="fake 1.0", versions={},
                    date="2025-11-22T10:00:00+00:00")
    for n in (256, 1024):
        for causal in (False, True):
            rec.add(rung="attention_v4_flash", N=n, causal=causal, median_ms=n / 256 * (1.5 if causal else 2.0))
            rec.add(rung="torch_sdpa", N=n, causal=causal, median_ms=n / 1024)
    rec.add(rung="attention_v1_naive", N=256, median_ms=9.0)        # no causal column: the rung has no mask
    return rec


def test_where_keeps_the_rows_with_the_given_values_in_order():
    rec = _recording()
    rows = where(rec, rung="attention_v4_flash", causal=True)
    assert [(r["N"], r["median_ms"]) for r in rows] == [(256, 1.5), (1024, 6.0)]
    assert where(rec) == rec.rows and where(rec.rows, N=4096) == []
    assert rec.where(N=1024, causal=False) == where(rec, N=1024, causal=False)


def test_where_takes_any_of_several_values_and_a_test_of_the_value():
    rec = _recording()
    assert len(where(rec, rung=("attention_v4_flash", "attention_v1_naive"), N=256)) == 3
    assert len(where(rec, rung={"torch_sdpa"}, N=[256, 1024])) == 4
    assert [r["N"] for r in where(rec, rung="torch_sdpa", N=lambda n: n > 256)] == [1024, 1024]
    # a row without the column: matches None, never a test of the value
    assert where(rec, causal=None) == [rec.rows[-1]]
    assert where(rec, causal=lambda c: c is not True, rung="attention_v1_naive") == []


def test_where_reads_a_column_named_like_its_own_argument():
    rows = [{"rows": 4, "ms": 1.0}, {"rows": 8, "ms": 2.0}]      # day 3's softmax rows carry a "rows" column
    assert where(rows, rows=8) == [rows[1]]
    assert by(rows, "rows") == {4: rows[0], 8: rows[1]}


def test_one_finds_the_single_match_and_names_what_is_recorded_otherwise():
    rec = _recording()
    assert one(rec, rung="attention_v4_flash", N=1024, causal=True)["median_ms"] == 6.0
    assert rec.one(rung="attention_v1_naive") is rec.rows[-1]
    with pytest.raises(LookupError, match=r"no rows of 'day99_demo' matching .*'N': 4096.*'N': \['1024', '256'\]"):
        one(rec, rung="torch_sdpa", N=4096)
    with pytest.raises(LookupError, match="2 rows of 'day99_demo'"):
        one(rec, rung="torch_sdpa", N=256)


def test_by_indexes_the_matching_rows_and_refuses_a_key_two_rows_share():
    rec = _recording()
    ms = by(rec, "rung", N=256, causal=False)
    assert {rung: row["median_ms"] for rung, row in ms.items()} == {"attention_v4_flash": 2.0, "torch_sdpa": 0.25}
    grid = rec.by("rung", "N", "causal")
    assert list(grid)[:2] == [("attention_v4_flash", 256, False), ("torch_sdpa", 256, False)]
    assert grid[("attention_v1_naive", 256, None)]["median_ms"] == 9.0
    with pytest.raises(ValueError, match=r"two rows of 'day99_demo' matching \{'N': 256\} have \('rung',\)"):
        by(rec, "rung", N=256)
    with pytest.raises(TypeError, match="name the columns"):
        by(rec)


def test_group_by_and_distinct():
    rec = _recording()
    groups = group_by(rec, "causal", rung="attention_v4_flash")
    assert list(groups) == [False, True] and [r["N"] for r in groups[True]] == [256, 1024]
    assert list(rec.group_by("rung", "causal")) == [("attention_v4_flash", False), ("torch_sdpa", False),
                                                    ("attention_v4_flash", True), ("torch_sdpa", True),
                                                    ("attention_v1_naive", None)]
    assert distinct(rec, "N") == [256, 1024] and rec.distinct("causal") == [False, True]
    assert distinct(rec, "N", rung="attention_v1_naive") == [256]


def test_the_lookups_take_a_recording_or_rows_and_nothing_else():
    with pytest.raises(TypeError, match="a Recording or a list of row dicts"):
        where("day05_flash_timing", rung="torch_sdpa")
    with pytest.raises(TypeError, match="a Recording or a list of row dicts"):
        where([1, 2])


def test_a_name_no_row_has_and_nothing_knows_raises_naming_what_is_recorded():
    """An old short label (``v4_flash``) or a typo finds no row: a LookupError that names the label and the labels
    recorded, never an empty list a plot would silently draw nothing from."""
    rec = _recording()
    for lookup in (lambda: where(rec, rung="v4_flash"), lambda: rec.by("N", rung="v4_flash"),
                   lambda: rec.distinct("N", rung=("attention_v4_flash", "torch_sdpa_causal")),
                   lambda: one(rec, rung="v4_flash", N=256)):
        with pytest.raises(LookupError, match=r"no row of 'day99_demo' has rung = '(v4_flash|torch_sdpa_causal)'.*"
                                              r"\['attention_v1_naive', 'attention_v4_flash', 'torch_sdpa'\]"):
            lookup()
    with pytest.raises(LookupError, match=r"no row of these rows has label = 'v2_fused_rows'"):
        where([{"label": "attention_v2_fused_rows", "N": 4}], label="v2_fused_rows")


def test_a_rung_of_a_registry_or_of_a_shipped_recording_that_was_not_measured_matches_nothing():
    """A lesson may ask for a rung a recording does not have (a rung added after it was made): no rows, no error."""
    from course.records import known_names
    from kernels import gqa_attention

    rec = _recording()
    assert "gqa_decode_group" in known_names() and "gqa_decode_group" in gqa_attention.RUNGS
    assert where(rec, rung="gqa_decode_group") == [] and rec.distinct("N", rung="gqa_decode_group") == []
    assert where(rec, rung="torch_softmax") == []              # torch's call, recorded on day 3
    assert where(rec, rung=lambda rung: rung.startswith("v4")) == []       # a test of the value is never checked
    assert where(rec, kernel="no_such_kernel") == []           # nor a column other than rung and label


def test_every_rung_of_a_shipped_recording_is_one_query_away():
    """Each row of the day-8 decode sweep is one (rung, cache format, step) of the recording."""
    rec = load_recording("day08_decode_timing")
    index = rec.by("rung", "fmt", "num_seqs", "context")
    assert len(index) == len(rec.rows)
    row = rec.rows[0]
    assert one(rec, rung=row["rung"], fmt=row["fmt"], num_seqs=row["num_seqs"], context=row["context"]) is row


# --------------------------------------------------------------------------- the same queries in plots and tables


def _cached_steps() -> Recording:
    rec = Recording(name="day99_decode", device="Fake GPU", driver="fake 1.0", versions={},
                    date="2025-11-22T10:00:00+00:00")
    for context in (1024, 4096):
        for rung, fmt, ms in (("gqa_decode_page_runs", "float32", 4.0), ("gqa_decode_page_runs", "float16", 2.0),
                              ("gqa_decode_tensor_cores", "float16", 1.5), ("torch_sdpa_fp16", "float16", 1.8)):
            rec.add(rung=rung, fmt=fmt, context=context, kernel_ms=ms * context / 1024)
    return rec


def test_plot_timing_draws_a_curve_per_rung_and_format_and_keeps_any_of_several_values():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course.plots import plot_timing

    try:
        ax = plot_timing(_cached_steps(), x="context", y="kernel_ms", series=("rung", "fmt"))
        assert [line.get_label() for line in ax.get_lines()] == [
            "gqa_decode_page_runs, float32", "gqa_decode_page_runs, float16", "gqa_decode_tensor_cores, float16",
            "torch_sdpa_fp16, float16"]
        ax = plot_timing(_cached_steps(), x="context", y="kernel_ms", where={"fmt": ("float16",), "rung": {
            "gqa_decode_page_runs", "torch_sdpa_fp16"}})
        assert [line.get_label() for line in ax.get_lines()] == ["gqa_decode_page_runs", "torch_sdpa_fp16"]
        with pytest.raises(TypeError, match="series must be a column name"):
            plot_timing(_cached_steps(), x="context", y="kernel_ms", series=("rung", 3))
    finally:
        plt.close("all")


def test_recorded_series_tells_two_rows_of_a_label_apart_by_their_columns():
    from course.present import recorded_series

    rec = Recording(name="day99_dram_bytes", device="Fake GPU", driver="fake 1.0", versions={},
                    date="2025-11-22T10:00:00+00:00")
    for n in (256, 1024):
        for causal in (False, True):
            rec.add(label="attention_v4_flash", N=n, causal=causal, dram_bytes=n * (1 if causal else 2))
    assert recorded_series(rec, "attention_v4_flash", [256, 512, 1024], where={"causal": True}) == [256, None, 1024]
    assert recorded_series(rec, "attention_v4_flash", [1024], per=4, where={"causal": False}) == [512]
    with pytest.raises(ValueError, match="two rows labelled 'attention_v4_flash' at N = 256"):
        recorded_series(rec, "attention_v4_flash", [256])


def test_recorded_series_never_loses_a_curve_in_silence():
    """The day-5 exercise once asked for ``v4_flash`` after the recording named it ``attention_v4_flash``: its Nsight
    curve vanished. A label nothing knows, or a ``where`` none of the label's rows match, raises and says what there
    is; a registry rung the recordings lack gives None at every size (not measured)."""
    from course.present import recorded_series

    rec = Recording(name="day99_dram_bytes", device="Fake GPU", driver="fake 1.0", versions={},
                    date="2025-11-22T10:00:00+00:00")
    for causal in (False, True):
        rec.add(label="attention_v4_flash", N=256, causal=causal, dram_bytes=256.0)
    rec.add(label="attention_v1_naive", N=256, dram_bytes=512.0)
    with pytest.raises(LookupError, match=r"no row of 'day99_dram_bytes' has label = 'v4_flash'.*"
                                          r"\['attention_v1_naive', 'attention_v4_flash'\]"):
        recorded_series(rec, "v4_flash", [256], where={"causal": False})
    with pytest.raises(LookupError, match=r"labelled 'attention_v1_naive', but none matches where=\{'causal': False\}"
                                          r".*'causal': \['None'\]"):
        recorded_series([rec], "attention_v1_naive", [256], where={"causal": False})
    assert recorded_series(rec, "attention_v6_register_tiles", [256, 512]) == [None, None]
    assert recorded_series(rec, "attention_v4_flash", [256], where={"causal": False}) == [256.0]


def test_the_lessons_and_exercises_ask_the_shipped_recordings_for_names_they_hold():
    """The traffic plots of days 2, 3 and 5 (lessons and exercises) find their Nsight rows under the registry names."""
    from course.present import recorded_series

    bytes_of = {day: load_recording(f"{day}_dram_bytes") for day in ("day02", "day03", "day05")}
    for day, label in (("day02", "attention_v1_naive"), ("day03", "attention_v2_fused_rows"),
                       ("day05", "attention_v4_flash")):
        values = recorded_series(bytes_of[day], label, [256, 512, 1024, 2048, 4096], where={"causal": False})
        assert sum(value is not None for value in values) >= 4, (day, label, values)


def test_across_gpus_sets_the_same_steps_of_two_gpus_side_by_side():
    """across_gpus keeps the points both recordings hold for every step, fewest tokens first; per step the fraction
    of copy on each GPU (on the GPU's time alone) and how many times faster the second GPU ran it."""
    from course.records import across_gpus

    def rec(name, rows):
        r = new_recording(name, device="Fake GPU", ceilings={"copy_gbps": 1.0})
        for row in rows:
            r.add(**row)
        return r

    def row(rung, s, c, kernel_ms, fraction):
        return dict(rung=rung, num_seqs=s, context=c, kernel_ms=kernel_ms, median_ms=2 * kernel_ms,
                    fraction_of_copy=fraction)

    first = rec("day99_timing", [row("v1", 8, 1024, 2.0, 0.4), row("v1", 16, 32768, 8.0, 0.45),
                                 row("v1", 4, 64, 1.0, 0.1), row("v2", 8, 1024, 1.0, 0.3),
                                 row("v2", 16, 32768, 4.0, 0.5)])
    second = rec("day99_timing_other_gpu", [row("v1", 16, 32768, 4.0, 0.3), row("v1", 8, 1024, 1.0, 0.2),
                                            row("v2", 16, 32768, 2.0, 0.35), row("v2", 8, 1024, 0.5, 0.2),
                                            row("v2", 64, 64, 0.5, 0.2)])
    points, rows = across_gpus(first, second, [("first", {"rung": "v1"}), ("second", {"rung": "v2"})])
    assert points == [(8, 1024), (16, 32768)]                     # (4, 64) and (64, 64) are on one GPU only
    assert rows == [("first", [0.8, 0.9], [0.4, 0.6], [2.0, 2.0]), ("second", [0.6, 1.0], [0.4, 0.7], [2.0, 2.0])]
    assert across_gpus(first, second, []) == ([], [])
