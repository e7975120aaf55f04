"""Hugging Face config.json -> ModelSpec: the checks and the dispatch. Every family's key names are normalized once,
in model/families.py (text models) and model/multimodal.py (vision-language and Whisper); the types are model/spec.py."""
from __future__ import annotations

import math
from dataclasses import replace

from .attention import attention_facts
from .draft import draft_facts
from .families import (_gemma4_fields, _hybrid_fields, _parse_chatglm, _parse_opt, _parse_text,
                       _text_family)
from .hybrid import mixer_facts
from .spec import ConfigError, ModelSpec, UnsupportedArchitectureError


# Architectures we recognise but do not size yet, with the reason said to the user.
_LATER: dict[str, str] = {}

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
    from . import multimodal  # (it parses its text part through _parse / parse_config)

    if spec.vision is not None and spec.vision.kind in ("clip", "clip_anyres"):
        # LLaVA: engine rules read the text_config; give them the defaults it leaves to transformers
        config = {**config, "text_config": multimodal._llava_text_config(config)}
    elif spec.vision is not None and spec.vision.kind == "intern_vit":
        config = {**config, "text_config": multimodal._internvl_text_config(config)}  # InternVL names it llm_config
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
    from . import multimodal  # (it parses its text part through _parse / parse_config)

    architectures = config.get("architectures") or []
    architecture = architectures[0] if architectures else ""
    if architecture in _LATER:
        raise UnsupportedArchitectureError(
            f"{architecture}: {_LATER[architecture]} are not sized yet"
        )
    if architecture in multimodal._MULTIMODAL:
        return multimodal._parse_multimodal(config, name, architecture)
    if architecture == "WhisperForConditionalGeneration":
        return multimodal._parse_whisper(config, name, architecture)
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
