"""The model's tensors as groups (`explain --tensors`): one row per tensor name across the repeating layers
("blk.{0..35}.attn_q.weight"), with its GGML type, shape in ggml order, count and bytes as the file stores
them. What `Engine.rank_inventories` answers for llama.cpp and Ollama: every tensor of the file, whichever
device it lands on (the model buffers per device are in the plan's figures)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..common.tensors import TensorGroup

_LAYER = re.compile(r"^blk\.(\d+)\.")
_ROLES = (("norm", "norm"), ("token_embd", "embedding"), ("_exps", "experts"), ("attn", "attention"),
          ("ffn", "mlp"), ("ssm", "mamba"))


@dataclass(frozen=True)
class GgufInventory:
    groups: tuple[TensorGroup, ...]


def _role(name: str) -> str:
    if name.startswith("output."):  # the output layer (output.weight), not a layer's attn_output
        return "lm_head"
    return next((role for key, role in _ROLES if key in name), "other")


def _span(layers: list[int]) -> str:
    """"0..35" for a run of layers, else the layers listed (a mix gives some layers another type)."""
    low, high = min(layers), max(layers)
    if high - low + 1 == len(layers):
        return f"{low}..{high}" if high > low else str(low)
    return ",".join(str(layer) for layer in sorted(layers))


def inventory(tensors) -> GgufInventory:
    """GgufTensors (weights.py) grouped by name with the layer number folded, per type and shape."""
    found: dict[tuple, list[int]] = {}
    sizes: dict[tuple, int] = {}
    for tensor in tensors:
        match = _LAYER.match(tensor.name)
        name = _LAYER.sub("blk.{}.", tensor.name) if match else tensor.name
        key = (name, tensor.type_name, tuple(tensor.ne))
        found.setdefault(key, []).append(int(match.group(1)) if match else -1)
        sizes[key] = tensor.nbytes
    groups = []
    for key, layers in found.items():
        name, dtype, shape = key
        if "{}" in name:
            name = name.replace("{}", "{" + _span(layers) + "}")
        groups.append(TensorGroup(name, len(layers), shape, dtype, sizes[key], _role(name)))
    return GgufInventory(tuple(groups))
