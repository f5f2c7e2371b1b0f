"""Plausible kernels with one bug each: 1/10.

Exercise 1 guards with ``i < x.size - 1`` and never writes the last element (0/2). Exercise 2 has
no loop over the columns, so head_dim above 32 leaves columns unwritten (0/3). In 3a the running
max starts at 0 instead of -inf: right for rows with a positive entry, wrong for all-negative rows,
so only the traffic check, on random normal rows, passes (1/3). In 3b warp 0 forgets the other
warp's partial, wrong as soon as a row has more than 32 columns (0/2).
"""

EXPECT = {
    "status": "graded",
    "points": {
        "axpb_matches_reference_awkward_sizes": 0,
        "axpb_reads_and_writes_each_element_once": 0,
        "normalize_rows_matches_reference_awkward_shapes": 0,
        "normalize_rows_reads_each_element_once": 0,
        "row_stats_tree_matches_reference_awkward_shapes": 0,
        "row_stats_tree_traffic_and_shared_budget": 1,
        "row_stats_warp_matches_reference_awkward_shapes": 0,
        "row_stats_warp_traffic_and_shared_budget": 0,
    },
}

BASE = "correct_ours"
OTHERS = "correct_alternative"   # the cells this case does not edit (ours pasted would be the course's)

EDITS = {
    "axpb_kernel": [("if i < x.size:", "if i < x.size - 1:")],
    # one thread per column and no loop over the columns: head_dim above blockDim.x stays unwritten
    "normalize_rows_kernel": [("""
        if row < x.shape[2]:
            denominator = row_sums[batch, head, row]
            for col in range(cuda.threadIdx.x, x.shape[3], cuda.blockDim.x):
                out[batch, head, row, col] = x[batch, head, row, col] / denominator
        """, """
        col = cuda.threadIdx.x
        if row < x.shape[2] and col < x.shape[3]:
            out[batch, head, row, col] = x[batch, head, row, col] / row_sums[batch, head, row]
        """)],
    "row_stats_tree_kernel": [("largest = float32(-math.inf)", "largest = float32(0.0)")],
    # thread 0 writes warp 0's partial and forgets the other warps'
    "row_stats_warp_kernel": [("""
        if warp == 0:
            largest = warp_max[lane] if lane < WARPS_PER_BLOCK else float32(-math.inf)
            total = warp_sum[lane] if lane < WARPS_PER_BLOCK else float32(0.0)
            offset = WARPS_PER_BLOCK // 2
            while offset > 0:
                largest = max(largest, cuda.shfl_down_sync(FULL_MASK, largest, offset))
                total += cuda.shfl_down_sync(FULL_MASK, total, offset)
                offset //= 2
            if lane == 0:
                row_max[row] = largest
                row_sum[row] = total
        """, """
        if tid == 0:
            row_max[row] = warp_max[0]
            row_sum[row] = warp_sum[0]
        """)],
}
