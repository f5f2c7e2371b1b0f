"""Day 9 lesson: its numbers are computed, its prose holds, it shows no kernel of the ladder, and its figures read.

The lesson runs once (``test_lesson_figures.run_lesson``) in a fresh kernel on the simulator: as committed, with
the recordings ``course/data`` ships, every figure checked; then the one cell that reads a recording (the
roofline, which takes its ceilings from day 8's ``day08_matmul_roofs``) runs again against a synthetic recording
of another GPU. No day-9 kernel is timed yet: the lesson's numbers are bytes, errors and counts, computed from the
shapes, the formats and random data, and each sentence about them is checked here against what the run printed
(the bounds on random data held on 40 draws and more, with room). The published model shapes are checked against
the parameter counts the model cards give. The figures are drawn again and held to legible text, no text over
text or over a curve, and a few series per axes (day 8's ``readability_problems``).
"""

import inspect
import math
import pathlib
import re
from fractions import Fraction

import nbformat

from course.models import quantized as model
from course.records import load_recording, new_recording, recorded_names
from kernels import quantized_gemm, quantized_gemv
from test_day08_lesson import advice_problems, readability_problems
from test_lesson_figures import run_lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY = "day09_quantized_gemv"
LESSON = ROOT / "lessons" / "day09_lesson_quantized_gemv.ipynb"
ROOFS = "day08_matmul_roofs"
SOLUTION = ROOT / "solutions" / DAY / f"{DAY}.ipynb"


def _lesson():
    return nbformat.read(LESSON, as_version=4)


def _cells() -> dict:
    return {cell.id: cell.source for cell in _lesson().cells}


def _markdown() -> str:
    return "\n".join(c.source for c in _lesson().cells if c.cell_type == "markdown")


# ----------------------------------------------------------------------------- what the lesson may show

def _ladder_kernels() -> list:
    """Every kernel and device function of ``kernels.quantized_gemv`` (the exercise asks for some of them), and any
    function that builds one."""
    return [value for name, value in vars(quantized_gemv).items()
            if not name.startswith("__") and (hasattr(value, "py_func") or name.startswith("_build"))]


def _kernel_lines() -> list[str]:
    lines = set()
    for function in _ladder_kernels():
        source = inspect.getsource(getattr(function, "py_func", function))
        lines |= {line.split("  #")[0].strip() for line in source.splitlines()}
    return sorted(line for line in lines if len(line) > 12 and not line.startswith(("def ", '"""', "#", "@")))


def test_lesson_shows_no_kernel_of_the_ladder():
    """The ladder's kernels are the exercise's: the lesson runs them through ``RUNGS``, never shows their source, nor
    a line of the exercise's solutions."""
    from grader import markers

    code = "\n".join(c.source for c in _lesson().cells if c.cell_type == "code")
    assert "_kernel" not in code and "kernels.quantized_gemv import RUNGS" in code
    lines = _kernel_lines()
    assert len(lines) > 30, "the ladder's kernels should have lines of their own"
    if SOLUTION.exists():
        lines += [line for line in markers.secret_lines(nbformat.read(SOLUTION, as_version=4), "solution")
                  if len(line) > 12 and not line.startswith(("def ", '"""', "#"))]
    text = "\n".join(c.source for c in _lesson().cells)
    leaked = [line for line in lines if line in text]
    assert not leaked, f"the lesson shows lines of the ladder's kernels: {leaked[:3]}"


def test_no_time_or_rate_is_typed():
    """No day-9 kernel has been timed: no time, rate or speed-up appears in the prose, only in computed outputs."""
    measured = re.compile(r"\d\s*(ms|µs|us|GB/s|TB/s|TFLOP/s)\b|\d\s*%(?!\s*\d)|\d(\.\d+)?\s*(times|x) (faster|as fast)")
    for cell in _lesson().cells:
        if cell.cell_type == "markdown":
            found = measured.search(cell.source)
            assert not found, f"cell {cell.id} types a measured number: {found[0]!r}"


def test_the_exercise_is_announced_not_assumed():
    """The lesson names the exercise's folder; until it exists, it must not tell students to open it."""
    text = _markdown()
    assert f"exercises/{DAY}/" in text
    if not (ROOT / "exercises" / DAY).exists():
        assert "Open `exercises/" not in text


def test_the_names_the_lesson_gives_exist():
    assert not advice_problems(_markdown())


def test_the_prose_states_the_code_s_constants():
    """Sizes and settings the prose repeats from the code that uses them."""
    cells = _cells()

    def constant(cell, pattern):
        found = re.search(pattern, cells[cell], re.M)
        assert found, (cell, pattern)
        return found.groups()

    n, k = map(int, constant("error-groups", r"^N, K = (\d+), (\d+)$"))
    assert f"{n} rows of {k:,} weights" in cells["error-md"]
    (dof,) = constant("error-groups", r"standard_t\((\d+),")
    (channels,) = constant("error-groups", r"rng\.choice\(K, (\d+), replace=False\)\] \*= (?:\d+)")
    (factor,) = constant("error-groups", r"replace=False\)\] \*= (\d+)")
    assert f"Student's t with {dof} degrees of freedom" in cells["error-md"]
    assert f"with {channels} input channels (columns of W) {factor} times larger" in cells["error-md"]
    (size,) = constant("awq-gptq", r"^K = N = (\d+)$")
    tokens, group = constant("awq-gptq", r"^TOKENS, AWQ_GROUP, DAMPING = (\d+), (\d+), ")
    loud, louder = constant("awq-gptq", r"loud\[rng\.choice\(K, (\d+), replace=False\)\] = (\d+)\.0")
    text = " ".join(cells["awq-gptq-md"].split())
    assert f"{size} by {size}; {int(tokens):,} calibration tokens" in text and f"{int(tokens):,} other tokens" in text
    assert f"with {loud} large channels**, {louder} times the others" in text and f"a scale per {group}" in text
    (calibration,) = constant("static-dynamic", r"calibration = rng\.standard_normal\(\((\d+), K\)\)")
    assert f"{calibration} calibration tokens" in cells["awq-gptq-reading"]
    rows, weights = map(int, constant("ladder-run", r"^N, K = (\d+), (\d+)$"))
    assert f"a W of {rows} rows of {weights:,} weights ({weights // model.QK} blocks: one per lane)" in \
        " ".join(cells["ladder-reading"].split())
    assert weights // model.QK == 32                 # one block per lane of the warp
    from kernels import quantized_gemv_wide

    wide_words = f"each block of threads ({quantized_gemv_wide.WIDE_WARPS} warps, {model.WIDE_ROWS_PER_BLOCK} rows)"
    assert wide_words in " ".join(cells["wide-md"].split())
    assert f"each read serves {quantized_gemv_wide.WIDE_ROWS_PER_WARP} rows" in " ".join(cells["wide-md"].split())
    (group_int4,) = constant("bytes-per-token", r"^GROUP = (\d+)")
    assert f"an fp16 scale per {group_int4}" in cells["formats-md"] and 576 % int(group_int4)   # SmolLM2's short groups


def test_the_formats_are_described_as_the_references_store_them():
    """The byte counts and codes the prose gives for each GGUF format, against the references and the byte model."""
    text = " ".join(_cells()["formats-bytes-md"].split())
    for fmt, header in (("Q8_0", "an fp16 scale $d$, then 32 int8 codes"),
                        ("Q4_0", "an fp16 scale $d$, then 16 bytes"),
                        ("Q4_1", "an fp16 scale $d$ and an fp16 minimum $m$")):
        assert f"**{fmt}**, {model.BLOCK_BYTES[fmt.lower()]} bytes: {header}" in text, fmt
    assert model.QK == 32 and "blocks of 32 consecutive weights" in text


# ----------------------------------------------------------------------------- running the lesson

def fake_roofs():
    """``day08_matmul_roofs`` of a slower, smaller GPU: other ceilings, so every number of the roofline cell moves."""
    rec = new_recording(ROOFS, ceilings={"copy_gbps": 1200.0, "fp32_tflops": 30.0}, device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    n = 8192
    for rung, fmt, size, tflops in (("torch_matmul_fp32", "float32", 4, 30.0), ("torch_matmul_fp16", "float16", 2, 250.0),
                                    ("torch_matmul_bf16", "bfloat16", 2, 260.0)):
        median = 2 * n ** 3 / (tflops * 1e12) * 1e3
        rec.add(rung=rung, M=n, N=n, K=n, median_ms=median, p10_ms=0.99 * median, p90_ms=1.02 * median, repeat=50,
                gbps=3 * n * n * size / median / 1e6, tflops=tflops, fmt=fmt)
    return rec


def test_the_fake_has_the_real_recording_s_columns():
    if ROOFS in recorded_names():
        real, fake = load_recording(ROOFS), fake_roofs()
        assert {k for r in real.rows for k in r} <= {k for r in fake.rows for k in r}
        assert set(real.ceilings) <= set(fake.ceilings)


def test_the_gemv_fakes_have_the_real_recordings_columns():
    import day09_fake_recordings as fake

    for name, made in (("day09_gemv_timing", fake.gemv_timing), ("day09_batched_timing", fake.batched_timing)):
        if name in recorded_names():
            real, synthetic = load_recording(name), made()
            assert {k for r in real.rows for k in r} <= {k for r in synthetic.rows for k in r}, name


ALWAYS = ("the published shapes, and what they add up to", "the bytes one decode step reads, weights only",
          "decode agrees bit for bit with the references", "one Q4_0 block, its 18 bytes:",
          "the identity times x[i] = i must give y[n] = n exactly", "the figure in numbers",
          "on the tokens kept apart from calibration", "int8 activations (seed")


def test_lesson_runs_and_its_prose_holds(tmp_path):
    import day09_fake_recordings

    fake_roofs().save(tmp_path / f"{ROOFS}.json")
    fake = load_recording(tmp_path / f"{ROOFS}.json")          # as the lesson reads it: "recorded on Fake GPU"
    day09_fake_recordings.write(tmp_path)
    run = run_lesson(LESSON, fake_dir=tmp_path)
    shipped = run.shipped_text
    for line in ALWAYS:
        assert line in shipped, f"the lesson no longer prints {line!r}"
    assert run.rerun == [f'roofs = live_else_recorded("{ROOFS}")',
                         'hierarchy = live_else_recorded("day01_memory_hierarchy")',
                         'gemm_timing = live_else_recorded("day09_gemm_timing")',
                         'gemv_timing = live_else_recorded("day09_gemv_timing")',
                         'other_gemv = live_else_recorded("day09_gemv_timing_other_gpu")',
                         'nsight = live_else_recorded("day09_dram_bytes")'], run.rerun
    assert "the recording day09_gemm_timing is missing" in run.fake_text
    assert "the day 1 recording day01_memory_hierarchy is missing" in run.fake_text
    model_claims(shipped)
    byte_claims(shipped)
    if ROOFS in recorded_names():
        roofline_claims(shipped, load_recording(ROOFS))
    roofline_claims(run.fake_text, fake)
    assert "recorded on Fake GPU" in run.fake_text
    format_claims(shipped)
    nibble_claims(shipped)
    error_claims(shipped)
    layer_claims(shipped)
    activation_claims(shipped)
    real_model_claims(shipped)
    ladder_claims(shipped)
    beyond_claims(shipped)
    for claims, name, also in ((gemv_timing_claims, "day09_gemv_timing", "day09_batched_timing"),
                               (other_gpu_claims, "day09_gemv_timing_other_gpu", "day09_gemv_timing")):
        if name in recorded_names():            # the shipped recording, else the lesson says it is missing
            claims(shipped, load_recording(name), load_recording(also))
        else:
            assert f"the recording {name} is missing" in shipped
        claims(run.fake_text, load_recording(tmp_path / f"{name}.json"), load_recording(tmp_path / f"{also}.json"))
    nsight_claims(shipped)


def other_gpu_claims(shown: str, other, first) -> None:
    """The second GPU's table is its recording's, its goal verdicts are that recording's, and each kernel's speed-up
    from the first GPU to the second is the ratio of their recorded kernel times."""
    copy = other.ceilings["copy_gbps"]
    tables = _tables(shown, "rung | format | N × K | kernel µs")
    assert len(tables) == 2, len(tables)
    rows = tables[1]
    assert [(row[0].strip("`"), row[3], row[4]) for row in rows] == [
        (r["rung"], f"{r['kernel_ms'] * 1e3:,.1f}", f"{r['kernel_gbps'] / copy:.2f}") for r in other.rows]
    goals = {"4-bit of copy": 0.8, "Q8_0 of copy": 0.85}
    for n, k in sorted({(r["N"], r["K"]) for r in other.rows}):
        line = re.search(rf"^on {re.escape(other.device)}, {n:,} × {k:,}, the best rung for each goal: (.*)$", shown,
                         re.M)
        assert line, (n, k)
        for name, formats in (("4-bit of copy", ("q4_0", "q4_1")), ("Q8_0 of copy", ("q8_0",))):
            best = max((r for r in other.rows if (r["N"], r["K"]) == (n, k) and r["fmt"] in formats
                        and not r["rung"].startswith("torch")), key=lambda r: r["kernel_gbps"])
            said = re.search(rf"{name} ([\d.]+) \((\w+); goal {goals[name]}: (met|not met)\)", line.group(1))
            assert said and said.group(2) == best["rung"] and float(said.group(1)) == round(best["kernel_gbps"] / copy, 2)
            assert (said.group(3) == "met") == (best["kernel_gbps"] / copy >= goals[name])
        line = re.search(rf"^{n:,} × {k:,}, each kernel's speed on {re.escape(other.device)} over "
                         rf"{re.escape(first.device)} \(copy bandwidth ([\d.]+) times\): (.*)$", shown, re.M)
        assert line and float(line.group(1)) == round(copy / first.ceilings["copy_gbps"], 2), (n, k)
        before = {r["rung"]: r["kernel_ms"] for r in first.rows if (r["N"], r["K"]) == (n, k)}
        assert line.group(2) == ", ".join(f"{r['rung']} {before[r['rung']] / r['kernel_ms']:.2f}" for r in other.rows
                                          if (r["N"], r["K"]) == (n, k) and r["rung"] in before)


def nsight_claims(shown: str) -> None:
    """The Nsight tables are the recordings', and their sentences say what the recordings hold: how close the DRAM
    reads come to the compulsory bytes, and how many kernels wait mostly on global loads."""
    from course.models import quantized as model

    names = recorded_names()
    if "day09_dram_bytes" not in names:
        assert "the recording day09_dram_bytes is missing" in shown
    else:
        dram = load_recording("day09_dram_bytes")
        rows = _table(shown, "rung | N × K | DRAM read")
        assert [row[0].strip("`") for row in rows] == [r["label"] for r in dram.rows]
        worst = max(abs(r["dram_read_bytes"] / model.compulsory_bytes(r["label"], r["N"], r["K"]) - 1)
                    for r in dram.rows)
        assert f"its DRAM reads are within {worst:.2%} of the compulsory bytes" in shown
    if "day09_stall_reasons" not in names:
        assert "the recording day09_stall_reasons is missing" in shown
    else:
        stalls = load_recording("day09_stall_reasons")
        rows = _table(shown, "rung | kernel | warp cycles an issue")
        assert len(rows) == len(stalls.rows)
        waiting = 0
        for row, r in zip(rows, stalls.rows):
            reasons = {k: v for k, v in r.items() if k.startswith("stall_") and k != "stall_selected"}
            top = max(reasons, key=reasons.get)
            waiting += top == "stall_long_scoreboard"
            assert row[2] == f"{r['cycles_per_issue']:.1f}" and row[3].startswith(top[len("stall_"):] + " (")
        assert f"{waiting} of the {len(stalls.rows)} kernels spend most of their stalled cycles waiting" in shown


def gemv_timing_claims(shown: str, gemv, batched) -> None:
    """The GEMV table is the recording's, row by row; each shape's sentence names its fastest 4-bit and Q8_0 rungs
    and says of each goal what the recording says; the batched sentence splits T as the recording does."""
    copy = gemv.ceilings["copy_gbps"]
    rows = _table(shown, "rung | format | N × K | kernel µs")
    assert len(rows) == len(gemv.rows)
    for row, r in zip(rows, gemv.rows):
        assert row[0].strip("`") == r["rung"] and row[3] == f"{r['kernel_ms'] * 1e3:,.1f}"
        assert row[4] == f"{r['kernel_gbps'] / copy:.2f}"
    from kernels import quantized_gemv_prequantized

    unrecorded = [name for name in quantized_gemv_prequantized.RUNGS if not gemv.where(rung=name)]
    line = re.search(r"^not in this recording \(it was made before they existed\): (.*)$", shown, re.M)
    assert (line.group(1).split(", ") if line else []) == unrecorded
    memset = "this recording flushed L2 by writing a buffer (a memset)"
    assert (memset in shown) == ("by reading" not in gemv.notes)
    goals = {"4-bit of copy": 0.8, "4-bit over fp16": 3.0, "4-bit over int4": 1.7, "Q8_0 of copy": 0.85}
    for n, k in sorted({(r["N"], r["K"]) for r in gemv.rows}):
        line = re.search(rf"^{n:,} × {k:,}, the best rung for each goal: (.*)$", shown, re.M)
        assert line, (n, k)
        ours = [r for r in gemv.rows if (r["N"], r["K"]) == (n, k) and not r["rung"].startswith("torch")]
        four = [r for r in ours if r["fmt"] in ("q4_0", "q4_1", "int4_g128")]
        eight = [r for r in ours if r["fmt"] == "q8_0"]
        measures = {"4-bit of copy": (four, lambda r: r["kernel_gbps"] / copy),
                    "4-bit over fp16": (four, lambda r: r["kernel_speedup_over_fp16"]),
                    "4-bit over int4": (four, lambda r: r["kernel_speedup_over_int4pack"]),
                    "Q8_0 of copy": (eight, lambda r: r["kernel_gbps"] / copy)}
        for name, (rows, value) in measures.items():
            best = max(rows, key=value)
            said = re.search(rf"{name} ([\d.]+) \((\w+); goal {goals[name]}: (met|not met)\)", line.group(1))
            assert said and float(said.group(1)) == round(value(best), 2) and said.group(2) == best["rung"], name
            assert (said.group(3) == "met") == (value(best) >= goals[name])
    steps = ("q4_1_gemv_q8_1_dp4a", "q4_1_gemv_q8_1_repacked", "q4_1_gemv_q8_1_wide", "q4_1_gemv_q8_1_persistent")
    for n, k in sorted({(r["N"], r["K"]) for r in gemv.rows}):
        line = re.search(rf"^{n:,} × {k:,}, each rung against the one before it: (.*)$", shown, re.M)
        assert line, (n, k)
        times = {r["rung"]: r["kernel_ms"] for r in gemv.rows if (r["N"], r["K"]) == (n, k)}
        said = re.findall(r"(\w+) at ([\d.]+) times the speed of (\w+) \((faster, as predicted|not faster: the "
                          r"prediction failed)\)", line.group(1))
        assert [(a, b) for a, _, b, _ in said] == [(after, before) for before, after in zip(steps, steps[1:])
                                                   if before in times and after in times], line.group(1)
        for after, ratio, before, verdict in said:
            assert float(ratio) == round(times[before] / times[after], 2)
            assert (verdict == "faster, as predicted") == (times[after] < times[before]), (n, k, after)
    for n, k in sorted({(r["N"], r["K"]) for r in gemv.rows}):     # the fastest 4-bit kernel against its bytes
        four_bit = [r for r in gemv.rows
                    if (r["N"], r["K"]) == (n, k) and r["fmt"] in ("q4_0", "q4_1", "int4_g128", "int4")]
        fastest = min(four_bit, key=lambda r: r["kernel_ms"])
        floor_us = fastest["bytes"] / copy / 1e3
        line = (f"{n:,} × {k:,}: the fastest 4-bit kernel, {fastest['rung']}, takes {fastest['kernel_ms'] * 1e3:.1f} µs; "
                f"its bytes at the copy bandwidth {floor_us:.1f} µs, {fastest['kernel_ms'] * 1e3 - floor_us:.1f} µs more")
        assert line in shown, line
    for n, k in sorted({(r["N"], r["K"]) for r in batched.rows}):
        said = re.search(rf"^{n:,} × {k:,}: the batched rung is faster than torch's fp16 matmul at T = (.*), slower at "
                         r"T = (.*)$", shown, re.M)
        ours = {r["T"]: r["kernel_ms"] for r in batched.where(rung="q4_1_gemv_q8_1_small_batch", N=n, K=k)}
        theirs = {r["T"]: r["kernel_ms"] for r in batched.where(rung="torch_matmul_fp16", N=n, K=k)}
        faster = ", ".join(str(t) for t in sorted(ours) if ours[t] < theirs[t]) or "none"
        assert said and said.group(1) == faster, (n, k)


# ----------------------------------------------------------------------------- what the run printed, against the prose

def _table(shown: str, header: str) -> list[list[str]]:
    """The rows of the first Markdown table in ``shown`` whose header row starts with ``| header``, as cells."""
    lines = shown.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"| {header}")), None)
    assert start is not None, f"no table whose header starts with {header!r}"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def _tables(shown: str, header: str) -> list[list[list[str]]]:
    """The rows of every Markdown table in ``shown`` whose header row starts with ``| header``, in order."""
    tables, rest = [], shown
    while f"| {header}" in rest:
        tables.append(_table(rest, header))
        rest = rest[rest.index(f"| {header}") + len(header):]
    return tables


def _number(text: str) -> float:
    return float(text.replace(",", ""))


# The shapes the lesson takes from each model's config.json, typed again here, and the sizes their model cards give.
SHAPES = {"SmolLM2-135M": (30, 576, 1536, 9, 3, 64, 49152, True), "Llama-3-8B": (32, 4096, 14336, 32, 8, 128, 128256, False),
          "Llama-3-70B": (80, 8192, 28672, 64, 8, 128, 128256, False)}
PUBLISHED = {"SmolLM2-135M": ("135M", 1e6, 0), "Llama-3-8B": ("8.03B", 1e9, 2), "Llama-3-70B": ("70.6B", 1e9, 1)}


def _matrices(name):
    layers, h, f, heads, kv, d, vocab, _ = SHAPES[name]
    per_block = [(heads * d, h), (kv * d, h), (kv * d, h), (h, heads * d), (f, h), (f, h), (h, f)]
    return per_block * layers + [(vocab, h)]


def model_claims(shown: str) -> None:
    """The shapes add up to the sizes the model cards give (135M, 8.03B, 70.6B), and a decode step reads all but
    the untied input embedding and the norms."""
    for row in _table(shown, "model | blocks"):
        name = row[0]
        layers, h, f, heads, kv, d, vocab, tied = SHAPES[name]
        assert [int(_number(v)) for v in (row[1], row[2], row[3], row[5], row[6])] == [layers, h, f, d, vocab]
        assert row[4] == f"{heads} / {kv}" and row[7] == ("yes" if tied else "no")
        params, read = _number(row[8]), _number(row[9])
        label, unit, digits = PUBLISHED[name]
        assert f"{params / unit:.{digits}f}{label[-1]}" == label, (name, params)
        assert read == sum(n * k for n, k in _matrices(name))
        assert params - read == (0 if tied else vocab * h) + (2 * layers + 1) * h


def byte_claims(shown: str) -> None:
    """The bytes per token of each format, recomputed from the shapes; the ceiling is fp16's bits over the format's,
    from the bytes per block (1.88, 3.20, 3.56, 3.88); the ratio per model equals the block's but for int8's row
    scales and SmolLM2's short int4 groups."""
    bytes_of = {"fp16": lambda n, k: 2 * n * k, "int8, a scale per row": lambda n, k: n * k + 4 * n,
                "Q8_0": lambda n, k: n * k // 32 * 34, "Q4_1": lambda n, k: n * k // 32 * 20,
                "Q4_0": lambda n, k: n * k // 32 * 18,
                "int4, an fp16 scale per 128": lambda n, k: n * k // 2 + 2 * n * -(-k // 128)}
    bits = {"Q8_0": Fraction(34 * 8, 32), "Q4_1": Fraction(20 * 8, 32), "Q4_0": Fraction(18 * 8, 32),
            "int4, an fp16 scale per 128": Fraction(66 * 8, 128)}
    ceilings = {fmt: f"{float(16 / b):.2f}" for fmt, b in bits.items()}
    assert list(ceilings.values()) == ["1.88", "3.20", "3.56", "3.88"]
    rows = _table(shown, "format | stored as")
    assert [row[0] for row in rows] == list(bytes_of)
    for row in rows:
        fmt = row[0]
        if fmt in bits:
            assert row[2] == f"{float(bits[fmt]):g}" and row[3] == ceilings[fmt], row
        for name, cell in zip(SHAPES, row[4:]):
            total = sum(bytes_of[fmt](n, k) for n, k in _matrices(name))
            assert cell == (f"{total / 1e9:,.2f} GB" if total >= 1e9 else f"{total / 1e6:,.1f} MB"), (fmt, name, cell)
    line = re.search(r"fp16's bytes over each format's, per model: (.*)", shown)[1]
    for name in SHAPES:
        ratios = dict(re.findall(r"(int8, a scale per row|Q8_0|Q4_1|Q4_0|int4, an fp16 scale per 128) ([\d.]+)",
                                 re.search(rf"{name}: (.*?)(;|$)", line)[1]))
        for fmt in ("Q8_0", "Q4_1", "Q4_0"):
            assert ratios[fmt] == f"{float(16 / bits[fmt]):.3f}", (name, fmt)
        assert float(ratios["int8, a scale per row"]) < 2
        block = f"{float(16 / bits['int4, an fp16 scale per 128']):.3f}"
        assert (ratios["int4, an fp16 scale per 128"] == block) == (SHAPES[name][1] % 128 == 0), (name, ratios)


def roofline_claims(shown: str, roofs) -> None:
    """Each format's bound under the recording's roofs: intensity 2 / bytes per weight over Llama-3-8B's matrices,
    on the bandwidth roof, far left of the float32 ridge ("far": under half of it); fewer bytes reach the ridges
    with fewer tokens per step."""
    bandwidth, peak = roofs.ceilings["copy_gbps"], roofs.ceilings["fp32_tflops"]
    tensor = roofs.one(rung="torch_matmul_fp16")["tflops"]
    ridge, tensor_ridge = peak / (bandwidth / 1e3), tensor / (bandwidth / 1e3)
    assert f"Llama-3-8B's matrices, weights only, under the ceilings of {ROOFS} ({roofs.stamp})" in shown
    rows = _table(shown, "format | FLOP per byte at batch 1")
    weights = sum(n * k for n, k in _matrices("Llama-3-8B"))
    sizes = {"fp16": 2.0, "int8, a scale per row": None, "Q8_0": 34 / 32, "Q4_1": 20 / 32, "Q4_0": 18 / 32,
             "int4, an fp16 scale per 128": 66 / 128}
    intensities = []
    for row in rows:
        per_weight = sizes[row[0]] or (weights + 4 * sum(n for n, _ in _matrices("Llama-3-8B"))) / weights
        intensity = 2 / per_weight
        intensities.append(intensity)
        assert row[1] == f"{intensity:.2f}" and row[2] == f"{min(peak, bandwidth / 1e3 * intensity):.2f}", row
        assert row[3] == f"{bandwidth * 1e9 / (per_weight * weights):,.0f}", row
        assert row[4] == f"{ridge / intensity:.1f}" and row[5] == f"{tensor_ridge / intensity:.0f}", row
    assert max(intensities) < 0.5 * ridge
    order = sorted(range(len(rows)), key=lambda i: intensities[i])
    assert [float(rows[i][4]) for i in order] == sorted((float(rows[i][4]) for i in order), reverse=True)
    assert f"ridges: float32 {ridge:.1f} FLOP per byte" in shown


def format_claims(shown: str) -> None:
    """The Q4_0 block read byte by byte; the int8 table: a scale per row and per token beat one per tensor, the int8
    product keeps their accuracy, and on SiLU outputs (smallest value about -0.28) the zero point halves the step
    and the error with it."""
    assert "one Q4_0 block, its 18 bytes: 00 38 f0 e1" in shown and "are the fp16 d = 0x3800 = 0.5" in shown
    assert "low nibble  0 -> weight  0 = d * (0 - 8) = -4.0000 (was -4.0000)" in shown
    errors = {(row[0], row[1].split(",")[0]): float(row[2]) for row in _table(shown, "values | scale")}
    assert errors["W", "one per row (output channel)"] < errors["W", "one for the tensor"] / 3, errors
    assert errors["X", "one per token"] < errors["X", "one for the tensor"] / 10, errors
    product = errors["Y = X W^T in int32, scaled once", "per token times per row"]
    assert product < 3 * max(errors["W", "one per row (output channel)"], errors["X", "one per token"]), errors
    found = re.search(r"SiLU's smallest value is (-[\d.]+); on these outputs asymmetric uint8's step is ([\d.]+) times "
                      r"symmetric int8's and its error ([\d.]+) times", shown)
    assert found and found[1] == "-0.2785" and 0.45 <= float(found[2]) <= 0.55 and 0.4 <= float(found[3]) <= 0.62


def nibble_claims(shown: str) -> None:
    """Random data: the adjacent order's y has the right spread (within a third) and is far off (the difference of
    the order of y itself); with x all ones it is exact; the identity times x[i] = i: y[n] = n, and the adjacent
    order gives each position read, the same numbers in other places."""
    rows = {(row[0], row[1]): row for row in _table(shown, "weights | x | stored as")}
    random = rows["random", "random"]
    assert 0.75 <= float(random[5]) <= 1.33 and float(random[6]) > 0.5, random
    assert float(rows["random", "all ones"][6]) < 1e-12 and rows["random", "all ones"][3] == rows["random", "all ones"][4]
    identity = rows["the identity", "x[i] = i"]
    assert identity[3] == "0.00, 1.00, 2.00, 3.00" and identity[4] == "0.00, 2.00, 4.00, 6.00" and identity[5] == "1.00"
    read = ", ".join(str(p) for p in [*range(0, 32, 2), *range(1, 32, 2)])
    assert f"the position it read row n's 1 from, in the first block: {read}" in shown


def error_claims(shown: str) -> None:
    """The error grows with the group everywhere: little on Gaussian weights (under 2 times from 16 to a row), faster
    with heavy tails, fastest with large channels; int4's error is an order of magnitude above int8's (8 times or
    more) and at most 127 / 7 times it; Q4_0 beats int4 in groups of 32 and Q4_1 beats Q4_0 on every matrix; Q8_0 is
    int8 in groups of 32 (equal as printed, to its last digit)."""
    rows = _table(shown, "g | int4 bits per weight")
    sets = ("Gaussian", "heavy tails", "large channels")
    groups = [row for row in rows if row[0][0].isdigit()]
    named = {row[0]: row for row in rows if not row[0][0].isdigit()}
    for i, name in enumerate(sets):
        int4 = [float(row[2 + i]) for row in groups]
        int8 = [float(row[6 + i]) for row in groups]
        assert int4 == sorted(int4) and int8 == sorted(int8), name
        assert float(named["Q4_1"][2 + i]) < float(named["Q4_0"][2 + i]) < int4[1], name
        # as printed (two significant digits): equal within one unit of the last digit
        q8, g32 = named["Q8_0"][6 + i], groups[1][6 + i]
        unit = 10.0 ** (math.floor(math.log10(abs(float(g32)))) - 1)
        assert abs(float(q8) - float(g32)) <= 1.01 * unit, (name, q8, g32)
    line = re.search(r"int4, a row per scale against groups of 16: the error grows (.*)", shown)[1]
    growth = dict((name, float(g)) for g, name in re.findall(r"([\d.]+) times \(([\w ]+)\)", line))
    assert growth["Gaussian"] < 2 < growth["heavy tails"] < growth["large channels"], growth
    low, high = (float(v) for v in re.search(r"int4's error over int8's at the same group: ([\d.]+) to ([\d.]+) times",
                                             shown).groups())
    assert low >= 8 and high <= 1.02 * 127 / 7, (low, high)
    bits = [row[1] for row in groups]
    assert bits == [f"{4 + 16 / int(row[0].replace(',', '')):.3g}" for row in groups]


def layer_claims(shown: str) -> None:
    """AWQ and GPTQ on the synthetic layer: independent channels, AWQ changes nothing (within 3%) and GPTQ is a few
    percent worse (0 to 10%); correlated, GPTQ under half of RTN's output error with a larger weight error, AWQ
    nothing (within 3%); correlated with large channels, AWQ cuts about a third (0.55 to 0.75 of RTN's) and GPTQ
    gains too (under 0.9)."""
    rows = {row[0]: row for row in _table(shown, "activations | output error, RTN")}
    awq, gptq, weights = ({kind: float(row[i]) for kind, row in rows.items()} for i in (4, 5, 6))
    assert 0.97 <= awq["independent"] <= 1.03 and 1.0 <= gptq["independent"] <= 1.1, rows
    assert gptq["correlated"] < 0.5 and weights["correlated"] > 1 and 0.97 <= awq["correlated"] <= 1.03, rows
    assert 0.55 <= awq["correlated, 8 large"] <= 0.75 and gptq["correlated, 8 large"] < 0.9, rows


def activation_claims(shown: str) -> None:
    """Static scales: a quiet token uses a few codes and loses its precision (10 times the dynamic error or more), a
    louder one is clipped (the same); dynamic scales give every token about the same error (within a factor
    of about 2, set by how far each token's largest value stands out: under 2.5 on every one of 3,000 draws
    of three tokens tried, 1.6 at the 99th percentile)."""
    rows = {row[0]: row for row in _table(shown, "token | its largest")}
    static = {kind: float(row[3]) for kind, row in rows.items()}
    dynamic = {kind: float(row[4]) for kind, row in rows.items()}
    assert int(rows["quiet"][2]) < 10 and float(rows["louder than calibration"][1]) > 1
    for kind in ("quiet", "louder than calibration"):
        assert static[kind] > 10 * dynamic[kind], rows
    assert static["typical"] > dynamic["typical"] and max(dynamic.values()) < 2.5 * min(dynamic.values()), rows


def real_model_claims(shown: str) -> None:
    """SmolLM2's file: a step reads more than section 1's all-Q4_1 count by the Q8_0 embedding, about a fifth of the
    weights. Its weights: heavier tails than a Gaussian in every kind's median layer, the largest layer several
    times the median, the embedding heavier than every median, section 3's t(3) beyond all; no weight column more
    than a few times the median one (section 3's large channels 10). Stored again: int4's error grows with the
    group, Q4_1 under Q4_0, Q8_0 exact. Activations: every input's loudest channel about 10 to 50 times the median.
    AWQ and GPTQ both cut RTN's output error on both real layers, each winning one. Static scales: the largest
    value at position 0 of both texts, tens of times a typical token's; every token under 16 codes static, the
    median static error of the order of the token; dynamic: median near 2 %, every token under a tenth."""
    step, counted, embedding = (_number(v) for v in re.search(
        r"one decode step reads ([\d.]+) MB of this file's tensors .*section 1 counted ([\d.]+) MB .* the ([\d.]+) MB "
        r"embedding", shown).groups())
    assert step > counted and 0.18 < (576 * 49152) / 134.5e6 < 0.23 and embedding == 30.1
    tails = {row[0]: row for row in _table(shown, "matrix | excess kurtosis")}
    kinds = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    medians = {kind: float(tails[kind][1]) for kind in kinds}
    assert all(m > 0 for m in medians.values()), medians
    assert all(float(tails[kind][2]) > 1.5 * medians[kind] for kind in kinds), tails
    assert float(tails["token embedding (Q8_0)"][1]) > max(medians.values())
    assert float(tails["section 3: heavy tails"][1]) > max(float(tails[kind][2]) for kind in kinds)
    assert max(float(tails[kind][4]) for kind in kinds) < 4 < float(tails["section 3: large channels"][3])
    assert float(tails["token embedding (Q8_0)"][3]) > max(float(tails[kind][4]) for kind in kinds)
    line = re.search(r"the embedding stored again, error .*", shown).group(0)
    int4 = [float(v) for v in re.findall(r"(?:\d+): ([\d.]+)", line.split(";")[0])]
    assert len(int4) == 6 and int4 == sorted(int4), line
    q4_0, q4_1, q8_0 = (float(re.search(rf"{fmt} ([\d.]+)", line).group(1)) for fmt in ("Q4_0", "Q4_1", "Q8_0"))
    assert q4_1 < q4_0 and q8_0 == 0, line
    loud = [int(v) for v in re.findall(r"of block \d: (\d+)", re.search(r"loudest channel over the median one: .*",
                                                                         shown).group(0))]
    assert len(loud) == 9 and 5 < min(loud) and max(loud) < 80, loud
    rows = _table(shown, "layer | output error, RTN")
    assert len(rows) == 2
    wins = set()
    for row in rows:
        awq, gptq = float(row[4]), float(row[5])
        assert awq < 1 and gptq < 1, row
        wins.add("AWQ" if awq < gptq else "GPTQ")
    assert wins == {"AWQ", "GPTQ"}, rows
    scales = {row[0]: row for row in _table(shown, "scale | median error")}
    assert int(scales["static"][3]) == 1024 and float(scales["static"][1]) > 0.5
    assert 0.01 < float(scales["dynamic"][1]) < 0.04 and float(scales["dynamic"][2]) < 0.1
    times, held, calibrated = (int(v) for v in re.search(r"(\d+) times the median \(at position (\d+) of the held-out "
                                                         r"text\).*at its position (\d+)", shown).groups())
    assert times >= 20 and held == calibrated == 0


def beyond_claims(shown: str) -> None:
    """Little's law: the faster memory needs more dp4a warps per SM, an SM can hold them, the repacked rung needs
    fewer, its warp 8 times the dp4a warp's bytes (the caption). The repacked and batched rungs pass their checks and
    their traffic is the model's; both GEMM rungs pass, y[0, 0]'s sum past int16's range."""
    caption = re.search(r"a warp of the dp4a rung has ([\d,]+) bytes of W on their way, one of the repacked rung ([\d,]+)",
                        shown)
    assert _number(caption.group(2)) == 8 * _number(caption.group(1))
    rows = _table(shown, "GPU | copy GB/s")
    assert len(rows) == 2 and _number(rows[1][1]) > _number(rows[0][1])
    dp4a, packed = [int(row[4]) for row in rows], [int(row[5]) for row in rows]
    resident = int(re.search(r"an SM holds at most (\d+) warps", shown).group(1))
    assert dp4a[1] > dp4a[0] and max(dp4a) < resident and all(p < d for p, d in zip(packed, dp4a))
    for name in ("q4_1_gemv_q8_1_repacked", "q4_1_gemv_q8_1_small_batch", *quantized_gemm.RUNGS):
        assert re.search(rf"^{name}: OK \(", shown, re.M), name
    assert len(re.findall(r"bytes counted, the model agrees", shown)) >= 6 and "DISAGREES" not in shown
    # the wide rungs: the dp4a rung's bits, one launch each, x once per block of threads
    assert "q4_1_gemv_q8_1_wide: the same bits as q4_1_gemv_q8_1_dp4a" in shown
    assert re.search(r"^q8_0_gemv_q8_1_wide: OK \(", shown, re.M)
    assert len(re.findall(r"^  1 launch, [\d,]+ bytes counted, the model agrees", shown, re.M)) == 5
    # the persistent rungs: Q4_1 with the dp4a rung's bits, Q4_0 and int4_g128 against their reference, x once per
    # block of threads
    assert "q4_1_gemv_q8_1_persistent: the same bits as q4_1_gemv_q8_1_dp4a" in shown
    assert re.search(r"^q4_0_gemv_q8_1_persistent: OK \(", shown, re.M)
    assert re.search(r"^int4_g128_gemv_q8_1_persistent: OK \(", shown, re.M)
    assert len(re.findall(rf"once per block of threads \({model.SIMULATOR_GRID} here, one per SM on a GPU", shown)) == 3
    sums = [int(v.replace(",", "")) for v in re.findall(r"\(the sum ([\d,]+) times its scales\)", shown)]
    assert len(sums) == len(quantized_gemm.RUNGS) and min(sums) > 32_767
    recorded = load_recording("day09_gemm_timing")
    rows = _table(shown, "rung | M = N = K | kernel ms")
    assert len(rows) == len(recorded.rows)
    for row, r in zip(rows, recorded.rows):
        assert row[0].strip("`") == r["rung"] and row[3] == f"{r['tops']:,.1f}"
    ratios = [float(v) for v in re.findall(r"([\d.]+) at [\d,]+", re.search(r"tensor cores over dp4a: .*", shown).group(0))]
    assert ratios and all(1.2 < v < 2.0 for v in ratios)                   # "about one and a half times as fast"
    assert all(float(row[4]) < 0.2 for row in rows                                        # v2 "far from cuBLAS"
               if row[0].strip("`") in ("w8a8_gemm_v1_dp4a", "w8a8_gemm_v2_tensor_cores"))
    verdicts = re.findall(r"^w8a8_gemm_v3_large_tiles at M = N = K = ([\d,]+): ([\d.]+) of torch_int_mm \(the goal, "
                          r"0.5: (met|not met); predicted 0.48 to 0.55\)$", shown, re.M)
    assert verdicts == [(f"{r['M']:,}", f"{r['kernel_speedup_over_int_mm']:.2f}",
                         "met" if r["kernel_speedup_over_int_mm"] >= 0.5 else "not met")
                        for r in recorded.where(rung="w8a8_gemm_v3_large_tiles")], verdicts
    unrecorded = [name for name in quantized_gemm.RUNGS if not recorded.where(rung=name)]
    line = re.search(r"^not in this recording \(it was made before they existed\): (.*);", shown, re.M)
    assert (line.group(1).split(", ") if line else []) == unrecorded
    checks = load_recording("day09_full_size_checks")           # one line per GEMM rung it checked, on its GPU
    checked = checks.where(rung=tuple(quantized_gemm.RUNGS))
    assert checked and len(re.findall(rf"w8a8_gemm_v\d_\w+ at M = N = K = [\d,]+ on {re.escape(checks.device)}: "
                                      r"rel_err", shown)) == len(checked)


def ladder_claims(shown: str) -> None:
    """The ladder's table is the byte model's, rung by rung, in RUNGS order; W's bytes are nearly all of the
    compulsory bytes; a warp-per-row rung asks for more bytes of x than of W, the dp4a rung for a quarter of x's
    float32 bytes plus a scale and a sum per block; every rung passes its check, the dp4a rung pays for its int8
    activations (100 times the float rung's error or more); counted traffic equals the model."""
    rows = _table(shown, "rung | what it adds")
    assert [row[0].strip("`") for row in rows] == list(quantized_gemv.RUNGS)
    n = k = 4096
    for row in rows:
        rung = row[0].strip("`")
        fmt = model.RUNG_FORMATS[rung]
        assert row[1] == quantized_gemv.RUNGS[rung].adds.replace("|", "\\|") and row[2] == fmt.upper()
        w, x = _number(row[3]), _number(row[4])
        assert w == model.weight_bytes(fmt, n, k) // n
        assert row[5] == f"{getattr(model, f'bytes_{rung}')(n, k) / n:,.0f}"
        assert row[6] == f"{model.compulsory_bytes(rung, n, k) / n:,.0f}" and w > 0.99 * _number(row[6])
        assert x == (k + 8 * k // 32 if rung.endswith("dp4a") else 4 * k) and (rung.endswith("dp4a") or x > w)
    for rung in quantized_gemv.RUNGS:
        assert re.search(rf"^{rung}: OK \(", shown, re.M), rung
        assert re.search(rf"^{rung}: \d+ launch(es)?, [\d,]+ bytes counted, the model agrees argument by argument",
                         shown, re.M), rung
    dp4a, float_rung = (float(v) for v in re.search(
        r"the dp4a rung is off by ([\d.e+-]+) \(relative\), the Q4_1 rung on float32 x by ([\d.e+-]+)", shown).groups())
    assert dp4a > 100 * float_rung, (dp4a, float_rung)
    for row in _table(shown, "rung | argument | loads counted"):
        assert row[2] == row[3] and row[4] == row[5], row


# ----------------------------------------------------------------------------- the figures, held to more

FIGURE_CELLS = ("setup", "shapes", "bytes-per-token", "roofline", "formats-bytes", "decode", "scales", "nibble-order",
                "error-groups")
CHECKED_FIGURES = ("roofline", "formats-bytes", "nibble-order", "error-groups")


def test_the_figures_can_be_read(monkeypatch):
    import matplotlib.pyplot as plt

    from test_lesson_figures import figure_problems

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    sources = _cells()
    namespace, problems = {}, []
    try:
        for cell in FIGURE_CELLS:
            exec(compile(sources[cell], f"<lesson cell {cell}>", "exec"), namespace)
            if cell in CHECKED_FIGURES:
                figures = [plt.figure(number) for number in plt.get_fignums()]
                assert figures or cell == "roofline" and namespace["roofs"] is None, f"cell {cell} draws nothing"
                problems += [f"{cell}: {p}" for f in figures for p in figure_problems(f) + readability_problems(f)]
            plt.close("all")
    finally:
        plt.close("all")
    assert not problems, "\n".join(problems)


def test_the_answers_of_check_yourself_are_right():
    """The arithmetic of the knowledge check: Q4_1's bits and ceiling, and byte 0xa3 of a Q4_0 block with d = 0.5."""
    text = " ".join(_cells()["check-yourself"].split())
    bits = Fraction(8 * model.BLOCK_BYTES["q4_1"], model.QK)
    assert f"{model.BLOCK_BYTES['q4_1']} bytes for 32 weights: $160 / 32 = {bits}$ bits" in text
    assert f"at most $16 / 5 = {float(16 / bits):.1f}$ times as fast" in text
    byte, d = 0xA3, 0.5
    assert f"The low nibble, {byte & 0xF}, is weight 5: $0.5 \\cdot (3 - 8) = {d * ((byte & 0xF) - 8):g}$" in text
    assert f"The high nibble, {byte >> 4}, is weight 21: $0.5 \\cdot (10 - 8) = {d * ((byte >> 4) - 8):g}$" in text
    assert math.isclose(16 / float(bits), 3.2)
