"""SGLang's /metrics with --enable-metrics (srt/observability/metrics_collector.py; srt/metrics/collector.py in
older releases): gauges sglang:token_usage (the pool's used fraction), sglang:num_running_reqs,
sglang:num_queue_reqs, sglang:num_used_tokens, sglang:max_total_num_tokens (the pool, emitted once at startup in
0.5.23), counters sglang:num_requests_total, sglang:prompt_tokens_total, sglang:generation_tokens_total and
(with bucket options) the histograms sglang:prompt_tokens_histogram / generation_tokens_histogram. Labels:
model_name (and tp_rank / pp_rank / dp_rank by setup)."""
from __future__ import annotations

from ..live_metrics import LiveFigures

PREFIX = "sglang:"


def read(samples) -> LiveFigures | None:
    from ...watch.prometheus_text import buckets, labels_of, largest, total

    if not any(s.name.startswith(PREFIX) for s in samples):
        return None
    requests = total(samples, "sglang:num_requests_total")
    pool = largest(samples, "sglang:max_total_num_tokens")
    labels = labels_of(samples, "sglang:token_usage") or labels_of(samples, "sglang:num_running_reqs") or {}
    return LiveFigures(
        engine="sglang", usage=largest(samples, "sglang:token_usage"), usage_metric="sglang:token_usage",
        running=total(samples, "sglang:num_running_reqs"), waiting=total(samples, "sglang:num_queue_reqs"),
        finished=requests, prompt_sum=total(samples, "sglang:prompt_tokens_total"), prompt_count=requests,
        output_sum=total(samples, "sglang:generation_tokens_total"), output_count=requests,
        prompt_buckets=tuple(buckets(samples, "sglang:prompt_tokens_histogram")),
        output_buckets=tuple(buckets(samples, "sglang:generation_tokens_histogram")),
        pool_tokens=int(pool) if pool else None, model=labels.get("model_name"),
        notes=() if pool else ("this release exports no sglang:max_total_num_tokens: the pool's size is not shown",))
