"""NumPy references for every kernel of the course, computed in float64, one module per topic.

Each function is written to be read, not to be fast: it is the definition a kernel is checked
against. Shapes are in every docstring; the naive references say in comments what they read and
write, so the traffic of a kernel can be compared with the traffic of the plain algorithm.

Attention (tensors are ``(batch, heads, seq, head_dim)``, like torch's SDPA):

- ``softmax(x, axis=-1)``: stable softmax; a row that is entirely ``-inf`` gives zeros
- ``repeat_kv_heads(kv, heads)``: grouped-query attention, query head h reads KV head h // group
- ``attention_scores(q, k, scale=None)``: S = scale * Q K^T, before masking
- ``attention_mask(N, M, causal=False, kv_len=None, window=None)``: which keys each query sees
- ``attention(q, k, v, *, causal=False, kv_lens=None, window=None, scale=None)``
- ``gather_kv``, ``paged_attention``, ``build_paged_cache``: a paged KV cache and its decode step
- ``gemm(a, b)``

Quantization and number formats:

- ``quantize_int8`` / ``dequantize_int8``: symmetric int8, per tensor or per channel
- ``quantize_uint8_asymmetric`` / ``dequantize_uint8_asymmetric``: uint8 with a zero point
- ``gemm_int8``: int8 x int8 products accumulated in int32, then scaled
- ``w8a8_matmul(a_q, sa, w_q, sw)``: int8 tokens (a scale each) times int8 weights stored (N, K) (a scale per
  output channel), the integer sum exact, then scaled once: day 9's prefill GEMM
- ``pack_int4`` / ``unpack_int4``, ``quantize_int4_groups`` / ``dequantize_int4_groups``
- ``quantize_q8_0`` / ``dequantize_q8_0``, ``quantize_q4_0`` / ``dequantize_q4_0``,
  ``quantize_q4_1`` / ``dequantize_q4_1``: the GGUF (llama.cpp) block formats, bit for bit; ``quantize_q8_1`` (``dequantize_q8_1`` its values):
  activations as int8 codes with a scale and a sum per block of 32, for integer dot products; ``gemv_q8_1(w, x,
  fmt)``: W x as the q8_1 GEMV rungs define it (x's q8_1 values in the codes' product, its exact sums in the minimum's)
- ``quantize_int4_g128`` / ``dequantize_int4_g128``: int4 with an fp16 scale per group of 128 (4.125 bits a weight),
  each group's codes laid out as Q4_0's blocks, for day 9's GEMV
- ``rmsnorm(x, weight, eps)``, ``rope_pairs(x, positions, base)`` (GGUF's adjacent pairs), ``rope_table``,
  ``swiglu(gate, up)``: the layers of a llama block besides attention and the matrix products (day 10)
- ``round_to(x, fmt)``: the nearest fp16, bf16 or fp8 (e4m3) value
- ``quantize_fp8`` / ``dequantize_fp8``, ``fp8_e4m3_values``: fp8 e4m3 codes with a float32 scale per
  group (a page of a KV head), bit for bit; ``attention_at_precision``: attention on inputs and output
  stored at a low precision, computed exactly

Modules: ``softmax_attention`` (softmax, attention and its masks, grouped-query heads),
``paged_kv`` (the paged KV cache), ``matmul`` (GEMM), ``quantization`` (int8, uint8, int4),
``gguf`` (Q8_0, Q4_0, Q4_1, q8_1 activations, int4 in groups of 128 laid out as Q4_0's blocks), ``llama`` (RMSNorm, RoPE, SwiGLU), ``low_precision`` (fp16, bf16, fp8 rounding), ``mixed_precision`` (fp8 codes
with scales, attention at a storage precision). This package re-exports
every public name, so ``from kernels import reference; reference.attention(...)`` is the way to
call them. Modules import each other relatively: a fresh private copy of the package (what the
grader's hidden tests load) uses only fresh private copies of its modules.

Every public function checks its input and raises ``TypeError`` (wrong kind of value or dtype) or
``ValueError`` (wrong shape or value) naming the argument, what it expected and what it received.
"""

from .gguf import (GGUF_BLOCK_SIZE, INT4_G128_BLOCK_BYTES, INT4_GROUP, Q4_0_BLOCK_BYTES, Q4_1_BLOCK_BYTES,
                   Q8_0_BLOCK_BYTES, dequantize_int4_g128, dequantize_q4_0, dequantize_q4_1, dequantize_q8_0,
                   dequantize_q8_1, gemv_q8_1, quantize_int4_g128, quantize_q4_0, quantize_q4_1, quantize_q8_0,
                   quantize_q8_1)
from .llama import rmsnorm, rope_pairs, rope_table, swiglu
from .low_precision import FLOAT_FORMATS, round_to
from .matmul import gemm
from .mixed_precision import E4M3_MAX, attention_at_precision, dequantize_fp8, fp8_e4m3_values, quantize_fp8
from .paged_kv import build_paged_cache, gather_kv, paged_attention
from .quantization import (dequantize_int4_groups, dequantize_int8, dequantize_uint8_asymmetric, gemm_int8,
                           pack_int4, quantize_int4_groups, quantize_int8, quantize_uint8_asymmetric, unpack_int4,
                           w8a8_matmul)
from .softmax_attention import attention, attention_mask, attention_scores, repeat_kv_heads, softmax

__all__ = [
    "softmax", "repeat_kv_heads", "attention_scores", "attention_mask", "attention",
    "gather_kv", "paged_attention", "build_paged_cache", "gemm",
    "quantize_int8", "dequantize_int8", "quantize_uint8_asymmetric", "dequantize_uint8_asymmetric",
    "gemm_int8", "w8a8_matmul", "pack_int4", "unpack_int4", "quantize_int4_groups", "dequantize_int4_groups",
    "GGUF_BLOCK_SIZE", "Q8_0_BLOCK_BYTES", "Q4_0_BLOCK_BYTES", "Q4_1_BLOCK_BYTES",
    "quantize_q8_0", "dequantize_q8_0", "quantize_q4_0", "dequantize_q4_0", "quantize_q4_1", "dequantize_q4_1",
    "quantize_q8_1",
    "dequantize_q8_1", "gemv_q8_1", "INT4_GROUP", "INT4_G128_BLOCK_BYTES", "quantize_int4_g128", "dequantize_int4_g128",
    "rmsnorm", "rope_pairs", "rope_table", "swiglu",
    "FLOAT_FORMATS", "round_to",
    "E4M3_MAX", "fp8_e4m3_values", "quantize_fp8", "dequantize_fp8", "attention_at_precision",
]
