"""SGLang's KV pool, as pure functions: bytes per token, tokens from the memory budget, the logged sizes.

The budget (model_runner.py profile_max_num_token; model_runner_kv_cache_mixin.py in 0.5.x):
  rest_GiB = avail_after_weights - avail_before_weights x (1 - mem_fraction_static)
  tokens   = int(rest_GiB x 2^30) // cell_size, then capped by --max-total-tokens and aligned to page_size.
"avail" is torch.cuda.mem_get_info's free memory in GiB after empty_cache, the minimum over TP ranks;
"before weights" is taken after torch.distributed and NCCL are set up.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model.spec import ModelSpec
from ...units import GIB
from .releases import Rules, rules
from .settings import SGLangSettings

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "fp4_e2m1": 1}
LOG_ROUNDING_GIB = 0.005  # every "avail mem=X GB" is printed with :.2f


@dataclass(frozen=True)
class CellSize:
    bytes_per_token: int  # one token across every KV layer on one rank (K and V together)
    k_bytes_per_token: int  # K part (MLA: the whole latent)
    mla: bool


def kv_dtype_bytes(kv_cache_dtype: str, spec: ModelSpec) -> int:
    name = spec.torch_dtype if kv_cache_dtype in ("auto", None) else kv_cache_dtype
    return DTYPE_BYTES[name]


def kv_layers(spec: ModelSpec) -> int:
    """Layers that hold a KV cache: all, or only the full-attention ones of Mamba / GDN hybrids."""
    layout = spec.hybrid
    return layout.attention_layers if layout is not None else spec.num_layers


def cell_size(spec: ModelSpec, tp_size: int, kv_cache_dtype: str = "auto", r: Rules | None = None) -> CellSize:
    """Bytes of KV per token on one rank (model_runner.py get_cell_size_per_token). MLA keeps one latent per token
    on every rank (not sharded by TP); DeepSeek-V3.2's DSA indexer adds its fp8 key and fp32 scale per 128 from 0.5.4
    (rule dsa_indexer_cell; `r` None: the latent only)."""
    dtype = kv_dtype_bytes(kv_cache_dtype, spec)
    layers = kv_layers(spec)
    if spec.mla is not None:
        latent = (spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) * layers * dtype
        index = spec.mla.indexer_head_dim
        indexer = (index + index // 128 * 4) * layers if r is not None and r["dsa_indexer_cell"] and index else 0
        return CellSize(latent + indexer, latent, True)
    heads = max(1, spec.num_kv_heads // tp_size)  # ModelConfig.get_num_kv_heads: replicated when tp > kv heads
    k = heads * spec.head_dim * layers * dtype
    return CellSize(2 * k, k, False)  # v_head_dim == head_dim for MHA models


def attention_tp(settings: SGLangSettings) -> int:
    """Ranks one attention layer is sharded over: tp / dp with --enable-dp-attention (dp_attention.py
    compute_dp_attention_world_info: attn_tp_size = tp_size // dp_size), else tp. KV heads per rank follow it."""
    if settings.enable_dp_attention and settings.dp_size > 1:
        return max(settings.tp_size // settings.dp_size, 1)
    return settings.tp_size


def cell_with_draft(cell_bytes: int, kv_layer_count: int, draft_layers: int, r: Rules) -> int:
    """Bytes per token once an EAGLE / STANDALONE / MTP draft's KV layers share the pool (0.5.14+): the draft
    pool holds as many tokens as the target's, so the cell grows by draft_layers / layers."""
    if not r["draft_kv_in_cell"] or draft_layers <= 0 or kv_layer_count <= 0:
        return cell_bytes
    return int(cell_bytes * (1 + draft_layers / kv_layer_count))


@dataclass(frozen=True)
class SwaLayout:
    """A hybrid SWA model's two pools on one rank: layer counts and bytes per token and layer (K and V)."""

    full_layers: int
    swa_layers: int
    full_per_token: int  # F: full-attention layer (Gemma 4: its own head_dim / KV heads)
    swa_per_token: int  # S: sliding-window (or chunked-local) layer

    def cell(self, ratio: float) -> float:
        """Bytes of rest one full-pool token takes with `ratio` SWA tokens beside it (F n_full + r S n_swa)."""
        return self.full_per_token * self.full_layers + ratio * self.swa_per_token * self.swa_layers


def swa_layout(spec: ModelSpec, tp_size: int, kv_cache_dtype: str, r: Rules) -> SwaLayout | None:
    """The release's hybrid SWA split for this architecture (hybrid_swa_archs), None for one pool. Sliding and
    chunked-local layers go to the SWA pool (model_config.py get_hybrid_layer_ids: Llama 4's 3 of 4 layers)."""
    facts = spec.attention_facts
    if r["hybrid_swa_split"] is None or spec.architecture not in r["hybrid_swa_archs"] or facts is None or spec.mla:
        return None
    swa = sum(1 for kind, _ in facts.layers if kind in ("sliding", "chunked_local"))
    if swa == 0:
        return None
    dtype = kv_dtype_bytes(kv_cache_dtype, spec)
    full_dim, full_heads = spec.full_attention_shape or (spec.head_dim, spec.num_kv_heads)
    per_rank = lambda heads, dim: max(1, heads // tp_size) * 2 * dim * dtype  # noqa: E731 (get_num_kv_heads)
    return SwaLayout(len(facts.layers) - swa, swa, per_rank(full_heads, full_dim), per_rank(spec.num_kv_heads, spec.head_dim))


def swa_tokens(rest_bytes: int, layout: SwaLayout, r: Rules, page_size: int, cap: int | None = None) -> tuple[int, int]:
    """(full tokens, SWA tokens) from the rest in bytes, per release (rule hybrid_swa_split). `cap`: the pipeline
    stages' MIN of swa_synced_tokens, applied where SGLang syncs (the capacity before the split up to 0.5.12, the
    full pool's tokens from 0.5.13)."""
    ratio, scheme = r["swa_full_tokens_ratio"], r["hybrid_swa_split"]
    paged = lambda tokens: tokens // page_size * page_size  # noqa: E731
    capped = lambda tokens: tokens if cap is None else min(tokens, cap)  # noqa: E731
    if layout.full_layers == 0:  # all SWA: no ratio
        return 0, capped(paged(rest_bytes // (layout.swa_per_token * layout.swa_layers)))
    if scheme == "cell":
        full = capped(paged(int(rest_bytes // layout.cell(ratio))))
        return full, paged(int(full * ratio))
    every_layer = layout.cell(1.0)
    # the profile's max_total_num_tokens (uniform cell of every layer)
    capacity = capped(rest_bytes // int(every_layer))
    if scheme == "layers":  # tokens x layers spread by layer counts alone
        layers = layout.full_layers + layout.swa_layers
        full = int(capacity * layers / (ratio * layout.swa_layers + layout.full_layers))
        return paged(full), paged(int(full * ratio))
    full = int(capacity * every_layer / layout.cell(ratio))
    if scheme == "memory":  # 0.5.9: both from the unpaged full
        return paged(full), paged(int(full * ratio))
    return paged(full), paged(int(paged(full) * ratio))


def swa_synced_tokens(rest_bytes: int, layout: SwaLayout, r: Rules, page_size: int) -> int:
    """The figure the pipeline stages' all_reduce MIN takes for a hybrid SWA pool: the paged capacity before the
    split (model_runner_kv_cache_mixin.py 0.5.10 _resolve_token_capacity, then _resolve_hybrid_swa_tokens), the full
    pool's tokens from 0.5.13 (kv_cache_configurator.py config_from_budget -> _solve_pool_sizes: swa = full x
    ratio), the SWA pool's with no full layer."""
    full, swa = swa_tokens(rest_bytes, layout, r, page_size)
    if layout.full_layers == 0:
        return swa
    if r["hybrid_swa_split"] == "cell":
        return full
    return rest_bytes // int(layout.cell(1.0)) // page_size * page_size


def draft_layers(spec: ModelSpec, algorithm: str | None, draft: ModelSpec | None = None) -> int | None:
    """KV layers of the draft: an EAGLE / EAGLE3 head is one decoder layer (its config's num_hidden_layers: `draft`,
    the --speculative-draft-model-path config, when known); NEXTN / MTP runs the checkpoint's own
    num_nextn_predict_layers (model_runner.py: the draft worker's num_layers); a STANDALONE draft its config's
    layers; None where the draft is not known; 0 without a draft."""
    name = (algorithm or "").upper()
    if name in ("", "NGRAM"):
        return 0
    if name in ("NEXTN", "MTP"):
        return spec.draft.mtp_layers if spec.draft is not None and spec.draft.mtp_layers else None
    if draft is not None and name in ("EAGLE", "EAGLE3", "STANDALONE"):
        return draft.num_layers
    return 1 if name in ("EAGLE", "EAGLE3") else None


def draft_pool_tokens(tokens: int, max_num_reqs: int, steps: int, topk: int, draft_tokens: int) -> int:
    """0.4.3-0.5.13: the draft worker's own pool (model_runner.py draft_runner_cache_size): the target's tokens plus
    every request's draft (steps x topk) and verify tokens, plus 100."""
    return tokens + max_num_reqs * (steps * topk + draft_tokens) + 100


def rest_gib(avail_before_gib: float, avail_after_gib: float, mem_fraction_static: float) -> float:
    return avail_after_gib - avail_before_gib * (1 - mem_fraction_static)


def tokens_from_rest(rest: float, cell_bytes: int) -> int:
    return int(rest * (1 << 30)) // cell_bytes


INT64_MAX = (1 << 63) - 1


def zero_cell_tokens(spec: ModelSpec, settings: SGLangSettings, context: int) -> int:
    """A pipeline stage holding no KV layer (0.5.17+ pool_configurator.py _zero_kv_max_tokens): no bound when a
    hybrid's full-attention layers are on another stage (the MIN over stages picks theirs), else --max-total-tokens
    or context_len. Before 0.5.17 such a stage fails (plan.py, rule pp_zero_kv_cell)."""
    if settings.pp_size > 1 and spec.hybrid is not None:
        return INT64_MAX
    return settings.max_total_tokens or context


def align_tokens(tokens: int, page_size: int, r: Rules, max_total_tokens: int | None = None) -> int:
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    if r["tokens_page_aligned"] and tokens > 0:
        tokens = tokens // page_size * page_size
    return tokens


@dataclass(frozen=True)
class MambaState:
    """One request's recurrent state on one rank, across its Mamba / GDN layers (configs/mamba_utils.py
    BaseLinearStateParams.mamba_cache_per_req); the pool holds size + 1 rows of each (memory_pool.py MambaPool)."""

    conv_bytes: int
    ssm_bytes: int
    conv_row_bytes: int = 0  # one conv position (conv_dim / tp) across the layers: a window is K - 1 of them
    conv_kernel: int = 4

    @property
    def per_request(self) -> int:
        return self.conv_bytes + self.ssm_bytes

    def intermediate(self, rows: int, draft_tokens: int, r: Rules, topk: int = 1) -> tuple[int, int]:
        """(SSM, conv window) bytes of the states kept per draft token for target verify (memory_pool.py MambaPool,
        speculative): [layers, rows, D, SSM state] and the conv windows, one [dim, K-1] per draft token or one shared
        [dim, D + K - 2] per row for a linear chain (rule mamba_conv_window_dedup); rows = max_running_requests + 1."""
        if draft_tokens <= 0:
            return 0, 0
        width = (draft_tokens + self.conv_kernel - 2 if r["mamba_conv_window_dedup"] and topk <= 1
                 else draft_tokens * (self.conv_kernel - 1))
        return rows * draft_tokens * self.ssm_bytes, rows * width * self.conv_row_bytes


def mamba_state(spec: ModelSpec, tp_size: int, r: Rules, ssm_dtype: str | None = None) -> MambaState | None:
    """Per-request conv / SSM state bytes (Mamba2StateShape.create): None where the release sizes no state pool
    for this mixer (Mamba1, lightning attention, KDA are not modelled here)."""
    mixer = spec.mixer
    if mixer is None or mixer.problem or mixer.family not in r["mamba_pool_families"]:
        return None
    if mixer.kind == "gated_delta_net":  # qwen3_next.py: heads = value heads, groups = key heads, state = key dim
        heads, head_dim, groups, d_state = mixer.value_heads, mixer.value_head_dim, mixer.key_heads, mixer.key_head_dim
        intermediate = heads * head_dim
    else:
        heads, head_dim, groups, d_state, intermediate = (mixer.heads, mixer.head_dim, mixer.n_groups, mixer.d_state,
                                                          mixer.intermediate)
    if groups % tp_size:
        groups += tp_size - groups  # extra_groups_for_head_shards: groups replicated to follow the head shards
    conv_dim = intermediate + 2 * groups * d_state
    layers = sum(1 for kind in mixer.layers if "mamba" in kind)
    given, ssm_dtype = ssm_dtype, r["mamba_ssm_dtype_default"]
    if r["mamba_ssm_dtype_from_config"] and mixer.family == "qwen3_next" and mixer.ssm_dtype in DTYPE_BYTES:
        ssm_dtype = mixer.ssm_dtype  # 0.5.9+: config.mamba_ssm_dtype (Qwen3.5 names it)
    if given in DTYPE_BYTES:
        ssm_dtype = given  # --mamba-ssm-dtype (SGLANG_MAMBA_SSM_DTYPE) over the config
    row = conv_dim // tp_size * DTYPE_BYTES[r["mamba_conv_dtype"]]
    ssm = heads // tp_size * head_dim * d_state * DTYPE_BYTES[ssm_dtype]
    return MambaState(row * (mixer.conv_kernel - 1) * layers, ssm * layers, row * layers, mixer.conv_kernel)


def requests_per_slot(architecture: str, r: Rules) -> int:
    """Mamba slots a running request may hold (_calculate_mamba_ratio): the release's base, + 2 where 'auto' picks
    the extra_buffer radix strategy with the overlap scheduler (rule mamba_extra_buffer_archs); radix cache on."""
    extra = r["mamba_extra_buffer_requests"] if architecture in r["mamba_extra_buffer_archs"] else 0
    return r["mamba_requests_per_slot"] + extra


def mamba_slots(rest: float, per_request: int, r: Rules, max_running_requests: int | None = None,
                max_mamba_cache_size: int | None = None, kv_dtype_bytes: int = 2, draft_tokens: int = 0,
                dp: int = 1, per_slot: int | None = None) -> tuple[int, float]:
    """(max_mamba_cache_size, rest GiB left for the KV pool): handle_max_mamba_cache.
    0.5.2-0.5.3 (model_runner.py): the user's size or max_running_requests or 512, // dp, x 2 x KV dtype bytes;
    0.5.4+: the user's size // dp, else mamba : KV = mamba_full_memory_ratio : 1 of rest; with speculative
    decoding the intermediate states come off rest first (0.5.4) or share the mamba budget (0.5.13 joint solve:
    slots = budget // (per_req x (1 + D / requests_per_slot)); 0.5.17 counts the padding row of both buffers:
    slots = (budget - per_req (1 + D)) // (per_req (1 + D / requests_per_slot)), intermediate (requests + 1) x D,
    state (slots + 1) rows)."""
    ratio = r["mamba_full_memory_ratio"]
    per_slot = per_slot or r["mamba_requests_per_slot"]
    pad = 1 if r["mamba_spec_padding_rows"] else 0
    if r["mamba_pool"] == "fixed":
        slots = (max_mamba_cache_size or max_running_requests or 512) // dp * 2 * kv_dtype_bytes
        return slots, rest - slots * per_request / (1 << 30)
    joint = draft_tokens > 0 and r["mamba_spec_intermediate"] == "joint_solve"
    if draft_tokens and not joint:  # 0.5.4-0.5.12: every request's intermediate states come off rest first
        rest -= per_request * ((max_running_requests or 0) // dp) * draft_tokens / (1 << 30)
    if max_mamba_cache_size is not None:
        slots = max_mamba_cache_size // dp
    elif joint:
        budget = rest * ratio / (1 + ratio) * (1 << 30)
        slots = int((budget - pad * per_request * (1 + draft_tokens)) // (per_request * (1 + draft_tokens / per_slot)))
    else:
        slots = int((rest * ratio / (1 + ratio) * (1 << 30) - pad * per_request) // per_request)
    if joint:  # the intermediate states of the requests the slots allow (no max_running_requests: the slots')
        requests = slots // per_slot if max_running_requests is None else min(max_running_requests // dp,
                                                                               slots // per_slot)
        rest -= (requests + pad) * per_request * draft_tokens / (1 << 30)
    return slots, rest - (slots + pad) * per_request / (1 << 30)


@dataclass(frozen=True)
class TokenRange:
    low: int
    estimate: int
    high: int

    def __contains__(self, tokens: int) -> bool:
        return self.low <= tokens <= self.high


def tokens_from_logged_memory(load_begin_avail_gib: float, load_end_avail_gib: float, mem_fraction_static: float,
                              cell_bytes: int, version=None, page_size: int = 1,
                              max_total_tokens: int | None = None) -> TokenRange:
    """#tokens from a log's 'Load weight begin/end. avail mem=' figures. They are printed to 0.01 GiB, so the
    answer is the estimate at the printed values and the range the rounding allows."""
    r = rules(version)
    e = LOG_ROUNDING_GIB

    def tokens(before: float, after: float) -> int:
        return align_tokens(tokens_from_rest(rest_gib(before, after, mem_fraction_static), cell_bytes),
                            page_size, r, max_total_tokens)

    return TokenRange(tokens(load_begin_avail_gib + e, load_end_avail_gib - e),
                      tokens(load_begin_avail_gib, load_end_avail_gib),
                      tokens(load_begin_avail_gib - e, load_end_avail_gib + e))


def kv_buffer_tokens(tokens: int, page_size: int, r: Rules) -> int:
    """Rows each K/V buffer holds: slot 0 is padding (one row before 0.4.4, one page after)."""
    return tokens + (1 if r["kv_buffer_extra_tokens"] == "one" else page_size)


def kv_sizes_gib(tokens: int, cell: CellSize, page_size: int, version=None) -> tuple[float, float]:
    """(K size, V size) as memory_pool.py prints them, in GiB; MLA: (KV size, 0.0)."""
    rows = kv_buffer_tokens(tokens, page_size, rules(version))
    k = rows * cell.k_bytes_per_token / GIB
    return (k, 0.0) if cell.mla else (k, (cell.bytes_per_token - cell.k_bytes_per_token) * rows / GIB)


def context_len(spec: ModelSpec, r: Rules, context_length: int | None = None) -> int:
    """ModelConfig.context_len (hf_transformers_utils.py get_context_length): --context-length, else the first
    length key of the text config (family defaults in, as the HF config object has them) x the rope factor (no
    factor for llama3 rope or when the scaling names original_max_position_embeddings)."""
    if context_length is not None:
        return context_length
    scaling = spec.rope_scaling
    factor = scaling.factor if scaling is not None else 1
    if scaling is not None and (scaling.original_max_position is not None or scaling.kind == "llama3"):
        factor = 1
    lengths = dict(spec.max_len_keys)
    for key in r["context_length_keys"]:
        if key in lengths:
            return int(factor * lengths[key])
    return spec.max_position_embeddings or 2048


def req_pool_size(tokens: int, context: int, r: Rules, mamba_slots: int | None = None,
                  per_slot: int | None = None) -> int:
    """ReqToTokenPool's size: clamp(tokens / context_len x 512, 2048, 4096) (+1 before 0.4.7)."""
    floor, cap, per_context = r["req_pool_bounds"]
    size = min(max(int(tokens / context * per_context), floor), cap)
    if mamba_slots is not None:  # no slot for a request's state: no row (the start fails: plan._failure)
        size = max(min(size, mamba_slots // (per_slot or r["mamba_requests_per_slot"])), 0)
    return size + 1 if r["req_pool_plus_one"] else size


def max_running_requests(tokens: int, context: int, r: Rules, user_value: int | None = None, dp_size: int = 1,
                         mamba_slots: int | None = None, per_slot: int | None = None) -> int:
    """The scheduler's max_running_requests: min(tokens // 2 or the user's value / dp, the request pool)."""
    wanted = tokens // 2 if user_value is None else user_value // dp_size
    if user_value is not None and r["user_requests_cap"] == "half_tokens":  # 0.5.14+
        wanted = min(wanted, tokens // 2)
        if mamba_slots is not None:
            wanted = min(wanted, mamba_slots // (per_slot or r["mamba_requests_per_slot"]))
        return wanted
    return min(wanted, req_pool_size(tokens, context, r, mamba_slots, per_slot))


@dataclass(frozen=True)
class PoolPrediction:
    avail_before_weights_gib: float
    avail_after_weights_gib: float
    rest_gib: float
    max_total_num_tokens: int
    k_size_gib: float
    v_size_gib: float  # 0 for MLA (one "KV size")
    max_running_requests: int
    context_len: int
    req_to_token_gib: float
    mem_pool_end_avail_gib: float  # what CUDA graphs and activations have left
    mamba_slots: int | None = None  # max_mamba_cache_size (hybrid linear-attention models)
    mamba_conv_gib: float = 0.0  # "Mamba Cache is allocated. ... conv_state size"
    mamba_ssm_gib: float = 0.0
    swa_tokens: int | None = None  # hybrid SWA: the sliding-window pool's #tokens (max_total_num_tokens is the full pool's)
    swa_k_gib: float = 0.0
    swa_v_gib: float = 0.0
    draft_kv_gib: float = 0.0  # the draft's K and V: its own pool after the target's (0.4.3-0.5.13, out of the slack)
    draft_kv_tokens: int = 0  # or, from 0.5.14, its layers at the target's #tokens inside the budget (draft_in_budget)
    draft_in_budget: bool = False
    mamba_intermediate_ssm_gib: float = 0.0  # speculative: the SSM state per draft token for target verify
    mamba_conv_window_gib: float = 0.0  # and its conv windows
    synced_tokens: int | None = None  # what the pipeline stages' MIN takes (a hybrid SWA pool: before its split)

    @property
    def fits(self) -> bool:
        return self.max_total_num_tokens > 0


def _pool_tokens(kv_rest: float, spec: ModelSpec, settings: SGLangSettings, r: Rules, draft_in_cell: int,
                 tokens_cap: int | None) -> tuple[int, int, CellSize, int | None, float]:
    """(max_total_num_tokens, the figure the stages' MIN takes, the full pool's cell, SWA tokens or None, SWA pool's K
    GiB) from the rest left for the KV pool (GiB); `draft_in_cell`: the draft's KV layers riding in the cell."""
    cell = cell_size(spec, attention_tp(settings), settings.kv_cache_dtype, r)
    layout = swa_layout(spec, attention_tp(settings), settings.kv_cache_dtype, r)
    if layout is not None:
        rest_bytes = int(kv_rest * (1 << 30))
        tokens, swa = swa_tokens(rest_bytes, layout, r, settings.page_size, tokens_cap)
        full_k = layout.full_per_token * layout.full_layers // 2
        swa_k = kv_buffer_tokens(swa, settings.page_size, r) * layout.swa_per_token * layout.swa_layers / 2 / GIB
        return (tokens, swa_synced_tokens(rest_bytes, layout, r, settings.page_size), CellSize(2 * full_k, full_k, False),
                swa, swa_k)
    # 0.5.14+: the draft's KV layers ride in the target's cell (the draft pool holds as many tokens)
    grown = cell_with_draft(cell.bytes_per_token, kv_layers(spec), draft_in_cell, r)
    tokens = (align_tokens(tokens_from_rest(kv_rest, grown), settings.page_size, r, settings.max_total_tokens)
              if grown else zero_cell_tokens(spec, settings, context_len(spec, r, settings.context_length)))
    # the stages agree on one count (rule pp_tokens_min)
    return (tokens if tokens_cap is None else min(tokens, tokens_cap)), tokens, cell, None, 0.0


def predict_pool(free_before_weights_bytes: int, weights_bytes: int, spec: ModelSpec, settings: SGLangSettings,
                 version=None, draft: ModelSpec | None = None, agreed_weights_bytes: int | None = None,
                 tokens_cap: int | None = None, mamba_charge: MambaState | None = None,
                 hosts_draft: bool = True) -> PoolPrediction:
    """The pool SGLang builds on one rank, from free memory after CUDA context / distributed init, the rank's
    weights, the model and resolved settings (settings.resolve); `draft`: a separate draft's config when known.
    Pipeline stages (stages.py): `agreed_weights_bytes`, the weights of the rank whose free memory the MIN over
    ranks picks (the rest is sized from it); `tokens_cap`, the MIN of the stages' max_total_num_tokens;
    `mamba_charge`, the per-request state the Mamba slots are charged (rule pp_mamba_state; None: this rank's);
    `hosts_draft` False: a stage without the draft worker's KV layers (rule pp_speculative)."""
    r = rules(version)
    before = free_before_weights_bytes / GIB
    after = (free_before_weights_bytes - weights_bytes) / GIB
    agreed = after if agreed_weights_bytes is None else (free_before_weights_bytes - agreed_weights_bytes) / GIB
    rest = rest_gib(before, agreed, settings.mem_fraction_static)
    state = mamba_state(spec, settings.tp_size, r, settings.mamba_ssm_dtype) if r["mamba_pool"] else None
    per_slot = requests_per_slot(spec.architecture, r) if state is not None else None
    slots, kv_rest = None, rest
    if state is not None:
        slots, kv_rest = mamba_slots(rest, (mamba_charge or state).per_request, r, settings.max_running_requests,
                                     settings.max_mamba_cache_size, kv_dtype_bytes(settings.kv_cache_dtype, spec),
                                     draft_tokens=settings.speculative_num_draft_tokens or 0,
                                     dp=settings.dp_size if settings.enable_dp_attention else 1, per_slot=per_slot)
    drafts = (draft_layers(spec, settings.speculative_algorithm, draft) or 0) if hosts_draft else 0
    in_cell = bool(drafts) and r["draft_pool"] == "in_cell"
    tokens, synced, cell, swa, swa_k = _pool_tokens(kv_rest, spec, settings, r, drafts if in_cell else 0, tokens_cap)
    swa_v = swa_k
    context = context_len(spec, r, settings.context_length)
    k, v = kv_sizes_gib(max(tokens, 0), cell, settings.page_size, r.version)
    per_layer = cell.bytes_per_token // max(kv_layers(spec), 1)
    draft_tokens, draft_gib = 0, 0.0
    if drafts and tokens > 0 and (in_cell or r["draft_pool"] == "separate"):
        draft_tokens = tokens if in_cell else draft_pool_tokens(
            tokens, req_pool_size(tokens, context, r), settings.speculative_num_steps, settings.speculative_eagle_topk,
            settings.speculative_num_draft_tokens)
        draft_gib = kv_buffer_tokens(draft_tokens, settings.page_size, r) * per_layer * drafts / GIB
    pool_rows = req_pool_size(tokens, context, r, slots, per_slot)
    req_to_token = pool_rows * (context + 4) * 4 / GIB  # int32 [size, context_len + 4] (memory_pool.py)
    requests = max_running_requests(tokens, context, r, settings.max_running_requests, settings.dp_size, slots, per_slot)
    conv = ssm = inter_ssm = inter_conv = 0.0
    if state is not None:
        rows = max(slots + 1, 0)  # size + 1 rows (none where the slots came out negative: the start fails, _failure)
        conv, ssm = rows * state.conv_bytes / GIB, rows * state.ssm_bytes / GIB
        # memory_pool.py MambaPool: spec_state_size = max_running_requests, + 1 rows of draft-token states
        inter = state.intermediate(requests + 1, settings.speculative_num_draft_tokens or 0, r,
                                   settings.speculative_eagle_topk or 1)
        inter_ssm, inter_conv = inter[0] / GIB, inter[1] / GIB
    in_budget = draft_gib if in_cell else 0.0
    return PoolPrediction(before, after, rest, tokens, k, v, requests, context, req_to_token,
                          after - k - v - swa_k - swa_v - in_budget - req_to_token - conv - ssm - inter_ssm - inter_conv,
                          slots, conv, ssm, swa, swa_k, swa_v, draft_gib, draft_tokens, in_cell, inter_ssm, inter_conv,
                          synced)


