"""course.timing on a real GPU: events time numba kernels and torch work, ceilings are plausible.

Skipped on the simulator; run with `make test-gpu` on a machine with an NVIDIA GPU.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

N = 1 << 24      # 64 MiB per float32 array: larger than any L2, so each call goes to DRAM


@pytest.fixture(scope="module")
def add_one():
    from numba import cuda

    @cuda.jit
    def add_one_kernel(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = x[i] + 1.0

    x = cuda.to_device(np.arange(N, dtype=np.float32))
    out = cuda.device_array(N, dtype=np.float32)
    threads = 256
    blocks = (N + threads - 1) // threads
    return lambda: add_one_kernel[blocks, threads](x, out), x, out


def test_benchmark_a_numba_kernel(add_one):
    from course.timing import benchmark, gbps

    launch, x, out = add_one
    t = benchmark(launch, warmup=3, repeat=20)
    assert len(t.samples_ms) == 20 and t.p10_ms <= t.median_ms <= t.p90_ms
    assert 0 < t.median_ms < 100
    rate = gbps(2 * 4 * N, t.median_ms)
    assert 50 < rate < 10_000, f"{rate:.0f} GB/s is not a plausible DRAM bandwidth"
    assert np.array_equal(out.copy_to_host()[:4], np.arange(4, dtype=np.float32) + 1)
    assert "ms" in str(t)


def test_flushing_l2_runs_and_is_not_faster(add_one):
    from course.timing import benchmark

    launch, _, _ = add_one
    warm = benchmark(launch, warmup=3, repeat=20)
    flushed = benchmark(launch, warmup=3, repeat=20, flush_l2=True)
    assert flushed.flush_l2 and flushed.median_ms > 0.8 * warm.median_ms


def test_benchmark_sees_torch_work():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    from course.timing import benchmark, gbps

    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")   # 256 MiB
    dst = torch.empty_like(src)
    t = benchmark(lambda: dst.copy_(src), warmup=3, repeat=20)
    rate = gbps(2 * src.numel(), t.median_ms)
    # A time near zero would mean the events missed torch's stream.
    assert 50 < rate < 10_000, f"torch copy at {rate:.0f} GB/s: events did not bracket the copy?"


def test_ceilings_are_plausible_and_cached():
    import time

    from course.timing import measure_ceilings

    first = measure_ceilings()
    assert 100 < first["copy_gbps"] < 10_000
    if first["fp32_tflops"] is not None:
        assert 1 < first["fp32_tflops"] < 200, "fp32 without TF32 is tens of TFLOP/s at most"
    start = time.perf_counter()
    assert measure_ceilings() == first
    assert time.perf_counter() - start < 0.1


def test_tf32_setting_is_restored():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    from course.timing import measure_ceilings

    before = torch.backends.cuda.matmul.allow_tf32
    measure_ceilings(refresh=True)
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_new_recording_names_the_gpu():
    from course.records import live_or_recorded, new_recording

    rec = new_recording("day99_gpu_probe")
    assert rec.device != "CUDA simulator" and "CUDA" in rec.driver
    got, live = live_or_recorded("day99_gpu_probe", lambda: rec)
    assert live and got is rec and got.stamp.startswith("live on ")
