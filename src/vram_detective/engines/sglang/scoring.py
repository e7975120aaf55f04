"""SGLang against a ground-truth case (groundtruth/SCHEMA.md's SGLang keys), for `score` (scoring.py does the
engine-neutral rest): the case planned from its own fields (the release it states or its log's format shows, its
GPU, its settings in SGLang's names) the way `explain` plans those flags, then each figure the log printed beside
the plan's, and the pool arithmetic re-run on the memory the log printed (accuracy.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import fidelity, scoring
from ...units import GIB
from . import accuracy
from .engine import ENGINE
from .releases import era

# SGLang's figures (SCHEMA.md's SGLang keys), then #tokens from the log's own free memory
FIGURES = (
    "weights_mem_usage_gb", "kv_cache_tokens", "k_size_gb", "max_running_requests",
    "context_len", "load_begin_avail_mem_gb", "load_end_avail_mem_gb", "cuda_graph_mem_usage_gb",
    "available_gpu_mem_gb", "nvidia_smi_used_mib", "tokens_from_logged_memory", "tokens_from_logged_start",
    "draft_kv_cache_tokens", "draft_k_size_gb", "mamba_max_cache_size", "mamba_cache_size", "mamba_ssm_state_gb",
    "mamba_intermediate_ssm_state_gb",
)


@dataclass(frozen=True)
class CaseInputs:
    """What a case is planned with: the model, the GPU (None when the case names none: a nominal card then), the
    release and how it was chosen, the settings in SGLang's names."""
    model: object  # scoring.CaseModel
    gpu: object  # Gpu | None
    version: tuple[int, ...]
    basis: str
    settings: dict

    @property
    def device(self):
        from ...hardware import custom_gpu

        return self.gpu or custom_gpu(80 * GIB, name=accuracy.NOMINAL_GPU, compute_capability=(9, 0))


def case_inputs(case: dict, model) -> CaseInputs | str:
    """The plan inputs of a case, or why it cannot be planned (a release out of the rule table's range)."""
    from ...hardware import UnknownGpuError, find_gpu
    from .log_parser import infer_version

    try:
        gpu = find_gpu(case["gpu"]) if case.get("gpu") else None
    except UnknownGpuError:
        gpu = None
    version, basis = case.get("engine_version"), case.get("engine_version_basis") or ""
    if not version:
        inferred = infer_version(case.get("log", ""))
        version = ".".join(map(str, inferred)) if inferred else None
        basis = "inferred by the scorer from the log format" if inferred else "newest modelled release (the case does not say)"
    try:
        resolved = ENGINE.releases.resolve(version)
    except ValueError as error:
        return f"cannot predict: {error}"
    return CaseInputs(model, gpu, resolved, basis, accuracy.user_settings(case))


def score_case(case: dict, catalog_only: bool = False) -> tuple[dict | None, str]:
    """One SGLang case: its entry (figures, verdict, table keys), or None and why it is skipped."""
    from ...api import explain_spec

    why = accuracy.unmodelled(case)
    if why:
        return None, why
    model = scoring.sizable_case_model(case, catalog_only)
    if isinstance(model, str):
        return None, model
    inputs = case_inputs(case, model)
    if isinstance(inputs, str):
        return None, inputs
    try:
        breakdown = explain_spec(model.spec, inputs.device, "sglang", ".".join(map(str, inputs.version)),
                                 inputs.settings)
    except ENGINE.refusals as error:
        return _refused(case, inputs, str(error)), ""
    except ValueError as error:
        return None, f"cannot predict: {error}"
    return _entry(case, inputs, breakdown), ""


def _entry(case: dict, inputs: CaseInputs, breakdown) -> dict:
    """A planned case's entry: each figure the log printed beside the plan's, the verdict on a named GPU."""
    observed, gpu = case.get("observed") or {}, inputs.gpu
    entry = _head(case, breakdown.engine_version, inputs)
    if inputs.model.note:
        entry["model_note"] = inputs.model.note
    unsized = accuracy.partly_sized(case, inputs.model.spec)
    if unsized:
        # scored, but apart from the headline tables and the intervals (as SCHEMA.md's approximate cases)
        entry["separate"], entry["separate_why"] = True, unsized
    if gpu is None:
        entry["partial"] = accuracy.NOMINAL_GPU
    entry["figures"] = _compared(case, inputs, breakdown)
    if "startup_failed" in observed and gpu is not None:
        entry["startup_failed"] = {"observed": observed["startup_failed"], "predicted": breakdown.failure is not None}
        entry["verdict"] = {"observed": fidelity.observed_verdict(case),
                            "predicted": fidelity.predicted_verdict(breakdown.failure and breakdown.failure.message)}
    entry["gpu_class"] = fidelity.gpu_class(gpu.cuda_total_bytes if gpu is not None else None)
    entry["era"] = era(breakdown.engine_version)
    return entry


def _head(case: dict, version: str, inputs: CaseInputs) -> dict:
    tags = list(case.get("tags", []))
    return {"id": case["id"], "engine_version": version, "version_basis": inputs.basis, "tags": tags,
            "separate": scoring.is_separate(tags), "figures": {}}


def _compared(case: dict, inputs: CaseInputs, breakdown) -> dict:
    """observed key -> compared figure, for each figure the log printed and the plan has; #tokens from the
    log's own memory where the pool follows from it (a named GPU, a stated fraction, or the TP table scheme)."""
    observed = case.get("observed") or {}
    logged = dict(observed, weights_mem_usage_gb=accuracy.logged_weights(observed))
    if "kv_cache_tokens" not in logged and "max_total_num_tokens" in logged:
        logged["kv_cache_tokens"] = logged["max_total_num_tokens"]  # releases before the '#tokens' line
    figures = {}
    for key, value in accuracy.predicted_figures(breakdown, observed, inputs.gpu is not None).items():
        if logged.get(key) is not None and value is not None:
            figures[key] = scoring.figure(key, value, logged[key])
    if inputs.gpu is not None or (case.get("settings") or {}).get("mem_fraction_static") \
            or ENGINE.releases.rule_at(inputs.version, "mfs_scheme") == "tp_table":
        figures.update(accuracy.tokens_from_logged(breakdown, inputs.model.spec, observed, breakdown.engine_version))
    return figures


def _refused(case: dict, inputs: CaseInputs, message: str) -> dict:
    """A case the release refuses to start (weights leave no memory, no KV room): its verdict, and every figure
    the log printed a miss."""
    observed, gpu = case.get("observed") or {}, inputs.gpu
    entry = dict(_head(case, ".".join(map(str, inputs.version)), inputs), refused=message,
                 gpu_class=fidelity.gpu_class(gpu.cuda_total_bytes if gpu is not None else None),
                 era=era(".".join(map(str, inputs.version))))
    if gpu is not None:
        entry["startup_failed"] = {"observed": observed.get("startup_failed"), "predicted": True}
        entry["verdict"] = {"observed": fidelity.observed_verdict(case), "predicted": fidelity.REFUSED}
    entry["figures"] = scoring.refusal_misses(observed, FIGURES)
    return entry
