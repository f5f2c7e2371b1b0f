"""course.plots: the figures carry the right labels, the recorded/live stamp and one colour per rung."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from course.plots import (STYLE, add_legend, plot_roofline, plot_timing, plot_traffic,  # noqa: E402
                          recording_stamp_of, rung_colour)
from course.records import Recording  # noqa: E402

SIZES = [128, 256, 512, 1024, 2048]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def recording(live=False) -> Recording:
    rec = Recording(name="day99_demo", device="NVIDIA H100 80GB HBM3", driver="570.86 (CUDA 12.8)",
                    versions={}, date="2025-11-22T10:00:00+00:00",
                    ceilings={"copy_gbps": 2900.0, "fp32_tflops": 51.0}, live=live)
    for n in SIZES:
        rec.add(rung="attention_v1_naive", N=n, d=64, median_ms=n * n * 1e-6, p10_ms=n * n * 0.9e-6,
                p90_ms=n * n * 1.1e-6, tflops=1 + n / 4000, gbps=300.0)
        rec.add(rung="attention_v4_flash", N=n, d=64, median_ms=n * n * 2e-7, tflops=5 + n / 500, gbps=900.0)
        rec.add(rung="torch_sdpa", N=n, d=64, median_ms=n * n * 1e-7, tflops=8 + n / 300, gbps=1200.0)
        rec.add(rung="attention_v4_flash", N=n, d=128, median_ms=1.0, tflops=2.0)
    return rec


def lines_by_label(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_timing_plot_of_a_recording_says_recorded():
    ax = plot_timing(recording(), y="tflops", where={"d": 64}, title="flash attention")
    assert ax.get_legend().get_title().get_text() == "recorded on NVIDIA H100 80GB HBM3 (2025-11-22)"
    assert ax.get_ylabel() == "TFLOP/s" and ax.get_xlabel() == "sequence length N"
    assert ax.get_title() == "flash attention"
    lines = lines_by_label(ax)
    assert set(lines) == {"attention_v1_naive", "attention_v4_flash", "torch_sdpa",
                          "fp32 matmul ceiling 51.0 TFLOP/s"}
    assert lines["torch_sdpa"].get_linestyle() == "--"
    assert lines["attention_v4_flash"].get_linestyle() == "-"
    assert list(lines["attention_v1_naive"].get_xdata()) == SIZES      # the d=128 rows are filtered out
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1].startswith("fp32 matmul ceiling")


def test_timing_plot_of_a_live_run_says_live():
    ax = plot_timing(recording(live=True), y="median_ms", where={"d": 64})
    assert ax.get_legend().get_title().get_text() == "live on NVIDIA H100 80GB HBM3"
    assert ax.get_yscale() == "log" and ax.get_ylabel().startswith("time per call")
    assert len(ax.collections) == 1      # the p10..p90 band of the only rung that has one


def test_timing_plot_rejects_missing_columns():
    with pytest.raises(ValueError, match="no rows of 'day99_demo' have both 'N' and 'watts'"):
        plot_timing(recording(), y="watts")
    with pytest.raises(TypeError, match="rec must be a Recording"):
        plot_timing({"rows": []})


def test_traffic_plot_sources_and_stamp():
    sizes = [64, 128, 256, 512]
    ax = plot_traffic(sizes, {
        "model: v1_naive": [8 * n * n for n in sizes],
        "counted: your kernel": [8 * 64 * 64, 8 * 128 * 128, None, None],
        "Nsight: v1_naive": [8.3 * n * n for n in sizes],
    }, recording=recording())
    lines = lines_by_label(ax)
    assert list(lines["counted: your kernel"].get_xdata()) == [64, 128]
    assert lines["counted: your kernel"].get_marker() == "o"
    assert lines["Nsight: v1_naive"].get_marker() == "s"
    assert lines["model: v1_naive"].get_color() == lines["Nsight: v1_naive"].get_color()
    assert to_hex(lines["counted: your kernel"].get_color()) == STYLE["yours"]
    assert ax.get_legend().get_title().get_text() == "Nsight recorded on NVIDIA H100 80GB HBM3 (2025-11-22)"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.yaxis.get_major_formatter()(2e6, 0) == "2 MB"


def test_traffic_plot_validates():
    with pytest.raises(ValueError, match="one value per size"):
        plot_traffic([1, 2], {"model: v1_naive": [1.0]})
    with pytest.raises(TypeError, match="sizes"):
        plot_traffic([], {"model: v1_naive": []})


def test_roofline():
    ax = plot_roofline([{"label": "v1_naive", "intensity": 2.0, "tflops": 1.5},
                        {"label": "torch_sdpa", "intensity": 60.0, "tflops": 30.0}], recording())
    lines = lines_by_label(ax)
    assert "roof: copy 2,900 GB/s, fp32 51.0 TFLOP/s" in lines
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)"
    assert ax.get_legend().get_title().get_text().startswith("recorded on")
    roof = lines["roof: copy 2,900 GB/s, fp32 51.0 TFLOP/s"]
    assert max(roof.get_ydata()) == pytest.approx(51.0)
    with pytest.raises(ValueError, match=r"ceilings\['fp32_tflops'\] must be a positive number"):
        plot_roofline([{"label": "a", "intensity": 1.0, "tflops": 1.0}], {"copy_gbps": 1000.0})
    with pytest.raises(ValueError, match=r"points\[0\]"):
        plot_roofline([{"label": "a", "intensity": 0, "tflops": 1.0}], recording())


def test_a_rung_keeps_its_colour_across_plots():
    timing = lines_by_label(plot_timing(recording(), where={"d": 64}))
    traffic = lines_by_label(plot_traffic([1, 2], {"model: v1_naive": [1.0, 2.0]}))
    roof = lines_by_label(plot_roofline([{"label": "v1_naive", "intensity": 1.0, "tflops": 1.0}],
                                        recording()))
    colour = timing["attention_v1_naive"].get_color()
    assert traffic["model: v1_naive"].get_color() == roof["v1_naive"].get_color() == colour
    assert rung_colour("v4_flash") != rung_colour("v1_naive") == rung_colour("gemm_v1_naive")
    assert rung_colour("torch_matmul") == STYLE["baseline"]["color"]
    assert rung_colour("my_extra_rung") == rung_colour("model: my_extra_rung")


def test_rates_start_at_zero_and_survive_a_log_scale():
    ax = plot_timing(recording(), y="tflops", where={"d": 64})
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    ax.set_yscale("log")                 # a lesson may switch afterwards: the floor must not stay at 0
    ax.figure.canvas.draw()
    low, high = ax.get_ylim()
    assert 0 < low < 1.0 and high > 51.0
    ax = plot_timing(recording(), y="tflops", where={"d": 64}, log_y=True)
    assert ax.get_yscale() == "log" and ax.get_ylim()[0] > 0
    assert plot_timing(recording(), y="median_ms", where={"d": 64}, log_y=False).get_yscale() == "linear"
    with pytest.raises(TypeError, match="log_y must be True, False or None"):
        plot_timing(recording(), log_y="yes")


def test_recorded_lines_carry_their_stamp_and_add_legend_keeps_it():
    rec = recording()
    ax = plot_timing(rec, y="tflops", where={"d": 64})
    assert {recording_stamp_of(line) for line in ax.get_lines()} == {rec.stamp}
    assert recording_stamp_of(plot_timing(recording(live=True), where={"d": 64}).get_lines()[0]) is None
    ax.plot([128, 2048], [1.0, 2.0], label="my extra line")
    legend = add_legend(ax, ncols=2)
    assert legend.get_title().get_text() == rec.stamp
    assert "my extra line" in [text.get_text() for text in legend.get_texts()]


def test_traffic_compulsory_bound_and_several_recordings():
    sizes = [64, 128]
    first, second = recording(), recording()
    second.date = "2025-12-01T10:00:00+00:00"
    ax = plot_traffic(sizes, {"Nsight: v1_naive": [1e6, 4e6], "Nsight: v2_fused_rows": [2e6, 3e6],
                              "compulsory: Q, K, V, O once": [1e5, 2e5], "compulsory: v1_naive": [5e5, 2e6]},
                      recording=[first, second])
    lines = lines_by_label(ax)
    assert lines["compulsory: Q, K, V, O once"].get_linestyle() == ":"
    assert lines["compulsory: Q, K, V, O once"].get_color() == STYLE["ceiling"]["color"]
    assert lines["compulsory: v1_naive"].get_color() == rung_colour("v1_naive")
    title = ax.get_legend().get_title().get_text()
    assert title == f"Nsight {first.stamp}; {second.stamp}"
    assert recording_stamp_of(lines["Nsight: v1_naive"]) in title
    assert recording_stamp_of(lines["compulsory: v1_naive"]) is None
    with pytest.raises(TypeError, match="recording must be a Recording, a list of them"):
        plot_traffic(sizes, {"model: v1_naive": [1.0, 2.0]}, recording=[first, "other"])
