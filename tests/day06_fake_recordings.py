"""Synthetic GPU recordings of day 6, with the columns the day-6 recorder writes.

Made-up numbers of a plausible size, labelled "Fake GPU", so the lesson's timing and traffic cells
run in tests before (and independently of) the real recordings. The story they tell is the one the
lesson's prose expects from an H100: v1 fills the GPU only with many sequences, v2 wins with few
long sequences, v3 takes v2's GPU time without v2's wait for Python at the shortest steps, and DRAM
bytes come close to the compulsory bytes.
"""

from other_gpu_fakes import on_other_gpu

from course.models import paged_attention as model
from course.records import new_recording
from kernels import paged_attention

SHAPE = {"heads": 32, "kv_heads": 32, "d": 128, "block_size": 16}
NUM_SEQS = (8, 16, 32, 64)
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
COPY_GBPS = 3000.0
SLOTS = 132 * 16            # blocks of 128 threads an H100 holds at once
PARTITION = 512
V1, V2, V3 = paged_attention.RUNGS          # the rungs, by their registry names


def _fits(num_seqs: int, context: int) -> bool:
    """Like the real sweep: fewer rows at the largest sizes (the cache would not fit)."""
    return num_seqs * context <= 32 * 32768


def _fraction(rung: str, num_seqs: int, context: int) -> float:
    """A made-up fraction of the copy bandwidth: more blocks in flight read faster, up to a ceiling."""
    blocks = SHAPE["heads"] * num_seqs
    if rung == V1:
        return 0.9 * min(1.0, blocks / SLOTS) ** 0.7
    if rung == V2:
        blocks *= -(-context // PARTITION)
        return 0.8 * min(1.0, blocks / SLOTS) ** 0.7
    return 0.4


def fake_timing():
    """A day06_paged_timing recording: v1, v2, v3 and torch SDPA over num_seqs x context."""
    rec = new_recording("day06_paged_timing", ceilings={"copy_gbps": COPY_GBPS}, device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    for num_seqs in NUM_SEQS:
        for context in CONTEXTS:
            if not _fits(num_seqs, context):
                continue
            compulsory = model.compulsory_bytes_decode([context] * num_seqs, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"])
            ms = {}
            for rung in (V1, V2, "torch_sdpa"):
                fraction = _fraction(rung, num_seqs, context)
                ms[rung] = compulsory / (fraction * COPY_GBPS * 1e9) * 1e3
            # the shortest v2 steps wait for Python: the kernel alone takes half the time
            kernel = {rung: median / (2 if rung == V2 and context == min(CONTEXTS) else 1)
                      for rung, median in ms.items()}
            # v3: v2's GPU time and a little more (fences, tickets), one launch: no wait for Python
            kernel[V3] = ms[V3] = 1.03 * kernel[V2]
            for rung, median in ms.items():
                gbps = compulsory / median / 1e6
                rec.add(rung=rung, num_seqs=num_seqs, context=context, **SHAPE, median_ms=median,
                        p10_ms=0.98 * median, p90_ms=1.04 * median, repeat=20, gbps=gbps,
                        fraction_of_copy=gbps / COPY_GBPS, speedup_over_torch=ms["torch_sdpa"] / median,
                        kernel_ms=kernel[rung], kernel_speedup_over_torch=kernel["torch_sdpa"] / kernel[rung])
    return rec


def fake_dram_bytes():
    """A day06_dram_bytes recording: v1, v2 and v3 at 8 sequences, DRAM a little above the compulsory bytes."""
    rec = new_recording("day06_dram_bytes", device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    for label, excess in ((V1, 1.02), (V2, 1.04), (V3, 1.04)):
        for context in (1024, 4096, 16384, 32768):
            compulsory = model.compulsory_bytes_decode([context] * 8, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"])
            measured = excess * compulsory
            rec.add(label=label, num_seqs=8, context=context, dram_read_bytes=0.99 * measured,
                    dram_write_bytes=0.01 * measured, dram_bytes=measured, model_bytes=compulsory)
    return rec


# The second GPU's steps and how much faster each rung runs there (copy: 1.4 times): v2 and v3 follow the copy
# bandwidth, v1 and torch fall short of it.
OTHER_POINTS = ((8, 32768), (16, 32768), (32, 16384))
OTHER_GAINS = {V1: 1.15, V2: 1.36, V3: 1.34, "torch_sdpa": 1.2}


def fake_timing_other_gpu():
    """A day06_paged_timing_other_gpu recording: fake_timing's rows at OTHER_POINTS on a faster memory."""
    return on_other_gpu(fake_timing(), OTHER_POINTS, OTHER_GAINS)


def fake_recordings():
    """Every day-6 recording the lesson plots: the timing, the DRAM bytes, the timing on a second GPU."""
    return [fake_timing(), fake_dram_bytes(), fake_timing_other_gpu()]
