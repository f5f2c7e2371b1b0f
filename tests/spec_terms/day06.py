"""Day 6's bounds: the cache write's slot and its threads, the decode kernel's token loop over a context's
pages (the partial last page, the offset in a page, the tokens in flight past the end, an empty context,
the channels of a lane), and the merge's partitions. The answers have no ``min(...)``: every row is a hand
row. The allocator (host Python, ``allocator_class``) is checked by its own workloads."""

from . import Term

ASSIGNMENT = "day06_paged_attention"
_WRITE, _V1, _MERGE = "cache_write_kernel", "paged_v1_kernel", "merge_kernel"

TABLE = (
    # the cache write
    Term(_WRITE, "the slot of a token in its page", "position % block_size",
         edits=(("slot = position % block_size", "slot = position & (block_size - 1)"),),
         hidden="cache_write_slots", visible="cache_write_slots",
         why="a block size that is not a power of two (3, hidden and visible): only then do pos % block_size "
             "and pos & (block_size - 1) differ"),
    Term(_WRITE, "the page of a token", "position // block_size (the last slot of a page in it)",
         edits=(("position // block_size]", "(position + 1) // block_size]"),),
         hidden="cache_write_slots", visible="cache_write_slots",
         why="a prefill across a page boundary: position block_size - 1 is the last slot of page 0"),
    Term(_WRITE, "a token of more floats than threads", "idx in range(threadIdx.x, kv_heads * d, blockDim.x)",
         edits=(("range(cuda.threadIdx.x, kv_heads * d, cuda.blockDim.x)",
                 "range(cuda.threadIdx.x, min(kv_heads * d, cuda.blockDim.x), cuda.blockDim.x)"),),
         hidden="cache_write_slots", visible="cache_write_traffic",
         why="the launch's min(128, 32·⌈kv_heads·head_dim / 32⌉) threads decided by 128: 2 x 128 floats "
             "(hidden), 2 x 80 (visible, its stores counted)"),
    # the decode kernel (v1)
    Term(_V1, "the end of the token loop: a partial last page", "context_lens[s] (not the last page's end)",
         edits=(("warp, context_lens[s], WARPS, acc)",
                 "warp, (context_lens[s] + k_cache.shape[2] - 1) // k_cache.shape[2] * k_cache.shape[2], WARPS, "
                 "acc)"),),
         hidden="paged_v1_matches_reference", visible="paged_v1_matches_reference",
         why="a context that is not a multiple of block_size: 23 and 13 tokens in pages of 4 (the tail of the "
             "last page is NaN)"),
    Term(_V1, "a token in flight past the end: its loads", "t < end",
         edits=(("if t < end:", "if True:"),),
         hidden="paged_v1_matches_reference", visible="paged_v1_matches_reference",
         why="a warp's last TOKENS_IN_FLIGHT tokens run past the context: 13 tokens over 4 warps"),
    Term(_V1, "a token in flight past the end: its score", "t0 + u * stride < end",
         edits=(("scores[u] = partial if t0 + u * stride < end else float32(-math.inf)", "scores[u] = partial"),),
         hidden="paged_v1_matches_reference", visible="paged_v1_matches_reference",
         why="a warp's last TOKENS_IN_FLIGHT tokens run past the context: 13 tokens over 4 warps"),
    Term(_V1, "the slot of a token in its page", "t % block_size",
         edits=(("slot = t % block_size", "slot = t & (block_size - 1)"),),
         hidden="paged_v1_matches_reference", visible="paged_v1_matches_reference",
         why="a block size that is not a power of two: 7 tokens in pages of 3 (hidden and visible)"),
    Term(_V1, "an empty context", "block_sum > 0",
         edits=(("channel / block_sum if block_sum > 0 else float32(0.0)", "channel / block_sum"),),
         hidden="paged_v1_mixed_lengths", visible="paged_v1_mixed_lengths",
         why="context_lens of 0: out is exactly 0"),
    Term(_V1, "no warp saw a token", "block_max > -inf (the warps' merge)",
         edits=(("if block_max > -math.inf:", "if True:"),), exempt=True,
         why="block_max is -inf only for a context of 0; the merge then gets a NaN sum, which fails the "
             "kernel's block_sum > 0 and gives 0 all the same (the row above decides the empty context)"),
    Term(_V1, "the channels of a lane", "c < d",
         edits=(("c < d", "True"),),
         hidden="paged_v1_matches_reference", visible="paged_v1_matches_reference",
         why="head_dim below HEAD_DIM_MAX: lane l's channels l + 32 k past head_dim do not exist"),
    Term(_V1, "the threads of the block past head_dim", "tid < d (out written)",
         edits=(("if tid < d:\n        out[s, h, tid]", "if True:\n        out[s, h, tid]"),),
         hidden="paged_v1_matches_reference", visible="paged_v1_matches_reference",
         why="head_dim below THREADS: threads d ... THREADS - 1 own no channel of out"),
    Term(_V1, "head_dim above WARP: CHANNELS channels per lane", "i in range(CHANNELS)",
         edits=(("range(CHANNELS)", "range(1)"),),
         hidden="paged_v1_matches_reference", visible="paged_v1_traffic",
         why="head_dim above 32: HEAD_DIM_MAX (hidden), 40 (visible, its loads of K and V counted)"),
    # the merge of v2
    Term(_MERGE, "the threads past head_dim", "c < out.shape[2]",
         edits=(("if c < out.shape[2]:", "if True:"),),
         hidden="merge_matches_reference", visible="merge_matches_reference",
         why="head_dim below HEAD_DIM_MAX: the launch's HEAD_DIM_MAX threads, of which d own a channel"),
    Term(_MERGE, "every partition, the partial last one included", "p in range(partitions)",
         edits=(("partitions = partial_max.shape[2]", "partitions = partial_max.shape[2] - 1"),),
         hidden="merge_matches_reference", visible="merge_handles_empty_partitions",
         why="P = ceil(longest context / partition_size): the last partition holds the context's tail (29 "
             "tokens in partitions of 5, scores of size 1); with scores of size 1e4 its keys weigh nothing "
             "unless the largest score is among them, so merge_matches_reference's visible check decides it "
             "only by chance"),
    Term(_MERGE, "a context of 0", "total > 0",
         edits=(("channel / total if total > 0 else float32(0.0)", "channel / total"),),
         hidden="merge_handles_empty_partitions", visible="merge_handles_empty_partitions",
         why="context_lens of 0: no partition saw a key, out is exactly 0"),
    Term(_MERGE, "no partition saw a key", "m > -inf",
         edits=(("if m > -math.inf:", "if True:"),), exempt=True,
         why="m is -inf only for a context of 0: the weights are then NaN, the sum NaN fails total > 0 and out "
             "is 0 all the same; an empty partition next to others (m finite) has weight exp(-inf - m) = 0 and "
             "sum and accumulator 0, so no weight it gets changes out"),
)
