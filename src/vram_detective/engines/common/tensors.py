"""One row of a rank's tensor inventory (`explain --tensors`), whatever the engine: a tensor name across the
repeating layers, its dtype (torch's or GGML's), shape, count and bytes each."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorGroup:
    name: str  # pattern, e.g. "model.layers.{0..31}.self_attn.qkv_proj.qweight" or "blk.{0..35}.attn_q.weight"
    count: int
    shape: tuple[int, ...]
    dtype: str
    bytes_each: int
    role: str

    @property
    def bytes(self) -> int:
        return self.count * self.bytes_each

    def to_dict(self) -> dict:
        return {"name": self.name, "count": self.count, "shape": list(self.shape), "dtype": self.dtype,
                "bytes": self.bytes, "role": self.role}
