"""The model's shape, read from a GGUF file's metadata (a llama-architecture model)."""

from __future__ import annotations

import dataclasses

__all__ = ["ModelConfig"]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and constants of a llama model: ``layers`` blocks of attention (``heads`` query heads over
    ``kv_heads`` key/value heads of ``head_dim``, RoPE with base ``rope_base``) and a SwiGLU MLP of width
    ``ffn``, RMSNorm with ``eps``, on vectors of ``hidden``; ``vocab`` tokens; ``context`` positions at most."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int
    rope_base: float
    eps: float

    @property
    def group(self) -> int:
        """Query heads per KV head (grouped-query attention, day 7)."""
        return self.heads // self.kv_heads

    @classmethod
    def from_metadata(cls, metadata: dict) -> "ModelConfig":
        arch = metadata.get("general.architecture")
        if arch != "llama":
            raise ValueError(f"the file's architecture is {arch!r}; this engine runs 'llama' models")
        key = lambda name: metadata[f"llama.{name}"]     # noqa: E731
        hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
        return cls(layers=int(key("block_count")), hidden=hidden, ffn=int(key("feed_forward_length")), heads=heads,
                   kv_heads=int(key("attention.head_count_kv")), head_dim=hidden // heads,
                   vocab=len(metadata["tokenizer.ggml.tokens"]), context=int(key("context_length")),
                   rope_base=float(key("rope.freq_base")), eps=float(key("attention.layer_norm_rms_epsilon")))
