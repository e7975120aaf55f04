"""Accuracy against real vLLM startup logs (shared/groundtruth/SCHEMA.md format)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path


from .engines import get_engine
from . import fidelity
from .render import schema_figures
from .units import GIB, parse_version

def _vllm_logs():
    """vLLM's log reader (engines/vllm/logs/), through the engine: the release and path a log's format shows."""
    return get_engine("vllm").logs.reader()


def infer_engine_from_log(log: str) -> str | None:
    return _vllm_logs().infer_engine_from_log(log)


def infer_version_from_log(log: str) -> str | None:
    return _vllm_logs().infer_version_from_log(log)


def refine_wildcard_version(version: str, log: str, other_quantization: bool = False) -> str:
    return _vllm_logs().refine_wildcard_version(version, log, other_quantization)


# Figures compared when a case has them: observed key -> how to read the prediction.
FIGURES = (
    "weights_gib", "kv_cache_gib", "num_gpu_blocks", "num_cpu_blocks", "kv_cache_tokens", "max_concurrency",
    "non_torch_gib", "activation_peak_gib", "cuda_graph_gib", "cuda_graph_estimate_gib", "requested_memory_gib",
    "nvidia_smi_used_mib",
)
# Figures derived from the case's own logged KV budget (isolates the KV arithmetic).
FROM_LOGGED_BUDGET = ("blocks_from_logged_budget", "tokens_from_logged_budget", "concurrency_from_logged_budget")
# requested_memory_gib is u x the logged total: scored against that total it checks arithmetic, not a prediction
CONSISTENCY_FIGURES = ("requested_memory_gib",)
HEADLINE_FIGURES = tuple(key for key in FIGURES if key not in CONSISTENCY_FIGURES) + FROM_LOGGED_BUDGET
# SGLang's figures (SCHEMA.md's SGLang keys), then #tokens from the log's own free memory
SGLANG_FIGURES = (
    "weights_mem_usage_gb", "kv_cache_tokens", "k_size_gb", "max_running_requests",
    "context_len", "load_begin_avail_mem_gb", "load_end_avail_mem_gb", "cuda_graph_mem_usage_gb",
    "available_gpu_mem_gb", "nvidia_smi_used_mib", "tokens_from_logged_memory", "tokens_from_logged_start",
)
# Architecture tags reported in their own tables (issue 4).
ARCHITECTURE_TAGS = ("moe", "mla", "hybrid", "multimodal", "lora", "speculative")
# Tags SCHEMA.md asks to report apart.
SEPARATE_TAGS = ("non-nvidia", "approximate", "shared-gpu")
# Settings that change memory in ways this release of the tool does not model yet.
UNMODELLED_SETTINGS: dict[str, str] = {}
PASSED_SETTINGS = (
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "block_size", "dtype", "quantization", "kv_cache_dtype", "enforce_eager", "swap_space",
    "entrypoint", "enable_chunked_prefill", "cpu_offload_gb", "enable_lora", "speculative_config",
    "enable_prefix_caching",
)


def shipped_case_files() -> list[Path]:
    """The ground truth shipped with the tool: a checkout's groundtruth/dev*.jsonl, else the copy `pip install`
    puts under <prefix>/share/vram-detective/groundtruth (pyproject data-files)."""
    import sys

    for folder in (Path(__file__).resolve().parents[2] / "groundtruth",
                   Path(sys.prefix) / "share" / "vram-detective" / "groundtruth"):
        files = sorted(folder.glob("dev*.jsonl"))
        if files:
            return files
    raise FileNotFoundError("no ground truth found (groundtruth/dev*.jsonl of a checkout, or "
                            f"{Path(sys.prefix) / 'share' / 'vram-detective' / 'groundtruth'}): give a JSONL file")


def load_cases(path: str) -> list[dict]:
    """Every case of a JSONL file; a line that is not a case object is an error naming its line."""
    cases, unreadable = read_cases(path)
    if unreadable:
        raise ValueError(f"{path}:{unreadable[0]['line']}: {unreadable[0]['reason']}")
    return cases


def read_cases(path: str) -> tuple[list[dict], list[dict]]:
    """(cases, unreadable lines): a line that is not a JSON object with an `id` is listed with its number and
    why, and the rest of the file is still read (`score` scores what it can)."""
    cases, unreadable = [], []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except json.JSONDecodeError as error:
            unreadable.append({"line": number, "reason": f"not valid JSON ({error.msg})"})
            continue
        if not isinstance(case, dict) or not case.get("id"):
            unreadable.append({"line": number, "reason": "not a case (a JSON object with an `id`)"})
            continue
        cases.append(case)
    return cases, unreadable


@dataclass(frozen=True)
class CaseModel:
    """The model a case ran, resolved the way `explain` resolves a name, and how (for the case's row)."""
    spec: object  # ModelSpec
    origin: str  # "case model_config", "catalog", "hub", "local", "gguf"
    note: str = ""  # said in the row: weights sized from config.json only, the case's own config
    gguf: object = None  # the GGUF header's tensor table when the case's file is at hand


_PAREN = re.compile(r"\s*\(.*\)\s*$")


def case_model(case: dict, catalog_only: bool = False) -> CaseModel | str:
    """The case's model spec: its `model_config` (a supplement, groundtruth/SCHEMA.md), else `model` through the
    sources `explain` reads (catalog, then the local Hugging Face cache or the Hub; only the catalog with
    `catalog_only`). A string says why there is none."""
    from .api import model_source
    from .model.config import ConfigError, parse_config

    model = _PAREN.sub("", str(case.get("model") or "")).strip()  # 'repo (ollama tag)' names the repo
    gguf_file = str((case.get("settings") or {}).get("gguf_file") or "")
    if gguf_file.endswith(".gguf") and Path(gguf_file).expanduser().is_file():
        # the file the case ran is at hand: its header is the model (tensor types included), as `explain FILE` reads it
        found = model_source(str(Path(gguf_file).expanduser()), "gguf")
        return CaseModel(parse_config(found.config, name=found.repo_id), "gguf", f"GGUF header of {gguf_file}",
                         found.checkpoint)
    if isinstance(case.get("model_config"), dict):
        config = case["model_config"]
        try:
            spec = parse_config(config, name=model or (config.get("architectures") or ["model"])[0])
        except ConfigError as error:
            return f"model_config: {error}"
        return CaseModel(spec, "case model_config", "model shape from the case's model_config")
    if not model:
        return "model not named in the case"
    try:
        found = model_source(model, "catalog" if catalog_only else None)
        spec = parse_config(found.config, name=found.repo_id)
    except LookupError:
        if catalog_only:
            return f"{model} not in the catalog"
        return f"{model}: no config.json in the local Hugging Face cache or the Hub, and not in the catalog"
    except ValueError as error:
        return str(error).splitlines()[0]
    note = ""
    if found.origin == "hub" and found.checkpoint is None:
        note = f"weights sized from config.json ({found.provenance}: no safetensors headers)"
    return CaseModel(spec, found.origin, note)


def _sizable_case_model(case: dict, catalog_only: bool) -> CaseModel | str:
    """The case's model when its GPU can be sized too, else why not (the model's reason first)."""
    model = case_model(case, catalog_only)
    if isinstance(model, str):
        return model
    return _unknown_gpu(case) or model


def _unknown_gpu(case: dict) -> str | None:
    """Why a case's GPU cannot be sized: it names a card the GPU table lacks and the log printed no total."""
    from .hardware import UnknownGpuError, find_gpu

    name = str(case.get("gpu") or "").split(" + ")[0].strip()
    name = re.sub(r"^\d+\s*x\s*", "", name)  # '2x NVIDIA ...'
    if not name or (case.get("observed") or {}).get("total_gpu_memory_gib"):
        return None
    try:
        find_gpu(name)
    except UnknownGpuError:
        return f"unknown GPU {name!r} (not in the GPU table, no logged total)"
    return None


def _half_unit(value: float) -> float:
    """Half of the last printed digit: 6.37 -> 0.005 (the rounding interval of a logged figure)."""
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0.5
    return 0.5 * 10 ** -len(text.split(".")[1])


def _relative_error(predicted: float, observed: float) -> float:
    if observed == 0:
        return abs(predicted)
    return abs(predicted - observed) / abs(observed)


@dataclass(frozen=True)
class Prediction:
    """A vLLM case's prediction: the breakdown (None when the release refuses the settings), the release and how
    it was chosen, the inputs it was planned with, and why only some figures are scored (`partial`)."""
    breakdown: object  # Breakdown | None
    version: str
    basis: str
    spec: object  # ModelSpec
    gpu: object  # Gpu
    user: dict
    partial: str | None = None
    refusal: str | None = None  # the engine's refusal message, when it refuses
    model_note: str = ""

    @property
    def refused(self) -> bool:
        return self.refusal is not None


def _predict(case: dict, catalog_only: bool = False) -> tuple[Prediction | None, str]:
    """(the prediction, "") or (None, why the case is skipped)."""
    settings = case.get("settings") or {}
    for key, what in UNMODELLED_SETTINGS.items():
        if settings.get(key):
            return None, f"{what} not modelled yet"
    model = _sizable_case_model(case, catalog_only)
    if isinstance(model, str):
        return None, model
    spec = model.spec
    gpu, partial = _case_gpu(case)
    version, basis = _case_version(case, spec)
    if not version:
        return None, "vLLM version unknown"
    if settings.get("speculative_config"):
        why = get_engine("vllm").unsized_reason(settings["speculative_config"], spec)
        if why:
            return None, f"speculative decoding not sized: {why}"
    user = {key: settings[key] for key in PASSED_SETTINGS if settings.get(key) is not None}
    engine = infer_engine_from_log(case.get("log", ""))
    try:
        v1_exists = get_engine("vllm").releases.rule_at(parse_version(version), "v1_available")
    except ValueError as error:
        return None, f"cannot predict: {error}"
    if engine in ("v0", "v1") and v1_exists:
        user["engine"] = engine  # a logged engine path chooses only once V1 exists beside V0
    if "entrypoint" in user:
        user["entrypoint"] = str(user["entrypoint"]).lower()
    return _explain_case(Prediction(None, version, basis, spec, gpu, user, partial, model_note=model.note))


def _case_gpu(case: dict):
    """The GPU a case ran on (sized to the logged total when there is one) and, when the case names none, the
    nominal card used instead with the note saying so (else None)."""
    from .hardware import UnknownGpuError, custom_gpu, find_gpu

    observed = case.get("observed") or {}
    gpu = None
    if case.get("gpu"):
        try:
            gpu = find_gpu(case["gpu"])
        except UnknownGpuError:
            gpu = None
    total = observed.get("total_gpu_memory_gib")
    if total:
        capability = gpu.compute_capability if gpu else (8, 0)
        name = gpu.name if gpu else "GPU of the logged total"
        gpu = custom_gpu(int(round(total * GIB)), name=name, compute_capability=capability)
    partial = None
    if gpu is None:
        # weights and the KV arithmetic do not depend on the GPU's size: score those on a nominal
        # 80 GiB sm80 card and say so
        gpu = custom_gpu(80 * GIB, name="GPU not stated (nominal 80 GiB, sm80)", compute_capability=(8, 0))
        partial = "GPU not stated: weights and KV arithmetic from the logged budget only"
    return gpu, partial


def _case_version(case: dict, spec) -> tuple[str | None, str]:
    """The vLLM release to predict a case with, and how it was chosen: the case's (a wildcard narrowed by the log),
    else the log format's (raised to the first release serving the model); None when neither tells."""
    version = case.get("engine_version")
    basis = case.get("engine_version_basis") or ""
    other_quantization = spec.quantization is not None and spec.quantization.method not in ("fp8", "compressed-tensors")
    refined = refine_wildcard_version(version, case.get("log", ""), other_quantization) if version else version
    if refined != version:
        version = refined
        basis += f"; {case['engine_version']} narrowed to {version} by a line that release first prints"
    if not version:
        version = infer_version_from_log(case.get("log", ""))
        basis = "inferred by the scorer from the log format"
        if not version:
            return version, basis
        # the log format gives the oldest release that prints it; the model may need a newer one
        newer = get_engine("vllm").first_release_serving(spec.architecture, parse_version(version))
        if newer is not None:
            version = ".".join(map(str, newer))
            basis += f"; raised to {version}, the first release serving {spec.architecture}"
    return version, basis


def _explain_case(base: Prediction) -> tuple[Prediction | None, str]:
    """explain() for a scored case: the prediction, or the refusal, or why not."""
    from dataclasses import replace

    from .api import REFUSALS, explain_spec

    version, basis = base.version, base.basis
    try:
        try:
            breakdown = explain_spec(base.spec, base.gpu, "vllm", version, base.user)
        except (ValueError, *REFUSALS) as error:
            # a dev build of X.Y already carries what X.(Y+1) releases: retry there when that is what is missing
            ahead = _next_release_feature(version, str(error))
            if ahead is None:
                raise
            basis += f"; a dev build of {version} carries {ahead}'s {str(error).split(' does not')[0]}"
            version = ahead
            breakdown = explain_spec(base.spec, base.gpu, "vllm", version, base.user)
        return replace(base, breakdown=breakdown, version=version, basis=basis), ""
    except REFUSALS as error:
        return replace(base, version=version, basis=basis, refusal=str(error)), ""
    except ValueError as error:
        return None, f"cannot predict: {error}"


def _next_release_feature(version: str, message: str) -> str | None:
    """'X.Y-dev' / 'X.Y.Z.devN' refused for a feature that 'does not exist before vLLM X.(Y+1).0': that release."""
    if "dev" not in version:
        return None
    found = re.search(r"does not exist before vLLM (\d+)\.(\d+)\.(\d+)", message)
    if not found:
        return None
    major, minor = parse_version(version)[:2]
    if (int(found.group(1)), int(found.group(2))) != (major, minor + 1):
        return None
    return f"{found.group(1)}.{found.group(2)}.{found.group(3)}"


def _logged_budget_plans(case: dict, prediction: Prediction) -> tuple | None:
    """The release's KV plans at the two ends of the budget the log printed (a logged '6.37 GiB' means
    [6.365, 6.375)): the same grouping and token rules as the prediction, only the budget is the logged one.
    None when the log printed no positive budget."""
    logged = (case.get("observed") or {}).get("kv_cache_gib")
    if logged is None or logged <= 0:
        return None
    breakdown = prediction.breakdown
    spec, gpu = prediction.spec, prediction.gpu
    user = dict(prediction.user, max_model_len=breakdown.max_model_len, engine=breakdown.engine)
    half = _half_unit(logged)
    version = parse_version(breakdown.vllm_version)
    kv_plan_for_budget = get_engine("vllm").kv_plan_for_budget
    return tuple(kv_plan_for_budget(spec, gpu, user, version, int(budget))
                 for budget in ((logged - half) * GIB, (logged + half) * GIB - 1))


def _from_logged_budget(observed: dict, plans: tuple | None) -> dict:
    """Blocks, tokens and concurrency from the logged budget's plans: a prediction counts as exact when the
    observed figure lies inside the interval that the budget's rounding allows."""
    if plans is None:
        return {}
    out = {}
    pairs = (("num_gpu_blocks", "blocks_from_logged_budget"), ("kv_cache_tokens", "tokens_from_logged_budget"),
             ("max_concurrency", "concurrency_from_logged_budget"))
    for observed_key, name in pairs:
        if observed_key not in observed:
            continue
        values = [{"num_gpu_blocks": plan.num_blocks, "kv_cache_tokens": plan.kv_cache_tokens,
                   "max_concurrency": plan.max_concurrency}[observed_key] for plan in plans]
        value = observed[observed_key]
        slack = 0.005 if observed_key == "max_concurrency" else 0  # printed with 2 decimals
        if values[0] - slack <= value <= values[1] + slack:
            error, predicted = 0.0, value
        else:
            predicted = values[0] if value < values[0] else values[1]
            error = _relative_error(predicted, value)
        out[name] = {"observed": value, "predicted": predicted, "interval": values, "rel_err": error}
    return out


def score_cases(cases: list[dict], from_logs: bool = False, catalog_only: bool = False,
                unreadable: list[dict] | tuple = ()) -> dict:
    """Score every case, each with the engine its `engine` field names (vLLM when absent). The vLLM cases
    make the report's top level; every other engine's cases make a section under its name. A case that cannot
    be planned is skipped with its reason, never the file; `unreadable` lines (read_cases) are listed."""
    by_engine: dict[str, list[dict]] = {}
    for case in cases:
        by_engine.setdefault(str(case.get("engine") or "vllm").lower(), []).append(case)
    vllm_cases = by_engine.pop("vllm", [])
    if not by_engine:
        report = _with_coverage(_score_vllm_cases(vllm_cases, from_logs, catalog_only), "vllm")
    else:
        report = (_with_coverage(_score_vllm_cases(vllm_cases, from_logs, catalog_only), "vllm") if vllm_cases
                  else {"cases": 0})
        for name, engine_cases in sorted(by_engine.items()):
            report[name] = _with_coverage(score_engine_cases(name, engine_cases, from_logs, catalog_only), name)
    if unreadable:
        report["unreadable_lines"] = list(unreadable)
    return report


def _with_coverage(section: dict, engine: str) -> dict:
    """Each scored prediction's shipped 90 % interval (intervals.py) and whether the logged figure is inside; the
    section's `interval_coverage` per figure and overall (headline cases)."""
    from . import intervals

    if "per_case" not in section:
        return section
    hits: dict[str, list[bool]] = {}
    for case in section["per_case"]:
        for name, figure in case["figures"].items():
            term = intervals.term_of(name)
            if term in intervals.NOT_PREDICTIONS or figure.get("predicted") is None:
                continue
            found = intervals.bounds(engine, term, figure["predicted"], case.get("era", "?"), case.get("gpu_class", "?"))
            if found is None or isinstance(figure["observed"], bool):
                continue
            figure["interval_90"] = [round(found[0], 4), round(found[1], 4)]
            figure["inside"] = found[0] <= figure["observed"] <= found[1]
            if not case.get("separate"):
                hits.setdefault(term, []).append(figure["inside"])
    every = [hit for values in hits.values() for hit in values]
    section["interval_coverage"] = {
        "overall": {"n": len(every), "inside": sum(every), "share": round(sum(every) / len(every), 4) if every else None},
        **{term: {"n": len(values), "inside": sum(values), "share": round(sum(values) / len(values), 4)}
           for term, values in sorted(hits.items())}}
    return section


def score_engine_cases(name: str, cases: list[dict], from_logs: bool = False, catalog_only: bool = False) -> dict:
    """One non-vLLM engine's cases, figure by figure (SGLang, llama.cpp); an engine without a scorer is listed."""
    from .engines import ENGINES

    scorers = {"llamacpp": _score_llamacpp_case, "sglang": _score_sglang_case}
    if name not in scorers:
        why = f"no scorer for {name}" if name in ENGINES else f"unknown engine {name!r}"
        return {"cases": len(cases), "scored": 0, "skipped": [{"id": c.get("id"), "reason": why} for c in cases]}
    if from_logs and name == "sglang":
        parse = get_engine(name).logs.parse
        cases = [dict(case, observed=parse(case.get("log", ""))) for case in cases]
    per_case, skipped = [], []
    for case in cases:
        try:
            entry, reason = scorers[name](case, catalog_only)
        except (ValueError, LookupError, KeyError, TypeError) as error:
            # a field the plan cannot read (a malformed setting, a release out of range): this case only
            entry, reason = None, f"cannot predict: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        if entry is None:
            skipped.append({"id": case.get("id"), "reason": reason})
        else:
            per_case.append(entry)
    return _engine_report(cases, per_case, skipped, LLAMACPP_FIGURES if name == "llamacpp" else SGLANG_FIGURES)


# llama.cpp's buffers by kind (engines/llamacpp/accuracy.py compare): one table row per kind, over devices
LLAMACPP_FIGURES = ("model_buffer_mib", "kv_buffer_mib", "compute_buffer_mib", "output_buffer_mib", "vram_mib",
                    "host_ram_mib")


def _score_llamacpp_case(case: dict, catalog_only: bool = False) -> tuple[dict | None, str]:
    """A llama.cpp / Ollama case planned from its own fields (engines/llamacpp/accuracy.py), buffer by buffer."""
    from .engines.llamacpp import accuracy
    from .hardware import UnknownGpuError, find_gpu

    model = case_model(case, catalog_only)
    plan = accuracy.plan_case(case, file_at_hand=not isinstance(model, str) and model.gguf is not None)
    if isinstance(plan, str):
        return None, plan
    if isinstance(model, str):
        return None, model
    tags = list(case.get("tags", []))
    engine_label = f"ollama {plan.version}" if plan.engine == "ollama" else f"llamacpp {plan.version}"
    entry = {"id": case["id"], "engine_version": engine_label, "version_basis": plan.version_basis, "tags": tags,
             "separate": any(tag in SEPARATE_TAGS for tag in tags), "figures": {},
             "era": "Ollama" if plan.engine == "ollama" else fidelity.llamacpp_era(plan.version)}
    if model.note:
        entry["model_note"] = model.note
    if plan.not_compared:
        entry["not_compared"] = {"kinds": list(plan.not_compared), "why": plan.not_compared_why}
    try:
        total = find_gpu(str(case.get("gpu") or "").split(" + ")[0]).cuda_total_bytes if case.get("gpu") else None
    except UnknownGpuError:
        total = None
    entry["gpu_class"] = fidelity.gpu_class(total)
    rows = accuracy.compare(case, model.spec, plan, model.gguf)
    if not rows:
        return None, "the log prints no buffer the plan has"
    for kind, figure, predicted, observed in rows:
        key = {"vram": "vram_mib", "host": "host_ram_mib"}.get(kind, f"{kind}_buffer_mib")
        entry["figures"][f"{key}:{figure}"] = _figure(key, predicted, observed)
    return entry, ""


def _engine_report(cases: list[dict], per_case: list[dict], skipped: list[dict], keys: tuple[str, ...]) -> dict:
    headline = [c for c in per_case if not c["separate"]]
    return {"cases": len(cases), "scored": len(per_case), "skipped": skipped,
            "figures": _summaries(headline, keys),
            "figures_separate_tags": _summaries([c for c in per_case if c["separate"]], keys),
            "startup_failed_agreement": _agreement(per_case), "verdict": fidelity.verdict_agreement(headline),
            "by_era": fidelity.grouped(headline, keys, "era"),
            "by_gpu_class": fidelity.grouped(headline, keys, "gpu_class"), "per_case": per_case}


def _score_sglang_case(case: dict, catalog_only: bool = False) -> tuple[dict | None, str]:
    from .api import explain_spec
    from .engines.sglang import accuracy
    from .hardware import UnknownGpuError, custom_gpu, find_gpu

    why = accuracy.unmodelled(case)
    if why:
        return None, why
    model = _sizable_case_model(case, catalog_only)
    if isinstance(model, str):
        return None, model
    spec = model.spec
    try:
        gpu = find_gpu(case["gpu"]) if case.get("gpu") else None
    except UnknownGpuError:
        gpu = None
    engine = get_engine("sglang")
    version, basis = case.get("engine_version"), case.get("engine_version_basis") or ""
    if not version:
        from .engines.sglang.log_parser import infer_version

        inferred = infer_version(case.get("log", ""))
        version = ".".join(map(str, inferred)) if inferred else None
        basis = "inferred by the scorer from the log format" if inferred else "newest modelled release (the case does not say)"
    try:
        version = engine.releases.resolve(version)
    except ValueError as error:
        return None, f"cannot predict: {error}"
    device = gpu or custom_gpu(80 * GIB, name=accuracy.NOMINAL_GPU, compute_capability=(9, 0))
    try:
        breakdown = explain_spec(spec, device, "sglang", ".".join(map(str, version)), accuracy.user_settings(case))
    except engine.refusals as error:
        return _sglang_refused(case, spec, version, basis, gpu, str(error)), ""
    except ValueError as error:
        return None, f"cannot predict: {error}"
    observed = case.get("observed") or {}
    tags = list(case.get("tags", []))
    entry = {"id": case["id"], "engine_version": breakdown.engine_version, "version_basis": basis, "tags": tags,
             "separate": any(tag in SEPARATE_TAGS for tag in tags), "figures": {}}
    if model.note:
        entry["model_note"] = model.note
    unsized = accuracy.partly_sized(case, spec)
    if unsized:
        # scored, but apart from the headline tables and the intervals (as SCHEMA.md's approximate cases)
        entry["separate"], entry["separate_why"] = True, unsized
    if gpu is None:
        entry["partial"] = accuracy.NOMINAL_GPU
    logged = dict(observed, weights_mem_usage_gb=accuracy.logged_weights(observed))
    if "kv_cache_tokens" not in logged and "max_total_num_tokens" in logged:
        logged["kv_cache_tokens"] = logged["max_total_num_tokens"]  # releases before the '#tokens' line
    for key, value in accuracy.predicted_figures(breakdown, observed, gpu is not None).items():
        if logged.get(key) is not None and value is not None:
            entry["figures"][key] = _figure(key, value, logged[key])
    if gpu is not None or (case.get("settings") or {}).get("mem_fraction_static") \
            or engine.releases.rule_at(version, "mfs_scheme") == "tp_table":
        entry["figures"].update(accuracy.tokens_from_logged(breakdown, spec, observed, breakdown.engine_version))
    if "startup_failed" in observed and gpu is not None:
        entry["startup_failed"] = {"observed": observed["startup_failed"], "predicted": breakdown.failure is not None}
        entry["verdict"] = {"observed": fidelity.observed_verdict(case),
                            "predicted": fidelity.predicted_verdict(breakdown.failure and breakdown.failure.message)}
    entry["gpu_class"] = fidelity.gpu_class(gpu.cuda_total_bytes if gpu is not None else None)
    entry["era"] = "SGLang " + ".".join(breakdown.engine_version.split(".")[:2])
    return entry, ""


def _sglang_refused(case: dict, spec, version, basis: str, gpu, message: str) -> dict:
    """A case the release refuses to start (weights leave no memory, no KV room): its verdict, and every figure
    the log printed a miss."""
    observed = case.get("observed") or {}
    tags = list(case.get("tags", []))
    entry = {"id": case["id"], "engine_version": ".".join(map(str, version)), "version_basis": basis, "tags": tags,
             "separate": any(tag in SEPARATE_TAGS for tag in tags), "figures": {}, "refused": message,
             "gpu_class": fidelity.gpu_class(gpu.cuda_total_bytes if gpu is not None else None),
             "era": "SGLang " + ".".join(map(str, version[:2]))}
    if gpu is not None:
        entry["startup_failed"] = {"observed": observed.get("startup_failed"), "predicted": True}
        entry["verdict"] = {"observed": fidelity.observed_verdict(case), "predicted": fidelity.REFUSED}
    for key in SGLANG_FIGURES:
        if isinstance(observed.get(key), (int, float)) and not isinstance(observed.get(key), bool):
            entry["figures"][key] = dict(_figure(key, 0.0, observed[key]), predicted=None, rel_err=1.0,
                                         missed="predicted a refusal")
    return entry


def _score_vllm_cases(cases: list[dict], from_logs: bool = False, catalog_only: bool = False) -> dict:
    """Score every vLLM case; with `from_logs`, each case's figures are re-read from its raw `log` text by the
    log parser (the first run of the log) instead of taken from its `observed` object."""
    per_case = []
    skipped = []
    if from_logs:
        cases = [dict(case, observed=_vllm_logs().observed_from_log(case.get("log", ""))) for case in cases]
    for case in cases:
        try:
            prediction, reason = _predict(case, catalog_only)
        except (LookupError, KeyError, TypeError) as error:  # a field the plan cannot read: this case only
            prediction, reason = None, f"cannot predict: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        if prediction is None:
            skipped.append({"id": case.get("id"), "reason": reason})
            continue
        per_case.append(_vllm_entry(case, prediction))
    headline = [c for c in per_case if not c["separate"]]
    return {
        "cases": len(cases),
        "scored": len(per_case),
        "skipped": skipped,
        "figures": _summaries(headline),
        "figures_separate_tags": _summaries([c for c in per_case if c["separate"]]),
        "consistency_checks": fidelity.summaries(headline, CONSISTENCY_FIGURES),
        "startup_failed_agreement": _agreement(per_case),
        "verdict": fidelity.verdict_agreement(headline),
        "by_era": fidelity.grouped(headline, HEADLINE_FIGURES, "era"),
        "by_gpu_class": fidelity.grouped(headline, HEADLINE_FIGURES, "gpu_class"),
        "weights_by_format": _weights_by_format(headline),
        "by_tag": {tag: _summaries([c for c in per_case if tag in c.get("tags", ())]) for tag in ARCHITECTURE_TAGS},
        "per_case": per_case,
    }


def _vllm_entry(case: dict, prediction: Prediction) -> dict:
    """One case's scored figures, verdict and table keys (era, GPU class)."""
    observed = case.get("observed") or {}
    entry = {"id": case["id"], "vllm_version": prediction.version, "version_basis": prediction.basis,
             "tags": list(case.get("tags", [])),
             "separate": any(tag in SEPARATE_TAGS for tag in case.get("tags", [])), "figures": {}}
    partial = prediction.partial
    if prediction.model_note:
        entry["model_note"] = prediction.model_note
    entry["gpu_class"] = fidelity.gpu_class(None if partial else prediction.gpu.cuda_total_bytes)
    if prediction.refused:
        entry["era"] = fidelity.vllm_era(prediction.version, prediction.user.get("engine", ""))
        entry["refused"] = prediction.refusal
        entry["startup_failed"] = {"observed": observed.get("startup_failed"), "predicted": True}
        entry["verdict"] = {"observed": fidelity.observed_verdict(case), "predicted": fidelity.REFUSED}
        # a predicted refusal gives no figure: every size or count the log printed is a miss, not a gap
        for key in FIGURES + ("kv_cache_tokens",):
            if observed.get(key) is not None and key in HEADLINE_FIGURES + CONSISTENCY_FIGURES:
                entry["figures"][key] = dict(_figure(key, 0.0, observed[key]), predicted=None, rel_err=1.0,
                                             missed="predicted a refusal")
        return entry
    breakdown = prediction.breakdown
    entry["era"] = fidelity.vllm_era(breakdown.vllm_version, breakdown.engine)
    weights, unscored = None, {}
    if breakdown.per_rank and "weights_gib" in observed:
        stage = logged_stage(case.get("log", ""), observed["weights_gib"], _tp(breakdown))
        if stage is None:
            # not the closest stage (that flatters): a figure no stage is named for is listed, not scored
            unscored["weights_gib"] = "pipeline stage not named by the log line"
        else:
            entry["weights_stage"] = min(stage, len(breakdown.per_rank) - 1)
            weights = breakdown.per_rank[entry["weights_stage"]].weights_bytes
    if unscored:
        entry["unscored"] = unscored
    predicted = schema_figures(breakdown, weights)
    entry["weights_format"] = _weights_format(prediction.spec, breakdown)
    if partial:
        entry["partial"] = partial
    for key in FIGURES:
        if (partial and key != "weights_gib") or key in unscored:
            continue
        if key in observed and observed[key] is not None:
            entry["figures"][key] = _figure(key, predicted[key], observed[key])
    plans = _logged_budget_plans(case, prediction)
    entry["figures"].update(_from_logged_budget(observed, plans))
    if "startup_failed" in observed and not partial:
        entry["startup_failed"] = {"observed": observed["startup_failed"], "predicted": breakdown.failure is not None}
        # a failed start whose logged budget holds one max-length request (the lower end's plan) passed the
        # engine's own startup check: the failure came later
        holds = bool(observed["startup_failed"]) and plans is not None and plans[0].max_concurrency >= 1
        entry["verdict"] = {"observed": fidelity.observed_verdict(case, holds),
                            "predicted": fidelity.predicted_verdict(breakdown.failure and breakdown.failure.message)}
    return entry


def _figure(key: str, predicted: float, observed: float) -> dict:
    """One compared figure: relative error and, for a size, the absolute error in GiB."""
    out = {"observed": observed, "predicted": round(predicted, 4), "rel_err": _relative_error(predicted, observed)}
    gap = fidelity.abs_error_gib(key, predicted, observed)
    if gap is not None:
        out["abs_err_gib"] = round(gap, 4)
    return out


def _tp(breakdown) -> int:
    try:
        return int(breakdown.setting("tensor_parallel_size"))
    except (KeyError, TypeError, ValueError):
        return 1


_STAGE_PREFIX = (
    (re.compile(r"Worker_(?:TP\d+_)?PP(\d+)"), "stage"),  # V1 multiproc worker names (Worker_PP1, Worker_TP0_PP1)
    (re.compile(r"\brank=(\d+)"), "rank"),  # (VllmWorker rank=5 pid=...)
    (re.compile(r"\bPP rank (\d+)"), "stage"),
)
_UNNAMED_WORKER = re.compile(r"RayWorkerWrapper|VllmWorkerProcess|Worker pid|RayWorker")


def logged_stage(log: str, weights_gib: float, tp: int) -> int | None:
    """The pipeline stage whose line printed the logged weights: named by the worker prefix (a stage, or a rank
    over TP), stage 0 for the driver's unprefixed line; None when the printing worker names no rank."""
    figure = f"{weights_gib:.4f}".rstrip("0").rstrip(".")
    for line in log.splitlines():
        if "took" not in line or figure not in line:
            continue
        for pattern, kind in _STAGE_PREFIX:
            found = pattern.search(line)
            if found:
                number = int(found.group(1))
                return number if kind == "stage" else number // max(tp, 1)
        return None if _UNNAMED_WORKER.search(line) else 0
    return None


def _percentile(values: list[float], fraction: float) -> float:
    return fidelity.percentile(values, fraction)


def _summaries(entries: list[dict], keys: tuple[str, ...] | None = None) -> dict:
    return fidelity.summaries(entries, HEADLINE_FIGURES if keys is None else keys)


def _agreement(entries: list[dict]) -> dict:
    pairs = [e["startup_failed"] for e in entries if "startup_failed" in e and e["startup_failed"]["observed"] is not None]
    agree = sum(1 for pair in pairs if bool(pair["observed"]) == bool(pair["predicted"]))
    return {"n": len(pairs), "agree": agree}


def _weights_format(spec, breakdown) -> str:
    """The stored format of the weights, for the per-format accuracy table (issue 3)."""
    quantization = next((s.value for s in breakdown.settings if s.name == "quantization"), None)
    if spec.quantization is not None:
        return spec.quantization.method
    if quantization:
        return f"{quantization} (online)"
    return next(s.value for s in breakdown.settings if s.name == "dtype")


def _weights_by_format(entries: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for entry in entries:
        if "weights_gib" in entry["figures"]:
            groups.setdefault(entry.get("weights_format", "?"), []).append(
                {"figures": {"weights_gib": entry["figures"]["weights_gib"]}})
    table = {name: _summaries(items)["weights_gib"] for name, items in sorted(groups.items())}
    quantized = [item for name, items in groups.items() if name not in ("bfloat16", "float16", "float32") for item in items]
    if quantized:
        table["all quantized formats"] = _summaries(quantized)["weights_gib"]
    return table


def format_summary(report: dict) -> str:
    """The vLLM tables (when the file has vLLM cases), then one block per other engine."""
    blocks = [_format_vllm(report)] if "figures" in report else []
    from .engines import ENGINES

    for name, section in report.items():
        if name in ENGINES and name != "vllm":
            blocks.append(_format_engine(get_engine(name).label, section))
    if report.get("unreadable_lines"):
        blocks.append("unreadable lines (not scored): " + "; ".join(
            f"{entry.get('file', 'line')}:{entry['line']}: {entry['reason']}" if entry.get("file")
            else f"line {entry['line']}: {entry['reason']}" for entry in report["unreadable_lines"]))
    return "\n\n".join(blocks)


def _skip_counts(skipped: list[dict]) -> str:
    """Skips counted by reason (a model name folded out of 'X not in the catalog')."""
    reasons: dict[str, int] = {}
    for skip in skipped:
        reason = skip["reason"]
        reason = "not in the catalog" if reason.endswith("not in the catalog") else reason
        reasons[reason] = reasons.get(reason, 0) + 1
    return "; ".join(f"{count} x {reason}" for reason, count in sorted(reasons.items(), key=lambda x: -x[1]))


def _model_notes(section: dict) -> list[str]:
    notes = [f"{case['id']}: {case['model_note']}" for case in section.get("per_case", [])
             if case.get("model_note") and "config.json" in case["model_note"]]
    return ["models sized from config.json only: " + "; ".join(notes)] if notes else []


_HEADER = f"  {'figure':<32} {'n':>4} {'median':>9} {'p90':>9} {'max':>9} {'|GiB| med':>10} {'|GiB| p90':>10}"


def _row(name: str, stats: dict, width: int = 32) -> str:
    gib = (f" {stats['median_abs_err_gib']:>10.3f} {stats['p90_abs_err_gib']:>10.3f}"
           if "median_abs_err_gib" in stats else "")
    return (f"  {name:<{width}} {stats['n']:>4} {stats['median_abs_rel_err']:>9.2%} "
            f"{stats['p90_abs_rel_err']:>9.2%} {stats['max_abs_rel_err']:>9.2%}{gib}")


def _figure_table(title: str, figures: dict) -> list[str]:
    return [title, _HEADER] + [_row(key, stats) for key, stats in figures.items()] + [""]


def _verdict_lines(verdict: dict) -> list[str]:
    """The start verdict's agreement and its confusion table (rows: the log; columns: the prediction)."""
    if not verdict or not verdict.get("n"):
        return ["start verdict: no case with a logged outcome"]
    width = max(28, *(len(row) + 1 for row in verdict["confusion"]))
    lines = [f"start verdict agrees with the log: {verdict['agree']}/{verdict['n']} ({verdict['rate']:.0%})",
             f"  {'log / predicted':<{width}}" + "".join(f"{name:>20}" for name in fidelity.VERDICTS)]
    for row, counts in verdict["confusion"].items():
        lines.append(f"  {row:<{width}}" + "".join(f"{counts.get(name, 0):>20}" for name in fidelity.VERDICTS))
    return lines


def _coverage_lines(section: dict) -> list[str]:
    coverage = section.get("interval_coverage", {})
    overall = coverage.get("overall", {})
    if not overall.get("n"):
        return []
    parts = ", ".join(f"{term} {stats['inside']}/{stats['n']}" for term, stats in coverage.items() if term != "overall")
    return [f"observed figures inside their 90 % intervals: {overall['inside']}/{overall['n']} "
            f"({overall['share']:.0%}; data/intervals.json): {parts}"]


def _grouped_lines(title: str, groups: dict, keys: tuple[str, ...]) -> list[str]:
    lines = [title, f"  {'group / figure':<42} {'n':>4} {'median':>9} {'p90':>9} {'max':>9} {'|GiB| med':>10} "
                    f"{'|GiB| p90':>10}"]
    for name, group in groups.items():
        verdict = group["verdict"]
        lines.append(f"  {name} ({group['cases']} cases; verdict {verdict['agree']}/{verdict['n']})")
        lines += [_row("  " + key, group["figures"][key], 42) for key in keys if key in group["figures"]]
    return lines + [""]


def _format_engine(label: str, section: dict) -> str:
    lines = [f"{label}: cases: {section['cases']}, scored: {section['scored']}, skipped: {len(section['skipped'])}", ""]
    lines += _figure_table(f"{label} scored cases (SCHEMA tags non-nvidia/approximate/shared-gpu excluded)",
                           section.get("figures", {}))
    lines += _figure_table(f"{label} cases tagged non-nvidia / approximate / shared-gpu",
                           section.get("figures_separate_tags", {}))
    keys = tuple(section.get("figures", {}))
    for title, field in (("by release era", "by_era"), ("by GPU class", "by_gpu_class")):
        if section.get(field):
            lines += _grouped_lines(f"{label} {title}", section[field], keys)
    agreement = section.get("startup_failed_agreement", {"agree": 0, "n": 0})
    lines.append(f"startup refused/started agrees with the log: {agreement['agree']}/{agreement['n']}")
    lines += _verdict_lines(section.get("verdict", {}))
    lines += _coverage_lines(section)
    lines += _model_notes(section)
    lines.append("skipped by reason: " + _skip_counts(section["skipped"]))
    lines.append("skipped: " + "; ".join(f"{skip['id']}: {skip['reason']}" for skip in section["skipped"]))
    return "\n".join(lines)


def _format_vllm(report: dict) -> str:
    lines = [f"cases: {report['cases']}, scored: {report['scored']}, skipped: {len(report['skipped'])}", ""]
    lines += _figure_table("scored cases (SCHEMA tags non-nvidia/approximate/shared-gpu excluded)", report["figures"])
    lines += _figure_table("cases tagged non-nvidia / approximate / shared-gpu", report["figures_separate_tags"])
    lines += _figure_table("consistency checks (not predictions: requested memory is u x the logged total)",
                           report.get("consistency_checks", {}))
    keys = ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "non_torch_gib", "activation_peak_gib", "cuda_graph_gib")
    for title, field in (("by release era (vLLM budget era, engines/vllm/releases.py)", "by_era"),
                         ("by GPU class", "by_gpu_class")):
        lines += _grouped_lines(title, report.get(field, {}), keys)
    lines.append("weights by stored format (scored cases)")
    lines.append(f"  {'format':<32} {'n':>4} {'median':>9} {'p90':>9} {'max':>9}")
    for name, stats in report.get("weights_by_format", {}).items():
        lines.append(f"  {name:<32} {stats['n']:>4} {stats['median_abs_rel_err']:>9.2%} "
                     f"{stats['p90_abs_rel_err']:>9.2%} {stats['max_abs_rel_err']:>9.2%}")
    lines.append("")
    lines.append("by architecture tag (all scored cases with the tag)")
    lines.append(f"  {'tag / figure':<42} {'n':>4} {'median':>9} {'p90':>9} {'max':>9}")
    for tag, figures in report.get("by_tag", {}).items():
        for key in ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "tokens_from_logged_budget"):
            if key in figures:
                stats = figures[key]
                lines.append(f"  {tag + ' / ' + key:<42} {stats['n']:>4} {stats['median_abs_rel_err']:>9.2%} "
                             f"{stats['p90_abs_rel_err']:>9.2%} {stats['max_abs_rel_err']:>9.2%}")
    lines.append("")
    agreement = report["startup_failed_agreement"]
    lines.append(f"startup refused/started agrees with the log: {agreement['agree']}/{agreement['n']}")
    lines += _verdict_lines(report.get("verdict", {}))
    lines += _coverage_lines(report)
    lines += _model_notes(report)
    lines.append("skipped: " + _skip_counts(report["skipped"]))
    return "\n".join(lines)
