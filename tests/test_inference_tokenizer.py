"""inference.tokenizer gives the ids ``transformers`` gives (its tokenizer built from the same GGUF file, on
its own code) on the course's own text, and its chat prompt is the file's Jinja chat template rendered."""

import json
import pathlib
import subprocess
import sys

import jinja2
import pytest

from inference import files, gguf
from inference.tokenizer import BYTE_CHARS, Tokenizer, chat_prompt

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONVERSATIONS = [
    [{"role": "user", "content": "What does a warp shuffle do?"}],
    [{"role": "system", "content": "Answer in one sentence."}, {"role": "user", "content": "What is Q4_1?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Name a GPU.\n\n  Two lines, trailing spaces  "}],
]


@pytest.fixture(scope="module")
def model_file():
    return gguf.read(files.model_path())


@pytest.fixture(scope="module")
def ours(model_file):
    return Tokenizer(model_file.metadata)


# transformers, in a process of its own: it takes the course's top-level package ``kernels`` for Hugging Face's
# package of that name (and fails importing from it), so the check it makes is answered "not installed" there.
_THEIRS = """
import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import transformers.utils, transformers.utils.import_utils as found
found.is_kernels_available = transformers.utils.is_kernels_available = lambda *args, **kwargs: False
from transformers import AutoTokenizer
path, texts = json.load(sys.stdin)
tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
json.dump([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], sys.stdout)
"""


def _theirs(texts: list[str]) -> list[list[int]]:
    done = subprocess.run([sys.executable, "-c", _THEIRS], input=json.dumps([str(files.model_path()), texts]),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _course_text() -> list[str]:
    """Every markdown and code cell of the lessons, and a few strings that test the edges."""
    texts = ["", " ", "\n\n\n", "a  b   c\t\td", "don't we'll they're I'M", "x_1 = y__2 + __init__",
             "café naïve Ünïcödé ß", "日本語のテキスト", "emoji 🚀🔥 and ‘quotes’ — dashes", "2026-12-05 3.14159 1e-5",
             "<|im_start|>user\nhi<|im_end|>\n", "a<|im_end|>b<|endoftext|>", "    indented code\n\tand tabs",
             "αβγ ∑ ∫ ≤ ≥ → ‖x‖", "https://example.org/path?q=1&r=2"]
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        texts += ["".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]]
    return texts


def test_ids_equal_transformers_on_the_course_s_text(ours):
    texts = _course_text()
    assert len(texts) > 300
    total = 0
    for text, expected in zip(texts, _theirs(texts), strict=True):
        assert ours.encode(text) == expected, text[:200]
        total += len(expected)
    assert total > 100_000          # every lesson's text: a corpus of real prose, code and formulas


def test_decode_inverts_encode(ours):
    for text in _course_text()[:60]:
        assert ours.decode(ours.encode(text)) == text
    assert ours.decode(ours.encode("café")[:1]).endswith("\ufffd") or ours.decode(ours.encode("café")[:1])


def test_byte_chars_are_a_bijection_with_a_printable_space():
    assert len(set(BYTE_CHARS)) == 256 and BYTE_CHARS[ord(" ")] == "Ġ" and BYTE_CHARS[ord("a")] == "a"


def test_chat_prompt_is_the_file_s_chat_template(model_file, ours):
    template = jinja2.Environment().from_string(model_file.metadata["tokenizer.chat_template"])
    for messages in CONVERSATIONS:
        for generation in (True, False):
            assert chat_prompt(messages, add_generation_prompt=generation) == template.render(
                messages=messages, add_generation_prompt=generation)
    ids = ours.encode(chat_prompt(CONVERSATIONS[0]))
    assert ids[0] == ours.ids["<|im_start|>"] and ids.count(ours.end_of_turn) == 2


def test_bad_input_is_named(model_file, ours):
    with pytest.raises(TypeError, match="text must be a str"):
        ours.encode(b"bytes")
    with pytest.raises(ValueError, match=r"messages\[1\] must be a dict with 'role' and 'content'"):
        chat_prompt([{"role": "user", "content": "a"}, {"role": "user"}])
    with pytest.raises(ValueError, match="this tokenizer reads byte-level BPE"):
        Tokenizer({**model_file.metadata, "tokenizer.ggml.model": "llama"})
