"""Day 10, the last exercise's decode step on the course's kernels: the operations of a student's step
(``kernels.step_ops.RecordingOps``'s record) replayed launch by launch, as ``inference.engine`` runs the model
(RMSNorm, the Q4_1 and Q8_0 GEMVs, RoPE from a table, the paged cache write, split-K GQA decode attention, SwiGLU,
add), on the simulator or a GPU, optionally with the student's RMSNorm, RoPE and SwiGLU kernels in place of the
course's. The notebook shows it; the grade is ``day10_step``'s, from the NumPy replay."""

from __future__ import annotations

import numpy as np

from course.hostcode import is_host_code
from kernels import step_ops

__all__ = ["StepOnKernels", "decode_step_on_kernels"]


class StepOnKernels:
    """A decode step's operations replayed on the course's kernels, launch by launch, as ``inference.engine`` runs
    the model: the weights in their GGUF bytes on the device, the keys and values of ``positions`` positions (the
    model's context when None) in a paged cache of ``block_size`` positions per block (its blocks in reverse order,
    so a page is found through the table).

    ``kernels``: the student's kernels in place of the course's, by operation: ``"rmsnorm"`` (the signature of
    ``rmsnorm_block_per_row_kernel``: x, weight, eps, out), ``"rope"`` (``rope_pairs_from_table_kernel``'s) and
    ``"swiglu"`` (``swiglu_elementwise_kernel``'s), each launched by the course's launcher."""

    KERNELS = ("rmsnorm", "rope", "swiglu")

    def __init__(self, gguf_file, *, block_size: int = 4, positions: int | None = None, kernels: dict | None = None):
        from numba import cuda

        from inference.config import ModelConfig
        from kernels.llama_layers import rope_table

        kernels = dict(kernels or {})
        unknown = set(kernels) - set(self.KERNELS)
        if unknown:
            raise ValueError(f"kernels may replace {', '.join(self.KERNELS)}; got {sorted(unknown)}")
        self.kernels = kernels
        self.config = c = ModelConfig.from_metadata(gguf_file.metadata)
        self.formats = {name: info.ggml_type.name for name, info in gguf_file.tensors.items()}
        self.weights = {name: cuda.to_device(np.ascontiguousarray(gguf_file.tensor(name)))
                        for name in gguf_file.tensors}
        self.rope = cuda.to_device(rope_table(c.context, c.head_dim, c.rope_base))
        blocks = -(-min(positions or c.context, c.context) // block_size)
        shape = (blocks, c.kv_heads, block_size, c.head_dim)
        self.k_cache = [cuda.to_device(np.zeros(shape, np.float32)) for _ in range(c.layers)]
        self.v_cache = [cuda.to_device(np.zeros(shape, np.float32)) for _ in range(c.layers)]
        self.tables = cuda.to_device(np.arange(blocks - 1, -1, -1, dtype=np.int32)[None, :])
        self.rows = cuda.to_device(np.zeros(1, np.int32))
        self.values: dict = {}
        self.launches: list[str] = []

    def _kernel(self, name: str, default):
        return self.kernels.get(name, default)

    def run(self, node: dict, handle) -> None:
        """Launch what operation ``node`` (a dict of ``RecordingOps.trace``, ``handle`` what it returned) does."""
        from numba import cuda

        from kernels import llama_layers as layers
        from kernels.gqa_attention import gqa_decode_split_k
        from kernels.kv_cache import kv_cache_write
        from kernels.quantized_gemv import q4_1_gemv_warp_per_row, q8_0_gemv_warp_per_row

        c, op, v = self.config, node["op"], self.values
        self.launches.append(op)
        one = lambda value: cuda.to_device(np.array([value], np.int32))       # noqa: E731
        flat = lambda array: array.reshape(1, array.size)                      # noqa: E731
        if op == "embed":
            out = layers.embedding_q8_0_rows(self.weights["token_embd.weight"], one(node["token"]))
        elif op == "rmsnorm":
            out = layers.rmsnorm_block_per_row(v[node["x"]], self.weights[node["weight"]], eps=c.eps,
                                               kernel=self._kernel("rmsnorm", layers.rmsnorm_block_per_row_kernel))
        elif op == "gemv":
            gemv = {"Q4_1": q4_1_gemv_warp_per_row, "Q8_0": q8_0_gemv_warp_per_row}[self.formats[node["matrix"]]]
            x = v[node["x"]]
            out = gemv(self.weights[node["matrix"]], x.reshape(x.size))
        elif op == "rope":
            x = v[node["x"]]
            out = layers.rope_pairs_from_table(x, one(node["position"]), self.rope,
                                               kernel=self._kernel("rope", layers.rope_pairs_from_table_kernel))
        elif op == "write_cache":
            layer = node["layer"]
            kv_cache_write(v[node["k"]], v[node["v"]], self.rows, one(node["position"]), self.tables,
                           self.k_cache[layer], self.v_cache[layer])
            return
        elif op == "attention":
            layer = node["layer"]
            out = gqa_decode_split_k(v[node["q"]], self.k_cache[layer], self.v_cache[layer], self.tables,
                                     one(node["context"]), max_context=node["context"])
        elif op == "add":
            x, y = v[node["x"]], v[node["y"]]
            out = layers.add_elementwise(flat(x), flat(y))
        else:
            out = layers.swiglu_elementwise(v[node["gate"]], v[node["up"]],
                                            kernel=self._kernel("swiglu", layers.swiglu_elementwise_kernel))
        v[node["id"]] = out.reshape(1, *handle.shape)


def decode_step_on_kernels(answer, prompt, *, new_tokens: int = 0, model=None, seed: int = 0, kernels=None,
                           block_size: int = 4) -> dict:
    """Run ``answer`` (the function your cell defines) over ``prompt``, then ``new_tokens`` tokens it picks
    greedily, each operation launched on the course's kernels (``StepOnKernels``; ``kernels`` replaces the course's
    RMSNorm, RoPE or SwiGLU kernel by yours) for ``model`` (a GGUF file; ``inference.tiny.tiny_model(seed)`` when
    None). Returns ``{"tokens": every token, "logits": (positions, vocab) float32, "launches": the launcher calls of
    each position}``."""
    from inference.config import ModelConfig
    from inference.tiny import tiny_model

    if is_host_code(answer):
        raise TypeError("decode_step_on_kernels runs your step in the notebook: pass the function your cell defines")
    if not callable(answer):
        raise TypeError(f"answer must be your decode_step function, got {type(answer).__name__}")
    model = tiny_model(seed) if model is None else model
    c = ModelConfig.from_metadata(model.metadata)
    tokens = [int(t) for t in prompt]
    if not tokens or len(tokens) + new_tokens > c.context:
        raise ValueError(f"need 1 ... {c.context} positions in all, got a prompt of {len(tokens)} and {new_tokens} "
                         "more")
    ops = step_ops.RecordingOps(layers=c.layers, hidden=c.hidden, ffn=c.ffn, heads=c.heads, kv_heads=c.kv_heads,
                                vocab=c.vocab, context=c.context)
    device = StepOnKernels(model, block_size=block_size, positions=len(tokens) + new_tokens, kernels=kernels)
    logits, launches = [], []
    position = 0
    while position < len(tokens):
        start = len(ops.trace)
        result = ops.logits_of(answer(ops, tokens[position], position))
        device.launches = []
        for node in ops.trace[start:]:
            device.run(node, ops.vector(node["id"]) if node["op"] != "write_cache" else None)
        logits.append(device.values[result].copy_to_host().reshape(-1))
        launches.append(len(device.launches))
        position += 1
        if position == len(tokens) and len(tokens) < len(prompt) + new_tokens:
            tokens.append(int(logits[-1].argmax()))
    return {"tokens": tokens, "logits": np.stack(logits), "launches": launches}
