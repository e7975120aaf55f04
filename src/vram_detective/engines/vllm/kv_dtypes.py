"""Packed KV-cache formats (--kv-cache-dtype beyond auto / bf16 / fp16 / fp8): bytes per token and KV head, the
layers that stay in the model dtype, the block size they force, and what vLLM refuses, release by release.

Sources (read with shared/tools/engine-src): vllm/config/cache.py CacheDType per release, v1/kv_cache_interface.py
(TQFullAttentionSpec 0.20-0.27, state_content_bytes from 0.28), model_executor/layers/quantization/turboquant/
config.py, v1/attention/backends/{turboquant_attn,triton_attn,flashinfer}.py, engine/arg_utils.py, and
platforms/interface.py _align_heterogeneous_kv_block_size (0.25+).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from .releases import first_release, rule_at

Version = tuple[int, int, int]

# TurboQuant presets (turboquant/config.py, unchanged 0.20-0.33): (key bits, value bits); 8-bit keys are FP8
TURBOQUANT_BITS = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4), "turboquant_k3v4_nc": (3, 4),
                   "turboquant_3bit_nc": (3, 3)}


def turboquant_slot_bytes(name: str, head_dim: int) -> int:
    """TurboQuantConfig.slot_size_aligned: key (D bytes in FP8, else MSE indices + an fp16 norm) + value (uniform
    codes + fp16 scale and zero), rounded up to an even number. Scales live inside the slot: no block metadata."""
    key_bits, value_bits = TURBOQUANT_BITS[name]
    key = head_dim if key_bits == 8 else ceil(head_dim * key_bits / 8) + 2
    value = ceil(head_dim * value_bits / 8) + 4
    slot = key + value
    return slot + slot % 2


@dataclass(frozen=True)
class PackedKvDtype:
    name: str
    source: str  # the layout; the release that brings it is rule packed_kv_dtypes
    boundary_layers: bool = False  # the first and last 2 layers keep the model dtype (get_boundary_skip_layers)
    backend: str = ""  # the only backend family that takes it (for the refusal text)


_PACKED = {
    **{name: PackedKvDtype(name, "turboquant/config.py slot_size_aligned (0.20.0)", boundary_layers=True,
                           backend="TURBOQUANT") for name in TURBOQUANT_BITS},
    "int8_per_token_head": PackedKvDtype("int8_per_token_head",
                                         "kv_cache_interface.py: 1-byte data + an fp32 scale for K and V (0.20.0)",
                                         backend="TRITON_ATTN"),
    "fp8_per_token_head": PackedKvDtype("fp8_per_token_head",
                                        "kv_cache_interface.py: 1-byte data + an fp32 scale for K and V (0.20.0)",
                                        backend="TRITON_ATTN"),
    "int4_per_token_head": PackedKvDtype("int4_per_token_head",
                                         "two codes per byte + an fp32 scale for K and V (0.25.0)", backend="TRITON_ATTN"),
    "nvfp4": PackedKvDtype("nvfp4", "nvfp4_kv_cache_full_dim: fp4 + an fp8 scale per 16 (usable 0.21.0)",
                           backend="FLASHINFER"),
}


def is_packed(kv_cache_dtype: str) -> bool:
    return kv_cache_dtype in _PACKED


def names() -> tuple[str, ...]:
    return tuple(_PACKED)


def slot_bytes(kv_cache_dtype: str, head_dim: int) -> int:
    """Bytes one token takes per layer and KV head, K and V together."""
    if kv_cache_dtype in TURBOQUANT_BITS:
        return turboquant_slot_bytes(kv_cache_dtype, head_dim)
    if kv_cache_dtype in ("int8_per_token_head", "fp8_per_token_head"):
        return 2 * head_dim + 8
    if kv_cache_dtype == "int4_per_token_head":
        return head_dim + 8
    if kv_cache_dtype == "nvfp4":
        return 2 * (head_dim // 2 + head_dim // 16)
    raise KeyError(kv_cache_dtype)


def boundary_layers(kv_cache_dtype: str, num_layers: int, hybrid: bool) -> tuple[int, ...]:
    """Layers kept in the model dtype: TurboQuant's first and last min(2, L // 2) on dense models (arg_utils.py
    merges them into kv_cache_dtype_skip_layers, 0.20+); none on attention + Mamba hybrids (0.21+)."""
    dtype = _PACKED.get(kv_cache_dtype)
    if dtype is None or not dtype.boundary_layers or hybrid:
        return ()
    n = min(2, num_layers // 2)
    return tuple(range(n)) + tuple(range(num_layers - n, num_layers))


def forced_block_size(kv_cache_dtype: str, block_size: int, version: Version, hybrid: bool) -> int | None:
    """0.25+: _align_heterogeneous_kv_block_size sizes the block from the first layer's page - a model-dtype
    boundary layer read as a 1-byte cache (2 x D x H per token) against its real 4 x D x H - so TurboQuant on a
    dense model runs with 32-token blocks, whatever --block-size says."""
    dtype = _PACKED.get(kv_cache_dtype)
    if dtype is None or not dtype.boundary_layers or hybrid or not rule_at(version, "kv_block_from_first_page"):
        return None
    return max(32, block_size) if block_size % 32 == 0 else 32


def refusal(kv_cache_dtype: str, version: Version, *, mla: bool, sinks: bool, sliding: bool, hybrid: bool,
            compute_capability: tuple[int, int], dtype: str) -> str | None:
    """What that release says when it cannot serve the model with this cache format (one line)."""
    packed = _PACKED[kv_cache_dtype]
    if kv_cache_dtype not in rule_at(version, "packed_kv_dtypes"):
        first = first_release(lambda later: kv_cache_dtype in later["packed_kv_dtypes"])
        return f"--kv-cache-dtype {kv_cache_dtype} does not exist before vLLM {first.label}"
    no_backend = (f"No valid attention backend found: {packed.backend} is the only backend with "
                  f"kv_cache_dtype {kv_cache_dtype}, and it reports")
    if mla and kv_cache_dtype == "nvfp4":
        return "nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention) backends."  # config/vllm.py 0.21+
    if mla:
        return f"{no_backend} 'MLA not supported'"
    if packed.boundary_layers:
        if sinks:
            return f"{no_backend} 'attention sinks not supported'"
        if dtype not in ("bfloat16", "float16"):
            return f"{no_backend} 'dtype not supported'"
        if hybrid and rule_at(version, "turboquant_refuses_hybrid"):
            return ("TurboQuant KV cache is not supported for hybrid (attention + Mamba) models. Boundary layer "
                    "protection requires uniform attention layers.")
        if sliding:
            # 0.26+ refuse the layer; 0.20-0.25 build a page the backend's cache shape cannot view (not run here)
            return (f"{no_backend} 'sliding window not supported' (add --kv-cache-dtype-skip-layers sliding_window)")
    if kv_cache_dtype == "fp8_per_token_head" and compute_capability < (8, 9):
        major, minor = compute_capability
        return (f"FP8 KV cache is not supported by the Triton attention backend (compute capability {major}.{minor}); "
                "native FP8 (fp8e4nv) requires SM89+.")
    if kv_cache_dtype == "nvfp4" and compute_capability[0] != 10 and rule_at(version, "nvfp4_kv_sm100_only"):
        return f"{no_backend} 'compute capability not supported' (SM100 only in 0.25-0.31)"
    return None
