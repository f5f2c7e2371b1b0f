"""Synthetic GPU recordings of day 10, with the columns day 10's recorder writes (``course/record/day10.py``).

Made-up numbers of a plausible size, labelled "Fake GPU", so that the cell of the lesson that reads day 10's
recordings runs in tests before a GPU has made them (and with other numbers after): the fused engine faster than
the plain one, both far from their bytes, transformers slower than the fused engine, the server's rate growing
with its requests and its time to first token with them too.
"""

from course.records import new_recording

CEILINGS = {"copy_gbps": 4000.0, "fp32_tflops": 50.0}
STEP_BYTES = 96_576_768
# (calls, ms a step each call synchronized, ms a step of its kernels alone on the GPU)
LAUNCHERS = {"plain": {"q4_1_gemv_warp_per_row": (210, 9.0, 1.2), "gqa_decode_split_k": (30, 2.4, 0.3),
                       "rmsnorm_block_per_row": (61, 1.6, 0.15), "rope_pairs_from_table": (60, 1.5, 0.12),
                       "add_elementwise": (60, 1.4, 0.1), "kv_cache_write": (30, 0.8, 0.06),
                       "swiglu_elementwise": (30, 0.7, 0.05), "embedding_q8_0_rows": (1, 0.03, 0.004),
                       "q8_0_gemv_warp_per_row": (1, 0.06, 0.03)},
             "fused": {"q4_1_norm_qkv_rope_cache": (30, 1.1, 0.2), "q4_1_residual_quarters": (60, 2.0, 0.35),
                       "q4_1_norm_swiglu_quarters": (30, 1.3, 0.25), "gqa_decode_split_k": (30, 2.4, 0.3),
                       "rmsnorm_block_per_row": (1, 0.03, 0.004), "embedding_q8_0_rows": (1, 0.03, 0.004),
                       "q8_0_gemm_tokens_quarters": (1, 0.06, 0.03)}}
STEP_MS = {"plain": 11.0, "fused": 6.2}
GRAPH_MS = 0.9                  # the fused step replayed as a CUDA graph
KERNELS = {"plain": 513, "fused": 183}
TRANSFORMERS_TPS = 95.0
CONCURRENCY = (1, 8, 32, 64)


OTHER_GRAPH_MS = 1.25          # on "Fake GPU 2": 800 tokens per second, short of the goal of 1,000
OTHER_TRANSFORMERS_TPS = 100.0


def write(out_dir):
    """Save ``day10_decode_timing``, ``day10_serving`` and ``day10_decode_timing_other_gpu`` (its decode steps on
    "Fake GPU 2": the graph's step at OTHER_GRAPH_MS) in ``out_dir``; return their paths."""
    decode = new_recording("day10_decode_timing", ceilings=CEILINGS, notes="synthetic", device="Fake GPU",
                           driver="0")
    for engine in ("plain", "fused"):
        decode.add(what="decode_step", engine=engine, batch=1, steps=64, median_ms=STEP_MS[engine],
                   tokens_per_s=1e3 / STEP_MS[engine], kernels_launched=KERNELS[engine], bytes=STEP_BYTES,
                   bytes_limit_ms=STEP_BYTES / (CEILINGS["copy_gbps"] * 1e9) * 1e3)
        for launcher, (calls, ms, alone) in LAUNCHERS[engine].items():
            decode.add(what="launcher", engine=engine, launcher=launcher, calls=calls, ms_per_step=ms,
                       kernel_ms_per_step=alone)
    decode.add(what="decode_step", engine="graphs", batch=1, steps=64, median_ms=GRAPH_MS, tokens_per_s=1e3 / GRAPH_MS,
               kernels_launched=KERNELS["fused"], bytes=STEP_BYTES,
               bytes_limit_ms=STEP_BYTES / (CEILINGS["copy_gbps"] * 1e9) * 1e3)
    decode.add(what="transformers", batch=1, steps=64, tokens_per_s=TRANSFORMERS_TPS, dtype="float16")
    serving = new_recording("day10_serving", notes="synthetic", device="Fake GPU", driver="0")
    for n in CONCURRENCY:
        seconds = 32 * STEP_MS["fused"] * (1 + n / 16) / 1e3
        serving.add(what="decode", concurrency=n, requests=n, tokens=32 * n, seconds=seconds,
                    tokens_per_s=32 * n / seconds, mean_ttft_ms=20.0 * (1 + n / 8), max_ttft_ms=25.0 * (1 + n / 8),
                    steps=32)
    serving.add(what="prefill", prompt_tokens=256, seconds=0.05, tokens_per_s=256 / 0.05)
    other = new_recording("day10_decode_timing_other_gpu", ceilings={**CEILINGS, "copy_gbps": 4800.0},
                          notes="synthetic", device="Fake GPU 2", driver="0")
    for engine, ms in (("plain", STEP_MS["plain"]), ("fused", STEP_MS["fused"]), ("graphs", OTHER_GRAPH_MS)):
        other.add(what="decode_step", engine=engine, batch=1, steps=64, median_ms=ms, tokens_per_s=1e3 / ms,
                  kernels_launched=KERNELS["fused" if engine == "graphs" else engine], bytes=STEP_BYTES,
                  bytes_limit_ms=STEP_BYTES / (4800.0 * 1e9) * 1e3)
    other.add(what="transformers", batch=1, steps=64, tokens_per_s=OTHER_TRANSFORMERS_TPS, dtype="float16")
    return [decode.save(out_dir / "day10_decode_timing.json"), serving.save(out_dir / "day10_serving.json"),
            other.save(out_dir / "day10_decode_timing_other_gpu.json")]
