"""Every classic mistake of days 1-6 gets a message from ``check`` that names it.

Each mistake of the day tables (``tests/mistakes/dayNN.py``) that ``check`` names, built as a course kernel
with the mistake written in, runs on small inputs with the context a notebook passes to ``check``
(``attention=``, ``reduction=``, ``gemm=``, ``kernel=``), and the test asserts which diagnosis comes first
(the mistake's ``names``) and the words it uses (its ``words``), as a student would read them. The same
runners pass with the course's own kernels, so a message comes from the mistake, not from the runner.

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
import inspect
import math
import pkgutil

import numpy as np
import pytest

from course import exercise_checks
from course.checking import CheckFailure, CheckResult, check, poison, random_inputs
from course.device import on_simulator
from course.diagnoses import KERNEL_KEYS, kernel_findings
from kernels import attention, elementwise, flash_attention, gemm, reduction, reference, softmax
from mistakes import ALL, BY_LABEL, TABLES, assignment_of

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


# label -> the runner that shows the mistake: one for each mistake of the day tables (tests/mistakes/) that
# check names (its ``names``, the first cause, and ``words``, what the message must say)
RUNNERS = {
    # day 1
    "axpb_guard_drops_last": run_axpb,
    "normalize_rows_tile_height_from_blockdim_x": run_normalize_rows,
    "tree_max_starts_at_zero": run_tree_max,
    "tree_stops_one_level_early": run_tree_sum,
    "tree_without_barrier": run_tree_sum,
    "tree_without_column_loop": run_tree_sum,
    "shuffle_forgets_other_warps": run_shuffle_sum,
    "shuffle_starts_at_offset_8": run_shuffle_sum,
    # day 2
    "scores_without_scale": run_scores,
    "scores_transposed": run_scores,
    "softmax_sum_tree_starts_at_a_quarter": run_softmax,
    "softmax_without_max_subtraction": run_softmax_large_logits,
    # day 3
    "online_sum_not_rescaled": run_softmax,
    "online_merge_of_empty_states": run_softmax_masked,
    "fused_accumulator_not_rescaled": run_fused_rows_full,
    "fused_causal_j_below_i": run_fused_rows_causal,
    # day 4
    "gemm_second_barrier_removed": run_gemm,
    "gemm_threads_outside_c_return": run_gemm,
    "gemm_last_k_step_lost": run_gemm,
    "gemm_a_tile_offset_missing": run_gemm,
    # day 5
    "flash_causal_bound_per_thread": run_flash,
    "flash_accumulator_not_rescaled": run_flash_full,
    "flash_causal_j_below_i": run_flash,
    "flash_diagonal_tile_unmasked": run_flash,
    "flash_kv_lens_ignored": run_flash,
    "flash_last_key_tile_dropped": run_flash_full,
    "flash_empty_sequence_divides_by_zero": run_flash_empty_sequence,
    # day 6
    "cache_write_page_of_next_position": run_cache_write,
    "cache_write_block_table_ignored": run_cache_write,
    "paged_reads_one_page_past_end": run_paged_v1,
    "paged_kv_head_interleaved": run_paged_v1,
    "paged_query_head_as_kv_head": run_paged_v1,
    "merge_without_rescale": run_merge,
    "merge_accumulator_not_rescaled": run_merge,
    "merge_empty_context_divides_by_zero": run_merge_empty_context,
}
# A mistake of the launch, not of a kernel (so not in the tables of kernel edits): the runner launches the
# course's kernel with n // threads blocks. label -> (runner, the first cause, words the message must use)
LAUNCH_MISTAKES = {
    "axpb_grid_rounded_down": (run_axpb_grid_rounded_down, "unwritten", ["i >= 256", "ceiling division"]),
}
# label -> (runner, the course kernel it runs correctly, the first cause, words the message must use)
CASES = {
    **{m.label: (RUNNERS[m.label], m.course_kernel(), m.names, list(m.words))
       for m in ALL if m.names and not m.raises and m.label in RUNNERS},
    **{label: (runner, None, cause, words) for label, (runner, cause, words) in LAUNCH_MISTAKES.items()},
}
# label -> (runner, the KernelFailed cause, words): mistakes that raise inside the kernel on the simulator.
RAISING = {m.label: (RUNNERS[m.label], m.names, list(m.words)) for m in ALL if m.raises and m.label in RUNNERS}


def _day(label: str) -> int:
    return 1 if label in LAUNCH_MISTAKES else int(assignment_of(label)[3:5])


def _marks(label: str):
    marks = [getattr(pytest.mark, f"day{_day(label):02d}")]
    if label in CASES and CASES[label][2] in KERNEL_KEYS:
        # A divergent barrier can hang a real GPU, and a race gives different numbers on each.
        marks.append(pytest.mark.skipif(not on_simulator(), reason="a barrier mistake: run on the simulator only"))
    return marks


def test_every_mistake_has_a_case():
    """Each mistake of the tables that check names has a runner here, and each runner a mistake."""
    named = {m.label for m in ALL if m.names}
    assert named == set(RUNNERS), (f"mistakes without a runner: {sorted(named - set(RUNNERS))}; "
                                   f"runners of no such mistake: {sorted(set(RUNNERS) - named)}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the NaN that some mistakes make, on purpose
@pytest.mark.filterwarnings("ignore::course.checking.BarrierWarning")   # asserted on the result below
@pytest.mark.parametrize("label", [pytest.param(label, marks=_marks(label)) for label in CASES])
def test_check_names_the_mistake(label):
    runner, _, first_cause, words = CASES[label]
    kernel = BY_LABEL[label].build() if label in BY_LABEL else elementwise.axpb_v1_guarded_kernel
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
        runner(BY_LABEL[label].build())
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
    for module_info in pkgutil.walk_packages(kernels.__path__, "kernels."):     # packages' modules too
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if hasattr(value, "py_func") and value.py_func.__module__ == module.__name__:
                assert kernel_findings(value) == [], f"{module.__name__}.{name}: {kernel_findings(value)}"
                seen += 1
    v5 = flash_attention.attention_v5_flash_registers_kernel(8)
    assert kernel_findings(v5) == []
    assert seen >= 15, f"only {seen} kernels found in kernels/"


# --------------------------------------------------------------------------- the day tables themselves


def _kernel_code(dotted: str) -> str:
    module, name = dotted.rsplit(".", 1)
    value = getattr(importlib.import_module(f"kernels.{module}"), name)
    return inspect.getsource(getattr(value, "py_func", value)).rstrip("\n")


@pytest.mark.parametrize("assignment", list(TABLES))
def test_every_mistake_of_the_table_applies_to_its_kernel(assignment):
    """Each mistake names an answer cell of its day and the code of kernels/ it changes, and its edits apply
    to that code as the cell holds it (the cell is that code: ``tests/days.py``'s ``solution_code``), each
    ``old`` found exactly once, or, with ``replace_all``, at least once; a mistake that ``check`` must name
    applies to its kernel alone (it is built from it). A mistake is asserted by at least one test."""
    from days import BY_NAME

    day = BY_NAME[assignment]
    for mistake in TABLES[assignment]:
        assert mistake.names or mistake.hidden_fails or mistake.feedback or mistake.wrong_answer or mistake.samples, (
            f"{mistake.label}: no test asserts anything of it")
        assert mistake.cell in day.solution_code, f"{mistake.label}: {mistake.cell} is no answer cell of {assignment}"
        if mistake.kernel is None:
            continue            # an edit of a grader sample's own cell: test_grader_samples.py applies it
        dotted = day.solution_code[mistake.cell]
        names = (dotted,) if isinstance(dotted, str) else dotted
        assert mistake.kernel in names, f"{mistake.label}: {mistake.kernel} is not in cell {mistake.cell} ({names})"
        mistake.apply("\n\n\n".join(_kernel_code(name) for name in names), where=f"cell {mistake.cell}")
        if mistake.names:
            mistake.apply(_kernel_code(mistake.kernel), where=mistake.kernel)
