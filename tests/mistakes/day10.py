"""Day 10's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day10_a_model_talks"
_NORM = dict(cell="norm_kernel", kernel="llama_layers.rmsnorm_q8_1_block_per_row_kernel")
_ROPE = dict(cell="rope_kernel", kernel="llama_layers.rope_pairs_from_table_kernel")
_SWIGLU = dict(cell="swiglu_kernel", kernel="llama_layers.swiglu_elementwise_kernel")
_ANGLE = "cos, sin = table[positions[t], i, 0], table[positions[t], i, 1]"
_STEP = dict(cell="decode_step", kernel="decode_step.decode_step")

TABLE = (
    # RMSNorm fused with q8_1
    Mistake("norm_mean_not_square", **_NORM,
            edits=(("total += x[t, j] * x[t, j]", "total += x[t, j]"),),
            why="the mean of the values instead of the mean of their squares",
            hidden_fails="norm_matches_reference",
            feedback=(("rmsnorm_q8_1_matches_reference", ("sqrt(mean(x) + eps)", "SQUARES")),)),
    Mistake("norm_row_per_thread", **_NORM,
            edits=(("    for j in range(tid, k, NORM_THREADS):\n        total += x[t, j] * x[t, j]\n"
                    "    total = warp_sum(total)\n    if lane == 0:\n        partial[tid // WARP] = total\n"
                    "    cuda.syncthreads()\n    total = float32(0.0)\n    for w in range(NORM_WARPS):\n"
                    "        total += partial[w]\n",
                    "    for j in range(k):\n        total += x[t, j] * x[t, j]\n"),),
            why="every thread sums the squares of the whole row itself: the values pass, x is read 129 times",
            hidden_fails="norm_matches_reference",
            feedback=(("rmsnorm_q8_1_matches_reference", ("x was read", "shared memory")),)),
    Mistake("norm_no_eps", **_NORM,
            edits=(("math.sqrt(total / float32(k) + eps)", "math.sqrt(total / float32(k))"),),
            why="eps left out of the root: a row of zeros gives 0 / 0",
            hidden_fails="norm_edge_rows", wrong_answer=True,
            feedback=(("rmsnorm_q8_1_edge_rows", ("left out of the root", "row of zeros")),)),
    Mistake("norm_no_weight", **_NORM,
            edits=(("y = x[t, j] * inverse * weight[j]", "y = x[t, j] * inverse"),),
            why="the norm's weight never multiplied in",
            feedback=(("rmsnorm_q8_1_matches_reference", ("without the weight",)),)),
    Mistake("norm_one_warp", **_NORM,
            edits=(("    for w in range(NORM_WARPS):\n        total += partial[w]\n", "    total = partial[0]\n"),),
            why="the sum of squares of warp 0's columns only, the other warps' partials never added",
            feedback=(("rmsnorm_q8_1_matches_reference", ("warp 0's columns", "shared memory")),)),
    Mistake("norm_scale_per_row", **_NORM,
            edits=(("d = warp_max(abs(y)) / float32(127.0)",
                    "amax = float32(0.0)\n"
                    "        for i in range(lane, k, WARP):\n"
                    "            amax = max(amax, abs(x[t, i] * inverse * weight[i]))\n"
                    "        d = warp_max(amax) / float32(127.0)"),),
            why="one scale per row (its largest |y|) instead of one per block of 32",
            hidden_fails="norm_scales_and_sums",
            feedback=(("rmsnorm_q8_1_scales_and_sums", ("one amax per ROW",)),)),
    Mistake("norm_truncated", **_NORM,
            edits=(("x_q[t, j] = round_half_away(y * scale)", "x_q[t, j] = int32(y * scale)"),),
            why="the codes truncated toward zero instead of rounded",
            feedback=(("rmsnorm_q8_1_matches_reference", ("truncated toward zero",)),)),
    # RoPE
    Mistake("rope_reread_in_place", **_ROPE,
            edits=(("        even, odd = x[t, head, 2 * i], x[t, head, 2 * i + 1]\n"
                    "        out[t, head, 2 * i] = even * cos - odd * sin\n"
                    "        out[t, head, 2 * i + 1] = even * sin + odd * cos",
                    "        out[t, head, 2 * i] = x[t, head, 2 * i] * cos - x[t, head, 2 * i + 1] * sin\n"
                    "        out[t, head, 2 * i + 1] = x[t, head, 2 * i] * sin + x[t, head, 2 * i + 1] * cos"),),
            why="the pair's first value written before the second is computed from it: wrong when out is x",
            hidden_fails="rope_matches_reference",
            feedback=(("rope_matches_reference", ("written before its second", "into registers")),)),
    Mistake("rope_no_grid_stride", **_ROPE,
            edits=(("for n in range(start, pairs, cuda.gridDim.x * cuda.blockDim.x):",
                    "for n in range(start, min(pairs, start + 1)):"),),
            why="one pair a thread, no grid-stride loop: past 1,024 blocks of 256 the last pairs are never turned",
            hidden_fails="rope_matches_reference",
            feedback=(("rope_matches_reference", ("still holds the poison", "grid-stride loop")),)),
    Mistake("rope_rotate_half", **_ROPE,
            edits=(("even, odd = x[t, head, 2 * i], x[t, head, 2 * i + 1]",
                    "even, odd = x[t, head, i], x[t, head, i + half]"),
                   ("out[t, head, 2 * i] = even", "out[t, head, i] = even"),
                   ("out[t, head, 2 * i + 1] = even", "out[t, head, i + half] = even")),
            why="Hugging Face's rotate-half pairs (i, i + d / 2) on the GGUF file's permuted weights",
            hidden_fails="rope_pairs_and_positions", wrong_answer=True,
            feedback=(("rope_pairs_and_positions", ("rotate-half", "adjacent")),
                      ("rope_matches_reference", ("rotate-half",)))),
    Mistake("rope_token_index", **_ROPE,
            edits=((_ANGLE, "cos, sin = table[t, i, 0], table[t, i, 1]"),),
            why="the token's index in the step taken for its position",
            hidden_fails="rope_matches_reference",
            feedback=(("rope_matches_reference", ("INDEX", "positions[t]")),)),
    Mistake("rope_angle_sign", **_ROPE,
            edits=(("out[t, head, 2 * i] = even * cos - odd * sin", "out[t, head, 2 * i] = even * cos + odd * sin"),
                   ("out[t, head, 2 * i + 1] = even * sin + odd * cos",
                    "out[t, head, 2 * i + 1] = odd * cos - even * sin")),
            why="the pairs turned by minus the angle",
            feedback=(("rope_matches_reference", ("opposite angle",)),)),
    Mistake("rope_cos_sin_swapped", **_ROPE,
            edits=((_ANGLE, "sin, cos = table[positions[t], i, 0], table[positions[t], i, 1]"),),
            why="the table's cosine and sine taken the other way round",
            feedback=(("rope_matches_reference", ("cos and sin swapped",)),)),
    # SwiGLU
    Mistake("swiglu_no_grid_stride", **_SWIGLU,
            edits=(("for n in range(start, o.size, cuda.gridDim.x * cuda.blockDim.x):",
                    "for n in range(start, min(o.size, start + 1)):"),),
            why="one element a thread, no grid-stride loop: past 1,024 blocks of 256 the last elements are never written",
            hidden_fails="swiglu_matches_reference",
            feedback=(("swiglu_matches_reference", ("still holds the poison", "grid-stride loop")),)),
    Mistake("swiglu_sigmoid", **_SWIGLU,
            edits=(("o[n] = z / (float32(1.0) + math.exp(-z)) * u[n]",
                    "o[n] = float32(1.0) / (float32(1.0) + math.exp(-z)) * u[n]"),),
            why="sigmoid(gate) instead of silu(gate) = gate * sigmoid(gate)",
            hidden_fails="swiglu_matches_reference",
            feedback=(("swiglu_matches_reference", ("sigmoid(gate) * up",)),)),
    Mistake("swiglu_swapped", **_SWIGLU,
            edits=(("z = g[n]", "z = u[n]"), ("* u[n]", "* g[n]")),
            why="silu of up times gate: the two matrices' outputs swapped",
            wrong_answer=True,
            feedback=(("swiglu_matches_reference", ("silu(up) * gate",)),)),
)

# the decode step (a host answer: its feedback is the judge's, from the record of the step's operations)
TABLE += (
    Mistake("step_no_final_norm", **_STEP,
            edits=(("return ops.gemv(ops.embedding, ops.rmsnorm(x, ops.output_norm))",
                    "return ops.gemv(ops.embedding, x)"),),
            why="the logits from the residual stream without the final RMSNorm",
            hidden_fails="decode_step_first_token", wrong_answer=True,
            feedback=(("decode_step_first_token", ("final",)),)),
    Mistake("step_rope_at_position_0", **_STEP,
            edits=(("q, k = ops.rope(q, position), ops.rope(k, position)", "q, k = ops.rope(q, 0), ops.rope(k, 0)"),),
            why="q and k turned to position 0 whatever the token's position: right on a first token only",
            hidden_fails="decode_step_sequence",
            feedback=(("decode_step_matches_reference", ("position 0", "rope")),)),
    Mistake("step_context_one_short", **_STEP,
            edits=(("ops.attention(i, q, position + 1)", "ops.attention(i, q, position)"),),
            why="attention over positions 0 ... position - 1: the token's own key and value left out",
            hidden_fails="decode_step_groups",
            feedback=(("decode_step_every_group", ("context",)),)),
    Mistake("step_attention_norm_for_the_mlp", **_STEP,
            edits=(("h = ops.rmsnorm(x, w.ffn_norm)", "h = ops.rmsnorm(x, w.attn_norm)"),),
            why="the MLP's input normalized with the attention's norm weight",
            hidden_fails="decode_step_long",
            feedback=(("decode_step_generates_greedy_tokens", ("attn_norm", "ffn_norm")),)),
)

# the written-differently kernels of the samples (the course's, edited, would still paste its device functions)
TABLE += (
    Mistake("rope_rotate_half_written_differently", cell="rope_kernel", kernel=None, sample_base="correct_alternative",
            edits=(("a = x[t, h, 2 * i]", "a = x[t, h, i]"), ("b = x[t, h, 2 * i + 1]", "b = x[t, h, i + pairs_per_head]"),
                   ("out[t, h, 2 * i] = a * c - b * s", "out[t, h, i] = a * c - b * s"),
                   ("out[t, h, 2 * i + 1] = b * c + a * s", "out[t, h, i + pairs_per_head] = b * c + a * s")),
            why="the written-differently RoPE pairs channel i with i + d / 2",
            samples=("wrong_rotate_half",)),
    Mistake("norm_no_eps_written_differently", cell="norm_kernel", kernel=None, sample_base="correct_alternative",
            edits=(("rms = math.sqrt(squares[0] / float32(k) + eps)", "rms = math.sqrt(squares[0] / float32(k))"),),
            why="the written-differently norm leaves eps out of the root",
            samples=("wrong_norm_without_eps",)),
    Mistake("norm_row_per_thread_written_differently", cell="norm_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("    j = i\n", "    j = 0\n"), ("        j += NORM_THREADS\n", "        j += 1\n"),
                   ("    squares[i] = acc\n    cuda.syncthreads()\n    half = NORM_THREADS // 2\n    while half > 0:\n"
                    "        if i < half:\n            squares[i] += squares[i + half]\n        cuda.syncthreads()\n"
                    "        half //= 2\n    rms = math.sqrt(squares[0] / float32(k) + eps)\n",
                    "    rms = math.sqrt(acc / float32(k) + eps)\n")),
            why="the written-differently norm's every thread sums the squares of the whole row",
            samples=("wrong_rope_in_place_no_grid_stride_norm_rereads",)),
    Mistake("rope_reread_in_place_written_differently", cell="rope_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("        a = x[t, h, 2 * i]\n        b = x[t, h, 2 * i + 1]\n"
                    "        out[t, h, 2 * i] = a * c - b * s\n        out[t, h, 2 * i + 1] = b * c + a * s\n",
                    "        out[t, h, 2 * i] = x[t, h, 2 * i] * c - x[t, h, 2 * i + 1] * s\n"
                    "        out[t, h, 2 * i + 1] = x[t, h, 2 * i + 1] * c + x[t, h, 2 * i] * s\n"),),
            why="the written-differently RoPE writes a pair's first value before reading its second",
            samples=("wrong_rope_in_place_no_grid_stride_norm_rereads",)),
    Mistake("swiglu_no_grid_stride_written_differently", cell="swiglu_kernel", kernel=None,
            sample_base="correct_alternative",
            edits=(("while n < rows * cols:", "if n < rows * cols:"), ("        n += cuda.gridsize(1)\n", "")),
            why="the written-differently SwiGLU gives each thread one element, no grid-stride loop",
            samples=("wrong_rope_in_place_no_grid_stride_norm_rereads",)),
    Mistake("swiglu_sigmoid_written_differently", cell="swiglu_kernel", kernel=None, sample_base="correct_alternative",
            edits=(("out[r, c] = g * sigmoid * up[r, c]", "out[r, c] = sigmoid * up[r, c]"),),
            why="the written-differently SwiGLU multiplies up by sigmoid(gate)",
            samples=("wrong_swiglu_sigmoid",)),
    Mistake("step_rope_at_position_0_written_differently", cell="decode_step", kernel=None,
            sample_base="correct_alternative",
            edits=(("k = ops.rope(x=ops.gemv(matrix=w.attn_k, x=h), position=position)",
                    "k = ops.rope(x=ops.gemv(matrix=w.attn_k, x=h), position=0)"),
                   ("q = ops.rope(x=ops.gemv(matrix=w.attn_q, x=h), position=position)",
                    "q = ops.rope(x=ops.gemv(matrix=w.attn_q, x=h), position=0)")),
            why="the written-differently step turns q and k to position 0",
            samples=("wrong_step_rope_at_position_0",)),
)
