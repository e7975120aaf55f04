"""Vision-language and speech configs: the text model from the config's text part (through
model/config.py), plus the vision tower or Whisper's encoder."""
from __future__ import annotations

from dataclasses import replace

from .config import _parse, parse_config
from .families import _LLAMA4_TEXT_DEFAULTS, _dtype_name, _gemma4_refusal, _max_len_keys
from .quantization import parse_quantization_config
from .spec import ConfigError, EncoderSpec, ModelSpec, UnsupportedArchitectureError, VisionSpec


# HF Gemma3TextConfig defaults: Gemma 3 multimodal configs list only what differs from them.
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
    "rope_theta": 1_000_000.0, "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": True,
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
