"""Cheating twice. A decode kernel whose single thread hands the whole step to the NumPy reference: right
answers on the simulator, but the kernel does not compile for a GPU, so it never runs when graded. And an
allocator cell that patches the checks (course.exercise_checks.day06_allocator.allocator_problems returns
nothing), starts a shell, writes a file and replaces the driver of its process, then defines an allocator
that does nothing: the cell runs in a guarded process of its own, where the course's modules cannot be
imported, no process starts and no file is written, and what it sends back is judged in the grading kernel.
6/13: the decode kernel's four cells and the allocator's three lost, the other exercises answered correctly."""

EXPECT = {
    "status": "graded",
    "points": {
        "cache_write_slots": 2,
        "cache_write_traffic": 1,
        "paged_v1_matches_reference": 0,
        "paged_v1_mixed_lengths": 0,
        "paged_v1_large_logits": 0,
        "paged_v1_traffic": 0,
        "merge_matches_reference": 1,
        "merge_handles_empty_partitions": 1,
        "merge_traffic": 1,
        "allocator_fork": 0,
        "allocator_copy_on_write": 0,
        "allocator_workload": 0,
    },
}

BASE = "correct_alternative"

CELLS = {
    "paged_v1_kernel": '''\
@cuda.jit
def paged_attention_v1_block_per_head_kernel(q, k_cache, v_cache, block_tables, context_lens, scale, out):
    """One thread hands the whole decode step to the NumPy reference (runs only on the simulator)."""
    if cuda.threadIdx.x == 0 and cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0:
        from kernels import reference
        out[:, :, :] = reference.paged_attention(np.asarray(q[:, :, :]), np.asarray(k_cache[:, :, :, :]),
                                                 np.asarray(v_cache[:, :, :, :]), np.asarray(block_tables[:, :]),
                                                 np.asarray(context_lens[:]), scale=float(scale))
''',
    "allocator_class": '''\
import os
import sys

for attempt in (lambda: setattr(__import__("course.exercise_checks.day06_allocator").exercise_checks.day06_allocator,
                                "allocator_problems", lambda *a, **k: []),
                lambda: os.system("touch allocator-was-here"),
                lambda: open("allocator-was-here", "w").write("x"),
                lambda: setattr(sys.modules["__main__"], "drive", lambda *a, **k: [])):
    try:
        attempt()
    except Exception as exc:
        print("refused:", exc)


class BlockManager(BlockPool):
    def fork(self, seq):
        return self._new_id()

    def append(self, seq, token):
        return Step()
''',
}
