"""Day 8's matrix products, declared for ``course.record.day08``'s recorder: torch's roofs and the tensor-core GEMM ladder.

- ``matmul_sweep()``: ``day08_matmul_roofs``, torch matrix products at ``MATMUL_N``^3 in float32 (TF32 off: CUDA
  cores), fp16 and bf16 (tensor cores, float32 accumulation) and fp8 e4m3 (``torch._scaled_mm``, where this torch
  has it): the compute roofs the lesson draws.
- ``tc_gemm_sweep()``: ``day08_tc_gemm_timing``, the ladder of ``kernels.tensor_core_gemm`` (fp16 in, float32 out)
  at N = ``TC_GEMM_N`` (M = N = K) beside torch's fp16 matmul (cuBLAS); ``tc_gemm_tiles()``: the tiles
  ``tc_gemm_v7_tuned`` timed and chose; ``tc_gemm_resources()``: registers, local and shared memory of every
  kernel of the ladder.
- ``ncu_shared_cases()``: each rung at ``TC_NCU_N``^3 for ``python -m course.record day08 --ncu-shared``.
- ``gemm_checks(n)``: every rung of the ladder at n^3 against the float64 product (the checks before
  ``day08_tc_gemm_timing_other_gpu``, day 8's recording on a second GPU).
"""

from __future__ import annotations

import numpy as np

from course.record import harness
from course.record.harness import Check, NcuCase, Sweep, Timed

MATMUL_N = 8192
TC_GEMM_N = (256, 512, 1024, 2048, 4096, 8192)       # the tensor-core GEMM ladder's sizes (M = N = K)
TUNED_TC_GEMM = "tc_gemm_v7_tuned"                   # the rung that times its tiles on its first launch
OTHER_GPU_N = (4096, 8192)                           # the sizes recorded on a second GPU, the goals' sizes
GEMM_CHECK_N = 4096                                  # the full-size checks' M = N = K


def _square_inputs(n: int):
    """Random fp16 a and w of n x n on the GPU, and a float32 output of n x n."""
    from numba import cuda

    rng = np.random.default_rng(n)
    a, w = (cuda.to_device(rng.standard_normal((n, n)).astype(np.float16)) for _ in range(2))
    return a, w, cuda.device_array((n, n), np.float32)


def gemm_checks(n: int = GEMM_CHECK_N) -> list[Check]:
    """Every rung of the ladder on ``_square_inputs(n)`` against ``reference.gemm`` of the same fp16 numbers in
    float64 (float32's tolerance: the products of fp16 numbers are exact, the sums float32's)."""
    from kernels import reference
    from kernels import tensor_core_gemm as tc

    a, w, out = _square_inputs(n)
    want = reference.gemm(a.copy_to_host(), w.copy_to_host().T)
    return [Check(f"c of {rung} (float16), {n} x {n} x {n}", lambda gemm=tc.RUNGS[rung]: gemm(a, w, out=out),
                  out.copy_to_host, lambda: want, seed=n, poisoned=(out,),
                  options=dict(dims=("M", "N"), tile={"M": tc.BLOCK_M, "N": tc.BLOCK_N}),
                  columns=dict(rung=rung, fmt="float16", M=n, N=n, K=n))
            for rung in tc.RUNGS]


def _matmul_cases(n: int) -> list[Timed]:
    from course.record import baselines

    torch = baselines.cuda_torch()
    generator = torch.Generator(device="cuda").manual_seed(n)
    a32, b32 = (torch.randn((n, n), generator=generator, device="cuda") for _ in range(2))
    flops = 2 * n ** 3
    cases = []
    for name, dtype in (("torch_matmul_fp32", torch.float32), ("torch_matmul_fp16", torch.float16),
                        ("torch_matmul_bf16", torch.bfloat16)):
        a, b = a32.to(dtype), b32.to(dtype)
        out = torch.empty((n, n), device="cuda", dtype=dtype)
        cases.append(Timed(name, baselines.torch_matmul(a, b, out), 3 * n * n * a.element_size(), flops,
                           {"fmt": str(dtype).removeprefix("torch.")}))
    scaled = _fp8_matmul(torch, a32, b32)
    if scaled is not None:
        cases.append(Timed("torch_matmul_fp8_e4m3", scaled, 2 * n * n + 2 * n * n, flops, {"fmt": "fp8_e4m3"}))
    return cases


def _fp8_matmul(torch, a32, b32):
    """torch._scaled_mm on e4m3 operands (b column-major, as it requires) into bf16, or None where this
    torch or this GPU has none."""
    try:
        a = a32.to(torch.float8_e4m3fn)
        b = b32.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        call = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        call()
        torch.cuda.synchronize()
        return call
    except (AttributeError, RuntimeError, TypeError) as why:
        print(f"   no fp8 matrix product here ({why})", flush=True)
        return None


def matmul_sweep() -> Sweep:
    return Sweep(
        name="day08_matmul_roofs",
        notes=(f"torch.matmul of two random {MATMUL_N} x {MATMUL_N} matrices into a third: float32 with TF32 off "
               f"(CUDA cores), fp16 and bf16 (tensor cores, float32 accumulation), and torch._scaled_mm on fp8 e4m3 "
               f"operands into bf16 (tensor cores) where available; tflops from 2 N^3; gbps from the three "
               f"matrices read or written once."),
        points=(MATMUL_N,), quick_points=(4096,),
        shape=lambda n: dict(M=n, N=n, K=n),
        cases=_matmul_cases)


def _tc_gemm_cases(n: int) -> list[Timed]:
    from numba import cuda

    from course.record import baselines
    from kernels import tensor_core_gemm as tc

    torch = baselines.cuda_torch()
    generator = torch.Generator(device="cuda").manual_seed(n)
    a, w = (torch.randn((n, n), generator=generator, device="cuda").half() for _ in range(2))
    out32 = torch.empty((n, n), device="cuda", dtype=torch.float32)
    out16 = torch.empty((n, n), device="cuda", dtype=torch.float16)
    da, dw, dout = (cuda.as_cuda_array(x) for x in (a, w, out32))     # no copies: torch's memory
    flops, moved = 2 * n ** 3, 2 * n * n * 2 + 4 * n * n
    cases = []
    for rung in tc.RUNGS:
        columns = {"fmt": "float16"}
        if rung == TUNED_TC_GEMM:
            tc.RUNGS[rung](da, dw, out=dout)            # the first launch times each tile and keeps the fastest
            columns["tile"] = "%d:%dx%d" % tc.tile_for("float16", n, n, n)
        cases.append(Timed(rung, lambda gemm=tc.RUNGS[rung]: gemm(da, dw, out=dout), moved, flops, columns))
    cases.append(Timed("torch_matmul_fp16", lambda: torch.matmul(a, w.t(), out=out16), 3 * n * n * 2, flops,
                       {"fmt": "float16"}))
    return cases


def tc_gemm_sweep() -> Sweep:
    return Sweep(
        name="day08_tc_gemm_timing",
        notes=("the tensor-core GEMM ladder (kernels.tensor_core_gemm.RUNGS): C (float32) = A W^T for random fp16 A and "
               "W of N x N, and torch.matmul(A, W.t()) into fp16 (cuBLAS, tensor cores, float32 accumulation: "
               "torch_matmul_fp16); tflops from 2 N^3 and the median of calls from Python (launch included); "
               "gbps from A and W read once and C written once; fraction_of_cublas: torch_matmul_fp16's median "
               "over the row's; kernel_ms: the GPU's time alone (launch cost hidden), kernel_fraction_of_cublas "
               "the same ratio of those; tile: the tile tc_gemm_v7_tuned chose on its first launch, "
               "block:warp_tile_m x warp_tile_n (its timings of every tile: day08_tc_gemm_tiles)."),
        points=TC_GEMM_N, quick_points=TC_GEMM_N[:2],
        shape=lambda n: dict(M=n, N=n, K=n), kernel_time=True,
        cases=_tc_gemm_cases,
        finish=harness.finish_all(harness.fraction_of("torch_matmul_fp16", "fraction_of_cublas"),
                                  harness.fraction_of("torch_matmul_fp16", "kernel_fraction_of_cublas",
                                                      time="kernel_ms")))


def tc_gemm_tiles():
    """The ``day08_tc_gemm_tiles`` recording: every choice tc_gemm_v7_tuned made in this process (the sweep's first
    launches), each tile's ms per launch, the chosen one marked."""
    from course.records import new_recording
    from kernels import tensor_core_gemm as tc

    rec = new_recording("day08_tc_gemm_tiles")
    rec.notes = ("tc_gemm_v7_tuned's first launch at each size and format: ms per launch of each tile (block:warp_tile_m"
                 " x warp_tile_n of kernels.tensor_core_gemm.TILES), the mean of 5 back-to-back launches between CUDA "
                 "events after one warm-up (kernels.tuning.time_each), on the sweep's inputs; chosen: the fastest, "
                 "which v7 launched from then on.")
    for found in tc.tuned():
        for tile, ms in found["ms"].items():
            rec.add(rung=TUNED_TC_GEMM, gpu=found["gpu"], fmt=found["fmt"], M=found["M"], N=found["N"], K=found["K"],
                    tile="%d:%dx%d" % tile, block=tile[0], warp_tile_m=tile[1], warp_tile_n=tile[2], ms=ms,
                    chosen=tile == tuple(found["choice"]))
    return rec


TC_RESOURCE_SIZE = 256      # the launch that compiles each tensor-core GEMM kernel for the resource table


def tc_gemm_resources():
    """The ``day08_tc_gemm_resources`` recording: registers, local memory and static shared memory the compiler gave
    each tensor-core GEMM kernel for fp16 on this GPU (v7's at each of its tiles), with its PTX's local loads and
    stores, and the threads of its block."""
    from course.records import new_recording
    from kernels import tensor_core_gemm as tc

    a, w, out = _square_inputs(TC_RESOURCE_SIZE)
    threads = {"tc_gemm_v5_large_tiles": tc.LARGE_THREADS, "tc_gemm_v6_wide_warps": tc.WIDE_THREADS,
               "tc_gemm_v8_deep_steps": tc.WIDE_THREADS, "tc_gemm_v9_paired_stores": tc.WIDE_THREADS}
    # The dynamic shared memory each launch gives (v8's and v9's ring); the compiler reports static shared memory only.
    ring = tc.ring_bytes(tc.LARGE_BLOCK_M, tc.LARGE_BLOCK_N, tc.DEEP_K, tc.DEEP_STAGES)
    dynamic = {"tc_gemm_v8_deep_steps": ring, "tc_gemm_v9_paired_stores": ring}
    rec = new_recording("day08_tc_gemm_resources")
    rec.notes = ("registers, local memory (bytes per thread) and static shared memory per block the compiler gave each "
                 "kernel of kernels.tensor_core_gemm for fp16 (tc_gemm_v7_tuned's at each tile, block:warp_tile_m x "
                 "warp_tile_n), the ld.local / st.local instructions of its PTX, and its threads a block; "
                 "shared_bytes includes the dynamic shared memory its launches give (dynamic_shared_bytes: "
                 "the rings of tc_gemm_v8_deep_steps and tc_gemm_v9_paired_stores).")
    for name, rung in tc.RUNGS.items():
        if name == TUNED_TC_GEMM:
            for tile in tc.TILES:
                rung(a, w, out=out, tile=tile)
                for row in harness.compiled_resources({name: tc.tc_gemm_v7_tuned_kernel("float16", tile)}, key="rung",
                                                      ptx_locals=True, tile="%d:%dx%d" % tile):
                    rec.add(**row, dynamic_shared_bytes=0, threads=tc.tile_threads(tile))
            continue
        rung(a, w, out=out)
        for row in harness.compiled_resources({name: rung.kernels["kernel"]("float16")}, key="rung", ptx_locals=True,
                                              tile=""):
            row["dynamic_shared_bytes"] = dynamic.get(name, 0)
            row["shared_bytes"] += row["dynamic_shared_bytes"]
            rec.add(**row, threads=threads.get(name, tc.THREADS))
    return rec


TC_NCU_N = 4096          # the tensor-core GEMM ladder's Nsight launches: M = N = K


def _tc_gemm_ncu_launch(rung: str, n: int):
    from kernels import tensor_core_gemm as tc

    a, w, out = _square_inputs(n)

    def launch():
        tc.RUNGS[rung](a, w, out=out)

    return launch


def ncu_shared_cases() -> list[NcuCase]:
    """Each rung of the tensor-core GEMM ladder on fp16 matrices of TC_NCU_N^3, for ``--ncu-shared``; not v7, which
    runs v4's to v6's loops at the tile it chose."""
    from kernels import tensor_core_gemm as tc

    return [NcuCase(rung, TC_NCU_N, harness.lazy(_tc_gemm_ncu_launch, rung, TC_NCU_N), {"fmt": "float16"})
            for rung in tc.RUNGS if rung != TUNED_TC_GEMM]
