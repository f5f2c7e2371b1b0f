"""Day 6, exercise 4: checks of an allocator's ``fork`` and copy-on-write ``append``, by what it does.

The student's class extends ``kernels.block_pool.BlockPool`` with ``fork`` and ``append``: a host-Python
answer, declared as ``ALLOCATOR`` (a ``course.hostcode.HostExercise``: the base module's names the answer
gets, and the driver ``day06_allocator_driver.drive``). A check runs it through operations
(``course.hostcode.run``: in the notebook, or in a process of its own when graded) and judges the record
of each operation against what any correct allocator must do, whichever free block it picks:

- the cache stays right: replaying every ``Step`` (copies, then writes) on a pool of slots, each live
  sequence's slots, read through the block table it reports, hold exactly its tokens;
- a write lands only in a block that no other sequence holds (a shared block is never written);
- reference counts equal the number of tables holding each block, and the free count the number
  of blocks nobody holds; freeing every sequence frees every block;
- ``fork`` copies nothing and gives the child the parent's table; ``append`` takes a new block only
  when the last one is full (no copy) or shared (one copy of it, the parent's table untouched), and
  writes in place otherwise; ``OutOfBlocks`` only when a block was needed and none was free, and then
  nothing changed.

Each problem is reported with the operations that led to it, so the message names the bug.
"""

from __future__ import annotations

import numpy as np

from course.hostcode import HostExercise, run

from .day06_allocator_driver import enumerate_handles

# The exercise's answer: a class on top of the names of kernels.block_pool, run by the driver.
ALLOCATOR = HostExercise(base="kernels.block_pool", names=("BlockPool", "Step", "OutOfBlocks"),
                         driver="course.exercise_checks.day06_allocator_driver:drive")

__all__ = ["fork_cases", "copy_on_write_cases", "random_workload", "allocator_problems", "check_allocator",
           "fork_shares_blocks", "append_copies_on_write", "allocator_survives_a_workload"]


def _scenario(num_blocks: int, block_size: int, ops: list, title: str) -> dict:
    return {"num_blocks": num_blocks, "block_size": block_size, "ops": ops, "title": title}


def fork_cases() -> list[dict]:
    """Forks of full and partial tables, of an empty sequence, of a fork; frees in every order."""
    return [
        _scenario(8, 4, [["add", [1, 2, 3, 4, 5, 6]], ["fork", 0], ["free", 0], ["free", 1]],
                  "fork a sequence of 6 tokens (pages of 4), then free the parent first"),
        _scenario(8, 4, [["add", [1, 2, 3, 4, 5, 6, 7, 8]], ["fork", 0], ["fork", 1], ["free", 2], ["free", 1],
                         ["free", 0]], "fork of a fork of 2 full pages, freed child first"),
        _scenario(4, 2, [["add", []], ["fork", 0], ["append", 1, 9], ["free", 0], ["free", 1]],
                  "fork of an empty sequence"),
        _scenario(3, 4, [["add", [1, 2, 3, 4, 5, 6, 7, 8, 9]], ["fork", 0], ["fork", 0], ["fork", 1],
                         ["free", 0], ["free", 3], ["free", 2], ["free", 1]],
                  "three forks of a sequence that fills the whole pool (a fork takes no block)"),
    ]


def copy_on_write_cases() -> list[dict]:
    """Appends to shared partial, shared full and private last blocks; running out at a copy."""
    return [
        _scenario(8, 4, [["add", [1, 2, 3, 4, 5, 6]], ["fork", 0], ["append", 1, 70], ["append", 0, 60],
                         ["append", 1, 71], ["free", 0], ["free", 1]],
                  "fork with a shared partial last page, then append to the child and to the parent"),
        _scenario(8, 4, [["add", [1, 2, 3, 4]], ["fork", 0], ["append", 1, 50], ["append", 0, 40], ["free", 1],
                         ["free", 0]], "fork with a shared full last page, then append to both"),
        _scenario(8, 4, [["add", [1, 2, 3, 4, 5]], ["fork", 0], ["free", 0], ["append", 1, 60], ["append", 1, 61],
                         ["free", 1]],
                  "fork, free the parent, then append to the child (its last page is no longer shared)"),
        _scenario(8, 2, [["add", [1, 2, 3]], ["fork", 0], ["fork", 0], ["append", 1, 10], ["append", 2, 20],
                         ["append", 0, 30], ["append", 0, 31], ["free", 1], ["free", 2], ["free", 0]],
                  "three sequences sharing a partial last page, each appends"),
        _scenario(3, 4, [["add", [1, 2, 3, 4, 5]], ["fork", 0], ["append", 1, 60], ["free", 0], ["append", 1, 61],
                         ["free", 1]], "a pool of 3 blocks: the copy takes the last free block"),
        _scenario(2, 4, [["add", [1, 2, 3, 4, 5, 6, 7]], ["fork", 0], ["append", 1, 80], ["free", 0],
                         ["append", 1, 81], ["append", 1, 82], ["free", 1]],
                  "a full pool: the copy finds no free block (OutOfBlocks, nothing changed)"),
        _scenario(6, 1, [["add", [1, 2]], ["fork", 0], ["append", 1, 30], ["append", 0, 20], ["free", 0],
                         ["free", 1]], "pages of one token: a last page is always full, never copied"),
    ]


def random_workload(seed: int, *, scenarios: int = 6, steps: int = 60,
                    kinds=("add", "append", "append", "append", "fork", "free")) -> list[dict]:
    """Random adds, appends, forks and frees (drawn from ``kinds``) on small pools, so that some calls
    run out of blocks; every sequence is freed at the end."""
    rng = np.random.default_rng(seed)
    out = []
    for index in range(scenarios):
        block_size = int(rng.integers(1, 6))
        num_blocks = int(rng.integers(2, 13))
        ops, live, made, token = [], [], 0, 100
        for _ in range(steps):
            kind = rng.choice(list(kinds)) if live else "add"
            if kind == "add":
                length = int(rng.integers(0, 2 * block_size + 2))
                prompt = [int(t) for t in rng.integers(0, 4, length)]    # few values: shared prefixes
                ops.append(["add", prompt])
                live.append(made)
                made += 1
            elif kind == "append":
                ops.append(["append", int(rng.choice(live)), token])
                token += 1
            elif kind == "fork":
                ops.append(["fork", int(rng.choice(live))])
                live.append(made)
                made += 1
            else:
                h = int(rng.choice(live))
                ops.append(["free", h])
                live.remove(h)
        ops += [["free", h] for h in live]
        out.append(_scenario(num_blocks, block_size, ops, f"random workload {index} (seed {seed})"))
    return out


def _call(op) -> str:
    return {"add": lambda: f"add_sequence({op[1]})", "append": lambda: f"append(seq {op[1]}, {op[2]})",
            "fork": lambda: f"fork(seq {op[1]})", "free": lambda: f"free(seq {op[1]})"}[op[0]]()


class _Replay:
    """What a correct allocator's record must show, replayed operation by operation."""

    def __init__(self, scenario: dict):
        self.n, self.bs = scenario["num_blocks"], scenario["block_size"]
        self.cache: dict[int, object] = {}            # slot -> token stored there
        self.tokens: dict[str, list] = {}             # handle -> its logical tokens
        self.tables: dict[str, list[int]] = {}
        self.refs = [0] * self.n
        self.free = self.n

    def _holders(self, block: int, tables: dict) -> list[str]:
        return [h for h, table in tables.items() if block in table]

    def op(self, op, record, handle) -> list[str]:
        problems: list[str] = []
        if "error" in record:
            return [f"it raised {record['error']}"]
        if "skipped" in record:
            if op[0] != "add" and str(op[1]) in self.tokens:
                return [f"sequence {op[1]} exists but was skipped"]
            return []
        state = record.get("state")
        if not isinstance(state, dict):
            return ["no state was recorded"]
        tables = {h: list(t) for h, t in state["tables"].items()}
        refs, free = list(state["refs"]), state["free"]
        h = str(op[1]) if op[0] != "add" else None
        before = self.tables.get(h, []) if h is not None else []
        length = len(self.tokens.get(h, [])) if h is not None else 0
        unchanged = tables == self.tables and refs == self.refs and free == self.free

        if "out_of_blocks" in record:
            needs_block = op[0] == "add" or (op[0] == "append" and (
                length % self.bs == 0 or self.refs[before[-1]] > 1))
            if op[0] == "add":
                pass                            # the pool's own add_sequence: how many it needs depends on sharing
            elif op[0] in ("fork", "free"):
                problems.append(f"{op[0]} raised OutOfBlocks: {op[0]} never needs a free block")
            elif not needs_block:
                problems.append("raised OutOfBlocks, but the last page had room and was not shared: "
                                "the token goes into it, no block is needed")
            elif self.free > 0:
                problems.append(f"raised OutOfBlocks with {self.free} block(s) free")
            if not unchanged:
                problems.append("raised OutOfBlocks after changing the tables or counts: call _reserve before "
                                "taking or releasing anything")
            return problems

        result = record.get("result", {})
        copies, writes = result.get("copies", []), result.get("writes", [])
        if op[0] == "add":
            h = str(handle)
            self.tokens[h] = list(op[1])
        elif op[0] == "fork":
            child = str(handle)
            self.tokens[child] = list(self.tokens[h])
            if tables.get(child) != before:
                problems.append(f"the child's table is {tables.get(child)}, not the parent's {before}: a fork shares "
                                "every block of the parent")
            if free != self.free:
                problems.append(f"the number of free blocks went from {self.free} to {free}: a fork takes no block "
                                "(nothing is copied until someone appends to a shared page)")
        elif op[0] == "free":
            self.tokens.pop(h)
        elif op[0] == "append":
            self.tokens[h].append(op[2])
            problems += self._append(h, before, length, tables, copies, writes, free)

        # The cache: copies first, then writes.
        for pair in copies:
            if len(pair) != 2 or not all(0 <= b < self.n for b in pair):
                problems.append(f"copy {pair} names a block outside 0 ... {self.n - 1}")
                continue
            src, dst = pair
            for offset in range(self.bs):
                slot_src, slot_dst = src * self.bs + offset, dst * self.bs + offset
                if slot_src in self.cache:
                    self.cache[slot_dst] = self.cache[slot_src]
                else:
                    self.cache.pop(slot_dst, None)
        writer = h
        for pair in writes:
            position, slot = pair
            if not 0 <= slot < self.n * self.bs:
                problems.append(f"write to slot {slot}, outside the pool")
                continue
            block = slot // self.bs
            others = [o for o in self._holders(block, tables) if o != writer]
            if others:                  # the most telling problem: first
                problems.insert(0, f"wrote position {position} into block {block}, which sequence(s) "
                                f"{', '.join(others)} also hold: a shared block must never be written "
                                "(copy-on-write: copy it first, then write the copy)")
            tokens = self.tokens.get(writer, [])
            if 0 <= position < len(tokens):
                self.cache[slot] = tokens[position]

        # The whole state.
        if set(tables) != set(self.tokens):
            problems.append(f"the live sequences are {sorted(tables)}, expected {sorted(self.tokens)}")
        counted = [sum(1 for table in tables.values() if b in table) for b in range(self.n)]
        if refs != counted:
            wrong = [b for b in range(self.n) if refs[b] != counted[b]]
            b = wrong[0]
            problems.append(f"block {b} has reference count {refs[b]} but {counted[b]} table(s) hold it: a count "
                            "is the number of sequences whose table holds the block")
        idle = sum(1 for c in counted if c == 0)
        if free != idle:
            problems.append(f"{free} block(s) are reported free, but {idle} are held by no sequence"
                            + (" (a block leaked: released by nobody)" if free < idle else
                               " (a block in use is also on the free list)"))
        for handle, tokens in self.tokens.items():
            table = tables.get(handle, [])
            pages = -(-len(tokens) // self.bs)
            if len(table) != pages:
                problems.append(f"sequence {handle} holds {len(tokens)} tokens in {len(table)} page(s); "
                                f"{pages} expected")
                continue
            stored = [self.cache.get(table[p // self.bs] * self.bs + p % self.bs) for p in range(len(tokens))]
            if stored != tokens:
                p = next(i for i, (a, b) in enumerate(zip(stored, tokens)) if a != b)
                problems.append(f"sequence {handle}, read through its table {table}, holds {stored} instead of "
                                f"{tokens} (first wrong at position {p})")
        self.tables, self.refs, self.free = tables, refs, free
        return problems

    def _append(self, h, before, length, tables, copies, writes, free) -> list[str]:
        problems = []
        offset = length % self.bs
        after = tables.get(h, [])
        if offset == 0:
            if len(after) != len(before) + 1 or after[:-1] != before:
                problems.append(f"the last page was full (or there was none): the table must gain one block, "
                                f"{before} became {after}")
            if copies:
                problems.append(f"copied {copies} although the last page was full: a new page needs no copy")
            if free != self.free - 1:
                problems.append(f"free blocks went from {self.free} to {free}; taking one new page takes one")
        elif self.refs[before[-1]] > 1:
            shared = before[-1]
            if len(after) != len(before) or after[:-1] != before[:-1] or after[-1] == shared:
                problems.append(f"the last page (block {shared}) is shared with another sequence: the table must "
                                f"get a private copy in its place, {before} became {after}")
            elif copies != [[shared, after[-1]]]:
                problems.append(f"the last page (block {shared}) is shared: expected the copy [{shared}, {after[-1]}] "
                                f"(its {offset} token(s) into the new block), got copies {copies}")
            if free != self.free - 1:
                problems.append(f"free blocks went from {self.free} to {free}; a copy-on-write takes exactly one "
                                "block (and the shared one stays held by the others)")
        else:
            if after != before:
                problems.append(f"the last page had room and nobody else holds it, so the table must not change; "
                                f"{before} became {after}")
            if copies:
                problems.append(f"copied {copies} although the last page is held by this sequence only: "
                                "copy only a shared page")
            if free != self.free:
                problems.append(f"free blocks went from {self.free} to {free}; writing into the last page takes none")
        if after:
            expected = [[length, after[-1] * self.bs + offset]]
            if writes != expected:
                problems.append(f"expected the write {expected} (position {length} at offset {offset} of the last "
                                f"page, block {after[-1]}), got {writes}")
        return problems


def allocator_problems(scenarios: list[dict], records: list[list[dict]], *, limit: int = 3) -> list[str]:
    """What the records show wrong, each with the operations that led to it (at most ``limit``)."""
    found = []
    if len(records) != len(scenarios):
        return [f"{len(records)} records for {len(scenarios)} scenarios"]
    for scenario, log in zip(scenarios, records):
        if log and log[0].get("at") == "init":
            found.append(f"creating the allocator ({scenario['num_blocks']} blocks of {scenario['block_size']}) "
                         f"raised {log[0]['error']}")
            break
        replay = _Replay(scenario)
        done = []
        for index, (handle, op) in enumerate(enumerate_handles(scenario["ops"])):
            if index >= len(log):
                break
            issues = replay.op(op, log[index], handle)
            done.append(_call(op))
            if issues:
                steps = "; ".join(done[-6:])
                lead = "... " if len(done) > 6 else ""
                found.append(f"{scenario['title']} (pool of {scenario['num_blocks']} blocks of "
                             f"{scenario['block_size']}):\n  after {lead}{steps}\n  " + "\n  ".join(issues))
                break
        if len(found) >= limit:
            break
    return found


def check_allocator(answer, scenarios: list[dict]) -> None:
    """Drive ``answer`` (the class, or its ``HostCode`` when graded) and raise on the first problems."""
    records = run(ALLOCATOR, answer, [{k: s[k] for k in ("num_blocks", "block_size", "ops")} for s in scenarios])
    found = allocator_problems(scenarios, records)
    if found:
        raise AssertionError("your allocator:\n" + "\n".join(found))


def fork_shares_blocks(answer) -> None:
    """fork shares every block and copies nothing; freeing parent and children in any order frees all."""
    check_allocator(answer, fork_cases())
    print("visible check passed: fork shares every block, copies nothing, and freeing returns every block")


def append_copies_on_write(answer) -> None:
    """append copies a shared last page before writing, and only then."""
    check_allocator(answer, copy_on_write_cases())
    print("visible check passed: append copies a shared last page before writing into it, and only then")


def allocator_survives_a_workload(answer, seed: int = 0) -> None:
    """A random mix of adds, appends, forks and frees on small pools."""
    check_allocator(answer, random_workload(seed, scenarios=2, steps=30))
    print(f"visible check passed: a random workload of adds, appends, forks and frees (seed {seed})")
