"""Synthetic GPU recordings of day 8, with the columns the day-8 recorder writes (``course/record/day08.py``).

Made-up numbers of a plausible size, labelled "Fake GPU", so that every cell of the lesson that reads a
recording runs in tests with numbers other than the shipped ones. They keep what the lesson's prose says
without computing it (the first decode rung's narrow caches fall short of their bytes, the page-runs rung's
fp16 cache reads near the copy bandwidth and its fp8 cache does not, torch's fp16 kernels are far ahead, fp16
storage does not speed up our prefill) and take the other branch of each computed sentence: here the
fp8 step still follows its bytes against fp16's, and torch's fp16 decode stays below the copy bandwidth. Rows name
their rung as the registry does and their cache or storage format in ``fmt``; unlike the shipped recordings, the fakes
have every rung the recorder now times (``gqa_decode_mixed_group``, ``gqa_prefill_mixed_tiles``,
``gqa_prefill_tensor_cores``) and the tensor-core GEMM ladder's recording (``day08_tc_gemm_timing``). The tensor-core
rates take both branches of the goals the lesson computes: the GEMM ladder's fastest rung reaches 0.4 of cuBLAS at
N = 8,192 but not at 4,096, and the tensor-core prefill reaches 0.25 of torch's fp16 SDPA in fp16 but not in bf16;
``fake_tc_gemm_timing(scale)`` and ``fake_prefill_timing(tensor_rates)`` move them to one side or the other.
"""

from course.models import attention as attention_model
from course.models import low_precision as model
from course.records import new_recording, one

SHAPE = {"heads": 32, "kv_heads": 8, "d": 128, "block_size": 16}
SEQS = (8, 16, 64)
CONTEXTS = (1024, 4096, 8192, 16384)
MAX_TOKENS = 1024 * 1024
COPY_GBPS = 3000.0
CEILINGS = {"copy_gbps": COPY_GBPS, "fp32_tflops": 50.0}
GROUP, FIRST, RUNS, HALF, TENSOR = ("gqa_decode_mixed_group", "gqa_decode_mixed_precision", "gqa_decode_page_runs",
                                    "gqa_decode_half_warps", "gqa_decode_tensor_cores")
RING, LEAN, WIDE = "gqa_decode_fp8_ring", "gqa_decode_fp8_lean_ring", "gqa_decode_wide_heads"
DEEP = "gqa_decode_fp8_deep"
F32, F16, FP8, BF16 = "float32", "float16", "fp8_e4m3", "bfloat16"
# Fraction of the copy bandwidth each (rung, cache format) reads its compulsory bytes at, on long steps.
FRACTION = {(GROUP, F32): 0.7, (GROUP, F16): 0.45, (FIRST, F32): 0.8, (FIRST, F16): 0.55, (FIRST, FP8): 0.4,
            (RUNS, F32): 0.95, (RUNS, F16): 0.86, (RUNS, FP8): 0.6, (HALF, F32): 0.86, (HALF, F16): 0.87,
            (HALF, FP8): 0.8, (TENSOR, F16): 0.99, (TENSOR, FP8): 0.93, (RING, FP8): 0.96, (LEAN, FP8): 0.97,
            (DEEP, FP8): 0.97,
            (WIDE, F32): 0.86, (WIDE, F16): 0.87, (WIDE, FP8): 0.79, (WIDE, BF16): 0.86,
            ("gqa_decode_split_k", F32): 0.78,
            ("torch_sdpa_fp16", F16): 0.9}
# What a step costs besides its bytes (ms): the tensor-core steps start and end fewer blocks. Their queued
# calls wait on Python's launch (median_ms a quarter over kernel_ms).
OVERHEAD_MS = {(TENSOR, F16): 0.004, (TENSOR, FP8): 0.004, (RING, FP8): 0.004, (LEAN, FP8): 0.004,
               (DEEP, FP8): 0.004}
HOST_BOUND = {(TENSOR, F16): 1.25, (TENSOR, FP8): 1.25, (RING, FP8): 1.25, (LEAN, FP8): 1.25, (DEEP, FP8): 1.25}
# The (rung, cache format) of this day's decode rungs, as the recorder checks, times and profiles them (but the
# rung for wide heads, which Nsight has not profiled).
DECODE_CASES = [key for key in FRACTION if key[0] in (GROUP, FIRST, RUNS, HALF, TENSOR, RING, LEAN, DEEP)]
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
            for (rung, fmt), fraction in FRACTION.items():
                moved = model.compulsory_bytes_decode(lens, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"], fmt)
                kernel = moved / (fraction * COPY_GBPS * 1e9) * 1e3 + OVERHEAD_MS.get((rung, fmt), 0.01)
                median = kernel * HOST_BOUND[rung, fmt] if (rung, fmt) in HOST_BOUND else kernel + 0.005
                rows.append(dict(rung=rung, num_seqs=num_seqs, context=context, **SHAPE, median_ms=median,
                                 p10_ms=0.98 * median, p90_ms=1.03 * median, repeat=20, gbps=moved / median / 1e6,
                                 tflops=flops / median / 1e9, fmt=fmt, kernel_ms=kernel))
            fp32 = one(rows, rung=FIRST, fmt=F32)["kernel_ms"]
            runs32 = one(rows, rung=RUNS, fmt=F32)["kernel_ms"]
            torch = one(rows, rung="torch_sdpa_fp16")["kernel_ms"]
            for row in rows:
                rec.add(**row, speedup_over_fp32=fp32 / row["kernel_ms"], speedup_over_runs_fp32=runs32 / row["kernel_ms"],
                        kernel_speedup_over_torch=torch / row["kernel_ms"], fraction_of_copy=row["gbps"] / COPY_GBPS)
    return rec


# The tensor-core prefill's TFLOP/s by storage format: 0.30 of torch's fp16 SDPA (500) in fp16, 0.22 in bf16.
TENSOR_PREFILL_TFLOPS = {"float16": 150.0, "bfloat16": 110.0}


def fake_prefill_timing(tensor_rates=None):
    """``day08_prefill_timing``: ours at about 10 TFLOP/s in every format (the tiles rung at 5), torch fp16 at 500,
    fp32 at 40; gqa_prefill_tensor_cores at ``tensor_rates`` ({fmt: TFLOP/s}, TENSOR_PREFILL_TFLOPS by default;
    empty: no row of it, as in a recording made before the rung existed)."""
    rec = _recording("day08_prefill_timing")
    B, heads, kv_heads, n, d = (PREFILL[key] for key in ("B", "heads", "kv_heads", "N", "d"))
    flops = attention_model.flops_attention(B, heads, n, d, causal=True)
    tiles, ours = "gqa_prefill_mixed_tiles", "gqa_prefill_mixed_precision"
    rates = {(tiles, "float16"): 5.0, (ours, "float16"): 10.2, (tiles, "bfloat16"): 4.9, (ours, "bfloat16"): 10.0,
             (tiles, "float32"): 5.2, (ours, "float32"): 10.5, ("gqa_prefill_flash", "float32"): 10.4,
             ("torch_sdpa_fp16", "float16"): 500.0, ("torch_sdpa_bf16", "bfloat16"): 510.0,
             ("torch_sdpa_fp32_repeated_kv", "float32"): 40.0}
    tensor_rates = TENSOR_PREFILL_TFLOPS if tensor_rates is None else tensor_rates
    rates.update({("gqa_prefill_tensor_cores", fmt): tflops for fmt, tflops in tensor_rates.items()})
    torch_ms = flops / 500.0e12 * 1e3
    for (rung, fmt), tflops in rates.items():
        median = flops / (tflops * 1e12) * 1e3
        moved = model.compulsory_bytes_prefill(B, heads, kv_heads, n, d, dtype=fmt)
        rec.add(rung=rung, B=B, heads=heads, kv_heads=kv_heads, N=n, d=d, causal=True, median_ms=median,
                p10_ms=0.98 * median, p90_ms=1.03 * median, repeat=20, gbps=moved / median / 1e6, tflops=tflops,
                fmt=fmt, group=heads // kv_heads, fraction_of_sdpa_fp16=torch_ms / median)
    return rec


# gqa_prefill_tensor_cores and torch SDPA at each (head_dim, causal) of the recorder's second prefill sweep, TFLOP/s.
PREFILL_SHAPE_TFLOPS = {(128, True): {"float16": (150.0, 480.0), "bfloat16": (110.0, 470.0)},
                        (128, False): {"float16": (190.0, 560.0), "bfloat16": (140.0, 550.0)},
                        (64, True): {"float16": (120.0, 330.0), "bfloat16": (90.0, 320.0)},
                        (64, False): {"float16": (150.0, 400.0), "bfloat16": (115.0, 390.0)}}


def fake_tensor_prefill_shapes():
    """``day08_tensor_prefill_shapes`` as the recorder writes it: per (head_dim, causal), the tensor-core rung and
    torch SDPA in fp16 and bf16 at PREFILL_SHAPE_TFLOPS; fraction_of_sdpa: SDPA's median in the row's dtype over the
    row's."""
    rec = _recording("day08_tensor_prefill_shapes")
    B, heads, kv_heads, n = (PREFILL[key] for key in ("B", "heads", "kv_heads", "N"))
    for (d, causal), by_fmt in PREFILL_SHAPE_TFLOPS.items():
        flops = attention_model.flops_attention(B, heads, n, d, causal=causal)
        for fmt, (ours, torch) in by_fmt.items():
            moved = model.compulsory_bytes_prefill(B, heads, kv_heads, n, d, dtype=fmt)
            torch_ms = flops / (torch * 1e12) * 1e3
            for rung, tflops in (("gqa_prefill_tensor_cores", ours),
                                 ("torch_sdpa_fp16" if fmt == "float16" else "torch_sdpa_bf16", torch)):
                median = flops / (tflops * 1e12) * 1e3
                rec.add(rung=rung, B=B, heads=heads, kv_heads=kv_heads, N=n, d=d, causal=causal, median_ms=median,
                        p10_ms=0.98 * median, p90_ms=1.03 * median, repeat=20, gbps=moved / median / 1e6,
                        tflops=tflops, fmt=fmt, group=heads // kv_heads, fraction_of_sdpa=torch_ms / median)
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


# The tensor-core GEMM ladder (kernels.tensor_core_gemm) at the recorder's sizes (M = N = K = TC_GEMM_N), as a
# fraction of torch's fp16 matmul (cuBLAS), whose TFLOP/s are CUBLAS_TFLOPS: each rung faster than the one before on
# large matrices; v5's large tiles behind v4 up to N = 1,024 (few blocks) and ahead from 2,048, v6 ahead of v5 from
# 2,048, v8 ahead of v6 there and v9 ahead of v8, reaching the goal of 0.4 at 8,192 and not at 4,096.
TC_GEMM_N = (256, 512, 1024, 2048, 4096, 8192)
CUBLAS_TFLOPS = {256: 40.0, 512: 200.0, 1024: 480.0, 2048: 640.0, 4096: 700.0, 8192: 720.0}
TC_GEMM_FRACTION = {"tc_gemm_v1_mma_shared": (0.30, 0.15, 0.09, 0.08, 0.08, 0.08),
                    "tc_gemm_v2_ldmatrix": (0.32, 0.17, 0.11, 0.10, 0.10, 0.10),
                    "tc_gemm_v3_cp_async": (0.45, 0.30, 0.24, 0.23, 0.22, 0.22),
                    "tc_gemm_v4_swizzled": (0.50, 0.36, 0.30, 0.29, 0.29, 0.28),
                    "tc_gemm_v5_large_tiles": (0.35, 0.30, 0.26, 0.33, 0.36, 0.44),
                    "tc_gemm_v6_wide_warps": (0.30, 0.28, 0.25, 0.34, 0.38, 0.46),
                    "tc_gemm_v7_tuned": (0.50, 0.37, 0.31, 0.35, 0.38, 0.46),
                    "tc_gemm_v8_deep_steps": (0.29, 0.28, 0.26, 0.35, 0.39, 0.48),
                    "tc_gemm_v9_paired_stores": (0.29, 0.28, 0.26, 0.36, 0.395, 0.49)}
# The tile tc_gemm_v7_tuned chose at each N (its "tile" column).
TC_GEMM_TILES = ("64:32x32", "64:64x32", "64:64x32", "128:64x64", "128:64x64", "128:64x64")


def fake_tc_gemm_timing(scale=1.0, without=(), cublas_drift=1.0):
    """``day08_tc_gemm_timing`` as ``course/record/day08.py`` writes it: per N, one row per rung of the ladder at
    ``scale`` times its TC_GEMM_FRACTION of cuBLAS (but the rungs named in ``without``: a recording older than
    them), and torch_matmul_fp16's row; fraction_of_cublas is cuBLAS's median over the row's. ``cublas_drift``
    multiplies the median of cuBLAS's calls at the largest N and not its kernel's own time (a GPU whose speed drifted
    while those calls ran): there the two fractions of cuBLAS disagree."""
    rec = _recording("day08_tc_gemm_timing")
    for i, n in enumerate(TC_GEMM_N):
        flops = 2 * n ** 3
        cublas_ms = flops / (CUBLAS_TFLOPS[n] * 1e12) * 1e3
        cases = [(rung, scale * fractions[i], 2 * n * n * 2 + 4 * n * n) for rung, fractions in TC_GEMM_FRACTION.items()
                 if rung not in without]
        cases.append(("torch_matmul_fp16", 1.0, 3 * n * n * 2))
        drift = cublas_drift if n == TC_GEMM_N[-1] else 1.0
        for rung, fraction, moved in cases:
            median = cublas_ms / fraction
            kernel_ms = median - 0.01          # the launch's cost, hidden
            if rung == "torch_matmul_fp16":
                median *= drift
            tile = {"tile": TC_GEMM_TILES[i]} if rung == "tc_gemm_v7_tuned" else {}
            rec.add(rung=rung, M=n, N=n, K=n, median_ms=median, p10_ms=0.98 * median, p90_ms=1.03 * median,
                    repeat=20, gbps=moved / median / 1e6, tflops=flops / median / 1e9, fmt="float16",
                    fraction_of_cublas=cublas_ms * drift / median, kernel_ms=kernel_ms,
                    kernel_fraction_of_cublas=(cublas_ms - 0.01) / kernel_ms, **tile)
    return rec


def fake_full_size_checks():
    """``day08_full_size_checks``: the quantizer bit for bit, every decode rung twice per narrow format, both prefill
    rungs in fp16 and bf16."""
    rec = _recording("day08_full_size_checks", ceilings={})
    common = dict(num_seqs=8, context=4096, **SHAPE)
    rec.add(rung="fp8_quantize", fmt="fp8_e4m3", **common, rel_err=0.0, max_abs_err=0.0, seed=8)
    storage_err = {F32: 0.0, F16: 2.2e-4, FP8: 2.8e-2}
    for rung, fmt in DECODE_CASES:
        storage = storage_err[fmt]
        rec.add(rung=rung, fmt=fmt, **common, storage_rel_err=storage, against="stored values", rel_err=5e-8,
                max_abs_err=3e-7, seed=8)
        if fmt != "float32":
            rec.add(rung=rung, fmt=fmt, **common, storage_rel_err=storage, against="float32 values", rel_err=storage,
                    max_abs_err=4 * storage, seed=8)
    for fmt, storage in (("float16", 3.8e-4), ("bfloat16", 3.1e-3)):
        for rung in ("gqa_prefill_mixed_tiles", "gqa_prefill_mixed_precision"):
            rec.add(rung=rung, fmt=fmt, N=1024, heads=32, kv_heads=8, d=128, against="float32 values",
                    storage_rel_err=storage, rel_err=storage, max_abs_err=4 * storage, seed=1024)
    return rec


def fake_dram_bytes():
    """``day08_dram_bytes`` as the harness writes it: one decode step of every decode rung per cache format at
    8 x 8,192, 1% above the model."""
    rec = _recording("day08_dram_bytes", ceilings={})
    for label, fmt in DECODE_CASES:
        measured = 1.01 * model.compulsory_bytes_decode([8192] * 8, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"], fmt)
        rec.add(label=label, N=8192, num_seqs=8, context=8192, **SHAPE, fmt=fmt, dram_read_bytes=0.99 * measured,
                dram_write_bytes=0.01 * measured, dram_bytes=measured, launches=2)
    return rec


# The second GPU of day08_decode_timing_other_gpu: 1.4 times the copy bandwidth, and how much faster each rung runs
# there (the rungs that read at the copy bandwidth by as much, the fp8 steps bound by instructions or latency not
# at all or little, the fp8 ring a little less than the bandwidth, short of the goal of 0.9 of copy there, the deep
# rung nearly as much, past it; every other rung 1.2).
OTHER_COPY_GBPS = 1.4 * COPY_GBPS
OTHER_GAIN = {("torch_sdpa_fp16", F16): 1.4, (TENSOR, F16): 1.4, (RUNS, F32): 1.33, (FIRST, F32): 1.15,
              (HALF, FP8): 1.0, (TENSOR, FP8): 1.15, (RING, FP8): 1.25, (LEAN, FP8): 1.25, (DEEP, FP8): 1.35}
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
                gain = OTHER_GAIN.get((row["rung"], row["fmt"]), 1.2)
                moved = row["gbps"] * row["median_ms"] * 1e6
                median = row["median_ms"] / gain
                rows.append({**row, "median_ms": median, "p10_ms": 0.98 * median, "p90_ms": 1.03 * median,
                             "kernel_ms": row["kernel_ms"] / gain, "gbps": moved / median / 1e6,
                             "tflops": row["tflops"] * gain, "fraction_of_copy": moved / median / 1e6 / OTHER_COPY_GBPS})
        ms = {(r["rung"], r["fmt"]): r["kernel_ms"] for r in rows}
        for row in rows:
            rec.add(**{**row, "speedup_over_fp32": ms[FIRST, F32] / row["kernel_ms"],
                       "speedup_over_runs_fp32": ms[RUNS, F32] / row["kernel_ms"],
                       "kernel_speedup_over_torch": ms["torch_sdpa_fp16", F16] / row["kernel_ms"]})
    return rec


# gqa_decode_fp8_deep's choices (course.record.day08.DEEP_CHOICES): the fraction of copy each reads at on the first
# fake GPU; on "Fake H200" (1.4 times the bandwidth) the register rung gains 1.15 and the rest 1.3.
DEEP_CHOICE_FRACTION = {"the register rung": 0.93, "all four": 0.97, "two tiles deep": 0.96, "8-byte loads": 0.965,
                        "one chain of score mma": 0.97, "two weight mma": 0.968}


def fake_fp8_deep_choices(other_gpu=False):
    """``day08_fp8_deep_choices`` (or ``_other_gpu``, on "Fake H200"): every choice at the two long steps, each
    reading its bytes at its DEEP_CHOICE_FRACTION of copy (times its gain on the second GPU)."""
    name = "day08_fp8_deep_choices" + ("_other_gpu" if other_gpu else "")
    copy = OTHER_COPY_GBPS if other_gpu else COPY_GBPS
    rec = _recording(name, ceilings={**CEILINGS, "copy_gbps": copy})
    if other_gpu:
        rec.device = "Fake H200"
    for num_seqs, context in ((16, 32768), (64, 16384)):
        lens = [context] * num_seqs
        moved = model.compulsory_bytes_decode(lens, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"], FP8)
        rows = []
        for choice, fraction in DEEP_CHOICE_FRACTION.items():
            gain = (1.15 if choice == "the register rung" else 1.3) if other_gpu else 1.0
            kernel = moved / (fraction * gain * COPY_GBPS * 1e9) * 1e3
            rows.append(dict(rung=TENSOR if choice == "the register rung" else DEEP, num_seqs=num_seqs,
                             context=context, **SHAPE, median_ms=kernel, p10_ms=0.99 * kernel, p90_ms=1.01 * kernel,
                             repeat=50, gbps=moved / kernel / 1e6, tflops=4 * sum(lens) * 32 * 128 / kernel / 1e9,
                             fmt=FP8, choice=choice, kernel_ms=kernel, fraction_of_copy=moved / kernel / 1e6 / copy))
        base = rows[0]["kernel_ms"]
        for row in rows:
            rec.add(**row, speedup_over_registers=base / row["kernel_ms"])
    return rec


def _on_gpu_2(rec, name, keep=lambda row: True):
    """``rec``'s rows that ``keep`` keeps, as the recording ``name`` made on "Fake GPU 2"."""
    other = _recording(name, ceilings=rec.ceilings)
    other.device = "Fake GPU 2"
    for row in rec.rows:
        if keep(row):
            other.add(**row)
    return other


def fake_tc_gemm_timing_other_gpu():
    """``day08_tc_gemm_timing_other_gpu``: ``fake_tc_gemm_timing(1.05)``'s rows at N = 4,096 and 8,192 on "Fake GPU
    2", where the fastest rung reaches 0.4 of cuBLAS at both (the first GPU's fake misses it at 4,096)."""
    return _on_gpu_2(fake_tc_gemm_timing(scale=1.05), "day08_tc_gemm_timing_other_gpu",
                     lambda row: row["N"] in (4096, 8192))


def fake_prefill_timing_other_gpu():
    """``day08_prefill_timing_other_gpu``: ``fake_prefill_timing``'s rows on "Fake GPU 2", the tensor-core rung at
    140 TFLOP/s in both formats (0.28 of torch's fp16 SDPA: the goal met in bf16 too)."""
    return _on_gpu_2(fake_prefill_timing({"float16": 140.0, "bfloat16": 140.0}), "day08_prefill_timing_other_gpu")


# (rung, tile, registers, shared bytes, threads) of each tensor-core GEMM kernel, as day08_tc_gemm_resources has them.
TC_GEMM_RESOURCES = (("tc_gemm_v1_mma_shared", "", 110, 8192, 128), ("tc_gemm_v2_ldmatrix", "", 86, 8192, 128),
                     ("tc_gemm_v3_cp_async", "", 122, 24576, 128), ("tc_gemm_v4_swizzled", "", 88, 24576, 128),
                     ("tc_gemm_v5_large_tiles", "", 124, 49152, 256), ("tc_gemm_v6_wide_warps", "", 225, 49152, 128),
                     ("tc_gemm_v7_tuned", "128:64x64", 225, 49152, 128), ("tc_gemm_v7_tuned", "64:64x32", 153, 24576, 64),
                     ("tc_gemm_v8_deep_steps", "", 240, 98304, 128),
                     ("tc_gemm_v9_paired_stores", "", 240, 98304, 128))


def fake_tc_gemm_resources():
    """``day08_tc_gemm_resources``: registers, shared memory and threads of each kernel (v7 at two tiles)."""
    rec = _recording("day08_tc_gemm_resources")
    for rung, tile, registers, shared, threads in TC_GEMM_RESOURCES:
        dynamic = shared if rung in ("tc_gemm_v8_deep_steps", "tc_gemm_v9_paired_stores") else 0   # their launch's ring
        rec.add(rung=rung, tile=tile, registers=registers, local_bytes=0, shared_bytes=shared, ptx_local_loads=0,
                ptx_local_stores=0, dynamic_shared_bytes=dynamic, threads=threads)
    return rec


STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle", "long_scoreboard",
                 "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction", "not_selected", "selected",
                 "short_scoreboard", "sleeping", "tex_throttle", "wait")


def fake_stall_reasons():
    """``day08_stall_reasons`` as the harness writes it: the warp states of each decode kernel at 8 x 8,192 (the
    tensor-core fp8 step's schedulers issuing in a third of their cycles, its warps waiting mostly on the latency of
    instructions and on loads; the float32 page-runs step on loads)."""
    rec = _recording("day08_stall_reasons", ceilings={})
    cases = (((RUNS, F32, "low_precision_attention::gqa_decode_page_runs_kernel"), {"long_scoreboard": 5.0, "wait": 1.0}, 0.45),
             ((TENSOR, FP8, "low_precision_attention::gqa_decode_tensor_cores_kernel"), {"wait": 2.4, "long_scoreboard": 2.2}, 0.33),
             ((TENSOR, FP8, "paged_attention::paged_attention_v2_merge_kernel"), {"long_scoreboard": 2.0, "wait": 0.5}, 0.2))
    for (label, fmt, kernel), main, issue in cases:
        reasons = {f"stall_{name}": main.get(name, 0.1) for name in STALL_REASONS}
        reasons["stall_selected"] = 1.0
        rec.add(label=label, N=8192, num_seqs=8, context=8192, **SHAPE, fmt=fmt, kernel=kernel, **reasons,
                warp_instructions=1e7, issue_per_cycle=issue, warps_per_scheduler=2.0,
                cycles_per_issue=sum(reasons.values()))
    return rec


# Per rung of the ladder profiled by --ncu-shared: (measured over the model's shared-load wavefronts, tensor pipe busy %,
# warps a scheduler, its two largest stall reasons in warp cycles an issue), as the lesson reads the H100's recording.
TC_SHARED = {"tc_gemm_v1_mma_shared": (1.001, 4.0, 4.0, {"long_scoreboard": 4.0, "wait": 1.5}),
             "tc_gemm_v2_ldmatrix": (1.001, 5.0, 4.5, {"long_scoreboard": 4.2, "wait": 1.4}),
             "tc_gemm_v3_cp_async": (1.0, 18.0, 4.0, {"short_scoreboard": 2.2, "wait": 1.9}),
             "tc_gemm_v4_swizzled": (1.002, 33.0, 4.8, {"not_selected": 1.6, "wait": 1.2}),
             "tc_gemm_v5_large_tiles": (1.002, 41.0, 3.8, {"wait": 1.8, "not_selected": 1.0}),
             "tc_gemm_v6_wide_warps": (1.003, 44.0, 2.0, {"wait": 2.1, "dispatch_stall": 0.5}),
             "tc_gemm_v8_deep_steps": (1.003, 48.0, 2.0, {"wait": 1.7, "long_scoreboard": 0.4}),
             "tc_gemm_v9_paired_stores": (1.003, 49.0, 2.0, {"wait": 1.7, "long_scoreboard": 0.4})}


def fake_tc_gemm_shared_memory():
    """``day08_shared_memory`` as ``--ncu-shared`` writes it: one launch of each rung but v7 at 4,096^3, its shared-load
    wavefronts within a few tenths of a percent of the model's, v1-v3's conflicts three quarters of them, v4's a
    few thousandths, the tensor pipes busiest under v9, the stall reasons the lesson reads."""
    from course.models import tensor_core_gemm as model

    rec = _recording("day08_shared_memory", ceilings={})
    n = 4096
    for rung, (over, busy, warps, main) in TC_SHARED.items():
        predicted, fewest = model.shared_load_wavefronts(rung, n, n, n)
        wavefronts = predicted * over
        reasons = {f"stall_{name}": main.get(name, 0.1) for name in STALL_REASONS}
        reasons["stall_selected"] = 1.0
        rec.add(label=rung, N=n, fmt="float16", kernel=f"tensor_core_gemm::{rung}_kernel", **reasons,
                warp_instructions=1e9, issue_per_cycle=0.3, warps_per_scheduler=warps,
                cycles_per_issue=sum(reasons.values()), shared_load_wavefronts=wavefronts,
                shared_load_conflicts=wavefronts - fewest, tensor_pipe_percent=busy, duration_ns=5e5)
    return rec


def fake_recordings():
    """Every day-8 recording the lesson reads."""
    return [fake_decode_timing(), fake_prefill_timing(), fake_matmul_roofs(), fake_full_size_checks(),
            fake_dram_bytes(), fake_decode_timing_other_gpu(), fake_tc_gemm_timing(), fake_tensor_prefill_shapes(),
            fake_tc_gemm_resources(), fake_stall_reasons(), fake_tc_gemm_shared_memory(),
            fake_tc_gemm_timing_other_gpu(), fake_prefill_timing_other_gpu(), fake_fp8_deep_choices(),
            fake_fp8_deep_choices(other_gpu=True)]
