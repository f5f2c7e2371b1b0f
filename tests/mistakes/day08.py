"""Day 8's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day08_mixed_precision"
_PREFILL = dict(cell="prefill_kernel", kernel="low_precision_attention.gqa_prefill_mixed_tiles_kernel")
_DECODE = dict(cell="decode_kernel", kernel="low_precision_attention.gqa_decode_mixed_group_kernel")
_QUANTIZE = dict(cell="quantize_kernel", kernel="low_precision_attention.fp8_quantize_kernel")
# float16 imported above the kernel, for the mistakes that keep a value in fp16
FLOAT16 = ("@cuda.jit\ndef gqa_", "from numba.types import float16\n\n\n@cuda.jit\ndef gqa_")

TABLE = (
    # the prefill
    Mistake("prefill_accumulator_fp16", **_PREFILL,
            edits=(FLOAT16, ("acc = cuda.local.array(HEAD_DIM_MAX, float32)",
                             "acc = cuda.local.array(HEAD_DIM_MAX, float16)")),
            why="the accumulator kept in fp16",
            hidden_fails="prefill_matches_reference",
            # the growth with the keys shows on most draws, the rounding on every one: both say so
            feedback=(("mixed_prefill_long_rows", ("accumulator", "kept in fp16")),)),
    Mistake("prefill_running_sum_fp16", **_PREFILL,
            edits=(FLOAT16, ("row_sum = float32(0.0)", "row_sum = float16(0.0)"),
                   ("row_sum *= correction", "row_sum = float16(row_sum * correction)"),
                   ("row_sum += p", "row_sum = float16(row_sum + p)")),
            why="the running sum kept in fp16",
            hidden_fails="prefill_long_rows",
            # the long-rows diagnosis (the error grows with the keys summed) or, on some draws, the rounding one:
            # both name the running sum kept in fp16
            feedback=(("mixed_prefill_long_rows", ("running sum", "fp16")),)),
    # q·k stored in fp16 shared memory before the scale is applied: five edits of one mistake
    Mistake("prefill_scores_fp16_scaled_when_read", **_PREFILL,
            edits=(("@cuda.jit\ndef gqa_prefill_mixed_tiles_kernel",
                    "from numba.types import float16\n\n\n@cuda.jit\ndef gqa_prefill_mixed_tiles_kernel"),
                   ("q_row[c] = float32(q[b, h, position, c]) * scale if active",
                    "q_row[c] = float32(q[b, h, position, c]) if active"),
                   ("scores = cuda.shared.array((TILE_KV, ROWS_MAX), float32)",
                    "scores = cuda.shared.array((TILE_KV, ROWS_MAX), float16)"),
                   ("tile_max = max(tile_max, score)", "tile_max = max(tile_max, score * scale)"),
                   ("p = math.exp(scores[j, t] - new_max)", "p = math.exp(scores[j, t] * scale - new_max)")),
            why="the scores are kept in fp16 and scaled when they are read: q·k rounded to fp16, unscaled",
            hidden_fails="prefill_large_logits",
            feedback=(("mixed_prefill_large_logits", ("q·k before the scale is large", "scaled afterwards")),
                      ("mixed_prefill_matches_reference",
                       ("a value between the loads and the store is rounded to fp16",))),
            wrong_answer=True, samples=("wrong_rounds_inside",)),
    # the decode
    Mistake("decode_accumulators_fp16", **_DECODE,
            edits=(FLOAT16, ("acc = cuda.local.array((GROUP_MAX, CHANNELS), float32)",
                             "acc = cuda.local.array((GROUP_MAX, CHANNELS), float16)")),
            why="the accumulators kept in fp16",
            hidden_fails="decode_matches_reference",
            feedback=(("mixed_decode_long_context",
                       ("a value between the loads and the store is rounded to fp16", "An accumulator")),),
            samples=("wrong_rounds_inside",)),
    Mistake("decode_running_sums_fp16", **_DECODE,
            edits=(FLOAT16, ("running_sum = cuda.local.array(GROUP_MAX, float32)",
                             "running_sum = cuda.local.array(GROUP_MAX, float16)")),
            why="the running sums kept in fp16",
            hidden_fails="decode_long_context",
            feedback=(("mixed_decode_long_context",
                       ("a value between the loads and the store is rounded to fp16", "a running sum or maximum")),)),
    Mistake("decode_fp16_kv_loaded_per_head", **_DECODE,
            edits=(("        for ch in range(CHANNELS):\n"
                    "            c = lane + ch * WARP\n"
                    "            if c < d:\n"
                    "                k_row[ch] = float32(k_cache[page, kv_head, slot, c])\n"
                    "                v_row[ch] = float32(v_cache[page, kv_head, slot, c])\n"
                    "        for i in range(GROUP_MAX):\n"
                    "            if i < n_heads:\n",
                    "        for i in range(GROUP_MAX):\n"
                    "            if i < n_heads:\n"
                    "                for ch in range(CHANNELS):\n"
                    "                    c = lane + ch * WARP\n"
                    "                    if c < d:\n"
                    "                        k_row[ch] = float32(k_cache[page, kv_head, slot, c])\n"
                    "                        v_row[ch] = float32(v_cache[page, kv_head, slot, c])\n"),),
            why="the token's fp16 K and V rows are loaded again for every head of the group",
            hidden_fails="decode_traffic", wrong_answer=True,
            feedback=(("mixed_decode_traffic_fits", ("k_cache was loaded", "once per query head of the group")),)),
    # fp8 quantization
    Mistake("fp8_truncated", **_QUANTIZE,
            edits=(("    if rest > 0.5 or (rest == 0.5 and q & 1):\n        q += 1\n", ""),),
            why="the e4m3 mantissa is truncated instead of rounded to nearest even",
            feedback=(("fp8_quantize_matches_reference", ("your codes round toward zero",)),),
            wrong_answer=True),
    Mistake("fp8_ties_away_from_zero", **_QUANTIZE,
            edits=(("if rest > 0.5 or (rest == 0.5 and q & 1):", "if rest >= 0.5:"),),
            why="ties rounded away from zero",
            hidden_fails="quantize_rounds_to_nearest_even",
            feedback=(("fp8_quantize_matches_reference", ("ties go to the even code",)),)),
    Mistake("fp8_nan_past_448", **_QUANTIZE,
            edits=(("        code = int32(0x7E)\n", "        code = int32(0x7F)\n"),),
            why="values of 448 and beyond become NaN (0x7f) instead of saturating",
            feedback=(("fp8_quantize_matches_reference", ("became NaN (0x7f)", "saturates")),)),
    Mistake("fp8_scale_from_signed_max", **_QUANTIZE,
            edits=(("amax = max(amax, abs(x[g, i]))", "amax = max(amax, x[g, i])"),),
            why="the scale from the largest x, not |x|",
            hidden_fails="quantize_computes_scales",
            feedback=(("fp8_quantize_computes_scales", ("the largest x, not the largest |x|",)),)),
    # the written-differently kernels of the samples
    Mistake("fp8_truncated_written_differently", cell="quantize_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("    n = int32(math.floor(r + float32(0.5)))\n"
                    "    if float32(n) - r == float32(0.5) and n % 2 == 1:\n"
                    "        n -= 1",
                    "    n = int32(math.floor(r))"),),
            why="the written-differently quantize kernel cuts its rounding to the integer below",
            samples=("wrong_rounds_inside",)),
    Mistake("fp8_reciprocal_scale_written_differently", cell="quantize_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("    for i in range(t, x.shape[1], FP8_THREADS):\n"
                    "        codes[g, i] = _e4m3_code(x[g, i] / s)",
                    "    inverse = float32(1.0) / s\n"
                    "    for i in range(t, x.shape[1], FP8_THREADS):\n"
                    "        codes[g, i] = _e4m3_code(x[g, i] * inverse)"),),
            why="each value multiplied by 1 / scale, rounded once to float32, instead of divided by the scale: "
                "ties of x / scale round the other way",
            samples=("wrong_reciprocal_scale",)),
)
