"""llama.cpp's tests/test-gguf.cpp (vendored by llama-cpp-python 0.3.8 = ~b4880 and 0.3.16 = ~b6150), as this
project's expectations on its GGUF reader (model/gguf_source.parse_prefix), the tensor table llama.cpp's
weights rules read (engines/llamacpp/weights.read_gguf_tensors) and ggml's row sizes (ggml_types).

test-gguf handcrafts files from random types and shapes; here one file per case, with the same layout rules:
data offset = header padded to general.alignment (default 32), tensor i at the sum of GGML_PAD(ggml_row_size,
alignment) of those before it, every ggml type with a nonzero type_size accepted, and the malformed headers it
expects gguf_init to refuse. The pytest id is `test_gguf[<handcrafted file type>]@llamacpp-<llama-cpp-python
release>`. Not translated: NOT_TRANSLATED.md.
"""
from __future__ import annotations

import pytest

from vram_detective.engines.llamacpp.ggml_types import row_size
from vram_detective.engines.llamacpp.weights import read_gguf_tensors
from vram_detective.model.gguf_source import GGUFError, parse_prefix

from ._gguf_bytes import DEFAULT_ALIGNMENT, Tensor, gguf_file, kv_string, kv_typed, kv_u32, pad

RELEASES = ("0.3.8", "0.3.16")

# ggml types with a nonzero type_size: id -> (name, elements per block, bytes per block). Bytes are the sizes of
# ggml-common.h's block structs (e.g. block_q4_K: fp16 d, dmin + 12 scale bytes + 128 nibble bytes = 144;
# block_q8_1: fp16 d, s + 32 int8 = 36). Ids 4, 5, 31-33, 36-38 are removed types (type_size 0).
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}
# GGML_TYPE_COUNT: MXFP4 (39) arrived between the two trees (test-backend-ops names it in 0.3.16 only)
TYPE_COUNT = {"0.3.8": 39, "0.3.16": 40}
GGUF_TYPE_COUNT = 13  # gguf_type ids 0..12


def types_of(release: str) -> dict[int, tuple[str, int, int]]:
    return {tid: t for tid, t in TYPES.items() if tid < TYPE_COUNT[release]}


def _tensor(index: int, type_id: int, rows: int = 2, blocks: int = 3) -> Tensor:
    _, block, size = TYPES[type_id]
    return Tensor(f"my_tensor_{index}", type_id, (blocks * block, rows), blocks * size * rows)


def _cases():
    for release in RELEASES:
        for type_id, (name, _, _) in types_of(release).items():
            marks = []
            yield pytest.param(release, type_id, id=f"test_gguf[TENSORS_SUCCESS:{name}]@llamacpp-{release}",
                               marks=marks)


@pytest.mark.parametrize("release,type_id", list(_cases()))
def test_tensor_type_sizes(release, type_id):
    """A 2-row tensor of 3 blocks of each type: ne as written, nbytes = ggml_nbytes, data at the aligned header."""
    tensor = _tensor(0, type_id)
    data = gguf_file((tensor,))
    header = parse_prefix(data, "test-gguf")
    (read,) = header.tensors
    assert (read.dtype, read.nbytes) == (TYPES[type_id][0], tensor.nbytes)
    assert read.shape == tuple(reversed(tensor.ne))
    assert header.header_bytes == len(data) and len(data) % DEFAULT_ALIGNMENT == 0


@pytest.mark.parametrize("release", RELEASES, ids=[f"test_gguf[ggml_row_size]@llamacpp-{r}" for r in RELEASES])
def test_ggml_row_size_of_every_type(release):
    """ggml_row_size (engines/llamacpp/ggml_types.row_size) of 3 blocks of each type the release knows."""
    assert {name: row_size(name, 3 * block) for name, block, _ in types_of(release).values()} == \
        {name: 3 * size for name, _, size in types_of(release).values()}


def _layout_cases():
    for release in RELEASES:
        for part, alignment in (("DATA_SUCCESS", None), ("DATA_CUSTOM_ALIGN", 1)):
            yield pytest.param(release, alignment, id=f"test_gguf[{part}]@llamacpp-{release}")


@pytest.mark.parametrize("release,alignment", list(_layout_cases()))
def test_tensor_offsets(release, alignment, tmp_path):
    """handcrafted_check_tensors: tensor i sits at data offset + sum of GGML_PAD(ggml_row_size, alignment) of the
    tensors before it; the alignment is 32 unless general.alignment says otherwise (1 in the custom case)."""
    ids = list(types_of(release))
    tensors = tuple(_tensor(i, tid, rows=1 + i % 3, blocks=1 + i % 5) for i, tid in enumerate(ids))
    kvs = (kv_string("general.architecture", "llama"),)
    kvs += (kv_u32("general.alignment", alignment),) if alignment else ()
    step = alignment or DEFAULT_ALIGNMENT
    data = gguf_file(tensors, kvs, alignment=step, with_data=True)
    path = tmp_path / "handcrafted.gguf"
    path.write_bytes(data)
    header = parse_prefix(data, str(path))
    _, read = read_gguf_tensors(str(path))
    expected, running = [], header.header_bytes
    for tensor in tensors:
        expected.append((tensor.name, TYPES[tensor.type_id][0], tensor.ne, running, tensor.nbytes))
        running += pad(tensor.nbytes, step)
    assert [(t.name, t.type_name, t.ne, t.offset, t.nbytes) for t in read] == expected
    assert header.header_bytes % step == 0 and running == len(data)


@pytest.mark.parametrize("release", RELEASES, ids=[f"test_gguf[HEADER_EMPTY]@llamacpp-{r}" for r in RELEASES])
def test_empty_header(release):
    """No KV pairs, no tensors: a valid file whose data would start at 32 (the 24-byte header padded)."""
    header = parse_prefix(gguf_file(), "test-gguf")
    assert (header.version, header.metadata, header.tensors, header.header_bytes) == (3, {}, (), 32)


@pytest.mark.parametrize("release", RELEASES, ids=[f"test_gguf[TENSORS_CUSTOM_ALIGN:header]@llamacpp-{r}"
                                                   for r in RELEASES])
def test_custom_alignment_header(release):
    """general.alignment = 1: the reader reports it and the data starts right after the tensor infos."""
    tensors = (_tensor(0, 8), _tensor(1, 12))
    data = gguf_file(tensors, (kv_u32("general.alignment", 1),), alignment=1)
    header = parse_prefix(data, "test-gguf")
    assert header.metadata["general.alignment"] == 1
    assert header.header_bytes == len(data) and len(data) % DEFAULT_ALIGNMENT != 0


# --- files gguf_init refuses (expect_context_not_null false) --------------------------------------------------

BAD_ALIGN = (kv_u32("general.alignment", 13),)
_ONE = (_tensor(0, 0),)
REFUSED = {
    "HEADER_BAD_MAGIC": (lambda r: gguf_file(magic=b"FUGG"), None, "bad magic"),
    "HEADER_BAD_VERSION_0": (lambda r: gguf_file(version=0), None, "version 0"),
    "HEADER_BAD_VERSION_1": (lambda r: gguf_file(version=1), None, "version 1"),
    "HEADER_BAD_VERSION_FUTURE": (lambda r: gguf_file(version=4), None, "version 4"),
    "HEADER_BAD_N_TENSORS": (lambda r: gguf_file(n_tensors=-1), None, "tensors"),
    "HEADER_BAD_N_KV": (lambda r: gguf_file(n_kv=-1), None, "keys"),
    "KV_BAD_KEY_SIZE": (lambda r: gguf_file(kvs=(b"\xff" * 8 + b"general.alignment",)), None, "string|header"),
    "KV_BAD_TYPE": (lambda r: gguf_file(kvs=(kv_typed("my_key_0", GGUF_TYPE_COUNT, b"\0" * 8),)), None, "value type"),
    "KV_BAD_ALIGN": (lambda r: gguf_file(kvs=BAD_ALIGN, alignment=13), None, "power of two"),
    "TENSORS_BAD_N_DIMS": (lambda r: gguf_file((Tensor("my_tensor_0", 0, (1, 1, 1, 1, 1)),)), None, "dimensions"),
    "TENSORS_BAD_SHAPE": (lambda r: gguf_file((Tensor("my_tensor_0", 0, (-1,)),)), None, "int64"),
    "TENSORS_NE_TOO_BIG": (lambda r: gguf_file((Tensor("my_tensor_0", 0, (4 * (2**31 - 1),) * 2),)), None, "int64"),
    "TENSORS_BAD_TYPE": (lambda r: gguf_file((Tensor("my_tensor_0", TYPE_COUNT[r], (32,)),)), None, "GGML type"),
    "TENSORS_BAD_OFFSET": (lambda r: gguf_file(_ONE, offsets=(-1,)), None, "data offset"),
    "TENSORS_BAD_ALIGN": (lambda r: gguf_file(_ONE, BAD_ALIGN, alignment=13), None, "power of two"),
    "TENSORS_INCONSISTENT_ALIGN": (lambda r: gguf_file((_tensor(0, 2, 1, 1), _tensor(1, 2, 1, 1)),
                                                       offset_alignment=1), None, "data offset"),
}
BAD_TYPE_0_3_8 = ("type id 39 (GGML_TYPE_COUNT in 0.3.8) read as MXFP4, observed 17 bytes: the reader knows the "
                  "newest ggml types, whatever the build")


def _refused_cases():
    for release in RELEASES:
        for part, (_, gap, _) in REFUSED.items():
            if part == "HEADER_BAD_VERSION_0" and release == "0.3.8":
                continue  # added to test-gguf after 0.3.8
            if part == "TENSORS_BAD_TYPE" and release == "0.3.8":
                gap = BAD_TYPE_0_3_8
            marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
            yield pytest.param(release, part, id=f"test_gguf[{part}]@llamacpp-{release}", marks=marks)


@pytest.mark.parametrize("release,part", list(_refused_cases()))
def test_refused(release, part):
    """Refused, and for llama.cpp's reason (not, say, because the handcrafted file carries no tensor data)."""
    build, _, reason = REFUSED[part]
    data = build(release)
    with pytest.raises(GGUFError, match=reason):
        parse_prefix(data, "test-gguf", file_size=len(data))
