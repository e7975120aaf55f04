"""KV-cache groups of hybrid-attention models: sliding window, chunked local and full attention layers
sharing one block pool, release by release (design/vllm-memory.md §3.2-§3.4).

From the layers one worker holds and the bytes it has for its KV cache, `plan_kv_groups` says what the
release allocates and logs: the groups (kind, layers, padding layers), the bytes one block id costs,
the number of blocks, how many blocks one `max_model_len` request needs, "GPU KV cache size: N tokens",
"Maximum concurrency for L tokens per request: X.XXx", the extra lines it prints (padding layers,
hybrid manager disabled) and whether the startup check "one full request must fit" passes.

`attention_layers_from_facts` builds the layer list from the ModelSpec's attention facts (model/attention.py
reads each family's keys: Gemma 2/3, gpt-oss, Mistral/Llama/Phi-3 windows, Llama 4 chunked attention, MLA,
Gemma 3n / Gemma 4 KV sharing) with this release's reading of Qwen2 `use_sliding_window`/`max_window_layers`,
and `sliding_window_max_len_cap` says when a release disables interleaved sliding windows and caps
max_model_len to the window instead.

Pages of different sizes are brought to the largest (unify_kv_cache_spec_page_size): a divisor by raising
its block size, otherwise padded where the release pads that kind (`_to_page`). A KV-shared layer takes
no page; it is listed with its target's group.

Everything is a pure function of plain values. The release boundaries live in releases.RULE_CHANGES
(section "KV-cache groups"; one row per change, with the wheel it was read from).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from ...errors import EngineRefused
from ...model.attention import AttentionFacts
from ...model.hybrid import MixerFacts
from ...units import ceil_div
from .kv_specs import (KINDS, MLA, SPEC_TYPES, ChunkedLocal, CrossAttention, FullAttention, KvSpec, RequestBound,
                       SlidingWindow)
from . import releases
from .releases import release

Version = tuple[int, int, int]


@lru_cache(maxsize=256)
def _rules(version: Version, engine: str) -> dict[str, tuple[object, str]]:
    return {name: (value, source) for name, value, source in release(version, engine).rules}


def rule(version: Version | None, name: str, engine: str = "v1") -> object:
    """The value of one rule of releases.RULE_CHANGES at `version` (None: the newest), by default on
    the V1 path (the KV-cache manager is V1's)."""
    return _rules(tuple(version or releases.NEWEST_KNOWN), engine)[name][0]


def rule_source(version: Version | None, name: str, engine: str = "v1") -> str:
    return _rules(tuple(version or releases.NEWEST_KNOWN), engine)[name][1]


class KvLayoutRefusal(EngineRefused, NotImplementedError):
    """A KV layout the release itself refuses at startup (vLLM raises NotImplementedError or asserts while
    grouping the layers: kv_cache_utils.py get_kv_cache_config / unify_kv_cache_spec_page_size)."""

    engine_label = "vLLM"


class KvSpecRefusal(EngineRefused, ValueError):
    """A KV configuration the release refuses with a ValueError of its own (the message is vLLM's)."""

    engine_label = "vLLM"


class KvNotModelledError(NotImplementedError, ValueError):
    """A KV layout this tool does not size yet (bad input for the command line: exit 2, not a crash)."""


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer on one rank, as callers describe it; `spec(block_size)` gives its typed spec
    (kv_specs.py: one class per kind).

    kind: "full", "sliding", "chunked_local" (Llama 4 local layers), "mla", "mamba" (a Mamba /
        linear-attention layer: one recurrent state per request, MambaSpec) or "cross" (an encoder-decoder
        cross-attention layer, V1 CrossAttentionSpec from 0.10.2: it caches the encoder's tokens).
    page_bytes: one block of this layer on this rank at the configured block size (K+V, or the MLA latent);
        for "mamba" the unpadded state (sum of prod(shape) x dtype over its tensors), independent of block size.
    sliding_window: the window (sliding) or the chunk (chunked_local) in tokens; for "cross" the encoder
        tokens one request caches (max_num_encoder_input_tokens, Whisper's max_source_positions); None otherwise.
    kv_sharing_target: index (in the same layer list) of an earlier layer whose KV cache this one reads
        (kv_sharing_target_layer_name: Gemma 3n, Gemma 4 E2B / E4B); such a layer takes no page.
    """

    kind: str
    page_bytes: int
    sliding_window: int | None = None
    kv_sharing_target: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown attention kind {self.kind!r} (one of {', '.join(KINDS)})")
        if self.page_bytes <= 0:
            raise ValueError("page_bytes must be positive")
        if self.spec_type.needs_span and not self.sliding_window:
            raise ValueError(f"a {self.kind} layer needs its window")

    @property
    def spec_type(self) -> type[KvSpec]:
        return SPEC_TYPES[self.kind]

    def spec(self, block_size: int) -> KvSpec:
        """The layer's spec at `block_size` (its page is given at that size)."""
        return self.spec_type.of(self.page_bytes, block_size, self.sliding_window)


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


# --- Mamba: attention block size raised, Mamba page padded -------------------------------------------------


@dataclass(frozen=True)
class MambaBlockSizing:
    block_size: int  # attention block size after the raise
    attention_page_bytes: int  # one attention layer's page at that block size
    mamba_page_bytes: int  # unpadded state page
    padded_page_bytes: int  # the Mamba page as allocated (== attention page when there is attention)
    mamba_block_size: int  # MambaSpec.block_size: max_model_len ("none"), block size ("align" / "all")
    log_lines: tuple[str, ...]


def mamba_block_sizing(attention_page_per_token: int | None, mamba_page_bytes: int, block_size: int,
                       max_model_len: int, version: Version, *, mla: bool = False, cutlass_mla: bool = False,
                       mamba_cache_mode: str = "none", mamba_chunk_size: int | None = None) -> MambaBlockSizing:
    """HybridAttentionMambaModelConfig.verify_and_update_config (models/config.py 0.10.1-0.18;
    platforms/interface.py from 0.20): attention block size = alignment x cdiv(mamba_page, alignment x
    attention bytes per token) when the configured one is smaller ("all" mode: a multiple of
    lcm(mamba chunk, alignment) covering the state), then the Mamba page padded to the attention page."""
    version = tuple(version)  # type: ignore[assignment]
    lines: list[str] = []
    if not attention_page_per_token:  # attention-free: nothing to align
        mamba_block = block_size if mamba_cache_mode in ("align", "all") else max_model_len
        return MambaBlockSizing(block_size, 0, mamba_page_bytes, mamba_page_bytes, mamba_block, ())
    alignment = 16
    if mla and rule(version, "mamba_mla_alignment"):
        alignment = 128 if cutlass_mla else 64
    if mamba_cache_mode == "all":
        from math import lcm
        chunk = lcm(int(mamba_chunk_size or 256), alignment)
        needed = chunk * ceil_div(ceil_div(mamba_page_bytes, attention_page_per_token), chunk)
    else:
        needed = alignment * ceil_div(mamba_page_bytes, alignment * attention_page_per_token)
    if block_size < needed:
        block_size = needed
        lines.append(f"Setting attention block size to {block_size} tokens to ensure that attention page size is "
                     ">= mamba page size.")
    attention_page = block_size * attention_page_per_token
    padded = mamba_page_bytes
    if attention_page > mamba_page_bytes:
        padded = attention_page
        lines.append(f"Padding mamba page size by {100 * (attention_page - mamba_page_bytes) / mamba_page_bytes:.2f}% "
                     "to ensure that mamba page size and attention page size are exactly equal.")
    mamba_block = block_size if mamba_cache_mode in ("align", "all") else max_model_len
    return MambaBlockSizing(block_size, attention_page, mamba_page_bytes, padded, mamba_block, tuple(lines))


def _apply_mamba(layers: Sequence[AttentionLayer], block_size: int, max_model_len: int, version: Version,
                 mamba_cache_mode: str, mamba_chunk_size: int | None, cutlass_mla: bool
                 ) -> tuple[list[AttentionLayer], MambaBlockSizing]:
    attention = [layer for layer in layers if not layer.spec_type.recurrent]
    mamba_pages = {layer.page_bytes for layer in layers if layer.spec_type.recurrent}
    if len(mamba_pages) > 1:
        raise KvNotModelledError("Mamba layers with different state sizes are not sized")
    per_token = None
    if attention:
        # the platform sizes from the model's own attention (the first layers; a draft model's come last);
        # other pages are unified with it later (_unify_pages)
        per_token = attention[0].page_bytes // block_size
    sizing = mamba_block_sizing(per_token, mamba_pages.pop(), block_size, max_model_len, version,
                                mla=any(issubclass(layer.spec_type, MLA) for layer in attention),
                                cutlass_mla=cutlass_mla,
                                mamba_cache_mode=mamba_cache_mode, mamba_chunk_size=mamba_chunk_size)
    out = [replace(layer, page_bytes=sizing.padded_page_bytes) if layer.spec_type.recurrent
           else replace(layer, page_bytes=layer.page_bytes // block_size * sizing.block_size) for layer in layers]
    return out, sizing


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


# --- layers from the ModelSpec's attention facts (model/attention.py) --------------------------------------


class SlidingWindowRefusal(ValueError):
    """vLLM refuses this sliding-window layout (message as that release words it)."""


def layer_kinds(attention: AttentionFacts, *, version: Version | None = None,
                disable_sliding_window: bool = False) -> list[tuple[str, int | None]]:
    """(kind, window) per layer as vLLM's model code builds its attention layers: the checkpoint's own
    layout, except Qwen2-style windows, which each release reads its own way (_qwen_layers)."""
    n = attention.num_layers
    if attention.mla_latent is not None:
        return [("mla", None)] * n
    if disable_sliding_window:
        return [("full", None)] * n
    if attention.max_window_layers_rule:
        return _qwen_layers(attention, version)
    return list(attention.layers)


def _qwen_layers(attention: AttentionFacts, version: Version | None) -> list[tuple[str, int | None]]:
    n, window = attention.num_layers, attention.window
    if not attention.use_sliding_window or not window:
        return [("full", None)] * n  # the config carries a window it does not use
    mwl = attention.max_window_layers if attention.max_window_layers is not None else n
    layers_rule = rule(version, "qwen2_max_window_layers")
    if layers_rule == "first-layers":
        return [("sliding", int(window)) if i < mwl else ("full", None) for i in range(n)]
    mixed = {"refuse": True, "refuse-unless-all": mwl != n, "refuse-if-some": 0 < mwl < n}[layers_rule]
    if mixed:
        raise SlidingWindowRefusal(
            "Sliding window for some but all layers is not supported. This model uses sliding window but "
            f"`max_window_layers` = {mwl} is less than `num_hidden_layers` = {n}. Please open an issue to discuss "
            "this feature.")
    # vLLM then gives every layer cache_config.sliding_window
    return [("sliding", int(window))] * n


def attention_layers_from_facts(attention: AttentionFacts, tp: int, block_size: int, dtype_bytes: int, *,
                                version: Version | None = None,
                                disable_sliding_window: bool = False) -> list[AttentionLayer]:
    """The attention layers on one tensor-parallel rank, with their page bytes.

    Page = 2 (K and V) x block_size x KV heads per rank x head_dim x dtype_bytes, KV heads per rank =
    max(1, kv_heads // tp); MLA: one latent of kv_lora_rank + qk_rope_head_dim, the same on every rank.
    `version` picks release-specific Qwen2 rules (None = the newest); SlidingWindowRefusal when vLLM refuses.
    """
    kinds = layer_kinds(attention, version=version, disable_sliding_window=disable_sliding_window)
    if attention.mla_latent is not None:
        page = block_size * attention.mla_latent * dtype_bytes
    else:
        page = 2 * block_size * max(1, attention.kv_heads // tp) * attention.head_dim * dtype_bytes
    return [AttentionLayer(kind, page, window, target)
            for (kind, window), target in zip(kinds, attention.kv_sharing_targets)]


# --- max_model_len capped to the window -----------------------------------------------------------------


def sliding_window_max_len_cap(attention: AttentionFacts, version: Version, engine: str,
                               attention_backend: str | None = None,
                               disable_sliding_window: bool = False) -> tuple[int | None, str | None]:
    """(cap, warning) when the release disables interleaved sliding windows and caps max_model_len to the
    window (ModelConfig.__init__ -> _get_and_verify_max_len), else (None, None).

    0.5.1-0.6.2: Gemma 2 always; 0.6.3-0.6.4: Gemma 2 or a list of windows, always; 0.6.5-0.7.0 only with
    VLLM_ATTENTION_BACKEND=XFORMERS, 0.7.2-0.10.x with XFORMERS or FLASHINFER (V0 only from 0.10.1);
    --disable-sliding-window caps in every release.
    """
    model_type = attention.model_type
    smallest = attention.smallest_window
    if smallest is None:
        return None, None
    if disable_sliding_window:
        return smallest, None
    mode = rule(version, "interleaved_window_cap", engine)
    if mode == "never":
        return None, None
    backend = (attention_backend or "").upper()
    if mode == "gemma2":
        if model_type != "gemma2":
            return None, None
        return smallest, ("Gemma 2 uses sliding window attention for every odd layer, which is currently not "
                          "supported by vLLM. Disabling sliding window and capping the max length to the sliding "
                          f"window size ({smallest}).")
    if not _interleaved(attention, version):
        return None, None
    if mode == "always":
        return smallest, (f"{model_type} has interleaved attention, which is currently not supported by vLLM. "
                          "Disabling sliding window and capping the max length to the sliding window size "
                          f"({smallest}).")
    if backend not in rule(version, "interleaved_window_backends", engine):  # type: ignore[operator]
        return None, None
    return smallest, (f"{model_type} has interleaved attention, which is currently not supported by the {backend} "
                      "backend. Disabling sliding window and capping the max length to the sliding window size "
                      f"({smallest}).")


def _interleaved(attention: AttentionFacts, version: Version) -> bool:
    """Whether the release counts this model's sliding windows as interleaved with full attention."""
    model_type = attention.model_type
    detection = rule(version, "interleaved_window_detection")
    if detection == "layer-types":
        return ({"full_attention", "sliding_attention"} <= set(attention.layer_types)
                or model_type in ("gemma2", "gemma3_text"))
    types = rule(version, "interleaved_window_types")
    interleaved = isinstance(attention.window, tuple) or model_type in types  # type: ignore[operator]
    if detection == "pattern":
        interleaved = interleaved or attention.sliding_window_pattern is not None or model_type == "gemma2"
    return interleaved


# --- Mamba / linear-attention hybrids from the ModelSpec's mixer facts ------------------------------------


def default_mamba_cache_mode(architecture: str, version: Version, enable_prefix_caching: bool | None = None) -> str:
    """The mamba_cache_mode a hybrid ends up with in V1 (--mamba-cache-mode left at "none"):

    - before 0.11.2 prefix caching is forced off for hybrids (HybridAttentionMambaModelConfig): "none";
    - prefix caching defaults to off for hybrids until 0.25 (ModelConfig.is_prefix_caching_supported:
      attn_type "hybrid" -> False; 0.11.2 arg_utils: `not model_config.is_hybrid`) and on from 0.26;
    - with it on: 0.11.2-0.14 "all" when the model supports Mamba prefix caching, otherwise prefix caching
      is switched off again ("none"); 0.15.1+ MambaModelConfig: "all" if supported else "align"
      (models/config.py); 0.28+ "none" becomes "align" for every hybrid."""
    if "all" not in rule(version, "mamba_cache_modes"):  # type: ignore[operator]
        return "none"
    enabled = enable_prefix_caching
    if enabled is None:
        enabled = rule(version, "hybrid_prefix_caching_default")
    if not enabled:
        return "none"
    if_supported, otherwise = rule(version, "mamba_prefix_cache_mode")  # type: ignore[misc]
    supported = architecture in rule(version, "mamba_prefix_caching_architectures")  # type: ignore[operator]
    return if_supported if supported else otherwise


def hybrid_attention_layers(mixer: MixerFacts, tp: int, block_size: int, kv_dtype_bytes: int, model_dtype: str, *,
                            mamba_cache_dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto",
                            num_speculative_tokens: int = 0,
                            ) -> tuple[list[AttentionLayer], list[tuple[int, ...]]]:
    """The KV layers of a Mamba / linear-attention hybrid on one TP rank, and for each decoder layer the
    indices of its entries (none for Nemotron-H MLP / MoE layers, two for Falcon-H1's parallel attention +
    Mamba2), so a caller can split them by pipeline stage.

    Attention pages at `block_size` (2 x KV heads per rank x head_dim x kv_dtype_bytes per token); Mamba pages
    unpadded (mamba_state.py); plan_kv_groups raises the block size and pads them per release."""
    from ...model.hybrid import HybridConfigError
    from .mamba_state import mamba_state

    if mixer.attention_shape is None:
        raise HybridConfigError(mixer.problem or "hybrid config without an attention shape")
    kv_heads, head_dim = mixer.attention_shape
    attention_page = 2 * block_size * max(1, kv_heads // tp) * head_dim * kv_dtype_bytes
    state = mamba_state(mixer, tp, model_dtype, mamba_cache_dtype=mamba_cache_dtype,
                        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
                        num_speculative_tokens=num_speculative_tokens)
    layers: list[AttentionLayer] = []
    per_decoder_layer: list[tuple[int, ...]] = []
    for kind in mixer.layers:
        mine = []
        if "attention" in kind:
            mine.append(len(layers))
            layers.append(AttentionLayer("full", attention_page))
        if "mamba" in kind:
            mine.append(len(layers))
            layers.append(AttentionLayer("mamba", state.page_bytes))
        per_decoder_layer.append(tuple(mine))
    return layers, per_decoder_layer
