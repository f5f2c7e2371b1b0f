"""The kernels of the course: NumPy references and ladders of numba.cuda kernels.

One module per operation. Importing ``kernels`` imports nothing else, so a notebook can still
choose the device (``course.use_device()``) before a kernel module loads numba.

- ``kernels.reference``: the float64 NumPy references every kernel is checked against, one
  module per topic (softmax and attention with causal / kv_lens / sliding window / grouped-query
  heads, paged attention, GEMM, int8 / int4 / GGUF quantization, fp16 / bf16 / fp8 rounding);
  numpy only
- ``kernels.launching``: what every launcher does first: ``cdiv`` and the ``require_*`` checks
  (arrays of a dtype and shape, bools, ints, kv_heads dividing heads), allocating the output; and
  ``WARP`` and ``FULL_MASK``, the warp's size and full mask, for every kernel module
- ``kernels.paging``: what the attention launchers of days 5 to 8 share: ``kv_lens``, block-table
  checks, split-K partial buffers, the SM count and the partitions' sizes
- ``kernels.intrinsics``: the instructions numba cannot write (bit casts, fp8 conversions, byte
  permutes, dp4a, the tensor-core mma, ldmatrix, cp.async), as llvmlite intrinsics and inline PTX, each with a
  simulator twin
- ``kernels.registry``: ``Rung`` and ``ladder``, the registry every kernel module ends with
- ``kernels.elementwise``: day 1, copy and elementwise kernels, bounds guards, grid-stride loops, 3D grids
- ``kernels.reduction``: day 1, row max and row sum (shared-memory tree, warp shuffles)
- ``kernels.probes``: day 1, probes of the memory hierarchy's bandwidths and latencies (no ladder)
- ``kernels.softmax``: day 2, row softmax, one block per row
- ``kernels.attention``: days 2 and 3, attention from three kernels to one fused pass per query row
- ``kernels.transpose``: day 4, a shared-memory tile transpose (barriers and bank conflicts)
- ``kernels.gemm``: day 4, the GEMM ladder (naive, coalesced, shared tiles, register blocking), then
  beyond the exercise: 128×128 tiles with 16-byte shared loads, an unrolled inner step, register
  double buffering, and a tile shape chosen per GPU by timing
- ``kernels.flash_attention``: day 5, tiled flash attention with causal masking and kv_lens, then
  the same kernel with head_dim fixed at compile time so its per-thread arrays live in registers,
  then register tiles of scores and outputs per thread (day 4's blocking applied to both products)
- ``kernels.paged_attention``: day 6, decode attention over a paged KV cache: one block per query
  head, then split-K partitions merged by a second kernel, then both in one launch
- ``kernels.kv_cache``: day 6, writing new tokens' keys and values into their slots of the paged cache
- ``kernels.block_pool`` and ``kernels.block_manager``: day 6, the host-side allocator of the cache's
  blocks (free list, reference counts, prefix sharing; ``append`` with copy-on-write and ``fork``)
- ``kernels.gqa_attention``: day 7, grouped-query attention: flash prefill whose tiles fold the
  query heads of a group into their rows, and split-K paged decode with one block per KV head, so
  K and V are read once per group of query heads instead of once per query head; a package, its prefill
  and its decode rungs one module each
- ``kernels.low_precision_attention``: day 8, day 7's prefill and decode over tensors stored in
  fp16, bf16 or fp8 (e4m3 codes with a scale per page) and computed in float32, then decode rungs
  that spend fewer instructions on each byte, up to tensor cores, a prefill and a decode rung for head
  sizes up to 256 and a bf16 cache, and the kernels that quantize a cache to fp8 and back; a package, one
  module per family of rungs
- ``kernels.quantized_gemv``: day 9, y = W x with W in its GGUF bytes (Q8_0, Q4_0, Q4_1): a warp per row
  decoding the fp16 scales and the nibbles in registers, then x quantized to int8 blocks (q8_1) and dp4a
- ``kernels.quantized_gemv_repacked``: day 9's ladder continued: Q4_1 weights repacked at load time for 8-byte
  loads and more bytes in flight per lane, then a decode batch of up to 16 tokens sharing each weight load
- ``kernels.quantized_gemv_wide``: day 9's ladder at the memory's speed: one launch per GEMV (each block of
  threads quantizes x into its shared memory) and a whole block's codes per 16-byte load, for Q4_1 and Q8_0
- ``kernels.quantized_gemv_persistent``: day 9's ladder continued on a persistent grid (x quantized once per
  resident block of threads, unsigned indices), for Q4_1, Q4_0 and int4 with a scale per 128
- ``kernels.quantized_gemv_prequantized``: the persistent walk on x already quantized to q8_1 by the kernel that
  made it (no prologue); its ``RUNGS`` is day 9's whole GEMV ladder
- ``kernels.quantized_gemm``: day 9, the W8A8 prefill GEMM y = (A_q W_q^T) sa sw on int8 codes with a scale
  per token and per channel: shared tiles and dp4a, then the same tiles on int8 tensor cores (mma.sync m16n8k32)
- ``kernels.tensor_core_gemm``: the tensor-core GEMM on fp16 or bf16 numbers with float32 sums, day 4's ladder
  continued: mma.sync on fragments read from shared tiles, then loaded by ldmatrix, then the tiles filled by
  16-byte cp.async copies into a ring of steps

Each kernel module lists its rungs in its docstring, one line per rung, saying what the rung
adds over the one before (``attention_v1_naive`` ... ``attention_v6_register_tiles``), and
registers them in that order in ``RUNGS``. A rung's launcher takes the kernel it launches as
``kernel=`` (the course's own by default): it validates, sizes the grid and launches it.
"""
