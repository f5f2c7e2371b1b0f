"""The allocator of a paged KV cache: which physical block holds which tokens of which sequence.

Host Python, as in a serving engine (vLLM's block manager): the kernels only read block tables.

- A **free list** of physical blocks and a **reference count** per block: the number of sequences
  whose block table holds it. A block returns to the free list when its count drops to 0.
- **append** a token: the sequence's last block has room (write there), or is full (take a new
  block), or is shared with another sequence (**copy-on-write**: take a new block, copy the used
  slots of the shared one, drop one reference to it, write in the copy). A shared block is never
  written.
- **fork** a sequence (parallel sampling, beam search): the child's table is the parent's, every
  block gains a reference, nothing is copied until one of them appends to a shared last block.
- **free** a sequence: drop a reference to each of its blocks.
- **Prefix sharing**: a *full* block is known by its prefix key, (the key of the block before it,
  its tokens), so a new sequence whose prompt starts with the same full blocks reuses them instead
  of storing them again. A dictionary finds a key by its hash and then compares the tokens
  themselves: two different prefixes whose hashes collide (in CPython ``hash(-1) == hash(-2)``)
  never share a block. A partly filled block is never shared this way: the next token appended to
  it would land in a block someone else reads, and its key would no longer describe it.

Every call that changes the cache returns what the caller must do to the cache arrays, in order:
``copies`` (``(source block, destination block)``: copy the slots in use) and ``writes``
(``(position, slot)``: store the token at ``position`` of the sequence in ``slot``, where ``slot =
block * block_size + offset``; ``kernels.kv_cache`` does it on the GPU). Running out of blocks raises
``OutOfBlocks`` and changes nothing.
"""

from __future__ import annotations

import collections
import dataclasses

__all__ = ["BlockManager", "Step", "OutOfBlocks"]


class OutOfBlocks(RuntimeError):
    """The free list cannot supply the blocks a call needs (nothing was changed)."""


@dataclasses.dataclass
class Step:
    """What the caller must do to the cache: ``copies`` first, then ``writes``."""

    copies: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    writes: list[tuple[int, int]] = dataclasses.field(default_factory=list)


class BlockManager:
    """Blocks of ``block_size`` slots out of ``num_blocks``; sequences are named by the ints it returns."""

    def __init__(self, num_blocks: int, block_size: int, *, prefix_sharing: bool = True):
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.num_blocks, self.block_size, self.prefix_sharing = num_blocks, block_size, bool(prefix_sharing)
        self._free = collections.deque(range(num_blocks))
        self._refs = [0] * num_blocks
        self._tables: dict[int, list[int]] = {}
        self._tokens: dict[int, list] = {}
        self._hash_of: dict[int, tuple] = {}        # full, shareable block -> its prefix key
        self._block_of: dict[tuple, int] = {}       # prefix key -> the block shared for it
        self._next_id = 0

    # -- what the kernels and tests read --------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self._free)

    def sequences(self) -> list[int]:
        return list(self._tables)

    def block_table(self, seq: int) -> list[int]:
        return list(self._table(seq))

    def context_len(self, seq: int) -> int:
        return len(self._tokens_of(seq))

    def tokens(self, seq: int) -> list:
        return list(self._tokens_of(seq))

    def refcount(self, block: int) -> int:
        return self._refs[block]

    def slot(self, seq: int, position: int) -> int:
        """The slot of ``position``: block_table[position // block_size] * block_size + position % block_size."""
        if not 0 <= position < self.context_len(seq):
            raise ValueError(f"position must lie in [0, {self.context_len(seq) - 1}], got {position}")
        return self._table(seq)[position // self.block_size] * self.block_size + position % self.block_size

    # -- what changes the cache ------------------------------------------------------------------

    def add_sequence(self, tokens=()) -> tuple[int, Step]:
        """A new sequence holding ``tokens`` (a prompt); returns (its id, the writes to make).

        Its leading full blocks are shared with any live block of the same prefix hash.
        """
        tokens = list(tokens)
        full = len(tokens) // self.block_size
        hashes, parent = [], None
        for b in range(full):
            parent = (parent, tuple(tokens[b * self.block_size:(b + 1) * self.block_size]))
            hashes.append(parent)
        reused = [self._block_of.get(h) if self.prefix_sharing else None for h in hashes]
        needed = sum(1 for r in reused if r is None) + (1 if len(tokens) % self.block_size else 0)
        self._reserve(needed)
        seq = self._next_id
        self._next_id += 1
        table, step = [], Step()
        for b in range(-(-len(tokens) // self.block_size)):
            block = reused[b] if b < full else None
            if block is None:
                block = self._take()
                first = b * self.block_size
                for position in range(first, min(first + self.block_size, len(tokens))):
                    step.writes.append((position, block * self.block_size + position - first))
                if b < full:
                    self._register(block, hashes[b])
            else:
                self._refs[block] += 1
            table.append(block)
        self._tables[seq], self._tokens[seq] = table, tokens
        return seq, step

    def append(self, seq: int, token) -> Step:
        """Add ``token`` at the end of ``seq``; returns the copy (if copy-on-write) and the write."""
        table, tokens = self._table(seq), self._tokens_of(seq)
        position = len(tokens)
        offset = position % self.block_size
        step = Step()
        if offset == 0:                                  # no block yet, or the last one is full
            self._reserve(1)
            table.append(self._take())
        elif self._refs[table[-1]] > 1:                  # shared: copy before writing
            self._reserve(1)
            shared, copy = table[-1], self._take()
            step.copies.append((shared, copy))
            self._release(shared)
            table[-1] = copy
        tokens.append(token)
        step.writes.append((position, table[-1] * self.block_size + offset))
        if offset == self.block_size - 1:                # the block just became full: shareable
            parent = self._hash_of.get(table[-2]) if len(table) > 1 else None
            if len(table) == 1 or parent is not None:
                self._register(table[-1], (parent, tuple(tokens[-self.block_size:])))
        return step

    def fork(self, seq: int) -> int:
        """A child of ``seq`` sharing every block (nothing copied now); returns the child's id."""
        table = self._table(seq)
        child = self._next_id
        self._next_id += 1
        for block in table:
            self._refs[block] += 1
        self._tables[child], self._tokens[child] = list(table), list(self._tokens_of(seq))
        return child

    def free(self, seq: int) -> None:
        """Forget ``seq``; each of its blocks loses a reference (and is free when none is left)."""
        for block in self._table(seq):
            self._release(block)
        del self._tables[seq], self._tokens[seq]

    # -- inside ----------------------------------------------------------------------------------

    def _table(self, seq) -> list[int]:
        if seq not in self._tables:
            raise KeyError(f"seq {seq!r} is not a live sequence (live: {sorted(self._tables)})")
        return self._tables[seq]

    def _tokens_of(self, seq) -> list:
        self._table(seq)
        return self._tokens[seq]

    def _reserve(self, blocks: int) -> None:
        if blocks > len(self._free):
            raise OutOfBlocks(f"needs {blocks} free block(s), {len(self._free)} of {self.num_blocks} are free")

    def _take(self) -> int:
        block = self._free.popleft()
        self._refs[block] = 1
        return block

    def _register(self, block: int, block_hash: tuple) -> None:
        if self.prefix_sharing:
            self._hash_of[block] = block_hash
            self._block_of.setdefault(block_hash, block)

    def _release(self, block: int) -> None:
        self._refs[block] -= 1
        if self._refs[block] == 0:
            block_hash = self._hash_of.pop(block, None)
            if block_hash is not None and self._block_of.get(block_hash) == block:
                del self._block_of[block_hash]
                # Another live block with the same prefix (filled by identical appends) takes over.
                twin = next((b for b, key in self._hash_of.items() if key == block_hash), None)
                if twin is not None:
                    self._block_of[block_hash] = twin
            self._free.append(block)
