"""Day 9, quantized GEMV and GEMM: the Q8_0 quantizer bit for bit (codes and scales), the Q4_1 GEMV from the GGUF
bytes, its values and its traffic (each byte of W read once, x once per row), and the W8A8 GEMM on int8 codes, its
exact integer sums and its scaled epilogue."""

from __future__ import annotations

import numpy as np

from course.checking import is_poison, poison, random_inputs

from ._common import KernelFailed, _counted, _launch_explained, _passed, _raise_problems, _with_findings

__all__ = [
    "q8_0_quantize_matches_reference", "q8_0_quantize_edge_blocks", "q8_0_quantize_scales_per_block",
    "q4_1_gemv_matches_reference", "q4_1_gemv_position_coded", "q4_1_gemv_traffic_fits",
    "Q8_0_TIE_AMAXES", "q8_0_quantize_case", "q8_0_quantize_run", "check_q8_0_codes", "check_q8_0_scales",
    "q4_1_gemv_case", "q4_1_gemv_run", "check_q4_1_gemv", "q4_1_gemv_traffic_problems",
    "w8a8_gemm_exact_sums", "w8a8_gemm_scaled_epilogue", "w8a8_gemm_edges", "w8a8_gemm_case", "w8a8_gemm_run",
    "check_w8a8_gemm",
]

QK = 32     # weights per GGUF block

# A block's largest |x| whose d = amax / 127 has an inexact float32 inverse: for the ties (k + 0.5) d of such a
# block, x * (1 / d) and x / d round to different codes about once in three (127 gives d = 1, exact, where only
# the rounding rule of a tie decides).
Q8_0_TIE_AMAXES = (127.0, 3.0, 7.0, 100.0, 61.0, 15.0)


def _explained(launch):
    """``launch()``, an index past an array read as a warp past the last row or block."""
    from course.diagnoses.quantized import launch_findings

    return _launch_explained(launch, likely=launch_findings)


# --------------------------------------------------------------------------------------------- the quantizer

def q8_0_quantize_case(rng, rows: int, blocks: int, *, kind: str = "normal") -> np.ndarray:
    """x (rows, blocks * 32) float32 for the quantizer.

    kind "normal": standard normal blocks at magnitudes 1e-3, 1 and 300 (one per block, drawn), any value whose
    x * (1 / d) falls exactly on a tie moved one float32 step toward 0 (ties are the "ties" blocks'); "ties": block i
    holds its largest |x|, amax = ``Q8_0_TIE_AMAXES[i % 6]`` with a random sign at a random lane, and 31 values
    (k + 0.5) d, d = amax / 127 and k in [-126, 125], so x * (1 / d) is at or next to a tie, where rounding rules
    and a division part ways; the first two other lanes always hold k = 0 and -1, +-d / 2, which at amax 3, 7 or
    100 (where d (1 / d) is just below 1) come out at +-0.49999997: 0 for C's roundf, +-1 for (int)(v + 0.5); "edges": blocks cycled through a block of zeros, one of values so small that 1 / d
    overflows (near 1e-38), one whose largest |x| is negative, one whose largest |x| is at lane 31, a constant
    block of +-5 (every code +-127) and an outlier of 1000 among values near 1e-3 (codes 0 and 127)."""
    n = rows * blocks
    x = np.empty((n, QK), np.float64)
    for i in range(n):
        if kind == "normal":
            x[i] = rng.standard_normal(QK) * rng.choice([1e-3, 1.0, 300.0])
        elif kind == "ties":
            amax = Q8_0_TIE_AMAXES[i % len(Q8_0_TIE_AMAXES)]
            d = np.float32(np.float32(amax) / np.float32(127))
            x[i] = (rng.integers(-126, 126, QK) + 0.5) * np.float64(d)
            lane = rng.integers(QK)
            x[i, lane] = amax * rng.choice([-1.0, 1.0])
            x[i, [j for j in range(QK) if j != lane][:2]] = 0.5 * np.float64(d), -0.5 * np.float64(d)
        elif kind == "edges":
            x[i] = _edge_block(rng, i % 6)
        else:
            raise ValueError(f"kind must be 'normal', 'ties' or 'edges', got {kind!r}")
    x = x.astype(np.float32)
    if kind == "normal":            # about one draw in 300 puts a value at an exact tie: nudged, ties are their cell's
        d = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
        steps = x * np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
        tie = np.abs(steps) - np.floor(np.abs(steps)) == 0.5
        x[tie] = np.nextafter(x[tie], np.float32(0))
    return x.reshape(rows, blocks * QK)


def _edge_block(rng, which: int) -> np.ndarray:
    block = rng.standard_normal(QK)
    if which == 0:
        return np.zeros(QK)
    if which == 1:
        return block * 1e-38
    if which == 2:
        block[rng.integers(QK)] = -3 * np.abs(block).max()
    elif which == 3:
        block[QK - 1] = 2 * np.abs(block).max()
    elif which == 4:
        block = np.where(np.arange(QK) % 2 == 0, 5.0, -5.0)
    else:
        block = block * 1e-3
        block[rng.integers(QK)] = 1000.0
    return block


def q8_0_quantize_run(kernel, x):
    """Your quantize kernel through the course's launcher (``q8_0_quantize``: a warp per block of 32, GEMV_WARPS
    warps per thread block) on x (rows, K), codes and scales poisoned first: ``(codes, scales)``."""
    from kernels.quantized_gemv import q8_0_quantize

    rows, k = x.shape
    codes = poison(np.empty((rows, k), np.int8))
    scales = poison(np.empty((rows, k // QK), np.float32))
    try:
        return _explained(lambda: q8_0_quantize(x, out=codes, out_scales=scales, kernel=kernel))
    except ValueError as exc:          # a NaN converted to an integer: not an exception _explained reads
        from course.diagnoses.paged import kernel_line
        from course.diagnoses.quantized import launch_findings

        found = launch_findings(exc, kernel_line(exc))
        if found is None:
            raise
        raise KernelFailed(found[1], found[0]) from exc


def _block_label(x) -> str:
    return f"x of {x.shape[0]} rows of {x.shape[1] // QK} blocks"


def check_q8_0_codes(codes, x, *, seed=None, label: str = "") -> None:
    """The codes equal those of ``reference.quantize_q8_0(x)`` bit for bit; on failure name the first code that
    differs, what x * (1 / d) was there, and the rounding rule or the scale the codes follow."""
    from course.diagnoses.quantized import q8_0_code_findings
    from kernels import reference

    want, d, _ = reference.quantize_q8_1(x)
    got = np.asarray(codes)
    if got.dtype != np.int8 or got.shape != want.shape:
        raise AssertionError(f"codes must be int8 of shape {want.shape}, got {got.dtype} {got.shape}")
    wrong = got != want
    if not wrong.any():
        return
    row, col = (int(i) for i in np.argwhere(wrong)[0])
    b, lane = divmod(col, QK)
    scale = np.float32(d[row, b])
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        y = np.float32(x[row, col]) * (np.float32(1) / scale)
    written = "the poison -128, never written" if is_poison(got)[row, col] else str(int(got[row, col]))
    lines = [f"Q8_0 codes for {label or _block_label(x)} differ from the reference (seed {seed})",
             f"  wrong codes: {int(wrong.sum())} of {got.size}, in {int(wrong.reshape(-1, QK).any(axis=1).sum())} "
             f"blocks of {got.size // QK}",
             f"  first wrong: row {row}, block {b}, lane {lane}: x = {float(x[row, col]):.9g}, d = amax / 127 = "
             f"{float(scale):.9g}, x * (1 / d) = {float(y):.9g}: got {written}, expected {int(want[row, col])}"]
    found = q8_0_code_findings(got, x)
    if found:
        lines += ["likely cause:"] + [f"  - {message}" for _, message in found]
    else:
        lines.append("  a code is round(x * (1 / d)), 1 / d in float32 once per block, halves away from zero; 0 in a "
                     "block of zeros")
    if seed is not None:
        lines.append(f"Repeat it with random_inputs(seed={seed}).")
    raise AssertionError("\n".join(lines))


def check_q8_0_scales(scales, x, *, codes=None, seed=None, label: str = "") -> None:
    """The scales equal the float32 d = amax / 127 of each block of ``reference.quantize_q8_0`` bit for bit (0 for
    a block of zeros); with ``codes``, the bytes ``kernels.quantized_gemv.q8_0_bytes`` packs from them equal the
    reference's too. On failure name the first scale that differs and the choice of d the scales follow."""
    from course.diagnoses.quantized import q8_0_scale_findings
    from kernels import reference

    _, want, _ = reference.quantize_q8_1(x)
    got = np.asarray(scales)
    if got.dtype != np.float32 or got.shape != want.shape:
        raise AssertionError(f"scales must be float32 of shape {want.shape}, got {got.dtype} {got.shape}")
    wrong = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if wrong.any():
        row, b = (int(i) for i in np.argwhere(wrong)[0])
        block = x[row, b * QK:(b + 1) * QK]
        unwritten = " (the poison: never written)" if is_poison(got)[row, b] else ""
        lines = [f"Q8_0 scales for {label or _block_label(x)} differ from the reference (seed {seed})",
                 f"  wrong scales: {int(wrong.sum())} of {got.size}",
                 f"  first wrong: row {row}, block {b}: its largest |x| is {float(np.abs(block).max()):.9g}; got d = "
                 f"{float(got[row, b]):.9g}{unwritten}, expected {float(want[row, b]):.9g} (amax / 127 in float32)"]
        found = q8_0_scale_findings(got, x)
        if found:
            lines += ["likely cause:"] + [f"  - {message}" for _, message in found]
        if seed is not None:
            lines.append(f"Repeat it with random_inputs(seed={seed}).")
        raise AssertionError("\n".join(lines))
    if codes is not None:
        from kernels.quantized_gemv import q8_0_bytes

        packed = q8_0_bytes(codes, got).reshape(x.shape[0], -1)
        assert np.array_equal(packed, reference.quantize_q8_0(x)), (
            f"the Q8_0 bytes of {label or _block_label(x)} (d rounded to fp16, then the 32 codes of each block) "
            "differ from reference.quantize_q8_0(x): check the codes (the other cells grade them)")


def q8_0_quantize_matches_reference(kernel) -> None:
    """Ties: blocks whose values sit at or next to k + 0.5 steps of d (where halves away from zero, halves to
    even and x / d part ways), then normal blocks at three magnitudes; codes bit for bit."""
    rng, seed = random_inputs()
    x = q8_0_quantize_case(rng, 2, 3, kind="ties")
    codes, _ = q8_0_quantize_run(kernel, x)
    check_q8_0_codes(codes, x, seed=seed, label="ties: 2 rows of 3 blocks whose x * (1 / d) sit at k + 0.5")
    x = q8_0_quantize_case(rng, 3, 2)
    codes, _ = q8_0_quantize_run(kernel, x)
    check_q8_0_codes(codes, x, seed=seed)
    _passed(f"{6 * QK} codes at ties and {6 * QK} at three magnitudes, bit for bit (6 warps each: the second "
            "thread block partial)")


def q8_0_quantize_edge_blocks(kernel) -> None:
    """A block of zeros, one so small that 1 / d overflows, a negative largest |x|, the largest |x| at lane 31, a
    constant block (+-127) and an outlier (codes 0 and 127): codes and scales bit for bit."""
    rng, seed = random_inputs()
    x = q8_0_quantize_case(rng, 2, 3, kind="edges")
    codes, scales = q8_0_quantize_run(kernel, x)
    check_q8_0_codes(codes, x, seed=seed, label="edge blocks (zeros, 1e-38, a negative amax, amax at lane 31, +-5, "
                                                "an outlier)")
    check_q8_0_scales(scales, x, seed=seed, label="edge blocks")
    _passed("a block of zeros (d = 0, codes 0), a block whose 1 / d overflows, a negative amax, +-127 and an outlier")


def q8_0_quantize_scales_per_block(kernel) -> None:
    """Rows whose blocks differ in size (1e-3 to 300) and a block whose largest |x| is negative, 32 times its one
    positive value (a scale taken from the largest x, not |x|, gives codes past int8), and one whose largest |x| is
    positive (a scale of amax / 128 gives it the code 128, past int8): a scale per block,
    bit for bit, and the Q8_0 bytes packed from codes and scales as the reference's."""
    rng, seed = random_inputs()
    x = q8_0_quantize_case(rng, 3, 3)
    block = -np.abs(x[1, QK:2 * QK]) * 2       # negative but for one value: its largest x is far below its largest |x|
    block[0] = 4 * block.min()
    block[5] = -block[0] / 32
    x[1, QK:2 * QK] = block
    x[2, 2 * QK + 7] = 1.5 * np.abs(x[2, 2 * QK:3 * QK]).max()    # and a block whose largest |x| is positive
    codes, scales = q8_0_quantize_run(kernel, x)
    check_q8_0_scales(scales, x, codes=codes, seed=seed)
    _passed("a scale per block of 32 (3 rows of 3 blocks at magnitudes from 1e-3 to 300), bit for bit, and the bytes")


# --------------------------------------------------------------------------------------------- the Q4_1 GEMV

def q4_1_gemv_case(rng, N: int, K: int, *, kind: str = "random") -> dict:
    """A Q4_1 GEMV case: ``w`` (N, K / 32, 20) uint8, the GGUF bytes of W, and ``x`` (K,) float32 standard normal.

    kind "random": W standard normal at a magnitude per row (1e-3, 1 or 50) quantized by
    ``reference.quantize_q4_1``, its first blocks replaced by a block of zeros, a constant block (d = 0, m = 0.75),
    a block of two values (the extreme codes 0 and 15), a block of values below 1e-4 (d an fp16 subnormal) and a
    block of negative values (m < 0); with two rows or more, the last row is raw random bytes under random d and m
    in (-2, 2). "small": W uniform in [0, 5e-5), so every d and m is an fp16 subnormal (below 2**-14) and y is about
    1e-4: a subnormal read as a normal number is off by far more than y. "position": position-coded weights, no
    row or block like another: the code of weight j of block b of row n is (j + 5 (j // 16) + b + n) mod 16, so the
    low and the high nibble of a byte differ and so do neighbours; d = (1 + n mod 3) 2**-(b mod 4) / 4 > 0 and
    m = -(1 + (b + n) mod 5) / 8 < 0."""
    from kernels import reference

    blocks = K // QK
    if kind == "random":
        weights = rng.standard_normal((N, K)) * rng.choice([1e-3, 1.0, 50.0], size=(N, 1))
        flat = weights.reshape(-1, QK)
        specials = [np.zeros(QK), np.full(QK, 0.75), np.where(np.arange(QK) % 3 == 0, -6.0, 5.25),
                    rng.uniform(0.0, 1e-4, QK), -rng.uniform(1.0, 3.0, QK)]
        for i, block in enumerate(specials[:len(flat)]):
            flat[i] = block
        w = reference.quantize_q4_1(weights.astype(np.float32)).reshape(N, blocks, 20)
        if N > 1 and blocks:
            w[-1] = rng.integers(0, 256, w[-1].shape, dtype=np.uint8)
            w[-1, :, :4] = rng.uniform(-2, 2, (blocks, 2)).astype("<f2").view(np.uint8)
    elif kind == "small":
        w = reference.quantize_q4_1(rng.uniform(0.0, 5e-5, (N, K)).astype(np.float32)).reshape(N, blocks, 20)
    elif kind == "position":
        n, b, j = np.meshgrid(np.arange(N), np.arange(blocks), np.arange(QK), indexing="ij")
        codes = (j + 5 * (j // 16) + b + n) % 16
        w = np.empty((N, blocks, 20), np.uint8)
        w[..., 4:] = codes[..., :16] | (codes[..., 16:] << 4)
        nn, bb = n[..., 0], b[..., 0]
        d = ((1 + nn % 3) * 2.0 ** -(bb % 4) / 4).astype("<f2")
        m = (-(1 + (bb + nn) % 5) / 8).astype("<f2")
        w[..., :4] = np.stack([d, m], axis=-1).view(np.uint8).reshape(N, blocks, 4)
    else:
        raise ValueError(f"kind must be 'random', 'small' or 'position', got {kind!r}")
    return dict(w=np.ascontiguousarray(w), x=rng.standard_normal(K).astype(np.float32), kind=kind)


def q4_1_gemv_run(kernel, case: dict, *, counted: bool = False):
    """Your GEMV kernel through the course's launcher (``q4_1_gemv_warp_per_row``: a warp per row, GEMV_WARPS warps
    per thread block) on ``case``, y poisoned first: ``(y, traffic)``, traffic counted on the simulator when
    ``counted`` (else None)."""
    from kernels.quantized_gemv import q4_1_gemv_warp_per_row

    w, x = case["w"], case["x"]
    y = poison(np.empty(w.shape[0], np.float32))
    launch = lambda: _explained(lambda: q4_1_gemv_warp_per_row(w, x, out=y, kernel=kernel))  # noqa: E731
    if counted:
        return _counted(launch)
    return launch(), None


def _gemv_label(case: dict) -> str:
    N, blocks, _ = case["w"].shape
    return f"y of a Q4_1 GEMV, N={N} K={blocks * QK} ({case['kind']} weights)"


def check_q4_1_gemv(y, case: dict, *, seed=None, label: str = "", kernel=None) -> None:
    """Compare y with W x in float64, W the dequantized bytes (``reference.dequantize_q4_1``); on failure name the
    misreading of the block the output follows (nibble order, d and m, the minimum, the scale per row)."""
    from course.diagnoses.quantized import q4_1_findings
    from kernels import reference

    w, x = case["w"], case["x"]
    want = reference.dequantize_q4_1(w.reshape(w.shape[0], -1)) @ x.astype(np.float64)
    got = np.asarray(y)
    hint = ("a block is d (bytes 0-1, fp16), m (bytes 2-3, fp16), then 16 bytes: byte j holds weight j in its low "
            "nibble and weight j + 16 in its high nibble; weight j is d q_j + m")
    _with_findings(lambda: q4_1_findings(got, w, x), got, want, name=label or _gemv_label(case), dims=("row",),
                   seed=seed, hints={"any": hint}, kernel=kernel)


def q4_1_gemv_traffic_problems(traffic, case: dict) -> list[str]:
    """What a counted launch did beyond its budget: each byte of w read once (d and m once per block, each byte of
    codes once for both its nibbles), x at most once per row (N K loads), y written once per row."""
    w = case["w"]
    N, blocks, block_bytes = w.shape
    K = blocks * QK
    problems = []
    if traffic.launches != 1:
        problems.append(f"expected one launch of your kernel, saw {traffic.kernel_names}: the launcher launches it "
                        "once")
        return problems
    loads = traffic.global_loads["w"]
    if loads != w.size:
        per_block = loads / max(N * blocks, 1)
        patterns = {4 + 32: "each byte of codes was loaded twice, once for each of its nibbles: load a byte once, "
                            "then take byte & 0x0F and byte >> 4 from the register",
                    4 * 16 + 16: "d and m were loaded again for every byte of codes: load them once per block",
                    4 * 32 + 16: "d and m were loaded again for every weight: load them once per block",
                    4 * 32 + 32: "d and m were loaded for every weight and each byte of codes twice"}
        why = patterns.get(per_block, "each of the 20 bytes of a block must be read once: d and m (bytes 0-3) once "
                                      "per block, each byte of codes once for both its nibbles")
        problems.append(f"w was loaded {loads} times for its {w.size} bytes ({per_block:g} loads per block of "
                        f"{block_bytes} bytes): {why}")
    x_loads = traffic.global_loads["x"]
    if x_loads > N * K:
        problems.append(f"x was loaded {x_loads} times, {x_loads / max(N * K, 1):.3g} times per row (N K = {N * K} is "
                        "once per row): a block's 32 activations serve its dot product and its sum; load each once "
                        "into a register (low and high) and use it for both")
    stores = traffic.global_stores["y"]
    if stores != N:
        problems.append(f"y was stored {stores} times for its {N} rows: one lane of the row's warp writes y[row], once")
    return problems


def q4_1_gemv_matches_reference(kernel) -> None:
    """Random Q4_1 weights at three magnitudes with a block of zeros, a constant block, the extreme codes 0 and 15,
    an fp16-subnormal d, a negative m and a row of raw bytes; N = 5 rows (not a multiple of GEMV_WARPS), K = 96;
    then N = 2, K = 1056 (33 blocks a row: lane 0 takes two); then N = 3, K = 64 of weights below 5e-5 (every d and m
    an fp16 subnormal); then N = 2, K = 3072 (96 blocks: every lane takes three)."""
    rng, seed = random_inputs()
    case = q4_1_gemv_case(rng, 5, 96)
    y, _ = q4_1_gemv_run(kernel, case)
    check_q4_1_gemv(y, case, seed=seed, kernel=kernel)
    case = q4_1_gemv_case(rng, 2, 33 * QK)
    y, _ = q4_1_gemv_run(kernel, case)
    check_q4_1_gemv(y, case, seed=seed, kernel=kernel)
    case = q4_1_gemv_case(rng, 3, 64, kind="small")
    y, _ = q4_1_gemv_run(kernel, case)
    check_q4_1_gemv(y, case, seed=seed, kernel=kernel)
    case = q4_1_gemv_case(rng, 2, 96 * QK)
    y, _ = q4_1_gemv_run(kernel, case)
    check_q4_1_gemv(y, case, seed=seed, kernel=kernel)
    _passed("N = 5, K = 96: zeros, a constant block, codes 0 and 15, a subnormal d, a negative m, raw bytes; N = 2, "
            "K = 1056: rows of 33 blocks (lane 0 takes two); N = 3, K = 64: every d and m an fp16 subnormal; N = 2, "
            "K = 3072: rows of 96 blocks (every lane takes three)")


def q4_1_gemv_position_coded(kernel) -> None:
    """Position-coded weights (every nibble's code set by its position, d and m distinct per block): N = 6, K = 64."""
    rng, seed = random_inputs()
    case = q4_1_gemv_case(rng, 6, 64, kind="position")
    y, _ = q4_1_gemv_run(kernel, case)
    check_q4_1_gemv(y, case, seed=seed, kernel=kernel)
    _passed("position-coded weights, N = 6, K = 64: nibble order, d and m, a scale and minimum per block")


def q4_1_gemv_traffic_fits(kernel) -> None:
    """Counted traffic of N = 5, K = 64: each byte of w read once, x at most once per row, y written once per row
    (the values are graded by the other cells)."""
    rng, _ = random_inputs()
    case = q4_1_gemv_case(rng, 5, 64)
    _, traffic = q4_1_gemv_run(kernel, case, counted=True)
    if traffic is not None:
        _raise_problems(q4_1_gemv_traffic_problems(traffic, case))
        print(f"{traffic.load_bytes['w']} bytes of w read for its {case['w'].size}; x read "
              f"{traffic.global_loads['x'] / (5 * 64):g} times per row")
    _passed("each byte of w read once, x at most once per row, y written once per row")


# --------------------------------------------------------------------------------------------- the W8A8 GEMM

# Codes of the "small", "scaled" and "cancelling" cases: |a w| <= 225, so a sum of up to 128 products (and every
# partial sum, in any order) stays inside int16: those cases grade the scales and the edges, the extreme codes the
# sums.
W8A8_SMALL_CODE = 15


def _w8a8_scales(rng, count: int) -> np.ndarray:
    """``count`` float32 scales in [2**-8, 2**-6), no two alike and none a power of two."""
    while True:
        scales = (rng.uniform(1.0, 4.0, count) * 2.0 ** -8).astype(np.float32)
        mantissas = np.frexp(scales)[0]
        if len(np.unique(scales)) == count and not np.any(mantissas == 0.5):
            return scales


def w8a8_gemm_case(rng, M: int, N: int, K: int, *, kind: str = "extreme") -> dict:
    """A W8A8 GEMM case: ``a_q`` (M, K) int8 and ``sa`` (M,) float32 (per token), ``w_q`` (N, K) int8 and ``sw`` (N,)
    float32 (per output channel), K a multiple of 32.

    kind "extreme": codes over int8's whole range, -128 ... 127, with the extreme rows: token 0 and channel 0 all
    -128 (y[0, 0] = 2**14 K, the largest sum there is), token 1 all 127 and channel 1 alternating 127 and -128;
    every scale 1, so y is the exact integer sum. "large_sums": random codes, but token 0 all 127 and channel 0 the
    codes 127, 127, 127, 125 over and over, every scale 1: y[0, 0] = 16,065.5 K, a sum of odd-sized terms past 2**24
    for K over 2,088, which a float32 running sum cannot hold exactly (an int32 one can). "small": codes in -15 ...
    15, every scale 1. "scaled": codes in
    -15 ... 15 and a scale per token and per channel in [2**-8, 2**-6), no two alike and none a power of two.
    "cancelling" (K a multiple of 64): as "scaled", but the second half of each row undoes the first:
    a_q[m, k + K/2] = a_q[m, k] and w_q[n, k + K/2] = -w_q[n, k] + e, e in -1 ... 1, so y = sa sw sum a e is small
    against its partial sums."""
    if kind == "large_sums":
        a_q = rng.integers(-128, 128, (M, K)).astype(np.int8)
        w_q = rng.integers(-128, 128, (N, K)).astype(np.int8)
        a_q[0] = 127
        w_q[0] = np.tile(np.array([127, 127, 127, 125], np.int8), K // 4)
        sa, sw = np.ones(M, np.float32), np.ones(N, np.float32)
    elif kind == "extreme":
        a_q = rng.integers(-128, 128, (M, K)).astype(np.int8)
        w_q = rng.integers(-128, 128, (N, K)).astype(np.int8)
        a_q[0] = w_q[0] = -128
        if M > 1:
            a_q[1] = 127
        if N > 1:
            w_q[1] = np.where(np.arange(K) % 2 == 0, 127, -128)
        sa, sw = np.ones(M, np.float32), np.ones(N, np.float32)
    elif kind in ("small", "scaled"):
        a_q = rng.integers(-W8A8_SMALL_CODE, W8A8_SMALL_CODE + 1, (M, K)).astype(np.int8)
        w_q = rng.integers(-W8A8_SMALL_CODE, W8A8_SMALL_CODE + 1, (N, K)).astype(np.int8)
        if kind == "small":
            sa, sw = np.ones(M, np.float32), np.ones(N, np.float32)
        else:
            sa, sw = _w8a8_scales(rng, M), _w8a8_scales(rng, N)
    elif kind == "cancelling":
        if K % 64:
            raise ValueError(f"a cancelling case needs K a multiple of 64, got {K}")
        half = K // 2
        first = rng.integers(-W8A8_SMALL_CODE, W8A8_SMALL_CODE + 1, (M, half))
        a_q = np.concatenate([first, first], axis=1).astype(np.int8)
        w_first = rng.integers(-W8A8_SMALL_CODE + 1, W8A8_SMALL_CODE, (N, half))
        w_q = np.concatenate([w_first, -w_first + rng.integers(-1, 2, (N, half))], axis=1).astype(np.int8)
        sa, sw = _w8a8_scales(rng, M), _w8a8_scales(rng, N)
    else:
        raise ValueError(f"kind must be 'extreme', 'large_sums', 'small', 'scaled' or 'cancelling', got {kind!r}")
    return dict(a_q=np.ascontiguousarray(a_q), sa=sa, w_q=np.ascontiguousarray(w_q), sw=sw, kind=kind)


def _w8a8_explained(launch):
    """``launch()``, a sum past int16 or int8 and an index past an array read as a W8A8 GEMM's mistakes."""
    from course.diagnoses.quantized import w8a8_launch_findings

    return _launch_explained(launch, likely=w8a8_launch_findings)


def w8a8_gemm_run(kernel, case: dict):
    """Your GEMM kernel through the course's launcher (``w8a8_gemm_v1_dp4a``: a 64 x 64 tile of y per block of 16 x
    16 threads, a_q and w_q handed over as uint32 words) on ``case``, y poisoned first: y (M, N) float32."""
    from kernels.quantized_gemm import w8a8_gemm_v1_dp4a

    M, N = case["a_q"].shape[0], case["w_q"].shape[0]
    y = poison(np.empty((M, N), np.float32))
    return _w8a8_explained(lambda: w8a8_gemm_v1_dp4a(case["a_q"], case["sa"], case["w_q"], case["sw"], out=y,
                                                      kernel=kernel))


def _w8a8_label(case: dict) -> str:
    (M, K), N = case["a_q"].shape, case["w_q"].shape[0]
    return f"y of a W8A8 GEMM, M={M} N={N} K={K} ({case['kind']} codes)"


def check_w8a8_gemm(y, case: dict, *, seed=None, label: str = "") -> None:
    """y against ``reference.w8a8_matmul`` (the sums exact in int64, scaled in float64), each output within 2**-21 of
    its own size: the rounding of float32(sum) * sa * sw, nothing more. On failure name the rule y follows (an
    accumulator too narrow, the scales swapped or missing, words of K left out, the scales inside the sum) or where
    its unwritten outputs lie."""
    from course.diagnoses.quantized import W8A8_RTOL, w8a8_findings
    from kernels import reference

    a_q, sa, w_q, sw = case["a_q"], case["sa"], case["w_q"], case["sw"]
    want = reference.w8a8_matmul(a_q, sa, w_q, sw)
    got = np.asarray(y)
    if got.dtype != np.float32 or got.shape != want.shape:
        raise AssertionError(f"y must be float32 of shape {want.shape}, got {got.dtype} {got.shape}")
    unwritten = is_poison(got)
    values = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        wrong = unwritten | ~(np.abs(values - want) <= W8A8_RTOL * np.abs(want))
    if not wrong.any():
        return
    m, n = (int(i) for i in np.argwhere(wrong)[0])
    sums = a_q.astype(np.int64) @ w_q.astype(np.int64).T
    written = "the poison, never written" if unwritten[m, n] else f"{float(values[m, n]):.9g}"
    lines = [f"{label or _w8a8_label(case)} differs from the reference (seed {seed})",
             f"  wrong outputs: {int(wrong.sum())} of {wrong.size}, in {int(wrong.any(axis=1).sum())} tokens and "
             f"{int(wrong.any(axis=0).sum())} channels",
             f"  first wrong: token {m}, channel {n}: got {written}, expected {float(want[m, n]):.9g} = sa[{m}] sw[{n}] "
             f"x the exact sum {int(sums[m, n])} (sa[{m}] = {float(sa[m]):.9g}, sw[{n}] = {float(sw[n]):.9g})"]
    found = w8a8_findings(values, a_q, sa, w_q, sw, unwritten=unwritten)
    if found:
        lines += ["likely cause:"] + [f"  - {message}" for _, message in found]
    else:
        lines.append("  y[m, n] = sa[m] sw[n] sum_k a_q[m, k] w_q[n, k]: the sum exact in int32 over all K codes, "
                     "then scaled once; each output within 2**-21 of its own size")
    if seed is not None:
        lines.append(f"Repeat it with random_inputs(seed={seed}).")
    raise AssertionError("\n".join(lines))


def w8a8_gemm_exact_sums(kernel) -> None:
    """Every scale 1, so y is the exact integer sum: codes over int8's whole range with the extreme rows (-128 and 127
    everywhere, y[0, 0] = 2**14 K), M = 5 tokens, N = 7 channels, K = 96 (three steps of 32 codes); then M = 2, N = 3,
    K = 2304 with a sum past 2**24 in odd-sized steps (``large_sums``), which only an integer sum keeps exact."""
    rng, seed = random_inputs()
    case = w8a8_gemm_case(rng, 5, 7, 96, kind="extreme")
    check_w8a8_gemm(w8a8_gemm_run(kernel, case), case, seed=seed)
    case = w8a8_gemm_case(rng, 2, 3, 2304, kind="large_sums")
    check_w8a8_gemm(w8a8_gemm_run(kernel, case), case, seed=seed)
    _passed("exact sums of 96 codes over int8's whole range, -128 and 127 included (M = 5, N = 7), and of 2,304 "
            "codes whose sum passes 2**24 in odd-sized steps")


def w8a8_gemm_scaled_epilogue(kernel) -> None:
    """A scale per token and per channel, no two alike: M = N = 6, K = 64; then M = 5, N = 7, K = 64 with sums whose
    products cancel (the second half of each row undoes the first), where scales applied inside the sum leave their
    rounding in y."""
    rng, seed = random_inputs()
    case = w8a8_gemm_case(rng, 6, 6, 64, kind="scaled")
    check_w8a8_gemm(w8a8_gemm_run(kernel, case), case, seed=seed)
    case = w8a8_gemm_case(rng, 5, 7, 64, kind="cancelling")
    check_w8a8_gemm(w8a8_gemm_run(kernel, case), case, seed=seed)
    _passed("y = sa[m] sw[n] x the exact sum, scaled once (6 x 6, then 5 x 7 with cancelling sums)")


def w8a8_gemm_edges(kernel) -> None:
    """Tiles past the end of y: M = 20 tokens, N = 3 channels, K = 32 (one step); then M = 2, N = 70 (a second
    column of tiles, 6 channels in it). Every output written once, nothing past M or N."""
    rng, seed = random_inputs()
    for M, N in ((20, 3), (2, 70)):
        case = w8a8_gemm_case(rng, M, N, 32, kind="small")
        check_w8a8_gemm(w8a8_gemm_run(kernel, case), case, seed=seed)
    _passed("M = 20, N = 3 and M = 2, N = 70 (two tiles along N): every output written, none past the end")
