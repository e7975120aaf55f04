"""safetensors headers, read without the tensor data: an 8-byte little-endian length, then that many bytes
of JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}).

Pure Python, no dependencies: used for local checkpoints (a file read of 8 + N bytes) and for the Hub
(two HTTP range reads per shard, hub.py). The length is checked before it is read: a header claiming
more than MAX_HEADER_BYTES, or more than the file holds, is refused.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

# The safetensors library itself refuses headers over 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE); a parsed
# JSON header takes ~15x its size in memory (issue 31: 95 MB -> 1.45 GiB), so the budget is what real checkpoints
# need: a tensor's entry is ~100-200 bytes of JSON and a real shard holds a few thousand tensors at most (a 5 GB
# shard of 2-D bf16 weights; benchmarks/header_budgets.py), so 16 MiB and 65,536 entries hold the whole of the
# largest catalog model's checkpoint in one file and still refuse a hostile header quickly.
MAX_HEADER_BYTES = 16 * 1024 * 1024
MAX_HEADER_TENSORS = 1 << 16

# safetensors dtype -> (torch-style name used across the tool, bits per element)
SAFETENSORS_DTYPES: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 8),
    "U8": ("uint8", 8),
    "I8": ("int8", 8),
    "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E5M2": ("float8_e5m2", 8),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8),
    "E8M0": ("float8_e8m0fnu", 8),
    "I16": ("int16", 16),
    "U16": ("uint16", 16),
    "F16": ("float16", 16),
    "BF16": ("bfloat16", 16),
    "I32": ("int32", 32),
    "U32": ("uint32", 32),
    "F32": ("float32", 32),
    "I64": ("int64", 64),
    "U64": ("uint64", 64),
    "F64": ("float64", 64),
    "C64": ("complex64", 64),
    "F4": ("float4_e2m1fn_x2", 4),
    "F6_E2M3": ("float6_e2m3", 6),
    "F6_E3M2": ("float6_e3m2", 6),
}


class HeaderError(ValueError):
    """A safetensors header that cannot be read; the message is one line naming the file."""


class TruncatedHeaderError(HeaderError):
    pass


class OversizedHeaderError(HeaderError):
    pass


class InvalidHeaderError(HeaderError):
    pass


class UnknownDtypeError(HeaderError):
    pass


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # torch-style name ("bfloat16", "int32", "float8_e4m3fn", ...)
    stored_dtype: str  # as written in the header ("BF16", ...)
    shape: tuple[int, ...]
    nbytes: int  # data_offsets end - begin (checked against shape x dtype)

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True)
class SafetensorsHeader:
    source: str  # file path or URL, for messages
    header_bytes: int  # the JSON length N (the file read is 8 + N)
    tensors: tuple[TensorEntry, ...]
    metadata: dict = field(default_factory=dict)

    @property
    def data_bytes(self) -> int:
        return sum(tensor.nbytes for tensor in self.tensors)


def header_length(prefix: bytes, source: str, file_size: int | None = None, limit: int = MAX_HEADER_BYTES) -> int:
    """N from the 8-byte prefix, refused before anything else is read when it is absurd."""
    if len(prefix) < 8:
        raise TruncatedHeaderError(f"{source}: truncated safetensors file ({len(prefix)} bytes, the length prefix alone is 8)")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > limit:
        raise OversizedHeaderError(
            f"{source}: safetensors header claims {length:,} bytes (over the {limit:,}-byte limit): not a safetensors file?"
        )
    if length < 2:
        raise InvalidHeaderError(f"{source}: safetensors header of {length} bytes cannot hold a JSON object")
    if file_size is not None and 8 + length > file_size:
        raise TruncatedHeaderError(
            f"{source}: truncated safetensors file: the header claims {length:,} bytes but the file has {file_size:,}"
        )
    return length


def _whole(value) -> int:
    """A JSON integer as the safetensors format has them (the Rust reader takes usize: no floats, no bools)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(value)
    return value


class _EntryBudget:
    """json.loads' object_pairs_hook: counts the objects as they are built and stops the parse past the budget (a
    header of millions of tiny entries is refused before it takes its gigabytes); calls `deadline` now and then."""

    def __init__(self, source: str, deadline=None):
        self.source, self.deadline, self.objects = source, deadline, 0

    def __call__(self, pairs: list) -> dict:
        self.objects += 1
        if self.objects > MAX_HEADER_TENSORS + 2:  # the tensors' entries, __metadata__ and the header itself
            raise OversizedHeaderError(f"{self.source}: safetensors header holds over {MAX_HEADER_TENSORS:,} tensors "
                                       "(a real shard holds a few thousand): not a real checkpoint?")
        if self.deadline is not None and not self.objects & 0xFFF:
            self.deadline()
        return dict(pairs)


def parse_header(blob: bytes, source: str, file_size: int | None = None, deadline=None) -> SafetensorsHeader:
    """The JSON part (without the 8-byte prefix). `file_size` (whole file) checks the data offsets; `deadline` (no
    argument) is called every few thousand entries and raises once the caller's time is up."""
    try:
        raw = json.loads(blob.decode("utf-8").rstrip(" \x00"), object_pairs_hook=_EntryBudget(source, deadline))
    except RecursionError:
        raise InvalidHeaderError(f"{source}: safetensors header is JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise InvalidHeaderError(f"{source}: safetensors header is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise InvalidHeaderError(f"{source}: safetensors header is not valid JSON ({error.msg} at byte {error.pos})") from None
    if not isinstance(raw, dict):
        raise InvalidHeaderError(f"{source}: safetensors header is not a JSON object")
    metadata = raw.pop("__metadata__", None) or {}
    if len(raw) > MAX_HEADER_TENSORS:  # the parse stops a little past it (the hook cannot tell the levels apart)
        raise OversizedHeaderError(f"{source}: safetensors header holds over {MAX_HEADER_TENSORS:,} tensors (a real "
                                   "shard holds a few thousand): not a real checkpoint?")
    tensors = []
    data_end = 0
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise InvalidHeaderError(f"{source}: tensor {name!r} has no dtype/shape/data_offsets object")
        try:
            stored = entry["dtype"]
            shape = tuple(_whole(dim) for dim in entry["shape"])
            begin, end = (_whole(offset) for offset in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise InvalidHeaderError(f"{source}: tensor {name!r} lacks a valid dtype, shape or data_offsets") from None
        if not isinstance(stored, str) or len(shape) > 16:
            raise InvalidHeaderError(f"{source}: tensor {name!r} has a dtype that is not a name, or over 16 dimensions")
        if stored not in SAFETENSORS_DTYPES:
            raise UnknownDtypeError(
                f"{source}: tensor {name!r} has dtype {stored!r}, which this tool does not know "
                f"(known: {', '.join(sorted(SAFETENSORS_DTYPES))})"
            )
        dtype, bits = SAFETENSORS_DTYPES[stored]
        if any(dim < 0 for dim in shape) or end < begin or begin < 0:
            raise InvalidHeaderError(f"{source}: tensor {name!r} has a negative shape or reversed data_offsets")
        count = 1
        for dim in shape:
            count *= dim
        if -(-count * bits // 8) != end - begin:
            raise InvalidHeaderError(
                f"{source}: tensor {name!r} {stored}{list(shape)} needs {-(-count * bits // 8):,} bytes but its "
                f"data_offsets span {end - begin:,}"
            )
        tensors.append(TensorEntry(name, dtype, stored, shape, end - begin))
        data_end = max(data_end, end)
    if file_size is not None and 8 + len(blob) + data_end > file_size:
        raise TruncatedHeaderError(
            f"{source}: truncated safetensors file: its tensors end at byte {8 + len(blob) + data_end:,} "
            f"but the file has {file_size:,}"
        )
    if not isinstance(metadata, dict):
        metadata = {}
    return SafetensorsHeader(source, len(blob), tuple(tensors), dict(metadata))


def read_header(path: str | os.PathLike, limit: int = MAX_HEADER_BYTES) -> SafetensorsHeader:
    """Read the header of a local .safetensors file: 8 + N bytes, never the tensor data."""
    from ..units import open_regular_file

    path = Path(path)
    with open_regular_file(path, "the safetensors file") as handle:
        size = os.fstat(handle.fileno()).st_size
        length = header_length(handle.read(8), str(path), size, limit)
        blob = handle.read(length)
    if len(blob) != length:
        raise TruncatedHeaderError(f"{path}: truncated safetensors header ({len(blob):,} of {length:,} bytes)")
    return parse_header(blob, str(path), size)

