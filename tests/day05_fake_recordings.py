"""Synthetic GPU recordings of day 5, with the columns course/record/day05.py writes.

Made-up numbers of a plausible size, labelled "Fake GPU", so the lesson's timing and traffic cells
run in tests before (and independently of) the real recordings.
"""

from attention_fake_recordings import dram_bytes

from course.models import attention as model
from course.record import day05
from course.records import new_recording

# TFLOP/s of each rung (registry name) and mask, made up; torch's rows set fraction_of_sdpa of the others.
SPEED = {("attention_v1_naive", False): 0.5, ("attention_v2_fused_rows", False): 1.0,
         ("attention_v3_tiled", False): 4.0, ("attention_v4_flash", False): 4.2,
         ("attention_v5_flash_registers", False): 9.0, ("torch_sdpa", False): 15.0,
         ("attention_v4_flash", True): 3.8, ("attention_v5_flash_registers", True): 8.0, ("torch_sdpa", True): 13.0}


def fake_timing():
    """A day05_flash_timing recording at N = 256, 1024, 4096."""
    rec = new_recording("day05_flash_timing", ceilings={"copy_gbps": 3000.0, "fp32_tflops": 50.0},
                        device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    B, H, d = day05.SHAPE["B"], day05.SHAPE["H"], day05.SHAPE["d"]
    for n in (256, 1024, 4096):
        for (rung, causal), tflops in SPEED.items():
            flops = model.flops_attention(B, H, n, d, causal=causal)
            ms = flops / tflops / 1e9
            torch_ms = flops / SPEED["torch_sdpa", causal] / 1e9
            rec.add(rung=rung, N=n, B=B, H=H, d=d, causal=causal, median_ms=ms, p10_ms=0.98 * ms,
                    p90_ms=1.03 * ms, repeat=20, gbps=model.compulsory_bytes_fused(B, H, n, d) / ms / 1e6,
                    tflops=tflops, fraction_of_sdpa=torch_ms / ms)
    return rec


def fake_resources():
    """A day05_kernel_resources recording: registers, local and shared memory of v3, v4 and v5."""
    rec = new_recording("day05_kernel_resources", device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    for rung, registers, local in (("attention_v3_tiled", 56, 640), ("attention_v4_flash", 50, 640),
                                   ("attention_v5_flash_registers", 200, 0)):
        rec.add(rung=rung, d=day05.SHAPE["d"], registers=registers, local_bytes=local,
                shared_bytes=16384 if local else 24576, ptx_local_loads=3 if local else 0,
                ptx_local_stores=2 if local else 0)
    return rec


def fake_head_dim_128():
    """A day05_head_dim_128_timing recording: v6 and torch at N = 1024 and 4096, head_dim 128."""
    rec = new_recording("day05_head_dim_128_timing", ceilings={"copy_gbps": 3000.0, "fp32_tflops": 50.0},
                        device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    B, H, d = day05.WIDE_SHAPE["B"], day05.WIDE_SHAPE["H"], day05.WIDE_SHAPE["d"]
    for n in (1024, 4096):
        for rung, causal, tflops in (("attention_v6_register_tiles", False, 30.0), ("torch_sdpa", False, 45.0),
                                     ("attention_v6_register_tiles", True, 28.0), ("torch_sdpa", True, 40.0)):
            flops = model.flops_attention(B, H, n, d, causal=causal)
            ms, torch_ms = flops / tflops / 1e9, flops / (40.0 if causal else 45.0) / 1e9
            rec.add(rung=rung, N=n, B=B, H=H, d=d, causal=causal, median_ms=ms, p10_ms=0.98 * ms, p90_ms=1.03 * ms,
                    repeat=20, gbps=model.compulsory_bytes_fused(B, H, n, d) / ms / 1e6, tflops=tflops,
                    fraction_of_sdpa=torch_ms / ms)
    return rec


def fake_recordings():
    """Every recording the day-5 lesson plots."""
    return [fake_timing(), fake_head_dim_128(), fake_resources(), dram_bytes("day05", day05.NCU_CASES)]
