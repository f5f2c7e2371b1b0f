"""Day 6's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day06_paged_attention"
_CACHE_WRITE = dict(cell="cache_write_kernel", kernel="kv_cache.kv_cache_write_kernel")
_PAGED_V1 = dict(cell="paged_v1_kernel", kernel="paged_attention.paged_attention_v1_block_per_head_kernel")
_MERGE = dict(cell="merge_kernel", kernel="paged_attention.paged_attention_v2_merge_kernel")
_ALLOCATOR = dict(cell="allocator_class", kernel="block_manager.BlockManager")

TABLE = (
    # kv_cache_write
    Mistake("cache_write_page_of_next_position", **_CACHE_WRITE,
            edits=(("position // block_size]", "(position + 1) // block_size]"),),
            why="the last token of each page is written into the next page: a wrong slot at a block boundary",
            names="slot_at_block_boundary",
            words=("wrong slot at a block boundary", "the last slot of page 0", "position % block_size"),
            wrong_answer=True, samples=("wrong_slot_at_block_boundary",)),
    Mistake("cache_write_block_table_ignored", **_CACHE_WRITE,
            edits=(("block = block_tables[token_seqs[t], position // block_size]", "block = position // block_size"),),
            why="the page index is taken as the block: the block table is not used",
            names="slot_table_ignored", words=("block table was not used", "block_tables[seq, page]")),
    Mistake("cache_write_one_pass_of_threads", **_CACHE_WRITE,
            edits=(("range(cuda.threadIdx.x, kv_heads * d, cuda.blockDim.x)",
                    "range(cuda.threadIdx.x, min(kv_heads * d, cuda.blockDim.x), cuda.blockDim.x)"),),
            why="one pass of the block's threads: a token of more floats than threads is cut short",
            hidden_fails="cache_write_slots", visible_misses=True),
    Mistake("cache_write_reads_the_cache", **_CACHE_WRITE,
            edits=(("        k_cache[block, head, slot, c] = k_new[t, head, c]\n",
                    "        if k_cache[block, head, slot, c] != k_new[t, head, c]:\n"
                    "            k_cache[block, head, slot, c] = k_new[t, head, c]\n"),),
            why="the cache is read to skip slots that already hold the value",
            hidden_fails="cache_write_traffic"),
    # paged_attention_v1 (the cell holds _warp_attend, _merge_warps and the kernel)
    Mistake("paged_reads_one_page_past_end", **_PAGED_V1,
            edits=(("warp, context_lens[s], WARPS, acc)",
                    "warp, (context_lens[s] // k_cache.shape[2] + 1) * k_cache.shape[2], WARPS, acc)"),),
            why="the warps walk context_lens // block_size + 1 whole pages: past the end of every context",
            names="paged_read_past_end",
            words=("past the context's end", "one page past the end was read", "NaN"),
            wrong_answer=True),
    Mistake("paged_reads_one_page_past_end_with_laneid", **_PAGED_V1,
            edits=(("lane = cuda.threadIdx.x % WARP", "lane = cuda.laneid"),
                   ("lane = tid % WARP", "lane = cuda.laneid"),
                   ("    running_max, running_sum = _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale,\n"
                    "                                            warp, context_lens[s], WARPS, acc)",
                    "    pages = context_lens[s] // k_cache.shape[2] + 1        # a page too many when the last one is full\n"
                    "    running_max, running_sum = _warp_attend(q, k_cache, v_cache, block_tables, s, h, kv_head, scale,\n"
                    "                                            warp, pages * k_cache.shape[2], WARPS, acc)")),
            why="whole pages walked, one too many when the last is full; the device functions read the lane "
                "with cuda.laneid, so the cell is not the course's",
            samples=("reads_one_page_past_end",)),
    Mistake("paged_kv_head_interleaved", **_PAGED_V1,
            edits=(("kv_head = h // (q.shape[1] // k_cache.shape[1])", "kv_head = h % k_cache.shape[1]"),),
            why="the KV head of a query head taken as h % kv_heads",
            names="paged_kv_head_interleaved", words=("h % kv_heads instead of h // (heads // kv_heads)",)),
    Mistake("paged_query_head_as_kv_head", **_PAGED_V1,
            edits=(("kv_head = h // (q.shape[1] // k_cache.shape[1])", "kv_head = h"),),
            why="the query head used as the KV head: an index past the cache's heads",
            names="kv_head_out_of_range", raises=True,
            words=("axis 1 with size 2", "is the query head used as the KV head?")),
    Mistake("paged_one_channel_per_lane", **_PAGED_V1,
            edits=(("range(CHANNELS)", "range(1)"),),
            why="each lane keeps one channel: head_dim above 32 loses channels",
            replace_all=True,      # every loop over a lane's channels, in the kernel and its device functions
            hidden_fails="paged_v1_matches_reference", visible_misses=True),
    Mistake("paged_empty_context_divides_by_zero", **_PAGED_V1,
            edits=(("out[s, h, tid] = channel / block_sum if block_sum > 0 else float32(0.0)",
                    "out[s, h, tid] = channel / block_sum"),),
            why="an empty context divides 0 by 0",
            hidden_fails="paged_v1_mixed_lengths"),
    Mistake("paged_exp_without_running_max", **_PAGED_V1,
            edits=(("p = math.exp(scores[u] - new_max)", "p = math.exp(scores[u])"),),
            why="exp of a score without the running maximum subtracted",
            hidden_fails="paged_v1_large_logits"),
    Mistake("paged_two_warps_walk_the_same_tokens", **_PAGED_V1,
            edits=(("warp, context_lens[s], WARPS, acc)", "warp % 2, context_lens[s], WARPS // 2, acc)"),),
            why="two warps walk the same tokens: right values, every key and value read twice",
            hidden_fails="paged_v1_traffic"),
    # paged_attention_v2's merge
    Mistake("merge_without_rescale", **_MERGE,
            edits=(("total += partial_sum[s, h, p] * weight\n                channel += partial_acc[s, h, p, c] * weight",
                    "total += partial_sum[s, h, p]\n                channel += partial_acc[s, h, p, c]"),),
            why="the partials are added up without rescaling them to the largest maximum",
            names="merge_not_rescaled", words=("without rescaling", "exp(partial_max[p] - m)"),
            hidden_fails="merge_matches_reference", wrong_answer=True),
    Mistake("merge_without_rescale_or_weight", **_MERGE,
            edits=(("                weight = math.exp(partial_max[s, h, p] - m)   # 0 for an empty partition\n"
                    "                total += partial_sum[s, h, p] * weight\n"
                    "                channel += partial_acc[s, h, p, c] * weight",
                    "                total += partial_sum[s, h, p]\n"
                    "                channel += partial_acc[s, h, p, c]"),),
            why="the partials are added up as they are, the weight never computed: right for one partition only",
            samples=("merge_missing_rescale",)),
    Mistake("merge_accumulator_not_rescaled", **_MERGE,
            edits=(("channel += partial_acc[s, h, p, c] * weight", "channel += partial_acc[s, h, p, c]"),),
            why="the accumulators are added up without rescaling (the sums are rescaled)",
            names="merge_acc_not_rescaled", words=("sums to more than 1", "rescale both")),
    Mistake("merge_empty_context_divides_by_zero", **_MERGE,
            edits=(("out[s, h, c] = channel / total if total > 0 else float32(0.0)", "out[s, h, c] = channel / total"),),
            why="a context of 0 divides 0 by 0",
            names="paged_empty_context", words=("context_lens[0] = 0", "write zeros instead of dividing"),
            hidden_fails="merge_handles_empty_partitions"),
    Mistake("merge_rescales_partials_in_place", **_MERGE,
            edits=(("channel += partial_acc[s, h, p, c] * weight",
                    "partial_acc[s, h, p, c] *= weight\n                channel += partial_acc[s, h, p, c]"),),
            why="the accumulators are rescaled in place: right values, the partials written",
            hidden_fails="merge_traffic"),
    # the allocator (a class, kernels/block_manager.py)
    Mistake("allocator_fork_without_references", **_ALLOCATOR,
            edits=(("self._refs[block] += 1", "pass"),),
            why="fork shares the blocks without counting the new references",
            hidden_fails="allocator_fork"),
    Mistake("allocator_without_copy_on_write", **_ALLOCATOR,
            edits=(("elif self._refs[table[-1]] > 1:", "elif False:"),),
            why="append writes into a shared last page: no copy-on-write",
            hidden_fails="allocator_copy_on_write", wrong_answer=True),
    Mistake("allocator_shares_the_token_list", **_ALLOCATOR,
            edits=(("list(table), list(self._tokens_of(seq))", "list(table), self._tokens_of(seq)"),),
            why="parent and child share one list of tokens: an append to one lengthens both",
            hidden_fails="allocator_workload"),
    Mistake("allocator_without_copy_on_write_written_differently", cell="allocator_class", kernel=None,
            sample_base="correct_alternative",
            edits=(("shared = offset > 0 and self.refcount(table[-1]) > 1", "shared = False"),),
            why="the written-differently allocator's append never copies a shared, partly filled last page",
            samples=("allocator_without_copy_on_write",)),
)
