"""Day 10's lesson (lessons/day10_lesson_a_model_talks.ipynb) runs top to bottom on the simulator, and every number
its prose states is the one its run printed.

The lesson runs once (``test_lesson_figures.run_lesson``): as committed, with the recordings ``course/data`` ships,
then the cell that reads a recording again without them (it must say what is missing).
"""

import pathlib
import re

import pytest

from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSON = ROOT / "lessons" / "day10_lesson_a_model_talks.ipynb"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _table(shown: str, header: str) -> dict:
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header}"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The lesson as shipped, then its recording cells again with day 10's synthetic recordings (and none of the
    recordings of days 1 and 8 that section 6's bounds read)."""
    import day10_fake_recordings

    fake = tmp_path_factory.mktemp("fake")
    day10_fake_recordings.write(fake)
    return run_lesson(LESSON, fake_dir=fake)


def test_the_model_s_numbers_are_the_file_s(run):
    from inference import files, gguf
    from inference.config import ModelConfig

    shown = run.shipped_text
    f = gguf.read(files.model_path())
    c = ModelConfig.from_metadata(f.metadata)
    rows = _table(shown, "what | value")
    assert rows["blocks"] == ["30"] and rows["query heads / KV heads (group)"] == ["9 / 3 (3)"]
    step = _number(rows["bytes one decode step reads (every tensor once)"][0])
    assert step == sum(i.nbytes for i in f.tensors.values()) and round(step / 1e6) == 97      # the prose's 97 MB
    kv = _number(rows["key and value bytes one token adds (float32 cache)"][0])
    assert kv == 2 * c.layers * c.kv_heads * c.head_dim * 4 == 46_080
    assert re.search(r"holds [\d,]+ MB of keys and values in float32, ([\d.]+) times", shown)
    assert float(re.search(r"in float32, ([\d.]+) times the weights", shown).group(1)) > 1     # "outweighs"
    text = " ".join(c.source for c in run.shipped.cells if c.cell_type == "markdown")
    assert f"${2} \\cdot 30 \\cdot 3 \\cdot 64 \\cdot 4 = 46{{,}}080$" in text and "138{,}240" in text


def test_the_model_answers_and_rotating_halves_stops_it(run):
    shown = run.shipped_text
    assert re.search(r"'What is the capital of France\?' -> '.*Paris.*'", shown)
    found = re.search(r"next token, adjacent pairs: '(.*)'; halves: '(.*)'; the logits differ", shown)
    assert found.group(1) != found.group(2) and found.group(2) == "<|im_end|>"        # the model stops at once
    assert "decoded back: the same" in shown


def test_the_kernels_agree_with_numpy_and_the_launch_counts_hold(run):
    shown = run.shipped_text
    kernels, numpy_tokens = re.search(r"greedy tokens: kernels (\[.*?\]), NumPy (\[.*?\])", shown).groups()
    assert kernels == numpy_tokens
    worst, largest = (float(v) for v in re.search(r"differ by at most ([\d.e+-]+) \(their largest: ([\d.]+)\)",
                                                   shown).groups())
    assert worst < 1e-5 * largest * 10
    per_step, per_block = (int(v) for v in re.search(r"(\d+) per decode step \((\d+) per block, 3 outside them\)",
                                                     shown).groups())
    assert per_step == 3 + 2 * per_block
    fused_step, fused_block = (int(v) for v in re.search(r"fused \(KernelModel\(\.\.\., fused=True\), "
                                                         r"kernels.fused_llama\): (\d+) per decode step \((\d+) per "
                                                         r"block\)", shown).groups())
    assert fused_step == 3 + 2 * fused_block and (per_block, fused_block) == (17, 6)
    assert re.search(r"positions to compute: \[4\] \(the first block is request 1's", shown)
    both = re.search(r"one step for both requests, (\d+) kernels; against NumPy run alone on each: (.*)", shown)
    assert int(both.group(1)) == per_step                     # "launched as many kernels as a decode step for one"
    assert f"a decode step for one request launched {per_step}: as many" in shown
    assert all(float(v) < 1e-4 for v in both.group(2).split(", "))
    launches = int(re.search(r"its (\d+) launches at", shown).group(1))
    assert launches == 3 + 30 * per_block


def test_the_bounds_are_the_recordings_and_the_prose_says_what_they_show(run):
    from course.records import load_recording

    shown = run.shipped_text
    pitfalls, other = load_recording("day01_timing_pitfalls"), load_recording("day08_decode_timing_other_gpu")
    launch_ms = min(row["ms"] for row in pitfalls.where(launch_overhead="only"))
    rows = _table(shown, "what bounds a decode step")
    (bytes_row,) = [v for k, v in rows.items() if k.startswith("its 96.6 MB")]
    (launch_row,) = [v for k, v in rows.items() if "launches at" in k]
    assert _number(launch_row[0]) == pytest.approx(round(513 * launch_ms, 1), abs=0.051)
    assert _number(bytes_row[0]) == pytest.approx(96_576_768 / (other.ceilings["copy_gbps"] * 1e9) * 1e3, abs=5e-4)
    ratio = int(re.search(r"the launches cost (\d+) times the bytes", shown).group(1))
    assert 500 < ratio < 2000                                  # "about a thousand times larger"
    assert 10 < _number(bytes_row[0]) * 1e3 < 100              # "tens of microseconds"
    assert run.rerun == ['pitfalls = live_else_recorded("day01_timing_pitfalls")',
                         'decode = live_else_recorded("day10_decode_timing")',
                         "DECODE_GOAL_TPS, OVER_TRANSFORMERS_GOAL = 1000, 5     # batch-1 tokens per second, and times "
                         "transformers' rate"], run.rerun
    assert "the recordings day01_timing_pitfalls and day08_decode_timing_other_gpu are needed here" in run.fake_text


def test_the_conversation_remembers(run):
    shown = run.shipped_text
    assert re.search(r"> What is the capital of France\?\s+[^>]*Paris", shown)
    assert re.search(r"> And of Italy\?\s+[^>]*Rome", shown)


def test_the_server_s_steps_agree_with_its_sentence(run):
    """Section 5's serving loop: the step table's joins and leaves are what the sentence under it says, requests 2
    and 3 read the shared system message instead of computing it, and every block comes back."""
    shown = run.shipped_text
    steps = _table(shown, "step")
    joined = {int(step): int(cells[2]) for step, cells in steps.items()}
    left = {int(step): int(cells[3]) for step, cells in steps.items()}
    said = re.search(r"Requests 1 and 2 joined at step (\d+), request 3 at step (\d+), (.*?)\. Requests 2 and 3 read "
                     r"the first (\d+) and (\d+) positions", shown)
    assert said, shown
    first, third = int(said.group(1)), int(said.group(2))
    assert joined[first] == 2 and joined[third] == 1 and sum(joined.values()) == 3
    first_left = min(step for step, n in left.items() if n)
    assert (third == first_left + 1) == said.group(3).startswith("the step after")
    answers = _table(shown, "request")
    for request, shared in (("2", said.group(4)), ("3", said.group(5))):
        prompt, computed = int(answers[request][0]), int(answers[request][1])
        assert prompt - computed == int(shared) >= 16
    assert "Paris" in answers["1"][3]
    assert "every block is free again, 64 of 64" in shown


def test_the_decode_goal_is_judged_on_each_gpu_from_its_recording(run):
    """The goal (1,000 tokens a second, 5 times transformers) judged on each GPU's recording: the fakes take both
    sides of the first (met on "Fake GPU", not on "Fake GPU 2"); without the second GPU's recording the lesson says
    how to make it."""
    import day10_fake_recordings as fake

    from course.records import recorded_names

    text = run.fake_text
    assert (f"on the Fake GPU, the fastest engine (graphs) decodes {1e3 / fake.GRAPH_MS:,.0f} tokens per second: the "
            f"goal of 1,000 is met; {1e3 / fake.GRAPH_MS / fake.TRANSFORMERS_TPS:.1f} times transformers' "
            f"{fake.TRANSFORMERS_TPS:,.1f} on that GPU: the goal of 5 times is met") in text
    assert (f"on the Fake GPU 2, the fastest engine (graphs) decodes {1e3 / fake.OTHER_GRAPH_MS:,.0f} tokens per second: "
            f"the goal of 1,000 is not met; {1e3 / fake.OTHER_GRAPH_MS / fake.OTHER_TRANSFORMERS_TPS:.1f} times "
            "transformers'") in text
    missing = "No recording 'day10_decode_timing_other_gpu' is installed yet"     # live_else_recorded's words
    assert (missing in run.shipped_text) != ("day10_decode_timing_other_gpu" in recorded_names())


def test_the_recorded_steps_and_the_server_are_read_from_the_recordings(run):
    """Section 6's recorded table and sentences: what the recordings hold (the synthetic ones here, and the shipped
    ones once a GPU has made them; until then the shipped run says they are missing)."""
    import day10_fake_recordings as fake

    from course.records import load_recording, recorded_names

    shipped = {"day10_decode_timing", "day10_serving"} <= set(recorded_names())
    assert ("the recordings day10_decode_timing and day10_serving are needed here" in run.shipped_text) != shipped
    text = run.fake_text
    rows = _table(text, "engine")
    assert _number(rows["plain"][0]) == fake.KERNELS["plain"] and _number(rows["fused"][2]) == pytest.approx(
        1e3 / fake.STEP_MS["fused"], abs=0.5)
    said = re.search(r"the fused engine launches ([\d.]+) times fewer kernels and decodes ([\d.]+) times as fast; "
                     r"([\d.]+) times transformers' rate", text)
    assert said, text
    assert float(said.group(1)) == round(fake.KERNELS["plain"] / fake.KERNELS["fused"], 1)
    assert float(said.group(2)) == round(fake.STEP_MS["plain"] / fake.STEP_MS["fused"], 2)
    assert float(said.group(3)) == round(1e3 / fake.STEP_MS["fused"] / fake.TRANSFORMERS_TPS, 1)
    graphed = re.search(r"replayed as CUDA graphs, the fused step runs at ([\d,]+) tokens per second, ([\d.]+) times the "
                        r"fused engine's rate, ([\d,]+) times its bytes' time", text)
    assert graphed, text
    assert int(graphed.group(1).replace(",", "")) == round(1e3 / fake.GRAPH_MS)
    assert float(graphed.group(2)) == round(fake.STEP_MS["fused"] / fake.GRAPH_MS, 1)
    assert f"times its bytes' time; {1e3 / fake.GRAPH_MS / fake.TRANSFORMERS_TPS:.0f} times transformers' rate" in text
    for engine in ("plain", "fused"):         # the kernels alone, summed, against the step's wall time
        alone = sum(kernel for _, _, kernel in fake.LAUNCHERS[engine].values())
        line = re.search(rf"the {engine} engine's kernels alone take ([\d.]+) ms of the GPU's time a step, (\d+)% of "
                         rf"its ([\d.]+) ms: the rest is the host's", text)
        assert line, text
        assert (float(line.group(1)), int(line.group(2)), float(line.group(3))) == (
            round(alone, 2), round(100 * alone / fake.STEP_MS[engine]), fake.STEP_MS[engine])
    fused = fake.LAUNCHERS["fused"]
    replayed = re.search(r"a replayed step takes ([\d.]+) ms, (\d+)% of the fused engine's kernels timed one by one "
                         r"\(([\d.]+) ms\)", text)
    alone = sum(kernel for _, _, kernel in fused.values())
    assert replayed and (float(replayed.group(1)), float(replayed.group(3))) == (fake.GRAPH_MS, round(alone, 2))
    assert int(replayed.group(2)) == round(100 * fake.GRAPH_MS / alone)
    name, (calls, _, kernel) = max(fused.items(), key=lambda item: item[1][2])
    assert (f"the fused engine's launcher with the most GPU time a step: {name}, {calls} calls, "
            f"{1e3 * kernel / calls:.1f} µs each") in text
    untimed = "kernels were not timed alone in this recording"
    assert untimed not in text                # the fakes time every launcher alone
    if shipped:
        recorded = load_recording("day10_decode_timing").where(what="launcher")
        assert (untimed in run.shipped_text) == any("kernel_ms_per_step" not in r for r in recorded)
    served = re.search(r"64 requests at once: ([\d.]+) times the tokens per second of one, each waiting ([\d.]+) "
                       r"times as long", text)
    first_s, last_s = (32 * fake.STEP_MS["fused"] * (1 + n / 16) / 1e3 for n in (1, 64))
    assert float(served.group(1)) == round((32 * 64 / last_s) / (32 / first_s), 1)
    assert float(served.group(2)) == round((1 + 64 / 8) / (1 + 1 / 8), 1)

