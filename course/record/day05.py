"""GPU recordings of day 5: tiled and flash attention (``kernels.flash_attention``).

A declaration for ``course.record.harness`` over the registry ``kernels.flash_attention.RUNGS``:
the day's own rungs (v3 tiled, v4 flash, v5 flash registers, v6 register tiles) are checked at full
size against the float64 reference (full attention, and causal with variable lengths where the rung
takes them), then ``record(out_dir)`` writes:

Every row names its rung by its key in ``RUNGS`` (``attention_v4_flash``) and says in ``causal`` whether
the causal mask was on (torch's rows: ``torch_sdpa``).

- ``day05_full_size_checks.json``: one row per check: rung, causal, kv_lens (as text), N, B, H, d,
  rel_err, max_abs_err, seed.
- ``day05_flash_timing.json``: every rung of the ladder (v1 naive to v6 register tiles, causal too
  where the rung takes ``causal`` and ``kv_lens``) and torch SDPA fp32 (causal and not) against N;
  rows: rung, N, B, H, d, causal, median_ms, p10_ms, p90_ms, gbps, tflops, and ``fraction_of_sdpa``
  (torch's median time over the rung's, same N and mask: 1.0 means as fast).
- ``day05_head_dim_128_timing.json``: the same at head_dim 128 (``WIDE_SHAPE``) for the rungs that take
  it (v6) and torch, at N = 1024 and 4096.
- ``day05_kernel_resources.json``: registers, local and shared memory of the v3 to v6 kernels.

``ncu_cases()`` gives the launches whose DRAM bytes Nsight Compute records as ``day05_dram_bytes``
(``NCU_CASES``: every rung, and its causal form where it takes one, at ``NCU_SHAPE`` and each N of
``NCU_SIZES``; rows: label, causal, N, B, H, d and the bytes); ``sanitize()`` launches v3 to v6 once,
small.
"""

from __future__ import annotations

import inspect
import pathlib

import numpy as np

from course.models import attention as model
from course.record import baselines, harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from course.record.inputs import attention_inputs, attention_reference, to_device
from kernels import attention as attention_ladder
from kernels import flash_attention

SHAPE = {"B": 4, "H": 16, "d": 64}
SIZES = (256, 512, 1024, 2048, 4096)
QUICK_SIZES = (256, 1024)
CHECK_N = 4096
QUICK_CHECK_N = 1024
NCU_SHAPE = SHAPE
NCU_SIZES = (512, 1024, 2048, 4096)
# Head dim 128 (most models' since Llama-2): the rungs whose kernels take it, and torch, at the same B, H.
WIDE_SHAPE = {"B": 4, "H": 16, "d": 128}
WIDE_RUNGS = ("attention_v6_register_tiles",)
WIDE_SIZES = (1024, 4096)
QUICK_WIDE_SIZES = (256,)


def takes_masks(rung) -> bool:
    """Whether a rung's launcher takes ``causal`` and ``kv_lens`` (v4 onwards)."""
    parameters = inspect.signature(rung.launcher).parameters
    return "causal" in parameters and "kv_lens" in parameters


def own_rungs() -> dict:
    """The rungs this day adds to the ladder (v1 and v2 are days 2 and 3)."""
    return {name: rung for name, rung in flash_attention.RUNGS.items() if name not in attention_ladder.RUNGS}


# Nsight cases, (rung, causal): every rung, then its causal form where it has one.
NCU_CASES = tuple((name, causal) for name, rung in flash_attention.RUNGS.items()
                  for causal in ((False, True) if takes_masks(rung) else (False,)))


def full_size_kv_lens(n: int, batch: int) -> np.ndarray:
    """Lengths for the variable-length check: all keys, a length off the tile grid, one key, none."""
    lens = [n, n - 37, 1, 0]
    return np.array((lens * batch)[:batch], dtype=np.int32)


def checks(n: int = CHECK_N) -> list[Check]:
    """The day's rungs at (B, H, n, d): full attention, then causal with variable lengths where taken."""
    qh, kh, vh, seed = attention_inputs(n=n, **SHAPE)
    q, k, v, o = to_device(qh, kh, vh, np.empty_like(qh))
    lens = full_size_kv_lens(n, SHAPE["B"])
    references = {}

    def reference(causal):
        if causal not in references:
            references.clear()   # one float64 output at a time: 128 MiB at full size
            references[causal] = attention_reference(qh, kh, vh, causal=causal, kv_lens=lens if causal else None)
        return references[causal]

    found = []
    for causal in (False, True):
        for name, rung in own_rungs().items():
            if causal and not takes_masks(rung):
                continue
            masks = dict(causal=True, kv_lens=lens) if causal else {}
            found.append(Check(
                f"O of {name}, causal={causal}, kv_lens={lens.tolist() if causal else None}",
                lambda rung=rung, masks=masks: rung(q, k, v, out=o, **masks), o.copy_to_host,
                lambda causal=causal: reference(causal), seed=seed, poisoned=(o,),
                columns=dict(rung=name, causal=causal, kv_lens=str(lens.tolist()) if causal else None,
                             N=n, **SHAPE),
                options=dict(dims=("batch", "head", "row", "col"), tile={"row": flash_attention.TILE_Q, "col": None})))
    return found


def check_full_size(n: int = CHECK_N) -> list[dict]:
    """Run :func:`checks` at ``n``; one row per check (rung, causal, kv_lens, shape, errors, seed)."""
    return harness.run_checks(checks(n))


def _timed(point, shape=None, rungs=None) -> list[Timed]:
    """The cases of one (N, causal) point at ``shape`` (default ``SHAPE``): every rung (or those named in
    ``rungs``) and torch."""
    n, causal = point
    shape = SHAPE if shape is None else shape
    B, H, d = shape["B"], shape["H"], shape["d"]
    qh, kh, vh, _ = attention_inputs(n=n, **shape)
    q, k, v, o, lens = to_device(qh, kh, vh, np.empty_like(qh), np.full(B, n, dtype=np.int32))
    compulsory = model.compulsory_bytes_fused(B, H, n, d)
    flops = model.flops_attention(B, H, n, d, causal=causal)
    cases = []
    for name, rung in flash_attention.RUNGS.items():
        if rungs is not None and name not in rungs:
            continue
        if takes_masks(rung):   # with kv_lens on the GPU already, as a model's batch would be
            launch = (lambda rung=rung: rung(q, k, v, causal=causal, kv_lens=lens, out=o))
        elif causal:
            continue
        else:
            launch = (lambda rung=rung: rung(q, k, v, out=o))
        moved = model.compulsory_bytes_naive(B, H, n, d) if name == "attention_v1_naive" else compulsory
        cases.append(Timed(name, launch, moved, flops))
    return cases + [Timed("torch_sdpa", baselines.torch_sdpa(qh, kh, vh, causal=causal), compulsory, flops)]


def flash_sweep() -> Sweep:
    names = ", ".join(flash_attention.RUNGS)
    return Sweep(
        name="day05_flash_timing",
        notes=(f"attention rungs {names} (causal too where the rung takes causal and kv_lens, "
               f"TILE_Q={flash_attention.TILE_Q}) against torch.nn.functional.scaled_dot_product_attention "
               f"in fp32 (TF32 off), B={SHAPE['B']} H={SHAPE['H']} d={SHAPE['d']}, M = N. gbps: compulsory "
               "bytes per second; tflops: 2 FLOPs per multiply-add over the (query, key) pairs computed; "
               "fraction_of_sdpa: torch's median time over the rung's, same N and mask."),
        points=tuple((n, causal) for n in SIZES for causal in (False, True)),
        quick_points=tuple((n, causal) for n in QUICK_SIZES for causal in (False, True)),
        shape=lambda point: dict(N=point[0], **SHAPE, causal=point[1]), cases=_timed,
        finish=harness.fraction_of("torch_sdpa", "fraction_of_sdpa"))


def head_dim_128_sweep() -> Sweep:
    return Sweep(
        name="day05_head_dim_128_timing",
        notes=(f"the rungs that take head_dim 128 ({', '.join(WIDE_RUNGS)}; causal too) against "
               f"torch.nn.functional.scaled_dot_product_attention in fp32 (TF32 off), B={WIDE_SHAPE['B']} "
               f"H={WIDE_SHAPE['H']} d={WIDE_SHAPE['d']}, M = N; columns as day05_flash_timing."),
        points=tuple((n, causal) for n in WIDE_SIZES for causal in (False, True)),
        quick_points=tuple((n, causal) for n in QUICK_WIDE_SIZES for causal in (False, True)),
        shape=lambda point: dict(N=point[0], **WIDE_SHAPE, causal=point[1]),
        cases=lambda point: _timed(point, WIDE_SHAPE, WIDE_RUNGS),
        finish=harness.fraction_of("torch_sdpa", "fraction_of_sdpa"))


def timing_recording(quick: bool = False, ceilings=None, timer=None):
    """Time every attention rung and torch SDPA fp32 against N at SHAPE; return the Recording (not saved)."""
    return harness.record_sweep(flash_sweep(), quick=quick, ceilings=ceilings, timer=timer)


def flash_fraction_summary(rec) -> str:
    """One line per flash rung (those that take masks) and mask: its throughput as a fraction of torch
    SDPA fp32 at the largest N."""
    from course.records import where

    lines = []
    for name, causal in NCU_CASES:
        mine = where(rec, rung=name, causal=causal)
        if mine and takes_masks(flash_attention.RUNGS[name]):
            top = max(mine, key=lambda r: r["N"])
            lines.append(f"{name}{' causal' if causal else ''} at N={top['N']}: {top['fraction_of_sdpa']:.2f} of "
                         f"torch SDPA fp32 ({top['median_ms']:.2f} ms, {top['tflops']:.2f} TFLOP/s)")
    return "\n".join(lines)


def kernel_resources() -> list[dict]:
    """Registers, local memory (bytes per thread) and shared memory of the day's kernels at d=64.

    Local memory is per-thread storage in DRAM behind the caches: a kernel that needs it pays
    memory traffic the algorithm does not ask for. Each kernel is compiled by one small launch.
    """
    q, k, v = to_device(*attention_inputs(B=1, H=1, n=70, m=70, d=SHAPE["d"])[:3])
    rows = []
    for name, rung in own_rungs().items():
        rung(q, k, v)
        kernel = rung.kernels["kernel"]
        if not hasattr(kernel, "overloads"):   # v5 and v6 register a factory: one kernel per head_dim
            kernel = kernel(SHAPE["d"])
        rows += harness.compiled_resources({name: kernel}, key="rung", ptx_locals=True, d=SHAPE["d"])
    return rows


def resources_recording(quick: bool = False):
    from course.records import new_recording

    rec = new_recording("day05_kernel_resources")
    rec.notes = ("registers, local memory (bytes per thread) and static shared memory per block that the "
                 f"compiler gave each kernel at d={SHAPE['d']}, and the ld.local / st.local instructions in its PTX")
    for row in kernel_resources():
        rec.add(**row)
    return rec


def _launch(name: str, causal: bool, n: int):
    """One launch of the rung ``name`` (causal or not) at (NCU_SHAPE, n) on device arrays, as a callable."""
    qh, kh, vh, _ = attention_inputs(n=n, **NCU_SHAPE)
    q, k, v, o, lens = to_device(qh, kh, vh, np.empty_like(qh), np.full(NCU_SHAPE["B"], n, dtype=np.int32))
    rung = flash_attention.RUNGS[name]
    if takes_masks(rung):
        return lambda: rung(q, k, v, causal=causal, kv_lens=lens, out=o)
    return lambda: rung(q, k, v, out=o)


def ncu_cases() -> list[NcuCase]:
    """One launch of each rung (and causal form) at (NCU_SHAPE, N); inputs are made on the first call."""
    return [NcuCase(name, n, harness.lazy(_launch, name, causal, n), {"causal": causal})
            for name, causal in NCU_CASES for n in NCU_SIZES]


def sanitize() -> None:
    """Launch the day's rungs (full; causal with variable lengths where taken) once at a small awkward size."""
    from numba import cuda

    q, k, v = to_device(*attention_inputs(B=3, H=2, n=97, m=75, d=24)[:3])
    lens = np.array([75, 40, 0], dtype=np.int32)
    for rung in own_rungs().values():
        rung(q, k, v)
        if takes_masks(rung):
            rung(q, k, v, causal=True, kv_lens=lens)
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(
        day="day05", checks=lambda quick: checks(QUICK_CHECK_N if quick else CHECK_N),
        check_recording="day05_full_size_checks",
        check_notes=(", ".join(own_rungs()) + " against kernels.reference.attention (float64) "
                     f"at B={SHAPE['B']} H={SHAPE['H']} d={SHAPE['d']}; fp32 passes at rel_err <= 1e-4."),
        sweeps=lambda: [flash_sweep(), head_dim_128_sweep()], extras=lambda quick: [resources_recording(quick)],
        ncu_cases=ncu_cases, sanitize=sanitize, ncu_shape=lambda n: dict(NCU_SHAPE))


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time every rung and torch SDPA and read the kernels' resources; save all."""
    paths = harness.record(recorder(), out_dir, quick=quick)
    from course.records import load_recording

    print(flash_fraction_summary(load_recording(paths[1])), flush=True)
    return paths
