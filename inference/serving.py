"""Serving several requests at once: continuous batching over the block manager.

A :class:`Server` drives an engine over a paged cache (``inference.engine.KernelModel`` on the course's kernels,
``inference.numpy_model.NumpyPagedModel`` on the host) and keeps its requests in three states: waiting, running
and finished. Each ``step()`` is one forward pass of the engine:

1. **Join.** Waiting requests are admitted in the order they came while the batch has room (``max_batch`` running
   requests) and the cache can hold them: a request reserves the blocks of its whole life, prompt and
   ``max_tokens`` answer, so a running request never finds the cache full (and nothing is ever evicted). A
   prompt's leading full blocks that a live sequence already holds (a shared system prompt) are shared by the
   block manager (day 6), not computed again; the step's prefill tokens are capped by ``max_prefill_tokens``
   beyond the first admitted prompt, so a burst of long prompts does not stall the decodes for long.
2. **One step.** The engine runs one step over every running request's last token (decode) and every admitted
   prompt's positions (prefill), mixed in one batch of items, and returns the logits of each request's last item.
3. **Leave.** Each request samples its next token with its own temperature, top-p and seed
   (``inference.sampling``). A request that produced a stop token or ``max_tokens`` tokens, or reached the
   engine's context, finishes, and its blocks go back to the pool at once: a waiting request can join at the
   next step.

The time to first token of a request counts from its ``submit`` to the end of the step that sampled its first
token; ``stats`` keeps, per step, the decode and prefill tokens of the batch and its time.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from inference.sampling import sample

__all__ = ["Request", "Server", "StepStats"]


@dataclasses.dataclass
class Request:
    """A prompt's token ids and how to answer it; the server fills in the rest."""

    prompt: list[int]
    max_tokens: int = 32
    stop: tuple[int, ...] = ()
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    # filled by the server
    id: int = -1
    output: list[int] = dataclasses.field(default_factory=list)
    finish_reason: str | None = None      # "stop", "length" (max_tokens) or "context"
    submitted: float = 0.0                # time.perf_counter() at submit
    first_token_s: float | None = None    # seconds from submit to the first token
    computed_prompt_tokens: int = 0       # the prompt's positions computed (not shared with a live sequence)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclasses.dataclass(frozen=True)
class StepStats:
    """One step: its decode tokens (one per running request), prefill tokens (computed prompt positions),
    requests that joined and left, and its wall time."""

    decode_tokens: int
    prefill_tokens: int
    joined: int
    left: int
    seconds: float


class Server:
    """Continuous batching of :class:`Request` s on ``engine`` (see the module's docstring)."""

    def __init__(self, engine, *, max_batch: int = 64, max_prefill_tokens: int = 512):
        for name, value in (("max_batch", max_batch), ("max_prefill_tokens", max_prefill_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.engine, self.max_batch, self.max_prefill_tokens = engine, max_batch, max_prefill_tokens
        self.waiting: list[Request] = []
        self.running: dict[int, Request] = {}        # sequence -> request
        self.finished: list[Request] = []
        self.stats: list[StepStats] = []
        self._pending: dict[int, int] = {}           # sequence -> its last sampled token, not yet in the cache
        self._reserved: dict[int, int] = {}          # sequence -> blocks reserved for its whole life
        self._rngs: dict[int, np.random.Generator] = {}
        self._next_id = 0

    # ------------------------------------------------------------------ requests

    def _blocks_for(self, request: Request) -> int:
        positions = min(len(request.prompt) + request.max_tokens, self.engine.context)
        return -(-positions // self.engine.blocks.block_size)

    def submit(self, request: Request) -> int:
        """Queue ``request``; returns its id. A request the engine could never hold is refused at once."""
        prompt = list(request.prompt)
        vocab = self.engine.config.vocab
        if not prompt:
            raise ValueError("request.prompt must hold at least one token")
        bad = [t for t in prompt if not (isinstance(t, (int, np.integer)) and 0 <= t < vocab)]
        if bad:
            raise ValueError(f"request.prompt must hold token ids in 0 ... {vocab - 1}, got {bad[0]!r}")
        if isinstance(request.max_tokens, bool) or not isinstance(request.max_tokens, int) or request.max_tokens < 1:
            raise ValueError(f"request.max_tokens must be an int >= 1, got {request.max_tokens!r}")
        if len(prompt) >= self.engine.context:
            raise ValueError(f"request.prompt has {len(prompt)} tokens; the engine's context holds "
                             f"{self.engine.context}, with room for at least one answer token")
        if self._blocks_for(request) > self.engine.blocks.num_blocks:
            raise ValueError(f"request needs {self._blocks_for(request)} blocks of {self.engine.blocks.block_size} "
                             f"positions (prompt and max_tokens); the cache has {self.engine.blocks.num_blocks}")
        request.prompt = [int(t) for t in prompt]
        request.id, self._next_id = self._next_id, self._next_id + 1
        request.submitted = time.perf_counter()
        self.waiting.append(request)
        return request.id

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # ------------------------------------------------------------------ a step

    def _admit(self) -> list[tuple[int, int, int]]:
        """Admit waiting requests (see the module's docstring); returns the prefill items of those admitted."""
        items: list[tuple[int, int, int]] = []
        free = self.engine.blocks.num_blocks - sum(self._reserved.values())
        while self.waiting and len(self.running) < self.max_batch:
            request = self.waiting[0]
            need = self._blocks_for(request)
            if need > free or (items and len(items) + len(request.prompt) > self.max_prefill_tokens):
                break
            self.waiting.pop(0)
            seq, positions = self.engine.add_sequence(request.prompt[:-1])
            positions.append(self.engine.append(seq, request.prompt[-1]))
            items += [(seq, p, request.prompt[p]) for p in positions]
            request.computed_prompt_tokens = len(positions)
            self.running[seq], self._reserved[seq], free = request, need, free - need
            self._rngs[seq] = np.random.default_rng(request.seed)
        return items

    def step(self) -> list[tuple[int, int]]:
        """One step of the engine over every running request; returns the (request id, token) pairs it sampled."""
        start = time.perf_counter()
        decode = []
        for seq, token in self._pending.items():
            decode.append((seq, self.engine.append(seq, token), token))
        prefill = self._admit()
        items = decode + prefill
        if not items:
            return []
        last = {}                                     # sequence -> index of its last item
        for index, (seq, _, _) in enumerate(items):
            last[seq] = index
        seqs = list(last)
        logits = self.engine.step(items, logits_for=[last[s] for s in seqs])
        now = time.perf_counter()
        sampled, left = [], 0
        for seq, row in zip(seqs, logits):
            request = self.running[seq]
            token = sample(row, self._rngs[seq], temperature=request.temperature, top_p=request.top_p)
            if request.first_token_s is None:
                request.first_token_s = now - request.submitted
            sampled.append((request.id, token))
            request.output.append(token)
            length = self.engine.blocks.context_len(seq)
            if token in request.stop:
                request.finish_reason = "stop"
            elif len(request.output) >= request.max_tokens:
                request.finish_reason = "length"
            elif length >= self.engine.context:
                request.finish_reason = "context"
            if request.finished:
                self._retire(seq)
                left += 1
            else:
                self._pending[seq] = token
        self.stats.append(StepStats(decode_tokens=len(decode), prefill_tokens=len(prefill),
                                    joined=len({s for s, _, _ in prefill}), left=left, seconds=now - start))
        return sampled

    def _retire(self, seq: int) -> None:
        self.finished.append(self.running.pop(seq))
        self._pending.pop(seq, None)
        self._reserved.pop(seq)
        self._rngs.pop(seq)
        self.engine.free(seq)

    def run(self, max_steps: int | None = None) -> list[Request]:
        """Step until every request has finished (or ``max_steps`` steps); returns the finished requests in the
        order of their ids."""
        steps = 0
        while not self.idle and (max_steps is None or steps < max_steps):
            self.step()
            steps += 1
        return sorted(self.finished, key=lambda r: r.id)
