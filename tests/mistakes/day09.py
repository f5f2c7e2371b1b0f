"""Day 9's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day09_quantized_gemv"
_QUANTIZE = dict(cell="quantize_kernel", kernel="quantized_gemv.q8_0_quantize_kernel")
_GEMV = dict(cell="gemv_kernel", kernel="quantized_gemv.q4_1_gemv_warp_per_row_kernel")
_CODE = "codes[row, b * QK + lane] = round_half_away(v * inverse)"
_DOT = "dot += float32(byte & 0x0F) * low + float32(byte >> 4) * high"
_D_M = ("d = half_from_bytes(w[row, b, 0], w[row, b, 1])\n"
        "            m = half_from_bytes(w[row, b, 2], w[row, b, 3])")

TABLE = (
    # the Q8_0 quantizer
    Mistake("q8_0_ties_to_even", **_QUANTIZE,
            edits=((_CODE, "codes[row, b * QK + lane] = round(v * inverse)"),),
            why="Python's round(), halves to even, instead of C's roundf (halves away from zero)",
            hidden_fails="quantize_rounds_like_the_reference", wrong_answer=True,
            feedback=(("q8_0_quantize_matches_reference", ("went to the even code", "halves away from zero")),)),
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
)
