"""Day 3's classic mistakes (see ``tests/mistakes/__init__.py`` for the fields)."""

from . import Mistake

ASSIGNMENT = "day03_online_softmax"

TABLE = (
    # softmax_online
    Mistake("online_sum_not_rescaled", cell="softmax_online_kernel", kernel="softmax.softmax_online_kernel",
            edits=(("l = l * math.exp(m - m_new) + math.exp(x_j - m_new)", "l = l + math.exp(x_j - m_new)"),),
            why="the running sum is not rescaled by exp(m_old - m_new) when the maximum grows",
            names="row_sums", words=("sum below 1", "running sum rescaled by exp(m_old - m_new)"),
            feedback=(("online_softmax_matches_two_pass",
                       ("sum below 1", "running sum rescaled by exp(m_old - m_new)")),)),
    Mistake("online_merge_of_empty_states", cell="softmax_online_kernel", kernel="softmax.softmax_online_kernel",
            edits=(("            if m_new != -math.inf:\n"
                    "                run_sum[tid] = (run_sum[tid] * math.exp(m_a - m_new)\n"
                    "                                + run_sum[tid + stride] * math.exp(m_b - m_new))\n",
                    "            run_sum[tid] = (run_sum[tid] * math.exp(m_a - m_new)\n"
                    "                            + run_sum[tid + stride] * math.exp(m_b - m_new))\n"),),
            why="the merge of two empty states computes exp(-inf - (-inf)) = NaN",
            names="masked_nan", words=("exp(-inf - (-inf))", "keep the empty state"),
            feedback=(("online_softmax_handles_masked_rows",
                       ("exp(-inf - (-inf))", "keep the empty state", "merging two empty states")),)),
    Mistake("online_empty_state_unguarded", cell="softmax_online_kernel", kernel="softmax.softmax_online_kernel",
            edits=(("        if m_new != -math.inf:  # while everything seen is -inf, exp(-inf - -inf) would be NaN\n"
                    "            l = l * math.exp(m - m_new) + math.exp(x_j - m_new)\n",
                    "        l = l * math.exp(m - m_new) + math.exp(x_j - m_new)\n"),),
            why="the empty state is not guarded: a thread that saw only -inf computes exp(-inf - -inf) = NaN",
            wrong_answer=True,
            feedback=(("online_softmax_handles_masked_rows", ("exp(-inf - (-inf))", "keep the empty state")),)),
    Mistake("online_divides_by_empty_sum", cell="softmax_online_kernel", kernel="softmax.softmax_online_kernel",
            edits=(("        if row_sum > 0:\n"
                    "            out[row, j] = math.exp(x[row, j] - row_max) / row_sum\n"
                    "        else:\n"
                    "            out[row, j] = 0.0",
                    "        out[row, j] = math.exp(x[row, j] - row_max) / row_sum"),),
            why="the output is divided by the running sum unchecked: a fully masked row is 0/0 (NaN)",
            samples=("wrong_masking",),
            feedback=(("online_softmax_handles_masked_rows", ("0/0 is NaN", "write zeros instead of dividing")),)),
    Mistake("online_thread_sum_not_rescaled", cell="softmax_online_kernel", kernel="softmax.softmax_online_kernel",
            edits=(("        m_new = max(m, x_j)\n"
                    "        if m_new != -math.inf:  # while everything seen is -inf, exp(-inf - -inf) would be NaN\n"
                    "            l = l * math.exp(m - m_new) + math.exp(x_j - m_new)\n"
                    "        m = m_new",
                    "        m = max(m, x_j)\n"
                    "        if m != -math.inf:\n"
                    "            l += math.exp(x_j - m)"),),
            why="a thread's running sum is never rescaled when its maximum grows: terms of different maxima mixed",
            samples=("wrong_rescale_and_two_pass",),
            feedback=(("online_softmax_matches_two_pass",
                       ("sum below 1", "running sum rescaled by exp(m_old - m_new)")),)),
    # attention_v2_fused_rows
    Mistake("fused_accumulator_not_rescaled", cell="attention_v2_fused_rows_kernel",
            kernel="attention.attention_v2_fused_rows_kernel",
            edits=(("acc[c] = acc[c] * rescale + p * v[b, h, j, c]", "acc[c] = acc[c] + p * v[b, h, j, c]"),),
            why="the accumulator is not rescaled when the maximum grows (the sum is)",
            names="acc_not_rescaled", words=("accumulator is not rescaled", "rescale both"),
            feedback=(("fused_rows_matches_reference", ("accumulator is not rescaled", "rescale both")),)),
    Mistake("fused_causal_j_below_i", cell="attention_v2_fused_rows_kernel",
            kernel="attention.attention_v2_fused_rows_kernel",
            edits=(("n_keys = min(i + 1, n_keys)", "n_keys = min(i, n_keys)"),),
            why="the causal mask j < i: row 0 sees no key",
            names="row0_key0", words=("row 0 sees only key 0", "all zeros", "j < i instead of j <= i"),
            wrong_answer=True,
            feedback=(("fused_rows_handles_causal", ("j < i instead of j <= i", "row 0 sees only key 0")),)),
    Mistake("fused_causal_j_below_i_uncommented", cell="attention_v2_fused_rows_kernel",
            kernel="attention.attention_v2_fused_rows_kernel",
            edits=(("n_keys = min(i + 1, n_keys)  # keys after i are masked: skip them instead of reading them",
                    "n_keys = min(i, n_keys)"),),
            why="the causal mask j < i, the line's comment dropped (the sample's edit replaces whole lines)",
            samples=("wrong_masking",),
            feedback=(("fused_rows_handles_causal", ("j < i instead of j <= i", "row 0 sees only key 0")),)),
    Mistake("fused_two_pass", cell="attention_v2_fused_rows_kernel", kernel="attention.attention_v2_fused_rows_kernel",
            edits=(("    for j in range(n_keys):\n"
                    "        score = float32(0.0)\n"
                    "        for c in range(head_dim):\n"
                    "            score += q_row[c] * k[b, h, j, c]\n"
                    "        m_new = max(m, score)\n"
                    "        rescale = math.exp(m - m_new)  # exp(-inf) = 0 at the first key: nothing to rescale yet\n"
                    "        p = math.exp(score - m_new)\n"
                    "        l = l * rescale + p\n"
                    "        for c in range(head_dim):\n"
                    "            acc[c] = acc[c] * rescale + p * v[b, h, j, c]\n"
                    "        m = m_new",
                    "    for j in range(n_keys):\n"
                    "        score = float32(0.0)\n"
                    "        for c in range(head_dim):\n"
                    "            score += q_row[c] * k[b, h, j, c]\n"
                    "        m = max(m, score)\n"
                    "    for j in range(n_keys):\n"
                    "        score = float32(0.0)\n"
                    "        for c in range(head_dim):\n"
                    "            score += q_row[c] * k[b, h, j, c]\n"
                    "        p = math.exp(score - m)\n"
                    "        l += p\n"
                    "        for c in range(head_dim):\n"
                    "            acc[c] += p * v[b, h, j, c]"),),
            why="right answers but not online: a first pass finds the maximum, a second sums, so K is read twice",
            samples=("wrong_rescale_and_two_pass",),
            feedback=(("fused_rows_traffic_fits", ("read twice over", "two passes over the keys")),)),
)
