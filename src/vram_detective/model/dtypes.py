"""Bytes per element of the dtype names the tool meets: torch dtypes (model weights, quantization
metadata, buffers) and vLLM's fp8 cache-dtype spellings ("fp8", "fp8_e4m3", "fp8_e5m2")."""
from __future__ import annotations

DTYPE_BYTES = {
    "bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8, "int8": 1, "uint8": 1,
    "float8_e4m3fn": 1, "float8_e8m0fnu": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}
