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

from kernels.block_pool import BlockPool, OutOfBlocks, Step

__all__ = ["BlockManager", "Step", "OutOfBlocks"]


class BlockManager(BlockPool):
    """The pool of ``kernels.block_pool`` with ``append`` (copy-on-write) and ``fork``."""

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
        child = self._new_id()
        for block in table:
            self._refs[block] += 1
        self._tables[child], self._tokens[child] = list(table), list(self._tokens_of(seq))
        return child
