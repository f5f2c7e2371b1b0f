"""Day 9's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day09_quantized_gemv"
_QUANTIZE = dict(cell="quantize_kernel", kernel="quantized_gemv.q8_0_quantize_kernel")
_GEMV = dict(cell="gemv_kernel", kernel="quantized_gemv.q4_1_gemv_warp_per_row_kernel")
_CODE = "codes[row, b * QK + lane] = round_half_away(v * inverse)"
_DOT = "dot += float32(byte & 0x0F) * low + float32(byte >> 4) * high"
_D_M = ("d = half_from_bytes(w[row, b, 0], w[row, b, 1])\n"
        "            m = half_from_bytes(w[row, b, 2], w[row, b, 3])")
_GEMM = dict(cell="gemm_kernel", kernel="quantized_gemm.w8a8_gemm_v1_dp4a_kernel")
_ACC = "acc = cuda.local.array((THREAD_M, THREAD_N), int32)"
_STORE = "y[row, col] = float32(acc[i, j]) * row_scale[i] * col_scale[j]"
_SCALES = ("    # The epilogue: the exact int32 sum to float32, times the token's scale, times the channel's.\n"
           "    row_scale = cuda.local.array(THREAD_M, float32)\n"
           "    col_scale = cuda.local.array(THREAD_N, float32)\n"
           "    for i in range(THREAD_M):\n"
           "        if row0 + ty + i * THREADS_Y < m:\n"
           "            row_scale[i] = sa[row0 + ty + i * THREADS_Y]\n"
           "    for j in range(THREAD_N):\n"
           "        if col0 + tx + j * THREADS_X < n:\n"
           "            col_scale[j] = sw[col0 + tx + j * THREADS_X]\n")
_K_LOOP = "    for k0 in range(0, a_q.shape[1], K_WORDS):\n"
# the written-differently GEMM of the samples
_ALT_ACC = "sums = cuda.local.array((THREAD_M, THREAD_N), int32)"

TABLE = (
    # the Q8_0 quantizer
    Mistake("q8_0_ties_to_even", **_QUANTIZE,
            edits=((_CODE, "codes[row, b * QK + lane] = round(v * inverse)"),),
            why="Python's round(), halves to even, instead of C's roundf (halves away from zero)",
            hidden_fails="quantize_rounds_like_the_reference", wrong_answer=True,
            feedback=(("q8_0_quantize_matches_reference", ("went to the even code", "halves away from zero")),)),
    Mistake("q8_0_round_adding_half", **_QUANTIZE,
            edits=((_CODE, "codes[row, b * QK + lane] = int32(v * inverse + (float32(0.5) if v >= float32(0.0) "
                           "else float32(-0.5)))"),),
            why="C's roundf as (int)(v + 0.5): v = 0.49999997 (x = d / 2 where d (1 / d) is just below 1) gives 1",
            hidden_fails="quantize_rounds_like_the_reference",
            feedback=(("q8_0_quantize_matches_reference", ("add 0.5", "0.49999997 + 0.5 rounds to 1.0")),)),
    Mistake("q8_0_truncated", **_QUANTIZE,
            edits=((_CODE, "codes[row, b * QK + lane] = int32(v * inverse)"),),
            why="the codes truncated toward zero instead of rounded",
            feedback=(("q8_0_quantize_matches_reference", ("cut toward zero",)),)),
    Mistake("q8_0_divided_by_d", **_QUANTIZE,
            edits=((_CODE, "codes[row, b * QK + lane] = round_half_away(v / d if d > float32(NO_INVERSE) "
                           "else float32(0.0))"),),
            why="x divided by d instead of multiplied by the block's float32 1 / d: ties round the other way",
            feedback=(("q8_0_quantize_matches_reference", ("your codes round x / d", "multiply by the block's "
                                                                                   "inverse")),)),
    Mistake("q8_0_zero_block_unguarded", **_QUANTIZE,
            edits=(("inverse = float32(1.0) / d if d > float32(NO_INVERSE) else float32(0.0)",
                    "inverse = float32(1.0) / d"),),
            why="1 / d taken for every block: a block of zeros gets NaN codes",
            hidden_fails="quantize_edge_blocks",
            feedback=(("q8_0_quantize_edge_blocks", ("a block of zeros has d = 0", "NO_INVERSE")),)),
    Mistake("q8_0_scale_per_row", **_QUANTIZE,
            edits=(("d = warp_max(abs(v)) / float32(127.0)",
                    "amax = float32(0.0)\n"
                    "        for i in range(lane, x.shape[1], WARP):\n"
                    "            amax = max(amax, abs(x[row, i]))\n"
                    "        d = warp_max(amax) / float32(127.0)"),),
            why="one scale per row (the row's largest |x|) instead of one per block of 32",
            hidden_fails="quantize_scales_per_block",
            feedback=(("q8_0_quantize_scales_per_block", ("every block of a row got the row's scale",)),
                      ("q8_0_quantize_matches_reference", ("one scale per row",)))),
    Mistake("q8_0_scale_signed_max", **_QUANTIZE,
            edits=(("d = warp_max(abs(v)) / float32(127.0)", "d = warp_max(v) / float32(127.0)"),),
            why="the scale from the block's largest x instead of its largest |x|",
            # a block whose most negative value is further from 0 than its largest gets codes below -127
            feedback=(("q8_0_quantize_scales_per_block", ("past int8's -128 ... 127", "not of x")),)),
    Mistake("q8_0_divisor_128", **_QUANTIZE,
            edits=(("d = warp_max(abs(v)) / float32(127.0)", "d = warp_max(abs(v)) / float32(128.0)"),),
            why="d = amax / 128, int8's -128 taken for the range",
            # the largest |x| of a block gets code 128, which int8 cannot hold
            feedback=(("q8_0_quantize_scales_per_block", ("a code came out as 128", "over 127, not 128")),)),
    Mistake("q8_0_no_warp_guard", **_QUANTIZE,
            edits=(("if warp < scales.shape[0] * blocks:", "if True:"),),
            why="no guard for the warps past the last block",
            feedback=(("q8_0_quantize_matches_reference", ("a warp past the last block",)),)),
    # the Q4_1 GEMV
    Mistake("q4_1_two_blocks_a_lane", **_GEMV,
            edits=(("for b in range(lane, w.shape[1], WARP):",
                    "for b in range(lane, min(w.shape[1], lane + 2 * WARP), WARP):"),),
            why="each lane takes at most two blocks of the row: right up to 64 blocks (K = 2048), not past",
            hidden_fails="gemv_matches_reference",
            feedback=(("q4_1_gemv_matches_reference", ("only the first 64 blocks of each row",)),)),
    Mistake("q4_1_nibbles_swapped", **_GEMV,
            edits=((_DOT, "dot += float32(byte >> 4) * low + float32(byte & 0x0F) * high"),),
            why="the high nibble taken as weight j and the low one as weight j + 16",
            hidden_fails="gemv_position_coded",
            feedback=(("q4_1_gemv_position_coded", ("reads the nibbles the other way round",)),)),
    Mistake("q4_1_nibbles_interleaved", **_GEMV,
            edits=(("low = x[first + j]", "low = x[first + 2 * j]"),
                   ("high = x[first + QK // 2 + j]", "high = x[first + 2 * j + 1]")),
            why="byte j taken as the neighbouring weights 2j and 2j + 1",
            feedback=(("q4_1_gemv_position_coded", ("neighbouring weights 2j and 2j + 1",)),)),
    Mistake("q4_1_d_m_swapped", **_GEMV,
            edits=((_D_M, "m = half_from_bytes(w[row, b, 0], w[row, b, 1])\n"
                          "            d = half_from_bytes(w[row, b, 2], w[row, b, 3])"),),
            why="bytes 0-1 read as the minimum and 2-3 as the scale",
            wrong_answer=True,
            feedback=(("q4_1_gemv_position_coded", ("swaps d and m",)),
                      ("q4_1_gemv_matches_reference", ("swaps d and m",)))),
    Mistake("q4_1_minimum_forgotten", **_GEMV,
            edits=(("acc += d * dot + m * x_sum", "acc += d * dot"),),
            why="the block minimum left out",
            hidden_fails="gemv_matches_reference",
            feedback=(("q4_1_gemv_matches_reference", ("leaves out the block minimum m",)),)),
    Mistake("q4_1_minimum_once_per_block", **_GEMV,
            edits=(("acc += d * dot + m * x_sum", "acc += d * dot + m"),),
            why="the minimum added once per block, not times the block's sum of x",
            feedback=(("q4_1_gemv_matches_reference", ("adds each block's minimum m once",)),)),
    Mistake("q4_1_minimum_without_x", **_GEMV,
            edits=(("x_sum += low + high", "x_sum += float32(2.0)"),),
            why="the minimum added for every weight without its activation: the block's count, not its sum of x",
            feedback=(("q4_1_gemv_matches_reference", ("adds the minimum m once for every weight",)),)),
    Mistake("q4_1_scale_per_row", **_GEMV,
            edits=((_D_M, "d = half_from_bytes(w[row, 0, 0], w[row, 0, 1])\n"
                          "            m = half_from_bytes(w[row, 0, 2], w[row, 0, 3])"),),
            why="the d and m of the row's first block used for every block",
            feedback=(("q4_1_gemv_position_coded", ("the d and m of a row's first block",)),)),
    Mistake("q4_1_subnormal_as_normal", **_GEMV,
            edits=(("    if exponent > 0:\n        significand += 0x400                                 # a normal "
                    "number's leading 1\n    value = float32(significand) * float32(1 << (max(exponent, 1) - 1)) * "
                    "float32(FP16_STEP)",
                    "    significand += 0x400\n    value = float32(significand) * float32(2.0 ** (exponent - 1)) * "
                    "float32(FP16_STEP)"),),
            why="an fp16 d or m with exponent field 0 decoded with a leading 1, as a normal number: subnormals wrong",
            feedback=(("q4_1_gemv_matches_reference", ("exponent field is 0 as a normal number",)),)),
    Mistake("q4_1_offset_8", **_GEMV,
            edits=((_DOT, "dot += float32((byte & 0x0F) - 8) * low + float32((byte >> 4) - 8) * high"),),
            why="Q4_0's offset of 8 subtracted from Q4_1's unsigned codes",
            feedback=(("q4_1_gemv_matches_reference", ("subtracts 8 from every code",)),)),
    Mistake("q4_1_codes_read_per_nibble", **_GEMV,
            edits=(("            for j in range(QK // 2):\n"
                    "                byte = int32(w[row, b, 4 + j])\n"
                    "                low = x[first + j]\n"
                    "                high = x[first + QK // 2 + j]\n"
                    "                dot += float32(byte & 0x0F) * low + float32(byte >> 4) * high\n"
                    "                x_sum += low + high\n",
                    "            for j in range(QK):\n"
                    "                byte = int32(w[row, b, 4 + j % (QK // 2)])\n"
                    "                code = byte & 0x0F if j < QK // 2 else byte >> 4\n"
                    "                value = x[first + j]\n"
                    "                dot += float32(code) * value\n"
                    "                x_sum += value\n"),),
            why="a loop over the 32 weights that loads a byte of codes for each nibble: every byte read twice",
            hidden_fails="gemv_traffic",
            feedback=(("q4_1_gemv_traffic_fits", ("loaded twice, once for each of its nibbles",)),)),
    Mistake("q4_1_x_read_twice", **_GEMV,
            edits=(("                x_sum += low + high\n", ""),
                   ("            acc += d * dot + m * x_sum",
                    "            for j in range(QK):\n"
                    "                x_sum += x[first + j]\n"
                    "            acc += d * dot + m * x_sum")),
            why="the block's sum of x in a second pass over x",
            feedback=(("q4_1_gemv_traffic_fits", ("times per row", "use it for both")),)),
    Mistake("q4_1_no_row_guard", **_GEMV,
            edits=(("if row < w.shape[0]:", "if True:"),),
            why="no guard for the warps past the last row",
            feedback=(("q4_1_gemv_matches_reference", ("a warp past the last row",)),)),
    # the W8A8 GEMM
    Mistake("w8a8_float32_sums", **_GEMM,
            edits=((_ACC, "acc = cuda.local.array((THREAD_M, THREAD_N), float32)"),
                   ("acc[i, j] = dp4a(a_frag[i], w_frag[j], acc[i, j])",
                    "acc[i, j] += float32(dp4a(a_frag[i], w_frag[j], int32(0)))")),
            why="the sums kept in float32: exact only while they stay below 2**24",
            hidden_fails="w8a8_exact_sums",
            feedback=(("w8a8_gemm_exact_sums", ("a float32 running sum keeps 24 bits",)),)),
    Mistake("w8a8_int16_accumulator", **_GEMM,
            edits=((_ACC, "acc = cuda.local.array((THREAD_M, THREAD_N), np.int16)"),),
            why="int16 accumulators: an int8 product fits one, a sum of K of them does not",
            hidden_fails="w8a8_exact_sums", wrong_answer=True,
            feedback=(("w8a8_gemm_exact_sums", ("past int16's range", "wrapped around as an int16",
                                                "keep the accumulators in int32")),)),
    Mistake("w8a8_int8_accumulator", **_GEMM,
            edits=((_ACC, "acc = cuda.local.array((THREAD_M, THREAD_N), np.int8)"),),
            why="int8 accumulators, the codes' own type",
            feedback=(("w8a8_gemm_exact_sums", ("wrapped around as an int8", "keep the accumulators in int32")),)),
    Mistake("w8a8_scales_swapped", **_GEMM,
            edits=(("row_scale[i] = sa[row0 + ty + i * THREADS_Y]", "row_scale[i] = sw[row0 + ty + i * THREADS_Y]"),
                   ("col_scale[j] = sw[col0 + tx + j * THREADS_X]", "col_scale[j] = sa[col0 + tx + j * THREADS_X]")),
            why="the per-token scale sa indexed by the channel, the per-channel scale sw by the token",
            hidden_fails="w8a8_scaled_epilogue",
            feedback=(("w8a8_gemm_scaled_epilogue", ("the scales the other way round", "sa[m] sw[n]")),
                      # where M != N the swapped indices run past sa or sw
                      ("w8a8_gemm_edges", ("a scale past the end of sa or sw", "sa takes the row index")))),
    Mistake("w8a8_scale_per_dp4a", **_GEMM,
            edits=((_ACC, "acc = cuda.local.array((THREAD_M, THREAD_N), float32)"),
                   (_SCALES, ""),
                   (_K_LOOP, _SCALES.split("\n", 1)[1] + _K_LOOP),
                   ("acc[i, j] = dp4a(a_frag[i], w_frag[j], acc[i, j])",
                    "acc[i, j] += float32(dp4a(a_frag[i], w_frag[j], 0)) * row_scale[i] * col_scale[j]"),
                   (_STORE, "y[row, col] = acc[i, j]")),
            why="the scales applied to each dp4a's 4 products and the sum kept in float32, instead of once after "
                "an exact int32 sum: float32 rounds every partial sum",
            feedback=(("w8a8_gemm_scaled_epilogue", ("more float32 rounding than one scaling of an exact sum",
                                                     "once per output")),)),
    Mistake("w8a8_token_scale_forgotten", **_GEMM,
            edits=((_STORE, "y[row, col] = float32(acc[i, j]) * col_scale[j]"),),
            why="the per-token scale sa left out of the epilogue",
            feedback=(("w8a8_gemm_scaled_epilogue", ("leaves out the token's scale sa[m]",)),)),
    Mistake("w8a8_last_k_step_missing", **_GEMM,
            edits=(("for k0 in range(0, a_q.shape[1], K_WORDS):",
                    "for k0 in range(0, a_q.shape[1] - K_WORDS, K_WORDS):"),),
            why="the k loop stops a step early: the last 32 codes never enter the sum",
            feedback=(("w8a8_gemm_exact_sums", ("never entered the sum", "the last step included")),)),
    Mistake("w8a8_channels_past_the_end_written", **_GEMM,
            edits=(("if row < m and col < n:", "if row < m:"),),
            why="the store guarded by the token only: a tile's channels past N are written",
            hidden_fails="w8a8_edges",
            feedback=(("w8a8_gemm_edges", ("wrote y past its last token or channel", "col < N")),)),
    Mistake("w8a8_tokens_from_words", **_GEMM,
            edits=(("m = a_q.shape[0]", "m = a_q.shape[1]"),), replace_all=True,
            why="the number of tokens taken from a_q.shape[1], the words of a row (K / 4): tokens past K / 4 are "
                "skipped, or rows past M read",
            feedback=(("w8a8_gemm_edges", ("were never written", "the number of tokens is a_q.shape[0]")),
                      ("w8a8_gemm_exact_sums", ("a row of a_q or w_q past the last token or channel",)))),
    # the written-differently kernels of the samples (the course's, edited, would still paste its device functions)
    Mistake("q8_0_ties_to_even_written_differently", cell="quantize_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("    codes[r, c] = roundf(value * inv)", "    codes[r, c] = round(value * inv)"),),
            why="the written-differently quantizer rounds with Python's round(): halves to even",
            samples=("wrong_ties_to_even_and_nibbles_swapped",)),
    Mistake("q4_1_nibbles_swapped_written_differently", cell="gemv_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("total += (scale * float32(packed % 16) + low) * x[base + i]",
                    "total += (scale * float32(packed // 16) + low) * x[base + i]"),
                   ("total += (scale * float32(packed // 16) + low) * x[base + 16 + i]",
                    "total += (scale * float32(packed % 16) + low) * x[base + 16 + i]")),
            why="the written-differently GEMV takes the high nibble as weight j and the low one as weight j + 16",
            samples=("wrong_ties_to_even_and_nibbles_swapped",)),
    Mistake("q4_1_codes_read_per_nibble_written_differently", cell="gemv_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("            for i in range(16):\n"
                    "                packed = int32(w[warp, blk, 4 + i])\n"
                    "                total += (scale * float32(packed % 16) + low) * x[base + i]\n"
                    "                total += (scale * float32(packed // 16) + low) * x[base + 16 + i]\n",
                    "            for i in range(32):\n"
                    "                packed = int32(w[warp, blk, 4 + i % 16])\n"
                    "                nibble = packed % 16 if i < 16 else packed // 16\n"
                    "                total += (scale * float32(nibble) + low) * x[base + i]\n"),),
            why="the written-differently GEMV loops over the 32 weights and loads a byte of codes for each nibble",
            samples=("wrong_reads_each_byte_twice",)),
    Mistake("q4_1_two_blocks_a_lane_written_differently", cell="gemv_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("for blk in range(lane, w.shape[1], 32):",
                    "for blk in range(lane, min(w.shape[1], lane + 64), 32):"),),
            why="the written-differently GEMV's lanes take at most two blocks of a row",
            samples=("wrong_two_blocks_a_lane_and_float32_sums",)),
    Mistake("w8a8_float32_sums_written_differently", cell="gemm_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=((_ALT_ACC, "sums = cuda.local.array((THREAD_M, THREAD_N), float32)"),
                   ("sums[i, j] += code_a * code_w", "sums[i, j] += float32(code_a * code_w)")),
            why="the written-differently GEMM keeps its sums in float32",
            samples=("wrong_two_blocks_a_lane_and_float32_sums",)),
    Mistake("w8a8_int16_accumulator_written_differently", cell="gemm_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=((_ALT_ACC, "sums = cuda.local.array((THREAD_M, THREAD_N), np.int16)"),),
            why="the written-differently GEMM keeps its sums in int16",
            samples=("wrong_int16_accumulator",)),
    Mistake("w8a8_scale_per_product_written_differently", cell="gemm_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=((_ALT_ACC, "sums = cuda.local.array((THREAD_M, THREAD_N), float32)"),
                   ("sums[i, j] += code_a * code_w",
                    "sums[i, j] += float32(code_a * code_w) * sa[first_m + i] * sw[first_n + j]"),
                   ("y[first_m + i, first_n + j] = float32(sums[i, j]) * (sa[first_m + i] * sw[first_n + j])",
                    "y[first_m + i, first_n + j] = sums[i, j]")),
            why="the written-differently GEMM scales every product and sums in float32",
            samples=("wrong_scale_per_product",)),
)
