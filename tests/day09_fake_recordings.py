"""Synthetic GPU recordings of day 9's GEMV sweeps, with the columns ``course/record/day09.py`` writes.

Made-up numbers of a plausible size, labelled "Fake GPU", so that the lesson's cell that reads
``day09_gemv_timing`` and ``day09_batched_timing`` runs in tests before a GPU has made them (and with other numbers
after): at 28,672 × 8,192 the wide Q4_1 rung meets every batch-1 goal and the Q8_0 one does not; at 8,192 × 8,192
none is met, and the wide rung is slower than the repacked one; the batched rung is faster than torch's fp16 matmul up to T = 4.
``other_gpu_timing`` is the same sweep on a second GPU with 1.4 times the copy bandwidth, where every rung reads a
smaller fraction of it.
"""

from course.models import quantized as model
from course.records import new_recording

CEILINGS = {"copy_gbps": 4000.0, "fp32_tflops": 50.0}
SHAPES = ((8192, 8192), (28672, 8192))
# fraction of copy (kernel time) of each rung at each shape; torch's rows set by their own bytes below
FRACTION = {"q8_0_gemv_warp_per_row": 0.05, "q4_0_gemv_warp_per_row": 0.04, "q4_1_gemv_warp_per_row": 0.04,
            "q4_1_gemv_q8_1_dp4a": 0.45, "q4_1_gemv_q8_1_repacked": 0.65, "q4_1_gemv_q8_1_small_batch": 0.55,
            "q4_1_gemv_q8_1_wide": 0.86, "q8_0_gemv_q8_1_wide": 0.83}
SMALL = 0.7                                   # every rung's fraction is this much lower at 8192 x 8192
SMALL_OVERRIDE = {"q4_1_gemv_q8_1_wide": 0.6}  # but the wide rung's is this (below the repacked rung's) there
TORCH_FP16 = 0.9                              # torch.mv's fraction of copy, on its 2 N K bytes
TORCH_INT4 = 0.42
BATCH_US = {1: 40.0, 2: 42.0, 4: 48.0, 8: 70.0, 16: 120.0}     # the batched rung at 28672 x 8192
TORCH_BATCH_US = 130.0                        # torch's fp16 matmul, about flat in T


def gemv_timing(name="day09_gemv_timing", ceilings=CEILINGS, device="Fake GPU", slower=1.0):
    """``day09_gemv_timing`` (or, named ``day09_gemv_timing_other_gpu``, its second GPU's): every rung's kernel time
    from FRACTION of ``ceilings``' copy bandwidth, each time ``slower`` times that (a second GPU whose rungs keep
    too few bytes in flight for its memory)."""
    rec = new_recording(name, ceilings=ceilings, notes="synthetic", device=device, driver="0")
    copy = ceilings["copy_gbps"]
    for n, k in SHAPES:
        scale = SMALL if n == 8192 else 1.0
        fp16_ms = 2 * n * k / (TORCH_FP16 * scale * copy * 1e6)
        int4_bytes = n * k // 2 + 4 * n * (k // 32) + 2 * k + 2 * n
        int4_ms = int4_bytes / (TORCH_INT4 * scale * copy * 1e6)
        rows = []
        for rung, fraction in FRACTION.items():
            fraction = SMALL_OVERRIDE.get(rung, fraction) if n == 8192 else fraction
            fmt = model.RUNG_FORMATS[rung]
            moved = model.compulsory_bytes(rung, n, k)
            rows.append((rung, fmt, moved, slower * moved / (fraction * scale * copy * 1e6)))
        rows.append(("torch_mv_fp16", "float16", 2 * n * k + 2 * k + 2 * n, fp16_ms))
        rows.append(("torch_weight_int4pack_mm", "int4", int4_bytes, int4_ms))
        for rung, fmt, moved, ms in rows:
            rec.add(rung=rung, N=n, K=k, median_ms=3 * ms, p10_ms=2.9 * ms, p90_ms=3.2 * ms, repeat=50,
                    gbps=moved / (3 * ms) / 1e6, tflops=2 * n * k / (3 * ms) / 1e9, fmt=fmt,
                    bits_per_weight=8.0 * moved / (n * k), bytes=moved, flops=2 * n * k, kernel_ms=ms,
                    warm_kernel_ms=0.8 * ms, kernel_gbps=moved / ms / 1e6, warm_kernel_gbps=moved / (0.8 * ms) / 1e6,
                    kernel_speedup_over_fp16=fp16_ms / ms, kernel_speedup_over_int4pack=int4_ms / ms,
                    fraction_of_copy=moved / (3 * ms) / 1e6 / copy)
    return rec


def batched_timing():
    rec = new_recording("day09_batched_timing", ceilings=CEILINGS, notes="synthetic", device="Fake GPU", driver="0")
    for n, k in SHAPES:
        scale = n / 28672
        for t, us in BATCH_US.items():
            for rung, ms in (("q4_1_gemv_q8_1_small_batch", scale * us / 1e3), ("torch_matmul_fp16",
                                                                                scale * TORCH_BATCH_US / 1e3)):
                moved = (model.compulsory_bytes(rung, n, k, t) if rung != "torch_matmul_fp16"
                         else 2 * n * k + 2 * t * k + 2 * t * n)
                rec.add(rung=rung, N=n, K=k, T=t, median_ms=2 * ms, p10_ms=1.9 * ms, p90_ms=2.2 * ms, repeat=50,
                        gbps=moved / (2 * ms) / 1e6, tflops=2 * t * n * k / (2 * ms) / 1e9,
                        fmt="q4_1" if rung != "torch_matmul_fp16" else "float16",
                        bits_per_weight=5.0 if rung != "torch_matmul_fp16" else 16.0, bytes=moved, flops=2 * t * n * k,
                        dp4a=t * n * k // 4 if rung != "torch_matmul_fp16" else 0, kernel_ms=ms,
                        fraction_of_copy=moved / (2 * ms) / 1e6 / CEILINGS["copy_gbps"],
                        kernel_speedup_over_fp16=scale * TORCH_BATCH_US / 1e3 / ms)
    return rec


# The second GPU: 1.4 times the copy bandwidth, where the rungs lose an eighth of their fraction of it.
OTHER_CEILINGS = {"copy_gbps": 5600.0, "fp32_tflops": 50.0}
OTHER_SLOWER = 8 / 7


def other_gpu_timing():
    return gemv_timing("day09_gemv_timing_other_gpu", OTHER_CEILINGS, "Second Fake GPU", OTHER_SLOWER)


def write(out_dir, other_gpu=True):
    return [gemv_timing().save(out_dir / "day09_gemv_timing.json"),
            batched_timing().save(out_dir / "day09_batched_timing.json")] + (
        [other_gpu_timing().save(out_dir / "day09_gemv_timing_other_gpu.json")] if other_gpu else [])
