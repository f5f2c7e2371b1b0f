"""inference.sampling and ``course chat``: the sampler's rules, and a conversation on the NumPy path, streamed,
its second turn reading the first from the cache."""

import subprocess
import sys

import numpy as np
import pytest

from inference.chat import Chat, quiet_small_grids
from inference.sampling import sample


def test_greedy_takes_the_largest_and_sampling_keeps_to_the_nucleus():
    logits = np.log(np.array([0.05, 0.5, 0.3, 0.15]))
    assert sample(logits) == 1
    rng = np.random.default_rng(0)
    drawn = [sample(logits, rng, temperature=1.0, top_p=0.75) for _ in range(2000)]
    assert set(drawn) == {1, 2}                            # 0.5 + 0.3 reaches 0.75: tokens 0 and 3 never drawn
    assert 0.55 < drawn.count(1) / len(drawn) < 0.70       # renormalized: 0.5 / 0.8 = 0.625
    full = [sample(logits, rng, temperature=1.0) for _ in range(4000)]
    assert abs(full.count(0) / len(full) - 0.05) < 0.015
    again = [sample(logits, np.random.default_rng(7), temperature=0.8) for _ in range(3)]
    assert len(set(again)) == 1                            # one seed, one draw


def test_bad_sampling_arguments_are_named():
    with pytest.raises(ValueError, match="temperature must be 0"):
        sample([1.0, 2.0], np.random.default_rng(0), temperature=-1)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        sample([1.0, 2.0], np.random.default_rng(0), temperature=1, top_p=0)
    with pytest.raises(ValueError, match="rng .* is needed"):
        sample([1.0, 2.0], temperature=1)
    with pytest.raises(ValueError, match="logits must be finite"):
        sample([1.0, np.nan])


def test_a_conversation_on_the_numpy_path_remembers_its_first_turn():
    chat = Chat("numpy", max_tokens=24)
    pieces = list(chat.reply("What is the capital of France?"))
    assert len(pieces) > 3 and "Paris" in "".join(pieces)
    assert chat.path.cache.length == chat.length       # the turn's tokens, the answer and its end are cached
    second = "".join(chat.reply("And of Italy?"))
    assert "Rome" in second, second


def test_course_chat_streams_an_answer_from_piped_input():
    done = subprocess.run([sys.executable, "-m", "course", "chat", "--path", "numpy", "--max-tokens", "16"],
                          input="What is the capital of France?\n\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "on the NumPy forward pass" in done.stdout and "> What is the capital of France?" in done.stdout
    assert "Paris" in done.stdout


def test_the_kernel_path_turns_numba_s_low_occupancy_warning_off(monkeypatch):
    """On a GPU numba warns at every new grid of fewer than 128 blocks, and a 135M model's step launches many: the
    kernels' path turns the warning off so that the streamed answer is not interleaved with it."""
    from numba.cuda.core import config

    monkeypatch.setattr(config, "CUDA_LOW_OCCUPANCY_WARNINGS", 1)
    quiet_small_grids()
    assert config.CUDA_LOW_OCCUPANCY_WARNINGS == 0


@pytest.mark.gpu
def test_a_conversation_on_the_kernels_answers_as_the_numpy_path_does():
    """On a GPU the kernels' path runs the fused engine replayed as CUDA graphs, says so, and answers two turns with
    the NumPy path's greedy tokens."""
    kernels, numpy_path = Chat("kernels", max_tokens=24), Chat("numpy", max_tokens=24)
    assert "fused engine, each step replayed as a CUDA graph" in kernels.path.name
    for question in ("What is the capital of France?", "And of Italy?"):
        assert "".join(kernels.reply(question)) == "".join(numpy_path.reply(question))
    assert kernels.path.model.graph_replays > 0
