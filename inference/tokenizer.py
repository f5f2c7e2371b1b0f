"""The model's tokenizer and chat format, built from the GGUF file's own vocabulary and merges.

SmolLM2 uses GPT-2's byte-level BPE (byte pair encoding). Text becomes ids in four steps:

1. **Control tokens** (``<|im_start|>``, ``<|im_end|>``, ... : type 3 in ``tokenizer.ggml.token_type``) are
   found in the text first and become their ids directly; the text between them goes on.
2. **Pre-tokenization** splits that text into words (``PRETOKENS``): an English contraction, a run of letters
   with at most one space before it, a digit, a run of other symbols, runs of white space. BPE never merges
   across two of them, so ``" the"`` and ``"the"`` are different tokens.
3. **Bytes as characters**: each word's UTF-8 bytes become printable characters, one per byte (``BYTE_CHARS``:
   the printable bytes stand for themselves, the other 68 are moved to characters from 256 on; a space is
   ``Ġ``). Every byte sequence can therefore be spelled, and the vocabulary has no unknown token to fall back on.
4. **Merges**: starting from single characters, the adjacent pair that comes earliest in
   ``tokenizer.ggml.merges`` (48,900 of them, most frequent first in the training text) is merged, again and
   again, until no pair of the word is a merge; each piece left is a token of the vocabulary.

Decoding joins the tokens' characters, maps them back to bytes and decodes UTF-8 (a sequence cut inside a
character shows the replacement character). Digits: this vocabulary has no token of two digits, so a number
is always one token per digit. Pre-tokenization uses Python's ``re``, whose letters (``[^\\W\\d_]``) include
the few numeric characters that are not decimal digits (``²``, ``½``), which GPT-2's ``\\p{L}`` leaves to
``\\p{N}``; text of ordinary letters, digits and symbols splits identically (tests/test_inference_tokenizer.py
checks it against ``transformers`` on the course's own text).

The chat format is ChatML, the file's ``tokenizer.chat_template``: each message is
``<|im_start|>role\\ncontent<|im_end|>\\n``, a default system message comes first when the conversation has
none, and ``<|im_start|>assistant\\n`` asks the model for its turn. :func:`chat_prompt` writes it in Python.
"""

from __future__ import annotations

import functools
import re

__all__ = ["PRETOKENS", "BYTE_CHARS", "DEFAULT_SYSTEM", "Tokenizer", "chat_prompt"]

PRETOKENS = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+|\d| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")


def _byte_chars() -> tuple:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = iter(range(256, 512))
    return tuple(chr(b) if b in printable else chr(next(moved)) for b in range(256))


BYTE_CHARS = _byte_chars()
_CHAR_BYTES = {c: b for b, c in enumerate(BYTE_CHARS)}
_CONTROL = 3

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class Tokenizer:
    """Byte-level BPE from a GGUF file's metadata (``inference.gguf.GGUFFile.metadata``): ``encode(text)``
    gives the ids, ``decode(ids)`` the text; ``bos``, ``eos`` (``<|im_end|>`` ends a chat turn as well)."""

    def __init__(self, metadata: dict):
        model = metadata.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"the file's tokenizer is {model!r}; this tokenizer reads byte-level BPE ('gpt2')")
        self.tokens = list(metadata["tokenizer.ggml.tokens"])
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ")): rank for rank, m in enumerate(metadata["tokenizer.ggml.merges"])}
        kinds = metadata["tokenizer.ggml.token_type"]
        self.control = {self.tokens[i]: i for i in range(len(self.tokens)) if kinds[i] == _CONTROL}
        self._control_split = re.compile("(" + "|".join(map(re.escape, sorted(self.control, key=len,
                                                                                 reverse=True))) + ")")
        self.bos = int(metadata["tokenizer.ggml.bos_token_id"])
        self.eos = int(metadata["tokenizer.ggml.eos_token_id"])
        self.end_of_turn = self.ids["<|im_end|>"]

    def __len__(self) -> int:
        return len(self.tokens)

    @functools.lru_cache(maxsize=65536)
    def _word(self, word: str) -> tuple:
        parts = ["".join(BYTE_CHARS[b] for b in word.encode("utf-8"))] if word else []
        parts = list(parts[0]) if parts else []
        while len(parts) > 1:
            rank, at = min((self.ranks.get(pair, len(self.ranks)), i) for i, pair in enumerate(zip(parts, parts[1:])))
            if rank == len(self.ranks):
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return tuple(self.ids[p] for p in parts)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: control tokens written in it become their ids (a chat prompt is text)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = []
        for piece in self._control_split.split(text):
            if piece in self.control:
                ids.append(self.control[piece])
            else:
                for word in PRETOKENS.findall(piece):
                    ids.extend(self._word(word))
        return ids

    def decode(self, ids) -> str:
        """The text of ``ids`` (control tokens as their text); bytes cut inside a character decode to U+FFFD."""
        text = "".join(self.tokens[int(i)] for i in ids)
        out = bytearray()
        for c in text:
            out.extend(c.encode("utf-8") if c not in _CHAR_BYTES else bytes((_CHAR_BYTES[c],)))
        return out.decode("utf-8", errors="replace")


def chat_prompt(messages, add_generation_prompt: bool = True, system: str = DEFAULT_SYSTEM) -> str:
    """The ChatML text of ``messages`` (dicts with ``role`` and ``content``), as the file's chat template
    writes it: ``system`` first when the first message is not a system message, then every message, then the
    assistant's opening when ``add_generation_prompt``."""
    messages = list(messages)
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not {"role", "content"} <= set(m):
            raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content', got {m!r}")
    text = ""
    if messages and messages[0]["role"] != "system":
        text += f"<|im_start|>system\n{system}<|im_end|>\n"
    for m in messages:
        text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")
