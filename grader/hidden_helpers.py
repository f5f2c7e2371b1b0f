"""What several hidden test cells of one day share, loaded by each of them on its own.

No grade cell's hidden tests may use a name that only an earlier grade cell defines
(``tests/test_exercises.py`` checks every day): when a cell's visible check fails, or the cell times
out and the grader restarts the kernel, the definitions after the failing line never happen, and every
later exercise would fail with a ``NameError`` it never earned. So a hidden cell that needs a shared
harness loads this module itself::

    from grader.hidden import pristine
    hh = pristine("grader.hidden_helpers")
    hh.check_flash(attention_v4_flash_kernel, 2, 2, 97, 75, 12, causal=False)

Loaded through :func:`grader.hidden.pristine`, like the modules it uses, so a submission that rebinds
``course.checking.check`` or ``kernels.reference.attention`` changes nothing here. Every function takes
the submitted kernel as its first argument and launches it with the course's grid.
"""

from __future__ import annotations

import numpy as np

from grader.hidden import pristine

chk, ref, traffic = pristine("course.checking"), pristine("kernels.reference"), pristine("course.traffic")
flash = pristine("kernels.flash_attention")

__all__ = ["run_flash", "check_flash"]


# --- day 5: flash attention ----------------------------------------------------------------------------

def run_flash(kernel, B, H, N, M, d, *, causal, kv_lens=None, large_logits=False, same_keys=False):
    """Launch ``kernel`` (day 5's ``attention_v4_flash_kernel``) with the course's grid on fresh inputs,
    counting its traffic.

    Returns ``(o, reference, seed, traffic, attention)``, attention being the inputs and the mask as
    ``check`` takes them, so that a wrong output is compared with the classic mistakes. Asserts the
    kernel was launched once, wrote every output element once and read each existing key at least once,
    so host-side answers score nothing. large_logits: integer q and k of up to 50, so q·k reaches about
    1e4 and is exact in float32 (a float32 dot product of that size would carry rounding errors the
    softmax magnifies). same_keys: every key identical, so every score of a row is equal.
    """
    rng, seed = chk.random_inputs()
    if large_logits:
        q = rng.integers(-50, 51, (B, H, N, d)).astype(np.float32)
        k = rng.integers(-50, 51, (B, H, M, d)).astype(np.float32)
    else:
        q = rng.standard_normal((B, H, N, d), dtype=np.float32)
        k = rng.standard_normal((B, H, M, d), dtype=np.float32)
    if same_keys:
        k[:] = k[:, :, :1]
    v = rng.standard_normal((B, H, M, d), dtype=np.float32)
    lens = np.full(B, M, dtype=np.int32) if kv_lens is None else np.array(kv_lens, dtype=np.int32)
    o = chk.poison(np.empty_like(q))
    with traffic.count_traffic() as t:
        kernel[flash.flash_grid(B, H, N), flash.TILE_Q](q, k, v, lens, o, flash.default_scale(d, None), causal)
    assert t.launches == 1, f"attention_v4_flash_kernel must be one kernel launch; launches seen: {t.kernel_names}"
    assert t.global_stores["o"] == B * H * N * d, (
        f"every element of o must be written exactly once by the kernel: {B * H * N * d} stores expected, "
        f"{t.global_stores['o']} counted")
    needed = H * d * int(np.minimum(lens, N if causal else M).sum())
    for name in ("k", "v"):
        assert t.global_loads[name] >= needed, (
            f"the kernel must read every key it uses from {name}: at least {needed} loads expected, "
            f"{t.global_loads[name]} counted")
    want = ref.attention(q, k, v, causal=causal, kv_lens=lens)
    attention = dict(q=q, k=k, v=v, causal=causal, kv_lens=lens, tile_q=flash.TILE_Q, tile_kv=flash.TILE_KV)
    return o, want, seed, t, attention


def check_flash(kernel, B, H, N, M, d, *, causal, kv_lens=None, **options):
    """:func:`run_flash`, then O checked against the reference; returns O."""
    o, want, seed, _, attention = run_flash(kernel, B, H, N, M, d, causal=causal, kv_lens=kv_lens, **options)
    hint = ("with causal=True row i sees keys 0 ... i, its own position included" if causal else
            "every key below kv_lens[b] counts") + "; a row that sees no key gives 0"
    chk.check(o, want, name=f"O for B={B} H={H} N={N} M={M} d={d} causal={causal} kv_lens={kv_lens}",
              dims=("batch", "head", "row", "col"), tile={"row": flash.TILE_Q}, seed=seed, hints={"any": hint},
              attention=attention, kernel=kernel)
    return o
