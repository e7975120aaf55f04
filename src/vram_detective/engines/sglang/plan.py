"""SGLang's startup, chained into a Breakdown (model_runner.py, 0.4.0-0.5.11):

  CUDA context + distributed init  -> "Load weight begin. avail mem" (free before weights)
  load_model                       -> "Load weight end. mem usage" (the weights one rank holds)
  init_memory_pool                 -> rest = avail after weights - free before x (1 - mem_fraction_static)
                                      -> max_total_num_tokens = rest // cell size (paged), K/V buffers, req pool
  init_cublas + attention backend  -> "Capture cuda graph begin. avail mem"
  CUDA graphs                      -> captured out of the slack; "available_gpu_mem" is what is left.
The pool is never reduced for the graphs: mem_fraction_static is the only reserve.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ...errors import EngineRefused
from ...input_checks import check_counts, check_fraction
from ...breakdown import Breakdown, Component, EngineFigure, Setting, StartupFailure
from ...hardware import Gpu
from ...model.spec import ModelSpec
from ...units import GIB, MIB, parse_version
from . import allocator, calibration, draft, graphs, stages
from .devices import StageFigures, devices
from .launch import ALIASES  # other engines' names for SGLang's settings
from .log_lines import LogInputs, log_lines
from .pool import (PoolPrediction, attention_tp, cell_size, draft_layers, kv_layers, mamba_state, predict_pool,
                   req_pool_size)
from .releases import Rules, rules
from .settings import SETTING_NAMES, SGLangSettings, from_values, resolve

_SOURCE = "sglang model_runner.py"


class SettingsError(ValueError):
    """A setting SGLang does not have or rejects."""


class StartupRefusal(EngineRefused, RuntimeError):
    """SGLang would not start (the message is the one it prints)."""

    engine_label = "SGLang"


def gpu_memory_mib(gpu: Gpu) -> float:
    """What SGLang's default tiers compare against: nvidia-smi's memory.total in MiB (utils.py get_nvgpu_memory_capacity)."""
    return gpu.nvidia_smi_total_mib or gpu.cuda_total_bytes / MIB


def user_settings(values: dict) -> SGLangSettings:
    """Settings from SGLang's snake_case names (or the aliases above); an unknown name is bad input."""
    named = {ALIASES.get(key, key): value for key, value in values.items()}
    unknown = sorted(key for key in named if key not in SETTING_NAMES)
    if unknown:
        raise SettingsError(f"SGLang has no setting {', '.join(unknown)} (its settings: {', '.join(SETTING_NAMES)})")
    check_counts(named, COUNT_RANGES, SettingsError)
    check_fraction(named, "mem_fraction_static", "--mem-fraction-static", SettingsError)
    _check_kv_dtype(named.get("kv_cache_dtype"))
    if named.get("mamba_ssm_dtype") not in (None, *MAMBA_SSM_DTYPES):
        raise SettingsError(f"--mamba-ssm-dtype {str(named['mamba_ssm_dtype'])[:40]!r}: one of {', '.join(MAMBA_SSM_DTYPES)}")
    return from_values(named)


MAMBA_SSM_DTYPES = ("float32", "bfloat16", "float16")  # server_args.py --mamba-ssm-dtype choices


def _check_kv_dtype(value) -> None:
    """--kv-cache-dtype: auto or a dtype the pool sizes (a name SGLang's argument choices do not hold was a KeyError)."""
    from .pool import DTYPE_BYTES

    if value is not None and value != "auto" and value not in DTYPE_BYTES:
        raise SettingsError(f"--kv-cache-dtype {str(value)[:40]!r}: not a KV cache dtype (auto, "
                            f"{', '.join(sorted(DTYPE_BYTES))})")


_TOKENS = 1 << 32  # more tokens than any model's context or any GPU's pool
_GPUS = 1 << 12
# SGLang's whole-number flags: setting -> (flag, lowest, highest, also allowed). chunked_prefill_size 0 or -1
# turns chunking off (scheduler.py 0.5.23: None when <= 0); the upper bounds are past any real value (graph
# sizes and chunk lists are built up to them, so an unbounded value would be an unbounded list)
COUNT_RANGES = {
    "tp_size": ("--tp-size", 1, _GPUS, ()), "dp_size": ("--dp-size", 1, _GPUS, ()),
    "pp_size": ("--pp-size", 1, _GPUS, ()), "context_length": ("--context-length", 1, _TOKENS, ()),
    "chunked_prefill_size": ("--chunked-prefill-size", 1, 1 << 24, (0, -1)),
    "max_prefill_tokens": ("--max-prefill-tokens", 1, _TOKENS, ()),
    "max_running_requests": ("--max-running-requests", 1, _TOKENS, ()),
    "max_total_tokens": ("--max-total-tokens", 1, 1 << 40, ()),
    "cuda_graph_max_bs": ("--cuda-graph-max-bs", 1, 1 << 16, ()), "page_size": ("--page-size", 1, 1 << 20, ()),
    "max_mamba_cache_size": ("--max-mamba-cache-size", 1, _TOKENS, ()),
    "speculative_num_steps": ("--speculative-num-steps", 1, 1 << 10, ()),
    "speculative_eagle_topk": ("--speculative-eagle-topk", 1, 1 << 10, ()),
    "speculative_num_draft_tokens": ("--speculative-num-draft-tokens", 1, 1 << 14, ()),
}


def resolve_settings(values: dict, spec: ModelSpec, gpu: Gpu, version) -> tuple[SGLangSettings, Rules]:
    s = resolve(user_settings(values), version, gpu_memory_mib(gpu), use_mla=spec.mla is not None,
                architecture=spec.architecture)
    if not 0 < s.mem_fraction_static < 1:
        if s.is_given("mem_fraction_static"):
            raise SettingsError(f"--mem-fraction-static must be in (0, 1), got {s.mem_fraction_static}")
        # the fraction SGLang derives leaves nothing: what it reserves for activations and graphs is more
        # than the card (server_args.py computes it the same way and the pool cannot be sized)
        raise StartupRefusal(f"the default mem_fraction_static for this GPU and these settings is "
                             f"{s.mem_fraction_static:g}: what SGLang reserves for activations and CUDA graphs is "
                             "more than the GPU holds (give --mem-fraction-static, or fewer graphs/requests)")
    return s, rules(version)


def _vllm_layout(spec: ModelSpec, r: Rules):
    """(vLLM engine, the vLLM release whose layout one SGLang rank shares: releases.py weights_layout_vllm,
    raised to the first vLLM release that serves the architecture)."""
    from .. import get_engine

    vllm = get_engine("vllm")
    version = parse_version(str(r["weights_layout_vllm"]))
    newer = vllm.first_release_serving(spec.architecture, version)
    return vllm, tuple(newer) if newer is not None else version


def stage_layer_counts(spec: ModelSpec, s: SGLangSettings, r: Rules) -> tuple[int, ...]:
    """Decoder layers on each pipeline stage, SGLang's own split (stages.py). More stages than layers fails
    make_layers' assert (utils.py 0.4.7, utils/common.py 0.5.3-0.5.23: num_hidden_layers >= pp_size)."""
    if s.pp_size > spec.num_layers:
        raise StartupRefusal(f"AssertionError: --pp-size {s.pp_size} is more than the model's {spec.num_layers} "
                             "layers (make_layers: num_hidden_layers >= pp_size)")
    try:
        return stages.layer_counts(spec.num_layers, s.pp_size, r, s.pp_layer_partition)
    except stages.PartitionError as error:
        raise SettingsError(f"SGLANG_PP_LAYER_PARTITION={s.pp_layer_partition}: {error}") from None


def first_stage_spec(spec: ModelSpec, s: SGLangSettings, r: Rules) -> ModelSpec:
    """The model as stage 0 (GPU 0, whose log lines SGLang prints) sizes its cell: its own layers only."""
    return stages.stage_spec(spec, 0, stage_layer_counts(spec, s, r)[0])


def rank_inventories(spec: ModelSpec, gpu: Gpu, s: SGLangSettings, r: Rules) -> list:
    """(pipeline stage, inventory of one rank): TP shards fused qkv/gate_up and the padded vocabulary as vLLM does;
    each stage its own layers as SGLang splits them, the embedding on the first, the norm and lm_head on the last."""
    vllm, version = _vllm_layout(spec, r)
    user = {"tensor_parallel_size": s.tp_size, "pipeline_parallel_size": s.pp_size}
    if s.dtype not in ("auto", None):
        user["dtype"] = s.dtype
    if s.quantization:
        user["quantization"] = s.quantization
    counts = stage_layer_counts(spec, s, r) if s.pp_size > 1 else ()
    return vllm.rank_inventories(spec, gpu, user, version, layer_counts=counts)


@dataclass(frozen=True)
class Startup:
    """Every figure of one rank's startup, in bytes unless named otherwise."""

    settings: SGLangSettings
    rules: Rules
    weights_tensors: int
    segments: int  # caching-allocator segments beyond the tensors (allocator.py)
    weights: int  # "Load weight end. mem usage"
    context: int  # CUDA context + distributed init before weights
    pool: PoolPrediction
    backend_init: int
    graph_batch_sizes: tuple[int, ...]
    decode_graphs: int
    piecewise_sizes: int
    piecewise_graphs: int
    total: int
    draft_weights: int = 0  # the speculative draft's own tensors (draft.py); 0 without a draft or when not sized
    draft_unsized: bool = False  # a draft whose weights this tool does not size
    pp_leftover: str = ""  # pipeline stages: why this stage's budget holds more than its pool (the ranks' agreement)
    stage_layers: tuple[int, int] = (0, 0)  # [start, end) of the decoder layers this rank builds (stages.py)

    @property
    def draft_in_slack(self) -> int:
        """Draft weights loaded after the target's pool (before 0.5.14): out of the slack, not the pool."""
        return self.draft_weights if self.rules["draft_weights_in"] == "slack" else 0

    @property
    def graphs(self) -> int:
        return self.decode_graphs + self.piecewise_graphs

    @property
    def pool_bytes(self) -> int:
        pool = self.pool
        draft = pool.draft_kv_gib if pool.draft_in_budget else 0.0  # 0.5.14+: the draft's layers in the cell
        return int(round((pool.k_size_gib + pool.v_size_gib + pool.swa_k_gib + pool.swa_v_gib + draft) * GIB))

    @property
    def req_to_token(self) -> int:
        return int(round(self.pool.req_to_token_gib * GIB))

    @property
    def available_after_graphs(self) -> int:
        slack_pool = 0.0 if self.pool.draft_in_budget else self.pool.draft_kv_gib  # before 0.5.14: out of the slack
        return (int((self.pool.mem_pool_end_avail_gib - slack_pool) * GIB) - self.draft_in_slack
                - self.backend_init - self.graphs)

    @property
    def static_budget(self) -> int:
        return int(self.settings.mem_fraction_static * self.pool.avail_before_weights_gib * GIB)


def startup(spec: ModelSpec, gpu: Gpu, values: dict, version) -> Startup:
    """Stage 0's rank (every rank without pipeline parallelism)."""
    return startups(spec, gpu, values, version)[0]


def startups(spec: ModelSpec, gpu: Gpu, values: dict, version) -> tuple[Startup, ...]:
    """One rank of each pipeline stage, stage 0 first: each loads its own layers and sizes its own cell, from the
    free memory and token count the ranks agree on (rules pp_free_min, pp_tokens_min)."""
    s, r = resolve_settings(values, spec, gpu, version)
    counts = stage_layer_counts(spec, s, r)
    loads = [_stage_weights(inventory) for _, inventory in rank_inventories(spec, gpu, s, r)]
    context = calibration.CUDA_CONTEXT.bytes
    draft_bytes = draft.draft_weight_bytes(spec, s)
    # from 0.5.14 the pool is sized after the draft worker loaded: its weights are charged to the budget (draft.py)
    in_pool = draft_bytes or 0 if r["draft_weights_in"] == "pool" else 0
    head = draft.draft_model_spec(s)  # --speculative-draft-model-path's config (local or catalog), None without
    specs, charge = _stage_specs(spec, s, r, counts)
    hosts = _draft_hosts(s, r, len(counts))
    charged = [w + (in_pool if host else 0) for (_, _, w), host in zip(loads, hosts)]
    # free memory before the weights (model_runner.py init_torch_distributed: get_available_gpu_memory, i.e.
    # torch.cuda.mem_get_info's free): what other processes hold on the device is not there. After the weights
    # the MIN over ranks is the free memory of the rank that loaded most
    free = gpu.free_bytes - context
    agreed = max(charged) if _free_is_min_over_stages(s, r) else None

    def sized(cap: int | None) -> list[PoolPrediction]:
        return [predict_pool(free, weights, sp, s, version, head, agreed, cap, charge, host)
                for weights, sp, host in zip(charged, specs, hosts)]

    pools = sized(None)
    own = [p.max_total_num_tokens if p.synced_tokens is None else p.synced_tokens for p in pools]
    synced = min(own) if len(pools) > 1 and r["pp_tokens_min"] else None
    if synced is not None:
        pools = sized(synced)
    return tuple(replace(_stage_startup(spec, gpu, s, r, load, pool, count, context,
                                        draft_bytes if host else 0, head if host else None, host),
                         pp_leftover=_pp_leftover(stage, loads, own, counts, synced, agreed is not None),
                         stage_layers=layers)
                 for stage, (load, pool, count, host, layers)
                 in enumerate(zip(loads, pools, counts, hosts, stages.layer_ranges(counts))))


def _draft_hosts(s: SGLangSettings, r: Rules, stages: int) -> tuple[bool, ...]:
    """Which stages run the speculative draft worker: every rank without PP; under PP only the last stage (0.5.19+),
    and before 0.5.19 server_args.py refuses the combination (rule pp_speculative)."""
    if stages < 2 or not s.speculative_algorithm:
        return (True,) * stages
    if r["pp_speculative"] != "last_stage":
        raise StartupRefusal(f"AssertionError: {r['pp_speculative']}")
    return (False,) * (stages - 1) + (True,)


def _stage_specs(spec: ModelSpec, s: SGLangSettings, r: Rules, counts: tuple[int, ...]) -> tuple[list, object]:
    """Each stage's model (its own layers: stages.stage_spec) and the per-request Mamba state its slots are charged
    (rule pp_mamba_state: every layer's before 0.5.17, the largest stage's from 0.5.17; None: its own). A stage
    holding no KV layer fails before 0.5.17 (rule pp_zero_kv_cell)."""
    ranges = stages.layer_ranges(counts)
    scheme = r["pp_mamba_state"] if len(counts) > 1 else "largest_stage"
    specs = [stages.stage_spec(spec, start, end, own_mamba=scheme != "whole_model") for start, end in ranges]
    if len(counts) > 1 and r["pp_zero_kv_cell"] == "crash":
        empty = next((i for i, sp in enumerate(specs) if kv_layers(sp) == 0), None)
        if empty is not None:
            raise StartupRefusal(f"ZeroDivisionError: integer division or modulo by zero (stage {empty} holds none of "
                                 "the KV cache's layers: profile_max_num_token divides by a cell size of 0)")
    states = [mamba_state(sp, s.tp_size, r, s.mamba_ssm_dtype) if r["mamba_pool"] else None for sp in specs]
    if len(counts) < 2 or states[0] is None or scheme == "whole_model":
        return specs, None
    if scheme == "own_layers":
        return specs, mamba_state(spec, s.tp_size, r, s.mamba_ssm_dtype)
    return specs, max(states, key=lambda state: state.per_request)


def _pp_leftover(stage: int, loads: list, own: list[int], counts: tuple[int, ...], tokens: int | None,
                 shared_free: bool) -> str:
    """What the ranks' agreement leaves unused in this stage's budget ("" with one stage or none)."""
    if len(loads) < 2:
        return ""
    words = []
    heaviest = max(range(len(loads)), key=lambda i: loads[i][2])
    if shared_free and loads[heaviest][2] > loads[stage][2]:
        words.append(f"the rest is sized from the free memory of stage {heaviest}, whose weights are "
                     f"{(loads[heaviest][2] - loads[stage][2]) / GIB:.2f} GiB more (the MIN over ranks)")
    if tokens is not None and tokens < own[stage]:
        binding = own.index(min(own))
        words.append(f"every stage keeps the smallest count the stages profiled, stage {binding}'s {tokens:,} tokens "
                     f"({counts[binding]} layers; this stage's {counts[stage]} could hold {own[stage]:,})")
    return "; ".join(words) or "the pool is whole cells and pages"


def _stage_weights(inventory) -> tuple[int, int, int]:
    """(tensors, allocator segments, "Load weight end. mem usage") of one rank."""
    segments = allocator.segment_overhead(inventory.allocations)
    return inventory.total_bytes, segments, inventory.total_bytes + segments + calibration.LOAD_OVERHEAD.bytes


def _free_is_min_over_stages(s: SGLangSettings, r: Rules) -> bool:
    """get_available_gpu_memory's MIN reaches the other stages' ranks: the world group from 0.4.7, before only
    when tp > 1 turned the all_reduce on (its default group is the world)."""
    return s.pp_size > 1 and (r["pp_free_min"] == "world" or s.tp_size > 1)


def _stage_startup(spec: ModelSpec, gpu: Gpu, s: SGLangSettings, r: Rules, load: tuple[int, int, int],
                   pool: PoolPrediction, layers: int, context: int, draft_bytes: int | None, head,
                   hosts_draft: bool = True) -> Startup:
    tensors, segments, weights = load
    rows = req_pool_size(max(pool.max_total_num_tokens, 1), pool.context_len, r)
    if s.max_running_requests is not None:  # ReqToTokenPool(size=max_num_reqs): the runner cuts the sizes there
        rows = min(rows, s.max_running_requests // s.dp_size + (1 if r["req_pool_plus_one"] else 0))
    sizes = graphs.capture_batch_sizes(s, r, gpu_memory_mib(gpu), rows)
    # the decode graphs replay this stage's own layers (and the draft's)
    drafts = draft_layers(spec, s.speculative_algorithm, head) or 0 if hosts_draft else 0
    graph_layers = layers + graphs.draft_graph_layers(s, drafts)
    piecewise_sizes, piecewise = graphs.piecewise_graph_bytes(s, r, spec.mla is not None)
    return Startup(s, r, tensors, segments, weights, context, pool, calibration.BACKEND_INIT.bytes, tuple(sizes),
                   graphs.decode_graph_bytes(sizes, graph_layers), piecewise_sizes, piecewise, gpu.cuda_total_bytes,
                   draft_bytes or 0, draft_bytes is None)


def _settings(s: SGLangSettings) -> tuple[Setting, ...]:
    out = []
    for f in fields(SGLangSettings):
        if f.name in ("given", "model_path"):
            continue
        value = getattr(s, f.name)
        if value is None or (value is False and not s.is_given(f.name)):
            continue
        out.append(Setting(f.name, value, s.is_given(f.name), "" if s.is_given(f.name) else "this release's default"))
    return tuple(out)


def _components(st: Startup) -> tuple[Component, Component]:
    tokens = st.pool.max_total_num_tokens
    swa = f" + SWA pool {st.pool.swa_tokens:,} tokens" if st.pool.swa_tokens is not None else ""
    if st.pool.draft_in_budget:
        swa += f" (the draft's KV layers in the cell: {st.pool.draft_kv_gib:.2f} GiB)"
    kv = Component("kv_cache", f"KV pool: max_total_num_tokens {max(tokens, 0):,} x cell{swa}", max(st.pool_bytes, 0),
                   "rest = avail after weights - free before x (1 - mem_fraction_static), // cell size, paged",
                   "sglang mem_cache/memory_pool.py")
    weights = Component("weights", "model weights (Load weight end. mem usage)", st.weights,
                        f"{st.weights_tensors / GIB:.2f} GiB of tensors on one rank + load overhead (calibration)",
                        _SOURCE + " load_model")
    parts = (weights,)
    if st.draft_weights and not st.draft_in_slack:  # 0.5.14+: the pool is sized after the draft worker loaded
        parts += (Component("draft_weights", f"speculative draft's weights ({st.settings.speculative_algorithm})",
                            st.draft_weights, "loaded before the pool is sized: charged to the budget (0.5.14+)",
                            "engines/sglang/draft.py"),)
    parts += (kv,)
    if st.pool.mamba_slots is not None:
        p = st.pool
        state = int(round((p.mamba_conv_gib + p.mamba_ssm_gib + p.mamba_intermediate_ssm_gib + p.mamba_conv_window_gib) * GIB))
        draft = (f" + the draft tokens' intermediate SSM states and conv windows "
                 f"({(p.mamba_intermediate_ssm_gib + p.mamba_conv_window_gib) * GIB / MIB:,.0f} MiB)"
                 if p.mamba_intermediate_ssm_gib else "")
        parts += (Component("mamba_state", f"Mamba / GDN state pool: max_mamba_cache_size {p.mamba_slots:,} + 1 rows",
                            state, "mamba : KV = mamba_full_memory_ratio : 1 of rest (0.5.4+), conv bf16 + SSM state"
                            + draft, "sglang model_runner_kv_cache_mixin.py handle_max_mamba_cache, memory_pool.py MambaPool"),)
    budget = _budget_node(st, parts)
    slack = st.total - st.context - budget.bytes
    separate = 0 if st.pool.draft_in_budget else int(round(st.pool.draft_kv_gib * GIB))
    left = max(slack - st.req_to_token - st.backend_init - st.graphs - st.draft_in_slack - separate, 0)
    draft_part = (Component("outside.draft_weights", f"speculative draft's weights ({st.settings.speculative_algorithm})",
                            st.draft_in_slack, "loaded after the target's pool (before 0.5.14): out of the slack",
                            "engines/sglang/draft.py"),) if st.draft_in_slack else ()
    if separate:
        draft_part += (Component("outside.draft_kv", f"speculative draft's KV pool ({st.pool.draft_kv_tokens:,} tokens)",
                                 separate, "the draft worker's own pool, built after the target's (before 0.5.14)",
                                 "sglang model_runner.py init_memory_pool (draft_runner_cache_size)"),)
    outside = Component("outside_budget", "outside mem_fraction_static", st.context + slack, "", "", draft_part + (
        Component("outside.cuda_context", "CUDA context + distributed init", st.context,
                  "before 'Load weight begin' (calibration)", _SOURCE + " init_torch_distributed"),
        Component("outside.req_to_token", "req_to_token pool", st.req_to_token,
                  "int32 [requests, context_len + 4]", "sglang mem_cache/memory_pool.py ReqToTokenPool"),
        Component("outside.backend", "cuBLAS + attention backend workspace", st.backend_init,
                  "init_cublas, init_attention_backend (calibration)", _SOURCE),
        Component("outside.cuda_graphs", f"CUDA graphs ({len(st.graph_batch_sizes)} batch sizes"
                  + (f", {st.piecewise_sizes} piecewise" if st.piecewise_sizes else "") + ")", st.graphs,
                  "captured after the pool, out of the slack (calibration)", "sglang cuda_graph_runner.py"),
        Component("outside.activations", "left for activations", left, "available_gpu_mem", "sglang scheduler.py"),
    ))
    return budget, outside


def _budget_node(st: Startup, parts: tuple[Component, ...]) -> Component:
    """mem_fraction_static x free memory and what fills it. The pool is whole pages below the budget (what the last
    partial page leaves is a child); the padding rows the buffers add (slot 0's page in each K/V buffer, the Mamba
    pool's extra row: memory_pool.py) are allocated beyond it. A --max-total-tokens cap leaves the rest of the
    budget free memory (the graphs and activations use it): the node is then what the parts take."""
    mfs, budget, tokens = st.settings.mem_fraction_static, st.static_budget, st.settings.max_total_tokens
    allocated = sum(part.bytes for part in parts)
    label, reason = f"mem_fraction_static {mfs} x free before weights", "SGLang's static memory: weights + KV pool"
    if tokens is not None and st.pool.max_total_num_tokens == tokens and budget - allocated > MIB:
        return Component("budget", f"weights + KV pool (--max-total-tokens {tokens:,})", allocated,
                         f"the cap leaves {(budget - allocated) / GIB:.2f} GiB of mem_fraction_static {mfs} x free before "
                         f"weights ({budget / GIB:.2f} GiB) free for the graphs and activations",
                         _SOURCE + " profile_max_num_token", parts)
    if budget - allocated > MIB:
        parts += (Component("budget_unused", "budget the pool leaves unused", budget - allocated,
                            st.pp_leftover or "the pool is whole cells and pages",
                            "sglang model_runner.py profile_max_num_token"),)
    elif allocated > budget:
        reason += (f"; the pools' padding rows take {(allocated - budget) / MIB:.0f} MiB beyond it (slot 0's page in "
                   "each K/V buffer, one more Mamba row)")
    return Component("budget", label, max(budget, allocated), reason, _SOURCE + " profile_max_num_token", parts)


def _weights_explained(st: Startup) -> tuple[Component, ...]:
    """From the tensors to the logged 'mem usage' (first and last rows absolute, the steps between signed)."""
    return (
        Component("weights.tensors", "tensors one rank holds", st.weights_tensors,
                  "vLLM's inventory: fused qkv/gate_up, vocabulary padded to 64, TP/PP shards", "sglang layers/linear.py"),
        Component("weights.segments", "+ caching-allocator segments", st.segments,
                  "mem usage is a free-memory delta: whole reserved segments count", "sglang utils.py get_available_gpu_memory"),
        Component("weights.load_overhead", "+ load overhead (calibration)", calibration.LOAD_OVERHEAD.bytes,
                  calibration.LOAD_OVERHEAD.models, "engines/sglang/calibration.py"),
        Component("weights.mem_usage", "= Load weight end. mem usage", st.weights, "", _SOURCE + " load_model"),
    )


def _figures(st: Startup) -> tuple[EngineFigure, ...]:
    s, p = st.settings, st.pool
    return (
        EngineFigure("mem_fraction_static", s.mem_fraction_static, "mem_fraction_static", f"{s.mem_fraction_static}"),
        EngineFigure("max_total_num_tokens", p.max_total_num_tokens, schema=("max_total_num_tokens", "kv_cache_tokens")),
        EngineFigure("max_running_requests", p.max_running_requests, "max_running_requests",
                     f"{p.max_running_requests:,}", ("max_running_requests",)),
        EngineFigure("page_size", s.page_size, "page size", f"{s.page_size} tokens"),
        EngineFigure("chunked_prefill_size", s.chunked_prefill_size, schema=("chunked_prefill_size",)),
        EngineFigure("cuda_graph_max_bs", s.cuda_graph_max_bs, "cuda_graph_max_bs", f"{s.cuda_graph_max_bs}"),
        EngineFigure("load_begin_avail_bytes", int(p.avail_before_weights_gib * GIB), schema=("load_begin_avail_mem_gb",)),
        # the target's 'Load weight end' (0.5.14+: the draft worker's pair follows, before the pools)
        EngineFigure("load_end_avail_bytes", int(p.avail_after_weights_gib * GIB) + (st.draft_weights - st.draft_in_slack),
                     schema=("load_end_avail_mem_gb",)),
        EngineFigure("mem_pool_end_avail_bytes", int(p.mem_pool_end_avail_gib * GIB), schema=("mem_pool_end_avail_mem_gb",)),
        EngineFigure("cuda_graph_bytes", st.graphs, schema=("cuda_graph_mem_usage_gb",)),
        EngineFigure("available_gpu_mem_bytes", st.available_after_graphs, schema=("available_gpu_mem_gb",)),
        EngineFigure("k_size_bytes", int(p.k_size_gib * GIB), schema=("k_size_gb",)),
    ) + _draft_and_state_figures(p) + ((EngineFigure("draft_weights_bytes", st.draft_weights,
                                                      schema=("draft_weights_mem_usage_gb",)),) if st.draft_weights else ())


def _draft_and_state_figures(p) -> tuple[EngineFigure, ...]:
    """The draft's KV pool and the Mamba / GDN state pool as their log lines print them (SCHEMA.md keys)."""
    out = ()
    if p.draft_kv_tokens:
        out += (EngineFigure("draft_kv_tokens", p.draft_kv_tokens, schema=("draft_kv_cache_tokens",)),
                EngineFigure("draft_k_size_bytes", int(p.draft_kv_gib / 2 * GIB), schema=("draft_k_size_gb",)))
    if p.mamba_slots is not None:
        out += (EngineFigure("mamba_slots", p.mamba_slots, "max_mamba_cache_size", f"{p.mamba_slots:,}",
                             ("mamba_max_cache_size", "mamba_cache_size")),
                EngineFigure("mamba_conv_state_bytes", int(p.mamba_conv_gib * GIB), schema=("mamba_conv_state_gb",)),
                EngineFigure("mamba_ssm_state_bytes", int(p.mamba_ssm_gib * GIB), schema=("mamba_ssm_state_gb",)))
        if p.mamba_intermediate_ssm_gib:
            out += (EngineFigure("mamba_intermediate_ssm_bytes", int(p.mamba_intermediate_ssm_gib * GIB),
                                 schema=("mamba_intermediate_ssm_state_gb",)),
                    EngineFigure("mamba_conv_window_bytes", int(p.mamba_conv_window_gib * GIB),
                                 schema=("mamba_conv_window_gb",)))
    return out


def _failure(ranks: tuple[Startup, ...]) -> StartupFailure | None:
    """The first stage that cannot start stops the server (every stage's rank runs the same startup)."""
    for stage, st in enumerate(ranks):
        where = f"stage {stage} (GPU {stage * st.settings.tp_size}): " if stage else ""
        if st.pool.max_total_num_tokens <= 0:
            return StartupFailure(where + str(st.rules["refusal"]))
        if st.pool.mamba_slots is not None and st.pool.mamba_slots <= 0:
            return StartupFailure(where + st.rules["refusal_no_mamba_slot"].format(slots=st.pool.mamba_slots,
                                                                                    rest=st.pool.rest_gib))
        if st.available_after_graphs < 0:
            return StartupFailure(where + f"Capture cuda graph failed: CUDA out of memory ({st.graphs / GIB:.2f} GiB "
                                  f"of graphs, {(st.available_after_graphs + st.graphs) / GIB:.2f} GiB left after the "
                                  "pool). Lower --mem-fraction-static or --cuda-graph-max-bs, or --disable-cuda-graph.")
    return None


def _draft_notes(st: Startup) -> tuple[str, ...]:
    if st.draft_unsized:
        return (f"speculative draft ({st.settings.speculative_algorithm}): its weights are not sized (a separate draft "
                "model or a quantized checkpoint's MTP layers); its KV layers are",)
    if not st.draft_weights:
        return ()
    where = ("out of the slack (loaded after the target's pool)" if st.draft_in_slack
             else "out of the KV budget (both pools built after both workers loaded, 0.5.14+)")
    shared = {"EAGLE3": "the target's embedding shared, its own lm_head over the draft vocabulary",
              "STANDALONE": "a model of its own, nothing shared"}.get(str(st.settings.speculative_algorithm).upper(),
                                                                       "the target's embedding and lm_head shared")
    from .draft import head_assumed

    assumed = (f"; {st.settings.speculative_draft_model_path}'s config.json was not found (local or catalog): sized as "
               "one decoder layer of the target's shape, what an EAGLE head is") if head_assumed(st.settings) else ""
    return (f"speculative draft ({st.settings.speculative_algorithm}): {st.draft_weights / GIB:.2f} GiB of its own "
            f"layers ({shared}), {where}{assumed}",)


def _nvidia_smi_mib(st: Startup) -> int:
    return int(round((st.total - max(st.available_after_graphs, 0)) / MIB))


def _stage_figures(st: Startup, components: tuple[Component, Component] | None = None) -> StageFigures:
    budget, outside = components or _components(st)
    return StageFigures(budget, outside, st.weights, max(st.pool_bytes, 0), _nvidia_smi_mib(st), st.stage_layers)


def plan(spec: ModelSpec, gpu: Gpu, values: dict, version) -> Breakdown:
    ranks = startups(spec, gpu, values, version)
    st = ranks[0]  # the headline figures are stage 0's (GPU 0), as vLLM's
    p = st.pool
    budget, outside = _components(st)
    first = first_stage_spec(spec, st.settings, st.rules)
    cell = cell_size(first, attention_tp(st.settings), st.settings.kv_cache_dtype, st.rules).bytes_per_token
    tokens = max(p.max_total_num_tokens, 0)
    smi = _nvidia_smi_mib(st)
    lines = log_lines(p, st.rules.version, LogInputs.of(spec, st))
    notes = ("weights: vLLM's tensor inventory for the same model and TP (SGLang's layers are ports of vLLM's); "
             "quantized kernels' repacking is vLLM's",) + tuple(
        note + ("; the last pipeline stage's GPUs hold it, the figures above are GPU 0's" if len(ranks) > 1 else "")
        for note in _draft_notes(ranks[-1]))
    return Breakdown(
        model=spec.name, gpu_name=gpu.name, total_gpu_bytes=gpu.cuda_total_bytes, engine_name="sglang",
        engine_label="SGLang", engine_version=st.rules.label, engine_variant="", settings=_settings(st.settings),
        components=budget, weights_bytes=st.weights, kv_cache_bytes=max(st.pool_bytes, 0), kv_bytes_per_token=cell,
        kv_cache_tokens=tokens, max_concurrency=tokens / p.context_len, max_model_len=p.context_len,
        nvidia_smi_used_mib=smi, outside_budget=outside, log_lines=tuple(lines), engine_figures=_figures(st),
        weights_explained=_weights_explained(st), notes=notes, failure=_failure(ranks),
        devices=devices(st.settings, gpu.cuda_total_bytes, (_stage_figures(st, (budget, outside)),)
                        + tuple(_stage_figures(other) for other in ranks[1:])),
    )
