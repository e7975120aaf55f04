"""Mamba / linear-attention hybrid models as the checkpoint describes them: which decoder layers hold attention
KV, which hold a recurrent state (and which both or neither), and the mixer's facts (heads, dims, conv kernel,
state size, groups) that an engine sizes its state from (engines/vllm/mamba_state.py for vLLM's per-rank
shapes). Everything here is a pure function of the config dict.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


# architecture -> (family, mixer)
HYBRID_ARCHITECTURES = {
    "JambaForCausalLM": ("jamba", "mamba1"),
    "BambaForCausalLM": ("bamba", "mamba2"),
    "GraniteMoeHybridForCausalLM": ("granitemoehybrid", "mamba2"),
    "NemotronHForCausalLM": ("nemotron_h", "mamba2"),
    "Qwen3NextForCausalLM": ("qwen3_next", "gated_delta_net"),
    "MiniMaxText01ForCausalLM": ("minimax_text_01", "linear_attention"),
    "FalconH1ForCausalLM": ("falcon_h1", "mamba2"),
    "Qwen3_5ForConditionalGeneration": ("qwen3_next", "gated_delta_net"),
    "Qwen3_5MoeForConditionalGeneration": ("qwen3_next", "gated_delta_net"),
    "Qwen3_5ForCausalLM": ("qwen3_next", "gated_delta_net"),
    "Qwen3_5MoeForCausalLM": ("qwen3_next", "gated_delta_net"),
}
_MODEL_TYPES = {"jamba": "JambaForCausalLM", "bamba": "BambaForCausalLM",
                "granitemoehybrid": "GraniteMoeHybridForCausalLM", "nemotron_h": "NemotronHForCausalLM",
                "qwen3_next": "Qwen3NextForCausalLM", "minimax_text_01": "MiniMaxText01ForCausalLM",
                "minimax": "MiniMaxText01ForCausalLM", "falcon_h1": "FalconH1ForCausalLM",
                "qwen3_5_text": "Qwen3NextForCausalLM", "qwen3_5_moe_text": "Qwen3NextForCausalLM"}


class HybridConfigError(ValueError):
    """The config lacks what the hybrid layout needs."""


@dataclass(frozen=True)
class HybridLayout:
    family: str
    mixer: str
    # per decoder layer: "attention", "mamba", "attention+mamba" (Falcon-H1: both in parallel) or "none"
    # (Nemotron-H MLP / MoE layers)
    layers: tuple[str, ...]

    @property
    def attention_layers(self) -> int:
        return sum(1 for kind in self.layers if "attention" in kind)

    @property
    def mamba_layers(self) -> int:
        return sum(1 for kind in self.layers if "mamba" in kind)


def _text(config: dict) -> dict:
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def architecture_of(config: dict) -> str | None:
    """The hybrid architecture a config names (None when it is not one of the sized hybrids)."""
    for name in config.get("architectures") or ():
        if name in HYBRID_ARCHITECTURES:
            return name
    cfg = _text(config)
    return _MODEL_TYPES.get(cfg.get("model_type", "")) or _MODEL_TYPES.get(config.get("model_type", ""))


def is_hybrid(config: dict) -> bool:
    return architecture_of(config) is not None


def _need(cfg: dict, *keys: str):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise HybridConfigError(f"hybrid config has none of {', '.join(keys)}")


def hybrid_layout(config: dict) -> HybridLayout:
    """Per-layer kinds as vLLM's model code builds its decoder layers."""
    architecture = architecture_of(config)
    if architecture is None:
        raise HybridConfigError("not a Mamba / linear-attention hybrid")
    family, mixer = HYBRID_ARCHITECTURES[architecture]
    cfg = _text(config)
    if family == "nemotron_h":
        pattern = str(_need(cfg, "hybrid_override_pattern"))
        # nemotron_h.py ALL_DECODER_LAYER_TYPES: M mamba, * attention, - MLP, E MoE
        kinds = tuple({"M": "mamba", "*": "attention"}.get(ch, "none") for ch in pattern)
        return HybridLayout(family, mixer, kinds)
    n = int(_need(cfg, "num_hidden_layers", "num_layers"))
    if family == "jamba":
        period, offset = int(cfg.get("attn_layer_period", 8)), int(cfg.get("attn_layer_offset", 4))
        kinds = tuple("attention" if i % period == offset else "mamba" for i in range(n))
    elif family == "bamba":
        attention = set(cfg.get("attn_layer_indices") or ())
        kinds = tuple("attention" if i in attention else "mamba" for i in range(n))
    elif family == "granitemoehybrid":
        types = cfg.get("layer_types") or cfg.get("layers_block_type")
        if not types:
            raise HybridConfigError("GraniteMoeHybrid config without layer_types")
        kinds = tuple("attention" if t == "attention" else "mamba" for t in types[:n])
    elif family == "qwen3_next":
        types = cfg.get("layer_types")
        if types:
            kinds = tuple("attention" if t == "full_attention" else "mamba" for t in types[:n])
        else:  # Qwen3NextConfig: every full_attention_interval-th layer is full attention
            interval = int(cfg.get("full_attention_interval", 4))
            kinds = tuple("attention" if (i + 1) % interval == 0 else "mamba" for i in range(n))
    elif family == "minimax_text_01":
        # attn_type_list: 1 = softmax attention, 0 = lightning (linear) attention
        types = cfg.get("attn_type_list") or cfg.get("layer_types")
        if not types:
            raise HybridConfigError("MiniMax config without attn_type_list")
        kinds = tuple("attention" if t in (1, "full_attention") else "mamba" for t in types[:n])
    else:  # falcon_h1: attention and Mamba2 side by side in every layer
        kinds = ("attention+mamba",) * n
    return HybridLayout(family, mixer, kinds)


def attention_shape(config: dict) -> tuple[int, int]:
    """(KV heads, head_dim) of the softmax-attention layers of a hybrid config."""
    cfg = _text(config)
    heads = int(_need(cfg, "num_attention_heads"))
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg.get("attention_head_dim") or int(_need(cfg, "hidden_size")) // heads)
    return kv_heads, head_dim




@dataclass(frozen=True)
class MixerFacts:
    """A hybrid's recurrent mixer and softmax-attention sizes as its config.json states them, each family's
    key names normalized (Mamba1: mamba_*; Mamba2: mamba_n_* / Nemotron-H's mamba_num_heads, ssm_state_size,
    n_groups, conv_kernel; GatedDeltaNet: linear_*; MiniMax: the attention heads). Engines shard and size
    them; `problem` says what a required key lacks (the engine raises it when it needs the state)."""

    family: str
    kind: str  # HybridLayout.mixer: "mamba1", "mamba2", "gated_delta_net", "linear_attention"
    layers: tuple[str, ...]  # HybridLayout.layers
    hidden_size: int | None = None
    attention_shape: tuple[int, int] | None = None  # (KV heads, head_dim) of the softmax-attention layers
    conv_kernel: int | None = None
    heads: int | None = None  # Mamba2 heads / linear-attention heads
    head_dim: int | None = None
    d_state: int | None = None
    n_groups: int | None = None
    intermediate: int | None = None  # the mixer's inner width (expand x hidden, mamba_d_ssm, heads x head_dim)
    dt_rank: int | None = None  # Mamba1 (JambaConfig "auto": ceil(hidden / 16))
    proj_bias: bool = False
    conv_bias: bool = True
    rms_norm: bool = True  # the gated RMSNorm over the inner width (Falcon-H1: only with mamba_rms_norm)
    key_heads: int | None = None  # GatedDeltaNet
    value_heads: int | None = None
    key_head_dim: int | None = None
    value_head_dim: int | None = None
    ssm_dtype: str | None = None  # the config's own SSM-state dtype (Nemotron-H mamba_ssm_cache_dtype, Qwen3.5 mamba_ssm_dtype)
    attn_output_gate: bool = True  # Qwen3-Next / Qwen3.5: gated attention output (qkv_proj's extra query rows)
    override_pattern: str = ""  # Nemotron-H hybrid_override_pattern (M mamba, * attention, - MLP, E MoE)
    mlp_sizes: tuple[int, ...] = ()  # Nemotron-H MLP widths: one, or one per "-" layer
    problem: str | None = None


def _mamba2_sizes(family: str, cfg: dict, hidden: int) -> dict:
    if family == "nemotron_h":
        heads, head_dim = int(_need(cfg, "mamba_num_heads")), int(_need(cfg, "mamba_head_dim"))
        return {"heads": heads, "head_dim": head_dim, "intermediate": heads * head_dim,
                "n_groups": int(_need(cfg, "n_groups")), "d_state": int(_need(cfg, "ssm_state_size")),
                "conv_kernel": int(_need(cfg, "conv_kernel")), "proj_bias": bool(cfg.get("use_bias", False)),
                "conv_bias": bool(cfg.get("use_conv_bias", True))}
    heads, head_dim = int(_need(cfg, "mamba_n_heads")), int(_need(cfg, "mamba_d_head"))
    if family == "falcon_h1" and cfg.get("mamba_d_ssm") is not None:
        intermediate = int(cfg["mamba_d_ssm"])  # falcon_h1.py: mamba_d_ssm overrides expand x hidden
    else:
        intermediate = int(float(_need(cfg, "mamba_expand")) * hidden)
    return {"heads": heads, "head_dim": head_dim, "intermediate": intermediate,
            "n_groups": int(_need(cfg, "mamba_n_groups")), "d_state": int(_need(cfg, "mamba_d_state")),
            "conv_kernel": int(_need(cfg, "mamba_d_conv")), "proj_bias": bool(cfg.get("mamba_proj_bias", False)),
            "conv_bias": bool(cfg.get("mamba_conv_bias", True)),
            "rms_norm": family != "falcon_h1" or bool(cfg.get("mamba_rms_norm", False))}


def _mixer_sizes(family: str, mixer: str, cfg: dict, hidden: int) -> dict:
    if mixer == "mamba1":
        dt_rank = cfg.get("mamba_dt_rank", "auto")
        return {"intermediate": int(cfg.get("mamba_expand", 2)) * hidden, "conv_kernel": int(cfg.get("mamba_d_conv", 4)),
                "d_state": int(cfg.get("mamba_d_state", 16)),
                "dt_rank": -(-hidden // 16) if dt_rank in (None, "auto") else int(dt_rank),
                "proj_bias": bool(cfg.get("mamba_proj_bias", False)), "conv_bias": bool(cfg.get("mamba_conv_bias", True))}
    if mixer == "mamba2":
        return _mamba2_sizes(family, cfg, hidden)
    if mixer == "gated_delta_net":
        return {"key_heads": int(_need(cfg, "linear_num_key_heads")), "value_heads": int(_need(cfg, "linear_num_value_heads")),
                "key_head_dim": int(_need(cfg, "linear_key_head_dim")),
                "value_head_dim": int(_need(cfg, "linear_value_head_dim")),
                "conv_kernel": int(cfg.get("linear_conv_kernel_dim", 4))}
    heads = int(_need(cfg, "num_attention_heads"))  # MiniMax lightning attention
    return {"heads": heads, "head_dim": int(cfg.get("head_dim") or hidden // heads)}


def _mlp_sizes(cfg: dict) -> tuple[int, ...]:
    sizes = cfg.get("intermediate_size")
    if isinstance(sizes, list):
        return tuple(int(size) for size in sizes)
    return (int(sizes),) if sizes is not None else ()


def mixer_facts(config: dict) -> MixerFacts | None:
    """The mixer facts of a hybrid config (None when the config is not one of the sized hybrids)."""
    architecture = architecture_of(config)
    if architecture is None:
        return None
    family, mixer = HYBRID_ARCHITECTURES[architecture]
    cfg = _text(config)
    facts = MixerFacts(family, mixer, hybrid_layout(config).layers, ssm_dtype=_ssm_dtype(family, cfg),
                       attn_output_gate=bool(cfg.get("attn_output_gate", True)),
                       override_pattern=str(cfg.get("hybrid_override_pattern") or ""),
                       mlp_sizes=_mlp_sizes(cfg) if family == "nemotron_h" else ())
    try:  # in the order vLLM's state-shape hooks read them, so the first missing key is named
        shape = attention_shape(config)
        hidden = int(_need(cfg, "hidden_size"))
        sizes = _mixer_sizes(family, mixer, cfg, hidden)
    except HybridConfigError as error:
        return replace(facts, problem=str(error))
    return replace(facts, hidden_size=hidden, attention_shape=shape, **sizes)


def _ssm_dtype(family: str, cfg: dict) -> str | None:
    if family == "nemotron_h":
        return cfg.get("mamba_ssm_cache_dtype")
    if family == "qwen3_next":
        return cfg.get("mamba_ssm_dtype")
    return None
