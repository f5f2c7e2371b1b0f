"""What every engine over a paged KV cache shares: day 6's block manager, the sequences it registers, and the
checks of a step's items. ``inference.engine.KernelModel`` (the course's kernels) and
``inference.numpy_model.NumpyPagedModel`` (NumPy, the same cache layout on the host) are the two engines; the
serving loop (``inference.serving``) drives either.

A step takes T new tokens, each of some sequence at some position, as a list of ``(sequence, position, token)``;
each position must be registered first (``add_sequence`` or ``append``), which tells the engine where its keys and
values go. A subclass keeps its cache arrays and implements ``step`` and ``_copy_block``.
"""

from __future__ import annotations

import numpy as np

from inference.config import ModelConfig
from kernels.block_manager import BlockManager

__all__ = ["PagedModel"]


class PagedModel:
    """A model of ``config`` over a paged cache of ``num_blocks`` blocks of ``block_size`` positions (``blocks``,
    day 6's block manager), ``context`` positions at most per sequence."""

    def __init__(self, config: ModelConfig, *, num_blocks: int, block_size: int, context: int | None = None):
        self.config = config
        self.context = min(context or config.context, config.context)
        self.blocks = BlockManager(num_blocks, block_size)

    # ------------------------------------------------------------------ sequences in the paged cache

    def add_sequence(self, tokens) -> tuple[int, list[int]]:
        """Register a prompt with the block manager: returns (the sequence's id, the positions to compute),
        the positions of its leading full blocks shared with a live sequence left out."""
        seq, step = self.blocks.add_sequence(list(tokens))
        self._copy(step)
        return seq, sorted(position for position, _ in step.writes)

    def append(self, seq: int, token: int) -> int:
        """Register ``token`` at the end of ``seq``; returns its position."""
        step = self.blocks.append(seq, token)
        self._copy(step)
        return step.writes[0][0]

    def free(self, seq: int) -> None:
        self.blocks.free(seq)

    def _copy(self, step) -> None:
        for source, destination in step.copies:          # copy-on-write of a shared, partly filled block
            self._copy_block(source, destination)

    def _copy_block(self, source: int, destination: int) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ steps

    def step(self, items, logits_for=None) -> np.ndarray:
        raise NotImplementedError

    def _step_tables(self, items) -> tuple[np.ndarray, np.ndarray]:
        """(positions (T,) int32, block tables (T, longest table) int32) of a step's items, after checking that
        each position is registered and within the context."""
        if not len(items):
            raise ValueError("items must hold at least one (sequence, position, token)")
        positions = np.array([p for _, p, _ in items], np.int32)
        if positions.max() >= self.context:
            raise ValueError(f"position {positions.max()} is past the engine's context of {self.context}")
        for s, p, _ in items:
            if p >= self.blocks.context_len(s):
                raise ValueError(f"position {p} of sequence {s} is not registered: add_sequence or append it first")
        tables = [self.blocks.block_table(s) for s, _, _ in items]
        block_tables = np.zeros((len(items), max(len(table) for table in tables)), np.int32)
        for row, table in enumerate(tables):
            block_tables[row, :len(table)] = table
        return positions, block_tables

    def prefill(self, tokens) -> tuple[int, np.ndarray]:
        """A new sequence holding ``tokens``: computes the positions not shared with a live sequence; returns
        (its id, the logits (vocab,) of its last token)."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError("tokens must hold at least one token")
        # All but the last token through the block manager's prefix sharing, then the last one appended: its
        # logits are the answer, so it is always computed, and never into a block another sequence shares (a
        # shared block is full; a partly filled one is this sequence's own).
        seq, positions = self.add_sequence(tokens[:-1])
        positions.append(self.append(seq, tokens[-1]))
        return seq, self.step([(seq, p, tokens[p]) for p in positions])[0]

    def decode(self, seq: int, token: int) -> np.ndarray:
        """Append ``token`` to ``seq`` and return the logits (vocab,) of the next one."""
        position = self.append(seq, token)
        return self.step([(seq, position, token)])[0]
