"""GGUF, the file format of llama.cpp, read from its bytes (version 2 and 3, little-endian).

A GGUF file is a header, a table of metadata, a table of tensors, then the tensors' data:

- header: the magic ``b"GGUF"``, the version (uint32), the number of tensors and of metadata entries (uint64);
- metadata: each entry a key (a string: uint64 length, then UTF-8 bytes), a value type (uint32) and the value:
  a number, a bool, a string, or an array (element type uint32, count uint64, the elements);
- tensors: each a name, the number of dimensions (uint32), the dimensions (uint64 each, the fastest-varying
  first: a matrix of N rows of K weights is ``[K, N]``), the ggml type (uint32) and the offset of its data
  from the start of the data section (uint64);
- the data section starts at the next multiple of ``general.alignment`` (32 when absent), and each tensor's
  data at its offset there.

``read(path)`` maps the file (``numpy.memmap``, read-only: nothing is copied until used) and returns a
:class:`GGUFFile`. A tensor of a block format comes back as its raw bytes, (rows, blocks, block bytes) uint8,
the layout day 9's kernels read (``kernels.quantized_gemv``); F32 and F16 tensors come back as numbers, shaped
with the slowest dimension first (NumPy's order).
"""

from __future__ import annotations

import dataclasses
import pathlib
import struct

import numpy as np

__all__ = ["GGML_TYPES", "GGMLType", "TensorInfo", "GGUFFile", "read"]


@dataclasses.dataclass(frozen=True)
class GGMLType:
    """A ggml tensor type: its name, weights per block and bytes per block (1 and the item size for numbers)."""

    name: str
    block_weights: int
    block_bytes: int


# The types this model and day 9 use, by their number in the file.
GGML_TYPES = {0: GGMLType("F32", 1, 4), 1: GGMLType("F16", 1, 2), 2: GGMLType("Q4_0", 32, 18),
              3: GGMLType("Q4_1", 32, 20), 8: GGMLType("Q8_0", 32, 34)}

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One row of the tensor table: ``shape`` slowest dimension first (NumPy's order; the file stores it the
    other way round), ``offset`` in bytes from the start of the data section."""

    name: str
    shape: tuple
    ggml_type: GGMLType
    offset: int

    @property
    def nbytes(self) -> int:
        count = int(np.prod(self.shape, dtype=np.int64))
        return count // self.ggml_type.block_weights * self.ggml_type.block_bytes


class _Cursor:
    """Reads the little-endian fields of the header and tables in order."""

    def __init__(self, data: np.ndarray, path):
        self.data, self.at, self.path = data, 0, path

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise ValueError(f"{self.path}: the file ends inside its header or tables (at byte {self.at:,})")
        chunk = self.data[self.at:self.at + n].tobytes()
        self.at += n
        return chunk

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.scalar("<Q")).decode("utf-8")

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element, count = self.scalar("<I"), self.scalar("<Q")
            if element in _SCALARS and element != 7:        # numbers: one read, as a NumPy array
                dtype = np.dtype(_SCALARS[element])
                return np.frombuffer(self.take(count * dtype.itemsize), dtype).copy()
            return [self.value(element) for _ in range(count)]
        raise ValueError(f"{self.path}: unknown metadata value type {kind} at byte {self.at - 4:,}")


class GGUFFile:
    """A GGUF file read by :func:`read`: ``version``, ``metadata`` (key -> value: numbers, strings, lists or
    NumPy arrays of numbers), ``tensors`` (name -> :class:`TensorInfo`, in the file's order), ``data_start``, and
    :meth:`tensor` for a tensor's data."""

    def __init__(self, path: pathlib.Path, data: np.ndarray, version: int, metadata: dict, tensors: dict,
                 data_start: int):
        self.path, self._data, self.version = path, data, version
        self.metadata, self.tensors, self.data_start = metadata, tensors, data_start

    def tensor(self, name: str) -> np.ndarray:
        """The data of tensor ``name``, a read-only view of the file: F32 and F16 as numbers of the tensor's
        shape; a block format (Q8_0, Q4_0, Q4_1) as (rows, blocks, block bytes) uint8 (rows: the product of every
        dimension but the last; blocks: the last dimension / 32)."""
        if name not in self.tensors:
            near = [t for t in self.tensors if name.split(".")[-1] in t][:5]
            raise KeyError(f"no tensor {name!r} in {self.path.name}; {len(self.tensors)} tensors, e.g. "
                           f"{', '.join(near or list(self.tensors)[:5])}")
        info = self.tensors[name]
        start = self.data_start + info.offset
        raw = self._data[start:start + info.nbytes]
        kind = info.ggml_type
        if kind.block_weights == 1:
            return raw.view("<f4" if kind.name == "F32" else "<f2").reshape(info.shape)
        rows = int(np.prod(info.shape[:-1], dtype=np.int64))
        return raw.reshape(rows, info.shape[-1] // kind.block_weights, kind.block_bytes)

    def __repr__(self) -> str:
        return f"GGUFFile({self.path.name!r}, version {self.version}, {len(self.tensors)} tensors)"


def read(path) -> GGUFFile:
    """Map the GGUF file at ``path`` and read its header and tables (the tensors' data stays in the file until
    a tensor is used). Errors name the file and what is wrong: not a GGUF file, a version other than 2 or 3, a
    tensor type this module does not know, a tensor past the end of the file."""
    path = pathlib.Path(path)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    cursor = _Cursor(data, path)
    if cursor.take(4) != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it does not start with the bytes GGUF)")
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"{path} is GGUF version {version}; this reader knows versions 2 and 3")
    tensor_count, metadata_count = cursor.scalar("<Q"), cursor.scalar("<Q")
    metadata = {}
    for _ in range(metadata_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.scalar("<I"))
    tensors = {}
    for _ in range(tensor_count):
        name = cursor.string()
        dims = [cursor.scalar("<Q") for _ in range(cursor.scalar("<I"))]
        kind, offset = cursor.scalar("<I"), cursor.scalar("<Q")
        if kind not in GGML_TYPES:
            raise ValueError(f"{path}: tensor {name!r} has ggml type {kind}; this reader knows "
                             + ", ".join(f"{k} ({t.name})" for k, t in GGML_TYPES.items()))
        tensors[name] = TensorInfo(name, tuple(reversed(dims)), GGML_TYPES[kind], offset)
    alignment = int(metadata.get("general.alignment", 32))
    data_start = -(-cursor.at // alignment) * alignment
    for info in tensors.values():
        if data_start + info.offset + info.nbytes > len(data):
            raise ValueError(f"{path}: tensor {info.name!r} ends past the end of the file")
    return GGUFFile(path, data, version, metadata, tensors, data_start)
