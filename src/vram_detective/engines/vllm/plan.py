"""Chain the rules of one vLLM release into a Breakdown: weights per rank -> profile peak ->
non-torch -> CUDA graphs -> KV budget -> blocks, tokens, concurrency (design/vllm-memory.md §11)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...breakdown import Breakdown, Component, EngineFigure, RankFigures, StartupFailure
from .devices import devices
from ...hardware import Gpu
from ...model.spec import ModelSpec
from ...model.dtypes import DTYPE_BYTES
from ...units import GIB, MIB
from . import allocator, kv_cache, kv_groups, profile, speculative
from .kv_plan import attention_layers, plan_kv, v0_mamba_cache
from .logs.lines import LogFigures, format_gib, log_lines
from .releases import Release, release as release_rules
from .settings import EngineSettings, resolve_settings
from .weights import Inventory, Shard, pipeline_layer_counts
from .weights_plan import (WeightsPlan, _engine_rope_rows, _loaded_inventory, _lora_slots, explain_weights, gguf_inventory,
                           plan_weights, resident_weights, weights_component, weights_whatif)

def budget_bytes(total: int, utilization: float, release: Release, ceil=math.ceil, trunc=int) -> int:
    """requested_memory = total x utilization, rounded up from the release that rounds it (request_memory_ceil);
    the advisor's sweep passes numpy's ceil and trunc for arrays."""
    product = total * utilization
    return ceil(product) if release["request_memory_ceil"] else trunc(product)


def stage_profile(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int, is_last_stage: bool,
                  stage_layers: int, staged_bytes: int = 0,
                  gpu: Gpu | None = None) -> tuple[profile.ProfileEstimate, profile.GraphEstimate]:
    """One pipeline stage's profiled activation peak and CUDA-graph pool: the model's own (profile.py), a
    speculative drafter's share on the last stage, and a CPU-offloaded layer copied in (`staged_bytes`).
    plan() and the advisor's sweep both call this, so they cannot drift apart."""
    peak = profile.activation_peak(spec, settings, release, dtype_bytes, is_last_stage, gpu)
    drafter = speculative.drafter_profile(spec, settings, release, dtype_bytes) if is_last_stage \
        else speculative.DrafterProfile(0, 0, 0, "")
    if drafter.peak_bytes > peak.activation_peak_bytes:
        peak = replace(peak, activation_peak_bytes=drafter.peak_bytes, peak_phase=drafter.reason)
    if drafter.buffer_bytes:
        peak = replace(peak, activation_peak_bytes=peak.activation_peak_bytes + drafter.buffer_bytes,
                       peak_phase=peak.peak_phase + " + the proposer's input buffers")
    if staged_bytes:
        peak = replace(peak, activation_peak_bytes=peak.activation_peak_bytes + staged_bytes,
                       peak_phase=peak.peak_phase + " + one CPU-offloaded layer copied in")
    workspace, phrase = profile.profile_workspaces(gpu, release)
    if workspace:
        peak = replace(peak, activation_peak_bytes=peak.activation_peak_bytes + workspace,
                       peak_phase=peak.peak_phase + phrase)
    return peak, profile.cuda_graphs(stage_layers, settings, release, drafter.graph_layers, gpu)


def batched_token_weight_bytes(spec: ModelSpec, settings: EngineSettings, stage: int) -> int:
    """Bytes per max_num_batched_tokens token that a stage's weights figure holds (Qwen3-VL's deepstack input
    buffers on the first stage, DeepSeek-V3.2's top-k index buffer): non-zero tells the sweep to rebuild weights
    per value."""
    per_token = 0
    if spec.mla is not None and spec.mla.indexer_topk:
        per_token += spec.mla.indexer_topk * 4  # DeepSeek-V3.2's topk_indices_buffer, every stage
    if not stage and spec.vision is not None and spec.vision.deepstack_layers:
        per_token += spec.vision.deepstack_layers * spec.hidden_size * DTYPE_BYTES[settings.dtype]
    return per_token


@dataclass(frozen=True)
class _Stage:
    """One pipeline stage's rank as plan() sizes it."""
    inventory: Inventory
    weights_plan: WeightsPlan
    figures: RankFigures
    peak: profile.ProfileEstimate
    graphs: profile.GraphEstimate
    allocator_bytes: int
    offloaded: int
    mamba_cache: tuple[int, str]  # V0's Mamba state cache inside the profiled peak (bytes, reason)


def plan(spec: ModelSpec, gpu: Gpu, user_settings: dict, version, gguf_checkpoint=None) -> Breakdown:
    settings, release = resolve_settings(user_settings, spec, gpu, release_rules, version)
    spec = _engine_rope_rows(spec, settings)
    total = gpu.cuda_total_bytes
    budget = budget_bytes(total, settings.gpu_memory_utilization, release)
    layer_counts = pipeline_layer_counts(spec.num_layers, settings.pipeline_parallel_size,
                                         bool(release["pp_remainder_to_last"]))
    attention, workers = attention_layers(spec, settings, release, layer_counts)
    non_torch_inside, non_torch_outside, non_torch_reason = _non_torch(gpu, settings, release, spec)
    stages = _stages(spec, gpu, settings, release, layer_counts, budget, non_torch_inside, gguf_checkpoint)
    budgets = [stage.figures.kv_cache_bytes for stage in stages]
    kv, settings, auto_fit_line = _kv_plan(attention, workers, budgets, settings, release)
    # the block size the attention groups really use (raised for Mamba hybrids, forced for MLA backends)
    block_size = max((group.block_size for group in kv.groups if group.kind != "mamba"), default=settings.block_size)
    own_blocks = kv.worker_num_blocks or (kv.num_blocks,) * len(stages)
    override_allocated = _override_allocated(settings, release)
    ranks = [_rank_pool(stage.figures, kv, own_blocks[i], i, override_allocated) for i, stage in enumerate(stages)]
    first = stages[0]
    rank0, peak, graphs, available = ranks[0], first.peak, first.graphs, first.figures.kv_cache_bytes
    cpu_blocks = int(settings.swap_space_gib * GIB // kv.block_bytes) if settings.engine == "v0" else 0
    failure = (_free_memory_failure(gpu, settings, release)
               or _startup_failure(spec, settings, release, kv, ranks, total, layer_counts[0], auto_fit_line)
               or _sampler_warmup_failure(spec, gpu, settings, release, ranks[-1], stages[-1].graphs,
                                          non_torch_outside, total))

    graph_budgeted = bool(release["cuda_graph_subtracted"])
    pool_bytes = kv.pool_bytes if available > 0 or override_allocated else 0
    components = _budget_tree(total, budget, settings, release, spec, first.inventory, first.weights_plan,
                              first.allocator_bytes, first.offloaded, peak, non_torch_inside, non_torch_reason, graphs,
                              graph_budgeted, pool_bytes, kv, first.mamba_cache,
                              _unused_by_rank0(ranks[0], kv.num_blocks, available))
    outside = _outside_budget(non_torch_outside, graphs, graph_budgeted)
    smi_mib = nvidia_smi_used_mib(total, settings.engine, rank0.weights_bytes + first.mamba_cache[0] + non_torch_inside
                                  + pool_bytes + non_torch_outside + graphs.bytes,
                                  peak.activation_peak_bytes)
    # vLLM's profiled "activation peak" holds the V0 Mamba state cache (allocated inside the profile run)
    logged_peak = peak.activation_peak_bytes + first.mamba_cache[0]
    figures = _log_figures(total, settings, rank0.weights_bytes, logged_peak, non_torch_inside, available, kv,
                           cpu_blocks, graphs)
    lines = _startup_lines(release, figures, kv.log_lines + ((auto_fit_line,) if auto_fit_line else ()), failure,
                           max(rank.weights_bytes for rank in ranks) <= total)
    return Breakdown(
        model=spec.name, gpu_name=gpu.name, total_gpu_bytes=total, engine_name="vllm", engine_label="vLLM",
        engine_version=release.label, engine_variant=release.engine.upper(),
        settings=settings.as_settings(), components=components, weights_bytes=rank0.weights_bytes,
        kv_cache_bytes=pool_bytes if override_allocated and available <= 0 else available,
        kv_bytes_per_token=kv.block_bytes // block_size, kv_cache_tokens=kv.kv_cache_tokens,
        max_concurrency=kv.max_concurrency, max_model_len=settings.max_model_len,
        nvidia_smi_used_mib=smi_mib, outside_budget=outside, log_lines=lines,
        engine_figures=_engine_figures(release, logged_peak, non_torch_inside, graphs, graph_budgeted, budget,
                                       kv.num_blocks, cpu_blocks, block_size),
        weights_explained=explain_weights(first.inventory, first.weights_plan, settings.dtype, first.allocator_bytes,
                                          first.offloaded),
        weights_whatif=weights_whatif(first.inventory, settings.dtype),
        notes=tuple(kv.notes) + speculative.notes(settings.speculative), failure=failure,
        per_rank=tuple(ranks) if len(ranks) > 1 else (),
        devices=devices(stages, ranks, settings, total, non_torch_inside, non_torch_outside,
                        lambda resident, activation: nvidia_smi_used_mib(total, settings.engine, resident, activation)),
    )


def _non_torch(gpu: Gpu, settings: EngineSettings, release: Release, spec: ModelSpec) -> tuple[int, int, str]:
    """(non-torch memory inside the budget, outside it, why): V1 before 0.9.1 also reads other processes' memory
    as its own non-torch memory."""
    inside, outside, reason = profile.non_torch(gpu, settings, release, spec)
    if gpu.in_use_bytes and settings.engine == "v1" and release["v1_non_torch_counts_other_processes"]:
        inside += gpu.in_use_bytes  # the rule's source: other processes' memory read as non-torch
        reason += f"; + {gpu.in_use_bytes / GIB:.2f} GiB other processes hold (counted before 0.9.1)"
    return inside, outside, reason


def _log_figures(total: int, settings: EngineSettings, weights: int, logged_peak: int, non_torch_inside: int,
                 available: int, kv, cpu_blocks: int, graphs) -> LogFigures:
    """The figures the release's startup lines print (rank 0's)."""
    return LogFigures(
        total_bytes=total, utilization=settings.gpu_memory_utilization, weights_bytes=weights,
        activation_bytes=logged_peak, non_torch_bytes=non_torch_inside,
        context_bytes=profile.CUDA_CONTEXT, kv_bytes=available, num_gpu_blocks=kv.num_blocks,
        num_cpu_blocks=cpu_blocks, kv_tokens=kv.kv_cache_tokens, max_concurrency=kv.max_concurrency,
        max_model_len=settings.max_model_len, graph_bytes=graphs.bytes, graph_estimate_bytes=graphs.estimate_bytes,
        graphs_captured=not settings.enforce_eager,
    )


def _stages(spec: ModelSpec, gpu: Gpu, settings: EngineSettings, release: Release, layer_counts: tuple[int, ...],
            budget: int, non_torch_inside: int, gguf_checkpoint=None) -> list[_Stage]:
    """Each pipeline stage's rank: what it loads (the drafter inside the same "Model loading took", §4), its profiled
    peak and graphs, and the KV budget left (or --kv-cache-memory-bytes)."""
    weights_plan = plan_weights(spec, settings, gpu, release)
    lora = _lora_slots(settings, release)
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    to_last = bool(release["pp_remainder_to_last"])
    stages = []
    for stage in range(pp):
        shard = Shard(tp, stage, pp, settings.enable_expert_parallel, to_last, settings.data_parallel_size)
        inventory = _loaded_inventory(spec, settings, release, gpu, weights_plan, lora, shard)
        if gguf_checkpoint is not None:
            inventory = gguf_inventory(inventory, gguf_checkpoint, spec, settings.dtype, shard, layer_counts[stage])
            weights_plan = replace(weights_plan, stored_format="gguf",
                                   reason="GGUF blocks as stored in the file (embedding included); "
                                          "norms and plain tensors in the model dtype")
        weights, allocator_bytes, offloaded = resident_weights(inventory, settings, release)
        staged = allocator.offloaded_layer_bytes(inventory.allocations) if offloaded else 0
        peak, graphs = stage_profile(spec, settings, release, DTYPE_BYTES[settings.dtype], shard.is_last_stage,
                                     layer_counts[stage], staged, gpu)
        graph_subtracted = graphs.estimate_bytes if release["cuda_graph_subtracted"] else 0
        mamba_cache = v0_mamba_cache(spec, settings, release, sum(layer_counts[:stage]), layer_counts[stage])
        if settings.kv_cache_memory_bytes is not None:
            available = settings.kv_cache_memory_bytes
        else:
            available = (budget - weights - peak.activation_peak_bytes - mamba_cache[0] - non_torch_inside
                         - graph_subtracted)
        figures = RankFigures(stage * tp, stage, weights, peak.activation_peak_bytes, non_torch_inside,
                              graphs.bytes, available, layer_counts[stage], 0, 0, budget_bytes=budget,
                              other_budgeted_bytes=mamba_cache[0] + graph_subtracted)
        stages.append(_Stage(inventory, weights_plan, figures, peak, graphs, allocator_bytes, offloaded, mamba_cache))
    return stages


def _override_allocated(settings: EngineSettings, release: Release) -> bool:
    """V0 allocates num_gpu_blocks_override blocks even where the profile left no memory (llm_engine.py
    _initialize_kv_caches replaces the profiled count, 0 when none was left; only a count <= 0 is refused,
    worker.py raise_if_cache_size_invalid, 0.9.2); V1 refuses first (kv_cache_utils.py: no available memory)."""
    return (settings.engine == "v0" and settings.num_gpu_blocks_override is not None
            and release["gpu_blocks_override"] == "replace")


def _rank_pool(figures: RankFigures, kv: kv_groups.KvGroupPlan, own_blocks: int, worker: int,
               override_allocated: bool = False) -> RankFigures:
    """One rank's figures with its block size and the pool it really allocates: every rank allocates the
    engine's block count (the minimum over workers, or the override) at its own page (V1 KVCacheConfig per
    worker; V0 CacheEngine), so its own column adds up: available = pool + unused."""
    block_bytes = kv.worker_block_bytes[worker] if kv.worker_block_bytes else kv.block_bytes
    pool = kv.num_blocks * block_bytes if figures.kv_cache_bytes > 0 or override_allocated else 0
    return replace(figures, kv_bytes_per_block=block_bytes, num_blocks_own=own_blocks, kv_pool_bytes=pool)


def _kv_plan(attention, workers, budgets: list[int], settings: EngineSettings,
             release: Release) -> tuple[kv_groups.KvGroupPlan, EngineSettings, str | None]:
    """(the KV plan, the settings it was planned for, the auto-fit line): with --max-model-len -1 (0.15+,
    kv_cache_utils.py _auto_fit_max_model_len) the longest request the smallest pool holds."""
    kv = plan_kv(attention, workers, budgets, settings, release)
    if not settings.auto_fit_max_model_len:
        return kv, settings, None
    fitting = kv.estimated_max_model_len
    if 0 < fitting < settings.max_model_len:
        line = (f"Auto-fit max_model_len: reduced from {settings.max_model_len} to {fitting} to fit in "
                f"available GPU memory ({format_gib(min(budgets))} GiB available for KV cache)")
        settings = replace(settings, max_model_len=fitting)
        return plan_kv(attention, workers, budgets, settings, release), settings, line
    if fitting > 0:
        return kv, settings, (f"Auto-fit max_model_len: full model context length {settings.max_model_len} fits in "
                              "available GPU memory")
    return kv, settings, None


def _free_memory_failure(gpu: Gpu, settings: EngineSettings, release: Release) -> StartupFailure | None:
    """V1's first check, before any weight loads: the free memory (what other processes hold is gone) must cover
    total x gpu_memory_utilization (the rule's source); vLLM's message, rounded as it rounds (2 decimals)."""
    if settings.engine != "v1" or not release["v1_startup_free_check"] or not gpu.in_use_bytes:
        return None
    requested = math.ceil(gpu.cuda_total_bytes * settings.gpu_memory_utilization)
    if gpu.free_bytes >= requested:
        return None
    return StartupFailure(
        f"Free memory on device ({round(gpu.free_bytes / GIB, 2)}/{round(gpu.cuda_total_bytes / GIB, 2)} GiB) on "
        f"startup is less than desired GPU memory utilization ({settings.gpu_memory_utilization}, "
        f"{round(requested / GIB, 2)} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes.", None)


def _startup_failure(spec: ModelSpec, settings: EngineSettings, release: Release, kv: kv_groups.KvGroupPlan,
                     ranks: list[RankFigures], total: int, first_stage_layers: int,
                     auto_fit_line: str | None) -> StartupFailure | None:
    """The error vLLM stops with, in the order it meets them: weights out of memory, auto-fit finding no room,
    the KV pool's checks (V0's raise_if_cache_size_invalid, V1's check_enough_kv_cache_memory)."""
    message = None
    largest = kv.estimated_max_model_len
    min_available = min(rank.kv_cache_bytes for rank in ranks)
    heaviest = max(rank.weights_bytes for rank in ranks)
    if heaviest > total:
        message = (
            f"CUDA out of memory while loading the weights: {heaviest / GIB:.2f} GiB per GPU "
            f"do not fit in {total / GIB:.2f} GiB. Use more GPUs (tensor/pipeline parallel) or a quantized checkpoint."
        )
    elif settings.auto_fit_max_model_len and auto_fit_line is None:
        message = ("Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
                   "token. Try increasing `gpu_memory_utilization`.")
    elif settings.engine == "v0":
        layout = kv_cache.kv_layout(spec, settings.tensor_parallel_size, first_stage_layers, settings.block_size,
                                    settings.kv_cache_dtype_bytes, release)
        message = kv_cache.fit_failure(min_available, kv.num_blocks, layout, settings.max_model_len, release)
        largest = kv.num_blocks * settings.block_size
    elif min_available <= 0:
        message = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                   "initializing the engine.")
    elif not kv.fits:
        message = kv_cache.v1_fit_message(str(release["kv_fit_message"]), settings.max_model_len,
                                          kv.fit_needed_bytes, kv.fit_available_bytes, kv.estimated_max_model_len)
    if message is None and (message := _kv_allocation_failure(kv, ranks, total)):
        largest = 0  # no length helps: the pool's size was given
    return StartupFailure(message, largest or None) if message else None


def _sampler_warmup_failure(spec: ModelSpec, gpu: Gpu, settings: EngineSettings, release: Release, last: RankFigures,
                            graphs: profile.GraphEstimate, non_torch_outside: int, total: int) -> StartupFailure | None:
    """V1's sampler warm-up after graph capture (profile.sampler_warmup_bytes) takes what the KV pool and the graphs
    left free: the budget kept the profile's peak free for it, but graphs captured outside the budget (before 0.20),
    the pool beyond vLLM's estimate, the CUDA context, the kernel's cached rows and the MoE workspace come out of the
    same headroom."""
    if not release["sampler_warmup_checked"] or spec.padded_vocab_size <= 0 or last.kv_pool_bytes <= 0:
        return None
    dtype_bytes = DTYPE_BYTES[settings.dtype]
    need = profile.sampler_warmup_bytes(spec, settings, release, dtype_bytes, gpu)
    kept = (profile.persistent_sampler_bytes(spec, settings, release, gpu) + profile.profile_workspaces(gpu, release)[0]
            + profile.moe_workspace_bytes(spec, settings, release, dtype_bytes))
    free = (total - last.weights_bytes - last.kv_pool_bytes - last.non_torch_bytes - non_torch_outside - graphs.bytes
            - kept)
    if need <= free:
        return None
    requests = min(settings.max_num_seqs, settings.max_num_batched_tokens)
    return StartupFailure(
        f"CUDA out of memory occurred when warming up sampler with {requests} dummy requests. Please try lowering "
        "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine.", None)


def _kv_allocation_failure(kv: kv_groups.KvGroupPlan, ranks: list[RankFigures], total: int) -> str | None:
    """A pool the GPU cannot physically hold: --num-gpu-blocks-override and --kv-cache-memory-bytes replace the
    profiled budget without a check (gpu_worker.py determine_available_memory returns kv_cache_memory_bytes as
    given; kv_cache_utils.py takes num_gpu_blocks_override as the block count), so torch's allocation of the KV
    tensors (initialize_kv_cache_tensors) raises out of memory when they exceed what the weights leave free."""
    for rank in ranks:
        # the profile run itself (a dummy batch of max_num_batched_tokens) must fit next to the weights; a negative
        # budget is otherwise vLLM's own refusal, but a given pool size skips that check
        used = rank.weights_bytes + rank.activation_peak_bytes + rank.non_torch_bytes
        if used > total:
            return (f"CUDA out of memory during the profile run on rank {rank.rank}: weights "
                    f"{rank.weights_bytes / GIB:.2f} GiB + activation peak {rank.activation_peak_bytes / GIB:.2f} GiB + "
                    f"non-torch {rank.non_torch_bytes / GIB:.2f} GiB exceed the GPU's {total / GIB:.2f} GiB.")
    for i, rank in enumerate(ranks):
        block_bytes = kv.worker_block_bytes[i] if i < len(kv.worker_block_bytes) else kv.block_bytes
        pool = kv.num_blocks * block_bytes
        free = total - rank.weights_bytes - rank.non_torch_bytes
        if pool > max(free, 0):
            return (f"CUDA out of memory. Tried to allocate {pool / GIB:.2f} GiB for the KV cache ({kv.num_blocks:,} "
                    f"blocks) on rank {rank.rank}: the GPU has a total capacity of {total / GIB:.2f} GiB of which "
                    f"{max(free, 0) / GIB:.2f} GiB is free after the weights.")
    return None


def _startup_lines(release: Release, figures: LogFigures, extra: tuple[str, ...], failure: StartupFailure | None,
                   loaded: bool) -> tuple[str, ...]:
    """The release's startup lines, the KV plan's own lines before the KV size, and the error that stops it."""
    lines = log_lines(release, figures)
    for line in extra:
        lines = _insert_before(lines, "GPU KV cache size", line)
    if failure is None:
        return lines
    error_type = "ValueError" if loaded and not failure.message.startswith("CUDA out of memory") \
        else "torch.OutOfMemoryError"
    return _lines_before_failure(lines, release, loaded) + (f"{error_type}: {failure.message}",)


def _engine_figures(release: Release, peak: int, non_torch: int, graphs: profile.GraphEstimate, graph_budgeted: bool,
                    budget: int,
                    blocks: int, cpu_blocks: int, block_size: int) -> tuple[EngineFigure, ...]:
    """vLLM's own figures: the budget's terms (worker.py / gpu_worker.py determine_num_available_blocks)
    and the block pool (V0 block manager / V1 KVCacheConfig), labelled as the KV table prints them."""
    swap = f" (+ {cpu_blocks:,} CPU swap blocks)" if cpu_blocks else ""
    return (
        EngineFigure("vllm_version", release.label),
        EngineFigure("engine", release.engine),
        EngineFigure("activation_peak_bytes", peak, schema=("activation_peak_gib",)),
        EngineFigure("non_torch_bytes", non_torch, schema=("non_torch_gib",)),
        EngineFigure("cuda_graph_bytes", graphs.bytes, schema=("cuda_graph_gib",)),
        EngineFigure("cuda_graph_estimate_bytes", graphs.estimate_bytes, schema=("cuda_graph_estimate_gib",)),
        EngineFigure("cuda_graph_budgeted", graph_budgeted),
        EngineFigure("budget_bytes", budget, schema=("requested_memory_gib",)),
        EngineFigure("block_size", block_size, "block size", f"{block_size} tokens"),
        EngineFigure("num_gpu_blocks", blocks, "GPU blocks", f"{blocks:,}{swap}", ("num_gpu_blocks",)),
        EngineFigure("num_cpu_blocks", cpu_blocks, schema=("num_cpu_blocks",)),
    )


def _lines_before_failure(lines: tuple[str, ...], release: Release, loaded: bool) -> tuple[str, ...]:
    """What is printed before the engine raises: V1 checks the KV pool before logging its size, V0
    logs its block counts first; nothing after the failure (no graph capture) is printed."""
    if not loaded:
        return ()
    cut = ("GPU KV cache size", "Maximum concurrency", "Graph capturing") if release.engine == "v1" else (
        "Maximum concurrency", "Graph capturing")
    return tuple(line for line in lines if not line.startswith(cut))


def _insert_before(lines: tuple[str, ...], prefix: str, line: str) -> tuple[str, ...]:
    for index, existing in enumerate(lines):
        if existing.startswith(prefix):
            return lines[:index] + (line,) + lines[index:]
    return lines + (line,)


def _budget_tree(total, budget, settings, release, spec, inventory, weights_plan, allocator_bytes, offloaded, peak,
                 non_torch_inside, non_torch_reason, graphs, graph_budgeted, pool_bytes, kv,
                 mamba_cache: tuple[int, str] = (0, ""), unused: Component | None = None) -> Component:
    """Rank 0's budget (u x T) and what fills it, each with the rule behind it."""
    children = [
        weights_component(inventory, weights_plan, spec, allocator_bytes, offloaded),
        Component("activation_peak", "profile-run activation peak", peak.activation_peak_bytes,
                  f"{peak.peak_phase} peak: {peak.profile_tokens} tokens, {peak.profile_requests} requests "
                  f"(forward {peak.forward_bytes / GIB:.2f} GiB, sampler {peak.sampler_bytes / GIB:.2f} GiB)",
                  "model of the profile run (profile.py)"),
        Component("non_torch", "non-torch memory", non_torch_inside, non_torch_reason),
    ]
    if mamba_cache[0]:
        children.insert(2, Component("mamba_state_cache_v0", "Mamba state cache (V0)", mamba_cache[0], mamba_cache[1],
                                     "model_executor/models/mamba_cache.py (0.7.3-0.10), jamba.py (0.6-0.7.2)"))
    if graph_budgeted:
        children.append(Component("cuda_graphs", "CUDA graph memory (estimated, subtracted)", graphs.estimate_bytes,
                                  graphs.reason, release.source("cuda_graph_subtracted")))
    groups = ", ".join(f"{len(g.layer_indices)} {g.kind}" + (f" (window {g.sliding_window})" if g.sliding_window else "")
                       + (f" + {g.padding_layers} padding" if g.padding_layers else "") for g in kv.groups)
    children.append(Component("kv_cache", "KV cache pool", pool_bytes,
                              f"{kv.num_blocks} blocks x {kv.block_bytes} B; {len(kv.groups)} group(s): {groups}"))
    if unused is not None:
        children.append(unused)
    fixed = _fixed_pool(settings, sum(c.bytes for c in children), budget)
    if fixed:
        # a given pool size replaces what u x T leaves (gpu_worker.py determine_available_memory returns
        # kv_cache_memory_bytes as given, 0.10.2+; kv_cache_utils.py takes num_gpu_blocks_override as the block
        # count): the node is what the parts take, not a budget they fill
        return Component(
            "budget", f"vLLM memory with {fixed} (gpu_memory_utilization {settings.gpu_memory_utilization:g} "
            "does not bound the KV cache)", sum(c.bytes for c in children),
            f"the KV cache is sized by {fixed.split(' ')[0]}, not by what u x T = {budget / GIB:.2f} GiB leaves",
            f"vLLM {release.label} {release.engine.upper()}, gpu_worker.py determine_available_memory", tuple(children))
    return Component(
        "budget", f"vLLM budget: total {total / GIB:.2f} GiB x gpu_memory_utilization {settings.gpu_memory_utilization:g}",
        budget, release.source("budget_era"), f"vLLM {release.label} {release.engine.upper()}, era {release['budget_era']}",
        tuple(children),
    )


def _fixed_pool(settings: EngineSettings, parts: int, budget: int) -> str:
    """The flag that sizes the KV pool instead of the budget ("" when the budget does): --kv-cache-memory-bytes
    always, --num-gpu-blocks-override when its pool takes more than the budget holds."""
    if settings.kv_cache_memory_bytes is not None:
        return f"--kv-cache-memory-bytes {settings.kv_cache_memory_bytes / GIB:.2f} GiB"
    if settings.num_gpu_blocks_override is not None and parts > budget:
        return f"--num-gpu-blocks-override {settings.num_gpu_blocks_override:,}"
    return ""


def _unused_by_rank0(rank0: RankFigures, num_blocks: int, available: int) -> Component | None:
    """Rank 0's available KV memory its pool leaves free because the engine keeps a smaller block count (another
    pipeline stage's, or num_gpu_blocks_override): shown so rank 0's parts add up to its budget."""
    if available <= 0 or num_blocks >= rank0.num_blocks_own or rank0.kv_unused_bytes <= 0:
        return None
    return Component("kv_unused", "KV memory left unused on this rank", rank0.kv_unused_bytes,
                     f"this rank could hold {rank0.num_blocks_own:,} blocks; the engine allocates {num_blocks:,} on "
                     "every rank (the smallest worker's count, or the override)")


def _outside_budget(non_torch_outside: int, graphs, graph_budgeted: bool) -> Component:
    children = [Component("cuda_context", "CUDA context (+ NCCL buffers with several GPUs)", non_torch_outside,
                          "estimate (design/vllm-memory.md §6, §10); outside the budget in this era")]
    if not graph_budgeted and graphs.bytes:
        children.append(Component("cuda_graphs", "CUDA graphs (captured after KV allocation)", graphs.bytes,
                                  graphs.reason + "; not budgeted in this release"))
    elif graph_budgeted and graphs.bytes > graphs.estimate_bytes:
        children.append(Component("cuda_graphs_beyond_estimate", "CUDA graph pool beyond vLLM's estimate",
                                  graphs.bytes - graphs.estimate_bytes,
                                  "capture_model's pool exceeds the estimate subtracted from the budget"))
    return Component("outside_budget", "outside vLLM's budget", sum(c.bytes for c in children),
                     "what nvidia-smi shows beyond the budget", children=tuple(children))


def _round(value) -> int:
    return int(round(value))


def nvidia_smi_used_mib(total: int, engine: str, resident: int, activation: int, minimum=min, rint=_round) -> int:
    """What nvidia-smi shows right after startup (§10): everything resident (weights, non-torch, the KV pool,
    context and graphs). V1's sampler warm-up after graph capture re-reserves the activation buffers; V0 empties
    the cache after profiling and its decode-only warm-up stays small (#7553: eager 21,395 MiB = u x T - peak +
    context). The advisor's sweep passes numpy's minimum and rint for arrays."""
    if engine == "v1":
        resident = resident + activation
    return rint(minimum(resident, total) / MIB)
