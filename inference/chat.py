"""A chat with the model, streamed token by token: ``course chat`` (and the day 10 lesson's last cell).

Two paths run the same model: the course's kernels on a GPU (``inference.engine.KernelModel``) and the NumPy
forward pass (``inference.numpy_model``, a laptop's path; the simulator would take minutes a token). Both keep
the conversation's keys and values, so each turn computes only its own tokens.
"""

from __future__ import annotations

import sys
from typing import Iterator

import numpy as np

from inference import files, gguf
from inference.numpy_model import Cache, NumpyModel
from inference.sampling import sample
from inference.tokenizer import DEFAULT_SYSTEM, Tokenizer

__all__ = ["Chat", "main"]


class _NumpyPath:
    name = "the NumPy forward pass (float32, on the CPU)"

    def __init__(self, model_file):
        self.model = NumpyModel(model_file)
        self.cache = Cache(self.model.config)

    def feed(self, tokens) -> np.ndarray:
        return self.model.forward(tokens, self.cache)[-1]


def quiet_small_grids() -> None:
    """Turn off numba's low-occupancy warning (a launch of fewer than 128 blocks) for this process. A 135M model's
    step at one token launches grids of 1 to a few dozen blocks by design; on a GPU the warning, printed at each new
    grid, would scatter itself through the streamed answer."""
    from numba.cuda.core import config

    config.CUDA_LOW_OCCUPANCY_WARNINGS = 0


class _KernelPath:
    def __init__(self, model_file, context: int):
        from inference import graphs
        from inference.engine import KernelModel
        from kernels.tuning import gpu_name

        quiet_small_grids()
        replayed = graphs.available()            # a GPU: each step's kernels replayed as one CUDA graph
        self.name = (f"the course's kernels on {gpu_name()} (the fused engine"
                     + (", each step replayed as a CUDA graph)" if replayed else ")"))
        blocks = -(-context // 16)
        self.model = KernelModel(model_file, num_blocks=blocks, block_size=16, context=context, fused=True,
                                 graphs=replayed)
        self.seq = None

    def feed(self, tokens) -> np.ndarray:
        tokens = list(tokens)
        if self.seq is None:
            self.seq, logits = self.model.prefill(tokens)
            return logits
        items = [(self.seq, self.model.append(self.seq, t), t) for t in tokens]
        return self.model.step(items)[0]


class Chat:
    """A conversation on ``path`` ("numpy" or "kernels": the kernels need the device chosen first, as
    ``course.use_device()`` does): ``reply(text)`` yields the assistant's answer in pieces as they are decoded."""

    def __init__(self, path: str = "numpy", *, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 max_tokens: int = 256, system: str = DEFAULT_SYSTEM, context: int = 2048, model_file=None):
        model_file = model_file or gguf.read(files.model_path())
        self.tokenizer = Tokenizer(model_file.metadata)
        if path not in ("numpy", "kernels"):
            raise ValueError(f"path must be 'numpy' or 'kernels', got {path!r}")
        self.path = _KernelPath(model_file, context) if path == "kernels" else _NumpyPath(model_file)
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.rng = np.random.default_rng(seed)
        self.system, self.started, self.context = system, False, context
        self.length = 0

    def reply(self, text: str) -> Iterator[str]:
        turn = "" if self.started else f"<|im_start|>system\n{self.system}<|im_end|>\n"
        turn += f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        self.started = True
        tokens = self.tokenizer.encode(turn)
        answer, shown = [], ""
        while len(answer) < self.max_tokens and self.length + len(tokens) < self.context:
            logits = self.path.feed(tokens)
            self.length += len(tokens)
            token = sample(logits, self.rng, temperature=self.temperature, top_p=self.top_p)
            if token in (self.tokenizer.end_of_turn, self.tokenizer.eos):
                self.path.feed([token])            # the turn's end joins the conversation's cache
                self.length += 1
                break
            answer.append(token)
            tokens = [token]
            text_so_far = self.tokenizer.decode(answer)
            if not text_so_far.endswith("\ufffd"):     # a character cut between tokens waits for its end
                yield text_so_far[len(shown):]
                shown = text_so_far
        tail = self.tokenizer.decode(answer)[len(shown):]
        if tail:
            yield tail


def main(args, path: str) -> int:
    """``course chat``: read a line, stream the answer, until an empty line or end of input. ``path``: "numpy" or
    "kernels" (the command line's "auto" resolved by the course, which chooses the device)."""
    chat = Chat(path, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                max_tokens=args.max_tokens)
    print(f"SmolLM2-135M-Instruct on {chat.path.name}. An empty line ends the chat.", flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            break
        if not sys.stdin.isatty():                 # piped input: show the question as a terminal would
            print(f"> {line}")
        for piece in chat.reply(line):
            print(piece, end="", flush=True)
        print(flush=True)
    return 0
