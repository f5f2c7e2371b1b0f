"""Every classic mistake of days 1-6 gets a message from ``check`` that names it.

Each wrong kernel of ``tests/mistakes.py`` (a course kernel with the mistake written in) runs on small
inputs with the context a notebook passes to ``check`` (``attention=``, ``reduction=``, ``gemm=``,
``kernel=``), and the test asserts which diagnosis comes first and the words it uses, as a student
would read them. The same runners pass with the course's own kernels, so a message comes from the
mistake, not from the runner.

Mistakes that a check of values cannot see are caught elsewhere: a missing bounds guard or a tile
read past the end raises ``IndexError`` on the simulator; exp without the max subtracted overflows
on large logits (the simulator raises ``OverflowError`` from about exp(710) on; a smaller overflow, and
any overflow on a GPU, gives inf and then NaN, which ``check`` blames on exactly that); a kernel that
masks key tiles instead of skipping them gives right values and fails the traffic checks.
A race or a barrier that only some threads reach may give right values on the simulator's schedule:
``check`` then passes with a warning that names the barrier, and the test accepts either outcome.

Day 6's runners are those of its exercise (``course.exercise_checks``): ``check`` with the paged
diagnoses in front. A day-6 mistake that makes the kernel index past an array (the query head used
as the KV head) raises on the simulator before any value exists; the runner turns that into a
``KernelFailed`` that names the bug, and ``RAISING`` asserts its words.
"""

import importlib
import math
import pkgutil

import numpy as np
import pytest

from course import exercise_checks
from course.checking import CheckFailure, CheckResult, check, poison, random_inputs
from course.device import on_simulator
from course.diagnoses import KERNEL_KEYS, kernel_findings
from kernels import (attention, elementwise, flash_attention, gemm, kv_cache, paged_attention, reduction,
                     reference, softmax)
from mistakes import MISTAKES, mistaken

# One seed for every runner: the tests assert the words of a message, so a failure must repeat
# exactly. Each mistake shows on any seed (tried on several); the seed only fixes which elements.
SEED = 5


def outcome(run) -> CheckResult:
    """The CheckResult of a passing check, or of the CheckFailure it raised."""
    try:
        return run()
    except CheckFailure as failure:
        return failure.result


# --------------------------------------------------------------------------- runners, one per exercise


def run_axpb(kernel, blocks=None):
    rng, seed = random_inputs(SEED)
    n, threads = 300, elementwise.THREADS_PER_BLOCK
    x = rng.standard_normal(n).astype(np.float32)
    y = poison(np.empty(n, np.float32))
    kernel[blocks or -(-n // threads), threads](x, np.float32(2.5), np.float32(-1.0), y)
    return check(y, 2.5 * x.astype(np.float64) - 1.0, name="y", dims=("i",), seed=seed, kernel=kernel)


def run_normalize_rows(kernel):
    rng, seed = random_inputs(SEED)
    shape = (2, 2, 6, 40)
    x = rng.standard_normal(shape).astype(np.float32)
    row_sums = rng.uniform(0.5, 2.0, shape[:3]).astype(np.float32)
    out = poison(np.empty(shape, np.float32))
    grid, block = elementwise.normalize_rows_grid(shape)
    kernel[grid, block](x, row_sums, out)
    return check(out, x.astype(np.float64) / row_sums[..., None], name="out",
                 dims=("batch", "head", "row", "col"), tile={"row": elementwise.ROWS_PER_BLOCK},
                 seed=seed, kernel=kernel)


def run_row_stats(kernel, threads, op):
    rng, seed = random_inputs(SEED)
    x = rng.uniform(-1e4, 1e4, (3, 100)).astype(np.float32)
    x[2] = -np.abs(x[2])                       # an all-negative row
    row_max, row_sum = poison(np.empty(3, np.float32)), poison(np.empty(3, np.float32))
    kernel[3, threads](x, row_max, row_sum)
    got = row_max if op == "max" else row_sum
    want = getattr(x.astype(np.float64), op)(axis=1)
    return check(got, want, name=f"row_{op}", dims=("row",), seed=seed, kernel=kernel,
                 reduction=dict(x=x, op=op, threads=threads))


def run_scores(kernel):
    rng, seed = random_inputs(SEED)
    q, k = (rng.standard_normal((1, 2, 6, 8), dtype=np.float32) for _ in range(2))
    s = poison(np.empty((1, 2, 6, 6), np.float32))
    kernel[(-(-36 // attention.THREADS), 2, 1), attention.THREADS](q, k, s, np.float32(1 / math.sqrt(8)))
    want = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / math.sqrt(8)
    return check(s, want, name="S", seed=seed, kernel=kernel)


def run_softmax(kernel, masked=False, spread=3.0):
    rng, seed = random_inputs(SEED)
    x = np.float32(spread) * rng.standard_normal((5, 45), dtype=np.float32)
    if masked:
        x[1, 10:] = -np.inf                    # a masked tail: threads 10..31 see only -inf
    p = poison(np.empty_like(x))
    kernel[x.shape[0], softmax.SOFTMAX_THREADS](x, p)
    return check(p, reference.softmax(x.astype(np.float64), axis=-1), name="P", seed=seed,
                 rows_sum_to_one=True, kernel=kernel)


def run_fused_rows(kernel, causal):
    rng, seed = random_inputs(SEED)
    q, k, v = (rng.standard_normal((1, 2, 6, 5), dtype=np.float32) for _ in range(3))
    o = poison(np.empty_like(q))
    scale = np.float32(1 / math.sqrt(5))
    kernel[(1, 2, 1), attention.THREADS](q, k, v, o, scale, causal)
    return check(o, reference.attention(q, k, v, causal=causal), name="O", seed=seed, kernel=kernel,
                 attention=dict(q=q, k=k, v=v, causal=causal))


def run_gemm(kernel):
    rng, seed = random_inputs(SEED)
    m, n, k = 12, 20, 19                       # 2 blocks, 2 steps along K, the last one partial
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = gemm.launch_gemm(kernel, a, b, out=poison(np.empty((m, n), np.float32)),
                         grid=(gemm.cdiv(n, gemm.TILE), gemm.cdiv(m, gemm.TILE)), block=(gemm.TILE, gemm.TILE))
    return check(c, a.astype(np.float64) @ b, name="C", dims=("row", "col"),
                 tile={"row": gemm.TILE, "col": gemm.TILE}, seed=seed, kernel=kernel,
                 gemm=dict(a=a, b=b, tile_k=gemm.TILE))


def run_flash(kernel, causal=True, kv_lens=(40, 21)):
    rng, seed = random_inputs(SEED)
    q, k, v = (rng.standard_normal((2, 1, 40, 4), dtype=np.float32) for _ in range(3))
    lens = np.array(kv_lens, dtype=np.int32)
    o = poison(np.empty_like(q))
    kernel[flash_attention.flash_grid(2, 1, 40), flash_attention.TILE_Q](
        q, k, v, lens, o, np.float32(0.5), causal)
    return check(o, reference.attention(q, k, v, causal=causal, kv_lens=lens), name="O",
                 dims=("batch", "head", "row", "col"), tile={"row": flash_attention.TILE_Q}, seed=seed,
                 kernel=kernel, attention=dict(q=q, k=k, v=v, causal=causal, kv_lens=lens,
                                               tile_q=flash_attention.TILE_Q, tile_kv=flash_attention.TILE_KV))


def run_cache_write(kernel):
    """A prefill across two block boundaries and two decode steps, block_size 4, from random cache content."""
    rng, seed = random_inputs(SEED)
    k_cache, v_cache, case, _, _ = exercise_checks.cache_write_run(kernel, [(0, 9), (6, 1), (8, 1)], kv_heads=2,
                                                                   head_dim=4, block_size=4, rng=rng)
    return exercise_checks.check_cache_write(k_cache, v_cache, case, seed=seed)


def run_paged_v1(kernel):
    """A context that fills its last page, 4 query heads over 2 KV heads; NaN in every slot with no key."""
    rng, seed = random_inputs(SEED)
    out, case, _, _ = exercise_checks.paged_v1_run(kernel, [12], heads=4, kv_heads=2, head_dim=8, block_size=4,
                                                   rng=rng)
    return exercise_checks.check_paged(out, case, seed=seed, kernel=kernel)


def run_merge(kernel, context_lens=(7, 14)):
    """v2's merge of partitions of 5 tokens (their partials computed in NumPy)."""
    rng, seed = random_inputs(SEED)
    out, case, _, _ = exercise_checks.merge_run(kernel, list(context_lens), partition_size=5, heads=1, kv_heads=1,
                                                head_dim=8, block_size=4, rng=rng)
    return exercise_checks.check_paged(out, case, seed=seed, kernel=kernel, partition_size=5)


def run_merge_empty_context(kernel):
    return run_merge(kernel, (0, 9))


def run_tree_max(kernel):
    return run_row_stats(kernel, reduction.TREE_THREADS, "max")


def run_tree_sum(kernel):
    return run_row_stats(kernel, reduction.TREE_THREADS, "sum")


def run_shuffle_sum(kernel):
    return run_row_stats(kernel, reduction.SHUFFLE_THREADS, "sum")


def run_softmax_masked(kernel):
    return run_softmax(kernel, masked=True)


def run_softmax_large_logits(kernel):
    """Logits up to about 300: exp overflows float32 unless the row max is subtracted first."""
    return run_softmax(kernel, spread=80.0)


def run_fused_rows_full(kernel):
    return run_fused_rows(kernel, causal=False)


def run_fused_rows_causal(kernel):
    return run_fused_rows(kernel, causal=True)


def run_flash_full(kernel):
    return run_flash(kernel, causal=False)


def run_flash_empty_sequence(kernel):
    return run_flash(kernel, kv_lens=(40, 0))


def run_axpb_grid_rounded_down(kernel):
    """A launch mistake, not a kernel one: n // threads blocks instead of a ceiling division."""
    return run_axpb(kernel, blocks=300 // elementwise.THREADS_PER_BLOCK)


# label -> (runner, the course kernel it runs correctly, the first cause, words the message must use)
CASES = {
    # day 1
    "axpb_guard_drops_last": (run_axpb, elementwise.axpb_v1_guarded_kernel, "unwritten",
                              ["bounds guard stops too early", "only the last i"]),
    "axpb_grid_rounded_down": (run_axpb_grid_rounded_down, None, "unwritten",
                               ["i >= 256", "ceiling division"]),
    "normalize_rows_tile_height_from_blockdim_x": (
        run_normalize_rows, elementwise.normalize_rows_v1_3d_grid_kernel, "unwritten",
        ["row >= 4", "block offset multiplied by the wrong size"]),
    "tree_max_starts_at_zero": (run_tree_max,
                                reduction.row_stats_v2_shared_tree_kernel, "max_identity",
                                ["starts at 0 instead of -inf", "all negative"]),
    "tree_stops_one_level_early": (run_tree_sum,
                                   reduction.row_stats_v2_shared_tree_kernel, "tree_early",
                                   ["stopped 1 level early", "threads 0, 2, 4"]),
    "tree_without_barrier": (run_tree_sum,
                             reduction.row_stats_v2_shared_tree_kernel, "missing_barrier",
                             ["no barrier between one pass and the next", "partial_max"]),
    "tree_without_column_loop": (run_tree_sum,
                                 reduction.row_stats_v2_shared_tree_kernel, "stride_loop",
                                 ["only the first 64 columns", "block-stride loop"]),
    "shuffle_forgets_other_warps": (run_shuffle_sum,
                                    reduction.row_stats_v3_warp_shuffle_kernel, "tree_partial",
                                    ["only the partials of the first warp", "other warps"]),
    # day 2
    "scores_without_scale": (run_scores, attention.scores_kernel, "scale", ["sqrt(8)", "scale is missing"]),
    "scores_transposed": (run_scores, attention.scores_kernel, "transposed", ["transpose", "row and col swapped"]),
    "softmax_sum_tree_starts_at_a_quarter": (run_softmax, softmax.softmax_rows_kernel, "row_sums",
                                             ["sum above 1", "drops some threads' partials"]),
    "softmax_without_max_subtraction": (run_softmax_large_logits, softmax.softmax_rows_kernel, "nonfinite",
                                        ["NaN", "subtract the row max before exp"]),
    # day 3
    "online_sum_not_rescaled": (run_softmax, softmax.softmax_online_kernel, "row_sums",
                                ["sum below 1", "running sum rescaled by exp(m_old - m_new)"]),
    "online_merge_of_empty_states": (run_softmax_masked, softmax.softmax_online_kernel,
                                     "masked_nan", ["exp(-inf - (-inf))", "keep the empty state"]),
    "fused_accumulator_not_rescaled": (run_fused_rows_full, attention.attention_v2_fused_rows_kernel,
                                       "acc_not_rescaled", ["accumulator is not rescaled", "rescale both"]),
    "fused_causal_j_below_i": (run_fused_rows_causal, attention.attention_v2_fused_rows_kernel,
                               "row0_key0", ["row 0 sees only key 0", "all zeros", "j < i instead of j <= i"]),
    # day 4
    "gemm_second_barrier_removed": (run_gemm, gemm.gemm_v3_shared_tiles_kernel, "missing_barrier",
                                    ["a_tile is read", "overwritten in the next pass", "after the last read"]),
    "gemm_threads_outside_c_return": (run_gemm, gemm.gemm_v3_shared_tiles_kernel, "early_return_barrier",
                                      ["return", "never arrive at the barrier", "guard the loads"]),
    "gemm_last_k_step_lost": (run_gemm, gemm.gemm_v3_shared_tiles_kernel, "k_steps_dropped",
                              ["last, partial step along K is lost", "K = 19"]),
    "gemm_a_tile_offset_missing": (run_gemm, gemm.gemm_v3_shared_tiles_kernel, "tile_offset_k",
                                   ["first tile of A again", "k0 + tx"]),
    # day 5
    "flash_causal_bound_per_thread": (run_flash, flash_attention.attention_v4_flash_kernel, "divergent_barrier",
                                      ["depends on the thread", "for kv_start in range(0, kv_end, TILE_KV)",
                                       "the simulator does not notice"]),
    "flash_accumulator_not_rescaled": (run_flash_full,
                                       flash_attention.attention_v4_flash_kernel, "acc_not_rescaled",
                                       ["accumulator is not rescaled", "32 at a time"]),
    "flash_causal_j_below_i": (run_flash, flash_attention.attention_v4_flash_kernel, "row0_key0",
                               ["row 0 sees only key 0", "all zeros", "j < i instead of j <= i"]),
    "flash_diagonal_tile_unmasked": (run_flash, flash_attention.attention_v4_flash_kernel, "row0_key0",
                                     ["row 0 sees only key 0", "inside the diagonal tile"]),
    "flash_kv_lens_ignored": (run_flash, flash_attention.attention_v4_flash_kernel, "kv_lens_ignored",
                              ["positions >= kv_lens[b]"]),
    "flash_last_key_tile_dropped": (run_flash_full,
                                    flash_attention.attention_v4_flash_kernel, "keys_dropped",
                                    ["last, partial tile of keys is skipped"]),
    "flash_empty_sequence_divides_by_zero": (run_flash_empty_sequence,
                                             flash_attention.attention_v4_flash_kernel, "empty_sequence",
                                             ["empty sequence (kv_lens[1] = 0)", "0/0 is NaN"]),
    # day 6
    "cache_write_page_of_next_position": (run_cache_write, kv_cache.kv_cache_write_kernel, "slot_at_block_boundary",
                                          ["wrong slot at a block boundary", "the last slot of page 0",
                                           "position % block_size"]),
    "cache_write_block_table_ignored": (run_cache_write, kv_cache.kv_cache_write_kernel, "slot_table_ignored",
                                        ["block table was not used", "block_tables[seq, page]"]),
    "paged_reads_one_page_past_end": (run_paged_v1, paged_attention.paged_attention_v1_block_per_head_kernel,
                                      "paged_read_past_end",
                                      ["past the context's end", "one page past the end was read", "NaN"]),
    "paged_kv_head_interleaved": (run_paged_v1, paged_attention.paged_attention_v1_block_per_head_kernel,
                                  "paged_kv_head_interleaved", ["h % kv_heads instead of h // (heads // kv_heads)"]),
    "merge_without_rescale": (run_merge, paged_attention.paged_attention_v2_merge_kernel, "merge_not_rescaled",
                              ["without rescaling", "exp(partial_max[p] - m)"]),
    "merge_accumulator_not_rescaled": (run_merge, paged_attention.paged_attention_v2_merge_kernel,
                                       "merge_acc_not_rescaled", ["sums to more than 1", "rescale both"]),
    "merge_empty_context_divides_by_zero": (run_merge_empty_context, paged_attention.paged_attention_v2_merge_kernel,
                                            "paged_empty_context",
                                            ["context_lens[0] = 0", "write zeros instead of dividing"]),
}
# label -> (runner, the KernelFailed cause, words): mistakes that raise inside the kernel on the simulator.
RAISING = {
    "paged_query_head_as_kv_head": (run_paged_v1, "kv_head_out_of_range",
                                    ["axis 1 with size 2", "is the query head used as the KV head?"]),
}
DAY_OF = {"axpb": 1, "normalize": 1, "tree": 1, "shuffle": 1, "scores": 2, "softmax": 2, "online": 3,
          "fused": 3, "gemm": 4, "flash": 5, "cache": 6, "paged": 6, "merge": 6}


def _marks(label: str):
    marks = [getattr(pytest.mark, f"day0{DAY_OF[label.split('_')[0]]}")]
    if label in CASES and CASES[label][2] in KERNEL_KEYS:
        # A divergent barrier can hang a real GPU, and a race gives different numbers on each.
        marks.append(pytest.mark.skipif(not on_simulator(), reason="a barrier mistake: run on the simulator only"))
    return marks


def test_every_mistake_has_a_case():
    cases = set(CASES) | set(RAISING)
    assert set(MISTAKES) <= cases, f"mistakes without a case: {sorted(set(MISTAKES) - cases)}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the NaN that some mistakes make, on purpose
@pytest.mark.filterwarnings("ignore::course.checking.BarrierWarning")   # asserted on the result below
@pytest.mark.parametrize("label", [pytest.param(label, marks=_marks(label)) for label in CASES])
def test_check_names_the_mistake(label):
    runner, _, first_cause, words = CASES[label]
    kernel = mistaken(*MISTAKES[label], label=label) if label in MISTAKES else elementwise.axpb_v1_guarded_kernel
    result = outcome(lambda: runner(kernel))
    text = str(result)
    missing = [w for w in words if w not in text]
    assert not missing, f"{label}: the message lacks {missing}:\n{text}"
    assert "no simple pattern" not in text
    if first_cause in KERNEL_KEYS and result.passed:
        # A race or a divergent barrier may give right numbers on the simulator's schedule: the
        # source finding must then come as a warning under the OK line.
        assert result.warnings and "bug the simulator hides" in text, text
    else:
        assert not result.passed, f"{label}: the wrong kernel passed the check:\n{text}"
        assert result.causes and result.causes[0] == first_cause, f"{label}: causes {result.causes}\n{text}"


@pytest.mark.skipif(not on_simulator(), reason="an index past an array raises only on the simulator")
@pytest.mark.parametrize("label", [pytest.param(label, marks=_marks(label)) for label in RAISING])
def test_a_kernel_that_raises_is_named(label):
    runner, cause, words = RAISING[label]
    with pytest.raises(exercise_checks.KernelFailed) as raised:
        runner(mistaken(*MISTAKES[label], label=label))
    text = str(raised.value)
    missing = [w for w in words if w not in text]
    assert not missing, f"{label}: the message lacks {missing}:\n{text}"
    assert raised.value.cause == cause, text


# Each runner with each course kernel it runs: the runner and its context pass a right kernel,
# with no warning.
COURSE_RUNS = {(runner, kernel): label for label, (runner, kernel, _, _) in reversed(list(CASES.items()))
               if kernel is not None}


@pytest.mark.parametrize("label", [pytest.param(label, marks=_marks(label)[:1],
                                                id=f"{runner.__name__}-{kernel.py_func.__name__}")
                                   for (runner, kernel), label in COURSE_RUNS.items()])
def test_the_course_kernel_passes_the_same_runner(label):
    runner, course_kernel, _, _ = CASES[label]
    result = runner(course_kernel)
    assert result.passed and not result.warnings, str(result)


def test_no_barrier_finding_in_any_course_kernel():
    """The source reading finds nothing in the course's own kernels (no false alarm to a student)."""
    import kernels

    seen = 0
    for module_info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"kernels.{module_info.name}")
        for name, value in vars(module).items():
            if hasattr(value, "py_func") and value.py_func.__module__ == module.__name__:
                assert kernel_findings(value) == [], f"{module.__name__}.{name}: {kernel_findings(value)}"
                seen += 1
    v5 = flash_attention.attention_v5_flash_registers_kernel(8)
    assert kernel_findings(v5) == []
    assert seen >= 15, f"only {seen} kernels found in kernels/"
