"""Day 10, the layers of a llama block around the matrix products: RMSNorm fused with the q8_1 quantization of its
output, RoPE on the GGUF file's adjacent pairs at each token's position, and SwiGLU.

The fused norm is judged by what any correct kernel gives, not bit for bit: its float32 sum of squares may differ
from another order of the sum in the last bit, which moves a code that sits on a tie. So each block's scale must be
within 1e-5 of amax / 127 of the float64 norm, each code within half a scale (and a little) of the norm's value,
codes in -127 ... 127 (0 in a block of zeros), and each sum within 1e-5 of the block's sum. A failing output is then
set against the models of the classic mistakes (the mean instead of the mean square, no eps, no weight, the sum of
one warp's columns, a scale per row, truncated codes, the sum of the codes) and the one it fits is named.

RoPE and SwiGLU are compared with the float64 references (``kernels.reference.rope_pairs``, ``swiglu``) by
:func:`course.checking.check`, after the models of their mistakes (rotate-half pairs, the token's index for its
position, the angle's sign, sigmoid for silu, gate and up swapped).
"""

from __future__ import annotations

import numpy as np

from course.checking import is_poison, poison, random_inputs

from ._common import KernelFailed, _counted, _launch_explained, _passed, _raise_problems, _with_findings

__all__ = [
    "RMSNORM_EPS", "rmsnorm_q8_1_case", "rmsnorm_q8_1_run", "rmsnorm_q8_1_traffic_problems", "check_rmsnorm_q8_1",
    "rmsnorm_q8_1_matches_reference",
    "rmsnorm_q8_1_edge_rows", "rmsnorm_q8_1_scales_and_sums",
    "rope_case", "rope_run", "check_rope", "rope_matches_reference", "rope_pairs_and_positions",
    "swiglu_case", "swiglu_run", "check_swiglu", "swiglu_matches_reference",
]

QK = 32                 # values per q8_1 block
RMSNORM_EPS = 1e-5      # SmolLM2's
_NO_INVERSE = 2.0 ** -128


# --------------------------------------------------------------------------------------------- RMSNorm to q8_1

def rmsnorm_q8_1_case(rng, rows: int, k: int, *, kind: str = "normal") -> tuple[np.ndarray, np.ndarray]:
    """(x (rows, k), weight (k,)) float32, k a multiple of 32.

    kind "normal": rows of standard normal values at scales 0.1, 1 and 30 in turn (a row's mean square near 0.01 is
    where eps = 1e-5 moves a scale by 5e-4), a mean far from 0 in row 1 (so the mean and the mean square differ); "edges": rows cycled through a row of zeros (eps keeps it 0), a row of values near 1e-3
    (its mean square, about 1e-6, is below eps, so eps sets its scale), a row with one outlier of 1000, a constant
    row, a row whose second block is all zeros, a row of 1e-20 (its squares underflow to 0 in float32, the norm
    of eps alone). The weight is near 1, a few channels at 5 and one negative."""
    if k % QK or k <= 0:
        raise ValueError(f"k must be a positive multiple of {QK}, got {k}")
    x = np.empty((rows, k))
    for r in range(rows):
        if kind == "normal":
            x[r] = rng.standard_normal(k) * (0.1, 1.0, 30.0)[r % 3]
            if r == 1:
                x[r] += 4.0
        elif kind == "edges":
            x[r] = _edge_row(rng, r % 6, k)
        else:
            raise ValueError(f"kind must be 'normal' or 'edges', got {kind!r}")
    weight = 1.0 + 0.2 * rng.standard_normal(k)
    weight[rng.integers(k, size=3)] = 5.0
    weight[rng.integers(k)] = -2.0
    return x.astype(np.float32), weight.astype(np.float32)


def _edge_row(rng, which: int, k: int) -> np.ndarray:
    row = rng.standard_normal(k)
    if which == 0:
        return np.zeros(k)
    if which == 1:
        return row * 1e-3
    if which == 2:
        row[rng.integers(k)] = 1000.0
    elif which == 3:
        row = np.full(k, -2.5)
    elif which == 4 and k > QK:
        row[QK:2 * QK] = 0.0
    elif which == 5:
        row = row * 1e-20
    return row


def rmsnorm_q8_1_run(kernel, x, weight, eps: float = RMSNORM_EPS, *, counted: bool = False):
    """Your kernel through the course's launcher (``rmsnorm_q8_1_block_per_row``: a block of NORM_THREADS threads
    per row) on x (T, K), outputs poisoned first: ``(x_q, x_scale, x_sum)``; with ``counted``, ``((x_q, x_scale,
    x_sum), traffic)``, traffic counted on the simulator (None on a GPU)."""
    if counted:
        return _counted(lambda: rmsnorm_q8_1_run(kernel, x, weight, eps))
    from kernels.llama_layers import rmsnorm_q8_1_block_per_row

    t, k = x.shape
    x_q = poison(np.empty((t, k), np.int8))
    x_scale, x_sum = poison(np.empty((t, k // QK), np.float32)), poison(np.empty((t, k // QK), np.float32))
    launch = lambda: rmsnorm_q8_1_block_per_row(x, weight, eps=eps, out=x_q, out_scales=x_scale,  # noqa: E731
                                                out_sums=x_sum, kernel=kernel)
    try:
        return _launch_explained(launch, likely=_norm_likely)
    except ValueError as exc:          # the simulator's math.sqrt of a negative number, int32(NaN): not read above
        from course.diagnoses.paged import kernel_line

        found = _norm_likely(exc, kernel_line(exc))
        if found is None:
            raise
        raise KernelFailed(found[1], found[0]) from exc


def _norm_likely(exc, line: str):
    """(key, message) for what stops the fused norm on the simulator, where a GPU would go on with NaN."""
    at = f" (at `{line}`)" if line else ""
    if "math domain error" in str(exc):
        return ("norm_negative_root",
                f"the kernel took the square root of a negative number{at}: the simulator stops there, a GPU gives "
                "NaN. The norm divides by the root of the mean of the SQUARES, mean(x^2) + eps, which is never "
                "negative; sqrt(mean(x) + eps), the values summed without squaring them, is negative on a row whose "
                "mean is")
    if isinstance(exc, (ValueError, OverflowError, ZeroDivisionError)):
        return ("norm_not_finite",
                f"a value that is not a finite number (NaN or inf) reached the kernel's arithmetic{at}: the simulator "
                "stops there, a GPU writes a meaningless code. A row of zeros gives 0 / 0 when eps is left out of the "
                "root: eps keeps sqrt(mean(x^2) + eps) above 0; and a block of zeros has d = 0, so 1 / d needs the "
                "NO_INVERSE guard (codes 0 there)")
    return None


def _norm_models(x, weight, eps) -> dict:
    """What the norm gives (float64), and what each classic mistake gives instead."""
    x, w = x.astype(np.float64), weight.astype(np.float64)
    k = x.shape[1]
    square = np.mean(x * x, axis=1, keepdims=True)
    one_warp = np.sum((x * x)[:, (np.arange(k) % 128) < 32], axis=1, keepdims=True) / k
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return {
            "norm": x / np.sqrt(square + eps) * w,
            "mean": x / np.sqrt(np.mean(x, axis=1, keepdims=True) + eps) * w,
            "no_eps": x / np.sqrt(square) * w,
            "no_weight": x / np.sqrt(square + eps),
            "no_sqrt": x / (square + eps) * w,
            "one_warp": x / np.sqrt(one_warp + eps) * w,
        }


_NORM_WORDS = {
    "mean": "the values fit x / sqrt(mean(x) + eps) * weight: the norm divides by the root of the mean of the "
            "SQUARES, mean(x^2), not of the values (a row whose mean is negative then gives NaN)",
    "no_eps": "the values fit x / sqrt(mean(x^2)) * weight, without eps: eps goes inside the root, "
              "sqrt(mean(x^2) + eps); it keeps a row of zeros at 0 (not 0 / 0) and sets the scale of tiny rows",
    "no_weight": "the values fit x / sqrt(mean(x^2) + eps) without the weight: multiply value j by weight[j]",
    "no_sqrt": "the values fit x / (mean(x^2) + eps) * weight: divide by the square ROOT of the mean square",
    "one_warp": "the values fit a sum of squares over warp 0's columns only: each warp's shuffle sum is a partial "
                "sum; the warps' partials meet in shared memory (after a barrier) and every thread adds all of them",
}


def _quantized(y, *, scale="block"):
    """The q8_1 blocks of the float64 values y (T, K): (amax / 127 per block, or per row, broadcast per block)."""
    t, k = y.shape
    blocks = y.reshape(t, k // QK, QK)
    amax = np.max(np.abs(blocks), axis=2)
    if scale == "row":
        amax = np.repeat(np.max(amax, axis=1, keepdims=True), k // QK, axis=1)
    return amax / 127.0


def _fits(x_q, x_scale, x_sum, y, *, scale="block", codes="round", sums="values") -> list[str]:
    """Where the outputs depart from quantizing y (T, K) float64 as a q8_1 kernel should; [] if they fit."""
    t, k = y.shape
    if not np.all(np.isfinite(y)):
        return ["the model is not finite"]
    d_want = _quantized(y, scale=scale)
    q = x_q.astype(np.float64).reshape(t, k // QK, QK)
    blocks = y.reshape(t, k // QK, QK)
    d = x_scale.astype(np.float64)
    problems = []
    bad_d = ~(np.abs(d - d_want) <= 1e-5 * d_want + 1e-42)
    if bad_d.any():
        r, b = np.argwhere(bad_d)[0]
        problems.append(f"x_scale[{r}, {b}] = {_show(x_scale[r, b])}, expected amax / 127 = {d_want[r, b]:.7g}")
        return problems
    inverse = np.where(d_want > _NO_INVERSE, 1.0 / np.where(d_want > _NO_INVERSE, d_want, 1.0), 0.0)[..., None]
    ratio = blocks * inverse
    if codes == "round":
        err = np.abs(q - ratio)
        bad_q = ~(err <= 0.5 + 1e-3)
    else:                              # toward zero: |q| at most |y / d|, by less than one step
        toward = np.sign(ratio) * (ratio - q)
        bad_q = ~((toward >= -1e-3) & (toward <= 1 + 1e-3))
    bad_q |= np.abs(q) > 127
    if bad_q.any():
        r, b, j = np.argwhere(bad_q)[0]
        problems.append(f"x_q[{r}, {QK * b + j}] = {_code(x_q[r, QK * b + j])}, expected "
                        f"round(y / d) = round({ratio[r, b, j]:.6g})")
        return problems
    if sums == "values":
        s_want, slack = blocks.sum(axis=2), 1e-5 * np.abs(blocks).sum(axis=2) + 1e-42
    else:
        s_want = q.sum(axis=2) * (d if sums == "dq" else 1.0)
        slack = 1e-5 * np.abs(s_want) + 1e-42
    s = x_sum.astype(np.float64)
    bad_s = ~(np.abs(s - s_want) <= slack)
    if bad_s.any():
        r, b = np.argwhere(bad_s)[0]
        problems.append(f"x_sum[{r}, {b}] = {_show(x_sum[r, b])}, expected the block's sum of y, {s_want[r, b]:.7g}")
    return problems


def _show(value) -> str:
    return "NaN (the poison: never written)" if np.isnan(value) else f"{float(value):.7g}"


def _code(value) -> str:
    return "-128 (the poison: never written)" if int(value) == -128 else str(int(value))


def check_rmsnorm_q8_1(outputs, x, weight, eps: float = RMSNORM_EPS, *, seed=None, label: str = "") -> None:
    """The outputs (x_q, x_scale, x_sum) are the q8_1 blocks of rmsnorm(x) * weight; on failure name the first
    value that departs, and the classic mistake whose model the outputs fit."""
    x_q, x_scale, x_sum = (np.asarray(a) for a in outputs)
    t, k = x.shape
    for name, a, dtype, shape in (("x_q", x_q, np.int8, (t, k)), ("x_scale", x_scale, np.float32, (t, k // QK)),
                                  ("x_sum", x_sum, np.float32, (t, k // QK))):
        if a.dtype != dtype or a.shape != shape:
            raise AssertionError(f"{name} must be {np.dtype(dtype).name} of shape {shape}, got {a.dtype} {a.shape}")
    models = _norm_models(x, weight, eps)
    problems = _fits(x_q, x_scale, x_sum, models["norm"])
    if not problems:
        return
    where = label or f"x of {t} rows of {k}"
    lines = [f"RMSNorm to q8_1 for {where} differs from the reference (seed {seed})", f"  first: {problems[0]}"]
    unwritten = [name for name, a in (("x_q", x_q), ("x_scale", x_scale), ("x_sum", x_sum)) if is_poison(a).any()]
    found = []
    if unwritten:
        found.append(f"some of {', '.join(unwritten)} still hold the poison: a block of the row was never written "
                     "(every warp takes the blocks w, w + 4, ... of its row, up to K / 32)")
    for key, words in _NORM_WORDS.items():
        if not _fits(x_q, x_scale, x_sum, models[key]):
            found.append(words)
    y = models["norm"]
    for options, words in (
            (dict(scale="row"), "the scales fit one amax per ROW: q8_1 has a scale per block of 32 values, the "
                                "largest |y| of that block over 127 (a warp's max over its 32 lanes)"),
            (dict(codes="trunc"), "the codes fit y / d truncated toward zero: round to the nearest (halves away "
                                  "from zero), as day 9's round_half_away"),
            (dict(sums="codes"), "x_sum fits the sum of the CODES: q8_1 keeps the block's sum of the values y, "
                                 "which the Q4_1 GEMV multiplies by each block's minimum m"),
            (dict(sums="dq"), "x_sum fits d times the sum of the codes: q8_1 keeps the sum of the values y "
                              "themselves (before rounding)")):
        if not _fits(x_q, x_scale, x_sum, y, **options):
            found.append(words)
    if found:
        lines += ["likely cause:"] + [f"  - {words}" for words in found]
    else:
        lines.append("  y = x / sqrt(mean(x^2) + eps) * weight over the whole row; then per block of 32: d = amax / "
                     "127, code = round(y / d), sum = the block's sum of y")
    if seed is not None:
        lines.append(f"Repeat it with random_inputs(seed={seed}).")
    raise AssertionError("\n".join(lines))


def rmsnorm_q8_1_traffic_problems(traffic, x) -> list[str]:
    """What a counted launch did beyond the budget: x read twice (its squares, then its values; the simulator counts
    ``x[t, j] * x[t, j]`` as two loads, which a GPU's compiler makes one, so three loads an element pass), weight at
    most once a row, each output written once."""
    t, k = x.shape
    problems = []
    if traffic.launches != 1:
        return [f"expected one launch of your kernel, saw {traffic.kernel_names}: the launcher launches it once"]
    loads = traffic.global_loads["x"]
    if loads > 3 * t * k:
        problems.append(f"x was read {loads / (t * k):g} times an element (the budget: twice, its squares then its "
                        "values). Each thread sums the squares of its own columns j = threadIdx.x, threadIdx.x + "
                        "NORM_THREADS, ...; the warps' partials meet in shared memory, not in a re-read of the row")
    if traffic.global_loads["weight"] > t * k:
        problems.append(f"weight was read {traffic.global_loads['weight'] / k:g} times for {t} rows: once a row")
    stores = {name: traffic.global_stores[name] for name in ("x_q", "x_scale", "x_sum")}
    if stores != {"x_q": t * k, "x_scale": t * k // QK, "x_sum": t * k // QK}:
        problems.append(f"outputs written {stores}: each code, scale and sum once")
    return problems


def rmsnorm_q8_1_matches_reference(kernel) -> None:
    """Visible: 3 rows of K = 160 (5 blocks: warp 0 takes two), every row's mean above 0 by 6 or more of its
    standard errors (row 1's far from 0): a norm of the values instead of their squares then fits its own model on
    every draw, where a mean near 0 would leave the float32 sum of the values mostly rounding. Counted on the
    simulator: x read twice, weight once a row, each output written once (the budget)."""
    rng, seed = random_inputs()
    x, weight = rmsnorm_q8_1_case(rng, 3, 160)
    x[0] += np.float32(0.05)
    x[2] += np.float32(15.0)
    outputs, traffic = rmsnorm_q8_1_run(kernel, x, weight, counted=True)
    check_rmsnorm_q8_1(outputs, x, weight, seed=seed)
    if traffic is not None:
        _raise_problems(rmsnorm_q8_1_traffic_problems(traffic, x))
    _passed("RMSNorm to q8_1 on 3 rows of 160 values (5 blocks of 32), x read twice")


def rmsnorm_q8_1_edge_rows(kernel) -> None:
    """Visible: the edge rows (zeros, values below eps, an outlier, a constant row, a block of zeros, 1e-20) at
    K = 96."""
    rng, seed = random_inputs()
    x, weight = rmsnorm_q8_1_case(rng, 6, 96, kind="edges")
    check_rmsnorm_q8_1(rmsnorm_q8_1_run(kernel, x, weight), x, weight, seed=seed,
                       label="the edge rows: zeros, values near 1e-3, an outlier, a constant, a block of zeros, 1e-20")
    _passed("RMSNorm to q8_1 on the edge rows")


def rmsnorm_q8_1_scales_and_sums(kernel) -> None:
    """Visible: one row of K = 32 and one of K = 288 (9 blocks), where every block's amax differs."""
    rng, seed = random_inputs()
    for k in (32, 288):
        x, weight = rmsnorm_q8_1_case(rng, 1, k)
        x = (x.reshape(-1, QK) * np.geomspace(0.01, 100, k // QK)[:, None]).reshape(1, k).astype(np.float32)
        check_rmsnorm_q8_1(rmsnorm_q8_1_run(kernel, x, weight), x, weight, seed=seed,
                           label=f"a row of {k // QK} blocks of amaxes 0.01 ... 100")
    _passed("RMSNorm to q8_1: a scale and a sum per block")


# --------------------------------------------------------------------------------------------- RoPE

def rope_case(rng, tokens: int, heads: int, head_dim: int, *, context: int = 64, base: float = 10_000.0,
              kind: str = "normal") -> dict:
    """x (tokens, heads, d) float32, positions (tokens,) int32 scattered in 0 ... context - 1 (never 0, 1, 2, ...:
    a decode token's position is where it sits in its sequence, not its index in the step), the table of
    ``reference.rope_table(context, d, base)`` and base. kind "unit": every pair of x is (1, 0) times a
    distinct scale (head h, pair i: (1 + h + i / 8, 0)), so each output pair shows the angle it was turned by."""
    from kernels import reference

    if kind == "normal":
        x = rng.standard_normal((tokens, heads, head_dim)) * 3
    elif kind == "unit":
        x = np.zeros((tokens, heads, head_dim))
        x[..., 0::2] = 1 + np.arange(heads)[:, None] + np.arange(head_dim // 2)[None, :] / 8
    else:
        raise ValueError(f"kind must be 'normal' or 'unit', got {kind!r}")
    positions = rng.permutation(np.arange(1, context))[:tokens] if tokens < context else rng.integers(0, context, tokens)
    if tokens > 1:
        positions[-1] = context - 1
    return {"x": x.astype(np.float32), "positions": np.asarray(positions, np.int32),
            "table": reference.rope_table(context, head_dim, base), "base": base}


def _launch_directly(kernel, blocks: int, inputs, out):
    """Your kernel launched directly on ``blocks`` blocks of ELEMENT_THREADS threads over ``inputs`` (host arrays)
    and ``out`` (poisoned, on the host), without the course's launcher and its grid; returns out from the device."""
    from numba import cuda

    from kernels.launching import note_output
    from kernels.llama_layers import ELEMENT_THREADS

    device_out = note_output(cuda.to_device(out))     # an output: the grader's guard lets the kernel write it

    def launch():
        kernel[blocks, ELEMENT_THREADS](*(cuda.to_device(a) for a in inputs), device_out)
        return device_out.copy_to_host()

    return _launch_explained(launch)


def rope_run(kernel, case: dict, *, in_place: bool = False, blocks: int | None = None):
    """Your kernel through the course's launcher (``rope_pairs_from_table``: a thread per pair, a grid-stride
    loop) on the case, out poisoned first. ``in_place``: x and out one device array, as the model's step passes them
    (the turned x, on the host). ``blocks``: your kernel launched directly on that many blocks of ELEMENT_THREADS
    threads, fewer than the pairs need, as the launcher's grid is past 1,024 blocks: only a grid-stride loop
    reaches every pair."""
    from numba import cuda

    from kernels.llama_layers import rope_pairs_from_table

    if in_place:
        x = cuda.to_device(case["x"])
        positions, table = cuda.to_device(case["positions"]), cuda.to_device(case["table"])
        _launch_explained(lambda: rope_pairs_from_table(x, positions, table, out=x, kernel=kernel))
        return x.copy_to_host()
    out = poison(np.empty_like(case["x"]))
    if blocks is not None:
        return _launch_directly(kernel, blocks, (case["x"], case["positions"], case["table"]), out)
    return _launch_explained(lambda: rope_pairs_from_table(case["x"], case["positions"], case["table"], out=out,
                                                           kernel=kernel))


def _rotate(x, angles, pairs: str):
    """x (T, heads, d) float64 turned by angles (T, d / 2) with the pairs (2i, 2i + 1) or (i, i + d / 2)."""
    d = x.shape[2]
    first, second = (x[..., 0::2], x[..., 1::2]) if pairs == "adjacent" else (x[..., :d // 2], x[..., d // 2:])
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    out = np.empty_like(x)
    a, b = (out[..., 0::2], out[..., 1::2]) if pairs == "adjacent" else (out[..., :d // 2], out[..., d // 2:])
    a[...] = first * cos - second * sin
    b[...] = first * sin + second * cos
    return out


def _in_place_reread(x, angles):
    """RoPE in place with the pair's first value written before the second is computed from it."""
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = out[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def _rope_findings(out, case: dict) -> list:
    poisoned = is_poison(np.asarray(out))           # before out is widened to float64, which drops the poison's bits
    x = case["x"].astype(np.float64)
    t, _, d = x.shape
    base = case["base"]
    angles = np.asarray(case["positions"], np.float64)[:, None] * base ** (-np.arange(0, d, 2) / d)
    index_angles = np.arange(t, dtype=np.float64)[:, None] * base ** (-np.arange(0, d, 2) / d)
    out = np.asarray(out, np.float64)
    scale = 1e-5 * max(1.0, float(np.abs(x).max()))
    models = (
        (_rotate(x, angles, "half"), "rotate_half", "the output fits the rotate-half convention, pairs (i, i + d/2): "
         "that is Hugging Face's order, but llama.cpp's converter permuted the rows of Wq and Wk, so in a GGUF file the "
         "pairs are adjacent, (2i, 2i + 1) (the model then stops after a token or two)"),
        (_rotate(x, index_angles, "adjacent"), "token_index", "the output fits angles of the token's INDEX t in the step: "
         "a token's angle is that of its position in its sequence, positions[t] (a decode token at position 41 is "
         "token 0 of its step)"),
        (_rotate(x, -angles, "adjacent"), "angle_sign", "the output fits the opposite angle: (x0 cos + x1 sin, "
         "-x0 sin + x1 cos) turns backwards; the first output is x0 cos - x1 sin, the second x0 sin + x1 cos"),
        (_rotate(x, np.pi / 2 - angles, "adjacent"), "cos_sin_swapped", "the output fits cos and sin swapped: "
         "table[p, i, 0] is the cosine, table[p, i, 1] the sine"),
        (_in_place_reread(x, angles), "reread_in_place", "the output fits a pair whose first value was written "
         "before its second was computed: with out the same array as x (the model's step passes one array for both) "
         "the second value then reads the TURNED first one. Read both values of the pair into registers, then write "
         "both"),
    )
    found = [(key, words) for model, key, words in models if np.all(np.abs(out - model) <= scale)]
    if poisoned.any() and not found:
        t_, h_, j_ = np.argwhere(poisoned)[0]
        found.append(("unwritten", f"out[{t_}, {h_}, {j_}] still holds the poison: every (token, head, pair) needs a "
                                   "thread, and each thread writes both values of its pair (a grid-stride loop over "
                                   "T * heads * d / 2 pairs)"))
    return found


def check_rope(out, case: dict, *, seed=None, label: str = "") -> None:
    """out equals ``reference.rope_pairs`` of the case; on failure the rotation convention, the position or the
    angle that the output fits instead is named."""
    from kernels import reference

    want = reference.rope_pairs(case["x"], case["positions"], case["base"])
    t, heads, d = case["x"].shape
    _with_findings(lambda: _rope_findings(out, case), out, want, name="out", dims=("token", "head", "channel"),
                   seed=seed, atol=2e-6 * max(1.0, float(np.abs(case["x"]).max())))


def rope_matches_reference(kernel) -> None:
    """Visible: 3 tokens of 2 heads of d = 8 at scattered positions of a 64-position table; the same in place (x and
    out one device array, as the model's step passes them); 5 tokens of 4 heads of 64 on a grid of 2 blocks of 256
    threads, which a grid-stride loop covers (640 pairs for 512 threads)."""
    rng, seed = random_inputs()
    case = rope_case(rng, 3, 2, 8)
    check_rope(rope_run(kernel, case), case, seed=seed)
    check_rope(rope_run(kernel, case, in_place=True), case, seed=seed)
    strided = rope_case(rng, 5, 4, 64, context=100)
    check_rope(rope_run(kernel, strided, blocks=2), strided, seed=seed)
    _passed(f"RoPE on 3 tokens of 2 heads of 8 at positions {case['positions'].tolist()}, in place too, and on 640 "
            "pairs with 512 threads (a grid-stride loop)")


def rope_pairs_and_positions(kernel) -> None:
    """Visible: unit pairs (1, 0) at distinct scales, so each output pair is the angle it was turned by: 2 tokens of
    3 heads of d = 12, one of them at position 0."""
    rng, seed = random_inputs()
    case = rope_case(rng, 2, 3, 12, kind="unit")
    case["positions"][0] = 0
    check_rope(rope_run(kernel, case), case, seed=seed)
    _passed("RoPE turns each adjacent pair by the angle of its token's position")


# --------------------------------------------------------------------------------------------- SwiGLU

def swiglu_case(rng, tokens: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(gate, up) (tokens, width) float32: gates from -30 to 30 (silu's both tails), ups standard normal."""
    gate = rng.uniform(-30, 30, (tokens, width))
    gate.flat[: min(4, gate.size)] = [0.0, -1.0, 1.0, -30.0][: min(4, gate.size)]
    return gate.astype(np.float32), rng.standard_normal((tokens, width)).astype(np.float32)


def swiglu_run(kernel, gate, up, *, blocks: int | None = None):
    """Your kernel through the course's launcher (``swiglu_elementwise``: a thread per element, a grid-stride loop),
    out poisoned first. ``blocks``: your kernel launched directly on that many blocks of ELEMENT_THREADS threads,
    fewer than the elements need (as the launcher's grid is past 1,024 blocks): only a grid-stride loop reaches every
    element."""
    from kernels.llama_layers import swiglu_elementwise

    out = poison(np.empty_like(gate))
    if blocks is not None:
        return _launch_directly(kernel, blocks, (gate, up), out)
    return _launch_explained(lambda: swiglu_elementwise(gate, up, out=out, kernel=kernel))


def _swiglu_findings(out, gate, up) -> list:
    g, u, o = gate.astype(np.float64), up.astype(np.float64), np.asarray(out, np.float64)
    with np.errstate(over="ignore"):
        sigmoid = 1 / (1 + np.exp(-g))
        silu_up = u / (1 + np.exp(-u))
    models = ((sigmoid * u, "sigmoid", "the output fits sigmoid(gate) * up: silu(z) = z * sigmoid(z) = z / (1 + exp(-z))"),
              (silu_up * g, "swapped", "the output fits silu(up) * gate: silu takes the GATE (the first matrix's "
               "output), up multiplies it"),
              (g * u, "no_silu", "the output fits gate * up, without silu"))
    scale = 1e-5 * max(1.0, float(np.abs(o[np.isfinite(o)]).max()) if np.isfinite(o).any() else 1.0)
    found = [(key, words) for model, key, words in models if np.all(np.abs(o - model) <= scale + 1e-5 * np.abs(model))]
    if is_poison(out).any() and not found:
        t, j = np.argwhere(is_poison(out))[0]
        found.append(("unwritten", f"out[{t}, {j}] still holds the poison: every element needs a thread, so loop over "
                                   "the T F elements with a grid-stride loop (n, n + gridDim.x * blockDim.x, ...): "
                                   "past 1,024 blocks the grid does not grow"))
    return found


def check_swiglu(out, gate, up, *, seed=None) -> None:
    """out equals ``reference.swiglu(gate, up)``; on failure the function the output fits instead is named."""
    from kernels import reference

    _with_findings(lambda: _swiglu_findings(out, gate, up), out, reference.swiglu(gate, up), name="out",
                   dims=("token", "column"), seed=seed)


def swiglu_matches_reference(kernel) -> None:
    """Visible: 3 tokens of 40 columns, gates from -30 to 30; then 3 tokens of 333 on a grid of 2 blocks of 256
    threads, which a grid-stride loop covers (999 elements for 512 threads)."""
    rng, seed = random_inputs()
    gate, up = swiglu_case(rng, 3, 40)
    check_swiglu(swiglu_run(kernel, gate, up), gate, up, seed=seed)
    gate, up = swiglu_case(rng, 3, 333)
    check_swiglu(swiglu_run(kernel, gate, up, blocks=2), gate, up, seed=seed)
    _passed("SwiGLU on 3 tokens of 40, and of 333 on a grid of 2 blocks (a grid-stride loop)")
