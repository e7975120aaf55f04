"""`whatif`: every lever that changes vLLM's startup memory, each run through the forward model.

For a baseline (a model on a GPU with the user's settings) each lever is one changed setting, predicted
with `api.explain`; the table gives the change in weights, KV pool, KV tokens, concurrency and nvidia-smi,
and what the lever costs in words. Two levers are no vLLM flag and are computed from the same engine code:
8-bit embeddings / lm_head (the 16-bit vocabulary tables of the inventory at half the bytes, through
sweep.FastPath with lighter weights) and the catalog's other checkpoints of the model.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ....units import GIB, MIB

COSTS = {
    "gpu_memory_utilization-": "a smaller KV pool (fewer concurrent requests); more room for other processes",
    "gpu_memory_utilization+": "less headroom for other processes, fragmentation and runtime spikes (OOM risk)",
    "max_model_len-": "prompts + outputs longer than the new max_model_len are rejected",
    "max_model_len+": "longer requests allowed; each one can take more of the KV pool",
    "max_num_seqs": "fewer requests decode at once (lower throughput on many short requests); smaller sampler "
                    "peak and fewer CUDA graphs",
    "max_num_batched_tokens": "long prompts prefill in more chunks: slower time to first token and prefill throughput",
    "kv_cache_dtype": "fp8 KV cache: small accuracy cost (k/v scales default to 1.0 unless the checkpoint "
                      "carries calibrated ones); fastest on GPUs with FP8 support (sm89+)",
    "enforce_eager": "no CUDA graphs: slower decode, most at small batches (often 10-30 %); startup is faster",
    "cuda_graphs": "CUDA graphs captured: faster decode, the graph pool costs memory",
    "swap_space": "CPU memory only (V0 swaps preempted sequences there); the GPU figures do not change",
    "cpu_offload_gb": "those weights stream over PCIe on every forward pass: much slower decode",
    "embeddings_8bit": "not a vLLM flag: needs a checkpoint with 8-bit embedding/lm_head tables; small accuracy "
                       "risk at the output layer",
    "checkpoint": "another checkpoint: weight quantization costs some accuracy (4-bit more than 8-bit)",
    "quantization_fp8": "weights quantized to FP8 at load time: near-lossless, W8A8 on sm89+, weight-only "
                        "Marlin below; slower startup",
    "tensor_parallel_size": "needs more GPUs; an all-reduce per layer (NVLink helps); figures are per GPU",
    "pipeline_parallel_size": "needs more GPUs; pipeline bubbles at low concurrency; figures are per GPU (stage 0)",
}


@dataclass
class Outcome:
    """One prediction: the baseline or a lever."""

    lever: str  # setting name (or "embeddings_8bit", "checkpoint")
    change: str  # "0.9 -> 0.85"
    model: str
    settings: dict  # the settings that differ from the baseline (vLLM names)
    cost: str
    weights_bytes: int | None = None
    kv_pool_bytes: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    nvidia_smi_used_mib: int | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    starts: bool | None = None
    refused: str = ""  # why vLLM would not start (configuration refusal or the startup failure)
    note: str = ""
    breakdown: object | None = None
    deltas: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        from ....render import to_json

        out = {"lever": self.lever, "change": self.change, "model": self.model, "settings": self.settings,
               "cost": self.cost, "starts": self.starts}
        if self.refused:
            out["refused"] = self.refused
        if self.note:
            out["note"] = self.note
        if self.weights_bytes is not None:
            out.update(weights_gib=round(self.weights_bytes / GIB, 4), kv_pool_gib=round(self.kv_pool_bytes / GIB, 4),
                       num_gpu_blocks=self.num_gpu_blocks, num_cpu_blocks=self.num_cpu_blocks,
                       kv_cache_tokens=self.kv_cache_tokens, max_concurrency=round(self.max_concurrency, 4),
                       nvidia_smi_used_mib=self.nvidia_smi_used_mib)
            out["delta"] = {key: (round(value, 4) if isinstance(value, float) else value) for key, value in self.deltas.items()}
        if self.breakdown is not None:
            figures = to_json(self.breakdown)
            for key in ("log_lines", "components", "outside_budget", "weights_explained", "settings", "notes"):
                figures.pop(key, None)
            out["figures"] = figures
        return out


@dataclass
class WhatIf:
    baseline: Outcome
    levers: list[Outcome]
    gpu_name: str
    vllm_version: str
    engine: str


def _pool_bytes(breakdown) -> int:
    pool = breakdown.components.find("kv_cache")
    return pool.bytes if pool is not None else 0


def _fill(outcome: Outcome, breakdown) -> Outcome:
    outcome.breakdown = breakdown
    outcome.weights_bytes = breakdown.weights_bytes
    outcome.kv_pool_bytes = _pool_bytes(breakdown)
    outcome.kv_cache_tokens = breakdown.kv_cache_tokens
    outcome.max_concurrency = breakdown.max_concurrency
    outcome.nvidia_smi_used_mib = breakdown.nvidia_smi_used_mib
    outcome.num_gpu_blocks = breakdown.num_gpu_blocks
    outcome.num_cpu_blocks = breakdown.num_cpu_blocks
    outcome.starts = breakdown.failure is None
    if breakdown.failure is not None:
        outcome.refused = breakdown.failure.message
    return outcome


def _deltas(outcome: Outcome, base: Outcome) -> None:
    if outcome.weights_bytes is None or base.weights_bytes is None:
        return
    outcome.deltas = {
        "weights_bytes": outcome.weights_bytes - base.weights_bytes,
        "kv_pool_bytes": outcome.kv_pool_bytes - base.kv_pool_bytes,
        "kv_cache_tokens": outcome.kv_cache_tokens - base.kv_cache_tokens,
        "max_concurrency": outcome.max_concurrency - base.max_concurrency,
        "nvidia_smi_used_mib": outcome.nvidia_smi_used_mib - base.nvidia_smi_used_mib,
        "num_gpu_blocks": outcome.num_gpu_blocks - base.num_gpu_blocks,
        "num_cpu_blocks": outcome.num_cpu_blocks - base.num_cpu_blocks,
    }


def _fmt(value) -> str:
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10000:
        return f"{value:,}"
    return str(value)


def _lever_settings(base_settings: dict, breakdown, spec, derived: int) -> list[tuple[str, str, dict, str]]:
    """(lever, change, settings, cost key) for every lever that applies to this baseline."""
    value = breakdown.setting
    out = []
    u = float(value("gpu_memory_utilization"))
    lower, higher = round(u - 0.05, 2), round(min(u + 0.05, 0.99), 2)
    if lower > 0:
        out.append(("gpu_memory_utilization", f"{u:g} -> {lower:g}", {"gpu_memory_utilization": lower}, "gpu_memory_utilization-"))
    if higher > u:
        out.append(("gpu_memory_utilization", f"{u:g} -> {higher:g}", {"gpu_memory_utilization": higher}, "gpu_memory_utilization+"))
    length = breakdown.max_model_len
    if length >= 2:
        half = max(1, length // 2)
        out.append(("max_model_len", f"{length:,} -> {half:,}", {"max_model_len": half}, "max_model_len-"))
    if length < derived:
        double = min(derived, length * 2)
        out.append(("max_model_len", f"{length:,} -> {double:,}", {"max_model_len": double}, "max_model_len+"))
    seqs = int(value("max_num_seqs"))
    if seqs >= 2:
        out.append(("max_num_seqs", f"{seqs} -> {seqs // 2}", {"max_num_seqs": seqs // 2}, "max_num_seqs"))
    tokens = int(value("max_num_batched_tokens"))
    if tokens >= 2:
        half = tokens // 2
        change = {"max_num_batched_tokens": half}
        if half < seqs:
            change["max_num_seqs"] = half  # vLLM refuses max_num_batched_tokens < max_num_seqs
        out.append(("max_num_batched_tokens", f"{tokens:,} -> {half:,}", change, "max_num_batched_tokens"))
    kv = str(value("kv_cache_dtype"))
    if not kv.startswith("fp8"):
        out.append(("kv_cache_dtype", f"{kv} -> fp8", {"kv_cache_dtype": "fp8"}, "kv_cache_dtype"))
    if value("enforce_eager"):
        out.append(("enforce_eager", "eager -> CUDA graphs", {"enforce_eager": False}, "cuda_graphs"))
    else:
        out.append(("enforce_eager", "CUDA graphs -> eager", {"enforce_eager": True}, "enforce_eager"))
    if breakdown.engine == "v0":
        swap = float(value("swap_space"))
        target = 0.0 if swap else 4.0
        out.append(("swap_space", f"{swap:g} -> {target:g} GiB", {"swap_space": target}, "swap_space"))
    offload = float(value("cpu_offload_gb") or 0)
    more = max(1, round(breakdown.weights_bytes / 4 / GIB)) + offload
    out.append(("cpu_offload_gb", f"{offload:g} -> {more:g} GiB", {"cpu_offload_gb": float(more)}, "cpu_offload_gb"))
    tp, pp = int(value("tensor_parallel_size")), int(value("pipeline_parallel_size"))
    if spec.num_attention_heads % (tp * 2) == 0:
        out.append(("tensor_parallel_size", f"{tp} -> {tp * 2}", {"tensor_parallel_size": tp * 2}, "tensor_parallel_size"))
    if pp * 2 <= spec.num_layers:
        out.append(("pipeline_parallel_size", f"{pp} -> {pp * 2}", {"pipeline_parallel_size": pp * 2}, "pipeline_parallel_size"))
    return out


def _embeddings_8bit(model, gpu, version, settings: dict, base: Outcome, source_options: dict) -> Outcome:
    """Embedding and lm_head tables at 8 bit instead of 16: the inventory's bytes, halved, through the
    fast path (the same budget arithmetic with lighter weights)."""
    from ..engine import ENGINE

    levers = ENGINE.levers
    FastPath, FastPathUnsupported = levers.fast_path, levers.fast_path_unsupported
    outcome = Outcome("embeddings_8bit", "embed_tokens + lm_head 16 -> 8 bit", model, {}, COSTS["embeddings_8bit"])
    try:
        fast = FastPath(model, gpu, vllm_version=version, settings=settings, source_options=source_options)
    except FastPathUnsupported as error:
        outcome.note = f"not computed: {error}"
        return outcome
    saved = []
    for inventory in fast.inventories:
        sixteen = sum(group.bytes for group in inventory.groups
                      if group.role in ("embedding", "lm_head", "vocab padding") and group.dtype in ("bfloat16", "float16"))
        saved.append(sixteen // 2)
    if not any(saved):
        outcome.note = "nothing to save: the embedding and lm_head tables are not 16-bit here"
        return outcome
    b = base.breakdown
    point = (float(b.setting("gpu_memory_utilization")), b.max_model_len, int(b.setting("max_num_seqs")),
             int(b.setting("max_num_batched_tokens")))
    before = fast.figures(*point)
    fast.lighten_weights(saved)
    after = fast.figures(*point)
    outcome.weights_bytes = base.weights_bytes - saved[0]
    outcome.kv_pool_bytes = base.kv_pool_bytes + after["kv_pool_bytes"] - before["kv_pool_bytes"]
    outcome.kv_cache_tokens = after["kv_cache_tokens"]
    outcome.max_concurrency = after["max_concurrency"]
    outcome.nvidia_smi_used_mib = base.nvidia_smi_used_mib + after["nvidia_smi_used_mib"] - before["nvidia_smi_used_mib"]
    outcome.num_gpu_blocks = after["num_gpu_blocks"]
    outcome.num_cpu_blocks = base.num_cpu_blocks
    outcome.starts = after["starts"]
    outcome.note = f"saves {saved[0] / MIB:,.0f} MiB of weights per GPU" + (
        f" (stage sizes {', '.join(f'{s / MIB:,.0f}' for s in saved)} MiB)" if len(saved) > 1 else "")
    return outcome


def whatif(model: str, gpu, *, vllm_version: str | None = None, settings: dict | None = None,
           source_options: dict | None = None, include_checkpoints: bool = True) -> WhatIf:
    """The baseline and every lever, each predicted with api.explain (REFUSALS of the baseline propagate)."""
    from .... import api
    from ..engine import ENGINE

    options = source_options or {}
    settings = {key: value for key, value in (settings or {}).items() if value is not None}
    device = gpu if not isinstance(gpu, str) else api.resolve_gpu(gpu, None)
    breakdown = api.explain(model, device, vllm_version=vllm_version, **options, **settings)
    spec = api.model_spec(model, options.get("source"), options.get("revision"), options.get("hf_token"),
                          options.get("gguf_file"))
    engine = ENGINE
    version = engine.releases.resolve(vllm_version)
    resolved, _ = engine.resolve_settings(dict(settings), spec, device, version)
    base = _fill(Outcome("baseline", "", spec.name, {}, ""), breakdown)
    levers: list[Outcome] = []

    def run(lever, change, changed, cost, checkpoint=None, options_=None):
        merged = dict(settings, **changed)
        outcome = Outcome(lever, change, checkpoint or spec.name, changed, cost)
        try:
            result = api.explain(checkpoint or model, device, vllm_version=vllm_version, **(options if options_ is None else options_),
                                 **merged)
        except api.REFUSALS as error:
            outcome.refused, outcome.starts = str(error), False
        except ValueError as error:
            outcome.note = f"not applicable: {str(error).splitlines()[0]}"
            return outcome
        else:
            _fill(outcome, result)
            _deltas(outcome, base)
        return outcome

    for lever, change, changed, cost_key in _lever_settings(settings, breakdown, spec, resolved.derived_max_model_len):
        outcome = run(lever, change, changed, COSTS[cost_key])
        if lever == "swap_space" and outcome.num_cpu_blocks is not None:
            outcome.note = f"CPU swap blocks {base.num_cpu_blocks:,} -> {outcome.num_cpu_blocks:,}"
        levers.append(outcome)
    embeddings = _embeddings_8bit(model, device, vllm_version, settings, base, options)
    _deltas(embeddings, base)
    levers.append(embeddings)
    if include_checkpoints:
        levers += _checkpoint_levers(spec, device, vllm_version, settings, options, base, run)
    return WhatIf(base, levers, device.name, breakdown.vllm_version, breakdown.engine)


def _checkpoint_levers(spec, device, vllm_version: str | None, settings: dict, options: dict, base: Outcome,
                       run) -> list[Outcome]:
    """The model's other checkpoints: an online --quantization of this one through `run`, or another repository
    (bf16 / FP8 / AWQ / GPTQ) predicted with the same settings less --quantization."""
    from .... import api
    from ....advisor.variants import variants

    outcomes: list[Outcome] = []
    plain = {key: value for key, value in settings.items() if key != "quantization"}
    for variant in variants(spec.name, spec)[1:]:
        if variant.quantization:
            outcome = run("quantization", f"--quantization {variant.quantization}", variant.settings,
                          COSTS["quantization_fp8"], checkpoint=variant.repo_id if variant.repo_id != spec.name else None,
                          options_=options if variant.repo_id == spec.name else {})
        else:
            merged_settings = dict(plain)
            outcome = Outcome("checkpoint", f"{base_label(spec)} -> {variant.label} ({variant.repo_id})", variant.repo_id, {},
                              COSTS["checkpoint"])
            try:
                result = api.explain(variant.repo_id, device, vllm_version=vllm_version, **merged_settings)
            except api.REFUSALS as error:
                outcome.refused, outcome.starts = str(error), False
            except ValueError as error:
                outcome.note = f"not applicable: {str(error).splitlines()[0]}"
            else:
                _fill(outcome, result)
                _deltas(outcome, base)
        outcomes.append(outcome)
    return outcomes


def base_label(spec) -> str:
    from ....advisor.variants import label_of

    return label_of(spec)
