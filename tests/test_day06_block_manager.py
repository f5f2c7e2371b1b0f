"""Day 6 block manager (kernels/block_manager.py): a state machine against a simulated cache, then examples.

The simulated cache is a NumPy array (num_blocks, block_size) of token ids. The state machine
applies every Step the manager returns to it (copies, then writes), as a serving engine would to
its K/V arrays, and reads each live sequence back through its block table after every step: the
manager's bookkeeping and the instructions it hands out must agree with the tokens it was given.
A free block is wiped (set to EMPTY) after every step, so a block handed out again holds garbage
until a copy or a write fills it, as a real cache would.
"""

import collections
import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kernels.block_manager import BlockManager, OutOfBlocks, Step

EMPTY = -1                                  # a slot nothing was written to (tokens are >= 0)
TOKENS = st.integers(min_value=0, max_value=2)   # few distinct tokens: prompts often share blocks


def cdiv(n, d):
    return -(-n // d)


def leading_equal_blocks(a, b, block_size):
    """How many leading *full* blocks the token lists ``a`` and ``b`` have in common."""
    k = 0
    while (k + 1) * block_size <= min(len(a), len(b)) and \
            list(a[k * block_size:(k + 1) * block_size]) == list(b[k * block_size:(k + 1) * block_size]):
        k += 1
    return k


def snapshot(bm):
    """Everything a caller can see of the manager, plus its whole inner state (OutOfBlocks must change neither)."""
    visible = ({s: (bm.block_table(s), bm.tokens(s)) for s in bm.sequences()},
               [bm.refcount(b) for b in range(bm.num_blocks)], bm.num_free)
    return visible, copy.deepcopy(vars(bm))


class BlockManagerMachine(RuleBasedStateMachine):
    """Random add_sequence / append / fork / free against a simulated cache of token ids."""

    @initialize(num_blocks=st.integers(3, 10), block_size=st.integers(1, 4),
                prefix_sharing=st.sampled_from([True, True, True, False]),
                first_prompt=st.lists(TOKENS, min_size=1, max_size=12))
    def start(self, num_blocks, block_size, prefix_sharing, first_prompt):
        self.bm = BlockManager(num_blocks, block_size, prefix_sharing=prefix_sharing)
        self.bs, self.sharing = block_size, prefix_sharing
        self.cache = np.full((num_blocks, block_size), EMPTY, dtype=np.int64)
        self.tokens = {}       # seq -> its tokens, as this test gave them
        self.prompt = {}       # seq -> the prompt it (or the sequence it was forked from) was added with
        self.add(first_prompt[:3 * block_size])

    # -- helpers -------------------------------------------------------------------------------

    def free_blocks(self):
        return {b for b in range(self.bm.num_blocks) if self.bm.refcount(b) == 0}

    def holders(self):
        return collections.Counter(b for s in self.tokens for b in self.bm.block_table(s))

    def apply(self, seq, step, free_before):
        """Apply ``step`` of ``seq`` to the cache: its copies, then its writes, checking each."""
        table = self.bm.block_table(seq)
        others = {b for s in self.tokens if s != seq for b in self.bm.block_table(s)}
        for src, dst in step.copies:
            assert dst in free_before, f"copy-on-write into block {dst}, which was not free"
            assert dst in table and self.bm.refcount(dst) == 1
            self.cache[dst] = self.cache[src]
        for position, slot in step.writes:
            block = slot // self.bs
            assert slot == self.bm.slot(seq, position)
            assert table[position // self.bs] == block
            # A shared block is never written: the written block belongs to seq alone.
            assert self.bm.refcount(block) == 1 and block not in others, \
                f"step writes position {position} into block {block}, which other sequences hold"
            self.cache[block, slot % self.bs] = self.tokens[seq][position]

    def wipe_free_blocks(self):
        for b in self.free_blocks():
            self.cache[b] = EMPTY

    def live(self):
        return sorted(self.tokens)

    # -- rules ---------------------------------------------------------------------------------

    def add(self, prompt):
        before = snapshot(self.bm)
        free_before = self.free_blocks()
        held_before = {s: self.bm.block_table(s) for s in self.tokens}
        try:
            seq, step = self.bm.add_sequence(prompt)
        except OutOfBlocks:
            assert len(free_before) < cdiv(len(prompt), self.bs), \
                f"OutOfBlocks for a prompt of {len(prompt)} tokens with {len(free_before)} free blocks"
            assert snapshot(self.bm) == before, "add_sequence raised OutOfBlocks but changed the manager"
            event("add_sequence: OutOfBlocks")
            return
        assert seq not in self.tokens
        table = self.bm.block_table(seq)
        assert len(table) == cdiv(len(prompt), self.bs)
        assert step.copies == []
        full = len(prompt) // self.bs
        for i, block in enumerate(table):
            if block not in free_before:   # reused: only a full block, and only with prefix sharing
                assert self.sharing and i < full, \
                    f"block {i} of a new prompt of {len(prompt)} tokens is block {block}, already held"
        if len(prompt) % self.bs:           # a partly filled block is never shared by prefix sharing
            assert table[-1] in free_before and self.bm.refcount(table[-1]) == 1
        # Prefix sharing really shares: the full blocks a live sequence's prompt has in common with
        # this one are the very same blocks (they were registered when that prompt was added).
        taken = len(free_before) - self.bm.num_free
        if self.sharing:
            most = 0
            for s, old_table in held_before.items():
                k = leading_equal_blocks(prompt, self.prompt[s], self.bs)
                assert table[:k] == old_table[:k], \
                    f"prompt {prompt} shares {k} full block(s) with the prompt of seq {s}, but got " \
                    f"blocks {table[:k]} instead of {old_table[:k]}"
                most = max(most, k)
            assert taken <= len(table) - most
            event(f"add_sequence: shares {min(most, 2)}{'+' if most > 2 else ''} full block(s) with a prompt")
        else:
            assert taken == len(table)
        self.tokens[seq], self.prompt[seq] = list(prompt), tuple(prompt)
        self.apply(seq, step, free_before)
        self.wipe_free_blocks()

    @rule(data=st.data(), kind=st.sampled_from(["random", "shares full blocks", "same prompt", "shorter than a block"]))
    def add_sequence(self, data, kind):
        """A random prompt, or one made from a live sequence (a random one when there is none to copy)."""
        if kind == "shares full blocks":
            like = [s for s in self.live() if len(self.tokens[s]) >= self.bs]
            if like:
                return self.add_prompt_sharing_full_blocks(data, like)
        elif kind == "same prompt":
            like = [s for s in self.live() if len(self.prompt[s]) >= self.bs]
            if like:
                return self.add_same_prompt_again(data, like)
        elif kind == "shorter than a block":
            like = [s for s in self.live() if self.tokens[s]]
            if like and self.bs >= 2:
                return self.add_prompt_shorter_than_a_block(data, like)
        self.add(data.draw(st.lists(TOKENS, max_size=3 * self.bs), label="prompt"))

    def add_prompt_sharing_full_blocks(self, data, like):
        """A prompt starting with 1 or more full blocks of a live sequence's tokens, then anything."""
        seq = data.draw(st.sampled_from(like), label="like")
        k = data.draw(st.integers(1, len(self.tokens[seq]) // self.bs), label="full blocks")
        tail = data.draw(st.lists(TOKENS, max_size=2 * self.bs), label="tail")
        self.add(self.tokens[seq][:k * self.bs] + tail)

    def add_same_prompt_again(self, data, like):
        """A second identical prompt of at least one full block takes no block for its full blocks."""
        seq = data.draw(st.sampled_from(like), label="like")
        prompt = list(self.prompt[seq])
        free_before, live_before = self.bm.num_free, set(self.tokens)
        self.add(prompt)
        added = set(self.tokens) - live_before
        if self.sharing and added:
            (new,) = added
            full = len(prompt) // self.bs
            assert self.bm.block_table(new)[:full] == self.bm.block_table(seq)[:full]
            assert free_before - self.bm.num_free == (1 if len(prompt) % self.bs else 0)
            event("add_sequence: an identical prompt shared its full blocks")

    def add_prompt_shorter_than_a_block(self, data, like):
        """A prompt equal to the first 1 .. block_size - 1 tokens of a live sequence: never shared."""
        seq = data.draw(st.sampled_from(like), label="like")
        n = data.draw(st.integers(1, min(self.bs - 1, len(self.tokens[seq]))), label="tokens")
        self.add(self.tokens[seq][:n])   # add() checks that its only block is a fresh one

    def pick(self, data):
        """A live sequence, or None after adding one when there is none (a rule is never skipped)."""
        if not self.tokens:
            self.add(data.draw(st.lists(TOKENS, min_size=1, max_size=3 * self.bs), label="prompt"))
            return None
        return data.draw(st.sampled_from(self.live()), label="seq")

    @rule(data=st.data(), token=TOKENS)
    def append(self, data, token):
        seq = self.pick(data)
        if seq is None:
            return
        before = snapshot(self.bm)
        free_before = self.free_blocks()
        n = len(self.tokens[seq])
        last = self.bm.block_table(seq)[-1] if n else None
        shared_partial = n % self.bs != 0 and self.bm.refcount(last) > 1
        try:
            step = self.bm.append(seq, token)
        except OutOfBlocks:
            assert n % self.bs == 0 or shared_partial, "OutOfBlocks for a token that fits its own block"
            assert snapshot(self.bm) == before, "append raised OutOfBlocks but changed the manager"
            event("append: OutOfBlocks")
            return
        table = self.bm.block_table(seq)
        if shared_partial:              # copy-on-write: exactly one copy, out of the shared block
            assert step.copies == [(last, table[-1])]
            assert self.bm.refcount(last) >= 1
            event("append: copy-on-write")
        else:
            assert step.copies == []
        assert step.writes == [(n, self.bm.slot(seq, n))]
        self.tokens[seq].append(token)
        self.apply(seq, step, free_before)
        self.wipe_free_blocks()

    @rule(data=st.data())
    def fork(self, data):
        seq = self.pick(data)
        if seq is None:
            return
        free_before, refs_before = self.bm.num_free, [self.bm.refcount(b) for b in range(self.bm.num_blocks)]
        child = self.bm.fork(seq)
        assert child not in self.tokens
        assert self.bm.num_free == free_before               # nothing is copied or taken now
        assert self.bm.block_table(child) == self.bm.block_table(seq)
        for b in self.bm.block_table(seq):
            assert self.bm.refcount(b) == refs_before[b] + 1
        self.tokens[child], self.prompt[child] = list(self.tokens[seq]), self.prompt[seq]

    @rule(data=st.data())
    def free(self, data):
        seq = self.pick(data)
        if seq is None:
            return
        table = self.bm.block_table(seq)
        alone = {b for b in table if self.bm.refcount(b) == 1}
        free_before = self.bm.num_free
        self.bm.free(seq)
        del self.tokens[seq], self.prompt[seq]
        assert self.bm.num_free == free_before + len(alone)
        assert all(self.bm.refcount(b) == 0 for b in alone)
        assert seq not in self.bm.sequences()
        self.wipe_free_blocks()

    # -- invariants, after every step ----------------------------------------------------------

    @invariant()
    def no_block_leaked_or_double_freed(self):
        holders = self.holders()
        for s in self.tokens:
            table = self.bm.block_table(s)
            assert len(set(table)) == len(table), f"seq {s} holds a block twice: {table}"
        for b in range(self.bm.num_blocks):
            assert self.bm.refcount(b) == holders[b], \
                f"block {b} has refcount {self.bm.refcount(b)} but {holders[b]} table(s) hold it"
        free_list = list(self.bm._free)    # the free list itself: a double free shows as a duplicate
        assert len(free_list) == len(set(free_list)) == self.bm.num_free, f"free list {free_list}"
        assert set(free_list) == {b for b in range(self.bm.num_blocks) if holders[b] == 0}
        assert set(free_list).isdisjoint(holders) and len(free_list) + len(holders) == self.bm.num_blocks

    @invariant()
    def every_sequence_reads_back_its_tokens(self):
        assert sorted(self.bm.sequences()) == self.live()
        for s, tokens in self.tokens.items():
            table = self.bm.block_table(s)
            assert self.bm.tokens(s) == tokens and self.bm.context_len(s) == len(tokens)
            assert len(table) == cdiv(len(tokens), self.bs)
            gathered = [int(self.cache[table[p // self.bs], p % self.bs]) for p in range(len(tokens))]
            assert gathered == tokens, f"seq {s} reads {gathered} through table {table}, holds {tokens}"

    @invariant()
    def sharers_of_a_block_agree_on_it(self):
        """Every holder of a block holds it at the same index with the same tokens in it (the same
        count: a partly filled block is shared only by a fork, before either appends)."""
        seen = {}
        for s, tokens in self.tokens.items():
            for i, b in enumerate(self.bm.block_table(s)):
                content = (i, tuple(tokens[i * self.bs:(i + 1) * self.bs]))
                assert seen.setdefault(b, content) == content, \
                    f"block {b} holds {seen[b]} for one sequence and {content} for seq {s}"


TestBlockManagerStateMachine = BlockManagerMachine.TestCase
TestBlockManagerStateMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                                 suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------------
# Examples: what the manager does, one case at a time
# ------------------------------------------------------------------------------------------------

def test_a_prompt_is_written_into_fresh_blocks_in_order():
    bm = BlockManager(4, 2)
    seq, step = bm.add_sequence([10, 11, 12])
    assert bm.block_table(seq) == [0, 1] and bm.num_free == 2
    assert step == Step(copies=[], writes=[(0, 0), (1, 1), (2, 2)])   # slot = block * 2 + offset


def test_fork_then_append_copies_the_shared_last_block_once():
    bm = BlockManager(8, 4)
    parent, _ = bm.add_sequence([1, 2, 3, 4, 5, 6])      # a full block 0 and half of block 1
    child = bm.fork(parent)
    assert bm.block_table(child) == [0, 1] and bm.refcount(0) == bm.refcount(1) == 2
    step = bm.append(child, 7)
    # Copy-on-write: the child takes block 2, copies block 1's slots there, writes in the copy.
    assert step == Step(copies=[(1, 2)], writes=[(6, 2 * 4 + 2)])
    assert bm.block_table(child) == [0, 2] and bm.block_table(parent) == [0, 1]
    assert (bm.refcount(0), bm.refcount(1), bm.refcount(2)) == (2, 1, 1)


def test_the_parent_appends_after_the_child_copied_without_a_copy():
    bm = BlockManager(8, 4)
    parent, _ = bm.add_sequence([1, 2, 3, 4, 5, 6])
    child = bm.fork(parent)
    bm.append(child, 7)
    step = bm.append(parent, 8)            # block 1 is the parent's alone now: write in place
    assert step == Step(copies=[], writes=[(6, 1 * 4 + 2)])
    assert bm.tokens(parent) == [1, 2, 3, 4, 5, 6, 8] and bm.tokens(child) == [1, 2, 3, 4, 5, 6, 7]


def test_appending_after_a_full_shared_block_takes_a_new_block_and_copies_nothing():
    bm = BlockManager(8, 2)
    parent, _ = bm.add_sequence([1, 2])
    child = bm.fork(parent)
    step = bm.append(child, 3)
    assert step == Step(copies=[], writes=[(2, 1 * 2 + 0)])
    assert bm.block_table(child) == [0, 1] and bm.refcount(0) == 2


def test_free_returns_the_blocks_no_other_sequence_holds():
    bm = BlockManager(6, 2)
    parent, _ = bm.add_sequence([1, 2, 3])
    child = bm.fork(parent)
    bm.append(child, 4)                    # the child's copy of block 1 is block 2
    assert bm.num_free == 3
    bm.free(parent)                        # block 1 was the parent's alone; block 0 is the child's too
    assert bm.num_free == 4 and bm.refcount(0) == 1 and bm.refcount(1) == 0
    bm.free(child)
    assert bm.num_free == 6 and all(bm.refcount(b) == 0 for b in range(6))
    assert bm.sequences() == []


def test_an_identical_prompt_shares_its_full_blocks():
    bm = BlockManager(8, 2)
    a, _ = bm.add_sequence([5, 6, 7, 8, 9])
    b, step = bm.add_sequence([5, 6, 7, 8, 9])
    assert bm.block_table(b)[:2] == bm.block_table(a)[:2]          # both full blocks shared
    assert bm.block_table(b)[2] != bm.block_table(a)[2]            # the partly filled one is not
    assert step.writes == [(4, bm.slot(b, 4))]                     # only the last token is stored
    assert bm.num_free == 8 - 3 - 1


def test_a_block_filled_by_appends_is_shared_with_a_later_prompt():
    bm = BlockManager(8, 2)
    a, _ = bm.add_sequence([1])
    bm.append(a, 2)                            # block 0 is full now: it becomes shareable
    b, step = bm.add_sequence([1, 2, 3])
    assert bm.block_table(b)[0] == bm.block_table(a)[0] and bm.refcount(bm.block_table(a)[0]) == 2
    assert step.writes == [(2, bm.slot(b, 2))]


def test_without_prefix_sharing_an_identical_prompt_takes_its_own_blocks():
    bm = BlockManager(8, 2, prefix_sharing=False)
    a, _ = bm.add_sequence([5, 6, 7, 8])
    b, step = bm.add_sequence([5, 6, 7, 8])
    assert set(bm.block_table(a)).isdisjoint(bm.block_table(b)) and len(step.writes) == 4


def test_a_prompt_shorter_than_a_block_is_never_shared():
    bm = BlockManager(8, 4)
    a, _ = bm.add_sequence([1, 2, 3])
    b, step = bm.add_sequence([1, 2, 3])       # equal, but the block is not full: appends would collide
    assert bm.block_table(a) != bm.block_table(b) and len(step.writes) == 3


def test_out_of_blocks_changes_nothing():
    bm = BlockManager(2, 2)
    seq, _ = bm.add_sequence([1, 2, 3, 4])
    before = snapshot(bm)
    with pytest.raises(OutOfBlocks, match="needs 1 free block"):
        bm.append(seq, 5)
    with pytest.raises(OutOfBlocks):
        bm.add_sequence([9])
    assert snapshot(bm) == before
    other, _ = bm.add_sequence([1, 2])        # a shared full block needs no free block
    assert bm.block_table(other) == [0]


@pytest.mark.parametrize("call, error, words", [
    (lambda: BlockManager(0, 4), ValueError, "num_blocks must be an int >= 1"),
    (lambda: BlockManager(4.0, 4), ValueError, "num_blocks"),
    (lambda: BlockManager(4, 0), ValueError, "block_size must be an int >= 1"),
    (lambda: BlockManager(4, True), ValueError, "block_size"),
    (lambda: BlockManager(4, 2).append(7, 1), KeyError, "seq 7 is not a live sequence"),
    (lambda: BlockManager(4, 2).fork(0), KeyError, "seq 0"),
    (lambda: BlockManager(4, 2).free(3), KeyError, "seq 3"),
    (lambda: BlockManager(4, 2).block_table(1), KeyError, "seq 1"),
], ids=["num_blocks 0", "num_blocks float", "block_size 0", "block_size bool", "append", "fork", "free",
        "block_table"])
def test_argument_errors_name_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_slot_names_the_position_it_rejects():
    bm = BlockManager(4, 2)
    seq, _ = bm.add_sequence([1, 2, 3])
    assert [bm.slot(seq, p) for p in range(3)] == [0, 1, 2]
    for bad in (-1, 3):
        with pytest.raises(ValueError, match=r"position must lie in \[0, 2\]"):
            bm.slot(seq, bad)


def test_prefix_sharing_compares_tokens_not_just_their_hashes():
    """Two different full blocks must never be shared, even when Python hashes them alike.

    In CPython hash(-1) == hash(-2) (-1 is reserved as an error code), so the blocks (-1, 7) and
    (-2, 7) have the same prefix hash; the manager, which keys blocks by that hash alone, hands the
    second prompt the first prompt's block and the second sequence reads -1 where it wrote -2.
    """
    assert hash((None, (-1, 7))) == hash((None, (-2, 7)))
    bm = BlockManager(4, 2)
    cache = np.full((4, 2), 99)
    for prompt in ([-1, 7], [-2, 7]):
        seq, step = bm.add_sequence(prompt)
        for position, slot in step.writes:
            cache[slot // 2, slot % 2] = prompt[position]
    gathered = [int(cache[bm.block_table(seq)[p // 2], p % 2]) for p in range(2)]
    assert gathered == [-2, 7], f"the second sequence reads {gathered} through table {bm.block_table(seq)}"


def test_blocks_filled_alike_by_appends_stay_shareable_after_either_is_freed():
    """A fork whose parent and child append the same tokens fills two blocks with one prefix; when
    the one that was shared for it is freed, the other serves the next identical prompt."""
    manager = BlockManager(10, 2)
    parent, _ = manager.add_sequence([1])
    child = manager.fork(parent)
    manager.append(parent, 2)          # copy-on-write: the parent's copy fills up first
    for token in (2, 3, 4):
        manager.append(child, token)
    manager.free(parent)
    free = manager.num_free
    prompt, _ = manager.add_sequence([1, 2, 3, 4])
    assert manager.block_table(prompt) == manager.block_table(child)
    assert manager.num_free == free
