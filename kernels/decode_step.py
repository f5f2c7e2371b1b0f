"""The decode step of a llama model, written over operations (day 10): the course's answer to its last exercise.

``decode_step(ops, token, position)`` returns the logits of the token that follows ``token``, which sits at
``position`` of its sequence; ``ops`` supplies the model's weights and operations (``kernels.step_ops`` documents
them: the symbolic ``RecordingOps`` that the exercise's checks run it on; the checks then replay the record in NumPy
and on the course's kernels). Host Python and nothing else: it imports nothing, because where a student's step is
graded, ``ops`` is all there is.
"""

__all__ = ["decode_step"]


def decode_step(ops, token, position):
    """The logits of the token after ``token``, which sits at ``position`` (the cache holds positions 0 ... position - 1)."""
    x = ops.embed(token)
    for i in range(ops.layers):
        w = ops.layer(i)
        h = ops.rmsnorm(x, w.attn_norm)
        q, k, v = ops.gemv(w.attn_q, h), ops.gemv(w.attn_k, h), ops.gemv(w.attn_v, h)
        q, k = ops.rope(q, position), ops.rope(k, position)
        ops.write_cache(i, k, v, position)
        x = ops.add(x, ops.gemv(w.attn_output, ops.attention(i, q, position + 1)))
        h = ops.rmsnorm(x, w.ffn_norm)
        x = ops.add(x, ops.gemv(w.ffn_down, ops.swiglu(ops.gemv(w.ffn_gate, h), ops.gemv(w.ffn_up, h))))
    return ops.gemv(ops.embedding, ops.rmsnorm(x, ops.output_norm))      # the head is tied to the embedding
