"""The partitions of day 8's tensor-core decode: a fitted model of how an SM runs the few long blocks it holds.

``tensor_partition_size`` picks the tokens per partition of ``gqa_decode_tensor_cores`` when the launcher is
given none: of 64, 128, ... tokens, the one the model below finishes first. Day 7's rule
(``kernels.paging.decode_partition_size``: the longest partition whose grid still gives each SM a few
blocks) suits kernels of which an SM holds many blocks; this one holds 2 or 3.
"""
from __future__ import annotations

import math

from kernels.launching import cdiv
from kernels.paging import decode_partition_size, partitions_for

__all__ = ["TENSOR_PARTITION_MIN", "TENSOR_BLOCKS_PER_SM", "TENSOR_SM_RATES", "TENSOR_BLOCK_COST",
           "tensor_partition_size"]

TENSOR_PARTITION_MIN = 64   # the shortest partition tensor_partition_size weighs
# Partitions of the tensor-core decode (partition_size=None). Few of its blocks fit an SM at once (the blocks
# the registers leave: 2 for fp16, 3 for fp8), each lives long, and an SM with one block left runs it slowly:
# so the partition is chosen by a model of an SM's time. The grid's blocks spread evenly over the SMs; an SM
# runs its share in rounds of as many blocks as it holds, a round of m blocks at TENSOR_SM_RATES[m] of its speed
# with all it holds, and each block costs TENSOR_BLOCK_COST tokens' worth on top of its partition (its start,
# the first loads, the merge of its warps). The constants were fitted (least squares on log time) to fp8 timings
# on an H100 (8 KV heads, group 4, head_dim 128, partitions of 512 to 32,768 tokens at 9 steps from 8 x 4,096
# to 4 x 131,072 tokens; ms at 16 x 32,768: 512 0.481, 1,024 0.444, 2,048 0.429, 4,096 0.412, 8,192 0.499,
# 16,384 0.426, 32,768 0.721). Timed again at the 17 steps of day 8's recording, partitions of 64 to 16,384
# tokens, the model's choice was within 0.6% of the fastest partition at every step, fp8 and fp16 alike. Day
# 7's rule (the longest of up to 1,024 tokens giving 6 blocks per SM) was up to 1.68 times slower for fp8 (8 x
# 1,024 tokens; 1.06 to 1.08 on steps of 512K tokens or more) and 1.75 for fp16. Doing without the scan of the
# partition's V scales (the largest met so far, rescaled like the running maximum) and issuing the first tile's
# loads before preparing q were tried too, together: 0.5 to 4.6% slower at 8 of 9 steps at day 7's partitions
# (0.9% faster at 8 x 4,096), 0.8% slower at 16 x 32,768 in partitions of 4,096, so neither is kept.
TENSOR_BLOCKS_PER_SM = {"float16": 2, "fp8_e4m3": 3}
TENSOR_SM_RATES = {1: 0.58, 2: 0.92, 3: 1.0}
TENSOR_BLOCK_COST = 140


def tensor_partition_size(fmt: str, num_seqs: int, blocks_per_partition: int, longest: int,
                          sm_count: int | None, holds: int | None = None) -> int:
    """Tokens per partition of gqa_decode_tensor_cores when ``partition_size`` is None: of 64, 128, ... up to the
    first that holds the ``longest`` context, the one the SM model above finishes first (the shorter on a tie).
    Without an SM count (the simulator), day 6's ``PARTITION_SIZE``. ``holds``: the blocks an SM holds at once
    (1 to 3; None: ``TENSOR_BLOCKS_PER_SM`` of the format), for a rung compiled for another count."""
    if not sm_count:
        return decode_partition_size(num_seqs, blocks_per_partition, longest, sm_count)
    holds = holds or TENSOR_BLOCKS_PER_SM[fmt]
    best_time, best = math.inf, TENSOR_PARTITION_MIN
    size = TENSOR_PARTITION_MIN
    while True:
        per_sm = cdiv(num_seqs * blocks_per_partition * partitions_for(longest, size), sm_count)
        rounds, left = divmod(per_sm, holds)
        block = size + TENSOR_BLOCK_COST
        time = rounds * holds * block / TENSOR_SM_RATES[holds]
        if left:
            time += left * block / TENSOR_SM_RATES[left]
        if time < best_time:
            best_time, best = time, size
        if size >= longest:
            return best
        size *= 2
