"""GPU recordings of day 5: tiled and flash attention (``kernels.flash_attention``).

``record(out_dir)`` checks ``attention_v3_tiled``, ``attention_v4_flash`` and
``attention_v5_flash_registers`` (full, and causal with variable lengths) at full size against the
float64 reference, then writes:

- ``day05_full_size_checks.json``: one row per check: rung, causal, kv_lens (as text), N, B, H, d,
  rel_err, max_abs_err, seed.
- ``day05_kernel_resources.json``: registers, local and shared memory of the v3, v4 and v5 kernels.
- ``day05_flash_timing.json``: every attention rung (v1 naive, v2 fused rows, v3 tiled, v4 flash,
  v5 flash registers, and v4 and v5 causal) and torch SDPA fp32 (causal and not) against N; rows: rung, N, B, H, d, causal,
  median_ms, p10_ms, p90_ms, gbps, tflops, and ``fraction_of_sdpa`` (torch's median time over the
  rung's, same N and mask: 1.0 means as fast as torch).

``ncu_cases()`` gives the launches whose DRAM bytes Nsight Compute records as ``day05_dram_bytes``
(labels ``v1_naive``, ``v2_fused_rows``, ``v3_tiled``, ``v4_flash``, ``v4_flash_causal``,
``v5_flash_registers``, ``v5_flash_registers_causal`` at
``NCU_SHAPE`` and each N of ``NCU_SIZES``); ``sanitize()`` launches v3, v4 and v5 once, small.
"""

from __future__ import annotations

import pathlib

import numpy as np

from course.models import attention as model
from course.record._attention import device_inputs, host_inputs, lazy_case, time_rows, torch_sdpa

SHAPE = {"B": 4, "H": 16, "d": 64}
SIZES = (256, 512, 1024, 2048, 4096)
QUICK_SIZES = (256, 1024)
CHECK_N = 4096
NCU_SHAPE = SHAPE
NCU_SIZES = (512, 1024, 2048, 4096)


def full_size_kv_lens(n: int, batch: int) -> np.ndarray:
    """Lengths for the variable-length check: all keys, a length off the tile grid, one key, none."""
    lens = [n, n - 37, 1, 0]
    return np.array((lens * batch)[:batch], dtype=np.int32)


def _reference(q, k, v, *, causal: bool, kv_lens):
    """kernels.reference.attention, one batch element at a time (a float64 N×N matrix per head)."""
    from kernels import reference

    return np.concatenate([reference.attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], causal=causal,
                                               kv_lens=None if kv_lens is None else kv_lens[b:b + 1])
                           for b in range(q.shape[0])])


def check_full_size(n: int = CHECK_N) -> list[dict]:
    """Check v3, v4 and v5 at (B, H, n, d): full attention, then causal with variable lengths; one row per check."""
    from course.checking import check
    from kernels.flash_attention import TILE_Q, attention_v3_tiled, attention_v4_flash, attention_v5_flash_registers

    qh, kh, vh, seed = host_inputs(n=n, **SHAPE)
    q, k, v = device_inputs(qh, kh, vh)
    lens = full_size_kv_lens(n, SHAPE["B"])
    cases = [(False, None, {"v3_tiled": lambda: attention_v3_tiled(q, k, v),
                            "v4_flash": lambda: attention_v4_flash(q, k, v),
                            "v5_flash_registers": lambda: attention_v5_flash_registers(q, k, v)}),
             (True, lens, {"v4_flash": lambda: attention_v4_flash(q, k, v, causal=True, kv_lens=lens),
                           "v5_flash_registers": lambda: attention_v5_flash_registers(q, k, v, causal=True,
                                                                                      kv_lens=lens)})]
    rows = []
    for causal, kv_lens, runs in cases:
        ref = _reference(qh, kh, vh, causal=causal, kv_lens=kv_lens)
        for rung, run in runs.items():
            res = check(run().copy_to_host(), ref, name=f"O of {rung}, causal={causal}, kv_lens={kv_lens}",
                        dims=("batch", "head", "row", "col"), tile={"row": TILE_Q, "col": None}, seed=seed)
            rows.append(dict(rung=rung, causal=causal, kv_lens=None if kv_lens is None else str(kv_lens.tolist()),
                             N=n, **SHAPE, rel_err=float(res.rel_err), max_abs_err=float(res.max_abs_err),
                             seed=seed))
            print(f"   check {rung:<18} causal={causal!s:<5} rel_err {res.rel_err:.2e}", flush=True)
        del ref
    return rows


def timing_recording(quick: bool = False, ceilings=None):
    """Time every attention rung and torch SDPA fp32 against N at SHAPE; return the Recording (not saved)."""
    from course.records import new_recording
    from kernels.attention import attention_v1_naive, attention_v2_fused_rows
    from kernels.flash_attention import TILE_Q, attention_v3_tiled, attention_v4_flash, attention_v5_flash_registers

    rec = new_recording("day05_flash_timing", ceilings=ceilings)
    rec.notes = ("attention rungs v1 naive, v2 fused rows, v3 tiled, v4 flash and v5 flash registers "
                 "(v4 and v5 causal and not, "
                 f"TILE_Q={TILE_Q}) against torch.nn.functional.scaled_dot_product_attention in fp32 "
                 f"(TF32 off), B={SHAPE['B']} H={SHAPE['H']} d={SHAPE['d']}, M = N. gbps: compulsory "
                 "bytes per second (Q, K, V read and O written once; plus S and P for v1); tflops: 2 FLOPs "
                 "per multiply-add over the (query, key) pairs computed (about half when causal); "
                 "fraction_of_sdpa: torch's median time over the rung's, same N and mask.")
    B, H, d = SHAPE["B"], SHAPE["H"], SHAPE["d"]
    for n in (QUICK_SIZES if quick else SIZES):
        qh, kh, vh, _ = host_inputs(n=n, **SHAPE)
        q, k, v = device_inputs(qh, kh, vh)
        o = device_inputs(np.empty_like(qh))[0]
        lens = device_inputs(np.full(B, n, dtype=np.int32))[0]  # on the GPU already: no copy per call
        compulsory = model.compulsory_bytes_fused(B, H, n, d)
        for causal in (False, True):
            flops = model.flops_attention(B, H, n, d, causal=causal)
            if causal:
                runs = {"v4_flash_causal": (lambda: attention_v4_flash(q, k, v, causal=True, kv_lens=lens, out=o),
                                            compulsory, flops),
                        "v5_flash_registers_causal": (
                            lambda: attention_v5_flash_registers(q, k, v, causal=True, kv_lens=lens, out=o),
                            compulsory, flops),
                        "torch_sdpa_causal": (torch_sdpa(qh, kh, vh, causal=True), compulsory, flops)}
            else:
                runs = {"v1_naive": (lambda: attention_v1_naive(q, k, v, out=o),
                                     model.compulsory_bytes_naive(B, H, n, d), flops),
                        "v2_fused_rows": (lambda: attention_v2_fused_rows(q, k, v, out=o), compulsory, flops),
                        "v3_tiled": (lambda: attention_v3_tiled(q, k, v, out=o), compulsory, flops),
                        "v4_flash": (lambda: attention_v4_flash(q, k, v, kv_lens=lens, out=o), compulsory, flops),
                        "v5_flash_registers": (lambda: attention_v5_flash_registers(q, k, v, kv_lens=lens, out=o),
                                               compulsory, flops),
                        "torch_sdpa": (torch_sdpa(qh, kh, vh, causal=False), compulsory, flops)}
            rows = time_rows(runs, dict(N=n, **SHAPE, causal=causal), quick=quick)
            torch_ms = next(r["median_ms"] for r in rows if r["rung"].startswith("torch"))
            for row in rows:
                row["fraction_of_sdpa"] = torch_ms / row["median_ms"]
                rec.add(**row)
        del q, k, v, o, lens
    return rec


def flash_fraction_summary(rec) -> str:
    """One line per flash rung and mask: its throughput as a fraction of torch SDPA fp32 at the largest N."""
    rows = rec.rows if hasattr(rec, "rows") else rec
    lines = []
    for rung in ("v4_flash", "v4_flash_causal", "v5_flash_registers", "v5_flash_registers_causal"):
        mine = [r for r in rows if r["rung"] == rung]
        if mine:
            top = max(mine, key=lambda r: r["N"])
            lines.append(f"{rung} at N={top['N']}: {top['fraction_of_sdpa']:.2f} of torch SDPA fp32 "
                         f"({top['median_ms']:.2f} ms, {top['tflops']:.2f} TFLOP/s)")
    return "\n".join(lines)


def kernel_resources() -> list[dict]:
    """Registers, local memory (bytes per thread) and shared memory of the v3, v4 and v5 kernels at d=64.

    Local memory is per-thread storage in DRAM behind the caches: a kernel that needs it pays
    memory traffic the algorithm does not ask for. Each kernel is compiled by one small launch.
    """
    from kernels import flash_attention as fa

    q, k, v = device_inputs(*host_inputs(B=1, H=1, n=70, m=70, d=SHAPE["d"])[:3])
    fa.attention_v3_tiled(q, k, v)
    fa.attention_v4_flash(q, k, v)
    fa.attention_v5_flash_registers(q, k, v)
    kernels = {"v3_tiled": fa.attention_v3_tiled_kernel, "v4_flash": fa.attention_v4_flash_kernel,
               "v5_flash_registers": fa.attention_v5_flash_registers_kernel(SHAPE["d"])}
    rows = []
    for rung, kernel in kernels.items():
        for arg_types, compiled in kernel.overloads.items():
            ptx = kernel.inspect_asm(arg_types)
            rows.append(dict(rung=rung, d=SHAPE["d"], registers=int(compiled.regs_per_thread),
                             local_bytes=int(compiled.local_mem_per_thread),
                             shared_bytes=int(compiled.shared_mem_per_block),
                             ptx_local_loads=ptx.count("ld.local"), ptx_local_stores=ptx.count("st.local")))
            print(f"   {rung:<20} {rows[-1]['registers']:>4} registers  {rows[-1]['local_bytes']:>5} B local  "
                  f"{rows[-1]['shared_bytes']:>6} B shared", flush=True)
    return rows


def record(out_dir: pathlib.Path, quick: bool = False) -> list[pathlib.Path]:
    """Check at full size, then time every rung and torch SDPA; save both recordings."""
    from course.records import new_recording
    from course.timing import measure_ceilings

    out_dir = pathlib.Path(out_dir)
    checks = new_recording("day05_full_size_checks")
    checks.notes = ("attention_v3_tiled, attention_v4_flash and attention_v5_flash_registers against kernels.reference.attention (float64) "
                    f"at B={SHAPE['B']} H={SHAPE['H']} d={SHAPE['d']}; fp32 passes at rel_err <= 1e-4.")
    for row in check_full_size(1024 if quick else CHECK_N):
        checks.add(**row)
    resources = new_recording("day05_kernel_resources")
    resources.notes = ("registers, local memory (bytes per thread) and static shared memory per block that the "
                       "compiler gave each kernel at d=64, and the ld.local / st.local instructions in its PTX")
    for row in kernel_resources():
        resources.add(**row)
    timing = timing_recording(quick, ceilings=measure_ceilings())
    print(flash_fraction_summary(timing), flush=True)
    return [checks.save(out_dir / "day05_full_size_checks.json"),
            resources.save(out_dir / "day05_kernel_resources.json"),
            timing.save(out_dir / "day05_flash_timing.json")]


def _launch(rung: str, n: int):
    """One launch of ``rung`` at (NCU_SHAPE, n) on device arrays, as a callable."""
    from kernels.attention import attention_v1_naive, attention_v2_fused_rows
    from kernels.flash_attention import attention_v3_tiled, attention_v4_flash, attention_v5_flash_registers

    qh, kh, vh, _ = host_inputs(n=n, **NCU_SHAPE)
    q, k, v = device_inputs(qh, kh, vh)
    o = device_inputs(np.empty_like(qh))[0]
    lens = device_inputs(np.full(NCU_SHAPE["B"], n, dtype=np.int32))[0]
    launches = {"v1_naive": lambda: attention_v1_naive(q, k, v, out=o),
                "v2_fused_rows": lambda: attention_v2_fused_rows(q, k, v, out=o),
                "v3_tiled": lambda: attention_v3_tiled(q, k, v, out=o),
                "v4_flash": lambda: attention_v4_flash(q, k, v, kv_lens=lens, out=o),
                "v4_flash_causal": lambda: attention_v4_flash(q, k, v, causal=True, kv_lens=lens, out=o),
                "v5_flash_registers": lambda: attention_v5_flash_registers(q, k, v, kv_lens=lens, out=o),
                "v5_flash_registers_causal": lambda: attention_v5_flash_registers(q, k, v, causal=True,
                                                                                  kv_lens=lens, out=o)}
    return launches[rung]


NCU_RUNGS = ("v1_naive", "v2_fused_rows", "v3_tiled", "v4_flash", "v4_flash_causal", "v5_flash_registers",
             "v5_flash_registers_causal")


def ncu_cases() -> list:
    """(label, N, run): one launch of each rung at (NCU_SHAPE, N); inputs are made on the first call."""
    return [(rung, n, lazy_case(_launch, rung, n)) for rung in NCU_RUNGS for n in NCU_SIZES]


def sanitize() -> None:
    """Launch v3, v4 and v5 (full; causal with variable lengths) once at a small awkward size."""
    from numba import cuda

    from kernels.flash_attention import attention_v3_tiled, attention_v4_flash, attention_v5_flash_registers

    q, k, v = device_inputs(*host_inputs(B=3, H=2, n=97, m=75, d=24)[:3])
    lens = np.array([75, 40, 0], dtype=np.int32)
    attention_v3_tiled(q, k, v)
    for flash in (attention_v4_flash, attention_v5_flash_registers):
        flash(q, k, v)
        flash(q, k, v, causal=True, kv_lens=lens)
    cuda.synchronize()
