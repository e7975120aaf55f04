"""SGLang's figures for a ground-truth case (shared/groundtruth/SCHEMA.md's SGLang `observed` keys), for
scoring.py: the prediction end to end, and the pool arithmetic from the memory the log printed."""
from __future__ import annotations

from ...units import GIB

# case settings that change memory in ways not modelled for SGLang yet -> why
UNMODELLED = {"enable_dp_attention": "DP attention (attention weights replicated per DP rank)", "kt_kernel": "ktransformers (experts on the CPU)", "kt_method": "ktransformers (experts on the CPU)",
              "device": "a non-CUDA device",
              # 0.5.13 model_runner_kv_cache_mixin.py: HiSparseDSATokenToKVPool keeps 1/host_to_device_ratio of the
              # tokens on the GPU (the rest paged to host memory)
              "enable_hisparse": "HiSparse (a DSA pool paged to host memory)"}
PASSED = ("tp_size", "pp_size", "dp_size", "enable_dp_attention", "mem_fraction_static", "chunked_prefill_size",
          "max_prefill_tokens", "cuda_graph_max_bs", "max_running_requests", "max_total_tokens", "page_size",
          "context_length", "kv_cache_dtype", "dtype", "attention_backend", "disable_cuda_graph",
          "disable_piecewise_cuda_graph", "quantization", "disaggregation_mode", "max_mamba_cache_size",
          "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
          "speculative_num_draft_tokens", "mamba_ssm_dtype", "pp_layer_partition")
NOMINAL_GPU = "GPU not stated (nominal 80 GiB, sm90): weights and the pool from the logged memory only"


def user_settings(case: dict) -> dict:
    settings = case.get("settings") or {}
    out = {key: settings[key] for key in PASSED if settings.get(key) not in (None, "auto")}
    if isinstance(out.get("speculative_algorithm"), str):
        # 'EAGLE (MTP)': the algorithm SGLang was given, then what its draft is
        out["speculative_algorithm"] = out["speculative_algorithm"].split()[0].upper()
    return out


def unmodelled(case: dict) -> str | None:
    settings = case.get("settings") or {}
    return next((f"{why} not modelled for SGLang yet" for key, why in UNMODELLED.items() if settings.get(key)), None)


def partly_sized(case: dict, spec) -> str | None:
    """Why a case's prediction is not yet trusted with the headline figures (the case is then scored apart):
    speculative decoding on a hybrid model, whose Mamba / GDN slots come from the joint solve with the draft tokens'
    intermediate states (releases.py mamba_spec_intermediate) that no log has confirmed yet."""
    settings = case.get("settings") or {}
    if settings.get("speculative_algorithm") and spec.hybrid is not None:
        return "speculative decoding on a hybrid model: the Mamba slots' joint solve with the draft tokens is unconfirmed"
    return None


def logged_free_before(observed: dict) -> float | None:
    """Free GiB before weights: 'Load weight begin', else 'Load weight end' avail + its mem usage."""
    if "load_begin_avail_mem_gb" in observed:
        return observed["load_begin_avail_mem_gb"]
    if "load_end_avail_mem_gb" in observed and "weights_mem_usage_gb" in observed:
        return observed["load_end_avail_mem_gb"] + observed["weights_mem_usage_gb"]
    return None


def logged_weights(observed: dict) -> float | None:
    if "weights_mem_usage_gb" in observed:
        return observed["weights_mem_usage_gb"]
    if "load_begin_avail_mem_gb" in observed and "load_end_avail_mem_gb" in observed:
        return round(observed["load_begin_avail_mem_gb"] - observed["load_end_avail_mem_gb"], 2)
    return None


def predicted_figures(breakdown, observed: dict, gpu_known: bool) -> dict:
    """observed key -> predicted value, for the keys a case has (end-to-end ones only on a named GPU)."""
    out = {"weights_mem_usage_gb": breakdown.weights_bytes / GIB}
    if not gpu_known:
        return out
    figure = breakdown.figure
    out.update({
        "kv_cache_tokens": breakdown.kv_cache_tokens,
        "max_running_requests": figure("max_running_requests"), "context_len": breakdown.max_model_len,
        "load_begin_avail_mem_gb": figure("load_begin_avail_bytes") / GIB,
        "load_end_avail_mem_gb": figure("load_end_avail_bytes") / GIB,
        "cuda_graph_mem_usage_gb": figure("cuda_graph_bytes") / GIB,
        "available_gpu_mem_gb": figure("available_gpu_mem_bytes") / GIB,
        "nvidia_smi_used_mib": breakdown.nvidia_smi_used_mib,
    })
    if breakdown.kv_cache_tokens > 0:
        out["k_size_gb"] = figure("k_size_bytes") / GIB  # the target's K (the draft's has its own line)
    for key, name in (("draft_kv_cache_tokens", "draft_kv_tokens"), ("mamba_max_cache_size", "mamba_slots"),
                      ("mamba_cache_size", "mamba_slots")):
        if figure(name) is not None:
            out[key] = figure(name)
    for key, name in (("draft_k_size_gb", "draft_k_size_bytes"), ("mamba_ssm_state_gb", "mamba_ssm_state_bytes"),
                      ("mamba_intermediate_ssm_state_gb", "mamba_intermediate_ssm_bytes")):
        if figure(name) is not None:
            out[key] = figure(name) / GIB
    return out


def tokens_from_logged(breakdown, spec, observed: dict, version: str) -> dict:
    """#tokens from the log's own free memory: with its logged weights too ('from_logged_memory', exact up to the
    0.01 GiB printing), and with the predicted weights ('from_logged_start')."""
    from .pool import cell_size, tokens_from_logged_memory
    from .releases import rules
    from .stages import layer_counts, stage_spec

    begin = logged_free_before(observed)
    logged = observed.get("kv_cache_tokens", observed.get("max_total_num_tokens"))
    if begin is None or logged is None:
        return {}
    mfs, page = breakdown.figure("mem_fraction_static"), breakdown.figure("page_size")
    tp = breakdown.setting("tp_size")
    max_total = next((s.value for s in breakdown.settings if s.name == "max_total_tokens"), None)
    pp = next((s.value for s in breakdown.settings if s.name == "pp_size"), 1)
    first = stage_spec(spec, 0, layer_counts(spec.num_layers, pp, rules(version))[0])  # the log is stage 0's
    cell = cell_size(first, tp, breakdown.setting("kv_cache_dtype"), rules(version)).bytes_per_token
    out = {}
    if "load_end_avail_mem_gb" in observed and "load_begin_avail_mem_gb" in observed:
        # both printed (to 0.01 GiB): exact up to that rounding; a start rebuilt as end + usage is not
        found = tokens_from_logged_memory(begin, observed["load_end_avail_mem_gb"], mfs, cell, version, page, max_total)
        exact = logged in found
        out["tokens_from_logged_memory"] = {"observed": logged, "predicted": logged if exact else found.estimate,
                                            "interval": [found.low, found.high],
                                            "rel_err": 0.0 if exact else abs(found.estimate / logged - 1)}
    start = tokens_from_logged_memory(begin, begin - breakdown.weights_bytes / GIB, mfs, cell, version, page, max_total)
    out["tokens_from_logged_start"] = {"observed": logged, "predicted": start.estimate,
                                       "rel_err": abs(start.estimate / logged - 1)}
    return out
