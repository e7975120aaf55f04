"""The KV layers one rank holds, as kv_groups.py plans them: `AttentionLayer` (kind, page, window, KV-sharing
target), the KV rules of a release (`rule`), and the layer list built from the ModelSpec's attention facts.

`attention_layers_from_facts` builds the layer list from the ModelSpec's attention facts (model/attention.py
reads each family's keys: Gemma 2/3, gpt-oss, Mistral/Llama/Phi-3 windows, Llama 4 chunked attention, MLA,
Gemma 3n / Gemma 4 KV sharing) with this release's reading of Qwen2 `use_sliding_window`/`max_window_layers`,
and `sliding_window_max_len_cap` says when a release disables interleaved sliding windows and caps
max_model_len to the window instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...model.attention import AttentionFacts
from . import releases
from .kv_specs import KINDS, SPEC_TYPES, KvSpec
from .releases import release


Version = tuple[int, int, int]


@lru_cache(maxsize=256)
def _rules(version: Version, engine: str) -> dict[str, tuple[object, str]]:
    return {name: (value, source) for name, value, source in release(version, engine).rules}


def rule(version: Version | None, name: str, engine: str = "v1") -> object:
    """The value of one rule of releases.RULE_CHANGES at `version` (None: the newest), by default on
    the V1 path (the KV-cache manager is V1's)."""
    return _rules(tuple(version or releases.NEWEST_KNOWN), engine)[name][0]


def rule_source(version: Version | None, name: str, engine: str = "v1") -> str:
    return _rules(tuple(version or releases.NEWEST_KNOWN), engine)[name][1]


class KvNotModelledError(NotImplementedError, ValueError):
    """A KV layout this tool does not size yet (bad input for the command line: exit 2, not a crash)."""


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer on one rank, as callers describe it; `spec(block_size)` gives its typed spec
    (kv_specs.py: one class per kind).

    kind: "full", "sliding", "chunked_local" (Llama 4 local layers), "mla", "mamba" (a Mamba /
        linear-attention layer: one recurrent state per request, MambaSpec) or "cross" (an encoder-decoder
        cross-attention layer, V1 CrossAttentionSpec from 0.10.2: it caches the encoder's tokens).
    page_bytes: one block of this layer on this rank at the configured block size (K+V, or the MLA latent);
        for "mamba" the unpadded state (sum of prod(shape) x dtype over its tensors), independent of block size.
    sliding_window: the window (sliding) or the chunk (chunked_local) in tokens; for "cross" the encoder
        tokens one request caches (max_num_encoder_input_tokens, Whisper's max_source_positions); None otherwise.
    kv_sharing_target: index (in the same layer list) of an earlier layer whose KV cache this one reads
        (kv_sharing_target_layer_name: Gemma 3n, Gemma 4 E2B / E4B); such a layer takes no page.
    """

    kind: str
    page_bytes: int
    sliding_window: int | None = None
    kv_sharing_target: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown attention kind {self.kind!r} (one of {', '.join(KINDS)})")
        if self.page_bytes <= 0:
            raise ValueError("page_bytes must be positive")
        if self.spec_type.needs_span and not self.sliding_window:
            raise ValueError(f"a {self.kind} layer needs its window")

    @property
    def spec_type(self) -> type[KvSpec]:
        return SPEC_TYPES[self.kind]

    def spec(self, block_size: int) -> KvSpec:
        """The layer's spec at `block_size` (its page is given at that size)."""
        return self.spec_type.of(self.page_bytes, block_size, self.sliding_window)


# --- layers from the ModelSpec's attention facts (model/attention.py) --------------------------------------


class SlidingWindowRefusal(ValueError):
    """vLLM refuses this sliding-window layout (message as that release words it)."""


def layer_kinds(attention: AttentionFacts, *, version: Version | None = None,
                disable_sliding_window: bool = False) -> list[tuple[str, int | None]]:
    """(kind, window) per layer as vLLM's model code builds its attention layers: the checkpoint's own
    layout, except Qwen2-style windows, which each release reads its own way (_qwen_layers)."""
    n = attention.num_layers
    if attention.mla_latent is not None:
        return [("mla", None)] * n
    if disable_sliding_window:
        return [("full", None)] * n
    if attention.max_window_layers_rule:
        return _qwen_layers(attention, version)
    return list(attention.layers)


def _qwen_layers(attention: AttentionFacts, version: Version | None) -> list[tuple[str, int | None]]:
    n, window = attention.num_layers, attention.window
    if not attention.use_sliding_window or not window:
        return [("full", None)] * n  # the config carries a window it does not use
    mwl = attention.max_window_layers if attention.max_window_layers is not None else n
    layers_rule = rule(version, "qwen2_max_window_layers")
    if layers_rule == "first-layers":
        return [("sliding", int(window)) if i < mwl else ("full", None) for i in range(n)]
    mixed = {"refuse": True, "refuse-unless-all": mwl != n, "refuse-if-some": 0 < mwl < n}[layers_rule]
    if mixed:
        raise SlidingWindowRefusal(
            "Sliding window for some but all layers is not supported. This model uses sliding window but "
            f"`max_window_layers` = {mwl} is less than `num_hidden_layers` = {n}. Please open an issue to discuss "
            "this feature.")
    # vLLM then gives every layer cache_config.sliding_window
    return [("sliding", int(window))] * n


def attention_layers_from_facts(attention: AttentionFacts, tp: int, block_size: int, dtype_bytes: int, *,
                                version: Version | None = None,
                                disable_sliding_window: bool = False) -> list[AttentionLayer]:
    """The attention layers on one tensor-parallel rank, with their page bytes.

    Page = 2 (K and V) x block_size x KV heads per rank x head_dim x dtype_bytes, KV heads per rank =
    max(1, kv_heads // tp); MLA: one latent of kv_lora_rank + qk_rope_head_dim, the same on every rank.
    `version` picks release-specific Qwen2 rules (None = the newest); SlidingWindowRefusal when vLLM refuses.
    """
    kinds = layer_kinds(attention, version=version, disable_sliding_window=disable_sliding_window)
    if attention.mla_latent is not None:
        page = block_size * attention.mla_latent * dtype_bytes
    else:
        page = 2 * block_size * max(1, attention.kv_heads // tp) * attention.head_dim * dtype_bytes
    return [AttentionLayer(kind, page, window, target)
            for (kind, window), target in zip(kinds, attention.kv_sharing_targets)]


# --- max_model_len capped to the window -----------------------------------------------------------------


def sliding_window_max_len_cap(attention: AttentionFacts, version: Version, engine: str,
                               attention_backend: str | None = None,
                               disable_sliding_window: bool = False) -> tuple[int | None, str | None]:
    """(cap, warning) when the release disables interleaved sliding windows and caps max_model_len to the
    window (ModelConfig.__init__ -> _get_and_verify_max_len), else (None, None).

    0.5.1-0.6.2: Gemma 2 always; 0.6.3-0.6.4: Gemma 2 or a list of windows, always; 0.6.5-0.7.0 only with
    VLLM_ATTENTION_BACKEND=XFORMERS, 0.7.2-0.10.x with XFORMERS or FLASHINFER (V0 only from 0.10.1);
    --disable-sliding-window caps in every release.
    """
    model_type = attention.model_type
    smallest = attention.smallest_window
    if smallest is None:
        return None, None
    if disable_sliding_window:
        return smallest, None
    mode = rule(version, "interleaved_window_cap", engine)
    if mode == "never":
        return None, None
    backend = (attention_backend or "").upper()
    if mode == "gemma2":
        if model_type != "gemma2":
            return None, None
        return smallest, ("Gemma 2 uses sliding window attention for every odd layer, which is currently not "
                          "supported by vLLM. Disabling sliding window and capping the max length to the sliding "
                          f"window size ({smallest}).")
    if not _interleaved(attention, version):
        return None, None
    if mode == "always":
        return smallest, (f"{model_type} has interleaved attention, which is currently not supported by vLLM. "
                          "Disabling sliding window and capping the max length to the sliding window size "
                          f"({smallest}).")
    if backend not in rule(version, "interleaved_window_backends", engine):  # type: ignore[operator]
        return None, None
    return smallest, (f"{model_type} has interleaved attention, which is currently not supported by the {backend} "
                      "backend. Disabling sliding window and capping the max length to the sliding window size "
                      f"({smallest}).")


def _interleaved(attention: AttentionFacts, version: Version) -> bool:
    """Whether the release counts this model's sliding windows as interleaved with full attention."""
    model_type = attention.model_type
    detection = rule(version, "interleaved_window_detection")
    if detection == "layer-types":
        return ({"full_attention", "sliding_attention"} <= set(attention.layer_types)
                or model_type in ("gemma2", "gemma3_text"))
    types = rule(version, "interleaved_window_types")
    interleaved = isinstance(attention.window, tuple) or model_type in types  # type: ignore[operator]
    if detection == "pattern":
        interleaved = interleaved or attention.sliding_window_pattern is not None or model_type == "gemma2"
    return interleaved
