"""vLLM's /metrics (v1/metrics/loggers.py PrometheusStatLogger): gauges vllm:num_requests_running / _waiting, the
pool's use as vllm:gpu_cache_usage_perc (0.9 and before; still printed, deprecated, 0.10-0.11) or
vllm:kv_cache_usage_perc (0.10+; the only one by 0.19), the counters vllm:request_success (prompt_tokens,
generation_tokens), the histograms vllm:request_prompt_tokens / request_generation_tokens (buckets 1-2-5 up to
max_model_len), and vllm:cache_config_info, a gauge of 1 whose labels are CacheConfig's fields
(config/cache.py metrics_info: every field as a string: block_size, num_gpu_blocks, gpu_memory_utilization,
cache_dtype, ...). Every sample has the labels model_name and engine (the engine core's index)."""
from __future__ import annotations

from ..live_metrics import LiveFigures

PREFIX = "vllm:"
# CacheConfig fields that are vLLM settings of the prediction (label -> setting); the rest describe the run
_SETTINGS = {"gpu_memory_utilization": ("gpu_memory_utilization", float), "block_size": ("block_size", int),
             "cache_dtype": ("kv_cache_dtype", str), "swap_space": ("swap_space", float),
             "cpu_offload_gb": ("cpu_offload_gb", float), "enable_prefix_caching": ("enable_prefix_caching", None)}


def read(samples) -> LiveFigures | None:
    from ...watch.prometheus_text import buckets, labels_of, largest, total

    if not any(s.name.startswith(PREFIX) for s in samples):
        return None
    usage_metric = "vllm:kv_cache_usage_perc" if largest(samples, "vllm:kv_cache_usage_perc") is not None \
        else "vllm:gpu_cache_usage_perc"
    info = labels_of(samples, "vllm:cache_config_info") or {}
    running = labels_of(samples, "vllm:num_requests_running") or {}
    blocks, block_size = _int(info.get("num_gpu_blocks")), _int(info.get("block_size"))
    notes = [] if info else ["no vllm:cache_config_info: the pool's size is not shown"]
    if usage_metric == "vllm:gpu_cache_usage_perc":
        # 0.10.0 added kv_cache_usage_perc beside it (both through 0.11.0); by 0.15.1 only kv_cache_usage_perc
        notes.append("vllm:gpu_cache_usage_perc without vllm:kv_cache_usage_perc: a release before 0.10")
    return LiveFigures(
        engine="vllm", usage=largest(samples, usage_metric), usage_metric=usage_metric,
        running=total(samples, "vllm:num_requests_running"), waiting=total(samples, "vllm:num_requests_waiting"),
        finished=total(samples, "vllm:request_success_total"),
        prompt_sum=total(samples, "vllm:request_prompt_tokens_sum"),
        prompt_count=total(samples, "vllm:request_prompt_tokens_count"),
        output_sum=total(samples, "vllm:request_generation_tokens_sum"),
        output_count=total(samples, "vllm:request_generation_tokens_count"),
        prompt_buckets=tuple(buckets(samples, "vllm:request_prompt_tokens")),
        output_buckets=tuple(buckets(samples, "vllm:request_generation_tokens")),
        pool_tokens=blocks * block_size if blocks and block_size else None, model=running.get("model_name"),
        settings=_settings(info), notes=tuple(notes))


def _int(text) -> int | None:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return None


def _settings(info: dict) -> dict:
    out = {}
    for label, (setting, kind) in _SETTINGS.items():
        raw = info.get(label)
        if raw in (None, "", "None"):
            continue
        if kind is None:
            out[setting] = raw == "True"
        else:
            try:
                out[setting] = kind(float(raw)) if kind is int else kind(raw)
            except ValueError:
                continue
    if out.get("kv_cache_dtype") == "auto":
        out.pop("kv_cache_dtype")
    return out
