"""GPU recordings of day 6: paged decode attention (``kernels.paged_attention``, ``kernels.kv_cache``).

A declaration for ``course.record.harness`` over the registry ``kernels.paged_attention.RUNGS``.
Shapes a serving engine meets: 32 query heads and 32 KV heads, head_dim 128, blocks of 16 tokens in
a shuffled block table, float32 cache, ``num_seqs`` sequences of ``context`` tokens each. The
checks run first (every rung against the float64 reference at 8 sequences of mixed lengths up to
4096, launched twice with the output poisoned between, so that buffers a rung keeps between calls
must be ready for the next one; and the cache write against NumPy), then ``record(out_dir)`` writes
(every row naming its rung by its key in ``RUNGS``, ``paged_attention_v2_split_k``):

- ``day06_full_size_checks.json``: one row per check: rung, num_seqs, longest context, errors, seed.
- ``day06_paged_timing.json``: every rung (v1, v2, v3) and a torch baseline against (num_seqs, context);
  rows: rung (the rungs of ``RUNGS``, ``torch_sdpa``), num_seqs, context,
  heads, kv_heads, d, block_size, median_ms, p10_ms, p90_ms, repeat, gbps (compulsory bytes: every
  context's K and V read once per query head, q read and out written, per second),
  ``fraction_of_copy`` (gbps over the copy bandwidth measured in the same run) and
  ``speedup_over_torch`` (torch's median time over the rung's). The torch baseline is ``scaled_dot_product_attention`` on the same K and V gathered into
  a contiguous (num_seqs, kv_heads, context, d) tensor; the gather is not timed.
- ``day06_kernel_resources.json``: registers, local and shared memory of each kernel (``kernel``: its name,
  ``rung``: the rung that launches it).

``record_other_gpu(out_dir)`` (``python -m course.record day06 --other-gpu``), on a second GPU: the checks at
full size, then ``day06_paged_timing_other_gpu.json``, the timing sweep at ``OTHER_GPU_POINTS`` (some of
``day06_paged_timing``'s points), for the lesson to set beside it.

``ncu_cases()``: one launch of each rung at 8 sequences of each context in ``NCU_CONTEXTS`` (the
recording ``day06_dram_bytes`` also carries the model's bytes); ``sanitize()`` launches every
kernel once, small, with partial pages and an empty context.
"""

from __future__ import annotations

import inspect
import pathlib

import numpy as np

from course.models import paged_attention as model
from course.record import harness
from course.record.harness import Check, NcuCase, Sweep, Timed
from kernels import kv_cache, paged_attention

SHAPE = {"heads": 32, "kv_heads": 32, "d": 128, "block_size": 16}
SEQS = (8, 16, 32, 64)
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
# num_seqs * context at most: the paged cache and torch's contiguous copy take 2 x 16 GiB there.
MAX_TOKENS = 512 * 1024
POINTS = tuple((s, c) for s in SEQS for c in CONTEXTS if s * c <= MAX_TOKENS)
QUICK_POINTS = ((8, 1024), (8, 16384), (64, 1024))
NCU_SEQS = 8
NCU_CONTEXTS = (2048, 8192, 32768)
# The steps recorded on a second GPU (day06_paged_timing_other_gpu): few sequences with long contexts (where
# v2's partitions fill the GPU), the longest that fits, and many sequences.
OTHER_GPU_POINTS = ((8, 32768), (16, 32768), (64, 8192))


def _extra(rung, context: int) -> dict:
    """What a rung's launcher takes besides the cache: the longest context, where it asks for it (v2, v3)."""
    return {"max_context": context} if "max_context" in inspect.signature(rung.launcher).parameters else {}


def paged_inputs(num_seqs: int, context_lens, *, seed: int = 0, **shape):
    """Device inputs made on the GPU by torch (fast at 16 GiB): q, k_cache, v_cache, block_tables,
    context_lens as numba device arrays over torch tensors (kept alive in the returned dict)."""
    import torch
    from numba import cuda

    shape = {**SHAPE, **shape}
    heads, kv_heads, d, block_size = shape["heads"], shape["kv_heads"], shape["d"], shape["block_size"]
    lens = np.asarray(context_lens, dtype=np.int32)
    pages = [-(-int(n) // block_size) for n in lens]
    max_pages = max(1, max(pages))
    generator = torch.Generator(device="cuda").manual_seed(seed)
    num_blocks = max(1, sum(pages))
    order = torch.randperm(num_blocks, generator=generator, device="cuda").to(torch.int32)
    tables = torch.full((len(lens), max_pages), -1, dtype=torch.int32, device="cuda")
    start = 0
    for s, n in enumerate(pages):          # every sequence's pages scattered over the pool
        tables[s, :n] = order[start:start + n]
        start += n
    t = {
        "q": torch.randn((len(lens), heads, d), generator=generator, device="cuda"),
        "k_cache": torch.randn((num_blocks, kv_heads, block_size, d), generator=generator, device="cuda"),
        "v_cache": torch.randn((num_blocks, kv_heads, block_size, d), generator=generator, device="cuda"),
        "block_tables": tables, "context_lens": torch.as_tensor(lens, device="cuda"),
    }
    device = {name: cuda.as_cuda_array(tensor) for name, tensor in t.items()}
    return device, t


def gathered_kv(t: dict, context: int):
    """K and V of every sequence gathered into (num_seqs, kv_heads, context, d) for torch (not timed)."""
    keys = t["k_cache"][t["block_tables"].long()]            # (S, pages, kv_heads, block, d)
    values = t["v_cache"][t["block_tables"].long()]
    S, pages, kv_heads, block, d = keys.shape
    keys = keys.permute(0, 2, 1, 3, 4).reshape(S, kv_heads, pages * block, d)[:, :, :context].contiguous()
    values = values.permute(0, 2, 1, 3, 4).reshape(S, kv_heads, pages * block, d)[:, :, :context].contiguous()
    return keys, values


# --------------------------------------------------------------------------- checks

CHECK_SEQS = 8
CHECK_CONTEXT = 4096


def check_lens(longest: int) -> list[int]:
    """Mixed lengths: full, off the page grid, one page exactly, one token, none, and a few between."""
    return [longest, longest - 37, 16, 1, 0, longest // 2 + 5, 3 * longest // 4, 17]


def checks(longest: int = CHECK_CONTEXT) -> list[Check]:
    from numba import cuda

    from kernels import reference

    lens = check_lens(longest)
    device, t = paged_inputs(CHECK_SEQS, lens, seed=6)
    out = cuda.device_array(tuple(device["q"].shape), np.float32)
    host = {}

    def want():
        if not host:
            host.update({name: a.copy_to_host() for name, a in device.items()})
            host["ref"] = reference.paged_attention(host["q"], host["k_cache"], host["v_cache"],
                                                    host["block_tables"], host["context_lens"])
        return host["ref"]

    def twice(rung, extra):
        """The rung, then again on an output poisoned in between: the second call runs on whatever
        state the first left (v2's partial buffers, v3's ticket counters)."""
        from course.checking import poison

        args = (device["q"], device["k_cache"], device["v_cache"], device["block_tables"], device["context_lens"])
        rung(*args, out=out, **extra)
        poison(out)
        rung(*args, out=out, **extra)

    found = []
    for name, rung in paged_attention.RUNGS.items():
        found.append(Check(
            f"out of {name} (second call), contexts {lens}",
            lambda rung=rung, extra=_extra(rung, longest): twice(rung, extra),
            out.copy_to_host, want, seed=6, poisoned=(out,),
            columns=dict(rung=name, num_seqs=CHECK_SEQS, context=longest, **SHAPE)))
    found.append(_cache_write_check())
    return found


def _cache_write_check() -> Check:
    """A prompt of 300 tokens (19 pages, the last partial) and one decode token for each of 7 more
    sequences, in a shuffled table; compared exactly with the same stores done by NumPy."""
    from numba import cuda

    rng = np.random.default_rng(7)
    kv_heads, d, block_size = SHAPE["kv_heads"], SHAPE["d"], SHAPE["block_size"]
    num_blocks = 64
    order = rng.permutation(num_blocks).astype(np.int32)
    tables = np.full((8, 19), -1, np.int32)
    tables[0] = order[:19]
    tables[1:, 0] = order[19:26]
    seqs = np.array([0] * 300 + list(range(1, 8)), np.int32)
    positions = np.array(list(range(300)) + [0, 1, 5, 8, 13, 14, 15], np.int32)
    k_new = rng.standard_normal((len(seqs), kv_heads, d)).astype(np.float32)
    v_new = rng.standard_normal((len(seqs), kv_heads, d)).astype(np.float32)
    cache = rng.standard_normal((num_blocks, kv_heads, block_size, d)).astype(np.float32)
    want_k = cache.copy()
    want_k[tables[seqs, positions // block_size], :, positions % block_size] = k_new
    args = [cuda.to_device(a) for a in (k_new, v_new, seqs, positions, tables, cache, cache.copy())]
    return Check(f"k_cache after kv_cache_write of {len(seqs)} tokens", lambda: kv_cache.kv_cache_write(*args),
                 args[5].copy_to_host, lambda: want_k, seed=7,
                 columns=dict(rung="kv_cache_write", num_seqs=8, context=300, **SHAPE), exact=True)


# --------------------------------------------------------------------------- timing

def _timed(point) -> list[Timed]:
    from numba import cuda

    from course.record import baselines

    num_seqs, context = point
    lens = [context] * num_seqs
    device, t = paged_inputs(num_seqs, lens, seed=num_seqs * 100003 + context)
    out = cuda.device_array(tuple(device["q"].shape), np.float32)
    moved = model.compulsory_bytes_decode(lens, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"])
    flops = model.flops_decode(lens, SHAPE["heads"], SHAPE["d"])
    args = (device["q"], device["k_cache"], device["v_cache"], device["block_tables"], device["context_lens"])
    cases = [Timed(name, lambda rung=rung, extra=_extra(rung, context): rung(*args, out=out, **extra), moved, flops)
             for name, rung in paged_attention.RUNGS.items()]
    keys, values = gathered_kv(t, context)
    del t["k_cache"], t["v_cache"]            # the numba views keep the cache alive
    q = t["q"][:, :, None, :]
    return cases + [Timed("torch_sdpa", baselines.torch_sdpa_on_device(q, keys, values), moved, flops)]


def paged_sweep() -> Sweep:
    return Sweep(
        name="day06_paged_timing",
        notes=(f"paged decode, every rung of kernels.paged_attention.RUNGS: {', '.join(paged_attention.RUNGS)} (v1: a "
               f"block per head, v2: split-K, partitions chosen to fill the GPU, then a merge "
               f"kernel, v3: v2's partitions and merge in one launch, the last block of each head merges) against "
               f"torch.nn.functional.scaled_dot_product_attention fp32 on the same K and V gathered into a "
               f"contiguous tensor (gather not timed); heads={SHAPE['heads']} kv_heads={SHAPE['kv_heads']} "
               f"d={SHAPE['d']} block_size={SHAPE['block_size']}, shuffled block tables, every sequence of the "
               f"point at the same context. gbps: K and V of every context read once per query head, plus q "
               f"and out, per second of the median; fraction_of_copy: gbps over the copy bandwidth of this run; "
               f"speedup_over_torch: torch's median time over the rung's, calls queued back to back from Python; "
               f"kernel_ms: the median with the host's launch cost hidden behind a busy kernel (the GPU's time "
               f"alone, as in a CUDA graph), kernel_speedup_over_torch: the same ratio on kernel_ms."),
        points=POINTS, quick_points=QUICK_POINTS,
        shape=lambda point: dict(num_seqs=point[0], context=point[1], **SHAPE), cases=_timed,
        finish=harness.finish_all(harness.fraction_of("torch_sdpa", "speedup_over_torch"),
                                  harness.fraction_of("torch_sdpa", "kernel_speedup_over_torch", time="kernel_ms")),
        fraction_of_copy=True, kernel_time=True)


# --------------------------------------------------------------------------- resources, Nsight, sanitizer

def kernel_resources() -> list[dict]:
    """Registers, local memory (bytes per thread) and shared memory of each day-6 kernel at d=128."""
    device, _ = paged_inputs(2, [40, 7], seed=1)
    args = (device["q"], device["k_cache"], device["v_cache"], device["block_tables"], device["context_lens"])
    rows = []
    for name, rung in paged_attention.RUNGS.items():
        extra = {"partition_size": 16, **_extra(rung, 40)} if _extra(rung, 40) else {}
        rung(*args, **extra)
        kernels = {kernel.__name__: kernel for kernel in rung.kernels.values()}
        rows += harness.compiled_resources(kernels, rung=name, d=SHAPE["d"])
    return rows


def resources_recording(quick: bool = False):
    from course.records import new_recording

    rec = new_recording("day06_kernel_resources")
    rec.notes = (f"registers, local memory (bytes per thread) and static shared memory per block of the day-6 "
                 f"kernels at d={SHAPE['d']} (TOKENS_IN_FLIGHT={paged_attention.TOKENS_IN_FLIGHT}, "
                 f"WARPS={paged_attention.WARPS})")
    for row in kernel_resources():
        rec.add(**row)
    return rec


def _launch(name: str, context: int):
    lens = [context] * NCU_SEQS
    device, _ = paged_inputs(NCU_SEQS, lens, seed=context)
    args = (device["q"], device["k_cache"], device["v_cache"], device["block_tables"], device["context_lens"])
    rung = paged_attention.RUNGS[name]
    return lambda: rung(*args, **_extra(rung, context))


def ncu_cases() -> list[NcuCase]:
    return [NcuCase(name, n, harness.lazy(_launch, name, n)) for name in paged_attention.RUNGS for n in NCU_CONTEXTS]


def ncu_shape(context: int) -> dict:
    lens = [context] * NCU_SEQS
    return dict(num_seqs=NCU_SEQS, context=context, **SHAPE,
                model_bytes=model.compulsory_bytes_decode(lens, SHAPE["heads"], SHAPE["kv_heads"], SHAPE["d"]))


def sanitize() -> None:
    """Every kernel once, small: partial last pages, an empty context, 2 query heads per KV head; v3
    twice, the second launch on the ticket counters the first left."""
    from numba import cuda

    device, _ = paged_inputs(3, [37, 0, 16], seed=2, heads=4, kv_heads=2, d=24)
    args = (device["q"], device["k_cache"], device["v_cache"], device["block_tables"], device["context_lens"])
    paged_attention.paged_attention_v1_block_per_head(*args)
    paged_attention.paged_attention_v2_split_k(*args, max_context=37, partition_size=8)
    for _ in range(2):
        paged_attention.paged_attention_v3_one_launch(*args, max_context=37, partition_size=8)
    k_new = cuda.to_device(np.ones((2, 2, 24), np.float32))
    kv_cache.kv_cache_write(k_new, k_new, cuda.to_device(np.array([0, 2], np.int32)),
                            cuda.to_device(np.array([37, 16], np.int32)), device["block_tables"],
                            device["k_cache"], device["v_cache"])
    cuda.synchronize()


def recorder() -> harness.Recorder:
    return harness.Recorder(
        day="day06", checks=lambda quick: checks(1024 if quick else CHECK_CONTEXT),
        check_recording="day06_full_size_checks",
        check_notes=("v1, v2 and v3 against kernels.reference.paged_attention (float64), 8 sequences of mixed "
                     "lengths in a shuffled block table, each rung's second call (output poisoned after the first); "
                     "kv_cache_write against NumPy, exactly."),
        sweeps=lambda: [paged_sweep()], extras=lambda quick: [resources_recording(quick)],
        ncu_cases=ncu_cases, sanitize=sanitize, ncu_shape=ncu_shape)


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time v1, v2, v3 and torch against (num_seqs, context); save all."""
    paths = harness.record(recorder(), out_dir, quick=quick)
    timing = next(p for p in paths if p.name == "day06_paged_timing.json")
    from course.records import load_recording

    for row in load_recording(timing).rows:
        print(f"   {row['rung']:<20} S={row['num_seqs']:>3} context={row['context']:>6} "
              f"{row['median_ms']:8.3f} ms  {row['fraction_of_copy']:.2f} of copy  "
              f"{row['speedup_over_torch']:.2f}x torch", flush=True)
    return paths


def record_other_gpu(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """On a second GPU: the day's checks at full size (raises on a failure), then the timing sweep at
    ``OTHER_GPU_POINTS`` (only the first with ``quick``), saved as ``day06_paged_timing_other_gpu``."""
    return [harness.record_other_gpu(checks(1024 if quick else CHECK_CONTEXT), paged_sweep(), OTHER_GPU_POINTS,
                                     out_dir, checked="every rung's full-size checks", quick=quick)]
