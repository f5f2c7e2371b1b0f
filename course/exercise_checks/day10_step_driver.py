"""Day 10, the decode step: the driver, which runs a ``decode_step`` over a sequence and records each call.

``course.exercise_checks.day10_step`` declares the exercise (``DECODE_STEP``, a ``course.hostcode.HostExercise``)
and judges the record; this module only produces it. When graded, the answer runs in a process of its own that
cannot read the course's folders (``grader/host_answers.py``): this file is loaded there by its path, before the
guard, so it imports nothing but the standard library and is handed the base module (``kernels.step_ops``) it
needs.
"""

from __future__ import annotations

import traceback

# Operations one call may make per layer, and besides the layers: a correct step makes 16 and 3.
OPERATIONS_PER_LAYER = 60
OPERATIONS_BESIDES = 20
SHAPE = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "context")


def _line_of(exc: BaseException, source_file) -> int | None:
    """The line of the answer's file where ``exc`` was raised or passed through last, or None."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == source_file:
            line = frame.lineno
    return line


def drive(answer, data: dict, base) -> list[dict]:
    """Run ``answer(ops, token, position)`` for each position of each case, on a new ``base.RecordingOps`` of the
    case's shape per case (so its cache carries over from one call to the next, as a sequence's does).

    ``data``: ``{"cases": [{"shape": {layers, hidden, ffn, heads, kv_heads, vocab, context}, "tokens": [...]}]}``;
    token p sits at position p. The record of a case is ``{"calls": [...]}``, one per call: ``{"operations": [the
    trace's new dicts], "logits": the id of the returned logits}``, or, instead of ``logits``, ``{"error": "Type:
    message", "line": the answer's line or None}``; a case stops at its first error.
    """
    records = []
    for case in data["cases"]:
        shape = {name: int(case["shape"][name]) for name in SHAPE}
        tokens = [int(t) for t in case["tokens"]]
        source_file = getattr(getattr(answer, "__code__", None), "co_filename", None)
        calls: list[dict] = []
        records.append({"calls": calls})
        limit = len(tokens) * (OPERATIONS_PER_LAYER * shape["layers"] + OPERATIONS_BESIDES)
        try:
            ops = base.RecordingOps(**shape, source_file=source_file, max_operations=limit)
        except Exception as exc:  # noqa: BLE001 - the record says what went wrong
            calls.append({"operations": [], "error": f"{type(exc).__name__}: {exc}"[:500], "line": None})
            continue
        for position, token in enumerate(tokens):
            start = len(ops.trace)
            record: dict = {}
            try:
                record["logits"] = ops.logits_of(answer(ops, token, position))
            except Exception as exc:  # noqa: BLE001 - the student's step: record what it raised
                record["error"] = f"{type(exc).__name__}: {exc}"[:800]
                record["line"] = _line_of(exc, source_file)
            record["operations"] = [dict(node) for node in ops.trace[start:]]
            calls.append(record)
            if "error" in record:
                break
    return records
