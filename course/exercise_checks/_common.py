"""What the checks of several days share: the line a passing check prints, traffic counted on the simulator,
a launch whose exception names the likely bug (:class:`KernelFailed`), findings put in front of
:func:`course.checking.check`'s own, and the sizes and label of a paged decode case (days 6 to 8).

Private to ``course.exercise_checks``: its day modules import these names, nothing else does."""

from __future__ import annotations

import re

from course.checking import CheckFailure, check
from course.device import on_simulator

ATTENTION_DIMS = ("batch", "head", "row", "col")
PAGED_DIMS = ("seq", "head", "channel")


def _passed(what: str) -> None:
    print(f"visible check passed: {what}")


def _counted(launch):
    """``(result, traffic)`` of ``launch()`` counted on the simulator; traffic is None on a GPU."""
    if not on_simulator():
        print("traffic is counted on the CUDA simulator only (COURSE_DEVICE=simulator); "
              "the grader counts it there")
        return launch(), None
    from course.traffic import count_traffic

    with count_traffic() as traffic:
        result = launch()
    return result, traffic


def _require_one_launch(traffic, kernel_name: str) -> None:
    assert traffic.kernel_names == [kernel_name], (
        f"expected one launch of {kernel_name}, saw {traffic.kernel_names}: the launcher must launch "
        f"your kernel, once")


def _loads(traffic, name: str) -> int:
    return traffic.global_loads.get(name, 0)


def _stores(traffic, name: str) -> int:
    return traffic.global_stores.get(name, 0)


class KernelFailed(AssertionError):
    """A kernel raised inside the simulator (an index past an array, 0/0, an overflowing exp);
    ``cause`` is the key of the day's own reading of it (``likely`` of :func:`_launch_explained`) or of
    :func:`course.diagnoses.paged.launch_error`."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


def _launch_explained(launch, sizes: dict | None = None, *, likely=None):
    """``launch()``; an IndexError, ZeroDivisionError or OverflowError from the kernel becomes a
    :class:`KernelFailed` that names the likely bug.

    likely: ``likely(exc, line) -> (key, message)`` or None, a day's own reading of the exception (``line``:
    the kernel's line that raised, "" if unknown); tried first, then the paged one, which reads ``sizes``.
    """
    from course.diagnoses.paged import kernel_line, launch_error

    try:
        return launch()
    except (IndexError, ZeroDivisionError, OverflowError) as exc:
        found = likely(exc, kernel_line(exc)) if likely is not None else None
        found = found or launch_error(exc, sizes or {})
        if found is None:
            raise
        raise KernelFailed(found[1], found[0]) from exc


_BOUNDS = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")
_STORE = re.compile(r"^\s*(\w+)\s*\[[^\]]*\]\s*[-+*/]?=(?!=)")


def _past_the_end(exc, line: str):
    """``(index, axis, size, lead)`` of the simulator's IndexError for an index past an array (None for any
    other exception); ``lead`` says so in words, with the kernel's line."""
    match = _BOUNDS.search(str(exc)) if isinstance(exc, IndexError) else None
    if match is None:
        return None
    index, axis, size = (int(g) for g in match.groups())
    at = f" (at `{line}`)" if line else ""
    lead = (f"the kernel indexed past the end of an array{at}: {str(exc).split(': ', 1)[-1]}. The simulator "
            "stops there; a GPU would read or write other memory without a word. ")
    return index, axis, size, lead


def _stored_array(line: str) -> str | None:
    """The array a kernel line writes (``s`` for ``s[b, h, i, j] = ...``), or None if it writes none."""
    match = _STORE.match(line)
    return match.group(1) if match else None


# What check's own diagnoses state as facts (kept next to a finding that names the cause; the rest
# of its output patterns only guess, and are dropped then, as check itself does for its contexts).
_FACT_KEYS = ("unwritten", "nonfinite", "empty_row_nan", "divergent_barrier", "early_return_barrier",
              "missing_barrier")


# Findings that describe what an output looks like rather than match a model of one mistake: they give
# way to a model of check's own that names the mistake.
_WEAK_KEYS = ("lowp_rounding", "gqa_tile_partly_loaded")


def _with_findings(findings, out, want, **options):
    """``check(out, want, **options)``; on failure the findings (``[(key, message)]``, computed only
    then) go first among its causes, followed by the facts among check's own. Findings that only
    describe (``_WEAK_KEYS``) are dropped when a model of check's own names the mistake."""
    from course.diagnoses import CONTEXT_KEYS

    try:
        return check(out, want, **options)
    except CheckFailure as failure:
        found = findings()
        named = [key for key in failure.result.causes
                 if key in CONTEXT_KEYS and key not in ("row0_key0", "empty_sequence")]
        if not found or (named and all(key in _WEAK_KEYS for key, _ in found)):
            raise
        result = failure.result
        kept = [(key, message) for key, message in zip(result.causes, result.diagnoses) if key in _FACT_KEYS]
        result.causes = [key for key, _ in found + kept]
        result.diagnoses = [message for _, message in found + kept]
        raise CheckFailure(result) from None


def _paged_sizes(case: dict) -> dict:
    num_blocks, kv_heads, block_size, _ = case["k_cache"].shape
    return dict(heads=case["q"].shape[1], kv_heads=kv_heads, block_size=block_size, num_blocks=num_blocks,
                max_pages=case["block_tables"].shape[1])


def _paged_label(case: dict) -> str:
    num_seqs, heads, d = case["q"].shape
    return (f"context_lens={case['context_lens'].tolist()}, block_size={case['k_cache'].shape[2]}, heads={heads}, "
            f"kv_heads={case['k_cache'].shape[1]}, head_dim={d}")


def _raise_problems(problems: list[str]) -> None:
    if problems:
        raise AssertionError("\n".join(problems))
