"""Synthetic GPU recordings of days 2 and 3, with the columns course/record/day02.py and day03.py write.

Made-up numbers of a plausible size, labelled "Fake GPU", so the lessons' table and plot cells run
in tests before (and independently of) the real recordings.
"""

from course.models import attention as model
from course.record import day02, day03
from course.records import new_recording

CEILINGS = {"copy_gbps": 3000.0, "fp32_tflops": 50.0}
SIZES = (256, 1024, 4096)


def _new(name):
    rec = new_recording(name, ceilings=CEILINGS, device="Fake GPU", driver="fake 1.0")
    rec.notes = "synthetic"
    return rec


def _time(rec, rung, ms, gbps=None, **columns):
    """A timed row of ``rung`` (None: a kernel timed alone, which names itself in ``kernel``)."""
    named = {"rung": rung} if rung is not None else {}
    rec.add(**named, median_ms=ms, p10_ms=0.97 * ms, p90_ms=1.05 * ms, repeat=10, gbps=gbps, tflops=None, **columns)


def naive_timing():
    """``day02_naive_timing``: the pipeline (its rung's registry name), each of its kernels alone (by the kernel's
    name, in ``kernel``), torch."""
    rec = _new("day02_naive_timing")
    kernels = [day02.KERNELS[keyword] for keyword in ("scores_kernel", "softmax_kernel", "pv_kernel")]
    for n in SIZES:
        scale = (n / 1024) ** 2
        _time(rec, day02.PIPELINE, 60.0 * scale, N=n, **day02.SHAPE)
        for kernel, ms in zip(kernels, (25.0, 8.0, 27.0)):
            _time(rec, None, ms * scale, N=n, **day02.SHAPE, kernel=kernel)
        _time(rec, "torch_sdpa", 1.5 * scale, N=n, **day02.SHAPE)
    return rec


def fused_timing():
    """``day03_fused_timing``: the fused rung and torch, causal and not, and the naive rung (not causal)."""
    rec = _new("day03_fused_timing")
    for n in SIZES:
        scale = (n / 1024) ** 2
        for causal in (False, True):
            _time(rec, day03.FUSED, (40.0 if not causal else 21.0) * scale, N=n, **day03.SHAPE, causal=causal)
            _time(rec, "torch_sdpa", (1.5 if not causal else 0.9) * scale, N=n, **day03.SHAPE, causal=causal)
        _time(rec, day03.NAIVE, 60.0 * scale, N=n, **day03.SHAPE, causal=False)
    return rec


def softmax_timing():
    rec = _new("day03_softmax_timing")
    for n in SIZES:
        megabytes = 2 * day03.SOFTMAX_ROWS * n * 4 / 1e6
        for rung, gbps in (("softmax_rows", 1100.0), ("softmax_online", 1500.0), ("torch_softmax", 2400.0)):
            _time(rec, rung, megabytes / gbps, gbps=gbps * n / SIZES[-1], N=n, rows=day03.SOFTMAX_ROWS)
    return rec


def dram_bytes(day, labels):
    """``<day>_dram_bytes``: one row per label and size; a label may be a (rung, causal) pair, as day 5's cases
    (then the row carries ``causal``)."""
    rec = _new(f"{day}_dram_bytes")
    B, H, d = day02.NCU_SHAPE["B"], day02.NCU_SHAPE["H"], day02.NCU_SHAPE["d"]
    for label in labels:
        label, columns = (label, {}) if isinstance(label, str) else (label[0], {"causal": label[1]})
        naive = label == "attention_v1_naive"
        for n in SIZES:
            measured = (1.3 * model.compulsory_bytes_naive(B, H, n, d) if naive
                        else 1.1 * model.compulsory_bytes_fused(B, H, n, d))
            rec.add(label=label, **columns, N=n, **day02.NCU_SHAPE, dram_read_bytes=0.6 * measured,
                    dram_write_bytes=0.4 * measured, dram_bytes=measured, launches=3 if naive else 1)
    return rec


def fake_recordings(leave_out=()):
    """Every recording days 2 and 3 plot, except those named in ``leave_out``."""
    recordings = [naive_timing(), fused_timing(), softmax_timing(), dram_bytes("day02", [(day02.PIPELINE, False)]),
                  dram_bytes("day03", [(day03.FUSED, False), (day03.FUSED, True)])]
    return [rec for rec in recordings if rec.name not in leave_out]
