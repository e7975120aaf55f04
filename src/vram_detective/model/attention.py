"""What a checkpoint's attention layers are, read once from its config.json: the window, chunk and MLA facts
each family states in its own keys, the per-layer kind they give, and which layers share another's KV cache.

Engine-neutral: how a given engine release treats these facts (Qwen2's max_window_layers refusals, the
interleaved-window caps, which cache specs it creates) lives in that engine (engines/vllm/kv_layers.py).
"""
from __future__ import annotations

from dataclasses import dataclass

# HF Gemma3TextConfig / Gemma2Config defaults (Gemma 3 multimodal configs list only what differs).
_GEMMA3_TEXT_DEFAULTS = {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                         "sliding_window": 4096, "sliding_window_pattern": 6}
_GEMMA2_DEFAULTS = {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "sliding_window": 4096}
# families whose window is switched by use_sliding_window + max_window_layers (Qwen2Config and its kin)
QWEN_WINDOW_FAMILIES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl_text", "qwen2_5_vl_text")

Window = int | tuple[int | None, ...] | None  # one window, or a per-layer cycle of them (None / 0: full)


@dataclass(frozen=True)
class AttentionFacts:
    """The attention layout a config.json states (the text model of multimodal wrappers, family defaults in).

    `layers` is (kind, window) per layer - "full", "sliding", "chunked_local" or "mla" - as the family's
    model code builds it. For Qwen2-style configs (`max_window_layers_rule`) it follows transformers'
    reading (layers from max_window_layers on slide); engines apply their own reading of the raw facts."""

    model_type: str
    num_layers: int
    layers: tuple[tuple[str, int | None], ...]
    window: Window = None  # sliding_window (or a rewritten interleaved_sliding_window)
    layer_types: tuple[str, ...] = ()
    sliding_window_pattern: int | None = None  # Gemma 3's raw key (None: absent)
    use_sliding_window: bool | None = None  # Qwen2's switch (None: the key is absent)
    max_window_layers: int | None = None
    max_window_layers_rule: bool = False  # the window is governed by use_sliding_window + max_window_layers
    attention_chunk_size: int | None = None  # Llama 4 chunked local attention
    mla_latent: int | None = None  # kv_lora_rank + qk_rope_head_dim (DeepSeek MLA)
    kv_heads: int | None = None
    head_dim: int | None = None
    kv_sharing_targets: tuple[int | None, ...] = ()  # per layer: the earlier layer whose KV it reads

    @property
    def smallest_window(self) -> int | None:
        if not self.window:
            return None
        return min(w for w in self.window if w) if isinstance(self.window, tuple) else int(self.window)


def text_config(config: dict) -> dict:
    """The language-model part of a config (text_config of multimodal wrappers), with family defaults."""
    inner = config.get("text_config")
    merged = dict(inner) if isinstance(inner, dict) else dict(config)
    model_type = merged.get("model_type") or config.get("model_type", "")
    if model_type in ("gemma3", "gemma3_text"):
        merged = {**_GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in merged.items() if v is not None}}
        merged["model_type"] = "gemma3_text"
    elif model_type == "gemma2":
        merged = {**_GEMMA2_DEFAULTS, **{k: v for k, v in merged.items() if v is not None}}
    elif model_type in ("llama4", "llama4_text"):
        merged["model_type"] = "llama4_text"
    return merged


def _window(cfg: dict) -> Window:
    window = cfg.get("sliding_window")
    if window is None and isinstance(cfg.get("interleaved_sliding_window"), int):
        window = cfg["interleaved_sliding_window"]  # configs rewritten by vLLM 0.6.5-0.9.x
    return tuple(window) if isinstance(window, list) else window


def _llama4_layers(cfg: dict, n: int) -> list[tuple[str, int | None]]:
    chunk = cfg.get("attention_chunk_size")
    if not chunk:
        return [("full", None)] * n
    no_rope = cfg.get("no_rope_layers")
    if not no_rope:  # HF default: every no_rope_layer_interval-th layer is NoPE (global)
        interval = int(cfg.get("no_rope_layer_interval", 4))
        no_rope = [int((i + 1) % interval != 0) for i in range(n)]
    # llama4.py: NoPE layers (0) are full attention, RoPE layers (1) chunked local
    return [("chunked_local", int(chunk)) if no_rope[i] else ("full", None) for i in range(n)]


def _typed_layers(cfg: dict, n: int, window: Window) -> list[tuple[str, int | None]]:
    out = []
    for kind in cfg["layer_types"][:n]:
        if kind == "sliding_attention" and window:
            out.append(("sliding", int(window)))
        elif kind == "chunked_attention" and cfg.get("attention_chunk_size"):
            out.append(("chunked_local", int(cfg["attention_chunk_size"])))
        else:
            out.append(("full", None))
    return out


def _qwen_layers(cfg: dict, n: int, window: Window) -> list[tuple[str, int | None]]:
    """transformers' Qwen2Config: layers from max_window_layers (default 28) on slide when use_sliding_window."""
    if not cfg.get("use_sliding_window") or not window:
        return [("full", None)] * n
    first = int(cfg.get("max_window_layers", 28))
    return [("sliding", int(window)) if i >= first else ("full", None) for i in range(n)]


def _layers(cfg: dict, n: int, window: Window) -> tuple[list[tuple[str, int | None]], bool]:
    """(kind, window) per layer, and whether use_sliding_window + max_window_layers govern them."""
    model_type = cfg.get("model_type", "")
    if cfg.get("kv_lora_rank"):
        return [("mla", None)] * n, False
    if model_type == "llama4_text":
        return _llama4_layers(cfg, n), False
    if cfg.get("layer_types") and model_type not in QWEN_WINDOW_FAMILIES:
        return _typed_layers(cfg, n, window), False
    every_other = model_type in ("gemma2", "gpt_oss")  # gemma2.py / gpt_oss.py: even layers slide (layer 0 first)
    if every_other:
        return [("sliding", int(window)) if window and i % 2 == 0 else ("full", None) for i in range(n)], False
    if model_type == "gemma3_text":
        pattern = int(cfg.get("sliding_window_pattern") or 6)
        # gemma3.py: sliding unless (layer_idx + 1) % pattern == 0
        return [("sliding", int(window)) if window and (i + 1) % pattern else ("full", None) for i in range(n)], False
    if isinstance(window, tuple):
        # llama.py interleaved_sliding_window lists: layer i uses window[i % len]
        return [("sliding", int(window[i % len(window)])) if window[i % len(window)] else ("full", None)
                for i in range(n)], False
    if model_type in QWEN_WINDOW_FAMILIES or "use_sliding_window" in cfg:
        return _qwen_layers(cfg, n, window), True
    if window:
        # Mistral-7B-v0.1, Phi-3 (2047 / 262144), ...: one window for every layer
        return [("sliding", int(window))] * n, False
    return [("full", None)] * n, False


def _sharing_targets(cfg: dict, n: int, kinds: list[str]) -> tuple[int | None, ...]:
    """The last num_kv_shared_layers layers read an earlier layer's KV cache. Gemma 3n (gemma3n.py): the
    layer just before them for a full layer, the one two before for a sliding layer; Gemma 4 (gemma4.py):
    the last non-shared layer of the same type."""
    first = n - int(cfg.get("num_kv_shared_layers") or 0)
    targets: list[int | None] = [None] * n
    for i in range(first, n):
        if cfg.get("model_type", "").startswith("gemma3n"):
            target = first - (2 if kinds[i] == "sliding" else 1)
        else:
            earlier = [j for j in range(first) if kinds[j] == kinds[i]]
            target = earlier[-1] if earlier else -1
        targets[i] = target if target >= 0 else None
    return tuple(targets)


def _kv_shape(cfg: dict) -> tuple[int | None, int | None]:
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    if not heads:
        return None, None
    heads = int(heads)
    hidden = cfg.get("hidden_size") or cfg.get("n_embd")
    head_dim = cfg.get("head_dim") or (int(hidden) // heads if hidden else None)
    return int(cfg.get("num_key_value_heads") or heads), int(head_dim) if head_dim else None


def attention_facts(config: dict) -> AttentionFacts | None:
    """The attention facts of a config.json (None when it names no layer count)."""
    cfg = text_config(config)
    n = cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers")
    if not n:
        return None
    n = int(n)
    window = _window(cfg)
    layers, by_max_window_layers = _layers(cfg, n, window)
    kv_heads, head_dim = _kv_shape(cfg)
    mwl = cfg.get("max_window_layers")
    return AttentionFacts(
        model_type=cfg.get("model_type", ""), num_layers=n, layers=tuple(layers), window=window,
        layer_types=tuple(cfg.get("layer_types") or ()), sliding_window_pattern=cfg.get("sliding_window_pattern"),
        use_sliding_window=bool(cfg.get("use_sliding_window")) if "use_sliding_window" in cfg else None,
        max_window_layers=int(mwl) if mwl is not None else None, max_window_layers_rule=by_max_window_layers,
        attention_chunk_size=int(cfg["attention_chunk_size"]) if cfg.get("attention_chunk_size") else None,
        mla_latent=int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim", 0)) if cfg.get("kv_lora_rank") else None,
        kv_heads=kv_heads, head_dim=head_dim, kv_sharing_targets=_sharing_targets(cfg, n, [k for k, _ in layers]))
