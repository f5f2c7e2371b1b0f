"""Analytic models of bytes moved and FLOPs, one plain function per kernel rung.

One module per operation, next to the kernel ladder it models:

- ``course.models.reduction``: elementwise and row-reduction kernels (day 1)
- ``course.models.attention``: naive, fused-rows and flash attention (days 2, 3, 5)
- ``course.models.gemm``: the GEMM ladder (day 4)
- ``course.models.gqa``: grouped-query prefill and decode, and the naive per-query-head mapping (day 7)
- ``course.models.low_precision``: day 7's kernels over fp16, bf16 and fp8 storage (day 8)
- ``course.models.quantized``: the quantized GEMV over GGUF blocks, Q8_0, Q4_0 and Q4_1 (day 9)
- ``course.models.quantized_gemm``: the W8A8 prefill GEMM, dp4a and int8 tensor cores (day 9)
- ``course.models.tensor_core_gemm``: the tensor-core GEMM on fp16 or bf16 numbers, and its shared-memory
  passes
"""
