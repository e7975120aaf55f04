"""KV-cache groups of hybrid-attention models: sliding window, chunked local and full attention layers
sharing one block pool, release by release (design/vllm-memory.md §3.2-§3.4).

From the layers one worker holds and the bytes it has for its KV cache, `plan_kv_groups` says what the
release allocates and logs: the groups (kind, layers, padding layers), the bytes one block id costs,
the number of blocks, how many blocks one `max_model_len` request needs, "GPU KV cache size: N tokens",
"Maximum concurrency for L tokens per request: X.XXx", the extra lines it prints (padding layers,
hybrid manager disabled) and whether the startup check "one full request must fit" passes.

The layers come from kv_layers.py (`AttentionLayer`, built from the ModelSpec's attention facts) and, for
Mamba / linear-attention hybrids, kv_mamba.py (the raised block size and padded Mamba page).

Pages of different sizes are brought to the largest (unify_kv_cache_spec_page_size): a divisor by raising
its block size, otherwise padded where the release pads that kind (`_to_page`). A KV-shared layer takes
no page; it is listed with its target's group.

Everything is a pure function of plain values. The release boundaries live in releases.RULE_CHANGES
(section "KV-cache groups"; one row per change, with the wheel it was read from).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ...errors import EngineRefused
from ...units import ceil_div
from .kv_layers import AttentionLayer, KvNotModelledError, Version, rule, rule_source
from .kv_mamba import MambaBlockSizing, _apply_mamba
from .kv_specs import MLA, ChunkedLocal, CrossAttention, FullAttention, KvSpec, RequestBound, SlidingWindow

class KvLayoutRefusal(EngineRefused, NotImplementedError):
    """A KV layout the release itself refuses at startup (vLLM raises NotImplementedError or asserts while
    grouping the layers: kv_cache_utils.py get_kv_cache_config / unify_kv_cache_spec_page_size)."""

    engine_label = "vLLM"


class KvSpecRefusal(EngineRefused, ValueError):
    """A KV configuration the release refuses with a ValueError of its own (the message is vLLM's)."""

    engine_label = "vLLM"


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group (one block table) as one worker holds it."""

    kind: str  # as allocated: sliding layers of a unified model are "full" here
    sliding_window: int | None  # window / chunk of the group's spec, None for full and MLA
    layer_indices: tuple[int, ...]  # indices into the layer list, only this worker's
    padding_layers: int  # empty slots: group size minus this worker's layers in the group
    block_size: int  # tokens per block of this group (raised for smaller pages, 0.12+)
    blocks_per_request: int  # blocks one max_model_len request takes from the shared pool
    shared_layer_indices: tuple[int, ...] = ()  # this worker's layers reading a member's cache (no page)

    @property
    def layers(self) -> int:
        return len(self.layer_indices)


@dataclass(frozen=True)
class KvGroupPlan:
    num_blocks: int  # after the minimum over workers and num_gpu_blocks_override
    block_bytes: int  # bytes one block id costs the pool on worker 0 (page x group size, padding included)
    groups: tuple[KvGroup, ...]  # worker 0's groups
    blocks_per_request: int  # the release's denominator of the concurrency (cdiv(L, block) before 0.9.1)
    kv_cache_tokens: int  # "GPU KV cache size: N tokens" as the release logs it
    max_concurrency: float  # "Maximum concurrency ...: X.XXx" before rounding
    log_lines: tuple[str, ...]  # extra lines the release prints, in order
    notes: tuple[str, ...]
    hybrid: bool  # more than one group
    in_flight_tokens: int  # X in the sliding / chunked per-request bound
    fits: bool  # the startup check passes on every worker
    fit_needed_bytes: int  # what the check asks for (worker that fails first, else worker 0)
    fit_available_bytes: int  # what it compares with (null block removed in 0.33, override pool in 0.21+)
    estimated_max_model_len: int  # longest request that passes the check (vLLM's binary search), 0 if none
    worker_block_bytes: tuple[int, ...] = field(default=())
    worker_num_blocks: tuple[int, ...] = field(default=())  # each worker's own count before the minimum

    @property
    def pool_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def padding_layers(self) -> int:
        return sum(group.padding_layers for group in self.groups)


# --- specs as one release creates them ---------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    version: Version
    max_model_len: int
    bound: RequestBound  # what each spec's per-request bound reads


def _created_specs(layers: Sequence[AttentionLayer], block_size: int, version: Version,
                   mamba_block_size: int | None = None) -> list[KvSpec]:
    """V1's specs (gpu_model_runner.get_kv_cache_spec): a kind the release does not create yet is full
    attention; Mamba states use MambaSpec.block_size."""
    specs = []
    for layer in layers:
        spec = layer.spec(block_size)
        if spec.recurrent:
            spec = spec.resized(spec.page_bytes, mamba_block_size or block_size)
        elif spec.v1_rule is not None and not rule(version, spec.v1_rule):
            spec = spec.as_full()
        specs.append(spec)
    return specs


def _is_hybrid(specs: Sequence[KvSpec]) -> bool:
    return len(set(specs)) > 1


def _unify(specs: list[KvSpec]) -> tuple[list[KvSpec], bool]:
    """unify_hybrid_kv_cache_specs: sliding / chunked layers become full when a full (or MLA) layer exists."""
    if any(isinstance(s, FullAttention) for s in specs) and any(s.windowed for s in specs):
        return [s.as_full() if s.windowed else s for s in specs], True
    return specs, False


# --- grouping -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Grouping:
    groups: tuple[tuple[KvSpec, tuple[int, ...]], ...]  # (spec, layer indices) per group
    group_size: int
    uniform_type: bool  # one group of same-kind layers with different pages (block = sum of pages)
    log_lines: tuple[str, ...]


def _group(specs: Sequence[KvSpec], indices: Sequence[int], version: Version,
           backend: str | None = None) -> _Grouping:
    """get_kv_cache_groups over the layers `indices` (all of them, or one worker's before 0.11)."""
    chosen = [specs[i] for i in indices]
    if len(set(chosen)) == 1:
        return _Grouping(((chosen[0], tuple(indices)),), len(indices), False, ())
    if len({s.type_key for s in chosen}) == 1:
        if not rule(version, "uniform_type_group"):
            raise KvLayoutRefusal("layers of one attention type with different KV shapes are not supported "
                                      "by this release (NotImplementedError in get_kv_cache_config)")
        return _Grouping(((chosen[0], tuple(indices)),), len(indices), True, ())
    # hybrid: one type per distinct spec, in the order of their first layer
    by_type: dict[KvSpec, list[int]] = {}
    for i in indices:
        by_type.setdefault(specs[i], []).append(i)
    by_type = _unify_pages(by_type, version, backend)
    counts = [len(members) for members in by_type.values()]
    group_size = min(counts)
    factor = rule(version, "group_size_factor")
    if factor is not None and max(counts) < min(counts) * float(factor):
        group_size = max(counts)
    groups: list[tuple[KvSpec, tuple[int, ...]]] = []
    lines: list[str] = []
    strided = bool(rule(version, "strided_groups"))
    for spec, members in by_type.items():
        padding = group_size - len(members) % group_size
        if padding != group_size:
            lines.append(f"Add {padding} padding layers, may waste at most {padding / len(members) * 100:.2f}% "
                         "KV cache memory")
        count = ceil_div(len(members), group_size)
        for i in range(count):
            chunk = members[i::count] if strided else members[i * group_size:(i + 1) * group_size]
            groups.append((spec, tuple(chunk)))
    return _Grouping(tuple(groups), group_size, False, tuple(lines))


def _unify_pages(by_type: dict[KvSpec, list[int]], version: Version,
                 backend: str | None) -> dict[KvSpec, list[int]]:
    """unify_kv_cache_spec_page_size: every page brought to the largest one (0.12+)."""
    pages = {spec.page_bytes for spec in by_type}
    if len(pages) <= 1:
        return by_type
    if not rule(version, "unified_page_block_size"):
        raise KvLayoutRefusal("hybrid layers with different page sizes are not supported by this release")
    largest = max(pages)
    unified: dict[KvSpec, list[int]] = {}
    for spec, members in by_type.items():
        unified.setdefault(_to_page(spec, largest, version, backend), []).extend(members)
    return unified


def _to_page(spec: KvSpec, largest: int, version: Version, backend: str | None) -> KvSpec:
    """One spec at the largest page: a divisor raises its block size; otherwise the page is padded (the
    block size stays) where the release pads that kind, else NotImplementedError as vLLM raises it."""
    if spec.page_bytes == largest:
        return spec
    if spec.recurrent:  # a Mamba page does not scale with the block size
        if not rule(version, "mamba_page_padding"):
            raise KvLayoutRefusal("a Mamba page smaller than another layer's page is not padded before 0.26 "
                                      f"(AssertionError in unify_kv_cache_spec_page_size; "
                                      f"{rule_source(version, 'mamba_page_padding')})")
        return spec.resized(largest, spec.block_size)
    if largest % spec.page_bytes == 0:
        return spec.resized(largest, spec.block_size * (largest // spec.page_bytes))
    if _pads_page(spec, version, backend):
        return spec.resized(largest, spec.block_size)
    if isinstance(spec, MLA) and rule(version, "kv_page_padding") == "non-mla":
        raise KvNotModelledError("Padding is only supported for non-MLA attention layers (vLLM then tries "
                                  "allocating sliding layers as full attention; not modelled)")
    raise KvLayoutRefusal("The page size of the layer is not divisible by the maximum page size. "
                              "Cannot unify by adjusting block_size.")


def _pads_page(spec: KvSpec, version: Version, backend: str | None) -> bool:
    """Whether the release pads a non-divisible attention page: 0.24-0.28 when the backend indexes KV by
    block stride (None = a CUDA default backend, which all do), every non-MLA layer from 0.29."""
    mode = rule(version, "kv_page_padding")
    if mode == "non-mla":
        return not isinstance(spec, MLA)
    if mode == "block-stride-backends":
        return backend is None or backend.upper() in rule(version, "kv_block_stride_backends")  # type: ignore[operator]
    return False


def _block_bytes(grouping: _Grouping, worker: Sequence[int], specs_by_index: Sequence[KvSpec]) -> tuple[int, int]:
    """(bytes per block id on this worker, its group size): page x most layers of one group."""
    owned = set(worker)
    if grouping.uniform_type:
        _, members = grouping.groups[0]
        return sum(specs_by_index[i].page_bytes for i in members if i in owned), 1
    size = max(sum(1 for i in members if i in owned) for _, members in grouping.groups)
    page = grouping.groups[0][0].page_bytes
    return page * size, size


# --- the plan ---------------------------------------------------------------------------------------------


def in_flight_tokens(version: Version, max_num_batched_tokens: int, async_scheduling: bool | None = None,
                     pipeline_parallel_size: int = 1, v2_model_runner: bool = False) -> int:
    """X in the sliding / chunked bound: max_num_batched_tokens, or (0.26+) max_in_flight_tokens =
    max_concurrent_batches x max_num_batched_tokens (VllmConfig.max_concurrent_batches)."""
    if not rule(version, "in_flight_tokens"):
        return max_num_batched_tokens
    if async_scheduling is None:
        async_scheduling = bool(rule(version, "async_scheduling_default"))
    pp = max(1, pipeline_parallel_size)
    batches = pp
    if async_scheduling:
        if v2_model_runner:
            batches = pp + 1
        elif pp <= 1:
            batches = 2
    return batches * max_num_batched_tokens


@dataclass(frozen=True)
class KvPlanInputs:
    """What plan_kv_groups reads (its parameters, normalised: one budget and one layer list per worker).

    layers: the model's attention layers in order (each with its page on its rank).
    budgets / workers: each worker's KV budget and layer indices (every layer on every worker under TP).
    async_scheduling: None = the release default (on from 0.14; it only matters from 0.26, where the
        sliding-window bound reserves two batches in flight).
    allow_chunked_local_hybrid: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE; None = the release default.
    mamba_cache_mode: "none" (one state per request), "all" (prefix caching, 0.11.2+) or "align" (0.15.1+);
        mamba_speculative_blocks: MambaSpec.num_speculative_blocks (speculative tokens);
        mamba_chunk_size: the SSD chunk the "all" mode aligns to (256 when None).
    """

    layers: tuple[AttentionLayer, ...]
    budgets: tuple[int, ...]
    workers: tuple[tuple[int, ...], ...]
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    version: Version
    engine: str
    disable_hybrid_kv_cache_manager: bool = False
    num_gpu_blocks_override: int | None = None
    async_scheduling: bool | None = None
    pipeline_parallel_size: int = 1
    v2_model_runner: bool = False
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    allow_chunked_local_hybrid: bool | None = None
    mamba_cache_mode: str = "none"
    mamba_speculative_blocks: int = 0
    mamba_chunk_size: int | None = None
    cutlass_mla: bool = False
    attention_backend: str | None = None  # None: a CUDA default backend (FLASH_ATTN, FlashInfer, an MLA one)


def plan_kv_groups(
    layers: Sequence[AttentionLayer],
    available_bytes: int | Sequence[int],
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    version: Version,
    engine: str,
    disable_hybrid_kv_cache_manager: bool = False,
    num_gpu_blocks_override: int | None = None,
    *,
    worker_layers: Sequence[Sequence[int]] | None = None,
    **options,
) -> KvGroupPlan:
    """Blocks, groups, tokens and concurrency of one release for these attention layers.

    available_bytes: one worker's KV budget, or one per worker (then `worker_layers` lists each worker's
        layer indices; by default every worker holds every layer, as under tensor parallelism).
    max_num_seqs: accepted for the caller's convenience; no release's KV grouping reads it.
    options: the keyword fields of KvPlanInputs (async_scheduling, pipeline_parallel_size, ...).
    "mamba" layers: V1 from 0.10.1 raises the attention block size to hold one Mamba state per page and pads
    the state to the attention page (mamba_block_sizing); each Mamba group takes one block per request.
    V0 sizes only the attention layers: the Mamba state lives in MambaCacheManager, outside the blocks.
    A layer with a kv_sharing_target is dropped before grouping (V1 0.9.1+) and returned in its target's
    group (KvGroup.shared_layer_indices); attention_backend (an option) decides padding in 0.24-0.28.
    """
    del max_num_seqs  # no KV rule depends on it
    if engine not in ("v0", "v1"):
        raise ValueError(f"unknown engine path {engine!r}")
    if not layers:
        raise ValueError("no attention layers: attention-free models have no KV cache groups")
    if block_size <= 0 or max_model_len <= 0:
        raise ValueError("block_size and max_model_len must be positive")
    budgets = [int(available_bytes)] if isinstance(available_bytes, (int, float)) else [int(b) for b in available_bytes]
    if worker_layers is None:
        workers = [tuple(range(len(layers)))] * len(budgets)
    else:
        workers = [tuple(w) for w in worker_layers]
        if len(workers) != len(budgets):
            raise ValueError("worker_layers and available_bytes must list the same workers")
    shared = _kv_shared_layers(layers, workers, tuple(version), engine)  # type: ignore[arg-type]
    owning = [i for i in range(len(layers)) if i not in shared]
    if shared:
        position = {old: new for new, old in enumerate(owning)}
        layers = [layers[i] for i in owning]
        workers = [tuple(position[i] for i in w if i in position) for w in workers]
    inputs = KvPlanInputs(tuple(layers), tuple(budgets), tuple(workers), block_size, max_model_len,
                          max_num_batched_tokens, tuple(version), engine,  # type: ignore[arg-type]
                          disable_hybrid_kv_cache_manager, num_gpu_blocks_override, **options)
    plan = plan_v0(inputs) if engine == "v0" else plan_v1(inputs)
    return _with_shared_layers(plan, owning, shared, worker_layers) if shared else plan


def _kv_shared_layers(layers: Sequence[AttentionLayer], workers: Sequence[tuple[int, ...]], version: Version,
                      engine: str) -> dict[int, int]:
    """layer -> the layer whose KV cache it reads, checked as vLLM's validate_kv_sharing_target does."""
    shared = {i: layer.kv_sharing_target for i, layer in enumerate(layers) if layer.kv_sharing_target is not None}
    if not shared:
        return {}
    if not rule(version, "kv_sharing", engine):
        raise KvNotModelledError(f"KV sharing is not supported here ({rule_source(version, 'kv_sharing', engine)})")
    for i, target in shared.items():
        why = f"Specified KV sharing target layer for layer {i} is not valid: target layer {target} "
        if target == i:
            raise KvSpecRefusal(why + "cannot be the same as the current layer.")
        if target > i:
            raise KvSpecRefusal(why + "must come before the current layer.")
        if target < 0 or layers[target].spec_type.recurrent \
                or any(i in w and target not in w for w in workers):
            raise KvSpecRefusal(why + "is not a valid Attention layer in the model.")
        if (layers[target].spec_type is CrossAttention) != (layers[i].spec_type is CrossAttention):
            raise KvSpecRefusal(why + "must be the same type as the current layer.")
    for i, target in shared.items():  # a target that shares in turn: the cache is its target's
        while target in shared:
            target = shared[target]
        shared[i] = target
    return shared


def _with_shared_layers(plan: KvGroupPlan, owning: Sequence[int], shared: dict[int, int],
                        worker_layers: Sequence[Sequence[int]] | None) -> KvGroupPlan:
    """The plan in the caller's layer indices, each KV-shared layer listed with its target's group (the
    runner adds it there after allocation; add_kv_sharing_layers_to_kv_cache_groups)."""
    mine = set(worker_layers[0]) if worker_layers is not None else set(range(len(owning) + len(shared)))
    groups = []
    for group in plan.groups:
        members = tuple(owning[i] for i in group.layer_indices)
        readers = tuple(i for i, target in sorted(shared.items()) if target in members and i in mine)
        groups.append(replace(group, layer_indices=members, shared_layer_indices=readers))
    note = (f"KV-shared layers: {len(shared)} read an earlier layer's KV cache (kv_sharing_target_layer_name) "
            "and take no page")
    return replace(plan, groups=tuple(groups), notes=plan.notes + (note,))


def plan_v0(inputs: KvPlanInputs) -> KvGroupPlan:
    """V0 sizes only the attention layers: Mamba states live in the model's MambaCacheManager."""
    layers, workers, notes = list(inputs.layers), list(inputs.workers), []
    if any(layer.spec_type.recurrent for layer in layers):
        keep = [i for i, layer in enumerate(layers) if not layer.spec_type.recurrent]
        if not keep:
            raise ValueError("attention-free Mamba model: V0 has no KV cache blocks (MambaCacheManager only)")
        remap = {old: new for new, old in enumerate(keep)}
        layers = [layers[i] for i in keep]
        workers = [tuple(remap[i] for i in w if i in remap) for w in workers]
        notes.append("V0: Mamba / linear-attention state is a MambaCacheManager of max_num_seqs (CUDA-graph "
                     "padded) requests allocated inside the model, outside the KV blocks; blocks count the "
                     "attention layers only")
    return _plan_v0(layers, list(inputs.budgets), workers, inputs.block_size, inputs.max_model_len,
                    inputs.num_gpu_blocks_override, notes)


@dataclass(frozen=True)
class _V1Specs:
    """The specs of one V1 plan: as created, as grouped (unified when the hybrid manager is off)."""

    created: list[KvSpec]
    grouped: list[KvSpec]
    block_size: int  # the attention block size after the Mamba raise
    ctx: _Context
    lines: tuple[str, ...]
    notes: tuple[str, ...]


def plan_v1(inputs: KvPlanInputs) -> KvGroupPlan:
    specs = _v1_specs(inputs)
    version, workers = inputs.version, list(inputs.workers)
    if rule(version, "global_groups"):  # groups from all workers' layers (0.11+), else per worker
        all_indices = sorted({i for w in workers for i in w})
        groupings = [_group(specs.grouped, all_indices, version, inputs.attention_backend)] * len(workers)
    else:
        groupings = [_group(specs.grouped, w, version, inputs.attention_backend) for w in workers]
    lines, notes = list(specs.lines) + list(groupings[0].log_lines), list(specs.notes)
    worker_bytes, own_blocks, sizes = _worker_blocks(groupings, workers, inputs.budgets, specs.grouped, version)
    blocks_each, fit_budgets = _apply_override(inputs, own_blocks, worker_bytes, lines, notes)
    num_blocks = min(blocks_each)
    fits, needed, against, estimate = _fit_check(specs.created, specs.grouped, groupings, workers, fit_budgets,
                                                 worker_bytes, sizes, specs.ctx, specs.block_size)
    log_blocks = num_blocks if rule(version, "log_after_min") else blocks_each[0]
    tokens, concurrency, per_request = _logged_figures(inputs, groupings[0], log_blocks, specs, lines)
    if not rule(version, "log_after_min") and len(set(blocks_each)) > 1:
        notes.append("each worker logs its own tokens and concurrency before the minimum over workers "
                     "(<= 0.11.0); the figures here are worker 0's")
    return KvGroupPlan(
        num_blocks=num_blocks, block_bytes=worker_bytes[0],
        groups=_worker_groups(groupings[0], workers[0], sizes[0], specs.ctx),
        blocks_per_request=per_request, kv_cache_tokens=tokens, max_concurrency=concurrency,
        log_lines=tuple(lines), notes=tuple(notes), hybrid=len(groupings[0].groups) > 1,
        in_flight_tokens=specs.ctx.bound.in_flight, fits=fits, fit_needed_bytes=needed, fit_available_bytes=against,
        estimated_max_model_len=estimate, worker_block_bytes=tuple(worker_bytes), worker_num_blocks=tuple(own_blocks),
    )


def _v1_specs(inputs: KvPlanInputs) -> _V1Specs:
    """Mamba sizing, the per-request bound, the specs the release creates and those it groups."""
    version, layers, block_size = inputs.version, list(inputs.layers), inputs.block_size
    lines: list[str] = []
    mamba_block_size = None
    if any(layer.spec_type.recurrent for layer in layers):
        layers, sizing = _v1_mamba(inputs)
        block_size, mamba_block_size = sizing.block_size, sizing.mamba_block_size
        lines.extend(sizing.log_lines)
    context_parallel = _context_parallel(inputs)
    x = in_flight_tokens(version, inputs.max_num_batched_tokens, inputs.async_scheduling,
                         inputs.pipeline_parallel_size, inputs.v2_model_runner)
    bound = RequestBound(x, context_parallel, inputs.mamba_cache_mode, int(inputs.mamba_speculative_blocks))
    created = _created_specs(layers, block_size, version, mamba_block_size)
    if context_parallel > 1 and any(isinstance(s, SlidingWindow) for s in created) \
            and rule(version, "dcp_refuses_sliding_window"):
        raise KvSpecRefusal("DCP not support sliding window.")
    grouped, notes = _hybrid_manager(created, inputs, lines)
    return _V1Specs(created, grouped, block_size, _Context(version, inputs.max_model_len, bound),
                    tuple(lines), tuple(notes))


def _v1_mamba(inputs: KvPlanInputs) -> tuple[list[AttentionLayer], MambaBlockSizing]:
    version = inputs.version
    if not rule(version, "v1_mamba"):
        raise KvNotModelledError("Mamba / linear-attention layers in the V1 engine are not sized before 0.10.1 "
                                  f"({rule_source(version, 'v1_mamba')})")
    if inputs.mamba_cache_mode not in rule(version, "mamba_cache_modes"):  # type: ignore[operator]
        raise ValueError(f"mamba_cache_mode {inputs.mamba_cache_mode!r} is not available in this release "
                         f"({rule_source(version, 'mamba_cache_modes')})")
    return _apply_mamba(inputs.layers, inputs.block_size, inputs.max_model_len, version, inputs.mamba_cache_mode,
                        inputs.mamba_chunk_size, inputs.cutlass_mla)


def _context_parallel(inputs: KvPlanInputs) -> int:
    """The ranks a full-attention request is split over: dcp (0.10.2+), x pcp (0.12+)."""
    dcp_rule = rule(inputs.version, "context_parallel_kv")
    if dcp_rule is None:
        return 1
    if dcp_rule == "dcp-pcp":
        return inputs.decode_context_parallel_size * inputs.prefill_context_parallel_size
    return inputs.decode_context_parallel_size


def _hybrid_manager(created: list[KvSpec], inputs: KvPlanInputs, lines: list[str]) -> tuple[list[KvSpec], list[str]]:
    """The specs that get grouped: the hybrid manager may be off (flag, chunked local default, or pre-0.9.1),
    then windows become full attention. Appends the release's log lines; returns the notes."""
    version, notes = inputs.version, []
    specs = list(created)
    hybrid_allowed = bool(rule(version, "hybrid_allocator"))
    disable = inputs.disable_hybrid_kv_cache_manager
    why = "--disable-hybrid-kv-cache-manager"
    if hybrid_allowed and any(isinstance(s, ChunkedLocal) for s in created):
        allow = inputs.allow_chunked_local_hybrid
        if allow is None:
            allow = rule(version, "chunked_hybrid_default")
        if not allow and (rule(version, "chunked_hybrid_warns_when_disabled") or not disable):
            lines.append("There is a latency regression when using chunked local attention with the hybrid KV cache "
                         "manager. Disabling it, by default. To enable it, set the environment "
                         "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1.")
            if not disable:
                why = "chunked local attention turns the hybrid manager off by default"
            disable = True
    if (hybrid_allowed and not disable) or not _is_hybrid(specs):
        return specs, notes
    specs, changed = _unify(specs)
    if hybrid_allowed:
        lines.append("Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable "
                     "any optimizations for saving KV cache memory (e.g., dropping the KV cache outside the "
                     "sliding window). The compute of layers like sliding window is still saved.")
    if changed:
        notes.append("sliding-window / chunked-local layers are allocated as full attention "
                     + (f"({why})" if hybrid_allowed else
                        f"(no hybrid allocator before 0.9.1; {rule_source(version, 'hybrid_allocator')})"))
    if _is_hybrid(specs) and len({s.type_key[:2] for s in specs}) > 1:
        raise KvSpecRefusal("Hybrid KV cache manager is disabled but failed to convert the KV cache specs to "
                         "one unified type.")
    return specs, notes


def _worker_blocks(groupings: Sequence[_Grouping], workers: Sequence[tuple[int, ...]], budgets: Sequence[int],
                   specs: Sequence[KvSpec], version: Version) -> tuple[list[int], list[int], list[int]]:
    """Each worker's bytes per block id, its own block count, and its group size."""
    max_layers = max(len(w) for w in workers)
    worker_bytes: list[int] = []
    own_blocks: list[int] = []
    sizes: list[int] = []
    for grouping, worker, budget in zip(groupings, workers, budgets):
        per_block, size = _block_bytes(grouping, worker, specs)
        if len(grouping.groups) == 1 and not grouping.uniform_type and rule(version, "v1_layers_max_over_workers"):
            per_block, size = grouping.groups[0][0].page_bytes * max_layers, max_layers
        worker_bytes.append(per_block)
        sizes.append(size)
        own_blocks.append(max(int(budget // per_block), 0) if budget > 0 else 0)
    return worker_bytes, own_blocks, sizes


def _apply_override(inputs: KvPlanInputs, own_blocks: list[int], worker_bytes: list[int], lines: list[str],
                    notes: list[str]) -> tuple[list[int], list[int]]:
    """(blocks of each worker, budgets the fit check compares with) under num_gpu_blocks_override."""
    override = inputs.num_gpu_blocks_override
    if override is None:
        return list(own_blocks), list(inputs.budgets)
    override_rule = rule(inputs.version, "gpu_blocks_override")
    lines.append(f"Overriding num_gpu_blocks={own_blocks[0]} with num_gpu_blocks_override={override}")
    if override_rule == "ignored":
        notes.append("vLLM 0.9.1 logs the override but keeps its own block count (get_num_blocks)")
        return list(own_blocks), list(inputs.budgets)
    blocks_each = [override] * len(inputs.workers)
    if override_rule == "pool":
        return blocks_each, [override * b for b in worker_bytes]
    return blocks_each, list(inputs.budgets)


def _logged_figures(inputs: KvPlanInputs, groups0: _Grouping, log_blocks: int, specs: _V1Specs,
                    lines: list[str]) -> tuple[int, float, int]:
    """(tokens, concurrency, blocks per request) as the release logs them."""
    max_model_len, block_size = inputs.max_model_len, specs.block_size
    tokens_rule = rule(inputs.version, "kv_tokens_rule")
    if tokens_rule == "blocks":
        tokens = log_blocks * block_size
        return tokens, tokens / max_model_len, ceil_div(max_model_len, block_size)
    per_request = sum(spec.blocks_per_request(max_model_len, specs.ctx.bound) for spec, _ in groups0.groups)
    concurrency = log_blocks / per_request
    if tokens_rule != "blocks-per-group":
        return int(concurrency * max_model_len), concurrency, per_request
    min_block = min(spec.block_size for spec, _ in groups0.groups)
    group_count = len(groups0.groups)
    tokens = log_blocks // group_count * min_block
    dcp_rule, context_parallel = rule(inputs.version, "context_parallel_kv"), specs.ctx.bound.context_parallel
    if dcp_rule is not None and context_parallel > 1 and (dcp_rule != "dcp-uniform" or group_count == 1):
        tokens *= context_parallel
        if dcp_rule == "dcp-pcp":
            lines.append(f"Multiplying the GPU KV cache size by the cp_world_size {context_parallel} "
                         f"(pcp_world_size {inputs.prefill_context_parallel_size} * dcp_world_size "
                         f"{inputs.decode_context_parallel_size}).")
        else:
            lines.append(f"Multiplying the GPU KV cache size by the dcp_world_size {inputs.decode_context_parallel_size}.")
    return tokens, concurrency, per_request


def _worker_groups(grouping: _Grouping, worker: Sequence[int], size: int, ctx: _Context) -> tuple[KvGroup, ...]:
    """One worker's groups: its layers of each, the padding slots, and blocks per request."""
    owned = set(worker)
    groups = []
    for spec, members in grouping.groups:
        mine = tuple(i for i in members if i in owned)
        padding = 0 if grouping.uniform_type else size - len(mine)
        groups.append(KvGroup(spec.kind, spec.span, mine, padding, spec.block_size,
                              spec.blocks_per_request(ctx.max_model_len, ctx.bound)))
    return tuple(groups)


def _plan_v0(layers, budgets, workers, block_size, max_model_len, override, notes) -> KvGroupPlan:
    """V0 (CacheEngine.get_cache_block_size): every attention layer holds max_model_len tokens, whatever
    its window; the block manager only frees blocks that slide out of a uniform window at run time."""
    worker_bytes = [sum(layers[i].page_bytes for i in w) for w in workers]
    own = [max(int(b // wb), 0) if b > 0 else 0 for b, wb in zip(budgets, worker_bytes)]
    blocks = min(own)
    if override is not None:
        blocks = override
    if any(layer.spec_type.windowed for layer in layers):
        notes.append("V0 sizes sliding-window layers as full attention (get_cache_block_size counts every layer)")
    tokens = blocks * block_size
    fits = blocks > 0 and max_model_len <= tokens
    needed = ceil_div(max_model_len, block_size) * worker_bytes[0]
    kind = MLA.kind if all(issubclass(layer.spec_type, MLA) for layer in layers) else FullAttention.kind
    group = KvGroup(kind, None, tuple(workers[0]), 0, block_size, ceil_div(max_model_len, block_size))
    return KvGroupPlan(
        num_blocks=blocks, block_bytes=worker_bytes[0], groups=(group,),
        blocks_per_request=ceil_div(max_model_len, block_size), kv_cache_tokens=tokens,
        max_concurrency=tokens / max_model_len, log_lines=(), notes=tuple(notes), hybrid=False,
        in_flight_tokens=0, fits=fits, fit_needed_bytes=needed, fit_available_bytes=min(budgets),
        estimated_max_model_len=tokens, worker_block_bytes=tuple(worker_bytes), worker_num_blocks=tuple(own),
    )


def _fit_check(created, specs, groupings, workers, budgets, worker_bytes, sizes, ctx: _Context,
               block_size: int) -> tuple[bool, int, int, int]:
    """(fits, needed bytes, bytes compared with, estimated max_model_len) of the release's check."""
    version = ctx.version
    mode = rule(version, "fit_check")

    def needed_for(w: int, length: int) -> int:
        if mode == "per-layer":
            # check_enough_kv_cache_memory on the specs as created (before unification): sliding layers
            # count their window even when the hybrid manager is off
            return sum(created[i].max_memory_bytes(length, ctx.bound) for i in workers[w])
        grouping = groupings[w]
        if grouping.uniform_type:
            return sum(specs[i].max_memory_bytes(length, ctx.bound) for i in grouping.groups[0][1])
        if rule(version, "fit_per_worker_groups"):
            size, page = sizes[w], grouping.groups[0][0].page_bytes
        else:  # 0.14-0.16: global groups, full group size
            size, page = grouping.group_size, grouping.groups[0][0].page_bytes
            if len(grouping.groups) == 1:
                size = len(grouping.groups[0][1])
        if mode == "first-group":
            blocks = grouping.groups[0][0].blocks_per_request(length, ctx.bound)
        else:
            blocks = sum(spec.blocks_per_request(length, ctx.bound) for spec, _ in grouping.groups)
        return size * page * blocks

    checked = []
    for w, budget in enumerate(budgets):
        against = budget - worker_bytes[w] if rule(version, "null_block_in_fit_check") else budget
        if mode != "per-layer" and not rule(version, "fit_per_worker_groups"):
            against = min(budgets)  # 0.14-0.16 compare with the smallest worker budget
        checked.append((w, against))
    failing = None
    for w, against in checked:
        if budgets[w] <= 0 or needed_for(w, ctx.max_model_len) > against:
            failing = (w, against)
            break
    w, against = failing if failing is not None else checked[0]
    needed = needed_for(w, ctx.max_model_len)
    estimate = _estimate_max_len(lambda length: needed_for(w, length), against, ctx.max_model_len)
    return failing is None, needed, against, estimate


def _estimate_max_len(needed_for, available: int, max_model_len: int) -> int:
    """estimate_max_model_len: binary search over [1, max_model_len] for the longest length that fits."""
    if needed_for(1) > available:
        return 0
    left, right, best = 1, max_model_len, 1
    while left <= right:
        middle = (left + right) // 2
        if needed_for(middle) <= available:
            best, left = middle, middle + 1
        else:
            right = middle - 1
    return best


