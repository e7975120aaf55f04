"""The text model families: each family's config.json keys normalized into a ModelSpec (decoder-only
models, their MoE and MLA parts, the hybrids' extra fields, ChatGLM and OPT)."""
from __future__ import annotations

from .quantization import parse_quantization_config
from .spec import (ConfigError, MlaSpec, ModelSpec, MoeSpec, RopeScaling,
                   UnsupportedArchitectureError)


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


# transformers 4.51 Llama4TextConfig / Llama4VisionConfig defaults (configuration_llama4.py, docstring
# meta-llama/Llama-4-Scout-17B-16E) for keys a config.json leaves out. Not all are Scout's own values (the
# text max_position_embeddings 131072, the vision hidden 768 / image 448): published configs list those.
_LLAMA4_TEXT_DEFAULTS = {
    "model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 131072, "num_local_experts": 16, "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 1, "attention_chunk_size": 8192, "tie_word_embeddings": False,
}


def _gemma4_refusal(text: dict, config: dict) -> str | None:
    if text.get("hidden_size_per_layer_input") or text.get("num_kv_shared_layers") or config.get("audio_config"):
        return ("Gemma 4 E2B / E4B (per-layer embeddings, KV-shared layers, the audio tower) are not sized yet; "
                "the 31B and 26B-A4B are")
    return None


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
