"""The pool of a paged KV cache: its free list, reference counts and block tables, without ``append`` and ``fork``.

``kernels.block_manager.BlockManager`` adds the two (copy-on-write lives in ``append``); day 6's
exercise asks for the same two on top of this class. Host Python, as in a serving engine.

- ``add_sequence(tokens)``: a new sequence; its leading full blocks are shared with live blocks of
  the same prefix key (prefix sharing), the rest are taken from the free list and written.
- ``free(seq)``: each of the sequence's blocks loses a reference and returns to the free list at 0.
- What tests and kernels read: ``block_table(seq)``, ``context_len``, ``tokens``, ``refcount(block)``,
  ``num_free``, ``slot(seq, position)``, ``sequences()``.
- Inside, for subclasses: ``_tables`` (``{seq: its block table}``), ``_tokens`` (``{seq: its
  tokens}``), ``_refs`` (a reference count per block), ``_hash_of`` (``{full shareable block: its
  prefix key}``); ``_table(seq)`` and ``_tokens_of(seq)`` (the live
  lists of one sequence, ``KeyError`` for an unknown one), ``_new_id()`` (a fresh sequence id),
  ``_reserve(n)`` (raises ``OutOfBlocks`` unless ``n`` blocks are free: call it before changing
  anything), ``_take()`` (a free block, its count set to 1), ``_release(block)`` (one reference less; at
  0 the block is free again), ``_register(block, key)`` (a full block becomes shareable by its prefix).

Every call that changes the cache returns a ``Step``: what the caller must do to the cache arrays,
``copies`` first (``(source block, destination block)``: copy the slots in use), then ``writes``
(``(position, slot)``: store the sequence's token at ``position`` in ``slot = block * block_size +
offset``). Running out of blocks raises ``OutOfBlocks`` and changes nothing.
"""

from __future__ import annotations

import collections
import dataclasses

__all__ = ["BlockPool", "Step", "OutOfBlocks"]


class OutOfBlocks(RuntimeError):
    """The free list cannot supply the blocks a call needs (nothing was changed)."""


@dataclasses.dataclass
class Step:
    """What the caller must do to the cache: ``copies`` first, then ``writes``."""

    copies: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    writes: list[tuple[int, int]] = dataclasses.field(default_factory=list)


class BlockPool:
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
        seq = self._new_id()
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

    def _new_id(self) -> int:
        seq = self._next_id
        self._next_id += 1
        return seq

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
