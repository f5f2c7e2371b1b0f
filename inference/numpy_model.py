"""The model's forward pass in NumPy, float32: the reference the kernels' forward pass is checked against.

A llama block, for the token vectors x (T, hidden) of T new tokens at positions p0 ... p0 + T - 1:

    h = rmsnorm(x) * attn_norm                  rmsnorm(x) = x / sqrt(mean(x^2) + eps), per token
    q, k, v = h Wq^T, h Wk^T, h Wv^T            (T, heads, d), (T, kv_heads, d), (T, kv_heads, d)
    q, k = rope(q), rope(k)                     each pair (2i, 2i + 1) of a head turned by p / base^(2i / d)
    o = softmax(q k^T / sqrt(d), causal) v       query head h reads KV head h // group, every earlier position
    x = x + o Wo^T
    h = rmsnorm(x) * ffn_norm
    x = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T          silu(z) = z / (1 + exp(-z))

then logits = (rmsnorm(x) * output_norm) E^T with E the token embedding (SmolLM2 ties the output head to it).

RoPE's pairs are adjacent, (2i, 2i + 1): llama.cpp's converter permutes the rows of Wq and Wk so that the
pairs of Hugging Face's "rotate half" convention, (i, i + d / 2), become adjacent in the GGUF file. Rotating
halves on the file's weights scrambles every head's positions (the model then stops at once).

The weights are the file's, dequantized (``kernels.reference.dequantize_q4_1`` / ``dequantize_q8_0``) to
float32 once, when a layer is first used (about 0.5 GB for SmolLM2-135M): the reference computes with the
numbers the quantized kernels compute with. The keys and values of earlier positions are kept per layer
(``Cache``), so generation feeds one token at a time.
"""

from __future__ import annotations

import numpy as np

from inference.config import ModelConfig
from inference.paged import PagedModel
from kernels import reference

__all__ = ["Cache", "NumpyModel", "NumpyPagedModel", "rmsnorm", "rope", "silu"]

_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis, in float32."""
    x = x.astype(np.float32)
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))) * weight


def rope(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """x (T, heads, d) with the pair (2i, 2i + 1) of every head rotated by the angle position / base^(2i / d)."""
    d = x.shape[-1]
    angles = positions[:, None].astype(np.float64) * base ** (-np.arange(0, d, 2) / d)      # (T, d / 2)
    cos, sin = (f(angles).astype(np.float32)[:, None, :] for f in (np.cos, np.sin))
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def silu(z: np.ndarray) -> np.ndarray:
    return z / (np.float32(1.0) + np.exp(-z))


def _dequantized(gguf_file, name: str) -> np.ndarray:
    info = gguf_file.tensors[name]
    data = gguf_file.tensor(name)
    if info.ggml_type.name in ("F32", "F16"):
        return np.asarray(data, np.float32)
    dequantize = {"Q4_1": reference.dequantize_q4_1, "Q8_0": reference.dequantize_q8_0,
                  "Q4_0": reference.dequantize_q4_0}[info.ggml_type.name]
    return dequantize(data.reshape(data.shape[0], -1)).astype(np.float32)


class Cache:
    """The keys and values of the positions seen so far, per layer: ``k[layer]``, ``v[layer]`` of shape
    (positions, kv_heads, d), float32."""

    def __init__(self, config: ModelConfig):
        empty = np.zeros((0, config.kv_heads, config.head_dim), np.float32)
        self.k = [empty] * config.layers
        self.v = [empty] * config.layers

    @property
    def length(self) -> int:
        return self.k[0].shape[0]


class NumpyModel:
    """The float32 NumPy forward pass of the llama model in ``gguf_file`` (``inference.gguf.read``)."""

    def __init__(self, gguf_file):
        self.file = gguf_file
        self.config = ModelConfig.from_metadata(gguf_file.metadata)
        self._weights: dict = {}

    def weight(self, name: str) -> np.ndarray:
        """Tensor ``name`` of the file as float32 (dequantized once, then kept)."""
        if name not in self._weights:
            self._weights[name] = _dequantized(self.file, name)
        return self._weights[name]

    def layer(self, i: int) -> dict:
        """Layer i's matrices (rows = outputs) and norms, by their short names: attn_q ... ffn_down, attn_norm,
        ffn_norm."""
        return {name: self.weight(f"blk.{i}.{name}.weight") for name in (*_MATRICES, "attn_norm", "ffn_norm")}

    def embed(self, tokens) -> np.ndarray:
        """The embedding rows of ``tokens`` (T, hidden) float32; ids outside the vocabulary are refused."""
        tokens = np.asarray(tokens, np.int64).reshape(-1)
        bad = tokens[(tokens < 0) | (tokens >= self.config.vocab)]
        if bad.size:
            raise ValueError(f"tokens must be ids in 0 ... {self.config.vocab - 1}, got {int(bad[0])}")
        rows = self.file.tensor("token_embd.weight")[tokens]
        return reference.dequantize_q8_0(rows.reshape(len(tokens), -1)).astype(np.float32)

    def attention(self, i: int, h: np.ndarray, cache: Cache, positions: np.ndarray, keep=None) -> np.ndarray:
        """Layer i's attention of the normalized vectors h (T, hidden) at ``positions``; appends their keys and
        values to the cache. ``keep``, a dict, receives q, k, v and the heads' output o."""
        c, w = self.config, self.layer(i)
        t = h.shape[0]
        q = rope((h @ w["attn_q"].T).reshape(t, c.heads, c.head_dim), positions, c.rope_base)
        k = rope((h @ w["attn_k"].T).reshape(t, c.kv_heads, c.head_dim), positions, c.rope_base)
        v = (h @ w["attn_v"].T).reshape(t, c.kv_heads, c.head_dim)
        cache.k[i] = np.concatenate([cache.k[i], k])
        cache.v[i] = np.concatenate([cache.v[i], v])
        keys = np.repeat(cache.k[i], c.group, axis=1)        # (positions, heads, d): head h reads KV head h // group
        values = np.repeat(cache.v[i], c.group, axis=1)
        scores = np.einsum("thd,phd->htp", q, keys) / np.float32(np.sqrt(c.head_dim))
        seen = np.arange(cache.k[i].shape[0])
        scores = np.where(seen[None, None, :] <= positions[None, :, None], scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = scores / scores.sum(axis=-1, keepdims=True)
        o = np.einsum("htp,phd->thd", p, values).reshape(t, c.heads * c.head_dim).astype(np.float32)
        if keep is not None:
            keep.update(q=q, k=k, v=v, o=o)
        return o @ w["attn_output"].T

    def mlp(self, i: int, h: np.ndarray, keep=None) -> np.ndarray:
        """Layer i's SwiGLU MLP of the normalized vectors h (T, hidden); ``keep`` receives its hidden a."""
        w = self.layer(i)
        a = silu(h @ w["ffn_gate"].T) * (h @ w["ffn_up"].T)
        if keep is not None:
            keep.update(a=a)
        return a @ w["ffn_down"].T

    def residual(self, tokens, cache: Cache | None = None, layers: int | None = None, keep=None) -> np.ndarray:
        """The residual stream x (T, hidden) of the T new ``tokens`` after the first ``layers`` blocks (all when
        None); they follow the ``cache``'s positions (a new cache when None). ``keep``, a list, receives per layer
        a dict of what each matrix was multiplied with: ``attn`` (the normalized input of Wq, Wk, Wv), ``o`` (of
        Wo), ``ffn`` (of Wgate, Wup), ``a`` (of Wdown)."""
        c = self.config
        layers = c.layers if layers is None else layers
        if not 0 <= layers <= c.layers:
            raise ValueError(f"layers must be 0 ... {c.layers}, got {layers}")
        cache = Cache(c) if cache is None else cache
        x = self.embed(tokens)
        positions = np.arange(cache.length, cache.length + x.shape[0])
        if positions[-1] >= c.context:
            raise ValueError(f"tokens reach position {positions[-1]}, past the model's context of {c.context}")
        for i in range(layers):
            w = self.layer(i)
            seen = {} if keep is not None else None
            h = rmsnorm(x, w["attn_norm"], c.eps)
            x = x + self.attention(i, h, cache, positions, seen)
            h2 = rmsnorm(x, w["ffn_norm"], c.eps)
            x = x + self.mlp(i, h2, seen)
            if keep is not None:
                keep.append({"attn": h, "o": seen["o"], "ffn": h2, "a": seen["a"]})
        return x

    def forward(self, tokens, cache: Cache | None = None, keep=None) -> np.ndarray:
        """Logits (T, vocab) float32 of the T new ``tokens``, which follow the ``cache``'s positions (a new
        cache when None); ``keep`` as for :meth:`residual`."""
        x = rmsnorm(self.residual(tokens, cache, keep=keep), self.weight("output_norm.weight"), self.config.eps)
        return x @ self.weight("token_embd.weight").T


class NumpyPagedModel(PagedModel):
    """The NumPy forward pass over a paged KV cache, on the host: the kernel engine's cache layout
    ((num_blocks, kv_heads, block_size, head_dim) per layer), block manager and steps
    (``inference.engine.KernelModel``), computed as :class:`NumpyModel` computes. A laptop serves several requests
    with it (``inference.serving``); ``model`` reuses a :class:`NumpyModel`'s dequantized weights."""

    def __init__(self, gguf_file, *, num_blocks: int = 256, block_size: int = 16, context: int | None = None,
                 model: NumpyModel | None = None):
        self.model = model or NumpyModel(gguf_file)
        super().__init__(self.model.config, num_blocks=num_blocks, block_size=block_size, context=context)
        c = self.config
        shape = (c.layers, num_blocks, c.kv_heads, block_size, c.head_dim)
        self.k_cache, self.v_cache = np.zeros(shape, np.float32), np.zeros(shape, np.float32)

    def _copy_block(self, source: int, destination: int) -> None:
        self.k_cache[:, destination] = self.k_cache[:, source]
        self.v_cache[:, destination] = self.v_cache[:, source]

    def _attention(self, i: int, q: np.ndarray, positions: np.ndarray, tables: np.ndarray) -> np.ndarray:
        """Token t's query heads (heads, d) over positions 0 ... positions[t] of its sequence, read through its
        block table; (T, heads * d)."""
        c, size = self.config, self.blocks.block_size
        out = np.empty((q.shape[0], c.heads, c.head_dim), np.float32)
        for row, p in enumerate(positions):
            pages = tables[row, :p // size + 1]
            keys = self.k_cache[i, pages].transpose(0, 2, 1, 3).reshape(-1, c.kv_heads, c.head_dim)[:p + 1]
            values = self.v_cache[i, pages].transpose(0, 2, 1, 3).reshape(-1, c.kv_heads, c.head_dim)[:p + 1]
            keys, values = np.repeat(keys, c.group, axis=1), np.repeat(values, c.group, axis=1)
            scores = np.einsum("hd,phd->hp", q[row], keys) / np.float32(np.sqrt(c.head_dim))
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[row] = np.einsum("hp,phd->hd", weights / weights.sum(axis=1, keepdims=True), values)
        return out.reshape(q.shape[0], c.heads * c.head_dim)

    def step(self, items, logits_for=None) -> np.ndarray:
        """As ``KernelModel.step``: each item's keys and values go to its slot, then each attends to positions
        0 ... position of its sequence; returns the logits (len(logits_for), vocab) of the items at ``logits_for``
        (default: the last one)."""
        c, m = self.config, self.model
        positions, tables = self._step_tables(items)
        t, size = len(items), self.blocks.block_size
        rows = np.arange(t)
        blocks, offsets = tables[rows, positions // size], positions % size
        x = m.embed([token for _, _, token in items])
        for i in range(c.layers):
            w = m.layer(i)
            h = rmsnorm(x, w["attn_norm"], c.eps)
            q = rope((h @ w["attn_q"].T).reshape(t, c.heads, c.head_dim), positions, c.rope_base)
            k = rope((h @ w["attn_k"].T).reshape(t, c.kv_heads, c.head_dim), positions, c.rope_base)
            v = (h @ w["attn_v"].T).reshape(t, c.kv_heads, c.head_dim)
            self.k_cache[i, blocks, :, offsets] = k
            self.v_cache[i, blocks, :, offsets] = v
            x = x + self._attention(i, q, positions, tables) @ w["attn_output"].T
            x = x + m.mlp(i, rmsnorm(x, w["ffn_norm"], c.eps))
        wanted = [t - 1] if logits_for is None else list(logits_for)
        return rmsnorm(x[wanted], m.weight("output_norm.weight"), c.eps) @ m.weight("token_embd.weight").T

