"""inference.numpy_model, the float32 reference forward pass, gives transformers' logits (its own llama code,
loading the same GGUF file: its weights dequantized by the gguf package, Q and K un-permuted to rotate halves),
and a RoPE that rotates halves on the file's weights does not."""

import json
import subprocess
import sys

import numpy as np
import pytest

from inference import files, gguf, numpy_model
from inference.numpy_model import Cache, NumpyModel
from inference.tokenizer import Tokenizer, chat_prompt

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

# transformers in a process of its own (see tests/test_inference_tokenizer.py: it mistakes the course's
# kernels package for Hugging Face's; use_kernels=False keeps it from asking for that package by name).
_THEIRS = """
import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import transformers.utils, transformers.utils.import_utils as found
found.is_kernels_available = transformers.utils.is_kernels_available = lambda *args, **kwargs: False
import numpy, torch
from transformers import AutoModelForCausalLM
path, ids, out = json.load(sys.stdin)
model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                             dtype=torch.float32, use_kernels=False)
with torch.no_grad():
    numpy.save(out, model(torch.tensor([ids])).logits[0].numpy())
"""


@pytest.fixture(scope="module")
def model():
    f = gguf.read(files.model_path())
    return NumpyModel(f), Tokenizer(f.metadata)


def test_logits_equal_transformers_and_rotating_halves_does_not(model, tmp_path):
    m, tok = model
    ids = tok.encode(chat_prompt(QUESTION))
    out = tmp_path / "logits.npy"
    done = subprocess.run([sys.executable, "-c", _THEIRS], input=json.dumps([str(files.model_path()), ids, str(out)]),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs, ours = np.load(out), m.forward(ids)
    assert ours.shape == theirs.shape == (len(ids), m.config.vocab)
    # float32 sums in another order: a few units of 1e-5 on logits of up to about 40
    assert np.abs(ours - theirs).max() < 1e-3 * np.abs(theirs).max()
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()

    def rotate_halves(x, positions, base):
        d = x.shape[-1]
        angles = positions[:, None] * base ** (-np.arange(0, d, 2) / d)
        cos, sin = (f(angles).astype(np.float32)[:, None, :] for f in (np.cos, np.sin))
        first, second = x[..., :d // 2], x[..., d // 2:]
        return np.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)

    original = numpy_model.rope
    numpy_model.rope = rotate_halves
    try:
        wrong = NumpyModel(m.file).forward(ids)
    finally:
        numpy_model.rope = original
    assert np.abs(wrong - theirs).max() > 0.1 * np.abs(theirs).max()


def test_greedy_answer_and_the_cache_give_the_prompt_s_logits(model):
    m, tok = model
    ids = tok.encode(chat_prompt(QUESTION))
    cache = Cache(m.config)
    whole = m.forward(ids)
    first = m.forward(ids[:-3], cache)
    rest = m.forward(ids[-3:], cache)                  # the last three tokens after the cached ones
    assert cache.length == len(ids) and cache.k[0].shape == (len(ids), m.config.kv_heads, m.config.head_dim)
    np.testing.assert_allclose(np.concatenate([first, rest]), whole, rtol=0, atol=1e-3)
    answer, nxt = [], int(rest[-1].argmax())
    while nxt != tok.end_of_turn and len(answer) < 16:
        answer.append(nxt)
        nxt = int(m.forward([nxt], cache)[-1].argmax())
    assert "Paris" in tok.decode(answer)


def test_config_and_bad_tokens(model):
    m, _ = model
    c = m.config
    assert (c.layers, c.hidden, c.ffn, c.heads, c.kv_heads, c.head_dim, c.group) == (30, 576, 1536, 9, 3, 64, 3)
    assert (c.vocab, c.context, c.rope_base, c.eps) == (49_152, 8192, 100_000.0, pytest.approx(1e-5))
    with pytest.raises(ValueError, match=r"tokens must be ids in 0 \.\.\. 49151, got 49152"):
        m.embed([1, 49_152])
