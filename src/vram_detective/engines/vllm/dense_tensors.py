"""Plain (never quantized) tensors as inventory rows: one `TensorGroup` of a shape and dtype, and a list of
them added for a run of layers with their allocations (weights.py and the modules it builds with)."""
from __future__ import annotations

from ...model.dtypes import DTYPE_BYTES
from ..common.tensors import TensorGroup


def _dense(name: str, count: int, shape: tuple[int, ...], dtype: str, role: str) -> TensorGroup:
    size = 1
    for dim in shape:
        size *= dim
    return TensorGroup(name, count, shape, dtype, size * DTYPE_BYTES[dtype], role)


def _add_dense(groups: list, allocations: list, pattern: str, count: int,
               entries: list[tuple[str, tuple[int, ...], str]], role: str) -> int:
    """Plain (never quantized) tensors of `count` layers: (name, shape, dtype) each; returns their parameters."""
    parameters = 0
    for name, shape, tensor_dtype in entries:
        groups.append(_dense(f"{pattern}.{name}", count, shape, tensor_dtype, role))
        allocations.extend([groups[-1].bytes_each] * count)
        size = 1
        for dim in shape:
            size *= dim
        parameters += size * count
    return parameters
