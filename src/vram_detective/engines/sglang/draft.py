"""SGLang's speculative draft on one rank: the weights its draft worker loads, and where they are paid.

An EAGLE / NEXTN (MTP) draft on a checkpoint that carries MTP layers (num_nextn_predict_layers,
mtp_num_hidden_layers) loads those layers and their fc / norms; the worker then shares the target's embedding and
lm_head and frees its own (0.5.17 speculative/eagle_worker_v2.py -> set_embed_and_head; models/qwen3_5_mtp.py,
deepseek_nextn.py). A separate draft model (--speculative-draft-model-path, EAGLE / EAGLE3 heads, STANDALONE) is
sized from its own config.json (a local directory or the catalog); NGRAM has no draft weights. The MTP layer is sized as the target's first decoder layer (vLLM's inventory): on a
GDN hybrid (Qwen3.5) that is a linear-attention layer, 22 MB more than the full-attention layer the MTP block has.

Where they are paid (releases.py `draft_weights_in`): 0.4.3-0.5.13 the draft worker loads after the target has
built its pool (scheduler.py: TpModelWorker then the draft worker), so its weights come out of the slack the
fraction leaves (the speculative reserve of _handle_gpu_memory_settings pays for it); from 0.5.14 the scheduler
builds both pools after both workers loaded (scheduler.py init_memory_pools after maybe_init_draft_worker), and the
KV budget is the free memory then minus the slack (0.5.17 mem_cache/kv_cache_configurator.py
_profile_available_bytes: "loaded weights (target + draft)"): the draft's weights come out of the pool.
"""
from __future__ import annotations

from functools import lru_cache

from ...model.spec import ModelSpec
from .settings import SGLangSettings

_SHARED_WITH_TARGET = ("embed_tokens", "lm_head", "shared_head.head")


def draft_model_spec(s: SGLangSettings) -> ModelSpec | None:
    """The separate draft's config (--speculative-draft-model-path): a local directory or config.json, else the
    built-in catalog (offline: the Hub is not asked while planning); None when neither has it."""
    path = s.speculative_draft_model_path
    return _draft_spec(path) if path else None


@lru_cache(maxsize=32)
def _draft_spec(path: str) -> ModelSpec | None:
    from ...model.config import parse_config
    from ...model.spec import ConfigError
    from ...model.sources import load_model

    for source in ("local", "catalog"):
        try:
            found = load_model(path, source=source)
            return parse_config(found.config, name=found.repo_id)
        except (ConfigError, LookupError, ValueError, OSError):
            continue
    return None


def _separate_draft_bytes(spec: ModelSpec, s: SGLangSettings, algorithm: str, dtype: str) -> int | None:
    """A draft model of its own, from its config: an EAGLE head shares the target's embedding and lm_head, an
    EAGLE3 head the embedding only (its lm_head is over its draft vocabulary) (0.5.17 speculative/eagle_worker_v2.py
    set_embed_and_head / set_embed); a STANDALONE draft shares nothing (standalone_worker_v2.py)."""
    from ..vllm.speculative import SpeculativeConfig, _eagle_weights, draft_weights

    head = draft_model_spec(s)
    if algorithm not in ("EAGLE", "EAGLE3", "STANDALONE") or head is None and algorithm == "STANDALONE":
        return None  # a draft model of unknown config has no size; an EAGLE head without one is the target's layer
    if algorithm == "STANDALONE":
        config = SpeculativeConfig("draft_model", s.speculative_draft_model_path, None, None, head)
        return draft_weights(config, spec, dtype, s.tp_size, 1, "v1").total_bytes
    config = SpeculativeConfig(algorithm.lower(), s.speculative_draft_model_path, None, None, head)
    return _eagle_weights(config, spec, dtype, s.tp_size, 1, True).total_bytes  # as vLLM's _head_spec sizes it


def head_assumed(s: SGLangSettings) -> bool:
    """An EAGLE / EAGLE3 head whose config.json is neither local nor in the catalog: sized as one decoder layer of
    the target's shape (what an EAGLE head is), said in a note."""
    algorithm = (s.speculative_algorithm or "").upper()
    return (algorithm in ("EAGLE", "EAGLE3") and bool(s.speculative_draft_model_path)
            and draft_model_spec(s) is None)


def draft_weight_bytes(spec: ModelSpec, s: SGLangSettings) -> int | None:
    """Bytes of the draft's own tensors on one rank; 0 without a draft (or NGRAM), None when not sized here."""
    from ..vllm.speculative import _mtp_weights

    algorithm = (s.speculative_algorithm or "").upper()
    if not algorithm or algorithm == "NGRAM":
        return 0
    dtype = spec.torch_dtype if s.dtype in (None, "auto") else s.dtype
    if s.speculative_draft_model_path and algorithm not in ("NEXTN", "MTP"):
        return _separate_draft_bytes(spec, s, algorithm, dtype)
    mtp_layers = spec.draft.mtp_layers if spec.draft is not None else 0
    if algorithm not in ("EAGLE", "NEXTN", "MTP") or not mtp_layers:
        return None
    if spec.quantization is not None:
        return None  # the MTP layers' own quantization is per checkpoint
    inventory = _mtp_weights(spec, dtype, s.tp_size, True, None, None)
    return sum(group.bytes for group in inventory.groups
               if not any(part in group.name for part in _SHARED_WITH_TARGET))
