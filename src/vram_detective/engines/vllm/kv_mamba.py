"""Mamba / linear-attention hybrids in vLLM's KV cache: the layers of such a model from its mixer facts, the
prefix-caching mode a release implies, and the attention block size raised / Mamba page padded so one page
size serves both (kv_groups.py plans the pool from them)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...model.hybrid import MixerFacts
from ...units import ceil_div
from .kv_layers import AttentionLayer, KvNotModelledError, Version, rule
from .kv_specs import MLA


# --- Mamba: attention block size raised, Mamba page padded -------------------------------------------------


@dataclass(frozen=True)
class MambaBlockSizing:
    block_size: int  # attention block size after the raise
    attention_page_bytes: int  # one attention layer's page at that block size
    mamba_page_bytes: int  # unpadded state page
    padded_page_bytes: int  # the Mamba page as allocated (== attention page when there is attention)
    mamba_block_size: int  # MambaSpec.block_size: max_model_len ("none"), block size ("align" / "all")
    log_lines: tuple[str, ...]


def mamba_block_sizing(attention_page_per_token: int | None, mamba_page_bytes: int, block_size: int,
                       max_model_len: int, version: Version, *, mla: bool = False, cutlass_mla: bool = False,
                       mamba_cache_mode: str = "none", mamba_chunk_size: int | None = None) -> MambaBlockSizing:
    """HybridAttentionMambaModelConfig.verify_and_update_config (models/config.py 0.10.1-0.18;
    platforms/interface.py from 0.20): attention block size = alignment x cdiv(mamba_page, alignment x
    attention bytes per token) when the configured one is smaller ("all" mode: a multiple of
    lcm(mamba chunk, alignment) covering the state), then the Mamba page padded to the attention page."""
    version = tuple(version)  # type: ignore[assignment]
    lines: list[str] = []
    if not attention_page_per_token:  # attention-free: nothing to align
        mamba_block = block_size if mamba_cache_mode in ("align", "all") else max_model_len
        return MambaBlockSizing(block_size, 0, mamba_page_bytes, mamba_page_bytes, mamba_block, ())
    alignment = 16
    if mla and rule(version, "mamba_mla_alignment"):
        alignment = 128 if cutlass_mla else 64
    if mamba_cache_mode == "all":
        from math import lcm
        chunk = lcm(int(mamba_chunk_size or 256), alignment)
        needed = chunk * ceil_div(ceil_div(mamba_page_bytes, attention_page_per_token), chunk)
    else:
        needed = alignment * ceil_div(mamba_page_bytes, alignment * attention_page_per_token)
    if block_size < needed:
        block_size = needed
        lines.append(f"Setting attention block size to {block_size} tokens to ensure that attention page size is "
                     ">= mamba page size.")
    attention_page = block_size * attention_page_per_token
    padded = mamba_page_bytes
    if attention_page > mamba_page_bytes:
        padded = attention_page
        lines.append(f"Padding mamba page size by {100 * (attention_page - mamba_page_bytes) / mamba_page_bytes:.2f}% "
                     "to ensure that mamba page size and attention page size are exactly equal.")
    mamba_block = block_size if mamba_cache_mode in ("align", "all") else max_model_len
    return MambaBlockSizing(block_size, attention_page, mamba_page_bytes, padded, mamba_block, tuple(lines))


def _apply_mamba(layers: Sequence[AttentionLayer], block_size: int, max_model_len: int, version: Version,
                 mamba_cache_mode: str, mamba_chunk_size: int | None, cutlass_mla: bool
                 ) -> tuple[list[AttentionLayer], MambaBlockSizing]:
    attention = [layer for layer in layers if not layer.spec_type.recurrent]
    mamba_pages = {layer.page_bytes for layer in layers if layer.spec_type.recurrent}
    if len(mamba_pages) > 1:
        raise KvNotModelledError("Mamba layers with different state sizes are not sized")
    per_token = None
    if attention:
        # the platform sizes from the model's own attention (the first layers; a draft model's come last);
        # other pages are unified with it later (_unify_pages)
        per_token = attention[0].page_bytes // block_size
    sizing = mamba_block_sizing(per_token, mamba_pages.pop(), block_size, max_model_len, version,
                                mla=any(issubclass(layer.spec_type, MLA) for layer in attention),
                                cutlass_mla=cutlass_mla,
                                mamba_cache_mode=mamba_cache_mode, mamba_chunk_size=mamba_chunk_size)
    out = [replace(layer, page_bytes=sizing.padded_page_bytes) if layer.spec_type.recurrent
           else replace(layer, page_bytes=layer.page_bytes // block_size * sizing.block_size) for layer in layers]
    return out, sizing


# --- Mamba / linear-attention hybrids from the ModelSpec's mixer facts ------------------------------------


def default_mamba_cache_mode(architecture: str, version: Version, enable_prefix_caching: bool | None = None) -> str:
    """The mamba_cache_mode a hybrid ends up with in V1 (--mamba-cache-mode left at "none"):

    - before 0.11.2 prefix caching is forced off for hybrids (HybridAttentionMambaModelConfig): "none";
    - prefix caching defaults to off for hybrids until 0.25 (ModelConfig.is_prefix_caching_supported:
      attn_type "hybrid" -> False; 0.11.2 arg_utils: `not model_config.is_hybrid`) and on from 0.26;
    - with it on: 0.11.2-0.14 "all" when the model supports Mamba prefix caching, otherwise prefix caching
      is switched off again ("none"); 0.15.1+ MambaModelConfig: "all" if supported else "align"
      (models/config.py); 0.28+ "none" becomes "align" for every hybrid."""
    if "all" not in rule(version, "mamba_cache_modes"):  # type: ignore[operator]
        return "none"
    enabled = enable_prefix_caching
    if enabled is None:
        enabled = rule(version, "hybrid_prefix_caching_default")
    if not enabled:
        return "none"
    if_supported, otherwise = rule(version, "mamba_prefix_cache_mode")  # type: ignore[misc]
    supported = architecture in rule(version, "mamba_prefix_caching_architectures")  # type: ignore[operator]
    return if_supported if supported else otherwise


def hybrid_attention_layers(mixer: MixerFacts, tp: int, block_size: int, kv_dtype_bytes: int, model_dtype: str, *,
                            mamba_cache_dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto",
                            num_speculative_tokens: int = 0,
                            ) -> tuple[list[AttentionLayer], list[tuple[int, ...]]]:
    """The KV layers of a Mamba / linear-attention hybrid on one TP rank, and for each decoder layer the
    indices of its entries (none for Nemotron-H MLP / MoE layers, two for Falcon-H1's parallel attention +
    Mamba2), so a caller can split them by pipeline stage.

    Attention pages at `block_size` (2 x KV heads per rank x head_dim x kv_dtype_bytes per token); Mamba pages
    unpadded (mamba_state.py); plan_kv_groups raises the block size and pads them per release."""
    from ...model.hybrid import HybridConfigError
    from .mamba_state import mamba_state

    if mixer.attention_shape is None:
        raise HybridConfigError(mixer.problem or "hybrid config without an attention shape")
    kv_heads, head_dim = mixer.attention_shape
    attention_page = 2 * block_size * max(1, kv_heads // tp) * head_dim * kv_dtype_bytes
    state = mamba_state(mixer, tp, model_dtype, mamba_cache_dtype=mamba_cache_dtype,
                        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
                        num_speculative_tokens=num_speculative_tokens)
    layers: list[AttentionLayer] = []
    per_decoder_layer: list[tuple[int, ...]] = []
    for kind in mixer.layers:
        mine = []
        if "attention" in kind:
            mine.append(len(layers))
            layers.append(AttentionLayer("full", attention_page))
        if "mamba" in kind:
            mine.append(len(layers))
            layers.append(AttentionLayer("mamba", state.page_bytes))
        per_decoder_layer.append(tuple(mine))
    return layers, per_decoder_layer
