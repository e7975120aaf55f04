"""ggml tensor types: elements per block and bytes per block (ggml/src/ggml.c `type_traits`, llama.cpp b6150 as
vendored by llama-cpp-python 0.3.16; ids from ggml/include/ggml.h). A tensor row of ne0 elements takes
ne0 / blck_size * type_size bytes (ggml_row_size); ne0 must be whole blocks."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GgmlType:
    name: str
    type_id: int
    blck_size: int
    type_size: int

    @property
    def bits_per_weight(self) -> float:
        return self.type_size * 8 / self.blck_size


_TABLE = (
    ("F32", 0, 1, 4), ("F16", 1, 1, 2), ("Q4_0", 2, 32, 18), ("Q4_1", 3, 32, 20), ("Q5_0", 6, 32, 22),
    ("Q5_1", 7, 32, 24), ("Q8_0", 8, 32, 34), ("Q8_1", 9, 32, 36), ("Q2_K", 10, 256, 84), ("Q3_K", 11, 256, 110),
    ("Q4_K", 12, 256, 144), ("Q5_K", 13, 256, 176), ("Q6_K", 14, 256, 210), ("Q8_K", 15, 256, 292),
    ("IQ2_XXS", 16, 256, 66), ("IQ2_XS", 17, 256, 74), ("IQ3_XXS", 18, 256, 98), ("IQ1_S", 19, 256, 50),
    ("IQ4_NL", 20, 32, 18), ("IQ3_S", 21, 256, 110), ("IQ2_S", 22, 256, 82), ("IQ4_XS", 23, 256, 136),
    ("I8", 24, 1, 1), ("I16", 25, 1, 2), ("I32", 26, 1, 4), ("I64", 27, 1, 8), ("F64", 28, 1, 8),
    ("IQ1_M", 29, 256, 56), ("BF16", 30, 1, 2), ("TQ1_0", 34, 256, 54), ("TQ2_0", 35, 256, 66),
    ("MXFP4", 39, 32, 17),
)
# block_q8_1 holds two fp16 (d, s) + 32 int8 = 36 bytes (ggml-common.h).

BY_NAME: dict[str, GgmlType] = {row[0]: GgmlType(*row) for row in _TABLE}
BY_ID: dict[int, GgmlType] = {t.type_id: t for t in BY_NAME.values()}


def ggml_type(name_or_id: str | int) -> GgmlType:
    """A type by id or by name in any case ('q8_0' as llama.cpp's -ctk takes it, 'Q4_K' as GGUF prints it)."""
    if isinstance(name_or_id, int):
        return BY_ID[name_or_id]
    return BY_NAME[name_or_id.upper()]


def is_quantized(name: str) -> bool:
    """ggml_is_quantized: block types (blck_size > 1)."""
    return ggml_type(name).blck_size > 1


def row_size(type_name: str, ne0: int) -> int:
    """ggml_row_size: bytes of ne0 elements (whole blocks)."""
    t = ggml_type(type_name)
    if ne0 % t.blck_size:
        raise ValueError(f"{ne0} elements are not whole {t.name} blocks of {t.blck_size}")
    return ne0 // t.blck_size * t.type_size


def tensor_nbytes(type_name: str, ne: tuple[int, ...]) -> int:
    """ggml_nbytes of a contiguous tensor: ne in ggml order (ne[0] = the row)."""
    rows = 1
    for dim in ne[1:]:
        rows *= dim
    return row_size(type_name, ne[0]) * rows
