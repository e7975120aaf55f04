"""Hugging Face config.json -> ModelSpec. Every family's key names are normalized here, once."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .attention import AttentionFacts, attention_facts
from .draft import DraftFacts, draft_facts
from .hybrid import MixerFacts, mixer_facts
from .quantization import QuantConfig, parse_quantization_config


class ConfigError(ValueError):
    """A config.json that cannot describe a model we can size."""


class UnsupportedArchitectureError(ConfigError):
    pass


@dataclass(frozen=True)
class RopeScaling:
    kind: str  # "default", "linear", "dynamic", "yarn", "llama3", "longrope", "su", ...
    factor: float = 1.0
    original_max_position: int | None = None


@dataclass(frozen=True)
class MoeSpec:
    """Mixture-of-experts MLP (vllm/model_executor/layers/fused_moe, the model files per family)."""

    num_experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int = 0  # one shared MLP of this size (DeepSeek: n_shared x moe size; Qwen2-MoE)
    shared_expert_gate: bool = False  # Qwen2-MoE gates its shared expert with a [1, hidden] linear
    dense_layers: tuple[int, ...] = ()  # layers with a plain MLP of `intermediate_size`
    router_bias: bool = False  # gpt-oss
    expert_bias: bool = False  # gpt-oss: biases on w13/w2
    score_correction_bias: bool = False  # DeepSeek-V3 noaux_tc: e_score_correction_bias fp32 [E]
    router_dtype: str | None = None  # None: the model dtype; MiniMax-Text-01 builds its gate in float32
    gated: bool = True  # False: FusedMoE(is_act_and_mul=False), w13 = up only (Nemotron-H relu2 experts)
    # Nemotron-H latent MoE (moe_latent_size): the experts run in a latent width between two replicated
    # projections fc1_latent_proj [hidden -> latent] and fc2_latent_proj [latent -> hidden]
    latent_size: int | None = None
    shared_gated: bool = True  # False: the shared expert is up_proj + down_proj (Nemotron-H NemotronHMLP)


@dataclass(frozen=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek V2/V3): one latent of kv_lora_rank + rope dims per token."""

    kv_lora_rank: int
    q_lora_rank: int | None
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # DeepSeek-V3.2 sparse attention (deepseek_v2.py Indexer, 0.11.0+): the lightning indexer's heads, width and
    # top-k (0: no indexer)
    indexer_heads: int = 0
    indexer_head_dim: int = 0
    indexer_topk: int = 0

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class VisionSpec:
    """A vision tower served with the language model (vLLM loads it on the first pipeline stage)."""

    kind: str  # "qwen2_vl", "qwen2_5_vl", "siglip", "clip" (LLaVA-1.5), "clip_anyres" (LLaVA-NeXT)
    hidden_size: int
    intermediate_size: int
    num_layers: int
    patch_size: int
    in_channels: int = 3
    temporal_patch_size: int = 1
    spatial_merge_size: int = 1
    out_hidden_size: int = 0  # the language model's hidden size (projector output)
    image_size: int = 0  # SigLIP: learned position table of (image_size / patch_size)^2 rows
    # CLIP (LLaVA): vLLM builds the layers up to vision_feature_layer only; num_layers is what it builds
    full_layers: int = 0  # the checkpoint's vision num_hidden_layers
    post_norm: bool = False  # post_layernorm built (only when every layer is built, clip.py >= 0.6)
    projector_bias: bool = True  # multimodal_projector_bias (LLaVA projector linear_1 / linear_2)
    image_newline: bool = False  # LLaVA-NeXT: a learned [text hidden] image_newline parameter
    grid_pinpoints: tuple[tuple[int, int], ...] = ()  # LLaVA-NeXT anyres resolutions
    # Mllama (Llama 3.2 Vision): a gated global encoder after the local one, tiles, cross-attention layers
    global_layers: int = 0
    max_num_tiles: int = 1
    aspect_ratios: int = 0  # len(supported_aspect_ratios) = max_aspect_ratio_id
    vision_output_dim: int = 0  # hidden x (intermediate_layers_indices + 1): the projector's input
    cross_attention_layers: tuple[int, ...] = ()  # text layers that are cross-attention decoder layers
    # Llama 4: the pixel-shuffle adapter MLP (intermediate_size -> projector_input_dim -> projector_output_dim)
    adapter_dims: tuple[int, int] = (0, 0)
    adapter_bias: bool = False
    num_heads: int = 0  # attention heads (Llama 4's vision rotary cache, Gemma 4's q/k/v widths)
    head_dim: int = 0  # Gemma 4: the vision attention's head width (q/k norms, q/k/v = heads x head_dim)
    # Qwen3-VL / Qwen3.5 (qwen3_vl.py): a learned [num_position_embeddings, hidden] table and deepstack mergers
    position_embeddings: int = 0
    deepstack_layers: int = 0  # len(deepstack_visual_indexes): extra mergers, and text-side input buffers
    # InternViT: qkv bias, RMSNorm vs LayerNorm, per-layer q_norm/k_norm over the whole width (InternViT-6B)
    qkv_bias: bool = True
    rms_norm: bool = False
    qk_norm: bool = False


@dataclass(frozen=True)
class EncoderSpec:
    """An encoder served with an encoder-decoder model (vLLM loads it on the first pipeline stage).

    Whisper (vllm/model_executor/models/whisper.py, 0.7.0+): conv1 (mel bins -> d_model, k=3) and conv2
    (d_model -> d_model, k=3, stride 2) with biases, a [max_source_positions, d_model] position table,
    encoder_layers pre-LN layers (fused qkv with bias, out_proj, fc1/fc2 with biases, two LayerNorms with bias)
    and a final LayerNorm."""

    kind: str  # "whisper"
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    intermediate_size: int
    num_mel_bins: int
    max_source_positions: int  # encoder tokens per request (1500 for 30 s of audio)


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder as vLLM builds it; sizes are for the whole model (before any sharding)."""

    name: str
    architecture: str
    family: str  # llama, qwen2, qwen3, gemma2, gemma3, phi3, internlm2, chatglm, opt, ...
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    torch_dtype: str  # "bfloat16", "float16", "float32"
    max_position_embeddings: int
    rotary_dim: int | None  # None: no rotary embedding (learned positions)
    rope_scaling: RopeScaling | None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    gated_mlp: bool = True  # gate+up+down (SwiGLU/GeGLU) vs fc1+fc2
    qk_norm: bool = False  # per-head q_norm/k_norm of head_dim (Qwen3, Gemma3)
    norms_per_layer: int = 2
    norm_bias: bool = False  # LayerNorm with bias (OPT) vs RMSNorm
    learned_positions: int = 0  # rows of a learned position table (OPT: max_pos + 2)
    sliding_window: int | None = None
    sliding_window_pattern: str = ""  # "", "all", "alternate" (Gemma 2), "5:1" (Gemma 3)
    max_len_keys: tuple[tuple[str, int], ...] = ()  # every config key vLLM reads for max_model_len
    forbids_fp16: bool = False  # vLLM refuses fp16 for these (falls back to fp32 on pre-Ampere)
    quantization: QuantConfig | None = None
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    attention_sinks: bool = False  # gpt-oss: one learned sink per attention head
    rotary_dtype: str | None = None  # None: the model dtype; gpt-oss asks get_rope for float32
    vision: VisionSpec | None = None
    mrope: bool = False  # multimodal RoPE (rope_scaling mrope_section): MRotaryEmbedding's longer cos/sin table
    # Gemma 4: (head_dim, kv_heads) of the full-attention layers when they differ from the sliding ones, and
    # which layers those are
    full_attention_shape: tuple[int, int] | None = None
    full_attention_layers: tuple[int, ...] = ()
    encoder: EncoderSpec | None = None  # encoder-decoder models (Whisper): the decoder is the text model
    hybrid: object | None = None  # model/hybrid.py HybridLayout: Mamba / linear-attention layers (Bamba)
    mamba_chunk_size: int | None = None  # hybrids: mamba_chunk_size, else chunk_size, as config.json gives it
    attention_facts: AttentionFacts | None = None  # model/attention.py: windows, chunks, MLA, KV sharing per layer
    mixer: MixerFacts | None = None  # model/hybrid.py: a hybrid's Mamba / linear-attention mixer sizes
    draft: DraftFacts | None = None  # model/draft.py: MTP layers, EAGLE / Medusa head sizes
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the config as read (the facts above are read from it; SGLang's pool still reads raw keys)
    source_config: dict | None = field(default=None, compare=False, repr=False)

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def padded_vocab_size(self) -> int:
        # VocabParallelEmbedding pads the vocabulary to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE,
        # vllm/model_executor/layers/vocab_parallel_embedding.py, every release).
        return -(-self.vocab_size // 64) * 64


# Architectures -> family. Families share one parameter layout.
_ARCHITECTURE_FAMILY = {
    "LlamaForCausalLM": "llama",
    "LLaMAForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "YiForCausalLM": "llama",
    "AquilaForCausalLM": "llama",
    "InternLMForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "GemmaForCausalLM": "gemma",
    "Phi3ForCausalLM": "phi3",
    "InternLM2ForCausalLM": "internlm2",
    "ChatGLMModel": "chatglm",
    "ChatGLMForConditionalGeneration": "chatglm",
    "GlmForCausalLM": "glm",
    "Glm4ForCausalLM": "glm4",
    "OPTForCausalLM": "opt",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v2",
    "DeepseekV32ForCausalLM": "deepseek_v2",  # + the lightning indexer and its key cache (0.11.0+)
    "GptOssForCausalLM": "gpt_oss",
    "BambaForCausalLM": "bamba",  # Mamba2 + attention hybrid (model/hybrid.py)
    # GatedDeltaNet + gated attention hybrids, text-only checkpoints (qwen3_next.py, qwen3_5.py)
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5ForCausalLM": "qwen3_next",
    "Qwen3_5MoeForCausalLM": "qwen3_next",
    "JambaForCausalLM": "jamba",  # Mamba1 + attention, MoE every other layer (jamba.py)
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",  # Mamba2 + attention, MoE + shared MLP per layer
    "FalconH1ForCausalLM": "falcon_h1",  # attention and Mamba2 side by side in every layer, then an MLP
    "MiniMaxText01ForCausalLM": "minimax_text_01",  # lightning (linear) attention + softmax attention, MoE
    # Mamba2 / attention / relu2 MLP / non-gated MoE, one mixer per layer by hybrid_override_pattern
    "NemotronHForCausalLM": "nemotron_h",
    # Llama 4 text (llama4.py, 0.8.3+): MoE every interleave_moe_layer_step-th layer (top-1 experts + one shared
    # expert of the same size), dense LlamaMLPs of intermediate_size_mlp between them, chunked local attention
    "Llama4ForCausalLM": "llama4",
    # GLM-4.5 / 4.6 / 4.7 (glm4_moe.py, 0.10.0+): biased fused qkv, optional per-head q/k norms, half-width
    # rotary, first_k_dense_replace dense layers, then an fp32 router + routed and shared experts
    "Glm4MoeForCausalLM": "glm4_moe",
    # Gemma 4 text (gemma4.py, 0.19.0+): sliding layers of head_dim / num_key_value_heads, full layers of
    # global_head_dim / num_global_key_value_heads (attention_k_eq_v), tied embeddings, optional MoE beside the MLP
    "Gemma4ForCausalLM": "gemma4",
}

# Architectures we recognise but do not size yet, with the reason said to the user.
_LATER: dict[str, str] = {}

# HF Gemma3TextConfig defaults: Gemma 3 multimodal configs list only what differs from them.
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
    "rope_theta": 1_000_000.0, "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": True,
}

# Config keys vLLM's _get_and_verify_max_len reads (config.py, every release since 0.4).
_MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)

# Models whose vLLM config forbids fp16 (vllm/config.py _FLOAT16_NOT_SUPPORTED_MODELS, 0.9.1+).
_FP16_FORBIDDEN = {"gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"}


def _max_len_keys(config: dict) -> tuple[tuple[str, int], ...]:
    return tuple((key, int(config[key])) for key in _MAX_LEN_KEYS if isinstance(config.get(key), int))


def _require(config: dict, *keys: str) -> int:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    raise ConfigError(f"config.json has none of {', '.join(keys)}")


def _rope_scaling(config: dict) -> RopeScaling | None:
    raw = config.get("rope_scaling") or config.get("rope_parameters")
    if not isinstance(raw, dict):
        return None
    kind = str(raw.get("rope_type") or raw.get("type") or "default")
    if kind == "default" and "factor" not in raw:
        return None
    return RopeScaling(
        kind=kind,
        factor=float(raw.get("factor", 1.0) or 1.0),
        original_max_position=raw.get("original_max_position_embeddings")
        or config.get("original_max_position_embeddings"),
    )


# The structural numbers of a model, as (lowest, highest): beyond these no model exists, and a corrupt value
# (num_hidden_layers 2^32 - 1, Infinity) would otherwise size lists of billions of layers or overflow
_SPEC_LIMITS = {"hidden_size": (1, 1 << 24), "num_layers": (1, 100_000), "num_attention_heads": (1, 1 << 16),
                "num_kv_heads": (0, 1 << 16), "head_dim": (1, 1 << 16), "intermediate_size": (0, 1 << 26),
                "vocab_size": (1, 1 << 26), "max_position_embeddings": (1, 1 << 34)}


def _check_spec(spec: "ModelSpec", name: str) -> None:
    for field_name, (low, high) in _SPEC_LIMITS.items():
        value = getattr(spec, field_name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ConfigError(f"{name}: config.json gives {field_name} = {_short(value)}, not a count from {low} to {high:,}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text):,} characters)"


def _check_numbers(config: dict, name: str) -> None:
    """Numbers JSON can carry but no config has (Infinity, NaN, booleans or lists for counts)."""
    for scope in (config, config.get("text_config"), config.get("llm_config")):
        if not isinstance(scope, dict):
            continue
        for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
                    "intermediate_size", "head_dim", "max_position_embeddings"):
            value = scope.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    isinstance(value, float) and not (math.isfinite(value) and value == int(value))):
                raise ConfigError(f"{name}: config.json gives {key} = {_short(value)}, not a whole number")
            if key in ("num_hidden_layers", "hidden_size", "num_attention_heads") and value < 1:
                raise ConfigError(f"{name}: config.json gives {key} = {_short(value)}, not a count of at least 1")
        for key in ("torch_dtype", "dtype"):
            if scope.get(key) is not None and not isinstance(scope[key], str):
                raise ConfigError(f"{name}: config.json gives {key} = {_short(scope[key])}, not a dtype name")


def parse_config(config: dict, name: str = "model") -> ModelSpec:
    """Normalize one config.json. Raises ConfigError / UnsupportedArchitectureError (one line, whatever the
    file holds: a value of the wrong JSON type or an absurd size is a ConfigError too)."""
    if not isinstance(config, dict):
        raise ConfigError("config.json is not a JSON object")
    _check_numbers(config, name)
    try:
        spec = _parse(config, name)
    except (TypeError, OverflowError, ZeroDivisionError, AttributeError, IndexError, RecursionError) as error:
        # a value of the wrong type or size where the family's reader expects a number, list or object
        raise ConfigError(f"{name}: config.json has a value this tool cannot read ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else 'no detail'})") from None
    _check_spec(spec, name)
    if spec.vision is not None and spec.vision.kind in ("clip", "clip_anyres"):
        # LLaVA: engine rules read the text_config; give them the defaults it leaves to transformers
        config = {**config, "text_config": _llava_text_config(config)}
    elif spec.vision is not None and spec.vision.kind == "intern_vit":
        config = {**config, "text_config": _internvl_text_config(config)}  # InternVL names it llm_config
    elif spec.vision is not None and spec.vision.kind == "llama4":
        config = spec.source_config  # the text_config with Llama4TextConfig's defaults filled in
    chunk = (config.get("mamba_chunk_size") or config.get("chunk_size")) if spec.hybrid is not None else None
    return replace(spec, source_config=config, mamba_chunk_size=int(chunk) if chunk else None, **_facts(spec, config))


def _facts(spec: ModelSpec, config: dict) -> dict:
    """What engines read beyond the sizes above, each family's keys normalized once (model/attention.py,
    model/hybrid.py, model/draft.py) from the config as stored in source_config."""
    return {"attention_facts": attention_facts(config), "draft": draft_facts(config),
            "mixer": mixer_facts(config) if spec.hybrid is not None else None}


def _parse(config: dict, name: str) -> ModelSpec:
    architectures = config.get("architectures") or []
    architecture = architectures[0] if architectures else ""
    if architecture in _LATER:
        raise UnsupportedArchitectureError(
            f"{architecture}: {_LATER[architecture]} are not sized yet"
        )
    if architecture in _MULTIMODAL:
        return _parse_multimodal(config, name, architecture)
    if architecture == "WhisperForConditionalGeneration":
        return _parse_whisper(config, name, architecture)
    family = _text_family(config, architecture)
    if family == "chatglm":
        return _parse_chatglm(config, name, architecture)
    if family == "opt":
        return _parse_opt(config, name, architecture)
    spec = _parse_text(config, name, architecture, family)
    if family in ("bamba", "qwen3_next", "jamba", "granitemoehybrid", "falcon_h1", "minimax_text_01", "nemotron_h"):
        spec = replace(spec, **_hybrid_fields(config))
    if family == "gemma4":
        spec = replace(spec, **_gemma4_fields(config))
    return spec


def _text_family(config: dict, architecture: str) -> str:
    """The family of a text model: by architecture, else by model_type for the common ones."""
    family = _ARCHITECTURE_FAMILY.get(architecture)
    if family is None:
        model_type = config.get("model_type", "")
        family = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}.get(model_type)
        if family is None:
            raise UnsupportedArchitectureError(
                f"unsupported architecture {architecture or model_type or '(none given)'!r}"
            )
    return family


def _sliding_window(config: dict, family: str) -> tuple[int | None, str]:
    """(window, pattern of sliding layers) - (None, "") when every layer is full attention."""
    sliding_window = config.get("sliding_window")
    pattern = ""
    if family in ("gemma2", "gpt_oss"):
        pattern = "alternate"  # (gpt-oss: layer_types sliding_attention / full_attention)
    elif family == "gemma3":
        pattern = f"{config.get('sliding_window_pattern', 6) - 1}:1"
    elif family in ("llama", "phi3", "mixtral") and sliding_window:
        pattern = "all"
    # (Qwen2/Qwen3 configs carry a window they do not use unless use_sliding_window: no pattern either way)
    return (sliding_window if pattern else None), pattern


def _parse_text(config: dict, name: str, architecture: str, family: str) -> ModelSpec:
    """A decoder-only text model of a known family."""
    hidden = _require(config, "hidden_size", "n_embd", "d_model")
    heads = _require(config, "num_attention_heads", "n_head")
    head_dim = config.get("head_dim") or hidden // heads
    layers = _require(config, "num_hidden_layers", "n_layer", "num_layers")
    # (an all-MoE text config may name only the experts' width: Qwen3_5MoeTextConfig has no intermediate_size)
    intermediate = _require(config, "intermediate_size", "ffn_dim", "n_inner", "moe_intermediate_size")
    if family == "llama4":
        # intermediate_size is one expert's (and the shared expert's); dense layers use intermediate_size_mlp
        intermediate = int(config.get("intermediate_size_mlp") or _LLAMA4_TEXT_DEFAULTS["intermediate_size_mlp"])
    vocab = _require(config, "vocab_size")
    # (GLM-4.5's model code defaults partial_rotary_factor to 0.5: glm4_moe.py getattr(config, ..., 0.5))
    partial = float(config.get("partial_rotary_factor", 0.5 if family == "glm4_moe" else 1.0) or 1.0)
    rotary_dim = int(head_dim * partial)
    sliding_window, pattern = _sliding_window(config, family)
    bias = bool(config.get("attention_bias", False)) or bool(config.get("bias", False))
    moe = _moe(config, family, layers)
    mla = _mla(config) if family == "deepseek_v2" else None
    if mla is not None:
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        rotary_dim = mla.qk_rope_head_dim
    return ModelSpec(
        name=name,
        architecture=architecture,
        family=family,
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        # Gemma ties embeddings unless told otherwise; everyone else defaults to untied in HF.
        tie_word_embeddings=bool(config.get("tie_word_embeddings", family.startswith("gemma"))),
        torch_dtype=_dtype_name(config.get("torch_dtype") or config.get("dtype") or "float32"),
        max_position_embeddings=int(config.get("max_position_embeddings") or 2048),
        rotary_dim=rotary_dim,
        rope_scaling=_rope_scaling(config),
        qkv_bias=family in ("qwen2", "qwen2_moe") or bias,
        o_bias=bias and family not in ("qwen2", "qwen2_moe", "glm4_moe"),  # glm4_moe.py: o_proj bias=False
        mlp_bias=bool(config.get("mlp_bias", False)),
        qk_norm=family in ("qwen3", "qwen3_moe", "gemma3", "qwen3_next") or family == "glm4_moe" and bool(config.get("use_qk_norm")),
        norms_per_layer=4 if family in ("gemma2", "gemma3") else 2,
        sliding_window=sliding_window,
        sliding_window_pattern=pattern,
        max_len_keys=_max_len_keys(config),
        forbids_fp16=config.get("model_type") in _FP16_FORBIDDEN or family in ("gemma2", "gemma3"),
        quantization=parse_quantization_config(config.get("quantization_config") or config.get("compression_config")),
        moe=moe,
        mla=mla,
        attention_sinks=family == "gpt_oss",
        rotary_dtype="float32" if family == "gpt_oss" else None,  # gpt_oss.py get_rope(dtype=torch.float32)
    )


def _hybrid_fields(config: dict) -> dict:
    from .hybrid import HYBRID_ARCHITECTURES, architecture_of, hybrid_layout

    # bamba.py: rotary of attn_rotary_emb dims on the attention layers
    fields: dict = {"hybrid": hybrid_layout(config)}
    if config.get("attn_rotary_emb"):
        fields["rotary_dim"] = int(config["attn_rotary_emb"])
    family = HYBRID_ARCHITECTURES[architecture_of(config)][0]
    if family == "jamba":
        fields["rotary_dim"] = None  # jamba.py: no positional embedding at all (the Mamba layers order tokens)
    if family == "granitemoehybrid":
        # granitemoehybrid.py: rotary only with position_embedding_type "rope" (Granite 4.0-H: "nope");
        # without experts the shared MLP is the layer's only MLP
        if config.get("position_embedding_type", "nope") != "rope":
            fields["rotary_dim"] = None
        if not config.get("num_local_experts"):
            fields["intermediate_size"] = int(config.get("shared_intermediate_size") or 0)
    if family == "minimax_text_01":
        # minimax_text_01.py: get_rope(dtype=torch.float32) over config.rotary_dim of head_dim
        if not isinstance(config.get("num_local_experts"), int) or isinstance(config.get("shared_intermediate_size"), list):
            raise UnsupportedArchitectureError("MiniMax-Text-01 with per-layer expert / shared-MLP lists is not sized")
        if config.get("rotary_dim"):
            fields["rotary_dim"] = int(config["rotary_dim"])
        fields["rotary_dtype"] = "float32"
    if family == "nemotron_h":
        fields.update(_nemotron_h_fields(config))
    return fields


def _nemotron_h_fields(config: dict) -> dict:
    """nemotron_h.py (0.10.2-0.33): every decoder layer is one norm + one mixer (M MambaMixer2, * attention
    without rotary, - NemotronHMLP relu2 up/down, E NemotronHMoE); final norm_f; lm_head never tied."""
    pattern = str(config.get("hybrid_override_pattern") or "")
    if len(pattern) != int(config.get("num_hidden_layers") or len(pattern)):
        raise ConfigError("Nemotron-H hybrid_override_pattern length differs from num_hidden_layers")
    if set(pattern) - set("M*-E"):
        raise UnsupportedArchitectureError(f"Nemotron-H layer kinds {sorted(set(pattern) - set('M*-E'))} are not sized")
    intermediate = config.get("intermediate_size")
    sizes = intermediate if isinstance(intermediate, list) else [intermediate]
    heads = int(config["num_attention_heads"])
    head_dim = config.get("head_dim") or config.get("attention_head_dim") or int(config["hidden_size"]) // heads
    return {
        "rotary_dim": None,  # NemotronHAttention: no positional embedding
        "tie_word_embeddings": False,  # NemotronHForCausalLM builds its own ParallelLMHead
        "norms_per_layer": 1,
        "gated_mlp": False,  # relu2: up_proj + down_proj
        "head_dim": int(head_dim),
        # the widest MLP stands for the activation peak; the inventory reads the per-layer list itself
        "intermediate_size": int(max(int(v) for v in sizes if v is not None) if any(v is not None for v in sizes) else 0),
    }


_MULTIMODAL = {
    "Qwen2VLForConditionalGeneration": ("Qwen2ForCausalLM", "qwen2_vl"),
    "Qwen2_5_VLForConditionalGeneration": ("Qwen2ForCausalLM", "qwen2_5_vl"),
    "Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", "siglip"),
    # LLaVA: the text model is whatever text_config names (Llama / Mistral ...), a CLIP tower, 2-layer projector
    "LlavaForConditionalGeneration": ("", "clip"),
    "LlavaNextForConditionalGeneration": ("", "clip_anyres"),
    "MllamaForConditionalGeneration": ("LlamaForCausalLM", "mllama"),
    "InternVLChatModel": ("", "intern_vit"),  # InternViT + mlp1 + llm_config's language model
    "Llama4ForConditionalGeneration": ("Llama4ForCausalLM", "llama4"),  # mllama4.py (0.8.3+)
    "Gemma4ForConditionalGeneration": ("Gemma4ForCausalLM", "gemma4_vision"),  # gemma4_mm.py (0.19.0+)
    # one Qwen3_VisionTransformer (qwen3_vl.py) for all four: Qwen3-VL (0.11.0+) over a Qwen3 / Qwen3-MoE text
    # model, Qwen3.5 / 3.6 (qwen3_5.py, 0.17.0+) over the GatedDeltaNet hybrid text model, without deepstack
    "Qwen3VLForConditionalGeneration": ("Qwen3ForCausalLM", "qwen3_vl"),
    "Qwen3VLMoeForConditionalGeneration": ("Qwen3MoeForCausalLM", "qwen3_vl"),
    "Qwen3_5ForConditionalGeneration": ("Qwen3_5ForCausalLM", "qwen3_vl"),
    "Qwen3_5MoeForConditionalGeneration": ("Qwen3_5MoeForCausalLM", "qwen3_vl"),
}

# Qwen3VLVisionConfig / Qwen3_5VisionConfig defaults (transformers 4.57.1 and 5.24.0 agree): not any one
# checkpoint's (out_hidden_size falls back to the text hidden size here, as every published config sets it so)
_QWEN3_VL_VISION_DEFAULTS = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "in_channels": 3,
                             "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                             "num_position_embeddings": 2304}

# transformers 4.51 Llama4TextConfig / Llama4VisionConfig defaults (configuration_llama4.py, docstring
# meta-llama/Llama-4-Scout-17B-16E) for keys a config.json leaves out. Not all are Scout's own values (the
# text max_position_embeddings 131072, the vision hidden 768 / image 448): published configs list those.
_LLAMA4_TEXT_DEFAULTS = {
    "model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 131072, "num_local_experts": 16, "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 1, "attention_chunk_size": 8192, "tie_word_embeddings": False,
}
_LLAMA4_VISION_DEFAULTS = {
    "hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "num_channels": 3, "image_size": 448,
    "patch_size": 14, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096, "projector_output_dim": 4096,
    "vision_output_dim": 7680, "multi_modal_projector_bias": False, "num_attention_heads": 16,
}

# transformers' config defaults for what LLaVA's text_config / vision_config leave out: LlavaConfig builds
# text_config with the model_type's class defaults (LlamaConfig / MistralConfig) and vision_config with
# CLIPVisionConfig's (configuration_llama.py, configuration_mistral.py, configuration_clip.py).
_TEXT_DEFAULTS = {
    "llama": {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
              "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048,
              "vocab_size": 32000, "tie_word_embeddings": False},
    "mistral": {"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                "max_position_embeddings": 4096 * 32, "vocab_size": 32000, "sliding_window": 4096,
                "tie_word_embeddings": False},
}
_CLIP_VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                         "image_size": 224, "patch_size": 32, "num_channels": 3}
# LlavaConfig without any vision_config: CLIP ViT-L/14-336 (configuration_llava.py)
_LLAVA_DEFAULT_VISION = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                         "image_size": 336, "patch_size": 14}


def _clip_built_layers(feature_layer, layers: int) -> int:
    """vLLM llava.py _get_num_hidden_layers: build up to the deepest vision_feature_layer (-2 -> layers - 1);
    0.5.x computes the same for one int (num_hidden_layers + vision_feature_layer + 1)."""
    if isinstance(feature_layer, (list, tuple)) and feature_layer:
        return max(_clip_built_layers(index, layers) for index in feature_layer)
    if not isinstance(feature_layer, int):
        return layers
    return layers + feature_layer + 1 if feature_layer < 0 else feature_layer + 1


def _llava_text_config(config: dict) -> dict:
    raw_text = config.get("text_config") or {}
    model_type = raw_text.get("model_type", "llama")
    text = {"model_type": model_type, **_TEXT_DEFAULTS.get(model_type, {})}
    text.update(raw_text)
    if config.get("torch_dtype"):
        text["torch_dtype"] = config["torch_dtype"]  # the checkpoint's dtype is the top-level one
    return text


def _internvl_text_config(config: dict) -> dict:
    text = dict(config.get("llm_config") or config.get("text_config") or {})
    if config.get("torch_dtype"):
        text["torch_dtype"] = config["torch_dtype"]
    return text


def _parse_internvl(config: dict, name: str, architecture: str) -> ModelSpec:
    """InternVL 2 / 2.5 (vllm/model_executor/models/internvl.py, intern_vit.py): InternViT built up to
    select_layer, pixel shuffle by downsample_ratio (0.5: 2x2 patches -> one token), mlp1 = LayerNorm(4h)
    + Linear(4h, text) + GELU + Linear(text, text); the language model from llm_config."""
    text = _internvl_text_config(config)
    if not text:
        raise ConfigError("InternVLChatModel config.json has no llm_config")
    spec = _parse(text, name)
    raw = config.get("vision_config") or {}
    full = int(raw.get("num_hidden_layers", 24))
    built = _clip_built_layers(config.get("select_layer", -1), full)
    merge = int(round(1 / float(config.get("downsample_ratio", 0.5))))
    tower = VisionSpec("intern_vit", int(raw.get("hidden_size", 1024)), int(raw.get("intermediate_size", 4096)), built,
                       int(raw.get("patch_size", 14)), int(raw.get("num_channels", 3)), spatial_merge_size=merge,
                       out_hidden_size=spec.hidden_size,
                       image_size=int(config.get("force_image_size") or raw.get("image_size", 448)),
                       full_layers=full, qkv_bias=bool(raw.get("qkv_bias", True)),
                       rms_norm=raw.get("norm_type", "layer_norm") == "rms_norm",
                       qk_norm=bool(raw.get("qk_normalization", False)),
                       max_num_tiles=int(config.get("max_dynamic_patch", 12)) + bool(config.get("use_thumbnail", True)))
    return replace(spec, architecture=architecture, vision=tower)


def _parse_mllama(config: dict, name: str, architecture: str) -> ModelSpec:
    """Llama 3.2 Vision (vllm/model_executor/models/mllama.py): a Llama text model of num_hidden_layers
    layers, of which cross_attention_layers are cross-attention decoder layers of the same linear shapes
    (qkv_proj over hidden, o_proj, LlamaMLP) plus per-head q_norm/k_norm and two tanh gates; the KV cache
    of every layer, self or cross, has the same page (V0: cross-attention K/V of the encoder tokens live in
    the same block pool through cross block tables)."""
    raw_text = config.get("text_config") or {}
    text = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
            "tie_word_embeddings": False}  # MllamaTextConfig defaults
    text.update({k: v for k, v in raw_text.items() if k not in ("architectures", "model_type")})
    if config.get("torch_dtype"):
        text["torch_dtype"] = config["torch_dtype"]
    spec = _parse(text, name)
    raw = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_global_layers": 8,
           "image_size": 448, "patch_size": 14, "num_channels": 3, "max_num_tiles": 4,
           "intermediate_layers_indices": [3, 7, 15, 23, 30],
           "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]}  # MllamaVisionConfig
    raw.update(config.get("vision_config") or {})
    hidden = int(raw["hidden_size"])
    output_dim = int(raw.get("vision_output_dim") or hidden * (len(raw["intermediate_layers_indices"]) + 1))
    tower = VisionSpec("mllama", hidden, int(raw["intermediate_size"]), int(raw["num_hidden_layers"]),
                       int(raw["patch_size"]), int(raw["num_channels"]), out_hidden_size=spec.hidden_size,
                       image_size=int(raw["image_size"]), global_layers=int(raw["num_global_layers"]),
                       max_num_tiles=int(raw["max_num_tiles"]), aspect_ratios=len(raw["supported_aspect_ratios"]),
                       vision_output_dim=output_dim,
                       cross_attention_layers=tuple(int(i) for i in text.get("cross_attention_layers") or ()))
    return replace(spec, architecture=architecture, vision=tower)


def _parse_llama4(config: dict, name: str, architecture: str) -> ModelSpec:
    """Llama 4 (mllama4.py, 0.8.3+): the Llama4ForCausalLM text model under language_model., the vision tower
    (Llama4VisionModel: an unfold-conv patch linear without bias, class embedding, (image/patch)^2 + 1 learned
    positions, pre/post LayerNorms, encoder layers with biased qkv/o/fc1/fc2 and two LayerNorms, the pixel-shuffle
    adapter MLP) and the bias-free multi_modal_projector [vision_output_dim -> text hidden]. vLLM builds tower and
    projector with quant_config=None: bf16 even in FP8 checkpoints."""
    text = {**_LLAMA4_TEXT_DEFAULTS, "architectures": ["Llama4ForCausalLM"]}
    text.update({k: v for k, v in (config.get("text_config") or {}).items() if k != "architectures"})
    if config.get("torch_dtype") or config.get("dtype"):
        text["torch_dtype"] = config.get("torch_dtype") or config.get("dtype")
    for key in ("quantization_config", "compression_config"):
        if config.get(key) and not text.get(key):
            text[key] = config[key]  # the checkpoint's quantization block sits at the top level
    spec = _parse(text, name)
    raw = {**_LLAMA4_VISION_DEFAULTS, **(config.get("vision_config") or {})}
    ratio = float(raw["pixel_shuffle_ratio"])
    tower = VisionSpec("llama4", int(raw["hidden_size"]), int(raw["intermediate_size"]), int(raw["num_hidden_layers"]),
                       int(raw["patch_size"]), int(raw["num_channels"]), spatial_merge_size=int(round(1 / ratio)),
                       out_hidden_size=spec.hidden_size, image_size=int(raw["image_size"]),
                       vision_output_dim=int(raw["vision_output_dim"]),
                       adapter_dims=(int(raw["projector_input_dim"]), int(raw["projector_output_dim"])),
                       adapter_bias=bool(raw["multi_modal_projector_bias"]), num_heads=int(raw["num_attention_heads"]))
    return replace(spec, architecture=architecture, vision=tower, source_config={**config, "text_config": text})


# Gemma4VisionConfig defaults (transformers 5.24 configuration_gemma4.py) for keys a vision_config leaves out
_GEMMA4_VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16,
                           "num_attention_heads": 12, "head_dim": 64, "patch_size": 16, "position_embedding_size": 10240}


def _gemma4_refusal(text: dict, config: dict) -> str | None:
    if text.get("hidden_size_per_layer_input") or text.get("num_kv_shared_layers") or config.get("audio_config"):
        return ("Gemma 4 E2B / E4B (per-layer embeddings, KV-shared layers, the audio tower) are not sized yet; "
                "the 31B and 26B-A4B are")
    return None


def _parse_gemma4(config: dict, name: str, architecture: str) -> ModelSpec:
    """Gemma 4 (gemma4_mm.py, 0.19.0+): the Gemma4ForCausalLM text model and the HF Gemma4VisionModel built by
    AutoModel.from_config - replicated on every rank and, in the 31B / 26B (intermediate 4304, not a multiple of
    64), never quantized - plus embed_vision's [vision hidden -> text hidden] projection."""
    text = dict(config.get("text_config") or {})
    text["architectures"] = ["Gemma4ForCausalLM"]
    text.setdefault("model_type", "gemma4_text")
    if config.get("torch_dtype") or config.get("dtype"):
        text["torch_dtype"] = config.get("torch_dtype") or config.get("dtype")
    for key in ("quantization_config", "compression_config"):
        if config.get(key) and not text.get(key):
            text[key] = config[key]
    refusal = _gemma4_refusal(text, config)
    if refusal:
        raise UnsupportedArchitectureError(f"{architecture}: {refusal}")
    spec = _parse(text, name)
    raw = {**_GEMMA4_VISION_DEFAULTS, **(config.get("vision_config") or {})}
    tower = VisionSpec("gemma4_vision", int(raw["hidden_size"]), int(raw["intermediate_size"]),
                       int(raw["num_hidden_layers"]), int(raw["patch_size"]), out_hidden_size=spec.hidden_size,
                       num_heads=int(raw["num_attention_heads"]), position_embeddings=int(raw["position_embedding_size"]),
                       head_dim=int(raw["head_dim"]))
    return replace(spec, architecture=architecture, vision=tower, source_config={**config, "text_config": text})


def _gemma4_fields(config: dict) -> dict:
    """gemma4.py Gemma4Attention: per-layer head_dim and KV heads by layer type; q/k norms of that head_dim."""
    refusal = _gemma4_refusal(config, {})
    if refusal:
        raise UnsupportedArchitectureError(refusal)
    head = int(config.get("head_dim") or 256)
    full_head = int(config.get("global_head_dim") or head)
    full_kv = int(config.get("num_global_key_value_heads") or 0) if config.get("attention_k_eq_v") else 0
    full_kv = full_kv or int(config.get("num_key_value_heads") or config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    types = config.get("layer_types") or [
        "full_attention" if (i + 1) % 6 == 0 or i == layers - 1 else "sliding_attention" for i in range(layers)]
    return {"head_dim": head, "qk_norm": True, "norms_per_layer": 4,
            "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
            "full_attention_shape": (full_head, full_kv) if (full_head, full_kv) != (head, kv) else None,
            "full_attention_layers": tuple(i for i, kind in enumerate(types[:layers]) if kind != "sliding_attention"),
            "rotary_dim": head, "sliding_window": config.get("sliding_window"), "sliding_window_pattern": "layer_types"}


def _parse_llava(config: dict, name: str, architecture: str, vision_kind: str) -> ModelSpec:
    spec = _parse(_llava_text_config(config), name)
    raw = config.get("vision_config")
    vision = dict(_LLAVA_DEFAULT_VISION if raw is None else _CLIP_VISION_DEFAULTS)
    vision.update(raw or {})
    full = int(vision["num_hidden_layers"])
    built = _clip_built_layers(config.get("vision_feature_layer", -2), full)
    pinpoints = tuple(tuple(int(x) for x in pair) for pair in config.get("image_grid_pinpoints") or ())
    tower = VisionSpec(vision_kind, int(vision["hidden_size"]), int(vision["intermediate_size"]), built,
                       int(vision["patch_size"]), int(vision.get("num_channels", 3)),
                       out_hidden_size=spec.hidden_size, image_size=int(vision["image_size"]),
                       full_layers=full, post_norm=built == full,
                       projector_bias=bool(config.get("multimodal_projector_bias", True)),
                       image_newline=vision_kind == "clip_anyres", grid_pinpoints=pinpoints)
    return replace(spec, architecture=architecture, vision=tower)


def _parse_multimodal(config: dict, name: str, architecture: str) -> ModelSpec:
    """The language model from the text part of the config, plus its vision tower."""
    text_architecture, vision_kind = _MULTIMODAL[architecture]
    if vision_kind in ("clip", "clip_anyres"):
        return _parse_llava(config, name, architecture, vision_kind)
    if vision_kind == "mllama":
        return _parse_mllama(config, name, architecture)
    if vision_kind == "intern_vit":
        return _parse_internvl(config, name, architecture)
    if vision_kind == "llama4":
        return _parse_llama4(config, name, architecture)
    if vision_kind == "gemma4_vision":
        return _parse_gemma4(config, name, architecture)
    text = dict(_GEMMA3_TEXT_DEFAULTS) if vision_kind == "siglip" else {}
    text.update({k: v for k, v in config.items() if k not in ("text_config", "vision_config", "architectures")})
    text.update(config.get("text_config") or {})
    text["architectures"] = [text_architecture]
    text.setdefault("torch_dtype", config.get("torch_dtype"))
    if config.get("torch_dtype"):
        text["torch_dtype"] = config["torch_dtype"]  # the checkpoint's dtype is the top-level one
    if vision_kind != "siglip":
        text["use_sliding_window"] = False
    spec = parse_config(text, name)
    raw = config.get("vision_config") or {}
    if vision_kind == "qwen3_vl":
        raw = {**_QWEN3_VL_VISION_DEFAULTS, **raw}
        deepstack = raw.get("deepstack_visual_indexes")
        if deepstack is None and architecture.startswith("Qwen3VL"):
            deepstack = [8, 16, 24]  # Qwen3VLVisionConfig default; Qwen3.5 configs have none
        vision = VisionSpec("qwen3_vl", int(raw["hidden_size"]), int(raw["intermediate_size"]), int(raw["depth"]),
                            int(raw["patch_size"]), int(raw["in_channels"]), int(raw["temporal_patch_size"]),
                            int(raw["spatial_merge_size"]), out_hidden_size=int(raw.get("out_hidden_size") or spec.hidden_size),
                            position_embeddings=int(raw["num_position_embeddings"]),
                            deepstack_layers=len(deepstack or ()))
    elif vision_kind == "siglip":
        vision = VisionSpec("siglip", raw.get("hidden_size", 1152), raw.get("intermediate_size", 4304),
                            raw.get("num_hidden_layers", 27), raw.get("patch_size", 14),
                            out_hidden_size=spec.hidden_size, image_size=raw.get("image_size", 896))
    else:
        hidden = raw.get("hidden_size") if vision_kind == "qwen2_5_vl" else raw.get("embed_dim", 1280)
        intermediate = raw.get("intermediate_size") if vision_kind == "qwen2_5_vl" else int(hidden * raw.get("mlp_ratio", 4))
        vision = VisionSpec(vision_kind, hidden or 1280, intermediate or 5120, raw.get("depth", 32),
                            raw.get("patch_size", 14), raw.get("in_chans", 3), raw.get("temporal_patch_size", 2),
                            raw.get("spatial_merge_size", 2),
                            out_hidden_size=raw.get("out_hidden_size") or raw.get("hidden_size_out") or spec.hidden_size)
    return replace(spec, architecture=architecture, vision=vision, mrope=spec.mrope or vision_kind in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"))


# WhisperConfig defaults (transformers configuration_whisper.py) for keys a config.json may leave out
_WHISPER_DEFAULTS = {"vocab_size": 51865, "num_mel_bins": 80, "encoder_layers": 4, "encoder_attention_heads": 6,
                     "decoder_layers": 4, "decoder_attention_heads": 6, "decoder_ffn_dim": 1536,
                     "encoder_ffn_dim": 1536, "d_model": 384, "max_source_positions": 1500,
                     "max_target_positions": 448, "tie_word_embeddings": True}


def _parse_whisper(config: dict, name: str, architecture: str) -> ModelSpec:
    """Whisper (vllm/model_executor/models/whisper.py, 0.7.0+): the decoder is the text model - d_model wide,
    decoder_layers pre-LN layers of self-attention (fused qkv, bias; the checkpoint's missing k_proj bias is
    loaded as zeros), cross-attention (q_proj, fused kv_proj, out_proj, biases), fc1/fc2 with biases and three
    LayerNorms with bias; a plain nn.Embedding vocabulary (no padding to 64), a learned [max_target_positions,
    d_model] position table, a final LayerNorm, and proj_out tied to embed_tokens. The encoder is `encoder`."""
    raw = {**_WHISPER_DEFAULTS, **config}
    hidden = int(raw["d_model"])
    heads = int(raw["decoder_attention_heads"])
    target = int(raw["max_target_positions"])
    encoder = EncoderSpec("whisper", hidden, int(raw["encoder_layers"]), int(raw["encoder_attention_heads"]),
                          int(raw["encoder_ffn_dim"]), int(raw["num_mel_bins"]), int(raw["max_source_positions"]))
    return ModelSpec(
        name=name, architecture=architecture, family="whisper", hidden_size=hidden,
        num_layers=int(raw["decoder_layers"]), num_attention_heads=heads, num_kv_heads=heads,
        head_dim=hidden // heads, intermediate_size=int(raw["decoder_ffn_dim"]), vocab_size=int(raw["vocab_size"]),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
        torch_dtype=_dtype_name(config.get("torch_dtype") or config.get("dtype") or "float32"),
        max_position_embeddings=target, rotary_dim=None, rope_scaling=None,
        qkv_bias=True, o_bias=True, mlp_bias=True, gated_mlp=False, norms_per_layer=3, norm_bias=True,
        learned_positions=target, max_len_keys=_max_len_keys(config), encoder=encoder,
        quantization=parse_quantization_config(config.get("quantization_config")),
    )


def _moe(config: dict, family: str, layers: int) -> MoeSpec | None:
    experts = config.get("num_local_experts") or config.get("num_experts") or config.get("n_routed_experts")
    if not experts or family not in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "gpt_oss", "qwen3_next",
                                     "jamba", "granitemoehybrid", "minimax_text_01", "nemotron_h", "llama4", "glm4_moe",
                                     "gemma4"):
        return None
    if family == "nemotron_h":
        return _nemotron_h_moe(config, int(experts))
    expert_intermediate = config.get("moe_intermediate_size") or config["intermediate_size"]
    dense: set[int] = set(config.get("mlp_only_layers") or ())
    # Llama 4: MoE where (layer + 1) % interleave_moe_layer_step == 0 (llama4.py ignores moe_layers)
    step = config.get("decoder_sparse_step") or config.get("moe_layer_freq") or config.get("interleave_moe_layer_step") or 1
    first_dense = config.get("first_k_dense_replace") or 0
    for layer in range(layers):
        # Qwen MoE: sparse when (layer + 1) % step == 0; DeepSeek: from first_k_dense_replace on, every freq-th
        if family in ("deepseek_v2", "glm4_moe"):
            if layer < first_dense or layer % step:
                dense.add(layer)
        elif family == "jamba":
            # JambaConfig.layers_num_experts: experts on layer % expert_layer_period == expert_layer_offset
            if layer % int(config.get("expert_layer_period", 2)) != int(config.get("expert_layer_offset", 1)):
                dense.add(layer)
        elif (layer + 1) % step:
            dense.add(layer)
    shared = 0
    if family in ("deepseek_v2", "glm4_moe"):
        shared = (config.get("n_shared_experts") or 0) * expert_intermediate
    elif family in ("granitemoehybrid", "minimax_text_01"):
        # GraniteMoeSharedMLP / MiniMax shared_mlp next to the experts
        shared = config.get("shared_intermediate_size") or 0
    elif family in ("qwen2_moe", "qwen3_next"):
        # Qwen3-Next / Qwen3.5-MoE: Qwen3NextSparseMoeBlock, a shared expert behind a [1, hidden] gate
        shared = config.get("shared_expert_intermediate_size") or 0
    elif family == "llama4":
        shared = expert_intermediate  # Llama4MoE.shared_expert: a LlamaMLP of intermediate_size, no gate
    elif family == "gemma4":
        # Gemma 4 26B-A4B: the layer's dense MLP of intermediate_size runs beside the experts (gemma4.py)
        shared = int(config.get("intermediate_size") or 0)
    return MoeSpec(
        num_experts=int(experts),
        experts_per_token=int(config.get("num_experts_per_tok") or config.get("experts_per_token")
                              or config.get("top_k_experts") or 2),
        expert_intermediate=int(expert_intermediate),
        shared_intermediate=int(shared),
        shared_expert_gate=family in ("qwen2_moe", "qwen3_next") and bool(shared),
        dense_layers=tuple(sorted(dense)),
        router_bias=family == "gpt_oss",
        expert_bias=family == "gpt_oss",
        # GLM-4.5 always carries e_score_correction_bias; its gate and bias are fp32 from 0.10.1 (bf16 in 0.10.0)
        score_correction_bias=config.get("topk_method") == "noaux_tc" or family == "glm4_moe",
        router_dtype="float32" if family in ("minimax_text_01", "glm4_moe") else None,
    )


def _nemotron_h_moe(config: dict, experts: int) -> MoeSpec | None:
    """NemotronHMoE (nemotron_h.py 0.12-0.33): fp32 router [E, hidden] + fp32 e_score_correction_bias [E],
    non-gated relu2 experts of moe_intermediate_size, n_shared_experts x moe_shared_expert_intermediate_size
    as one NemotronHMLP, optional latent projections (moe_latent_size, 0.14+); experts on "E" layers only."""
    pattern = str(config.get("hybrid_override_pattern") or "")
    if "E" not in pattern:
        return None
    shared = int(config.get("n_shared_experts") or 0) * int(config.get("moe_shared_expert_intermediate_size") or 0)
    latent = config.get("moe_latent_size")
    return MoeSpec(
        num_experts=experts,
        experts_per_token=int(config.get("num_experts_per_tok") or 2),
        expert_intermediate=int(_require(config, "moe_intermediate_size")),
        shared_intermediate=shared,
        dense_layers=tuple(i for i, kind in enumerate(pattern) if kind != "E"),
        score_correction_bias=True,
        router_dtype="float32",
        gated=False,
        latent_size=int(latent) if latent is not None else None,
        shared_gated=False,
    )


def _mla(config: dict) -> MlaSpec:
    return MlaSpec(
        kv_lora_rank=int(config["kv_lora_rank"]),
        q_lora_rank=config.get("q_lora_rank"),
        qk_nope_head_dim=int(config["qk_nope_head_dim"]),
        qk_rope_head_dim=int(config["qk_rope_head_dim"]),
        v_head_dim=int(config["v_head_dim"]),
        indexer_heads=int(config.get("index_n_heads") or 0) if config.get("index_topk") else 0,
        indexer_head_dim=int(config.get("index_head_dim") or 0) if config.get("index_topk") else 0,
        indexer_topk=int(config.get("index_topk") or 0),
    )


def _parse_chatglm(config: dict, name: str, architecture: str) -> ModelSpec:
    # GLM-4 (ChatGLMModel): fused qkv with bias, multi-query groups, half-width rotary
    # (vllm/model_executor/models/chatglm.py: rotary_dim = head_dim // 2, max_position = seq_length).
    hidden = _require(config, "hidden_size")
    heads = _require(config, "num_attention_heads")
    head_dim = config.get("kv_channels") or hidden // heads
    kv_heads = config.get("multi_query_group_num") if config.get("multi_query_attention") else heads
    seq_length = int(config.get("seq_length") or 2048)
    return ModelSpec(
        name=name,
        architecture=architecture,
        family="chatglm",
        hidden_size=hidden,
        num_layers=_require(config, "num_layers", "num_hidden_layers"),
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_require(config, "ffn_hidden_size"),
        vocab_size=_require(config, "padded_vocab_size", "vocab_size"),
        tie_word_embeddings=False,
        torch_dtype=_dtype_name(config.get("torch_dtype") or "bfloat16"),
        max_position_embeddings=seq_length,
        rotary_dim=head_dim // 2,
        rope_scaling=None,
        qkv_bias=bool(config.get("add_qkv_bias", False)),
        o_bias=bool(config.get("add_bias_linear", False)),
        max_len_keys=_max_len_keys(config),
        quantization=parse_quantization_config(config.get("quantization_config")),
    )


def _parse_opt(config: dict, name: str, architecture: str) -> ModelSpec:
    # OPT: learned positions with an offset of 2 (OPTLearnedPositionalEmbedding), biases everywhere,
    # LayerNorm with bias, fc1/fc2 MLP, tied lm_head (vllm/model_executor/models/opt.py).
    hidden = _require(config, "hidden_size")
    if config.get("word_embed_proj_dim", hidden) != hidden:
        raise UnsupportedArchitectureError("OPT with word_embed_proj_dim != hidden_size (opt-350m) is not sized yet")
    heads = _require(config, "num_attention_heads")
    max_pos = int(config.get("max_position_embeddings") or 2048)
    return ModelSpec(
        name=name,
        architecture=architecture,
        family="opt",
        hidden_size=hidden,
        num_layers=_require(config, "num_hidden_layers"),
        num_attention_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads,
        intermediate_size=_require(config, "ffn_dim"),
        vocab_size=_require(config, "vocab_size"),
        tie_word_embeddings=True,
        torch_dtype=_dtype_name(config.get("torch_dtype") or "float16"),
        max_position_embeddings=max_pos,
        rotary_dim=None,
        rope_scaling=None,
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        gated_mlp=False,
        norm_bias=True,
        learned_positions=max_pos + 2,
        max_len_keys=_max_len_keys(config),
        quantization=parse_quantization_config(config.get("quantization_config")),
    )


def _dtype_name(value: str) -> str:
    text = str(value).replace("torch.", "")
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    text = aliases.get(text, text)
    if text not in ("bfloat16", "float16", "float32"):
        raise ConfigError(f"unknown torch_dtype {value!r}")
    return text
