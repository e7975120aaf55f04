"""Other checkpoints of the same model in the catalog (bf16 / FP8 / AWQ / GPTQ / ... of one base model),
and vLLM's online quantization of a 16-bit checkpoint (`--quantization fp8`).

Two catalog entries are variants of each other when their names agree once the quantization words are
dropped (org and a "Meta-" prefix ignored) and their architectures have the same shape (layers, widths,
heads, vocabulary, experts): Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen2.5-7B-Instruct-AWQ and
Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4 are one model; Qwen/Qwen2.5-7B (the base model) is another.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# name words that only say how a checkpoint is quantized or packaged
_QUANT_WORDS = frozenset({
    "awq", "gptq", "int4", "int8", "fp8", "fp4", "nvfp4", "mxfp4", "dynamic", "bnb", "4bit", "8bit", "asym", "sym",
    "autoround", "unsloth", "fp16", "bf16", "hf", "w4a16", "w8a8", "w8a16", "w4a4", "marlin", "gguf", "quantized",
    "static", "channelwise", "block",
})


@dataclass(frozen=True)
class Variant:
    repo_id: str  # the checkpoint to serve
    label: str  # "bf16", "AWQ 4-bit", "FP8", "online FP8 (--quantization fp8)"
    bits: int  # nominal bits of the linear weights (16 for unquantized)
    quantization: str | None = None  # --quantization to pass (online quantization only)
    given: bool = False  # the checkpoint the user named

    @property
    def settings(self) -> dict:
        return {"quantization": self.quantization} if self.quantization else {}


def base_name(repo_id: str) -> str:
    """'hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4' -> 'llama-3.1-8b-instruct'."""
    name = repo_id.rstrip("/").rsplit("/", 1)[-1].lower()
    words = []
    for word in name.split("-"):
        parts = [part for part in re.split(r"[._](?=[a-z])", word) if part]
        kept = [part for part in parts if part not in _QUANT_WORDS]
        if kept:
            words.append(".".join(kept))
    if words and words[0] == "meta" and len(words) > 1 and words[1].startswith("llama"):
        words = words[1:]
    return "-".join(words)


def shape_key(spec) -> tuple:
    moe = spec.moe
    return (spec.family, spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads,
            spec.head_dim, spec.intermediate_size, spec.vocab_size,
            (moe.num_experts, moe.experts_per_token, moe.expert_intermediate) if moe else None,
            spec.mla.latent_dim if spec.mla else None)


def bits_of(spec) -> int:
    return spec.quantization.nominal_bits if spec.quantization is not None else 16


def label_of(spec) -> str:
    quant = spec.quantization
    if quant is None:
        return {"float32": "fp32 (served 16-bit)"}.get(spec.torch_dtype, "bf16" if spec.torch_dtype == "bfloat16" else "fp16")
    if quant.method in ("awq", "gptq"):
        return f"{quant.method.upper()} {quant.bits}-bit"
    if quant.method in ("fp8", "fbgemm-fp8", "modelopt-fp8"):
        return "FP8"
    if quant.method == "modelopt-fp4":
        return "NVFP4"
    if quant.method == "mxfp4":
        return "MXFP4"
    if quant.method == "bitsandbytes":
        return f"bitsandbytes {quant.bits}-bit"
    if quant.method == "compressed-tensors":
        scheme = {"wNa16": f"W{quant.bits}A16", "w8a8-int8": "W8A8 INT8", "w8a8-fp8": "FP8", "w8a16-fp8": "FP8 W8A16",
                  "nvfp4": "NVFP4", "nvfp4a16": "NVFP4 W4A16"}.get(quant.scheme, quant.scheme)
        return scheme
    return quant.describe()


@lru_cache(maxsize=1)
def _catalog_index() -> tuple[tuple[str, str, tuple, object], ...]:
    from ..model.config import parse_config
    from ..model.sources import catalog_entries

    index = []
    for source in catalog_entries():
        try:
            spec = parse_config(source.config, name=source.repo_id)
        except ValueError:
            continue
        index.append((source.repo_id, base_name(source.repo_id), shape_key(spec), spec))
    return tuple(index)


def catalog_variants(repo_id: str, spec) -> list:
    """(repo id, spec) of every other catalog checkpoint of the same model."""
    name, shape = base_name(repo_id), shape_key(spec)
    return [(other, other_spec) for other, other_name, other_shape, other_spec in _catalog_index()
            if other.lower() != repo_id.lower() and other_name == name and other_shape == shape]


def variants(repo_id: str, spec, *, include_catalog: bool = True, include_online: bool = True) -> list[Variant]:
    """The checkpoint itself first, then its catalog variants (most bits first), then online FP8."""
    out = [Variant(repo_id, label_of(spec), bits_of(spec), given=True)]
    found = catalog_variants(repo_id, spec) if include_catalog else []
    found.sort(key=lambda item: (-bits_of(item[1]), item[0].lower()))
    out += [Variant(other, label_of(other_spec), bits_of(other_spec)) for other, other_spec in found]
    if include_online:
        # a 16-bit checkpoint of the model (this one or a catalog variant) quantized at load time
        sixteen = next((v for v in out if v.bits == 16), None)
        if sixteen is not None and not any(v.label == "FP8" for v in out):
            out.append(Variant(sixteen.repo_id, "online FP8 (--quantization fp8)", 8, quantization="fp8",
                               given=False))
    return out
