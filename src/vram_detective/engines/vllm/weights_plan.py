"""The weights step of plan.py: the quantization and kernel a release picks for the checkpoint (--quantization
included), what each rank loads (weights.py's inventory, the drafter, LoRA slots), its caching-allocator
rounding and CPU offload, and the weights as the breakdown and `whatif` show them."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...breakdown import Component
from ...hardware import Gpu
from ...model.dtypes import DTYPE_BYTES
from ...model.quantization import QuantConfig, QuantizationError
from ...model.spec import ModelSpec
from ...units import GIB
from . import allocator, kv_cache, speculative
from .quant_kernels import ONLINE_BNB, ONLINE_FP8, KernelLayout, kernel_for
from .releases import Release, release as release_rules
from .settings import EngineSettings, StartupRefusal, resolve_settings
from .weights import MROPE_POSITIONS_FACTOR, Inventory, LoraSlots, Shard, build_inventory


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
                     batched_tokens: int | None = None, layer_counts: tuple[int, ...] = ()) -> list[tuple[int, Inventory]]:
    """(pipeline stage, inventory of one of its ranks) as plan() builds them, the drafter included: for
    `explain --tensors` and the advisor's sweep (which asks for each batched-token count it needs).
    `layer_counts`: the layers each stage holds when another engine splits them its own way (SGLang)."""
    settings, release = resolve_settings(user_settings, spec, gpu, release_rules, version)
    spec = _engine_rope_rows(spec, settings)
    weights_plan = plan_weights(spec, settings, gpu, release)
    lora = _lora_slots(settings, release)
    to_last = bool(release["pp_remainder_to_last"])
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    out = []
    for stage in range(pp):
        shard = Shard(tp, stage, pp, settings.enable_expert_parallel, to_last, settings.data_parallel_size,
                      tuple(layer_counts))
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
    # the target's parameters: the drafter's bytes are a step of their own below
    parameters = inventory.parameters - inventory.draft_parameters
    theory = parameters * nominal_bits // 8
    steps = [Component("theory", f"theory: {parameters / 1e9:.3f} B parameters x {nominal_bits} bits / 8", theory,
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


def _engine_rope_rows(spec: ModelSpec, settings: EngineSettings) -> ModelSpec:
    """MiniMax-Text-01 builds its rotary cache for min(max_position_embeddings, max_model_len) positions
    (minimax_text_01.py MiniMaxText01DecoderLayer: config.max_model_len set by the model class)."""
    if spec.family == "minimax_text_01" and settings.max_model_len < spec.max_position_embeddings:
        from dataclasses import replace

        return replace(spec, max_position_embeddings=settings.max_model_len)
    return spec


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
