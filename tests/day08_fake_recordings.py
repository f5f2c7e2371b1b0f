"""Synthetic GPU recordings of day 8, with the columns the day-8 recorder writes (``course/record/day08.py``).

Made-up numbers of a plausible size, labelled "Fake GPU", so that every cell of the lesson that reads a
recording runs in tests with numbers other than the shipped ones. They keep what the lesson's prose says
without computing it (the first decode rung's narrow caches fall short of their bytes, the page-runs rung's
fp16 cache reads near the copy bandwidth and its fp8 cache does not, torch's fp16 kernels are far ahead, fp16
storage does not speed up our prefill) and take the other branch of each computed sentence: here the
fp8 step still follows its bytes against fp16's, and torch's fp16 decode stays below the copy bandwidth.
"""

from course.models import attention as attention_model
from course.models import low_precision as model
from course.records import new_recording

SHAPE = {"heads": 32, "kv_heads": 8, "d": 128, "block_size": 16}
SEQS = (8, 16, 64)
CONTEXTS = (1024, 4096, 8192, 16384)
MAX_TOKENS = 1024 * 1024
COPY_GBPS = 3000.0
CEILINGS = {"copy_gbps": COPY_GBPS, "fp32_tflops": 50.0}
# Fraction of the copy bandwidth each rung reads its compulsory bytes at, on long steps.
FRACTION = {"decode_fp32": 0.8, "decode_fp16": 0.55, "decode_fp8": 0.4, "runs_fp32": 0.95, "runs_fp16": 0.86,
            "runs_fp8": 0.6, "half_fp32": 0.86, "half_fp16": 0.87, "half_fp8": 0.8, "tensor_fp16": 0.99,
            "tensor_fp8": 0.93, "day7_gqa_decode": 0.78,
            "torch_sdpa_fp16": 0.9}
# What a step costs besides its bytes (ms): the tensor-core steps start and end fewer blocks. Their queued
# calls wait on Python's launch (median_ms a quarter over kernel_ms).
OVERHEAD_MS = {"tensor_fp16": 0.004, "tensor_fp8": 0.004}
HOST_BOUND = {"tensor_fp16": 1.25, "tensor_fp8": 1.25}
FMT = {"decode_fp32": "float32", "decode_fp16": "float16", "decode_fp8": "fp8_e4m3", "runs_fp32": "float32",
       "runs_fp16": "float16", "runs_fp8": "fp8_e4m3", "half_fp32": "float32", "half_fp16": "float16",
       "half_fp8": "fp8_e4m3", "tensor_fp16": "float16", "tensor_fp8": "fp8_e4m3", "day7_gqa_decode": "float32",
       "torch_sdpa_fp16": "float16"}
PREFILL = {"B": 2, "heads": 32, "kv_heads": 8, "N": 4096, "d": 128}


def _recording(name, ceilings=CEILINGS):
    rec = new_recording(name, ceilings=dict(ceilings), device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    return rec


def fake_decode_timing():
    """``day08_decode_timing``: each rung reads its bytes at its FRACTION of the copy bandwidth, plus 10 µs (or
    its OVERHEAD_MS); the median is 5 µs more (or HOST_BOUND times kernel_ms)."""
    rec = _recording("day08_decode_timing")
    for num_seqs in SEQS:
        for context in CONTEXTS:
            if num_seqs * context > MAX_TOKENS:
                continue
            lens = [context] * num_seqs
            flops = 4 * sum(lens) * SHAPE["heads"] * SHAPE["d"]
            rows = []
            for rung, fraction in FRACTION.items():
                moved = model.compulsory_bytes_decode(lens, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"], FMT[rung])
                kernel = moved / (fraction * COPY_GBPS * 1e9) * 1e3 + OVERHEAD_MS.get(rung, 0.01)
                median = kernel * HOST_BOUND[rung] if rung in HOST_BOUND else kernel + 0.005
                rows.append(dict(rung=rung, num_seqs=num_seqs, context=context, **SHAPE, median_ms=median,
                                 p10_ms=0.98 * median, p90_ms=1.03 * median, repeat=20, gbps=moved / median / 1e6,
                                 tflops=flops / median / 1e9, fmt=FMT[rung], kernel_ms=kernel))
            fp32 = next(r for r in rows if r["rung"] == "decode_fp32")["kernel_ms"]
            runs32 = next(r for r in rows if r["rung"] == "runs_fp32")["kernel_ms"]
            torch = next(r for r in rows if r["rung"] == "torch_sdpa_fp16")["kernel_ms"]
            for row in rows:
                rec.add(**row, speedup_over_fp32=fp32 / row["kernel_ms"], speedup_over_runs_fp32=runs32 / row["kernel_ms"],
                        kernel_speedup_over_torch=torch / row["kernel_ms"], fraction_of_copy=row["gbps"] / COPY_GBPS)
    return rec


def fake_prefill_timing():
    """``day08_prefill_timing``: ours at about 10 TFLOP/s in every format, torch fp16 at 500, fp32 at 40."""
    rec = _recording("day08_prefill_timing")
    B, heads, kv_heads, n, d = (PREFILL[key] for key in ("B", "heads", "kv_heads", "N", "d"))
    flops = attention_model.flops_attention(B, heads, n, d, causal=True)
    rates = {"prefill_fp16": ("float16", 10.2), "prefill_bf16": ("bfloat16", 10.0), "prefill_fp32": ("float32", 10.5),
             "day7_gqa_prefill": ("float32", 10.4), "torch_sdpa_fp16": ("float16", 500.0),
             "torch_sdpa_bf16": ("bfloat16", 510.0), "torch_sdpa_fp32_repeated_kv": ("float32", 40.0)}
    torch_ms = flops / 500.0e12 * 1e3
    for rung, (fmt, tflops) in rates.items():
        median = flops / (tflops * 1e12) * 1e3
        moved = model.compulsory_bytes_prefill(B, heads, kv_heads, n, d, dtype=fmt)
        rec.add(rung=rung, B=B, heads=heads, kv_heads=kv_heads, N=n, d=d, causal=True, median_ms=median,
                p10_ms=0.98 * median, p90_ms=1.03 * median, repeat=20, gbps=moved / median / 1e6, tflops=tflops,
                fmt=fmt, group=heads // kv_heads, fraction_of_sdpa_fp16=torch_ms / median)
    return rec


def fake_matmul_roofs():
    """``day08_matmul_roofs``: float32 50, fp16 700, bf16 720 TFLOP/s; no fp8 row (a torch without _scaled_mm)."""
    rec = _recording("day08_matmul_roofs")
    n = 8192
    for rung, fmt, size, tflops in (("torch_matmul_fp32", "float32", 4, 50.0),
                                    ("torch_matmul_fp16", "float16", 2, 700.0),
                                    ("torch_matmul_bf16", "bfloat16", 2, 720.0)):
        median = 2 * n ** 3 / (tflops * 1e12) * 1e3
        rec.add(rung=rung, M=n, N=n, K=n, median_ms=median, p10_ms=0.99 * median, p90_ms=1.02 * median, repeat=50,
                gbps=3 * n * n * size / median / 1e6, tflops=tflops, fmt=fmt)
    return rec


def fake_full_size_checks():
    """``day08_full_size_checks``: the quantizer bit for bit, decode twice per narrow format, prefill fp16 and bf16."""
    rec = _recording("day08_full_size_checks", ceilings={})
    common = dict(num_seqs=8, context=4096, **SHAPE)
    rec.add(rung="fp8_quantize", fmt="fp8_e4m3", **common, rel_err=0.0, max_abs_err=0.0, seed=8)
    for rung, fmt, storage in (("decode_fp32", "float32", 0.0), ("decode_fp16", "float16", 2.2e-4),
                               ("decode_fp8", "fp8_e4m3", 2.8e-2), ("runs_fp32", "float32", 0.0),
                               ("runs_fp16", "float16", 2.2e-4), ("runs_fp8", "fp8_e4m3", 2.8e-2),
                               ("half_fp32", "float32", 0.0), ("half_fp16", "float16", 2.2e-4),
                               ("half_fp8", "fp8_e4m3", 2.8e-2), ("tensor_fp16", "float16", 2.2e-4),
                               ("tensor_fp8", "fp8_e4m3", 2.8e-2)):
        rec.add(rung=rung, fmt=fmt, **common, storage_rel_err=storage, against="stored values", rel_err=5e-8,
                max_abs_err=3e-7, seed=8)
        if fmt != "float32":
            rec.add(rung=rung, fmt=fmt, **common, storage_rel_err=storage, against="float32 values", rel_err=storage,
                    max_abs_err=4 * storage, seed=8)
    for rung, fmt, storage in (("prefill_fp16", "float16", 3.8e-4), ("prefill_bf16", "bfloat16", 3.1e-3)):
        rec.add(rung=rung, fmt=fmt, N=1024, heads=32, kv_heads=8, d=128, against="float32 values",
                storage_rel_err=storage, rel_err=storage, max_abs_err=4 * storage, seed=1024)
    return rec


def fake_dram_bytes():
    """``day08_dram_bytes`` as the harness writes it: one decode step per format at 8 x 8,192, 1% above the model."""
    rec = _recording("day08_dram_bytes", ceilings={})
    for label, fmt in (("decode_fp32", "float32"), ("decode_fp16", "float16"), ("decode_fp8", "fp8_e4m3"),
                       ("runs_fp32", "float32"), ("runs_fp16", "float16"), ("runs_fp8", "fp8_e4m3"),
                       ("half_fp32", "float32"), ("half_fp16", "float16"), ("half_fp8", "fp8_e4m3"),
                       ("tensor_fp16", "float16"), ("tensor_fp8", "fp8_e4m3")):
        measured = 1.01 * model.compulsory_bytes_decode([8192] * 8, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"], fmt)
        rec.add(label=label, N=8192, num_seqs=8, context=8192, **SHAPE, dram_read_bytes=0.99 * measured,
                dram_write_bytes=0.01 * measured, dram_bytes=measured, launches=2)
    return rec


# The second GPU of day08_decode_timing_other_gpu: 1.4 times the copy bandwidth, and how much faster each rung runs
# there (the rungs that read at the copy bandwidth by as much, the fp8 steps bound by instructions or latency not
# at all or little; every other rung 1.2).
OTHER_COPY_GBPS = 1.4 * COPY_GBPS
OTHER_GAIN = {"torch_sdpa_fp16": 1.4, "tensor_fp16": 1.4, "runs_fp32": 1.33, "decode_fp32": 1.15, "half_fp8": 1.0,
              "tensor_fp8": 1.15}
OTHER_POINTS = ((16, 8192), (64, 8192), (64, 16384))


def fake_decode_timing_other_gpu():
    """``day08_decode_timing_other_gpu``: ``fake_decode_timing``'s rows at OTHER_POINTS on "Fake GPU 2", each
    kernel_ms divided by its OTHER_GAIN, the median by as much; rates and ratios computed again."""
    rec = _recording("day08_decode_timing_other_gpu", ceilings={**CEILINGS, "copy_gbps": OTHER_COPY_GBPS})
    rec.device = "Fake GPU 2"
    base = fake_decode_timing()
    for num_seqs, context in OTHER_POINTS:
        rows = []
        for row in base.rows:
            if (row["num_seqs"], row["context"]) == (num_seqs, context):
                gain = OTHER_GAIN.get(row["rung"], 1.2)
                moved = row["gbps"] * row["median_ms"] * 1e6
                median = row["median_ms"] / gain
                rows.append({**row, "median_ms": median, "p10_ms": 0.98 * median, "p90_ms": 1.03 * median,
                             "kernel_ms": row["kernel_ms"] / gain, "gbps": moved / median / 1e6,
                             "tflops": row["tflops"] * gain, "fraction_of_copy": moved / median / 1e6 / OTHER_COPY_GBPS})
        ms = {r["rung"]: r["kernel_ms"] for r in rows}
        for row in rows:
            rec.add(**{**row, "speedup_over_fp32": ms["decode_fp32"] / row["kernel_ms"],
                       "speedup_over_runs_fp32": ms["runs_fp32"] / row["kernel_ms"],
                       "kernel_speedup_over_torch": ms["torch_sdpa_fp16"] / row["kernel_ms"]})
    return rec


def fake_recordings():
    """Every day-8 recording the lesson reads."""
    return [fake_decode_timing(), fake_prefill_timing(), fake_matmul_roofs(), fake_full_size_checks(),
            fake_dram_bytes(), fake_decode_timing_other_gpu()]
