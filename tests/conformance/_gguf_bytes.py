"""GGUF files as bytes, laid out the way llama.cpp's tests/test-gguf.cpp handcrafts them: magic, version, tensor
and KV counts, KV pairs, tensor infos (name, n_dims, ne in ggml order, type id, data offset), zero padding to the
alignment, then the data. Written here by hand (not with the gguf package) so that malformed files can be built.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
UINT32 = 4  # gguf_type ids (gguf.h)
STRING = 8


@dataclass(frozen=True)
class Tensor:
    name: str
    type_id: int
    ne: tuple[int, ...]  # ggml order: ne[0] is the row; negative values are written as int64
    nbytes: int = 0  # data bytes (the expected ggml_nbytes); 0 for header-only files


def pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, value: int) -> bytes:
    return _string(key) + struct.pack("<iI", UINT32, value)


def kv_typed(key: str, type_id: int, payload: bytes = b"") -> bytes:
    """A KV pair with any type id (GGUF_TYPE_COUNT for test-gguf's KV_BAD_TYPE)."""
    return _string(key) + struct.pack("<i", type_id) + payload


def kv_string(key: str, value: str) -> bytes:
    return _string(key) + struct.pack("<i", STRING) + _string(value)


def gguf_file(tensors: tuple[Tensor, ...] = (), kvs: tuple[bytes, ...] = (), *, alignment: int = DEFAULT_ALIGNMENT,
              offset_alignment: int | None = None, offsets: tuple[int, ...] | None = None, version: int = 3,
              magic: bytes = b"GGUF", n_tensors: int | None = None, n_kv: int | None = None,
              with_data: bool = False) -> bytes:
    """The file; `offset_alignment` pads the tensor offsets with another alignment than the file states
    (test-gguf's INCONSISTENT_ALIGN), `offsets` overrides them (BAD_OFFSET)."""
    step = alignment if offset_alignment is None else offset_alignment
    out = bytearray(magic + struct.pack("<I", version))
    out += struct.pack("<q", len(tensors) if n_tensors is None else n_tensors)
    out += struct.pack("<q", len(kvs) if n_kv is None else n_kv)
    for kv in kvs:
        out += kv
    running = 0
    for index, tensor in enumerate(tensors):
        out += _string(tensor.name) + struct.pack("<I", len(tensor.ne))
        out += b"".join(struct.pack("<q", dim) for dim in tensor.ne)
        offset = running if offsets is None else offsets[index]
        out += struct.pack("<iQ", tensor.type_id, offset & (2**64 - 1))
        running += pad(tensor.nbytes, step)
    out += bytes(pad(len(out), alignment) - len(out))
    if with_data:
        out += bytes(i % 256 for i in range(running))
    return bytes(out)
