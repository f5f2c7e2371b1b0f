"""GPU recordings of day 7: grouped-query attention (``kernels.gqa_attention``).

A declaration for ``course.record.harness`` over the registry ``kernels.gqa_attention.RUNGS``. The
head shape of Llama 3 8B: 32 query heads over 8 KV heads (groups of 4), head_dim 128, float32, blocks
of 16 tokens in a shuffled block table. The checks run first (every decode rung against the float64
reference at 8 sequences of mixed lengths, every prefill rung at N = 1024 causal with ``kv_lens`` and at
group sizes 1, 4 and 32), then ``record(out_dir)`` writes, every row naming its rung by its key in
``RUNGS`` (day 6's and day 5's rungs by theirs) and its group in ``group`` where it varies:

- ``day07_full_size_checks.json``: one row per check.
- ``day07_decode_timing.json``: the decode rungs (``DECODE_RUNGS``: ``gqa_decode_group``,
  ``gqa_decode_split_k``, one block per KV head), day 6's ``paged_attention_v2_split_k`` on the same GQA
  cache (one block per query head, each KV head read ``group`` times) and torch's
  ``scaled_dot_product_attention(..., enable_gqa=True)`` (``torch_sdpa_gqa``) on the same K and V gathered
  into a contiguous (num_seqs, kv_heads, context, d) tensor (the gather not timed), against (num_seqs,
  context). gbps and ``fraction_of_copy`` count the compulsory bytes: every K and V read once per
  group; ``kernel_ms`` is the GPU's time alone (``Sweep.kernel_time``).
- ``day07_group_timing.json``: the same rungs but torch at 16 sequences of 8,192 tokens for groups of 1
  to 32 (``kv_heads`` from 32 down to 1): the bytes and the time against the group size.
- ``day07_prefill_timing.json``: causal prefill at N = 4096, B = 2: the prefill rungs (``PREFILL_RUNGS``:
  ``gqa_prefill_tiles``, ``gqa_prefill_flash``) at groups 4 and 1, torch SDPA with ``enable_gqa`` at the
  same groups, and, at head_dim 64 (its largest), day 5's best rung ``attention_v5_flash_registers`` at
  group 1; ``fraction_of_sdpa`` compares each row with torch at the same group and head_dim.
- ``day07_kernel_resources.json``: registers, local and shared memory of each kernel (``kernel``: its
  name, with the group or head_dim it was compiled for; ``rung``: the rung that launches it).

``record_other_gpu(out_dir)`` (``python -m course.record day07 --other-gpu``), on a second GPU: the checks at
full size, then ``day07_decode_timing_other_gpu.json``, the decode sweep at ``OTHER_GPU_POINTS`` (some of
``day07_decode_timing``'s points), for the lesson to set beside it.

``ncu_cases()``: decode (the decode rungs and day 6's v2) at 8 sequences of 2,048 and 8,192 tokens,
prefill (the prefill rungs at groups 4 and 1) at N = 4096 causal; ``sanitize()`` launches every kernel
once, small, at a group that does not divide the tiles.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import gqa as model
from course.record import harness
from course.record.day06 import gathered_kv, paged_inputs
from course.record.harness import Check, NcuCase, Sweep, Timed
from kernels import flash_attention, gqa_attention, paged_attention

SHAPE = {"heads": 32, "kv_heads": 8, "d": 128, "block_size": 16}
SEQS = (8, 16, 32, 64)
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
# num_seqs * context at most: the paged cache and torch's contiguous copy take 2 x 8 GiB there.
MAX_TOKENS = 1024 * 1024
POINTS = tuple((s, c) for s in SEQS for c in CONTEXTS if s * c <= MAX_TOKENS)
QUICK_POINTS = ((8, 1024), (8, 16384), (64, 1024))
GROUP_SEQS, GROUP_CONTEXT = 16, 8192
KV_HEADS = (32, 16, 8, 4, 2, 1)              # groups of 1 (MHA) to 32 (MQA)
PREFILL = {"B": 2, "heads": 32, "N": 4096}
PREFILL_POINTS = ((128, 4096), (64, 4096))   # (head_dim, N), causal
NCU_SEQS = 8
NCU_CONTEXTS = (2048, 8192)
# The decode steps recorded on a second GPU (day07_decode_timing_other_gpu): day 8's three (one of 131,072 tokens,
# two of 524,288 or more), on the cache day 8 starts from.
OTHER_GPU_POINTS = ((16, 8192), (16, 32768), (64, 16384))
NCU_PREFILL_N = 4096
DECODE_RUNGS = tuple(name for name in gqa_attention.RUNGS if name.startswith("gqa_decode"))
PREFILL_RUNGS = tuple(name for name in gqa_attention.RUNGS if name.startswith("gqa_prefill"))
DAY6_RUNG = "paged_attention_v2_split_k"          # day 6's v2 on the GQA cache: one block per query head
DAY5_RUNG = "attention_v5_flash_registers"        # day 5's best rung, at group 1
PREFILL_KV_HEADS = (8, 32)                        # groups 4 and 1


def _rung(name: str):
    """A rung of this day's ladder, or day 6's or day 5's, by its registry name."""
    for ladder in (gqa_attention.RUNGS, paged_attention.RUNGS, flash_attention.RUNGS):
        if name in ladder:
            return ladder[name]
    raise KeyError(f"no rung {name!r} in the day-7, day-6 or day-5 ladder")


def _decode_args(device: dict) -> tuple:
    return (device["q"], device["k_cache"], device["v_cache"], device["block_tables"], device["context_lens"])


def _decode_bytes(lens, kv_heads: int) -> int:
    return model.compulsory_bytes_decode(lens, SHAPE["heads"], kv_heads, SHAPE["d"])


def _decode_flops(lens) -> int:
    return 4 * sum(lens) * SHAPE["heads"] * SHAPE["d"]


# --------------------------------------------------------------------------- checks

CHECK_SEQS = 8
CHECK_CONTEXT = 4096
CHECK_N = 1024


def check_lens(longest: int) -> list[int]:
    """Mixed lengths: full, off the page grid, one page exactly, one token, none, and a few between."""
    return [longest, longest - 37, 16, 1, 0, longest // 2 + 5, 3 * longest // 4, 17]


def _prefill_inputs(B: int, heads: int, kv_heads: int, n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, heads, n, d)).astype(np.float32)
    k = rng.standard_normal((B, kv_heads, n, d)).astype(np.float32)
    v = rng.standard_normal((B, kv_heads, n, d)).astype(np.float32)
    return q, k, v


def checks(longest: int = CHECK_CONTEXT, n: int = CHECK_N) -> list[Check]:
    from numba import cuda

    from kernels import reference

    lens = check_lens(longest)
    device, _ = paged_inputs(CHECK_SEQS, lens, seed=7, **SHAPE)
    out = cuda.device_array(tuple(device["q"].shape), np.float32)
    host = {}

    def want_decode():
        if not host:
            host.update({name: a.copy_to_host() for name, a in device.items()})
            host["ref"] = reference.paged_attention(host["q"], host["k_cache"], host["v_cache"],
                                                    host["block_tables"], host["context_lens"])
        return host["ref"]

    found = [Check(f"out of {name}, contexts {lens}",
                   lambda rung=_rung(name): rung(*_decode_args(device), out=out, max_context=longest),
                   out.copy_to_host, want_decode, seed=7, poisoned=(out,),
                   columns=dict(rung=name, num_seqs=CHECK_SEQS, context=longest, **SHAPE))
             for name in DECODE_RUNGS]
    for kv_heads in (8, 32, 1):                  # groups of 4, 1 (MHA) and 32 (MQA)
        q, k, v = _prefill_inputs(1, SHAPE["heads"], kv_heads, n, SHAPE["d"], seed=kv_heads)
        kv_lens = np.array([n - 101], np.int32)
        dq, dk, dv, dl = (cuda.to_device(a) for a in (q, k, v, kv_lens))
        o = cuda.device_array(q.shape, np.float32)
        references = {}

        def want(q=q, k=k, v=v, kv_lens=kv_lens, references=references):
            if not references:
                references["out"] = reference.attention(q, k, v, causal=True, kv_lens=kv_lens)
            return references["out"]

        for name in PREFILL_RUNGS:
            found.append(Check(
                f"out of {name}, causal, kv_lens {kv_lens.tolist()}, group {SHAPE['heads'] // kv_heads}",
                lambda rung=_rung(name), dq=dq, dk=dk, dv=dv, dl=dl, o=o: rung(dq, dk, dv, causal=True, kv_lens=dl,
                                                                              out=o),
                o.copy_to_host, want, seed=kv_heads, poisoned=(o,),
                columns=dict(rung=name, N=n, heads=SHAPE["heads"], kv_heads=kv_heads, d=SHAPE["d"])))
    return found


# --------------------------------------------------------------------------- timing

def _decode_cases(num_seqs: int, context: int, kv_heads: int, *, torch: bool = True) -> list[Timed]:
    from numba import cuda

    from course.record import baselines

    lens = [context] * num_seqs
    shape = {**SHAPE, "kv_heads": kv_heads}
    device, t = paged_inputs(num_seqs, lens, seed=num_seqs * 100003 + context + kv_heads, **shape)
    out = cuda.device_array(tuple(device["q"].shape), np.float32)
    args = _decode_args(device)
    moved, flops = _decode_bytes(lens, kv_heads), _decode_flops(lens)
    group = SHAPE["heads"] // kv_heads
    columns = {"group": group, "model_bytes_naive": model.naive_bytes_decode(lens, SHAPE["heads"], kv_heads,
                                                                             SHAPE["d"])}
    cases = [Timed(name, lambda rung=_rung(name): rung(*args, out=out, max_context=context), moved, flops, columns)
             for name in DECODE_RUNGS + (DAY6_RUNG,)]
    if torch:
        keys, values = gathered_kv(t, context)
        del t["k_cache"], t["v_cache"]            # the numba views keep the cache alive
        q = t["q"][:, :, None, :]
        cases.append(Timed("torch_sdpa_gqa", baselines.torch_sdpa_gqa_on_device(q, keys, values), moved, flops,
                           columns))
    return cases


def decode_sweep() -> Sweep:
    return Sweep(
        name="day07_decode_timing",
        notes=(f"paged GQA decode: {' and '.join(DECODE_RUNGS)} (one block per KV head and partition, "
               f"kernels.gqa_attention) and day 6's v2 on the same cache ({DAY6_RUNG}: one block per query head, "
               f"each KV head read group times) against "
               f"torch.nn.functional.scaled_dot_product_attention(enable_gqa=True) fp32 on "
               f"the same K and V gathered into a contiguous tensor (gather not timed); heads={SHAPE['heads']} "
               f"kv_heads={SHAPE['kv_heads']} d={SHAPE['d']} block_size={SHAPE['block_size']}, shuffled block "
               f"tables, every sequence of the point at the same context. gbps: K and V of every context read "
               f"once per group, plus q and out, per second of the median; fraction_of_copy: over the copy "
               f"bandwidth of this run; speedup_over_torch: torch's median over the rung's (calls back to back "
               f"from Python); kernel_ms and kernel_speedup_over_torch: the same with the host's launch cost "
               f"hidden."),
        points=POINTS, quick_points=QUICK_POINTS,
        shape=lambda point: dict(num_seqs=point[0], context=point[1], **SHAPE),
        cases=lambda point: _decode_cases(point[0], point[1], SHAPE["kv_heads"]),
        finish=harness.finish_all(harness.fraction_of("torch_sdpa", "speedup_over_torch"),
                                  harness.fraction_of("torch_sdpa", "kernel_speedup_over_torch", time="kernel_ms")),
        fraction_of_copy=True, kernel_time=True)


def group_sweep() -> Sweep:
    return Sweep(
        name="day07_group_timing",
        notes=(f"{', '.join(DECODE_RUNGS)} and day 6's v2 ({DAY6_RUNG}, one block per query head) at {GROUP_SEQS} "
               f"sequences of "
               f"{GROUP_CONTEXT} tokens, heads={SHAPE['heads']}, d={SHAPE['d']}, for kv_heads from 32 (group 1) to 1 "
               f"(group 32); gbps from the compulsory bytes (K and V once per group); model_bytes_naive: the bytes "
               f"of reading each KV head once per query head; kernel_ms: the GPU's time alone."),
        points=KV_HEADS, quick_points=(32, 8, 1),
        shape=lambda kv_heads: dict(num_seqs=GROUP_SEQS, context=GROUP_CONTEXT, **{**SHAPE, "kv_heads": kv_heads}),
        cases=lambda kv_heads: _decode_cases(GROUP_SEQS, GROUP_CONTEXT, kv_heads, torch=False),
        fraction_of_copy=True, kernel_time=True)


def _prefill_cases(point) -> list[Timed]:
    from numba import cuda

    from course.models import attention as attention_model
    from course.record import baselines

    d, n = point
    B, heads = PREFILL["B"], PREFILL["heads"]
    cases = []
    for kv_heads in PREFILL_KV_HEADS:
        group = heads // kv_heads
        q, k, v = _prefill_inputs(B, heads, kv_heads, n, d, seed=n + kv_heads)
        dq, dk, dv = (cuda.to_device(a) for a in (q, k, v))
        o = cuda.device_array(q.shape, np.float32)
        moved = model.compulsory_bytes_prefill(B, heads, kv_heads, n, d)
        flops = attention_model.flops_attention(B, heads, n, d, causal=True)
        columns = {"group": group}
        names = PREFILL_RUNGS + ((DAY5_RUNG,) if group == 1 and d <= flash_attention.HEAD_DIM_MAX else ())
        cases += [Timed(name, lambda rung=_rung(name), dq=dq, dk=dk, dv=dv, o=o: rung(dq, dk, dv, causal=True, out=o),
                        moved, flops, columns) for name in names]
        cases.append(Timed("torch_sdpa_gqa", baselines.torch_sdpa(q, k, v, causal=True, enable_gqa=True),
                           moved, flops, columns))
    return cases


def _fraction_of_sdpa_per_group(rows) -> None:
    for row in rows:
        torch = [r for r in rows if r["rung"].startswith("torch_sdpa") and r["group"] == row["group"]]
        row["fraction_of_sdpa"] = torch[0]["median_ms"] / row["median_ms"]


def prefill_sweep() -> Sweep:
    return Sweep(
        name="day07_prefill_timing",
        notes=(f"causal GQA prefill, B={PREFILL['B']}, heads={PREFILL['heads']}: {' and '.join(PREFILL_RUNGS)} at "
               f"kv_heads 8 (group 4) and 32 (group 1), torch.nn.functional.scaled_dot_product_attention("
               f"is_causal=True, enable_gqa=True) fp32 at the same groups (torch_sdpa_gqa), and day 5's "
               f"{DAY5_RUNG} at group 1 where head_dim allows (at most "
               f"{flash_attention.HEAD_DIM_MAX}); fraction_of_sdpa: torch's median at the same group and head_dim "
               f"over the rung's; tflops from the causal FLOPs."),
        points=PREFILL_POINTS, quick_points=((64, 2048),),
        shape=lambda point: dict(B=PREFILL["B"], heads=PREFILL["heads"], d=point[0], N=point[1], causal=True),
        cases=_prefill_cases, finish=_fraction_of_sdpa_per_group)


# --------------------------------------------------------------------------- resources, Nsight, sanitizer

def kernel_resources() -> list[dict]:
    """Registers, local memory (bytes per thread) and shared memory of each day-7 kernel at d=128."""
    from numba import cuda

    device, _ = paged_inputs(2, [40, 7], seed=1, **SHAPE)
    q, k, v = (cuda.to_device(a) for a in _prefill_inputs(1, SHAPE["heads"], SHAPE["kv_heads"], 70, SHAPE["d"], 1))
    group = SHAPE["heads"] // SHAPE["kv_heads"]
    rows = []
    for name in PREFILL_RUNGS + DECODE_RUNGS:      # each rung launched once; then its kernel, as compiled
        rung = _rung(name)
        if name in DECODE_RUNGS:
            rung(*_decode_args(device), max_context=40, partition_size=16)
        else:
            rung(q, k, v, causal=True)
        kernel = rung.kernels["kernel"]
        if not hasattr(kernel, "overloads"):         # a factory: one kernel per group (decode) or head_dim (prefill)
            label, kernel = ((f"gqa_decode_partition_g{group}", kernel(group)) if name in DECODE_RUNGS else
                             (f"gqa_prefill_d{SHAPE['d']}", kernel(SHAPE["d"])))
        else:
            label = kernel.__name__
        rows += harness.compiled_resources({label: kernel}, rung=name, d=SHAPE["d"])
    return rows


def resources_recording(quick: bool = False):
    from course.records import new_recording

    rec = new_recording("day07_kernel_resources")
    rec.notes = f"registers, local memory (bytes per thread) and static shared memory per block at d={SHAPE['d']}"
    for row in kernel_resources():
        rec.add(**row)
    return rec


def _launch(name: str, n: int, kv_heads: int | None = None):
    from numba import cuda

    rung = _rung(name)
    if name in PREFILL_RUNGS:
        q, k, v = (cuda.to_device(a) for a in _prefill_inputs(1, SHAPE["heads"], kv_heads, n, SHAPE["d"], n))
        return lambda: rung(q, k, v, causal=True)
    device, _ = paged_inputs(NCU_SEQS, [n] * NCU_SEQS, seed=n, **SHAPE)
    args = _decode_args(device)
    return lambda: rung(*args, max_context=n)


def ncu_cases() -> list[NcuCase]:
    decode = [NcuCase(name, n, harness.lazy(_launch, name, n))
              for name in DECODE_RUNGS + (DAY6_RUNG,) for n in NCU_CONTEXTS]
    prefill = [NcuCase(name, NCU_PREFILL_N, harness.lazy(_launch, name, NCU_PREFILL_N, kv_heads),
                       {"group": SHAPE["heads"] // kv_heads, "kv_heads": kv_heads})
               for name in PREFILL_RUNGS for kv_heads in PREFILL_KV_HEADS]
    return decode + prefill


def ncu_shape(n: int) -> dict:
    """What a case measured: decode cases, NCU_SEQS sequences of n tokens; the prefill cases (n is
    NCU_PREFILL_N, which no decode case uses), one causal prompt of n tokens (their own columns give the
    group and kv_heads)."""
    if n == NCU_PREFILL_N:
        return dict(B=1, heads=SHAPE["heads"], kv_heads=SHAPE["kv_heads"], d=SHAPE["d"], causal=True)
    return dict(num_seqs=NCU_SEQS, context=n, **SHAPE)


def sanitize() -> None:
    """Every kernel once, small: partial pages, an empty context, groups of 3 and 9 (tiles not divided)."""
    from numba import cuda

    device, _ = paged_inputs(3, [37, 0, 16], seed=2, heads=9, kv_heads=3, d=24)
    for name in DECODE_RUNGS:
        _rung(name)(*_decode_args(device), max_context=37, partition_size=8)
    for kv_heads in (3, 1):
        q, k, v = (cuda.to_device(a) for a in _prefill_inputs(1, 9, kv_heads, 45, 24, seed=3))
        for name in PREFILL_RUNGS:
            _rung(name)(q, k, v, causal=True, kv_lens=cuda.to_device(np.array([40], np.int32)))
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(
        day="day07", checks=lambda quick: checks(1024 if quick else CHECK_CONTEXT, 256 if quick else CHECK_N),
        check_recording="day07_full_size_checks",
        check_notes=(f"{' and '.join(DECODE_RUNGS)} against kernels.reference.paged_attention (float64), 8 sequences "
                     f"of mixed lengths in a shuffled block table; {' and '.join(PREFILL_RUNGS)} against "
                     f"kernels.reference.attention (float64), causal with kv_lens, at groups 4, 1 and 32."),
        sweeps=lambda: [decode_sweep(), group_sweep(), prefill_sweep()],
        extras=lambda quick: [resources_recording(quick)],
        ncu_cases=ncu_cases, sanitize=sanitize, ncu_shape=ncu_shape)


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time decode, the group sweep and prefill; save all."""
    paths = harness.record(recorder(), out_dir, quick=quick)
    from course.records import load_recording

    for path in paths:
        rec = load_recording(path)
        if rec.name == "day07_decode_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<28} S={row['num_seqs']:>3} context={row['context']:>6} "
                      f"{row['median_ms']:8.3f} ms (kernel {row['kernel_ms']:.3f})  {row['fraction_of_copy']:.2f} "
                      f"of copy  {row['speedup_over_torch']:.2f}x torch (kernel {row['kernel_speedup_over_torch']:.2f}x)",
                      flush=True)
        elif rec.name == "day07_group_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<28} group={row['group']:>2} {row['median_ms']:8.3f} ms "
                      f"(kernel {row['kernel_ms']:.3f})  {row['gbps']:7.0f} GB/s", flush=True)
        elif rec.name == "day07_prefill_timing":
            for row in rec.rows:
                print(f"   {row['rung']:<28} g={row['group']:>2} d={row['d']:>3} N={row['N']} "
                      f"{row['median_ms']:8.3f} ms "
                      f"{row['tflops']:6.2f} TFLOP/s  {row['fraction_of_sdpa']:.2f} of torch", flush=True)
    return paths


def record_other_gpu(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """On a second GPU: the day's checks at full size (raises on a failure), then the decode sweep at
    ``OTHER_GPU_POINTS`` (only the first with ``quick``), saved as ``day07_decode_timing_other_gpu``."""
    checks_now = checks(1024, 256) if quick else checks(CHECK_CONTEXT, CHECK_N)
    return [harness.record_other_gpu(checks_now, decode_sweep(), OTHER_GPU_POINTS, out_dir,
                                     checked="every rung's full-size checks", quick=quick)]
