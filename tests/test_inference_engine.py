"""inference.engine, the model on the course's kernels, on the simulator with a tiny random model of SmolLM2's
architecture (inference.tiny): the NumPy model's logits and greedy tokens, one sequence and several at once,
a prompt prefix shared through the block manager."""

import numpy as np
import pytest

from inference.engine import KernelModel
from inference.numpy_model import Cache, NumpyModel
from inference.tiny import tiny_model

PROMPT = [3, 17, 5, 60, 2, 9]


@pytest.fixture(scope="module")
def models():
    f = tiny_model(0)
    return NumpyModel(f), f


def _close(ours, theirs):
    assert np.abs(ours - theirs).max() < 1e-5 * max(1.0, np.abs(theirs).max()) * 10, np.abs(ours - theirs).max()


def test_greedy_tokens_and_logits_equal_the_numpy_model_s(models):
    ref, f = models
    engine = KernelModel(f, num_blocks=8, block_size=4, context=32)
    cache = Cache(ref.config)
    expected = ref.forward(PROMPT, cache)[-1]
    seq, logits = engine.prefill(PROMPT)
    tokens = []
    for _ in range(4):
        _close(logits, expected)
        top = np.sort(expected)[-2:]
        assert top[1] - top[0] > 1e-3           # no near tie: greedy decoding must agree
        assert int(logits.argmax()) == int(expected.argmax())
        tokens.append(int(expected.argmax()))
        expected = ref.forward([tokens[-1]], cache)[-1]
        logits = engine.decode(seq, tokens[-1])
    assert len(set(tokens)) > 2, tokens          # the tiny model does not just repeat a token
    assert engine.blocks.context_len(seq) == len(PROMPT) + 4


def test_two_sequences_in_one_step_and_a_shared_prefix(models):
    ref, f = models
    engine = KernelModel(f, num_blocks=8, block_size=4, context=32)
    other = PROMPT[:4] + [41]                    # its first block (4 positions) is PROMPT's
    first, _ = engine.prefill(PROMPT)
    second, computed = engine.add_sequence(other)
    assert computed == [4]                       # positions 0 ... 3 are read from the first sequence's block
    assert engine.blocks.block_table(second)[0] == engine.blocks.block_table(first)[0]
    logits = engine.step([(second, 4, other[4])])[0]
    _close(logits, ref.forward(other)[-1])
    # one decode step for both: each token attends to its own sequence only
    a, b = engine.append(first, 7), engine.append(second, 8)
    both = engine.step([(first, a, 7), (second, b, 8)], logits_for=[0, 1])
    _close(both[0], ref.forward(PROMPT + [7])[-1])
    _close(both[1], ref.forward(other + [8])[-1])


def test_a_prompt_whose_blocks_are_all_shared_computes_only_its_last_token(models):
    ref, f = models
    engine = KernelModel(f, num_blocks=8, block_size=4, context=32)
    engine.prefill(PROMPT[:4] + [41, 42, 43, 44, 45])
    seq, logits = engine.prefill(PROMPT[:4] + [41, 42, 43, 44, 45])      # 9 tokens: two full blocks shared
    assert engine.launches.count("embedding_q8_0_rows") == 1 and engine.kernels_launched < 40
    _close(logits, ref.forward(PROMPT[:4] + [41, 42, 43, 44, 45])[-1])
    assert engine.blocks.refcount(engine.blocks.block_table(seq)[0]) == 2


def test_steps_refuse_positions_the_block_manager_has_not_registered(models):
    _, f = models
    engine = KernelModel(f, num_blocks=4, block_size=4, context=32)
    seq, _ = engine.add_sequence([1, 2])
    with pytest.raises(ValueError, match="position 2 of sequence 0 is not registered"):
        engine.step([(seq, 2, 5)])
    with pytest.raises(ValueError, match="items must hold at least one"):
        engine.step([])


PROMPTS = ("What is the capital of France?",
           "Write a Python function that returns the sum of the digits of 90210.",
           "Traduis en français : « The weather is nice today. »")


@pytest.mark.gpu
def test_the_real_model_on_the_gpu_decodes_the_numpy_model_s_tokens():
    """SmolLM2-135M on the kernels, 64 greedy tokens after each of three chat prompts (digits and code, non-ASCII
    text): the NumPy model's tokens wherever its top two logits are not within the engine's error of a tie; the
    decode rate printed (the recordings of day 10 will hold it)."""
    import time

    from inference import files, gguf
    from inference.tokenizer import Tokenizer, chat_prompt

    f = gguf.read(files.model_path())
    tok, ref = Tokenizer(f.metadata), NumpyModel(f)
    engine = KernelModel(f, num_blocks=64, block_size=16, context=1024)
    for prompt in PROMPTS:
        ids = tok.encode(chat_prompt([{"role": "user", "content": prompt}]))
        cache = Cache(ref.config)
        expected = ref.forward(ids, cache)[-1]
        seq, logits = engine.prefill(ids)
        tokens, worst, start = [], 0.0, time.perf_counter()
        for _ in range(64):
            worst = max(worst, float(np.abs(logits - expected).max()))
            top2 = np.sort(expected)[-2:]
            if top2[1] - top2[0] > 1e-2:
                assert int(logits.argmax()) == int(expected.argmax()), (prompt, tok.decode(tokens))
            tokens.append(int(expected.argmax()))
            logits = engine.decode(seq, tokens[-1])
            expected = ref.forward([tokens[-1]], cache)[-1]
        engine.free(seq)
        seq, logits = engine.prefill(ids)
        start = time.perf_counter()
        for token in tokens[:32]:
            logits = engine.decode(seq, token)
        rate = 32 / (time.perf_counter() - start)
        engine.free(seq)
        print(f"\n{prompt!r}: {tok.decode(tokens)!r}\n  largest logit difference {worst:.2e}; "
              f"{rate:.1f} tokens/s over 32 decode steps after a prompt of {len(ids)}")
        assert worst < 1e-2


@pytest.mark.gpu
def test_a_random_model_of_smollm2_s_shape_decodes_the_numpy_model_s_tokens_on_the_gpu():
    """SmolLM2-135M's shapes and formats with seeded random weights (inference.tiny): the same bytes and launches
    per token as the real model, so its decode rate is the real model's; 16 greedy tokens equal the NumPy model's
    wherever its top two logits are not within the engine's error of a tie."""
    import time

    f = tiny_model(0, layers=30, hidden=576, ffn=1536, heads=9, kv_heads=3, vocab=49_152, context=1024)
    ref, engine = NumpyModel(f), KernelModel(f, num_blocks=64, block_size=16, context=1024)
    prompt = list(range(100, 140))
    cache = Cache(ref.config)
    expected = ref.forward(prompt, cache)[-1]
    seq, logits = engine.prefill(prompt)
    tokens, worst = [], 0.0
    for _ in range(16):
        worst = max(worst, float(np.abs(logits - expected).max()))
        top2 = np.sort(expected)[-2:]
        if top2[1] - top2[0] > 1e-2:
            assert int(logits.argmax()) == int(expected.argmax()), tokens
        tokens.append(int(expected.argmax()))
        logits = engine.decode(seq, tokens[-1])
        expected = ref.forward([tokens[-1]], cache)[-1]
    start = time.perf_counter()
    for token in tokens:
        engine.decode(seq, token)
    rate = len(tokens) / (time.perf_counter() - start)
    print(f"\nlargest logit difference {worst:.2e} of {np.abs(expected).max():.1f}; {rate:.1f} tokens/s at batch 1")
    assert worst < 1e-3 * np.abs(expected).max()


def test_graphs_are_refused_on_the_simulator(models):
    """A CUDA graph needs a GPU: asking for one on the simulator says so and names the way without."""
    _, f = models
    with pytest.raises(ValueError, match="graphs=True .* needs a GPU.*graphs=False"):
        KernelModel(f, num_blocks=8, block_size=4, context=32, graphs=True)


def test_kernel_timings_are_refused_on_the_simulator_and_beside_timings(models):
    """The GPU's time of each call needs CUDA's timing events: on the simulator asking for it says so and names
    ``timings``; with both set the step refuses to time the same call two ways."""
    _, f = models
    engine = KernelModel(f, num_blocks=8, block_size=4, context=32)
    seq, _ = engine.prefill(PROMPT)
    engine.kernel_timings = {}
    with pytest.raises(ValueError, match="simulator has not: use timings"):
        engine.decode(seq, 1)
    engine.timings = {}
    with pytest.raises(ValueError, match="cannot be set at once"):
        engine.decode(seq, 1)


@pytest.mark.gpu
def test_kernel_timings_count_every_call_and_time_less_than_the_synchronized_calls():
    """On a GPU, a decode step timed both ways: the same launchers and calls, each launcher's kernels alone taking
    less than its synchronized calls (which add the launches), and the greedy token unchanged by the timing."""
    f = tiny_model(0, layers=4, hidden=576, ffn=1536, heads=9, kv_heads=3, vocab=4096, context=256)
    engine = KernelModel(f, num_blocks=16, block_size=16, context=256, fused=True)
    seq, logits = engine.prefill(PROMPT)
    token = int(logits.argmax())
    engine.timings = {}
    plain = engine.decode(seq, token)
    engine.timings, timed = None, engine.timings
    engine.kernel_timings = {}
    alone = engine.decode(seq, int(plain.argmax()))
    kernels, engine.kernel_timings = engine.kernel_timings, None
    assert {name: calls for name, (calls, _) in kernels.items()} == {name: calls for name, (calls, _) in timed.items()}
    for name, (_, seconds) in kernels.items():
        assert 0 < seconds < timed[name][1], (name, seconds, timed[name][1])
    assert np.isfinite(alone).all()


@pytest.mark.gpu
def test_steps_replayed_as_cuda_graphs_give_the_eager_engine_s_logits():
    """SmolLM2's shapes with random weights on the fused engine, eager and replayed as graphs: the same greedy
    tokens over 40 decode steps that cross a bucket of GRAPH_CONTEXT_STEP positions (a new graph), logits within
    float32's error (attention's partitions are sized for the bucket, so its sums may be split otherwise); and
    two sequences decoding in one step. Both rates printed."""
    import time

    from inference.engine import GRAPH_CONTEXT_STEP

    f = tiny_model(0, layers=30, hidden=576, ffn=1536, heads=9, kv_heads=3, vocab=49_152, context=1024)
    eager = KernelModel(f, num_blocks=64, block_size=16, context=1024, fused=True)
    graphed = KernelModel(f, num_blocks=64, block_size=16, context=1024, fused=True, graphs=True)
    prompt = list(range(100, 100 + GRAPH_CONTEXT_STEP - 20))
    (s1, l1), (s2, l2) = eager.prefill(prompt), graphed.prefill(prompt)
    np.testing.assert_allclose(l2, l1, rtol=0, atol=1e-4 * np.abs(l1).max())
    times = {"eager": [], "graphs": []}
    for _ in range(40):
        token = int(l1.argmax())
        start = time.perf_counter()
        l1 = eager.decode(s1, token)
        times["eager"].append(time.perf_counter() - start)
        start = time.perf_counter()
        l2 = graphed.decode(s2, token)
        times["graphs"].append(time.perf_counter() - start)
        np.testing.assert_allclose(l2, l1, rtol=0, atol=1e-4 * np.abs(l1).max())
        assert int(l2.argmax()) == int(l1.argmax())
    # two buckets of decode, one token a step; the prefill ran eagerly and left no graph
    assert graphed.graph_replays >= 36 and sorted(t for t, _ in graphed._graphs) == [1, 1]
    other = [7, 8, 9]
    (e1, _), (g1, _) = eager.prefill(other), graphed.prefill(other)
    both = [(s1, eager.append(s1, 5), 5), (e1, eager.append(e1, 6), 6)]
    both_g = [(s2, graphed.append(s2, 5), 5), (g1, graphed.append(g1, 6), 6)]
    want, got = eager.step(both, logits_for=[0, 1]), graphed.step(both_g, logits_for=[0, 1])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    rate = {name: 1 / np.median(t[2:]) for name, t in times.items()}
    print(f"\ndecode at batch 1: eager {rate['eager']:.0f} tokens/s, graphs {rate['graphs']:.0f} tokens/s")


@pytest.mark.gpu
def test_day10_s_recorder_runs_quick_on_the_gpu(tmp_path):
    """``python -m course.record day10 --quick``'s path on the real model: its checks agree, its rows are there."""
    import json

    from course.record import day10

    paths = day10.record(tmp_path, quick=True)
    checks, decode, serving = (json.loads(p.read_text()) for p in paths)
    assert all(r["tokens_equal"] for r in checks["rows"]), checks["rows"]
    assert any(r["what"] == "launcher" for r in decode["rows"]) and serving["rows"]


@pytest.mark.parametrize("fmt", ["q8_0", "q4_1"])
def test_a_step_s_tokens_in_one_launch_equal_one_launch_per_token(fmt):
    """kernels.token_gemv sums each token as day 9's warp-per-row rung does: on the simulator, bit for bit, for
    T of 1, 8 (one pass) and 11 (two), rows not a multiple of the warps of a block and a row of 33 blocks (lane 0
    takes two)."""
    from kernels import quantized_gemv, reference, token_gemv

    rng = np.random.default_rng(10)
    one = getattr(quantized_gemv, f"{fmt}_gemv_warp_per_row")
    many = getattr(token_gemv, f"{fmt}_gemm_tokens_warp_per_row")
    for tokens, rows, k in ((1, 5, 64), (8, 3, 96), (11, 6, 33 * 32)):
        w = getattr(reference, f"quantize_{fmt}")(rng.standard_normal((rows, k))).reshape(rows, k // 32, -1)
        x = rng.standard_normal((tokens, k)).astype(np.float32)
        together = many(w, x)
        assert np.array_equal(together, np.stack([one(w, x[t]) for t in range(tokens)])), (tokens, rows, k)


def test_the_wide_head_rung_takes_any_rows_tokens_and_width():
    """kernels.token_gemv.q8_0_gemm_tokens_wide (the fused engine's head): rows not a multiple of a warp's 8, tokens
    from 1 to 20, K of one round (576: nine chunks a lane), of two (1,280) and of less than a lane's share (64);
    the GGUF bytes and ``q8_0_repack``'s copy give the same bits; every int8 code, -128 included, exactly. A test of
    the test: the scales of each row's blocks shifted by one (a layout read wrong) fail the check."""
    from course.checking import CheckFailure, check
    from kernels import reference, token_gemv
    from kernels.quantized_gemv_wide import Q8_0Repacked, q8_0_repack

    rng = np.random.default_rng(11)
    for tokens, rows, k in ((1, 70, 576), (3, 9, 1280), (20, 17, 64)):
        w = reference.quantize_q8_0(rng.standard_normal((rows, k))).reshape(rows, k // 32, 34)
        x = rng.standard_normal((tokens, k)).astype(np.float32)
        want = x.astype(np.float64) @ reference.dequantize_q8_0(w.reshape(rows, -1)).T
        got = token_gemv.q8_0_gemm_tokens_wide(w, x)
        check(got, want, name=f"wide head {tokens} x {rows} x {k}")
        packed = q8_0_repack(w)
        assert np.array_equal(token_gemv.q8_0_gemm_tokens_wide(packed, x), got)
        shifted = Q8_0Repacked(packed.codes, np.ascontiguousarray(np.roll(packed.scales, 1, axis=1)))
        if k > 32:
            with pytest.raises(CheckFailure):
                check(token_gemv.q8_0_gemm_tokens_wide(shifted, x), want, name="scales shifted")
    # Every int8 code, -128 (which a quantizer never writes but a file may hold) to 127: 8 rows of 32, scale 1
    codes = np.arange(256, dtype=np.uint8).reshape(8, 1, 32)
    w = np.concatenate([np.broadcast_to(np.frombuffer(np.float16(1.0).tobytes(), np.uint8), (8, 1, 2)), codes], axis=2)
    x = np.eye(32, dtype=np.float32)
    assert np.array_equal(token_gemv.q8_0_gemm_tokens_wide(w, x).T, codes.reshape(8, 32).view(np.int8))


def test_the_quarters_rungs_read_every_nibble_exactly():
    """The Q4_1 quarters rungs turn codes into floats through 2^23's bits (kernels.token_gemv.nibble): every code, 0
    to 15, at every position of a word, gives its number (d = 1, m = 0, x the identity: y is W itself)."""
    from kernels import token_gemv

    low = (np.arange(16)[:, None] + np.arange(16)[None, :]) % 16            # row r, byte j: weight j = (r + j) % 16
    high = np.broadcast_to(np.arange(16)[:, None], (16, 16))               # weight 16 + j = r
    scales = np.frombuffer(np.array([1.0, 0.0], np.float16).tobytes(), np.uint8)
    w = np.concatenate([np.broadcast_to(scales, (16, 4)), (low | high << 4).astype(np.uint8)], axis=1)
    want = np.concatenate([low, high], axis=1).astype(np.float32)
    got = token_gemv.q4_1_gemm_tokens_quarters(w.reshape(16, 1, 20), np.eye(32, dtype=np.float32))
    assert np.array_equal(got.T, want)


def test_the_fused_engine_launches_6_kernels_a_block_and_decodes_the_numpy_model_s_tokens(models):
    """``fused=True`` (kernels.fused_llama): the same logits as the NumPy model within float32's error, the same greedy
    tokens, 6 kernels a block where the plain engine launches 17; one step for two requests launches as many; a
    file whose layers are not all Q4_1 is refused."""
    from inference.tiny import TinyFile
    from kernels import reference

    ref, f = models
    engine = KernelModel(f, num_blocks=8, block_size=4, context=32, fused=True)
    cache = Cache(ref.config)
    expected = ref.forward(PROMPT[:4], cache)[-1]
    seq, logits = engine.prefill(PROMPT[:4])
    _close(logits, expected)
    token = int(expected.argmax())
    assert int(logits.argmax()) == token
    logits = engine.decode(seq, token)
    _close(logits, ref.forward([token], cache)[-1])
    layers = ref.config.layers
    assert engine.kernels_launched == 3 + 6 * layers
    plain = KernelModel(f, num_blocks=8, block_size=4, context=32)
    plain.decode(plain.add_sequence([])[0], 7)
    assert plain.kernels_launched == 3 + 17 * layers
    other, _ = engine.add_sequence([5])
    engine.step([(seq, engine.append(seq, 4), 4), (other, engine.append(other, 6), 6)], logits_for=[0, 1])
    assert engine.kernels_launched == 3 + 6 * layers
    arrays = {name: (info.ggml_type.name, info.shape, f.tensor(name)) for name, info in f.tensors.items()}
    rows = arrays["blk.1.attn_q.weight"][2].shape[0]
    dense = reference.dequantize_q4_1(arrays["blk.1.attn_q.weight"][2].reshape(rows, -1))
    arrays["blk.1.attn_q.weight"] = ("Q8_0", (rows, dense.shape[1]),
                                     reference.quantize_q8_0(dense).reshape(rows, -1, 34))
    with pytest.raises(ValueError, match=r"fused=True runs Q4_1 layers \(kernels.fused_llama\); layer 1 has "
                                         r"\['Q4_1', 'Q8_0'\]"):
        KernelModel(TinyFile(f.metadata, arrays), num_blocks=4, block_size=4, context=16, fused=True)
