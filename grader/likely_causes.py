"""The likely causes a failed grade cell's feedback may name, written once by the course (``grader.feedback``
picks one per failed cell). A failing grade cell names its likely cause, never its failure. The course's
checks and diagnoses (course/checking.py, course/diagnoses/, course/exercise_checks/, course/gates.py)
explain a failure in a message that also holds the failing case: hidden sizes, block tables, seeds, a hidden
test's label. That message is never shown. Its first line that holds a *signature* (a fixed phrase of the
course's message for one cause, never a value) selects an entry of LIKELY_CAUSES, and the feedback shows
that entry's text, with no value of any test in it. The message comes from the kernel the submission ran
in, so a submission can forge it: all it can choose is which of these public sentences appears, one per
failed grade cell (like failing the cell, a few bits, never text). tests/test_feedback_causes.py checks
that every signature is a phrase of the course's own messages.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cause", "LIKELY_CAUSES", "LIKELY_CAUSES_BY_ERROR"]


@dataclass(frozen=True)
class Cause:
    """A likely cause: ``key`` (the diagnosis key of course.diagnoses, or the kind of check), the fixed
    phrases of the course's messages that name it, and what the feedback says."""

    key: str
    signatures: tuple
    text: str


def _causes(*rows) -> tuple:
    return tuple(Cause(key, (signatures,) if isinstance(signatures, str) else tuple(signatures), text)
                 for key, signatures, text in rows)


# Within one line of a message the first entry that matches wins: specific entries come before general ones.
LIKELY_CAUSES = _causes(
    # -- launches stopped by the grader's checks (course.gates, course.gpu_compile)
    ("gpu_compile", "runs in the simulator but does not compile for a GPU",
     "your kernel runs in the simulator but does not compile for a GPU, so it was not run: a GPU kernel can only "
     "use numbers, arrays and cuda.* inside its body, not Python objects, lists or NumPy functions. Run the cell "
     "in your notebook to see the compiler's reason"),
    ("input_written", "A kernel may write only its outputs",
     "your kernel wrote to one of its inputs: a kernel may write only its outputs (the tests compute the "
     "expected result from the inputs as they were); keep scratch values in registers or shared memory"),
    ("simulator_dependent", "reads what differs between the simulator and a GPU: ",
     "your kernel reads something that differs between the simulator and a GPU (numba's configuration, the "
     "simulator's modules, the environment), so it was not run: the grade is for the code a GPU would run, and a "
     "kernel must take the same path on both"),
    ("course_kernel_used", "uses the course's kernels: ",
     "your kernel calls a kernel or device function of the course's kernels package, so it was not run: an "
     "exercise is graded on your own code"),
    # -- an exception raised inside the kernel on the simulator (course.diagnoses.paged.launch_error)
    ("kv_head_out_of_range", "Axis 1 of K and V is the KV head",
     "the kernel indexed K or V past its KV heads: query head h reads KV head h // (heads // kv_heads); is the "
     "query head used as the KV head?"),
    ("query_head_out_of_range", "Axis 1 of q and o is the query head",
     "the kernel indexed q or o past its query heads: the block of KV head kv_head serves query heads "
     "kv_head * group ... kv_head * group + group - 1, with group = heads // kv_heads; is the group a fixed "
     "number in the kernel?"),
    ("key_past_end", "Axis 2 of k and v is the key",
     "the kernel indexed k or v past their last key: the keys of a row end at kv_lens[b], at most k.shape[2] "
     "(causal: also at the row's own position); is the number of keys taken from the queries instead?"),
    ("group_past_block", "A block holds the state of at most GROUP_MAX",
     "the kernel indexed past the GROUP_MAX query heads a block holds: a group larger than GROUP_MAX is split "
     "over ceil(group / GROUP_MAX) blocks per KV head, as the grid has them; is the group split into subgroups?"),
    ("page_past_table", "Axis 1 of block_tables is the page",
     "the kernel read block_tables past a row's last page: a context of n tokens uses pages "
     "0 ... ceil(n / block_size) - 1; does a loop go past the last page of the context?"),
    ("slot_past_block", "Axis 2 of the cache is the slot within a block",
     "the kernel indexed a cache slot past the end of its block: the offset of position t in its page is "
     "t % block_size"),
    # -- days 1 to 4: an index past an array, read by the exercise's own checks (course.exercise_checks)
    ("bounds_guard", "got through the bounds guard",
     "a thread past the last element got through the bounds guard: the grid rounds n up to whole blocks, so the "
     "threads at i >= n must do nothing; is the guard missing, or i <= n instead of i < n?"),
    ("output_axes_swapped", "are its last two indices swapped",
     "the kernel wrote its output past its shape: are the output's last two indices swapped (its row and col "
     "written transposed)?"),
    ("flat_guard", "must return before it reads",
     "a thread past the last element read a row that does not exist: the grid rounds the elements of a head up "
     "to whole blocks, so a thread past them must return before it reads"),
    ("key_loop_bound", ("The loop over the keys j runs past the last key",
                        "the loop over the keys j must run over all M"),
     "the loop over the keys runs over the wrong number of keys: the keys are M = v.shape[2] (p.shape[3]), not "
     "N, the number of queries"),
    ("tile_guard", ("as well as its guard along K", "tile needs its guard along K", "the store needs its guard"),
     "a tile's load, or the store, reaches past the matrix: guard each load by its row or column and by K, and "
     "load 0 where the guard fails; guard the store by row < M and col < N"),
    ("index_out_of_range", "the kernel indexed past the end of an array",
     "the kernel indexed past the end of an array (the simulator stops there; a GPU would read or write other "
     "memory without a word): check each index against the shape of the array it reads"),
    ("fp8_zero_scale", "a page of zeros has amax 0; its scale is 1",
     "division by zero in the kernel: a page of zeros has amax 0; its scale is 1 (then every code is 0), not "
     "amax / 448 = 0"),
    ("zero_division", "division by zero in the kernel",
     "division by zero in the kernel: a sequence with no key (or a merge whose partitions all saw no key) has a "
     "sum of 0; write 0 instead of dividing (on a GPU 0/0 gives NaN)"),
    ("exp_overflow", "exp(x - max) is at most 1",
     "exp overflowed in the kernel: subtract the row max before exp, so that exp(x - max) is at most 1 (on a GPU "
     "exp gives inf, and inf / inf is NaN)"),
    ("exp_overflow", "exp overflowed in the kernel",
     "exp overflowed in the kernel: subtract the running maximum from a score before exp, and rescale by "
     "exp(m_old - m_new) when the maximum grows (on a GPU exp gives inf, then NaN)"),
    # -- attention: the asserts and models of course.diagnoses.contexts
    ("row0_key0", "row 0 sees only key 0 (causal)",
     "row 0 sees only key 0 (causal), so row 0 of O must equal row 0 of V, and it does not; if it is all "
     "zeros, row 0 saw no key at all"),
    ("empty_sequence", "is an empty sequence (kv_lens[",
     "a sequence with kv_lens[b] = 0 has no key, so every row of O there must be 0: with no key the running sum "
     "stays 0; write zeros instead of dividing by it"),
    ("causal_strict", "the causal mask is j < i instead of j <= i",
     "the causal mask is j < i instead of j <= i: row i sees keys 0 ... i, its own key included (so row 0, "
     "which then sees nothing, comes out 0)"),
    ("causal_reversed", "the causal mask is reversed",
     "the causal mask is reversed: rows use keys j >= i instead of j <= i"),
    ("diagonal_unmasked", "inside the diagonal tile the keys after the row are not masked",
     "inside the diagonal tile the keys after the row are not masked: row i of a tile that crosses the "
     "diagonal must still stop at key i"),
    ("causal_missing", "the causal mask is not applied",
     "the causal mask is not applied: rows use keys after their own position (j > i)"),
    ("kv_lens_ignored", "keys at positions >= kv_lens[b] were used",
     "keys at positions >= kv_lens[b] were used: they do not exist; stop the key loop at kv_lens[b], not at "
     "the number of keys in k"),
    ("kv_lens_off_by_one", "one key too many: keys j <= kv_lens[b] were used",
     "one key too many: key kv_lens[b] does not exist; use the keys j < kv_lens[b]"),
    ("kv_lens_off_by_one", "one key too few: the last key of each sequence (j = kv_lens[b] - 1)",
     "one key too few: the last key of each sequence, j = kv_lens[b] - 1, was left out"),
    ("keys_dropped", "the last, partial tile of keys is skipped",
     "the last, partial tile of keys is skipped: loop over range(0, kv_end, TILE_KV) and let the last tile "
     "hold kv_end - kv_start keys"),
    ("acc_not_rescaled", "the accumulator is not rescaled when the running maximum grows",
     "the accumulator is not rescaled when the running maximum grows: the running sum is multiplied by "
     "exp(m_old - m_new) but the weighted sum of V is not; rescale both"),
    ("sum_not_rescaled", "the running sum is not rescaled when the running maximum grows",
     "the running sum is not rescaled when the running maximum grows: the accumulator is multiplied by "
     "exp(m_old - m_new) but the sum is not; rescale both"),
    ("attention_scale", ": the output is the attention of scores scaled by",
     "the scale of the scores is missing or applied twice: multiply q·k by the scale (1/sqrt(head_dim) unless "
     "the exercise gives another) exactly once, before the softmax"),
    # -- row reductions and GEMM (course.diagnoses.contexts)
    ("max_identity", "the running max starts at 0 instead of -inf",
     "the running max starts at 0 instead of -inf: a row whose entries are all negative comes out 0; start "
     "from float32(-math.inf)"),
    ("stride_loop", "columns were used: each thread must loop over",
     "only the first columns, one per thread, were used: each thread must loop over its columns t, "
     "t + threads, t + 2 * threads, ... (a block-stride loop)"),
    ("tree_early", ("only thread 0's own partial reached the output", "halving while the stride is > 0"),
     "the tree reduction stopped early: only some threads' partials reached thread 0; keep halving while the "
     "stride is > 0 (the last step has stride 1)"),
    ("tree_partial", "the final step must also read the partials the other warps left in shared memory",
     "only the partials of the first warps were combined: the final step must also read the partials the "
     "other warps left in shared memory"),
    ("tree_partial", "were combined: the tree must start at stride",
     "only the partials of the first threads were combined: the tree must start at a stride of half the block"),
    ("shuffle_partial", "of each warp were combined, in every warp",
     "only the first lanes of each warp were combined: the shuffles within a warp must start at offset 16 "
     "(WARP_SIZE // 2), half the warp"),
    ("k_steps_dropped", "the last, partial step along K is lost",
     "the last, partial step along K is lost (K is not a multiple of the tile): loop over ceil(K / TILE) steps, "
     "range(0, K, TILE), and load zeros where a tile hangs over the edge"),
    ("tile_offset_k", "every step along K loads the first tile of",
     "every step along K loads the first tile again: the step's offset (k0 + tx in A's column index, k0 + ty in "
     "B's row index) is missing"),
    ("transposed_operand", "B is read transposed",
     "B is read transposed: b[col, k] instead of b[k, col]"),
    # -- barriers read from the kernel's source (course.diagnoses.barriers)
    ("divergent_barrier", "sits inside code that depends on the thread",
     "a barrier sits inside code that depends on the thread: threads that skip it never arrive, so on a GPU the "
     "block hangs or reads tiles that are not ready (the simulator does not notice). Every thread of a block "
     "must meet the same barriers: take loop bounds from the block and let threads without work skip the "
     "computation, not the barrier"),
    ("early_return_barrier", "they never load their part of the tile and never arrive at the barrier",
     "some threads return before a barrier: they never load their part of the tile and never arrive at the "
     "barrier. Keep every thread through the barriers: guard the loads (load a neutral value, 0 outside the "
     "matrix) and the final store instead"),
    ("missing_barrier", ("with no barrier between one pass and the next",
                         "a fast thread overwrites values others still read",
                         "a thread reads slots other threads have not written yet"),
     "a loop writes and reads a shared array with no barrier in between: a thread can read a slot before "
     "another thread wrote it, or after the next pass overwrote it. Put a barrier (cuda.syncthreads) between "
     "the writes and the reads, and at the end of the loop body"),
    # -- day 6: the paged KV cache (course.diagnoses.paged)
    ("slot_at_block_boundary", "wrong slot at a block boundary: ",
     "wrong slot at a block boundary: only tokens in the first or last slot of a page land in the wrong place. "
     "The page of a position is position // block_size, its offset in the page position % block_size, and the "
     "block that holds the page is block_tables[seq, page]"),
    ("slot_table_ignored", "is the page number itself; the page of a position is position // block_size",
     "the block table was not used: a token went into the block whose number is its page. The page of "
     "a position is position // block_size, and block_tables[seq, page] names the physical block"),
    ("slot_offset", "wrong offset within the block: ",
     "wrong offset within the block: a token landed in its block, but in another slot. The offset of a "
     "position in its page is position % block_size"),
    ("slot_wrong", "the slot of a token is slot position % block_size of block",
     "a token went into the wrong slot: the slot of a token is slot position % block_size of block "
     "block_tables[seq, position // block_size]"),
    ("cache_write_extra", "A write touches only the slots of the new tokens",
     "slots that hold no new token changed: a write touches only the slots of the new tokens; the rest of the "
     "cache holds other sequences' keys and values"),
    ("cache_write_v_missed", "k_cache is right but v_cache is not",
     "k_cache is right but v_cache is not: is every value row copied too, from v_new into v_cache at the same "
     "slot as its key?"),
    ("cache_write_not_exact", "close to the expected values but not equal; a copy must move each value unchanged",
     "the cache is close to the expected values but not equal: a copy must move each value unchanged"),
    ("paged_empty_context", ("With no key the running sum stays 0: write zeros instead of dividing",
                             "must be exactly 0 for every head (write zeros when the sum is 0)"),
     "a sequence with context_lens[s] = 0 has no key, so its output must be exactly 0 for every head: with no "
     "key the running sum stays 0; write zeros instead of dividing by it, and read no page (it has none)"),
    ("paged_partial_nan", "NaN in some channels of out[",
     "NaN in some channels of a row only: a slot read past a context's end would spoil every channel of the "
     "row, since its score enters the sum; a value that was never written does not. Is every channel < "
     "head_dim computed (lane l holds channels l, l + 32, ...), and every slot of a shared or local array "
     "written before it is read?"),
    ("paged_read_past_end", "only sequences whose last page is partial are wrong",
     "the kernel read a cache slot past a context's end (the tests fill every slot that holds no key with NaN), "
     "and only sequences whose last page is partial are wrong: the tail of the last page was read; stop the "
     "token loop at context_lens[s], not at the end of the last page"),
    ("paged_read_past_end", "only sequences whose last page is full are wrong",
     "the kernel read a cache slot past a context's end (the tests fill every slot that holds no key with NaN), "
     "and only sequences whose last page is full are wrong: one page past the end was read; a context of n "
     "tokens uses pages 0 ... ceil(n / block_size) - 1"),
    ("paged_read_past_end", "Here every cache slot that holds no key of a sequence is NaN",
     "the kernel read a cache slot past a context's end or a padding entry of block_tables (the tests fill "
     "every slot that holds no key with NaN, and pad table rows with -1): does the token loop stop at "
     "context_lens[s], and is block_tables[s, t // block_size] read only for t < context_lens[s]?"),
    ("paged_kv_head_interleaved", "query head h read KV head h % kv_heads instead of h // (heads // kv_heads)",
     "query head h read KV head h % kv_heads instead of h // (heads // kv_heads): the query heads that share a "
     "KV head are neighbours, not one in every kv_heads"),
    ("paged_kv_head_wrong_group", "query heads share each KV head: compute the group from the shapes",
     "query heads were mapped to KV heads with a wrong group size: compute the group from the shapes, "
     "group = q.shape[1] // k.shape[1], never a fixed number"),
    ("gqa_heads_unwritten", "never written, while others were: a block of KV head kv_head serves query heads",
     "some query heads were never written while others were: a block of KV head kv_head serves query heads "
     "kv_head * group ... kv_head * group + group - 1, with group = heads // kv_heads. Does every row of the "
     "block map to a different query head?"),
    ("gqa_tile_partly_loaded", "and the output fits no model of another mistake: does every thread load elements",
     "a block has fewer rows (threads) than its K tile has elements, and the output fits no model of another "
     "mistake: does every thread load elements t, t + rows, ... of the tile, until all of it is loaded?"),
    ("paged_table_ignored", "the block table was not used: position t was read from block t // block_size",
     "the block table was not used: position t was read from block t // block_size, as if the cache were "
     "contiguous; its page is t // block_size, and block_tables[s, page] names the physical block that holds it"),
    ("paged_last_key_dropped", "one key too few: the last key of each sequence (position context_lens[s] - 1)",
     "one key too few: the last key of each sequence (position context_lens[s] - 1) was left out; use every "
     "t < context_lens[s]"),
    ("paged_partial_page_dropped", "the last, partial page of each sequence was left out",
     "the last, partial page of each sequence was left out: a context of n tokens has ceil(n / block_size) "
     "pages, the last one holding n - (pages - 1) * block_size tokens"),
    ("merge_not_rescaled", "the partials were merged without rescaling them",
     "the partials were merged without rescaling them: each partition's sum and accumulator are relative to its "
     "own maximum partial_max[p], so before adding them up multiply both by exp(partial_max[p] - m), m the "
     "largest partial maximum of the (sequence, head)"),
    ("merge_acc_not_rescaled", "a row sums to more than 1: the partial sums were rescaled by",
     "the partial sums were rescaled by exp(partial_max[p] - m) but the accumulators were not; rescale both"),
    ("merge_sum_not_rescaled", "the accumulators were rescaled by exp(partial_max[p] - m) but the partial sums",
     "the accumulators were rescaled by exp(partial_max[p] - m) but the partial sums were not, so the weights "
     "no longer sum to 1; rescale both"),
    # -- day 8: low precision (course.diagnoses.precision, course.exercise_checks.day08)
    ("lowp_unscaled_logits", "while rows of small logits are right. In fp16, numbers past 2048",
     "rows whose q·k before the scale is large are wrong while rows of small logits are right: in fp16, numbers "
     "past 2048 are 2 or more apart and none passes 65504. Convert each element to float32 as it is loaded and "
     "scale q there, before any product"),
    ("lowp_accumulation", "the error grows with the number of keys a row sums",
     "the error grows with the number of keys a row sums: a sum over the keys is kept in low precision. Keep the "
     "accumulator, the running sum, the running maximum and the scores in float32; only the loads convert from "
     "the storage format, and only the store to the output rounds to it"),
    ("lowp_rounding", "the output is close to the reference (off by at most",
     "the output is close to the reference but further off than storing in the low-precision format costs: a "
     "value between the loads and the store is rounded. Convert each element to float32 as it is loaded, keep "
     "everything in float32, and round once, at the store"),
    ("fp8_truncated", "your codes round toward zero",
     "your fp8 codes round toward zero: round to the nearest e4m3 number instead; a value halfway between two "
     "goes to the one with an even code"),
    ("fp8_ties_away", "values exactly halfway between two e4m3 numbers go away from zero in your codes",
     "values exactly halfway between two e4m3 numbers go away from zero in your codes: ties go to the even code "
     "(the one whose last mantissa bit is 0)"),
    ("fp8_nan_not_saturated", "values beyond 448 (and infinities) became NaN (0x7f)",
     "values beyond 448 (and infinities) became NaN: e4m3fn has no infinity, and a KV cache saturates: anything "
     "past 448 is stored as 448 (0x7e, or 0xfe when negative)"),
    ("fp8_subnormals_flushed", "values below 2**-6, e4m3's smallest normal number, became 0",
     "values below 2**-6, e4m3's smallest normal number, became 0: below it e4m3 keeps subnormals, steps of "
     "2**-9, and rounds to the nearest of them"),
    ("fp8_scale_reciprocal", "your codes encode x * (1 / scale)",
     "your codes encode x * (1 / scale): 1 / scale is rounded to float32, so ties land beside the exact value "
     "and round the other way. Divide: y = x / scale is one correctly rounded division"),
    ("fp8_scale_multiplied", "your codes encode x * scale: ",
     "your codes encode x * scale: a code stores x / scale (the scale brings a page's largest |x| to 448)"),
    ("fp8_scale_global", "every page got the same scale, that of the whole cache",
     "every page got the same scale, that of the whole cache: the scale is one per group (a page of one KV "
     "head), from the largest |x| of that group"),
    ("fp8_scale_signed_max", "the scales come from the largest x, not the largest |x|",
     "the scales come from the largest x, not the largest |x|: take the maximum of abs(x)"),
    ("fp8_scale_other", "times amax / 448: scale = amax / 448",
     "the scales are off by a constant factor: scale = amax / 448, where amax is the largest |x| of the group "
     "and 448 e4m3's largest value (a group of zeros gets 1)"),
    ("fp8_rule", "the code of y = x / scale is the e4m3 number nearest to y",
     "some fp8 codes differ from the reference: the code of y = x / scale is the e4m3 number nearest to y "
     "(ties to the even code), subnormals included, +-448 past 448, 0x7f for NaN, the sign in bit 7"),
    ("fp16_cache", "the cache is stored in fp16: convert each element to float32 as it is loaded",
     "the cache is stored in fp16: convert each element to float32 as it is loaded and keep every score, "
     "maximum, sum and accumulator in float32"),
    # -- day 9: quantized blocks (course.diagnoses.quantized, course.exercise_checks.day09)
    ("q8_0_ties_to_even", "went to the even code: Python's round() and rint round half to even",
     "values halfway between two codes went to the even code (Python's round(), rint): the reference is C's "
     "roundf, halves away from zero; round by hand: truncate, then one step away from zero when the rest is at "
     "least 0.5"),
    ("q8_0_truncated", "your codes are x * (1 / d) cut toward zero",
     "your Q8_0 codes are cut toward zero: round to the nearest integer, halves away from zero"),
    ("q8_0_divided", "your codes round x / d: the reference rounds x * (1 / d)",
     "your codes round x / d: the reference multiplies by the block's inverse 1 / d, rounded to float32 once, "
     "and the two round some ties differently"),
    ("q8_0_zero_block", "where 1 / d is inf and 0 * inf is NaN",
     "a block of zeros (or of values so small that 1 / d overflows) gave NaN codes: take the inverse only when "
     "d > NO_INVERSE (the largest float32 whose inverse overflows), else 0, so that those codes are 0"),
    ("q8_0_code_out_of_range", "past int8's -128 ... 127, which the simulator refuses to store",
     "a code came out past int8's range: d is too small for its block; d = amax / 127 with amax the largest |x| "
     "of the block (of abs(x), over 127)"),
    ("q8_0_scale_per_row", ("your codes use one scale per row", "every block of a row got the row's scale"),
     "one scale per row was used: d is one per block of 32, the largest |x| of that block over 127"),
    ("q8_0_scale_signed_max", ("your codes use the largest x of each block, not the largest |x|",
                               "the scales come from the largest x of each block, not the largest |x|"),
     "the scales come from the largest x of each block, not the largest |x|: take the maximum of abs(x)"),
    ("q8_0_scale_divisor", ("your codes use d = amax / 128", "times amax / 127: d = amax / 127"),
     "the scales are off by a constant factor: d = amax / 127, amax the largest |x| of the block"),
    ("q8_0_block_guard", "a warp past the last block indexed row",
     "a warp past the last block of 32 read or wrote past the arrays: the last thread block may hold warps with "
     "no block; guard each warp's whole work with warp < rows * blocks"),
    ("q8_0_bytes", "(d rounded to fp16, then the 32 codes of each block)",
     "the Q8_0 bytes packed from your codes and scales differ from the reference's: check the codes"),
    ("q8_0_rule", "a code is round(x * (1 / d)), 1 / d in float32 once per block",
     "some Q8_0 codes differ from the reference: a code is round(x * (1 / d)) with d = amax / 127, 1 / d in "
     "float32 once per block, halves away from zero, and 0 in a block of zeros"),
    ("q4_1_nibbles_swapped", "your y reads the nibbles the other way round",
     "the nibbles are read the other way round: byte j of a Q4 block holds weight j in its low nibble "
     "(byte & 0x0F) and weight j + 16 in its high nibble (byte >> 4)"),
    ("q4_1_nibbles_interleaved", "your y takes the two nibbles of byte j as neighbouring weights",
     "the two nibbles of byte j were taken as neighbouring weights 2j and 2j + 1: in GGUF's Q4 blocks byte j "
     "holds weight j (low nibble) and weight j + 16 (high nibble)"),
    ("q4_1_d_m_swapped", "your y swaps d and m",
     "d and m are swapped: a Q4_1 block starts with d (bytes 0-1), then m (bytes 2-3); weight j is d q_j + m"),
    ("q4_1_minimum_forgotten", "your y leaves out the block minimum m",
     "the block minimum m is left out: a block adds d sum_j q_j x_j + m sum_j x_j"),
    ("q4_1_minimum_once", "your y adds each block's minimum m once",
     "each block's minimum m is added once, not times the block's sum of x: every weight of the block carries m"),
    ("q4_1_minimum_without_x", "your y adds the minimum m once for every weight, without its activation",
     "the minimum m was added for every weight without its activation: weight j is d q_j + m, and all of it "
     "multiplies x_j"),
    ("q4_1_scale_per_row", "your y uses the d and m of a row's first block",
     "the d and m of a row's first block were used for every block: each block of 32 weights has its own d and "
     "m, in its own first 4 bytes"),
    ("q4_1_offset_8", "your y subtracts 8 from every code",
     "8 is subtracted from every code, as in Q4_0: Q4_1's codes are unsigned and its minimum m does the "
     "offset's work"),
    ("q4_1_row_guard", "a warp past the last row read or wrote row",
     "a warp past the last row read or wrote past the arrays: when N is not a multiple of GEMV_WARPS the last "
     "thread block has warps without a row; guard each warp's whole work with row < w.shape[0]"),
    ("q4_1_traffic_w", ("each byte of codes was loaded twice, once for each of its nibbles",
                        "d and m were loaded again for every",
                        "each of the 20 bytes of a block must be read once"),
     "W's bytes were read more than once: d and m once per block, and each byte of codes once for both of its "
     "nibbles (load it into a variable, then take byte & 0x0F and byte >> 4)"),
    ("q4_1_traffic_x", "a block's 32 activations serve its dot product and its sum",
     "the activations were loaded more than once per row: load each activation of a block once and use it for "
     "both the dot product and the block's sum"),
    ("q4_1_traffic_y", "one lane of the row's warp writes y[row], once",
     "y was not written exactly once per row: one lane of the row's warp writes y[row], once"),
    ("q4_1_rule", "a block is d (bytes 0-1, fp16), m (bytes 2-3, fp16), then 16 bytes",
     "y differs from W x: a Q4_1 block is d (bytes 0-1, fp16), m (bytes 2-3, fp16), then 16 bytes whose byte j "
     "holds weight j in its low nibble and weight j + 16 in its high nibble; weight j is d q_j + m"),
    ("w8a8_accumulator_int16", ("your sums wrapped around as an int16 does", "past int16's range"),
     "the sums wrapped around as an int16 does: an int16 holds one product of two int8 codes, not a sum of K of "
     "them; keep the accumulators in int32, as dp4a's c is"),
    ("w8a8_accumulator_int8", ("your sums wrapped around as an int8 does", "past int8's range, which the simulator"),
     "the sums wrapped around as an int8 does: an int8 holds one code, not a product or a sum of them; keep the "
     "accumulators in int32, as dp4a's c is"),
    ("w8a8_scales_swapped", "your y takes the scales the other way round",
     "the scales are taken the other way round: sa holds one scale per token (a row of y), sw one per output "
     "channel (a column of y): y[m, n] = sa[m] sw[n] times the sum"),
    ("w8a8_scale_missing", "times the exact sum, each scale once, the token's sa[m]",
     "a scale is left out of y: y[m, n] = sa[m] sw[n] times the exact sum, the token's scale and the channel's, "
     "each once"),
    ("w8a8_k_words", ("never entered the sum. a_q and w_q are (rows, K / 4) uint32 words",
                      "the loop over a step's words must take all 8"),
     "some codes of each row never entered the sum: a_q and w_q are (rows, K / 4) uint32 words of 4 codes, and "
     "the loop over K runs over all a_q.shape[1] words, 8 a step, the last step included"),
    ("w8a8_scale_inside_sum", "more float32 rounding than one scaling of an exact sum can",
     "y carries more float32 rounding than one scaling of an exact sum makes: the scales entered the sum before "
     "it was complete (per product, per dp4a or per step); sum the products exactly in an int32 to the end of K, "
     "then multiply by sa[m] and sw[n] once per output"),
    ("w8a8_unwritten", (") were never written", "were never written, the first at token",
                        "only the first 16 rows and 16 columns of each 64 x 64 tile"),
     "some outputs of y were never written: each thread writes every one of its 4 x 4 outputs that lies inside y "
     "(row < M = a_q.shape[0], col < N = w_q.shape[0]; shape[1] counts a row's words, K / 4)"),
    ("w8a8_scale_index", "the kernel read a scale past the end of sa or sw",
     "a scale was read past the end of sa or sw: sa has one scale per token (M), sw one per output channel (N); "
     "sa takes the row index, sw the column index, each under its guard"),
    ("w8a8_store_guard", "a thread wrote y past its last token or channel",
     "a thread wrote y past its last token or channel: the grid covers M and N in whole 64 x 64 tiles; guard "
     "the store with row < M and col < N"),
    ("w8a8_load_guard", "the kernel read a row of a_q or w_q past the last token or channel",
     "a row of a_q or w_q past the last token or channel was read: the rows of a tile past M = a_q.shape[0] or "
     "N = w_q.shape[0] hold zeros, without a load"),
    ("w8a8_k_past_end", "the kernel read a word past the end of a row of a_q or w_q",
     "a word past the end of a row was read: a_q and w_q are (rows, K / 4) uint32 words, so the loop over K "
     "runs over a_q.shape[1] words, not K codes"),
    ("w8a8_rule", "the sum exact in int32 over all K codes, then scaled once",
     "y differs from the reference: y[m, n] = sa[m] sw[n] sum_k a_q[m, k] w_q[n, k], the sum exact in int32 over "
     "all K codes, then scaled once"),
    # -- day 6: the allocator (course.exercise_checks.day06_allocator)
    ("allocator_wrote_shared", "a shared block must never be written",
     "your allocator wrote into a block another sequence also holds: a shared block must never be written "
     "(copy-on-write: copy it first, then write the copy)"),
    ("allocator_refcount", "a count is the number of sequences whose table holds the block",
     "a reference count is wrong: a block's count is the number of sequences whose table holds it"),
    ("allocator_free_blocks", "are held by no sequence",
     "the free blocks the pool reports are not the blocks no sequence holds: a block whose count drops to 0 "
     "goes back to the pool, once"),
    ("allocator_fork_table", "a fork shares every block of the parent",
     "a fork must give the child the parent's table: it shares every block of the parent"),
    ("allocator_fork_takes", "a fork takes no block",
     "a fork took free blocks: a fork takes no block (nothing is copied until someone appends to a shared page)"),
    ("allocator_copy_missing", "the table must get a private copy in its place",
     "an append to a shared last page must first copy it: the table gets a private copy in its place, and the "
     "shared block stays held by the others"),
    ("allocator_copy_unshared", "copy only a shared page",
     "a last page held by this sequence only was copied: copy only a shared page"),
    ("allocator_copy_full", "a new page needs no copy",
     "a page was copied although the last page was full: a new page needs no copy"),
    ("allocator_new_page", "the table must gain one block",
     "an append to a full last page (or to an empty sequence) must add one new block to the table"),
    ("allocator_table_changed", "so the table must not change",
     "the last page had room and nobody else held it, so the table must not change"),
    ("allocator_copy_blocks", "a copy-on-write takes exactly one block",
     "a copy-on-write takes exactly one free block (and the shared one stays held by the others)"),
    ("allocator_free_count", ("writing into the last page takes none", "taking one new page takes one"),
     "the number of free blocks changed by the wrong amount: writing into the last page takes none, taking a "
     "new page takes one"),
    ("allocator_out_of_blocks_late", "call _reserve before taking or releasing anything",
     "OutOfBlocks was raised after the tables or counts changed: a failing call must change nothing; call "
     "_reserve before taking or releasing anything"),
    ("allocator_out_of_blocks_needless", ("the token goes into it, no block is needed", "never needs a free block"),
     "OutOfBlocks was raised where no free block is needed (a fork, or an append into a last page that has "
     "room and is not shared)"),
    ("allocator_raised", ("it raised ", "creating the allocator ("),
     "a call of your allocator raised an exception (a NotImplementedError: a method is not written yet); run the "
     "cell to see which call"),
    # -- counted traffic (course.exercise_checks: *_traffic_problems, check_*_traffic)
    ("traffic_launches", ("expected one launch of", "one kernel launch expected; launches seen"),
     "the counted traffic did not show one launch of your kernel: the launcher must launch your kernel, once"),
    ("traffic_masked_tiles", ("masking the key tiles above the diagonal is not enough",
                              "The block of query rows r0..r1 needs keys"),
     "a block loaded key tiles it does not need: masking the key tiles above the diagonal is not enough, skip "
     "them (the block of query rows r0..r1 needs keys 0 ... min(kv_len, r1 + 1) - 1 when causal), and load no "
     "key at or past kv_lens[b]"),
    ("traffic_stores", ("stores counted", "stores expected", "C was stored ", " stores); counted: "),
     "the counted stores break the budget: the kernel may write only its output, each element exactly once"),
    ("traffic_shared", (" shared stores for ", " shared loads, budget "),
     "the counted shared-memory traffic is over the budget the cell's first line states: keep values in "
     "registers (a warp reduces with shuffles), and load each shared value once where it is reused"),
    ("traffic_two_pass", "two passes over the keys (one for the maximum",
     "K was read twice over: two passes over the keys, one for the maximum and one for the sum? The online "
     "softmax reads each key once: keep a running maximum, and rescale the running sum and the accumulator "
     "when it grows"),
    ("traffic_causal_end_without_n", "exactly what the blocks load if the causal key end forgets N",
     "the blocks loaded keys no query sees: in the last, partial tile of positions the causal key end is the "
     "block's last existing position, N - 1, so the keys a block needs end at min(kv_lens[b], tile_start + "
     "positions, N)"),
    ("traffic_loads", ("loads counted", " was loaded ", " times; budget: ", "your kernel loaded ",
                       " loads of q); "),
     "the counted loads break the budget the cell's first line states: an input is read more often than the "
     "algorithm needs (reuse what a block loaded, in registers or shared memory), or part of it is never read"),
    # -- course.checking.check: the output's shape, then the patterns of course.diagnoses.patterns
    ("out_shape_swapped", "the same sizes in another order; are two dimensions swapped (transposed)?",
     "the output has the right sizes in another order: are two dimensions swapped (transposed)?"),
    ("unwritten", "elements were never written (they still hold the poison)",
     "some elements were never written (they still hold the poison): is the grid large enough to cover every "
     "element (a ceiling division), or is the bounds guard too strict?"),
    ("zeros", "is all zeros: did the kernel run",
     "the output is all zeros: did the kernel run, and was the result copied back from the device?"),
    ("empty_row_nan", "NaN in a row whose reference is all zeros",
     "NaN in a row whose reference is all zeros: a row with no allowed key (every entry masked, or an empty "
     "sequence) has a running sum of 0, and 0/0 is NaN: when the sum is 0, write zeros instead of dividing"),
    ("masked_nan", "the rows that have masked entries (probability 0, from a -inf logit) came out NaN",
     "the rows that have masked entries came out NaN or all zero: exp(-inf - (-inf)) is exp(NaN). When both "
     "maxima of a rescale or a merge are -inf, skip the exp and keep the empty state (max -inf, sum 0)"),
    ("nonfinite", "inf where the reference is finite: exp of a large input overflows",
     "the kernel produced NaN or inf where the reference is finite: exp of a large input overflows, so subtract "
     "the row max before exp; a division by a zero sum (a row with every key masked) gives NaN too"),
    ("rows_not_divided", "the rows are never divided by their sum",
     "each row is exp(x - row max), its largest entry 1: the rows are never divided by their sum"),
    ("column_loop", "one thread per column leaves the rest out",
     "the columns past a block's threads were never written: one thread per column leaves the rest out; loop "
     "over the columns, col = threadIdx.x, threadIdx.x + blockDim.x, ... while col < head_dim"),
    ("transposed", "is the transpose of the expected result",
     "the output is the transpose of the expected result: somewhere [col, row] is indexed instead of "
     "[row, col], or the x and y of the grid are exchanged"),
    ("scale", "is the negative of the expected result: a sign is flipped",
     "the output is the negative of the expected result: a sign is flipped"),
    ("scale", "every element is off by the same factor",
     "every element is off by the same factor: a scale is missing, applied twice or inverted (e.g. the "
     "1/sqrt(head_dim) of attention scores)"),
    ("temperature", "the rows are a softmax of logits multiplied by",
     "the rows are a softmax of logits multiplied by a wrong factor: the scale applied before exp is missing "
     "or wrong (e.g. 1/sqrt(head_dim))"),
    ("row_sums", "rows do not sum like the reference",
     "rows do not sum like the reference: is the running sum rescaled by exp(m_old - m_new) when the max grows, "
     "and is every entry's exp added to the sum exactly once, against the same max as the numerator?"),
    ("row_scale", "the normalisation differs per row",
     "some rows are the right row times a factor of their own: is the running sum rescaled when the running "
     "max changes, and is each row divided by its own final sum?"),
    ("slices", "Check how the grid's y/z block indices map to",
     "only some (batch, head) slices are wrong: check how the grid's y/z block indices map to them (and, with "
     "grouped-query attention, the KV head h // group)"),
    ("first", "is treated differently; a loop that starts at 1",
     "only the first index is wrong: a loop that starts at 1, or an initial value (a running max of 0 instead "
     "of -inf, a sum not reset) used in place of the first element?"),
    ("last", "is wrong: an off-by-one at the end",
     "only the last index is wrong: an off-by-one at the end, like range(n - 1) or a guard i < n - 1 instead of "
     "i < n"),
    ("tile_edge", "so that tile is partial): check the bounds at the tile edge",
     "only the last, partial tile is wrong: guard every load and store with index < n at the tile edge, and "
     "load a neutral value (0, or -inf for scores) where a tile runs past the end"),
    ("last_tile", "does the loop over tiles stop one tile early",
     "only the last tile is wrong: does the loop over tiles stop one tile early, or is the last tile's offset "
     "computed differently?"),
    ("first_tile", "the first pass through the tile loop starts from a wrong state",
     "only the first tile is wrong: the first pass through the tile loop starts from a wrong state (running "
     "max 0 instead of -inf, an accumulator not zeroed) or loads the first tile wrong"),
    ("tile_offset", "tile except the first is wrong: the tile offset",
     "every tile except the first is wrong: the tile offset (tile index x tile size) is missing or wrong in one "
     "place, so later tiles read or write tile 0's elements"),
    ("tile_boundary", "of each tile is wrong: an off-by-one where tiles meet",
     "only the first or last index of each tile is wrong: an off-by-one where tiles meet (a loop bound, or a "
     "load index shifted by one)"),
    ("spread", "no single element is far off, but the errors add up",
     "no single element is far off, but the errors add up: is something computed in lower precision than "
     "float32 (a float16 accumulator, rounded inputs), or a term missing that is small everywhere?"),
    ("no_pattern", "no simple pattern found: print a few wrong elements",
     "the checks found no simple pattern: print a few wrong elements next to the reference on a small case, "
     "and follow one of them through the kernel by hand"),
)
# By the error's name, when no line of its message names a cause (the message is the simulator's).
LIKELY_CAUSES_BY_ERROR = {
    "NotImplementedError": Cause(
        "not_answered", (), "the answer is not written yet: the code it runs still raises NotImplementedError"),
    "OverflowError": Cause(
        "exp_overflow", (), "a math function overflowed in the kernel (the simulator raises where a GPU gives inf, then "
        "NaN): is exp's argument at most 0, a score minus the maximum of its row, found before it is used?"),
    "NameError": Cause(
        "name_missing", (), "a name the cell uses is not defined when graded: only kernels, device functions, "
        "constants and imports of math, numpy and numba run from an answer cell (the rest shows as "
        "`# [not run when graded]`); does the answer need a line that is not one of them?"),
}
