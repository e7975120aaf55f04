"""Observed vs predicted, figure by figure, with the likely cause of each gap; what nvidia-smi's number is
made of; and which flags would shrink the footprint (api.explain what-ifs).

Causes are phrased from the rules in design/vllm-memory.md (§1.3 budget eras, §3 KV sizing, §5 the
profiling run, §6 non-torch memory, §10 why nvidia-smi differs).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ....units import GIB
from ....forensics.predict import explain_quietly
from .infer import INFERRED, STRONG, Inference
from ....forensics.observed import LABELS, half_unit

GIB_KEYS = ("total_gpu_memory_gib", "requested_memory_gib", "weights_gib", "activation_peak_gib", "non_torch_gib",
            "kv_cache_gib", "cuda_graph_gib", "cuda_graph_estimate_gib")
ORDER = ("total_gpu_memory_gib", "requested_memory_gib", "weights_gib", "activation_peak_gib", "non_torch_gib",
         "cuda_graph_estimate_gib", "kv_cache_gib", "num_gpu_blocks", "num_cpu_blocks", "kv_cache_tokens",
         "max_concurrency", "cuda_graph_gib", "nvidia_smi_used_mib", "startup_failed")


# figures sized by the card's memory: without the GPU they are not compared (no made-up card)
CARD_SIZED = ("total_gpu_memory_gib", "requested_memory_gib", "kv_cache_gib", "num_gpu_blocks", "kv_cache_tokens",
              "max_concurrency", "nvidia_smi_used_mib", "startup_failed")


@dataclass
class Gap:
    key: str
    label: str
    observed: object
    predicted: object
    gap: float | None  # predicted - observed, in the figure's unit
    relative: float | None
    agrees: bool
    cause: str

    def to_dict(self) -> dict:
        out = {"key": self.key, "observed": self.observed, "predicted": self.predicted, "agrees": self.agrees,
               "cause": self.cause}
        if self.gap is not None:
            out["gap"] = round(self.gap, 4)
            out["relative_gap"] = None if self.relative is None else round(self.relative, 4)
        return out


@dataclass
class Reconciliation:
    model: str
    gpu: str
    vllm_version: str
    engine: str
    settings: dict
    rows: list[Gap]
    prediction: object  # the Breakdown
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "vllm_version": self.vllm_version, "engine": self.engine,
                "settings_used": self.settings, "figures": [row.to_dict() for row in self.rows], "notes": self.notes}


def predicted_figures(breakdown, observed: dict) -> dict:
    weights = breakdown.weights_bytes / GIB
    if breakdown.per_rank and "weights_gib" in observed:
        # a pipeline-parallel log line does not say which stage printed it: the closest stage
        stages = [rank.weights_bytes / GIB for rank in breakdown.per_rank]
        weights = min(stages, key=lambda value: abs(value - observed["weights_gib"]))
    from ....render import schema_figures

    return schema_figures(breakdown, int(round(weights * GIB)))


def _agrees(key: str, observed, predicted) -> bool:
    if isinstance(observed, bool) or key == "startup_failed":
        return bool(observed) == bool(predicted)
    if key in GIB_KEYS:
        return abs(predicted - observed) <= max(half_unit(observed), 0.005) + 0.01 * abs(observed)
    if key == "max_concurrency":
        return abs(predicted - observed) <= 0.006 + 0.01 * abs(observed)
    if key == "nvidia_smi_used_mib":
        return abs(predicted - observed) <= max(256, 0.03 * observed)
    return abs(predicted - observed) <= max(1, 0.01 * abs(observed))


def reconcile(observed: dict, inference: Inference, model: str, source: str | None, run=None,
              candidate_tp: int | None = None) -> Reconciliation | None:
    """Predict the run (model + inferred release, GPU and the settings known well enough) and compare."""
    from ... import get_engine
    from ....units import parse_version
    from .infer import nominal_gpu

    release_rules = get_engine("vllm").releases.rules

    gpu = inference.gpu.value if inference.gpu else nominal_gpu()
    version = inference.version.value if inference.version else None
    settings = inference.prediction_settings(INFERRED)
    if version is None and inference.engine is not None:
        version = release_running(inference.engine.value)  # the comparison's engine is the log's
    if candidate_tp is not None:
        settings["tensor_parallel_size"] = candidate_tp
    breakdown, error = explain_quietly(model, gpu, version, settings, source=source)
    if breakdown is None:
        return Reconciliation(model, gpu.name, str(version or "newest"), "", settings, [], None,
                              [f"no prediction: {str(error).splitlines()[0] if error else 'unknown error'}"])
    predicted = predicted_figures(breakdown, observed)
    rows = []
    for key in ORDER:
        if key not in observed or key not in predicted or (inference.gpu is None and key in CARD_SIZED):
            continue
        value, guess = observed[key], predicted[key]
        if isinstance(value, bool) or key == "startup_failed":
            rows.append(Gap(key, LABELS[key], value, guess, None, None, bool(value) == bool(guess),
                            _failure_cause(value, breakdown, run, observed)))
            continue
        gap = guess - value
        relative = gap / abs(value) if value else None
        agrees = _agrees(key, value, guess)
        rows.append(Gap(key, LABELS[key], value, round(guess, 4) if isinstance(guess, float) else guess, gap, relative,
                        agrees, ""))
    by_key = {row.key: row for row in rows}
    rules = release_rules(parse_version(breakdown.vllm_version), breakdown.engine)
    for row in rows:
        if not row.cause:
            row.cause = _cause(row, by_key, observed, breakdown, inference, rules, gpu, settings,
                               run.extras() if run is not None else None)
    notes = []
    if not inference.version and inference.engine is not None:
        notes.append(f"release unknown: predicted with vLLM {breakdown.vllm_version}, the newest release that runs "
                     f"the log's {inference.engine.value.upper()} engine by default")
    elif not inference.version:
        notes.append(f"release unknown: predicted with vLLM {breakdown.vllm_version}")
    if not inference.gpu:
        shown = sorted(LABELS[key] for key in CARD_SIZED if key in observed)
        notes.append("GPU not known (no --gpu, and the log prints no total or nvidia-smi table): "
                     + (f"{', '.join(shown)} not compared, a made-up card would size them; " if shown else "")
                     + "give --gpu to compare them")
    util = inference.settings.get("gpu_memory_utilization")
    if util is not None and util.confidence not in STRONG:
        notes.append(f"gpu_memory_utilization {util.value} was inferred ({util.confidence}): the prediction uses the "
                     f"release default {breakdown.setting('gpu_memory_utilization')}, so the KV rows show its effect")
    return Reconciliation(model, breakdown.gpu_name, breakdown.vllm_version, breakdown.engine, settings, rows, breakdown,
                          notes)


def release_running(engine: str) -> str | None:
    """The newest of the releases users pick most whose default engine path is `engine` ('v0' / 'v1')."""
    from ... import get_engine
    from ....units import parse_version

    releases = get_engine("vllm").releases
    for text in reversed(releases.known):
        if releases.rule_at(parse_version(text), "default_engine") == engine:
            return text
    return None


def _fmt(value: float, unit: str = "GiB") -> str:
    return f"{value:+.2f} {unit}"


def _failure_cause(observed: bool, breakdown, run, figures: dict | None = None) -> str:
    message = run.failure_message() if run is not None else None
    if observed and breakdown.failure is not None:
        return f"both fail: {breakdown.failure.message[:160]}"
    figures = figures or {}
    tokens = figures.get("kv_cache_tokens")
    if tokens is None and figures.get("num_gpu_blocks") is not None:
        tokens = figures["num_gpu_blocks"] * breakdown.block_size
    if observed and tokens is not None and tokens < breakdown.max_model_len:
        return (f"the logged KV pool holds {tokens:,} tokens, less than max_model_len {breakdown.max_model_len:,}: "
                "vLLM refuses to start; the predicted pool is larger (see the KV rows)")
    if observed:
        return ("the log shows a failure the memory model does not predict"
                + (f": {message[:160]}" if message else "") + " (an error outside memory sizing, or a budget "
                "the prediction over-estimates)")
    if breakdown.failure is not None:
        return f"the prediction would refuse ({breakdown.failure.message[:120]}) but the run started: see the KV rows"
    return "both start"


def _cause(row: Gap, rows: dict, observed: dict, breakdown, inference: Inference, rules, gpu, settings,
           extras: dict | None = None) -> str:
    key, gap = row.key, row.gap or 0.0
    if row.agrees:
        return "agrees (within the printed rounding and 1 %)"
    tp = settings.get("tensor_parallel_size", 1)
    if key == "total_gpu_memory_gib":
        return ("the card reports a different CUDA total than the catalog's (driver, ECC, a shared/virtual GPU or "
                "another card of the same family)")
    if key == "requested_memory_gib":
        return "gpu_memory_utilization or the device total differ from what the prediction assumed"
    if key == "weights_gib":
        return _weights_cause(row, observed, gap, tp)
    if key == "activation_peak_gib":
        if gap < 0:
            return ("the profiling run peaked higher than modelled: a larger profiling batch (max_num_batched_tokens / "
                    "max_num_seqs), multimodal encoder profiling, LoRA, or sampler buffers")
        return ("the profiling run peaked lower than modelled: a smaller profiling batch (chunked prefill, lower "
                "max_num_batched_tokens or max_num_seqs) or a leaner sampler path")
    if key == "non_torch_gib":
        if gap < 0:
            where = "inside the budget in this era" if rules["nccl_inside_budget"] else "outside"
            return (f"more non-torch memory than modelled: NCCL / custom all-reduce buffers (NCCL is {where}), other "
                    "processes counted by this era, or a virtual-GPU / WSL driver")
        return "less non-torch memory than modelled (fewer communication buffers, lazily loaded kernels)"
    if key in ("cuda_graph_gib", "cuda_graph_estimate_gib"):
        return ("the graph pool depends on the capture sizes (max_num_seqs, cudagraph mode) and the attention "
                "backend; the per-layer estimate is rough")
    if key == "kv_cache_gib":
        return _kv_cause(rows, observed, breakdown, inference, rules, extras)
    if key in ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "num_cpu_blocks"):
        return _kv_count_cause(key, rows, observed, breakdown, inference, gpu, settings)
    if key == "nvidia_smi_used_mib":
        return "see the nvidia-smi breakdown: context, NCCL, CUDA graphs and other processes sit outside vLLM's numbers"
    return ""


def _weights_cause(row: Gap, observed: dict, gap: float, tp: int) -> str:
    """Why the logged weights differ: a tensor-parallel share, or more / less than this checkpoint holds."""
    ratio = observed["weights_gib"] / (row.predicted or 1)
    for size in (2, 4, 8):
        if abs(ratio * size - 1) < 0.03 and tp == 1:
            return f"about 1/{size} of the model: the run likely used tensor_parallel_size={size}"
    if gap < 0:
        return ("the log holds more than this checkpoint: extra unquantized modules, LoRA slots, a draft/MTP model "
                "or vision tower, a larger vocabulary, or a different checkpoint")
    return ("the log holds less than this checkpoint: a more compressed checkpoint (or online quantization), CPU "
            "offload, or fewer layers on this rank (pipeline parallel)")


def _kv_count_cause(key: str, rows: dict, observed: dict, breakdown, inference: Inference, gpu, settings) -> str:
    """Why a count derived from the KV pool (blocks, tokens, concurrency, CPU blocks) differs: the pool's size or
    the bytes per block, told apart by redoing the arithmetic from the logged pool."""
    kv_row = rows.get("kv_cache_gib")
    from_budget = _from_logged_kv(key, observed, breakdown, gpu, settings, inference)
    if key == "num_cpu_blocks":
        return ("swap_space differs from the default 4 GiB, or the bytes per block differ (KV dtype, heads per "
                "rank)")
    if from_budget is not None:
        low, high = from_budget
        fits = low - 0.006 <= observed[key] <= high + 0.006
        if fits:
            return (f"the block arithmetic agrees (the logged KV pool gives {low:g}..{high:g} with this model); the "
                    "gap is the pool size (see the KV row)")
        return (f"even from the logged KV pool this model gives {low:g}..{high:g}: bytes per block/token differ (KV "
                "dtype, block size, KV heads per rank, sliding-window/hybrid grouping) or a different model")
    if kv_row is not None and abs(kv_row.relative or 0) > 0.01:
        return f"follows the KV pool gap ({(kv_row.relative or 0):+.1%})"
    if key == "num_gpu_blocks" and "kv_cache_gib" not in observed:
        return _blocks_only_cause(observed, breakdown)
    return ("bytes per block/token differ: KV cache dtype, block size, KV heads per rank, or sliding-window/hybrid "
            "grouping")


def _blocks_only_cause(observed: dict, breakdown) -> str:
    block_bytes = breakdown.kv_bytes_per_token * breakdown.block_size
    pool = observed["num_gpu_blocks"] * block_bytes / GIB
    predicted_pool = breakdown.num_gpu_blocks * block_bytes / GIB
    return (f"{observed['num_gpu_blocks']} blocks x {block_bytes:,} B = {pool:.2f} GiB of KV cache, against "
            f"{predicted_pool:.2f} GiB predicted: the budget was smaller (a lower gpu_memory_utilization, or more "
            "memory taken before the KV cache)")


def _kv_cause(rows: dict, observed: dict, breakdown, inference: Inference, rules, extras: dict | None = None) -> str:
    parts = []
    explained = 0.0
    for key, label in (("requested_memory_gib", "budget"), ("weights_gib", "weights"),
                       ("activation_peak_gib", "activation"), ("non_torch_gib", "non-torch")):
        row = rows.get(key)
        if row is None or row.gap is None:
            continue
        sign = 1 if key == "requested_memory_gib" else -1
        explained += sign * row.gap
        parts.append(f"{label} {_fmt(sign * row.gap)}")
    if rules["cuda_graph_subtracted"]:
        row = rows.get("cuda_graph_estimate_gib")
        if row is not None and row.gap is not None:
            explained -= row.gap
            parts.append(f"graph estimate {_fmt(-row.gap)}")
    missing = [label for key, label in (("weights_gib", "weights"), ("activation_peak_gib", "activation peak"),
                                        ("non_torch_gib", "non-torch memory")) if key not in observed]
    peak = extras.get("peak_torch_memory_gib") if extras else None
    if peak is not None and "weights_gib" not in observed:
        predicted_peak = (breakdown.weights_bytes + breakdown.activation_peak_bytes) / GIB
        parts.append(f"weights + activation (peak_torch_memory {peak:g} logged) {_fmt(peak - predicted_peak)}")
        explained += peak - predicted_peak
        missing = [m for m in missing if m not in ("weights", "activation peak")]
    kv_gap = rows["kv_cache_gib"].gap or 0.0
    text = []
    if parts:
        rest = kv_gap - explained
        text.append("the pool is what the budget leaves: " + ", ".join(parts) + f" -> {_fmt(explained)} expected; "
                    + ("the rest is within rounding" if abs(rest) < 0.05 else f"{_fmt(rest)} not explained by the "
                       "logged figures (other memory counted by this era, fragmentation)"))
    if "requested_memory_gib" not in observed and (inference.gpu is not None or "total_gpu_memory_gib" in observed):
        total = breakdown.total_gpu_bytes
        used = breakdown.budget_bytes - breakdown.kv_cache_bytes  # everything else in the predicted budget
        needed = (used + observed["kv_cache_gib"] * GIB) / total if total else None
        assumed = breakdown.setting("gpu_memory_utilization")
        util = inference.settings.get("gpu_memory_utilization")
        if needed is not None and (util is None or util.confidence not in STRONG) and abs(needed - assumed) > 0.01:
            text.append(f"with the predicted weights/activation/non-torch, the logged pool needs "
                        f"gpu_memory_utilization ~= {needed:.2f} (the prediction assumed {assumed:g})")
    if missing:
        text.append("not in the log, so taken from the prediction: " + ", ".join(missing))
    if not text:
        text.append("the KV pool is the budget minus the other pieces: see the rows above")
    return "; ".join(text)


def _from_logged_kv(key: str, observed: dict, breakdown, gpu, settings: dict, inference: Inference):
    """(low, high) of the figure computed from the logged KV pool with this model's arithmetic."""
    from .... import api
    from ... import get_engine

    engine = get_engine("vllm")
    kv_plan_for_budget, resolve_version = engine.kv_plan_for_budget, engine.releases.resolve

    kv = observed.get("kv_cache_gib")
    if kv is None or kv <= 0:
        return None
    half = max(half_unit(kv), 0.005)
    try:
        spec = api.model_spec(breakdown.model) if breakdown.model else None
        if spec is None:
            return None
        user = dict(settings, max_model_len=breakdown.max_model_len, engine=breakdown.engine)
        plans = [kv_plan_for_budget(spec, gpu, user, resolve_version(breakdown.vllm_version), int(budget))
                 for budget in ((kv - half) * GIB, (kv + half) * GIB)]
    except Exception:  # noqa: BLE001
        return None
    attribute = {"num_gpu_blocks": "num_blocks", "kv_cache_tokens": "kv_cache_tokens",
                 "max_concurrency": "max_concurrency"}.get(key)
    if attribute is None:
        return None
    low, high = getattr(plans[0], attribute), getattr(plans[1], attribute)
    if key == "max_concurrency":
        return round(low, 2), round(high, 2)
    return low, high


# --- nvidia-smi -----------------------------------------------------------------------------------------------

@dataclass
class SmiExplanation:
    gpu: str
    used_mib: int
    total_mib: int | None
    parts: list[tuple[str, float, str]]  # (what, GiB, where the figure comes from)
    remaining_gib: float
    verdict: str
    summary: str = ""

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "used_mib": self.used_mib, "total_mib": self.total_mib,
                "parts": [{"what": what, "gib": round(gib, 4), "basis": basis} for what, gib, basis in self.parts],
                "remaining_gib": round(self.remaining_gib, 3), "verdict": self.verdict, "summary": self.summary}


def explain_nvidia_smi(observed: dict, inference: Inference, prediction, smi=None, run=None) -> SmiExplanation | None:
    """used = weights + KV pool + non-torch + CUDA graphs + CUDA context (+ NCCL) + other processes + the rest."""
    used, total, gpu_name, others_mib = _smi_reading(observed, smi)
    if used is None:
        return None
    parts = _smi_parts(observed, prediction, others_mib)
    accounted = sum(round(gib, 2) for _, gib, _ in parts)
    remaining = round(used / 1024, 2) - accounted
    peak = observed.get("activation_peak_gib")
    if peak is None and prediction is not None:
        peak = prediction.activation_peak_bytes / GIB
    verdict = _smi_verdict(remaining, peak or 0.0)
    core = sum(gib for what, gib, _ in parts if what in ("model weights", "KV cache pool"))
    overhead = used / 1024 - core
    summary = (f"weights + KV cache = {core:.2f} GiB of the {used / 1024:.2f} GiB; the other {overhead:.2f} GiB is "
               "runtime overhead (non-torch memory, CUDA graphs, CUDA context, activation workspace"
               + (", other processes" if others_mib else "") + ")")
    return SmiExplanation(gpu_name, int(used), total, parts, remaining, verdict, summary)


def _smi_reading(observed: dict, smi) -> tuple:
    """(used MiB, total MiB, which GPU, MiB of other processes): a pasted nvidia-smi table wins over the log's
    figures; vLLM's process is the largest python/vllm one, the others are counted apart."""
    used = observed.get("nvidia_smi_used_mib")
    total = observed.get("nvidia_smi_total_mib")
    if smi is None or not smi.gpus:
        return used, total, "GPU 0" if smi is None else "the GPU quoted in the log", 0
    gpu = smi.gpu(0)
    used = gpu.used_mib if gpu.used_mib is not None else used
    total = gpu.total_mib or total
    where = f"GPU {gpu.index}" if gpu.index is not None else "the GPU quoted in the log"
    gpu_name = f"{where} ({gpu.name})" if gpu.name else where
    others_mib = 0
    procs = [p for p in smi.processes_on(gpu.index) if p.used_mib]
    if procs:
        vllm_process = max(procs, key=lambda p: (("python" in p.name or "vllm" in p.name.lower()), p.used_mib))
        others_mib = sum(p.used_mib for p in procs if p is not vllm_process)
    return used, total, gpu_name, others_mib


def _smi_parts(observed: dict, prediction, others_mib: int) -> list[tuple[str, float, str]]:
    """(part, GiB, basis) of what nvidia-smi counts: logged figures where the log has them, else predicted."""
    from ... import get_engine

    parts = []

    def add(what, value_gib, basis):
        if value_gib:
            parts.append((what, value_gib, basis))

    weights = observed.get("weights_gib")
    add("model weights", weights if weights is not None else (prediction.weights_bytes / GIB if prediction else 0),
        "logged" if weights is not None else "predicted")
    blocks = observed.get("num_gpu_blocks")
    kv = observed.get("kv_cache_gib")
    if blocks is not None and prediction is not None and prediction.kv_bytes_per_token:
        block_bytes = prediction.kv_bytes_per_token * prediction.block_size
        add("KV cache pool", blocks * block_bytes / GIB, f"{blocks} logged blocks x {block_bytes:,} B")
    elif kv is not None and kv > 0:
        add("KV cache pool", kv, "logged available KV memory")
    elif prediction is not None and prediction.kv_cache_bytes > 0:  # a negative pool is a predicted shortfall
        add("KV cache pool", prediction.kv_cache_bytes / GIB, "predicted")
    non_torch = observed.get("non_torch_gib")
    if non_torch is not None:
        add("non-torch memory (profiled)", non_torch, "logged")
    elif prediction is not None:
        add("non-torch memory (profiled)", prediction.non_torch_bytes / GIB, "predicted")
    graphs = observed.get("cuda_graph_gib")
    if graphs is not None:
        add("CUDA graph pool", graphs, "logged")
    elif prediction is not None and prediction.cuda_graph_bytes:
        add("CUDA graph pool", prediction.cuda_graph_bytes / GIB, "predicted")
    context = None
    if prediction is not None:
        found = prediction.outside_budget.find("cuda_context")
        context = found.bytes / GIB if found is not None else None
    if context is None:
        context = get_engine("vllm").cuda_context_bytes() / GIB
    add("CUDA context (+ NCCL outside the budget)", context, "estimate")
    if others_mib:
        add("other processes", others_mib / 1024, "nvidia-smi process list")
    return parts


def _smi_verdict(remaining: float, peak: float) -> str:
    """What the GiB nvidia-smi shows beyond the parts most likely are."""
    if remaining < -0.3:
        return (f"{-remaining:.2f} GiB less than the parts: the reading was taken before everything was allocated, "
                "or the context/graphs are smaller than estimated")
    if remaining <= peak + 0.3:
        return (f"the remaining {remaining:.2f} GiB is the activation workspace re-reserved after profiling (the "
                f"profile peaked at {peak:.2f} GiB) plus allocator rounding: nvidia-smi can grow by up to "
                f"{max(0.0, peak - remaining):.2f} GiB more under large batches")
    return (f"{remaining - peak:.2f} GiB beyond the parts and the full activation peak: fragmentation, sampler "
            "or attention workspaces, or memory outside vLLM")


# --- anomalies -------------------------------------------------------------------------------------------------

def anomalies(observed: dict, extras: dict, inference: Inference, prediction=None, smi_explanation=None,
              smi=None, run=None) -> list[str]:
    out = []
    total = observed.get("total_gpu_memory_gib")
    free = extras.get("free_memory_on_startup_gib")
    if free is not None and total is not None and total - free > 1.0:
        out.append(f"{total - free:.2f} GiB of the GPU was already in use when vLLM started (free {free} of {total} "
                   "GiB): other processes or a display share the card")
    if smi is not None and smi.gpus:
        gpu = smi.gpu(0)
        procs = [p for p in smi.processes_on(gpu.index) if p.used_mib]
        if len(procs) > 1:
            names = ", ".join(f"{p.name} ({p.used_mib} MiB)" for p in procs)
            out.append(f"several processes on the GPU: {names}")
    used = smi_explanation.used_mib if smi_explanation else observed.get("nvidia_smi_used_mib")
    smi_total = smi_explanation.total_mib if smi_explanation and smi_explanation.total_mib else observed.get(
        "nvidia_smi_total_mib")
    util = inference.settings.get("gpu_memory_utilization")
    if used and smi_total and util is not None:
        cap = float(util.value) * smi_total
        if used > cap + 512:
            out.append(f"nvidia-smi shows {used} MiB, above gpu_memory_utilization x total ({float(util.value):g} x "
                       f"{smi_total} = {cap:.0f} MiB): CUDA context, NCCL and graphs captured after the KV cache sit "
                       "outside the budget")
        elif used < cap - 1024 and not observed.get("startup_failed"):
            out.append(f"nvidia-smi shows {used} MiB, {cap - used:.0f} MiB below gpu_memory_utilization x total: "
                       "activation memory released after profiling is not re-reserved yet")
    if smi_explanation is not None:
        peak = observed.get("activation_peak_gib") or 0
        if smi_explanation.remaining_gib > peak + 1.0:
            out.append(f"{smi_explanation.remaining_gib - peak:.2f} GiB of nvidia-smi's figure is unaccounted "
                       "(fragmentation or memory outside vLLM)")
    concurrency = observed.get("max_concurrency")
    if concurrency is not None and concurrency < 1:
        out.append(f"the KV pool holds {concurrency:.2f}x of one max_model_len request: it is too small for "
                   "max_model_len")
    tokens = observed.get("kv_cache_tokens")
    length = inference.settings.get("max_model_len")
    if tokens is not None and length is not None and concurrency is None and tokens < int(length.value):
        out.append(f"KV cache holds {tokens:,} tokens, less than max_model_len {int(length.value):,}")
    kv = observed.get("kv_cache_gib")
    if kv is not None and kv <= 0:
        out.append(f"no memory left for the KV cache ({kv} GiB): weights + activation + non-torch fill the budget")
    non_torch = observed.get("non_torch_gib")
    tp = inference.settings.get("tensor_parallel_size")
    if non_torch is not None and non_torch > 1.0 and (tp is None or int(tp.value) == 1):
        out.append(f"non-torch memory {non_torch} GiB is large for one GPU (usual: 0.05-0.4 GiB): other processes, "
                   "a virtual GPU or a driver that reports memory differently")
    graph_est, graph = observed.get("cuda_graph_estimate_gib"), observed.get("cuda_graph_gib")
    if graph_est is not None and graph is not None and graph > graph_est + 0.25:
        out.append(f"CUDA graphs took {graph} GiB, {graph - graph_est:.2f} GiB more than estimated: that memory is "
                   "beyond the budget")
    return out


# --- what-ifs ----------------------------------------------------------------------------------------------------

def _fits(model, gpu, version, settings, source):
    breakdown, _ = explain_quietly(model, gpu, version, settings, source=source)
    return breakdown


def least_utilization(model, gpu, version, settings: dict, source, high: float = 0.99, safe: bool = True):
    """The smallest gpu_memory_utilization (2 decimals) with which one max_model_len request still fits, with
    room beyond the KV pool's error (intervals.starts_safely: explain's and fit's margin); `safe=False`: the
    least with which the engine starts at all (a refused start's fix, whose margin explain then shows)."""
    from ....intervals import starts_safely
    from ....units import least_hundredth

    def ok(u):
        breakdown = _fits(model, gpu, version, dict(settings, gpu_memory_utilization=u), source)
        if breakdown is None or breakdown.failure is not None:
            return None
        return breakdown if not safe or starts_safely(breakdown) else None

    return least_hundredth(ok, 0.01, high)


def what_ifs(model: str, gpu, version, settings: dict, current_u: float | None, source,
             observed_smi_mib: int | None = None) -> dict:
    """Flags that would shrink the footprint: each scenario at the least gpu_memory_utilization that still
    serves one max_model_len request, its predicted nvidia-smi figure, and the saving against the run as it is."""
    base_settings = dict(settings)
    if current_u is not None:
        base_settings["gpu_memory_utilization"] = current_u
    baseline = _fits(model, gpu, version, base_settings, source)
    if baseline is None:
        return {}
    length = baseline.max_model_len
    kv_dtype = str(baseline.setting("kv_cache_dtype"))
    scenarios = [("lower --gpu-memory-utilization", {})]
    if not kv_dtype.startswith("fp8"):
        scenarios.append(("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}))
    if length > 8192:
        scenarios.append((f"--max-model-len {length // 4}", {"max_model_len": length // 4}))
    batched = baseline.setting("max_num_batched_tokens")
    if batched > 2048:
        extra = {"max_num_batched_tokens": 2048}
        label = "--max-num-batched-tokens 2048"
        if baseline.engine == "v0" and length > 2048:
            extra["enable_chunked_prefill"] = True
            label = "--enable-chunked-prefill --max-num-batched-tokens 2048"
        scenarios.append((label, extra))
    if not baseline.setting("enforce_eager") and baseline.cuda_graph_bytes:
        scenarios.append(("--enforce-eager", {"enforce_eager": True, "_keep_u": True}))
    base_mib = baseline.nvidia_smi_used_mib
    current = observed_smi_mib or base_mib
    rows = []
    for label, change in scenarios:
        keep_u = change.pop("_keep_u", False)
        trial = dict(base_settings, **change)
        if keep_u:
            breakdown = _fits(model, gpu, version, trial, source)
            u = trial.get("gpu_memory_utilization", baseline.setting("gpu_memory_utilization"))
        else:
            u, breakdown = least_utilization(model, gpu, version, trial, source)
        if breakdown is None:
            continue
        saving = base_mib - breakdown.nvidia_smi_used_mib
        flags = label if keep_u or label.startswith("lower") else label
        if not keep_u:
            flags = (f"--gpu-memory-utilization {u:.2f}" if label.startswith("lower")
                     else f"{label} --gpu-memory-utilization {u:.2f}")
        rows.append({"flags": flags, "gpu_memory_utilization": round(float(u), 2),
                     "predicted_nvidia_smi_mib": breakdown.nvidia_smi_used_mib, "saving_mib": int(saving),
                     # a reading below the saving (nvidia-smi of another run): no less than nothing
                     "projected_nvidia_smi_mib": max(int(current - saving), 0), "kv_cache_tokens": breakdown.kv_cache_tokens,
                     "max_concurrency": round(breakdown.max_concurrency, 2)})
    plain = next((row["saving_mib"] for row in rows if row["flags"].startswith("--gpu-memory-utilization")), 0)
    rows = [row for row in rows if row["saving_mib"] > 64 and (
        row["flags"].startswith("--gpu-memory-utilization") or row["flags"] == "--enforce-eager"
        or row["saving_mib"] > plain + 64)]  # a flag that only allows the same lower utilization adds nothing
    rows.sort(key=lambda row: -row["saving_mib"])
    return {"baseline": {"gpu_memory_utilization": baseline.setting("gpu_memory_utilization"),
                         "predicted_nvidia_smi_mib": base_mib, "current_nvidia_smi_mib": current,
                         "max_model_len": length},
            "scenarios": rows}




# --- a failed start: the flags that make it start ------------------------------------------------------------------

def start_fixes(model: str, gpu, version, settings: dict, source) -> list[dict]:
    """Flags that make a refused start start, each checked with explain (only those that start are kept):
    a larger budget, a shorter context, an fp8 KV cache, eager mode; with the predicted nvidia-smi figure."""
    baseline = _fits(model, gpu, version, settings, source)
    if baseline is None or baseline.failure is None:
        return []
    current_u = float(settings.get("gpu_memory_utilization", baseline.setting("gpu_memory_utilization")))
    trials = []
    u, _ = least_utilization(model, gpu, version, settings, source, high=0.98, safe=False)
    if u is not None and u > current_u:
        trials.append((f"--gpu-memory-utilization {u:.2f}", {"gpu_memory_utilization": u}))
    longest = baseline.failure.largest_fitting_max_model_len
    if longest and longest < baseline.max_model_len:
        trials.append((f"--max-model-len {longest}", {"max_model_len": longest}))
    if not str(baseline.setting("kv_cache_dtype")).startswith("fp8"):
        trials.append(("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}))
    if not baseline.setting("enforce_eager") and baseline.cuda_graph_bytes:
        trials.append(("--enforce-eager", {"enforce_eager": True}))
    fixes = []
    for flags, change in trials:
        breakdown = _fits(model, gpu, version, dict(settings, **change), source)
        if breakdown is not None and breakdown.failure is None:
            fixes.append({"flags": flags, "predicted_nvidia_smi_mib": breakdown.nvidia_smi_used_mib,
                          "kv_cache_tokens": breakdown.kv_cache_tokens, "max_model_len": breakdown.max_model_len,
                          "max_concurrency": round(breakdown.max_concurrency, 2)})
    return fixes
