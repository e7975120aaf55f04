"""What a log does not say, inferred with a stated confidence.

Confidence words, strongest first:
  given    - the user said it (--model, --gpu, --vllm-version) or passed it to vLLM (non-default args)
  printed  - vLLM printed the value it used (config line, profiling line, concurrency line ...)
  high     - read off the log with one reading only (a launch command quoted in the log, budget / total)
  medium   - implied by the log's format or figures (release from the line formats, GPU from the total,
             tensor parallel from the worker prefixes)
  low      - needs the prediction's own estimates (gpu_memory_utilization from blocks x bytes per block
             plus a predicted activation peak), or one of several equally good answers
  default  - not in the log at all: the release's default is assumed
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

from ... import get_engine
from ....forensics.predict import explain_quietly
from ....units import GIB, format_version, parse_version

STRONG = ("given", "printed", "high")
INFERRED = STRONG + ("medium", "low")
# Settings explain() takes (vLLM's names); the rest of SCHEMA's settings do not change the prediction.
PREDICTION_SETTINGS = (
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization",
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_dtype", "dtype",
    "quantization", "enforce_eager", "swap_space", "kv_cache_memory_bytes", "num_gpu_blocks_override",
    "enable_chunked_prefill", "enable_expert_parallel", "cpu_offload_gb", "enable_lora", "max_loras",
    "max_lora_rank", "entrypoint",
)
GPU_TOTAL_TOLERANCE_GIB = 0.35  # the CUDA total of one card varies with driver and ECC (hardware.py)
CANDIDATE_TOLERANCE = 0.02  # weights within 2 % of the logged figure


@dataclass(frozen=True)
class Inferred:
    value: object
    basis: str
    confidence: str
    alternatives: tuple = ()

    def to_dict(self) -> dict:
        value = self.value
        if hasattr(value, "name") and hasattr(value, "cuda_total_bytes"):
            value = value.name
        out = {"value": value, "basis": self.basis, "confidence": self.confidence}
        if self.alternatives:
            out["alternatives"] = list(self.alternatives)
        return out


@dataclass
class Candidate:
    model: str
    tensor_parallel_size: int
    precision: str
    weights_gib: float
    weights_error: float  # (predicted - logged) / logged
    kv_bytes_per_token: int
    block_size: int
    kv_checks: list[str] = field(default_factory=list)
    kv_consistent: bool | None = None
    kv_pool_gib: float | None = None  # logged blocks x this model's bytes per block

    def to_dict(self) -> dict:
        out = {"model": self.model, "tensor_parallel_size": self.tensor_parallel_size, "precision": self.precision,
               "weights_gib": round(self.weights_gib, 4), "weights_error": round(self.weights_error, 5),
               "kv_bytes_per_token": self.kv_bytes_per_token, "block_size": self.block_size,
               "kv_consistent": self.kv_consistent, "kv_checks": self.kv_checks}
        if self.kv_pool_gib is not None:
            out["kv_pool_gib"] = round(self.kv_pool_gib, 3)
        return out


@dataclass
class Inference:
    version: Inferred | None = None
    engine: Inferred | None = None
    gpu: Inferred | None = None  # value: hardware.Gpu (the prediction's device: the logged total when printed)
    model: Inferred | None = None
    settings: dict[str, Inferred] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    candidates_searched: int = 0
    notes: list[str] = field(default_factory=list)

    def setting_values(self, strong_only: bool = False) -> dict:
        return {name: item.value for name, item in self.settings.items()
                if not strong_only or item.confidence in STRONG}

    def prediction_settings(self, include: tuple[str, ...] = STRONG, utilization: tuple[str, ...] = STRONG) -> dict:
        """Settings for api.explain: those inferred with a confidence in `include` (the budget's
        gpu_memory_utilization only with one in `utilization`; defaults are the release's anyway)."""
        out = {}
        for name in PREDICTION_SETTINGS:
            item = self.settings.get(name)
            allowed = utilization if name == "gpu_memory_utilization" else include
            if item is not None and item.confidence in allowed and item.value is not None:
                out[name] = item.value
        if "entrypoint" in out:
            out["entrypoint"] = str(out["entrypoint"]).lower()
            if out["entrypoint"] not in ("serve", "llm"):
                out.pop("entrypoint")
        if self.engine is not None and self.version is not None and get_engine("vllm").releases.rule_at(parse_version(str(self.version.value)),
                                                                            "v1_available"):
            out["engine"] = self.engine.value  # a logged engine path chooses only once V1 exists beside V0
        return out


# --- release and engine ------------------------------------------------------------------------------------

def _normalize_version(text: str) -> str | None:
    try:
        return format_version(parse_version(text))
    except ValueError:
        return None


def infer_release(run, log_markers=None, given: str | None = None) -> tuple[Inferred | None, Inferred | None]:
    logs = get_engine("vllm").logs.reader()  # vLLM's log formats and eras (engines/vllm/logs/)
    version = None
    if given:
        version = Inferred(_normalize_version(given) or given, "--vllm-version", "given")
    else:
        stated = run.version
        era = logs.era_from_markers(run.markers) or (logs.era_from_markers(log_markers) if log_markers else None)
        if stated is not None and not stated[1].startswith("CUDA-graph hint"):
            text, basis, line = stated
            normalized = _normalize_version(text)
            confidence = "printed" if basis in ("config line", "server banner", "version banner") else "high"
            if normalized:
                version = Inferred(normalized, f"{basis} (line {line}: {text})", confidence)
        if version is None:
            hints = [v for v in run.versions if v[1].startswith("CUDA-graph hint")]
            candidates = []
            if hints:
                candidates.append((parse_version(hints[0][0]), hints[0][1]))
            if era:
                candidates.append((parse_version(era[0]), "log format: " + logs.era_evidence()[era[1]]))
            if candidates:
                best = max(candidates, key=lambda item: item[0])
                detail = best[1]
                if era and best[1].startswith("log format"):
                    detail += f"; that format is printed by {logs.era_ranges().get(era[1], 'that era')}"
                version = Inferred(format_version(best[0]), detail, "medium" if era and era[1] != "v1-alpha-blocks"
                                   else "low")
    engine = None
    source = run.markers if logs.engine_from_markers(run.markers) else log_markers
    markers = logs.engine_from_markers(source) if source is not None else None
    if run.engine_hint:
        engine = Inferred(run.engine_hint, "config line ('Initializing a V0/V1 LLM engine')", "printed")
    elif markers:
        evidence = source.engine_evidence.get(markers, "")
        why = f"{markers.upper()} line: {evidence}" + (" (V1 is checked first: V1 also prints some V0 phrases)"
                                                         if markers == "v1" and "v0" in source.engine else "")
        alpha = markers == "v1" and "without CPU blocks" in evidence
        engine = Inferred(markers, why, "low" if alpha else "medium")
    elif version is not None:
        release_rules = get_engine("vllm").releases.rules

        try:
            default = release_rules(parse_version(str(version.value)))
            engine = Inferred(default.engine, f"the default engine of vLLM {version.value}", "default")
        except ValueError:
            engine = None
    return version, engine


# --- GPU ------------------------------------------------------------------------------------------------

def infer_gpu(run, observed: dict, given: str | None = None, smi=None) -> Inferred | None:
    """The GPU the run had: named by the user, named in the log or nvidia-smi, or matched by its CUDA total."""
    from ....hardware import UnknownGpuError, all_gpus, custom_gpu, find_gpu

    total = observed.get("total_gpu_memory_gib")
    chosen, basis, confidence, alternatives = None, "", "", ()
    if given:
        chosen, basis, confidence = find_gpu(given), "--gpu", "given"
    if chosen is None:
        names = [(name, basis) for name, basis, _ in run.gpu_names]
        if smi is not None:
            names += [(gpu.name, "nvidia-smi") for gpu in smi.gpus if gpu.name]
        names += [(item["name"], "nvidia-smi quoted in the log") for item in run.smi_gpus if item.get("name")]
        for name, where in names:
            try:
                chosen, basis, confidence = find_gpu(name), f"{where}: {name}", "printed"
                break
            except (UnknownGpuError, ValueError):
                continue
    smi_total = observed.get("nvidia_smi_total_mib")
    if smi is not None and smi.gpus and smi.gpus[0].total_mib:
        smi_total = smi.gpus[0].total_mib
    if chosen is None and smi_total:
        exact = [gpu for gpu in all_gpus() if gpu.nvidia_smi_total_mib == smi_total]
        if exact:
            exact.sort(key=lambda gpu: (not gpu.common, gpu.name))
            chosen, basis = exact[0], f"nvidia-smi total {smi_total} MiB"
            confidence = "high" if len(exact) == 1 else "medium"
            alternatives = tuple(gpu.name for gpu in exact[1:])
    if chosen is None and total:
        near = [gpu for gpu in all_gpus() if abs(gpu.cuda_total_gib - total) <= GPU_TOTAL_TOLERANCE_GIB]
        near.sort(key=lambda gpu: (round(abs(gpu.cuda_total_gib - total), 2), not gpu.common, gpu.name))
        if near:
            chosen, basis = near[0], f"CUDA total {total} GiB (catalog: {near[0].cuda_total_gib:.2f} GiB)"
            same = [gpu for gpu in near if abs(gpu.cuda_total_gib - near[0].cuda_total_gib) < 0.05]
            confidence = "medium" if len(same) == 1 else "low"
            alternatives = tuple(gpu.name for gpu in near[1:5])
    if chosen is None:
        if total:
            device = custom_gpu(int(round(total * GIB)), name=f"GPU with {total} GiB", compute_capability=(8, 0))
            return Inferred(device, f"only its CUDA total {total} GiB is known (sm80 assumed)", "low")
        return None
    if total and abs(chosen.cuda_total_gib - total) > 0.005:
        # predict with the total this run saw (it varies with driver and ECC)
        device = custom_gpu(int(round(total * GIB)), name=chosen.name, compute_capability=chosen.compute_capability)
        return Inferred(device, basis + f"; the logged total {total} GiB is used", confidence, alternatives)
    return Inferred(chosen, basis, confidence, alternatives)


# --- settings -------------------------------------------------------------------------------------------

_CONFIDENCE_OF = {"printed": "printed", "given": "given", "launch command": "high", "implied": "medium"}
_DTYPES = {"half": "float16", "float16": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float": "float32", "float32": "float32", "auto": "auto"}


# counts vLLM refuses below 1 (config validation): a log showing one less (or no whole number: 1e999 reads as
# infinity) was not a start with it
_POSITIVE_COUNTS = ("max_num_batched_tokens", "max_num_seqs", "block_size", "tensor_parallel_size",
                    "pipeline_parallel_size", "data_parallel_size")


def _normal_setting(name: str, value):
    if name in _POSITIVE_COUNTS and isinstance(value, (int, float)) and not isinstance(value, bool) and not (
            1 <= value < 1 << 31 and value == int(value)):  # (checked in this order: inf and NaN fail the bounds)
        return None
    if name == "dtype" and isinstance(value, str):
        return _DTYPES.get(value.lower().replace("torch.", ""), value)
    if name == "quantization" and isinstance(value, str) and value.lower() in ("none", ""):
        return None
    if name == "entrypoint" and isinstance(value, str):
        return "LLM" if value.lower() == "llm" else value.lower()
    return value


def settings_from_run(run) -> dict[str, Inferred]:
    out = {}
    for name, evidence in run.settings.items():
        value = _normal_setting(name, evidence.value)
        if value is None:
            continue
        out[name] = Inferred(value, f"{evidence.basis} (line {evidence.line})", _CONFIDENCE_OF.get(evidence.confidence,
                                                                                                     "medium"))
    return out


def infer_parallelism(run, settings: dict[str, Inferred]) -> None:
    """Tensor parallel from the worker prefixes when nothing printed it."""
    if "tensor_parallel_size" in settings:
        return
    if run.world_size:
        pp = settings.get("pipeline_parallel_size")
        size = run.world_size // int(pp.value) if pp is not None else run.world_size
        settings["tensor_parallel_size"] = Inferred(
            size, f"the message queue's local_reader_ranks: {run.world_size} workers on this node"
                  + ("" if pp is not None else " (pipeline parallel 1 assumed)"), "medium")
        return
    sources = list(run.sources.values())
    tp_indices = [s.tp for s in sources if s.tp is not None]
    ranks = [s.rank for s in sources if s.rank is not None]
    v0_workers = set()
    ray_workers = set()
    for s in sources:
        if s.label.startswith("VllmWorkerProcess"):
            v0_workers |= s.pids
        elif "Ray" in s.label:
            ray_workers |= s.pids
    if tp_indices:
        size = max(tp_indices) + 1
        settings["tensor_parallel_size"] = Inferred(
            size, f"worker prefixes TP0..TP{max(tp_indices)} (at least {size} ranks; a power of two above is possible)",
            "medium")
    elif ranks:
        size = max(ranks) + 1
        settings["tensor_parallel_size"] = Inferred(size, f"worker prefixes up to rank={max(ranks)} (at least {size})",
                                                    "low")
    elif v0_workers:
        size = len(v0_workers) + 1
        size = 1 << (size - 1).bit_length()
        settings["tensor_parallel_size"] = Inferred(
            size, f"{len(v0_workers)} VllmWorkerProcess worker(s) + the driver visible (at least {len(v0_workers) + 1}; "
                  "next power of two)", "low")
    elif ray_workers:
        settings["tensor_parallel_size"] = Inferred(
            len(ray_workers), f"{len(ray_workers)} Ray workers visible (TP x PP at least that)", "low")


# --- the model -----------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _catalog_ids() -> dict[str, str]:
    """lower-case repo id -> repo id, read once per process (each match re-read ~170 catalog files: a 2 MiB
    pasted log cost minutes of server CPU, issue 31)."""
    from ....model.sources import catalog_entries

    return {entry.repo_id.lower(): entry.repo_id for entry in catalog_entries()}


# model names tried per log text: a log names its model a few times; a pasted text repeating `model='x'`
# thousands of times is not asked about each one
MAX_NAMED_CANDIDATES = 64
MAX_NAME_CHARS = 512  # a repo id or path; a longer "name" is not one


@functools.lru_cache(maxsize=4096)
def catalog_match(name: str) -> tuple[str, str] | None:
    """A model name as a log prints it (repo id, local path, HF cache path) -> (catalog repo id, how)."""
    if len(name) > MAX_NAME_CHARS:
        return None
    ids = _catalog_ids()
    text = name.strip().rstrip("/")
    if text.lower() in ids:
        return ids[text.lower()], "repo id"
    cache = re.search(r"models--([^/]+)--([^/]+)", text)
    if cache and f"{cache.group(1)}/{cache.group(2)}".lower() in ids:
        return ids[f"{cache.group(1)}/{cache.group(2)}".lower()], "Hugging Face cache path"
    parts = [part for part in re.split(r"[/\\]", text) if part]
    if len(parts) >= 2 and f"{parts[-2]}/{parts[-1]}".lower() in ids:
        return ids[f"{parts[-2]}/{parts[-1]}".lower()], "the path's last two folders"
    if not parts:
        return None
    last = parts[-1].lower()
    last_plain = re.sub(r"^meta-", "", last)
    by_name = [repo for key, repo in ids.items()
               if key.split("/", 1)[1] in (last, last_plain) or re.sub(r"^meta-", "", key.split("/", 1)[1]) == last_plain]
    if len(by_name) == 1:
        return by_name[0], f"the folder name {parts[-1]!r}"
    return None


# where a log's text names the model besides the lines the parser reads: a `docker run` image's first argument,
# vLLM's config dump, a load line, the served model name (which is often the repo id)
_NAMED = (
    (re.compile(r"vllm/vllm-openai:\S+\s+(?:--model[= ]\s*)?['\"]?([^\s'\"-][^\s'\"]*)"), "the docker run line"),
    (re.compile(r"\bmodel='([^']+)'"), "the engine's config dump"),
    (re.compile(r"\bLoading model (?:weights )?(?:from )?['\"]?([\w.-]+/[\w.-]+)"), "a 'Loading model' line"),
    (re.compile(r"served[-_]model[-_]name[=: ]+\[?['\"]?([\w.-]+/[\w.-]+)"), "the served model name"),
)


def model_named_in(text: str) -> tuple[str, str] | None:
    """(catalog repo id, where) of the first catalog model a log's text names, or None (at most
    MAX_NAMED_CANDIDATES distinct names are tried)."""
    tried: set[str] = set()
    for line in text.splitlines():
        for pattern, where in _NAMED:
            for found in pattern.finditer(line):
                candidate = found.group(1)
                if candidate in tried:
                    continue
                if len(tried) >= MAX_NAMED_CANDIDATES:
                    return None
                tried.add(candidate)
                match = catalog_match(candidate)
                if match is not None:
                    return match[0], f"{where}: {candidate}"
    return None


def infer_model(run, given: str | None = None, named: tuple[str, str] | None = None) -> Inferred | None:
    """--model, else the model the parser read, else one the log's text names (`named`): any of them wins over
    a model matched by its weights alone."""
    if given:
        return Inferred(given, "--model", "given")
    if run.model is None or (named is not None and catalog_match(run.model[0]) is None):
        return Inferred(named[0], f"named in the log text ({named[1]})", "medium") if named else None
    name, basis, line = run.model
    match = catalog_match(name)
    if match is None:
        return Inferred(name, f"{basis} (line {line}); not in the catalog", "printed")
    repo, how = match
    confidence = "printed" if how == "repo id" else "medium"
    return Inferred(repo, f"{basis} (line {line}: {name}; matched by {how})", confidence)


# --- prediction helpers -----------------------------------------------------------------------------------

def nominal_gpu():
    from ....hardware import custom_gpu

    return custom_gpu(80 * GIB, name="GPU not known (nominal 80 GiB, sm80)", compute_capability=(8, 0))


# --- candidate models ---------------------------------------------------------------------------------------

def find_candidates(observed: dict, inference: Inference, version: str | None, limit: int = 8) -> list[Candidate]:
    """Catalog models whose weights (per GPU) and KV figures agree with the log."""
    from ....model.sources import catalog_entries

    weights = observed.get("weights_gib")
    if not weights or weights <= 0:
        return []
    gpu = inference.gpu.value if inference.gpu else nominal_gpu()
    settings = inference.prediction_settings(include=STRONG + ("medium",))
    settings.pop("gpu_memory_utilization", None)
    settings.pop("kv_cache_memory_bytes", None)
    tp_item = inference.settings.get("tensor_parallel_size")
    if tp_item is not None and tp_item.confidence in STRONG:
        tp_options = [int(tp_item.value)]
    elif tp_item is not None:
        low = int(tp_item.value)
        tp_options = sorted({low} | {size for size in (1, 2, 4, 8, 16) if size >= low})
    else:
        tp_options = [1, 2, 4, 8]
    found = []
    searched = 0
    for entry in catalog_entries():
        best = None
        first_weights = None
        for tp in tp_options:
            if first_weights is not None and not 0.6 <= first_weights * tp_options[0] / tp / weights <= 1.7:
                continue  # per-GPU weights scale ~1/tp: this split cannot come near the logged figure
            trial = dict(settings, tensor_parallel_size=tp)
            breakdown, _ = explain_quietly(entry.repo_id, gpu, version, trial)
            searched += 1
            if breakdown is None:
                continue
            if first_weights is None:
                first_weights = breakdown.weights_bytes / GIB
            stages = [rank.weights_bytes / GIB for rank in breakdown.per_rank] or [breakdown.weights_bytes / GIB]
            predicted = min(stages, key=lambda value: abs(value - weights))
            error = (predicted - weights) / weights
            if abs(error) <= CANDIDATE_TOLERANCE and (best is None or abs(error) < abs(best[1])):
                best = (breakdown, error, predicted, tp, trial)
        if best is None:
            continue
        breakdown, error, predicted, tp, trial = best
        candidate = Candidate(entry.repo_id, tp, _precision(entry.repo_id), predicted, error,
                              breakdown.kv_bytes_per_token, breakdown.block_size)
        _check_kv(candidate, observed, breakdown, gpu, version, trial, inference)
        if candidate.kv_consistent is not False:
            found.append(candidate)
    inference.candidates_searched = searched
    found.sort(key=lambda c: (c.kv_consistent is not True, abs(c.weights_error)))
    return found[:limit]


def _precision(repo_id: str) -> str:
    from .... import api

    try:
        spec = api.model_spec(repo_id, "catalog")
    except Exception:  # noqa: BLE001
        return "?"
    return spec.quantization.describe() if spec.quantization else spec.torch_dtype


def _check_kv(candidate: Candidate, observed: dict, breakdown, gpu, version, settings, inference) -> None:
    """Do the logged KV figures fit this model's bytes per block / token? (each check on its own)"""
    from .... import api
    engine = get_engine("vllm")
    kv_plan_for_budget, resolve_version = engine.kv_plan_for_budget, engine.releases.resolve

    block_bytes = breakdown.kv_bytes_per_token * breakdown.block_size
    verdicts = []
    blocks = observed.get("num_gpu_blocks")
    if blocks is not None and block_bytes:
        candidate.kv_pool_gib = blocks * block_bytes / GIB
    kv = observed.get("kv_cache_gib")
    if kv is not None and kv > 0 and any(k in observed for k in ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency")):
        from ....forensics.observed import half_unit

        half = max(half_unit(kv), 0.005)
        try:
            spec = api.model_spec(candidate.model, "catalog")
            user = dict(settings, max_model_len=breakdown.max_model_len, engine=breakdown.engine)
            plans = [kv_plan_for_budget(spec, gpu, user, resolve_version(breakdown.vllm_version), int(budget))
                     for budget in ((kv - half) * GIB, (kv + half) * GIB)]
        except Exception:  # noqa: BLE001
            plans = []
        for key, attribute, slack in (("num_gpu_blocks", "num_blocks", 0), ("kv_cache_tokens", "kv_cache_tokens", 0),
                                      ("max_concurrency", "max_concurrency", 0.006)):
            if key in observed and plans:
                low, high = getattr(plans[0], attribute), getattr(plans[1], attribute)
                ok = low - slack <= observed[key] <= high + slack
                if key == "max_concurrency" and observed.get("max_concurrency_tokens") not in (None, breakdown.max_model_len):
                    continue
                verdicts.append((ok, f"{key} {observed[key]} {'fits' if ok else 'does not fit'} {kv} GiB / "
                                     f"{block_bytes:,} B per block ({low}..{high})"))
    cpu = observed.get("num_cpu_blocks")
    if cpu and block_bytes and breakdown.engine == "v0":
        swap = inference.settings.get("swap_space")
        swap_gib = float(swap.value) if swap is not None else 4.0
        expected = int(swap_gib * GIB // block_bytes)
        ok = abs(expected - cpu) <= 1
        verdicts.append((ok, f"{cpu} CPU blocks {'fit' if ok else 'do not fit'} {swap_gib:g} GiB swap / "
                             f"{block_bytes:,} B per block ({expected})"))
    needed = observed.get("kv_needed_gib")
    length = inference.settings.get("max_model_len")
    if needed and length is not None and block_bytes:
        expected = math.ceil(int(length.value) / breakdown.block_size) * block_bytes / GIB
        ok = abs(expected - needed) <= max(0.01, 0.01 * needed)
        verdicts.append((ok, f"KV needed for {length.value} tokens: {needed} GiB logged vs {expected:.2f} GiB"))
    candidate.kv_checks = [text for _, text in verdicts]
    candidate.kv_consistent = all(ok for ok, _ in verdicts) if verdicts else None


# --- quantization from the weights figure ---------------------------------------------------------------------

def infer_quantization(observed: dict, inference: Inference, model: str, source: str | None) -> Inferred | None:
    """The checkpoint's own method, or an online one (--quantization fp8 / bitsandbytes) when the logged weights
    fit that better than the checkpoint as stored."""
    from .... import api

    weights = observed.get("weights_gib")
    try:
        spec = api.model_spec(model, source)
    except Exception:  # noqa: BLE001
        return None
    if spec.quantization is not None:
        return Inferred(spec.quantization.method, f"the checkpoint's quantization config ({spec.quantization.describe()})",
                        "high")
    if not weights:
        return None
    gpu = inference.gpu.value if inference.gpu else nominal_gpu()
    version = inference.version.value if inference.version else None
    settings = inference.prediction_settings(INFERRED)
    settings.pop("quantization", None)
    results = []
    for method in (None, "fp8", "bitsandbytes"):
        trial = dict(settings, **({"quantization": method} if method else {}))
        breakdown, _ = explain_quietly(model, gpu, version, trial, source=source)
        if breakdown is not None:
            results.append((abs(breakdown.weights_bytes / GIB - weights) / weights, method, breakdown.weights_bytes / GIB))
    if not results:
        return None
    results.sort(key=lambda item: item[0])
    error, method, predicted = results[0]
    if method is None or error > 0.03:
        return None
    plain = next((value for _, m, value in results if m is None), None)
    return Inferred(method, f"the logged weights {weights:g} GiB fit --quantization {method} ({predicted:.2f} GiB) "
                            f"better than the {spec.torch_dtype} checkpoint as stored"
                            + (f" ({plain:.2f} GiB)" if plain else ""), "medium")


# --- gpu_memory_utilization from the budget ---------------------------------------------------------------------

def infer_utilization(observed: dict, prediction, inference: Inference) -> Inferred | None:
    """u from the figures that fill the budget: logged where printed, predicted where not."""
    total = observed.get("total_gpu_memory_gib")
    requested = observed.get("requested_memory_gib")
    if requested and total:
        value = requested / total
        return Inferred(round(value, 2), f"budget {requested} GiB / total {total} GiB", "high")
    if inference.gpu is None and not total:
        return None  # a fraction of an unknown total says nothing
    total_bytes = total * GIB if total else (prediction.total_gpu_bytes if prediction is not None else None)
    if prediction is None or not total_bytes:
        return None
    parts, sources, predicted_parts = [], [], 0
    for key, label, predicted in (
        ("weights_gib", "weights", prediction.weights_bytes),
        ("activation_peak_gib", "activation", prediction.activation_peak_bytes),
        ("non_torch_gib", "non-torch", prediction.non_torch_bytes),
    ):
        if observed.get(key) is not None:
            parts.append(observed[key] * GIB)
            sources.append(f"{label} {observed[key]:.2f} (logged)")
        else:
            parts.append(predicted)
            sources.append(f"{label} {predicted / GIB:.2f} (predicted)")
            predicted_parts += 1
    if prediction.cuda_graph_budgeted:
        estimate = observed.get("cuda_graph_estimate_gib")
        parts.append(estimate * GIB if estimate is not None else prediction.cuda_graph_bytes)
        sources.append(f"CUDA-graph estimate {parts[-1] / GIB:.2f}" + (" (logged)" if estimate is not None else
                                                                         " (predicted)"))
        predicted_parts += estimate is None
    kv = observed.get("kv_cache_gib")
    blocks = observed.get("num_gpu_blocks")
    if kv is not None:
        parts.append(kv * GIB)
        sources.append(f"KV {kv:.2f} (logged)")
    elif blocks is not None and prediction.kv_bytes_per_token:
        block_bytes = prediction.kv_bytes_per_token * prediction.block_size
        parts.append((blocks + 0.5) * block_bytes)
        sources.append(f"KV {blocks * block_bytes / GIB:.2f} ({blocks} blocks x {block_bytes:,} B)")
        predicted_parts += 1
    else:
        return None
    budget = sum(parts)
    value = budget / total_bytes
    confidence = "medium" if predicted_parts <= 1 and any("activation" in s and "logged" in s for s in sources) else "low"
    return Inferred(round(value, 2), f"budget = {' + '.join(sources)} = {budget / GIB:.2f} GiB of "
                                     f"{total_bytes / GIB:.2f} GiB", confidence)


# --- everything for one run ---------------------------------------------------------------------------------

def infer_run(run, observed: dict, *, log_markers=None, model: str | None = None, gpu: str | None = None,
              vllm_version: str | None = None, smi=None, search_candidates: bool = True,
              named: tuple[str, str] | None = None) -> Inference:
    inference = Inference()
    inference.version, inference.engine = infer_release(run, log_markers, vllm_version)
    inference.gpu = infer_gpu(run, observed, gpu, smi)
    inference.settings = settings_from_run(run)
    infer_parallelism(run, inference.settings)
    if "max_model_len" not in inference.settings and observed.get("max_concurrency_tokens"):
        inference.settings["max_model_len"] = Inferred(observed["max_concurrency_tokens"], "concurrency line", "printed")
    inference.model = infer_model(run, model, named)
    version = inference.version.value if inference.version else None
    if version and not get_engine("vllm").releases.is_modelled(parse_version(str(version))):
        inference.notes.append(f"vLLM {version} is older than the oldest modelled release "
                               f"({get_engine('vllm').releases.oldest}): no prediction")
        return inference
    if inference.model is None and search_candidates:
        inference.candidates = find_candidates(observed, inference, version)
    return inference
