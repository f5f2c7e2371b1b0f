"""The model on the course's kernels: the weights stay in their GGUF bytes on the device, the keys and values in
day 6's paged cache, and every step is a sequence of the course's launches.

A step takes T new tokens, each of some sequence at some position (a prompt's tokens at prefill, one token per
sequence at decode, or both at once: the engine does not tell them apart), and for each layer launches:

    rmsnorm_block_per_row                       h = rmsnorm(x) * attn_norm               (kernels.llama_layers)
    q4_1_gemv_warp_per_row (one token)          q, k, v = Wq h, Wk h, Wv h               (day 9)
    or q4_1_gemm_tokens_warp_per_row (several)  (kernels.token_gemv: one launch for the step's tokens)
    rope_pairs_from_table on q and k            adjacent pairs, the GGUF convention
    kv_cache_write                              k and v to their slots                   (day 6)
    gqa_decode_split_k                          token t's query over positions 0 ... p_t of its sequence (day 7)
    q4_1_gemv_warp_per_row, add_elementwise     x += Wo o
    rmsnorm_block_per_row, 2 GEMVs, swiglu      a = silu(Wgate h) * (Wup h)
    q4_1_gemv_warp_per_row, add_elementwise     x += Wdown a

With ``fused=True`` a block is 6 kernels instead of 17 (``kernels.fused_llama``): RMSNorm folded into the Q, K
and V projections (one launch over their concatenated rows, which also turns q and k by RoPE and writes k and v to
the cache) and into gate and up, which also apply SwiGLU, and the residual adds in the epilogues of Wo and Wdown.
Those are the quarters rungs (four lanes a block, a pass of one token when the step has one), and the output head
is ``kernels.token_gemv``'s wide rung on the embedding repacked at load time (16-byte loads, eight rows a warp): at
one token a step every launch is latency, and these keep more lanes busy and more bytes in flight. Attention
runs in partitions of ``FUSED_PARTITION`` positions, which spread a short context over several blocks a KV head.

With ``graphs=True`` (a GPU only) each decode step (one token of each of at most ``GRAPH_MAX_TOKENS`` sequences; any
other step runs eagerly) has its launches captured once as a CUDA graph (``inference.graphs``) per number of tokens
and bucket of ``GRAPH_CONTEXT_STEP`` positions of the longest context, and replayed: the
step's token ids, positions, block tables and context lengths are written into the arrays the graph reads, then
one call runs every kernel of the step. The first step of each shape runs eagerly, then is captured; logits are
computed for every token of a graph's step.

Then the final norm and the output head (the Q8_0 embedding, ``q8_0_gemv_warp_per_row``, or the tokens rung for
several; the fused engine's ``q8_0_gemm_tokens_wide`` reads a copy repacked once, with 16-byte loads) for the
tokens whose logits are asked for. Attention reads the paged cache for every token, so a prompt's token t is a query over the
t + 1 positions written so far (causal by construction), and a prompt whose first full blocks another sequence
already holds (``kernels.block_manager``'s prefix sharing) computes only the tokens after them.

The GEMVs use day 9's float-activation Q4_1 rung (or ``kernels.token_gemv``'s, which sums each token as it does),
so the engine computes what the NumPy model (``inference.numpy_model``) computes, up to the order of float32 sums:
greedy decoding gives the same tokens.
"""

from __future__ import annotations

import time

import numpy as np
from numba import config, cuda
from numba.cuda.cudadrv import driver

from inference import graphs as step_graphs
from inference.config import ModelConfig
from inference.paged import PagedModel
from kernels import fused_llama as fused
from kernels import llama_layers as layers
from kernels.gqa_attention import gqa_decode_split_k
from kernels.kv_cache import kv_cache_write
from kernels.probes import BUSY_MICROSECONDS, busy_wait_kernel
from kernels.quantized_gemv import q4_1_gemv_warp_per_row, q8_0_gemv_warp_per_row
from kernels.reference import rope_table
from kernels.quantized_gemv_wide import q8_0_repack
from kernels.token_gemv import q4_1_gemm_tokens_warp_per_row, q8_0_gemm_tokens_warp_per_row, q8_0_gemm_tokens_wide

__all__ = ["KernelModel", "KERNELS_PER_LAUNCH", "GRAPH_CONTEXT_STEP", "GRAPH_MAX_TOKENS", "FUSED_PARTITION"]

# With graphs=True, a step's graph is captured per number of tokens and per bucket of this many positions of the
# longest context: attention's grid (its partitions) is sized for the bucket, and a sequence shorter than it
# leaves the partitions past its end empty.
GRAPH_CONTEXT_STEP = 256

# With graphs=True, decode steps (one token of each of at most this many sequences) are replayed; other steps (a
# prompt's prefill, a server's step that admits prompts) run eagerly: each would be captured for its own number of
# tokens, and most such shapes never come back.
GRAPH_MAX_TOKENS = 64

# The fused engine's attention partitions (positions a block of split-K attention reads): short ones, so that a
# context of a few hundred positions still spreads over several blocks a KV head.
FUSED_PARTITION = 32

# Kernels one call of a launcher launches, where it is more than one (split-K attention and its merge).
KERNELS_PER_LAUNCH = {"gqa_decode_split_k": 2}

_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
_GEMV = {"Q4_1": q4_1_gemv_warp_per_row, "Q8_0": q8_0_gemv_warp_per_row}
# A step of several tokens: one launch for all of them, each byte of W loaded once per 8 tokens.
_GEMM_TOKENS = {"Q4_1": q4_1_gemm_tokens_warp_per_row, "Q8_0": q8_0_gemm_tokens_warp_per_row}


class KernelModel(PagedModel):
    """The llama model of ``gguf_file`` on the device, with a paged KV cache of ``num_blocks`` blocks of
    ``block_size`` positions per layer (float32) and day 6's block manager over it (``blocks``)."""

    def __init__(self, gguf_file, *, num_blocks: int = 256, block_size: int = 16, context: int | None = None,
                 fused: bool = False, graphs: bool = False):
        super().__init__(ModelConfig.from_metadata(gguf_file.metadata), num_blocks=num_blocks, block_size=block_size,
                         context=context)
        c = self.config
        self.fused = bool(fused)
        if graphs and not step_graphs.available():
            raise ValueError("graphs=True replays each step as a CUDA graph, which needs a GPU: this process runs "
                             "numba's simulator (graphs=False runs the same launches one by one)")
        self.graphs = bool(graphs)
        self._graphs: dict = {}              # (tokens, context bucket) -> (StepGraph, its input arrays, its logits)
        self.graph_replays = 0
        self._formats = {}
        self.weights = []
        for i in range(c.layers):
            names = {name: f"blk.{i}.{name}.weight" for name in (*_MATRICES, "attn_norm", "ffn_norm")}
            self.weights.append({short: self._to_device(gguf_file, full) for short, full in names.items()})
            for short in _MATRICES:
                self._formats[short] = gguf_file.tensors[names[short]].ggml_type.name
            if self.fused and set(self._formats.values()) != {"Q4_1"}:
                raise ValueError(f"fused=True runs Q4_1 layers (kernels.fused_llama); layer {i} has "
                                 f"{sorted(set(self._formats.values()))}")
            if self.fused:               # Wq, Wk and Wv as one matrix: one launch for the three projections
                self.weights[-1]["attn_qkv"] = cuda.to_device(np.ascontiguousarray(np.concatenate(
                    [gguf_file.tensor(names[short]) for short in ("attn_q", "attn_k", "attn_v")])))
        self.embedding = self._to_device(gguf_file, "token_embd.weight")
        # The fused engine's head reads the embedding repacked once (codes on 16-byte boundaries, scales apart)
        self.head = q8_0_repack(self.embedding) if self.fused else None
        self.output_norm = self._to_device(gguf_file, "output_norm.weight")
        head = gguf_file.tensors["token_embd.weight"].ggml_type.name
        if head != "Q8_0" or any(f not in _GEMV for f in self._formats.values()):
            raise ValueError(f"this engine runs Q4_1 or Q8_0 layers and a Q8_0 embedding; the file has "
                             f"{sorted(set(self._formats.values()))} and a {head} embedding")
        self.rope = cuda.to_device(rope_table(self.context, c.head_dim, c.rope_base))
        shape = (num_blocks, c.kv_heads, block_size, c.head_dim)
        self.k_cache = [cuda.to_device(np.zeros(shape, np.float32)) for _ in range(c.layers)]
        self.v_cache = [cuda.to_device(np.zeros(shape, np.float32)) for _ in range(c.layers)]
        self.launches: list[str] = []        # the launcher calls of the last step, in order
        # Set to a dict to time every launcher call ({name: [calls, seconds]}, accumulated over steps): the device is
        # synchronized before and after each, so the seconds are each call's own (launch and kernel), not a step's.
        self.timings: dict | None = None
        # Set to a dict to time every launcher call's kernels alone on the GPU ({name: [calls, seconds]}): a busy
        # kernel is queued first, so the host has enqueued the call before the GPU reaches it, and CUDA events
        # around the call measure the GPU's time alone, without the launch's. A GPU only (the simulator has no
        # timing events); not with ``timings`` at once.
        self.kernel_timings: dict | None = None

    @staticmethod
    def _to_device(gguf_file, name):
        return cuda.to_device(np.ascontiguousarray(gguf_file.tensor(name)))

    def _copy_block(self, source: int, destination: int) -> None:
        for cache in (*self.k_cache, *self.v_cache):
            cache[destination].copy_to_device(cache[source])

    # ------------------------------------------------------------------ the forward pass

    def _call(self, launcher, *args, **kwargs):
        self.launches.append(launcher.__name__)
        if self.kernel_timings is not None:
            return self._kernel_timed(launcher, *args, **kwargs)
        if self.timings is None:
            return launcher(*args, **kwargs)
        cuda.synchronize()
        start = time.perf_counter()
        out = launcher(*args, **kwargs)
        cuda.synchronize()
        entry = self.timings.setdefault(launcher.__name__, [0, 0.0])
        entry[0] += 1
        entry[1] += time.perf_counter() - start
        return out

    def _kernel_timed(self, launcher, *args, **kwargs):
        """``launcher(*args, **kwargs)`` with its kernels' GPU time added to ``kernel_timings`` (see ``__init__``)."""
        if self.timings is not None:
            raise ValueError("timings and kernel_timings cannot be set at once: each synchronizes around every call "
                             "its own way; time one step with each")
        if config.ENABLE_CUDASIM:
            raise ValueError("kernel_timings time the GPU with CUDA events, which numba's simulator has not: "
                             "use timings there")
        busy_wait_kernel[1, 1](BUSY_MICROSECONDS)
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        out = launcher(*args, **kwargs)
        end.record()
        end.synchronize()
        entry = self.kernel_timings.setdefault(launcher.__name__, [0, 0.0])
        entry[0] += 1
        entry[1] += cuda.event_elapsed_time(start, end) / 1e3
        return out

    def _gemv(self, name, w, x, out, fmt=None):
        """out (T, N) = x (T, K) W^T: day 9's one-token GEMV at T = 1, one launch for all the tokens otherwise."""
        fmt = fmt or self._formats[name]
        if x.shape[0] > 1:
            return self._call(_GEMM_TOKENS[fmt], w, x, out=out)
        self._call(_GEMV[fmt], w, x[0], out=out[0])
        return out

    def _fused_block(self, i, w, x, q, o, a, positions, tables, rows, context, longest) -> None:
        """Block i in 6 kernels (``kernels.fused_llama``): the norms folded into the GEMVs that read them, RoPE and the
        cache write into the first one's epilogue, gate and up with SwiGLU, the residual adds in the GEMVs'
        epilogues, and attention's two."""
        c, t = self.config, x.shape[0]
        q3 = q.reshape(t, c.heads, c.head_dim)
        self._call(fused.q4_1_norm_qkv_rope_cache, w["attn_qkv"], x, w["attn_norm"], rows, positions, self.rope, tables,
                   self.k_cache[i], self.v_cache[i], eps=c.eps, out=q)
        self._call(gqa_decode_split_k, q3, self.k_cache[i], self.v_cache[i], tables, context, out=o,
                   max_context=longest, partition_size=FUSED_PARTITION)
        self._call(fused.q4_1_residual_quarters, w["attn_output"], o.reshape(t, c.heads * c.head_dim), x, out=x)
        self._call(fused.q4_1_norm_swiglu_quarters, w["ffn_gate"], w["ffn_up"], x, w["ffn_norm"], eps=c.eps, out=a)
        self._call(fused.q4_1_residual_quarters, w["ffn_down"], a, x, out=x)

    @property
    def kernels_launched(self) -> int:
        """Kernels the last step launched (``launches`` holds its launcher calls, in order)."""
        return sum(KERNELS_PER_LAUNCH.get(name, 1) for name in self.launches)

    def step(self, items, logits_for=None) -> np.ndarray:
        """Run one step over ``items``, a list of (sequence, position, token): each token's keys and values go
        into the cache at its position (which the block manager has registered: ``add_sequence`` or ``append``),
        and each attends to positions 0 ... position of its sequence. Returns the logits (len(logits_for), vocab)
        float32 of the items at the indices ``logits_for`` (default: the last one), on the host."""
        positions, block_tables = self._step_tables(items)
        t = len(items)
        wanted = [t - 1] if logits_for is None else list(logits_for)
        ids = np.array([k for _, _, k in items], np.int32)
        if self.graphs and t <= GRAPH_MAX_TOKENS and len({seq for seq, _, _ in items}) == t:
            return self._replayed(ids, positions, block_tables)[wanted]
        self.launches = []
        inputs = self._device_inputs(ids, positions, block_tables)
        return self._forward(inputs, int(positions.max()) + 1, wanted).copy_to_host()

    @staticmethod
    def _device_inputs(ids, positions, block_tables) -> dict:
        """What a step reads besides the weights and the cache, on the device."""
        return {"ids": cuda.to_device(ids), "positions": cuda.to_device(positions),
                "tables": cuda.to_device(block_tables), "rows": cuda.to_device(np.arange(len(ids), dtype=np.int32)),
                "context": cuda.to_device(positions + 1)}

    def _forward(self, inputs: dict, longest: int, wanted: list):
        """The step's launches on ``inputs`` (``_device_inputs``), attention over contexts up to ``longest``;
        returns the logits (len(wanted), vocab) of the tokens at the indices ``wanted``, on the device."""
        c = self.config
        d_positions, d_tables, d_rows, d_context = (inputs[key] for key in ("positions", "tables", "rows", "context"))
        t = len(inputs["ids"])
        x = self._call(layers.embedding_q8_0_rows, self.embedding, inputs["ids"],
                       out=cuda.device_array((t, c.hidden), np.float32))
        q = cuda.device_array((t, c.heads * c.head_dim), np.float32)
        o = cuda.device_array((t, c.heads, c.head_dim), np.float32)
        gate = cuda.device_array((t, c.ffn), np.float32)
        if not self.fused:                       # the plain block's intermediates, which the fused one never writes
            h, y = cuda.device_array((t, c.hidden), np.float32), cuda.device_array((t, c.hidden), np.float32)
            k = cuda.device_array((t, c.kv_heads * c.head_dim), np.float32)
            v = cuda.device_array((t, c.kv_heads * c.head_dim), np.float32)
            up = cuda.device_array((t, c.ffn), np.float32)
            q3 = q.reshape(t, c.heads, c.head_dim)
            k3, v3 = k.reshape(t, c.kv_heads, c.head_dim), v.reshape(t, c.kv_heads, c.head_dim)
        for i, w in enumerate(self.weights):
            if self.fused:
                self._fused_block(i, w, x, q, o, gate, d_positions, d_tables, d_rows, d_context, longest)
                continue
            self._call(layers.rmsnorm_block_per_row, x, w["attn_norm"], eps=c.eps, out=h)
            self._gemv("attn_q", w["attn_q"], h, q)
            self._gemv("attn_k", w["attn_k"], h, k)
            self._gemv("attn_v", w["attn_v"], h, v)
            self._call(layers.rope_pairs_from_table, q3, d_positions, self.rope, out=q3)
            self._call(layers.rope_pairs_from_table, k3, d_positions, self.rope, out=k3)
            self._call(kv_cache_write, k3, v3, d_rows, d_positions, d_tables, self.k_cache[i], self.v_cache[i])
            self._call(gqa_decode_split_k, q3, self.k_cache[i], self.v_cache[i], d_tables, d_context, out=o,
                       max_context=longest)
            self._gemv("attn_output", w["attn_output"], o.reshape(t, c.heads * c.head_dim), y)
            self._call(layers.add_elementwise, x, y, out=x)
            self._call(layers.rmsnorm_block_per_row, x, w["ffn_norm"], eps=c.eps, out=h)
            self._gemv("ffn_gate", w["ffn_gate"], h, gate)
            self._gemv("ffn_up", w["ffn_up"], h, up)
            self._call(layers.swiglu_elementwise, gate, up, out=gate)
            self._gemv("ffn_down", w["ffn_down"], gate, y)
            self._call(layers.add_elementwise, x, y, out=x)
        rows = cuda.device_array((len(wanted), c.hidden), np.float32)
        logits = cuda.device_array((len(wanted), c.vocab), np.float32)
        if wanted == list(range(t)):
            self._call(layers.rmsnorm_block_per_row, x, self.output_norm, eps=c.eps, out=rows)
        else:
            for n, index in enumerate(wanted):
                rows[n].copy_to_device(x[index])
            self._call(layers.rmsnorm_block_per_row, rows, self.output_norm, eps=c.eps, out=rows)
        self._head(rows, logits)
        return logits

    def _head(self, rows, logits) -> None:
        """logits = rows E^T, E the Q8_0 embedding: the fused engine's ``q8_0_gemm_tokens_wide`` on its repacked
        copy, the plain engine's day 9 GEMV (one token) or ``q8_0_gemm_tokens_warp_per_row`` on the GGUF bytes."""
        if self.fused:
            self._call(q8_0_gemm_tokens_wide, self.head, rows, out=logits)
        else:
            self._gemv("output", self.embedding, rows, logits, fmt="Q8_0")

    # ------------------------------------------------------------------ the step as a CUDA graph

    def _replayed(self, ids, positions, block_tables) -> np.ndarray:
        """The logits (T, vocab) of every item, on the host, from the graph of this step's shape: T tokens and the
        longest context rounded up to ``GRAPH_CONTEXT_STEP``. A shape seen for the first time runs eagerly on the
        graph's own input arrays (which compiles every kernel), then is captured for the steps after it.

        A replay costs the host one copy each way: the step's ids, positions, context lengths, rows and block tables
        are packed into one int32 buffer in page-locked host memory and copied into the one device buffer the graph's
        inputs are views of, and the logits come back into a page-locked buffer of the graph's own."""
        if self.timings is not None or self.kernel_timings is not None:
            raise ValueError("timings and kernel_timings time each launcher call between synchronizations, which a "
                             "graph cannot hold: profile with graphs=False")
        t, longest = len(ids), int(positions.max()) + 1
        bucket = min(self.context, -(-longest // GRAPH_CONTEXT_STEP) * GRAPH_CONTEXT_STEP)
        width = -(-self.context // self.blocks.block_size)
        entry = self._graphs.get((t, bucket))
        if entry is None:
            host = cuda.pinned_array(4 * t + t * width, np.int32)
            device = cuda.device_array_like(host)
            inputs = {"ids": device[:t], "positions": device[t:2 * t], "context": device[2 * t:3 * t],
                      "rows": device[3 * t:4 * t], "tables": device[4 * t:].reshape(t, width)}
            _pack(host, ids, positions, block_tables, t, width)
            device.copy_to_device(host)
            self.launches = []
            logits = self._forward(inputs, bucket, list(range(t))).copy_to_host()
            self.launches = []                   # the graph's launches, recorded once
            graph, out = step_graphs.capture(lambda: self._forward(inputs, bucket, list(range(t))))
            self._graphs[(t, bucket)] = (graph, host, device, out, cuda.pinned_array(out.shape, np.float32))
            return logits
        graph, host, device, out, logits = entry
        _pack(host, ids, positions, block_tables, t, width)
        # The driver's copies themselves: numba's copy_to_device and copy_to_host check and view the arrays at every
        # call, which the host pays per step (these buffers were made for each other, once).
        driver.host_to_device(device, host, host.nbytes)
        graph.replay()
        self.graph_replays += 1
        driver.device_to_host(logits, out, logits.nbytes)
        return logits                            # the graph's own buffer: step() returns a copy of its rows


def _pack(host, ids, positions, block_tables, t, width) -> None:
    """A graph step's inputs in one int32 buffer: ids, positions, context lengths (positions + 1), rows (0 ... T - 1)
    and the block tables (T, width), zero past each table's end."""
    host[:t] = ids
    host[t:2 * t] = positions
    host[2 * t:3 * t] = positions + 1
    host[3 * t:4 * t] = np.arange(t, dtype=np.int32)
    tables = host[4 * t:].reshape(t, width)
    tables[:] = 0
    tables[:, :block_tables.shape[1]] = block_tables
