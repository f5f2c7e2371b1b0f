"""Correct, written the way a student might (issue 25): ``cuda`` imported as ``nc`` and as ``gpu``, ``jit``
imported from ``numba.cuda``, ``@nc.jit()`` called, constants derived from the given ones (``CHUNK: int = WARPS
* WARP``, ``NEG_INF = float32(-math.inf)``), a table built by a comprehension, the merge's rescale in a device
function (``@cuda.jit(device=True, inline=True)``) defined before the kernel; only an assert is not run when
graded. correct_alternative's algorithms and allocator: 13/13."""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 2,
        "cache_write_traffic": 1,
        "paged_v1_matches_reference": 1,
        "paged_v1_mixed_lengths": 1,
        "paged_v1_large_logits": 1,
        "paged_v1_traffic": 1,
        "merge_matches_reference": 1,
        "merge_handles_empty_partitions": 1,
        "merge_traffic": 1,
        "allocator_fork": 1,
        "allocator_copy_on_write": 1,
        "allocator_workload": 1,
    },
    "details": ["not run when graded"],
}

CELLS = {
    "cache_write_kernel": '''\
"""Exercise 1: the cache write, cuda imported under another name."""
import numba.cuda as nc

@nc.jit()
def kv_cache_write_kernel(k_new, v_new, token_seqs, token_positions, block_tables, k_cache, v_cache):
    """Block t: its threads take the channels of token t, one KV head after the other."""
    t = nc.blockIdx.x
    position = token_positions[t]
    block_size = k_cache.shape[2]
    page = position // block_size
    block = block_tables[token_seqs[t], page]
    offset = position - page * block_size
    for head in range(k_new.shape[1]):
        for c in range(nc.threadIdx.x, k_new.shape[2], nc.blockDim.x):
            k_cache[block, head, offset, c] = k_new[t, head, c]
            v_cache[block, head, offset, c] = v_new[t, head, c]
''',
    "paged_v1_kernel": '''\
"""Exercise 2: chunks of CHUNK tokens (all the threads), constants derived from the given ones."""
from numba import cuda as gpu
from numba.cuda import jit

CHUNK: int = WARPS * WARP                   # = THREADS, every thread of the block
NEG_INF = float32(-math.inf)
CHANNEL_LANES = [c % WARP for c in range(HEAD_DIM_MAX)]     # which lane holds each channel (for reading)
assert CHUNK == THREADS


@jit
def paged_attention_v1_block_per_head_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, out):
    """Chunks of THREADS tokens: thread i scores token i of the chunk into shared memory, then thread
    c < head_dim folds the chunk's scores and values into channel c (online softmax, chunk by chunk)."""
    h = gpu.blockIdx.x
    s = gpu.blockIdx.y
    tid = gpu.threadIdx.x
    d = q.shape[2]
    block_size = k_cache.shape[2]
    kv_head = h // (q.shape[1] // k_cache.shape[1])
    q_scaled = gpu.shared.array(HEAD_DIM_MAX, float32)
    scores = gpu.shared.array(CHUNK, float32)
    blocks = gpu.shared.array(CHUNK, int32)
    if tid < d:
        q_scaled[tid] = q[s, h, tid] * scale
    n = context_lens[s]
    m = NEG_INF
    total = float32(0.0)
    acc = float32(0.0)
    gpu.syncthreads()
    for start in range(0, n, CHUNK):
        t = start + tid
        if t < n:
            block = block_tables[s, t // block_size]
            score = float32(0.0)
            for c in range(d):
                score += q_scaled[c] * k_cache[block, kv_head, t % block_size, c]
            scores[tid] = score
            blocks[tid] = block
        gpu.syncthreads()
        if tid < d:
            count = min(CHUNK, n - start)
            chunk_max = m
            for j in range(count):
                chunk_max = max(chunk_max, scores[j])
            rescale = math.exp(m - chunk_max)
            total *= rescale
            acc *= rescale
            for j in range(count):
                p = math.exp(scores[j] - chunk_max)
                total += p
                acc += p * v_cache[blocks[j], kv_head, (start + j) % block_size, tid]
            m = chunk_max
        gpu.syncthreads()
    if tid < d:
        out[s, h, tid] = acc / total if total > 0 else float32(0.0)
''',
    "merge_kernel": '''\
"""Exercise 3: the merge, its rescale in a device function defined first."""
EMPTY = -math.inf          # a partition that saw no key


@cuda.jit(device=True, inline=True)
def weight(x, top):
    """e^(x - top), the factor that brings a partial to the running maximum."""
    return math.exp(x - top)


@cuda.jit
def paged_attention_v2_merge_kernel(partial_max, partial_sum, partial_acc, out):
    """Thread c folds the partitions into channel c one at a time, rescaling when the maximum grows."""
    h = cuda.blockIdx.x
    s = cuda.blockIdx.y
    c = cuda.threadIdx.x
    if c < out.shape[2]:
        m = float32(-math.inf)
        total = float32(0.0)
        channel = float32(0.0)
        for p in range(partial_max.shape[2]):
            m_p = partial_max[s, h, p]
            if m_p > EMPTY:          # else the partition saw no key: nothing to add
                m_new = max(m, m_p)
                old = weight(m, m_new)
                new = weight(m_p, m_new)
                total = total * old + partial_sum[s, h, p] * new
                channel = channel * old + partial_acc[s, h, p, c] * new
                m = m_new
        out[s, h, c] = channel / total if total > 0 else float32(0.0)
''',
    "allocator_class": '''\
class BlockManager(BlockPool):
    """fork shares, append copies a shared partial page first."""

    def fork(self, seq):
        child = self._new_id()
        self._tables[child] = []
        for block in self._table(seq):
            self._tables[child].append(block)
            self._refs[block] = self.refcount(block) + 1
        self._tokens[child] = self._tokens_of(seq)[:]
        return child

    def append(self, seq, token):
        table = self._table(seq)
        n = self.context_len(seq)
        offset = n % self.block_size
        shared = offset > 0 and self.refcount(table[-1]) > 1
        step = Step()
        if offset == 0 or shared:
            self._reserve(1)
            block = self._take()
            if shared:
                old = table.pop()
                step.copies.append((old, block))
                self._release(old)
            table.append(block)
        self._tokens_of(seq).append(token)
        step.writes.append((n, table[-1] * self.block_size + offset))
        return step
''',
}
