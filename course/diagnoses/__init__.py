"""The diagnoses of :func:`course.checking.check`: from a wrong output to the likely bug, in words.

``check`` decides whether an output passes; this package only explains a failure (and warns about a
kernel whose barriers are wrong even when its output happens to be right). Three sources of evidence,
strongest first:

1. **Context**, when the caller passes it (keywords of ``check``):

   - ``attention={"q": q, "k": k, "v": v, "causal": ..., "kv_lens": ..., "scale": ...,
     "tile_q": ..., "tile_kv": ...}`` for an attention output O. The specific asserts run first:
     "row 0 sees only key 0" (causal), "rows of an empty sequence are 0" (``kv_lens[b] == 0``).
     Then the output is compared with NumPy models of the classic mistakes: the causal mask
     ``j < i``, no causal mask, a diagonal tile left unmasked, ``kv_lens`` ignored or off by one,
     the last partial key tile dropped, the accumulator or the running sum not rescaled when the
     maximum grows, the scale missing or applied twice.
   - ``reduction={"x": x, "op": "max" | "sum", "threads": T}`` for a row reduction (rows,) done by
     blocks of T threads that each stride over the columns: a max that starts at 0, a tree that
     stops early, partials of only some threads or warps combined, shuffles within a warp that start
     at too small an offset, the column loop missing.
   - ``gemm={"a": a, "b": b, "tile_k": T}`` for C = A B computed in steps of T along K: the last,
     partial step lost, a step offset missing from A's or B's index, B read transposed.
   - ``kernel=the_kernel``: its Python source is read for barrier mistakes: a barrier that only some
     threads reach (inside a branch or a loop whose bound depends on the thread, or after an early
     ``return``), and a loop over a shared array with no barrier between its writes and its reads
     (``course.diagnoses.barriers``).

   A model is named only when the output matches it within rounding, and the right result does
   not: these messages name a cause (``course.diagnoses.contexts``).
2. **The output alone**: patterns in where the wrong elements are and in the shape of the error
   (``course.diagnoses.patterns``); when a context model names the cause, only the facts among them
   (unwritten, NaN) are kept.
3. Nothing fits: the message says so and suggests how to look.

Keys of the detectors (``hints=`` of ``check`` takes any of them): see ``DETECTORS``.

Day 6's paged KV cache has diagnoses of its own (``course.diagnoses.paged``): its context (a cache,
block tables, context lengths) is not one ``check`` takes, so ``course.exercise_checks`` calls them on
a failure and puts their findings first. So do day 7's head maps (``course.diagnoses.gqa``) and day 8's
mixed-precision mistakes (``course.diagnoses.precision``: a sum kept in fp16, q·k rounded to fp16 before
the scale, fp8 codes truncated or rounded away from even), and day 9's quantized blocks
(``course.diagnoses.quantized``: Q8_0 codes rounded to even, truncated or divided, a scale per row; a Q4_1
block's nibbles, d and m, or minimum misread).
"""

from course.diagnoses.barriers import kernel_findings
from course.diagnoses.contexts import CONTEXT_KEYS, context_findings
from course.diagnoses.patterns import Case, PATTERN_DETECTORS

__all__ = ["Case", "diagnose", "kernel_findings", "DETECTORS", "CONTEXT_KEYS", "KERNEL_KEYS"]

KERNEL_KEYS = ("divergent_barrier", "early_return_barrier", "missing_barrier")
DETECTORS = CONTEXT_KEYS + KERNEL_KEYS + tuple(key for key, _ in PATTERN_DETECTORS)
# Context findings that state a fact ("row 0 must equal V[0]") rather than name a cause.
_ASSERTS = ("row0_key0", "empty_sequence")
# Output patterns that are facts, kept even when the context names the cause.
_FACTS = ("unwritten", "nonfinite", "empty_row_nan", "masked_nan")


def diagnose(case: Case, hints: dict) -> tuple[list[str], list[str]]:
    """Return (keys of the detectors that fired, their messages in words), most specific first.

    When the context names a mistake (a model of it matches the output), the output-pattern
    detectors, which can only guess, are left out, except the facts about unwritten and
    non-finite elements.
    """
    found, messages = [], []

    def add(key, message):
        found.append(key)
        messages.append(f"{message} {hints[key]}" if key in hints else message)

    for key, message in context_findings(case):
        add(key, message)
    named_by_context = any(key not in _ASSERTS for key in found)
    for key, message in case.kernel_notes:
        add(key, message)
    for key, detector in PATTERN_DETECTORS:
        if named_by_context and key not in _FACTS:
            continue
        message = detector(case, found)
        if message:
            add(key, message)
    if not messages:
        messages.append("no simple pattern found: print a few wrong elements next to the reference "
                        "on a small case, and follow one of them through the kernel by hand")
    if "any" in hints:
        messages.append(hints["any"])
    return found, messages
