"""`logs` on a vLLM log, run by run: each of the last runs analysed in full (the release, GPU, settings and
model it implies, observed vs predicted with the likely cause of each gap, what nvidia-smi's number is made of,
the flags that shrink it or make a failed start start), earlier runs listed with their figures. The engine's
`logs.analyse`; the runs come bounded from forensics/streaming.py with this engine's reader."""
from __future__ import annotations

from ....forensics.streaming import DEEP_RUNS


def analyse(log: str, bounded, head: str, model: str | None, gpu: str | None, vllm_version: str | None,
            smi) -> dict:
    """The report of a parsed vLLM log: the last runs analyzed in full (the very last with nvidia-smi), earlier
    ones summarized, and a count of the startups before those kept."""
    parsed, earlier = bounded.parsed, bounded.earlier
    last = len(parsed.runs) - 1
    from .infer import model_named_in

    named = None if model else model_named_in(head)
    runs = [analyze_run(run, parsed, model=model, gpu=gpu, vllm_version=vllm_version,
                        smi=smi if index == last else None, named=named) if index > last - DEEP_RUNS else summarize_run(run)
            for index, run in enumerate(parsed.runs)]
    return {
        "log": "standard input" if log == "-" else log,
        "engine": "vllm",
        "engine_label": "vLLM",
        "lines_read": parsed.lines_read,
        "lines_with_figures": parsed.lines_matched,
        "bytes_read": parsed.bytes_read,
        "lines_cut": parsed.truncated_lines,
        "nvidia_smi": smi.to_dict() if smi is not None else None,
        "runs": runs,
    } | ({"earlier_runs": earlier.to_dict()} if earlier.count else {})  # startups before the ones kept in full


def summarize_run(run) -> dict:
    observed = run.observed()
    return {"run": run.index + 1, "lines": [run.first_line, run.last_line], "observed": observed,
            "per_rank": run.per_rank(), "other_figures": run.extras(),
            "startup": {"failed": observed.get("startup_failed"), "message": run.failure_message(),
                        "success_markers": [text for _, text in run.successes][:3]},
            "summary_only": True, "serving": _serving(run, observed)}


def _serving(run, observed: dict) -> dict | None:
    """The periodic stats lines after this start (forensics/serving.py), sized by the pool it printed."""
    if run.serving is None:
        return None
    return run.serving.to_dict(pool_gib=observed.get("kv_cache_gib"), pool_blocks=observed.get("num_gpu_blocks"))


def analyze_run(run, parsed, *, model=None, gpu=None, vllm_version=None, smi=None, search: bool = True,
                named: tuple[str, str] | None = None) -> dict:
    from .infer import infer_run
    from ....forensics.nvidia_smi import reading_from_log_items
    from ....forensics.observed import FIELDS, build_observed
    from .reconcile import anomalies, explain_nvidia_smi, reconcile

    observed = _observed_with_smi(run, smi)
    extras = run.extras()
    smi_reading = smi or reading_from_log_items(run.smi_gpus, run.smi_processes)
    inference = infer_run(run, observed, log_markers=parsed.markers, model=model, gpu=gpu, vllm_version=vllm_version,
                          smi=smi, search_candidates=search, named=named)
    chosen_model, model_basis, source, candidate_tp = _choose_model(observed, inference)
    reconciliation = None
    prediction = None
    if chosen_model and not any("older than the oldest" in note for note in inference.notes):
        reconciliation = reconcile(observed, inference, chosen_model, source, run, candidate_tp)
        prediction = reconciliation.prediction
    _default_settings(observed, inference, prediction)
    smi_explanation = explain_nvidia_smi(observed, inference, prediction, smi_reading, run)
    flags = anomalies(observed, extras, inference, prediction, smi_explanation, smi_reading, run)
    shrink = _shrink(observed, inference, prediction, reconciliation, chosen_model, source)
    from ....forensics.answer import answer_figures

    kv_pool = _kv_pool(observed, prediction, chosen_model)
    build = build_observed(observed, model=chosen_model, gpu_name=inference.gpu.value.name if inference.gpu else None,
                           vllm_version=inference.version.value if inference.version else None,
                           engine=inference.engine.value if inference.engine else None,
                           settings=inference.setting_values(), per_rank=run.per_rank(),
                           failure_message=run.failure_message())
    return {
        "run": run.index + 1,
        "lines": [run.first_line, run.last_line],
        "observed": observed,
        "per_rank": run.per_rank(),
        "other_figures": extras,
        "startup": {"failed": observed.get("startup_failed"), "message": run.failure_message(),
                    "success_markers": [text for _, text in run.successes][:3]},
        "vllm_version": inference.version.to_dict() if inference.version else None,
        "engine": inference.engine.to_dict() if inference.engine else None,
        "gpu": inference.gpu.to_dict() if inference.gpu else None,
        "model": inference.model.to_dict() if inference.model else None,
        "model_used_for_prediction": {"model": chosen_model, "why": model_basis} if chosen_model else None,
        "settings": {name: item.value for name, item in inference.settings.items()},
        "settings_basis": {name: {"basis": item.basis, "confidence": item.confidence}
                           for name, item in inference.settings.items()},
        "candidates": [candidate.to_dict() for candidate in inference.candidates],
        "candidates_searched": inference.candidates_searched,
        "kv_pool": kv_pool,
        "serving": _serving(run, observed),
        "answer": answer_figures(observed, prediction, kv_pool, inference.gpu is not None),
        "reconciliation": reconciliation.to_dict() if reconciliation else None,
        "nvidia_smi_breakdown": smi_explanation.to_dict() if smi_explanation else None,
        "anomalies": flags,
        "what_if": shrink,
        "log_notes": [text for _, text in run.notes],
        "notes": inference.notes,
        "breakdown_fields": dict({name: getattr(build, name) for name, _, _ in FIELDS},
                                 kv_bytes_per_token=build.kv_bytes_per_token),
    }


def _observed_with_smi(run, smi) -> dict:
    """The run's figures, with nvidia-smi's used / total for GPU 0 when a reading was given."""
    observed = run.observed()
    if smi is not None and smi.gpus:
        first = smi.gpu(0)
        if first.used_mib is not None:
            observed["nvidia_smi_used_mib"] = first.used_mib
        if first.total_mib is not None:
            observed["nvidia_smi_total_mib"] = first.total_mib
        observed = {key: observed[key] for key in _ordered(observed)}
    return observed


def _choose_model(observed: dict, inference) -> tuple:
    """(model to predict with, why, its source, TP of the best candidate): the named model, else the best
    catalog candidate (whose TP and precision become inferred settings / notes)."""
    chosen_model, model_basis, source, candidate_tp = None, None, "catalog", None
    if inference.model is not None:
        chosen_model = inference.model.value
        model_basis = "named"
        source = None if inference.model.confidence == "given" else "catalog"
        if inference.model.basis.endswith("not in the catalog"):
            chosen_model = None
    elif inference.candidates:
        best = inference.candidates[0]
        chosen_model, model_basis, candidate_tp = best.model, "best candidate", best.tensor_parallel_size
        if "tensor_parallel_size" not in inference.settings:
            from .infer import Inferred

            inference.settings["tensor_parallel_size"] = Inferred(
                candidate_tp, f"the per-GPU weights of {best.model} match at tensor_parallel_size {candidate_tp}", "low")
        inference.notes.append(f"{best.model} stores {best.precision}")
    if chosen_model and model_basis == "named" and "quantization" not in inference.settings:
        from .infer import infer_quantization

        quantization = infer_quantization(observed, inference, chosen_model, source)
        if quantization is not None and quantization.confidence == "medium":
            inference.settings["quantization"] = quantization
        elif quantization is not None:
            inference.notes.append(f"quantization: {quantization.basis}")
    return chosen_model, model_basis, source, candidate_tp


def _default_settings(observed: dict, inference, prediction) -> None:
    """gpu_memory_utilization and max_model_len the log does not state: inferred, else the release's defaults."""
    from .infer import Inferred, infer_utilization

    if "gpu_memory_utilization" not in inference.settings:
        util = infer_utilization(observed, prediction, inference)
        if util is not None:
            inference.settings["gpu_memory_utilization"] = util
        elif prediction is not None:
            inference.settings["gpu_memory_utilization"] = Inferred(
                prediction.setting("gpu_memory_utilization"), f"vLLM {prediction.vllm_version}'s default", "default")
    if "max_model_len" not in inference.settings and prediction is not None:
        inference.settings["max_model_len"] = Inferred(prediction.max_model_len, "the model's own context length "
                                                       "(vLLM's default)", "default")


def _shrink(observed: dict, inference, prediction, reconciliation, chosen_model, source) -> dict:
    """The flags that would shrink the footprint; an nvidia-smi gap at a guessed utilization says so."""
    from .infer import STRONG
    from .reconcile import what_ifs

    if prediction is None or inference.gpu is None:
        return {}
    settings = dict(reconciliation.settings)
    util = inference.settings.get("gpu_memory_utilization")
    current_u = float(util.value) if util is not None else None
    if observed.get("startup_failed"):
        return _start_fixes(inference, prediction, settings, current_u, chosen_model, source)
    shrink = what_ifs(chosen_model, inference.gpu.value, prediction.vllm_version,  # the comparison's release
                      settings, current_u, source, observed.get("nvidia_smi_used_mib"))
    if shrink and util is not None and util.confidence not in STRONG:
        for row in reconciliation.rows:
            if row.key == "nvidia_smi_used_mib" and not row.agrees and row.observed > 0:  # 0 MiB: no ratio
                at_u = shrink["baseline"]["predicted_nvidia_smi_mib"]
                row.cause = (f"predicted at the default gpu_memory_utilization "
                             f"{prediction.setting('gpu_memory_utilization'):g}; at the inferred {util.value:g} the "
                             f"prediction is {at_u:,} MiB ({(at_u - row.observed) / row.observed:+.1%}); "
                             "see the nvidia-smi breakdown")
    return shrink


def _start_fixes(inference, prediction, settings: dict, current_u, chosen_model, source) -> dict:
    """A failed start: the flags that make it start, each checked with the prediction (reconcile.start_fixes)."""
    from .reconcile import start_fixes

    if current_u is not None:
        settings = dict(settings, gpu_memory_utilization=current_u)
    if prediction.failure is None:
        return {"start_fixes": [], "predicted_to_start": True}
    fixes = start_fixes(chosen_model, inference.gpu.value, prediction.vllm_version, settings, source)
    gpu = inference.gpu.value.name
    return {"start_fixes": fixes, "predicted_to_start": False,
            "fit_hint": f'vram-detective fit {chosen_model} --gpu "{gpu}"'}


def _kv_pool(observed: dict, prediction, chosen_model) -> dict | None:
    if observed.get("num_gpu_blocks") is None or prediction is None or not prediction.kv_bytes_per_token:
        return None
    block_bytes = prediction.kv_bytes_per_token * prediction.block_size
    return {"num_gpu_blocks": observed["num_gpu_blocks"], "bytes_per_block": block_bytes,
            "block_size": prediction.block_size, "gib": round(observed["num_gpu_blocks"] * block_bytes / 2**30, 3),
            "model": chosen_model}


def _ordered(observed: dict) -> list[str]:
    from .reader import OBSERVED_KEYS

    return [key for key in OBSERVED_KEYS if key in observed]
