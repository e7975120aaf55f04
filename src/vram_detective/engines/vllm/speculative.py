"""Speculative decoding: what a drafter adds to vLLM's startup memory (design/vllm-memory.md §4, §3.2).

`--speculative-config '{"method": ..., "model": ..., "num_speculative_tokens": K}'` (0.7+) or the older
`--speculative-model M --num-speculative-tokens K` flags (0.4-0.9) load a proposer next to the target:

* weights, inside the same "Model loading took" measurement as the target (part of W):
  - ngram (and suffix decoding): nothing;
  - draft_model: the draft checkpoint, sized by this tool's own inventory at the draft's TP
    (V0 0.4-0.10: its own worker, `speculative_draft_tensor_parallel_size`; V1 from 0.15:
    v1/spec_decode/draft_model.py, at the target's TP);
  - eagle / eagle3: one decoder layer + `fc` (nn.Linear [2H|3H -> H], replicated on every TP rank,
    never quantized). V1 (v1/spec_decode/eagle.py load_model) deletes the head's embed_tokens when its
    shape equals the target's and PP == 1, and always takes the target's lm_head for EAGLE-1; EAGLE-3
    keeps its own lm_head of draft_vocab_size rows unless the shapes match, plus hidden_norm and a
    qkv_proj over 2H inputs (llama_eagle3.py). V0's EAGLE model holds its own embedding and lm_head;
  - mtp (deepseek_mtp / qwen3_next_mtp / ...): `num_nextn_predict_layers` decoder layers of the
    target's shape plus, per layer, enorm + hnorm + eh_proj [2H -> H] (replicated) and shared_head
    (norm + a vocab-sized head); the embedding is shared with the target in V1 (deepseek_mtp.py);
  - medusa: per head, residual blocks of nn.Linear(H, H, bias) and a vocab-sized lm_head (medusa.py).
  The rotary cos/sin cache is not counted twice: get_rope caches by key, the drafter reuses it.
* KV cache: in V1 the drafter's attention layers join the KV-cache spec (get_kv_cache_spec walks every
  Attention layer, the drafter's included), so one block id costs their pages too. V0's proposer worker
  has its own cache and splits the blocks evenly by bytes (split_num_cache_blocks_evenly):
  blocks x (scorer + proposer bytes per block) <= the same budget, the same arithmetic.

* The V1 profile run and graphs: `drafter_profile` (the drafter's dummy forward after the target's, the
  proposer buffers by release, the drafter's piecewise graphs).

Not modelled (left): V0's num_lookahead_slots (runtime scheduling only), Mamba groups' extra speculative
blocks, quantized EAGLE heads, Model Runner V2's full propose in the profile (0.30+ default).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from ...model.spec import ModelSpec
from ...model.draft import DraftFacts
from ...model.dtypes import DTYPE_BYTES
from .releases import rule_at
from .weights import Inventory, Shard, TensorGroup, build_inventory

METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "medusa", "suffix")
# vLLM's method names -> the family sized here
_ALIASES = {
    "[ngram]": "ngram", "ngram": "ngram", "ngram_gpu": "ngram", "suffix": "suffix",
    "eagle": "eagle", "eagle3": "eagle3", "medusa": "medusa", "draft_model": "draft_model",
    "mtp": "mtp", "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "mimo_mtp": "mtp", "glm4_moe_mtp": "mtp",
    "ernie_mtp": "mtp", "longcat_flash_mtp": "mtp", "qwen3_5_mtp": "mtp",
}


class SpeculativeConfigError(ValueError):
    pass


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str  # one of METHODS
    model: str | None
    num_speculative_tokens: int | None
    draft_tensor_parallel_size: int | None = None
    draft_spec: ModelSpec | None = None  # the draft / head config when this tool knows it (catalog)

    def describe(self) -> str:
        text = self.method + (f" {self.model}" if self.model else "")
        return text + (f", {self.num_speculative_tokens} speculative tokens" if self.num_speculative_tokens else "")


def parse_speculative_config(value, model: str | None = None, num_tokens=None,
                             draft_tp=None) -> SpeculativeConfig | None:
    """A --speculative-config value (JSON text or dict) and/or the older --speculative-model /
    --num-speculative-tokens / --speculative-draft-tensor-parallel-size values -> SpeculativeConfig.
    The method is inferred like SpeculativeConfig.__post_init__: "[ngram]" -> ngram, a name with
    eagle3 / eagle / medusa in it -> that head, no model -> the target's MTP layers, else draft_model."""
    if isinstance(value, str):
        text = value.strip()
        if not text or text.lower() == "none":
            value = None
        else:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as error:
                raise SpeculativeConfigError(f"--speculative-config is not valid JSON: {error.msg}") from None
    if value is not None and not isinstance(value, dict):
        raise SpeculativeConfigError(f"--speculative-config must be a JSON object, got {value!r}")
    raw = dict(value or {})
    if model is not None:
        raw.setdefault("model", model)
    if num_tokens is not None:
        raw.setdefault("num_speculative_tokens", num_tokens)
    if draft_tp is not None:
        raw.setdefault("draft_tensor_parallel_size", draft_tp)
    if not raw:
        return None
    name = raw.get("model")
    name = str(name) if name else None
    method = str(raw.get("method") or "").lower()
    if method:
        if method not in _ALIASES:
            raise SpeculativeConfigError(f"speculative method {method!r} is not sized yet ({', '.join(METHODS)})")
        method = _ALIASES[method]
    elif name is None:
        method = "mtp"  # no draft named: the target's own MTP layers (vLLM: model = target)
    elif name.lower() in ("[ngram]", "ngram"):
        method = "ngram"
    else:
        lowered = name.lower()
        method = ("eagle3" if "eagle3" in lowered or "eagle-3" in lowered else "eagle" if "eagle" in lowered
                  else "medusa" if "medusa" in lowered else "draft_model")
    if name is None and method in ("eagle", "eagle3", "medusa", "draft_model"):
        # only mtp (the target's own layers), ngram and suffix need no draft (0.19.0 config/speculative.py
        # __post_init__ refuses the rest)
        raise SpeculativeConfigError(f"speculative method {method} needs a draft model (\"model\" in "
                                     "--speculative-config): vLLM refuses 'num_speculative_tokens was provided but "
                                     "without speculative model'")
    tokens = _whole_number(raw.get("num_speculative_tokens"), "num_speculative_tokens")
    if tokens is not None and tokens < 1:
        raise SpeculativeConfigError(f"num_speculative_tokens must be positive, got {tokens}")
    tp = _whole_number(raw.get("draft_tensor_parallel_size"), "draft_tensor_parallel_size")
    return SpeculativeConfig(method, name if method != "ngram" else None, tokens, tp if tp else None)


_MAX_COUNT = (1 << 31) - 1  # a count the proposer turns into tensor shapes; anything larger is a typo


def _whole_number(value, key: str) -> int | None:
    """An integer field of vLLM's SpeculativeConfig as pydantic reads it: a whole number (3, 3.0, "3"); an
    infinity (JSON 1e999), a fraction or another type is refused with the field's name."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 12:
        value = int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpeculativeConfigError(f"{key} must be a whole number, got {str(value)[:40]}")
    if value > _MAX_COUNT:
        raise SpeculativeConfigError(f"{key} {value} is too large (at most {_MAX_COUNT:,})")
    return value


def mtp_layer_count(spec: ModelSpec) -> int:
    return spec.draft.mtp_layers if spec.draft is not None else 0


def with_draft_spec(config: SpeculativeConfig, lookup) -> SpeculativeConfig:
    """Attach the draft's ModelSpec from `lookup(name) -> ModelSpec | None` (the catalog)."""
    if config.model is None or config.method in ("ngram", "suffix", "mtp") or config.draft_spec is not None:
        return config
    return replace(config, draft_spec=lookup(config.model))


def check(config: SpeculativeConfig, spec: ModelSpec, engine: str, version: tuple[int, int, int]) -> str | None:
    """What that release refuses at configuration time (None when it starts)."""
    if config.method == "mtp" and not mtp_layer_count(spec):
        return (f"{spec.name} has no MTP layers (num_nextn_predict_layers) to use for speculative decoding")
    if config.method == "draft_model":
        if engine == "v1" and not rule_at(version, "v1_draft_model"):
            # config/speculative.py (0.10-0.14); 0.8-0.9 fall back to V0 before this point
            return ("Speculative decoding with draft model is not supported yet. Please consider using other "
                    "speculative decoding methods such as ngram, medusa, eagle, or mtp.")
        if config.draft_spec is None:
            return f"draft model {config.model!r} is not in this tool's catalog: its size is unknown"
    if config.method == "eagle3" and engine == "v0":
        return "EAGLE-3 speculative decoding needs the V1 engine"
    if config.method in ("eagle", "eagle3") and engine == "v1" and not rule_at(version, "v1_eagle"):
        return f"speculative method {config.method} is not supported by this V1 engine (v1/spec_decode/eagle.py: 0.8.5+)"
    return None


def falls_back_to_v0(config: SpeculativeConfig | None, version: tuple[int, int, int]) -> bool:
    """0.8-0.9 V1 takes ngram, medusa, eagle(3) and deepseek_mtp only; anything else falls back to V0
    (arg_utils.py _is_v1_supported_oracle)."""
    return (config is not None and config.method == "draft_model"
            and bool(rule_at(version, "v1_draft_model_falls_back_to_v0")))


def notes(config: SpeculativeConfig | None) -> tuple[str, ...]:
    """What the drafter's sizing assumed, for the breakdown's notes."""
    if config is None or config.method not in ("eagle", "eagle3") or config.draft_spec is not None:
        return ()
    return (f"speculative decoding ({config.method}): {config.model}'s config.json was not found (local or "
            "catalog): the head is sized as one decoder layer of the target's shape, what an EAGLE head is",)


def _head_spec(config: SpeculativeConfig, spec: ModelSpec) -> ModelSpec:
    """The EAGLE head's shapes: its own config when known, else the target's with one layer."""
    head = config.draft_spec or spec
    return replace(head, num_layers=max(1, head.num_layers if config.draft_spec else 1),
                   tie_word_embeddings=False, moe=None, vision=None, quantization=None, name=f"{head.name} (draft head)")


def _draft_vocab(config: SpeculativeConfig, spec: ModelSpec) -> int:
    facts = _draft_facts(config)
    return int(facts.draft_vocab_size or (config.draft_spec or spec).vocab_size)


def _draft_facts(config: SpeculativeConfig) -> DraftFacts:
    """The draft checkpoint's own facts (model/draft.py); none known without its config."""
    facts = config.draft_spec.draft if config.draft_spec else None
    return facts or DraftFacts()


def _dense(name: str, count: int, shape: tuple[int, ...], dtype: str) -> TensorGroup:
    size = 1
    for dim in shape:
        size *= dim
    return TensorGroup(name, count, shape, dtype, size * DTYPE_BYTES[dtype], "draft")


def _as_draft(groups, prefix: str, keep) -> list[TensorGroup]:
    return [replace(group, name=f"{prefix}.{group.name}", role="draft") for group in groups if keep(group)]


def draft_weights(config: SpeculativeConfig | None, spec: ModelSpec, dtype: str, tp: int, pp: int, engine: str,
                  quant=None, kernel=None, draft_quant=None, draft_kernel=None) -> Inventory:
    """The proposer's tensors on one (last-stage) rank, every group with role "draft".
    quant/kernel: the target's (MTP layers are quantized like the target); draft_*: the draft model's."""
    if config is None or config.method in ("ngram", "suffix"):
        return Inventory((), 0)
    v1 = engine == "v1"
    if config.method == "draft_model":
        draft_tp = config.draft_tensor_parallel_size or tp if not v1 else tp
        inventory = build_inventory(config.draft_spec, dtype, Shard(draft_tp), draft_quant, draft_kernel)
        return Inventory(tuple(_as_draft(inventory.groups, "draft", lambda group: True)), inventory.parameters)
    if config.method == "medusa":
        return _medusa_weights(config, spec, dtype, tp)
    if config.method == "mtp":
        return _mtp_weights(spec, dtype, tp, v1 and pp == 1, quant, kernel)
    return _eagle_weights(config, spec, dtype, tp, pp, v1)


def _medusa_weights(config: SpeculativeConfig, spec: ModelSpec, dtype: str, tp: int) -> Inventory:
    """Medusa: num_heads residual blocks of [H, H] layers and one lm_head per head (or the original one)."""
    hidden = spec.hidden_size
    facts = _draft_facts(config)
    heads = int(facts.medusa_heads or config.num_speculative_tokens or 1)
    blocks = int(facts.medusa_blocks or 1)
    lm_heads = 1 if facts.medusa_original_lm_head else heads
    groups = [_dense("medusa.blocks.{0..%d}.layers.*.weight" % (heads - 1), heads * blocks, (hidden, hidden), dtype),
              _dense("medusa.blocks.{0..%d}.layers.*.bias" % (heads - 1), heads * blocks, (hidden,), dtype),
              _dense("medusa.lm_heads.*.weight", lm_heads, (spec.padded_vocab_size // tp, hidden), dtype)]
    parameters = heads * blocks * (hidden * hidden + hidden) + lm_heads * spec.vocab_size * hidden // tp
    return Inventory(tuple(groups), parameters)


def _mtp_weights(spec: ModelSpec, dtype: str, tp: int, shares_embedding: bool, quant, kernel) -> Inventory:
    """MTP layers: decoder layers like the target's (quantized like it) plus enorm/hnorm and eh_proj; V1 shares the
    target's embedding (eagle.py load_model, PP == 1), shared_head.head stays."""
    hidden = spec.hidden_size
    layers = mtp_layer_count(spec)
    moe = replace(spec.moe, dense_layers=()) if spec.moe is not None else None
    mtp_spec = replace(spec, num_layers=layers, moe=moe, tie_word_embeddings=False, vision=None)
    inventory = build_inventory(mtp_spec, dtype, Shard(tp), quant, kernel)
    groups = _as_draft(inventory.groups, "mtp", lambda group: group.role != "rotary cache" and not (
        shares_embedding and group.name.startswith("model.embed_tokens")))
    groups += [_dense("mtp.layers.*.{enorm,hnorm}.weight", 2 * layers, (hidden,), dtype),
               _dense("mtp.layers.*.eh_proj.weight", layers, (hidden, 2 * hidden), dtype)]
    embedding_parameters = spec.vocab_size * hidden // tp if shares_embedding else 0
    parameters = inventory.parameters - embedding_parameters + layers * (2 * hidden + 2 * hidden * hidden)
    return Inventory(tuple(groups), parameters)


def _eagle_weights(config: SpeculativeConfig, spec: ModelSpec, dtype: str, tp: int, pp: int, v1: bool) -> Inventory:
    """EAGLE / EAGLE-3 heads: the head's decoder layer, less the embedding and lm_head it shares with the target,
    plus the method's own tensors."""
    head = _head_spec(config, spec)
    eagle3 = config.method == "eagle3"
    shares_embedding = v1 and pp == 1 and head.vocab_size == spec.vocab_size and head.hidden_size == spec.hidden_size
    draft_vocab = _draft_vocab(config, spec)
    shares_lm_head = v1 and (not eagle3 or (draft_vocab == spec.vocab_size and head.hidden_size == spec.hidden_size))
    inventory = build_inventory(replace(head, vocab_size=draft_vocab) if eagle3 else head, dtype, Shard(tp))
    h = head.hidden_size

    def keep(group: TensorGroup) -> bool:
        if group.role == "rotary cache":
            return False
        if group.name.startswith("model.embed_tokens"):
            return not shares_embedding and not eagle3
        if group.name.startswith("lm_head"):
            return not shares_lm_head
        return True

    groups = _as_draft(inventory.groups, "eagle", keep)
    parameters = inventory.parameters
    if eagle3:
        parameters -= draft_vocab * h // tp  # built with the draft vocabulary: re-added below when kept
    elif shares_embedding:
        parameters -= spec.vocab_size * h // tp
    if shares_lm_head:
        parameters -= draft_vocab * h // tp
    if eagle3:
        extra, extra_parameters = _eagle3_extras(spec, head, dtype, tp, draft_vocab, shares_embedding)
    else:
        groups, extra, extra_parameters = _eagle1_extras(groups, spec, h, dtype, tp, v1)
    return Inventory(tuple(group for group in groups + extra if group.count), parameters + extra_parameters)


def _eagle3_extras(spec: ModelSpec, head: ModelSpec, dtype: str, tp: int, draft_vocab: int,
                   shares_embedding: bool) -> tuple[list[TensorGroup], int]:
    """EAGLE-3's own tensors: its embedding unless shared; qkv_proj reads [embeds, hidden] (2H): one more H of input
    columns; hidden_norm; fc [3H -> H]; d2t (int64 [draft_vocab]) when the draft vocabulary is smaller."""
    h, hidden = head.hidden_size, spec.hidden_size
    groups, parameters = [], 0
    if not shares_embedding:
        groups.append(_dense("eagle.model.embed_tokens.weight", 1, (spec.padded_vocab_size // tp, h), dtype))
        parameters += spec.vocab_size * h // tp
    q_kv = (head.num_attention_heads // tp + 2 * max(1, head.num_kv_heads // tp)) * head.head_dim
    groups += [_dense("eagle.model.layers.0.self_attn.qkv_proj.weight[embeds half]", 1, (q_kv, h), dtype),
               _dense("eagle.model.layers.0.hidden_norm.weight", 1, (h,), dtype),
               _dense("eagle.model.fc.weight", 1, (h, 3 * hidden), dtype)]
    parameters += q_kv * h + h + 3 * hidden * h
    if draft_vocab != spec.vocab_size:
        groups.append(replace(_dense("eagle.draft_id_to_target_id", 1, (draft_vocab,), "float32"),
                              bytes_each=8 * draft_vocab, dtype="int64"))
    return groups, parameters


def _eagle1_extras(groups: list[TensorGroup], spec: ModelSpec, h: int, dtype: str, tp: int,
                   v1: bool) -> tuple[list[TensorGroup], list[TensorGroup], int]:
    """(the head's groups, EAGLE-1's own tensors, their parameters): layer 0 has no input_layernorm
    (disable_input_layernorm) in V1; fc [2H -> H]; V0 (models/eagle.py) keeps the head a whole *ForCausalLM
    (embedding + its lm_head) and EAGLE adds its own ParallelLMHead on top."""
    parameters = 0
    if v1:
        groups = [group if not group.name.endswith("*_layernorm.weight") else
                  replace(group, count=group.count - 1) for group in groups]
        parameters -= h
    extra = [_dense("eagle.model.fc.weight", 1, (h, 2 * spec.hidden_size), dtype)]
    parameters += 2 * spec.hidden_size * h
    if not v1:
        extra.append(_dense("eagle.lm_head.weight", 1, (spec.padded_vocab_size // tp, h), dtype))
        parameters += spec.vocab_size * h // tp
    return groups, extra, parameters


def draft_kv_layers(config: SpeculativeConfig | None, spec: ModelSpec, tp: int) -> tuple[ModelSpec, int] | None:
    """(the spec whose KV layout the drafter's layers have, how many) - None when it holds no KV cache."""
    if config is None or config.method in ("ngram", "suffix", "medusa"):
        return None
    if config.method == "mtp":
        return spec, mtp_layer_count(spec)
    if config.method == "draft_model":
        return config.draft_spec, config.draft_spec.num_layers
    head = _head_spec(config, spec)
    return head, head.num_layers


def catalog_spec(name: str) -> ModelSpec | None:
    """The draft / head config from the built-in catalog (offline), None when it is not there."""
    from ...model.config import parse_config
    from ...model.spec import ConfigError
    from ...model.sources import load_model

    try:
        found = load_model(name, source="catalog")
        return parse_config(found.config, name=found.repo_id)
    except (ConfigError, LookupError, ValueError):
        return None


# --- the two hooks plan.py's steps call (weights_plan.py, kv_plan.py) ---------------------------------------


def with_draft_weights(inventory: Inventory, spec: ModelSpec, settings, release, gpu, weights_plan) -> Inventory:
    """The target rank's inventory plus the drafter's tensors (role "draft"), parameters included."""
    config = settings.speculative
    if config is None:
        return inventory
    draft_quant = draft_kernel = None
    if config.method == "draft_model" and config.draft_spec is not None and config.draft_spec.quantization is not None:
        from .quant_kernels import kernel_for

        draft_quant = config.draft_spec.quantization
        draft_kernel = kernel_for(draft_quant, gpu.compute_capability, release)
    draft = draft_weights(config, spec, settings.dtype, settings.tensor_parallel_size, settings.pipeline_parallel_size,
                          release.engine, weights_plan.quant, weights_plan.kernel, draft_quant, draft_kernel)
    if not draft.groups:
        return inventory
    return replace(inventory, groups=inventory.groups + draft.groups, parameters=inventory.parameters + draft.parameters,
                   draft_parameters=inventory.draft_parameters + draft.parameters)


@dataclass(frozen=True)
class DrafterProfile:
    """The drafter's share of the V1 profile run and of the CUDA graphs (gpu_model_runner.py _dummy_run,
    v1/spec_decode/eagle.py dummy_run and the proposer's __init__)."""

    peak_bytes: int  # kept target states + the drafter's own forward at max_num_batched_tokens
    buffer_bytes: int  # the proposer's persistent input buffers, when the release's budget counts them
    graph_layers: int  # drafter layers captured in the target's piecewise graphs (0: none)
    reason: str


# Bytes per token of EagleProposer's buffers besides the hidden-sized ones: input_ids int32 + positions int64 +
# arange int32 (0.11+, max(R + 1, N)) ... (eagle.py 0.9.0-0.19 __init__)
PROPOSER_BYTES_PER_TOKEN = 16


def drafter_profile(spec: ModelSpec, settings, release, dtype_bytes: int) -> DrafterProfile:
    """V1 only (V0's spec_decode_worker profiles the scorer alone). 0.8.x runs no drafter in the dummy run;
    0.9.0+ runs it after the target on the same max_num_batched_tokens (0.12+: num_speculative_tokens eager passes,
    one after another), while the target's output [T, H] - and EAGLE-3's three auxiliary [T, H] states - stay
    alive: peak = kept states + the drafter's forward. Proposer buffers ([N, hidden] hidden_states and, from
    0.10.1, inputs_embeds, + ids / positions) sit inside the single peak in 0.8.x-0.9.0, in no term in
    0.9.1-0.26 and in total_consumed from 0.27. Drafter graphs: piecewise for every capture size in 0.9.0-0.10.0,
    none in 0.10.1-0.11.0 (eagle.py passes no runtime mode), with the target's PIECEWISE pass from 0.11.1."""
    config = settings.speculative
    found = draft_kv_layers(config, spec, settings.tensor_parallel_size) if config is not None else None
    if found is None or settings.engine != "v1" or found[0] is None:
        return DrafterProfile(0, 0, 0, "")
    from .profile import activation_peak

    draft, layers = found
    draft = replace(draft, num_layers=layers)
    tokens = settings.max_num_batched_tokens
    buffers = 0
    if release["proposer_buffers_counted"] and config.method in ("eagle", "eagle3", "mtp", "draft_model"):
        hidden_buffers = int(release["proposer_hidden_buffers"])  # hidden_states (+ inputs_embeds from 0.10.1)
        buffers = tokens * (hidden_buffers * draft.hidden_size * dtype_bytes + PROPOSER_BYTES_PER_TOKEN)
    graph_layers = layers if release["drafter_graphs"] and not settings.enforce_eager else 0
    if not release["drafter_dummy_run"]:
        return DrafterProfile(0, buffers, graph_layers, "the drafter takes no part in this release's dummy run")
    kept = tokens * spec.hidden_size * dtype_bytes * (4 if config.method == "eagle3" else 1)
    forward = activation_peak(draft, settings, release, dtype_bytes, is_last_stage=False).forward_bytes
    return DrafterProfile(kept + forward, buffers, graph_layers,
                          f"{config.method} drafter dummy run: {tokens} tokens through {layers} layer(s), "
                          f"the target's last states kept")


def draft_attention_layers(spec: ModelSpec, settings, release) -> list:
    """The drafter's attention layers with this rank's page size (they join the last stage's KV cache)."""
    from . import kv_cache, kv_layers

    found = draft_kv_layers(settings.speculative, spec, settings.tensor_parallel_size)
    if not found or not found[1]:
        return []
    draft_spec, count = found
    tp = settings.tensor_parallel_size
    if settings.speculative.method == "draft_model" and release.engine == "v0":
        tp = settings.speculative.draft_tensor_parallel_size or tp
    layout = kv_cache.kv_layout(draft_spec, tp, 1, settings.block_size, settings.kv_cache_dtype_bytes, release,
                                settings.kv_cache_dtype)
    kind = "mla" if kv_cache.mla_latent(draft_spec, release) else "full"
    return [kv_layers.AttentionLayer(kind, layout.page_bytes, None)] * count


def unsized_reason(value, spec: ModelSpec) -> str | None:
    """Why this tool cannot size a speculative config for `spec` whatever the release (None: it can)."""
    try:
        config = parse_speculative_config(value)
    except SpeculativeConfigError as error:
        return str(error)
    if config is None or config.method in ("ngram", "suffix", "eagle", "eagle3", "medusa"):
        return None
    if config.method == "mtp" and not mtp_layer_count(spec):
        return f"no draft named and {spec.name} declares no MTP layers"
    if config.method == "draft_model" and catalog_spec(config.model) is None:
        return f"draft model {config.model!r} is not in the catalog"
    return None
