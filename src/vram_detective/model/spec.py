"""What a checkpoint is, as the engines read it: ModelSpec and its parts (MoE, MLA, vision tower, encoder),
and the errors a config.json that cannot describe one raises (model/config.py builds them)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .attention import AttentionFacts
from .draft import DraftFacts
from .hybrid import MixerFacts
from .quantization import QuantConfig


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
