"""vLLM against a ground-truth case (groundtruth/SCHEMA.md), for `score` (scoring.py does the engine-neutral
rest): the case planned from its own fields the way `explain` plans those flags (the release the case states,
or the one its log's format shows; the V0/V1 path the log shows; the GPU sized to the logged total), then each
figure the log printed beside the plan's, and the KV arithmetic re-run on the budget the log printed."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ... import fidelity, scoring
from ...render import schema_figures
from ...units import GIB, parse_version
from .engine import ENGINE
from .kv_plan import kv_plan_for_budget
from .logs.eras import infer_engine_from_log, infer_version_from_log, refine_wildcard_version
from .releases import era, rule_at
from .speculative import unsized_reason

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

# Settings that change memory in ways this release of the tool does not model yet.
UNMODELLED_SETTINGS: dict[str, str] = {}
PASSED_SETTINGS = (
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "block_size", "dtype", "quantization", "kv_cache_dtype", "enforce_eager", "swap_space",
    "entrypoint", "enable_chunked_prefill", "cpu_offload_gb", "enable_lora", "speculative_config",
    "enable_prefix_caching",
)



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
    model = scoring.sizable_case_model(case, catalog_only)
    if isinstance(model, str):
        return None, model
    spec = model.spec
    gpu, partial = _case_gpu(case)
    version, basis = _case_version(case, spec)
    if not version:
        return None, "vLLM version unknown"
    if settings.get("speculative_config"):
        why = unsized_reason(settings["speculative_config"], spec)
        if why:
            return None, f"speculative decoding not sized: {why}"
    user = {key: settings[key] for key in PASSED_SETTINGS if settings.get(key) is not None}
    engine = infer_engine_from_log(case.get("log", ""))
    try:
        v1_exists = rule_at(parse_version(version), "v1_available")
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
    from ...hardware import UnknownGpuError, custom_gpu, find_gpu

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
        newer = ENGINE.first_release_serving(spec.architecture, parse_version(version))
        if newer is not None:
            version = ".".join(map(str, newer))
            basis += f"; raised to {version}, the first release serving {spec.architecture}"
    return version, basis


def _explain_case(base: Prediction) -> tuple[Prediction | None, str]:
    """explain() for a scored case: the prediction, or the refusal, or why not."""
    from dataclasses import replace

    from ...api import REFUSALS, explain_spec

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
    half = scoring.half_unit(logged)
    version = parse_version(breakdown.vllm_version)
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
            error = scoring.relative_error(predicted, value)
        out[name] = {"observed": value, "predicted": predicted, "interval": values, "rel_err": error}
    return out



def case_entry(case: dict, prediction: Prediction) -> dict:
    """One case's scored figures, verdict and table keys (era, GPU class)."""
    observed = case.get("observed") or {}
    entry = {"id": case["id"], "vllm_version": prediction.version, "version_basis": prediction.basis,
             "tags": list(case.get("tags", [])),
             "separate": scoring.is_separate(case.get("tags", [])), "figures": {}}
    partial = prediction.partial
    if prediction.model_note:
        entry["model_note"] = prediction.model_note
    entry["gpu_class"] = fidelity.gpu_class(None if partial else prediction.gpu.cuda_total_bytes)
    if prediction.refused:
        entry["era"] = era(prediction.version, prediction.user.get("engine", ""))
        entry["refused"] = prediction.refusal
        entry["startup_failed"] = {"observed": observed.get("startup_failed"), "predicted": True}
        entry["verdict"] = {"observed": fidelity.observed_verdict(case), "predicted": fidelity.REFUSED}
        # a predicted refusal gives no figure: every size or count the log printed is a miss, not a gap
        for key in FIGURES + ("kv_cache_tokens",):
            if observed.get(key) is not None and key in HEADLINE_FIGURES + CONSISTENCY_FIGURES:
                entry["figures"][key] = dict(scoring.figure(key, 0.0, observed[key]), predicted=None, rel_err=1.0,
                                             missed="predicted a refusal")
        return entry
    breakdown = prediction.breakdown
    entry["era"] = era(breakdown.vllm_version, breakdown.engine)
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
            entry["figures"][key] = scoring.figure(key, predicted[key], observed[key])
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


def _weights_format(spec, breakdown) -> str:
    """The stored format of the weights, for the per-format accuracy table (issue 3)."""
    quantization = next((s.value for s in breakdown.settings if s.name == "quantization"), None)
    if spec.quantization is not None:
        return spec.quantization.method
    if quantization:
        return f"{quantization} (online)"
    return next(s.value for s in breakdown.settings if s.name == "dtype")


def score_case(case: dict, catalog_only: bool = False) -> tuple[dict | None, str]:
    """One vLLM case: its entry (figures, verdict, table keys), or None and why it is skipped."""
    prediction, reason = _predict(case, catalog_only)
    if prediction is None:
        return None, reason
    return case_entry(case, prediction), ""


def format_section(report: dict) -> str:
    """The vLLM tables of a `score` report (the top level: vLLM is the default engine)."""
    lines = [f"cases: {report['cases']}, scored: {report['scored']}, skipped: {len(report['skipped'])}", ""]
    lines += scoring.figure_table("scored cases (SCHEMA tags non-nvidia/approximate/shared-gpu excluded)", report["figures"])
    lines += scoring.figure_table("cases tagged non-nvidia / approximate / shared-gpu", report["figures_separate_tags"])
    lines += scoring.figure_table("consistency checks (not predictions: requested memory is u x the logged total)",
                                  report.get("consistency_checks", {}))
    keys = ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "non_torch_gib", "activation_peak_gib", "cuda_graph_gib")
    for title, field in (("by release era (vLLM budget era, engines/vllm/releases.py)", "by_era"),
                         ("by GPU class", "by_gpu_class")):
        lines += scoring.grouped_lines(title, report.get(field, {}), keys)
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
    lines += scoring.verdict_lines(report.get("verdict", {}))
    lines += scoring.coverage_lines(report)
    lines += scoring.model_notes(report)
    lines.append("skipped: " + scoring.skip_counts(report["skipped"]))
    return "\n".join(lines)
