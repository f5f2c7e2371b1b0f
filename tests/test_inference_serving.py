"""inference.serving, continuous batching over the block manager, and inference.numpy_model.NumpyPagedModel, the
NumPy engine over the same paged cache, on a tiny random model of SmolLM2's architecture (inference.tiny).

Every request's greedy answer must be the one the NumPy model gives it alone (its own cache, one token at a time),
however requests join, share a system prompt's blocks and leave; the cache's blocks all come back; a request never
waits for blocks once admitted. Then the kernel engine on the simulator serves two requests as the NumPy one does."""

import numpy as np
import pytest

from inference.numpy_model import Cache, NumpyModel, NumpyPagedModel
from inference.serving import Request, Server
from inference.tiny import tiny_model

SYSTEM = [5, 9, 14, 3, 22, 7, 41, 18]                 # two full blocks of 4: shared by every request below
QUESTIONS = ([30, 2], [11, 60, 12, 4, 8], [70], [2, 2, 2], [44, 1, 9, 13])


@pytest.fixture(scope="module")
def model():
    return NumpyModel(tiny_model(0))


def alone(model, prompt, max_tokens, stop=()):
    """The greedy answer of the NumPy model to ``prompt`` with its own cache, one token at a time."""
    cache, out = Cache(model.config), []
    logits = model.forward(prompt, cache)[-1]
    while len(out) < max_tokens:
        out.append(int(np.argmax(logits)))
        if out[-1] in stop:
            break
        logits = model.forward([out[-1]], cache)[-1]
    return out


def test_the_paged_numpy_engine_computes_what_the_numpy_model_does(model):
    engine = NumpyPagedModel(None, num_blocks=8, block_size=4, context=32, model=model)
    cache = Cache(model.config)
    prompt = SYSTEM[:6]
    want = model.forward(prompt, cache)[-1]
    seq, got = engine.prefill(prompt)
    assert np.abs(got - want).max() < 1e-4
    for token in (4, 11, 7):                          # past a block's end: position 8 opens a third block
        want, got = model.forward([token], cache)[-1], engine.decode(seq, token)
        assert np.abs(got - want).max() < 1e-4
    other, computed = engine.add_sequence(SYSTEM[:4] + [41])
    assert computed == [4]                            # block 0 is the first sequence's
    assert np.abs(engine.step([(other, 4, 41)])[0] - model.forward(SYSTEM[:4] + [41])[-1]).max() < 1e-4


def test_requests_join_share_the_system_prompt_and_leave_with_their_own_answers(model):
    engine = NumpyPagedModel(None, num_blocks=32, block_size=4, context=48, model=model)
    server = Server(engine, max_batch=3)
    lengths = (6, 3, 9, 1, 5)
    for question, n in zip(QUESTIONS, lengths):
        server.submit(Request(SYSTEM + question, max_tokens=n))
    batches = []
    while not server.idle:
        server.step()
        batches.append(len(server.running))
        assert len(server.running) <= 3
    done = server.run()
    assert [len(r.output) for r in done] == list(lengths)
    for request, question, n in zip(done, QUESTIONS, lengths):
        assert request.output == alone(model, SYSTEM + question, n), request.id
        assert request.finish_reason == "length" and request.first_token_s is not None
    # the first request computes the system prompt; every later one shares its two full blocks while it lives
    assert done[0].computed_prompt_tokens == len(SYSTEM + QUESTIONS[0])
    assert all(r.computed_prompt_tokens == len(q) for r, q in zip(done[1:3], QUESTIONS[1:3]))
    assert engine.blocks.num_free == 32 and not engine.blocks.sequences()
    # requests joined while others were decoding, and left at different steps
    mixed = [s for s in server.stats if s.decode_tokens and s.prefill_tokens]
    assert mixed and max(s.left for s in server.stats) >= 1 and sum(s.joined for s in server.stats) == 5


def test_a_stop_token_ends_a_request_and_frees_its_blocks_for_a_waiting_one(model):
    prompt = SYSTEM + QUESTIONS[1]
    greedy = alone(model, prompt, 6)
    stop = greedy[2]
    first_stop = greedy.index(stop)
    engine = NumpyPagedModel(None, num_blocks=9, block_size=4, context=48, model=model)
    server = Server(engine)
    server.submit(Request(prompt, max_tokens=20, stop=(stop,)))      # reserves 9 blocks: the whole cache
    server.submit(Request(SYSTEM + QUESTIONS[0], max_tokens=2))
    server.step()
    assert len(server.running) == 1 and len(server.waiting) == 1    # the second waits for blocks
    done = server.run()
    assert done[0].output == greedy[:first_stop + 1] and done[0].finish_reason == "stop"
    assert done[1].output == alone(model, SYSTEM + QUESTIONS[0], 2)
    assert engine.blocks.num_free == 9


def test_sampling_is_seeded_per_request(model):
    def answers(seeds):
        engine = NumpyPagedModel(None, num_blocks=16, block_size=4, context=48, model=model)
        server = Server(engine)
        for seed in seeds:
            server.submit(Request(SYSTEM + [30, 2], max_tokens=8, temperature=1.5, seed=seed))
        return [r.output for r in server.run()]

    first = answers([1, 2])
    assert answers([1, 2]) == first and answers([2]) == first[1:]
    assert first[0] != first[1]


def test_bad_requests_are_refused_with_the_argument_named(model):
    server = Server(NumpyPagedModel(None, num_blocks=3, block_size=4, context=16, model=model))
    for request, words in ((Request([]), "request.prompt must hold at least one token"),
                           (Request([3, 80]), r"token ids in 0 \.\.\. 79, got 80"),
                           (Request([3], max_tokens=0), "request.max_tokens must be an int >= 1"),
                           (Request(list(range(16))), "the engine's context holds 16"),
                           (Request([3] * 10, max_tokens=10), "request needs 4 blocks of 4 positions .* the cache "
                                                              "has 3")):
        with pytest.raises(ValueError, match=words):
            server.submit(request)
    with pytest.raises(ValueError, match="max_batch must be an int >= 1"):
        Server(server.engine, max_batch=0)
    assert not server.waiting


def test_the_kernel_engine_serves_as_the_numpy_engine_does():
    """Two requests sharing a block of prompt, on the course's kernels in the simulator (one layer: a step of the
    tiny model takes seconds there)."""
    from inference.engine import KernelModel

    f = tiny_model(1, layers=1)
    answers = {}
    for name, engine in (("numpy", NumpyPagedModel(f, num_blocks=8, block_size=4, context=16)),
                         ("kernels", KernelModel(f, num_blocks=8, block_size=4, context=16))):
        server = Server(engine)
        server.submit(Request(SYSTEM[:4] + [30, 2], max_tokens=2))
        server.submit(Request(SYSTEM[:4] + [11], max_tokens=3))
        answers[name] = [r.output for r in server.run()]
        assert engine.blocks.num_free == 8
    assert answers["kernels"] == answers["numpy"]
