"""Synthetic GPU recordings of day 7, with the columns the day-7 recorder writes (``course/record/day07.py``).

Made-up numbers of a plausible size, labelled "Fake GPU", so that every cell of the lesson that reads
a recording runs in tests, the Nsight cells included (``day07_dram_bytes`` may not be recorded yet).
They tell the other side of the story from the H100 recordings shipped today, so that the lesson's
computed sentences take their other branches too: ``gqa_decode_split_k`` reads its cache near the copy
bandwidth and its time falls as 1/g until the per-query-head work sets a floor, while day 6's v2
(``paged_attention_v2_split_k``), whose repeated reads all reach DRAM here, stays as slow at every group as
with MHA. torch runs a fused kernel at group 1 and its math backend at group 4 (as the real recordings
show). Unlike the shipped recordings, they have every rung the recorder now times (``gqa_decode_group``,
``gqa_prefill_tiles``), so the lesson runs both with and without them.
"""

from other_gpu_fakes import on_other_gpu

from course.models import attention as attention_model
from course.models import gqa as model
from course.records import new_recording

SHAPE = {"heads": 32, "kv_heads": 8, "d": 128, "block_size": 16}
NUM_SEQS = (8, 16, 32, 64)
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
MAX_TOKENS = 1024 * 1024
GROUP_SEQS, GROUP_CONTEXT = 16, 8192
KV_HEADS = (32, 16, 8, 4, 2, 1)
COPY_GBPS = 3000.0
CEILINGS = {"copy_gbps": COPY_GBPS, "fp32_tflops": 50.0}
# The rate of the per-query-head work of a decode step, FLOP/s: below its time no group helps.
PER_HEAD_RATE = 10e12
PREFILL = {"B": 2, "heads": 32, "N": 4096}
GQA, GROUP, V2 = "gqa_decode_split_k", "gqa_decode_group", "paged_attention_v2_split_k"


def _recording(name):
    rec = new_recording(name, ceilings=dict(CEILINGS), device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    return rec


def _decode_ms(rung: str, num_seqs: int, context: int, kv_heads: int) -> float:
    """A made-up time: gqa_decode_split_k reads its compulsory bytes at 0.85 of the copy bandwidth but never
    faster than its per-head work allows, gqa_decode_group takes 1.3 times as long; v2 moves every KV head once per
    query head; torch 0.06."""
    lens = [context] * num_seqs
    heads, d = SHAPE["heads"], SHAPE["d"]
    compulsory = model.compulsory_bytes_decode(lens, heads, kv_heads, d)
    if rung in (GQA, GROUP):
        flops = 4 * sum(lens) * heads * d
        ms = max(compulsory / (0.85 * COPY_GBPS * 1e9), flops / PER_HEAD_RATE) * 1e3 + 0.01
        return ms if rung == GQA else 1.3 * ms
    if rung == V2:
        return model.naive_bytes_decode(lens, heads, kv_heads, d) / (0.85 * COPY_GBPS * 1e9) * 1e3 + 0.01
    return compulsory / (0.06 * COPY_GBPS * 1e9) * 1e3


def _decode_row(rec, rung, num_seqs, context, kv_heads, median, kernel, **extra):
    lens = [context] * num_seqs
    heads, d = SHAPE["heads"], SHAPE["d"]
    compulsory = model.compulsory_bytes_decode(lens, heads, kv_heads, d)
    gbps = compulsory / median / 1e6
    rec.add(rung=rung, num_seqs=num_seqs, context=context, **{**SHAPE, "kv_heads": kv_heads}, median_ms=median,
            p10_ms=0.98 * median, p90_ms=1.03 * median, repeat=20, gbps=gbps,
            tflops=4 * sum(lens) * heads * d / (median * 1e-3) / 1e12, group=heads // kv_heads,
            model_bytes_naive=model.naive_bytes_decode(lens, heads, kv_heads, d), kernel_ms=kernel,
            **extra, fraction_of_copy=gbps / COPY_GBPS)


def fake_decode_timing():
    """``day07_decode_timing``: both decode rungs, v2 on the same cache and torch SDPA (enable_gqa) over
    num_seqs x context; the shortest steps of gqa_decode_split_k wait for Python (the kernel takes half)."""
    rec = _recording("day07_decode_timing")
    for num_seqs in NUM_SEQS:
        for context in CONTEXTS:
            if num_seqs * context > MAX_TOKENS:
                continue
            ms = {rung: _decode_ms(rung, num_seqs, context, SHAPE["kv_heads"])
                  for rung in (GROUP, GQA, V2, "torch_sdpa_gqa")}
            kernel = {rung: t / (2 if rung == GQA and context == CONTEXTS[0] else 1) for rung, t in ms.items()}
            for rung in ms:
                _decode_row(rec, rung, num_seqs, context, SHAPE["kv_heads"], ms[rung], kernel[rung],
                            speedup_over_torch=ms["torch_sdpa_gqa"] / ms[rung],
                            kernel_speedup_over_torch=kernel["torch_sdpa_gqa"] / kernel[rung])
    return rec


def fake_group_timing():
    """``day07_group_timing``: both decode rungs and v2 at GROUP_SEQS x GROUP_CONTEXT for groups 1 to 32."""
    rec = _recording("day07_group_timing")
    for kv_heads in KV_HEADS:
        for rung in (GROUP, GQA, V2):
            ms = _decode_ms(rung, GROUP_SEQS, GROUP_CONTEXT, kv_heads)
            _decode_row(rec, rung, GROUP_SEQS, GROUP_CONTEXT, kv_heads, ms, ms)
    return rec


def fake_prefill_timing():
    """``day07_prefill_timing``: causal prefill at head_dim 128 and 64, groups 4 and 1, both prefill rungs, with
    day 5's v5 at head_dim 64; rates in TFLOP/s of the causal FLOPs."""
    rec = _recording("day07_prefill_timing")
    B, heads, n = PREFILL["B"], PREFILL["heads"], PREFILL["N"]
    rates = {("gqa_prefill_tiles", 4): 5.0, ("gqa_prefill_flash", 4): 12.0, ("torch_sdpa_gqa", 4): 6.0,
             ("gqa_prefill_tiles", 1): 4.0, ("gqa_prefill_flash", 1): 9.0, ("attention_v5_flash_registers", 1): 10.0,
             ("torch_sdpa_gqa", 1): 30.0}
    for d in (128, 64):
        flops = attention_model.flops_attention(B, heads, n, d, causal=True)
        rows = []
        for (rung, group), tflops in rates.items():
            if rung.startswith("attention_v5") and d > 64:
                continue
            median = flops / (tflops * 1e12) * 1e3
            moved = model.compulsory_bytes_prefill(B, heads, heads // group, n, d)
            rows.append(dict(rung=rung, B=B, heads=heads, d=d, N=n, causal=True, median_ms=median, p10_ms=0.98 * median,
                             p90_ms=1.03 * median, repeat=20, gbps=moved / median / 1e6, tflops=tflops, group=group))
        for row in rows:
            torch = next(r for r in rows if r["rung"].startswith("torch") and r["group"] == row["group"])
            rec.add(**row, fraction_of_sdpa=torch["median_ms"] / row["median_ms"])
    return rec


def fake_kernel_resources():
    """``day07_kernel_resources``: registers, local and shared memory of the kernels at d=128, and their rungs."""
    rec = _recording("day07_kernel_resources")
    rec.add(kernel="gqa_prefill_tiles_kernel", rung="gqa_prefill_tiles", d=128, registers=80, local_bytes=1024,
            shared_bytes=32768)
    rec.add(kernel="gqa_prefill_d128", rung="gqa_prefill_flash", d=128, registers=255, local_bytes=248,
            shared_bytes=32768)
    rec.add(kernel="gqa_decode_group_kernel", rung=GROUP, d=128, registers=96, local_bytes=0, shared_bytes=16640)
    rec.add(kernel="gqa_decode_partition_g4", rung=GQA, d=128, registers=160, local_bytes=0, shared_bytes=16640)
    return rec


def fake_full_size_checks():
    """``day07_full_size_checks``: both decode rungs at 8 sequences, both prefill rungs at groups 4, 1 and 32."""
    rec = _recording("day07_full_size_checks")
    for rung in (GROUP, GQA):
        rec.add(rung=rung, num_seqs=8, context=4096, **SHAPE, rel_err=6e-8, max_abs_err=3e-7, seed=7)
    for kv_heads in (8, 32, 1):
        for rung in ("gqa_prefill_tiles", "gqa_prefill_flash"):
            rec.add(rung=rung, N=1024, heads=32, kv_heads=kv_heads, d=128, rel_err=4e-7, max_abs_err=1.5e-6,
                    seed=kv_heads)
    return rec


def fake_dram_bytes():
    """``day07_dram_bytes`` as the harness writes it (label, N, the recorder's ``ncu_shape`` and the case's own
    columns): decode at 8 sequences, both decode rungs near their compulsory bytes, v2 at half its requests (the L2
    serves the rest); both prefill rungs at N = 4096, groups 4 and 1."""
    rec = _recording("day07_dram_bytes")
    rec.ceilings = {}
    heads, kv_heads, d = SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"]
    for label in (GROUP, GQA, V2):
        for context in (2048, 8192):
            lens = [context] * 8
            measured = (0.5 * model.naive_bytes_decode(lens, heads, kv_heads, d) if label == V2
                        else 1.02 * model.compulsory_bytes_decode(lens, heads, kv_heads, d))
            rec.add(label=label, N=context, num_seqs=8, context=context, **SHAPE, dram_read_bytes=0.99 * measured,
                    dram_write_bytes=0.01 * measured, dram_bytes=measured, launches=2)
    for label in ("gqa_prefill_tiles", "gqa_prefill_flash"):
        for kv in (kv_heads, heads):
            measured = 1.5 * model.compulsory_bytes_prefill(1, heads, kv, 4096, d)
            rec.add(label=label, N=4096, B=1, heads=heads, kv_heads=kv, d=d, causal=True, group=heads // kv,
                    dram_read_bytes=0.8 * measured, dram_write_bytes=0.2 * measured, dram_bytes=measured, launches=1)
    return rec


# The second GPU's decode steps and how much faster each rung runs there (copy: 1.4 times): gqa_decode_split_k
# follows the copy bandwidth, the others fall short of it.
OTHER_POINTS = ((16, 8192), (16, 32768), (64, 16384))
OTHER_GAINS = {GQA: 1.35, GROUP: 1.1, V2: 1.2, "torch_sdpa_gqa": 1.05}


def fake_decode_timing_other_gpu():
    """``day07_decode_timing_other_gpu``: fake_decode_timing's rows at OTHER_POINTS on a faster memory."""
    return on_other_gpu(fake_decode_timing(), OTHER_POINTS, OTHER_GAINS)


def fake_recordings():
    """Every day-7 recording the lesson reads."""
    return [fake_decode_timing(), fake_group_timing(), fake_prefill_timing(), fake_kernel_resources(),
            fake_full_size_checks(), fake_dram_bytes(), fake_decode_timing_other_gpu()]
