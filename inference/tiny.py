"""A tiny llama model with seeded random weights, shaped as a GGUF file is read (``inference.gguf.GGUFFile``):
the same architecture as SmolLM2 at a size the CUDA simulator runs in seconds, for the tests and the exercise.

Its matrices are Q4_1 blocks and its embedding (also its output head) Q8_0, as in SmolLM2's file, made by
``kernels.reference``'s quantizers from Gaussian weights; its norms are float32 near 1.
"""

from __future__ import annotations

import numpy as np

from inference.gguf import GGML_TYPES, TensorInfo
from kernels import reference

__all__ = ["TinyFile", "tiny_model"]

_TYPES = {t.name: t for t in GGML_TYPES.values()}


class TinyFile:
    """In memory, what ``inference.gguf.read`` returns for a file: ``metadata``, ``tensors`` and ``tensor``."""

    def __init__(self, metadata: dict, arrays: dict):
        self.metadata = metadata
        self._arrays = arrays
        self.tensors = {}
        for name, (kind, shape, _) in arrays.items():
            self.tensors[name] = TensorInfo(name, shape, _TYPES[kind], 0)

    def tensor(self, name: str) -> np.ndarray:
        return self._arrays[name][2]


def tiny_model(seed: int = 0, *, layers: int = 2, hidden: int = 64, ffn: int = 96, heads: int = 4, kv_heads: int = 2,
               vocab: int = 80, context: int = 64, rope_base: float = 10_000.0) -> TinyFile:
    """A random llama model: ``layers`` blocks, ``heads`` query heads over ``kv_heads`` KV heads of
    hidden / heads, a SwiGLU MLP of width ``ffn`` (hidden and ffn multiples of 32), ``vocab`` tokens."""
    if hidden % 32 or ffn % 32 or heads % kv_heads or hidden % heads:
        raise ValueError("hidden and ffn must be multiples of 32, heads of kv_heads, hidden of heads; got "
                         f"hidden={hidden}, ffn={ffn}, heads={heads}, kv_heads={kv_heads}")
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    arrays = {}

    def q4_1(name, rows, k):
        w = rng.standard_normal((rows, k)) * (3.0 / np.sqrt(k))
        arrays[name] = ("Q4_1", (rows, k), reference.quantize_q4_1(w).reshape(rows, k // 32, 20))

    def norm(name):
        arrays[name] = ("F32", (hidden,), (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))

    embedding = 0.5 * rng.standard_normal((vocab, hidden))
    arrays["token_embd.weight"] = ("Q8_0", (vocab, hidden),
                                   reference.quantize_q8_0(embedding).reshape(vocab, hidden // 32, 34))
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        q4_1(f"blk.{i}.attn_q.weight", hidden, hidden)
        q4_1(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        q4_1(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        q4_1(f"blk.{i}.attn_output.weight", hidden, hidden)
        norm(f"blk.{i}.ffn_norm.weight")
        q4_1(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        q4_1(f"blk.{i}.ffn_up.weight", ffn, hidden)
        q4_1(f"blk.{i}.ffn_down.weight", hidden, ffn)
    norm("output_norm.weight")
    metadata = {"general.architecture": "llama", "llama.block_count": layers, "llama.embedding_length": hidden,
                "llama.feed_forward_length": ffn, "llama.attention.head_count": heads,
                "llama.attention.head_count_kv": kv_heads, "llama.context_length": context,
                "llama.rope.freq_base": rope_base, "llama.attention.layer_norm_rms_epsilon": 1e-5,
                "tokenizer.ggml.tokens": [f"<{i}>" for i in range(vocab)]}
    return TinyFile(metadata, arrays)
