"""Chain the rules of one vLLM release into a Breakdown: weights per rank -> profile peak ->
non-torch -> CUDA graphs -> KV budget -> blocks, tokens, concurrency (design/vllm-memory.md §11)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...breakdown import Breakdown, Component, EngineFigure, RankFigures, StartupFailure
from .devices import devices
from ...hardware import Gpu
from ...model.config import ModelSpec
from ...model.dtypes import DTYPE_BYTES
from ...model.quantization import QuantConfig, QuantizationError
from ...units import GIB, MIB
from . import allocator, kv_cache, kv_dtypes, kv_groups, profile, speculative
from .logs.lines import LogFigures, format_gib, log_lines
from .quant_kernels import ONLINE_BNB, ONLINE_FP8, KernelLayout, kernel_for
from .releases import Release, release as release_rules
from .settings import EngineSettings, StartupRefusal, resolve_settings
from .weights import MROPE_POSITIONS_FACTOR, Inventory, LoraSlots, Shard, build_inventory, pipeline_layer_counts

# Names users pass to --quantization -> the checkpoint method they apply to, and whether they force the
# non-Marlin kernel ("you specified quantization=awq explicitly, so forcing awq", awq_marlin.py).
QUANTIZATION_ARGUMENTS = {
    "awq": ("awq", True), "awq_marlin": ("awq", False), "gptq": ("gptq", True), "gptq_marlin": ("gptq", False),
    "marlin": ("gptq", False), "fp8": ("fp8", False), "modelopt": ("modelopt-fp8", False),
    "modelopt_fp4": ("modelopt-fp4", False), "bitsandbytes": ("bitsandbytes", False),
    "compressed-tensors": ("compressed-tensors", False), "compressed_tensors": ("compressed-tensors", False),
    "mxfp4": ("mxfp4", False), "fbgemm_fp8": ("fbgemm-fp8", False),
}
# Methods vLLM can apply to a 16-bit checkpoint at load time.
ONLINE_METHODS = {"fp8": ONLINE_FP8, "bitsandbytes": ONLINE_BNB}
# `--quantization modelopt` serves both ModelOpt FP8 and NVFP4 checkpoints (modelopt.py override logic).
COMPATIBLE_METHODS = {("fp8", "modelopt-fp8"), ("modelopt-fp8", "modelopt-fp4")}
FORCED_LAYOUTS = {"awq": KernelLayout("awq"), "gptq": KernelLayout("gptq", keeps_g_idx=True)}


@dataclass(frozen=True)
class WeightsPlan:
    quant: QuantConfig | None
    kernel: KernelLayout | None
    reason: str
    stored_format: str = ""  # "gguf": the file's block formats are kept on the GPU


def plan_weights(spec: ModelSpec, settings: EngineSettings, gpu: Gpu, release: Release) -> WeightsPlan:
    requested = settings.quantization
    quant = spec.quantization
    if requested:
        requested = requested.lower()
        if requested not in QUANTIZATION_ARGUMENTS:
            raise QuantizationError(f"--quantization {requested} is not sized yet ({', '.join(QUANTIZATION_ARGUMENTS)})")
        method, forces_plain_kernel = QUANTIZATION_ARGUMENTS[requested]
        if quant is None:
            if method not in ONLINE_METHODS:
                raise StartupRefusal(f"Cannot find the config file for {requested}: the checkpoint is not quantized")
            quant = ONLINE_METHODS[method]
        elif quant.method != method and (method, quant.method) not in COMPATIBLE_METHODS:
            raise StartupRefusal(
                f"Quantization method specified in the model config ({quant.method}) does not match the "
                f"quantization method specified in the `quantization` argument ({requested})."
            )
        if forces_plain_kernel:
            return WeightsPlan(quant, FORCED_LAYOUTS[method], f"{quant.describe()}; --quantization {requested} forces the {method} kernel")
    if quant is None:
        return WeightsPlan(None, None, f"unquantized {settings.dtype}")
    if quant.method == "bitsandbytes" and quant.serialized and settings.tensor_parallel_size > 1 and release["bnb_prequant_tp_refused"]:
        # bitsandbytes_loader.py (0.7.0+)
        raise StartupRefusal("Prequant BitsAndBytes models with tensor parallelism is not supported. "
                             "Please try with pipeline parallelism.")
    layout = kernel_for(quant, gpu.compute_capability, release)
    sm = f"sm{gpu.compute_capability[0]}{gpu.compute_capability[1]}"
    reason = f"{quant.describe()} -> {layout.kernel} kernel on {sm}"
    if layout.kernel == "machete":
        reason += " (Machete keeps zero points" + (" as fp16 [K/g, N])" if layout.fp16_zeros else " and g_idx)")
    elif layout.kernel == "fp8_marlin":
        reason += " (no FP8 tensor cores below sm89: weight-only Marlin FP8)"
    if layout.note:
        reason += f"; {layout.note}"
    return WeightsPlan(quant, layout, reason)


def checkpoint_report(spec: ModelSpec, gpu: Gpu, user_settings: dict, version, table):
    """Where the checkpoint's tensors (real headers) and what vLLM holds on the GPU differ."""
    from .weights import checkpoint_vs_gpu

    settings, release = resolve_settings(user_settings, spec, gpu, release_rules, version)
    weights_plan = plan_weights(spec, settings, gpu, release)
    return checkpoint_vs_gpu(table, spec, settings.dtype, quant=weights_plan.quant, kernel=weights_plan.kernel)


def rank_inventories(spec: ModelSpec, gpu: Gpu, user_settings: dict, version,
                     batched_tokens: int | None = None) -> list[tuple[int, Inventory]]:
    """(pipeline stage, inventory of one of its ranks) as plan() builds them, the drafter included: for
    `explain --tensors` and the advisor's sweep (which asks for each batched-token count it needs)."""
    settings, release = resolve_settings(user_settings, spec, gpu, release_rules, version)
    spec = _engine_rope_rows(spec, settings)
    weights_plan = plan_weights(spec, settings, gpu, release)
    lora = _lora_slots(settings, release)
    to_last = bool(release["pp_remainder_to_last"])
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    out = []
    for stage in range(pp):
        shard = Shard(tp, stage, pp, settings.enable_expert_parallel, to_last, settings.data_parallel_size)
        out.append((stage, _loaded_inventory(spec, settings, release, gpu, weights_plan, lora, shard, batched_tokens)))
    return out


def _loaded_inventory(spec: ModelSpec, settings: EngineSettings, release: Release, gpu: Gpu, weights_plan: WeightsPlan,
                      lora: LoraSlots | None, shard: Shard, batched_tokens: int | None = None) -> Inventory:
    """What one rank holds after load_model: its inventory and, on the last stage, the drafter (§4)."""
    inventory = _rank_inventory(spec, settings, release, weights_plan, lora, shard, batched_tokens)
    if settings.speculative is not None and shard.is_last_stage:
        inventory = speculative.with_draft_weights(inventory, spec, settings, release, gpu, weights_plan)
    return inventory


def _rank_inventory(spec: ModelSpec, settings: EngineSettings, release: Release, weights_plan: WeightsPlan,
                    lora: LoraSlots | None, shard: Shard, batched_tokens: int | None = None) -> Inventory:
    """build_inventory with what the release and the settings decide: the attention layers' scale buffers, the
    multimodal RoPE table's rows and the buffers sized by max_num_batched_tokens."""
    mrope = int(release["qwen3_mrope_positions_factor"]) if spec.vision is not None and spec.vision.kind == "qwen3_vl" \
        else MROPE_POSITIONS_FACTOR
    return build_inventory(spec, settings.dtype, shard, weights_plan.quant, weights_plan.kernel, lora,
                           tuple(release["attention_scale_buffers"]), mrope_positions_factor=mrope,
                           batched_tokens=settings.max_num_batched_tokens if batched_tokens is None else batched_tokens,
                           # (absorbed copies follow their layer's device: left out with --cpu-offload-gb)
                           mla_absorbed=kv_cache.mla_latent(spec, release) and bool(release["mla_matrix_absorption"])
                           and not settings.cpu_offload_gb)


def resident_weights(inventory: Inventory, settings: EngineSettings, release: Release) -> tuple[int, int, int]:
    """(the weights figure "Model loading took" reports, its caching-allocator rounding, the bytes left on the CPU
    by --cpu-offload-gb) for one rank's inventory."""
    offloaded = allocator.cpu_offloaded_bytes(inventory.allocations, int(settings.cpu_offload_gb * GIB))
    rounding = allocator.load_overhead(inventory.allocations, int(release["load_max_split_mib"]), offloaded)
    return inventory.total_bytes + rounding - offloaded, rounding, offloaded


def _lora_slots(settings: EngineSettings, release: Release) -> LoraSlots | None:
    if not settings.enable_lora:
        return None
    return LoraSlots(settings.max_loras, settings.max_lora_rank, int(release["lora_extra_vocab"]))


ROLE_LABELS = {
    "embedding": "embeddings", "attention": "attention", "mlp": "MLP", "norm": "norms", "lm_head": "lm_head",
    "quantization metadata": "quantization metadata (scales, zero points, g_idx)", "rotary cache": "rotary cos/sin cache",
    "expert": "MoE experts", "router": "MoE router",
    "vocab padding": "vocabulary padding", "position embedding": "learned position embeddings",
    "allocator rounding": "caching-allocator block rounding",
    "lora": "LoRA adapter slots (--enable-lora)",
    "vision": "vision tower + projector",
    "encoder": "encoder (Whisper: convs, positions, layers)",
    "model buffers": "buffers the model allocates (deepstack inputs, top-k indices)",
    "draft": "speculative decoding drafter (draft model / EAGLE head / MTP layers)",
}


def offload_by_role(inventory: Inventory, offloaded: int) -> dict[str, int]:
    """How much of each role --cpu-offload-gb moved: `offloaded` bytes of decoder-layer parameters
    (allocator.cpu_offloaded_bytes) taken off each role's layer tensors (the groups named "...layers.{a..b}...") in
    proportion (whole layers move, so only a partly moved layer is approximated), then off the other roles should
    the layer tensors not cover it. Never more than a role holds."""
    by_role = inventory.bytes_by_role()
    in_layers: dict[str, int] = {}
    for group in inventory.groups:
        if "layers.{" in group.name:
            in_layers[group.role] = in_layers.get(group.role, 0) + group.bytes
    moved = {role: 0 for role in by_role}
    remaining = offloaded
    rest = {role: by_role[role] - in_layers.get(role, 0) for role in by_role}
    for pool in (in_layers, rest):
        roles = sorted((role for role, amount in pool.items() if amount > 0), key=lambda role: -pool[role])
        total = sum(pool[role] for role in roles)
        take = min(remaining, total)
        if take <= 0:
            continue
        taken = 0
        for index, role in enumerate(roles):
            share = take - taken if index == len(roles) - 1 else take * pool[role] // total
            share = min(share, pool[role], by_role[role] - moved[role])
            moved[role] += share
            taken += share
        remaining -= taken
    return moved


def weights_component(inventory: Inventory, plan: WeightsPlan, spec: ModelSpec, allocator_bytes: int,
                      offloaded: int = 0) -> Component:
    """The weights on the GPU by role; with --cpu-offload-gb each role shows what stayed (no negative term)."""
    by_role = inventory.bytes_by_role()
    moved = offload_by_role(inventory, offloaded) if offloaded > 0 else {}
    by_role["allocator rounding"] = allocator_bytes
    children = []
    for role, label in ROLE_LABELS.items():
        amount = by_role.get(role, 0) - moved.get(role, 0)
        if amount:
            off = moved.get(role, 0)
            children.append(Component(f"weights.{role.replace(' ', '_')}", label, amount,
                                      f"{off / GIB:.2f} GiB of it in CPU memory (--cpu-offload-gb)" if off else ""))
    reason = plan.reason + (", tied embeddings counted once" if spec.tie_word_embeddings else "")
    if offloaded > 0:
        reason += (f"; {offloaded / GIB:.2f} GiB of decoder-layer parameters moved to CPU memory by --cpu-offload-gb "
                   "(models/utils.py maybe_offload_to_cpu, layer by layer)")
    return Component("weights", "model weights", inventory.total_bytes + allocator_bytes - offloaded, reason,
                     "torch allocated bytes across load_model (worker model_runner; §4)", tuple(children))


def explain_weights(inventory: Inventory, plan: WeightsPlan, dtype: str, allocator_bytes: int,
                    offloaded: int = 0) -> tuple[Component, ...]:
    """Walk from parameters x nominal bits / 8 to the real bytes, term by term (each with its share)."""
    by_role = inventory.bytes_by_role()
    by_role["allocator rounding"] = allocator_bytes
    by_role["cpu offload"] = -offloaded
    dtype_bytes = DTYPE_BYTES[dtype]
    nominal_bits = plan.quant.nominal_bits if plan.quant else dtype_bytes * 8
    theory = inventory.parameters * nominal_bits // 8
    steps = [Component("theory", f"theory: {inventory.parameters / 1e9:.3f} B parameters x {nominal_bits} bits / 8", theory,
                       "what the nominal precision alone would take")]
    if plan.stored_format == "gguf":
        stored = sum(amount for role, amount in by_role.items() if role not in ("rotary cache", "allocator rounding", "cpu offload"))
        steps.append(Component("gguf_blocks", "GGUF block quantization of the file", stored - theory,
                               "linear layers and the embedding keep the file's quant blocks (scales included)"))
    elif plan.quant is not None:
        kept = 0
        for group in inventory.groups:
            if group.role in ("embedding", "lm_head", "norm", "position embedding", "router") or (
                group.role in ("attention", "mlp", "expert", "vision", "encoder") and group.dtype == dtype
            ):
                kept += group.bytes
        kept_theory = kept * nominal_bits // (8 * dtype_bytes)
        steps.append(Component("kept_16bit", f"modules kept in {dtype} (embeddings, lm_head, norms, biases, routers)",
                               kept - kept_theory, "not quantized by vLLM's method: stored at 16 bit instead of "
                               f"{nominal_bits} bit"))
        steps.append(Component("quantization_metadata", "scales, zero points, g_idx", by_role["quantization metadata"],
                               f"{plan.kernel.kernel} layout"))
    for role, label, reason in (
        ("vocab padding", "vocabulary padding", "vocab padded to a multiple of 64 (VocabParallelEmbedding)"),
        ("rotary cache", "rotary cos/sin cache", "[max_position, rotary_dim] buffer (x4 rows for multimodal RoPE)"),
        ("model buffers", "buffers the model allocates", "Qwen3-VL: one [max_num_batched_tokens, hidden] deepstack "
         "input buffer per deepstack layer, created with the model"),
        ("lora", "LoRA adapter slots", "--enable-lora pre-allocates max_loras x max_lora_rank A/B tensors"),
        ("draft", "speculative decoding drafter", "draft model / EAGLE head / MTP layers loaded with the target"),
        ("allocator rounding", "caching-allocator block rounding", "PyTorch counts whole blocks (2 MiB segments, "
         "unsplit remainders; max_split_size_mb=20 while loading in 0.21+)"),
        ("cpu offload", "moved to CPU memory", "--cpu-offload-gb: decoder-layer parameters live in pinned CPU memory"),
    ):
        if by_role.get(role):
            steps.append(Component(role.replace(" ", "_"), label, by_role[role], reason))
    accounted = sum(step.bytes for step in steps)
    real = inventory.total_bytes + allocator_bytes - offloaded
    rest = real - accounted
    if rest and (plan.quant is not None or plan.stored_format):
        steps.append(Component("kernel_padding", "kernel padding and packing", rest,
                               "quantized tensors padded to the kernel's alignment (e.g. MXFP4 experts to multiples of "
                               "64-256), integer packing and small buffers"))
    elif rest:
        steps.append(Component("buffers", "small buffers", rest,
                               "non-parameter tensors such as the attention layers' fp32 scale scalars"))
    shares = [replace(step, reason=f"{step.bytes / real:+.1%} of the real figure: {step.reason}") if real and i else step
              for i, step in enumerate(steps)]
    shares.append(Component("reality", "real weights on this GPU", real, "what vLLM logs"))
    return tuple(shares)


def weights_whatif(inventory: Inventory, dtype: str) -> tuple[Component, ...]:
    """Levers on the weights themselves (the seed's fourth lever): 8-bit embeddings and lm_head."""
    if DTYPE_BYTES[dtype] != 2:
        return ()
    vocabulary = sum(group.bytes for group in inventory.groups
                     if group.role in ("embedding", "lm_head", "vocab padding") and group.dtype == dtype)
    if not vocabulary:
        return ()
    return (Component("embeddings_lm_head_8bit", "quantize embeddings and lm_head to 8 bit", -(vocabulary // 2),
                      f"they hold {vocabulary / GIB:.2f} GiB at 16 bit on this GPU; at 8 bit (+ small scales) half of it "
                      "(e.g. an FP8/INT8 checkpoint that does not list them in its ignore list)"),)


def budget_bytes(total: int, utilization: float, release: Release, ceil=math.ceil, trunc=int) -> int:
    """requested_memory = total x utilization, rounded up from the release that rounds it (request_memory_ceil);
    the advisor's sweep passes numpy's ceil and trunc for arrays."""
    product = total * utilization
    return ceil(product) if release["request_memory_ceil"] else trunc(product)


def _engine_rope_rows(spec: ModelSpec, settings: EngineSettings) -> ModelSpec:
    """MiniMax-Text-01 builds its rotary cache for min(max_position_embeddings, max_model_len) positions
    (minimax_text_01.py MiniMaxText01DecoderLayer: config.max_model_len set by the model class)."""
    if spec.family == "minimax_text_01" and settings.max_model_len < spec.max_position_embeddings:
        from dataclasses import replace

        return replace(spec, max_position_embeddings=settings.max_model_len)
    return spec


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
    non_torch_inside, non_torch_outside, non_torch_reason = profile.non_torch(gpu, settings, release, spec)
    if gpu.in_use_bytes and settings.engine == "v1" and release["v1_non_torch_counts_other_processes"]:
        non_torch_inside += gpu.in_use_bytes  # the rule's source: other processes' memory read as non-torch
        non_torch_reason += f"; + {gpu.in_use_bytes / GIB:.2f} GiB other processes hold (counted before 0.9.1)"
    stages = _stages(spec, gpu, settings, release, layer_counts, budget, non_torch_inside, gguf_checkpoint)
    budgets = [stage.figures.kv_cache_bytes for stage in stages]
    kv, settings, auto_fit_line = _kv_plan(attention, workers, budgets, settings, release)
    # the block size the attention groups really use (raised for Mamba hybrids, forced for MLA backends)
    block_size = max((group.block_size for group in kv.groups if group.kind != "mamba"), default=settings.block_size)
    own_blocks = kv.worker_num_blocks or (kv.num_blocks,) * len(stages)
    ranks = [_rank_pool(stage.figures, kv, own_blocks[i], i) for i, stage in enumerate(stages)]
    first = stages[0]
    rank0, peak, graphs, available = ranks[0], first.peak, first.graphs, first.figures.kv_cache_bytes
    cpu_blocks = int(settings.swap_space_gib * GIB // kv.block_bytes) if settings.engine == "v0" else 0
    failure = (_free_memory_failure(gpu, settings, release)
               or _startup_failure(spec, settings, release, kv, ranks, total, layer_counts[0], auto_fit_line)
               or _sampler_warmup_failure(spec, gpu, settings, release, ranks[-1], stages[-1].graphs,
                                          non_torch_outside, total))

    graph_budgeted = bool(release["cuda_graph_subtracted"])
    pool_bytes = kv.pool_bytes if available > 0 else 0
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
    figures = LogFigures(
        total_bytes=total, utilization=settings.gpu_memory_utilization, weights_bytes=rank0.weights_bytes,
        activation_bytes=logged_peak, non_torch_bytes=non_torch_inside,
        context_bytes=profile.CUDA_CONTEXT, kv_bytes=available, num_gpu_blocks=kv.num_blocks,
        num_cpu_blocks=cpu_blocks, kv_tokens=kv.kv_cache_tokens, max_concurrency=kv.max_concurrency,
        max_model_len=settings.max_model_len, graph_bytes=graphs.bytes, graph_estimate_bytes=graphs.estimate_bytes,
        graphs_captured=not settings.enforce_eager,
    )
    lines = _startup_lines(release, figures, kv.log_lines + ((auto_fit_line,) if auto_fit_line else ()), failure,
                           max(rank.weights_bytes for rank in ranks) <= total)
    return Breakdown(
        model=spec.name, gpu_name=gpu.name, total_gpu_bytes=total, engine_name="vllm", engine_label="vLLM",
        engine_version=release.label, engine_variant=release.engine.upper(),
        settings=settings.as_settings(), components=components, weights_bytes=rank0.weights_bytes,
        kv_cache_bytes=available, kv_bytes_per_token=kv.block_bytes // block_size, kv_cache_tokens=kv.kv_cache_tokens,
        max_concurrency=kv.max_concurrency, max_model_len=settings.max_model_len,
        nvidia_smi_used_mib=smi_mib, outside_budget=outside, log_lines=lines,
        engine_figures=_engine_figures(release, logged_peak, non_torch_inside, graphs, graph_budgeted, budget,
                                       kv.num_blocks, cpu_blocks, block_size),
        weights_explained=explain_weights(first.inventory, first.weights_plan, settings.dtype, first.allocator_bytes,
                                          first.offloaded),
        weights_whatif=weights_whatif(first.inventory, settings.dtype), notes=tuple(kv.notes), failure=failure,
        per_rank=tuple(ranks) if len(ranks) > 1 else (),
        devices=devices(stages, ranks, settings, total, non_torch_inside, non_torch_outside,
                        lambda resident, activation: nvidia_smi_used_mib(total, settings.engine, resident, activation)),
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


def _rank_pool(figures: RankFigures, kv: kv_groups.KvGroupPlan, own_blocks: int, worker: int) -> RankFigures:
    """One rank's figures with its block size and the pool it really allocates: every rank allocates the
    engine's block count (the minimum over workers, or the override) at its own page (V1 KVCacheConfig per
    worker; V0 CacheEngine), so its own column adds up: available = pool + unused."""
    block_bytes = kv.worker_block_bytes[worker] if kv.worker_block_bytes else kv.block_bytes
    pool = kv.num_blocks * block_bytes if figures.kv_cache_bytes > 0 else 0
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
    the pool beyond vLLM's estimate, the CUDA context and the kernel's cached rows come out of the same headroom."""
    if not release["sampler_warmup_checked"] or spec.padded_vocab_size <= 0 or last.kv_pool_bytes <= 0:
        return None
    dtype_bytes = DTYPE_BYTES[settings.dtype]
    need = profile.sampler_warmup_bytes(spec, settings, release, dtype_bytes, gpu)
    kept = profile.persistent_sampler_bytes(spec, settings, release, gpu) + profile.profile_workspaces(gpu, release)[0]
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


def attention_layers(spec: ModelSpec, settings: EngineSettings, release: Release,
                     layer_counts: tuple[int, ...]) -> tuple[list[kv_groups.AttentionLayer], list[tuple[int, ...]]]:
    """The model's attention layers with this rank's page size, and each pipeline stage's layer indices."""
    if spec.hybrid is not None and spec.mixer is not None:
        return _hybrid_layers(spec, settings, release, layer_counts)
    layout = kv_cache.kv_layout(spec, settings.tensor_parallel_size, 1, settings.block_size,
                                settings.kv_cache_dtype_bytes, release, settings.kv_cache_dtype)
    if spec.encoder is not None:
        return _encoder_decoder_layers(spec, settings, release, layout.page_bytes, layer_counts)
    try:
        kinds = (kv_groups.layer_kinds(spec.attention_facts, version=release.version) if spec.attention_facts
                 else [("full", None)] * spec.num_layers)
    except kv_groups.SlidingWindowRefusal as error:
        raise StartupRefusal(str(error)) from None
    full_page = layout.page_bytes
    if spec.full_attention_shape is not None:
        # Gemma 4: full layers of global_head_dim x num_global_key_value_heads (a page of their own size)
        full_head, full_kv = spec.full_attention_shape
        full_page = kv_cache.KvLayout(settings.block_size, max(1, full_kv // settings.tensor_parallel_size), full_head,
                                      settings.kv_cache_dtype_bytes, 1).page_bytes
    # TurboQuant's boundary layers keep a model-dtype page (kv_cache_dtype_skip_layers; kv_dtypes.py)
    boundary = set(kv_dtypes.boundary_layers(settings.kv_cache_dtype, spec.num_layers, spec.hybrid is not None))
    model_page = kv_cache.KvLayout(settings.block_size, layout.kv_heads_per_rank, spec.head_dim,
                                   DTYPE_BYTES[settings.dtype], 1).page_bytes
    layers = []
    for index, (kind, window) in enumerate(kinds[: spec.num_layers]):
        if kind == "mla" and not kv_cache.mla_latent(spec, release):
            kind = "full"  # DeepSeek before MLA backends (or with MLA disabled): per-head K and V
        page = model_page if index in boundary else (full_page if kind == "full" else layout.page_bytes)
        layers.append(kv_groups.AttentionLayer(kind, page, window))
    workers, start = [], 0
    for count in layer_counts:
        workers.append(tuple(range(start, start + count)))
        start += count
    if spec.mla is not None and spec.mla.indexer_heads:
        # DeepSeek-V3.2: each layer's DeepseekV32IndexerCache is its own MLAAttentionSpec (one uint8 vector of
        # index_head_dim + scales per token), grouped with the latent caches
        page = settings.block_size * kv_cache.indexer_entry_bytes(spec.mla.indexer_head_dim)
        count = len(layers)
        layers += [kv_groups.AttentionLayer("mla", page)] * count
        workers = [indices + tuple(count + i for i in indices) for indices in workers]
    # speculative decoding: the drafter's attention layers join the KV-cache spec on the last stage
    draft_layers = speculative.draft_attention_layers(spec, settings, release)
    if draft_layers:
        workers[-1] += tuple(range(len(layers), len(layers) + len(draft_layers)))
        layers.extend(draft_layers)
    return layers, workers


def _hybrid_layers(spec: ModelSpec, settings: EngineSettings, release: Release,
                   layer_counts: tuple[int, ...]) -> tuple[list[kv_groups.AttentionLayer], list[tuple[int, ...]]]:
    """Mamba / linear-attention hybrids: attention layers plus one "mamba" state layer per mixer."""
    from ...model.config import UnsupportedArchitectureError

    if settings.engine == "v1" and not kv_groups.rule(release.version, "v1_mamba"):
        raise UnsupportedArchitectureError(
            f"{spec.architecture} in the V1 engine before 0.10.1 is not sized "
            f"({kv_groups.rule_source(release.version, 'v1_mamba')})")
    # V0: the Mamba layers' states live in the model's own MambaCacheManager (v0_mamba_cache below),
    # outside the KV blocks; plan_kv_groups counts the attention layers only
    layers, per_layer = kv_groups.hybrid_attention_layers(
        spec.mixer, settings.tensor_parallel_size, settings.block_size, settings.kv_cache_dtype_bytes,
        settings.dtype)
    workers, start = [], 0
    for count in layer_counts:
        workers.append(tuple(i for entries in per_layer[start:start + count] for i in entries))
        start += count
    return layers, workers


def _encoder_decoder_layers(spec: ModelSpec, settings: EngineSettings, release: Release, page_bytes: int,
                            layer_counts: tuple[int, ...]) -> tuple[list[kv_groups.AttentionLayer], list[tuple[int, ...]]]:
    """Whisper's KV layers. V0 (worker/cache_engine.py + enc_dec_model_runner.py): CacheEngine sizes a block as
    get_num_layers_by_block_type(attention) = hf_text_config.num_hidden_layers layers - WhisperConfig maps
    num_hidden_layers to encoder_layers - and each decoder layer's self- and cross-attention share its layer's
    cache (cross K/V of the encoder tokens sit in the same pool through cross block tables).
    V1 (0.10.2+, gpu_model_runner.get_kv_cache_spec): a FullAttentionSpec per decoder self-attention layer and a
    CrossAttentionSpec per cross-attention layer (kind "cross": max_num_encoder_input_tokens per request); the
    encoder's own attention keeps no cache."""
    if settings.engine == "v0":
        n = spec.encoder.num_layers
        return [kv_groups.AttentionLayer("full", page_bytes)] * n, [tuple(range(n))] * len(layer_counts)
    # CrossAttentionSpec.max_memory_usage_bytes reads max_num_encoder_input_tokens: set to the encoder length
    # (1500) for encoder-decoder models in 0.10.2-0.12, left at max_num_batched_tokens from 0.13 (config/vllm.py)
    tokens = spec.encoder.max_source_positions if release["encdec_encoder_tokens_override"] \
        else settings.max_num_batched_tokens
    layers = [kv_groups.AttentionLayer("full", page_bytes)] * spec.num_layers
    layers += [kv_groups.AttentionLayer("cross", page_bytes, tokens)] * spec.num_layers
    workers, start = [], 0
    for count in layer_counts:
        workers.append(tuple(range(start, start + count))
                       + tuple(range(spec.num_layers + start, spec.num_layers + start + count)))
        start += count
    return layers, workers


def v0_mamba_cache(spec: ModelSpec, settings: EngineSettings, release: Release, first_layer: int,
                   count: int) -> tuple[int, str]:
    """(bytes, reason) of V0's MambaCacheManager on a rank holding layers [first_layer, first_layer + count):
    conv and ssm states [mamba_layers, batch, *shape] in the model dtype (the model passes
    lm_head.weight.dtype, 0.6-0.10), built by the first forward - the profile run - and kept, so it sits in the
    profiled peak and comes out of the KV budget. (0, "") for non-hybrids and V1."""
    if settings.engine != "v0" or spec.hybrid is None or spec.mixer is None:
        return 0, ""
    from .mamba_state import mamba_state, v0_mamba_batch, v0_mamba_cache_bytes

    mamba_layers = sum(1 for kind in spec.hybrid.layers[first_layer:first_layer + count] if "mamba" in kind)
    if not mamba_layers:
        return 0, ""
    state = mamba_state(spec.mixer, settings.tensor_parallel_size, settings.dtype,
                        mamba_cache_dtype=settings.dtype, mamba_ssm_cache_dtype=settings.dtype)
    batch = v0_mamba_batch(settings.max_num_seqs, settings.enforce_eager, release.version)
    cache = v0_mamba_cache_bytes(state, mamba_layers, settings.max_num_seqs, batch)
    shapes = " + ".join("x".join(map(str, shape)) for shape in state.shapes)
    return cache, (f"MambaCacheManager: {mamba_layers} Mamba layers x {batch} request slots (max_num_seqs "
                   f"{settings.max_num_seqs}{', CUDA-graph padded' if batch != settings.max_num_seqs else ''}) x "
                   f"{state.page_bytes} B ({shapes} in {settings.dtype}); allocated by the profile run's forward, "
                   "so vLLM logs it inside the activation peak")


def plan_kv(layers, workers, budgets, settings: EngineSettings, release: Release) -> kv_groups.KvGroupPlan:
    return kv_groups.plan_kv_groups(
        layers, budgets, settings.block_size, settings.max_model_len, settings.max_num_batched_tokens,
        settings.max_num_seqs, release.version, release.engine,
        disable_hybrid_kv_cache_manager=settings.disable_hybrid_kv_cache_manager,
        num_gpu_blocks_override=settings.num_gpu_blocks_override, worker_layers=workers,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        mamba_cache_mode=settings.mamba_cache_mode, mamba_chunk_size=settings.mamba_chunk_size,
        decode_context_parallel_size=settings.decode_context_parallel_size,
    )


def kv_plan_for_budget(spec: ModelSpec, gpu: Gpu, user_settings: dict, version, available_bytes: int) -> kv_groups.KvGroupPlan:
    """Blocks, tokens and concurrency for a given KV budget on every worker (the scorer's logged-budget check)."""
    settings, release = resolve_settings(user_settings, spec, gpu, release_rules, version)
    layer_counts = pipeline_layer_counts(spec.num_layers, settings.pipeline_parallel_size, bool(release["pp_remainder_to_last"]))
    layers, workers = attention_layers(spec, settings, release, layer_counts)
    return plan_kv(layers, workers, [available_bytes] * len(workers), settings, release)


def gguf_inventory(inventory: Inventory, table, spec: ModelSpec, dtype: str, shard: Shard, stage_layers: int) -> Inventory:
    """A GGUF checkpoint stays in its block formats on the GPU (vLLM's GGUF linear and embedding methods):
    the weights by role come from the file's tensor table, sharded like the layers they belong to; the
    rotary cache is vLLM's own. (The caching-allocator model is not applied: tensor sizes are the file's.)"""
    from ...model.checkpoint import gguf_weight_bytes
    from .weights import TensorGroup

    tp = shard.tensor_parallel_size
    layer_share = stage_layers / spec.num_layers
    groups = []
    for role, amount in sorted(gguf_weight_bytes(table, dtype).items()):
        if role == "embedding" and not shard.is_first_stage or role == "lm_head" and not shard.is_last_stage:
            continue
        if role not in ("embedding", "lm_head"):
            amount = int(amount * layer_share)
        per_rank = amount if role == "norm" else amount // tp
        groups.append(TensorGroup(f"gguf:{role}", 1, (per_rank,), "uint8", per_rank, role))
    groups += [group for group in inventory.groups if group.role == "rotary cache"]
    return Inventory(groups=tuple(groups), parameters=inventory.parameters, allocations=None)
