"""Day 6, exercise 4: the driver of an allocator, which runs it through operations and records each.

``course.exercise_checks.day06_allocator`` declares the exercise (``ALLOCATOR``, a
``course.hostcode.HostExercise``) and judges the record; this module only produces it. When graded,
the answer runs in a process of its own that cannot read the course's folders
(``grader/host_answers.py``): this file is loaded there by its path, before the guard, so it imports
nothing but the standard library and is handed the base module (``kernels.block_pool``) it needs.
"""

from __future__ import annotations


def _ints(values, what: str) -> list:
    out = []
    for value in values:
        if isinstance(value, bool):
            raise TypeError(f"{what} holds {value!r}, not an int")
        out.append(int(value))
    return out


def _step(step) -> dict:
    copies, writes = getattr(step, "copies", None), getattr(step, "writes", None)
    if copies is None or writes is None:
        raise TypeError(f"returned {type(step).__name__}, not a Step (with copies and writes)")
    return {"copies": [_ints(pair, "a copy") for pair in copies], "writes": [_ints(pair, "a write") for pair in writes]}


def _state(manager, handles: dict, num_blocks: int) -> dict:
    return {"tables": {str(h): _ints(manager.block_table(seq), "a block table") for h, seq in handles.items()},
            "refs": [int(manager.refcount(b)) for b in range(num_blocks)],
            "free": int(manager.num_free)}


def enumerate_handles(ops: list) -> list[tuple]:
    """``(handle, op)``: the handle an ``add`` or ``fork`` gives its sequence (None for other operations),
    counted whether or not the call succeeds, so that later operations name sequences the same way."""
    out, made = [], 0
    for op in ops:
        if op[0] in ("add", "fork"):
            out.append((made, op))
            made += 1
        else:
            out.append((None, op))
    return out


def drive(factory, scenarios: list[dict], base) -> list[list[dict]]:
    """Run each scenario's operations on a new ``factory(num_blocks, block_size)``; record each.

    ``base`` is the module ``kernels.block_pool`` (its ``OutOfBlocks``). An operation is
    ``["add", tokens]``, ``["append", h, token]``, ``["fork", h]`` or ``["free", h]``, where ``h``
    counts the sequences of the scenario in the order ``add`` and ``fork`` made them. The record of an
    operation holds ``result`` (the handle a new sequence got, or the Step as lists), or
    ``out_of_blocks`` / ``error`` (the exception's type and message), and ``state`` afterwards: every
    live sequence's block table, the reference count of every block, the number free.
    """
    out_of_blocks = base.OutOfBlocks
    records = []
    for scenario in scenarios:
        num_blocks, block_size = scenario["num_blocks"], scenario["block_size"]
        log: list[dict] = []
        records.append(log)
        try:
            manager = factory(num_blocks, block_size)
        except Exception as exc:  # noqa: BLE001 - the student's class: record what it raised
            log.append({"at": "init", "error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        handles: dict[int, object] = {}
        for handle, op in enumerate_handles(scenario["ops"]):
            record: dict = {}
            if op[0] != "add" and op[1] not in handles:
                # the add that would have made it ran out of blocks: nothing to do
                log.append({"skipped": f"sequence {op[1]} does not exist"})
                continue
            try:
                if op[0] == "add":
                    seq, step = manager.add_sequence(op[1])
                    handles[handle] = seq
                    record["result"] = {"handle": handle, **_step(step)}
                elif op[0] == "append":
                    record["result"] = _step(manager.append(handles[op[1]], op[2]))
                elif op[0] == "fork":
                    handles[handle] = manager.fork(handles[op[1]])
                    record["result"] = {"handle": handle}
                elif op[0] == "free":
                    manager.free(handles.pop(op[1]))
                    record["result"] = {}
                else:
                    raise ValueError(f"unknown operation {op[0]!r}")
                record["state"] = _state(manager, handles, num_blocks)
            except out_of_blocks as exc:
                record["out_of_blocks"] = str(exc)[:500]
                record["state"] = _state(manager, handles, num_blocks)
            except Exception as exc:  # noqa: BLE001
                record["error"] = f"{type(exc).__name__}: {exc}"[:500]
            log.append(record)
            if "error" in record:
                break
    return records
