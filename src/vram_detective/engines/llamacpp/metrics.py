"""llama-server's /metrics with --metrics (tools/server/server.cpp, written by hand: `# HELP llamacpp:NAME`,
`# TYPE`, `llamacpp:NAME VALUE`): counters prompt_tokens_total, tokens_predicted_total, n_decode_total, gauges
requests_processing, requests_deferred, prompt_tokens_seconds, predicted_tokens_seconds, n_busy_slots_per_decode;
builds before the KV-cache rework also printed kv_cache_usage_ratio and kv_cache_tokens. No request counter, so
no arrival rate or per-request lengths."""
from __future__ import annotations

from ..live_metrics import LiveFigures

PREFIX = "llamacpp:"


def read(samples) -> LiveFigures | None:
    from ...watch.prometheus_text import largest

    if not any(s.name.startswith(PREFIX) for s in samples):
        return None
    usage = largest(samples, "llamacpp:kv_cache_usage_ratio")
    notes = ["llama-server counts tokens, not requests: no arrival rate or lengths to simulate"]
    if usage is None:
        notes.insert(0, "this build exports no KV-cache usage (kv_cache_usage_ratio left with the KV-cache rework)")
    return LiveFigures(
        engine="llamacpp", usage=usage, usage_metric="llamacpp:kv_cache_usage_ratio",
        running=largest(samples, "llamacpp:requests_processing"), waiting=largest(samples, "llamacpp:requests_deferred"),
        finished=None, notes=tuple(notes))
